//! The effective configuration: defaults, overridden by `quiver.toml`, overridden by `QUIVER_*`
//! environment variables, overridden by command-line flags.
//!
//! Every key can be set at every level: in the file as `key = value`, in the environment as
//! `QUIVER_KEY` (upper case), on the command line through the flags `serve` defines. Unknown keys
//! in the file, unknown `QUIVER_*` variables (other than [`NON_SETTING_VARIABLES`]) and
//! malformed values anywhere are startup errors that name the key, the source and the nearest
//! known key.

use std::path::{Path, PathBuf};

use clap::Args;
use quiver_auth::AuthSettings;
use quiver_model::RequestLimits;
use quiver_query::QueryOptions;
use quiver_service::CacheConfig;
use quiver_storage::{StoreAccess, StoreLimits, StoreOptions};
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

/// Every setting of a Quiver server; `quiver config` prints this. The server's own settings
/// (listen addresses, logging) are here; every other setting is declared, documented and
/// defaulted once, in the options struct of the crate that uses it, whose serde names are the
/// keys (flat: `cache_ttl_secs`, not `[cache] ttl_secs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// HTTP API listen address.
    pub http_addr: String,
    /// Arrow Flight SQL listen address (gRPC).
    pub flight_addr: String,
    /// PostgreSQL wire protocol listen address.
    pub pg_addr: String,
    /// A DataFusion Ballista executor's (`role = executor`) own address, HOST:PORT: it serves
    /// its tasks' outputs (Arrow Flight) there and on the next port (gRPC), and tells the
    /// scheduler this host.
    pub executor_addr: String,
    /// PEM certificate chain (the server's certificate first) for TLS on all three protocols;
    /// empty: no TLS. Set with `tls_key_file`.
    pub tls_cert_file: PathBuf,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: PathBuf,
    /// Log filter in `tracing` syntax (`info`, `quiver=debug,info`, ...).
    pub log_filter: String,
    /// Log format.
    pub log_format: LogFormat,
    /// What this server is.
    pub role: Role,
    /// The data directory, the WAL and persistence.
    #[serde(flatten)]
    pub store: StoreOptions,
    /// How many databases, tables and columns writes may create.
    #[serde(flatten)]
    pub limits: StoreLimits,
    /// Bounds on one request, on every protocol.
    #[serde(flatten)]
    pub requests: RequestLimits,
    /// The SQL engine.
    #[serde(flatten)]
    pub query: QueryOptions,
    /// The result cache.
    #[serde(flatten)]
    pub cache: CacheConfig,
    /// Who may connect without a token, and rate limits.
    #[serde(flatten)]
    pub auth: AuthSettings,
}

/// How log lines are written to standard error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            http_addr: "127.0.0.1:8086".into(),
            flight_addr: "127.0.0.1:8815".into(),
            pg_addr: "127.0.0.1:5433".into(),
            executor_addr: "127.0.0.1:50051".into(),
            tls_cert_file: PathBuf::new(),
            tls_key_file: PathBuf::new(),
            log_filter: "info".into(),
            log_format: LogFormat::Text,
            role: Role::All,
            store: StoreOptions::default(),
            limits: StoreLimits::default(),
            requests: RequestLimits::default(),
            query: QueryOptions::default(),
            cache: CacheConfig::default(),
            auth: AuthSettings::default(),
        }
    }
}

/// What a server does: the `role` setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Writes (WAL, persistence, compaction, retention) and queries: the one writer.
    #[default]
    All,
    /// Queries only, over the writer's `object_store_url`: no WAL; follows the writer's
    /// catalog.
    Query,
    /// DataFusion Ballista's scheduler of distributed queries (it opens no store).
    Scheduler,
    /// A DataFusion Ballista executor: runs distributed queries' tasks over the writer's
    /// `object_store_url` (it opens no store: it reads the files the tasks name).
    Executor,
}

impl Role {
    /// The role's name, as the `role` setting spells it.
    pub fn name(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Query => "query",
            Role::Scheduler => "scheduler",
            Role::Executor => "executor",
        }
    }

    /// How a server of this role opens its store (`None`: it opens none).
    pub fn store_access(self) -> Option<StoreAccess> {
        match self {
            Role::All => Some(StoreAccess::Writer),
            Role::Query => Some(StoreAccess::Follower),
            Role::Scheduler | Role::Executor => None,
        }
    }
}

/// The `QUIVER_*` environment variables that are not settings: the configuration file's path
/// and the token the client commands present. Any other `QUIVER_*` variable must name a key.
pub const NON_SETTING_VARIABLES: &[&str] = &["QUIVER_CONFIG", "QUIVER_TOKEN"];

/// A configuration that could not be loaded; the message names the key and where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The settings `serve` and `config` take as command-line flags (`None`: not given). A flag is
/// declared here once: its field name is the configuration key it overrides.
#[derive(Debug, Default, Clone, Args, Serialize)]
pub struct FlagOverrides {
    /// Data directory.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Where the catalog and Parquet files live: file:///DIR or s3://BUCKET/PREFIX (shared
    /// with query nodes); empty: the data directory.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_store_url: Option<String>,
    /// all (the writer, which also queries), query (a query node over object_store_url),
    /// scheduler or executor (DataFusion Ballista's, for distributed queries).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Where the Ballista scheduler listens (and is found), HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_addr: Option<String>,
    /// A Ballista executor's own address, HOST:PORT (it also takes the next port).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_addr: Option<String>,
    /// Where queries run: off, auto or on (Ballista).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<String>,
    /// HTTP listen address, HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_addr: Option<String>,
    /// Arrow Flight SQL listen address, HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flight_addr: Option<String>,
    /// PostgreSQL wire listen address, HOST:PORT.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pg_addr: Option<String>,
    /// PEM certificate chain for TLS on HTTP, Flight SQL and PostgreSQL.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// Serve repeated queries from the result cache (true or false).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_enabled: Option<bool>,
    /// Bytes the result cache may hold.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_capacity_bytes: Option<u64>,
    /// Largest cached answer in bytes.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_max_entry_bytes: Option<u64>,
    /// Seconds a cached answer lives after it was computed.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_ttl_secs: Option<u64>,
    /// Bytes one running query may hold in sorts, joins and aggregations before spilling.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_memory_bytes: Option<usize>,
    /// The process's memory ceiling in bytes.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_server_memory_bytes: Option<usize>,
    /// The most bytes one function call may produce.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_value_bytes: Option<usize>,
    /// Seconds a query may run (0: no limit).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_timeout_secs: Option<u64>,
    /// Seconds a query may wait for its client to read on (0: no limit).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_stall_timeout_secs: Option<u64>,
    /// Queries that run at once (0: twice the cores, at least 4).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_queries: Option<usize>,
    /// Queries that may wait for a slot.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued_queries: Option<usize>,
    /// The longest statement accepted, in bytes.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sql_bytes: Option<usize>,
    /// How deeply a statement may nest (chained operators, set operations, subqueries).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sql_depth: Option<usize>,
    /// Who may connect without a token: loopback, required or disabled.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// Requests per second one token may make (0: no limit).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit_requests_per_sec: Option<u64>,
    /// Bytes per second one token may write (0: no limit).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit_write_bytes_per_sec: Option<u64>,
}

impl Config {
    /// Loads the effective configuration from `file` (if any), the environment and `flags`.
    ///
    /// Without `--config`, `./quiver.toml` is read if it exists (or the file named by
    /// `QUIVER_CONFIG`).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &FlagOverrides,
    ) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let defaults = Table::try_from(Config::default()).expect("defaults serialize");
        let mut merged = defaults.clone();

        let file = file.map(Path::to_path_buf).or_else(|| {
            env.iter()
                .find(|(k, _)| k == "QUIVER_CONFIG")
                .map(|(_, v)| PathBuf::from(v))
                .or_else(|| Some(PathBuf::from("quiver.toml")).filter(|p| p.exists()))
        });
        if let Some(path) = &file {
            let source = format!("config file {}", path.display());
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read {source}: {e}")))?;
            let table: Table = toml::from_str(&text)
                .map_err(|e| ConfigError(format!("{source} is not valid TOML: {e}")))?;
            for (key, value) in table {
                if !defaults.contains_key(&key) {
                    return Err(ConfigError(format!(
                        "unknown key {key:?} in {source}{}",
                        suggestion(&key, defaults.keys().map(String::as_str))
                    )));
                }
                set(&mut merged, &defaults, key, value, &source)?;
            }
        }
        for (name, raw) in &env {
            let Some(key) = name.strip_prefix("QUIVER_") else {
                continue;
            };
            if NON_SETTING_VARIABLES.contains(&name.as_str()) {
                continue;
            }
            let key = key.to_ascii_lowercase();
            let Some(default) = defaults.get(&key) else {
                return Err(unknown_variable(name, &defaults));
            };
            let source = format!("environment variable {name}");
            let value = typed_like(default, raw, &source)?;
            set(&mut merged, &defaults, key, value, &source)?;
        }
        let flags = Table::try_from(flags).expect("flags serialize");
        for (key, value) in flags {
            let source = format!("flag --{}", key.replace('_', "-"));
            set(&mut merged, &defaults, key, value, &source)?;
        }
        let config: Config = Value::Table(merged)
            .try_into()
            .map_err(|e| ConfigError(format!("invalid configuration: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for (key, addr) in [
            ("http_addr", &self.http_addr),
            ("flight_addr", &self.flight_addr),
            ("pg_addr", &self.pg_addr),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError(format!(
                    "{key} {addr:?} is not a HOST:PORT socket address (e.g. 127.0.0.1:8086)"
                )));
            }
        }
        if self.tls_cert_file.as_os_str().is_empty() != self.tls_key_file.as_os_str().is_empty() {
            return Err(ConfigError(
                "tls_cert_file and tls_key_file go together: set both (TLS on every protocol) or neither".into(),
            ));
        }
        self.store.persist.validate().map_err(ConfigError)?;
        self.store.compaction.validate().map_err(ConfigError)?;
        self.cache.validate().map_err(ConfigError)?;
        self.requests.validate().map_err(ConfigError)?;
        self.query.validate().map_err(ConfigError)?;
        Ok(())
    }

    /// The configuration as TOML, as `quiver config` prints it.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serializes")
    }
}

/// Sets `key` to `value` in `merged`, once it is known to be a valid value for that key alone
/// (so a wrong type or an unknown choice is reported with its key and `source`).
fn set(
    merged: &mut Table,
    defaults: &Table,
    key: String,
    value: Value,
    source: &str,
) -> Result<(), ConfigError> {
    let mut probe = defaults.clone();
    probe.insert(key.clone(), value.clone());
    if let Err(e) = Value::Table(probe).try_into::<Config>() {
        // toml spreads its messages over lines; one line reads better in a log
        let reason = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        return Err(ConfigError(format!(
            "{key} = {value} from {source} is invalid: {reason}"
        )));
    }
    merged.insert(key, value);
    Ok(())
}

/// The error for a `QUIVER_*` variable that is neither a setting nor one of
/// [`NON_SETTING_VARIABLES`] (a typo such as `QUIVER_HTTP_ADR` must not pass unnoticed).
fn unknown_variable(name: &str, defaults: &Table) -> ConfigError {
    let known = defaults
        .keys()
        .map(|key| format!("QUIVER_{}", key.to_ascii_uppercase()))
        .chain(NON_SETTING_VARIABLES.iter().map(|v| v.to_string()))
        .collect::<Vec<_>>();
    ConfigError(format!(
        "unknown environment variable {name}: no setting is called {:?}{}",
        name["QUIVER_".len()..].to_ascii_lowercase(),
        suggestion(name, known.iter().map(String::as_str))
    ))
}

/// "; did you mean X?" for the known name nearest to `unknown`, if one is near enough to be a
/// likely typo (an edit distance of at most a third of its length), else nothing.
fn suggestion<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> String {
    let limit = unknown.len().div_ceil(3).max(2);
    known
        .map(|candidate| (strsim::levenshtein(unknown, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min()
        .map(|(_, nearest)| format!("; did you mean {nearest}?"))
        .unwrap_or_default()
}

/// Parses `raw` into a TOML value of the same type as `like`.
fn typed_like(like: &Value, raw: &str, source: &str) -> Result<Value, ConfigError> {
    let bad = |what: &str| ConfigError(format!("{source} = {raw:?} is not a valid {what}"));
    Ok(match like {
        Value::Integer(_) => Value::Integer(raw.trim().parse().map_err(|_| bad("integer"))?),
        Value::Boolean(_) => Value::Boolean(raw.trim().parse().map_err(|_| bad("boolean"))?),
        Value::Float(_) => Value::Float(raw.trim().parse().map_err(|_| bad("number"))?),
        _ => Value::String(raw.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn precedence_is_file_then_env_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.toml");
        std::fs::write(
            &path,
            "http_addr = \"127.0.0.1:1000\"\nmax_request_bytes = 5\ndata_dir = \"/a\"\n",
        )
        .unwrap();
        let config = Config::load(
            Some(&path),
            env(&[
                ("QUIVER_MAX_REQUEST_BYTES", "7"),
                ("QUIVER_DATA_DIR", "/b"),
                ("OTHER", "x"),
            ]),
            &FlagOverrides {
                data_dir: Some("/c".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(config.http_addr, "127.0.0.1:1000");
        assert_eq!(config.requests.max_request_bytes, 7);
        assert_eq!(config.store.data_dir, PathBuf::from("/c"));
        assert_eq!(config.pg_addr, "127.0.0.1:5433");
    }

    #[test]
    fn an_unknown_quiver_variable_is_an_error_naming_the_nearest_key() {
        let load = |pairs: &[(&str, &str)]| {
            Config::load(None, env(pairs), &FlagOverrides::default()).map(|_| ())
        };
        let err = load(&[("QUIVER_HTTP_ADR", "127.0.0.1:9")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown environment variable QUIVER_HTTP_ADR: no setting is called \"http_adr\"; \
             did you mean QUIVER_HTTP_ADDR?"
        );
        // far from every key: named, with no guess
        let err = load(&[("QUIVER_SOMETHING_ELSE_ENTIRELY", "1")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown environment variable QUIVER_SOMETHING_ELSE_ENTIRELY: no setting is called \
             \"something_else_entirely\""
        );
        // the variables that are not settings, and variables of other programs, pass
        load(&[
            ("QUIVER_TOKEN", "secret"),
            ("QUIVER", "x"),
            ("HTTP_ADR", "y"),
            ("QUIVERX_HTTP_ADDR", "z"),
        ])
        .unwrap();
        let err = load(&[("QUIVER_TOKENS", "secret")]).unwrap_err();
        assert!(
            err.to_string().ends_with("did you mean QUIVER_TOKEN?"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_key_and_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.toml");
        std::fs::write(&path, "htp_addr = \"x\"\n").unwrap();
        let err = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown key \"htp_addr\" in config file")
                && err.to_string().ends_with("did you mean http_addr?"),
            "{err}"
        );
        let err = Config::load(
            None,
            env(&[("QUIVER_MAX_REQUEST_BYTES", "lots")]),
            &FlagOverrides::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("QUIVER_MAX_REQUEST_BYTES"),
            "{err}"
        );
        let err = Config::load(
            None,
            env(&[]),
            &FlagOverrides {
                http_addr: Some("nowhere".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("http_addr"), "{err}");
        for (variable, value, message) in [
            (
                "QUIVER_MAX_SQL_BYTES",
                "0",
                "max_sql_bytes must be between 1 and 4194304",
            ),
            (
                "QUIVER_MAX_SQL_BYTES",
                "4194305",
                "max_sql_bytes must be between 1",
            ),
            (
                "QUIVER_MAX_SQL_DEPTH",
                "0",
                "max_sql_depth must be between 1 and 1000",
            ),
            (
                "QUIVER_MAX_SQL_DEPTH",
                "1001",
                "max_sql_depth must be between 1",
            ),
        ] {
            let err = Config::load(None, env(&[(variable, value)]), &FlagOverrides::default())
                .unwrap_err();
            assert!(err.to_string().contains(message), "{err}");
        }
    }

    #[test]
    fn printed_config_round_trips() {
        let mut config = Config {
            log_format: LogFormat::Json,
            ..Config::default()
        };
        config.store.wal.recovery = quiver_storage::Recovery::Truncate;
        config.cache.clock_granularity = Some(std::time::Duration::from_secs(5));
        config.store.persist.partition = std::time::Duration::from_secs(6 * 3600);
        let printed = config.to_toml();
        let parsed: Config = toml::from_str(&printed).unwrap();
        assert_eq!(parsed.to_toml(), printed);
        assert_eq!(parsed.cache, config.cache);
        assert_eq!(parsed.store, config.store);
        assert!(printed.contains("log_format = \"json\""), "{printed}");
        assert!(printed.contains("wal_recovery = \"truncate\""), "{printed}");
        assert!(printed.contains("partition_hours = 6\n"), "{printed}");
        assert!(
            printed.contains("cache_clock_granularity_secs = 5\n"),
            "{printed}"
        );
    }

    #[test]
    fn keys_are_the_documented_ones() {
        let printed = Config::default().to_toml();
        let table: Table = toml::from_str(&printed).unwrap();
        let mut keys: Vec<&str> = table.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut expected = vec![
            "data_dir",
            "http_addr",
            "flight_addr",
            "pg_addr",
            "executor_addr",
            "tls_cert_file",
            "tls_key_file",
            "log_filter",
            "log_format",
            "max_request_bytes",
            "max_reported_line_errors",
            "max_databases",
            "max_tables_per_database",
            "max_columns_per_table",
            "query_partitions",
            "query_memory_bytes",
            "max_server_memory_bytes",
            "max_value_bytes",
            "query_timeout_secs",
            "query_stall_timeout_secs",
            "max_concurrent_queries",
            "max_queued_queries",
            "max_sql_bytes",
            "max_sql_depth",
            "distributed",
            "distributed_min_scan_bytes",
            "distributed_partitions",
            "scheduler_addr",
            "object_store_url",
            "role",
            "wal_fsync",
            "wal_segment_bytes",
            "wal_recovery",
            "persist_buffer_bytes",
            "persist_max_age_secs",
            "max_buffer_bytes",
            "max_buffer_wait_secs",
            "partition_hours",
            "parquet_row_group_rows",
            "persist_threads",
            "parquet_bloom_filters",
            "parquet_zstd_level",
            "background_niceness",
            "chunk_cache_bytes",
            "retention_period",
            "compaction_enabled",
            "compaction_target_file_bytes",
            "compaction_fanout",
            "compaction_idle_secs",
            "compaction_max_small_files",
            "compaction_max_merge_bytes",
            "cache_enabled",
            "cache_capacity_bytes",
            "cache_max_entry_bytes",
            "cache_ttl_secs",
            "cache_idle_secs",
            "cache_clock_granularity_secs",
            "cache_reuse_parts",
            "auth",
            "rate_limit_requests_per_sec",
            "rate_limit_write_bytes_per_sec",
            "max_failed_auth_per_minute",
        ];
        expected.sort_unstable();
        assert_eq!(keys, expected);
    }

    #[test]
    fn values_out_of_range_are_errors_naming_their_key() {
        for (name, value, key) in [
            ("QUIVER_PARTITION_HOURS", "0", "partition_hours"),
            (
                "QUIVER_PARQUET_ROW_GROUP_ROWS",
                "0",
                "parquet_row_group_rows",
            ),
            ("QUIVER_PERSIST_BUFFER_BYTES", "0", "persist_buffer_bytes"),
            ("QUIVER_COMPACTION_FANOUT", "1", "compaction_fanout"),
            (
                "QUIVER_COMPACTION_MAX_SMALL_FILES",
                "1",
                "compaction_max_small_files",
            ),
            (
                "QUIVER_COMPACTION_MAX_MERGE_BYTES",
                "1000",
                "compaction_max_merge_bytes",
            ),
        ] {
            let err = Config::load(None, env(&[(name, value)]), &FlagOverrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{name}={value}: {err}");
        }
    }

    #[test]
    fn choices_and_types_are_checked_per_key() {
        for (name, value, needle) in [
            ("QUIVER_LOG_FORMAT", "xml", "log_format"),
            ("QUIVER_WAL_RECOVERY", "maybe", "wal_recovery"),
            ("QUIVER_RETENTION_PERIOD", "a month", "retention_period"),
            ("QUIVER_CACHE_TTL_SECS", "-5", "cache_ttl_secs"),
            ("QUIVER_WAL_FSYNC", "yes", "QUIVER_WAL_FSYNC"),
        ] {
            let err = Config::load(None, env(&[(name, value)]), &FlagOverrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{name}={value}: {err}");
            assert!(err.contains(name), "{name}={value}: {err}");
        }
        let config = Config::load(
            None,
            env(&[
                ("QUIVER_WAL_RECOVERY", "truncate"),
                ("QUIVER_LOG_FORMAT", "json"),
            ]),
            &FlagOverrides::default(),
        )
        .unwrap();
        assert_eq!(
            config.store.wal.recovery,
            quiver_storage::Recovery::Truncate
        );
        assert_eq!(config.log_format, LogFormat::Json);
    }

    #[test]
    fn flags_override_by_their_key() {
        let config = Config::load(
            None,
            env(&[("QUIVER_CACHE_TTL_SECS", "5")]),
            &FlagOverrides {
                cache_ttl_secs: Some(9),
                cache_enabled: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(config.cache.ttl, std::time::Duration::from_secs(9));
        assert!(!config.cache.enabled);
    }

    #[test]
    fn tls_needs_both_files() {
        let only_cert = Config::load(
            None,
            env(&[("QUIVER_TLS_CERT_FILE", "/etc/quiver/cert.pem")]),
            &FlagOverrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            only_cert.contains("tls_cert_file and tls_key_file go together"),
            "{only_cert}"
        );
        let both = Config::load(
            None,
            env(&[("QUIVER_TLS_CERT_FILE", "cert.pem")]),
            &FlagOverrides {
                tls_key_file: Some("key.pem".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(both.tls_cert_file, PathBuf::from("cert.pem"));
        assert_eq!(both.tls_key_file, PathBuf::from("key.pem"));
        assert!(Config::default().tls_cert_file.as_os_str().is_empty());
    }
}

//! The effective configuration: defaults, overridden by `quiver.toml`, overridden by `QUIVER_*`
//! environment variables, overridden by command-line flags.
//!
//! Every key can be set at every level: in the file as `key = value`, in the environment as
//! `QUIVER_KEY` (upper case), on the command line through the flags `serve` defines. Unknown keys
//! in the file and malformed values anywhere are startup errors that name the key and the source.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

/// Every setting of a Quiver server. `quiver config` prints this.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory for the server's data.
    pub data_dir: PathBuf,
    /// HTTP API listen address.
    pub http_addr: String,
    /// Arrow Flight SQL listen address (gRPC).
    pub flight_addr: String,
    /// PostgreSQL wire protocol listen address.
    pub pg_addr: String,
    /// Log filter in `tracing` syntax (`info`, `quiver=debug,info`, ...).
    pub log_filter: String,
    /// Log format: `text` or `json`.
    pub log_format: String,
    /// Largest accepted request body in bytes, before and after decompression (413 beyond).
    pub max_request_bytes: usize,
    /// Most rejected lines a write response lists (all are counted).
    pub max_reported_line_errors: usize,
    /// Most databases the server holds.
    pub max_databases: usize,
    /// Most tables per database.
    pub max_tables_per_database: usize,
    /// Most columns per table (time, tags and fields together).
    pub max_columns_per_table: usize,
    /// Parallelism of one query; 0 means the number of CPU cores.
    pub query_partitions: usize,
    /// Memory in bytes that running queries together may use for sorts, joins and aggregates.
    pub query_memory_bytes: usize,
    /// Fsync the WAL before acknowledging a write (group commit). `false` acknowledges writes
    /// the operating system may still lose on a power cut: for throwaway data only.
    pub wal_fsync: bool,
    /// A new WAL segment file is started once the current one reaches this size.
    pub wal_segment_bytes: u64,
    /// Corruption in the middle of the WAL at startup: `strict` refuses to start (naming the
    /// file and offset), `truncate` drops the corrupt record and everything after it.
    pub wal_recovery: String,
    /// The write buffer is persisted to Parquet once it holds this many bytes of Arrow data.
    pub persist_buffer_bytes: usize,
    /// The buffer is persisted once its oldest write is this many seconds old.
    pub persist_max_age_secs: u64,
    /// Writes wait for persistence once the buffer holds this many bytes (and fail with 503 if
    /// persisting is failing): the bound on buffer memory.
    pub max_buffer_bytes: usize,
    /// Length of a Parquet time partition in hours (24: one directory per day).
    pub partition_hours: u64,
    /// Rows per Parquet row group.
    pub parquet_row_group_rows: usize,
    /// Serve repeated queries from the result cache.
    pub cache_enabled: bool,
    /// Bytes the result cache may hold (default: 1/16 of physical memory, 64 MiB–8 GiB).
    pub cache_capacity_bytes: u64,
    /// Largest cached answer in bytes (batches plus encodings); bigger answers stream uncached.
    pub cache_max_entry_bytes: u64,
    /// A cached answer is dropped this many seconds after it was computed.
    pub cache_ttl_secs: u64,
    /// A cached answer is dropped after this many seconds without a hit.
    pub cache_idle_secs: u64,
    /// 0: queries reading the clock (`now()`, `current_date`) bypass the cache. N > 0: they run
    /// with the clock rounded down to N seconds and are cached per rounded instant, so their
    /// answers may lag the wall clock by up to N seconds (never the data).
    pub cache_clock_granularity_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./quiver-data"),
            http_addr: "127.0.0.1:8086".into(),
            flight_addr: "127.0.0.1:8815".into(),
            pg_addr: "127.0.0.1:5433".into(),
            log_filter: "info".into(),
            log_format: "text".into(),
            max_request_bytes: 64 << 20,
            max_reported_line_errors: 100,
            max_databases: 1_000,
            max_tables_per_database: 10_000,
            max_columns_per_table: 1_000,
            query_partitions: 0,
            query_memory_bytes: 4 << 30,
            wal_fsync: true,
            wal_segment_bytes: 64 << 20,
            wal_recovery: "strict".into(),
            persist_buffer_bytes: 256 << 20,
            persist_max_age_secs: 600,
            max_buffer_bytes: 512 << 20,
            partition_hours: 24,
            parquet_row_group_rows: 128 * 1024,
            cache_enabled: true,
            cache_capacity_bytes: default_cache_capacity(),
            cache_max_entry_bytes: 64 << 20,
            cache_ttl_secs: 3600,
            cache_idle_secs: 600,
            cache_clock_granularity_secs: 0,
        }
    }
}

/// 1/16 of physical memory, between 64 MiB and 8 GiB (1 GiB if memory cannot be read).
fn default_cache_capacity() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    total.map_or(1 << 30, |bytes| (bytes / 16).clamp(64 << 20, 8 << 30))
}

/// A configuration that could not be loaded; the message names the key and where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// Settings given as command-line flags (`None`: not given).
#[derive(Debug, Default, Clone)]
pub struct FlagOverrides {
    /// `--data-dir`
    pub data_dir: Option<PathBuf>,
    /// `--http-addr`
    pub http_addr: Option<String>,
    /// `--flight-addr`
    pub flight_addr: Option<String>,
    /// `--pg-addr`
    pub pg_addr: Option<String>,
    /// `--cache-enabled`
    pub cache_enabled: Option<bool>,
    /// `--cache-capacity-bytes`
    pub cache_capacity_bytes: Option<u64>,
    /// `--cache-max-entry-bytes`
    pub cache_max_entry_bytes: Option<u64>,
    /// `--cache-ttl-secs`
    pub cache_ttl_secs: Option<u64>,
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
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError(format!("cannot read config file {}: {e}", path.display()))
            })?;
            let table: Table = toml::from_str(&text).map_err(|e| {
                ConfigError(format!(
                    "config file {} is not valid TOML: {e}",
                    path.display()
                ))
            })?;
            for (key, value) in table {
                if !defaults.contains_key(&key) {
                    return Err(ConfigError(format!(
                        "unknown key {key:?} in config file {}",
                        path.display()
                    )));
                }
                merged.insert(key, value);
            }
        }
        for (name, raw) in &env {
            let Some(key) = name.strip_prefix("QUIVER_") else {
                continue;
            };
            let key = key.to_ascii_lowercase();
            if key == "config" {
                continue;
            }
            let Some(default) = defaults.get(&key) else {
                // Not a setting (e.g. a variable for tests); ignore rather than fail.
                continue;
            };
            merged.insert(
                key.clone(),
                typed_like(default, raw, &format!("environment variable {name}"))?,
            );
        }
        let text = |v: &Option<String>| v.clone().map(Value::String);
        let integer = |v: Option<u64>| v.map(|n| Value::Integer(n.try_into().unwrap_or(i64::MAX)));
        let flag_values = [
            (
                "data_dir",
                flags
                    .data_dir
                    .as_ref()
                    .map(|p| Value::String(p.display().to_string())),
            ),
            ("http_addr", text(&flags.http_addr)),
            ("flight_addr", text(&flags.flight_addr)),
            ("pg_addr", text(&flags.pg_addr)),
            ("cache_enabled", flags.cache_enabled.map(Value::Boolean)),
            ("cache_capacity_bytes", integer(flags.cache_capacity_bytes)),
            (
                "cache_max_entry_bytes",
                integer(flags.cache_max_entry_bytes),
            ),
            ("cache_ttl_secs", integer(flags.cache_ttl_secs)),
        ];
        for (key, value) in flag_values {
            if let Some(value) = value {
                merged.insert(key.to_string(), value);
            }
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
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(ConfigError(format!(
                "log_format {:?} must be \"text\" or \"json\"",
                self.log_format
            )));
        }
        if !matches!(self.wal_recovery.as_str(), "strict" | "truncate") {
            return Err(ConfigError(format!(
                "wal_recovery {:?} must be \"strict\" or \"truncate\"",
                self.wal_recovery
            )));
        }
        self.persist_options().validate().map_err(ConfigError)?;
        self.cache_config().validate().map_err(ConfigError)?;
        if self.max_request_bytes == 0 {
            return Err(ConfigError(
                "max_request_bytes must be greater than 0".into(),
            ));
        }
        Ok(())
    }

    /// When and how the write buffer is persisted to Parquet.
    pub fn persist_options(&self) -> quiver_storage::PersistOptions {
        quiver_storage::PersistOptions {
            persist_bytes: self.persist_buffer_bytes,
            max_buffer_bytes: self.max_buffer_bytes,
            max_age: std::time::Duration::from_secs(self.persist_max_age_secs),
            partition: std::time::Duration::from_secs(self.partition_hours.saturating_mul(3600)),
            row_group_rows: self.parquet_row_group_rows,
        }
    }

    /// The result cache's settings.
    pub fn cache_config(&self) -> quiver_cache::CacheConfig {
        use std::time::Duration;
        quiver_cache::CacheConfig {
            enabled: self.cache_enabled,
            capacity_bytes: self.cache_capacity_bytes,
            max_entry_bytes: self.cache_max_entry_bytes,
            ttl: Duration::from_secs(self.cache_ttl_secs),
            idle: Duration::from_secs(self.cache_idle_secs),
            clock_granularity: (self.cache_clock_granularity_secs > 0)
                .then(|| Duration::from_secs(self.cache_clock_granularity_secs)),
        }
    }

    /// The configuration as TOML, as `quiver config` prints it.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serializes")
    }
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
        assert_eq!(config.max_request_bytes, 7);
        assert_eq!(config.data_dir, PathBuf::from("/c"));
        assert_eq!(config.pg_addr, "127.0.0.1:5433");
    }

    #[test]
    fn errors_name_the_key_and_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.toml");
        std::fs::write(&path, "htp_addr = \"x\"\n").unwrap();
        let err = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("unknown key \"htp_addr\""),
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
    }

    #[test]
    fn printed_config_round_trips() {
        let config = Config::default();
        let parsed: Config = toml::from_str(&config.to_toml()).unwrap();
        assert_eq!(parsed, config);
    }
}

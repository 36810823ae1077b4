//! Session settings as PostgreSQL clients see them: the parameters reported at startup
//! (`ParameterStatus`), `SET` / `RESET` and `SHOW`.
//!
//! Quiver sessions are fixed in the ways that change answers: UTF-8, ISO dates, UTC (timestamps
//! are sent with their `+00` offset, so every client reads the right instant). `SET` of one of
//! those to anything else is refused with a clear error rather than silently ignored; other
//! settings (`application_name`, `extra_float_digits`, `statement_timeout`, ...) are stored per
//! session and shown back by `SHOW`, and do not change query results.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use parking_lot::Mutex;
use pgwire::api::auth::{DefaultServerParameterProvider, ServerParameterProvider};
use pgwire::api::{ClientInfo, METADATA_APPLICATION_NAME, METADATA_DATABASE, METADATA_USER};
use pgwire::error::PgWireResult;
use quiver_query::Distributed;

use super::errors::{error, sqlstate};

/// The PostgreSQL version Quiver speaks as (what `server_version` reports; libpq, psql and
/// drivers choose their catalog queries by it).
pub(super) const SERVER_VERSION: &str = concat!("15.6 (Quiver ", env!("CARGO_PKG_VERSION"), ")");
/// [`SERVER_VERSION`] as `server_version_num`.
pub(super) const SERVER_VERSION_NUM: &str = "150006";

/// The connection's database (its `dbname`; PostgreSQL defaults it to the user name).
pub(super) fn database_of<C: ClientInfo + ?Sized>(client: &C) -> String {
    let metadata = client.metadata();
    metadata
        .get(METADATA_DATABASE)
        .or_else(|| metadata.get(METADATA_USER))
        .cloned()
        .unwrap_or_default()
}

/// The connection's user name.
pub(super) fn user_of<C: ClientInfo + ?Sized>(client: &C) -> String {
    client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .unwrap_or_default()
}

/// Every setting `SHOW` knows, with its canonical name and value for a session of `user` in
/// `database` (names are case-insensitive).
fn defaults(database: &str, user: &str, application: &str) -> Vec<(&'static str, String)> {
    let fixed = [
        ("server_version", SERVER_VERSION),
        ("server_version_num", SERVER_VERSION_NUM),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, YMD"),
        ("IntervalStyle", "postgres"),
        ("TimeZone", "UTC"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("default_transaction_read_only", "on"),
        ("transaction_read_only", "on"),
        ("default_transaction_isolation", "read committed"),
        ("transaction_isolation", "read committed"),
        ("in_hot_standby", "off"),
        ("is_superuser", "off"),
        ("max_identifier_length", "63"),
        ("lc_collate", "C"),
        ("lc_ctype", "C"),
        ("extra_float_digits", "1"),
        ("bytea_output", "hex"),
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
        (USE_ROLLUPS, "on"),
    ];
    let mut all: Vec<(&'static str, String)> = fixed
        .into_iter()
        .map(|(name, value)| (name, value.to_string()))
        .collect();
    all.push(("search_path", database.to_string()));
    all.push(("session_authorization", user.to_string()));
    all.push(("application_name", application.to_string()));
    all
}

/// The parameters sent at startup: what PostgreSQL 15 sends, with Quiver's values.
pub(super) struct QuiverParameters;

impl ServerParameterProvider for QuiverParameters {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        const REPORTED: &[&str] = &[
            "server_version",
            "server_encoding",
            "client_encoding",
            "DateStyle",
            "IntervalStyle",
            "TimeZone",
            "integer_datetimes",
            "standard_conforming_strings",
            "default_transaction_read_only",
            "in_hot_standby",
            "is_superuser",
            "session_authorization",
            "application_name",
            "search_path",
        ];
        let mut parameters = DefaultServerParameterProvider::default()
            .server_parameters(client)
            .unwrap_or_default();
        let application = client
            .metadata()
            .get(METADATA_APPLICATION_NAME)
            .cloned()
            .unwrap_or_default();
        for (name, value) in defaults(&database_of(client), &user_of(client), &application) {
            if REPORTED.contains(&name) {
                parameters.insert(name.to_string(), value);
            }
        }
        Some(parameters)
    }
}

/// The settings a session changed with `SET` (lower-case names), kept in its extensions.
#[derive(Default)]
pub(super) struct SessionSettings(Mutex<BTreeMap<String, String>>);

impl SessionSettings {
    /// `SET name = value` (`None`: `TO DEFAULT`). Settings that would change answers accept
    /// only the values Quiver uses.
    pub(super) fn set(&self, name: &str, value: Option<String>) -> PgWireResult<()> {
        let key = name.to_ascii_lowercase();
        let Some(value) = value else {
            self.0.lock().remove(&key);
            return Ok(());
        };
        check_fixed(&key, &value)?;
        if key == "statement_timeout" {
            parse_timeout(&value)?;
        }
        if key == USE_ROLLUPS {
            parse_switch(USE_ROLLUPS, &value)?;
        }
        if key == DISTRIBUTED {
            parse_distributed(&value)?;
        }
        self.0.lock().insert(key, value);
        Ok(())
    }

    /// False if the session turned routing to rollups off (`SET quiver.use_rollups = off`).
    pub(super) fn use_rollups(&self) -> bool {
        let value = self.0.lock().get(USE_ROLLUPS).cloned();
        value.is_none_or(|v| parse_switch(USE_ROLLUPS, &v).unwrap_or(true))
    }

    /// Where the session's queries run, if it set it (`SET quiver.distributed = auto`).
    pub(super) fn distributed(&self) -> Option<Distributed> {
        let value = self.0.lock().get(DISTRIBUTED).cloned()?;
        parse_distributed(&value).ok()
    }

    /// The session's `statement_timeout`, if it set one (0 is none).
    pub(super) fn statement_timeout(&self) -> Option<Duration> {
        let value = self.0.lock().get("statement_timeout").cloned()?;
        parse_timeout(&value).ok().flatten()
    }

    /// `RESET name`, or `RESET ALL` for `None`.
    pub(super) fn reset(&self, name: Option<&str>) {
        match name {
            Some(name) => {
                self.0.lock().remove(&name.to_ascii_lowercase());
            }
            None => self.0.lock().clear(),
        }
    }

    /// The value `SHOW name` answers with its canonical name, for `client`'s session;
    /// `42704` for a parameter PostgreSQL clients cannot expect.
    pub(super) fn show<C: ClientInfo + ?Sized>(
        &self,
        client: &C,
        name: &str,
    ) -> PgWireResult<(String, String)> {
        let key = name.to_ascii_lowercase();
        // the parser hands a dotted name (`quiver.use_rollups`) over as words, like `time zone`
        let dotted = key.replace(' ', ".");
        let all = self.all(client);
        all.into_iter()
            .find(|(canonical, _)| {
                let canonical = canonical.to_ascii_lowercase();
                canonical == key || canonical == dotted
            })
            .ok_or_else(|| {
                error(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("unrecognized configuration parameter \"{name}\""),
                )
            })
    }

    /// Every setting with its current value (`SHOW ALL`), sorted by name.
    pub(super) fn all<C: ClientInfo + ?Sized>(&self, client: &C) -> Vec<(String, String)> {
        let application = client
            .metadata()
            .get(METADATA_APPLICATION_NAME)
            .cloned()
            .unwrap_or_default();
        let changed = self.0.lock();
        let mut all: Vec<(String, String)> =
            defaults(&database_of(client), &user_of(client), &application)
                .into_iter()
                .map(|(name, default)| {
                    let value = changed
                        .get(&name.to_ascii_lowercase())
                        .cloned()
                        .unwrap_or(default);
                    (name.to_string(), value)
                })
                .collect();
        for (name, value) in changed.iter() {
            if !all.iter().any(|(n, _)| n.to_ascii_lowercase() == *name) {
                all.push((name.clone(), value.clone()));
            }
        }
        all.sort_by_key(|(name, _)| name.to_ascii_lowercase());
        all
    }
}

/// The session setting that turns routing to rollups on or off.
const USE_ROLLUPS: &str = "quiver.use_rollups";

/// The session setting that says where queries run (`off`, `auto`, `on`).
const DISTRIBUTED: &str = "quiver.distributed";

/// A `quiver.distributed` value (quotes allowed, as `SET` passes them on).
fn parse_distributed(value: &str) -> PgWireResult<Distributed> {
    value
        .trim()
        .trim_matches('\'')
        .parse()
        .map_err(|e: String| {
            error(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("parameter \"{DISTRIBUTED}\": {e}"),
            )
        })
}

/// A boolean setting as PostgreSQL reads one ([`quiver_model::settings::parse_switch`]).
fn parse_switch(name: &str, value: &str) -> PgWireResult<bool> {
    quiver_model::settings::parse_switch(value).ok_or_else(|| {
        error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("parameter \"{name}\" requires a Boolean value, not \"{value}\""),
        )
    })
}

/// The largest `statement_timeout` PostgreSQL accepts (`INT_MAX` milliseconds).
const MAX_TIMEOUT_MS: f64 = 2_147_483_647.0;

/// A `statement_timeout` value as PostgreSQL reads it: milliseconds, or a number with a unit
/// (`us`, `ms`, `s`, `min`, `h`, `d`); 0 is no limit.
fn parse_timeout(value: &str) -> PgWireResult<Option<Duration>> {
    let text = value.trim().trim_matches('\'').trim().to_ascii_lowercase();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let millis_per_unit = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1_000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => f64::NAN,
    };
    let millis = number.parse::<f64>().map(|n| n * millis_per_unit);
    match millis {
        Ok(0.0) => Ok(None),
        Ok(ms) if ms > 0.0 && ms <= MAX_TIMEOUT_MS => {
            Ok(Some(Duration::from_secs_f64(ms / 1000.0)))
        }
        _ => Err(error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"statement_timeout\": \"{value}\""),
        )),
    }
}

/// Refuses values of the settings Quiver keeps fixed (encoding, date style, time zone).
fn check_fixed(key: &str, value: &str) -> PgWireResult<()> {
    let normalized = value.trim().trim_matches('\'').to_ascii_lowercase();
    let allowed = match key {
        "client_encoding" | "names" => ["utf8", "utf-8", "unicode"].contains(&normalized.as_str()),
        "datestyle" => normalized.starts_with("iso"),
        "timezone" | "time zone" => [
            "utc", "etc/utc", "gmt", "etc/gmt", "uct", "zulu", "z", "+00", "+00:00", "0", "00:00",
            "local", "default",
        ]
        .contains(&normalized.as_str()),
        _ => return Ok(()),
    };
    if allowed {
        return Ok(());
    }
    let fixed = match key {
        "timezone" | "time zone" => "UTC (timestamps are sent with their +00 offset)",
        "datestyle" => "ISO",
        _ => "UTF8",
    };
    Err(error(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!("cannot set {key} to {value}: Quiver sessions use {fixed}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_settings_accept_only_their_values() {
        assert!(check_fixed("timezone", "'UTC'").is_ok());
        assert!(check_fixed("timezone", "Etc/UTC").is_ok());
        assert!(check_fixed("timezone", "Europe/Paris").is_err());
        assert!(check_fixed("client_encoding", "UTF8").is_ok());
        assert!(check_fixed("client_encoding", "LATIN1").is_err());
        assert!(check_fixed("datestyle", "ISO, MDY").is_ok());
        assert!(check_fixed("datestyle", "SQL").is_err());
        assert!(check_fixed("application_name", "anything").is_ok());
    }

    #[test]
    fn statement_timeouts_read_as_postgresql_reads_them() {
        assert_eq!(parse_timeout("0").unwrap(), None);
        assert_eq!(
            parse_timeout("250").unwrap(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(parse_timeout("'2s'").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_timeout("1min").unwrap(),
            Some(Duration::from_secs(60))
        );
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("-5").is_err());
        let settings = SessionSettings::default();
        settings
            .set("statement_timeout", Some("1500".into()))
            .unwrap();
        assert_eq!(
            settings.statement_timeout(),
            Some(Duration::from_millis(1500))
        );
        assert!(settings.set("statement_timeout", Some("x".into())).is_err());
    }

    #[test]
    fn set_reset_and_the_defaults() {
        let settings = SessionSettings::default();
        settings.set("Application_Name", Some("x".into())).unwrap();
        settings.set("myapp.flag", Some("on".into())).unwrap();
        let changed = settings.0.lock().clone();
        assert_eq!(changed["application_name"], "x");
        settings.set("application_name", None).unwrap();
        settings.reset(Some("MYAPP.FLAG"));
        assert!(settings.0.lock().is_empty());
        let names: Vec<_> = defaults("metrics", "u", "")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert!(names.contains(&"TimeZone") && names.contains(&"search_path"));
    }
}

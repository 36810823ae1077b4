//! What the settings of every layer share: the serde forms of durations as the configuration
//! spells them (whole seconds or hours, in the file, the environment and flags alike), the
//! spellings of an on/off switch every protocol accepts ([`parse_switch`]), and the bounds on
//! one request that every protocol enforces ([`RequestLimits`]), and where queries run
//! ([`Distributed`], which the server, every protocol and the engine read).
//!
//! Each crate declares its own settings in its options struct (serde names are the keys of
//! `quiver.toml`); the server's configuration is those structs side by side, so a setting, its
//! default and its documentation are written once, next to the code that uses it.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bounds on one request, whatever protocol carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestLimits {
    /// Largest accepted request body (or gRPC message) in bytes, before and after
    /// decompression; larger ones are refused (HTTP 413, gRPC OUT_OF_RANGE).
    pub max_request_bytes: usize,
    /// Most rejected lines a write response lists (all are counted).
    pub max_reported_line_errors: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_request_bytes: 64 << 20,
            max_reported_line_errors: 100,
        }
    }
}

impl RequestLimits {
    /// Checks the limits are usable; the message names the offending setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_request_bytes == 0 {
            return Err("max_request_bytes must be greater than 0".into());
        }
        Ok(())
    }
}

/// `1 / divisor` of [`crate::machine::available_memory_bytes`], clamped to `min..=max`
/// (`fallback` if the memory cannot be read): how the defaults of memory-sized settings are
/// chosen.
pub fn share_of_memory(divisor: u64, min: u64, max: u64, fallback: u64) -> u64 {
    crate::machine::available_memory_bytes()
        .map_or(fallback, |bytes| (bytes / divisor).clamp(min, max))
}

/// A [`Duration`] as a whole number of seconds (`#[serde(with = "secs")]`).
pub mod secs {
    use super::*;

    /// Writes `duration` as its whole seconds.
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        duration.as_secs().serialize(serializer)
    }

    /// Reads a whole number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

/// An optional [`Duration`] as a whole number of seconds, `0` meaning `None`
/// (`#[serde(with = "secs_or_zero")]`).
pub mod secs_or_zero {
    use super::*;

    /// Writes the whole seconds, or `0` for `None`.
    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        duration.map_or(0, |d| d.as_secs()).serialize(serializer)
    }

    /// Reads whole seconds; `0` is `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        let secs = u64::deserialize(deserializer)?;
        Ok((secs > 0).then(|| Duration::from_secs(secs)))
    }
}

/// A [`Duration`] as a whole number of hours (`#[serde(with = "hours")]`).
pub mod hours {
    use super::*;

    const SECS_PER_HOUR: u64 = 3600;

    /// Writes `duration` as its whole hours.
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        (duration.as_secs() / SECS_PER_HOUR).serialize(serializer)
    }

    /// Reads a whole number of hours.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let hours = u64::deserialize(deserializer)?;
        Ok(Duration::from_secs(hours.saturating_mul(SECS_PER_HOUR)))
    }
}

/// Where queries run: on this server, or on DataFusion Ballista's executors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distributed {
    /// Always on this server.
    #[default]
    Off,
    /// On Ballista when the estimated scan is at least `distributed_min_scan_bytes` (and the
    /// scheduler answers; else here, with a warning).
    Auto,
    /// Always on Ballista; a query that cannot run there fails saying why.
    On,
}

impl Distributed {
    /// The mode's name, as the setting spells it.
    pub fn name(self) -> &'static str {
        match self {
            Distributed::Off => "off",
            Distributed::Auto => "auto",
            Distributed::On => "on",
        }
    }
}

impl FromStr for Distributed {
    type Err = String;

    /// `off`, `auto` or `on` (any case).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Distributed::Off),
            "auto" => Ok(Distributed::Auto),
            "on" => Ok(Distributed::On),
            _ => Err(format!("distributed must be off, auto or on, not {text:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_memory_are_clamped() {
        let share = share_of_memory(16, 64 << 20, 8 << 30, 1 << 30);
        assert!((64 << 20..=8 << 30).contains(&share), "{share}");
        assert_eq!(
            share_of_memory(1, 5, 5, 7),
            if crate::machine::available_memory_bytes().is_some() {
                5
            } else {
                7
            }
        );
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Spelled {
        #[serde(with = "secs")]
        age: Duration,
        #[serde(with = "secs_or_zero")]
        granularity: Option<Duration>,
        #[serde(with = "hours")]
        partition: Duration,
    }

    #[test]
    fn durations_round_trip_in_their_units() {
        let spelled = Spelled {
            age: Duration::from_secs(600),
            granularity: None,
            partition: Duration::from_secs(2 * 3600),
        };
        let json = serde_json::to_value(&spelled).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"age": 600, "granularity": 0, "partition": 2})
        );
        assert_eq!(serde_json::from_value::<Spelled>(json).unwrap(), spelled);
        let some: Spelled =
            serde_json::from_str(r#"{"age": 1, "granularity": 5, "partition": 24}"#).unwrap();
        assert_eq!(some.granularity, Some(Duration::from_secs(5)));
        assert!(serde_json::from_str::<Spelled>(
            r#"{"age": -1, "granularity": 0, "partition": 1}"#
        )
        .is_err());
    }
}

/// An on/off switch as a request spells it (a query parameter, a header, a session setting):
/// `on`, `true`, `yes`, `1`, `t`, `y` or their opposites, any case, spaces and single quotes
/// around ignored. `None` for anything else.
pub fn parse_switch(text: &str) -> Option<bool> {
    match text
        .trim()
        .trim_matches('\'')
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "on" | "true" | "yes" | "1" | "t" | "y" => Some(true),
        "off" | "false" | "no" | "0" | "f" | "n" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod switch_tests {
    use super::{parse_switch, Distributed};

    #[test]
    fn switches_read_every_common_spelling_and_nothing_else() {
        for on in ["on", "TRUE", " yes ", "'1'", "t"] {
            assert_eq!(parse_switch(on), Some(true), "{on}");
        }
        for off in ["off", "False", "no", "0", "'f'"] {
            assert_eq!(parse_switch(off), Some(false), "{off}");
        }
        for neither in ["", "maybe", "2", "onn"] {
            assert_eq!(parse_switch(neither), None, "{neither}");
        }
    }

    #[test]
    fn modes_parse_in_any_case_and_refuse_anything_else() {
        assert_eq!("AUTO".parse::<Distributed>(), Ok(Distributed::Auto));
        assert_eq!(" on ".parse::<Distributed>(), Ok(Distributed::On));
        assert_eq!("off".parse::<Distributed>(), Ok(Distributed::Off));
        let error = "yes".parse::<Distributed>().unwrap_err();
        assert!(error.contains("off, auto or on"), "{error}");
    }
}

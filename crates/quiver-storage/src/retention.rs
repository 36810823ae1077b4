//! Retention: how long a database keeps its rows. A period is written as InfluxDB 3 writes it
//! (`30d`, `12h`, `1w2d`, `none`); a database either sets its own or follows the server-wide
//! `retention_period`. Rows older than `now - period` are invisible to queries at once (the
//! table scan filters them, see [`crate::Table::retention_filter_ns`]); whole Parquet files
//! past it are deleted in the background ([`expired_files`] picks them; the persister's
//! expiry takes them out of the catalog and the tables).
//!
//! The cutoff moves in steps of a thousandth of the period (at least a second, at most an
//! hour: 43 minutes for `30d`, 36 seconds for `10h`): queries within one step see the same
//! rows, so the result cache, which keys on the cutoff, keeps an answer that long, and a row
//! stays visible at most one step past its expiry.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::StorageError;
use crate::file_entry::FileEntry;

/// The longest retention period accepted: about 1,000 years (nanosecond times end in 2262
/// anyway).
const MAX_PERIOD: Duration = Duration::from_secs(1000 * 365 * 86_400);

/// Nanoseconds per second: the cutoff's granularity.
const SECOND_NS: i64 = 1_000_000_000;

/// The longest step the cutoff moves in.
const MAX_STEP_NS: i64 = 3600 * SECOND_NS;

/// How long rows are kept: a positive duration, or forever (`none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPeriod(Option<Duration>);

impl RetentionPeriod {
    /// Rows are kept forever.
    pub const FOREVER: RetentionPeriod = RetentionPeriod(None);

    /// Rows are kept for `period` (positive, at most about 1,000 years).
    pub fn of(period: Duration) -> Result<Self, StorageError> {
        if period.is_zero() || period > MAX_PERIOD {
            return Err(StorageError::InvalidRetention {
                value: format!("{}s", period.as_secs()),
                reason: "a retention period is between 1 second and 1000 years".into(),
            });
        }
        Ok(RetentionPeriod(Some(period)))
    }

    /// The period, or `None` for forever.
    pub fn duration(self) -> Option<Duration> {
        self.0
    }

    /// Parses `30d`, `12h`, `90m`, `45s`, `1w`, sums such as `1d12h`, or `none` / `infinite`
    /// (forever). Units: `s`, `m`, `h`, `d`, `w`; whitespace around the value is ignored.
    pub fn parse(text: &str) -> Result<Self, StorageError> {
        let trimmed = text.trim();
        let invalid = |reason: &str| StorageError::InvalidRetention {
            value: text.to_string(),
            reason: reason.to_string(),
        };
        if matches!(
            trimmed.to_ascii_lowercase().as_str(),
            "none" | "infinite" | "inf" | "forever"
        ) {
            return Ok(RetentionPeriod::FOREVER);
        }
        if trimmed.is_empty() {
            return Err(invalid(
                "empty; write a duration such as \"30d\" or \"none\"",
            ));
        }
        let mut total: u64 = 0;
        let mut rest = trimmed;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return Err(invalid(
                    "expected a number followed by a unit (s, m, h, d, w), e.g. \"30d\"",
                ));
            }
            let number: u64 = rest[..digits]
                .parse()
                .map_err(|_| invalid("the number is too large"))?;
            let unit = rest[digits..]
                .chars()
                .next()
                .ok_or_else(|| invalid("a number needs a unit: s, m, h, d or w (e.g. \"30d\")"))?;
            let seconds: u64 = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                'w' => 7 * 86_400,
                other => {
                    return Err(invalid(&format!(
                        "unknown unit {other:?}; use s, m, h, d or w"
                    )))
                }
            };
            total = number
                .checked_mul(seconds)
                .and_then(|s| total.checked_add(s))
                .ok_or_else(|| invalid("the period is too long"))?;
            rest = &rest[digits + unit.len_utf8()..];
        }
        RetentionPeriod::of(Duration::from_secs(total)).map_err(|_| {
            invalid("a retention period is between 1 second and 1000 years, or \"none\"")
        })
    }

    /// The oldest `time` (ns) still visible at `now_ns`: `now - period` rounded down to the
    /// period's step (see the module documentation); `None` when rows are kept forever.
    pub fn cutoff_ns(self, now_ns: i64) -> Option<i64> {
        let period = i64::try_from(self.0?.as_nanos()).unwrap_or(i64::MAX);
        let step = (period / 1000 / SECOND_NS * SECOND_NS).clamp(SECOND_NS, MAX_STEP_NS);
        Some(now_ns.saturating_sub(period).div_euclid(step) * step)
    }
}

impl fmt::Display for RetentionPeriod {
    /// The form [`RetentionPeriod::parse`] reads back, in days and smaller units: `30d`,
    /// `1d12h`, `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(period) = self.0 else {
            return f.write_str("none");
        };
        let mut seconds = period.as_secs();
        for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
            if seconds >= size {
                write!(f, "{}{unit}", seconds / size)?;
                seconds %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for RetentionPeriod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RetentionPeriod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        RetentionPeriod::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A database's effective retention, shared by its tables and changed in place (`PUT`).
#[derive(Debug, Default)]
pub(crate) struct RetentionCell {
    /// The period in nanoseconds; 0 for forever.
    period_ns: AtomicU64,
}

impl RetentionCell {
    /// A cell holding `period`.
    pub(crate) fn new(period: RetentionPeriod) -> Self {
        let cell = RetentionCell::default();
        cell.set(period);
        cell
    }

    /// Changes the period for every table of the database.
    pub(crate) fn set(&self, period: RetentionPeriod) {
        let nanos = period.0.map_or(0, |p| p.as_nanos() as u64);
        self.period_ns.store(nanos, Ordering::Release);
    }

    /// The period now.
    pub(crate) fn get(&self) -> RetentionPeriod {
        match self.period_ns.load(Ordering::Acquire) {
            0 => RetentionPeriod::FOREVER,
            nanos => RetentionPeriod(Some(Duration::from_nanos(nanos))),
        }
    }
}

/// The files of `files` whose every row is older than `cutoff_ns`: what retention deletes.
pub(crate) fn expired_files(files: &[FileEntry], cutoff_ns: i64) -> HashSet<u64> {
    files
        .iter()
        .filter(|f| f.max_time_ns < cutoff_ns)
        .map(|f| f.id)
        .collect()
}

/// Nanoseconds since the Unix epoch now (0 if the clock is before it).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_influxdb_forms() {
        let day = 86_400;
        for (text, seconds) in [
            ("30d", 30 * day),
            ("12h", 12 * 3600),
            ("90m", 90 * 60),
            ("45s", 45),
            ("1w", 7 * day),
            ("1d12h", day + 12 * 3600),
            (" 7d ", 7 * day),
        ] {
            let parsed = RetentionPeriod::parse(text).unwrap();
            assert_eq!(
                parsed.duration(),
                Some(Duration::from_secs(seconds)),
                "{text}"
            );
        }
        for forever in ["none", "NONE", "infinite", "forever"] {
            assert_eq!(
                RetentionPeriod::parse(forever).unwrap(),
                RetentionPeriod::FOREVER
            );
        }
    }

    #[test]
    fn rejects_what_is_not_a_positive_period() {
        for bad in [
            "",
            "0d",
            "30",
            "d",
            "-1d",
            "1.5d",
            "30x",
            "1d-",
            "30 d",
            "99999999999999999999d",
            "2000000w",
            "1y",
            "3e2h",
        ] {
            let error = RetentionPeriod::parse(bad).unwrap_err();
            assert!(
                matches!(error, StorageError::InvalidRetention { .. }),
                "{bad}: {error}"
            );
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    #[test]
    fn the_cutoff_moves_in_steps_of_a_thousandth_of_the_period() {
        let hour = RetentionPeriod::parse("1h").unwrap();
        let now = 10_000 * SECOND_NS + 123;
        // 3.6 s is rounded down to a whole 3 s step
        assert_eq!(
            hour.cutoff_ns(now),
            Some((10_000 - 3600) / 3 * 3 * SECOND_NS)
        );
        let second = RetentionPeriod::parse("10m").unwrap();
        assert_eq!(
            second.cutoff_ns(now),
            Some((10_000 - 600) * SECOND_NS),
            "1 s at least"
        );
        let month = RetentionPeriod::parse("30d").unwrap();
        let now = 40 * 86_400 * SECOND_NS + 5;
        let cutoff = month.cutoff_ns(now).unwrap();
        assert_eq!(cutoff % (2592 * SECOND_NS), 0, "43.2 min steps");
        assert!(cutoff <= now - 30 * 86_400 * SECOND_NS);
        assert!(cutoff > now - 30 * 86_400 * SECOND_NS - 2592 * SECOND_NS);
        let decade = RetentionPeriod::parse("3650d").unwrap();
        assert_eq!(
            decade.cutoff_ns(now).unwrap() % MAX_STEP_NS,
            0,
            "an hour at most"
        );
        assert_eq!(RetentionPeriod::FOREVER.cutoff_ns(now), None);
        // far before the epoch still works (no overflow)
        let long = RetentionPeriod::parse("52000w").unwrap();
        assert!(long.cutoff_ns(now).unwrap() < 0);
    }

    #[test]
    fn a_cell_holds_what_was_set() {
        let cell = RetentionCell::new(RetentionPeriod::FOREVER);
        assert_eq!(cell.get(), RetentionPeriod::FOREVER);
        let week = RetentionPeriod::parse("1w").unwrap();
        cell.set(week);
        assert_eq!(cell.get(), week);
    }

    proptest! {
        #[test]
        fn display_parses_back(seconds in 1u64..(1000 * 365 * 86_400)) {
            let period = RetentionPeriod::of(Duration::from_secs(seconds)).unwrap();
            prop_assert_eq!(RetentionPeriod::parse(&period.to_string()).unwrap(), period);
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,24}") {
            let _ = RetentionPeriod::parse(&text);
        }
    }
}

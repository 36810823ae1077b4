//! Timestamp precision of a write request and the conversion of its timestamps to nanoseconds.

use std::str::FromStr;

/// The unit of the timestamps in a write request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Guess per timestamp from its magnitude, as InfluxDB 3 does (its default).
    #[default]
    Auto,
    /// Nanoseconds.
    Nanosecond,
    /// Microseconds.
    Microsecond,
    /// Milliseconds.
    Millisecond,
    /// Seconds.
    Second,
    /// Minutes (InfluxDB v1).
    Minute,
    /// Hours (InfluxDB v1).
    Hour,
}

/// An unrecognised `precision=` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid precision {0:?}: expected one of auto, ns, us, ms, s (or nanosecond, microsecond, millisecond, second, n, u, m, h)")]
pub struct InvalidPrecision(pub String);

impl FromStr for Precision {
    type Err = InvalidPrecision;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => Precision::Auto,
            "n" | "ns" | "nanosecond" => Precision::Nanosecond,
            "u" | "us" | "µs" | "microsecond" => Precision::Microsecond,
            "ms" | "millisecond" => Precision::Millisecond,
            "s" | "second" => Precision::Second,
            "m" | "minute" => Precision::Minute,
            "h" | "hour" => Precision::Hour,
            other => return Err(InvalidPrecision(other.to_string())),
        })
    }
}

impl Precision {
    /// Nanoseconds per unit; `None` for [`Precision::Auto`].
    fn nanos_per_unit(self) -> Option<i64> {
        Some(match self {
            Precision::Auto => return None,
            Precision::Nanosecond => 1,
            Precision::Microsecond => 1_000,
            Precision::Millisecond => 1_000_000,
            Precision::Second => 1_000_000_000,
            Precision::Minute => 60_000_000_000,
            Precision::Hour => 3_600_000_000_000,
        })
    }

    /// InfluxDB 3's rule for `precision=auto`: a timestamp whose magnitude is below 5e9 is in
    /// seconds, below 5e12 in milliseconds, below 5e15 in microseconds, else in nanoseconds.
    fn guess(timestamp: i64) -> Precision {
        let seconds_if_ns = timestamp.unsigned_abs() / 1_000_000_000;
        match seconds_if_ns {
            0..=4 => Precision::Second,
            5..=4_999 => Precision::Millisecond,
            5_000..=4_999_999 => Precision::Microsecond,
            _ => Precision::Nanosecond,
        }
    }

    /// Converts a timestamp written in this precision to nanoseconds since the epoch;
    /// `None` when the result does not fit in an `i64`.
    pub fn to_nanos(self, timestamp: i64) -> Option<i64> {
        let unit = match self.nanos_per_unit() {
            Some(unit) => unit,
            None => Precision::guess(timestamp).nanos_per_unit()?,
        };
        timestamp.checked_mul(unit)
    }

    /// The time given to lines without a timestamp: `now_ns` truncated to this precision.
    pub fn truncate(self, now_ns: i64) -> i64 {
        match self.nanos_per_unit() {
            Some(unit) => now_ns - now_ns.rem_euclid(unit),
            None => now_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!("ms".parse::<Precision>(), Ok(Precision::Millisecond));
        assert_eq!("second".parse::<Precision>(), Ok(Precision::Second));
        assert!("weeks".parse::<Precision>().is_err());
    }

    #[test]
    fn auto_guesses_by_magnitude() {
        let t = 1_700_000_000i64;
        assert_eq!(Precision::Auto.to_nanos(t), Some(t * 1_000_000_000));
        assert_eq!(Precision::Auto.to_nanos(t * 1000), Some(t * 1_000_000_000));
        assert_eq!(
            Precision::Auto.to_nanos(t * 1_000_000),
            Some(t * 1_000_000_000)
        );
        assert_eq!(
            Precision::Auto.to_nanos(t * 1_000_000_000),
            Some(t * 1_000_000_000)
        );
        assert_eq!(Precision::Auto.to_nanos(-t), Some(-t * 1_000_000_000));
    }

    #[test]
    fn overflow_and_truncation() {
        assert_eq!(Precision::Second.to_nanos(i64::MAX / 10), None);
        assert_eq!(Precision::Second.truncate(1_500_000_001), 1_000_000_000);
        assert_eq!(Precision::Second.truncate(-1), -1_000_000_000);
        assert_eq!(Precision::Nanosecond.truncate(7), 7);
    }
}

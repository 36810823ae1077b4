//! Time buckets: `date_bin(width, time, origin)`'s fixed-width buckets, in nanoseconds. Every
//! layer that floors a time to its bucket (gap filling, rollups, reused time parts, InfluxQL's
//! `GROUP BY time`) does it through [`TimeBucket`], with one overflow rule: a floor that does
//! not fit in `i64` is `None` ([`TimeBucket::floor`]), or clamps to the end of `i64` where the
//! caller asks for a bound ([`TimeBucket::floor_saturating`]).

/// The most time buckets one query may make (per series where a query fills gaps): InfluxQL's
/// `GROUP BY time` and SQL's `date_bin_gapfill` are refused past it.
pub const MAX_QUERY_BUCKETS: u64 = 1_000_000;

/// Buckets of `width` nanoseconds (positive) starting at `origin + k * width` for every
/// integer `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Hash)]
pub struct TimeBucket {
    /// The width of a bucket in nanoseconds (positive).
    pub width: i64,
    /// A time (nanoseconds since the epoch) at which a bucket starts.
    pub origin: i64,
}

impl TimeBucket {
    /// Buckets of `width` nanoseconds from `origin`; `None` unless `width` is positive.
    pub fn new(width: i64, origin: i64) -> Option<Self> {
        (width > 0).then_some(TimeBucket { width, origin })
    }

    /// The start of the bucket holding `t` (the largest `origin + k * width <= t`); `None`
    /// if it lies before `i64::MIN`.
    pub fn floor(&self, t: i64) -> Option<i64> {
        i64::try_from(self.floor_wide(t)).ok()
    }

    /// The start of the first bucket at or after `t` (the smallest `origin + k * width >= t`);
    /// `None` if it lies past `i64::MAX`.
    pub fn ceil(&self, t: i64) -> Option<i64> {
        let floor = self.floor_wide(t);
        let ceil = if floor == t as i128 {
            floor
        } else {
            floor + self.width as i128
        };
        i64::try_from(ceil).ok()
    }

    /// [`TimeBucket::floor`] clamped to `i64`; the ends of `i64` (the bounds of an open
    /// range) stay where they are.
    pub fn floor_saturating(&self, t: i64) -> i64 {
        if t == i64::MIN || t == i64::MAX {
            return t;
        }
        self.floor_wide(t).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// True if every bucket of `self` is a union of whole buckets of `finer`.
    pub fn is_made_of(&self, finer: &TimeBucket) -> bool {
        self.width % finer.width == 0 && (self.origin - finer.origin) % finer.width == 0
    }

    /// The floor in `i128`, where it always fits.
    fn floor_wide(&self, t: i64) -> i128 {
        let (t, width, origin) = (t as i128, self.width as i128, self.origin as i128);
        origin + (t - origin).div_euclid(width) * width
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_and_ceils_around_the_origin() {
        let bucket = TimeBucket::new(10, 3).unwrap();
        assert_eq!(bucket.floor(3), Some(3));
        assert_eq!(bucket.floor(12), Some(3));
        assert_eq!(bucket.floor(13), Some(13));
        assert_eq!(bucket.floor(2), Some(-7));
        assert_eq!(bucket.floor(-8), Some(-17));
        assert_eq!(bucket.ceil(3), Some(3));
        assert_eq!(bucket.ceil(4), Some(13));
        assert_eq!(bucket.ceil(-8), Some(-7));
    }

    #[test]
    fn out_of_range_floors_are_none_or_clamped() {
        let bucket = TimeBucket::new(1_000, 7).unwrap();
        assert_eq!(bucket.floor(i64::MIN + 1), None);
        assert_eq!(bucket.floor_saturating(i64::MIN + 1), i64::MIN);
        assert_eq!(bucket.ceil(i64::MAX - 1), None);
        assert_eq!(bucket.floor_saturating(i64::MAX), i64::MAX);
        assert_eq!(bucket.floor_saturating(i64::MIN), i64::MIN);
        assert!(TimeBucket::new(0, 0).is_none());
        assert!(TimeBucket::new(-5, 0).is_none());
    }

    #[test]
    fn coarser_buckets_are_made_of_finer_ones() {
        let minute = TimeBucket::new(60, 0).unwrap();
        let hour = TimeBucket::new(3_600, 0).unwrap();
        assert!(hour.is_made_of(&minute));
        assert!(!minute.is_made_of(&hour));
        assert!(!TimeBucket::new(3_600, 30).unwrap().is_made_of(&minute));
    }
}

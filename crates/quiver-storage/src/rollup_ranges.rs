//! The time arithmetic of rollups: a [`BucketGrid`] (fixed-width buckets from an origin, and
//! the segments that group them into files) and [`Ranges`], a set of half-open nanosecond
//! ranges (the buckets a rollup must recompute, or may answer from).
//!
//! Ranges may be unbounded: `i64::MIN` and `i64::MAX` stand for minus and plus infinity, and
//! every rounding saturates at them.

use std::collections::BTreeMap;

use quiver_model::TimeBucket;

/// Fixed-width time buckets `[origin + k * width, origin + (k + 1) * width)`, grouped into
/// segments of `segment_buckets` buckets each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketGrid {
    /// Bucket width in nanoseconds (positive).
    pub width: i64,
    /// A bucket boundary, in nanoseconds since the epoch.
    pub origin: i64,
    /// Buckets per segment (positive).
    pub segment_buckets: i64,
}

/// About one day of buckets per segment (at least one bucket).
const SEGMENT_NS: i64 = 86_400_000_000_000;

impl BucketGrid {
    /// The grid of `width`-wide buckets aligned to `origin`, in segments of about a day.
    pub fn new(width: i64, origin: i64) -> Self {
        let width = width.max(1);
        BucketGrid {
            width,
            origin,
            segment_buckets: (SEGMENT_NS / width).max(1),
        }
    }

    /// The start of the bucket holding `t` (the largest boundary `<= t`).
    pub fn floor(&self, t: i64) -> i64 {
        floor_to(t, self.width, self.origin)
    }

    /// The smallest bucket boundary `>= t`.
    pub fn ceil(&self, t: i64) -> i64 {
        let floor = self.floor(t);
        if floor == t || t == i64::MAX {
            floor
        } else {
            floor.saturating_add(self.width)
        }
    }

    /// The start of the segment holding `t`.
    pub fn segment_floor(&self, t: i64) -> i64 {
        floor_to(
            t,
            self.width.saturating_mul(self.segment_buckets),
            self.origin,
        )
    }

    /// The end (exclusive) of the segment holding `t`.
    pub fn segment_end(&self, t: i64) -> i64 {
        self.segment_floor(t)
            .saturating_add(self.width.saturating_mul(self.segment_buckets))
    }

    /// The buckets `[min, max]` (inclusive times) touch, as a half-open range of bucket time.
    pub fn covering(&self, min: i64, max: i64) -> (i64, i64) {
        (self.floor(min), self.floor(max).saturating_add(self.width))
    }
}

/// The largest `origin + k * width <= t`, saturating at the ends of `i64` (which stay
/// where they are).
fn floor_to(t: i64, width: i64, origin: i64) -> i64 {
    TimeBucket { width, origin }.floor_saturating(t)
}

/// A set of disjoint, non-adjacent half-open ranges `[start, end)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges {
    by_start: BTreeMap<i64, i64>,
}

impl Ranges {
    /// The empty set.
    pub fn new() -> Self {
        Ranges::default()
    }

    /// The set holding `[start, end)` (empty if `start >= end`).
    pub fn of(start: i64, end: i64) -> Self {
        let mut ranges = Ranges::new();
        ranges.insert(start, end);
        ranges
    }

    /// True if no time is in the set.
    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// The ranges in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.by_start.iter().map(|(&s, &e)| (s, e))
    }

    /// Adds `[start, end)`, merging it with the ranges it overlaps or touches.
    pub fn insert(&mut self, mut start: i64, mut end: i64) {
        if start >= end {
            return;
        }
        let touching: Vec<(i64, i64)> = self
            .by_start
            .range(..=end)
            .rev()
            .take_while(|&(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.by_start.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.by_start.insert(start, end);
    }

    /// Takes `[start, end)` out of the set.
    pub fn remove(&mut self, start: i64, end: i64) {
        if start >= end {
            return;
        }
        let overlapping: Vec<(i64, i64)> = self
            .by_start
            .range(..end)
            .rev()
            .take_while(|&(_, &e)| e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in overlapping {
            self.by_start.remove(&s);
            if s < start {
                self.by_start.insert(s, start);
            }
            if e > end {
                self.by_start.insert(end, e);
            }
        }
    }

    /// Adds every range of `other`.
    pub fn extend(&mut self, other: &Ranges) {
        for (s, e) in other.iter() {
            self.insert(s, e);
        }
    }

    /// True if some time of `[start, end)` is in the set.
    pub fn overlaps(&self, start: i64, end: i64) -> bool {
        self.by_start
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > start)
    }

    /// `[start, end)` without the times in this set: the gaps, in order.
    pub fn gaps_within(&self, start: i64, end: i64) -> Ranges {
        let mut gaps = Ranges::of(start, end);
        for (s, e) in self.iter() {
            gaps.remove(s, e);
        }
        gaps
    }

    /// Total width of the ranges, saturating.
    pub fn width(&self) -> i64 {
        self.iter()
            .fold(0i64, |sum, (s, e)| sum.saturating_add(e.saturating_sub(s)))
    }

    /// The number of ranges.
    pub fn len(&self) -> usize {
        self.by_start.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MINUTE: i64 = 60_000_000_000;

    #[test]
    fn buckets_round_from_their_origin_and_saturate_at_the_ends() {
        let grid = BucketGrid::new(10 * MINUTE, 5 * MINUTE);
        assert_eq!(grid.floor(5 * MINUTE), 5 * MINUTE);
        assert_eq!(grid.floor(14 * MINUTE), 5 * MINUTE);
        assert_eq!(grid.floor(4 * MINUTE), -5 * MINUTE);
        assert_eq!(grid.ceil(6 * MINUTE), 15 * MINUTE);
        assert_eq!(grid.ceil(15 * MINUTE), 15 * MINUTE);
        assert_eq!(grid.floor(i64::MIN), i64::MIN);
        assert_eq!(grid.ceil(i64::MAX), i64::MAX);
        assert_eq!(
            grid.covering(6 * MINUTE, 16 * MINUTE),
            (5 * MINUTE, 25 * MINUTE)
        );
        assert_eq!(grid.segment_buckets, 144);
        assert_eq!(grid.segment_end(i64::MAX - 1), i64::MAX);
    }

    #[test]
    fn ranges_merge_split_and_report_gaps() {
        let mut ranges = Ranges::new();
        ranges.insert(10, 20);
        ranges.insert(30, 40);
        ranges.insert(20, 25);
        assert_eq!(ranges.iter().collect::<Vec<_>>(), vec![(10, 25), (30, 40)]);
        ranges.remove(12, 32);
        assert_eq!(ranges.iter().collect::<Vec<_>>(), vec![(10, 12), (32, 40)]);
        assert!(ranges.overlaps(11, 13));
        assert!(!ranges.overlaps(12, 32));
        let gaps = ranges.gaps_within(0, 50);
        assert_eq!(
            gaps.iter().collect::<Vec<_>>(),
            vec![(0, 10), (12, 32), (40, 50)]
        );
        assert_eq!(ranges.width(), 10);
    }

    proptest! {
        /// Inserting and removing ranges leaves exactly the points a naive set would hold.
        #[test]
        fn ranges_hold_the_points_a_set_holds(
            operations in prop::collection::vec((any::<bool>(), 0i64..60, 0i64..20), 0..30)
        ) {
            let mut ranges = Ranges::new();
            let mut points = std::collections::BTreeSet::new();
            for (insert, start, len) in operations {
                let end = start + len;
                if insert {
                    ranges.insert(start, end);
                    points.extend(start..end);
                } else {
                    ranges.remove(start, end);
                    for p in start..end {
                        points.remove(&p);
                    }
                }
            }
            let held: std::collections::BTreeSet<i64> =
                ranges.iter().flat_map(|(s, e)| s..e).collect();
            prop_assert_eq!(&held, &points);
            let listed: Vec<(i64, i64)> = ranges.iter().collect();
            for pair in listed.windows(2) {
                prop_assert!(pair[0].1 < pair[1].0, "ranges touch or overlap: {listed:?}");
            }
        }
    }
}

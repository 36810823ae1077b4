//! Versions by time: a table's version per time chunk ([`TimeVersions`]), so that a cache
//! of partial answers can tell which stretches of time a write changed.
//!
//! Time is cut into chunks of [`VERSION_CHUNK_NS`] from the Unix epoch. A write raises the
//! version of every chunk its rows fall into (late and rewritten rows included) to the
//! table's new version, in the same step that makes the rows visible; a change to all rows at
//! once (new columns, expired files taken out, a drop) raises the table's base version. The
//! version of a stretch of time is the largest of its chunks' versions and the base version:
//! versions come from one counter that only grows (see [`crate::Table::version`]), so it
//! changes whenever any row in the stretch may have.
//!
//! Memory is bounded: past [`MAX_CHUNKS`] chunks the oldest half is folded into one version
//! covering everything before a boundary (a write there raises it), which is coarser but never
//! wrong.

use std::collections::BTreeMap;

use arrow::array::TimestampNanosecondArray;

/// The width of a version chunk: ten minutes. A rolling window recomputes at most the chunk
/// it ends in and the one it starts in; see `BENCHMARKS.md` ("Rolling windows") for why not
/// an hour.
pub const VERSION_CHUNK_NS: i64 = 10 * 60 * 1_000_000_000;

/// At most this many chunks have versions of their own (about four weeks of ten-minute
/// chunks, some 100 KiB per table).
const MAX_CHUNKS: usize = 4096;

/// A table's versions by time chunk (module docs).
#[derive(Debug, Clone)]
pub(crate) struct TimeVersions {
    /// Raised by changes to rows of any time.
    base: u64,
    /// Chunks before this one (by index) share `floor_version`.
    floor_end: i64,
    /// The version of every chunk before `floor_end`.
    floor_version: u64,
    /// Chunk index → the version of its last write.
    chunks: BTreeMap<i64, u64>,
}

impl TimeVersions {
    /// Versions of a table at `version` whose writes are not known by time (a new or
    /// restored table).
    pub(crate) fn new(version: u64) -> Self {
        TimeVersions {
            base: version,
            floor_end: i64::MIN,
            floor_version: 0,
            chunks: BTreeMap::new(),
        }
    }

    /// Every chunk changed at `version`.
    pub(crate) fn raise_all(&mut self, version: u64) {
        self.base = version;
    }

    /// The chunks of `times` changed at `version`.
    pub(crate) fn raise_times(&mut self, times: &TimestampNanosecondArray, version: u64) {
        let (Some(lo), Some(hi)) = (
            arrow::compute::min(times).map(chunk_of),
            arrow::compute::max(times).map(chunk_of),
        ) else {
            return;
        };
        if lo == hi {
            self.raise_chunk(lo, version);
            return;
        }
        let mut last = None;
        for time in times.values().iter() {
            let chunk = chunk_of(*time);
            if last != Some(chunk) {
                self.raise_chunk(chunk, version);
                last = Some(chunk);
            }
        }
    }

    fn raise_chunk(&mut self, chunk: i64, version: u64) {
        if chunk < self.floor_end {
            self.floor_version = self.floor_version.max(version);
            return;
        }
        self.chunks.insert(chunk, version);
        if self.chunks.len() > MAX_CHUNKS {
            self.fold_oldest_half();
        }
    }

    fn fold_oldest_half(&mut self) {
        let keep = self.chunks.len() / 2;
        let boundary = *self
            .chunks
            .keys()
            .nth(self.chunks.len() - keep)
            .expect("more than MAX_CHUNKS chunks");
        let kept = self.chunks.split_off(&boundary);
        let folded = std::mem::replace(&mut self.chunks, kept);
        self.floor_version = folded.into_values().fold(self.floor_version, u64::max);
        self.floor_end = boundary;
    }

    /// The version of the rows with `start <= time < end` (`start < end`).
    pub(crate) fn of_range(&self, start: i64, end: i64) -> u64 {
        let (first, last) = (chunk_of(start), chunk_of(end.saturating_sub(1)));
        let mut version = self.base;
        if first < self.floor_end {
            version = version.max(self.floor_version);
        }
        self.chunks
            .range(first..=last)
            .fold(version, |v, (_, &chunk)| v.max(chunk))
    }
}

/// The chunk `time` falls into.
fn chunk_of(time: i64) -> i64 {
    time.div_euclid(VERSION_CHUNK_NS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const W: i64 = VERSION_CHUNK_NS;

    fn times(values: &[i64]) -> TimestampNanosecondArray {
        TimestampNanosecondArray::from(values.to_vec())
    }

    #[test]
    fn a_write_changes_only_the_chunks_it_touches() {
        let mut versions = TimeVersions::new(1);
        versions.raise_times(&times(&[5, W + 5]), 2);
        assert_eq!(versions.of_range(0, W), 2);
        assert_eq!(versions.of_range(W, 2 * W), 2);
        assert_eq!(versions.of_range(2 * W, 3 * W), 1);
        versions.raise_times(&times(&[-1]), 3);
        assert_eq!(versions.of_range(-W, 0), 3);
        assert_eq!(versions.of_range(0, W), 2);
        versions.raise_all(4);
        assert_eq!(versions.of_range(2 * W, 3 * W), 4);
    }

    proptest! {
        /// Whatever was written before, a write that touches a stretch of time changes its
        /// version (folding may also change stretches a write did not touch: coarser, never
        /// stale), and no version ever goes back.
        #[test]
        fn a_touched_stretch_always_changes(
            writes in proptest::collection::vec(
                proptest::collection::vec(-50_000i64..50_000, 1..20), 1..400),
            probe in -60_000i64..60_000,
            width in 1i64..5_000,
        ) {
            let mut versions = TimeVersions::new(1);
            // a scale that makes chunks of a few time units, so folding happens
            let scale = W / 10;
            let (start, end) = (probe * scale, (probe + width) * scale);
            for (i, write) in writes.iter().enumerate() {
                let before = versions.of_range(start, end);
                let scaled: Vec<i64> = write.iter().map(|t| t * scale).collect();
                versions.raise_times(&times(&scaled), i as u64 + 2);
                let after = versions.of_range(start, end);
                let touched = scaled.iter().any(|t| (start..end).contains(t));
                prop_assert!(after >= before);
                if touched {
                    prop_assert!(after > before, "write {i} touched the stretch");
                }
            }
        }
    }
}

//! The write buffer's rows as a few sorted runs, so that the snapshot after a write sorts
//! what arrived since the last snapshot, not the whole buffer again.
//!
//! A table snapshot's buffered rows are one or more *runs*: batches each sorted by series then
//! time and deduplicated (see [`crate::dedup`]), each with where every series begins in it
//! (exact: one range per series, see [`crate::series`]), and no (series, time) point in two of
//! them, so that together they are the buffer's rows with nothing left to merge. The chunks
//! written since the last snapshot are sorted into a new run. If that run holds a point that
//! an older run holds too (a rewrite of an earlier point: "later write wins" must merge them),
//! every run is merged into one, as every snapshot used to be. Runs are merged pairwise while
//! the newest is at least half the size of the one before it (and whenever there are more
//! than [`MAX_RUNS`]), so a buffer of `n` rows written `w` rows at a time is about
//! `log2(n / w)` runs and each row is sorted again about that many times, instead of the whole
//! buffer at every write.

use std::cmp::Ordering;

use arrow::array::{make_comparator, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;

use crate::dedup::series_key_and_fields;
use crate::error::StorageError;
use crate::table_rows::{align_to_schema, merge_chunks_with_starts, time_column, time_range};

/// Most runs a snapshot's buffer is kept in.
const MAX_RUNS: usize = 16;

/// Sorted, deduplicated rows of the buffer with where each series begins in them (module
/// docs).
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// The rows, sorted by series then time, each (series, time) point once.
    pub(crate) rows: RecordBatch,
    /// The first row of each series, ascending; one entry per series.
    pub(crate) starts: Vec<usize>,
    /// The smallest and largest `time` of the rows (`None` without rows).
    pub(crate) times: Option<(i64, i64)>,
}

impl Run {
    /// The run of `chunks` (in write order), merged under `schema`; `None` if the merge could
    /// not tell where each series begins (tags that are not string dictionaries), in which
    /// case the merged rows come back alone.
    fn merged(schema: &SchemaRef, chunks: Vec<RecordBatch>) -> Result<Merged, StorageError> {
        let (rows, starts) = merge_chunks_with_starts(schema, chunks)?;
        Ok(match starts {
            Some(starts) => Merged::Run(Run::new(rows, starts)),
            None => Merged::Rows(rows),
        })
    }

    /// A run of `rows` (sorted and deduplicated, its series beginning at `starts`).
    pub(crate) fn new(rows: RecordBatch, starts: Vec<usize>) -> Run {
        let times = time_range(std::slice::from_ref(&rows));
        Run {
            rows,
            starts,
            times,
        }
    }

    /// The rows of series `index` (its range of rows).
    fn series(&self, index: usize) -> std::ops::Range<usize> {
        let end = self
            .starts
            .get(index + 1)
            .copied()
            .unwrap_or(self.rows.num_rows());
        self.starts[index]..end
    }
}

/// Rows merged from chunks: a run, or rows whose series starts are unknown.
enum Merged {
    Run(Run),
    Rows(RecordBatch),
}

/// A snapshot's buffered rows: sorted runs, or, where the rows could not be kept as runs
/// (tags that are not string dictionaries, a null time), every row merged into one batch.
pub(crate) enum Buffered {
    Runs(Vec<Run>),
    Rows(RecordBatch),
}

impl Buffered {
    /// The rows as batches: one per run, or the one merged batch; one empty batch of `schema`
    /// if there are none.
    pub(crate) fn batches(&self, schema: &SchemaRef) -> Vec<RecordBatch> {
        match self {
            Buffered::Runs(runs) if runs.is_empty() => vec![RecordBatch::new_empty(schema.clone())],
            Buffered::Runs(runs) => runs.iter().map(|run| run.rows.clone()).collect(),
            Buffered::Rows(rows) => vec![rows.clone()],
        }
    }

    /// Where each series begins in each of [`Buffered::batches`], if known (always, for
    /// runs: their sorts found it).
    pub(crate) fn series_starts(&self) -> Option<Vec<Vec<usize>>> {
        match self {
            Buffered::Runs(runs) if runs.is_empty() => Some(vec![Vec::new()]),
            Buffered::Runs(runs) => Some(runs.iter().map(|run| run.starts.clone()).collect()),
            Buffered::Rows(_) => None,
        }
    }

    /// The smallest and largest `time` buffered (runs know theirs: no pass over the rows).
    pub(crate) fn time_range(&self) -> Option<(i64, i64)> {
        match self {
            Buffered::Runs(runs) => runs
                .iter()
                .filter_map(|run| run.times)
                .reduce(|(lo1, hi1), (lo2, hi2)| (lo1.min(lo2), hi1.max(hi2))),
            Buffered::Rows(rows) => time_range(std::slice::from_ref(rows)),
        }
    }
}

/// `chunks` (in write order) merged into one run under `schema`, or one batch if the merge
/// could not tell where each series begins.
pub(crate) fn merge_into_one(
    schema: &SchemaRef,
    chunks: Vec<RecordBatch>,
) -> Result<Buffered, StorageError> {
    Ok(match Run::merged(schema, chunks)? {
        Merged::Run(run) => Buffered::Runs(vec![run]),
        Merged::Rows(rows) => Buffered::Rows(rows),
    })
}

/// The buffer's rows after `written` (chunks in write order, all newer than the runs) joined
/// `runs` (in write order, each of an older or the same schema), under `schema`, in at most
/// [`MAX_RUNS`] runs.
pub(crate) fn extend_runs(
    schema: &SchemaRef,
    runs: Vec<Run>,
    written: Vec<RecordBatch>,
) -> Result<Buffered, StorageError> {
    extend_runs_up_to(schema, (runs, written), MAX_RUNS)
}

/// [`extend_runs`], keeping at most `max_runs` runs.
fn extend_runs_up_to(
    schema: &SchemaRef,
    (runs, written): (Vec<Run>, Vec<RecordBatch>),
    max_runs: usize,
) -> Result<Buffered, StorageError> {
    let mut runs = runs
        .into_iter()
        .map(|run| {
            Ok(Run {
                rows: align_to_schema(&run.rows, schema)?,
                ..run
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    if written.iter().all(|chunk| chunk.num_rows() == 0) {
        return Ok(Buffered::Runs(runs));
    }
    let newest = match Run::merged(schema, written)? {
        Merged::Run(run) if !shares_a_point_with_any(&runs, &run)? => run,
        // a rewritten point, or rows that are not a run: everything merged again
        Merged::Run(run) => return merge_all(schema, runs, run.rows),
        Merged::Rows(rows) => return merge_all(schema, runs, rows),
    };
    runs.push(newest);
    while let [.., older, newer] = runs.as_slice() {
        if newer.rows.num_rows() * 2 < older.rows.num_rows() && runs.len() <= max_runs {
            break;
        }
        let newer = runs.pop().expect("two runs");
        let older = runs.pop().expect("two runs");
        match Run::merged(schema, vec![older.rows, newer.rows])? {
            Merged::Run(run) => runs.push(run),
            Merged::Rows(rows) => return merge_all(schema, runs, rows),
        }
    }
    Ok(Buffered::Runs(runs))
}

/// Every run and then `newest` (in write order) merged into one.
fn merge_all(
    schema: &SchemaRef,
    runs: Vec<Run>,
    newest: RecordBatch,
) -> Result<Buffered, StorageError> {
    let chunks = runs
        .into_iter()
        .map(|run| run.rows)
        .chain([newest])
        .collect();
    merge_into_one(schema, chunks)
}

/// True if a (series, time) point of `newer` is also in one of `runs` (all under one schema).
fn shares_a_point_with_any(runs: &[Run], newer: &Run) -> Result<bool, StorageError> {
    for older in runs {
        if shares_a_point(older, newer)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// True if a (series, time) point of `newer` is also in `older` (runs under one schema). Runs
/// whose times do not overlap (new points after every buffered one: the usual case) share
/// none; otherwise each series of `newer` is looked for in `older` by binary search over its
/// series, and the two series' times (both ascending) are compared.
fn shares_a_point(older: &Run, newer: &Run) -> Result<bool, StorageError> {
    let (Some((older_lo, older_hi)), Some((newer_lo, newer_hi))) = (older.times, newer.times)
    else {
        return Ok(false);
    };
    if newer_hi < older_lo || older_hi < newer_lo {
        return Ok(false);
    }
    let (keys, _) = series_key_and_fields(&newer.rows.schema())?;
    let (_time, tags) = keys.split_last().expect("time is a key column");
    // the order the runs were sorted in: tags by value, an absent tag first
    let options = SortOptions {
        descending: false,
        nulls_first: true,
    };
    let comparators = tags
        .iter()
        .map(|&c| make_comparator(older.rows.column(c), newer.rows.column(c), options))
        .collect::<Result<Vec<_>, _>>()?;
    let compare_series = |older_row: usize, newer_row: usize| {
        comparators
            .iter()
            .map(|compare| compare(older_row, newer_row))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    let older_times = times_of(&older.rows)?;
    let newer_times = times_of(&newer.rows)?;
    for index in 0..newer.starts.len() {
        let rows = newer.series(index);
        let found = older
            .starts
            .binary_search_by(|&start| compare_series(start, rows.start));
        if let Ok(older_index) = found {
            let older_rows = older.series(older_index);
            if any_equal(&older_times[older_rows], &newer_times[rows]) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The `time` values of a run's rows (a run's rows were sorted by series then time, which
/// only rows without a null time are: see [`crate::dedup`]).
fn times_of(rows: &RecordBatch) -> Result<&[i64], StorageError> {
    Ok(time_column(rows)?.values())
}

/// True if two ascending slices hold a value in common.
fn any_equal(a: &[i64], b: &[i64]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::dedup::sort_and_deduplicate;
    use crate::table_rows::merge_chunks;
    use crate::test_rows::{batch, rows, OwnedRow, Row};

    fn schema() -> SchemaRef {
        batch(&[]).schema()
    }

    /// `runs` after one more write of `written`, which must still be runs.
    fn write(runs: Vec<Run>, written: &[Row]) -> Vec<Run> {
        as_runs(extend_runs(&schema(), runs, vec![batch(written)]).unwrap())
    }

    fn as_runs(buffered: Buffered) -> Vec<Run> {
        match buffered {
            Buffered::Runs(runs) => runs,
            Buffered::Rows(_) => panic!("dictionary tags keep runs"),
        }
    }

    /// The first row of each series of sorted rows, by value.
    fn series_starts(rows: &[OwnedRow]) -> Vec<usize> {
        (0..rows.len())
            .filter(|&i| i == 0 || rows[i - 1].0 != rows[i].0)
            .collect()
    }

    #[test]
    fn new_points_become_a_run_of_their_own_and_older_rows_are_not_sorted_again() {
        let old: Vec<Row> = (0..40)
            .map(|t| (Some(["a", "b"][t % 2]), t as i64, None))
            .collect();
        let runs = write(Vec::new(), &old);
        assert_eq!(runs.len(), 1);
        let before = runs[0].rows.column(0).clone();
        let runs = write(runs, &[(Some("b"), 100, Some(1.0)), (Some("a"), 100, None)]);
        assert_eq!(runs.len(), 2);
        // the older run is the same arrays, not a copy
        assert!(std::sync::Arc::ptr_eq(runs[0].rows.column(0), &before));
        assert_eq!(runs[0].starts, [0, 20]);
        assert_eq!(
            rows(&runs[1].rows),
            [
                (Some("a".into()), 100, None),
                (Some("b".into()), 100, Some(1.0))
            ]
        );
        assert_eq!(runs[1].starts, [0, 1]);
        assert_eq!(runs[1].times, Some((100, 100)));
    }

    #[test]
    fn a_rewritten_point_merges_every_run_and_the_later_write_wins() {
        let older: Vec<Row> = vec![
            (Some("a"), 1, Some(1.0)),
            (Some("b"), 1, Some(2.0)),
            (Some("c"), 1, None),
            (Some("d"), 1, None),
        ];
        let runs = write(Vec::new(), &older);
        let runs = write(runs, &[(Some("a"), 5, Some(5.0))]);
        assert_eq!(runs.len(), 2);
        // same series and time as the first run's ("b", 1), and a new point between them
        let runs = write(runs, &[(Some("b"), 1, Some(9.0)), (Some("a"), 3, None)]);
        assert_eq!(runs.len(), 1);
        assert_eq!(
            rows(&runs[0].rows),
            [
                (Some("a".into()), 1, Some(1.0)),
                (Some("a".into()), 3, None),
                (Some("a".into()), 5, Some(5.0)),
                (Some("b".into()), 1, Some(9.0)),
                (Some("c".into()), 1, None),
                (Some("d".into()), 1, None),
            ]
        );
        assert_eq!(runs[0].starts, [0, 3, 4, 5]);
    }

    #[test]
    fn the_same_time_in_another_series_is_not_a_rewrite() {
        let runs = write(Vec::new(), &[(Some("a"), 1, None), (None, 2, None)]);
        let runs = write(runs, &[(Some("b"), 1, None), (Some("c"), 2, None)]);
        // (half the older run's size: merged, but as two runs would be: nothing rewritten)
        assert_eq!(runs.len(), 1);
        let runs = write(runs, &[(Some("d"), 1, None)]);
        assert_eq!(
            runs.len(),
            2,
            "an overlapping time in a new series keeps the runs"
        );
    }

    /// A written row: a host (or none), a time, a value, and whether it is late (goes back to
    /// any earlier time; the others are newer than every earlier write).
    type WrittenRow = (Option<u8>, i64, Option<i8>, bool);

    /// Writes of a few rows each.
    fn writes() -> impl Strategy<Value = Vec<Vec<WrittenRow>>> {
        let row = (
            prop::option::weighted(0.9, 0..4u8),
            0..6i64,
            prop::option::of(any::<i8>()),
            prop::bool::weighted(0.1),
        );
        prop::collection::vec(prop::collection::vec(row, 0..12), 1..40)
    }

    proptest! {
        /// After every write, the runs hold exactly the rows that merging every write so far
        /// gives, each run sorted, deduplicated and with its series starts, no point in two
        /// runs, and never more than the most runs allowed (small here: the halving rule
        /// alone keeps few runs, so the bound must be low to be reached).
        #[test]
        fn runs_hold_what_merging_every_write_holds(writes in writes(), max_runs in 1..5usize) {
            const HOSTS: [&str; 4] = ["a", "b", "c", "d"];
            let mut runs = Vec::new();
            let mut written = Vec::new();
            for (step, write) in writes.iter().enumerate() {
                let step = step as i64;
                let chunk: Vec<Row> = write
                    .iter()
                    .map(|&(host, t, v, late)| {
                        let time = if late { (t * 7 + step) % (step * 6 + 6) } else { step * 6 + t };
                        (host.map(|h| HOSTS[h as usize]), time, v.map(f64::from))
                    })
                    .collect();
                written.push(batch(&chunk));
                let extended = extend_runs_up_to(&schema(), (runs, vec![batch(&chunk)]), max_runs);
                runs = as_runs(extended.unwrap());
                prop_assert!(runs.len() <= max_runs);
                let mut together = Vec::new();
                for run in &runs {
                    let sorted = rows(&sort_and_deduplicate(&run.rows).unwrap());
                    prop_assert_eq!(&rows(&run.rows), &sorted);
                    prop_assert_eq!(&run.starts, &series_starts(&sorted));
                    prop_assert_eq!(run.times, time_range(std::slice::from_ref(&run.rows)));
                    together.extend(sorted);
                }
                // no point in two runs: as many rows as the merge of everything, same rows
                let expected = rows(&merge_chunks(&schema(), written.clone()).unwrap());
                together.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                prop_assert_eq!(together, expected);
            }
        }
    }
}

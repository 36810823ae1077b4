//! Where each series begins in rows sorted by series then time: a file's rows, a buffer
//! snapshot's.
//!
//! Every source of a table's rows is sorted by its tags (in schema order), then `time`, and
//! holds each point once. So the rows of one series are one run, and within it `time` only
//! grows: knowing where the runs start, a scan decides a tag comparison once per series and
//! finds a time range by binary search instead of reading every row (see quiver-query's
//! sorted prefilter), and a last-point query takes the last row of each run
//! ([`crate::latest`]). A file's run starts are computed once, when its columns are decoded,
//! and kept in the [`crate::ChunkCache`]; a buffer snapshot's once per snapshot.
//!
//! Runs are told apart by dictionary key where a tag is a dictionary: a key is cheaper to
//! compare than a string, and keys that differ while their values are equal (concatenated
//! dictionaries repeat values) only split a series into two runs. Each run still holds one
//! series in time order, which is all a reader may assume: a run is never more than one
//! series, a series may be more than one run.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::kernels::cmp::distinct;
use arrow::datatypes::Int32Type;

use crate::error::StorageError;

/// How one series is told from the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Boundaries {
    /// By dictionary key where a tag is a dictionary: fast, and may split a series.
    ByKey,
    /// By value: exact.
    ByValue,
}

/// For each pair of neighbouring rows of `tags` (the tag columns of rows sorted by series),
/// whether the second begins another run: `rows - 1` bits, true where any tag differs.
pub(crate) fn run_changes(
    tags: &[&ArrayRef],
    rows: usize,
    boundaries: Boundaries,
) -> Result<Vec<bool>, StorageError> {
    let pairs = rows.saturating_sub(1);
    let mut changed = vec![false; pairs];
    if pairs == 0 {
        return Ok(changed);
    }
    for column in tags {
        match (boundaries, column.as_dictionary_opt::<Int32Type>()) {
            (Boundaries::ByKey, Some(dictionary)) => {
                let keys = dictionary.keys().values();
                for (i, changed) in changed.iter_mut().enumerate() {
                    *changed |= keys[i] != keys[i + 1];
                }
                // a null and a value under the same key are different series (two nulls
                // under different keys merely split one)
                if let Some(valid) = dictionary.keys().nulls() {
                    mark_differences(&mut changed, valid.inner());
                }
            }
            _ => {
                let differs = distinct(&column.slice(0, pairs), &column.slice(1, pairs))?;
                for (changed, differs) in changed.iter_mut().zip(differs.values().iter()) {
                    *changed |= differs;
                }
            }
        }
    }
    Ok(changed)
}

/// Marks every `i` where `bits[i]` and `bits[i + 1]` differ.
fn mark_differences(changed: &mut [bool], bits: &BooleanBuffer) {
    let mut previous = bits.value(0);
    for (changed, next) in changed.iter_mut().zip(bits.iter().skip(1)) {
        *changed |= previous != next;
        previous = next;
    }
}

/// [`series_starts`] of a batch of a table's rows (sorted by series then time): its tags are
/// its series key without `time`.
pub(crate) fn batch_series_starts(batch: &RecordBatch) -> Result<Vec<usize>, StorageError> {
    let (keys, _) = crate::dedup::series_key_and_fields(&batch.schema())?;
    let tags: Vec<&ArrayRef> = keys[..keys.len() - 1]
        .iter()
        .map(|&tag| batch.column(tag))
        .collect();
    series_starts(&tags, batch.num_rows())
}

/// The row where each run of one series begins in rows with these `tags` (sorted by series
/// then time), ascending, the first 0; empty for no rows. By dictionary key (module docs).
pub(crate) fn series_starts(tags: &[&ArrayRef], rows: usize) -> Result<Vec<usize>, StorageError> {
    if rows == 0 {
        return Ok(Vec::new());
    }
    let changed = run_changes(tags, rows, Boundaries::ByKey)?;
    let mut starts = vec![0];
    starts.extend(
        changed
            .iter()
            .enumerate()
            .filter(|(_, changed)| **changed)
            .map(|(i, _)| i + 1),
    );
    Ok(starts)
}

/// The last row of each run of `batch` whose runs begin at `starts` ([`crate::series`]).
pub(crate) fn last_rows_of_runs(
    batch: &RecordBatch,
    starts: &[usize],
) -> Result<RecordBatch, StorageError> {
    if starts.is_empty() {
        return Ok(batch.clone());
    }
    let ends = starts.iter().skip(1).copied().chain([batch.num_rows()]);
    let last: Vec<u64> = ends.map(|end| (end - 1) as u64).collect();
    Ok(arrow::compute::take_record_batch(
        batch,
        &arrow::array::UInt64Array::from(last),
    )?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{DictionaryArray, Int64Array, StringArray};
    use proptest::prelude::*;

    use super::*;

    fn dictionary(keys: Vec<Option<i32>>, values: &[&str]) -> ArrayRef {
        let values = StringArray::from(values.to_vec());
        Arc::new(DictionaryArray::<Int32Type>::try_new(keys.into(), Arc::new(values)).unwrap())
    }

    #[test]
    fn a_run_begins_wherever_any_tag_changes() {
        let host = dictionary(
            vec![Some(0), Some(0), Some(0), Some(1), Some(1), None, None],
            &["a", "b"],
        );
        let region = dictionary(
            vec![
                Some(0),
                Some(0),
                Some(1),
                Some(1),
                Some(1),
                Some(1),
                Some(1),
            ],
            &["x", "y"],
        );
        assert_eq!(series_starts(&[&host, &region], 7).unwrap(), [0, 2, 3, 5]);
        assert_eq!(series_starts(&[], 3).unwrap(), [0], "no tags: one series");
        assert!(series_starts(&[&host], 0).unwrap().is_empty());
    }

    #[test]
    fn a_null_under_a_valid_key_is_another_series() {
        // the null slot's key is 0, as "a"'s is
        let keys = arrow::array::Int32Array::new(
            vec![0, 0, 0].into(),
            Some(vec![true, false, false].into()),
        );
        let values = StringArray::from(vec!["a"]);
        let host: ArrayRef =
            Arc::new(DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap());
        assert_eq!(series_starts(&[&host], 3).unwrap(), [0, 1]);
    }

    #[test]
    fn plain_columns_are_compared_by_value() {
        let n: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(1),
            Some(1),
            None,
            None,
            Some(2),
        ]));
        assert_eq!(series_starts(&[&n], 5).unwrap(), [0, 2, 4]);
    }

    proptest! {
        /// Runs by key never join two series and split one only where its keys differ: every
        /// run holds one tuple of values, and neighbouring runs differ in their keys.
        #[test]
        fn runs_by_key_hold_one_series_each(
            rows in proptest::collection::vec((0..3i32, proptest::option::of(0..4i32)), 0..60),
        ) {
            // values 0 and 2 of `a` are the same string under two keys
            let a = dictionary(rows.iter().map(|r| Some(r.0)).collect(), &["p", "q", "p"]);
            let b = dictionary(rows.iter().map(|r| r.1).collect(), &["u", "v", "u", "w"]);
            let starts = series_starts(&[&a, &b], rows.len()).unwrap();
            let value = |column: &ArrayRef, i: usize| {
                let d = column.as_dictionary::<Int32Type>();
                d.is_valid(i).then(|| d.values().as_string::<i32>().value(d.keys().value(i) as usize).to_string())
            };
            let mut ends = starts.iter().skip(1).copied().collect::<Vec<_>>();
            ends.push(rows.len());
            for (&start, &end) in starts.iter().zip(&ends) {
                prop_assert!(start < end);
                for i in start..end {
                    prop_assert_eq!(value(&a, i), value(&a, start));
                    prop_assert_eq!(value(&b, i), value(&b, start));
                }
                if start > 0 {
                    let same_keys = rows[start] == rows[start - 1];
                    prop_assert!(!same_keys, "a run begins only where a key or validity changes");
                }
            }
        }
    }
}

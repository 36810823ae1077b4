//! The latest row of every series, without reading every row: what last-point queries
//! (`DISTINCT ON (host) ... ORDER BY host, time DESC`, `max(time)` per series) need.
//!
//! Every source of a table's rows (each Parquet file, the buffer snapshot) is sorted by series
//! then time and holds each (series, time) point once, so the last row of each run of one
//! series is that source's latest row of the series. A source's *last rows* are those rows
//! (plus, harmlessly, a few more: see [`last_rows_of_sorted`]); a file's are computed once and
//! kept in the [`ChunkCache`] (files never change), the buffer's once per snapshot. The
//! latest row of a series over the whole table is then the latest among the sources' last
//! rows, merged exactly as a scan merges overlapping sources (same series and time: the later
//! write wins per field), so the answer is the one the plain scan would give: only the series'
//! newest point matters, and every source's version of that point is among its last rows. The
//! answer is kept with the snapshot, for the next last-point query until the next write.

use std::sync::Arc;

use arrow::array::RecordBatchReader;
use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::chunk_cache::ChunkCache;
use crate::dedup::series_key_and_fields;
use crate::error::StorageError;
use crate::series::{run_changes, Boundaries};
use crate::table::{ParquetFile, TableSnapshot};
use crate::table_rows::{merge_chunks, time_column};

/// The latest row of every series in `snapshot` whose latest row is at or after `since_ns`
/// (a retention cutoff, or `i64::MIN`), with the snapshot's schema, sorted by series. Files
/// entirely older than `since_ns` are not read. Files' last rows come from `cache` when it has
/// them; otherwise the file is read (blocking I/O) and its last rows kept there.
pub fn latest_rows(
    files: &Arc<dyn object_store::ObjectStore>,
    snapshot: &TableSnapshot,
    since_ns: i64,
    cache: &ChunkCache,
) -> Result<RecordBatch, StorageError> {
    // a snapshot never changes: the same question over it has the same answer (with no
    // retention period, every last-point query asks since i64::MIN)
    if let Some(rows) = snapshot.kept_latest_rows(since_ns) {
        return Ok(rows);
    }
    let mut candidates = Vec::new();
    for file in snapshot.files.iter() {
        if file.entry.max_time_ns >= since_ns {
            candidates.push(file_last_rows(files, file, &snapshot.schema, cache)?);
        }
    }
    if snapshot
        .buffer_time_range()
        .is_some_and(|(_, newest)| newest >= since_ns)
    {
        candidates.extend_from_slice(snapshot.buffer_last_rows()?);
    }
    // in write order (files, then the buffer): the merge lets later writes win
    let merged = merge_chunks(&snapshot.schema, candidates)?;
    let latest = last_rows(&merged, Boundaries::ByValue)?;
    let times = time_column(&latest)?;
    let kept: BooleanArray = times.iter().map(|t| Some(t >= Some(since_ns))).collect();
    let rows = filter_record_batch(&latest, &kept)?;
    snapshot.keep_latest_rows(since_ns, &rows);
    Ok(rows)
}

/// The last rows of each series in `file`, from the cache or read now (a file without rows
/// has none, with the table's `schema`).
fn file_last_rows(
    files: &Arc<dyn object_store::ObjectStore>,
    file: &ParquetFile,
    schema: &SchemaRef,
    cache: &ChunkCache,
) -> Result<RecordBatch, StorageError> {
    if let Some(rows) = cache.last_rows(&file.entry.path) {
        return Ok(rows);
    }
    // batch by batch, keeping only each batch's last rows: never the whole file in memory
    let reader = crate::data_store::read_whole(files, &file.entry)?;
    let unreadable = |e| StorageError::parquet(&file.entry.path, e);
    let reader = ParquetRecordBatchReaderBuilder::try_new(reader)
        .and_then(|builder| builder.with_batch_size(64 * 1024).build())
        .map_err(unreadable)?;
    let stored = reader.schema();
    let mut parts = Vec::new();
    for batch in reader {
        parts.push(last_rows_of_sorted(&batch?)?);
    }
    if parts.is_empty() {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    let rows = arrow::compute::concat_batches(&stored, &parts)?;
    cache.keep_last_rows(&file.entry.path, rows.clone());
    Ok(rows)
}

/// The last row of each run of one series in `batch`, which is sorted by series then time
/// and holds each point once (a file's batch, a buffer snapshot). Runs are told apart by
/// dictionary keys, which is fast but may split one series where its dictionary repeats a
/// value: the extra rows are older points of the series, which the exact merge in
/// [`latest_rows`] drops again.
pub(crate) fn last_rows_of_sorted(batch: &RecordBatch) -> Result<RecordBatch, StorageError> {
    last_rows(batch, Boundaries::ByKey)
}

/// The last row of each run of equal tags in `batch` (sorted by series then time).
fn last_rows(batch: &RecordBatch, boundaries: Boundaries) -> Result<RecordBatch, StorageError> {
    let rows = batch.num_rows();
    if rows == 0 {
        return Ok(batch.clone());
    }
    let (keys, _) = series_key_and_fields(&batch.schema())?;
    let tags: Vec<&ArrayRef> = keys[..keys.len() - 1]
        .iter()
        .map(|&tag| batch.column(tag))
        .collect();
    // row i is the last of its run where row i + 1 begins another, and the last row is
    let mut last = run_changes(&tags, rows, boundaries)?;
    last.push(true);
    Ok(filter_record_batch(batch, &BooleanArray::from(last))?)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::test_rows::{batch, rows, OwnedRow, Row};

    #[test]
    fn the_last_row_of_each_run_is_kept_and_a_missing_tag_is_a_series() {
        let sorted = batch(&[
            (None, 5, Some(0.5)),
            (Some("a"), 1, Some(1.0)),
            (Some("a"), 2, Some(2.0)),
            (Some("b"), 1, None),
        ]);
        let last = last_rows_of_sorted(&sorted).unwrap();
        assert_eq!(
            rows(&last),
            vec![
                (None, 5, Some(0.5)),
                (Some("a".into()), 2, Some(2.0)),
                (Some("b".into()), 1, None),
            ]
        );
    }

    /// The reference: for each series, its newest point after merging every source in write
    /// order (later write wins per field), computed row by row.
    fn reference(sources: &[Vec<Row>]) -> Vec<OwnedRow> {
        let mut points: std::collections::BTreeMap<(Option<String>, i64), Option<f64>> =
            Default::default();
        for source in sources {
            for (host, time, v) in source {
                let slot = points
                    .entry((host.map(str::to_string), *time))
                    .or_insert(None);
                if v.is_some() {
                    *slot = *v;
                }
            }
        }
        let mut latest: std::collections::BTreeMap<Option<String>, (i64, Option<f64>)> =
            Default::default();
        for ((host, time), v) in points {
            latest.insert(host, (time, v));
        }
        latest.into_iter().map(|(h, (t, v))| (h, t, v)).collect()
    }

    fn merged_latest(sources: &[Vec<Row>], since: i64) -> Vec<OwnedRow> {
        // each source sorted and deduplicated as files and the buffer are
        let sorted: Vec<RecordBatch> = sources
            .iter()
            .map(|s| crate::dedup::sort_and_deduplicate(&batch(s)).unwrap())
            .collect();
        let candidates = sorted
            .iter()
            .map(|b| last_rows_of_sorted(b).unwrap())
            .collect();
        let schema = sorted[0].schema();
        let merged = merge_chunks(&schema, candidates).unwrap();
        let latest = last_rows(&merged, Boundaries::ByValue).unwrap();
        rows(&latest).into_iter().filter(|r| r.1 >= since).collect()
    }

    fn any_source() -> impl Strategy<Value = Vec<Row<'static>>> {
        proptest::collection::vec(
            (
                proptest::option::of(prop_oneof![Just("a"), Just("b"), Just("c")]),
                0i64..6,
                proptest::option::of(0i64..4).prop_map(|v| v.map(|v| v as f64)),
            ),
            1..12,
        )
    }

    proptest! {
        #[test]
        fn merging_the_sources_last_rows_gives_every_series_newest_point(
            sources in proptest::collection::vec(any_source(), 1..4),
            since in 0i64..7,
        ) {
            let expected: Vec<_> = reference(&sources)
                .into_iter()
                .filter(|r| r.1 >= since)
                .collect();
            prop_assert_eq!(merged_latest(&sources, since), expected);
        }
    }
}

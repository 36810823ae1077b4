//! Running a merge the [planner](super) picked: the persister's side of compaction, since it owns
//! the catalog. A merge reads its inputs, sorts and deduplicates them as a persist does, cuts
//! the result by time into files of about the target size, writes them, and swaps them for
//! the inputs in one atomic catalog replacement (under the lock a persist holds, so the
//! catalog has one writer at a time). An input that cannot be read is quarantined; a table
//! dropped meanwhile ends the merge with nothing changed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::compaction::{CompactionOptions, CompactionScope, CompactionSummary, Merge};
use crate::error::StorageError;
use crate::file_entry::FileEntry;
use crate::parquet_write::{self, NewFile, WriteClock, WriteContext, WriteStep};
use crate::persister::Persister;
use crate::table::splice_merged;
use crate::table::ParquetFile;
use crate::table_rows::{merge_chunks, rows_by_time, time_column};

impl Persister {
    /// Runs merges in `scope` until none is due, settling every partition when `settle_all`
    /// (else only the idle ones), then deletes replaced files no query reads any more.
    pub(crate) fn compact(
        &self,
        scope: CompactionScope<'_>,
        settle_all: bool,
    ) -> Result<CompactionSummary, StorageError> {
        let mut summary = CompactionSummary::default();
        loop {
            let one_at_a_time = self.merging.lock();
            if self.compactor.is_closing() {
                return Err(StorageError::Closed);
            }
            let Some(merge) = self.next_merge(scope, settle_all) else {
                break;
            };
            if let Some(done) = self.merge(&merge)? {
                summary.add(&done);
            }
            drop(one_at_a_time);
        }
        self.compactor.delete_unread(&self.data, &self.chunk_cache);
        Ok(summary)
    }

    /// The next merge due among tables that still exist (a dropped table's files wait in
    /// the catalog for the persist that takes them out).
    fn next_merge(&self, scope: CompactionScope<'_>, settle_all: bool) -> Option<Merge> {
        let catalog = self.catalog.lock();
        let databases = self.databases.read();
        let exists = |database: &str, table: &str, id: u64| {
            databases
                .get(database)
                .and_then(|db| db.table(table))
                .is_some_and(|t| t.catalog_id() == id)
        };
        catalog.databases.iter().find_map(|(name, db)| {
            self.compactor
                .next_merge(name, &db.tables, scope, (settle_all, &exists))
        })
    }

    /// Runs one merge and counts it. A failure is an error (retried later), except an
    /// unreadable input: it is quarantined and `None` says the rest goes on without it.
    /// `None` too when the table was dropped meanwhile (nothing merged, nothing failed).
    fn merge(&self, merge: &Merge) -> Result<Option<CompactionSummary>, StorageError> {
        let started = Instant::now();
        match self.try_merge(merge) {
            Ok(None) => Ok(None),
            Ok(Some(done)) => {
                self.compactor.record_success(&done);
                tracing::info!(
                    database = %merge.database,
                    table = %merge.table,
                    partition_start_ns = merge.partition_start_ns,
                    files_in = done.files_in,
                    files_out = done.files_out,
                    rows_out = done.rows_out,
                    parquet_bytes = done.bytes_out,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "compacted files"
                );
                Ok(Some(done))
            }
            Err(failure)
                if failure
                    .unreadable
                    .as_ref()
                    .is_some_and(|f| !self.names(f.id)) =>
            {
                // its table was dropped meanwhile and the file deleted: nothing failed
                Ok(None)
            }
            Err(failure) => {
                self.compactor
                    .record_failure(&failure.error, failure.unreadable.as_ref());
                match failure.unreadable {
                    Some(_) => Ok(None),
                    None => Err(failure.error),
                }
            }
        }
    }

    /// Whether the catalog names the file with id `id`.
    fn names(&self, id: u64) -> bool {
        self.catalog
            .lock()
            .databases
            .values()
            .flat_map(|db| db.tables.values())
            .any(|t| t.files.iter().any(|f| f.id == id))
    }

    /// Reads, merges and writes `merge`'s files and swaps them in; `None` if the table was
    /// dropped meanwhile. Unless the files were swapped in, nothing it wrote stays.
    fn try_merge(&self, merge: &Merge) -> Result<Option<CompactionSummary>, Box<MergeFailure>> {
        let options = &self.compactor.options;
        let sorted = read_merged(self.data.objects(), merge, &self.compaction_clock)?;
        let cuts = time_cuts(&sorted, target_rows(merge, options))?;
        let first_id = self.reserve_file_ids(cuts.len().max(1) as u64)?;
        let table_dir = format!("{}/{}", merge.database, merge.table_id);
        // the merged files' columns are kept decoded if some input's were (a hot partition),
        // not for a cold one, whose columns would only push hot ones out
        let hot = merge
            .inputs
            .iter()
            .any(|input| self.chunk_cache.holds_decoded(&input.path));
        let chunk_cache = hot.then_some(self.chunk_cache.as_ref());
        let mut written: Vec<Arc<ParquetFile>> = Vec::with_capacity(cuts.len().max(1));
        let mut write = |k: usize, rows: &arrow::array::RecordBatch| -> Result<(), StorageError> {
            let file = NewFile {
                table_dir: &table_dir,
                partition_start_ns: merge.partition_start_ns,
                id: first_id + k as u64,
                generation: merge.generation(),
            };
            written.push(parquet_write::write_file(
                &self.data,
                &file,
                rows,
                WriteContext {
                    options: &self.options,
                    chunk_cache,
                    clock: &self.compaction_clock,
                    threads: self.options.thread_count(),
                },
            )?);
            Ok(())
        };
        // one piece copied out at a time
        let result = match cuts.as_slice() {
            [] => write(0, &sorted),
            cuts => cuts
                .iter()
                .enumerate()
                .try_for_each(|(k, rows)| write(k, &take_record_batch(&sorted, rows)?)),
        };
        drop(sorted);
        let result = result.and_then(|()| self.swap_in(merge, &written));
        if !matches!(result, Ok(Some(_))) {
            // a catalog naming them may have landed (a store timed out) and reached query
            // nodes: they go as replaced files do, after the store's delete delay
            self.compactor.retire(written.clone());
        }
        match result? {
            None => Ok(None),
            Some(replaced) => {
                self.compactor.retire(replaced);
                Ok(Some(CompactionSummary {
                    compactions: 1,
                    files_in: merge.inputs.len() as u64,
                    files_out: written.len() as u64,
                    rows_in: merge.inputs.iter().map(|f| f.rows).sum(),
                    rows_out: written.iter().map(|f| f.entry.rows).sum(),
                    bytes_in: merge.inputs.iter().map(|f| f.bytes).sum(),
                    bytes_out: written.iter().map(|f| f.entry.bytes).sum(),
                }))
            }
        }
    }

    /// Takes `count` file ids from the catalog (ids are never reused, used or not).
    fn reserve_file_ids(&self, count: u64) -> Result<u64, StorageError> {
        let running = self.running.lock();
        if running.is_none() {
            return Err(StorageError::Closed);
        }
        let mut catalog = self.catalog.lock();
        let first = catalog.next_file_id;
        catalog.next_file_id += count;
        Ok(first)
    }

    /// Replaces `merge`'s inputs by `merged` in the catalog (durably, atomically) and in the
    /// table; returns the replaced files.
    /// `None` if the table was dropped meanwhile: then nothing changes.
    fn swap_in(
        &self,
        merge: &Merge,
        merged: &[Arc<ParquetFile>],
    ) -> Result<Option<Vec<Arc<ParquetFile>>>, StorageError> {
        let running = self.running.lock();
        if running.is_none() {
            return Err(StorageError::Closed);
        }
        let replaced: HashSet<u64> = merge.inputs.iter().map(|f| f.id).collect();
        let mut state = self.catalog.lock().clone();
        let table = self
            .databases
            .read()
            .get(&merge.database)
            .and_then(|db| db.table(&merge.table))
            .filter(|t| t.catalog_id() == merge.table_id);
        let entry = state
            .databases
            .get_mut(&merge.database)
            .and_then(|db| db.tables.get_mut(&merge.table))
            .filter(|t| t.id == merge.table_id);
        let (Some(table), Some(entry)) = (table, entry) else {
            return Ok(None);
        };
        let missing: Vec<&str> = merge
            .inputs
            .iter()
            .filter(|input| !entry.files.iter().any(|f| f.id == input.id))
            .map(|input| input.path.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(StorageError::Catalog(format!(
                "table {}.{}: merge inputs {} left the catalog while they were compacted",
                merge.database,
                merge.table,
                missing.join(", ")
            )));
        }
        let entries: Vec<FileEntry> = merged.iter().map(|f| f.entry.clone()).collect();
        entry.files = splice_merged(&entry.files, |f| f.id, &replaced, &entries).0;
        self.store_catalog(&mut state)?;
        *self.catalog.lock() = state;
        let replaced = table.replace_files(&replaced, merged);
        self.buffer.notify_rows_moved(std::iter::once(&table));
        Ok(Some(replaced))
    }
}

/// Why a merge failed, and the input to quarantine if an input could not be read.
#[derive(Debug)]
struct MergeFailure {
    pub unreadable: Option<FileEntry>,
    pub error: StorageError,
}

impl From<StorageError> for Box<MergeFailure> {
    fn from(error: StorageError) -> Self {
        Box::new(MergeFailure {
            unreadable: None,
            error,
        })
    }
}

/// The rows of `merge`'s inputs merged (sorted by series then time, later write winning per
/// field) under the merge's schema, the table's columns. An input that cannot be read is returned as
/// the error's subject so it can be quarantined. At most two copies of the rows are alive at
/// any moment (the read batches and their concatenation, then that and the sorted result).
fn read_merged(
    files: &Arc<dyn object_store::ObjectStore>,
    merge: &Merge,
    clock: &WriteClock,
) -> Result<RecordBatch, Box<MergeFailure>> {
    let mut batches = Vec::new();
    for input in &merge.inputs {
        clock
            .time(WriteStep::Read, || read_file(files, input, &mut batches))
            .map_err(|error| {
                Box::new(MergeFailure {
                    unreadable: Some(input.clone()),
                    error,
                })
            })?;
    }
    Ok(clock.time(WriteStep::Merge, || merge_chunks(&merge.schema, batches))?)
}

/// Appends the rows of the file `entry` names to `batches`.
fn read_file(
    files: &Arc<dyn object_store::ObjectStore>,
    entry: &FileEntry,
    batches: &mut Vec<RecordBatch>,
) -> Result<(), StorageError> {
    let file = crate::data_store::read_whole(files, entry)?;
    let unreadable = |e| StorageError::parquet(&entry.path, e);
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|builder| builder.with_batch_size(64 * 1024).build())
        .map_err(unreadable)?;
    for batch in reader {
        batches.push(batch.map_err(|e| unreadable(e.into()))?);
    }
    Ok(())
}

/// Where to cut `sorted` (one partition's rows, sorted by series then time) by time into
/// pieces of about `target_rows` rows whose time ranges do not overlap: each piece's row
/// indices, in order (so each piece keeps the order); empty when one piece holds it all.
fn time_cuts(sorted: &RecordBatch, target_rows: usize) -> Result<Vec<UInt32Array>, StorageError> {
    let rows = sorted.num_rows();
    let pieces = rows.div_ceil(target_rows.max(1));
    if pieces <= 1 {
        return Ok(Vec::new());
    }
    let mut times: Vec<i64> = time_column(sorted)?.values().to_vec();
    // piece k starts at the k-th quantile, found by selection, not a full sort (each
    // selection leaves larger values above it, so the next one searches only those); equal
    // quantiles collapse (one instant is never split across files)
    let mut starts = Vec::with_capacity(pieces - 1);
    let mut done = 0;
    for k in 1..pieces {
        let at = k * rows / pieces;
        let (_, quantile, _) = times[done..].select_nth_unstable(at - done);
        starts.push(*quantile);
        done = at;
    }
    starts.dedup();
    drop(times);
    let cuts = rows_by_time(sorted, |t| starts.partition_point(|s| *s <= t) as i64)?;
    Ok(match cuts.len() {
        1 => Vec::new(),
        _ => cuts.into_iter().map(|(_, rows)| rows).collect(),
    })
}

/// Rows per output file so that files come out at about `options.target_file_bytes`, judging
/// by the inputs' bytes per row.
fn target_rows(merge: &Merge, options: &CompactionOptions) -> usize {
    let rows: u64 = merge.inputs.iter().map(|f| f.rows).sum();
    let bytes: u64 = merge.inputs.iter().map(|f| f.bytes).sum();
    let per_row = (bytes as f64 / rows.max(1) as f64).max(1.0);
    ((options.target_file_bytes as f64 / per_row) as usize).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_cuts_at_quantiles_and_never_split_an_instant() {
        use arrow::array::{Int64Array, TimestampNanosecondArray};
        use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
            Field::new("v", DataType::Int64, true),
        ]));
        // two series, interleaved in time, sorted by series then time
        let times: Vec<i64> = (0..50).chain(0..50).collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(TimestampNanosecondArray::from(times).with_timezone("UTC")),
                Arc::new(Int64Array::from_iter_values(0..100)),
            ],
        )
        .unwrap();
        let split = |batch: &RecordBatch, target: usize| -> Vec<RecordBatch> {
            let cuts = time_cuts(batch, target).unwrap();
            if cuts.is_empty() {
                return vec![batch.clone()];
            }
            cuts.iter()
                .map(|rows| take_record_batch(batch, rows).unwrap())
                .collect()
        };
        let pieces = split(&batch, 30);
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces.iter().map(RecordBatch::num_rows).sum::<usize>(), 100);
        let ranges: Vec<(i64, i64)> = pieces
            .iter()
            .map(|p| crate::table_rows::time_range(std::slice::from_ref(p)).unwrap())
            .collect();
        for pair in ranges.windows(2) {
            assert!(pair[0].1 < pair[1].0, "pieces overlap: {ranges:?}");
        }
        // every piece keeps the rows' order (series then time): `v` numbers the rows
        for piece in &pieces {
            let v = piece
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            assert!(v.values().windows(2).all(|w| w[0] < w[1]), "{v:?}");
        }
        assert!(time_cuts(&batch, 1000).unwrap().is_empty());
        let same_instant = RecordBatch::try_new(
            batch.schema(),
            vec![
                Arc::new(TimestampNanosecondArray::from(vec![7; 10]).with_timezone("UTC")),
                Arc::new(Int64Array::from_iter_values(0..10)),
            ],
        )
        .unwrap();
        assert_eq!(split(&same_instant, 3).len(), 1);
    }
}

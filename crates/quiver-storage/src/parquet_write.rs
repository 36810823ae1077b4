//! Writing rows to Parquet files, for a persist (a table's buffered rows: one file per time
//! partition), a merge and a rollup: rows sorted by series key then time and deduplicated,
//! zstd-compressed, with row-group statistics and the page index (column and offset indexes) so
//! readers can prune by time and by tag. Also the options of persisting ([`PersistOptions`]).
//!
//! A file is encoded in memory and stored whole in the data store ([`DataStore::put`]:
//! fsynced with its directory, or one request to a bucket) before the catalog names it; a
//! file that no catalog names (the process died in between) is an orphan that the next start
//! finds ([`unnamed_files`]) and deletes.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::take_record_batch;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use quiver_model::durable_fs::{create_dir_durably, replace_durably, Access, TEMP_SUFFIX};
use quiver_model::schema::TIME_COLUMN;
use serde::{Deserialize, Serialize};

use crate::chunk_cache::ChunkCache;
use crate::data_store::DataStore;
use crate::dedup::series_key_and_fields;
use crate::error::StorageError;
use crate::file_entry::FileEntry;
use crate::table::{FrozenRows, ParquetFile};
use crate::table_rows::{merge_chunks, rows_by_time, time_range};

/// Directory (inside the data directory) that holds every table's Parquet files.
pub const TABLES_DIR: &str = "tables";

const NANOS_PER_HOUR: i64 = 3_600_000_000_000;
const NANOS_PER_DAY: i64 = 24 * NANOS_PER_HOUR;
/// Most rows in one data page of any column (see `writer_properties`): small enough that a
/// filter on one series reads a few pages, large enough that the page index stays small.
const PAGE_ROWS: usize = 8192;

/// When the buffer is persisted, and how files are laid out. The serde names are the server's
/// configuration keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PersistOptions {
    /// The write buffer is persisted to Parquet once it holds this many bytes of Arrow data.
    #[serde(rename = "persist_buffer_bytes")]
    pub persist_bytes: usize,
    /// Writes wait for persistence once the buffer holds this many bytes (and fail with 503 if
    /// persisting is failing): the bound on buffer memory.
    pub max_buffer_bytes: usize,
    /// The buffer is persisted once its oldest write is this old (whole seconds).
    #[serde(rename = "persist_max_age_secs", with = "quiver_model::settings::secs")]
    pub max_age: Duration,
    /// Length of a Parquet time partition, a whole number of hours (24: one directory per
    /// day).
    #[serde(rename = "partition_hours", with = "quiver_model::settings::hours")]
    pub partition: Duration,
    /// Rows per Parquet row group.
    #[serde(rename = "parquet_row_group_rows")]
    pub row_group_rows: usize,
    /// Writes wait at most this long (whole seconds) for a persist to make room below
    /// `max_buffer_bytes`; then they fail as busy ([`StorageError::BufferBusy`]: nothing of
    /// the write was taken).
    #[serde(rename = "max_buffer_wait_secs", with = "quiver_model::settings::secs")]
    pub max_buffer_wait: Duration,
    /// Threads one persist or compaction writes on: tables and time partitions in parallel,
    /// and the columns of one file (one table's merge runs on one of them); 0 means one per
    /// core. These threads run at `niceness`.
    #[serde(rename = "persist_threads")]
    pub threads: usize,
    /// The zstd level of Parquet pages (1 to 22): higher is smaller and slower to write.
    #[serde(rename = "parquet_zstd_level")]
    pub zstd_level: i32,
    /// The niceness (0 to 19) the persister's and the compactor's threads run at, and the
    /// threads they start: higher yields the cores to the request path more. 0 runs them
    /// like every other thread.
    #[serde(rename = "background_niceness")]
    pub niceness: i32,
    /// Writes a bloom filter per tag column and row group, so `tag = value` and `IN` skip row
    /// groups whose min/max statistics cannot rule the value out. Off by default: files are
    /// sorted by every tag, so page statistics already narrow a tag to a few pages, and the
    /// filters measured no faster (`scripts/bloom-bench.py`, BENCHMARKS.md).
    #[serde(rename = "parquet_bloom_filters")]
    pub bloom_filters: bool,
}

impl Default for PersistOptions {
    fn default() -> Self {
        PersistOptions {
            persist_bytes: 256 << 20,
            max_buffer_bytes: 512 << 20,
            max_age: Duration::from_secs(600),
            partition: Duration::from_secs(86_400),
            row_group_rows: 128 * 1024,
            max_buffer_wait: Duration::from_secs(10),
            threads: 0,
            zstd_level: 3,
            niceness: 10,
            bloom_filters: false,
        }
    }
}

impl PersistOptions {
    /// Checks the options make sense together, naming the offending one.
    pub fn validate(&self) -> Result<(), String> {
        let secs = self.partition.as_secs();
        if secs == 0 || !secs.is_multiple_of(3600) || self.partition.subsec_nanos() != 0 {
            return Err(format!(
                "partition_hours must be a whole, positive number of hours, got {} hours",
                self.partition.as_secs_f64() / 3600.0
            ));
        }
        if self.persist_bytes == 0 || self.max_buffer_bytes < self.persist_bytes {
            return Err(format!(
                "max_buffer_bytes ({}) must be at least persist_buffer_bytes ({}), which must be \
                 positive",
                self.max_buffer_bytes, self.persist_bytes
            ));
        }
        if self.row_group_rows == 0 {
            return Err("parquet_row_group_rows must be positive".into());
        }
        if !(0..=19).contains(&self.niceness) {
            return Err(format!(
                "background_niceness must be between 0 and 19, got {}",
                self.niceness
            ));
        }
        if ZstdLevel::try_new(self.zstd_level).is_err() {
            return Err(format!(
                "parquet_zstd_level must be between 1 and 22, got {}",
                self.zstd_level
            ));
        }
        Ok(())
    }

    /// The threads a persist uses (`threads`, or one per core when 0).
    pub(crate) fn thread_count(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }

    pub(crate) fn partition_ns(&self) -> i64 {
        self.partition.as_nanos() as i64
    }
}

/// Start of the partition holding `time_ns`.
fn partition_start(time_ns: i64, partition_ns: i64) -> i64 {
    time_ns.div_euclid(partition_ns) * partition_ns
}

/// Directory name of the partition starting at `start_ns`: `2026-11-23` for day-aligned
/// partitions, `2026-11-23T05` otherwise.
fn partition_label(start_ns: i64, partition_ns: i64) -> String {
    let time = chrono::DateTime::from_timestamp_nanos(start_ns);
    if partition_ns % NANOS_PER_DAY == 0 {
        time.format("%Y-%m-%d").to_string()
    } else {
        time.format("%Y-%m-%dT%H").to_string()
    }
}

/// How files are written: the options, the chunk cache that keeps new files' columns (if
/// any), where the time each step takes is counted, and how many threads may encode.
#[derive(Clone, Copy)]
pub(crate) struct WriteContext<'a> {
    /// Compression, row groups, partitions.
    pub options: &'a PersistOptions,
    /// Keeps each new file's columns decoded, if given.
    pub chunk_cache: Option<&'a ChunkCache>,
    /// Counts the time of each step.
    pub clock: &'a WriteClock,
    /// Threads one file's columns are encoded on.
    pub threads: usize,
}

/// The time a persist or a compaction spent in each step of writing files, summed since
/// start (what `/metrics` reports per step).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WriteTimes {
    /// Reading the input files (compaction; 0 for a persist, whose rows are in memory).
    pub read_seconds: f64,
    /// Merging rows into series-then-time order and deduplicating them.
    pub merge_seconds: f64,
    /// Encoding and compressing Parquet (each file's wall time, its columns encoded in
    /// parallel; files encoded at once are summed).
    pub encode_seconds: f64,
    /// Storing the encoded files durably (fsync, or an upload).
    pub store_seconds: f64,
}

/// Counts [`WriteTimes`] from several threads at once: nanoseconds per [`WriteStep`].
#[derive(Debug, Default)]
pub(crate) struct WriteClock([AtomicU64; 4]);

/// A step of writing files, as [`WriteClock`] counts it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WriteStep {
    Read,
    Merge,
    Encode,
    Store,
}

impl WriteClock {
    /// Runs `work`, counting its time as `step`.
    pub(crate) fn time<T>(&self, step: WriteStep, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = work();
        self.0[step as usize].fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }

    /// The times counted so far.
    pub(crate) fn times(&self) -> WriteTimes {
        let seconds = |step: WriteStep| self.0[step as usize].load(Ordering::Relaxed) as f64 / 1e9;
        WriteTimes {
            read_seconds: seconds(WriteStep::Read),
            merge_seconds: seconds(WriteStep::Merge),
            encode_seconds: seconds(WriteStep::Encode),
            store_seconds: seconds(WriteStep::Store),
        }
    }
}

/// Merges one table's frozen chunks and writes them as one Parquet file per time partition
/// (fsynced, directory fsynced), partitions on the context's threads and each file's columns
/// on the threads the partitions leave. File ids are taken from `next_file_id` (shared by the
/// tables one persist writes at once). On failure no file it wrote stays.
pub(crate) fn write_table_files(
    data: &DataStore,
    table_dir: &str,
    frozen: &FrozenRows,
    context: WriteContext<'_>,
    next_file_id: &AtomicU64,
) -> Result<Vec<Arc<ParquetFile>>, StorageError> {
    let partitions = context.clock.time(WriteStep::Merge, || {
        let sorted = merge_chunks(&frozen.schema, frozen.chunks.as_ref().clone())?;
        split_by_partition(&sorted, context.options.partition_ns())
    })?;
    let threads = context.threads;
    let per_file = WriteContext {
        threads: (threads / partitions.len().max(1)).max(1),
        ..context
    };
    let written = in_parallel(partitions.len(), threads, |k| {
        let (start, rows) = &partitions[k];
        let file = NewFile {
            table_dir,
            partition_start_ns: *start,
            id: next_file_id.fetch_add(1, Ordering::Relaxed),
            generation: 0,
        };
        write_file(data, &file, rows, per_file).map(|written| [written])
    });
    Ok(all_or_none(data, written)?.into_iter().flatten().collect())
}

/// The files if every write succeeded; otherwise the first error, after deleting the files
/// that were written (no catalog will name them).
pub(crate) fn all_or_none<T: AsRef<[Arc<ParquetFile>]>>(
    data: &DataStore,
    written: Vec<Result<T, StorageError>>,
) -> Result<Vec<T>, StorageError> {
    if written.iter().all(Result::is_ok) {
        return Ok(written.into_iter().flatten().collect());
    }
    let mut first_error = None;
    for result in written {
        match result {
            Ok(files) => delete_unnamed(data, files.as_ref()),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.expect("one write failed"))
}

/// Deletes files no catalog names; one left behind is an orphan the next start sweeps.
fn delete_unnamed(data: &DataStore, files: &[Arc<ParquetFile>]) {
    for file in files {
        if let Err(e) = data.delete(&file.entry.path) {
            tracing::warn!(error = %e, "could not delete a file no catalog names");
        }
    }
}

/// Runs `work(i)` for every `i` in `0..count` on up to `threads` scoped threads (each takes
/// the next index when it is done with one); returns the results in index order.
pub(crate) fn in_parallel<T: Send>(
    count: usize,
    threads: usize,
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let threads = threads.clamp(1, count.max(1));
    if threads == 1 {
        return (0..count).map(work).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Vec<parking_lot::Mutex<Option<T>>> =
        (0..count).map(|_| parking_lot::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                *results[i].lock() = Some(work(i));
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().expect("every index was worked on"))
        .collect()
}

/// Where a new Parquet file goes and what the catalog will say about it.
pub(crate) struct NewFile<'a> {
    /// `<database>/<table id>`: the table's directory under [`TABLES_DIR`].
    pub table_dir: &'a str,
    /// Start of the file's time partition (ns).
    pub partition_start_ns: i64,
    /// The file's id (never reused).
    pub id: u64,
    /// 0 for a persisted file, one more than its newest input for a compacted one.
    pub generation: u32,
}

/// Writes `rows` (sorted by series then time, deduplicated, all in one partition) as the file
/// `file` describes, durably, to `data`, and returns it; its columns are
/// kept in `chunk_cache`, if given, as the file's decoded columns ([`crate::decoded`]). (If
/// the file is then deleted because another write failed, those entries are never asked for:
/// file ids are not reused.)
pub(crate) fn write_file(
    data: &DataStore,
    file: &NewFile<'_>,
    rows: &RecordBatch,
    context: WriteContext<'_>,
) -> Result<Arc<ParquetFile>, StorageError> {
    let options = context.options;
    let relative = format!(
        "{TABLES_DIR}/{}/{}/{:016}.parquet",
        file.table_dir,
        partition_label(file.partition_start_ns, options.partition_ns()),
        file.id
    );
    let encoded = context.clock.time(WriteStep::Encode, || {
        encode_parquet(rows, writer_properties(rows, options)?, context.threads)
    })?;
    let bytes = encoded.len() as u64;
    // ids are never reused: in a shared store, an object of that name is another writer's
    context.clock.time(WriteStep::Store, || {
        data.put(&relative, encoded, data.is_shared())
    })?;
    let (min_time_ns, max_time_ns) =
        time_range(std::slice::from_ref(rows)).expect("a written file has rows");
    let written = Arc::new(ParquetFile {
        entry: FileEntry {
            id: file.id,
            path: relative,
            partition_start_ns: file.partition_start_ns,
            min_time_ns,
            max_time_ns,
            rows: rows.num_rows() as u64,
            bytes,
            generation: file.generation,
            arrow_bytes: crate::memory::data_bytes(rows) as u64,
        },
    });
    if let Some(chunk_cache) = context.chunk_cache {
        crate::decoded::keep_written_columns(&written, rows, chunk_cache);
    }
    Ok(written)
}

/// Splits sorted rows by time partition, keeping their order within each partition.
fn split_by_partition(
    batch: &RecordBatch,
    partition_ns: i64,
) -> Result<Vec<(i64, RecordBatch)>, StorageError> {
    let Some((min, max)) = time_range(std::slice::from_ref(batch)) else {
        return Ok(Vec::new());
    };
    let first = partition_start(min, partition_ns);
    if first == partition_start(max, partition_ns) {
        // the usual case: no per-row work
        return Ok(vec![(first, batch.clone())]);
    }
    rows_by_time(batch, |t| partition_start(t, partition_ns))?
        .into_iter()
        .map(|(start, rows)| Ok((start, take_record_batch(batch, &rows)?)))
        .collect()
}

/// `batch` as a Parquet file written with `properties`, in memory: row groups one after the
/// other, the columns of each encoded and compressed on up to `threads` threads.
fn encode_parquet(
    batch: &RecordBatch,
    properties: WriterProperties,
    threads: usize,
) -> Result<bytes::Bytes, StorageError> {
    let schema = batch.schema();
    let group_rows = properties
        .max_row_group_row_count()
        .unwrap_or(usize::MAX)
        .max(1);
    let writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties))?;
    let (mut file, columns) = writer.into_serialized_writer()?;
    let total = batch.num_rows();
    for (group, start) in (0..total).step_by(group_rows).enumerate() {
        let rows = batch.slice(start, group_rows.min(total - start));
        let mut leaves = Vec::with_capacity(rows.num_columns());
        for (field, column) in schema.fields().iter().zip(rows.columns()) {
            leaves.extend(compute_leaves(field, column)?);
        }
        // one column writer per leaf column, in the same order
        let jobs: Vec<_> = columns
            .create_column_writers(group)?
            .into_iter()
            .zip(leaves)
            .map(|job| parking_lot::Mutex::new(Some(job)))
            .collect();
        let chunks = in_parallel(jobs.len(), threads, |i| {
            let (mut writer, leaf) = jobs[i].lock().take().expect("each column once");
            writer.write(&leaf)?;
            writer.close()
        });
        let mut row_group = file.next_row_group()?;
        for chunk in chunks {
            ArrowColumnChunk::append_to_row_group(chunk?, &mut row_group)?;
        }
        row_group.close()?;
    }
    Ok(file.into_inner()?.into())
}

/// Writes `batch` to the local Parquet file `path` with `properties`, replacing any file of
/// that name, atomically and durably (see [`quiver_model::durable_fs`]); returns its size.
pub(crate) fn write_parquet_durably(
    path: &Path,
    batch: &RecordBatch,
    properties: WriterProperties,
) -> Result<u64, StorageError> {
    let dir = path.parent().expect("a file path has a parent");
    let name = path.file_name().expect("a file path has a name");
    let encoded = encode_parquet(batch, properties, 1)?;
    create_dir_durably(dir)?;
    replace_durably(dir, &name.to_string_lossy(), &encoded, Access::Default)?;
    Ok(encoded.len() as u64)
}

/// zstd, page-level statistics (which also writes the page index), the sort order recorded
/// as the file's sorting columns (every tag in schema order, then time) and, if asked, a
/// bloom filter per tag column sized for its distinct values.
///
/// Pages hold at most [`PAGE_ROWS`] rows in every column, so the page index of a tag column
/// is as fine as any other's: a sorted tag compresses a whole row group into one tiny page
/// otherwise, whose min and max span every series in it and prune nothing.
fn writer_properties(
    batch: &RecordBatch,
    options: &PersistOptions,
) -> Result<WriterProperties, StorageError> {
    let (series_key, _) = series_key_and_fields(&batch.schema())?;
    let sorting = series_key
        .iter()
        .map(|&i| SortingColumn {
            column_idx: i as i32,
            descending: false,
            nulls_first: true,
        })
        .collect();
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(options.zstd_level)?))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_max_row_group_row_count(Some(options.row_group_rows))
        .set_sorting_columns(Some(sorting));
    if options.bloom_filters {
        let schema = batch.schema();
        for &i in series_key
            .iter()
            .filter(|&&i| schema.field(i).name() != TIME_COLUMN)
        {
            let column = ColumnPath::from(schema.field(i).name().as_str());
            let distinct = distinct_upper_bound(batch.column(i)).min(options.row_group_rows);
            builder = builder
                .set_column_bloom_filter_enabled(column.clone(), true)
                .set_column_bloom_filter_fpp(column.clone(), BLOOM_FILTER_FPP)
                .set_column_bloom_filter_max_ndv(column, distinct.max(1) as u64);
        }
    }
    Ok(builder.build())
}

/// False-positive rate of the tag columns' bloom filters (about 9.6 bits per distinct value).
const BLOOM_FILTER_FPP: f64 = 0.01;

/// At most how many distinct values `column` holds: its dictionary's size for a dictionary
/// (how tags are held), else its length.
fn distinct_upper_bound(column: &arrow::array::ArrayRef) -> usize {
    match column.as_any_dictionary_opt() {
        Some(dictionary) => dictionary.values().len().min(column.len()),
        None => column.len(),
    }
}

/// What under the data store's `tables/` the catalog does not name: Parquet files of a
/// persist or merge that died before its catalog update, files replaced just before a
/// restart, and temporary files. `present` is what the store holds (one listing, see
/// [`crate::database::restore_databases`]).
pub(crate) fn unnamed_files(
    present: &[object_store::ObjectMeta],
    known: &HashSet<String>,
) -> Vec<Arc<ParquetFile>> {
    present
        .iter()
        .filter(|meta| {
            let path = meta.location.as_ref();
            (path.ends_with(".parquet") || path.ends_with(TEMP_SUFFIX)) && !known.contains(path)
        })
        .map(|meta| {
            Arc::new(ParquetFile {
                entry: FileEntry {
                    id: 0,
                    path: meta.location.to_string(),
                    partition_start_ns: 0,
                    min_time_ns: 0,
                    max_time_ns: 0,
                    rows: 0,
                    bytes: meta.size,
                    generation: 0,
                    arrow_bytes: 0,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_and_labels() {
        let day = NANOS_PER_DAY;
        assert_eq!(partition_start(day + 5, day), day);
        assert_eq!(partition_start(-1, day), -day);
        assert_eq!(partition_label(0, day), "1970-01-01");
        assert_eq!(
            partition_label(5 * NANOS_PER_HOUR, NANOS_PER_HOUR),
            "1970-01-01T05"
        );
        assert_eq!(partition_label(-day, day), "1969-12-31");
    }

    #[test]
    fn in_parallel_keeps_index_order_and_runs_everything_once() {
        let calls = AtomicUsize::new(0);
        for threads in [1, 2, 7] {
            let results = in_parallel(50, threads, |i| {
                calls.fetch_add(1, Ordering::Relaxed);
                i * i
            });
            assert_eq!(results, (0..50).map(|i| i * i).collect::<Vec<_>>());
        }
        assert_eq!(calls.load(Ordering::Relaxed), 150);
        assert!(in_parallel(0, 4, |i| i).is_empty());
    }

    #[test]
    fn bloom_filters_cover_the_tag_columns_only_when_asked() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
        let decoded = decode_line_protocol(
            b"cpu,host=a,dc=x v=1,n=2i 1\ncpu,host=b,dc=y v=2,n=3i 2\n",
            &DecodeOptions::for_tests(),
            &quiver_model::schema::NoExistingTables,
        );
        let batch = crate::sort_and_deduplicate(&decoded.tables[0].batch).unwrap();
        for bloom_filters in [false, true] {
            let options = PersistOptions {
                bloom_filters,
                ..PersistOptions::default()
            };
            let encoded =
                encode_parquet(&batch, writer_properties(&batch, &options).unwrap(), 2).unwrap();
            let reader = SerializedFileReader::new(encoded).unwrap();
            let row_group = reader.metadata().row_group(0);
            let with_filters: Vec<String> = (0..row_group.num_columns())
                .filter(|&i| row_group.column(i).bloom_filter_offset().is_some())
                .map(|i| row_group.column(i).column_path().string())
                .collect();
            let expected: &[&str] = if bloom_filters { &["dc", "host"] } else { &[] };
            assert_eq!(with_filters, expected);
        }
    }

    #[test]
    fn columns_encoded_on_several_threads_read_back_as_written() {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
        // tags (dictionaries), every field type, nulls (a field some rows lack)
        let lines: String = (0..1000)
            .map(|i| {
                let extra = if i % 3 == 0 {
                    format!(",s=\"t{i}\"")
                } else {
                    String::new()
                };
                format!(
                    "cpu,host=h{},dc=d{} v={i}.5,n={i}i,u={i}u,b={}{extra} {i}\n",
                    i % 7,
                    i % 2,
                    i % 2 == 0
                )
            })
            .collect();
        let decoded = decode_line_protocol(
            lines.as_bytes(),
            &DecodeOptions::for_tests(),
            &quiver_model::schema::NoExistingTables,
        );
        let batch = crate::sort_and_deduplicate(&decoded.tables[0].batch).unwrap();
        // row groups of 300 rows: four, the last one short
        let options = PersistOptions {
            row_group_rows: 300,
            ..PersistOptions::default()
        };
        let serial = encode_parquet(&batch, writer_properties(&batch, &options).unwrap(), 1);
        let parallel = encode_parquet(&batch, writer_properties(&batch, &options).unwrap(), 3);
        for encoded in [serial.unwrap(), parallel.unwrap()] {
            let reader = SerializedFileReader::new(encoded.clone()).unwrap();
            let row_groups: Vec<i64> = (0..reader.metadata().num_row_groups())
                .map(|i| reader.metadata().row_group(i).num_rows())
                .collect();
            assert_eq!(row_groups, [300, 300, 300, 100]);
            let read: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(encoded)
                .unwrap()
                .build()
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let read = arrow::compute::concat_batches(&read[0].schema(), &read).unwrap();
            // the same rows and the same Arrow types (tags stay dictionaries)
            assert_eq!(read.schema(), batch.schema());
            assert_eq!(read, batch);
        }
    }

    #[test]
    fn the_zstd_level_is_checked_and_used() {
        let bad = PersistOptions {
            zstd_level: 0,
            ..PersistOptions::default()
        };
        assert!(bad.validate().unwrap_err().contains("parquet_zstd_level"));
        let bad = PersistOptions {
            niceness: 20,
            ..PersistOptions::default()
        };
        assert!(bad.validate().unwrap_err().contains("background_niceness"));
        let times: Vec<i64> = (0..20_000i64)
            .map(|i| i * 2_654_435_761 % 1_000_003)
            .collect();
        let batch = RecordBatch::try_new(
            Arc::new(arrow::datatypes::Schema::new(vec![
                quiver_model::schema::ColumnType::Time.arrow_field(TIME_COLUMN),
            ])),
            vec![Arc::new(
                arrow::array::TimestampNanosecondArray::from(times).with_timezone("UTC"),
            )],
        )
        .unwrap();
        let size = |zstd_level| {
            let options = PersistOptions {
                zstd_level,
                ..PersistOptions::default()
            };
            let properties = writer_properties(&batch, &options).unwrap();
            encode_parquet(&batch, properties, 1).unwrap().len()
        };
        // the level reaches the compressor: the same rows compress differently
        assert_ne!(size(1), size(19));
    }

    #[test]
    fn a_failed_write_leaves_none_of_the_others_files() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataStore::directory(dir.path()).unwrap();
        let file = |name: &str| {
            std::fs::write(dir.path().join(name), b"x").unwrap();
            Arc::new(ParquetFile {
                entry: FileEntry {
                    id: 1,
                    path: name.into(),
                    partition_start_ns: 0,
                    min_time_ns: 0,
                    max_time_ns: 0,
                    rows: 1,
                    bytes: 1,
                    generation: 0,
                    arrow_bytes: 1,
                },
            })
        };
        let exists = |f: &ParquetFile| dir.path().join(&f.entry.path).exists();
        let (a, b) = (file("a.parquet"), file("b.parquet"));
        let failed = all_or_none(
            &data,
            vec![
                Ok(vec![a.clone()]),
                Err(StorageError::Catalog("disk full".into())),
                Ok(vec![b.clone()]),
            ],
        );
        assert!(failed.unwrap_err().to_string().contains("disk full"));
        assert!(!exists(&a) && !exists(&b));
        let c = file("c.parquet");
        let written = all_or_none(&data, vec![Ok(vec![c.clone()])]).unwrap();
        assert_eq!(written, vec![vec![c.clone()]]);
        assert!(exists(&c));
    }

    #[test]
    fn options_are_checked() {
        assert!(PersistOptions::default().validate().is_ok());
        let bad_partition = PersistOptions {
            partition: Duration::from_secs(90),
            ..PersistOptions::default()
        };
        assert!(bad_partition
            .validate()
            .unwrap_err()
            .contains("partition_hours must be a whole"));
        let bad_sizes = PersistOptions {
            persist_bytes: 10,
            max_buffer_bytes: 5,
            ..PersistOptions::default()
        };
        assert!(bad_sizes
            .validate()
            .unwrap_err()
            .contains("max_buffer_bytes"));
    }
}

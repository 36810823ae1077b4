//! One table's data: its schema (which only grows), its buffered Arrow chunks in write order,
//! the chunks being persisted, its Parquet files, its version, and the snapshot that queries
//! read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use parking_lot::RwLock;
use quiver_model::schema::ColumnType;

use crate::buffer_runs::{extend_runs, merge_into_one, Buffered, Run};
use crate::error::StorageError;
use crate::file_entry::FileEntry;
use crate::limits::StoreLimits;
use crate::retention::RetentionCell;
use crate::table_rows::{align_to_schema, schema_of, time_column};
use crate::time_versions::TimeVersions;

/// The last table version handed out in this process. Versions come from one counter for
/// every table, so a table dropped and created again under the same name never repeats a
/// version its predecessor had (caches key on names and versions).
static LAST_VERSION: AtomicU64 = AtomicU64::new(0);

/// A version no table of this process has had yet.
pub(crate) fn next_version() -> u64 {
    LAST_VERSION.fetch_add(1, Ordering::AcqRel) + 1
}

/// A consistent view of a table for one query: the buffered rows (deduplicated, sorted by
/// series key then time, "same series + same time: later write wins per field" applied) and
/// the Parquet files, taken at the same instant so that no row is in both or in neither.
///
/// Rows in `files` are older writes than rows in `batches`, and later files hold later writes
/// than earlier ones; readers merging overlapping sources must respect that order.
#[derive(Debug)]
pub struct TableSnapshot {
    /// The table version these rows reflect.
    pub version: u64,
    /// The table schema at that version (columns sorted by name).
    pub schema: SchemaRef,
    /// The buffered rows: one or more batches, each sorted by series then time, no point in
    /// two of them ([`crate::buffer_runs`]); one empty batch if nothing is buffered.
    pub batches: Vec<RecordBatch>,
    /// The table's Parquet files, in write order.
    pub files: Arc<Vec<Arc<ParquetFile>>>,
    /// Smallest and largest `time` of `batches`: computed once, read by every scan.
    buffer_range: Option<(i64, i64)>,
    /// The last rows of each series in `batches` ([`crate::latest`]), computed by the first
    /// last-point query that reads this snapshot.
    buffer_last_rows: std::sync::OnceLock<Vec<RecordBatch>>,
    /// Where each series begins in each of `batches` ([`crate::series`]), computed by the
    /// first query that asks.
    buffer_series: std::sync::OnceLock<Vec<Vec<usize>>>,
    /// The last [`crate::latest_rows`] answer over this snapshot, with the time it was since.
    latest_rows: parking_lot::Mutex<Option<(i64, RecordBatch)>>,
}

impl TableSnapshot {
    /// Number of buffered rows in the snapshot.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// Smallest and largest `time` of the buffered rows, if there are any.
    pub fn buffer_time_range(&self) -> Option<(i64, i64)> {
        self.buffer_range
    }

    /// The last rows of each series among the buffered rows (see [`crate::latest`]),
    /// computed once per snapshot.
    pub(crate) fn buffer_last_rows(&self) -> Result<&[RecordBatch], StorageError> {
        if let Some(rows) = self.buffer_last_rows.get() {
            return Ok(rows);
        }
        let rows = self
            .batches
            .iter()
            .zip(self.buffer_series_starts()?)
            .map(|(batch, starts)| crate::series::last_rows_of_runs(batch, starts))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.buffer_last_rows.get_or_init(|| rows))
    }

    /// The newest row of every series since `since_ns`, if the last answer computed over this
    /// snapshot was for that time ([`crate::latest_rows`]).
    pub(crate) fn kept_latest_rows(&self, since_ns: i64) -> Option<RecordBatch> {
        match &*self.latest_rows.lock() {
            Some((since, rows)) if *since == since_ns => Some(rows.clone()),
            _ => None,
        }
    }

    /// Keeps `rows` as the newest row of every series since `since_ns`.
    pub(crate) fn keep_latest_rows(&self, since_ns: i64, rows: &RecordBatch) {
        *self.latest_rows.lock() = Some((since_ns, rows.clone()));
    }

    /// Where each run of one series begins in each of `batches` (sorted by series then
    /// time; see [`crate::series`]), computed once per snapshot.
    pub fn buffer_series_starts(&self) -> Result<&[Vec<usize>], StorageError> {
        if let Some(starts) = self.buffer_series.get() {
            return Ok(starts);
        }
        let starts = self
            .batches
            .iter()
            .map(crate::series::batch_series_starts)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.buffer_series.get_or_init(|| starts))
    }

    /// The largest `time` the snapshot holds, buffered or in a file (files by their
    /// recorded range), if it holds any rows.
    pub fn newest_time(&self) -> Option<i64> {
        let files = self.files.iter().map(|f| f.entry.max_time_ns);
        files.chain(self.buffer_range.map(|(_, hi)| hi)).max()
    }

    /// The largest id of the snapshot's files (0 without files).
    pub fn newest_file_id(&self) -> u64 {
        self.files.iter().map(|f| f.entry.id).max().unwrap_or(0)
    }

    /// The smallest `time` the snapshot holds, buffered or in a file (files by their
    /// recorded range), if it holds any rows.
    pub fn oldest_time(&self) -> Option<i64> {
        let files = self.files.iter().map(|f| f.entry.min_time_ns);
        files.chain(self.buffer_range.map(|(lo, _)| lo)).min()
    }
}

/// One immutable Parquet file of a table, as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetFile {
    /// The catalog entry (id, partition, time range, rows, bytes, and its path in the data
    /// store).
    pub entry: FileEntry,
}

/// A table's buffered rows taken out of the live buffer by a persist, with what persisting
/// them needs to know.
pub(crate) struct FrozenRows {
    /// The table.
    pub table: Arc<Table>,
    /// Schema when frozen (every chunk is widened to it).
    pub schema: SchemaRef,
    /// Columns when frozen.
    pub columns: Vec<(String, ColumnType)>,
    /// Version when frozen: every write up to this version is in `chunks` or in files.
    pub version: u64,
    /// Chunks in write order.
    pub chunks: Arc<Vec<RecordBatch>>,
    /// Bytes the chunks were counted as when buffered.
    pub bytes: usize,
}

struct TableState {
    columns: BTreeMap<String, ColumnType>,
    schema: SchemaRef,
    /// The rows of earlier live chunks, merged by a snapshot into sorted runs (older first).
    runs: Vec<Run>,
    /// Chunks appended since the last freeze and not yet merged into `runs`, in write order,
    /// each with the schema it was written with.
    live: Vec<RecordBatch>,
    /// Bytes appended to `live` since the last freeze (as counted when appended, also once
    /// merged into `runs`).
    live_bytes: usize,
    /// Chunks being persisted (older than every live chunk), and their byte count.
    frozen: Option<(Arc<Vec<RecordBatch>>, usize)>,
    /// Persisted files in write order.
    files: Arc<Vec<Arc<ParquetFile>>>,
    version: u64,
    /// The version of each stretch of time ([`crate::time_versions`]).
    time_versions: TimeVersions,
    /// Set once the table is dropped: it takes no rows any more and its files are freed.
    dropped: bool,
    /// Bumped whenever chunks move between `live`, `frozen` and `files`, so a snapshot
    /// computed across such a move is neither cached nor used to compact `live`.
    generation: u64,
    snapshot: Option<Arc<TableSnapshot>>,
}

impl TableState {
    /// A new version for a change that may touch rows of any time.
    fn change_all_times(&mut self) {
        self.version = next_version();
        self.time_versions.raise_all(self.version);
    }
}

/// A table: a named, versioned, append-only set of rows with an evolving schema.
pub struct Table {
    database: String,
    name: String,
    /// Its database's retention period.
    retention: Arc<RetentionCell>,
    /// Its id in the catalog (0 until its first persist): tells it from an earlier table of
    /// the same name that was dropped.
    catalog_id: AtomicU64,
    state: RwLock<TableState>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("database", &self.database)
            .field("name", &self.name)
            .finish()
    }
}

impl Table {
    pub(crate) fn new(database: String, name: String, retention: Arc<RetentionCell>) -> Self {
        Table::restore(
            (database, name, retention, 0),
            Vec::new(),
            next_version(),
            Vec::new(),
        )
    }

    /// A table as the catalog recorded it: its database, name, retention and catalog id, its
    /// columns, version and files.
    pub(crate) fn restore(
        (database, name, retention, catalog_id): (String, String, Arc<RetentionCell>, u64),
        columns: Vec<(String, ColumnType)>,
        version: u64,
        files: Vec<Arc<ParquetFile>>,
    ) -> Self {
        LAST_VERSION.fetch_max(version, Ordering::AcqRel);
        let mut state = TableState {
            columns: BTreeMap::new(),
            schema: Arc::new(Schema::empty()),
            runs: Vec::new(),
            live: Vec::new(),
            live_bytes: 0,
            frozen: None,
            files: Arc::new(files),
            version,
            time_versions: TimeVersions::new(version),
            dropped: false,
            generation: 0,
            snapshot: None,
        };
        add_columns(&mut state, columns);
        Table {
            database,
            name,
            retention,
            catalog_id: AtomicU64::new(catalog_id),
            state: RwLock::new(state),
        }
    }

    /// The name of the database holding this table.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The table (measurement) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current Arrow schema: columns sorted by name.
    pub fn schema(&self) -> SchemaRef {
        self.state.read().schema.clone()
    }

    /// The current columns and their roles.
    pub fn columns(&self) -> Vec<(String, ColumnType)> {
        let state = self.state.read();
        state.columns.iter().map(|(n, t)| (n.clone(), *t)).collect()
    }

    /// The version: raised by every acknowledged write to this table and whenever a write adds
    /// columns (even before it is acknowledged, as the new columns are visible at once), and
    /// when the table is dropped; never reused, not even by another table of the same name.
    /// Two reads at one version (and one [`Table::retention_filter_ns`]) see the same rows and
    /// the same schema.
    pub fn version(&self) -> u64 {
        self.state.read().version
    }

    /// The table's version and, in the same instant, the version of the rows of each
    /// stretch of time `[start, end)` in `stretches` ([`crate::time_versions`]): a stretch's
    /// version changes whenever one of its rows may have, so a result computed from its rows
    /// at one version holds for every read at that version.
    pub fn time_versions(&self, stretches: &[(i64, i64)]) -> (u64, Vec<u64>) {
        let state = self.state.read();
        let versions = stretches
            .iter()
            .map(|&(start, end)| state.time_versions.of_range(start, end))
            .collect();
        (state.version, versions)
    }

    /// The oldest `time` (ns) a query running at `now_ns` may see (see
    /// [`crate::RetentionPeriod::cutoff_ns`]); `None` if the database keeps rows forever.
    pub fn retention_cutoff_ns(&self, now_ns: i64) -> Option<i64> {
        self.retention.get().cutoff_ns(now_ns)
    }

    /// The cutoff a read of `snapshot` at `now_ns` must filter rows by: `None` when the
    /// database keeps rows forever or no row of the snapshot is older than the cutoff. What a
    /// scan applies and what a cache keys on, so both agree.
    pub fn retention_filter_ns(&self, snapshot: &TableSnapshot, now_ns: i64) -> Option<i64> {
        self.retention_cutoff_ns(now_ns)
            .filter(|&cutoff| snapshot.oldest_time().is_some_and(|oldest| oldest < cutoff))
    }

    /// The table's id in the catalog; 0 before its first persist.
    pub(crate) fn catalog_id(&self) -> u64 {
        self.catalog_id.load(Ordering::Acquire)
    }

    /// Records the id the catalog gave the table at its first persist.
    pub(crate) fn set_catalog_id(&self, id: u64) {
        self.catalog_id.store(id, Ordering::Release);
    }

    /// Whether the table was dropped (a query that found it before may still read it).
    pub fn is_dropped(&self) -> bool {
        self.state.read().dropped
    }

    /// Bytes of Arrow data buffered for this table (live and being persisted).
    pub fn buffered_bytes(&self) -> usize {
        let state = self.state.read();
        state.live_bytes + state.frozen.as_ref().map_or(0, |(_, bytes)| *bytes)
    }

    /// The rows as of now: buffered rows deduplicated, plus the file list. Cached per
    /// version: repeated reads between writes cost an `Arc` clone. Computed outside the lock
    /// so writers are never blocked by it.
    pub fn snapshot(&self) -> Result<Arc<TableSnapshot>, StorageError> {
        let (version, generation, schema, frozen, runs, live, files) = {
            let state = self.state.read();
            if let Some(snapshot) = &state.snapshot {
                return Ok(snapshot.clone());
            }
            (
                state.version,
                state.generation,
                state.schema.clone(),
                state.frozen.as_ref().map(|(chunks, _)| chunks.clone()),
                state.runs.clone(),
                state.live.clone(),
                state.files.clone(),
            )
        };
        let buffered = match &frozen {
            // being persisted: everything merged into one batch, kept for this snapshot only
            // (a freeze took the runs, and no snapshot stores runs while one is frozen)
            Some(frozen) => {
                debug_assert!(runs.is_empty(), "runs beside frozen chunks");
                merge_into_one(&schema, frozen.iter().cloned().chain(live).collect())?
            }
            // only the chunks written since the last snapshot are sorted
            None => extend_runs(&schema, runs, live)?,
        };
        // the merges' sorts know where each series begins: no pass over the tags for it
        let buffer_series = std::sync::OnceLock::new();
        if let Some(starts) = buffered.series_starts() {
            let _ = buffer_series.set(starts);
        }
        let snapshot = Arc::new(TableSnapshot {
            version,
            batches: buffered.batches(&schema),
            schema,
            buffer_range: buffered.time_range(),
            files,
            buffer_last_rows: std::sync::OnceLock::new(),
            buffer_series,
            latest_rows: parking_lot::Mutex::new(None),
        });
        let mut state = self.state.write();
        if state.version == version
            && state.generation == generation
            && Arc::ptr_eq(&state.schema, &snapshot.schema)
        {
            if frozen.is_none() {
                // Nothing was written meanwhile: the snapshot's rows replace the chunks they
                // cover, so the next snapshot only sorts what arrives after it.
                match buffered {
                    Buffered::Runs(runs) => {
                        state.runs = runs;
                        state.live.clear();
                    }
                    Buffered::Rows(rows) => {
                        state.runs.clear();
                        state.live = vec![rows];
                    }
                }
            }
            state.snapshot = Some(snapshot.clone());
        }
        Ok(snapshot)
    }

    /// Moves the live chunks out for persisting (they stay readable until
    /// [`Table::complete_persist`]). `None` if nothing is buffered. The caller holds the
    /// store's apply gate, so the chunks are exactly the writes applied so far.
    pub(crate) fn freeze(self: &Arc<Self>) -> Option<FrozenRows> {
        let mut state = self.state.write();
        assert!(state.frozen.is_none(), "one persist at a time");
        if state.live.is_empty() && state.runs.is_empty() {
            return None;
        }
        let runs = std::mem::take(&mut state.runs)
            .into_iter()
            .map(|run| run.rows);
        let live = std::mem::take(&mut state.live);
        let chunks = Arc::new(runs.chain(live).collect::<Vec<_>>());
        let bytes = std::mem::take(&mut state.live_bytes);
        state.frozen = Some((chunks.clone(), bytes));
        // The cached snapshot still shows exactly these rows; a snapshot being computed now
        // must not put the chunks it read back into `live`.
        state.generation += 1;
        Some(FrozenRows {
            table: self.clone(),
            schema: state.schema.clone(),
            columns: state.columns.iter().map(|(n, t)| (n.clone(), *t)).collect(),
            version: state.version,
            chunks,
            bytes,
        })
    }

    /// Replaces the frozen chunks by the files they were persisted to: one pointer swap.
    pub(crate) fn complete_persist(&self, new_files: Vec<Arc<ParquetFile>>) {
        let mut state = self.state.write();
        let mut files = state.files.as_ref().clone();
        files.extend(new_files);
        state.files = Arc::new(files);
        state.frozen = None;
        state.generation += 1;
        state.snapshot = None;
    }

    /// Swaps compacted files in for the files they replace (by id), where the last replaced
    /// file was; returns the replaced files. The rows and the version stay the same.
    pub(crate) fn replace_files(
        &self,
        replaced: &std::collections::HashSet<u64>,
        merged: &[Arc<ParquetFile>],
    ) -> Vec<Arc<ParquetFile>> {
        self.splice_files(replaced, merged, false)
    }

    /// Takes files whose rows all expired out of the table; returns them. Unlike a
    /// compaction this changes the rows (a query with a longer retention period would have
    /// seen them), so the version moves on.
    pub(crate) fn remove_expired_files(
        &self,
        expired: &std::collections::HashSet<u64>,
    ) -> Vec<Arc<ParquetFile>> {
        self.splice_files(expired, &[], true)
    }

    /// Puts `merged` where the last of `replaced` was, in one step a snapshot sees whole;
    /// `new_version` if that changes the rows.
    fn splice_files(
        &self,
        replaced: &std::collections::HashSet<u64>,
        merged: &[Arc<ParquetFile>],
        new_version: bool,
    ) -> Vec<Arc<ParquetFile>> {
        let mut state = self.state.write();
        let (files, gone) = splice_merged(&state.files, |f| f.entry.id, replaced, merged);
        state.files = Arc::new(files);
        if new_version && !gone.is_empty() {
            state.change_all_times();
        }
        state.generation += 1;
        state.snapshot = None;
        gone
    }

    /// The retention period changed: which rows a query sees changed without a write (and
    /// rows may reappear where a longer period is set again), so the version moves on.
    pub(crate) fn retention_changed(&self) {
        let mut state = self.state.write();
        state.change_all_times();
        state.snapshot = None;
    }

    /// Marks the table dropped and lets go of its live rows (rows being persisted go when
    /// the persist ends); returns the buffer bytes released. The version moves on, so caches
    /// drop what they hold of the table.
    pub(crate) fn discard(&self) -> usize {
        let mut state = self.state.write();
        state.dropped = true;
        state.runs.clear();
        state.live.clear();
        state.change_all_times();
        state.generation += 1;
        state.snapshot = None;
        std::mem::take(&mut state.live_bytes)
    }

    /// Takes the table's files out (a dropped table's, to be deleted once unread).
    pub(crate) fn take_files(&self) -> Vec<Arc<ParquetFile>> {
        let mut state = self.state.write();
        state.generation += 1;
        state.snapshot = None;
        std::mem::take(&mut state.files).as_ref().clone()
    }

    /// Puts frozen chunks back in front of the live ones after a failed persist; returns the
    /// buffer bytes released instead if the table was dropped meanwhile.
    pub(crate) fn abort_persist(&self) -> usize {
        let mut state = self.state.write();
        if state.dropped {
            return state.frozen.take().map_or(0, |(_, bytes)| bytes);
        }
        if let Some((chunks, bytes)) = state.frozen.take() {
            // no snapshot stores runs while chunks are frozen
            debug_assert!(state.runs.is_empty(), "runs beside frozen chunks");
            let mut live = chunks.as_ref().clone();
            live.append(&mut state.live);
            state.live = live;
            state.live_bytes += bytes;
            state.generation += 1;
            state.snapshot = None;
        }
        0
    }
}

/// Rows for several tables that passed every check and whose new columns are already part of
/// their tables' schemas: applying them cannot fail. Produced by [`prepare_rows`], consumed by
/// [`apply_rows`] (directly, or by the WAL's commit thread once the write is durable).
pub struct PreparedRows(Vec<(Arc<Table>, RecordBatch)>);

impl std::fmt::Debug for PreparedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(t, b)| (&t.name, b.num_rows())))
            .finish()
    }
}

/// Checks batches for several tables as one unit and reserves their new columns: every target
/// table is locked (in name order, so concurrent writers cannot deadlock), every batch is
/// checked against its table's schema and limits, and only if all pass are the new columns
/// added (rows are added by [`apply_rows`]).
///
/// Fails without changing anything if a column's type conflicts with its table, a type is
/// outside the data model, or a table would exceed its column limit.
pub(crate) fn prepare_rows(
    mut items: Vec<(Arc<Table>, RecordBatch)>,
    limits: &StoreLimits,
) -> Result<PreparedRows, StorageError> {
    items.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if items.windows(2).any(|w| Arc::ptr_eq(&w[0].0, &w[1].0)) {
        // Merge batches of one table so that each lock is taken once.
        let mut merged: Vec<(Arc<Table>, RecordBatch)> = Vec::new();
        for (table, batch) in items {
            match merged.last_mut() {
                Some((last, existing)) if Arc::ptr_eq(last, &table) => {
                    *existing = concat_widening(existing, &batch)?;
                }
                _ => merged.push((table, batch)),
            }
        }
        items = merged;
    }
    let mut guards: Vec<_> = items.iter().map(|(t, _)| t.state.write()).collect();
    let mut plans = Vec::with_capacity(items.len());
    for ((table, batch), state) in items.iter().zip(&guards) {
        plans.push(table.new_columns(state, batch, limits)?);
    }
    for (state, added) in guards.iter_mut().zip(plans) {
        if !added.is_empty() {
            // Reserved columns are visible to queries now: a new schema is a new version.
            state.change_all_times();
            add_columns(state, added);
        }
    }
    drop(guards);
    Ok(PreparedRows(items))
}

impl PreparedRows {
    /// The tables the rows go to.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &Arc<Table>> {
        self.0.iter().map(|(table, _)| table)
    }

    /// Each table with its rows.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &(Arc<Table>, RecordBatch)> {
        self.0.iter()
    }
}

/// Appends prepared rows, all tables at once (readers see all of them or none), and returns
/// the bytes added to the buffer.
pub(crate) fn apply_rows(rows: &PreparedRows) -> usize {
    let mut guards: Vec<_> = rows.0.iter().map(|(t, _)| t.state.write()).collect();
    guards
        .iter_mut()
        .zip(rows.0.iter())
        .map(|(state, (_, batch))| match state.dropped {
            // never happens in log order (a drop follows every write prepared before it)
            true => 0,
            false => push_chunk(state, batch.clone()),
        })
        .sum()
}

impl Table {
    /// The columns `batch` would add to the table, after checking types and limits.
    fn new_columns(
        &self,
        state: &TableState,
        batch: &RecordBatch,
        limits: &StoreLimits,
    ) -> Result<Vec<(String, ColumnType)>, StorageError> {
        let mut added = Vec::new();
        for field in batch.schema().fields() {
            let column_type =
                ColumnType::from_arrow(field.name(), field.data_type()).ok_or_else(|| {
                    StorageError::UnsupportedColumn {
                        table: self.name.clone(),
                        column: field.name().clone(),
                        data_type: field.data_type().to_string(),
                    }
                })?;
            match state.columns.get(field.name()) {
                Some(existing) if *existing == column_type => {}
                Some(existing) => {
                    return Err(StorageError::SchemaConflict {
                        table: self.name.clone(),
                        column: field.name().clone(),
                        existing: existing.describe(),
                        written: column_type.describe(),
                    })
                }
                None => added.push((field.name().clone(), column_type)),
            }
        }
        if state.columns.len() + added.len() > limits.max_columns_per_table {
            return Err(StorageError::TooManyColumns {
                table: self.name.clone(),
                limit: limits.max_columns_per_table,
            });
        }
        Ok(added)
    }
}

fn add_columns(state: &mut TableState, added: Vec<(String, ColumnType)>) {
    if added.is_empty() {
        return;
    }
    state.columns.extend(added);
    state.schema = schema_of(&state.columns);
    state.snapshot = None;
}

fn push_chunk(state: &mut TableState, batch: RecordBatch) -> usize {
    let bytes = crate::memory::retained_bytes(&batch);
    state.live_bytes += bytes;
    state.version = next_version();
    match time_column(&batch) {
        Ok(times) => state.time_versions.raise_times(times, state.version),
        // never happens (every batch was checked): then the rows are of any time
        Err(_) => state.time_versions.raise_all(state.version),
    }
    state.live.push(batch);
    state.snapshot = None;
    bytes
}

/// Concatenates two batches of one table whose schemas may differ in their column sets.
fn concat_widening(a: &RecordBatch, b: &RecordBatch) -> Result<RecordBatch, StorageError> {
    let schema = Arc::new(Schema::try_merge([
        a.schema().as_ref().clone(),
        b.schema().as_ref().clone(),
    ])?);
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.sort_by(|x, y| x.name().cmp(y.name()));
    let schema = Arc::new(Schema::new(fields));
    let parts = [align_to_schema(a, &schema)?, align_to_schema(b, &schema)?];
    Ok(arrow::compute::concat_batches(&schema, &parts)?)
}

/// Replaces the items whose id is in `replaced` by `merged`, placed where the last replaced
/// item was (every other item keeps its place, so write order holds); returns the new list
/// and the replaced items.
pub(crate) fn splice_merged<T: Clone>(
    items: &[T],
    id: impl Fn(&T) -> u64,
    replaced: &std::collections::HashSet<u64>,
    merged: &[T],
) -> (Vec<T>, Vec<T>) {
    let last = items.iter().rposition(|item| replaced.contains(&id(item)));
    let mut kept = Vec::with_capacity(items.len() + merged.len());
    let mut gone = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if !replaced.contains(&id(item)) {
            kept.push(item.clone());
            continue;
        }
        gone.push(item.clone());
        if Some(i) == last {
            kept.extend_from_slice(merged);
        }
    }
    (kept, gone)
}

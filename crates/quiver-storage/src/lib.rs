//! `quiver-storage` owns where rows live: the catalog of databases and tables, each table's
//! schema (fixed column types, growing column set) and version, the in-memory write buffer of
//! Arrow batches, and the Parquet files the buffer is persisted to. Queries read a table
//! through a [`TableSnapshot`]: buffered rows and files taken at one instant.
//!
//! It knows nothing of SQL or protocols. Writes arrive as decoded Arrow batches
//! ([`quiver_model::schema::DecodedTable`]); every acknowledged write bumps the version
//! of each table it touched, which is what caches above key on.
//!
//! Durability: a write is logged in the WAL and applied to the buffer once durable. A
//! background persister freezes the buffer (a pointer swap per table, under the apply gate so
//! the frozen rows are exactly the writes up to one WAL sequence number), writes Parquet files,
//! replaces the catalog atomically, swaps the files in for the frozen rows, and only then
//! deletes the WAL segments the catalog now covers.

mod catalog;
mod dedup;
mod error;
mod memory;
mod persist;
mod table;
mod wal_record;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use quiver_model::schema::ColumnType;
use quiver_model::schema::{DecodedTable, SchemaLookup};
use quiver_wal::{Apply, Wal};

pub use catalog::{CatalogState, ColumnEntry, DatabaseEntry, FileEntry, TableEntry, CATALOG_FILE};
pub use dedup::{
    deduplicate_complete_runs, deduplicate_sorted, series_key_and_fields, sort_and_deduplicate,
};
pub use error::StorageError;
pub use memory::{data_bytes, retained_bytes};
pub use persist::{PersistOptions, TABLES_DIR};
pub use quiver_wal::{Durability, Recovery, ReplaySummary, WalError, WalOptions, WalStats};
pub use table::{ParquetFile, PreparedRows, Table, TableSnapshot};

use table::FrozenRows;

/// Bounds that keep hostile or runaway writes from exhausting memory.
#[derive(Debug, Clone)]
pub struct StoreLimits {
    /// Most databases a server holds.
    pub max_databases: usize,
    /// Most tables one database holds.
    pub max_tables_per_database: usize,
    /// Most columns (time, tags and fields) one table holds.
    pub max_columns_per_table: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_databases: 1_000,
            max_tables_per_database: 10_000,
            max_columns_per_table: 1_000,
        }
    }
}

/// Where a durable store keeps its data and when it persists.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The data directory: `catalog.json` and `tables/` live here.
    pub data_dir: PathBuf,
    /// The write-ahead log (usually in `<data_dir>/wal`).
    pub wal: WalOptions,
    /// Persistence thresholds and file layout.
    pub persist: PersistOptions,
}

impl StoreOptions {
    /// Options for tests and tools: data and WAL (`<dir>/wal`, 64 KiB segments, no fsync)
    /// in `dir`, persisting only when asked ([`Store::persist_now`]). Adjust fields as needed.
    pub fn for_tests(dir: &Path) -> Self {
        StoreOptions {
            data_dir: dir.to_path_buf(),
            wal: WalOptions {
                dir: dir.join("wal"),
                segment_bytes: 64 << 10,
                max_record_bytes: 1 << 30,
                fsync: false,
                recovery: Recovery::Strict,
            },
            persist: PersistOptions {
                persist_bytes: usize::MAX / 2,
                max_buffer_bytes: usize::MAX,
                max_age: Duration::from_secs(24 * 3600),
                ..PersistOptions::default()
            },
        }
    }
}

/// What [`Store::open`] found.
#[derive(Debug, Clone, Default)]
pub struct OpenSummary {
    /// The WAL replay (records skipped because already persisted are counted too).
    pub replay: ReplaySummary,
    /// WAL records applied to the buffer (newer than the catalog).
    pub replayed_records: u64,
    /// Parquet files the catalog names.
    pub files: usize,
    /// The WAL sequence number the catalog covers.
    pub persisted_through_seq: u64,
    /// Unreferenced Parquet files deleted (left by a persist that died before its catalog
    /// update).
    pub orphans_removed: usize,
}

/// What one persist did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistSummary {
    /// Tables persisted.
    pub tables: usize,
    /// Files written.
    pub files: usize,
    /// Rows written (after deduplication).
    pub rows: u64,
    /// Parquet bytes written.
    pub bytes: u64,
    /// Buffer bytes released.
    pub buffer_bytes: usize,
    /// The WAL sequence number the catalog now covers.
    pub through_seq: u64,
    /// WAL segments deleted.
    pub wal_segments_removed: usize,
}

/// Counters of persistence since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// Completed persists.
    pub persists: u64,
    /// Files written.
    pub files: u64,
    /// Rows written.
    pub rows: u64,
    /// Parquet bytes written.
    pub bytes: u64,
    /// Failed persists.
    pub failures: u64,
    /// Bytes in the write buffer now.
    pub buffered_bytes: usize,
}

/// State shared by writers, the WAL's commit thread (which applies durable writes) and the
/// persister.
struct Buffer {
    /// Held while a write is applied and while the buffer is frozen, so a freeze sees whole
    /// writes and knows the last sequence number it covers.
    gate: Mutex<Applied>,
    /// Bytes of Arrow data buffered (live and being persisted).
    bytes: AtomicUsize,
    /// Wakes the persister early (buffer over its threshold, or shutdown).
    signal: Mutex<PersisterSignal>,
    wake: Condvar,
    /// Wakes writers waiting for buffer space.
    space: tokio::sync::Notify,
    /// Persist once this many bytes are buffered (`usize::MAX` without persistence).
    persist_bytes: usize,
    /// Told about every applied write.
    listeners: RwLock<Vec<Arc<dyn TableChangeListener>>>,
}

/// Something that wants to know when a table's rows change (a cache keyed by table versions).
pub trait TableChangeListener: Send + Sync {
    /// Called after a write was applied to `table` (its [`Table::version`] already bumped) and
    /// before the write is acknowledged, on the thread applying writes: must be quick and must
    /// not write to the store.
    fn table_changed(&self, table: &Table);
}

#[derive(Default)]
struct Applied {
    /// Last WAL sequence number applied (0 without a WAL).
    seq: u64,
    /// When the oldest write not yet frozen was applied.
    oldest: Option<Instant>,
}

#[derive(Default)]
struct PersisterSignal {
    wake: bool,
    shutdown: bool,
}

impl Buffer {
    fn new(persist_bytes: usize) -> Self {
        Buffer {
            gate: Mutex::new(Applied::default()),
            bytes: AtomicUsize::new(0),
            signal: Mutex::new(PersisterSignal::default()),
            wake: Condvar::new(),
            space: tokio::sync::Notify::new(),
            persist_bytes,
            listeners: RwLock::new(Vec::new()),
        }
    }

    /// Applies durable rows (WAL sequence `seq`, 0 without a WAL), then tells the change
    /// listeners (before the write is acknowledged).
    fn apply(&self, seq: u64, rows: PreparedRows) {
        let mut applied = self.gate.lock();
        let added = table::apply_rows(&rows);
        applied.seq = applied.seq.max(seq);
        applied.oldest.get_or_insert_with(Instant::now);
        drop(applied);
        let listeners = self.listeners.read();
        for table in rows.tables() {
            for listener in listeners.iter() {
                listener.table_changed(table);
            }
        }
        drop(listeners);
        let total = self.bytes.fetch_add(added, Ordering::AcqRel) + added;
        if total >= self.persist_bytes {
            self.wake_persister();
        }
    }

    fn wake_persister(&self) {
        self.signal.lock().wake = true;
        self.wake.notify_one();
    }
}

/// The WAL's commit thread makes durable writes visible through this.
struct ApplyToTables(Arc<Buffer>);

impl Apply<PreparedRows> for ApplyToTables {
    fn apply(&mut self, seq: u64, rows: PreparedRows) {
        self.0.apply(seq, rows);
    }
}

/// The Parquet side of a durable store.
struct Persistence {
    /// The data directory, absolute and free of symlinks (see [`Store::open`]).
    data_dir: PathBuf,
    options: PersistOptions,
    /// The catalog as last written.
    catalog: Mutex<CatalogState>,
    /// One persist at a time (the background thread or [`Store::persist_now`]). Holds the
    /// data directory's lock (one process per directory) until [`Store::close`] releases it;
    /// `None` once closed, when nothing may be written any more.
    running: Mutex<Option<catalog::DataDirLock>>,
    /// The last persist's error, cleared by the next success.
    last_error: Mutex<Option<String>>,
    stats: Mutex<PersistStats>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// All databases of one server, the write-ahead log that makes their writes durable, and
/// the persistence of the buffer to Parquet.
pub struct Store {
    databases: RwLock<BTreeMap<String, Arc<Database>>>,
    limits: StoreLimits,
    /// Held while a write is checked, its columns reserved and its place in the log taken, so
    /// the log's order is the order in which writes were checked against the schema.
    sequencer: Mutex<()>,
    /// `None` for a memory-only store.
    wal: OnceLock<Wal<PreparedRows>>,
    buffer: Arc<Buffer>,
    /// `None` for a memory-only store.
    persistence: Option<Persistence>,
}

impl Default for Store {
    fn default() -> Self {
        Store::new(StoreLimits::default())
    }
}

impl Store {
    /// An empty store that keeps everything in memory only (no WAL, no files): for tests
    /// and tools.
    pub fn new(limits: StoreLimits) -> Self {
        Store {
            databases: RwLock::new(BTreeMap::new()),
            limits,
            sequencer: Mutex::new(()),
            wal: OnceLock::new(),
            buffer: Arc::new(Buffer::new(usize::MAX)),
            persistence: None,
        }
    }

    /// A durable store in `options.data_dir`: creates the directory, makes its path absolute
    /// (symlinks resolved, so every path derived from it holds whatever the working
    /// directory is), locks it against a second process, loads the catalog, deletes orphaned
    /// files, replays the WAL records the catalog does not cover, then accepts writes (each
    /// acknowledged as durable as it asks) and persists the buffer in the background.
    pub fn open(
        limits: StoreLimits,
        mut options: StoreOptions,
    ) -> Result<(Arc<Store>, OpenSummary), StorageError> {
        options.persist.validate().map_err(StorageError::Catalog)?;
        catalog::create_dir_durably(&options.data_dir)?;
        options.data_dir = std::fs::canonicalize(&options.data_dir)
            .map_err(|e| StorageError::io(&options.data_dir, e))?;
        let lock = catalog::DataDirLock::acquire(&options.data_dir)?;
        let state = catalog::load(&options.data_dir)?;
        let (databases, known) = restore_databases(&options.data_dir, &state, &limits)?;
        let orphans_removed = persist::remove_orphans(&options.data_dir, &known)?;
        let persisted = state.persisted_through_seq;
        let store = Arc::new(Store {
            databases: RwLock::new(databases),
            limits,
            sequencer: Mutex::new(()),
            wal: OnceLock::new(),
            buffer: Arc::new(Buffer::new(options.persist.persist_bytes)),
            persistence: Some(Persistence {
                data_dir: options.data_dir.clone(),
                options: options.persist.clone(),
                catalog: Mutex::new(state),
                running: Mutex::new(Some(lock)),
                last_error: Mutex::new(None),
                stats: Mutex::new(PersistStats::default()),
                thread: Mutex::new(None),
            }),
        });
        let mut replayed_records = 0;
        let (log, replay) = Wal::open(
            options.wal,
            |seq, payload| {
                if seq <= persisted {
                    return Ok(());
                }
                replayed_records += 1;
                store.replay_record(seq, payload).map_err(|e| e.to_string())
            },
            ApplyToTables(store.buffer.clone()),
        )?;
        if store.wal.set(log).is_err() {
            unreachable!("the WAL of a new store is set once");
        }
        store.start_persister()?;
        let summary = OpenSummary {
            replay,
            replayed_records,
            files: known.len(),
            persisted_through_seq: persisted,
            orphans_removed,
        };
        Ok((store, summary))
    }

    /// The absolute data directory of a durable store (catalog-relative file paths such as
    /// [`FileEntry::path`] are relative to it); `None` for a memory-only store.
    pub fn data_dir(&self) -> Option<&Path> {
        self.persistence.as_ref().map(|p| p.data_dir.as_path())
    }

    fn replay_record(&self, seq: u64, payload: &[u8]) -> Result<(), StorageError> {
        let (database, tables) = wal_record::decode(payload)?;
        let _order = self.sequencer.lock();
        let prepared = self.prepare(&database, tables)?;
        self.buffer.apply(seq, prepared);
        Ok(())
    }

    fn start_persister(self: &Arc<Self>) -> Result<(), StorageError> {
        let Some(persistence) = &self.persistence else {
            return Ok(());
        };
        let store = Arc::downgrade(self);
        let buffer = self.buffer.clone();
        let handle = std::thread::Builder::new()
            .name("quiver-persist".into())
            .spawn(move || run_persister(store, buffer))
            .map_err(|e| StorageError::io(&persistence.data_dir, e))?;
        *persistence.thread.lock() = Some(handle);
        Ok(())
    }

    /// Registers `listener` to be told about every write applied from now on.
    pub fn add_change_listener(&self, listener: Arc<dyn TableChangeListener>) {
        self.buffer.listeners.write().push(listener);
    }

    /// The database called `name`, if it exists.
    pub fn database(&self, name: &str) -> Option<Arc<Database>> {
        self.databases.read().get(name).cloned()
    }

    /// Names of all databases, sorted.
    pub fn database_names(&self) -> Vec<String> {
        self.databases.read().keys().cloned().collect()
    }

    /// WAL counters (`None` for a memory-only store).
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.wal.get().map(Wal::stats)
    }

    /// Persistence counters (`None` for a memory-only store).
    pub fn persist_stats(&self) -> Option<PersistStats> {
        self.persistence.as_ref().map(|p| PersistStats {
            buffered_bytes: self.buffer.bytes.load(Ordering::Acquire),
            ..p.stats.lock().clone()
        })
    }

    /// Writes decoded rows into `database` (created by its first write), atomically: every
    /// table gets its rows or none does, and a failed write creates no database or table.
    ///
    /// With a WAL, the write is logged and acknowledged (this future resolves) only once it is
    /// as durable as `durability` asks; it becomes visible to queries at that moment, never
    /// earlier, in log order. Without a WAL it is visible when this returns. When the buffer
    /// is full the write waits for the persister to make room (or fails if persisting fails).
    pub async fn write(
        &self,
        database: &str,
        tables: Vec<DecodedTable>,
        durability: Durability,
    ) -> Result<WriteReceipt, StorageError> {
        let rows = tables.iter().map(|t| t.batch.num_rows()).sum();
        validate_database_name(database)?;
        for table in &tables {
            validate_table_name(&table.name)?;
        }
        self.wait_for_buffer_space().await?;
        let wal = self.wal.get();
        let payload = match wal {
            Some(_) => Some(wal_record::encode(database, &tables)?),
            None => None,
        };
        let logged = {
            let _order = self.sequencer.lock();
            let prepared = self.prepare(database, tables)?;
            match (wal, payload) {
                (Some(wal), Some(payload)) => Some(wal.append(payload, prepared, durability)),
                _ => {
                    self.buffer.apply(0, prepared);
                    None
                }
            }
        };
        let sequence = match logged {
            Some(pending) => Some(pending.await?),
            None => None,
        };
        Ok(WriteReceipt { rows, sequence })
    }

    /// Waits while the buffer holds `max_buffer_bytes` or more; fails at once if the last
    /// persist failed (waiting could be forever, e.g. with a full disk).
    async fn wait_for_buffer_space(&self) -> Result<(), StorageError> {
        let Some(persistence) = &self.persistence else {
            return Ok(());
        };
        let limit = persistence.options.max_buffer_bytes;
        loop {
            let notified = self.buffer.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let buffered = self.buffer.bytes.load(Ordering::Acquire);
            if buffered < limit {
                return Ok(());
            }
            if let Some(reason) = persistence.last_error.lock().clone() {
                return Err(StorageError::BufferFull {
                    buffered,
                    limit,
                    reason,
                });
            }
            self.buffer.wake_persister();
            notified.await;
        }
    }

    /// Checks a write and reserves its tables and columns (must hold the sequencer).
    fn prepare(&self, name: &str, tables: Vec<DecodedTable>) -> Result<PreparedRows, StorageError> {
        if let Some(db) = self.database(name) {
            return db.prepare(tables);
        }
        validate_database_name(name)?;
        if self.databases.read().len() >= self.limits.max_databases {
            return Err(StorageError::TooManyDatabases {
                limit: self.limits.max_databases,
            });
        }
        let db = Arc::new(Database::new(name.to_string(), self.limits.clone()));
        let prepared = db.prepare(tables)?;
        self.databases.write().insert(name.to_string(), db);
        Ok(prepared)
    }

    /// Persists everything buffered now to Parquet and updates the catalog; returns what it
    /// did. The background persister calls this when the buffer is over its size or age
    /// threshold; tests and tools may call it directly. Memory-only stores have nothing to do.
    pub fn persist_now(&self) -> Result<PersistSummary, StorageError> {
        let Some(persistence) = &self.persistence else {
            return Ok(PersistSummary::default());
        };
        let one_at_a_time = persistence.running.lock();
        if one_at_a_time.is_none() {
            return Err(StorageError::Closed);
        }
        let (through_seq, frozen) = self.freeze_all();
        let mut state = persistence.catalog.lock().clone();
        if frozen.is_empty() {
            return Ok(PersistSummary {
                through_seq: state.persisted_through_seq,
                ..PersistSummary::default()
            });
        }
        match write_persisted(persistence, &mut state, &frozen, through_seq) {
            Ok(files) => Ok(self.complete_persist(persistence, state, frozen, files)),
            Err(e) => {
                for (_, rows) in &frozen {
                    rows.table.abort_persist();
                }
                self.buffer
                    .gate
                    .lock()
                    .oldest
                    .get_or_insert_with(Instant::now);
                persistence.stats.lock().failures += 1;
                *persistence.last_error.lock() = Some(e.to_string());
                self.buffer.space.notify_waiters();
                Err(e)
            }
        }
    }

    /// Freezes every table's live rows; returns the WAL sequence number they cover.
    fn freeze_all(&self) -> (u64, Vec<(String, FrozenRows)>) {
        let databases: Vec<Arc<Database>> = self.databases.read().values().cloned().collect();
        let mut applied = self.buffer.gate.lock();
        let mut frozen = Vec::new();
        for db in databases {
            let tables: Vec<Arc<Table>> = db.tables.read().values().cloned().collect();
            frozen.extend(
                tables
                    .iter()
                    .filter_map(Table::freeze)
                    .map(|rows| (db.name.clone(), rows)),
            );
        }
        applied.oldest = None;
        (applied.seq, frozen)
    }

    /// Swaps the written files in for the frozen rows, releases their buffer space and
    /// deletes the WAL segments the new catalog covers.
    fn complete_persist(
        &self,
        persistence: &Persistence,
        state: CatalogState,
        frozen: Vec<(String, FrozenRows)>,
        files: Vec<Vec<Arc<ParquetFile>>>,
    ) -> PersistSummary {
        let through_seq = state.persisted_through_seq;
        *persistence.catalog.lock() = state;
        let mut summary = PersistSummary {
            tables: frozen.len(),
            through_seq,
            ..PersistSummary::default()
        };
        for ((_, rows), files) in frozen.into_iter().zip(files) {
            summary.files += files.len();
            summary.rows += files.iter().map(|f| f.entry.rows).sum::<u64>();
            summary.bytes += files.iter().map(|f| f.entry.bytes).sum::<u64>();
            summary.buffer_bytes += rows.bytes;
            rows.table.complete_persist(files);
        }
        self.buffer
            .bytes
            .fetch_sub(summary.buffer_bytes, Ordering::AcqRel);
        *persistence.last_error.lock() = None;
        self.buffer.space.notify_waiters();
        if let Some(wal) = self.wal.get() {
            match wal.remove_segments_through(through_seq) {
                Ok(removed) => summary.wal_segments_removed = removed,
                // The segments are replayed and skipped next start, then removed.
                Err(e) => tracing::warn!(error = %e, "could not delete persisted WAL segments"),
            }
        }
        let mut stats = persistence.stats.lock();
        stats.persists += 1;
        stats.files += summary.files as u64;
        stats.rows += summary.rows;
        stats.bytes += summary.bytes;
        summary
    }

    /// Whether the buffer is over its size threshold or its oldest write over the age limit.
    fn should_persist(&self, options: &PersistOptions) -> bool {
        if self.buffer.bytes.load(Ordering::Acquire) >= options.persist_bytes {
            return true;
        }
        self.buffer
            .gate
            .lock()
            .oldest
            .is_some_and(|t| t.elapsed() >= options.max_age)
    }

    /// Stops the persister (letting a running persist finish), then the WAL's commit thread
    /// after syncing what it holds, then releases the data directory's lock; later writes
    /// and persists fail.
    pub fn close(&self) {
        if let Some(persistence) = &self.persistence {
            self.buffer.signal.lock().shutdown = true;
            self.buffer.wake.notify_one();
            if let Some(thread) = persistence.thread.lock().take() {
                let _ = thread.join();
            }
        }
        if let Some(wal) = self.wal.get() {
            wal.close();
        }
        if let Some(persistence) = &self.persistence {
            persistence.running.lock().take();
        }
    }
}

/// Writes the frozen rows' files and the catalog that names them (durably); returns the files
/// per frozen table. `state` becomes the new catalog.
fn write_persisted(
    persistence: &Persistence,
    state: &mut CatalogState,
    frozen: &[(String, FrozenRows)],
    through_seq: u64,
) -> Result<Vec<Vec<Arc<ParquetFile>>>, StorageError> {
    let mut written = Vec::with_capacity(frozen.len());
    for (database, rows) in frozen {
        let next_table_id = &mut state.next_table_id;
        let entry = state
            .databases
            .entry(database.clone())
            .or_default()
            .tables
            .entry(rows.table.name().to_string())
            .or_insert_with(|| {
                let id = *next_table_id;
                *next_table_id += 1;
                TableEntry {
                    id,
                    version: 0,
                    columns: Vec::new(),
                    files: Vec::new(),
                }
            });
        entry.version = rows.version;
        entry.columns = rows
            .columns
            .iter()
            .map(|(name, t)| ColumnEntry::new(name, *t))
            .collect();
        let files = persist::write_table_files(
            &persistence.data_dir,
            &format!("{database}/{}", entry.id),
            rows,
            &persistence.options,
            &mut state.next_file_id,
        )?;
        entry.files.extend(files.iter().map(|f| f.entry.clone()));
        written.push(files);
    }
    state.persisted_through_seq = state.persisted_through_seq.max(through_seq);
    catalog::store(&persistence.data_dir, state)?;
    Ok(written)
}

/// The persister thread: wakes every 100 ms or when signalled, persists when a threshold is
/// crossed, backs off for a second after a failure. Holds the store only while working, so
/// dropping the store ends it too.
fn run_persister(store: Weak<Store>, buffer: Arc<Buffer>) {
    let mut wait = Duration::from_millis(100);
    loop {
        {
            let mut signal = buffer.signal.lock();
            if !signal.wake && !signal.shutdown {
                buffer.wake.wait_for(&mut signal, wait);
            }
            if signal.shutdown {
                return;
            }
            signal.wake = false;
        }
        wait = Duration::from_millis(100);
        let Some(store) = store.upgrade() else {
            return;
        };
        let Some(persistence) = &store.persistence else {
            return;
        };
        if !store.should_persist(&persistence.options) {
            continue;
        }
        let started = Instant::now();
        match store.persist_now() {
            Ok(summary) => tracing::info!(
                tables = summary.tables,
                files = summary.files,
                rows = summary.rows,
                parquet_bytes = summary.bytes,
                buffer_bytes = summary.buffer_bytes,
                through_seq = summary.through_seq,
                wal_segments_removed = summary.wal_segments_removed,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "persisted the write buffer to Parquet"
            ),
            Err(e) => {
                tracing::error!(error = %e, "persisting the write buffer failed; retrying in 1 s");
                wait = Duration::from_secs(1);
            }
        }
    }
}

type DatabaseMap = BTreeMap<String, Arc<Database>>;

/// Builds the databases and tables the catalog records; returns them and the absolute paths
/// of every file it names.
fn restore_databases(
    data_dir: &Path,
    state: &CatalogState,
    limits: &StoreLimits,
) -> Result<(DatabaseMap, HashSet<PathBuf>), StorageError> {
    let mut databases = BTreeMap::new();
    let mut known = HashSet::new();
    for (name, entry) in &state.databases {
        let db = Database::new(name.clone(), limits.clone());
        for (table_name, table) in &entry.tables {
            let columns = table
                .columns
                .iter()
                .map(|c| Ok((c.name.clone(), c.column_type()?)))
                .collect::<Result<Vec<_>, StorageError>>()?;
            let files = table
                .files
                .iter()
                .map(|f| {
                    let path = data_dir.join(&f.path);
                    if !path.is_file() {
                        return Err(StorageError::Catalog(format!(
                            "table {name}.{table_name}: file {} named by the catalog is missing",
                            path.display()
                        )));
                    }
                    known.insert(path.clone());
                    Ok(Arc::new(ParquetFile {
                        entry: f.clone(),
                        path,
                    }))
                })
                .collect::<Result<Vec<_>, _>>()?;
            db.tables.write().insert(
                table_name.clone(),
                Arc::new(Table::restore(
                    name.clone(),
                    table_name.clone(),
                    columns,
                    table.version,
                    files,
                )),
            );
        }
        databases.insert(name.clone(), Arc::new(db));
    }
    Ok((databases, known))
}

/// Names SQL front ends use for their system schemas (the SQL standard's catalog views and
/// PostgreSQL's catalog); a database of that name would shadow them, so none may be created.
pub const RESERVED_DATABASE_NAMES: &[&str] = &["information_schema", "pg_catalog"];

/// Database names: 1–64 characters of ASCII letters, digits, `_` and `-`, starting with a
/// letter or digit (so they are usable unquoted as SQL schema names in most cases and safe as
/// directory names), and not one of [`RESERVED_DATABASE_NAMES`].
pub fn validate_database_name(name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if RESERVED_DATABASE_NAMES.contains(&name) {
        Some("it is reserved for a system schema")
    } else if name.len() > 64 {
        Some("it is longer than 64 characters")
    } else if !name.as_bytes()[0].is_ascii_alphanumeric() {
        Some("it must start with a letter or digit")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only ASCII letters, digits, '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StorageError::InvalidDatabaseName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// What one write did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriteReceipt {
    /// Rows appended.
    pub rows: usize,
    /// The write's WAL sequence number (`None` for a memory-only store).
    pub sequence: Option<u64>,
}

/// A database: a named set of tables.
pub struct Database {
    name: String,
    tables: RwLock<BTreeMap<String, Arc<Table>>>,
    limits: StoreLimits,
}

impl Database {
    fn new(name: String, limits: StoreLimits) -> Self {
        Database {
            name,
            tables: RwLock::new(BTreeMap::new()),
            limits,
        }
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table called `name`, if it exists.
    pub fn table(&self, name: &str) -> Option<Arc<Table>> {
        self.tables.read().get(name).cloned()
    }

    /// Names of all tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.read().keys().cloned().collect()
    }

    /// Checks decoded batches against their tables (creating tables on first write) and
    /// reserves new columns; all or nothing, and a failed write creates no table. The caller
    /// holds the store's sequencer.
    fn prepare(&self, tables: Vec<DecodedTable>) -> Result<PreparedRows, StorageError> {
        let mut created: Vec<Arc<Table>> = Vec::new();
        let mut items = Vec::with_capacity(tables.len());
        {
            let existing = self.tables.read();
            for decoded in tables {
                let known = existing
                    .get(&decoded.name)
                    .or_else(|| created.iter().find(|t| t.name() == decoded.name));
                let table = match known {
                    Some(table) => table.clone(),
                    None => {
                        validate_table_name(&decoded.name)?;
                        let table = Arc::new(Table::new(self.name.clone(), decoded.name.clone()));
                        created.push(table.clone());
                        table
                    }
                };
                items.push((table, decoded.batch));
            }
            if !created.is_empty()
                && existing.len() + created.len() > self.limits.max_tables_per_database
            {
                return Err(StorageError::TooManyTables {
                    database: self.name.clone(),
                    limit: self.limits.max_tables_per_database,
                });
            }
        }
        let prepared = table::prepare_rows(items, &self.limits)?;
        if !created.is_empty() {
            let mut existing = self.tables.write();
            for table in created {
                existing.insert(table.name().to_string(), table);
            }
        }
        Ok(prepared)
    }
}

/// Table names: non-empty and at most 512 bytes (checked before any write; the message says
/// which rule a name breaks).
pub fn validate_table_name(name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > 512 {
        "it is longer than 512 bytes"
    } else {
        return Ok(());
    };
    Err(StorageError::InvalidTableName {
        name: name.to_string(),
        reason,
    })
}

impl SchemaLookup for Database {
    fn existing_columns(&self, table: &str) -> Vec<(String, ColumnType)> {
        self.table(table).map(|t| t.columns()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions, Precision};
    use quiver_model::schema::NoExistingTables;

    fn decode(store: &Store, db: &str, lp: &str) -> Vec<DecodedTable> {
        let options = DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        let decoded = match store.database(db) {
            Some(db) => decode_line_protocol(lp.as_bytes(), &options, db.as_ref()),
            None => decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables),
        };
        assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
        decoded.tables
    }

    fn try_write(store: &Store, db: &str, lp: &str) -> Result<WriteReceipt, StorageError> {
        block_on(store.write(db, decode(store, db, lp), Durability::Sync))
    }

    fn write(store: &Store, db: &str, lp: &str) -> WriteReceipt {
        try_write(store, db, lp).unwrap()
    }

    fn rows(store: &Store, db: &str, table: &str) -> usize {
        store
            .database(db)
            .unwrap()
            .table(table)
            .unwrap()
            .snapshot()
            .unwrap()
            .num_rows()
    }

    #[test]
    fn schema_evolves_and_old_rows_read_null() {
        let store = Store::default();
        write(&store, "metrics", "cpu,host=a usage=1 1");
        write(&store, "metrics", "cpu,host=b,dc=x usage=2,idle=5i 2");
        let table = store.database("metrics").unwrap().table("cpu").unwrap();
        // Each write added columns (one version) and rows (another).
        assert_eq!(table.version(), 4);
        let snapshot = table.snapshot().unwrap();
        assert_eq!(snapshot.num_rows(), 2);
        let names: Vec<_> = snapshot
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["dc", "host", "idle", "time", "usage"]);
        let idle = snapshot.batches[0].column_by_name("idle").unwrap();
        assert_eq!(idle.null_count(), 1);
    }

    #[test]
    fn snapshots_are_cached_per_version_and_dedup_across_writes() {
        let store = Store::default();
        write(&store, "m", "cpu,host=a a=1,b=1 10");
        let table = store.database("m").unwrap().table("cpu").unwrap();
        let s1 = table.snapshot().unwrap();
        assert!(Arc::ptr_eq(&s1, &table.snapshot().unwrap()));
        write(&store, "m", "cpu,host=a a=2 10");
        let s2 = table.snapshot().unwrap();
        assert_eq!(s2.version, 3, "columns, rows, rows");
        assert_eq!(s2.num_rows(), 1, "same series and time is one point");
    }

    #[test]
    fn racing_type_conflict_is_rejected_whole() {
        let store = Store::default();
        // Both decoded before either is written, as two concurrent requests would be.
        let first = decode(&store, "m", "cpu v=1 1");
        let second = decode(&store, "m", "cpu v=1i 1");
        block_on(store.write("m", first, Durability::Sync)).unwrap();
        let err = block_on(store.write("m", second, Durability::Sync)).unwrap_err();
        assert!(err.to_string().contains("\"v\""), "{err}");
        assert_eq!(rows(&store, "m", "cpu"), 1);
    }

    #[test]
    fn limits_and_names() {
        assert!(validate_database_name("metrics_1-a").is_ok());
        assert!(validate_database_name("").is_err());
        assert!(validate_database_name("a/b").is_err());
        assert!(validate_database_name("_x").is_err());
        for reserved in RESERVED_DATABASE_NAMES {
            let error = validate_database_name(reserved).unwrap_err().to_string();
            assert!(error.contains("reserved"), "{error}");
        }
        let store = Store::new(StoreLimits {
            max_databases: 1,
            max_tables_per_database: 1,
            max_columns_per_table: 3,
        });
        write(&store, "a", "t1 v=1 1");
        assert!(matches!(
            try_write(&store, "b", "t1 v=1 1"),
            Err(StorageError::TooManyDatabases { .. })
        ));
        assert!(store.database("b").is_none());
        assert!(matches!(
            try_write(&store, "a", "t2 v=1 1"),
            Err(StorageError::TooManyTables { .. })
        ));
        assert!(matches!(
            try_write(&store, "a", "t1 v=1,w=2,x=3 1"),
            Err(StorageError::TooManyColumns { .. })
        ));
        assert!(matches!(
            try_write(&store, "bad name", "t v=1 1"),
            Err(StorageError::InvalidDatabaseName { .. })
        ));
    }

    #[test]
    fn a_failed_multi_table_write_changes_nothing() {
        let store = Store::default();
        write(&store, "m", "b v=1 1");
        // Decoded as if no table existed yet, as a writer racing another would have.
        let racing = decode(&Store::default(), "m", "a v=1 1\nb v=\"s\" 2");
        assert!(block_on(store.write("m", racing, Durability::Sync)).is_err());
        let db = store.database("m").unwrap();
        assert!(db.table("a").is_none(), "a failed write creates no table");
        assert_eq!(db.table("b").unwrap().version(), 2, "columns and rows");
        assert!(block_on(store.write(
            "fresh",
            decode(&store, "fresh", "x v=1 1"),
            Durability::Sync
        ))
        .is_ok());
    }

    fn options(dir: &std::path::Path) -> StoreOptions {
        let mut options = StoreOptions::for_tests(dir);
        options.wal.segment_bytes = 4096;
        options.wal.fsync = true;
        options
    }

    fn open(dir: &std::path::Path) -> (Arc<Store>, OpenSummary) {
        Store::open(StoreLimits::default(), options(dir)).unwrap()
    }

    #[test]
    fn writes_survive_a_restart_through_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, summary) = open(dir.path());
            assert_eq!(summary.replay.records, 0);
            for i in 0..50 {
                let receipt = write(
                    &store,
                    "m",
                    &format!("cpu,host=h{} v={i} {i}\nmem free={i}u {i}", i % 3),
                );
                assert_eq!(receipt.sequence, Some(i + 1));
            }
            write(&store, "other", "t s=\"text\",b=true 7");
            let conflicting = decode(&Store::default(), "m", "cpu v=\"conflict\" 1");
            assert!(block_on(store.write("m", conflicting, Durability::Sync)).is_err());
            store.close();
        }
        let (store, summary) = open(dir.path());
        assert_eq!(summary.replay.records, 51);
        assert_eq!(rows(&store, "m", "cpu"), 50);
        assert_eq!(rows(&store, "m", "mem"), 50);
        assert_eq!(rows(&store, "other", "t"), 1);
        // numbering continues after the replayed records
        assert_eq!(write(&store, "m", "cpu v=1 1000").sequence, Some(52));
    }

    /// Every row of a table, buffered and persisted, read back through Parquet and merged
    /// with "later write wins": what a query would see.
    fn all_rows(store: &Store, db: &str, table: &str) -> arrow::array::RecordBatch {
        let snapshot = store
            .database(db)
            .unwrap()
            .table(table)
            .unwrap()
            .snapshot()
            .unwrap();
        let mut chunks = Vec::new();
        for file in snapshot.files.iter() {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(&file.path).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap();
            chunks.extend(reader.map(Result::unwrap));
        }
        chunks.extend(snapshot.batches.iter().cloned());
        table::merge_chunks(&snapshot.schema, chunks.iter()).unwrap()
    }

    #[test]
    fn persisting_keeps_results_identical_and_survives_restart() {
        let dir = tempfile::tempdir().unwrap();
        let day = 86_400_000_000_000i64;
        let before;
        {
            let (store, _) = open(dir.path());
            for i in 0..40i64 {
                // two days, several series, and rewrites of earlier points
                let t = (i % 10) * day / 4;
                write(
                    &store,
                    "m",
                    &format!("cpu,host=h{} v={i},w={}i {t}", i % 3, i * 2),
                );
            }
            before = all_rows(&store, "m", "cpu");
            let summary = store.persist_now().unwrap();
            assert_eq!(summary.tables, 1);
            assert_eq!(summary.files, 3, "{summary:?}");
            assert_eq!(summary.rows as usize, before.num_rows());
            assert!(summary.wal_segments_removed > 0, "{summary:?}");
            let table = store.database("m").unwrap().table("cpu").unwrap();
            assert_eq!(table.buffered_bytes(), 0);
            assert_eq!(table.snapshot().unwrap().num_rows(), 0);
            assert_eq!(all_rows(&store, "m", "cpu"), before);
            // a later write overrides one persisted field of a persisted point
            write(&store, "m", "cpu,host=h0 v=-1 0");
            // 41 writes, the first of which also added the columns
            assert_eq!(table.version(), 42);
            store.close();
        }
        let catalog = catalog::load(dir.path()).unwrap();
        let files = &catalog.databases["m"].tables["cpu"].files;
        assert_eq!(files.len(), 3);
        assert!(files.iter().all(|f| f.path.starts_with("tables/m/1/197")));
        let (store, summary) = open(dir.path());
        assert_eq!(summary.files, 3);
        assert_eq!(summary.replayed_records, 1, "{summary:?}");
        let table = store.database("m").unwrap().table("cpu").unwrap();
        assert_eq!(table.version(), 42);
        let after = all_rows(&store, "m", "cpu");
        assert_eq!(after.num_rows(), before.num_rows());
        let v = after.column_by_name("v").unwrap();
        let v = v
            .as_any()
            .downcast_ref::<arrow::array::Float64Array>()
            .unwrap();
        assert_eq!(
            v.value(0),
            -1.0,
            "the later write wins over the persisted value"
        );
        assert_eq!(
            after.column_by_name("w").unwrap(),
            before.column_by_name("w").unwrap(),
            "fields the later write did not set keep their persisted values"
        );
        store.persist_now().unwrap();
        store.close();
        let (store, summary) = open(dir.path());
        assert_eq!(summary.replayed_records, 0);
        assert_eq!(all_rows(&store, "m", "cpu"), after);
    }

    #[test]
    fn one_store_per_data_directory_until_it_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (first, _) = open(dir.path());
        write(&first, "m", "cpu v=1 1");
        let alias = dir.path().join("./.");
        let err = Store::open(StoreLimits::default(), options(&alias))
            .err()
            .unwrap();
        assert!(matches!(err, StorageError::DataDirInUse { .. }), "{err}");
        assert!(err.to_string().contains("in use by another Quiver process"));
        first.close();
        assert!(matches!(first.persist_now(), Err(StorageError::Closed)));
        let (second, summary) = open(dir.path());
        assert_eq!(summary.replayed_records, 1);
        assert_eq!(
            second.data_dir(),
            Some(dir.path().canonicalize().unwrap().as_path())
        );
    }

    #[test]
    fn orphaned_files_are_removed_and_missing_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, _) = open(dir.path());
            write(&store, "m", "cpu v=1 1");
            store.persist_now().unwrap();
            store.close();
        }
        let orphan = dir
            .path()
            .join("tables/m/1/1970-01-01/0000000000000099.parquet");
        std::fs::write(&orphan, b"half-written").unwrap();
        let (store, summary) = open(dir.path());
        assert_eq!(summary.orphans_removed, 1);
        assert!(!orphan.exists());
        store.close();
        let catalog = catalog::load(dir.path()).unwrap();
        let file = &catalog.databases["m"].tables["cpu"].files[0];
        std::fs::remove_file(dir.path().join(&file.path)).unwrap();
        let err = Store::open(StoreLimits::default(), options(dir.path()))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is missing"), "{err}");
    }

    #[test]
    fn background_persistence_bounds_the_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = options(dir.path());
        options.persist.persist_bytes = 64 << 10;
        options.persist.max_buffer_bytes = 256 << 10;
        let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
        let mut expected = 0;
        for batch in 0..200 {
            let lines: String = (0..50)
                .map(|i| format!("cpu,host=h{} v={i} {}\n", i % 5, batch * 50 + i))
                .collect();
            write(&store, "m", &lines);
            expected += 50;
            let buffered = store.persist_stats().unwrap().buffered_bytes;
            assert!(buffered <= (256 + 64) << 10, "{buffered}");
        }
        let stats = store.persist_stats().unwrap();
        assert!(stats.persists > 0, "{stats:?}");
        assert_eq!(all_rows(&store, "m", "cpu").num_rows(), expected);
        store.close();
    }
}

//! The persister: the Parquet side of a durable store. It owns what persisting needs and
//! nothing else refers back to: the data directory (and its lock), the catalog as last
//! written, the write buffer's shared state, the map of databases whose tables it freezes, and
//! the WAL whose covered segments it deletes. A background thread persists when the buffer
//! passes its size or age threshold; [`crate::Store::persist_now`] persists on request.
//!
//! A persist freezes every table's live rows (a pointer swap per table, under the buffer's
//! gate, so the frozen rows are exactly the writes up to one WAL sequence number), writes one
//! Parquet file per table and partition (tables in parallel, `persist_threads`), replaces the
//! catalog atomically, swaps the files in for the frozen rows, and only then deletes the WAL
//! segments the catalog now covers.
//!
//! It also runs the merges the [`crate::compaction`] planner picks (a second background
//! thread, or [`crate::Store::compact_now`]): the catalog has one writer at a time, so a merge
//! reserves its file ids and swaps its files in under the same lock a persist holds, and
//! writes its files outside it. The same thread deletes files wholly past their database's
//! retention period, and files that compaction, retention or a drop replaced once no query
//! reads them.
//!
//! Drops reach the catalog with the first persist whose WAL position covers them (so a
//! restart never replays a drop the catalog already shows, nor loses one it does not); their
//! files are deleted once that catalog is durable. Database settings (retention) are written
//! to the catalog directly, under the same one-writer lock.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use arrow::compute::take_record_batch;
use parking_lot::{Mutex, RwLock};
use quiver_wal::Wal;

use crate::buffer::{Buffer, Change, Dropped};
use crate::catalog::{self, CatalogState, ColumnEntry, DataDirLock, FileEntry, TableEntry};
use crate::chunk_cache::ChunkCache;
use crate::compaction::{
    self, CompactionOptions, CompactionScope, CompactionStats, CompactionSummary, Compactor, Merge,
    MergeFailure,
};
use crate::data_store::DataStore;
use crate::database::{Database, DatabaseMap};
use crate::error::StorageError;
use crate::persist::{self, NewFile, PersistOptions};
use crate::retention;
use crate::table::{FrozenRows, ParquetFile, Table};

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
    /// Why the last persist failed, if it did (cleared by the next success): the writes
    /// since are acknowledged from the WAL and kept in the buffer until a persist succeeds.
    pub last_error: Option<String>,
    /// The catalog's version (how many times it was stored).
    pub catalog_version: u64,
}

/// The Parquet side of a durable store (see the module documentation).
pub(crate) struct Persister {
    /// The data directory, absolute and free of symlinks (see [`crate::Store::open`]).
    data_dir: PathBuf,
    options: PersistOptions,
    /// The catalog as last written.
    catalog: Mutex<CatalogState>,
    /// One persist at a time (the background thread or a request). Holds the data
    /// directory's lock (one process per directory) until [`Persister::close`] releases it;
    /// `None` once closed, when nothing may be written any more.
    running: Mutex<Option<DataDirLock>>,
    /// The last persist's error, cleared by the next success.
    last_error: Mutex<Option<String>>,
    stats: Mutex<PersistStats>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Compaction's planner state and counters.
    compactor: Arc<Compactor>,
    /// One merge at a time (the background thread or a request).
    merging: Mutex<()>,
    compactor_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Where replaced files are dropped from once deleted.
    chunk_cache: Arc<ChunkCache>,
    /// Where the catalog and the files are written, and compaction reads the files it merges.
    data: DataStore,
    buffer: Arc<Buffer>,
    databases: Arc<RwLock<DatabaseMap>>,
    /// Set once the WAL has been replayed (the replay writes through the store).
    wal: OnceLock<Wal<Change>>,
}

impl Persister {
    /// A persister for the store whose buffer and databases these are; `lock` is the data
    /// directory's, `catalog` the catalog as loaded.
    pub(crate) fn new(
        data_dir: PathBuf,
        options: PersistOptions,
        compaction: CompactionOptions,
        lock: DataDirLock,
        catalog: CatalogState,
        shared: (Arc<Buffer>, Arc<RwLock<DatabaseMap>>, Arc<ChunkCache>),
        data: DataStore,
    ) -> Self {
        let (buffer, databases, chunk_cache) = shared;
        Persister {
            data_dir,
            options,
            catalog: Mutex::new(catalog),
            running: Mutex::new(Some(lock)),
            last_error: Mutex::new(None),
            stats: Mutex::new(PersistStats::default()),
            thread: Mutex::new(None),
            compactor: Arc::new(Compactor::new(compaction)),
            merging: Mutex::new(()),
            compactor_thread: Mutex::new(None),
            chunk_cache,
            data,
            buffer,
            databases,
            wal: OnceLock::new(),
        }
    }

    /// Hands over the replayed WAL; from now on writes are logged to it.
    pub(crate) fn set_wal(&self, wal: Wal<Change>) {
        if self.wal.set(wal).is_err() {
            unreachable!("the WAL of a store is set once");
        }
    }

    /// The WAL, once replayed.
    pub(crate) fn wal(&self) -> Option<&Wal<Change>> {
        self.wal.get()
    }

    /// Counters since start, with the bytes buffered now.
    pub(crate) fn stats(&self) -> PersistStats {
        PersistStats {
            buffered_bytes: self.buffer.bytes.load(Ordering::Acquire),
            last_error: self.last_error.lock().clone(),
            catalog_version: self.catalog.lock().version,
            ..self.stats.lock().clone()
        }
    }

    /// Starts the background threads: the persister, and the maintainer (retention, file
    /// deletion, and merges unless compaction is turned off).
    pub(crate) fn start(self: &Arc<Self>) -> Result<(), StorageError> {
        let persister = Arc::downgrade(self);
        let buffer = self.buffer.clone();
        let handle = std::thread::Builder::new()
            .name("quiver-persist".into())
            .spawn(move || run_persister(persister, buffer))
            .map_err(|e| StorageError::io(&self.data_dir, e))?;
        *self.thread.lock() = Some(handle);
        let persister = Arc::downgrade(self);
        let compactor = self.compactor.clone();
        let handle = std::thread::Builder::new()
            .name("quiver-maintain".into())
            .spawn(move || run_maintainer(persister, compactor))
            .map_err(|e| StorageError::io(&self.data_dir, e))?;
        *self.compactor_thread.lock() = Some(handle);
        Ok(())
    }

    /// Compaction counters, and the layout of the files now.
    pub(crate) fn compaction_stats(&self) -> CompactionStats {
        self.compactor.stats(&self.catalog.lock())
    }

    /// The catalog as last written.
    pub(crate) fn catalog(&self) -> CatalogState {
        self.catalog.lock().clone()
    }

    /// One round of background upkeep: retention, then merges (if on), then deletions.
    fn maintain(&self) -> Result<(), StorageError> {
        let expired = self.expire(retention::now_ns())?;
        if expired > 0 {
            tracing::info!(files = expired, "deleted files past their retention period");
        }
        if self.compactor.options.enabled {
            self.compact(CompactionScope::default(), false)?;
        } else {
            self.compactor.delete_unread(&self.data, &self.chunk_cache);
        }
        Ok(())
    }

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
        let sorted = compaction::read_merged(self.data.objects(), merge)?;
        let cuts = compaction::time_cuts(&sorted, compaction::target_rows(merge, options))?;
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
            written.push(persist::write_file(
                &self.data,
                &file,
                rows,
                (&self.options, chunk_cache),
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
        entry.files = compaction::splice_merged(&entry.files, |f| f.id, &replaced, &entries).0;
        self.store_catalog(&mut state)?;
        *self.catalog.lock() = state;
        let replaced = table.replace_files(&replaced, merged);
        self.buffer.notify_rows_moved(std::iter::once(&table));
        Ok(Some(replaced))
    }

    /// Hands files no catalog names to be deleted once nothing reads them and the store's
    /// delete delay has passed ([`DataStore::delete_delay`]).
    pub(crate) fn retire(&self, files: Vec<Arc<ParquetFile>>) {
        self.compactor.retire(files);
    }

    /// Deletes the retired files that may go now; returns how many went.
    pub(crate) fn delete_unread(&self) -> usize {
        self.compactor.delete_unread(&self.data, &self.chunk_cache)
    }

    /// Stores `state` as the next catalog version. On failure its version and the file ids it
    /// names stay taken (the live catalog is raised past them): a store whose outcome is
    /// unknown (a timeout) may have landed, and no later catalog or file may reuse them.
    fn store_catalog(&self, state: &mut CatalogState) -> Result<(), StorageError> {
        let stored = catalog::store(&self.data, state);
        if stored.is_err() {
            let mut live = self.catalog.lock();
            live.version = live.version.max(state.version);
            live.next_file_id = live.next_file_id.max(state.next_file_id);
        }
        stored
    }

    /// Waits while the buffer holds `max_buffer_bytes` or more; fails at once if the last
    /// persist failed (waiting could be forever, e.g. with a full disk).
    pub(crate) async fn wait_for_buffer_space(&self) -> Result<(), StorageError> {
        let limit = self.options.max_buffer_bytes;
        loop {
            let notified = self.buffer.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let buffered = self.buffer.bytes.load(Ordering::Acquire);
            if buffered < limit {
                return Ok(());
            }
            if let Some(reason) = self.last_error.lock().clone() {
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

    /// Persists everything buffered now to Parquet and updates the catalog; returns what it
    /// did. The background persister calls this when the buffer is over its size or age
    /// threshold; tests and tools may call it directly. Memory-only stores have nothing to do.
    pub(crate) fn persist_now(&self) -> Result<PersistSummary, StorageError> {
        let one_at_a_time = self.running.lock();
        if one_at_a_time.is_none() {
            return Err(StorageError::Closed);
        }
        let (through_seq, frozen, databases) = self.freeze_all();
        let drops = self.take_pending_drops(through_seq);
        let mut state = self.catalog.lock().clone();
        if frozen.is_empty() && drops.is_empty() {
            return Ok(PersistSummary {
                through_seq: state.persisted_through_seq,
                ..PersistSummary::default()
            });
        }
        for (_, dropped) in &drops {
            remove_dropped(&mut state, dropped);
        }
        // a database outlives its tables (a restart finds it even when they were dropped)
        for name in databases {
            state.databases.entry(name).or_default();
        }
        match self.write_persisted(&mut state, &frozen, through_seq) {
            Ok(files) => {
                let summary = self.complete_persist(state, frozen, files);
                self.free_dropped(drops);
                Ok(summary)
            }
            Err(e) => {
                // the file ids it used stay taken, written or not
                let mut live = self.catalog.lock();
                live.next_file_id = live.next_file_id.max(state.next_file_id);
                drop(live);
                self.buffer.pending_drops.lock().splice(0..0, drops);
                let freed: usize = frozen
                    .iter()
                    .map(|(_, rows)| rows.table.abort_persist())
                    .sum();
                self.buffer
                    .notify_rows_moved(frozen.iter().map(|(_, rows)| &rows.table));
                self.buffer.release(freed);
                self.buffer
                    .gate
                    .lock()
                    .oldest
                    .get_or_insert_with(Instant::now);
                self.stats.lock().failures += 1;
                *self.last_error.lock() = Some(e.to_string());
                self.buffer.space.notify_waiters();
                Err(e)
            }
        }
    }

    /// The applied drops the WAL position `through_seq` covers, oldest first.
    fn take_pending_drops(&self, through_seq: u64) -> Vec<(u64, Dropped)> {
        let mut pending = self.buffer.pending_drops.lock();
        let (covered, later) = std::mem::take(&mut *pending)
            .into_iter()
            .partition(|(seq, _)| *seq <= through_seq);
        *pending = later;
        covered
    }

    /// Hands the files of dropped tables (now out of the durable catalog) to be deleted once
    /// no query reads them, and deletes what is unread now.
    fn free_dropped(&self, drops: Vec<(u64, Dropped)>) {
        if drops.is_empty() {
            return;
        }
        for (_, dropped) in drops {
            for table in dropped.tables {
                self.compactor.retire(table.take_files());
            }
        }
        self.compactor.delete_unread(&self.data, &self.chunk_cache);
    }

    /// Changes the catalog's database settings with `change`, stores it durably, then runs
    /// `stored` while still the catalog's one writer (so no expiry runs in between).
    pub(crate) fn configure(
        &self,
        change: impl FnOnce(&mut CatalogState),
        stored: impl FnOnce(),
    ) -> Result<(), StorageError> {
        let running = self.running.lock();
        if running.is_none() {
            return Err(StorageError::Closed);
        }
        let mut state = self.catalog.lock().clone();
        change(&mut state);
        self.store_catalog(&mut state)?;
        *self.catalog.lock() = state;
        stored();
        Ok(())
    }

    /// Whether a drop of `database` (or of one of its tables) is not in the catalog yet.
    pub(crate) fn drop_pending(&self, database: &str) -> bool {
        self.buffer
            .pending_drops
            .lock()
            .iter()
            .any(|(_, d)| d.database == database)
            || self
                .buffer
                .dropping
                .lock()
                .iter()
                .any(|(db, _)| db == database)
    }

    /// Deletes the files whose every row is past their database's retention period at
    /// `now_ns` (from the catalog, durably, then from the tables); returns how many.
    pub(crate) fn expire(&self, now_ns: i64) -> Result<usize, StorageError> {
        let _no_merge_meanwhile = self.merging.lock();
        let running = self.running.lock();
        if running.is_none() {
            return Err(StorageError::Closed);
        }
        let expired = self.expired_files(now_ns);
        if expired.is_empty() {
            return Ok(0);
        }
        let mut state = self.catalog.lock().clone();
        for (database, name, _, ids) in &expired {
            if let Some(entry) = state
                .databases
                .get_mut(database)
                .and_then(|db| db.tables.get_mut(name))
            {
                entry.files.retain(|f| !ids.contains(&f.id));
            }
        }
        self.store_catalog(&mut state)?;
        *self.catalog.lock() = state;
        drop(running);
        let mut count = 0;
        for (_, _, table, ids) in &expired {
            count += ids.len();
            self.compactor.retire(table.remove_expired_files(ids));
        }
        self.buffer
            .notify_listeners(expired.iter().map(|(_, _, table, _)| table));
        self.compactor.record_expired(count);
        self.compactor.delete_unread(&self.data, &self.chunk_cache);
        Ok(count)
    }

    /// The files past their database's retention period at `now_ns`, per existing table
    /// (database, name, table, file ids); a table being dropped is left to its drop. Reads the
    /// catalog without copying it: this runs every second.
    fn expired_files(&self, now_ns: i64) -> Vec<(String, String, Arc<Table>, HashSet<u64>)> {
        let databases: Vec<Arc<Database>> = self.databases.read().values().cloned().collect();
        let catalog = self.catalog.lock();
        let mut expired = Vec::new();
        for db in databases {
            let Some(cutoff) = db.retention_period().cutoff_ns(now_ns) else {
                continue;
            };
            let Some(entry) = catalog.databases.get(db.name()) else {
                continue;
            };
            for (name, table) in &entry.tables {
                let Some(live) = db.table(name).filter(|t| t.catalog_id() == table.id) else {
                    continue;
                };
                let ids = retention::expired_files(&table.files, cutoff);
                if !ids.is_empty() {
                    expired.push((db.name().to_string(), name.clone(), live, ids));
                }
            }
        }
        expired
    }

    /// Freezes every table's live rows; returns the WAL sequence number they cover, the rows,
    /// and the names of the databases.
    /// Tables being dropped (taken out, drop not applied yet) are frozen too: until the drop
    /// is applied their rows are acknowledged writes the catalog must cover.
    fn freeze_all(&self) -> (u64, Vec<(String, FrozenRows)>, Vec<String>) {
        let mut applied = self.buffer.gate.lock();
        let databases: Vec<Arc<Database>> = self.databases.read().values().cloned().collect();
        let names = databases.iter().map(|db| db.name().to_string()).collect();
        let mut tables: Vec<(String, Arc<Table>)> = databases
            .iter()
            .flat_map(|db| db.tables().into_iter().map(|t| (db.name().to_string(), t)))
            .collect();
        tables.extend(self.buffer.dropping.lock().iter().cloned());
        let frozen = tables
            .into_iter()
            .filter_map(|(db, table)| table.freeze().map(|rows| (db, rows)))
            .collect();
        applied.oldest = None;
        (applied.seq, frozen, names)
    }

    /// Swaps the written files in for the frozen rows, releases their buffer space and
    /// deletes the WAL segments the new catalog covers.
    fn complete_persist(
        &self,
        state: CatalogState,
        frozen: Vec<(String, FrozenRows)>,
        files: Vec<Vec<Arc<ParquetFile>>>,
    ) -> PersistSummary {
        let through_seq = state.persisted_through_seq;
        // the catalog ids were given to the tables as their files were written
        let touched: Vec<(u64, i64)> = frozen
            .iter()
            .zip(&files)
            .flat_map(|((_, rows), files)| {
                let id = rows.table.catalog_id();
                files.iter().map(move |f| (id, f.entry.partition_start_ns))
            })
            .collect();
        *self.catalog.lock() = state;
        self.compactor.files_added(touched);
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
            self.buffer.notify_rows_moved(std::iter::once(&rows.table));
        }
        *self.last_error.lock() = None;
        self.buffer.release(summary.buffer_bytes);
        if let Some(wal) = self.wal.get() {
            match wal.remove_segments_through(through_seq) {
                Ok(removed) => summary.wal_segments_removed = removed,
                // The segments are replayed and skipped next start, then removed.
                Err(e) => tracing::warn!(error = %e, "could not delete persisted WAL segments"),
            }
        }
        let mut stats = self.stats.lock();
        stats.persists += 1;
        stats.files += summary.files as u64;
        stats.rows += summary.rows;
        stats.bytes += summary.bytes;
        summary
    }

    /// Whether the buffer is over its size threshold or its oldest write over the age limit.
    fn should_persist(&self) -> bool {
        let options = &self.options;
        if self.buffer.bytes.load(Ordering::Acquire) >= options.persist_bytes {
            return true;
        }
        self.buffer
            .gate
            .lock()
            .oldest
            .is_some_and(|t| t.elapsed() >= options.max_age)
    }

    /// Writes the frozen rows' files and the catalog that names them (durably); returns the
    /// files per frozen table. `state` becomes the new catalog.
    fn write_persisted(
        &self,
        state: &mut CatalogState,
        frozen: &[(String, FrozenRows)],
        through_seq: u64,
    ) -> Result<Vec<Vec<Arc<ParquetFile>>>, StorageError> {
        // the tables' catalog entries first (ids, versions, columns), in order
        let mut table_dirs = Vec::with_capacity(frozen.len());
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
            rows.table.set_catalog_id(entry.id);
            entry.columns = rows
                .columns
                .iter()
                .map(|(name, t)| ColumnEntry::new(name, *t))
                .collect();
            table_dirs.push(format!("{database}/{}", entry.id));
        }
        // then their files: tables in parallel, and partitions of a table in parallel with
        // the threads the tables leave
        let threads = self.options.thread_count();
        let per_table = (threads / frozen.len().max(1)).max(1);
        let next_file_id = AtomicU64::new(state.next_file_id);
        let results = persist::in_parallel(frozen.len(), threads, |i| {
            persist::write_table_files(
                &self.data,
                &table_dirs[i],
                &frozen[i].1,
                (&self.options, &self.chunk_cache),
                &next_file_id,
                per_table,
            )
        });
        state.next_file_id = next_file_id.into_inner();
        let written = persist::all_or_none(&self.data, results)?;
        for ((database, rows), files) in frozen.iter().zip(&written) {
            let entry = state
                .databases
                .get_mut(database)
                .and_then(|db| db.tables.get_mut(rows.table.name()))
                .expect("created above");
            entry.files.extend(files.iter().map(|f| f.entry.clone()));
        }
        state.persisted_through_seq = state.persisted_through_seq.max(through_seq);
        self.store_catalog(state)?;
        Ok(written)
    }

    /// Stops the compactor (letting a running merge finish) and the persister thread (letting
    /// a running persist finish), then the WAL's commit thread after syncing what it holds,
    /// then releases the data directory's lock.
    pub(crate) fn close(&self) {
        self.compactor.shut_down();
        if let Some(thread) = self.compactor_thread.lock().take() {
            let _ = thread.join();
        }
        self.buffer.signal.lock().shutdown = true;
        self.buffer.wake.notify_one();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
        if let Some(wal) = self.wal.get() {
            wal.close();
        }
        self.running.lock().take();
    }
}

/// The persister thread: wakes every 100 ms or when signalled, persists when a threshold is
/// crossed, backs off for a second after a failure. Holds the persister only while working,
/// so dropping the store ends it too.
fn run_persister(persister: Weak<Persister>, buffer: Arc<Buffer>) {
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
        let Some(persister) = persister.upgrade() else {
            return;
        };
        if !persister.should_persist() {
            continue;
        }
        let started = Instant::now();
        match persister.persist_now() {
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

/// The maintainer thread: after each persist and every second, deletes files past their
/// retention period and runs the merges that are due (unless compaction is off), then
/// deletes replaced files no query reads; backs off for ten seconds after a failure. Holds
/// the persister only while working.
fn run_maintainer(persister: Weak<Persister>, compactor: Arc<Compactor>) {
    let mut wait = Duration::from_secs(1);
    while compactor.wait(wait) {
        let Some(persister) = persister.upgrade() else {
            return;
        };
        wait = match persister.maintain() {
            Ok(()) => Duration::from_secs(1),
            Err(StorageError::Closed) => return,
            Err(e) => {
                tracing::error!(error = %e, "storage maintenance failed; retrying in 10 s");
                Duration::from_secs(10)
            }
        };
    }
}

/// Takes a dropped table, or a dropped database with all its tables, out of the catalog.
/// Only tables created before the drop can be there: a table of the same name created
/// after it reaches the catalog in a persist that applies the drop first.
fn remove_dropped(state: &mut CatalogState, dropped: &Dropped) {
    match &dropped.table {
        Some(table) => {
            if let Some(db) = state.databases.get_mut(&dropped.database) {
                db.tables.remove(table);
            }
        }
        None => {
            state.databases.remove(&dropped.database);
        }
    }
}

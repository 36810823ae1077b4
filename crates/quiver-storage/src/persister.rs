//! The persister: the Parquet side of a durable store. It owns what persisting needs and
//! nothing else refers back to: the data directory (and its lock), the catalog as last
//! written, the write buffer's shared state, the map of databases whose tables it freezes, and
//! the WAL whose covered segments it deletes. A background thread persists when the buffer
//! passes its size or age threshold; [`crate::Store::persist_now`] persists on request.
//!
//! A persist freezes every table's live rows (a pointer swap per table, under the buffer's
//! gate, so the frozen rows are exactly the writes up to one WAL sequence number), writes one
//! Parquet file per table and partition (tables in parallel, `persist_threads`, through
//! [`crate::parquet_write`]), replaces the catalog atomically, swaps the files in for the
//! frozen rows, and only then deletes the WAL segments the catalog now covers.
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
//!
//! This file holds the persister, a persist and the catalog writes; the rest of the persister
//! is in `impl Persister` blocks beside what they serve: its threads in [`crate::background`],
//! merges in `compaction/merge.rs`, expiry in [`crate::retention`] (hence the `pub(crate)`
//! fields).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use quiver_wal::Wal;

use crate::buffer::{Buffer, Change, Dropped};
use crate::catalog::{self, CatalogState, ColumnEntry, DataDirLock, TableEntry};
use crate::chunk_cache::ChunkCache;
use crate::compaction::{CompactionOptions, CompactionStats, Compactor};
use crate::data_store::DataStore;
use crate::database::{Database, DatabaseMap};
use crate::error::StorageError;
use crate::parquet_write::{self, PersistOptions, WriteClock, WriteContext, WriteTimes};
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
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// The buffer size at which a persist starts (`persist_buffer_bytes`).
    pub persist_at_bytes: usize,
    /// The buffer size at which writes wait for a persist (`max_buffer_bytes`).
    pub buffer_limit_bytes: usize,
    /// How long the oldest acknowledged write not yet in a Parquet file has waited (the
    /// persist lag); `None` when every acknowledged write is persisted.
    pub unpersisted_for: Option<Duration>,
    /// Writes that found the buffer full and waited for a persist to make room.
    pub write_waits: u64,
    /// The time those writes waited, summed.
    pub write_wait_time: Duration,
    /// Writes that waited `max_buffer_wait` without room being made and were refused.
    pub write_refusals: u64,
    /// The time persists spent merging, encoding and storing, summed.
    pub times: WriteTimes,
}

/// The Parquet side of a durable store (see the module documentation).
pub(crate) struct Persister {
    /// The data directory, absolute and free of symlinks (see [`crate::Store::open`]).
    pub(crate) data_dir: PathBuf,
    pub(crate) options: PersistOptions,
    /// The catalog as last written.
    pub(crate) catalog: Mutex<CatalogState>,
    /// One persist at a time (the background thread or a request). Holds the data
    /// directory's lock (one process per directory) until [`Persister::close`] releases it;
    /// `None` once closed, when nothing may be written any more.
    pub(crate) running: Mutex<Option<DataDirLock>>,
    /// The last persist's error, cleared by the next success.
    last_error: Mutex<Option<String>>,
    /// When the oldest write of the rows a running persist froze was applied (`None` when
    /// no persist runs): with the buffer's oldest unfrozen write, the persist lag.
    persisting_since: Mutex<Option<Instant>>,
    stats: Mutex<PersistStats>,
    /// Counts the time persists spend in each step.
    persist_clock: WriteClock,
    /// Counts the time compactions spend in each step.
    pub(crate) compaction_clock: WriteClock,
    pub(crate) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Compaction's planner state and counters.
    pub(crate) compactor: Arc<Compactor>,
    /// One merge at a time (the background thread or a request).
    pub(crate) merging: Mutex<()>,
    pub(crate) compactor_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Where replaced files are dropped from once deleted.
    pub(crate) chunk_cache: Arc<ChunkCache>,
    /// Where the catalog and the files are written, and compaction reads the files it merges.
    pub(crate) data: DataStore,
    pub(crate) buffer: Arc<Buffer>,
    pub(crate) databases: Arc<RwLock<DatabaseMap>>,
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
            persisting_since: Mutex::new(None),
            stats: Mutex::new(PersistStats::default()),
            persist_clock: WriteClock::default(),
            compaction_clock: WriteClock::default(),
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

    /// Counters since start, with the bytes buffered now, the buffer's thresholds and the
    /// persist lag.
    pub(crate) fn stats(&self) -> PersistStats {
        let unfrozen = self.buffer.gate.lock().oldest;
        let frozen = *self.persisting_since.lock();
        PersistStats {
            buffered_bytes: self.buffer.bytes.load(Ordering::Acquire),
            last_error: self.last_error.lock().clone(),
            catalog_version: self.catalog.lock().version,
            persist_at_bytes: self.options.persist_bytes,
            buffer_limit_bytes: self.options.max_buffer_bytes,
            unpersisted_for: frozen
                .into_iter()
                .chain(unfrozen)
                .min()
                .map(|t| t.elapsed()),
            times: self.persist_clock.times(),
            ..self.stats.lock().clone()
        }
    }

    /// Compaction counters, and the layout of the files now.
    pub(crate) fn compaction_stats(&self) -> CompactionStats {
        CompactionStats {
            times: self.compaction_clock.times(),
            ..self.compactor.stats(&self.catalog.lock())
        }
    }

    /// The catalog as last written.
    pub(crate) fn catalog(&self) -> CatalogState {
        self.catalog.lock().clone()
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
    pub(crate) fn store_catalog(&self, state: &mut CatalogState) -> Result<(), StorageError> {
        let stored = catalog::store(&self.data, state);
        if stored.is_err() {
            let mut live = self.catalog.lock();
            live.version = live.version.max(state.version);
            live.next_file_id = live.next_file_id.max(state.next_file_id);
        }
        stored
    }

    /// Waits while the buffer holds `max_buffer_bytes` or more, at most `max_buffer_wait`
    /// when called on a Tokio runtime (as every request is; elsewhere, e.g. a test's plain
    /// executor, without a bound); fails at once if the last persist failed (waiting could be
    /// forever, e.g. with a full disk), and once the wait is over.
    pub(crate) async fn wait_for_buffer_space(&self) -> Result<(), StorageError> {
        let limit = self.options.max_buffer_bytes;
        let mut waiting_since = None;
        let deadline = tokio::runtime::Handle::try_current()
            .is_ok()
            .then(|| tokio::time::Instant::now() + self.options.max_buffer_wait);
        loop {
            let notified = self.buffer.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let buffered = self.buffer.bytes.load(Ordering::Acquire);
            let failure = self.last_error.lock().clone();
            if buffered < limit || failure.is_some() {
                if let Some(since) = waiting_since {
                    self.count_wait(since);
                }
                return match failure.filter(|_| buffered >= limit) {
                    None => Ok(()),
                    Some(reason) => Err(StorageError::BufferFull {
                        buffered,
                        limit,
                        reason,
                    }),
                };
            }
            let since = *waiting_since.get_or_insert_with(Instant::now);
            self.buffer.wake_persister();
            let Some(deadline) = deadline else {
                notified.await;
                continue;
            };
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.count_wait(since);
                self.stats.lock().write_refusals += 1;
                return Err(StorageError::BufferBusy {
                    buffered: self.buffer.bytes.load(Ordering::Acquire),
                    limit,
                    waited: self.options.max_buffer_wait,
                });
            }
        }
    }

    /// Counts a write that waited for buffer space since `since`.
    fn count_wait(&self, since: Instant) {
        let mut stats = self.stats.lock();
        stats.write_waits += 1;
        stats.write_wait_time += since.elapsed();
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
                // the rows are buffered again, as old as they were
                let since = self.persisting_since.lock().take();
                let mut applied = self.buffer.gate.lock();
                applied.oldest = applied.oldest.into_iter().chain(since).min();
                applied.oldest.get_or_insert_with(Instant::now);
                drop(applied);
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
        let frozen: Vec<_> = tables
            .into_iter()
            .filter_map(|(db, table)| table.freeze().map(|rows| (db, rows)))
            .collect();
        let oldest = applied.oldest.take();
        *self.persisting_since.lock() = oldest.filter(|_| !frozen.is_empty());
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
        *self.persisting_since.lock() = None;
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
        let per_table = WriteContext {
            options: &self.options,
            chunk_cache: Some(&self.chunk_cache),
            clock: &self.persist_clock,
            threads: (threads / frozen.len().max(1)).max(1),
        };
        let next_file_id = AtomicU64::new(state.next_file_id);
        let results = parquet_write::in_parallel(frozen.len(), threads, |i| {
            parquet_write::write_table_files(
                &self.data,
                &table_dirs[i],
                &frozen[i].1,
                per_table,
                &next_file_id,
            )
        });
        state.next_file_id = next_file_id.into_inner();
        let written = parquet_write::all_or_none(&self.data, results)?;
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

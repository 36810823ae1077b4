//! The persister: the Parquet side of a durable store. It owns what persisting needs and
//! nothing else refers back to: the data directory (and its lock), the catalog as last
//! written, the write buffer's shared state, the map of databases whose tables it freezes, and
//! the WAL whose covered segments it deletes. A background thread persists when the buffer
//! passes its size or age threshold; [`crate::Store::persist_now`] persists on request.
//!
//! A persist freezes every table's live rows (a pointer swap per table, under the buffer's
//! gate, so the frozen rows are exactly the writes up to one WAL sequence number), writes one
//! Parquet file per table and partition, replaces the catalog atomically, swaps the files in
//! for the frozen rows, and only then deletes the WAL segments the catalog now covers.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use quiver_wal::Wal;

use crate::buffer::Buffer;
use crate::catalog::{self, CatalogState, ColumnEntry, DataDirLock, TableEntry};
use crate::database::{Database, DatabaseMap};
use crate::error::StorageError;
use crate::persist::{self, PersistOptions};
use crate::table::{FrozenRows, ParquetFile, PreparedRows, Table};

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
    buffer: Arc<Buffer>,
    databases: Arc<RwLock<DatabaseMap>>,
    /// Set once the WAL has been replayed (the replay writes through the store).
    wal: OnceLock<Wal<PreparedRows>>,
}

impl Persister {
    /// A persister for the store whose buffer and databases these are; `lock` is the data
    /// directory's, `catalog` the catalog as loaded.
    pub(crate) fn new(
        data_dir: PathBuf,
        options: PersistOptions,
        lock: DataDirLock,
        catalog: CatalogState,
        buffer: Arc<Buffer>,
        databases: Arc<RwLock<DatabaseMap>>,
    ) -> Self {
        Persister {
            data_dir,
            options,
            catalog: Mutex::new(catalog),
            running: Mutex::new(Some(lock)),
            last_error: Mutex::new(None),
            stats: Mutex::new(PersistStats::default()),
            thread: Mutex::new(None),
            buffer,
            databases,
            wal: OnceLock::new(),
        }
    }

    /// Hands over the replayed WAL; from now on writes are logged to it.
    pub(crate) fn set_wal(&self, wal: Wal<PreparedRows>) {
        if self.wal.set(wal).is_err() {
            unreachable!("the WAL of a store is set once");
        }
    }

    /// The WAL, once replayed.
    pub(crate) fn wal(&self) -> Option<&Wal<PreparedRows>> {
        self.wal.get()
    }

    /// The absolute data directory.
    pub(crate) fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// Counters since start, with the bytes buffered now.
    pub(crate) fn stats(&self) -> PersistStats {
        PersistStats {
            buffered_bytes: self.buffer.bytes.load(Ordering::Acquire),
            ..self.stats.lock().clone()
        }
    }

    /// Starts the background thread.
    pub(crate) fn start(self: &Arc<Self>) -> Result<(), StorageError> {
        let persister = Arc::downgrade(self);
        let buffer = self.buffer.clone();
        let handle = std::thread::Builder::new()
            .name("quiver-persist".into())
            .spawn(move || run_persister(persister, buffer))
            .map_err(|e| StorageError::io(&self.data_dir, e))?;
        *self.thread.lock() = Some(handle);
        Ok(())
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
        let (through_seq, frozen) = self.freeze_all();
        let mut state = self.catalog.lock().clone();
        if frozen.is_empty() {
            return Ok(PersistSummary {
                through_seq: state.persisted_through_seq,
                ..PersistSummary::default()
            });
        }
        match self.write_persisted(&mut state, &frozen, through_seq) {
            Ok(files) => Ok(self.complete_persist(state, frozen, files)),
            Err(e) => {
                for (_, rows) in &frozen {
                    rows.table.abort_persist();
                }
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

    /// Freezes every table's live rows; returns the WAL sequence number they cover.
    fn freeze_all(&self) -> (u64, Vec<(String, FrozenRows)>) {
        let databases: Vec<Arc<Database>> = self.databases.read().values().cloned().collect();
        let mut applied = self.buffer.gate.lock();
        let mut frozen = Vec::new();
        for db in databases {
            frozen.extend(
                db.tables()
                    .iter()
                    .filter_map(Table::freeze)
                    .map(|rows| (db.name().to_string(), rows)),
            );
        }
        applied.oldest = None;
        (applied.seq, frozen)
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
        *self.catalog.lock() = state;
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
        *self.last_error.lock() = None;
        self.buffer.space.notify_waiters();
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
                &self.data_dir,
                &format!("{database}/{}", entry.id),
                rows,
                &self.options,
                &mut state.next_file_id,
            )?;
            entry.files.extend(files.iter().map(|f| f.entry.clone()));
            written.push(files);
        }
        state.persisted_through_seq = state.persisted_through_seq.max(through_seq);
        catalog::store(&self.data_dir, state)?;
        Ok(written)
    }

    /// Stops the thread (letting a running persist finish), then the WAL's commit thread
    /// after syncing what it holds, then releases the data directory's lock.
    pub(crate) fn close(&self) {
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

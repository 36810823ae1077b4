//! `quiver-storage` owns where rows live: the catalog of databases and tables, each table's
//! schema (fixed column types, growing column set) and version, the in-memory write buffer of
//! Arrow batches, and the Parquet files the buffer is persisted to. Queries read a table
//! through a [`TableSnapshot`]: buffered rows and files taken at one instant.
//!
//! It knows nothing of SQL or protocols. Writes arrive as decoded Arrow batches
//! ([`quiver_model::schema::DecodedTable`]); every acknowledged write bumps the version
//! of each table it touched, which is what caches above key on.
//!
//! Durability: a write is logged in the WAL and applied to the buffer once durable; the
//! [`persister`] writes the buffer to Parquet in the background ([`background`]).
//!
//! Modules: [`Store`] here (writes, lookups, persists and compactions on request, close),
//! configured by [`options`], opened (and recovered from the WAL) by [`open`] and changed by
//! [`ddl`] (databases, tables, their settings, rollups and caches); under it [`database`]
//! (databases and the checks a write passes), [`limits`] (names and counts allowed), [`table`]
//! (a table's schema, buffer and files), [`buffer`] (the buffer's shared state and signals),
//! [`persister`] (the Parquet side: catalog, persisting, the WAL's segments) with
//! [`background`] (its threads) and [`parquet_write`] (sorting, deduplicating and writing
//! files), [`catalog`] (the durable catalog) and [`wal_record`] (the WAL's payloads);
//! [`compaction`] (which files to merge, and merging them) keeps their number bounded, and
//! [`chunk_cache`] keeps what reading them costs most to repeat (with [`decoded`], their
//! columns decoded); [`latest`] finds every series' newest row without reading every row;
//! [`retention`] says how long rows are kept (and expires the files past it); [`follower`] is
//! a query node's view of a writer's catalog. This file is the [`Store`] facade; its tests are
//! in `store_tests.rs`, `drop_tests.rs` and `follower_tests.rs`.

mod background;
mod buffer;
mod buffer_runs;
mod catalog;
mod chunk_cache;
mod compaction;
mod data_store;
mod database;
mod ddl;
mod decoded;
mod dedup;
mod error;
mod expiry;
mod file_entry;
mod follower;
mod latest;
mod limits;
mod memory;
mod open;
mod options;
mod parquet_write;
mod persister;
mod retention;
mod rollup;
mod rollup_ranges;
mod rollup_states;
mod series;
mod table;
mod table_rows;
#[cfg(test)]
mod test_rows;
mod time_versions;
mod value_caches;
mod wal_record;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use quiver_model::schema::DecodedTable;
use quiver_wal::Wal;

pub use buffer::TableChangeListener;
pub use catalog::{CatalogState, ColumnEntry, DatabaseEntry, TableEntry, CATALOG_FILE};
pub use chunk_cache::{ChunkCache, ChunkCacheStats};
pub use compaction::{
    CompactionOptions, CompactionScope, CompactionStats, CompactionSummary, TableFiles,
};
use data_store::DataStore;
pub use database::{Database, WriteReceipt};
pub use decoded::{cached_columns, decode_columns};
pub use dedup::{
    deduplicate_complete_runs, deduplicate_sorted, series_key_and_fields, sort_and_deduplicate,
};
pub use error::StorageError;
pub use file_entry::FileEntry;
pub use follower::{ApplyPublished, FollowStats, DOCUMENT_INTERVAL};
pub use latest::latest_rows;
pub use limits::{
    validate_database_name, validate_table_name, StoreLimits, RESERVED_DATABASE_NAMES,
};
pub use memory::{data_bytes, retained_bytes};
pub use open::OpenSummary;
pub use options::{StoreAccess, StoreOptions, WAL_DIR};
pub use parquet_write::{PersistOptions, WriteTimes, TABLES_DIR};
pub use persister::{PersistStats, PersistSummary};
pub use quiver_wal::{Durability, Recovery, ReplaySummary, WalError, WalOptions, WalStats};
pub use retention::RetentionPeriod;
pub use rollup::{Coverage, RollupDefinition, RollupState, RollupStats};
pub use rollup_ranges::Ranges;
pub use rollup_states::{RollupStates, MAX_ROLLUPS_PER_TABLE, ROLLUPS_DIR};
pub use table::{ParquetFile, PreparedRows, Table, TableSnapshot};
pub use time_versions::VERSION_CHUNK_NS;
pub use value_caches::{
    ValueCache, ValueCacheKind, ValueCaches, MAX_VALUE_CACHES_PER_TABLE, VALUE_CACHES_FILE,
};

use buffer::{Buffer, Change};
use database::DatabaseMap;
use follower::Follower;
use options::shared_document;
pub(crate) use options::SHARED_DELETE_DELAY;
use persister::Persister;

/// All databases of one server, the write-ahead log that makes their writes durable, and
/// the persistence of the buffer to Parquet.
pub struct Store {
    databases: Arc<RwLock<DatabaseMap>>,
    limits: StoreLimits,
    /// Held while a write is checked, its columns reserved and its place in the log taken, so
    /// the log's order is the order in which writes were checked against the schema.
    sequencer: Mutex<()>,
    buffer: Arc<Buffer>,
    /// The WAL and the Parquet side; `None` for a memory-only store.
    persister: Option<Arc<Persister>>,
    /// Parsed metadata and column chunks of the Parquet files, for every reader.
    chunk_cache: Arc<ChunkCache>,
    /// Where the catalog and the Parquet files are (empty for a memory-only store).
    data: DataStore,
    /// A query node's following of the writer's catalog; `None` for the writer and memory.
    follower: Option<Arc<Follower>>,
    /// The absolute data directory; `None` for a memory-only store.
    data_dir: Option<PathBuf>,
    /// The retention period of databases that set none.
    default_retention: RetentionPeriod,
    /// Held by each change to the set of databases and tables or their settings (create,
    /// drop, retention), start to end: one at a time.
    ddl: Mutex<()>,
    /// Held while a requested compaction runs: a second request fails at once instead of
    /// holding a thread while it waits.
    requested_compaction: Mutex<()>,
    /// The rollups of every table.
    rollups: Arc<RollupStates>,
    /// The last-value and distinct-value caches configured through InfluxDB 3's API.
    value_caches: Arc<ValueCaches>,
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
        let rollups = Arc::new(RollupStates::default());
        Store {
            databases: Arc::new(RwLock::new(DatabaseMap::new())),
            limits,
            sequencer: Mutex::new(()),
            buffer: Arc::new(Buffer::new(usize::MAX, rollups.clone())),
            persister: None,
            chunk_cache: Arc::new(ChunkCache::new(0)),
            data: DataStore::memory(),
            follower: None,
            data_dir: None,
            default_retention: RetentionPeriod::FOREVER,
            ddl: Mutex::new(()),
            requested_compaction: Mutex::new(()),
            rollups,
            value_caches: Arc::default(),
        }
    }

    /// Fails while a query node cannot know its answers are current (the writer's newest
    /// catalog is unreadable, or the object store has not answered for 10 s,
    /// [`follower::STALE_AFTER`]); queries check it before they read. Always fine on the
    /// writer.
    pub fn check_current(&self) -> Result<(), StorageError> {
        match &self.follower {
            Some(follower) => follower.check_current(),
            None => Ok(()),
        }
    }

    /// A query node's following of the writer's catalog (`None` on the writer).
    pub fn follow_stats(&self) -> Option<FollowStats> {
        self.follower.as_ref().map(|f| f.stats())
    }

    /// Whether this store was opened as the writer or as a follower of its catalog.
    pub fn access(&self) -> StoreAccess {
        match self.follower {
            Some(_) => StoreAccess::Follower,
            None => StoreAccess::Writer,
        }
    }

    /// Whether the catalog and files are in a store query nodes share (`object_store_url`).
    pub fn shares_data(&self) -> bool {
        self.data.is_shared()
    }

    /// The `object_store_url` of a shared store (what executors of distributed queries read
    /// its files from, see [`shared_files`]); `None` when the data is in `data_dir`.
    pub fn shared_location(&self) -> Option<&str> {
        self.data.is_shared().then(|| self.data.location())
    }

    /// Stores `bytes` as the document `name` that query nodes read with
    /// [`Store::published`] (under `shared/`); nothing to do without a shared store.
    pub fn publish(&self, name: &str, bytes: bytes::Bytes) -> Result<(), StorageError> {
        self.writable("shared documents")?;
        if !self.data.is_shared() {
            return Ok(());
        }
        self.data.put(&shared_document(name), bytes, false)
    }

    /// The document `name` the writer published, if any (`None` without a shared store).
    pub fn published(&self, name: &str) -> Result<Option<bytes::Bytes>, StorageError> {
        if !self.data.is_shared() {
            return Ok(None);
        }
        self.data.get(&shared_document(name))
    }

    /// On a query node, applies the writer's document `name` (see [`Store::publish`]) with
    /// `apply` now and then, from the loop that follows the catalog, whenever it changes
    /// (read at most every [`DOCUMENT_INTERVAL`]); nothing to do on the writer or without a
    /// shared store. Fails if the document cannot be read or applied now.
    pub fn follow_published(&self, name: &str, apply: ApplyPublished) -> Result<(), StorageError> {
        match &self.follower {
            Some(follower) if self.data.is_shared() => follower.follow_document(name, apply),
            _ => Ok(()),
        }
    }

    /// Fails on a query node, which changes nothing: `what` names the refused change.
    fn writable(&self, what: &'static str) -> Result<(), StorageError> {
        match self.follower {
            Some(_) => Err(StorageError::QueryNode { what }),
            None => Ok(()),
        }
    }

    /// The cache of Parquet metadata and column chunks every reader of this store's files
    /// goes through (off, capacity 0, for a memory-only store).
    pub fn chunk_cache(&self) -> &Arc<ChunkCache> {
        &self.chunk_cache
    }

    /// The object store the store's Parquet files are read from, by their catalog-relative
    /// paths ([`FileEntry::path`]): the data directory (empty for a memory-only store). Every
    /// reader shares it (the query engine's scans register it).
    pub fn data_store(&self) -> &Arc<dyn object_store::ObjectStore> {
        self.data.objects()
    }

    /// Where the catalog and the Parquet files are: the data directory, a `file://` or
    /// `s3://` URL (`object_store_url`), or `memory`.
    pub fn data_location(&self) -> &str {
        self.data.location()
    }

    /// The absolute data directory of a durable store (catalog-relative file paths such as
    /// [`FileEntry::path`] are relative to it); `None` for a memory-only store.
    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    fn wal(&self) -> Option<&Wal<Change>> {
        self.persister.as_ref().and_then(|p| p.wal())
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
        self.wal().map(Wal::stats)
    }

    /// Persistence counters (`None` for a memory-only store).
    pub fn persist_stats(&self) -> Option<PersistStats> {
        self.persister.as_ref().map(|p| p.stats())
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
        self.writable("writes")?;
        let rows = tables.iter().map(|t| t.batch.num_rows()).sum();
        validate_database_name(database)?;
        for table in &tables {
            validate_table_name(&table.name)?;
            if let Some(rollup) = self.rollups.get(database, &table.name) {
                return Err(StorageError::RollupIsReadOnly {
                    name: table.name.clone(),
                    table: rollup.definition().table.clone(),
                });
            }
        }
        if let Some(persister) = &self.persister {
            persister.wait_for_buffer_space().await?;
        }
        let wal = self.wal();
        let payload = match wal {
            Some(_) => Some(wal_record::encode(database, &tables)?),
            None => None,
        };
        let logged = {
            let _order = self.sequencer.lock();
            let prepared = self.prepare(database, tables, true)?;
            match (wal, payload) {
                (Some(wal), Some(payload)) => {
                    Some(wal.append(payload, Change::Rows(prepared), durability))
                }
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
        metrics::counter!("quiver_ingest_rows_total").increment(rows as u64);
        Ok(WriteReceipt { rows, sequence })
    }

    /// Checks a write and reserves its tables and columns (must hold the sequencer); a write
    /// that creates its database is held to the database limit if `limit_databases`.
    fn prepare(
        &self,
        name: &str,
        tables: Vec<DecodedTable>,
        limit_databases: bool,
    ) -> Result<PreparedRows, StorageError> {
        if let Some(db) = self.database(name) {
            return db.prepare(tables);
        }
        validate_database_name(name)?;
        if limit_databases && self.databases.read().len() >= self.limits.max_databases {
            return Err(StorageError::TooManyDatabases {
                limit: self.limits.max_databases,
            });
        }
        let db = Arc::new(Database::new(
            name.to_string(),
            self.limits.clone(),
            (None, self.default_retention),
        ));
        let prepared = db.prepare(tables)?;
        self.databases.write().insert(name.to_string(), db);
        Ok(prepared)
    }

    /// The rollups of every table.
    pub fn rollups(&self) -> &Arc<RollupStates> {
        &self.rollups
    }

    /// The last-value and distinct-value caches configured through InfluxDB 3's API.
    pub fn value_caches(&self) -> &ValueCaches {
        &self.value_caches
    }

    /// The server-wide retention period (databases without their own follow it).
    pub fn default_retention(&self) -> RetentionPeriod {
        self.default_retention
    }

    /// Persists everything buffered now to Parquet and updates the catalog; returns what it
    /// did. The background persister does this when the buffer is over its size or age
    /// threshold; tests and tools may call it directly. Memory-only stores have nothing to do.
    pub fn persist_now(&self) -> Result<PersistSummary, StorageError> {
        self.writable("persists")?;
        match &self.persister {
            Some(persister) => persister.persist_now(),
            None => Ok(PersistSummary::default()),
        }
    }

    /// Merges the files of every partition in `scope` that has small or overlapping files
    /// now, whatever the idle time (the background compactor waits for
    /// `compaction_idle_secs`); returns what it did. Fails with [`StorageError::NotFound`] if
    /// the scope names a database or table without files or buffered rows, and with
    /// [`StorageError::CompactionRunning`] while another requested compaction runs (so
    /// requests never pile up waiting; the background compactor's merges wait their turn).
    pub fn compact_now(
        &self,
        scope: CompactionScope<'_>,
    ) -> Result<CompactionSummary, StorageError> {
        self.writable("compactions")?;
        if let Some(name) = scope.database {
            validate_database_name(name)?;
            let db = self.database(name).ok_or_else(|| StorageError::NotFound {
                what: format!("database {name:?}"),
            })?;
            if let Some(table) = scope.table {
                validate_table_name(table)?;
            }
            if let Some(table) = scope.table.filter(|t| db.table(t).is_none()) {
                return Err(StorageError::NotFound {
                    what: format!("table {table:?} in database {name:?}"),
                });
            }
        }
        let Some(_one_request_at_a_time) = self.requested_compaction.try_lock() else {
            return Err(StorageError::CompactionRunning);
        };
        match &self.persister {
            Some(persister) => persister.compact(scope, true),
            None => Ok(CompactionSummary::default()),
        }
    }

    /// Compaction counters and the file layout now (`None` for a memory-only store).
    pub fn compaction_stats(&self) -> Option<CompactionStats> {
        self.persister.as_ref().map(|p| p.compaction_stats())
    }

    /// The catalog as last written (`None` for a memory-only store): what a restart would
    /// load, for tools and tests.
    pub fn catalog(&self) -> Option<CatalogState> {
        match (&self.persister, &self.follower) {
            (Some(persister), _) => Some(persister.catalog()),
            (None, Some(follower)) => Some(follower.catalog()),
            (None, None) => None,
        }
    }

    /// Stops the persister (letting a running persist finish), then the WAL's commit thread
    /// after syncing what it holds, then releases the data directory's lock; later writes
    /// and persists fail.
    pub fn close(&self) {
        if let Some(persister) = &self.persister {
            persister.close();
        }
        if let Some(follower) = &self.follower {
            follower.close();
        }
    }
}

#[cfg(test)]
mod drop_tests;

#[cfg(test)]
mod follower_tests;

#[cfg(test)]
mod store_tests;

/// The files of the shared store `object_store_url` names, for readers that open no store
/// (the executors of distributed queries read the Parquet files their tasks name, by the same
/// catalog-relative paths as [`Store::data_store`]).
pub fn shared_files(
    object_store_url: &str,
) -> Result<Arc<dyn object_store::ObjectStore>, StorageError> {
    Ok(data_store::DataStore::shared(object_store_url)?
        .objects()
        .clone())
}

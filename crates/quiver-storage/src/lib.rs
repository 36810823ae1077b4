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
//! [`persister`] writes the buffer to Parquet in the background.
//!
//! Modules: [`Store`] here (writes, lookups, open and close) over [`database`] (databases and
//! the checks a write passes), [`limits`] (names and counts allowed), [`table`] (a table's
//! schema, buffer and files), [`buffer`] (the buffer's shared state and signals),
//! [`persister`] (the Parquet side: catalog, persisting, the WAL's segments) with
//! [`persist`] (sorting, deduplicating and writing files), [`catalog`] (the durable catalog)
//! and [`wal_record`] (the WAL's payloads); [`compaction`] (which files to merge, and merging
//! them) keeps their number bounded, and [`chunk_cache`] keeps what reading them costs most
//! to repeat (with [`decoded`], their columns decoded); [`latest`] finds every series' newest row without reading every row;
//! [`retention`] says how long rows are kept; [`follower`] is a query node's view of a
//! writer's catalog. This file is the [`Store`] facade; its tests are in `store_tests.rs`,
//! `drop_tests.rs` and `follower_tests.rs`.

mod buffer;
mod buffer_runs;
mod catalog;
mod chunk_cache;
mod compaction;
mod data_store;
mod database;
mod decoded;
mod dedup;
mod durable_fs;
mod error;
mod follower;
mod latest;
mod limits;
mod memory;
mod persist;
mod persister;
mod retention;
mod rollup;
mod rollup_ranges;
mod rollup_registry;
mod series;
mod table;
#[cfg(test)]
mod test_rows;
mod time_versions;
mod value_caches;
mod wal_record;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use quiver_model::schema::DecodedTable;
use quiver_wal::Wal;
use serde::{Deserialize, Serialize};

pub use buffer::TableChangeListener;
pub use catalog::{CatalogState, ColumnEntry, DatabaseEntry, FileEntry, TableEntry, CATALOG_FILE};
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
pub use follower::FollowStats;
pub use latest::latest_rows;
pub use limits::{
    validate_database_name, validate_table_name, StoreLimits, RESERVED_DATABASE_NAMES,
};
pub use memory::{data_bytes, retained_bytes};
pub use persist::{PersistOptions, TABLES_DIR};
pub use persister::{PersistStats, PersistSummary};
pub use quiver_wal::{Durability, Recovery, ReplaySummary, WalError, WalOptions, WalStats};
pub use retention::RetentionPeriod;
pub use rollup::{Coverage, RollupDefinition, RollupState, RollupStats};
pub use rollup_ranges::Ranges;
pub use rollup_registry::{RollupRegistry, MAX_ROLLUPS_PER_TABLE, ROLLUPS_DIR};
pub use table::{ParquetFile, PreparedRows, Table, TableSnapshot};
pub use time_versions::VERSION_CHUNK_NS;
pub use value_caches::{
    ValueCache, ValueCacheKind, ValueCaches, MAX_VALUE_CACHES_PER_TABLE, VALUE_CACHES_FILE,
};

use buffer::{ApplyToTables, Buffer, Change, Dropped};
use database::DatabaseMap;
use follower::Follower;
use persister::Persister;

/// The WAL's directory inside the data directory, unless the options name another.
pub const WAL_DIR: &str = "wal";

/// How long files that no catalog names any more stay in a shared store before they are
/// deleted: a query node may still be reading one through a catalog it holds.
pub(crate) const SHARED_DELETE_DELAY: Duration = Duration::from_secs(10 * 60);

/// The file in a writer's data directory naming the `object_store_url` it writes: a later
/// start without it would serve none of that data, and is refused.
pub(crate) const OBJECT_STORE_MARKER: &str = "OBJECT_STORE_URL";

/// Where a shared store keeps the documents the writer shares with query nodes (the tokens).
pub(crate) const SHARED_DIR: &str = "shared";

/// What a server does with its store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Writes (WAL, persistence, compaction, retention) and queries: the one writer.
    #[default]
    All,
    /// Queries only, over the writer's `object_store_url`: no WAL; follows the writer's
    /// catalog.
    Query,
    /// DataFusion Ballista's scheduler of distributed queries (no store: the server opens
    /// none).
    Scheduler,
    /// A DataFusion Ballista executor: runs distributed queries' tasks over the writer's
    /// `object_store_url` (no store: it reads the files the tasks name).
    Executor,
}

impl Role {
    /// The role's name, as the `role` setting spells it.
    pub fn name(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Query => "query",
            Role::Scheduler => "scheduler",
            Role::Executor => "executor",
        }
    }
}

/// Where a durable store keeps its data and when it persists. The serde names are the
/// server's configuration keys (the WAL's and persistence's keys sit beside `data_dir`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreOptions {
    /// Directory for the server's data: `catalog.json`, `tables/`, `wal/` and the `LOCK` that
    /// keeps a second server out. A relative name is resolved against the working directory
    /// once, at start-up. With `object_store_url`, the catalog and the tables' files live
    /// there instead and this directory keeps the WAL, rollups, caches' settings and tokens.
    pub data_dir: PathBuf,
    /// Where the catalog and the Parquet files live when not in `data_dir`: a directory
    /// (`file:///srv/quiver`) or an S3-compatible bucket (`s3://bucket/prefix`; endpoint,
    /// region and credentials from `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`) that query nodes read too. Empty: `data_dir`.
    pub object_store_url: String,
    /// `all` (the default: the one writer, which also queries), `query` (a query node over
    /// the writer's `object_store_url`), `scheduler` or `executor` (DataFusion Ballista's,
    /// for distributed queries: they open no store).
    pub role: Role,
    /// The write-ahead log (in `<data_dir>/wal` unless `wal.dir` names another directory).
    #[serde(flatten)]
    pub wal: WalOptions,
    /// Persistence thresholds and file layout.
    #[serde(flatten)]
    pub persist: PersistOptions,
    /// When and how files are merged.
    #[serde(flatten)]
    pub compaction: CompactionOptions,
    /// Bytes the chunk cache (parsed Parquet metadata and column chunks, see [`ChunkCache`])
    /// may hold; 0 turns it off. Default: 1/16 of the memory available (physical or cgroup),
    /// 64 MiB–8 GiB.
    pub chunk_cache_bytes: u64,
    /// How long databases without a retention period of their own keep rows (`30d`, `12h`,
    /// ...); `none` (the default) keeps them forever.
    pub retention_period: RetentionPeriod,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            data_dir: PathBuf::from("./quiver-data"),
            object_store_url: String::new(),
            role: Role::All,
            wal: WalOptions::default(),
            persist: PersistOptions::default(),
            compaction: CompactionOptions::default(),
            chunk_cache_bytes: quiver_model::settings::share_of_memory(
                16,
                64 << 20,
                8 << 30,
                1 << 30,
            ),
            retention_period: RetentionPeriod::FOREVER,
        }
    }
}

impl StoreOptions {
    /// Options for tests and tools: data and WAL (`<dir>/wal`, 64 KiB segments, no fsync)
    /// in `dir`, persisting and compacting only when asked ([`Store::persist_now`],
    /// [`Store::compact_now`]). Adjust fields as needed.
    pub fn for_tests(dir: &Path) -> Self {
        StoreOptions {
            data_dir: dir.to_path_buf(),
            object_store_url: String::new(),
            role: Role::All,
            wal: WalOptions {
                segment_bytes: 64 << 10,
                fsync: false,
                ..WalOptions::default()
            },
            persist: PersistOptions {
                persist_bytes: usize::MAX / 2,
                max_buffer_bytes: usize::MAX,
                max_age: Duration::from_secs(24 * 3600),
                ..PersistOptions::default()
            },
            compaction: CompactionOptions {
                enabled: false,
                ..CompactionOptions::default()
            },
            chunk_cache_bytes: 64 << 20,
            retention_period: RetentionPeriod::FOREVER,
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
    rollups: Arc<RollupRegistry>,
    /// The last-value and distinct-value caches configured through InfluxDB 3's API.
    value_caches: ValueCaches,
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
        let rollups = Arc::new(RollupRegistry::default());
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
            value_caches: ValueCaches::default(),
        }
    }

    /// A durable store in `options.data_dir`: creates the directory, makes its path (and the
    /// WAL's) absolute (symlinks resolved, so every path derived from it holds whatever the
    /// working directory later is), locks it against a second process, loads the catalog
    /// (from `object_store_url` if set), deletes orphaned files, replays the WAL records the
    /// catalog does not cover, then accepts writes (each acknowledged as durable as it asks)
    /// and persists the buffer in the background. With `role = query`, a query node instead:
    /// no WAL, no writes; it follows the writer's catalog (see [`follower`]).
    pub fn open(
        limits: StoreLimits,
        mut options: StoreOptions,
    ) -> Result<(Arc<Store>, OpenSummary), StorageError> {
        options.persist.validate().map_err(StorageError::Catalog)?;
        options
            .compaction
            .validate()
            .map_err(StorageError::Catalog)?;
        // absolute first: the parents of a relative name (`data` has the parent ``) cannot be
        // fsynced by name
        options.data_dir = std::path::absolute(&options.data_dir)
            .map_err(|e| StorageError::io(&options.data_dir, e))?;
        durable_fs::create_dir_durably(&options.data_dir)?;
        options.data_dir = std::fs::canonicalize(&options.data_dir)
            .map_err(|e| StorageError::io(&options.data_dir, e))?;
        let lock = catalog::DataDirLock::acquire(&options.data_dir)?;
        if matches!(options.role, Role::Scheduler | Role::Executor) {
            return Err(StorageError::Catalog(format!(
                "role = {} opens no store (only all and query do)",
                options.role.name()
            )));
        }
        let data = Self::data_store_of(&options)?;
        if options.role == Role::Query {
            return Self::open_query_node(limits, options, data, lock);
        }
        if options.wal.dir.as_os_str().is_empty() {
            options.wal.dir = options.data_dir.join(WAL_DIR);
        }
        options.wal.dir = std::path::absolute(&options.wal.dir)
            .map_err(|e| StorageError::io(&options.wal.dir, e))?;
        let state = catalog::load(&data)?;
        catalog::sweep(&data, state.version)?;
        options.wal.first_seq = state.persisted_through_seq + 1;
        let default_retention = options.retention_period;
        let listed = data.list(TABLES_DIR)?;
        let present: HashSet<String> = listed.iter().map(|m| m.location.to_string()).collect();
        let (databases, known) =
            database::restore_databases(&state, &limits, default_retention, Some(&present))?;
        let unnamed = persist::unnamed_files(&listed, &known);
        let persisted = state.persisted_through_seq;
        let databases = Arc::new(RwLock::new(databases));
        let rollups = Arc::new(RollupRegistry::open(Some(&options.data_dir), &state)?);
        let value_caches = ValueCaches::open(Some(&options.data_dir))?;
        let buffer = Arc::new(Buffer::new(options.persist.persist_bytes, rollups.clone()));
        let chunk_cache = Arc::new(ChunkCache::new(options.chunk_cache_bytes));
        let persister = Arc::new(Persister::new(
            options.data_dir.clone(),
            options.persist.clone(),
            options.compaction.clone(),
            lock,
            state,
            (buffer.clone(), databases.clone(), chunk_cache.clone()),
            data.clone(),
        ));
        let store = Arc::new(Store {
            databases,
            limits,
            sequencer: Mutex::new(()),
            buffer,
            persister: Some(persister.clone()),
            chunk_cache,
            data,
            follower: None,
            data_dir: Some(options.data_dir.clone()),
            default_retention,
            ddl: Mutex::new(()),
            requested_compaction: Mutex::new(()),
            rollups,
            value_caches,
        });
        // deleted now, or in a shared store after the delete delay counted from now (a query
        // node may still read one through a catalog it holds)
        persister.retire(unnamed);
        let orphans_removed = persister.delete_unread();
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
        persister.set_wal(log);
        store.rollups.forget_missing(|database, table| {
            store
                .database(database)
                .and_then(|db| db.table(table))
                .is_some()
        });
        persister.start()?;
        let summary = OpenSummary {
            replay,
            replayed_records,
            files: known.len(),
            persisted_through_seq: persisted,
            orphans_removed,
        };
        Ok((store, summary))
    }

    /// Where `options` keep the catalog and the files: `object_store_url`, or `data_dir`.
    fn data_store_of(options: &StoreOptions) -> Result<DataStore, StorageError> {
        let marker = options.data_dir.join(OBJECT_STORE_MARKER);
        if options.object_store_url.is_empty() {
            if options.role == Role::All && marker.exists() {
                // its data is in the object store: a local start would serve none of it
                let url = std::fs::read_to_string(&marker).unwrap_or_default();
                return Err(StorageError::Catalog(format!(
                    "{} was the writer of object_store_url = {:?}: set it again (or delete {} \
                     to start an empty local store)",
                    options.data_dir.display(),
                    url.trim(),
                    marker.display()
                )));
            }
            if options.role == Role::Query {
                return Err(StorageError::Catalog(
                    "role = query serves the writer's data: set object_store_url to the writer's"
                        .into(),
                ));
            }
            return DataStore::directory(&options.data_dir);
        }
        if options.role == Role::All {
            // data kept in the directory would silently vanish from queries
            let local = catalog::load(&DataStore::directory(&options.data_dir)?)?;
            if !local.databases.is_empty() {
                return Err(StorageError::Catalog(format!(
                    "{} holds a catalog with databases, but object_store_url is set to {:?}: \
                     the data directory's data would not be served; unset object_store_url, or \
                     start with an empty data_dir",
                    options.data_dir.join(CATALOG_FILE).display(),
                    options.object_store_url
                )));
            }
        }
        let data = DataStore::shared(&options.object_store_url)?;
        if options.role == Role::All {
            // once the URL is known good: a refused start leaves the directory as it was
            durable_fs::replace_durably(
                &options.data_dir,
                OBJECT_STORE_MARKER,
                options.object_store_url.as_bytes(),
            )?;
        }
        Ok(data)
    }

    /// A query node's store over `data` (see [`Store::open`]).
    fn open_query_node(
        limits: StoreLimits,
        options: StoreOptions,
        data: DataStore,
        lock: catalog::DataDirLock,
    ) -> Result<(Arc<Store>, OpenSummary), StorageError> {
        let default_retention = options.retention_period;
        let databases = Arc::new(RwLock::new(DatabaseMap::new()));
        let chunk_cache = Arc::new(ChunkCache::new(options.chunk_cache_bytes));
        let follower = Follower::load(
            data.clone(),
            (limits.clone(), default_retention, lock),
            (databases.clone(), chunk_cache.clone()),
        )?;
        let rollups = Arc::new(RollupRegistry::default());
        let store = Arc::new(Store {
            databases,
            limits,
            sequencer: Mutex::new(()),
            buffer: Arc::new(Buffer::new(usize::MAX, rollups.clone())),
            persister: None,
            chunk_cache,
            data,
            follower: Some(follower.clone()),
            data_dir: Some(options.data_dir.clone()),
            default_retention,
            ddl: Mutex::new(()),
            requested_compaction: Mutex::new(()),
            rollups,
            value_caches: ValueCaches::default(),
        });
        follower.start()?;
        let catalog = follower.catalog();
        let summary = OpenSummary {
            files: catalog
                .databases
                .values()
                .flat_map(|db| db.tables.values())
                .map(|t| t.files.len())
                .sum(),
            persisted_through_seq: catalog.persisted_through_seq,
            ..OpenSummary::default()
        };
        Ok((store, summary))
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

    /// The role this store was opened with.
    pub fn role(&self) -> Role {
        match self.follower {
            Some(_) => Role::Query,
            None => Role::All,
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
    /// [`Store::published`] (under [`SHARED_DIR`]); nothing to do without a shared store.
    pub fn publish(&self, name: &str, bytes: bytes::Bytes) -> Result<(), StorageError> {
        self.writable("shared documents")?;
        if !self.data.is_shared() {
            return Ok(());
        }
        self.data.put(&format!("{SHARED_DIR}/{name}"), bytes, false)
    }

    /// The document `name` the writer published, if any (`None` without a shared store).
    pub fn published(&self, name: &str) -> Result<Option<bytes::Bytes>, StorageError> {
        if !self.data.is_shared() {
            return Ok(None);
        }
        self.data.get(&format!("{SHARED_DIR}/{name}"))
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

    fn replay_record(&self, seq: u64, payload: &[u8]) -> Result<(), StorageError> {
        let _order = self.sequencer.lock();
        match wal_record::decode(payload)? {
            wal_record::Record::Write { database, tables } => {
                // the database limit was checked when the write was accepted (a database
                // created through the API since may have filled it)
                let prepared = self.prepare(&database, tables, false)?;
                self.buffer.apply(seq, prepared);
            }
            wal_record::Record::Drop { database, table } => {
                // what the drop took out when it was logged, or nothing if it is gone already
                let tables = self
                    .take_out(&database, table.as_deref())
                    .unwrap_or_default();
                let dropped = Dropped {
                    database,
                    table,
                    tables,
                };
                self.buffer.apply_drop(seq, dropped);
            }
        }
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

    /// Creates the empty database `name` with its own retention period (`None`: the
    /// server's `retention_period`), durably, and returns it. Fails if it exists already or
    /// would pass the database limit. A database also comes into being with its first write.
    pub fn create_database(
        &self,
        name: &str,
        retention: Option<RetentionPeriod>,
    ) -> Result<Arc<Database>, StorageError> {
        self.writable("database changes")?;
        validate_database_name(name)?;
        let _one_change_at_a_time = self.ddl.lock();
        self.check_can_create(name)?;
        self.settle_pending_drops(name)?;
        // durable before visible (not under the sequencer: a running persist holds the catalog)
        self.record_retention(name, retention, || {})?;
        let _order = self.sequencer.lock();
        if let Some(db) = self.database(name) {
            // a write created it meanwhile: it gets the retention asked for
            db.set_retention(retention, self.default_retention);
            return Ok(db);
        }
        // writes may have created databases meanwhile
        self.check_can_create(name)?;
        let db = Arc::new(Database::new(
            name.to_string(),
            self.limits.clone(),
            (retention, self.default_retention),
        ));
        self.databases.write().insert(name.to_string(), db.clone());
        Ok(db)
    }

    fn check_can_create(&self, name: &str) -> Result<(), StorageError> {
        let databases = self.databases.read();
        if databases.contains_key(name) {
            return Err(StorageError::AlreadyExists {
                what: format!("database {name:?}"),
            });
        }
        if databases.len() >= self.limits.max_databases {
            return Err(StorageError::TooManyDatabases {
                limit: self.limits.max_databases,
            });
        }
        Ok(())
    }

    /// Persists if a drop of `database` (or of a table of it) is not in the catalog yet, so
    /// a setting written to the catalog now is not wiped by that drop later (or by its
    /// replay after a restart).
    fn settle_pending_drops(&self, database: &str) -> Result<(), StorageError> {
        match &self.persister {
            Some(persister) if persister.drop_pending(database) => {
                persister.persist_now()?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Changes the retention period of database `name` (`None`: follow the server's
    /// `retention_period`), durably; queries see the new period at once, and files wholly
    /// past it are deleted within seconds. Returns the database.
    pub fn set_retention(
        &self,
        name: &str,
        retention: Option<RetentionPeriod>,
    ) -> Result<Arc<Database>, StorageError> {
        self.writable("database changes")?;
        validate_database_name(name)?;
        let _one_change_at_a_time = self.ddl.lock();
        let db = self.database(name).ok_or_else(|| StorageError::NotFound {
            what: format!("database {name:?}"),
        })?;
        self.settle_pending_drops(name)?;
        let default = self.default_retention;
        // in force while the catalog is still held: no expiry runs with the old period after
        // the new one is durable
        self.record_retention(name, retention, || db.set_retention(retention, default))?;
        Ok(db)
    }

    /// The rollups of every table.
    pub fn rollups(&self) -> &Arc<RollupRegistry> {
        &self.rollups
    }

    /// Creates a rollup (everything pending until the query layer computes it), durably.
    /// Fails if its table does not exist, or its name is a table's or another rollup's.
    pub fn create_rollup(
        &self,
        definition: RollupDefinition,
    ) -> Result<Arc<RollupState>, StorageError> {
        self.writable("rollup changes")?;
        let _ddl = self.ddl.lock();
        let db = self
            .database(&definition.database)
            .ok_or_else(|| StorageError::NotFound {
                what: format!("database {:?}", definition.database),
            })?;
        if db.table(&definition.table).is_none() {
            return Err(StorageError::NotFound {
                what: format!(
                    "table {:?} in database {:?}",
                    definition.table, definition.database
                ),
            });
        }
        validate_table_name(&definition.name)?;
        if db.table(&definition.name).is_some()
            || self
                .rollups
                .get(&definition.database, &definition.name)
                .is_some()
        {
            return Err(StorageError::AlreadyExists {
                what: format!(
                    "a table or rollup named {:?} in database {:?}",
                    definition.name, definition.database
                ),
            });
        }
        let created_seq = self.buffer.gate.lock().seq;
        self.rollups.create(definition, created_seq)
    }

    /// The last-value and distinct-value caches configured through InfluxDB 3's API.
    pub fn value_caches(&self) -> &ValueCaches {
        &self.value_caches
    }

    /// Configures a last-value or distinct-value cache, durably, after checking that its
    /// table and columns exist and that its columns can key or be listed.
    pub fn create_value_cache(&self, cache: ValueCache) -> Result<(), StorageError> {
        self.writable("cache changes")?;
        let _ddl = self.ddl.lock();
        let table = self
            .database(&cache.db)
            .and_then(|db| db.table(&cache.table))
            .ok_or_else(|| StorageError::NotFound {
                what: format!("table {:?} in database {:?}", cache.table, cache.db),
            })?;
        validate_table_name(&cache.name)?;
        value_caches::check_columns(&cache, &table.columns())?;
        self.value_caches.create(cache)
    }

    /// Removes a last-value (`kind_name` `last`) or distinct-value (`distinct`) cache.
    pub fn drop_value_cache(
        &self,
        kind_name: &str,
        db: &str,
        table: &str,
        name: &str,
    ) -> Result<(), StorageError> {
        self.writable("cache changes")?;
        let _ddl = self.ddl.lock();
        self.value_caches.remove(kind_name, db, table, name)
    }

    /// Drops rollup `name` of `database` and deletes its files (its base table keeps its
    /// rows).
    pub fn drop_rollup(&self, database: &str, name: &str) -> Result<(), StorageError> {
        self.writable("rollup changes")?;
        let _ddl = self.ddl.lock();
        self.rollups.remove(database, name)
    }

    /// The server-wide retention period (databases without their own follow it).
    pub fn default_retention(&self) -> RetentionPeriod {
        self.default_retention
    }

    /// Writes `name`'s retention setting to the catalog, then runs `stored`.
    fn record_retention(
        &self,
        name: &str,
        retention: Option<RetentionPeriod>,
        stored: impl FnOnce(),
    ) -> Result<(), StorageError> {
        match &self.persister {
            Some(persister) => persister.configure(
                |state| {
                    let entry = state.databases.entry(name.to_string()).or_default();
                    entry.retention_period = retention;
                },
                stored,
            ),
            None => {
                stored();
                Ok(())
            }
        }
    }

    /// Drops table `table` of `database`: it is gone for queries and writes at once (a write
    /// after this creates a new, empty table), the drop is in the WAL and the catalog when
    /// this returns, and its files are deleted as soon as no running query reads them.
    /// Blocks until then: call it from a thread that may block.
    pub fn drop_table(&self, database: &str, table: &str) -> Result<(), StorageError> {
        validate_database_name(database)?;
        validate_table_name(table)?;
        self.drop_and_settle(database, Some(table))
    }

    /// Drops database `name` with all its tables, as [`Store::drop_table`] drops one.
    pub fn drop_database(&self, name: &str) -> Result<(), StorageError> {
        validate_database_name(name)?;
        self.drop_and_settle(name, None)
    }

    fn drop_and_settle(&self, database: &str, table: Option<&str>) -> Result<(), StorageError> {
        self.writable("drops")?;
        let payload = wal_record::encode_drop(database, table)?;
        let _one_change_at_a_time = self.ddl.lock();
        let logged = {
            let _order = self.sequencer.lock();
            let tables = self.take_out(database, table)?;
            let dropped = Dropped {
                database: database.to_string(),
                table: table.map(str::to_string),
                tables,
            };
            match self.wal() {
                Some(wal) => Some(wal.append(payload, Change::Drop(dropped), Durability::Sync)),
                None => {
                    self.buffer.apply_drop(0, dropped);
                    // nothing to take out of a catalog
                    self.buffer.pending_drops.lock().clear();
                    None
                }
            }
        };
        if let Some(logged) = logged {
            futures::executor::block_on(logged)?;
        }
        // a table created again starts without the old one's caches
        self.value_caches.forget_missing(|database, table| {
            self.database(database)
                .and_then(|db| db.table(table))
                .is_some()
        })?;
        if let Some(persister) = &self.persister {
            // puts the drop into the catalog and frees the files
            if let Err(e) = persister.persist_now() {
                tracing::warn!(error = %e, database, table, "the drop is in the WAL; the catalog and the files follow with the next persist");
            }
        }
        Ok(())
    }

    /// Takes `table` (or every table, and the database itself, when `None`) out of the map:
    /// queries and writes no longer find them, persists still freeze them until the drop is
    /// applied. Must hold the sequencer.
    fn take_out(
        &self,
        database: &str,
        table: Option<&str>,
    ) -> Result<Vec<Arc<Table>>, StorageError> {
        let tables = self.remove_from_map(database, table)?;
        self.buffer
            .dropping
            .lock()
            .extend(tables.iter().map(|t| (database.to_string(), t.clone())));
        Ok(tables)
    }

    fn remove_from_map(
        &self,
        database: &str,
        table: Option<&str>,
    ) -> Result<Vec<Arc<Table>>, StorageError> {
        let not_found = |what: String| StorageError::NotFound { what };
        match table {
            Some(table) => {
                let db = self
                    .database(database)
                    .ok_or_else(|| not_found(format!("database {database:?}")))?;
                let removed = db.remove_table(table).ok_or_else(|| {
                    not_found(format!("table {table:?} in database {database:?}"))
                })?;
                Ok(vec![removed])
            }
            None => {
                let db = self
                    .databases
                    .write()
                    .remove(database)
                    .ok_or_else(|| not_found(format!("database {database:?}")))?;
                Ok(db.remove_all_tables())
            }
        }
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

//! Opening a store: the data directory made absolute, locked and checked against the
//! `object_store_url` it was written with; the catalog loaded and the files it does not name
//! deleted; the WAL records it does not cover replayed into the buffer; then the persister
//! started. With `role = query`, a query node follows the writer's catalog instead (no WAL, no
//! writes). [`Store::new`] makes a memory-only store.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use quiver_model::durable_fs::{create_dir_durably, replace_durably, Access};
use quiver_wal::{ReplaySummary, Wal};

use crate::buffer::{ApplyToTables, Buffer, Dropped};
use crate::catalog::{self, CATALOG_FILE};
use crate::chunk_cache::ChunkCache;
use crate::data_store::DataStore;
use crate::database::{self, DatabaseMap};
use crate::error::StorageError;
use crate::follower::{FollowedState, Follower};
use crate::limits::StoreLimits;
use crate::options::{StoreAccess, StoreOptions, WAL_DIR};
use crate::parquet_write::{self, TABLES_DIR};
use crate::persister::Persister;
use crate::rollup_states::RollupStates;
use crate::value_caches::{self, ValueCache, ValueCaches};
use crate::wal_record;
use crate::Store;

/// The file in a writer's data directory naming the `object_store_url` it writes: a later
/// start without it would serve none of that data, and is refused.
const OBJECT_STORE_MARKER: &str = "OBJECT_STORE_URL";

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

impl Store {
    /// A durable store in `options.data_dir`: creates the directory, makes its path (and the
    /// WAL's) absolute (symlinks resolved, so every path derived from it holds whatever the
    /// working directory later is), locks it against a second process, loads the catalog
    /// (from `object_store_url` if set), deletes orphaned files, replays the WAL records the
    /// catalog does not cover, then accepts writes (each acknowledged as durable as it asks)
    /// and persists the buffer in the background. With `role = query`, a query node instead:
    /// no WAL, no writes; it follows the writer's catalog (see [`follower`](crate::follower)).
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
        create_dir_durably(&options.data_dir)?;
        options.data_dir = std::fs::canonicalize(&options.data_dir)
            .map_err(|e| StorageError::io(&options.data_dir, e))?;
        let lock = catalog::DataDirLock::acquire(&options.data_dir)?;
        let data = Self::data_store_of(&options)?;
        if options.access == StoreAccess::Follower {
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
        let unnamed = parquet_write::unnamed_files(&listed, &known);
        let persisted = state.persisted_through_seq;
        let databases = Arc::new(RwLock::new(databases));
        let rollups = Arc::new(RollupStates::open(Some(&options.data_dir), &state)?);
        let value_caches = Arc::new(ValueCaches::new(state.value_caches.clone()));
        let legacy_value_caches = value_caches::read_legacy_file(&options.data_dir)?;
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
        if let Some(legacy) = legacy_value_caches {
            store.move_legacy_value_caches(&options.data_dir, legacy)?;
        }
        store.rollups.forget_missing(|database, table| {
            store
                .database(database)
                .and_then(|db| db.table(table))
                .is_some()
        });
        // rollups of a data directory that kept them in manifests only, or whose table's drop
        // the catalog holds now
        store.record_rollups()?;
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
            if options.access == StoreAccess::Writer && marker.exists() {
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
            if options.access == StoreAccess::Follower {
                return Err(StorageError::Catalog(
                    "role = query serves the writer's data: set object_store_url to the writer's"
                        .into(),
                ));
            }
            return DataStore::directory(&options.data_dir);
        }
        if options.access == StoreAccess::Writer {
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
        if options.access == StoreAccess::Writer {
            // once the URL is known good: a refused start leaves the directory as it was
            replace_durably(
                &options.data_dir,
                OBJECT_STORE_MARKER,
                options.object_store_url.as_bytes(),
                Access::Default,
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
        let value_caches = Arc::new(ValueCaches::default());
        let rollups = Arc::new(RollupStates::default());
        let follower = Follower::load(
            data.clone(),
            (limits.clone(), default_retention, lock),
            FollowedState {
                databases: databases.clone(),
                chunk_cache: chunk_cache.clone(),
                value_caches: value_caches.clone(),
                rollups: rollups.clone(),
            },
        )?;
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
            value_caches,
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

    /// Moves the caches' settings a data directory kept in `value_caches.json` (before they
    /// moved into the catalog) into the catalog, and deletes the file. A catalog that holds
    /// caches already got them from it before a crash kept the file: it is only deleted.
    fn move_legacy_value_caches(
        &self,
        data_dir: &std::path::Path,
        legacy: Vec<ValueCache>,
    ) -> Result<(), StorageError> {
        if self.value_caches.list().is_empty() && !legacy.is_empty() {
            tracing::info!(
                caches = legacy.len(),
                "moved the last-value and distinct-value caches' settings into the catalog"
            );
            self.record_value_caches(legacy)?;
        }
        value_caches::remove_legacy_file(data_dir)
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
}

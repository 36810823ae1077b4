//! Changes to what a store holds and how (DDL): creating and dropping databases and tables, a
//! database's retention period, rollups, and the last-value and distinct-value caches. Each
//! holds the store's `ddl` lock from start to end (one change at a time), and a query node
//! refuses them all.

use std::sync::Arc;

use quiver_wal::Durability;

use crate::buffer::{Change, Dropped};
use crate::catalog::CatalogState;
use crate::database::Database;
use crate::error::StorageError;
use crate::limits::{validate_database_name, validate_table_name};
use crate::retention::RetentionPeriod;
use crate::rollup::{RollupDefinition, RollupState};
use crate::table::Table;
use crate::value_caches::{self, ValueCache};
use crate::wal_record;
use crate::Store;

impl Store {
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
        let state = self.rollups.create(definition.clone(), created_seq)?;
        // the catalog names it last: a rollup the catalog names has its state
        if let Err(e) = self.record_in_catalog(|catalog| catalog.rollups.push(definition), || {}) {
            let d = state.definition();
            let _ = self.rollups.remove(&d.database, &d.name);
            return Err(e);
        }
        Ok(state)
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
        let caches = self.value_caches.with_created(cache)?;
        self.record_value_caches(caches)
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
        let caches = self
            .value_caches
            .retained(|c| !c.is(kind_name, db, table, Some(name)))
            .ok_or_else(|| StorageError::NotFound {
                what: format!("{kind_name} cache {name:?} of table {table:?} in database {db:?}"),
            })?;
        self.record_value_caches(caches)
    }

    /// Makes `caches` the configured caches, in the catalog first.
    pub(crate) fn record_value_caches(&self, caches: Vec<ValueCache>) -> Result<(), StorageError> {
        let stored = caches.clone();
        self.record_in_catalog(
            |state| state.value_caches = stored,
            || self.value_caches.replace(caches),
        )
    }

    /// Drops rollup `name` of `database` and deletes its files (its base table keeps its
    /// rows).
    pub fn drop_rollup(&self, database: &str, name: &str) -> Result<(), StorageError> {
        self.writable("rollup changes")?;
        let _ddl = self.ddl.lock();
        if self.rollups.get(database, name).is_none() {
            return Err(StorageError::NotFound {
                what: format!("rollup {name:?} in database {database:?}"),
            });
        }
        // out of the catalog first: a rollup the catalog no longer names is gone after a
        // crash, its files too
        self.record_in_catalog(
            |catalog| {
                catalog
                    .rollups
                    .retain(|d| d.database != database || d.name != name)
            },
            || {},
        )?;
        self.rollups.remove(database, name)
    }

    /// Makes the catalog's rollup definitions the rollups there are (after drops of tables
    /// took theirs, and at start-up), if they differ.
    pub(crate) fn record_rollups(&self) -> Result<(), StorageError> {
        let definitions = self.rollups.definitions();
        let recorded = self.catalog().map(|c| c.rollups).unwrap_or_default();
        if recorded == definitions {
            return Ok(());
        }
        self.record_in_catalog(|catalog| catalog.rollups = definitions, || {})
    }

    /// Writes `name`'s retention setting to the catalog, then runs `stored`.
    fn record_retention(
        &self,
        name: &str,
        retention: Option<RetentionPeriod>,
        stored: impl FnOnce(),
    ) -> Result<(), StorageError> {
        self.record_in_catalog(
            |state| {
                let entry = state.databases.entry(name.to_string()).or_default();
                entry.retention_period = retention;
            },
            stored,
        )
    }

    /// Makes `change` to the catalog through its one writer, then runs `stored` (at once in
    /// a store without a catalog).
    fn record_in_catalog(
        &self,
        change: impl FnOnce(&mut CatalogState),
        stored: impl FnOnce(),
    ) -> Result<(), StorageError> {
        match &self.persister {
            Some(persister) => persister.configure(change, stored),
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
        let kept = self.value_caches.retained(|c| {
            self.database(&c.db)
                .and_then(|db| db.table(&c.table))
                .is_some()
        });
        if let Some(caches) = kept {
            self.record_value_caches(caches)?;
        }
        self.record_rollups()?;
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
    pub(crate) fn take_out(
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
}

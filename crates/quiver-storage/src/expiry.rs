//! Retention in the background: the persister deletes the files whose every row is past their
//! database's retention period (the catalog first, durably, then the tables). What a period
//! is and which files it expires is [`crate::retention`]'s.

use std::collections::HashSet;
use std::sync::Arc;

use crate::database::Database;
use crate::error::StorageError;
use crate::persister::Persister;
use crate::retention;
use crate::table::Table;

impl Persister {
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
}

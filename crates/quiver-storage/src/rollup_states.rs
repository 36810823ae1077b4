//! Every rollup of a store ([`RollupStates`]): created, listed and dropped here, loaded at
//! start-up (before the WAL's replay, which then marks what it replays), told about every
//! applied write and drop.
//!
//! The definitions are the catalog's (`CatalogState::rollups`, written by its one writer); a
//! rollup's kept rows and manifest are the writer's own, in its data directory. A query node
//! follows the definitions of the catalog it applies and keeps the rows of each rollup in
//! memory, computed from the shared files like the writer's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::TimestampNanosecondType;
use parking_lot::RwLock;
use quiver_model::schema::TIME_COLUMN;

use crate::buffer::Dropped;
use crate::catalog::CatalogState;
use crate::rollup::{read_manifest, RollupDefinition, RollupState, MANIFEST_FILE};
use crate::table::PreparedRows;
use crate::StorageError;

/// The rollups' directory inside the data directory: one sub-directory per rollup, named by
/// its id.
pub const ROLLUPS_DIR: &str = "rollups";

/// The most rollups one table may have: each is maintained from every write to it and
/// weighed by every aggregate over it.
pub const MAX_ROLLUPS_PER_TABLE: usize = 16;

/// The rollups of one store.
#[derive(Debug, Default)]
pub struct RollupStates {
    /// `<data_dir>/rollups`; `None` for a memory-only store.
    dir: Option<PathBuf>,
    rollups: RwLock<Vec<Arc<RollupState>>>,
    next_id: AtomicU64,
    /// True while there is at least one rollup: writes skip the registry otherwise.
    any: AtomicBool,
    /// Bumped by every creation and removal: plans kept under an older value may route to a
    /// rollup that is gone, or miss a new one.
    generation: AtomicU64,
}

impl RollupStates {
    /// The rollups kept in `data_dir` (none for `None`), with the buckets that base-table
    /// files newer than each manifest touch marked pending.
    pub(crate) fn open(
        data_dir: Option<&Path>,
        catalog: &CatalogState,
    ) -> Result<Self, StorageError> {
        let Some(data_dir) = data_dir else {
            return Ok(RollupStates::default());
        };
        let dir = data_dir.join(ROLLUPS_DIR);
        let mut rollups = Vec::new();
        let mut next_id = 1;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries.collect::<Result<Vec<_>, _>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
        .map_err(|e| StorageError::io(&dir, e))?;
        for entry in entries {
            let path = entry.path();
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            next_id = next_id.max(id + 1);
            if !path.join(MANIFEST_FILE).exists() {
                // created but never recorded: nothing of it was acknowledged
                remove_dir(&path);
                continue;
            }
            let manifest = read_manifest(&path)?;
            let newer_files = newer_files(catalog, &manifest.definition, manifest.files_through_id);
            let state = RollupState::load(&path, manifest)?;
            for (min, max) in newer_files {
                state.mark_changed(min, max);
            }
            rollups.push(Arc::new(state));
        }
        // in the catalog, but its directory is gone: computed again from the raw rows
        for definition in &catalog.rollups {
            let known = rollups.iter().any(|r| r.definition().is_named(definition));
            if !known {
                let id = next_id;
                next_id += 1;
                let state = RollupState::new(definition.clone(), 0, Some(dir.join(id.to_string())));
                state.save_new()?;
                rollups.push(Arc::new(state));
            }
        }
        Ok(RollupStates {
            dir: Some(dir),
            any: AtomicBool::new(!rollups.is_empty()),
            rollups: RwLock::new(rollups),
            next_id: AtomicU64::new(next_id),
            generation: AtomicU64::new(0),
        })
    }

    /// Adds a rollup with everything pending, durably. The caller checked the name and the
    /// base table.
    pub(crate) fn create(
        &self,
        definition: RollupDefinition,
        created_seq: u64,
    ) -> Result<Arc<RollupState>, StorageError> {
        if self.of_table(&definition.database, &definition.table).len() >= MAX_ROLLUPS_PER_TABLE {
            return Err(StorageError::TooManyOnTable {
                table: definition.table,
                what: "rollups",
                limit: MAX_ROLLUPS_PER_TABLE,
            });
        }
        let dir = self
            .dir
            .as_ref()
            .map(|dir| dir.join(self.next_id.fetch_add(1, Ordering::AcqRel).to_string()));
        let state = Arc::new(RollupState::new(definition, created_seq, dir));
        state.save_new()?;
        self.rollups.write().push(state.clone());
        self.any.store(true, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(state)
    }

    /// Drops the rollup `name` of `database` and deletes its files.
    pub(crate) fn remove(&self, database: &str, name: &str) -> Result<(), StorageError> {
        let removed = {
            let mut rollups = self.rollups.write();
            let position = rollups
                .iter()
                .position(|r| r.definition().database == database && r.definition().name == name);
            let removed = position.map(|i| rollups.remove(i));
            self.any.store(!rollups.is_empty(), Ordering::Release);
            removed
        };
        let Some(removed) = removed else {
            return Err(StorageError::NotFound {
                what: format!("rollup {name:?} in database {database:?}"),
            });
        };
        removed.mark_dropped();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(dir) = removed.dir() {
            remove_dir(dir);
        }
        Ok(())
    }

    /// Every rollup's definition, in creation order (what the catalog records).
    pub(crate) fn definitions(&self) -> Vec<RollupDefinition> {
        self.rollups
            .read()
            .iter()
            .map(|r| r.definition().clone())
            .collect()
    }

    /// On a query node: makes `definitions` (the applied catalog's) the rollups, each new one
    /// kept in memory with everything pending, each one gone dropped.
    pub(crate) fn follow(&self, definitions: &[RollupDefinition]) {
        let mut rollups = self.rollups.write();
        let (kept, gone): (Vec<_>, Vec<_>) = rollups
            .drain(..)
            .partition(|r| definitions.contains(r.definition()));
        let mut changed = !gone.is_empty();
        for removed in gone {
            removed.mark_dropped();
        }
        *rollups = kept;
        for definition in definitions {
            if !rollups.iter().any(|r| r.definition() == definition) {
                rollups.push(Arc::new(RollupState::new(definition.clone(), 0, None)));
                changed = true;
            }
        }
        self.any.store(!rollups.is_empty(), Ordering::Release);
        if changed {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Marks the buckets of `[min, max]` pending in the rollups of `table` in `database`.
    pub(crate) fn mark_changed(&self, database: &str, table: &str, min: i64, max: i64) {
        for rollup in self.of_table(database, table) {
            rollup.mark_changed(min, max);
        }
    }

    /// Changes with every creation and removal of a rollup.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The rollup `name` of `database`.
    pub fn get(&self, database: &str, name: &str) -> Option<Arc<RollupState>> {
        self.rollups
            .read()
            .iter()
            .find(|r| r.definition().database == database && r.definition().name == name)
            .cloned()
    }

    /// The rollups of `table` in `database`.
    pub fn of_table(&self, database: &str, table: &str) -> Vec<Arc<RollupState>> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.rollups
            .read()
            .iter()
            .filter(|r| r.definition().database == database && r.definition().table == table)
            .cloned()
            .collect()
    }

    /// Every rollup, in creation order.
    pub fn list(&self) -> Vec<Arc<RollupState>> {
        self.rollups.read().clone()
    }

    /// Marks the buckets applied rows touch as pending in their tables' rollups.
    pub(crate) fn rows_applied(&self, rows: &PreparedRows) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        for (table, batch) in rows.iter() {
            let rollups = self.of_table(table.database(), table.name());
            if rollups.is_empty() {
                continue;
            }
            if let Some((min, max)) = time_range(batch) {
                for rollup in &rollups {
                    rollup.mark_changed(min, max);
                }
            }
        }
    }

    /// Drops the rollups of the tables `dropped` took out (a drop logged at `seq`: rollups
    /// created after it are of a table created since).
    pub(crate) fn tables_dropped(&self, seq: u64, dropped: &Dropped) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let gone: Vec<Arc<RollupState>> = self
            .list()
            .into_iter()
            .filter(|r| {
                let d = r.definition();
                d.database == dropped.database
                    && dropped.table.as_ref().is_none_or(|t| *t == d.table)
                    && (seq == 0 || r.created_seq() < seq)
            })
            .collect();
        for rollup in gone {
            let d = rollup.definition();
            let _ = self.remove(&d.database, &d.name);
        }
    }

    /// Drops the rollups whose base table does not exist (`exists` says): their drop reached
    /// the catalog before the rollup's files were deleted.
    pub(crate) fn forget_missing(&self, exists: impl Fn(&str, &str) -> bool) {
        for rollup in self.list() {
            let d = rollup.definition();
            if !exists(&d.database, &d.table) {
                let _ = self.remove(&d.database, &d.name);
            }
        }
    }
}

/// The smallest and largest `time` of a batch of table rows.
fn time_range(batch: &RecordBatch) -> Option<(i64, i64)> {
    let times = batch
        .column_by_name(TIME_COLUMN)?
        .as_primitive_opt::<TimestampNanosecondType>()?;
    let min = arrow::compute::min(times)?;
    let max = arrow::compute::max(times)?;
    Some((min, max))
}

/// The time ranges of `definition`'s base-table files with ids above `through_id`.
fn newer_files(
    catalog: &CatalogState,
    definition: &RollupDefinition,
    through_id: u64,
) -> Vec<(i64, i64)> {
    catalog
        .databases
        .get(&definition.database)
        .and_then(|db| db.tables.get(&definition.table))
        .map(|table| {
            table
                .files
                .iter()
                .filter(|f| f.id > through_id)
                .map(|f| (f.min_time_ns, f.max_time_ns))
                .collect()
        })
        .unwrap_or_default()
}

fn remove_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %dir.display(), error = %e, "cannot remove a dropped rollup's files");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::store_tests::{open, write};
    use crate::RollupDefinition;

    /// A minute in nanoseconds.
    pub(crate) const MINUTE: i64 = 60_000_000_000;

    /// Rollup `r` of `m.cpu`, in 10-minute buckets.
    pub(crate) fn ten_minutes_of_cpu() -> RollupDefinition {
        RollupDefinition {
            database: "m".into(),
            name: "r".into(),
            table: "cpu".into(),
            sql: "(the query layer's)".into(),
            bucket_ns: 10 * MINUTE,
            origin_ns: 0,
        }
    }

    /// The bucket ranges rollup `m.r` of `store` covers within `[lo, hi)`.
    pub(crate) fn covered(store: &crate::Store, lo: i64, hi: i64) -> Vec<(i64, i64)> {
        let rollup = store.rollups().get("m", "r").unwrap();
        rollup
            .coverage(Some(lo), Some(hi), None)
            .covered
            .iter()
            .collect()
    }

    /// A rollup whose manifest predates writes finds them after a crash: persisted ones by
    /// their files' ids, the others by the WAL's replay.
    #[test]
    fn writes_after_the_last_manifest_are_pending_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, _) = open(dir.path());
            write(&store, "m", &format!("cpu,host=a v=1 {}", 5 * MINUTE));
            store.persist_now().unwrap();
            let rollup = store.create_rollup(ten_minutes_of_cpu()).unwrap();
            let table = store.database("m").unwrap().table("cpu").unwrap();
            let through = table.snapshot().unwrap().newest_file_id();
            assert!(through > 0);
            // everything recomputed (to no rows: storage does not look inside them)
            let far_future = i64::MAX / 2;
            while let Some(range) = rollup.next_work(far_future, Some((5 * MINUTE, 5 * MINUTE))) {
                rollup.install(range, &[], through).unwrap();
            }
            assert_eq!(covered(&store, 0, 40 * MINUTE), vec![(0, 40 * MINUTE)]);
            // a late write that reaches a file (its WAL record is not replayed), and one that
            // stays in the WAL; then the process dies before the rollup catches up
            write(&store, "m", &format!("cpu,host=a v=2 {}", 25 * MINUTE));
            store.persist_now().unwrap();
            write(&store, "m", &format!("cpu,host=a v=3 {}", 35 * MINUTE));
            assert_eq!(covered(&store, 0, 40 * MINUTE), vec![(0, 20 * MINUTE)]);
            store.close();
        }
        let (store, _) = open(dir.path());
        assert_eq!(covered(&store, 0, 40 * MINUTE), vec![(0, 20 * MINUTE)]);
        // a rollup name is no table to write to
        let refused = crate::store_tests::try_write(&store, "m", "r v=1 1").unwrap_err();
        assert!(refused.to_string().contains("read-only"), "{refused}");
        store.drop_table("m", "cpu").unwrap();
        assert!(store.rollups().get("m", "r").is_none());
        store.close();
        drop(store);
        let (store, _) = open(dir.path());
        assert!(store.rollups().list().is_empty(), "the drop is durable");
        assert!(!dir.path().join(super::ROLLUPS_DIR).join("1").exists());
    }

    /// A persist gives rows new files without changing them: once the state is checkpointed
    /// with the new files' ids, a restart does not recompute their buckets.
    #[test]
    fn a_checkpoint_after_a_persist_keeps_buckets_covered_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, _) = open(dir.path());
            write(&store, "m", &format!("cpu,host=a v=1 {}", 5 * MINUTE));
            let rollup = store.create_rollup(ten_minutes_of_cpu()).unwrap();
            while let Some(range) = rollup.next_work(i64::MAX / 2, Some((5 * MINUTE, 5 * MINUTE))) {
                rollup.install(range, &[], 0).unwrap();
            }
            store.persist_now().unwrap();
            let table = store.database("m").unwrap().table("cpu").unwrap();
            rollup
                .checkpoint(table.snapshot().unwrap().newest_file_id())
                .unwrap();
            store.close();
        }
        let (store, _) = open(dir.path());
        assert_eq!(covered(&store, 0, 40 * MINUTE), vec![(0, 40 * MINUTE)]);
    }
}

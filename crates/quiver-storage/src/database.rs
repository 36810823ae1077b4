//! Databases: each a named set of tables, created by its first write. A write is checked
//! against its database's tables here (tables created, columns reserved, limits enforced) before
//! it is logged; the catalog's databases are rebuilt here at start-up.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;
use quiver_model::schema::{ColumnType, DecodedTable, SchemaLookup};

use crate::catalog::CatalogState;
use crate::error::StorageError;
use crate::limits::{validate_table_name, StoreLimits};
use crate::retention::{RetentionCell, RetentionPeriod};
use crate::table::{self, ParquetFile, PreparedRows, Table};

/// What one write did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriteReceipt {
    /// Rows appended.
    pub rows: usize,
    /// The write's WAL sequence number (`None` for a memory-only store).
    pub sequence: Option<u64>,
}

/// A database: a named set of tables, and how long they keep their rows.
pub struct Database {
    name: String,
    pub(crate) tables: RwLock<BTreeMap<String, Arc<Table>>>,
    limits: StoreLimits,
    /// The database's own retention period; `None`: the server's default.
    retention_setting: RwLock<Option<RetentionPeriod>>,
    /// The period in force, shared with the tables.
    pub(crate) retention: Arc<RetentionCell>,
}

impl Database {
    /// An empty database; `retention` is its own setting (if any) and the server default.
    pub(crate) fn new(
        name: String,
        limits: StoreLimits,
        retention: (Option<RetentionPeriod>, RetentionPeriod),
    ) -> Self {
        let (setting, default) = retention;
        Database {
            name,
            tables: RwLock::new(BTreeMap::new()),
            limits,
            retention_setting: RwLock::new(setting),
            retention: Arc::new(RetentionCell::new(setting.unwrap_or(default))),
        }
    }

    /// The retention period in force: the database's own, else the server's default.
    pub fn retention_period(&self) -> RetentionPeriod {
        self.retention.get()
    }

    /// The database's own retention period, if it set one.
    pub fn retention_setting(&self) -> Option<RetentionPeriod> {
        *self.retention_setting.read()
    }

    /// Sets the database's own retention period (`None`: follow `default`); takes effect for
    /// every query from now on.
    pub(crate) fn set_retention(&self, setting: Option<RetentionPeriod>, default: RetentionPeriod) {
        *self.retention_setting.write() = setting;
        self.retention.set(setting.unwrap_or(default));
        for table in self.tables.read().values() {
            table.retention_changed();
        }
    }

    /// Takes `name` out of the database (queries and writes from now on do not find it).
    pub(crate) fn remove_table(&self, name: &str) -> Option<Arc<Table>> {
        self.tables.write().remove(name)
    }

    /// Takes every table out of the database.
    pub(crate) fn remove_all_tables(&self) -> Vec<Arc<Table>> {
        std::mem::take(&mut *self.tables.write())
            .into_values()
            .collect()
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

    /// Every table, sorted by name.
    pub(crate) fn tables(&self) -> Vec<Arc<Table>> {
        self.tables.read().values().cloned().collect()
    }

    /// Checks decoded batches against their tables (creating tables on first write) and
    /// reserves new columns; all or nothing, and a failed write creates no table. The caller
    /// holds the store's sequencer.
    pub(crate) fn prepare(&self, tables: Vec<DecodedTable>) -> Result<PreparedRows, StorageError> {
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
                        let table = Arc::new(Table::new(
                            self.name.clone(),
                            decoded.name.clone(),
                            self.retention.clone(),
                        ));
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

/// Every database by name.
pub(crate) type DatabaseMap = BTreeMap<String, Arc<Database>>;

/// Builds the databases and tables the catalog records; returns them and the paths of every
/// file it names. With `present` (the paths the data store holds), a named file it lacks is
/// an error.
pub(crate) fn restore_databases(
    state: &CatalogState,
    limits: &StoreLimits,
    default_retention: RetentionPeriod,
    present: Option<&HashSet<String>>,
) -> Result<(DatabaseMap, HashSet<String>), StorageError> {
    let mut databases = BTreeMap::new();
    let mut known = HashSet::new();
    for (name, entry) in &state.databases {
        let db = Database::new(
            name.clone(),
            limits.clone(),
            (entry.retention_period, default_retention),
        );
        for (table_name, table) in &entry.tables {
            let columns = table.column_types()?;
            let files = table
                .files
                .iter()
                .map(|f| {
                    if present.is_some_and(|present| !present.contains(&f.path)) {
                        return Err(StorageError::Catalog(format!(
                            "table {name}.{table_name}: file {} named by the catalog is missing",
                            f.path
                        )));
                    }
                    known.insert(f.path.clone());
                    Ok(Arc::new(ParquetFile { entry: f.clone() }))
                })
                .collect::<Result<Vec<_>, _>>()?;
            db.tables.write().insert(
                table_name.clone(),
                Arc::new(Table::restore(
                    (
                        name.clone(),
                        table_name.clone(),
                        db.retention.clone(),
                        table.id,
                    ),
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

impl SchemaLookup for Database {
    fn existing_columns(&self, table: &str) -> Vec<(String, ColumnType)> {
        self.table(table).map(|t| t.columns()).unwrap_or_default()
    }
}

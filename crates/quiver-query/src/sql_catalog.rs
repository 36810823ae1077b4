//! DataFusion's view of the store: one catalog (`quiver`) whose schemas are Quiver databases
//! and whose tables are [`QuiverTable`]s (write buffer and Parquet files) and rollups (views
//! of their statements, which the router answers from them), plus the system
//! schemas a session registers (e.g. PostgreSQL's `pg_catalog`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::datasource::ViewTable;
use datafusion::error::{DataFusionError, Result};
use parking_lot::RwLock;
use quiver_model::VisibleDatabases;
use quiver_storage::{ChunkCache, Database, Store, RESERVED_DATABASE_NAMES};

use crate::provider::QuiverTable;
use crate::rollup::Rollups;

/// The name of the one catalog Quiver exposes.
pub const CATALOG_NAME: &str = "quiver";

/// True for the names of system schemas (`information_schema`, `pg_catalog`): they describe
/// the catalog, they are not Quiver databases.
pub fn is_system_schema(name: &str) -> bool {
    RESERVED_DATABASE_NAMES.contains(&name)
}

/// The `quiver` catalog: lists the store's databases as SQL schemas, live, as far as the
/// caller may see them (a token sees only the databases it may read). System schemas
/// registered with [`CatalogProvider::register_schema`] resolve by name but are not listed
/// among the databases.
pub struct QuiverCatalog {
    store: Arc<Store>,
    visible: VisibleDatabases,
    system: RwLock<HashMap<String, Arc<dyn SchemaProvider>>>,
    /// Rollups shown as read-only tables of their databases (none without).
    rollups: Option<Arc<Rollups>>,
}

impl QuiverCatalog {
    /// A catalog over the `visible` databases of `store`.
    pub fn new(store: Arc<Store>, visible: VisibleDatabases) -> Self {
        QuiverCatalog {
            store,
            visible,
            system: RwLock::new(HashMap::new()),
            rollups: None,
        }
    }

    /// This catalog, with each rollup a table of its database: reading it runs the rollup's
    /// statement (which the router answers from the rollup, exactly).
    pub(crate) fn with_rollups(self, rollups: Arc<Rollups>) -> Self {
        QuiverCatalog {
            rollups: Some(rollups),
            ..self
        }
    }
}

impl fmt::Debug for QuiverCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QuiverCatalog")
    }
}

impl CatalogProvider for QuiverCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.store.database_names();
        names.retain(|name| self.visible.shows(name));
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if let Some(system) = self.system.read().get(name) {
            return Some(system.clone());
        }
        if !self.visible.shows(name) {
            return None;
        }
        self.store.database(name).map(|db| {
            Arc::new(DatabaseSchema {
                db,
                chunk_cache: self.store.chunk_cache().clone(),
                rollups: self.rollups.clone(),
            }) as Arc<dyn SchemaProvider>
        })
    }

    /// Registers a system schema (one of [`RESERVED_DATABASE_NAMES`]); databases are created
    /// by writes, never here.
    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        if !is_system_schema(name) {
            return Err(DataFusionError::Plan(format!(
                "cannot register schema {name:?}: databases are created by writing to them"
            )));
        }
        Ok(self.system.write().insert(name.to_string(), schema))
    }
}

/// One database as a SQL schema.
struct DatabaseSchema {
    db: Arc<Database>,
    chunk_cache: Arc<ChunkCache>,
    rollups: Option<Arc<Rollups>>,
}

impl DatabaseSchema {
    /// Rollup `name` of this database as a view of its statement.
    fn rollup(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        let spec = self.rollups.as_ref()?.spec(self.db.name(), name)?;
        Some(Arc::new(ViewTable::new(spec.plan.clone(), None)))
    }
}

impl fmt::Debug for DatabaseSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseSchema({})", self.db.name())
    }
}

#[async_trait]
impl SchemaProvider for DatabaseSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.db.table_names();
        if let Some(rollups) = &self.rollups {
            names.extend(rollups.names(self.db.name()));
            names.sort();
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(match self.db.table(name) {
            Some(table) => Some(Arc::new(QuiverTable::new(table, self.chunk_cache.clone()))),
            None => self.rollup(name),
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.table(name).is_some() || self.rollup(name).is_some()
    }
}

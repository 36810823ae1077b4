//! DataFusion's view of the store: one catalog (`quiver`) whose schemas are Quiver databases
//! and whose tables are [`QuiverTable`]s (write buffer and Parquet files) and rollups (views
//! of their statements, which the router answers from them), plus the system
//! schemas a session registers (e.g. PostgreSQL's `pg_catalog`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::{DataFusionError, Result};
use parking_lot::RwLock;
use quiver_model::VisibleDatabases;
use quiver_storage::{ChunkCache, Database, Store};

use crate::catalog_names::is_system_schema;
use crate::provider::QuiverTable;

/// Views a database shows as read-only tables beside its own tables (the rollups): read
/// through this trait, so the catalog knows nothing of what defines them.
pub(crate) trait DatabaseViews: Send + Sync {
    /// The names of `database`'s views.
    fn names(&self, database: &str) -> Vec<String>;
    /// View `name` of `database`, if there is one.
    fn view(&self, database: &str, name: &str) -> Option<Arc<dyn TableProvider>>;
}

/// The `quiver` catalog: lists the store's databases as SQL schemas, live, as far as the
/// caller may see them (a token sees only the databases it may read). System schemas
/// registered with [`CatalogProvider::register_schema`] resolve by name but are not listed
/// among the databases.
pub struct QuiverCatalog {
    store: Arc<Store>,
    visible: VisibleDatabases,
    system: RwLock<HashMap<String, Arc<dyn SchemaProvider>>>,
    /// Views shown as read-only tables of their databases (rollups; none without).
    views: Option<Arc<dyn DatabaseViews>>,
}

impl QuiverCatalog {
    /// A catalog over the `visible` databases of `store`.
    pub fn new(store: Arc<Store>, visible: VisibleDatabases) -> Self {
        QuiverCatalog {
            store,
            visible,
            system: RwLock::new(HashMap::new()),
            views: None,
        }
    }

    /// This catalog, with each of `views` a table of its database (each rollup: reading it
    /// runs the rollup's statement, which the router answers from the rollup, exactly).
    pub(crate) fn with_views(self, views: Arc<dyn DatabaseViews>) -> Self {
        QuiverCatalog {
            views: Some(views),
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
                views: self.views.clone(),
            }) as Arc<dyn SchemaProvider>
        })
    }

    /// Registers a system schema (one of [`quiver_storage::RESERVED_DATABASE_NAMES`]); databases are created
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
    views: Option<Arc<dyn DatabaseViews>>,
}

impl DatabaseSchema {
    /// View `name` of this database.
    fn view(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.views.as_ref()?.view(self.db.name(), name)
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
        if let Some(views) = &self.views {
            names.extend(views.names(self.db.name()));
            names.sort();
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(match self.db.table(name) {
            Some(table) => Some(Arc::new(QuiverTable::new(table, self.chunk_cache.clone()))),
            None => self.view(name),
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.table(name).is_some() || self.view(name).is_some()
    }
}

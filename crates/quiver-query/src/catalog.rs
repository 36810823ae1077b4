//! DataFusion's view of the store: one catalog (`quiver`) whose schemas are Quiver databases
//! and whose tables are [`QuiverTable`]s (write buffer and Parquet files).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result;
use quiver_storage::{Database, Store};

use crate::provider::QuiverTable;

/// The name of the one catalog Quiver exposes.
pub const CATALOG_NAME: &str = "quiver";

/// The `quiver` catalog: lists the store's databases as SQL schemas, live.
pub struct QuiverCatalog {
    store: Arc<Store>,
}

impl QuiverCatalog {
    /// A catalog over `store`.
    pub fn new(store: Arc<Store>) -> Self {
        QuiverCatalog { store }
    }
}

impl fmt::Debug for QuiverCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QuiverCatalog")
    }
}

impl CatalogProvider for QuiverCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.store.database_names()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        self.store
            .database(name)
            .map(|db| Arc::new(DatabaseSchema { db }) as Arc<dyn SchemaProvider>)
    }
}

/// One database as a SQL schema.
struct DatabaseSchema {
    db: Arc<Database>,
}

impl fmt::Debug for DatabaseSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseSchema({})", self.db.name())
    }
}

#[async_trait]
impl SchemaProvider for DatabaseSchema {
    fn table_names(&self) -> Vec<String> {
        self.db.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .db
            .table(name)
            .map(|table| Arc::new(QuiverTable::new(table)) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.table(name).is_some()
    }
}

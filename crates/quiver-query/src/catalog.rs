//! DataFusion's view of the store: one catalog (`quiver`) whose schemas are Quiver databases
//! and whose tables read the write buffer through [`TableSnapshot`]s.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use quiver_storage::{Database, Store, Table, TableSnapshot};

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
        Ok(self.db.table(name).map(|table| {
            let schema = table.schema();
            Arc::new(BufferTable { table, schema }) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db.table(name).is_some()
    }
}

/// A table read from the write buffer.
///
/// The schema is captured when the query is planned; the rows are read when it is executed.
/// Schemas only grow, so the snapshot taken at execution has every planned column (it is
/// projected back to the planned schema). The snapshot is deduplicated and cached per table
/// version by storage, so planning (including `information_schema` listings) costs no scan.
struct BufferTable {
    table: Arc<Table>,
    schema: SchemaRef,
}

impl fmt::Debug for BufferTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufferTable({})", self.table.name())
    }
}

#[async_trait]
impl TableProvider for BufferTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let snapshot = self
            .table
            .snapshot()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let options = state.config().options();
        let partitions = partition(
            &snapshot,
            &self.schema,
            options.execution.target_partitions,
            usize::from(options.execution.batch_size),
        )?;
        let exec = MemorySourceConfig::try_new_exec(
            &partitions,
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// Splits a snapshot into `partitions` roughly equal, zero-copy groups of batches of at most
/// `batch_size` rows, each projected to `schema` (the schema the query was planned with).
fn partition(
    snapshot: &TableSnapshot,
    schema: &SchemaRef,
    partitions: usize,
    batch_size: usize,
) -> Result<Vec<Vec<RecordBatch>>> {
    let mut slices = Vec::new();
    for batch in &snapshot.batches {
        let batch = project_by_name(batch, schema)?;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = batch_size.min(batch.num_rows() - offset);
            slices.push(batch.slice(offset, len));
            offset += len;
        }
    }
    let per_partition = slices.len().div_ceil(partitions).max(1);
    let mut out: Vec<Vec<RecordBatch>> = slices
        .chunks(per_partition)
        .map(<[RecordBatch]>::to_vec)
        .collect();
    if out.is_empty() {
        out.push(Vec::new());
    }
    Ok(out)
}

fn project_by_name(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            batch.column_by_name(f.name()).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("column {} vanished from the table", f.name()))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

//! The SQL entry point: resolves the database, checks the tables a statement names, plans it
//! with DataFusion and returns a stream of record batches.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::TableReference;
use datafusion::error::DataFusionError;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use parking_lot::Mutex;
use quiver_storage::Store;

use crate::catalog::{QuiverCatalog, CATALOG_NAME};

/// Settings of the SQL engine.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// Parallelism of one query (DataFusion's `target_partitions`).
    pub target_partitions: usize,
    /// Memory all running queries together may use for operators that buffer (sorts, joins,
    /// aggregations); a query needing more fails with a clear error instead of exhausting RAM.
    pub memory_limit_bytes: usize,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            target_partitions: std::thread::available_parallelism().map_or(2, |n| n.get()),
            memory_limit_bytes: 4 << 30,
        }
    }
}

/// Why a query failed. The variants map to HTTP statuses in the server.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The database named by the request or a qualified table name does not exist.
    #[error("database {0:?} not found")]
    DatabaseNotFound(String),
    /// A table named by the statement does not exist.
    #[error("table {table:?} not found in database {database:?}")]
    TableNotFound {
        /// The database searched.
        database: String,
        /// The missing table.
        table: String,
    },
    /// The statement is not valid SQL, or cannot be planned or executed (user error).
    #[error("{0}")]
    Invalid(DataFusionError),
    /// The query needed more memory than the configured limit.
    #[error("query exceeded the memory limit: {0}")]
    ResourcesExhausted(DataFusionError),
    /// A failure that is not the caller's fault.
    #[error("internal error: {0}")]
    Internal(DataFusionError),
}

impl From<DataFusionError> for QueryError {
    fn from(e: DataFusionError) -> Self {
        match e.find_root() {
            DataFusionError::ResourcesExhausted(_) => QueryError::ResourcesExhausted(e),
            DataFusionError::Internal(_) => QueryError::Internal(e),
            DataFusionError::IoError(_) => QueryError::Internal(e),
            _ => QueryError::Invalid(e),
        }
    }
}

/// The result of a query: its schema (known before the first row) and its rows, streamed.
pub struct QueryOutput {
    /// Schema of the result.
    pub schema: SchemaRef,
    /// The rows.
    pub stream: SendableRecordBatchStream,
}

/// Runs SQL against the store.
pub struct QueryEngine {
    store: Arc<Store>,
    options: QueryOptions,
    runtime: Arc<RuntimeEnv>,
    /// One DataFusion context per database (its default schema); contexts are cheap to use but
    /// not to build, and the catalog behind them is live, so they never go stale.
    contexts: Mutex<HashMap<String, SessionContext>>,
}

impl QueryEngine {
    /// An engine over `store`.
    pub fn new(store: Arc<Store>, options: QueryOptions) -> Result<Self, QueryError> {
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(options.memory_limit_bytes, 1.0)
            .build_arc()?;
        Ok(QueryEngine {
            store,
            options,
            runtime,
            contexts: Mutex::new(HashMap::new()),
        })
    }

    fn context(&self, database: &str) -> SessionContext {
        let mut contexts = self.contexts.lock();
        contexts
            .entry(database.to_string())
            .or_insert_with(|| {
                let config = SessionConfig::new()
                    .with_information_schema(true)
                    .with_create_default_catalog_and_schema(false)
                    .with_default_catalog_and_schema(CATALOG_NAME, database)
                    .with_target_partitions(self.options.target_partitions);
                let ctx = SessionContext::new_with_config_rt(config, self.runtime.clone());
                ctx.register_catalog(
                    CATALOG_NAME,
                    Arc::new(QuiverCatalog::new(self.store.clone())),
                );
                ctx
            })
            .clone()
    }

    /// Plans and starts one read-only SQL statement in `database`.
    ///
    /// Fails with [`QueryError::DatabaseNotFound`] / [`QueryError::TableNotFound`] before
    /// planning when the statement names a database or table that does not exist, and with
    /// [`QueryError::Invalid`] for anything DataFusion rejects (its message is kept). DDL, DML
    /// and session statements (`SET`, ...) are refused.
    pub async fn execute(&self, database: &str, sql: &str) -> Result<QueryOutput, QueryError> {
        if self.store.database(database).is_none() {
            return Err(QueryError::DatabaseNotFound(database.to_string()));
        }
        let ctx = self.context(database);
        let state = ctx.state();
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(sql, &dialect)?;
        if !is_read_only(&statement) {
            return Err(QueryError::Invalid(DataFusionError::Plan(format!(
                "only queries (SELECT, WITH, SHOW, EXPLAIN, DESCRIBE) are accepted here, not: {statement}"
            ))));
        }
        for reference in state.resolve_table_references(&statement)? {
            self.check_table_exists(database, &reference)?;
        }
        let plan = state.statement_to_plan(statement).await?;
        datafusion::execution::context::SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false)
            .verify_plan(&plan)?;
        let frame = ctx.execute_logical_plan(plan).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let stream = frame.execute_stream().await?;
        Ok(QueryOutput { schema, stream })
    }

    fn check_table_exists(
        &self,
        database: &str,
        reference: &TableReference,
    ) -> Result<(), QueryError> {
        let resolved = reference.clone().resolve(CATALOG_NAME, database);
        if resolved.catalog.as_ref() != CATALOG_NAME
            || resolved.schema.as_ref() == "information_schema"
        {
            return Ok(()); // DataFusion reports unknown catalogs itself
        }
        let Some(db) = self.store.database(&resolved.schema) else {
            return Err(QueryError::DatabaseNotFound(resolved.schema.to_string()));
        };
        if db.table(&resolved.table).is_none() {
            return Err(QueryError::TableNotFound {
                database: resolved.schema.to_string(),
                table: resolved.table.to_string(),
            });
        }
        Ok(())
    }
}

/// True for statements that only read: queries, `SHOW`, `EXPLAIN` of a query, `DESCRIBE`.
fn is_read_only(statement: &DFStatement) -> bool {
    match statement {
        DFStatement::Statement(statement) => match statement.as_ref() {
            SqlStatement::Query(_)
            | SqlStatement::ShowTables { .. }
            | SqlStatement::ShowColumns { .. }
            | SqlStatement::ExplainTable { .. } => true,
            SqlStatement::Explain { statement, .. } => {
                is_read_only(&DFStatement::Statement(statement.clone()))
            }
            _ => false,
        },
        DFStatement::Explain(explain) => is_read_only(&explain.statement),
        DFStatement::CreateExternalTable(_) | DFStatement::CopyTo(_) | DFStatement::Reset(_) => {
            false
        }
    }
}

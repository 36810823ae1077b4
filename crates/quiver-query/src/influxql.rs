//! InfluxQL through the engine: a statement `quiver-influxql` parsed is analysed as SQL is
//! (the measurements it reads, whether its answer depends on the clock, a canonical text for
//! the caches), then planned by `quiver-influxql` against the session's catalog (so grants
//! and visibility are the same as for SQL) and the statement's one clock, and run like any
//! plan: governed, cached, streamed.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::datasource::provider_as_source;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{LogicalPlan, TableSource};
use quiver_influxql::ast::Statement;
use quiver_influxql::plan::{self, PlanContext, SchemaSource, DEFAULT_MAX_BUCKETS};
use quiver_storage::Store;

use crate::analyze::{AnalyzedStatement, Cacheability, QueryAnalysis, ScannedTable};
use crate::catalog_names::CATALOG_NAME;
use crate::error::QueryError;

/// Marks InfluxQL statements in the plan cache's keys (beside SQL dialects).
struct InfluxqlLanguage;

/// What a cache needs to know about an InfluxQL statement in `database`: fails like
/// `QueryEngine::analyze` for an unknown database, and with [`QueryError::Invalid`] for
/// an invalid regular expression. A regular expression in `FROM` is matched against the
/// measurements that exist now.
pub(crate) fn analyze(
    store: &Store,
    database: &str,
    statement: Statement,
) -> Result<QueryAnalysis, QueryError> {
    let db = store
        .database(database)
        .ok_or_else(|| QueryError::DatabaseNotFound(database.to_string()))?;
    let mut measurements = db.table_names();
    measurements.sort();
    let read = plan::measurements_read(&statement, &measurements).map_err(invalid)?;
    let cacheability = match &statement {
        Statement::Select(_) if plan::uses_clock(&statement) => Cacheability::ClockDependent,
        Statement::Select(_) => Cacheability::Deterministic,
        _ => Cacheability::Never("SHOW lists the catalog".into()),
    };
    let text = statement.to_string();
    Ok(QueryAnalysis {
        database: database.to_string(),
        canonical: format!("influxql {text}"),
        text,
        tables: read
            .into_iter()
            .map(|table| ScannedTable {
                database: database.to_string(),
                table,
            })
            .collect(),
        cacheability,
        statement: AnalyzedStatement::Influxql(Arc::new(statement)),
        dialect: TypeId::of::<InfluxqlLanguage>(),
    })
}

fn invalid(error: plan::PlanError) -> QueryError {
    QueryError::Invalid(DataFusionError::Plan(error.0))
}

/// The catalog as the planner sees it: the tables the statement reads, looked up beforehand
/// (a lookup is asynchronous, planning is not).
struct Prefetched {
    tables: BTreeMap<String, Arc<dyn TableSource>>,
    databases: Vec<String>,
    retention_ns: Option<i64>,
}

impl SchemaSource for Prefetched {
    fn measurements(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
    }

    fn table(&self, name: &str) -> Option<Arc<dyn TableSource>> {
        self.tables.get(name).cloned()
    }

    fn databases(&self) -> Vec<String> {
        self.databases.clone()
    }

    fn retention_ns(&self) -> Option<i64> {
        self.retention_ns
    }
}

/// The plan of an analysed InfluxQL statement in `state`'s session.
pub(crate) async fn logical_plan(
    store: &Store,
    state: &SessionState,
    analysis: &QueryAnalysis,
    statement: &Statement,
) -> Result<LogicalPlan, DataFusionError> {
    let catalog = state
        .catalog_list()
        .catalog(CATALOG_NAME)
        .ok_or_else(|| DataFusionError::Internal("the quiver catalog is missing".into()))?;
    let mut databases = catalog.schema_names();
    databases.sort();
    let mut tables = BTreeMap::new();
    if let Some(schema) = catalog.schema(&analysis.database) {
        for scanned in &analysis.tables {
            if let Some(provider) = schema.table(&scanned.table).await? {
                tables.insert(scanned.table.clone(), provider_as_source(provider));
            }
        }
    }
    let now = state
        .execution_props()
        .query_execution_start_time
        .unwrap_or_else(chrono::Utc::now);
    let source = Prefetched {
        tables,
        databases,
        retention_ns: retention_ns(store, &analysis.database),
    };
    let ctx = PlanContext {
        schemas: &source,
        now_ns: now.timestamp_nanos_opt().unwrap_or(i64::MAX),
        max_buckets: DEFAULT_MAX_BUCKETS,
    };
    plan::plan(statement, &ctx).map_err(|e| DataFusionError::Plan(e.0))
}

/// The retention period of `database` (`None`: forever).
fn retention_ns(store: &Store, database: &str) -> Option<i64> {
    let period = store.database(database)?.retention_period().duration()?;
    i64::try_from(period.as_nanos()).ok()
}

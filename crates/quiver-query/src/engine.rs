//! The SQL entry point: resolves the database, checks the tables a statement names, plans it
//! with DataFusion and returns a stream of record batches.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::{DataType, SchemaRef};
use arrow::error::ArrowError;
use chrono::{DateTime, Utc};
use datafusion::common::{ParamValues, TableReference};
use datafusion::error::DataFusionError;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::{dialect_from_str, Dialect, PostgreSqlDialect};
use futures::StreamExt;
use quiver_model::{Classify, ErrorKind, VisibleDatabases};
use quiver_storage::{StorageError, Store};
use serde::{Deserialize, Serialize};

use crate::analyze::{self, QueryAnalysis, ScannedTable};
use crate::catalog::{QuiverCatalog, CATALOG_NAME};
use crate::dictionary_group::DictionaryGroupRule;
use crate::filter_order::FilterOrderRule;
use crate::first_rows::FirstRowsRule;
use crate::float_compare::FloatCompareRule;
use crate::governance::value_limits::{self, OutputLimits, ValueTooLarge};
use crate::governance::{pool, Governor, Limits, Placement, QueryControl, StopReason};
use crate::latest::LatestRowsRule;
use crate::panic_guard::{guard_future, guard_stream};
use crate::params::QueryParams;
use crate::plan_cache::{PlanCache, PlanCacheStats, PlanSlot, ScansRead};
use crate::statement_limits::{self, StatementLimit, StatementLimits};
use crate::time_order_limit::TimeOrderLimitRule;

/// Settings of the SQL engine. The serde names are the server's configuration keys;
/// `session_setup` is wired by the program, not configured.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct QueryOptions {
    /// Parallelism of one query (DataFusion's `target_partitions`); 0 means the number of CPU
    /// cores.
    #[serde(rename = "query_partitions")]
    pub target_partitions: usize,
    /// Memory in bytes one running query may hold in operators that buffer (sorts, joins,
    /// aggregations and their states); sorts and aggregations spill to disk under the data
    /// directory before a query needing more fails with an error naming this setting. The
    /// default is a quarter of the memory budget (physical memory or the cgroup limit).
    #[serde(rename = "query_memory_bytes")]
    pub memory_limit_bytes: usize,
    /// The process's memory ceiling: what all queries together may reserve, and the resident
    /// memory past which the running query holding the most is cancelled. The default is 80 %
    /// of the memory budget.
    pub max_server_memory_bytes: usize,
    /// The most bytes one function call may produce (`repeat`, `lpad`, `array_repeat`,
    /// `generate_series` as a value), capped by `query_memory_bytes`.
    pub max_value_bytes: usize,
    /// Seconds a query may run, from its arrival (0: no limit). A client may ask for less:
    /// PostgreSQL `statement_timeout`, the gRPC deadline, HTTP `timeout_secs`.
    pub query_timeout_secs: u64,
    /// Seconds a running query may wait for its client to take the next part of its answer
    /// before it is stopped (0: no limit): a client that stops reading would otherwise keep
    /// its slot (and the memory its answer holds) for good.
    pub query_stall_timeout_secs: u64,
    /// Queries that run at once; more wait in arrival order (0: twice the cores, at least 4).
    pub max_concurrent_queries: usize,
    /// Queries that may wait for a slot; beyond that a query is refused at once.
    pub max_queued_queries: usize,
    /// The longest statement text accepted, in bytes; a longer one is refused unread (the
    /// memory a parse takes grows with the text).
    pub max_sql_bytes: usize,
    /// How deeply a statement may nest: each operator of a chain (`a + b + c`, `… OR …`,
    /// `… UNION ALL …`) and each nested expression or subquery is a level. Deeper statements
    /// are refused as they are parsed: walking a tree takes stack for every level.
    pub max_sql_depth: usize,
    /// Extensions applied to every database's session when it is created, in order.
    #[serde(skip)]
    pub session_setup: Vec<Arc<dyn SessionSetup>>,
}

impl Default for QueryOptions {
    fn default() -> Self {
        let budget = crate::governance::system::memory_budget_bytes();
        QueryOptions {
            target_partitions: 0,
            memory_limit_bytes: usize::try_from(budget / 4).unwrap_or(usize::MAX),
            max_server_memory_bytes: usize::try_from(budget / 10 * 8).unwrap_or(usize::MAX),
            max_value_bytes: 256 << 20,
            query_timeout_secs: 0,
            query_stall_timeout_secs: 60,
            max_concurrent_queries: 0,
            max_queued_queries: 128,
            max_sql_bytes: 1 << 20,
            max_sql_depth: 1000,
            session_setup: Vec::new(),
        }
    }
}

impl QueryOptions {
    /// The parallelism of one query: `target_partitions`, or the number of CPU cores if 0.
    pub fn partitions(&self) -> usize {
        match self.target_partitions {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }

    /// Queries that run at once: `max_concurrent_queries`, or twice the cores (at least 4) if
    /// 0.
    pub fn concurrent_queries(&self) -> usize {
        match self.max_concurrent_queries {
            0 => (2 * std::thread::available_parallelism().map_or(2, |n| n.get())).max(4),
            n => n,
        }
    }

    /// The limits the governor enforces, with the automatic values resolved.
    fn limits(&self) -> Limits {
        Limits {
            query_memory_bytes: self.memory_limit_bytes,
            max_server_memory_bytes: self.max_server_memory_bytes,
            query_timeout: (self.query_timeout_secs > 0)
                .then(|| Duration::from_secs(self.query_timeout_secs)),
            stall_timeout: (self.query_stall_timeout_secs > 0)
                .then(|| Duration::from_secs(self.query_stall_timeout_secs)),
            max_concurrent_queries: self.concurrent_queries(),
            max_queued_queries: self.max_queued_queries,
            threads: self.partitions(),
        }
    }

    /// Checks the settings that have bounds of their own.
    pub fn validate(&self) -> Result<(), String> {
        let longest = statement_limits::MAX_SQL_BYTES;
        if !(1..=longest).contains(&self.max_sql_bytes) {
            return Err(format!(
                "max_sql_bytes must be between 1 and {longest} (a long statement is parsed on \
                 a stack sized by its length), got {}",
                self.max_sql_bytes
            ));
        }
        let most = statement_limits::MAX_SQL_DEPTH;
        if !(1..=most).contains(&self.max_sql_depth) {
            return Err(format!(
                "max_sql_depth must be between 1 and {most} (the threads' stacks are sized for \
                 it), got {}",
                self.max_sql_depth
            ));
        }
        Ok(())
    }

    /// The bounds on a statement's text and nesting.
    pub fn statement_limits(&self) -> StatementLimits {
        StatementLimits {
            max_bytes: self.max_sql_bytes,
            max_depth: self.max_sql_depth,
        }
    }

    /// The most bytes a capped function may produce: one value, and one call over a batch.
    fn output_limits(&self) -> OutputLimits {
        OutputLimits {
            value: self.max_value_bytes.min(self.memory_limit_bytes) as u64,
            batch: self.memory_limit_bytes as u64,
        }
    }
}

/// Extends the SQL session of each database, once, when the engine creates it: system schemas,
/// functions and type names that a protocol's clients expect (the PostgreSQL catalog, say).
/// Everything it adds is visible to every protocol's queries in that database.
pub trait SessionSetup: Send + Sync + std::fmt::Debug {
    /// Adds to `ctx`, the session whose default schema is `database`, for callers who see the
    /// `visible` databases. The session's catalog ([`CATALOG_NAME`]) accepts system schemas
    /// (see [`crate::is_system_schema`]).
    fn setup(
        &self,
        ctx: &SessionContext,
        database: &str,
        visible: &VisibleDatabases,
    ) -> Result<(), DataFusionError>;
}

/// Why a query failed; [`Classify::kind`] says whose fault it is.
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
    /// The query needed more memory than its limit (or the server's) allows.
    #[error("{}", resources_message(.0))]
    ResourcesExhausted(DataFusionError),
    /// The query was refused memory that other running queries hold: it would fit once they
    /// finish, so a retry can succeed.
    #[error("{}", memory_busy_message(.0))]
    MemoryBusy(DataFusionError),
    /// A function call would have produced a value over `max_value_bytes`.
    #[error("{0}")]
    ValueTooLarge(ValueTooLarge),
    /// The query was stopped: timed out, cancelled, or over the server's memory ceiling.
    #[error("{0}")]
    Stopped(StopReason),
    /// As many queries run and wait as the server takes.
    #[error(
        "the server is busy: {running} queries are running and {queued} are waiting \
         (max_concurrent_queries, max_queued_queries); retry shortly"
    )]
    Busy {
        /// `max_concurrent_queries`.
        running: usize,
        /// `max_queued_queries`.
        queued: usize,
    },
    /// The statement is longer or more deeply nested than the server accepts.
    #[error("{0}")]
    StatementLimit(StatementLimit),
    /// The caller may not read what the statement reads.
    #[error("{0}")]
    Denied(quiver_model::Denied),
    /// A failure that is not the caller's fault.
    #[error("internal error: {0}")]
    Internal(DataFusionError),
}

impl Classify for QueryError {
    fn kind(&self) -> ErrorKind {
        match self {
            QueryError::DatabaseNotFound(_) | QueryError::TableNotFound { .. } => {
                ErrorKind::NotFound
            }
            QueryError::Invalid(_) => ErrorKind::Invalid,
            QueryError::ResourcesExhausted(_) | QueryError::ValueTooLarge(_) => {
                ErrorKind::ResourcesExhausted
            }
            QueryError::Stopped(StopReason::TimedOut { .. } | StopReason::ClientStalled { .. }) => {
                ErrorKind::TimedOut
            }
            QueryError::Stopped(StopReason::ServerMemory { .. }) => ErrorKind::ResourcesExhausted,
            QueryError::Stopped(StopReason::Killed { .. }) => ErrorKind::Cancelled,
            QueryError::Busy { .. } | QueryError::MemoryBusy(_) => ErrorKind::Busy,
            QueryError::StatementLimit(StatementLimit::TooLong { .. }) => ErrorKind::TooLarge,
            QueryError::StatementLimit(StatementLimit::TooDeep { .. }) => ErrorKind::LimitExceeded,
            QueryError::Denied(denied) => denied.kind,
            QueryError::Internal(_) => ErrorKind::Internal,
        }
    }
}

impl From<DataFusionError> for QueryError {
    /// Sorts a failure by whose fault it is: anything in the error's chain that comes from
    /// reading the data (I/O, the object store, Parquet decoding, the storage layer), a
    /// failed task or a DataFusion bug is the server's ([`QueryError::Internal`]); exhausted
    /// memory is [`QueryError::ResourcesExhausted`]; the rest (parse, plan, schema, type and
    /// arithmetic errors) is the statement's ([`QueryError::Invalid`]).
    fn from(e: DataFusionError) -> Self {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        let mut resources = false;
        while let Some(error) = cause {
            if let Some(governed) = governance_error(error) {
                return governed;
            }
            match fault_of(error) {
                Some(Fault::Server) => return QueryError::Internal(e),
                Some(Fault::Resources) => resources = true,
                None => {}
            }
            cause = error.source();
        }
        // (operators may wrap the pool's refusal in words of their own: anywhere in it)
        if resources && innermost_resources(&e).contains(pool::OTHERS_HOLD_MEMORY) {
            QueryError::MemoryBusy(e)
        } else if resources {
            QueryError::ResourcesExhausted(e)
        } else {
            QueryError::Invalid(e)
        }
    }
}

/// The memory error's own words: the innermost "Resources exhausted" message, which names the
/// limit and the setting (see `governance::pool`).
fn resources_message(e: &DataFusionError) -> String {
    format!("query exceeded a memory limit: {}", innermost_resources(e))
}

/// What a query refused memory that other queries hold is told.
fn memory_busy_message(e: &DataFusionError) -> String {
    format!("the server is busy: {}", innermost_resources(e))
}

/// The innermost "Resources exhausted" message in `e`'s chain (`e` itself if none).
fn innermost_resources(e: &DataFusionError) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = cause {
        if let Some(DataFusionError::ResourcesExhausted(message)) =
            error.downcast_ref::<DataFusionError>()
        {
            return message.clone();
        }
        cause = error.source();
    }
    e.to_string()
}

/// The governor's verdict carried through DataFusion: a stopped query or a value too large.
fn governance_error(error: &(dyn std::error::Error + 'static)) -> Option<QueryError> {
    if let Some(too_large) = error.downcast_ref::<ValueTooLarge>() {
        return Some(QueryError::ValueTooLarge(too_large.clone()));
    }
    match error.downcast_ref::<QueryError>()? {
        QueryError::Stopped(reason) => Some(QueryError::Stopped(reason.clone())),
        _ => None,
    }
}

/// Whose fault one error of a chain says a failure is, when it says.
enum Fault {
    /// The server could not read its own data, or failed itself.
    Server,
    /// The query needed more memory than allowed.
    Resources,
}

fn fault_of(error: &(dyn std::error::Error + 'static)) -> Option<Fault> {
    if let Some(e) = error.downcast_ref::<DataFusionError>() {
        return match e {
            DataFusionError::ResourcesExhausted(_) => Some(Fault::Resources),
            DataFusionError::Internal(_)
            | DataFusionError::IoError(_)
            | DataFusionError::ObjectStore(_)
            | DataFusionError::ParquetError(_)
            | DataFusionError::ExecutionJoin(_) => Some(Fault::Server),
            _ => None,
        };
    }
    if let Some(e) = error.downcast_ref::<ArrowError>() {
        return match e {
            ArrowError::IoError(..) | ArrowError::ParquetError(_) | ArrowError::IpcError(_) => {
                Some(Fault::Server)
            }
            ArrowError::MemoryError(_) => Some(Fault::Resources),
            _ => None,
        };
    }
    if let Some(e) = error.downcast_ref::<StorageError>() {
        return e.kind().is_server_fault().then_some(Fault::Server);
    }
    let server = error.is::<std::io::Error>()
        || error.is::<datafusion::object_store::Error>()
        || error.is::<datafusion::parquet::errors::ParquetError>();
    server.then_some(Fault::Server)
}

/// The result of a query: its schema (known before the first row) and its rows, streamed.
pub struct QueryOutput {
    /// Schema of the result.
    pub schema: SchemaRef,
    /// The rows.
    pub stream: SendableRecordBatchStream,
}

/// Session contexts kept at most (see [`QueryEngine`]'s `contexts`).
const MAX_CONTEXTS: u64 = 256;

/// A session context unused this long is dropped (and rebuilt on its next use).
const CONTEXT_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs SQL against the store.
pub struct QueryEngine {
    store: Arc<Store>,
    options: QueryOptions,
    runtime: Arc<RuntimeEnv>,
    /// One DataFusion context per database (its default schema) and catalog view (what the
    /// caller may see); contexts are cheap to use but not to build, and the catalog behind
    /// them is live, so they never go stale. Bounded ([`MAX_CONTEXTS`], idle ones dropped
    /// after [`CONTEXT_IDLE`]): many scoped tokens and dropped databases would otherwise keep
    /// one each forever.
    contexts: moka::sync::Cache<(String, VisibleDatabases), SessionContext>,
    /// See [`QueryEngine::semantic_settings`].
    semantic_settings: String,
    /// Admission, limits and cancellation of running queries.
    governor: Arc<Governor>,
    /// Optimized plans of repeated statements.
    plans: PlanCache,
}

/// What a statement returns and what it needs bound, known before running it.
#[derive(Debug, Clone)]
pub struct StatementDescription {
    /// The result's schema.
    pub schema: SchemaRef,
    /// Placeholders (`$1`, `$name`) in order, with their types where the plan determines them.
    pub parameters: Vec<(String, Option<DataType>)>,
}

/// How to run one analysed statement.
#[derive(Debug, Clone, Default)]
pub struct ExecuteOptions {
    /// Values for the statement's placeholders (`$1`, `$name`).
    pub params: QueryParams,
    /// The query's clock (`now()`, `current_date`); the actual time if `None`.
    pub now: Option<DateTime<Utc>>,
    /// Where the query came from, its time limit and its cancellation.
    pub control: QueryControl,
}

impl QueryEngine {
    /// An engine over `store`.
    pub fn new(store: Arc<Store>, options: QueryOptions) -> Result<Self, QueryError> {
        options
            .validate()
            .map_err(|e| QueryError::Invalid(DataFusionError::Configuration(e)))?;
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(options.memory_limit_bytes, 1.0)
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(spill_mode(store.data_dir())?),
            );
        let runtime = runtime.build_arc()?;
        if let Some(data_dir) = store.data_dir() {
            crate::provider::register_data_store(&runtime, data_dir)?;
        }
        let governor = Governor::start(options.limits())?;
        let config = session_config(&options);
        let settings = config.options();
        let semantic_settings = format!(
            "time_zone={:?};ident_normalization={}",
            settings.execution.time_zone, settings.sql_parser.enable_ident_normalization
        );
        let plans = PlanCache::new(&store);
        Ok(QueryEngine {
            store,
            options,
            runtime,
            contexts: moka::sync::Cache::builder()
                .max_capacity(MAX_CONTEXTS)
                .time_to_idle(CONTEXT_IDLE)
                .build(),
            semantic_settings,
            governor,
            plans,
        })
    }

    /// The session of `database` for callers who see `visible` databases in the catalog,
    /// created (and extended by the [`SessionSetup`]s) on first use.
    fn context(
        &self,
        database: &str,
        visible: &VisibleDatabases,
    ) -> Result<SessionContext, QueryError> {
        let key = (database.to_string(), visible.clone());
        if let Some(ctx) = self.contexts.get(&key) {
            return Ok(ctx);
        }
        // Concurrent first uses may each build one (each gets its own error, kind and all);
        // every later use shares the first that was kept.
        let ctx = self.new_context(database, visible)?;
        Ok(self.contexts.entry(key).or_insert(ctx).into_value())
    }

    fn new_context(
        &self,
        database: &str,
        visible: &VisibleDatabases,
    ) -> Result<SessionContext, QueryError> {
        let config =
            session_config(&self.options).with_default_catalog_and_schema(CATALOG_NAME, database);
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(self.runtime.clone())
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(DictionaryGroupRule))
            .with_physical_optimizer_rule(Arc::new(FirstRowsRule))
            .with_physical_optimizer_rule(Arc::new(FloatCompareRule))
            .build();
        let ctx = SessionContext::new_with_state(state);
        ctx.register_catalog(
            CATALOG_NAME,
            Arc::new(QuiverCatalog::new(self.store.clone(), visible.clone())),
        );
        ctx.add_analyzer_rule(Arc::new(LatestRowsRule));
        ctx.add_analyzer_rule(Arc::new(TimeOrderLimitRule));
        ctx.add_analyzer_rule(Arc::new(FilterOrderRule));
        value_limits::cap_functions(&ctx, self.options.output_limits());
        for setup in &self.options.session_setup {
            setup.setup(&ctx, database, visible).map_err(|e| {
                QueryError::Internal(DataFusionError::Context(
                    format!("cannot set up the session of database {database:?} ({setup:?})"),
                    Box::new(e),
                ))
            })?;
        }
        Ok(ctx)
    }

    /// Plans and starts one read-only SQL statement in `database`.
    ///
    /// Fails with [`QueryError::DatabaseNotFound`] / [`QueryError::TableNotFound`] before
    /// planning when the statement names a database or table that does not exist, and with
    /// [`QueryError::Invalid`] for anything DataFusion rejects (its message is kept). DDL, DML
    /// and session statements (`SET`, ...) are refused.
    pub async fn execute(&self, database: &str, sql: &str) -> Result<QueryOutput, QueryError> {
        let analysis = self.analyze(database, sql)?;
        self.execute_analyzed(&analysis, &ExecuteOptions::default())
            .await
    }

    /// Parses `sql` in `database` and returns what a cache needs to know about it (see
    /// [`QueryAnalysis`]) without planning it. Fails like [`QueryEngine::execute`] for an
    /// unknown database or table, invalid SQL or a statement that is not read-only.
    pub fn analyze(&self, database: &str, sql: &str) -> Result<QueryAnalysis, QueryError> {
        let ctx = self.database_context(database)?;
        let state = ctx.state_ref();
        let state = state.read();
        let dialect_name = state.config().options().sql_parser.dialect;
        let limits = self.options.statement_limits();
        let mut statement = statement_limits::parse_bounded(sql, limits, |sql| {
            state.sql_to_statement(sql, &dialect_name)
        })
        .map_err(QueryError::StatementLimit)??;
        analyze::number_question_placeholders(&mut statement)
            .map_err(|e| QueryError::Invalid(DataFusionError::Plan(e)))?;
        let dialect = dialect_from_str(dialect_name).ok_or_else(|| {
            QueryError::Internal(DataFusionError::Internal(format!(
                "unsupported SQL dialect {dialect_name}"
            )))
        })?;
        self.analyze_statement(&state, dialect.as_ref(), database, sql, statement)
    }

    /// Like [`QueryEngine::analyze`], for a statement a PostgreSQL front end has already
    /// parsed (and rewritten for compatibility): its canonical text is taken from the
    /// statement as rendered in PostgreSQL syntax.
    pub fn analyze_postgres(
        &self,
        database: &str,
        statement: SqlStatement,
    ) -> Result<QueryAnalysis, QueryError> {
        let ctx = self.database_context(database)?;
        let state = ctx.state_ref();
        let state = state.read();
        let sql = statement.to_string();
        let statement = DFStatement::Statement(Box::new(statement));
        self.analyze_statement(&state, &PostgreSqlDialect {}, database, &sql, statement)
    }

    /// The session of `database`; fails if the database does not exist. Analysing a
    /// statement reads its state in place (cloning a session state costs more than parsing
    /// a short statement).
    fn database_context(&self, database: &str) -> Result<SessionContext, QueryError> {
        if self.store.database(database).is_none() {
            return Err(QueryError::DatabaseNotFound(database.to_string()));
        }
        self.context(database, &VisibleDatabases::All)
    }

    fn analyze_statement(
        &self,
        state: &SessionState,
        dialect: &dyn Dialect,
        database: &str,
        sql: &str,
        statement: DFStatement,
    ) -> Result<QueryAnalysis, QueryError> {
        if !is_read_only(&statement) {
            return Err(QueryError::Invalid(DataFusionError::Plan(format!(
                "only queries (SELECT, WITH, SHOW, EXPLAIN, DESCRIBE) are accepted here, not: {statement}"
            ))));
        }
        let references = state.resolve_table_references(&statement)?;
        let tables: Vec<Option<ScannedTable>> = references
            .iter()
            .filter(|reference| !self.is_table_function(state, reference, database))
            .map(|reference| analyze::resolve(reference, database))
            .collect();
        for table in tables.iter().flatten() {
            self.check_table_exists(table)?;
        }
        Ok(analyze::analyze(
            state, dialect, database, sql, statement, tables,
        )?)
    }

    /// Plans and starts an analysed statement with bound parameters and, optionally, a fixed
    /// query clock.
    pub async fn execute_analyzed(
        &self,
        analysis: &QueryAnalysis,
        options: &ExecuteOptions,
    ) -> Result<QueryOutput, QueryError> {
        // analysed earlier (a remembered or prepared statement): a table may be gone since,
        // which is the same 404 a fresh analysis gives
        for table in &analysis.tables {
            self.check_table_exists(table)?;
        }
        let visible = options.control.visible_databases();
        let mut state = self.context(&analysis.database, &visible)?.state();
        if let Some(now) = options.now {
            state.execution_props_mut().query_execution_start_time = Some(now);
        }
        let admitted = self
            .governor
            .admit(&analysis.database, &analysis.text, &options.control)
            .await?;
        // planned here (short, and what fails most often: a 400 before anything runs),
        // executed on the governor's runtime
        let params = options.params.to_param_values();
        let slot = PlanCache::slot(&self.store, analysis, &visible, params.is_some());
        let kept = slot.as_ref().and_then(|slot| self.plans.physical(slot));
        let (schema, physical) = match kept {
            Some(kept) => kept,
            None => self.plan(&mut state, analysis, params, slot).await?,
        };
        let placement = Placement::of(&physical);
        let execute = move |runtime: Arc<RuntimeEnv>| {
            let task = TaskContext::from(&state).with_runtime(runtime);
            let stream = execute_stream(physical.clone(), Arc::new(task))?;
            Ok(guard_stream(holding(physical, stream)))
        };
        Ok(self
            .governor
            .run(admitted, &self.runtime, (schema, placement), execute))
    }

    /// The physical plan of `analysis` (its placeholders bound to `params`) and its answer's
    /// schema, from the kept logical plan if `slot`'s is kept; the plans are kept in `slot`
    /// for the next run if they may be.
    async fn plan(
        &self,
        state: &mut SessionState,
        analysis: &QueryAnalysis,
        params: Option<ParamValues>,
        slot: Option<PlanSlot>,
    ) -> Result<(SchemaRef, Arc<dyn ExecutionPlan>), QueryError> {
        let scans = Arc::new(ScansRead::default());
        state.config_mut().set_extension(scans.clone());
        let state = &*state;
        let cached = slot.as_ref().and_then(|slot| self.plans.get(slot));
        let planned = guard_future("planning the query", async {
            // the answer's schema is the statement's (as describing it gives), not the
            // optimized plan's: the optimizer may change a column's nullability
            let (optimized, schema, new_logical) = match cached {
                Some((kept, schema)) => (kept, schema, false),
                None => {
                    let plan = logical_plan(state, analysis, params).await?;
                    let schema = Arc::new(plan.schema().as_arrow().clone());
                    (state.optimize(&plan)?, schema, true)
                }
            };
            let physical = state
                .query_planner()
                .create_physical_plan(&optimized, state)
                .await?;
            // kept only once it proved plannable: a statement that fails is not a hit later
            if let Some(slot) = slot {
                self.plans.keep_physical(&slot, &physical, &schema, &scans);
                if new_logical {
                    self.plans.insert(slot, &optimized, &schema);
                }
            }
            Ok::<_, DataFusionError>((schema, physical))
        });
        Ok(planned.await?)
    }

    /// The bounds on a statement's text and nesting, for a protocol that parses statements
    /// itself ([`statement_limits::parse_bounded`]).
    pub fn statement_limits(&self) -> StatementLimits {
        self.options.statement_limits()
    }

    /// How the cache of repeated statements' plans has done.
    pub fn plan_cache_stats(&self) -> PlanCacheStats {
        self.plans.stats()
    }

    /// The queries running and queued, and the means to cancel one.
    pub fn governor(&self) -> &Arc<Governor> {
        &self.governor
    }

    /// The output schema of an analysed statement and its placeholders' types (`None` where
    /// the statement does not determine one), from planning it without running it.
    pub async fn describe(
        &self,
        analysis: &QueryAnalysis,
    ) -> Result<StatementDescription, QueryError> {
        let state = self
            .context(&analysis.database, &VisibleDatabases::All)?
            .state();
        let plan = guard_future(
            "describing the statement",
            state.statement_to_plan(analysis.statement.clone()),
        )
        .await?;
        let schema = Arc::new(plan.schema().as_arrow().clone());
        let mut parameters: Vec<(String, Option<DataType>)> =
            plan.get_parameter_types()?.into_iter().collect();
        // `$1, $2, ..., $10` in numeric order, named placeholders after them by name.
        parameters.sort_by_key(|(name, _)| {
            let number = name.trim_start_matches('$').parse::<usize>().ok();
            (number.is_none(), number, name.clone())
        });
        Ok(StatementDescription { schema, parameters })
    }

    /// The session settings that can change a query's answer, as one string (part of a cache
    /// key). Every database's session has the same settings.
    pub fn semantic_settings(&self) -> &str {
        &self.semantic_settings
    }

    /// The store this engine reads.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// True for a bare name that calls a table function (`generate_series(1, 10)`) rather than
    /// naming a table: DataFusion lists both among a statement's table references. A table of
    /// that name in the database wins, as it does when the statement is planned.
    fn is_table_function(
        &self,
        state: &SessionState,
        reference: &TableReference,
        database: &str,
    ) -> bool {
        let TableReference::Bare { table } = reference else {
            return false;
        };
        state.table_functions().contains_key(table.as_ref())
            && self
                .store
                .database(database)
                .is_none_or(|db| db.table(table).is_none())
    }

    /// Fails unless `table` (already resolved) exists; DataFusion reports unknown catalogs
    /// and `information_schema` tables itself.
    fn check_table_exists(&self, table: &ScannedTable) -> Result<(), QueryError> {
        let Some(db) = self.store.database(&table.database) else {
            return Err(QueryError::DatabaseNotFound(table.database.clone()));
        };
        if db.table(&table.table).is_none() {
            return Err(QueryError::TableNotFound {
                database: table.database.clone(),
                table: table.table.clone(),
            });
        }
        Ok(())
    }
}

/// The logical plan of an analysed read-only statement, with `params` bound.
async fn logical_plan(
    state: &SessionState,
    analysis: &QueryAnalysis,
    params: Option<ParamValues>,
) -> Result<LogicalPlan, DataFusionError> {
    let mut plan = state.statement_to_plan(analysis.statement.clone()).await?;
    datafusion::execution::context::SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(&plan)?;
    if let Some(params) = params {
        plan = plan.with_param_values(params)?;
    }
    Ok(plan)
}

/// `stream`, keeping `plan` (and the files its scans hold) until the query ends: a file a
/// query has read is not deleted under it while its answer is still being sent, as it was
/// not while the answer was computed.
fn holding(
    plan: Arc<dyn ExecutionPlan>,
    stream: SendableRecordBatchStream,
) -> SendableRecordBatchStream {
    let schema = stream.schema();
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        stream.map(move |batch| {
            let _held = &plan;
            batch
        }),
    ))
}

/// Where sorts, joins and aggregations spill: `spill/` under the data directory, emptied now
/// (files of an earlier process are garbage); the system's temporary directory for a store
/// without one.
fn spill_mode(data_dir: Option<&std::path::Path>) -> Result<DiskManagerMode, QueryError> {
    let Some(data_dir) = data_dir else {
        return Ok(DiskManagerMode::OsTmpDirectory);
    };
    let spill = data_dir.join("spill");
    let cannot = |e: std::io::Error| {
        QueryError::Internal(DataFusionError::Context(
            format!("cannot prepare the spill directory {}", spill.display()),
            Box::new(DataFusionError::IoError(e)),
        ))
    };
    match std::fs::remove_dir_all(&spill) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(cannot(e)),
    }
    std::fs::create_dir_all(&spill).map_err(cannot)?;
    Ok(DiskManagerMode::Directories(vec![spill.clone()]))
}

fn session_config(options: &QueryOptions) -> SessionConfig {
    SessionConfig::new()
        .with_information_schema(true)
        .with_create_default_catalog_and_schema(false)
        .with_target_partitions(options.partitions())
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn classify(e: DataFusionError) -> &'static str {
        match QueryError::from(e) {
            QueryError::Internal(_) => "internal",
            QueryError::Invalid(_) => "invalid",
            QueryError::ResourcesExhausted(_) => "resources",
            QueryError::MemoryBusy(_) => "busy",
            other => panic!("unexpected {other:?}"),
        }
    }

    fn missing_file() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "tables/m/1/x.parquet")
    }

    #[test]
    fn failures_reading_the_data_are_the_servers_fault_wherever_they_hide() {
        let object_store = datafusion::object_store::Error::NotFound {
            path: "tables/m/1/x.parquet".into(),
            source: Box::new(missing_file()),
        };
        let cases = [
            DataFusionError::ObjectStore(Box::new(object_store)),
            DataFusionError::IoError(missing_file()),
            DataFusionError::ParquetError(Box::new(
                datafusion::parquet::errors::ParquetError::EOF("footer".into()),
            )),
            DataFusionError::Internal("bug".into()),
            // wrapped the way DataFusion and our table provider wrap them
            DataFusionError::Context(
                "reading".into(),
                Box::new(DataFusionError::External(Box::new(StorageError::io(
                    std::path::Path::new("/d/tables"),
                    missing_file(),
                )))),
            ),
            DataFusionError::ArrowError(
                Box::new(ArrowError::ExternalError(Box::new(missing_file()))),
                None,
            ),
            DataFusionError::Shared(Arc::new(DataFusionError::ArrowError(
                Box::new(ArrowError::ParquetError("corrupt page".into())),
                None,
            ))),
        ];
        for case in cases {
            let text = case.to_string();
            assert_eq!(classify(case), "internal", "{text}");
        }
    }

    #[test]
    fn the_statements_own_errors_stay_the_callers_fault() {
        let cases = [
            DataFusionError::Plan("no such column".into()),
            DataFusionError::ArrowError(Box::new(ArrowError::DivideByZero), None),
            DataFusionError::ArrowError(Box::new(ArrowError::CastError("'x' as int".into())), None),
            DataFusionError::Execution("bad argument".into()),
            DataFusionError::NotImplemented("LATERAL".into()),
            DataFusionError::External(Box::new(StorageError::InvalidTableName {
                name: String::new(),
                reason: "it is empty",
            })),
        ];
        for case in cases {
            let text = case.to_string();
            assert_eq!(classify(case), "invalid", "{text}");
        }
        let memory = DataFusionError::Context(
            "sorting".into(),
            Box::new(DataFusionError::ResourcesExhausted("1 GB".into())),
        );
        assert_eq!(classify(memory), "resources");
    }

    #[test]
    fn memory_that_other_queries_hold_is_a_busy_server_not_the_callers_fault() {
        let server = crate::governance::pool::ServerMemory::new(1000);
        let pool = |limit| -> Arc<dyn datafusion::execution::memory_pool::MemoryPool> {
            Arc::new(crate::governance::pool::QueryPool::new(
                limit,
                server.clone(),
            ))
        };
        let (first, second) = (pool(2000), pool(2000));
        let consumer = datafusion::execution::memory_pool::MemoryConsumer::new;
        let held = consumer("first").register(&first);
        held.try_grow(800).unwrap();
        let asking = consumer("second").register(&second);
        // 300 would fit alone: busy (a retry can succeed), wrapped as operators wrap it
        let refused = asking.try_grow(300).unwrap_err();
        // reworded into a new error, as DataFusion's aggregation does when it cannot spill
        let reworded = DataFusionError::ResourcesExhausted(format!(
            "Failed to reserve memory for sort during spill: {refused}"
        ));
        assert_eq!(QueryError::from(reworded).kind(), ErrorKind::Busy);
        let wrapped = DataFusionError::Context("sorting".into(), Box::new(refused));
        let error = QueryError::from(wrapped);
        assert_eq!(error.kind(), ErrorKind::Busy, "{error}");
        assert!(
            error.to_string().contains("max_server_memory_bytes"),
            "{error}"
        );
        // over the ceiling alone: fails again however idle the server is
        let alone = QueryError::from(asking.try_grow(1200).unwrap_err());
        assert_eq!(alone.kind(), ErrorKind::ResourcesExhausted, "{alone}");
    }
}

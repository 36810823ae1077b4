//! The SQL entry point: resolves the database, checks the tables a statement names, plans it
//! with DataFusion and returns a stream of record batches.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use chrono::{DateTime, Utc};
use datafusion::common::display::PlanType;
use datafusion::common::{ParamValues, TableReference};
use datafusion::error::DataFusionError;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::{dialect_from_str, Dialect, PostgreSqlDialect};
use futures::StreamExt;
use quiver_distributed::{distribute, run_job, Distributed, Distribution, ShipSettings};
use quiver_exec::gap_fill::gap_filled_schema;
use quiver_exec::gap_fill::{self, GapFillRule};
use quiver_exec::panic_guard::{guard_future, guard_stream};
use quiver_exec::plan_settings::PlanSettings;
use quiver_exec::session::state_builder;
use quiver_exec::value_limits;
use quiver_governance::context::{QueryControl, QueryOutput};
use quiver_governance::statement_limits::{self, StatementLimits};
use quiver_governance::{Governor, Placement};
use quiver_model::VisibleDatabases;
use quiver_storage::Store;

use crate::analyze::{self, AnalyzedStatement, Cacheability, QueryAnalysis, ScannedTable};
use crate::catalog_names::CATALOG_NAME;
use crate::error::QueryError;
use crate::filter_order::FilterOrderRule;
use crate::latest::LatestRowsRule;
use crate::options::QueryOptions;
use crate::params::QueryParams;
use crate::plan_cache::{PlanCache, PlanCacheStats, PlanSlot, ScansRead};
use crate::reuse::{PartReuse, PartsReuseRule};
use crate::rollup::{Maintainer, RollupRouteRule, RollupRouter, RoutingNotes};
use crate::sql_catalog::QuiverCatalog;
use crate::time_order_limit::TimeOrderLimitRule;
use crate::value_cache_functions::{ValueCacheFunction, VALUE_CACHE_FUNCTIONS};

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
    /// The rollups' definitions, and the task keeping them up to date.
    rollups: Arc<RollupRouter>,
    _maintainer: Maintainer,
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
    /// Lets aggregates over time ranges reuse parts computed by earlier queries
    /// ([`crate::reuse`]); `None`: computed whole.
    pub parts: Option<PartReuse>,
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
        quiver_exec::table_files::register_table_files(&runtime, store.data_store().clone());
        let governor = Governor::start(options.limits())?;
        let config = session_config(&options);
        let settings = config.options();
        let semantic_settings = format!(
            "time_zone={:?};ident_normalization={}",
            settings.execution.time_zone, settings.sql_parser.enable_ident_normalization
        );
        let plans = PlanCache::new(&store);
        let rollups = Arc::new(RollupRouter::new(
            store.clone(),
            session_config(&options),
            runtime.clone(),
        ));
        let maintainer = Maintainer::start(&rollups);
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
            rollups,
            _maintainer: maintainer,
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
        let state = state_builder(config, self.runtime.clone()).build();
        let ctx = SessionContext::new_with_state(state);
        let catalog = QuiverCatalog::new(self.store.clone(), visible.clone())
            .with_views(self.rollups.clone());
        ctx.register_catalog(CATALOG_NAME, Arc::new(catalog));
        for (name, function) in ValueCacheFunction::both(&self.store, database) {
            ctx.register_udtf(name, function);
        }
        gap_fill::register_functions(&ctx);
        ctx.add_analyzer_rule(Arc::new(GapFillRule));
        ctx.add_analyzer_rule(Arc::new(RollupRouteRule {
            rollups: self.rollups.clone(),
        }));
        ctx.add_analyzer_rule(Arc::new(PartsReuseRule));
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

    /// What a cache needs to know about an InfluxQL statement in `database`: fails like
    /// [`QueryEngine::analyze`] for an unknown database, and with [`QueryError::Invalid`] for
    /// an invalid regular expression. A regular expression in `FROM` is matched against the
    /// measurements that exist now.
    pub fn analyze_influxql(
        &self,
        database: &str,
        statement: quiver_influxql::ast::Statement,
    ) -> Result<QueryAnalysis, QueryError> {
        crate::influxql::analyze(&self.store, database, statement)
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
        let reads_value_cache = references.iter().any(|reference| {
            matches!(reference, TableReference::Bare { table }
                if VALUE_CACHE_FUNCTIONS.contains(&table.as_ref()))
        });
        let mut analysis = analyze::analyze(state, dialect, database, sql, statement, tables)?;
        if reads_value_cache {
            analysis.cacheability = Cacheability::Never(
                "reads last_cache() or distinct_cache() (their rows follow every write and the clock)".into(),
            );
        }
        Ok(analysis)
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
        // one clock for the whole statement: `now()`, and the retention cutoff of every scan
        // (a routed aggregate's rollup part and its raw part must agree on it)
        state.execution_props_mut().query_execution_start_time =
            Some(options.now.unwrap_or_else(Utc::now));
        let admitted = self
            .governor
            .admit(&analysis.database, &analysis.text, &options.control)
            .await?;
        // planned here (short, and what fails most often: a 400 before anything runs),
        // executed on the governor's runtime
        let params = options.params.to_param_values();
        // a plan kept for routed runs is not one that reads raw rows only
        let rollups = match options.control.skip_rollups {
            true => None,
            false => Some(self.rollups.generation()),
        };
        let extensions = &mut state.config_mut().options_mut().extensions;
        let mut routing = extensions
            .get::<PlanSettings>()
            .cloned()
            .unwrap_or_default();
        routing.use_rollups &= rollups.is_some();
        routing.reuse_parts = options.parts.is_some();
        extensions.insert(routing);
        if let Some(parts) = &options.parts {
            state.config_mut().set_extension(Arc::new(parts.clone()));
        }
        let mode = options
            .control
            .distributed
            .unwrap_or(self.options.distributed);
        let mut distribution = match mode {
            Distributed::Off => None,
            mode => Some(
                self.distribution(&state, analysis, params.clone(), mode)
                    .await?,
            ),
        };
        if let Some(job) = distribution.as_mut().and_then(|d| d.job.take()) {
            let placement = Placement::of(&job.plan);
            let execute = move |_runtime: Arc<RuntimeEnv>| {
                let stream = run_job(job.scheduler, job.encoded, job.settings, job.plan.schema());
                Ok(guard_stream(holding(job.plan, stream)))
            };
            return Ok(self.governor.run(
                admitted,
                &self.runtime,
                (job.schema, placement),
                execute,
            ));
        }
        let slot = PlanCache::slot(
            &self.store,
            analysis,
            &visible,
            params.is_some(),
            (rollups, options.parts.is_some()),
        );
        let kept = slot.as_ref().and_then(|slot| self.plans.physical(slot));
        let (schema, mut physical) = match kept {
            Some(kept) => kept,
            None => self.plan(&mut state, analysis, params, slot).await?,
        };
        if let Some(distribution) = &distribution {
            physical = add_to_explain(physical, PlanType::FinalPhysicalPlan, &distribution.explain);
        }
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

    /// Where `analysis` runs in `mode` (see [`distribute`]), planned for Ballista if it runs
    /// there.
    async fn distribution(
        &self,
        state: &SessionState,
        analysis: &QueryAnalysis,
        params: Option<ParamValues>,
        mode: Distributed,
    ) -> Result<Distribution, QueryError> {
        let shared = self.store.shared_location();
        let stored = self.stored_bytes(&analysis.tables);
        // (a panic while planning is the query's error, as in `plan`)
        let planned = guard_future("planning the query for Ballista", async {
            let plan = || async {
                let logical = logical_plan(&self.store, state, analysis, params).await?;
                let schema = Arc::new(logical.schema().as_arrow().clone());
                Ok::<_, DataFusionError>((logical, schema))
            };
            let settings = ShipSettings {
                min_scan_bytes: self.options.distributed_min_scan_bytes,
                partitions: self.options.distributed_partitions(),
                scheduler_addr: self.options.scheduler_addr.clone(),
            };
            let shipping = (&settings, shared, stored);
            Ok::<_, DataFusionError>(distribute(state, plan, mode, shipping).await)
        });
        Ok(planned.await??)
    }

    /// The bytes of every file and buffered row of `tables` (those that are tables of the
    /// store): what a query over them scans at most.
    fn stored_bytes(&self, tables: &[ScannedTable]) -> u64 {
        let stored = |scanned: &ScannedTable| {
            let table = self
                .store
                .database(&scanned.database)?
                .table(&scanned.table)?;
            let files: u64 = table
                .snapshot()
                .ok()?
                .files
                .iter()
                .map(|file| file.entry.bytes)
                .sum();
            Some(files.saturating_add(table.buffered_bytes() as u64))
        };
        tables
            .iter()
            .filter_map(stored)
            .fold(0, u64::saturating_add)
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
            // optimized plan's: the optimizer may change a column's nullability (but see
            // `gap_filled_schema`)
            // `notes`: the rollup router's decisions, for an EXPLAIN; `None` for a kept plan
            let (optimized, schema, notes) = match cached {
                Some((kept, schema)) => (kept, schema, None),
                None => {
                    let plan = logical_plan(&self.store, state, analysis, params).await?;
                    let schema = Arc::new(plan.schema().as_arrow().clone());
                    let (optimized, notes) = RoutingNotes::collect(|| state.optimize(&plan));
                    let optimized = optimized?;
                    let schema = gap_filled_schema(schema, &plan, &optimized)?;
                    (optimized, schema, Some(notes))
                }
            };
            let physical = state
                .query_planner()
                .create_physical_plan(&optimized, state)
                .await?;
            let physical = explain_routing(physical, notes.as_deref().unwrap_or_default());
            // kept only once it proved plannable: a statement that fails is not a hit later
            if let Some(slot) = slot {
                self.plans.keep_physical(&slot, &physical, &schema, &scans);
                if notes.is_some() {
                    self.plans.insert(slot, &optimized, &schema);
                }
            }
            Ok::<_, DataFusionError>((schema, physical))
        });
        planned.await.map_err(|error| {
            // a table dropped since the statement was checked fails the planning ("table not
            // found"): that is the same 404 as a table gone before it
            analysis
                .tables
                .iter()
                .find_map(|table| self.check_table_exists(table).err())
                .unwrap_or_else(|| QueryError::from(error))
        })
    }

    /// The rollups: created, listed and dropped through here.
    pub fn rollups(&self) -> &Arc<RollupRouter> {
        &self.rollups
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
            statement_plan(&self.store, &state, analysis),
        )
        .await?;
        let mut schema = Arc::new(plan.schema().as_arrow().clone());
        if gap_fill::uses_gap_fill(&plan)? {
            let optimized = state.optimize(&plan)?;
            schema = gap_filled_schema(schema, &plan, &optimized)?;
        }
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
        let rollup = || self.rollups.spec(&table.database, &table.table).is_some();
        if db.table(&table.table).is_none() && !rollup() {
            return Err(QueryError::TableNotFound {
                database: table.database.clone(),
                table: table.table.clone(),
            });
        }
        Ok(())
    }
}

/// The logical plan of an analysed read-only statement, with `params` bound.
pub(crate) async fn logical_plan(
    store: &Store,
    state: &SessionState,
    analysis: &QueryAnalysis,
    params: Option<ParamValues>,
) -> Result<LogicalPlan, DataFusionError> {
    let mut plan = statement_plan(store, state, analysis).await?;
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

/// The logical plan of an analysed statement, as its language plans it.
async fn statement_plan(
    store: &Store,
    state: &SessionState,
    analysis: &QueryAnalysis,
) -> Result<LogicalPlan, DataFusionError> {
    match &analysis.statement {
        AnalyzedStatement::Sql(statement) => state.statement_to_plan(statement.clone()).await,
        AnalyzedStatement::Influxql(statement) => {
            crate::influxql::logical_plan(store, state, analysis, statement).await
        }
    }
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

/// `plan` with the router's decisions added to an `EXPLAIN`'s final logical plan.
fn explain_routing(plan: Arc<dyn ExecutionPlan>, notes: &[String]) -> Arc<dyn ExecutionPlan> {
    if notes.is_empty() {
        return plan;
    }
    let mut text = String::from("Rollup routing:");
    for note in notes {
        text.push_str("\n  ");
        text.push_str(note);
    }
    add_to_explain(plan, PlanType::FinalLogicalPlan, &text)
}

/// `plan`, if an `EXPLAIN`, with `text` added on a line of its own to its last plan of type
/// `plan_type`; any other plan as it is.
pub(crate) fn add_to_explain(
    plan: Arc<dyn ExecutionPlan>,
    plan_type: PlanType,
    text: &str,
) -> Arc<dyn ExecutionPlan> {
    let Some(explain) = plan.downcast_ref::<ExplainExec>() else {
        return plan;
    };
    let mut plans = explain.stringified_plans().to_vec();
    if let Some(last) = plans.iter_mut().rev().find(|p| p.plan_type == plan_type) {
        let mut described = last.plan.as_ref().clone();
        described.push('\n');
        described.push_str(text);
        last.plan = Arc::new(described);
    }
    Arc::new(ExplainExec::new(explain.schema(), plans, explain.verbose()))
}

/// The session settings of every database's session.
///
/// Sorts: a sort that runs out of memory sorts what it buffered and spills it as one run,
/// then merges the runs from disk (in several passes if it cannot open them all at once).
/// DataFusion sorts buffered batches in place (one concatenated batch) only below
/// `sort_in_place_threshold_bytes`; above it, it sorts each batch alone and merges them all,
/// and that merge holds the sort keys of every buffered row at once in row format, charged to
/// the sort's 10 MiB merge reserve: a sort on two keys of a 64 MiB query failed there instead
/// of spilling. Sorting in place up to the query's whole memory keeps a spill within the
/// query's memory (the concatenated copy is accounted for), whatever the keys.
fn session_config(options: &QueryOptions) -> SessionConfig {
    SessionConfig::new()
        .with_information_schema(true)
        .with_create_default_catalog_and_schema(false)
        .with_target_partitions(options.partitions())
        .with_sort_in_place_threshold_bytes(options.memory_limit_bytes)
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

//! Queries through the cache: analyse, bypass or look up, and on a miss run the query once for
//! all identical concurrent misses (single-flight) and store the answer under the versions it
//! read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use arrow::array::RecordBatch;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::future::{BoxFuture, Shared, WeakShared};
use futures::{FutureExt, StreamExt, TryStreamExt};
use moka::sync::Cache;
use parking_lot::Mutex;
use quiver_influxql::ast::Statement as InfluxqlStatement;
use quiver_model::AccessScope;
use quiver_query::governance::{GovernanceError, StopReason};
use quiver_query::reuse::{PartReuse, PartsReport};
use quiver_query::{
    Cacheability, ExecuteOptions, QueryAnalysis, QueryEngine, QueryError, QueryOutput, QueryParams,
    ScannedTable,
};
use quiver_query::{GrantChecks, QueryControl};
use quiver_storage::{Table, TableChangeListener};

use crate::cache::Entries;
use crate::config::CacheConfig;
use crate::entry::{batches_size, compact, CachedResult, EncodingKey};
use crate::key::{CacheKey, KeySpec};
use crate::parts::Parts;
use crate::stats::{CacheStats, Counters};

/// Statements longer than this are analysed afresh each time rather than remembered by text.
const MAX_REMEMBERED_SQL_BYTES: usize = 64 << 10;

/// One query as a protocol hands it over.
#[derive(Debug, Clone, Default)]
pub struct QueryRequest {
    /// The database the statement runs in.
    pub database: String,
    /// The SQL text as received.
    pub sql: String,
    /// Values for the statement's placeholders.
    pub params: QueryParams,
    /// The caller's access scope; answers are never shared between scopes.
    pub scope: AccessScope,
    /// Skip the cache: run afresh and do not store (HTTP `Cache-Control: no-cache`).
    pub no_cache: bool,
    /// Where the query came from, its time limit and its cancellation (for the governor;
    /// cache hits never reach it).
    pub control: QueryControl,
}

/// Who runs a query and how: what [`QueryService::query_analyzed`] needs besides the
/// statement and its parameters.
#[derive(Debug, Clone, Copy)]
pub struct QueryInvocation<'a> {
    /// The caller's access scope; answers are never shared between scopes.
    pub scope: &'a AccessScope,
    /// Skip the cache: run afresh and store nothing.
    pub no_cache: bool,
    /// The query's protocol, time limit and cancellation.
    pub control: &'a QueryControl,
}

/// How a query was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// From the cache, without running the query.
    Hit,
    /// Cacheable, not cached: run (or joined an identical running query).
    Miss,
    /// Not cacheable, or the caller asked to skip the cache: run, not stored.
    Bypass,
    /// Not in the cache as a whole, but computed in part from time parts that earlier
    /// queries computed and whose rows have not changed since ([`quiver_query::reuse`]).
    Partial,
}

impl Verdict {
    /// `HIT`, `MISS` or `BYPASS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Hit => "HIT",
            Verdict::Miss => "MISS",
            Verdict::Bypass => "BYPASS",
            Verdict::Partial => "PARTIAL",
        }
    }
}

/// A query's answer and how it was obtained.
pub struct Answer {
    /// Hit, miss or bypass.
    pub verdict: Verdict,
    /// The rows.
    pub body: AnswerBody,
}

/// The rows of an answer: whole and shareable, or streamed.
pub enum AnswerBody {
    /// The whole result, possibly with ready encodings.
    Cached(CachedAnswer),
    /// A result streamed as it is computed (bypasses and results over the entry limit).
    Streamed(QueryOutput),
}

/// A whole result and the key it is (or would have been) cached under.
pub struct CachedAnswer {
    key: CacheKey,
    result: Arc<CachedResult>,
}

impl CachedAnswer {
    /// The result.
    pub fn result(&self) -> &Arc<CachedResult> {
        &self.result
    }
}

/// How a query is answered: past the cache, or under a key (with the options to run it).
enum Lookup {
    Bypass(ExecuteOptions),
    Keyed(CacheKey, ExecuteOptions),
}

#[derive(Clone)]
enum FlightFailure {
    Query(Arc<QueryError>),
    /// The result outgrew the entry limit: the first waiter to take the output streams it,
    /// the others run the query themselves.
    TooLarge(Arc<Mutex<Option<QueryOutput>>>),
}

type FlightOutcome = Result<Arc<CachedResult>, FlightFailure>;
type Flight = Shared<BoxFuture<'static, FlightOutcome>>;

/// A running execution of a missed query that identical misses may join: one whose time
/// limit ends no earlier than theirs (none ends never), so that no caller waits under
/// another's shorter limit; each caller still waits no longer than its own limit.
struct RunningFlight {
    id: u64,
    deadline: Option<Instant>,
    flight: WeakShared<BoxFuture<'static, FlightOutcome>>,
}

impl RunningFlight {
    /// This execution, if it is still running and lasts at least until `deadline`.
    fn joinable(&self, deadline: Option<Instant>) -> Option<Flight> {
        let lasts = match (self.deadline, deadline) {
            (None, _) => true,
            (Some(ends), Some(needed)) => ends >= needed,
            (Some(_), None) => false,
        };
        lasts.then(|| self.flight.upgrade()).flatten()
    }
}

/// The query engine behind the result cache: what every protocol calls.
pub struct QueryService {
    engine: Arc<QueryEngine>,
    config: CacheConfig,
    counters: Arc<Counters>,
    entries: Entries,
    flights: Mutex<HashMap<CacheKey, Vec<RunningFlight>>>,
    next_flight: AtomicU64,
    /// Analyses by database and exact SQL text: an exact repeat skips parsing (never the
    /// version check, which needs no parsing).
    analyses: Cache<String, Arc<QueryAnalysis>>,
    /// Time parts of aggregates, for rolling windows to reuse.
    parts: Arc<Parts>,
    /// What reusing parts did, over all queries.
    part_totals: Arc<PartsReport>,
}

impl QueryService {
    /// A cache over `engine`, told about every write to the engine's store.
    pub fn new(engine: Arc<QueryEngine>, config: CacheConfig) -> Arc<Self> {
        let counters = Arc::new(Counters::default());
        let service = Arc::new(QueryService {
            entries: Entries::new(&config, counters.clone()),
            parts: Arc::new(Parts::new(&config)),
            part_totals: Arc::default(),
            engine,
            config,
            counters,
            flights: Mutex::new(HashMap::new()),
            next_flight: AtomicU64::new(0),
            analyses: Cache::builder()
                .max_capacity(32 << 20)
                .weigher(|k: &String, _: &Arc<QueryAnalysis>| {
                    u32::try_from(k.len() * 3).unwrap_or(u32::MAX)
                })
                .build(),
        });
        let listener = Arc::new(ChangeListener(Arc::downgrade(&service)));
        service.engine.store().add_change_listener(listener);
        service
    }

    /// The engine queries run on.
    pub fn engine(&self) -> &Arc<QueryEngine> {
        &self.engine
    }

    /// The cache settings.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Answers `request`: from the cache if an answer for the current table versions is
    /// there, else by running it (once for all identical concurrent misses).
    pub async fn query(
        self: &Arc<Self>,
        request: &QueryRequest,
    ) -> Result<Answer, Arc<QueryError>> {
        let analysis = self
            .analysis(&request.database, &request.sql)
            .map_err(|e| Arc::new(request.control.hide_unreadable(e)))?;
        let how = QueryInvocation {
            scope: &request.scope,
            no_cache: request.no_cache,
            control: &request.control,
        };
        self.query_analyzed(analysis, &request.params, how).await
    }

    /// Parses InfluxQL text into its statements, bounded as SQL text is (the engine's
    /// `max_sql_bytes` and `max_sql_depth`).
    pub fn parse_influxql(
        &self,
        text: &str,
    ) -> Result<Vec<InfluxqlStatement>, quiver_influxql::ParseError> {
        let limits = self.engine.statement_limits();
        quiver_influxql::parse(
            text,
            quiver_influxql::ParseLimits {
                max_depth: limits.max_depth,
                max_bytes: limits.max_bytes,
            },
        )
    }

    /// Answers an InfluxQL statement (parsed by the protocol) as [`QueryService::query`]
    /// answers SQL: in the database it names itself (`ON db`, `FROM db..m`) or else
    /// `database`, through the cache. `SHOW DATABASES` needs no database: it lists those the
    /// caller may read.
    pub async fn query_influxql(
        self: &Arc<Self>,
        database: &str,
        statement: InfluxqlStatement,
        how: QueryInvocation<'_>,
    ) -> Result<Answer, Arc<QueryError>> {
        if statement == InfluxqlStatement::ShowDatabases {
            self.engine
                .store()
                .check_current()
                .map_err(|e| Arc::new(QueryError::Storage(e)))?;
            return self.show_databases(how.control).map_err(Arc::new);
        }
        let named = quiver_influxql::plan::database_of(&statement)
            .map_err(|e| Arc::new(QueryError::Invalid(DataFusionError::Plan(e.0))))?;
        let database = named.as_deref().unwrap_or(database);
        if database.is_empty() {
            return Err(Arc::new(QueryError::Invalid(DataFusionError::Plan(
                "database name required".into(),
            ))));
        }
        let analysis = self
            .engine
            .analyze_influxql(database, statement)
            .map_err(|e| Arc::new(how.control.hide_unreadable(e)))?;
        self.query_analyzed(Arc::new(analysis), &QueryParams::None, how)
            .await
    }

    /// `SHOW DATABASES`: the databases `control`'s caller may read, in InfluxQL's layout.
    fn show_databases(&self, control: &QueryControl) -> Result<Answer, QueryError> {
        use arrow::array::{ArrayRef, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        let visible = control.visible_databases();
        let names: Vec<String> = self
            .engine
            .store()
            .database_names()
            .into_iter()
            .filter(|d| visible.shows(d))
            .collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                quiver_influxql::plan::MEASUREMENT_COLUMN,
                DataType::Utf8,
                false,
            ),
            Field::new("name", DataType::Utf8, false),
        ]));
        let series: ArrayRef = Arc::new(StringArray::from(vec!["databases"; names.len()]));
        let names: ArrayRef = Arc::new(StringArray::from(names));
        let batch = RecordBatch::try_new(schema.clone(), vec![series, names])
            .map_err(|e| QueryError::Internal(e.into()))?;
        let stream = futures::stream::iter([Ok(batch)]);
        Counters::bump(&self.counters.bypasses);
        Ok(Answer {
            verdict: Verdict::Bypass,
            body: AnswerBody::Streamed(QueryOutput {
                schema: schema.clone(),
                stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
            }),
        })
    }

    /// Answers a statement analysed beforehand (a prepared statement, or one a protocol parsed
    /// itself), with `params` bound, as [`QueryService::query`] does.
    pub async fn query_analyzed(
        self: &Arc<Self>,
        analysis: Arc<QueryAnalysis>,
        params: &QueryParams,
        how: QueryInvocation<'_>,
    ) -> Result<Answer, Arc<QueryError>> {
        // before the cache is consulted: a cached answer never reaches a caller who may not
        // read every table it came from, nor one a query node cannot know to be current
        how.control.check_analysis(&analysis).map_err(Arc::new)?;
        self.engine
            .store()
            .check_current()
            .map_err(|e| Arc::new(QueryError::Storage(e)))?;
        let answer = self.answer(analysis, params, how).await;
        if let Ok(answer) = &answer {
            self.log(answer.verdict);
        }
        answer
    }

    /// The answer for the current table versions, if the cache holds one, without running
    /// anything or counting a hit or miss: what a protocol that announces a result's schema
    /// before fetching it (Flight SQL's `GetFlightInfo`) uses instead of planning the query.
    pub fn peek(&self, request: &QueryRequest) -> Option<CachedAnswer> {
        let analysis = self.analysis(&request.database, &request.sql).ok()?;
        request.control.check_analysis(&analysis).ok()?;
        self.engine.store().check_current().ok()?;
        let how = QueryInvocation {
            scope: &request.scope,
            no_cache: request.no_cache,
            control: &request.control,
        };
        match self.plan(&analysis, &request.params, how) {
            Lookup::Keyed(key, _) => {
                let result = self.entries.get(&key)?;
                Some(CachedAnswer { key, result })
            }
            Lookup::Bypass(_) => None,
        }
    }

    /// How `analysis` with `params` is answered for `scope`: past the cache, or under a key
    /// naming the current versions of the tables it reads.
    fn plan(
        &self,
        analysis: &QueryAnalysis,
        params: &QueryParams,
        how: QueryInvocation<'_>,
    ) -> Lookup {
        let mut options = ExecuteOptions {
            params: params.clone(),
            now: None,
            control: how.control.clone(),
            parts: None,
        };
        if !self.config.enabled || how.no_cache || how.control.skip_rollups {
            return Lookup::Bypass(options);
        }
        if self.config.reuse_parts && !matches!(analysis.cacheability, Cacheability::Never(_)) {
            options.parts = Some(self.part_reuse(how.scope));
        }
        let clock_bucket = match (&analysis.cacheability, self.config.clock_granularity) {
            (Cacheability::Never(_), _) | (Cacheability::ClockDependent, None) => {
                return Lookup::Bypass(options)
            }
            (Cacheability::Deterministic, _) => {
                // the instant retention periods are measured from, in the key and the scan
                options.now = Some(Utc::now());
                None
            }
            (Cacheability::ClockDependent, Some(granularity)) => {
                let (bucket, start) = clock_bucket(Utc::now(), granularity);
                options.now = Some(start);
                Some(bucket)
            }
        };
        let now_ns = options
            .now
            .and_then(|now| now.timestamp_nanos_opt())
            .unwrap_or(i64::MAX);
        let Some((versions, retention_cutoffs)) = self.versions(&analysis.tables, now_ns) else {
            // A table is gone or was never there: let the engine say so.
            return Lookup::Bypass(options);
        };
        let key = CacheKey::new(KeySpec {
            canonical: &analysis.canonical,
            database: &analysis.database,
            params: params.fingerprint(),
            settings: self.engine.semantic_settings(),
            scope: how.scope,
            clock_bucket,
            versions,
            retention_cutoffs,
        });
        Lookup::Keyed(key, options)
    }

    async fn answer(
        self: &Arc<Self>,
        analysis: Arc<QueryAnalysis>,
        params: &QueryParams,
        how: QueryInvocation<'_>,
    ) -> Result<Answer, Arc<QueryError>> {
        let (key, options) = match self.plan(&analysis, params, how) {
            Lookup::Bypass(options) => return self.bypass(&analysis, &options).await,
            Lookup::Keyed(key, options) => (key, options),
        };
        if let Some(result) = self.entries.get(&key) {
            Counters::bump(&self.counters.hits);
            return Ok(Answer {
                verdict: Verdict::Hit,
                body: AnswerBody::Cached(CachedAnswer { key, result }),
            });
        }
        Counters::bump(&self.counters.misses);
        let report = options.parts.as_ref().map(|parts| parts.report.clone());
        let body = match self
            .join_flight(&key, analysis.clone(), options.clone())
            .await
        {
            Ok(result) => AnswerBody::Cached(CachedAnswer { key, result }),
            Err(FlightFailure::Query(e)) => return Err(e),
            Err(FlightFailure::TooLarge(output)) => {
                let taken = output.lock().take();
                match taken {
                    Some(output) => AnswerBody::Streamed(output),
                    None => AnswerBody::Streamed(self.run(&analysis, &options).await?),
                }
            }
        };
        Ok(Answer {
            verdict: self.partial_or(report.as_deref(), Verdict::Miss),
            body,
        })
    }

    /// `Partial` if the query `report` is of reused a part, else `otherwise`.
    fn partial_or(&self, report: Option<&PartsReport>, otherwise: Verdict) -> Verdict {
        match report.is_some_and(|r| r.reused_parts() > 0) {
            true => {
                Counters::bump(&self.counters.partial_hits);
                Verdict::Partial
            }
            false => otherwise,
        }
    }

    /// Lets a query of `scope` reuse time parts.
    fn part_reuse(&self, scope: &AccessScope) -> PartReuse {
        PartReuse {
            store: self.parts.clone(),
            report: Arc::default(),
            totals: self.part_totals.clone(),
            namespace: format!("{}\u{1}{scope:?}", self.engine.semantic_settings()),
        }
    }

    async fn bypass(
        &self,
        analysis: &QueryAnalysis,
        options: &ExecuteOptions,
    ) -> Result<Answer, Arc<QueryError>> {
        let output = self.run(analysis, options).await?;
        Counters::bump(&self.counters.bypasses);
        let report = options.parts.as_ref().map(|parts| parts.report.as_ref());
        Ok(Answer {
            verdict: self.partial_or(report, Verdict::Bypass),
            body: AnswerBody::Streamed(output),
        })
    }

    async fn run(
        &self,
        analysis: &QueryAnalysis,
        options: &ExecuteOptions,
    ) -> Result<QueryOutput, Arc<QueryError>> {
        self.engine
            .execute_analyzed(analysis, options)
            .await
            .map_err(Arc::new)
    }

    /// The analysis of `sql` in `database`, remembered by exact text.
    fn analysis(&self, database: &str, sql: &str) -> Result<Arc<QueryAnalysis>, QueryError> {
        let remember = sql.len() <= MAX_REMEMBERED_SQL_BYTES;
        let text_key = remember.then(|| format!("{database}\0{sql}"));
        if let Some(found) = text_key.as_ref().and_then(|k| self.analyses.get(k)) {
            return Ok(found);
        }
        let analysis = Arc::new(self.engine.analyze(database, sql)?);
        if let Some(text_key) = text_key {
            self.analyses.insert(text_key, analysis.clone());
        }
        Ok(analysis)
    }

    /// The current version of each table, and its retention cutoff at `now_ns` (if its
    /// database has a retention period); `None` if a table does not exist.
    fn versions(&self, tables: &[ScannedTable], now_ns: i64) -> Option<KeyedVersions> {
        let mut versions = Vec::with_capacity(tables.len());
        let mut cutoffs = Vec::new();
        for scanned in tables {
            let table = self.table(scanned)?;
            versions.push((scanned.clone(), table.version()));
            // the cutoff only where it filters something, as the scan applies it
            let cutoff = match table.retention_cutoff_ns(now_ns) {
                Some(_) => table.retention_filter_ns(&*table.snapshot().ok()?, now_ns),
                None => None,
            };
            cutoffs.push(cutoff);
        }
        Some((versions, cutoffs))
    }

    fn current_version(&self, table: &ScannedTable) -> Option<u64> {
        self.table(table).map(|t| t.version())
    }

    fn table(&self, table: &ScannedTable) -> Option<Arc<Table>> {
        self.engine
            .store()
            .database(&table.database)?
            .table(&table.table)
    }

    /// Waits for a running execution of `key` that lasts at least as long as this caller's
    /// time limit, or starts one; either way for no longer than that limit.
    async fn join_flight(
        self: &Arc<Self>,
        key: &CacheKey,
        analysis: Arc<QueryAnalysis>,
        options: ExecuteOptions,
    ) -> FlightOutcome {
        let control = options.control.clone();
        let deadline = control
            .timeout
            .and_then(|limit| Instant::now().checked_add(limit));
        let flight: Flight = {
            let mut flights = self.flights.lock();
            flights.retain(|_, running| {
                running.retain(|r| r.flight.upgrade().is_some());
                !running.is_empty()
            });
            let running = flights.entry(key.clone()).or_default();
            match running.iter().find_map(|r| r.joinable(deadline)) {
                Some(flight) => {
                    Counters::bump(&self.counters.coalesced);
                    flight
                }
                None => {
                    let id = self.next_flight.fetch_add(1, Ordering::Relaxed);
                    let flight = self
                        .clone()
                        .execute_and_store((key.clone(), id), analysis, options)
                        .boxed()
                        .shared();
                    let weak = flight.downgrade().expect("a new flight has not completed");
                    running.push(RunningFlight {
                        id,
                        deadline,
                        flight: weak,
                    });
                    flight
                }
            }
        };
        let (Some(deadline), Some(limit)) = (deadline, control.timeout) else {
            return flight.await;
        };
        match tokio::time::timeout_at(deadline.into(), flight).await {
            Ok(outcome) => outcome,
            Err(_) => Err(FlightFailure::Query(Arc::new(QueryError::Governance(
                GovernanceError::Stopped(StopReason::TimedOut {
                    limit,
                    setting: control.timeout_setting,
                }),
            )))),
        }
    }

    /// Runs a missed query, collects it (up to the entry limit) and stores it if no table it
    /// read changed meanwhile; the execution is then no longer joinable.
    async fn execute_and_store(
        self: Arc<Self>,
        (key, id): (CacheKey, u64),
        analysis: Arc<QueryAnalysis>,
        options: ExecuteOptions,
    ) -> FlightOutcome {
        Counters::bump(&self.counters.executions);
        let outcome = self.collect(&analysis, &options).await;
        if let Ok(result) = &outcome {
            let current = |t: &ScannedTable| self.current_version(t);
            if self.entries.admit(&key, result, current) {
                Counters::bump(&self.counters.inserts);
            } else if result.size() + key.size() <= self.entries.max_entry_bytes() {
                Counters::bump(&self.counters.not_stored_changed);
            } else {
                Counters::bump(&self.counters.too_large);
            }
        }
        if let Some(running) = self.flights.lock().get_mut(&key) {
            running.retain(|r| r.id != id);
        }
        outcome
    }

    async fn collect(&self, analysis: &QueryAnalysis, options: &ExecuteOptions) -> FlightOutcome {
        let output = self
            .run(analysis, options)
            .await
            .map_err(FlightFailure::Query)?;
        let schema = output.schema.clone();
        let mut stream = output.stream;
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut bytes = 0;
        while let Some(batch) = stream
            .try_next()
            .await
            .map_err(|e| FlightFailure::Query(Arc::new(QueryError::from(e))))?
        {
            let batch = compact(batch);
            bytes += batches_size(std::slice::from_ref(&batch));
            batches.push(batch);
            if bytes > self.entries.max_entry_bytes() {
                Counters::bump(&self.counters.too_large);
                let rest = futures::stream::iter(batches.into_iter().map(Ok)).chain(stream);
                let output = QueryOutput {
                    schema: schema.clone(),
                    stream: Box::pin(RecordBatchStreamAdapter::new(schema, rest)),
                };
                return Err(FlightFailure::TooLarge(Arc::new(Mutex::new(Some(output)))));
            }
        }
        Ok(Arc::new(CachedResult::new(schema, batches)))
    }

    /// The ready bytes of `answer` in `format`, if it was encoded to it before.
    pub fn encoding<K: EncodingKey>(&self, answer: &CachedAnswer, format: &K) -> Option<Bytes> {
        answer.result.encoding(format)
    }

    /// Keeps `bytes` as `answer`'s encoding in `format` for later hits (if the entry stays
    /// within the entry limit) and re-weighs the entry.
    pub fn keep_encoding<K: EncodingKey>(&self, answer: &CachedAnswer, format: &K, bytes: Bytes) {
        let limit = self
            .entries
            .max_entry_bytes()
            .saturating_sub(answer.key.size());
        if answer.result.add_encoding(format, bytes, limit) {
            let current = |t: &ScannedTable| self.current_version(t);
            self.entries.reweigh(&answer.key, &answer.result, current);
        }
    }

    /// Entries, bytes and counters.
    pub fn stats(&self) -> CacheStats {
        let mut stats = self.entries.stats();
        self.parts.settle();
        self.add_part_stats(&mut stats);
        stats
    }

    fn add_part_stats(&self, stats: &mut CacheStats) {
        let (parts, bytes) = self.parts.size();
        let totals = &self.part_totals;
        stats.add_parts(parts, bytes, totals.reused_rows(), totals.computed_rows());
    }

    /// Drops every cached answer (and every remembered analysis); returns how many answers
    /// there were.
    pub fn clear(&self) -> u64 {
        self.analyses.invalidate_all();
        self.parts.clear();
        self.entries.clear()
    }

    fn log(&self, verdict: Verdict) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            // Approximate entries and bytes: settling the cache per query would change what
            // is measured.
            let mut stats = self.entries.approximate_stats();
            self.add_part_stats(&mut stats);
            tracing::debug!(
                verdict = verdict.as_str(),
                entries = stats.entries,
                bytes = stats.bytes,
                hits = stats.hits,
                misses = stats.misses,
                bypasses = stats.bypasses,
                partial_hits = stats.partial_hits,
                part_rows_reused_ratio = stats.part_rows_reused_ratio,
                hit_ratio = stats.hit_ratio,
                evictions = stats.evictions,
                invalidations = stats.invalidations,
                "result cache"
            );
        }
    }
}

/// The instant `now` rounded down to `granularity`, and the bucket's number.
fn clock_bucket(now: DateTime<Utc>, granularity: std::time::Duration) -> (i64, DateTime<Utc>) {
    let step = i64::try_from(granularity.as_nanos())
        .unwrap_or(i64::MAX)
        .max(1);
    let nanos = now.timestamp_nanos_opt().unwrap_or(i64::MAX);
    let bucket = nanos.div_euclid(step);
    (bucket, DateTime::from_timestamp_nanos(bucket * step))
}

/// The scanned tables with their versions, and each one's retention cutoff (if any).
type KeyedVersions = (Vec<(ScannedTable, u64)>, Vec<Option<i64>>);

/// Removes a table's old entries when a write is applied to it.
struct ChangeListener(Weak<QueryService>);

impl TableChangeListener for ChangeListener {
    fn table_changed(&self, table: &Table) {
        if let Some(service) = self.0.upgrade() {
            let scanned = ScannedTable {
                database: table.database().to_string(),
                table: table.name().to_string(),
            };
            service.entries.table_changed(&scanned, table.version());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_buckets_round_down() {
        let t = DateTime::from_timestamp(1_700_000_123, 456).unwrap();
        let (bucket, start) = clock_bucket(t, std::time::Duration::from_secs(60));
        assert_eq!(start, DateTime::from_timestamp(1_700_000_100, 0).unwrap());
        let (next, _) = clock_bucket(
            DateTime::from_timestamp(1_700_000_160, 0).unwrap(),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(next, bucket + 1);
    }
}

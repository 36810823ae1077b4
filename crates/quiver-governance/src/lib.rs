//! `quiver-governance` is Quiver's query governance: one careless query costs its author an
//! error, never the server its life nor the other clients their writes.
//!
//! Every query that runs the engine (result-cache hits never get here) is *admitted*: it gets
//! an id, appears in [`Governor::list`], and waits in arrival order for one of
//! `max_concurrent_queries` slots, with at most `max_queued_queries` waiting (beyond that it is
//! refused at once, [`GovernanceError::Busy`]). It then runs on the governor's own runtime,
//! apart from the threads that accept requests and writes, at a lower CPU priority, and its
//! batches cross to the caller through a small channel, so a slow reader holds a query back
//! instead of letting it pile up answers. It stops, releasing its memory, when its deadline
//! passes (`query_timeout_secs`, or a shorter one its protocol asks for), when its caller
//! cancels or goes away (by dropping the query's stream or future: a PostgreSQL cancel
//! request, a closed HTTP connection, a cancelled gRPC call), when an operator kills it
//! ([`Governor::kill`]), or when the process nears `max_server_memory_bytes` and it holds the
//! most memory (the [`watchdog`]). Its operators reserve memory from a pool of its own
//! ([`pool`]); the functions whose output size their arguments decide are capped by
//! `quiver-exec`'s `value_limits`, and statements too long or too deep are refused before they
//! are planned ([`statement_limits`]).
//!
//! What a request brings and takes back ([`context`]) sits here too, below every crate that
//! acts on it: the engine plans and checks grants on it, the protocols fill it in.

pub mod context;
pub mod pool;
pub mod statement_limits;
mod watchdog;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::MemoryPool;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, StatisticsArgs, StatisticsContext};
use futures::StreamExt;
use parking_lot::Mutex;
use pool::{QueryPool, ServerMemory};
use serde::Serialize;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::context::{QueryControl, QueryOutput, QueryProtocol};

/// The limits the governor enforces (resolved: no "0 = automatic" left).
#[derive(Debug, Clone)]
pub struct Limits {
    pub query_memory_bytes: usize,
    pub max_server_memory_bytes: usize,
    pub query_timeout: Option<Duration>,
    pub stall_timeout: Option<Duration>,
    pub max_concurrent_queries: usize,
    pub max_queued_queries: usize,
    pub threads: usize,
}

/// Why the governor refused or ended a query.
#[derive(Debug, thiserror::Error)]
pub enum GovernanceError {
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
    /// The governor's own runtime could not start.
    #[error("cannot start the query runtime: {0}")]
    Runtime(std::io::Error),
}

impl quiver_model::Classify for GovernanceError {
    fn kind(&self) -> quiver_model::ErrorKind {
        use quiver_model::ErrorKind;
        match self {
            GovernanceError::Stopped(StopReason::TimedOut { .. })
            | GovernanceError::Stopped(StopReason::ClientStalled { .. }) => ErrorKind::TimedOut,
            GovernanceError::Stopped(StopReason::ServerMemory { .. }) => {
                ErrorKind::ResourcesExhausted
            }
            GovernanceError::Stopped(StopReason::Killed { .. }) => ErrorKind::Cancelled,
            GovernanceError::Busy { .. } => ErrorKind::Busy,
            GovernanceError::Runtime(_) => ErrorKind::Internal,
        }
    }
}

/// Why a running query was stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StopReason {
    /// Its deadline passed.
    #[error("the query ran longer than its time limit of {limit:?} ({setting}) and was stopped")]
    TimedOut {
        /// The limit.
        limit: Duration,
        /// The setting that set it.
        setting: &'static str,
    },
    /// An operator cancelled it.
    #[error("the query was cancelled by an operator (query id {id})")]
    Killed {
        /// The query's id.
        id: u64,
    },
    /// Its client took none of its answer for too long.
    #[error(
        "the client took none of the answer for {limit:?} (query_stall_timeout_secs) and the \
         query was stopped"
    )]
    ClientStalled {
        /// The limit.
        limit: Duration,
    },
    /// The process reached its memory ceiling while this query held the most memory.
    #[error(
        "the server reached its memory ceiling ({resident} bytes resident of \
         max_server_memory_bytes = {limit}) and this query, holding the most memory of those \
         running, was cancelled"
    )]
    ServerMemory {
        /// The process's resident bytes when it was stopped.
        resident: u64,
        /// The ceiling.
        limit: u64,
    },
}

/// Whether a listed query runs or waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryState {
    /// Waiting for a slot.
    Queued,
    /// Running.
    Running,
}

/// One query as `GET /api/v3/queries` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct QueryInfo {
    /// Its id (for [`Governor::kill`]).
    pub id: u64,
    /// The database it runs in.
    pub db: String,
    /// Its text (the first [`LISTED_SQL_CHARS`] characters).
    pub sql: String,
    /// Where it came from.
    pub protocol: QueryProtocol,
    /// The caller it runs for (a token's name), if it was authenticated.
    pub token: Option<String>,
    /// Running or queued.
    pub state: QueryState,
    /// Seconds since it arrived.
    pub elapsed_secs: f64,
    /// Bytes its operators hold.
    pub memory_bytes: usize,
}

/// How much of a query's text the list shows.
pub const LISTED_SQL_CHARS: usize = 4096;

/// One admitted query (see the module comment).
struct Tracked {
    id: u64,
    database: String,
    sql: String,
    protocol: QueryProtocol,
    token: Option<String>,
    arrived: Instant,
    running: AtomicBool,
    pool: OnceLock<Arc<QueryPool>>,
    stop: CancellationToken,
    reason: OnceLock<StopReason>,
}

impl Tracked {
    /// Stops the query for `reason` (the first reason given wins).
    fn stop(&self, reason: StopReason) {
        let _ = self.reason.set(reason);
        self.stop.cancel();
    }

    fn memory_bytes(&self) -> usize {
        self.pool.get().map_or(0, |pool| pool.reserved())
    }

    fn info(&self) -> QueryInfo {
        QueryInfo {
            id: self.id,
            db: self.database.clone(),
            sql: self.sql.clone(),
            protocol: self.protocol,
            token: self.token.clone(),
            state: if self.running.load(Ordering::Relaxed) {
                QueryState::Running
            } else {
                QueryState::Queued
            },
            elapsed_secs: self.arrived.elapsed().as_secs_f64(),
            memory_bytes: self.memory_bytes(),
        }
    }
}

/// The queries admitted and the slots they share.
pub struct Governor {
    limits: Limits,
    queries: Mutex<BTreeMap<u64, Arc<Tracked>>>,
    next_id: AtomicU64,
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    server_memory: Arc<ServerMemory>,
    runtime: QueryRuntime,
}

impl Governor {
    /// A governor enforcing `limits`, with its runtime and its memory watchdog started.
    pub fn start(limits: Limits) -> Result<Arc<Self>, GovernanceError> {
        let runtime = QueryRuntime::start(limits.threads)?;
        let governor = Arc::new(Governor {
            slots: Arc::new(Semaphore::new(limits.max_concurrent_queries.max(1))),
            server_memory: ServerMemory::new(limits.max_server_memory_bytes),
            queries: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            waiting: AtomicUsize::new(0),
            runtime,
            limits,
        });
        watchdog::start(
            Arc::downgrade(&governor),
            governor.limits.max_server_memory_bytes,
        );
        Ok(governor)
    }

    /// The queries running and queued, oldest first.
    pub fn list(&self) -> Vec<QueryInfo> {
        self.queries.lock().values().map(|q| q.info()).collect()
    }

    /// Cancels query `id`; false if no such query runs or waits.
    pub fn kill(&self, id: u64) -> bool {
        let found = self.queries.lock().get(&id).cloned();
        match found {
            Some(query) => {
                tracing::info!(id, sql = %query.sql, "query cancelled by an operator");
                query.stop(StopReason::Killed { id });
                true
            }
            None => false,
        }
    }

    /// Bytes all running queries' operators hold.
    pub fn reserved_bytes(&self) -> usize {
        self.server_memory.reserved()
    }

    /// Registers a query and waits for its slot (or refuses it when the queue is full).
    pub async fn admit(
        self: &Arc<Self>,
        database: &str,
        sql: &str,
        control: &QueryControl,
    ) -> Result<Admitted, GovernanceError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tracked = Arc::new(Tracked {
            id,
            database: database.to_string(),
            // only what the list shows is kept: a query's text may be megabytes
            sql: sql.chars().take(LISTED_SQL_CHARS).collect(),
            protocol: control.protocol,
            token: control
                .grants
                .as_ref()
                .map(|grants| grants.caller_name().to_string()),
            arrived: Instant::now(),
            running: AtomicBool::new(false),
            pool: OnceLock::new(),
            stop: CancellationToken::new(),
            reason: OnceLock::new(),
        });
        let (limit, setting) = match (self.limits.query_timeout, control.timeout) {
            (Some(server), Some(asked)) if server <= asked => (Some(server), "query_timeout_secs"),
            (_, Some(asked)) => (Some(asked), control.timeout_setting),
            (server, None) => (server, "query_timeout_secs"),
        };
        let mut admitted = Admitted {
            governor: self.clone(),
            tracked,
            slot: None,
            // a limit past the end of time is no limit
            deadline: limit.and_then(|limit| {
                let at = tokio::time::Instant::now().checked_add(limit)?;
                Some((at, limit, setting))
            }),
        };
        self.queries.lock().insert(id, admitted.tracked.clone());
        admitted.slot = Some(self.wait_for_slot(&admitted).await?);
        admitted.tracked.running.store(true, Ordering::Relaxed);
        Ok(admitted)
    }

    async fn wait_for_slot(
        &self,
        admitted: &Admitted,
    ) -> Result<OwnedSemaphorePermit, GovernanceError> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Ok(slot);
        }
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel);
        let _leaving = Defer(|| {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        });
        if queued >= self.limits.max_queued_queries {
            return Err(GovernanceError::Busy {
                running: self.limits.max_concurrent_queries,
                queued: self.limits.max_queued_queries,
            });
        }
        tokio::select! {
            slot = self.slots.clone().acquire_owned() => {
                Ok(slot.expect("the governor never closes its semaphore"))
            }
            reason = admitted.stopped() => Err(GovernanceError::Stopped(reason)),
        }
    }

    /// Executes an admitted, planned query where `placement` says: `execute` starts it in
    /// the query's runtime environment (the engine's, with a memory pool of its own), and its
    /// batches come back as they are produced.
    pub fn run<E>(
        &self,
        admitted: Admitted,
        base: &Arc<RuntimeEnv>,
        (schema, placement): (SchemaRef, Placement),
        execute: E,
    ) -> QueryOutput
    where
        E: FnOnce(Arc<RuntimeEnv>) -> Result<SendableRecordBatchStream, DataFusionError>
            + Send
            + 'static,
    {
        if cfg!(feature = "ungoverned") {
            return ungoverned(admitted, base, schema, execute);
        }
        let env = admitted.runtime_env(base, self.limits.query_memory_bytes);
        if placement == Placement::Inline {
            let stream = inline(admitted, execute(env));
            let stream: SendableRecordBatchStream =
                Box::pin(RecordBatchStreamAdapter::new(schema.clone(), stream));
            return QueryOutput { schema, stream };
        }
        let (sender, receiver) = mpsc::channel(2);
        let done = Arc::new(AtomicBool::new(false));
        let finished = done.clone();
        let tracked = admitted.tracked.clone();
        let stall_timeout = self.limits.stall_timeout;
        let task = self.runtime.handle().spawn(async move {
            // DataFusion spawns its own tasks when a plan starts: on this runtime
            let stream = execute(env);
            drive(&admitted, stream, (sender, stall_timeout), &finished).await;
        });
        let batches = Batches {
            receiver,
            done,
            tracked,
            _guard: AbortOnDrop(task.abort_handle()),
        };
        let stream: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            batches.into_stream(),
        ));
        QueryOutput { schema, stream }
    }
}

/// The benchmark baseline of the `ungoverned` feature: the query runs on the caller's task,
/// in the engine's shared memory pool, released from admission at once (nothing lists,
/// limits or stops it but its caller going away).
fn ungoverned<E>(
    admitted: Admitted,
    base: &Arc<RuntimeEnv>,
    schema: SchemaRef,
    execute: E,
) -> QueryOutput
where
    E: FnOnce(Arc<RuntimeEnv>) -> Result<SendableRecordBatchStream, DataFusionError>,
{
    drop(admitted);
    let stream = match execute(base.clone()) {
        Ok(stream) => stream,
        Err(e) => Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            futures::stream::once(async { Err(e) }),
        )),
    };
    QueryOutput { schema, stream }
}

/// Where a query's plan is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On the governor's runtime, its batches crossing to the caller through a channel.
    QueryRuntime,
    /// On the caller's task, as the caller polls: for a plan that reads at most a batch's
    /// worth of rows in all ([`Placement::of`]), where the hand-over to another runtime's
    /// threads and back would cost more than the plan itself. (The few tasks a plan of
    /// several partitions spawns then run on the caller's runtime: over so few rows, they
    /// take it no longer than answering the request does.)
    Inline,
}

/// Rows at most a plan run inline may start from, all its leaves together.
const INLINE_MAX_ROWS: usize = 8192;

impl Placement {
    /// Inline for a plan without joins or unnesting (which can multiply rows) or recursion,
    /// whose leaves know exactly that they yield at most [`INLINE_MAX_ROWS`] together
    /// (`SELECT 1`, `count(*)` answered from statistics, `VALUES`, a scan of one host's
    /// hours from memory, a kept last-point answer); everything else on the query runtime.
    pub fn of(plan: &Arc<dyn ExecutionPlan>) -> Placement {
        match leaf_rows(plan) {
            Some(rows) if rows <= INLINE_MAX_ROWS => Placement::Inline,
            _ => Placement::QueryRuntime,
        }
    }
}

/// The rows `plan`'s leaves yield together, if each knows exactly and nothing in the plan can
/// multiply them; `None` otherwise.
fn leaf_rows(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let name = plan.name();
    if name.contains("Join") || name.contains("Unnest") || name.contains("Recursive") {
        return None;
    }
    let children = plan.children();
    if children.is_empty() {
        let statistics = StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new());
        return match statistics.map(|s| s.num_rows) {
            // an estimate bounds nothing: a leaf must know its rows exactly
            Ok(Precision::Exact(rows)) => Some(rows),
            _ => None,
        };
    }
    children
        .into_iter()
        .try_fold(0usize, |total, child| total.checked_add(leaf_rows(child)?))
}

/// The answer of a plan driven on the caller's task: at the first poll it is computed whole
/// (it is small: see [`Placement::of`]), racing its stop (deadline, kill, memory ceiling),
/// and `admitted` (its slot and listing) is released before any of it is handed out, so a
/// client that then stops reading holds no slot.
fn inline(
    admitted: Admitted,
    started: Result<SendableRecordBatchStream, DataFusionError>,
) -> impl futures::Stream<Item = Result<RecordBatch, DataFusionError>> {
    let answer = async move {
        let collected = async {
            let mut batches = Vec::new();
            let mut stream = started?;
            while let Some(batch) = stream.next().await {
                batches.push(Ok(batch?));
            }
            Ok::<_, DataFusionError>(batches)
        };
        let outcome = tokio::select! {
            collected = collected => collected,
            reason = admitted.stopped() => {
                Err(DataFusionError::External(Box::new(reason)))
            }
        };
        drop(admitted);
        let items = outcome.unwrap_or_else(|e| vec![Err(e)]);
        futures::stream::iter(items)
    };
    futures::stream::once(answer).flatten()
}

/// Runs a started query to its end on the governor's runtime, passing each batch (or its
/// error) to `batches`, waiting at most `stall_timeout` for the client to make room for it;
/// `done` is set once the answer is complete (before `batches` closes).
async fn drive(
    admitted: &Admitted,
    stream: Result<SendableRecordBatchStream, DataFusionError>,
    (batches, stall_timeout): (
        mpsc::Sender<Result<RecordBatch, DataFusionError>>,
        Option<Duration>,
    ),
    done: &AtomicBool,
) {
    let mut stream = match stream {
        Ok(stream) => stream,
        Err(e) => {
            let _ = batches.send(Err(e)).await;
            return;
        }
    };
    let stopped = admitted.stopped();
    tokio::pin!(stopped);
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = &mut stopped => return,
        };
        let Some(item) = item else {
            done.store(true, Ordering::Release);
            return;
        };
        let failed = item.is_err();
        let stalled = async {
            match stall_timeout {
                Some(limit) => tokio::time::sleep(limit).await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            sent = batches.send(item) => if sent.is_err() { return },
            _ = &mut stopped => return,
            () = stalled => {
                let limit = stall_timeout.expect("only a limit elapses");
                admitted.tracked.stop(StopReason::ClientStalled { limit });
                return;
            }
        }
        if failed {
            // the error went out: the answer ends with it
            return;
        }
    }
}

/// The error for a query whose task ended before its answer did: the reason it was stopped,
/// or a failure of the task itself (a panic).
fn ended_early(tracked: &Tracked) -> DataFusionError {
    match tracked.reason.get() {
        Some(reason) => DataFusionError::External(Box::new(reason.clone())),
        None => DataFusionError::Internal(
            "the query's task ended before its answer (see the server log)".into(),
        ),
    }
}

/// The receiving end of a running query's batches.
struct Batches {
    receiver: mpsc::Receiver<Result<RecordBatch, DataFusionError>>,
    done: Arc<AtomicBool>,
    tracked: Arc<Tracked>,
    _guard: AbortOnDrop,
}

impl Batches {
    /// The batches, then an error if the query did not finish (so that a stopped query never
    /// looks like a complete answer); an error ends the stream.
    fn into_stream(self) -> impl futures::Stream<Item = Result<RecordBatch, DataFusionError>> {
        futures::stream::unfold(Some(self), |state| async move {
            let mut this = state?;
            match this.receiver.recv().await {
                Some(Ok(batch)) => Some((Ok(batch), Some(this))),
                Some(Err(e)) => Some((Err(e), None)),
                None if this.done.load(Ordering::Acquire) => None,
                None => Some((Err(ended_early(&this.tracked)), None)),
            }
        })
    }
}

/// An admitted query: registered until dropped, holding its slot once it has one.
pub struct Admitted {
    governor: Arc<Governor>,
    tracked: Arc<Tracked>,
    slot: Option<OwnedSemaphorePermit>,
    deadline: Option<(tokio::time::Instant, Duration, &'static str)>,
}

impl Admitted {
    /// Resolves with the reason once the query must stop.
    async fn stopped(&self) -> StopReason {
        let deadline = async {
            match self.deadline {
                Some((at, limit, setting)) => {
                    tokio::time::sleep_until(at).await;
                    StopReason::TimedOut { limit, setting }
                }
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            () = self.tracked.stop.cancelled() => {}
            reason = deadline => self.tracked.stop(reason),
        }
        self.tracked
            .reason
            .get()
            .cloned()
            .expect("a query is stopped only after its reason is set")
    }

    /// The runtime environment the query executes in: the engine's, with a memory pool of
    /// its own.
    fn runtime_env(&self, base: &RuntimeEnv, limit: usize) -> Arc<RuntimeEnv> {
        let pool = Arc::new(QueryPool::new(limit, self.governor.server_memory.clone()));
        let _ = self.tracked.pool.set(pool.clone());
        Arc::new(RuntimeEnv {
            memory_pool: pool as Arc<dyn MemoryPool>,
            disk_manager: base.disk_manager.clone(),
            cache_manager: base.cache_manager.clone(),
            object_store_registry: base.object_store_registry.clone(),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.governor.queries.lock().remove(&self.tracked.id);
    }
}

/// Runs a closure when dropped.
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Aborts a task when dropped (the caller of a query went away).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The runtime queries execute on: its own threads, at a lower CPU priority than the ones
/// that accept requests and writes. Shut down without waiting when dropped.
struct QueryRuntime(Option<tokio::runtime::Runtime>);

impl QueryRuntime {
    fn start(threads: usize) -> Result<Self, GovernanceError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("quiver-query")
            .thread_stack_size(crate::statement_limits::THREAD_STACK_BYTES)
            .on_thread_start(lower_priority)
            .enable_all()
            .build()
            .map_err(GovernanceError::Runtime)?;
        Ok(QueryRuntime(Some(runtime)))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }
}

impl Drop for QueryRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The nice value of query threads: requests, writes and health checks go first.
const QUERY_THREAD_NICE: i32 = 5;

/// Lowers the calling thread's CPU priority (Linux: the nice value is per thread).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority has no memory effects; `0` names the calling thread on Linux.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, QUERY_THREAD_NICE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    /// Where `sql` runs, in a session with table `t` of 5,000 rows (`v`, exact statistics).
    async fn placement(sql: &str) -> Placement {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, false),
        ]));
        let rows = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::Int64Array::from_iter_values(
                0..5000,
            ))],
        )
        .unwrap();
        let ctx = SessionContext::new();
        let table = datafusion::datasource::MemTable::try_new(schema, vec![vec![rows]]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        Placement::of(&plan)
    }

    #[tokio::test]
    async fn only_plans_of_few_rows_run_inline() {
        for small in [
            "SELECT 1",
            "SELECT 1 + 2 AS three, 'x' AS x",
            "SELECT * FROM (VALUES (1), (2), (3)) t(v) WHERE v > 1",
            // several partitions (a repartitioned aggregate) over few rows
            "SELECT v % 2 AS k, count(*) FROM (VALUES (1), (2), (3)) t(v) GROUP BY v % 2",
            "SELECT v % 7 AS k, max(v) FROM t GROUP BY v % 7",
        ] {
            assert_eq!(placement(small).await, Placement::Inline, "{small}");
        }
        for big in [
            "SELECT count(*) FROM generate_series(1, 100000000) t(v)",
            // two leaves of 5,000 rows: 10,000 in all
            "SELECT max(v) FROM (SELECT v FROM t UNION ALL SELECT v + 1 AS v FROM t) u",
            "SELECT * FROM (VALUES (1), (2)) a(x) CROSS JOIN (VALUES (3), (4)) b(y)",
            "SELECT unnest([1, 2, 3])",
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r",
        ] {
            assert_eq!(placement(big).await, Placement::QueryRuntime, "{big}");
        }
    }
}

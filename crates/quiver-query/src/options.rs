//! The SQL engine's settings ([`QueryOptions`], the server's configuration keys for queries)
//! and the hook protocols extend each database's session with ([`SessionSetup`]).

use std::sync::Arc;
use std::time::Duration;

use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use quiver_model::VisibleDatabases;
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::catalog_names::CATALOG_NAME;
use quiver_distributed::Distributed;
use quiver_exec::value_limits::OutputLimits;
use quiver_governance::statement_limits::{self, StatementLimits};
use quiver_governance::Limits;

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
    /// Where queries run: `off` (here, the default), `auto` (on DataFusion Ballista when the
    /// estimated scan is at least `distributed_min_scan_bytes`) or `on` (always on Ballista).
    /// Needs `object_store_url` (executors read the files from there) and a scheduler at
    /// `scheduler_addr`. Per query: HTTP `distributed=`, the PostgreSQL setting
    /// `quiver.distributed`, the Flight SQL header `x-quiver-distributed`.
    pub distributed: Distributed,
    /// The estimated scan (bytes of Parquet files after pruning, plus buffered rows) from
    /// which `distributed = auto` runs a query on Ballista.
    pub distributed_min_scan_bytes: u64,
    /// How many partitions a plan shipped to Ballista is planned with (DataFusion's
    /// `target_partitions` there, about the most tasks its scan stage splits into); 0 (the
    /// default): this server's `query_partitions`. Each task costs about 10 ms on top of its
    /// work (BENCHMARKS.md): raise it towards the cluster's cores for scans that big.
    pub distributed_partitions: usize,
    /// Where DataFusion Ballista's scheduler listens (`role = scheduler`), and where executors
    /// and the servers that send it queries find it: HOST:PORT.
    pub scheduler_addr: String,
    /// Extensions applied to every database's session when it is created, in order.
    #[serde(skip)]
    pub session_setup: Vec<Arc<dyn SessionSetup>>,
}

/// The memory budget assumed when the machine's cannot be read.
const FALLBACK_MEMORY_BYTES: u64 = 8 << 30;

impl Default for QueryOptions {
    fn default() -> Self {
        let budget =
            quiver_model::machine::available_memory_bytes().unwrap_or(FALLBACK_MEMORY_BYTES);
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
            distributed: Distributed::Off,
            distributed_min_scan_bytes: 1 << 30,
            distributed_partitions: 0,
            scheduler_addr: "127.0.0.1:50050".into(),
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

    /// The parallelism of a plan shipped to Ballista: `distributed_partitions`, or
    /// [`QueryOptions::partitions`] if 0.
    pub fn distributed_partitions(&self) -> usize {
        match self.distributed_partitions {
            0 => self.partitions(),
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
    pub(crate) fn limits(&self) -> Limits {
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
        if self.distributed_partitions > 4096 {
            return Err(format!(
                "distributed_partitions must be at most 4096 (0: query_partitions), got {}",
                self.distributed_partitions
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
    pub(crate) fn output_limits(&self) -> OutputLimits {
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

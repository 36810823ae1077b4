//! `role = scheduler` and `role = executor`: DataFusion Ballista's scheduler and executor,
//! embedded in the one binary, for queries that run distributed (`distributed = auto | on`).
//! The server hands each its settings ([`ExecutorSettings`]) and the tables' files.
//!
//! Both use Quiver's plan codec ([`QuiverPhysicalCodec`]), so the plans query-serving nodes
//! ship (with Quiver's deduplicating merge and gap fill in them) decode as they were planned.
//! An executor reads the Parquet files the plans name from `object_store_url`, registered
//! where the plans' scans look for them; its shuffle files go to `<data_dir>/shuffle`.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ballista_core::RuntimeProducer;
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::SessionBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::object_store::ObjectStore;

use crate::{register_table_files, QuiverPhysicalCodec, MAX_MESSAGE_BYTES};

/// Why a scheduler or an executor cannot start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// A setting is wrong (the message names it), or Ballista refused or stopped.
    #[error("{0}")]
    Config(String),
    /// A directory it needs cannot be made.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
}

/// What an executor is told by the server's settings.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// `executor_addr`: where it listens and where the others reach it (its task port is the
    /// next one).
    pub executor_addr: String,
    /// `scheduler_addr`: the scheduler it registers with.
    pub scheduler_addr: String,
    /// The data directory (its shuffle files go to `shuffle/` under it).
    pub data_dir: PathBuf,
    /// `object_store_url`, for the log.
    pub object_store_url: String,
}

/// Seconds between an executor's heartbeats.
const HEARTBEAT_SECS: u64 = 5;
/// Seconds without a heartbeat after which the scheduler counts an executor lost and runs
/// its tasks again elsewhere.
const EXECUTOR_TIMEOUT_SECS: u64 = 20;

/// Runs the scheduler at `scheduler_addr` until `shutdown` completes; `files` are the tables'
/// files, where the plans it decodes name them.
pub async fn run_scheduler(
    scheduler_addr: &str,
    files: Arc<dyn ObjectStore>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RoleError> {
    let addr = resolve(scheduler_addr, "scheduler_addr").await?;
    // the plans it decodes name the tables' files where the executors find them
    let session: SessionBuilder = Arc::new(move |session| {
        let state = ballista_core::utils::default_session_builder(session)?;
        register_table_files(state.runtime_env(), files.clone());
        Ok(state)
    });
    let scheduler = SchedulerConfig {
        bind_host: addr.ip().to_string(),
        bind_port: addr.port(),
        external_host: addr.ip().to_string(),
        grpc_server_max_decoding_message_size: MAX_MESSAGE_BYTES as u32,
        grpc_server_max_encoding_message_size: MAX_MESSAGE_BYTES as u32,
        grpc_client_max_message_size: MAX_MESSAGE_BYTES as u32,
        executor_timeout_seconds: EXECUTOR_TIMEOUT_SECS,
        expire_dead_executor_interval_seconds: HEARTBEAT_SECS,
        no_executors_grace_period_seconds: EXECUTOR_TIMEOUT_SECS,
        // query-serving nodes remove a job's files once they have read its answer; this is
        // for those that could not (a reader slower than this loses the rest of its answer)
        finished_job_data_clean_up_interval_seconds: 3600,
        override_physical_codec: Some(Arc::new(QuiverPhysicalCodec::default())),
        override_session_builder: Some(session),
        ..SchedulerConfig::default()
    };
    warn_unless_loopback(addr, "scheduler_addr");
    let cluster = BallistaCluster::new_from_config(&scheduler)
        .await
        .map_err(ballista("cannot set up the scheduler"))?;
    tracing::info!(%addr, "Ballista scheduler");
    let serving =
        ballista_scheduler::scheduler_process::start_server(cluster, addr, Arc::new(scheduler));
    tokio::select! {
        served = serving => served.map_err(ballista("the scheduler stopped")),
        () = shutdown => Ok(()),
    }
}

/// Runs an executor at `executor_addr` for the scheduler at `scheduler_addr` until SIGTERM or
/// Ctrl-C (it finishes its running tasks first), reading the tables' `files`.
pub async fn run_executor(
    settings: &ExecutorSettings,
    files: Arc<dyn ObjectStore>,
) -> Result<(), RoleError> {
    let own = resolve(&settings.executor_addr, "executor_addr").await?;
    if own.ip().is_unspecified() {
        return Err(RoleError::Config(format!(
            "executor_addr {} must be the address the scheduler and query-serving nodes reach \
             this executor at (it is also where it listens), not an unspecified address",
            settings.executor_addr
        )));
    }
    warn_unless_loopback(own, "executor_addr");
    let scheduler = resolve(&settings.scheduler_addr, "scheduler_addr").await?;
    let work_dir = shuffle_dir(&settings.data_dir)?;
    let runtime_dir = work_dir.clone();
    let runtime: RuntimeProducer = Arc::new(move |_| {
        let runtime = RuntimeEnvBuilder::new()
            .with_temp_file_path(runtime_dir.clone())
            .build()?;
        register_table_files(&runtime, files.clone());
        Ok(Arc::new(runtime))
    });
    let grpc_port = own.port().checked_add(1).ok_or_else(|| {
        RoleError::Config("executor_addr's port must leave the next one free".into())
    })?;
    let executor = ExecutorProcessConfig {
        bind_host: own.ip().to_string(),
        external_host: Some(own.ip().to_string()),
        port: own.port(),
        grpc_port,
        scheduler_host: scheduler.ip().to_string(),
        scheduler_port: scheduler.port(),
        scheduler_connect_timeout_seconds: 30,
        work_dir: Some(work_dir.to_string_lossy().into_owned()),
        executor_heartbeat_interval_seconds: HEARTBEAT_SECS,
        grpc_max_decoding_message_size: MAX_MESSAGE_BYTES as u32,
        grpc_max_encoding_message_size: MAX_MESSAGE_BYTES as u32,
        override_physical_codec: Some(Arc::new(QuiverPhysicalCodec::default())),
        override_runtime_producer: Some(runtime),
        ..ExecutorProcessConfig::default()
    };
    tracing::info!(%own, %scheduler, data = %settings.object_store_url, "Ballista executor");
    start_executor_process(Arc::new(executor))
        .await
        .map_err(ballista("the executor stopped"))
}

/// Warns that Ballista's services at `addr` (the `setting`) take plans and hand out answers
/// without asking who calls, when other machines can reach them.
fn warn_unless_loopback(addr: SocketAddr, setting: &str) {
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "{setting} is reachable from other machines: Ballista's scheduler and executors \
             authenticate no one and encrypt nothing (anyone reaching them can run plans over \
             object_store_url and read answers); keep them on a private network"
        );
    }
}

/// `<data_dir>/shuffle`, created (absolute: Ballista names its files by it).
fn shuffle_dir(data_dir: &Path) -> Result<PathBuf, RoleError> {
    let dir = std::path::absolute(data_dir.join("shuffle")).map_err(|source| RoleError::Io {
        context: format!("cannot resolve {}", data_dir.display()),
        source,
    })?;
    std::fs::create_dir_all(&dir).map_err(|source| RoleError::Io {
        context: format!("cannot create {}", dir.display()),
        source,
    })?;
    Ok(dir)
}

/// The socket address `addr` (HOST:PORT) names; `setting` names it in errors.
async fn resolve(addr: &str, setting: &str) -> Result<SocketAddr, RoleError> {
    let mut found = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| RoleError::Config(format!("{setting} {addr:?} is not HOST:PORT: {e}")))?;
    found
        .next()
        .ok_or_else(|| RoleError::Config(format!("{setting} {addr:?} names no address")))
}

/// A Ballista failure while `doing` something.
fn ballista(doing: &'static str) -> impl FnOnce(ballista_core::error::BallistaError) -> RoleError {
    move |e| RoleError::Config(format!("{doing}: {e}"))
}

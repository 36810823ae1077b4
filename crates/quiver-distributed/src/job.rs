//! A query's job on Ballista: submitted to the scheduler as a physical plan, followed until
//! it ends, its answer fetched from the executors that hold it; cancelled when its stream is
//! dropped before the end (a timeout, a cancel, a client gone).

use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use ballista_core::client::BallistaClient;
use ballista_core::serde::protobuf::execute_query_params::Query;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{
    execute_query_result, job_status, CancelJobParams, CleanJobDataParams, ExecuteQueryParams,
    GetJobStatusParams, KeyValuePair, PartitionLocation,
};
use ballista_core::serde::scheduler::PartitionId;
use ballista_core::utils::create_grpc_client_endpoint;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;

/// The largest message exchanged with the scheduler and the executors (a plan carries the
/// write buffer's rows its scans need); the scheduler and executors Quiver embeds accept as
/// much.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// How long connecting to the scheduler may take before it counts as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a job's status is asked for in its first [`FAST_POLLING`] (a short job's answer
/// waits for the next question), then every [`SLOW_POLL_INTERVAL`].
const FAST_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long a job is asked about every [`FAST_POLL_INTERVAL`].
const FAST_POLLING: Duration = Duration::from_secs(1);
/// How often a longer job's status is asked for.
const SLOW_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a job may wait without running (no executor takes it, or the scheduler no longer
/// knows it) before the query fails.
const NOT_RUNNING_LIMIT: Duration = Duration::from_secs(60);

/// A connection to the scheduler.
pub type Scheduler = SchedulerGrpcClient<Channel>;

/// Connects to the scheduler at `addr` (`host:port`).
pub(crate) async fn connect_scheduler(addr: &str) -> Result<Scheduler, String> {
    let url = format!("http://{addr}");
    let endpoint = create_grpc_client_endpoint(url, None)
        .map_err(|e| format!("scheduler_addr {addr:?} is not an address: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(Duration::from_secs(30));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("the Ballista scheduler at {addr} does not answer: {e}"))?;
    Ok(SchedulerGrpcClient::new(channel)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
        .max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// The answer of the encoded physical `plan` (whose output is `schema`), run as a job of the
/// scheduler with DataFusion `settings`: a stream that submits the job when first polled.
pub fn run_job(
    scheduler: Scheduler,
    plan: Vec<u8>,
    settings: Vec<(String, String)>,
    schema: SchemaRef,
) -> SendableRecordBatchStream {
    let expected = schema.clone();
    let answer = async move {
        let job = submit(scheduler, plan, settings).await?;
        let locations = job.finished().await?;
        Ok::<_, DataFusionError>(fetch(job, locations))
    };
    let stream = futures::stream::once(answer)
        .try_flatten()
        .map(move |batch| conform(batch?, &expected));
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// `batch` with `schema`: shuffles and fetches may hand columns back in another encoding of
/// the same values (a dictionary's values decoded), which is cast back.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.with_schema(schema.clone())?);
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(
            |(column, field)| match column.data_type() == field.data_type() {
                true => Ok(column.clone()),
                false => arrow::compute::cast(column, field.data_type()),
            },
        )
        .collect::<Result<Vec<_>, _>>()?;
    quiver_exec::plan_nodes::batch_of(schema, columns, batch.num_rows())
}

/// A submitted job; cancelled if dropped before its answer was read to the end.
struct Job {
    scheduler: Scheduler,
    id: String,
    done: bool,
}

impl Drop for Job {
    /// Cancels the job unless its answer was read whole, then has its shuffle files removed
    /// (the scheduler would remove them an hour after the job ended otherwise).
    fn drop(&mut self) {
        let (mut scheduler, job_id, done) = (self.scheduler.clone(), self.id.clone(), self.done);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                job_id,
                "no runtime to cancel or clean up a Ballista job with"
            );
            return;
        };
        runtime.spawn(async move {
            if !done {
                let cancel = scheduler.cancel_job(CancelJobParams {
                    job_id: job_id.clone(),
                });
                match cancel.await {
                    Ok(_) => tracing::info!(job_id, "Ballista job cancelled"),
                    Err(e) => tracing::warn!(job_id, error = %e, "cannot cancel a Ballista job"),
                }
            }
            // (no stages named: the whole job)
            let clean = scheduler.clean_job_data(CleanJobDataParams {
                job_id: job_id.clone(),
                remove_stage_ids: Vec::new(),
            });
            if let Err(e) = clean.await {
                tracing::warn!(job_id, error = %e, "cannot remove a Ballista job's files");
            }
        });
    }
}

/// Submits `plan` as a new job in a session of its own.
async fn submit(
    mut scheduler: Scheduler,
    plan: Vec<u8>,
    settings: Vec<(String, String)>,
) -> Result<Job> {
    let session_id = format!("quiver-{}", uuid_like());
    let mut request = tonic::Request::new(ExecuteQueryParams {
        query: Some(Query::PhysicalPlan(plan)),
        settings: settings
            .into_iter()
            .map(|(key, value)| KeyValuePair {
                key,
                value: Some(value),
            })
            .collect(),
        session_id,
        operation_id: uuid_like(),
    });
    ballista_core::version::insert_version_header(request.metadata_mut());
    let response = scheduler
        .execute_query(request)
        .await
        .map_err(|e| failed("submitting the job", e))?;
    match response.into_inner().result {
        Some(execute_query_result::Result::Success(success)) => Ok(Job {
            scheduler,
            id: success.job_id,
            done: false,
        }),
        Some(execute_query_result::Result::Failure(failure)) => Err(job_error(format!(
            "the Ballista scheduler refused the job: {failure:?}"
        ))),
        None => Err(job_error(
            "the Ballista scheduler answered the job's submission with nothing".into(),
        )),
    }
}

impl Job {
    /// Waits for the job to end; the locations of its answer's partitions, in order.
    async fn finished(&self) -> Result<Vec<PartitionLocation>> {
        let mut scheduler = self.scheduler.clone();
        let submitted = std::time::Instant::now();
        let mut not_running_since = submitted;
        loop {
            let status = scheduler
                .get_job_status(GetJobStatusParams {
                    job_id: self.id.clone(),
                })
                .await
                .map_err(|e| failed("following the job", e))?
                .into_inner()
                .status
                .and_then(|s| s.status);
            match status {
                Some(job_status::Status::Successful(success)) => {
                    let mut locations = success.partition_location;
                    locations.sort_by_key(|l| l.partition_id.as_ref().map(|p| p.partition_id));
                    return Ok(locations);
                }
                Some(job_status::Status::Failed(failure)) => {
                    return Err(job_error(format!(
                        "Ballista job {} failed: {}",
                        self.id, failure.error
                    )));
                }
                Some(job_status::Status::Running(_)) => {
                    not_running_since = std::time::Instant::now();
                }
                // queued (no executor free, or none registered) or unknown (the scheduler
                // restarted and forgot it)
                _ if not_running_since.elapsed() > NOT_RUNNING_LIMIT => {
                    return Err(job_error(format!(
                        "Ballista job {} did not run for {} s: no executor took it (are \
                         executors registered with the scheduler?), or the scheduler lost it",
                        self.id,
                        NOT_RUNNING_LIMIT.as_secs()
                    )));
                }
                _ => {}
            }
            tokio::time::sleep(match submitted.elapsed() < FAST_POLLING {
                true => FAST_POLL_INTERVAL,
                false => SLOW_POLL_INTERVAL,
            })
            .await;
        }
    }
}

/// The answer's partitions one after the other, read from the executors that hold them;
/// `job` counts as done once the last is read.
fn fetch(
    mut job: Job,
    locations: Vec<PartitionLocation>,
) -> impl futures::Stream<Item = Result<RecordBatch>> + Send {
    let parts = futures::stream::iter(locations)
        .then(fetch_partition)
        .try_flatten();
    let end = futures::stream::once(async move {
        job.done = true;
        drop(job);
        None
    });
    parts
        .map(Some)
        .chain(end)
        .filter_map(|item| async move { item })
}

/// One partition of the answer, streamed from the executor holding it.
async fn fetch_partition(location: PartitionLocation) -> Result<SendableRecordBatchStream> {
    let layout = location.layout();
    let executor = location
        .executor_meta
        .ok_or_else(|| DataFusionError::Internal("a partition without its executor".into()))?;
    let partition = location
        .partition_id
        .ok_or_else(|| DataFusionError::Internal("a partition without its id".into()))?;
    let partition = PartitionId {
        job_id: partition.job_id.into(),
        stage_id: partition.stage_id as usize,
        partition_id: partition.partition_id as usize,
    };
    let port = u16::try_from(executor.port)
        .map_err(|_| DataFusionError::Internal(format!("executor port {}", executor.port)))?;
    let mut client = BallistaClient::try_new(
        &executor.host,
        port,
        MAX_MESSAGE_BYTES,
        false,
        None,
        3,
        100,
        0,
        0,
    )
    .await
    .map_err(|e| {
        unreachable_error(format!(
            "connecting to the executor at {}:{port}: {e}",
            executor.host
        ))
    })?;
    client
        .fetch_partition(&executor.id, &partition, location.file_id, layout, true)
        .await
        .map_err(|e| {
            job_error(format!(
                "fetching the answer from the executor at {}:{port}: {e}",
                executor.host
            ))
        })
}

/// A job that failed, or that the scheduler or an executor could not be reached for: the
/// server's fault (the statement planned here, so only running it failed).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct JobError {
    message: String,
    /// The scheduler or an executor did not answer (a retry may succeed).
    unreachable: bool,
}

impl JobError {
    /// True when the scheduler or an executor did not answer.
    pub fn unreachable(&self) -> bool {
        self.unreachable
    }
}

/// `message` as a [`JobError`] in DataFusion's error.
pub fn job_error(message: String) -> DataFusionError {
    DataFusionError::External(Box::new(JobError {
        message,
        unreachable: false,
    }))
}

/// `message` as a [`JobError`] of a node that did not answer.
fn unreachable_error(message: String) -> DataFusionError {
    DataFusionError::External(Box::new(JobError {
        message,
        unreachable: true,
    }))
}

/// A gRPC failure while `doing` something with the scheduler: it did not answer, or it
/// answered with an error.
pub fn failed(doing: &str, status: tonic::Status) -> DataFusionError {
    let message = format!("{doing} on the Ballista scheduler: {}", status.message());
    // (a connection cut mid-call is `Unknown` "transport error"; the scheduler's own
    // refusals are `Internal`, `InvalidArgument`, ...)
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown => {
            unreachable_error(message)
        }
        _ => job_error(message),
    }
}

/// A unique enough identifier: the process, the time and a counter.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{now}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The settings a job runs with: the session's DataFusion options (`datafusion.*`; Quiver's
/// own are this server's business).
pub(crate) fn job_settings(config: &datafusion::prelude::SessionConfig) -> Vec<(String, String)> {
    config
        .options()
        .entries()
        .into_iter()
        .filter(|entry| entry.key.starts_with("datafusion."))
        .filter_map(|entry| entry.value.map(|value| (entry.key, value)))
        .collect()
}

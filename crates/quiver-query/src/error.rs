//! Why a query failed ([`QueryError`]), and the one place a DataFusion, Arrow or storage error
//! is sorted into the caller's fault, a limit or the server's fault.

use arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use quiver_exec::value_limits::ValueTooLarge;
use quiver_governance::statement_limits::StatementLimit;
use quiver_governance::{pool, GovernanceError, StopReason};
use quiver_model::{Classify, ErrorKind};
use quiver_storage::StorageError;

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
    /// The governor refused the query (busy) or stopped it (timed out, cancelled, over the
    /// server's memory ceiling).
    #[error(transparent)]
    Governance(#[from] GovernanceError),
    /// The statement is longer or more deeply nested than the server accepts.
    #[error("{0}")]
    StatementLimit(StatementLimit),
    /// The caller may not read what the statement reads.
    #[error("{0}")]
    Denied(quiver_model::Denied),
    /// Storage cannot answer now (a query node whose view of the writer's data may be out of
    /// date), classified as storage classifies it.
    #[error("{0}")]
    Storage(StorageError),
    /// A query that had to run on Ballista (`distributed = on`) cannot.
    #[error("{0}")]
    Distributed(quiver_distributed::DistributedError),
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
            QueryError::Governance(e) => e.kind(),
            QueryError::MemoryBusy(_) => ErrorKind::Busy,
            QueryError::StatementLimit(StatementLimit::TooLong { .. }) => ErrorKind::TooLarge,
            QueryError::StatementLimit(StatementLimit::TooDeep { .. }) => ErrorKind::LimitExceeded,
            QueryError::Denied(denied) => denied.kind,
            QueryError::Storage(e) => e.kind(),
            QueryError::Distributed(e) if e.unavailable => ErrorKind::Unavailable,
            QueryError::Distributed(_) => ErrorKind::Invalid,
            QueryError::Internal(_) => ErrorKind::Internal,
        }
    }
}

impl From<quiver_distributed::ShipError> for QueryError {
    /// A refusal to ship is [`QueryError::Distributed`]; a planning failure is sorted as
    /// every DataFusion error is.
    fn from(e: quiver_distributed::ShipError) -> Self {
        match e {
            quiver_distributed::ShipError::Refused(refused) => QueryError::Distributed(refused),
            quiver_distributed::ShipError::Planning(e) => QueryError::from(e),
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
        // a statement the gap-filling rule refuses: the refusal is the whole story
        let e = match e {
            DataFusionError::Context(rule, refusal) if rule == quiver_exec::gap_fill::RULE_NAME => {
                *refusal
            }
            e => e,
        };
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

/// The governor's verdict carried through DataFusion: a stopped query or a value too large;
/// or a Ballista scheduler or executor that stopped answering during a job.
fn governance_error(error: &(dyn std::error::Error + 'static)) -> Option<QueryError> {
    if let Some(job) = error.downcast_ref::<quiver_distributed::JobError>() {
        return job.unreachable().then(|| {
            QueryError::Distributed(quiver_distributed::DistributedError {
                message: job.to_string(),
                unavailable: true,
            })
        });
    }
    if let Some(too_large) = error.downcast_ref::<ValueTooLarge>() {
        return Some(QueryError::ValueTooLarge(too_large.clone()));
    }
    error
        .downcast_ref::<StopReason>()
        .map(|reason| GovernanceError::Stopped(reason.clone()).into())
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
        || error.is::<quiver_distributed::JobError>()
        || error.is::<datafusion::object_store::Error>()
        || error.is::<datafusion::parquet::errors::ParquetError>();
    server.then_some(Fault::Server)
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
        let server = quiver_governance::pool::ServerMemory::new(1000);
        let pool = |limit| -> Arc<dyn datafusion::execution::memory_pool::MemoryPool> {
            Arc::new(quiver_governance::pool::QueryPool::new(
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

    #[test]
    fn a_scheduler_that_stops_answering_is_unavailable_and_a_refusal_is_the_servers() {
        let down = QueryError::from(quiver_distributed::failed(
            "following the job",
            tonic::Status::unavailable("x"),
        ));
        assert_eq!(down.kind(), ErrorKind::Unavailable, "{down}");
        assert!(down.to_string().contains("following the job"), "{down}");
        let refused = QueryError::from(quiver_distributed::failed(
            "submitting",
            tonic::Status::internal("boom"),
        ));
        assert_eq!(refused.kind(), ErrorKind::Internal, "{refused}");
        let failed_job = QueryError::from(quiver_distributed::job_error(
            "Ballista job 1 failed: x".into(),
        ));
        assert_eq!(failed_job.kind(), ErrorKind::Internal, "{failed_job}");
    }
}

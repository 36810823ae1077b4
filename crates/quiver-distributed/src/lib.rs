//! `quiver-distributed` is Quiver's distributed execution on DataFusion Ballista, and the only
//! crate that links Ballista: whether a query runs there
//! (`distributed = off | auto | on`, see [`Distributed`] and `decide`), how its physical
//! plan travels to the scheduler and the executors ([`QuiverPhysicalCodec`]), and the job that
//! runs it (`job`).
//!
//! The node that received the query plans it (its catalog snapshot, its write buffer, its
//! clock, the result cache and governance all stay there) and ships the physical plan: the
//! scans name the Parquet files of the shared object store by their catalog-relative paths,
//! which every executor reads through its own `object_store_url`, and the write buffer's rows
//! the scans need travel inside the plan, so a distributed answer is exactly the local one
//! (later write wins, retention, deletes: all decided by the plan, not by the executors).
//! What only this server can run (its physical rewrites: dictionary grouping, first rows,
//! float comparison; reused parts) is left out of a plan that is shipped.

mod codec;
mod decide;
mod job;
pub mod roles;
mod ship;

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::object_store::ObjectStore;

pub use codec::QuiverPhysicalCodec;
pub use job::{failed, job_error, run_job, JobError, Scheduler, MAX_MESSAGE_BYTES};
pub use quiver_model::settings::Distributed;
pub use ship::{distribute, Distribution, ShipError, ShipSettings, ShippedPlan};

/// Registers `files` (a shared store's, `quiver_storage::shared_files`) in `runtime` where
/// the scans of shipped plans look for the tables' Parquet files: what an executor's task
/// runtime needs.
pub fn register_table_files(runtime: &RuntimeEnv, files: Arc<dyn ObjectStore>) {
    quiver_exec::table_files::register_table_files(runtime, files);
}

/// Why a query that had to run on Ballista (`distributed = on`) cannot.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DistributedError {
    /// What went wrong, naming the setting or the part of the plan concerned.
    pub message: String,
    /// True when no scheduler answers (a retry may succeed); false when this query or this
    /// server's data cannot run there at all.
    pub unavailable: bool,
}

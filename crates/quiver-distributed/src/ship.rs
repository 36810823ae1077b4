//! Planning one query for Ballista ([`distribute`]): the plan shipped, or why the query runs
//! here after all, and what `EXPLAIN` says of it.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use prost::Message;

use super::decide::{distributed_state, scan_bytes, stages, Decision};
use super::job::{connect_scheduler, job_settings, Scheduler, MAX_MESSAGE_BYTES};
use super::{Distributed, DistributedError, QuiverPhysicalCodec};

/// What of the server's settings decides and shapes a shipped plan.
#[derive(Debug, Clone)]
pub struct ShipSettings {
    /// `distributed_min_scan_bytes`: under it, `auto` runs a query here.
    pub min_scan_bytes: u64,
    /// The shipped plan's parallelism (`distributed_partitions`, or `query_partitions`).
    pub partitions: usize,
    /// Where the scheduler listens (`scheduler_addr`).
    pub scheduler_addr: String,
}

/// Why a query could not be planned for Ballista.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    /// It had to run there and cannot (see [`DistributedError`]).
    #[error(transparent)]
    Refused(DistributedError),
    /// Planning the statement failed (as it would here).
    #[error(transparent)]
    Planning(#[from] DataFusionError),
}

/// Where one query runs, planned for Ballista if it runs there.
pub struct Distribution {
    /// What `EXPLAIN` adds to the final physical plan: the decision, and Ballista's stages.
    pub explain: String,
    /// The job to start, when the query (not an `EXPLAIN` of it) runs on Ballista.
    pub job: Option<ShippedPlan>,
}

/// A plan ready to run on Ballista.
pub struct ShippedPlan {
    /// The scheduler, connected.
    pub scheduler: Scheduler,
    /// The plan, as planned here.
    pub plan: Arc<dyn ExecutionPlan>,
    /// The plan as it travels.
    pub encoded: Vec<u8>,
    /// The session's DataFusion settings, for the executors.
    pub settings: Vec<(String, String)>,
    /// The answer's schema (the statement's).
    pub schema: SchemaRef,
}

/// Plans a statement (`plan` gives its unoptimized plan and its answer's schema) in `mode`
/// for Ballista; the query runs here when `auto` finds it small, its data unreachable by
/// executors, its plan unable to travel, or no scheduler (logged). For `on`, each of those
/// but the size is an error. `stored` is what the statement's tables hold: under `auto`'s
/// threshold, it is not planned for Ballista at all (it is planned here next).
pub async fn distribute<F, P>(
    state: &SessionState,
    plan: P,
    mode: Distributed,
    (settings, shared, stored): (&ShipSettings, Option<&str>, u64),
) -> Result<Distribution, ShipError>
where
    P: FnOnce() -> F,
    F: std::future::Future<Output = datafusion::error::Result<(LogicalPlan, SchemaRef)>>,
{
    // what needs no plan: data the executors cannot read, or too little of it for auto (the
    // engine asks nothing of `off`)
    let small = mode == Distributed::Auto && stored < settings.min_scan_bytes;
    if shared.is_none() || small {
        let decision = Decision::of(mode, stored, settings.min_scan_bytes, shared)
            .map_err(ShipError::Refused)?;
        return Ok(local(decision));
    }
    let (logical, schema) = plan().await?;
    let state = distributed_state(state, settings.partitions);
    let optimized = state.optimize(&logical)?;
    let schema = quiver_exec::gap_fill::gap_filled_schema(schema, &logical, &optimized)?;
    let (inner, explaining) = match optimized {
        LogicalPlan::Explain(explain) => (explain.plan.as_ref().clone(), true),
        LogicalPlan::Analyze(_) => {
            return Ok(local(Decision::Local(
                "EXPLAIN ANALYZE runs the plan on this server".into(),
            )))
        }
        plan => (plan, false),
    };
    let plan = state
        .query_planner()
        .create_physical_plan(&inner, &state)
        .await?;
    let decision = Decision::of(mode, scan_bytes(&plan), settings.min_scan_bytes, shared)
        .map_err(ShipError::Refused)?;
    let Decision::Ballista(_) = &decision else {
        return Ok(local(decision));
    };
    let encoded = match encode(&plan) {
        Ok(encoded) => encoded,
        Err(why) => return fall_back(mode, why, false),
    };
    let scheduler = match connect_scheduler(&settings.scheduler_addr).await {
        Ok(scheduler) => scheduler,
        Err(why) => return fall_back(mode, why, true),
    };
    if explaining {
        let stages = match stages(&plan, state.config_options()) {
            Ok(stages) => stages,
            Err(e) => return fall_back(mode, format!("Ballista cannot plan it: {e}"), false),
        };
        let explain = format!(
            "{} — the plan above is this server's; Ballista runs the shipped plan in these \
             stages:\n{stages}",
            decision.explain()
        );
        return Ok(Distribution { explain, job: None });
    }
    let job = ShippedPlan {
        scheduler,
        settings: job_settings(state.config()),
        plan,
        encoded,
        schema,
    };
    Ok(Distribution {
        explain: decision.explain(),
        job: Some(job),
    })
}

/// A query that runs here for the reason `decision` gives.
fn local(decision: Decision) -> Distribution {
    Distribution {
        explain: decision.explain(),
        job: None,
    }
}

/// For `on`, the error `why` is; for `auto`, the query runs here (with a warning).
fn fall_back(mode: Distributed, why: String, unavailable: bool) -> Result<Distribution, ShipError> {
    if mode == Distributed::On {
        return Err(ShipError::Refused(DistributedError {
            message: format!("distributed = on, but {why}"),
            unavailable,
        }));
    }
    tracing::warn!(reason = %why, "distributed = auto: the query runs on this server");
    Ok(local(Decision::Local(format!(
        "distributed = auto, but {why}"
    ))))
}

/// `plan` as it travels to the scheduler; why it cannot, if it cannot.
fn encode(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<u8>, String> {
    let node =
        PhysicalPlanNode::try_from_physical_plan(plan.clone(), &QuiverPhysicalCodec::default())
            .map_err(|e| format!("the plan cannot run on Ballista: {}", e.message()))?;
    let encoded = node.encode_to_vec();
    // the scheduler sends each stage on to an executor in a message of its own
    if encoded.len() > MAX_MESSAGE_BYTES / 2 {
        return Err(format!(
            "the plan takes {} bytes with the buffered rows it carries, more than {} \
             (persist first, or query a narrower time range)",
            encoded.len(),
            MAX_MESSAGE_BYTES / 2
        ));
    }
    Ok(encoded)
}

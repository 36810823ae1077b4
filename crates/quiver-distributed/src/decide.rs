//! Whether one query runs on Ballista ([`Decision`]), the session its shipped plan is planned
//! in ([`distributed_state`]), and the stages `EXPLAIN` shows ([`stages`]).

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use quiver_exec::dictionary_group::DictionaryGroupRule;
use quiver_exec::first_rows::FirstRowsRule;
use quiver_exec::float_compare::FloatCompareRule;
use quiver_exec::plan_settings::PlanSettings;

use super::{Distributed, DistributedError};

/// Where one query runs, and why (what `EXPLAIN` says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// On this server.
    Local(String),
    /// On Ballista.
    Ballista(String),
}

impl Decision {
    /// Where a query of `mode` that would scan about `scan_bytes` runs, the store's files
    /// being in `shared` (its `object_store_url`; `None`: in `data_dir`, which executors
    /// cannot read). Fails for `on` when the data is not shared.
    pub(crate) fn of(
        mode: Distributed,
        scan_bytes: u64,
        min_scan_bytes: u64,
        shared: Option<&str>,
    ) -> Result<Decision, DistributedError> {
        if mode == Distributed::Off {
            return Ok(Decision::Local("distributed = off".into()));
        }
        if shared.is_none() {
            let why = "this server keeps its data in data_dir, which Ballista's executors \
                       cannot read (set object_store_url)";
            return match mode {
                Distributed::On => Err(DistributedError {
                    message: format!("distributed = on, but {why}"),
                    unavailable: false,
                }),
                _ => Ok(Decision::Local(format!("distributed = auto: {why}"))),
            };
        }
        let scan = format!("an estimated {scan_bytes} bytes to scan");
        Ok(match mode {
            Distributed::Auto if scan_bytes < min_scan_bytes => Decision::Local(format!(
                "distributed = auto: {scan}, under distributed_min_scan_bytes ({min_scan_bytes})"
            )),
            Distributed::Auto => Decision::Ballista(format!(
                "distributed = auto: {scan}, at least distributed_min_scan_bytes \
                 ({min_scan_bytes})"
            )),
            _ => Decision::Ballista(format!("distributed = on: {scan}")),
        })
    }

    /// What `EXPLAIN` says of the decision.
    pub(crate) fn explain(&self) -> String {
        match self {
            Decision::Local(why) => format!("Distributed execution: none, this server ({why})"),
            Decision::Ballista(why) => format!("Distributed execution: on Ballista ({why})"),
        }
    }
}

/// The session a plan shipped to Ballista is planned in: `state` with `partitions` as its
/// parallelism (`distributed_partitions`), without this server's own
/// physical rewrites (executors run DataFusion's operators and the codec's nodes only),
/// without dynamic filters, without reused parts, and with scans reading every file from
/// Parquet (this server's decoded columns are not the executors').
pub(crate) fn distributed_state(state: &SessionState, partitions: usize) -> SessionState {
    let local_only = [
        DictionaryGroupRule.name().to_string(),
        FirstRowsRule.name().to_string(),
        FloatCompareRule.name().to_string(),
    ];
    let rules = state
        .physical_optimizers()
        .iter()
        .filter(|rule| !local_only.iter().any(|name| name == rule.name()))
        .cloned()
        .collect();
    let mut state = SessionStateBuilder::new_from_existing(state.clone())
        .with_physical_optimizer_rules(rules)
        .build();
    // a dynamic filter is shared state between operators of one process: it cannot cross a
    // stage boundary, and Ballista's re-planning of a stage refuses to swap a join that
    // carries one
    // the cluster's parallelism, not this server's
    state.config_mut().options_mut().execution.target_partitions = partitions;
    let optimizer = &mut state.config_mut().options_mut().optimizer;
    optimizer.enable_dynamic_filter_pushdown = false;
    optimizer.enable_join_dynamic_filter_pushdown = false;
    optimizer.enable_topk_dynamic_filter_pushdown = false;
    optimizer.enable_aggregate_dynamic_filter_pushdown = false;
    let extensions = &mut state.config_mut().options_mut().extensions;
    let mut routing = extensions
        .get::<PlanSettings>()
        .cloned()
        .unwrap_or_default();
    routing.reuse_parts = false;
    routing.ship_scans = true;
    extensions.insert(routing);
    state
}

/// About how many bytes `plan` reads: the sizes of the Parquet files its scans name and of
/// the rows it carries in memory.
pub(crate) fn scan_bytes(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    let mut total = 0u64;
    let counted = plan.apply(|node| {
        if let Some(source) = node.downcast_ref::<DataSourceExec>() {
            let source = source.data_source();
            if let Some(files) = source.downcast_ref::<FileScanConfig>() {
                let bytes: u64 = files
                    .file_groups
                    .iter()
                    .flat_map(|group| group.iter())
                    .map(|file| file.object_meta.size)
                    .sum();
                total = total.saturating_add(bytes);
            } else if let Some(memory) = source.downcast_ref::<MemorySourceConfig>() {
                // the rows' own bytes (a slice of a larger buffer counts its part only)
                let bytes: usize = memory
                    .partitions()
                    .iter()
                    .flatten()
                    .flat_map(|batch| batch.columns())
                    .map(|column| column.to_data().get_slice_memory_size().unwrap_or(0))
                    .sum();
                total = total.saturating_add(bytes as u64);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    debug_assert!(counted.is_ok());
    total
}

/// The stages Ballista's planner splits `plan` into, as `EXPLAIN` lists them.
pub(crate) fn stages(plan: &Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<String> {
    use ballista_scheduler::planner::{DefaultDistributedPlanner, DistributedPlanner};
    let job = "explain".to_string().into();
    let stages = DefaultDistributedPlanner::new()
        .plan_query_stages(&job, plan.clone(), config)
        .map_err(|e| e.into_datafusion())?;
    let mut text = String::new();
    for stage in stages {
        let stage: Arc<dyn ExecutionPlan> = stage;
        text.push_str(&format!(
            "Ballista stage {}:\n{}",
            ballista_stage_id(&stage),
            displayable(stage.as_ref()).indent(false)
        ));
    }
    Ok(text)
}

/// The stage id of a stage's root (a shuffle writer).
fn ballista_stage_id(stage: &Arc<dyn ExecutionPlan>) -> String {
    use ballista_core::execution_plans::{ShuffleWriterExec, SortShuffleWriterExec};
    if let Some(writer) = stage.downcast_ref::<ShuffleWriterExec>() {
        return writer.stage_id().to_string();
    }
    if let Some(writer) = stage.downcast_ref::<SortShuffleWriterExec>() {
        return writer.stage_id().to_string();
    }
    "?".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn off_stays_local_and_auto_needs_a_large_scan_of_shared_data() {
        let shared = Some("s3://bucket/quiver");
        let of = |mode, bytes, shared| Decision::of(mode, bytes, 64 * MIB, shared);
        assert!(matches!(
            of(Distributed::Off, u64::MAX, shared),
            Ok(Decision::Local(_))
        ));
        assert!(
            matches!(of(Distributed::Auto, MIB, shared), Ok(Decision::Local(why)) if why.contains("under distributed_min_scan_bytes"))
        );
        assert!(matches!(
            of(Distributed::Auto, 64 * MIB, shared),
            Ok(Decision::Ballista(_))
        ));
        assert!(matches!(
            of(Distributed::On, 0, shared),
            Ok(Decision::Ballista(_))
        ));
        assert!(
            matches!(of(Distributed::Auto, u64::MAX, None), Ok(Decision::Local(why)) if why.contains("data_dir"))
        );
        let refused = of(Distributed::On, 0, None).unwrap_err();
        assert!(!refused.unavailable);
        assert!(
            refused.message.contains("object_store_url"),
            "{}",
            refused.message
        );
    }
}

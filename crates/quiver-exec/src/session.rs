//! The session Quiver's operators run in: DataFusion's defaults with Quiver's physical rules
//! and its query planner (which plans gap filling).

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::SessionConfig;

use crate::dictionary_group::DictionaryGroupRule;
use crate::first_rows::FirstRowsRule;
use crate::float_compare::FloatCompareRule;
use crate::gap_fill::QuiverQueryPlanner;

/// A session with DataFusion's defaults and Quiver's physical rules, over `runtime`.
pub fn state_builder(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionStateBuilder {
    SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(DictionaryGroupRule))
        .with_physical_optimizer_rule(Arc::new(FirstRowsRule))
        .with_physical_optimizer_rule(Arc::new(FloatCompareRule))
        .with_query_planner(Arc::new(QuiverQueryPlanner))
}

//! Precomputed partial states plus the remainder computed from raw rows: the one mechanism
//! under rollup routing ([`crate::rollup`], whose precomputed states are a rollup's kept
//! buckets) and the reuse of time parts ([`crate::reuse`], parts earlier queries computed).
//!
//! Both replace an aggregate over a base table by the same aggregate merging partial states
//! ([`states`]) over a scan that decides, when its physical plan is made (at the query's
//! clock, so a kept logical plan is never stale), what is precomputed for the query's time
//! range ([`remainder::folded_time_range`]) and computes the rest, the [`Remainder`], from one
//! snapshot of the raw rows. [`side_by_side`] puts the two into the scan's one plan. Each user
//! decides only what counts as precomputed and when that is still current.

pub(crate) mod remainder;
pub(crate) mod states;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::provider_as_source;
use datafusion::error::Result;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableSource};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;
use quiver_storage::{Ranges, TableSnapshot};

use crate::provider::{note_read, query_now_ns, QuiverTable};
pub(crate) use remainder::{folded_time_range, time_ranges, RawRows};

/// The stretches of a query's time range computed from the base table's raw rows, as of one
/// snapshot.
pub(crate) struct Remainder {
    /// The stretches, `[start, end)` in nanoseconds.
    pub(crate) ranges: Ranges,
    /// What they are read as of.
    pub(crate) snapshot: Arc<TableSnapshot>,
}

impl Remainder {
    /// `ranges` of `base` as of `snapshot`, noted as read by the query (the plan depends on
    /// this snapshot's rows, as a scan of the table does).
    pub(crate) fn read(
        state: &dyn Session,
        base: &QuiverTable,
        snapshot: Arc<TableSnapshot>,
        ranges: Ranges,
    ) -> Self {
        note_read(state, base.table(), &snapshot, query_now_ns(state));
        Remainder { ranges, snapshot }
    }

    /// The rows of the remainder that pass `conjuncts`: the source (the snapshot's raw rows)
    /// and the filter (`conjuncts` and the remainder's time ranges) of a partial aggregate.
    pub(crate) fn rows(
        &self,
        base: &QuiverTable,
        mut conjuncts: Vec<Expr>,
    ) -> (Arc<dyn TableSource>, Option<Expr>) {
        conjuncts.extend(time_ranges(&self.ranges));
        let rows = RawRows::pinned(base.clone(), self.snapshot.clone());
        (provider_as_source(Arc::new(rows)), conjunction(conjuncts))
    }
}

/// The precomputed partial states beside those the remainder computes (`inputs`, each of
/// `schema`) as the scan's one plan, with the columns `projection` asks for.
pub(crate) fn side_by_side(
    schema: &SchemaRef,
    inputs: Vec<Arc<dyn ExecutionPlan>>,
    projection: Option<&Vec<usize>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = match inputs.is_empty() {
        true => Arc::new(EmptyExec::new(schema.clone())),
        false => UnionExec::try_new(inputs)?,
    };
    let Some(projection) = projection else {
        return Ok(plan);
    };
    let schema = plan.schema();
    let columns = projection.iter().map(|&i| {
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(schema.field(i).name(), i));
        (column, schema.field(i).name().clone())
    });
    Ok(Arc::new(ProjectionExec::try_new(columns, plan)?))
}

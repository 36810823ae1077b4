//! The remainder: what a query computes from the base table's raw rows beside precomputed
//! partial states ([`RawRows`], read as of one snapshot), over the stretches of its time range
//! nothing precomputed covers ([`time_ranges`] of the range [`folded_time_range`] gives).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::utils::{conjunction, disjunction, split_conjunction};
use datafusion::logical_expr::{col, lit, Expr, TableProviderFilterPushDown, TableType};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_plan::ExecutionPlan;
use quiver_exec::time_filter::{is_time_bound, time_bounds};
use quiver_model::schema::TIME_COLUMN;
use quiver_storage::{Ranges, TableSnapshot};

use crate::provider::QuiverTable;

/// The time range `[lo, hi)` that `conjuncts` (each on `time`, columns unqualified) of a query
/// over `base` ask for at the query's clock (`None` for an end they leave open); `None` if a
/// conjunct does not fold to a plain comparison.
pub(crate) fn folded_time_range(
    base: &QuiverTable,
    conjuncts: &[Expr],
    state: &dyn Session,
) -> Option<(Option<i64>, Option<i64>)> {
    let schema = Arc::new(DFSchema::try_from(base.schema()).ok()?);
    let context = SimplifyContext::builder()
        .with_schema(schema)
        .with_query_execution_start_time(state.execution_props().query_execution_start_time)
        .build();
    let simplifier = ExprSimplifier::new(context);
    let mut folded = Vec::new();
    for conjunct in conjuncts {
        let simple = simplifier.simplify(conjunct.clone()).ok()?;
        // `BETWEEN` folds into two bounds
        for bound in split_conjunction(&simple) {
            if !is_time_bound(bound) {
                return None;
            }
            folded.push(bound.clone());
        }
    }
    let bounds = time_bounds(&folded);
    let lo = (bounds.min != i64::MIN).then_some(bounds.min);
    let hi = (bounds.max != i64::MAX).then(|| bounds.max.saturating_add(1));
    Some((lo, hi))
}

/// `uncovered` (or `covered`) as one disjunction of `time` ranges; nothing for an unbounded
/// single range.
pub(crate) fn time_ranges(ranges: &Ranges) -> Option<Expr> {
    let ts = |v: i64| {
        lit(ScalarValue::TimestampNanosecond(
            Some(v),
            Some("UTC".into()),
        ))
    };
    let each = ranges.iter().map(|(start, end)| {
        let mut bounds = Vec::new();
        if start != i64::MIN {
            bounds.push(col(TIME_COLUMN).gt_eq(ts(start)));
        }
        if end != i64::MAX {
            bounds.push(col(TIME_COLUMN).lt(ts(end)));
        }
        conjunction(bounds).unwrap_or_else(|| lit(true))
    });
    match ranges.is_empty() {
        true => Some(lit(false)),
        false => disjunction(each),
    }
}

/// The base table's rows for the remainder: a [`QuiverTable`] neither the rollup router nor
/// the reuse of time parts recognises, so the remainder's aggregate is not rewritten again. Read as
/// of the table's snapshot when the scan is planned, or as of a `pinned` one (every computed
/// part of a query with reused time parts reads the snapshot their versions were taken with).
#[derive(Debug)]
pub(crate) struct RawRows {
    table: QuiverTable,
    pinned: Option<Arc<TableSnapshot>>,
}

impl RawRows {
    /// The rows of `table` as the scan finds them.
    pub(crate) fn of(table: QuiverTable) -> Self {
        RawRows {
            table,
            pinned: None,
        }
    }

    /// The rows of `table` as of `snapshot` (noted by the caller).
    pub(crate) fn pinned(table: QuiverTable, snapshot: Arc<TableSnapshot>) -> Self {
        RawRows {
            table,
            pinned: Some(snapshot),
        }
    }
}

#[async_trait]
impl TableProvider for RawRows {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.table.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match &self.pinned {
            Some(snapshot) => self.table.scan_of(state, snapshot, projection, filters),
            None => self.table.scan(state, projection, filters, limit).await,
        }
    }
}

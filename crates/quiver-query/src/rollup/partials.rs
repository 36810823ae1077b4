//! [`RollupPartials`]: the partial states a routed query merges, taken when its physical plan
//! is made (so a kept logical plan is never stale): the rollup's kept rows for the buckets
//! it covers within the query's time range, and the same states computed from raw rows for
//! everything else in that range (buckets the range cuts, buckets written since they were
//! rolled up, buckets not rolled up yet). Rows a retention period removed are never read
//! from the rollup (its buckets start at the first whole bucket after the cutoff). The raw
//! part is the [`Remainder`] of the one mechanism of precomputed partials
//! ([`crate::partials`]), which the router does not route again.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Column;
use datafusion::datasource::{provider_as_source, MemTable};
use datafusion::error::Result;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{cast, col, Expr, LogicalPlan, LogicalPlanBuilder, TableType};
use datafusion::physical_plan::ExecutionPlan;
use quiver_storage::{Ranges, RollupState};

use super::definition::RollupShape;
use super::route::QueryFilters;
use crate::partials::{folded_time_range, side_by_side, time_ranges, RawRows, Remainder};
use crate::plan_cache::ScansRead;
use crate::provider::{external, query_now_ns, QuiverTable};

/// At most this many raw ranges per routed scan: more are joined across the covered buckets
/// between them (which are then read raw too).
const MAX_RAW_RANGES: usize = 4;

/// The partial states of one routed query (module docs).
pub(crate) struct RollupPartials {
    spec: Arc<RollupShape>,
    state: Arc<RollupState>,
    base: QuiverTable,
    /// The query's conjuncts, by what they apply to.
    filters: QueryFilters,
    schema: SchemaRef,
}

impl fmt::Debug for RollupPartials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RollupPartials({})", self.state.definition().name)
    }
}

impl RollupPartials {
    pub(crate) fn new(
        spec: Arc<RollupShape>,
        state: Arc<RollupState>,
        base: QuiverTable,
        filters: QueryFilters,
    ) -> Result<Self> {
        let raw = provider_as_source(Arc::new(RawRows::of(base.clone())));
        let partial = spec.partial_plan(raw, base.table().name(), None)?;
        let fields: Vec<Field> = partial
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        Ok(RollupPartials {
            spec,
            state,
            base,
            filters,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// The query's time range `[lo, hi)` at its clock (`None` for an end it leaves open);
    /// `None` if a time conjunct does not fold to a plain comparison (then nothing is
    /// covered).
    fn time_range(&self, state: &dyn Session) -> Option<(Option<i64>, Option<i64>)> {
        folded_time_range(&self.base, &self.filters.time, state)
    }

    /// The kept rows of `covered`, filtered by the query's tag conjuncts, cast to the parts'
    /// schema.
    fn kept_plan(
        &self,
        rows: Vec<arrow::array::RecordBatch>,
        covered: &Ranges,
    ) -> Result<Option<LogicalPlan>> {
        let Some(first) = rows.first().filter(|_| !covered.is_empty()) else {
            return Ok(None);
        };
        let table = MemTable::try_new(first.schema(), vec![rows])?;
        let mut builder = LogicalPlanBuilder::scan(
            format!("rollup:{}", self.state.definition().name),
            provider_as_source(Arc::new(table)),
            None,
        )?;
        let mut filter = self.filters.kept.clone();
        filter.extend(time_ranges(covered));
        if let Some(filter) = conjunction(filter) {
            builder = builder.filter(filter)?;
        }
        let columns: Vec<Expr> = self
            .schema
            .fields()
            .iter()
            .map(|f| cast(col(f.name()), f.data_type().clone()).alias(f.name()))
            .collect();
        Ok(Some(builder.project(columns)?.build()?))
    }

    /// `plan` with only the states `projection` asks for, projected before it is planned, so
    /// the remainder's aggregate computes only the states the query merges.
    fn projected(&self, plan: LogicalPlan, projection: Option<&Vec<usize>>) -> Result<LogicalPlan> {
        let Some(projection) = projection else {
            return Ok(plan);
        };
        let columns: Vec<Expr> = projection
            .iter()
            .map(|&i| Expr::Column(Column::new_unqualified(self.schema.field(i).name())))
            .collect();
        LogicalPlanBuilder::from(plan).project(columns)?.build()
    }

    /// The partial states of the raw rows of `remainder`. The scan reads only the rows of its
    /// ranges, not of their hull (the disjunction is a
    /// [`quiver_exec::time_filter::time_pieces`]).
    fn raw_plan(&self, remainder: &Remainder) -> Result<LogicalPlan> {
        let (rows, filter) = remainder.rows(&self.base, self.filters.raw.clone());
        self.spec
            .partial_plan(rows, self.base.table().name(), filter)
    }
}

/// The covered and raw ranges of `[lo, hi)`: raw is the rest of the range once covered is
/// taken out, joined across the shortest covered gaps until at most [`MAX_RAW_RANGES`] remain.
fn split(lo: Option<i64>, hi: Option<i64>, mut covered: Ranges) -> (Ranges, Ranges) {
    let (lo, hi) = (lo.unwrap_or(i64::MIN), hi.unwrap_or(i64::MAX));
    let mut raw = covered.gaps_within(lo, hi);
    while raw.len() > MAX_RAW_RANGES {
        let listed: Vec<(i64, i64)> = raw.iter().collect();
        let (gap_start, gap_end) = listed
            .windows(2)
            .map(|pair| (pair[0].1, pair[1].0))
            .min_by_key(|(start, end)| end.saturating_sub(*start))
            .expect("more than one range has a gap between two");
        raw.insert(gap_start, gap_end);
        covered.remove(gap_start, gap_end);
    }
    (covered, raw)
}

#[async_trait]
impl TableProvider for RollupPartials {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let now_ns = query_now_ns(state);
        let table = self.base.table();
        // a write makes its rows visible, then marks the rollup's buckets it changed: counted
        // before the coverage is read and the snapshot taken after, either the coverage has
        // the write's mark or the plan is not run again once it has (the snapshot may already
        // hold the write's rows, so the table alone cannot tell)
        let marks = self.state.marks();
        if let Some(scans) = ScansRead::of(state) {
            let rollup = self.state.clone();
            scans.valid_while(Arc::new(move || rollup.marks() == marks));
        }
        // a kept plan may outlive its rollup: a dropped one is no longer kept up to date
        let range = match self.state.is_dropped() {
            true => None,
            false => self.time_range(state),
        };
        let coverage = match range {
            Some((lo, hi)) => {
                let cutoff = table.retention_cutoff_ns(now_ns);
                let coverage = self.state.coverage(lo, hi, cutoff);
                let (covered, raw) = split(lo, hi, coverage.covered);
                (covered, raw, coverage.rows)
            }
            None => (Ranges::new(), Ranges::of(i64::MIN, i64::MAX), Vec::new()),
        };
        let (covered, raw, rows) = coverage;
        let snapshot = table.snapshot().map_err(external)?;
        let remainder = Remainder::read(state, &self.base, snapshot, raw);
        let mut inputs = Vec::new();
        if let Some(kept) = self.kept_plan(rows, &covered)? {
            let kept = self.projected(kept, projection)?;
            inputs.push(state.create_physical_plan(&kept).await?);
        }
        let computed = self.projected(self.raw_plan(&remainder)?, projection)?;
        inputs.push(state.create_physical_plan(&computed).await?);
        let schema = match projection {
            Some(projection) => Arc::new(self.schema.project(projection)?),
            None => self.schema.clone(),
        };
        side_by_side(&schema, inputs, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_ranges_are_few_and_covered_ranges_give_way() {
        let mut covered = Ranges::new();
        for start in [10, 30, 50, 70, 90] {
            covered.insert(start, start + 15);
        }
        let (covered, raw) = split(Some(0), Some(120), covered);
        assert!(raw.len() <= MAX_RAW_RANGES);
        let mut all = covered.clone();
        all.extend(&raw);
        assert_eq!(all.iter().collect::<Vec<_>>(), vec![(0, 120)]);
        for (s, e) in covered.iter() {
            assert!(!raw.overlaps(s, e));
        }
    }

    #[test]
    fn nothing_covered_is_all_raw() {
        let (covered, raw) = split(None, Some(100), Ranges::new());
        assert!(covered.is_empty());
        assert_eq!(raw.iter().collect::<Vec<_>>(), vec![(i64::MIN, 100)]);
    }
}

//! The analyzer rule that answers an aggregate over a base table from a rollup when that is
//! exact ([`RollupRouteRule`]).
//!
//! A query `Aggregate` over a table scan (with a `Filter` between, or not) is routed to a
//! rollup of that table when
//! - it groups by tags the rollup keeps and at most one `date_bin` of `time` whose buckets
//!   are unions of the rollup's (a multiple of its width, aligned to its origin), or by tags
//!   alone;
//! - each aggregate merges from states the rollup keeps ([`Derivable`]);
//! - each filter conjunct compares `time` with a constant (`now()` allowed), tests tags the
//!   rollup keeps, or is one of the rollup's own filter conjuncts; and each of those is among
//!   the query's.
//!
//! The aggregate is then replaced by the same aggregate, merging partial states, over a
//! [`RollupPartials`] scan: it decides when the plan is made into a physical plan which buckets
//! the rollup covers and reads the rest raw (see [`super::parts`]). A projection gives the
//! result the original aggregate's names, so nothing above notices. Of several candidates,
//! the one keeping the fewest rows wins. The reasons candidates were passed over are kept for
//! `EXPLAIN` ([`super::RoutingNotes`]).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::TableReference;
use datafusion::common::{DFSchemaRef, ExprSchema};
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::error::Result;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    cast, Aggregate, Between, BinaryExpr, Expr, LogicalPlan, LogicalPlanBuilder, Operator,
};
use datafusion::optimizer::AnalyzerRule;
use quiver_exec::plan_settings::PlanSettings;
use quiver_exec::time_filter::{is_time_column, stands_alone};
use quiver_model::TimeBucket;
use quiver_storage::RollupState;

use super::definition::RollupShape;
use super::partials::RollupPartials;
use super::{RollupRouter, RoutingNotes};
use crate::partials::states::{strip_alias, Derivable};
use crate::provider::QuiverTable;

/// Routes aggregates to rollups (module docs).
#[derive(Debug)]
pub(crate) struct RollupRouteRule {
    pub(crate) rollups: Arc<RollupRouter>,
}

impl AnalyzerRule for RollupRouteRule {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let enabled = config
            .extensions
            .get::<PlanSettings>()
            .is_none_or(|settings| settings.use_rollups);
        if !enabled {
            RoutingNotes::note("rollups: not used (use_rollups is off)".to_string());
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| self.route(node))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quiver_rollup_route"
    }
}

/// A query aggregate over one Quiver table, as the router (and the reuse of time parts)
/// reads it.
pub(crate) struct QueryShape<'a> {
    /// The aggregate.
    pub(crate) aggregate: &'a Aggregate,
    /// The table it reads.
    pub(crate) table: QuiverTable,
    /// The conjuncts of its filter (columns qualified).
    pub(crate) conjuncts: Vec<Expr>,
}

/// How a query is answered from one rollup.
struct Route {
    group: Vec<Expr>,
    merges: Vec<Expr>,
    filters: QueryFilters,
}

/// A routed query's filter conjuncts (columns unqualified), by what they are applied to.
pub(crate) struct QueryFilters {
    /// Applied to the rollup's rows: tags it keeps (its own filter's conjuncts left out).
    pub(crate) kept: Vec<Expr>,
    /// Applied to raw rows: every conjunct.
    pub(crate) raw: Vec<Expr>,
    /// On `time`: folded at scan time to the range the query asks for.
    pub(crate) time: Vec<Expr>,
}

impl RollupRouteRule {
    fn route(&self, node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
        let Some(query) = QueryShape::of(&node) else {
            return Ok(Transformed::no(node));
        };
        let table = query.table.table();
        let candidates = self.rollups.candidates(table.database(), table.name());
        let mut best: Option<(u64, Arc<RollupShape>, Arc<RollupState>, Route)> = None;
        for (spec, state) in candidates {
            let name = state.definition().name.clone();
            match query.route_to(&spec) {
                Ok(route) => {
                    let rows = state.kept_rows();
                    if best.as_ref().is_none_or(|(fewest, ..)| rows < *fewest) {
                        best = Some((rows, spec, state, route));
                    }
                }
                Err(reason) => RoutingNotes::note(format!("rollup {name}: not used: {reason}")),
            }
        }
        let Some((_, spec, state, route)) = best else {
            return Ok(Transformed::no(node));
        };
        RoutingNotes::note(format!(
            "rollup {}: used for {}",
            state.definition().name,
            table.name()
        ));
        let routed = routed_plan(&query, spec, state, route)?;
        Ok(Transformed::yes(routed))
    }
}

impl<'a> QueryShape<'a> {
    /// `node`, if it is an aggregate with aggregates (grouping alone, `GROUP BY host`, is
    /// answered from each series' newest row, [`crate::latest`]: fewer rows than any rollup
    /// or part holds) that reads one Quiver table.
    pub(crate) fn of(node: &'a LogicalPlan) -> Option<Self> {
        match node {
            LogicalPlan::Aggregate(aggregate) if !aggregate.aggr_expr.is_empty() => {
                Self::read(aggregate)
            }
            _ => None,
        }
    }

    /// The aggregate, if it reads one Quiver table (through a filter, or not).
    fn read(aggregate: &'a Aggregate) -> Option<Self> {
        let (predicate, scan) = match aggregate.input.as_ref() {
            LogicalPlan::Filter(filter) => (Some(&filter.predicate), filter.input.as_ref()),
            other => (None, other),
        };
        let LogicalPlan::TableScan(scan) = scan else {
            return None;
        };
        if scan.fetch.is_some() {
            return None;
        }
        let provider = source_as_provider(&scan.source).ok()?;
        let table = provider.downcast_ref::<QuiverTable>()?.clone();
        let mut conjuncts: Vec<Expr> = predicate
            .map(|p| split_conjunction(p).into_iter().cloned().collect())
            .unwrap_or_default();
        conjuncts.extend(scan.filters.iter().cloned());
        Some(QueryShape {
            aggregate,
            table,
            conjuncts,
        })
    }

    fn route_to(&self, spec: &RollupShape) -> Result<Route, String> {
        let group = self.group_by(spec)?;
        let merges = self
            .aggregate
            .aggr_expr
            .iter()
            .map(|expr| {
                let derivable = Derivable::read(strip_alias(expr))?;
                match derivable.states().iter().find(|s| !spec.keeps(s)) {
                    Some(missing) => Err(format!("it does not keep {}", missing.name())),
                    None => Ok(derivable.merge()),
                }
            })
            .collect::<Result<Vec<_>, String>>()?;
        let filters = self.filters(spec)?;
        Ok(Route {
            group,
            merges,
            filters,
        })
    }

    fn group_by(&self, spec: &RollupShape) -> Result<Vec<Expr>, String> {
        let mut buckets = 0;
        self.aggregate
            .group_expr
            .iter()
            .map(|expr| {
                if let Some(bucket) = quiver_exec::bucket_expr::read_bucket(strip_alias(expr))? {
                    buckets += 1;
                    if buckets > 1 {
                        return Err("it groups by two time buckets".to_string());
                    }
                    if !bucket.is_made_of(&spec.bucket) {
                        return Err(format!(
                            "its buckets ({}) are not made of the rollup's ({}) whole",
                            describe(bucket),
                            describe(spec.bucket)
                        ));
                    }
                    return Ok(unnormalize_col(expr.clone()));
                }
                match strip_alias(expr) {
                    Expr::Column(c) if spec.tags.contains(&c.name) => {
                        Ok(unnormalize_col(expr.clone()))
                    }
                    Expr::Column(c) => {
                        Err(format!("it groups by {:?}, which it does not keep", c.name))
                    }
                    other => Err(format!("it groups by {other}")),
                }
            })
            .collect()
    }

    /// The query's conjuncts for the rollup's rows, for raw rows, and on `time`.
    fn filters(&self, spec: &RollupShape) -> Result<QueryFilters, String> {
        let tags = self.table.tag_columns();
        let (mut kept, mut raw, mut time) = (Vec::new(), Vec::new(), Vec::new());
        let mut satisfied = HashSet::new();
        for conjunct in &self.conjuncts {
            let plain = unnormalize_col(conjunct.clone());
            if is_time_predicate(&plain) {
                time.push(plain.clone());
                raw.push(plain);
                continue;
            }
            let columns = conjunct.column_refs();
            let on_tags = !conjunct.is_volatile()
                && !columns.is_empty()
                && columns.iter().all(|c| tags.contains(&c.name));
            if !on_tags {
                return Err(format!(
                    "its filter {conjunct} is not on tags or a time range"
                ));
            }
            if let Some(i) = spec.filter.iter().position(|f| *f == plain) {
                satisfied.insert(i);
            } else if columns.iter().all(|c| spec.tags.contains(&c.name)) {
                kept.push(plain.clone());
            } else {
                return Err(format!(
                    "its filter {conjunct} tests a tag it does not keep"
                ));
            }
            raw.push(plain);
        }
        if let Some(missing) = (0..spec.filter.len()).find(|i| !satisfied.contains(i)) {
            return Err(format!(
                "it keeps only rows where {}, which the query does not ask for",
                spec.filter[missing]
            ));
        }
        Ok(QueryFilters { kept, raw, time })
    }
}

/// `time <op> <expression of no column>` or `time BETWEEN a AND b` with constant ends (no
/// column, outer reference, placeholder or subquery anywhere in them).
pub(crate) fn is_time_predicate(expr: &Expr) -> bool {
    let constant = |e: &Expr| e.column_refs().is_empty() && stands_alone(e);
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            matches!(
                op,
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq | Operator::Eq
            ) && ((is_time_column(left) && constant(right))
                || (is_time_column(right) && constant(left)))
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => is_time_column(expr) && constant(low) && constant(high),
        _ => false,
    }
}

fn describe(bucket: TimeBucket) -> String {
    format!("{} s from {} ns", bucket.width as f64 / 1e9, bucket.origin)
}

/// The query's aggregate over the rollup's parts, named as the original.
fn routed_plan(
    query: &QueryShape,
    spec: Arc<RollupShape>,
    state: Arc<RollupState>,
    route: Route,
) -> Result<LogicalPlan> {
    let name = state.definition().name.clone();
    let parts = RollupPartials::new(spec, state, query.table.clone(), route.filters)?;
    let reference = TableReference::bare(format!("rollup:{name}"));
    let merged = LogicalPlanBuilder::scan(reference, provider_as_source(Arc::new(parts)), None)?
        .aggregate(route.group, route.merges)?
        .build()?;
    renamed_like(merged, &query.aggregate.schema)
}

/// `merged` projected to `original`'s column names, qualifiers and types (by position), so
/// that the plan above a replaced aggregate does not notice.
pub(crate) fn renamed_like(merged: LogicalPlan, original: &DFSchemaRef) -> Result<LogicalPlan> {
    let renamed: Vec<Expr> = merged
        .schema()
        .columns()
        .into_iter()
        .zip(original.iter())
        .map(|(column, (qualifier, field))| {
            let produced = merged
                .schema()
                .field_from_column(&column)?
                .data_type()
                .clone();
            let expr = Expr::Column(column);
            let expr = if produced == *field.data_type() {
                expr
            } else {
                cast(expr, field.data_type().clone())
            };
            Ok(expr.alias_qualified(qualifier.cloned(), field.name()))
        })
        .collect::<Result<_>>()?;
    LogicalPlanBuilder::from(merged).project(renamed)?.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};
    use quiver_model::schema::TIME_COLUMN;

    #[test]
    fn time_predicates_compare_time_with_constants() {
        assert!(is_time_predicate(&col(TIME_COLUMN).gt_eq(lit(5))));
        assert!(is_time_predicate(&lit(5).lt(col(TIME_COLUMN))));
        assert!(is_time_predicate(&col(TIME_COLUMN).between(lit(1), lit(2))));
        assert!(!is_time_predicate(&col(TIME_COLUMN).not_eq(lit(5))));
        assert!(!is_time_predicate(&col(TIME_COLUMN).gt(col("other"))));
        assert!(!is_time_predicate(&col("host").eq(lit("a"))));
        let outer = Expr::OuterReferenceColumn(
            Arc::new(arrow::datatypes::Field::new(
                "t",
                arrow::datatypes::DataType::Int64,
                true,
            )),
            datafusion::common::Column::from_name("t"),
        );
        assert!(!is_time_predicate(&col(TIME_COLUMN).gt(outer + lit(1))));
    }
}

//! The analyzer rule that puts a merge of time parts in the place of an aggregate whose
//! partial results merge exactly ([`PartsReuseRule`]).
//!
//! An `Aggregate` over one Quiver table (a `Filter` between, or not) qualifies when
//! - every grouping expression is deterministic and reads only the table's columns (a time
//!   bucket, tags, anything computed from the row);
//! - the filter has at least one conjunct comparing `time` with a constant (`now()` allowed)
//!   and every other conjunct is deterministic and reads only the row;
//! - and either it groups by one `date_bin` of `time` whose buckets nest in parts (see
//!   [`super::scan::nests_in_parts`]) and every aggregate is deterministic: then every group
//!   lies within one part, and a part keeps the aggregate's *final* rows (any aggregate:
//!   `median` and `count(DISTINCT …)` too); or every aggregate merges from partial states
//!   ([`Derivable`]: sum, count, min, max, avg, first / last ordered by time): then a part
//!   keeps partial states, merged above.
//!
//! The aggregate becomes a [`ReusedParts`] scan (under the merging aggregate in the second
//! case), and a projection gives the result the original names. It runs after the rollup
//! router: an aggregate answered from a rollup reads no table directly and is left alone.
//! It is on only for queries the result cache lets reuse parts (`quiver.reuse_parts`).

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::TableReference;
use datafusion::datasource::provider_as_source;
use datafusion::error::Result;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::{col, Expr, LogicalPlan, LogicalPlanBuilder, Volatility};
use datafusion::optimizer::AnalyzerRule;
use quiver_exec::plan_settings::PlanSettings;
use quiver_exec::time_filter::stands_alone;

use super::scan::{nests_in_parts, PartValues, PartsShape, ReusedParts};
use crate::partials::states::{strip_alias, Derivable};
use crate::rollup::route::{is_time_predicate, renamed_like, QueryShape};

/// The name of the `n`th grouping column of the parts.
fn group_column(n: usize) -> String {
    format!("__quiver_group_{n}")
}

/// Reuses time parts (module docs).
#[derive(Debug)]
pub(crate) struct PartsReuseRule;

impl AnalyzerRule for PartsReuseRule {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let enabled = config
            .extensions
            .get::<PlanSettings>()
            .is_some_and(|settings| settings.reuse_parts);
        if !enabled {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(reuse_parts)
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "quiver_parts_reuse"
    }
}

fn reuse_parts(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let Some(query) = QueryShape::of(&node) else {
        return Ok(Transformed::no(node));
    };
    let aggregate = query.aggregate;
    let Some(shape) = shape_of(&query) else {
        return Ok(Transformed::no(node));
    };
    let name = query.table.table().name().to_string();
    let parts = ReusedParts::new(query.table.clone(), shape.parts)?;
    let reference = TableReference::bare(format!("parts:{name}"));
    let mut plan = LogicalPlanBuilder::scan(reference, provider_as_source(Arc::new(parts)), None)?;
    if let Some(merges) = shape.merges {
        let group: Vec<Expr> = (0..aggregate.group_expr.len())
            .map(|n| col(group_column(n)))
            .collect();
        plan = plan.aggregate(group, merges)?;
    }
    Ok(Transformed::yes(renamed_like(
        plan.build()?,
        &aggregate.schema,
    )?))
}

/// What the rule makes of a qualifying aggregate.
struct Reusable {
    parts: PartsShape,
    /// The query's aggregates over the parts' states; `None` if the parts hold final rows.
    merges: Option<Vec<Expr>>,
}

/// The parts of `query`'s aggregate, if it qualifies (module docs).
fn shape_of(query: &QueryShape) -> Option<Reusable> {
    let aggregate = query.aggregate;
    let mut buckets = Vec::new();
    let mut group = Vec::new();
    for (n, expr) in aggregate.group_expr.iter().enumerate() {
        let plain = strip_alias(expr);
        if !row_local(plain) {
            return None;
        }
        if let Ok(Some(bucket)) = quiver_exec::bucket_expr::read_bucket(plain) {
            buckets.push((n, bucket));
        }
        group.push(unnormalize_col(plain.clone()).alias(group_column(n)));
    }
    let (values, merges) = match buckets.as_slice() {
        [(column, bucket)] if nests_in_parts(bucket) && all_deterministic(&aggregate.aggr_expr) => {
            let aggregates = aggregate
                .aggr_expr
                .iter()
                .enumerate()
                .map(|(n, e)| unnormalize_col(strip_alias(e).clone()).alias(value_column(n)))
                .collect();
            let values = PartValues::Final {
                aggregates,
                bucket_column: *column,
                bucket: *bucket,
            };
            (values, None)
        }
        _ => {
            let mut states = BTreeSet::new();
            let mut merges = Vec::new();
            for expr in &aggregate.aggr_expr {
                let derivable = Derivable::read(strip_alias(expr)).ok()?;
                states.extend(derivable.states());
                merges.push(derivable.merge());
            }
            let bucket_width = buckets.iter().map(|(_, b)| b.width).max();
            let values = PartValues::States {
                states: states.into_iter().collect(),
                bucket_width,
            };
            (values, Some(merges))
        }
    };
    let (mut time, mut filter) = (Vec::new(), Vec::new());
    for conjunct in &query.conjuncts {
        let plain = unnormalize_col(conjunct.clone());
        if is_time_predicate(&plain) {
            time.push(plain);
        } else if row_local(&plain) {
            filter.push(plain);
        } else {
            return None;
        }
    }
    if time.is_empty() {
        return None;
    }
    Some(Reusable {
        parts: PartsShape {
            group,
            values,
            filter,
            time,
        },
        merges,
    })
}

/// The name of the `n`th aggregate's column of parts holding final rows.
fn value_column(n: usize) -> String {
    format!("__quiver_value_{n}")
}

/// True if every aggregate is deterministic and reads only the row: its function immutable,
/// its arguments, filter and ordering [`row_local`].
fn all_deterministic(aggregates: &[Expr]) -> bool {
    aggregates.iter().all(|expr| match strip_alias(expr) {
        Expr::AggregateFunction(f) => {
            f.func.signature().volatility == Volatility::Immutable
                && f.params.args.iter().all(row_local)
                && f.params.filter.as_deref().is_none_or(row_local)
                && f.params.order_by.iter().all(|s| row_local(&s.expr))
        }
        _ => false,
    })
}

/// True if `expr` is deterministic and reads only the row: every function immutable (no
/// clock, no randomness), no subquery, no placeholder, no grouping set.
fn row_local(expr: &Expr) -> bool {
    stands_alone(expr)
        && !expr
            .exists(|e| {
                Ok(match e {
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility != Volatility::Immutable
                    }
                    Expr::GroupingSet(_) | Expr::AggregateFunction(_) | Expr::WindowFunction(_) => {
                        true
                    }
                    _ => false,
                })
            })
            .unwrap_or(true)
}

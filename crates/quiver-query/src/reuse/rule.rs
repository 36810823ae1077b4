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
//!
//! A plain scan of a time range qualifies too: a statement that is a `Filter` over one Quiver
//! table under nothing but projections and sorts without a limit (`SELECT time, host, usage
//! FROM cpu WHERE time >= now() - INTERVAL '1 hour' AND host = 'a' ORDER BY time`), its
//! filter as above. Its parts hold the table's rows themselves, only the columns the
//! statement reads. A `LIMIT` keeps the table scan, which reads only the rows it needs.
//!
//! It is on only for queries the result cache lets reuse parts (`quiver.reuse_parts`).

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, TableReference};
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::error::Result;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    col, Expr, Filter, LogicalPlan, LogicalPlanBuilder, Sort, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use quiver_model::schema::TIME_COLUMN;

use super::scan::{nests_in_parts, PartValues, PartsShape, ReusedParts};
use crate::provider::QuiverTable;
use crate::rollup::definition::{strip_alias, Derivable, TimeBucket};
use crate::rollup::route::{is_time_predicate, renamed_like, QueryShape};
use crate::rollup::RoutingSettings;
use crate::time_filter::stands_alone;

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
            .get::<RoutingSettings>()
            .is_some_and(|settings| settings.reuse_parts);
        if !enabled {
            return Ok(plan);
        }
        let plan = plan.transform_up_with_subqueries(reuse_parts)?.data;
        reuse_rows(plan, &mut BTreeSet::new())
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

/// `node` with a plain scan of a time range under it (only projections and sorts without a
/// limit between) replaced by parts holding its rows (module docs); `used` collects the
/// columns the nodes above read.
fn reuse_rows(node: LogicalPlan, used: &mut BTreeSet<String>) -> Result<LogicalPlan> {
    match &node {
        LogicalPlan::Projection(_) | LogicalPlan::Sort(Sort { fetch: None, .. }) => {
            for expr in node.expressions() {
                used.extend(expr.column_refs().into_iter().map(|c| c.name.clone()));
            }
            Ok(node
                .map_children(|child| reuse_rows(child, used).map(Transformed::yes))?
                .data)
        }
        LogicalPlan::Filter(filter) => Ok(rows_of(filter, used)?.unwrap_or(node)),
        _ => Ok(node),
    }
}

/// Parts holding the rows `filter` passes of the table it reads, the columns in `used` (and
/// `time`), named as the filter names them; `None` if it does not qualify.
fn rows_of(filter: &Filter, used: &BTreeSet<String>) -> Result<Option<LogicalPlan>> {
    let LogicalPlan::TableScan(scan) = filter.input.as_ref() else {
        return Ok(None);
    };
    if scan.fetch.is_some() {
        return Ok(None);
    }
    let Some(table) = source_as_provider(&scan.source)
        .ok()
        .and_then(|provider| provider.downcast_ref::<QuiverTable>().cloned())
    else {
        return Ok(None);
    };
    let mut conjuncts: Vec<Expr> = split_conjunction(&filter.predicate)
        .into_iter()
        .cloned()
        .collect();
    conjuncts.extend(scan.filters.iter().cloned());
    let Some((time, filter_conjuncts)) = split_filter(&conjuncts) else {
        return Ok(None);
    };
    let columns: Vec<(Option<TableReference>, String)> = filter
        .input
        .schema()
        .iter()
        .filter(|(_, field)| field.name() == TIME_COLUMN || used.contains(field.name()))
        .map(|(qualifier, field)| (qualifier.cloned(), field.name().clone()))
        .collect();
    let Some(time_column) = columns.iter().position(|(_, name)| name == TIME_COLUMN) else {
        return Ok(None);
    };
    let shape = PartsShape {
        group: columns
            .iter()
            .map(|(_, name)| Expr::Column(Column::from_name(name)))
            .collect(),
        values: PartValues::Rows { time_column },
        filter: filter_conjuncts,
        time,
    };
    let name = table.table().name().to_string();
    let parts = ReusedParts::new(table, shape)?;
    let reference = TableReference::bare(format!("parts:{name}"));
    let named = columns
        .into_iter()
        .map(|(qualifier, name)| col(Column::from_name(&name)).alias_qualified(qualifier, name));
    let plan = LogicalPlanBuilder::scan(reference, provider_as_source(Arc::new(parts)), None)?
        .project(named)?
        .build()?;
    Ok(Some(plan))
}

/// `conjuncts` (qualified) as the conditions on `time` and the other row conditions, columns
/// unqualified; `None` if one is neither, or none is on `time`.
fn split_filter(conjuncts: &[Expr]) -> Option<(Vec<Expr>, Vec<Expr>)> {
    let (mut time, mut filter) = (Vec::new(), Vec::new());
    for conjunct in conjuncts {
        let plain = unnormalize_col(conjunct.clone());
        if is_time_predicate(&plain) {
            time.push(plain);
        } else if row_local(&plain) {
            filter.push(plain);
        } else {
            return None;
        }
    }
    (!time.is_empty()).then_some((time, filter))
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
        if let Ok(Some(bucket)) = TimeBucket::read(plain) {
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
    let (time, filter) = split_filter(&query.conjuncts)?;
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

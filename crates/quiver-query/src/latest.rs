//! Last-point queries answered from every series' newest row instead of every row.
//!
//! [`LatestRowsRule`] (an analyzer rule, so it sees `DISTINCT ON` before DataFusion turns it
//! into an aggregate) finds the plans whose answer depends only on each series' newest row,
//! and has their table scan read [`quiver_storage::latest_rows`] (one row per series, each
//! file's share cached in the chunk cache) instead of the whole table:
//! - `SELECT DISTINCT <tag expressions>`: every row of a series has the same tags;
//! - `DISTINCT ON (<tag expressions>) ... ORDER BY <the same>, time DESC [, ...]`: each group
//!   is a set of whole series, and its first row by `time DESC` is the newest row of one of
//!   them;
//! - an aggregate grouped by tag expressions whose aggregates are `max(time)`,
//!   `first_value(x ORDER BY time DESC)`, `last_value(x ORDER BY time)`, or `min`/`max` of tag
//!   expressions (no `FILTER`, no `IGNORE NULLS`): each of those is decided by a series'
//!   newest row, or is the same on every row of a series.
//!
//! Only if every filter between that node and the scan is on tags alone (a series passes it
//! whole or not at all) or is a lower bound on `time` (a series' newest row passes it unless
//! none of its rows do). Anything else (a filter on a field, an upper bound on time, a join, a
//! volatile or subquery expression) keeps the plain plan. The rewritten plan is otherwise the
//! same, so every filter and expression still applies on top of the newest rows; only
//! `DISTINCT ON` itself becomes a `row_number()` window, cheaper on so few rows (see
//! [`first_rows_by_rank`]).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::error::{DataFusionError, Result};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr::{AggregateFunction, NullTreatment};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    col, lit, Aggregate, BinaryExpr, Distinct, DistinctOn, Expr, ExprFunctionExt, LogicalPlan,
    LogicalPlanBuilder, Operator, SortExpr, TableProviderFilterPushDown, TableScan, TableType,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use quiver_exec::time_filter::{is_time_column, stands_alone, time_bounds};

use crate::provider::{external, note_read, project_by_name, query_now_ns, QuiverTable};

/// The analyzer rule that routes last-point plans to [`LatestRowsTable`] (module docs).
#[derive(Debug, Default)]
pub struct LatestRowsRule;

impl AnalyzerRule for LatestRowsRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_down_with_subqueries(route_to_latest_rows)
            .map(|rewritten| rewritten.data)
    }

    fn name(&self) -> &str {
        "quiver_latest_rows"
    }
}

/// `node` with its scan reading only the newest rows, if its answer depends on nothing else.
fn route_to_latest_rows(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let Some(input) = single_input(&node) else {
        return Ok(Transformed::no(node));
    };
    let Some(scan) = ScanBelow::find(input) else {
        return Ok(Transformed::no(node));
    };
    let decided_by_newest_rows = match &node {
        LogicalPlan::Distinct(Distinct::On(on)) => scan.decides_distinct_on(on),
        LogicalPlan::Distinct(Distinct::All(input)) => scan.decides_distinct(input),
        LogicalPlan::Aggregate(aggregate) => scan.decides_aggregate(aggregate),
        _ => false,
    };
    if !decided_by_newest_rows || !scan.filters_keep_whole_series() {
        return Ok(Transformed::no(node));
    }
    let rewritten = node
        .map_children(|child| child.transform_down(read_newest_rows))?
        .data;
    let rewritten = match rewritten {
        LogicalPlan::Distinct(Distinct::On(on)) => first_rows_by_rank(on)?,
        other => other,
    };
    Ok(Transformed::new(rewritten, true, TreeNodeRecursion::Jump))
}

/// The column [`first_rows_by_rank`] numbers rows in.
const RANK_COLUMN: &str = "__quiver_rank";

/// `DISTINCT ON` over the newest rows as the first row of each group by `row_number()`:
/// DataFusion plans `DISTINCT ON` as `first_value` aggregates, one per selected column,
/// whose per-group overhead costs milliseconds even for a hundred rows, while a window
/// over so few rows costs nearly nothing. The same rows, in the `ORDER BY` order. Where the
/// window cannot be planned (an `ORDER BY` naming a select alias, say), `DISTINCT ON` stays.
fn first_rows_by_rank(on: DistinctOn) -> Result<LogicalPlan> {
    let sort = on.sort_expr.clone().unwrap_or_default();
    let within_group = sort[on.on_expr.len()..].to_vec();
    let ranked = row_number()
        .partition_by(on.on_expr.clone())
        .order_by(within_group)
        .build()
        .and_then(|rank| {
            LogicalPlanBuilder::new_from_arc(on.input.clone())
                .window(vec![rank.alias(RANK_COLUMN)])?
                .filter(col(RANK_COLUMN).eq(lit(1u64)))?
                .sort(sort)?
                .project(on.select_expr.clone())?
                .build()
        });
    match ranked {
        Ok(plan) if plan.schema() == &on.schema => Ok(plan),
        _ => Ok(LogicalPlan::Distinct(Distinct::On(on))),
    }
}

/// The input of a `DISTINCT ON` or aggregate node; below its projection for a `DISTINCT`.
fn single_input(node: &LogicalPlan) -> Option<&LogicalPlan> {
    match node {
        LogicalPlan::Distinct(Distinct::On(on)) => Some(&on.input),
        LogicalPlan::Distinct(Distinct::All(input)) => match input.as_ref() {
            LogicalPlan::Projection(projection) => Some(&projection.input),
            _ => None,
        },
        LogicalPlan::Aggregate(aggregate) => Some(&aggregate.input),
        _ => None,
    }
}

/// A Quiver table scan reached from a node through aliases and filters only.
pub(crate) struct ScanBelow<'a> {
    /// The table's tag columns.
    pub(crate) tags: HashSet<String>,
    /// Every filter on the way down, split into conjuncts.
    filters: Vec<&'a Expr>,
}

impl<'a> ScanBelow<'a> {
    /// The Quiver table scan `plan` reaches through aliases and filters only, with those
    /// filters; `None` for anything else, or a scan that already has filters or a limit
    /// pushed into it (analysis runs before the optimizer pushes any).
    pub(crate) fn find(mut plan: &'a LogicalPlan) -> Option<Self> {
        let mut filters = Vec::new();
        loop {
            match plan {
                LogicalPlan::SubqueryAlias(alias) => plan = &alias.input,
                LogicalPlan::Filter(filter) => {
                    filters.extend(split_conjunction(&filter.predicate));
                    plan = &filter.input;
                }
                LogicalPlan::TableScan(scan) => {
                    let table = quiver_table(scan)?;
                    if !scan.filters.is_empty() || scan.fetch.is_some() {
                        return None;
                    }
                    let tags = table.tag_columns();
                    return Some(ScanBelow { tags, filters });
                }
                _ => return None,
            }
        }
    }

    /// True if `expr` reads tags only (or nothing) and is deterministic and self-contained:
    /// it has one value per series.
    fn is_per_series(&self, expr: &Expr) -> bool {
        is_self_contained(expr)
            && expr
                .column_refs()
                .iter()
                .all(|column| self.tags.contains(&column.name))
    }

    /// `DISTINCT ON (tags...) ... ORDER BY tags..., time DESC [, ...]`.
    fn decides_distinct_on(&self, on: &DistinctOn) -> bool {
        let Some(sort) = &on.sort_expr else {
            return false;
        };
        on.on_expr.iter().all(|e| self.is_per_series(e))
            && sort
                .get(on.on_expr.len())
                .is_some_and(|key| is_time_column(&key.expr) && !key.asc)
    }

    /// `SELECT DISTINCT <tag expressions>`: the same values on every row of a series.
    fn decides_distinct(&self, input: &LogicalPlan) -> bool {
        match input {
            LogicalPlan::Projection(projection) => {
                projection.expr.iter().all(|e| self.is_per_series(e))
            }
            _ => false,
        }
    }

    /// An aggregate grouped by tags whose every aggregate is decided by the newest rows.
    fn decides_aggregate(&self, aggregate: &Aggregate) -> bool {
        aggregate
            .group_expr
            .iter()
            .all(|e| !matches!(e, Expr::GroupingSet(_)) && self.is_per_series(e))
            && aggregate
                .aggr_expr
                .iter()
                .all(|e| self.is_decided_by_newest_row(e))
    }

    fn is_decided_by_newest_row(&self, expr: &Expr) -> bool {
        let expr = match expr {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
            return false;
        };
        if params.filter.is_some()
            || matches!(params.null_treatment, Some(NullTreatment::IgnoreNulls))
            || !params.args.iter().all(is_self_contained)
        {
            return false;
        }
        let [arg] = params.args.as_slice() else {
            return false;
        };
        let by_time = |ascending: bool| match params.order_by.as_slice() {
            [SortExpr { expr, asc, .. }] => is_time_column(expr) && *asc == ascending,
            _ => false,
        };
        match func.name() {
            "max" => is_time_column(arg) || self.is_per_series(arg),
            "min" => self.is_per_series(arg),
            "first_value" => by_time(false),
            "last_value" => by_time(true),
            _ => false,
        }
    }

    /// True if every filter reads nothing but tags and `column`, and is deterministic and
    /// self-contained.
    pub(crate) fn filters_read(&self, column: &str) -> bool {
        self.filters.iter().all(|f| {
            is_self_contained(f)
                && f.column_refs()
                    .iter()
                    .all(|c| c.name == column || self.tags.contains(&c.name))
        })
    }

    /// True if every filter is on tags alone or a lower bound on `time`.
    fn filters_keep_whole_series(&self) -> bool {
        self.filters
            .iter()
            .all(|f| self.is_per_series(f) || is_time_lower_bound(f))
    }
}

/// The Quiver table a scan reads, if it reads one.
fn quiver_table(scan: &TableScan) -> Option<QuiverTable> {
    let provider = source_as_provider(&scan.source).ok()?;
    provider.downcast_ref::<QuiverTable>().cloned()
}

/// Deterministic, and without subqueries, placeholders or references to an outer query.
fn is_self_contained(expr: &Expr) -> bool {
    !expr.is_volatile() && stands_alone(expr)
}

/// `time > c`, `time >= c`, `c < time` or `c <= time` for a constant `c`.
fn is_time_lower_bound(expr: &Expr) -> bool {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return false;
    };
    let is_constant = |e: &Expr| e.column_refs().is_empty() && is_self_contained(e);
    match op {
        Operator::Gt | Operator::GtEq => is_time_column(left) && is_constant(right),
        Operator::Lt | Operator::LtEq => is_constant(left) && is_time_column(right),
        _ => false,
    }
}

/// A Quiver table scan turned into a scan of the table's newest rows.
fn read_newest_rows(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    swap_quiver_source(plan, |table| Arc::new(LatestRowsTable { table }))
}

/// `plan`, if it is a scan of a Quiver table, reading what `swap` makes of that table
/// instead; anything else unchanged.
pub(crate) fn swap_quiver_source(
    plan: LogicalPlan,
    swap: impl FnOnce(QuiverTable) -> Arc<dyn TableProvider>,
) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::TableScan(scan) = &plan else {
        return Ok(Transformed::no(plan));
    };
    let Some(table) = quiver_table(scan) else {
        return Ok(Transformed::no(plan));
    };
    let mut scan = scan.clone();
    scan.source = provider_as_source(swap(table));
    Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
}

/// The newest row of each series of a table (see [`quiver_storage::latest_rows`]), under the
/// schema the query was planned with.
#[derive(Debug)]
pub(crate) struct LatestRowsTable {
    /// The table whose newest rows are read, with the schema the query was planned with.
    table: QuiverTable,
}

#[async_trait]
impl TableProvider for LatestRowsTable {
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
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let table = self.table.table();
        let snapshot = table.snapshot().map_err(external)?;
        let now_ns = query_now_ns(state);
        note_read(state, table, &snapshot, now_ns);
        // rows before the retention cutoff are invisible; the query's own lower bound on time
        // (if any) spares reading older files
        let retained = table.retention_cutoff_ns(now_ns).unwrap_or(i64::MIN);
        let since = retained.max(time_bounds(filters).min);
        let cache = self.table.chunk_cache().clone();
        let files = quiver_exec::table_files::table_files(state.runtime_env())?;
        let newest = tokio::task::spawn_blocking(move || {
            quiver_storage::latest_rows(&files, &snapshot, since, &cache)
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
        .map_err(external)?;
        let schema = self.table.schema();
        let newest = project_by_name(&newest, &schema)?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![newest]],
            schema,
            projection.cloned(),
        )?)
    }
}

//! `ORDER BY time [DESC] LIMIT n` answered from each series' newest (or oldest) `n` rows.
//!
//! Every source of a table's rows is sorted by series then time, each point once. So among
//! the `n` newest rows of the whole table, no series has a row that is not among its own `n`
//! newest: a row with `n` newer rows in its series has at least `n` newer rows in the table.
//! [`TimeOrderLimitRule`] (an analyzer rule) finds `Limit` over `Sort` whose first key is the
//! scanned table's `time` column, reached from the sort through projections, aliases and
//! filters that read tags and `time` only, and has that scan hand on only each series' `n`
//! newest rows (for `time DESC`; oldest for `time ASC`), `n` being the limit plus its offset
//! (see [`QuiverTable::with_series_end`]). The sort and the limit still run on top, so ties
//! and further sort keys are decided as before, over a few rows per series instead of all of
//! them.
//!
//! The scan keeps this promise only where it can: in the write buffer and in files whose
//! columns are decoded (where it knows where each series begins), and only if every filter it
//! is given is one it applies exactly (tag comparisons decide whole series; `time` ranges cut
//! each series before its end is taken). Files read from Parquet, overlapping sources merged
//! for deduplication, and any other filter get every row, as a plain scan would give them.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::{FetchType, Limit, LogicalPlan, SkipType, Sort};
use datafusion::optimizer::AnalyzerRule;
use quiver_exec::time_filter::is_time_column;
use quiver_model::schema::TIME_COLUMN;

use crate::latest::{swap_quiver_source, ScanBelow};
use quiver_exec::series_filter::SeriesEnd;

/// The most rows per series a rewritten scan hands on; larger limits keep the plain scan.
const MAX_ROWS_PER_SERIES: usize = 10_000;

/// The analyzer rule that routes time-ordered limits to scans of series' ends (module docs).
#[derive(Debug, Default)]
pub struct TimeOrderLimitRule;

impl AnalyzerRule for TimeOrderLimitRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_down_with_subqueries(route_to_series_ends)
            .map(|rewritten| rewritten.data)
    }

    fn name(&self) -> &str {
        "quiver_time_order_limit"
    }
}

/// `node` with its scan handing on only each series' end, if it is a limit over a sort by
/// time that the end decides.
fn route_to_series_ends(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Limit(limit) = &node else {
        return Ok(Transformed::no(node));
    };
    let Some(rows) = rows_wanted(limit) else {
        return Ok(Transformed::no(node));
    };
    let LogicalPlan::Sort(Sort { expr, input, .. }) = limit.input.as_ref() else {
        return Ok(Transformed::no(node));
    };
    let Some(first) = expr.first().filter(|key| is_time_column(&key.expr)) else {
        return Ok(Transformed::no(node));
    };
    let end = if first.asc {
        SeriesEnd::Oldest(rows)
    } else {
        SeriesEnd::Newest(rows)
    };
    let Some(scan_input) = through_projections(input) else {
        return Ok(Transformed::no(node));
    };
    let decided = ScanBelow::find(scan_input).is_some_and(|scan| scan.filters_read(TIME_COLUMN));
    if !decided {
        return Ok(Transformed::no(node));
    }
    let rewritten = node
        .map_children(|sort| {
            sort.map_children(|below| below.transform_down(|plan| read_series_ends(plan, end)))
        })?
        .data;
    Ok(Transformed::new(rewritten, true, TreeNodeRecursion::Jump))
}

/// The rows a limit needs from below it: its fetch plus its skip, if both are constants and
/// the sum is small.
fn rows_wanted(limit: &Limit) -> Option<usize> {
    let (Ok(SkipType::Literal(skip)), Ok(FetchType::Literal(Some(fetch)))) =
        (limit.get_skip_type(), limit.get_fetch_type())
    else {
        return None;
    };
    skip.checked_add(fetch)
        .filter(|&rows| rows <= MAX_ROWS_PER_SERIES)
}

/// The plan below projections that pass `time` through as it is (any others change nothing
/// about which rows there are, if they are deterministic); `None` if a projection computes
/// `time` or is volatile.
fn through_projections(mut plan: &LogicalPlan) -> Option<&LogicalPlan> {
    while let LogicalPlan::Projection(projection) = plan {
        let passes_time = projection.expr.iter().any(is_time_column);
        if !passes_time || projection.expr.iter().any(|e| e.is_volatile()) {
            return None;
        }
        plan = &projection.input;
    }
    Some(plan)
}

/// A Quiver table scan turned into a scan of each series' `end`.
fn read_series_ends(plan: LogicalPlan, end: SeriesEnd) -> Result<Transformed<LogicalPlan>> {
    swap_quiver_source(plan, |table| Arc::new(table.with_series_end(end)))
}

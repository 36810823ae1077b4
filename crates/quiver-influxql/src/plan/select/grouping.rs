//! `GROUP BY`: the time interval and the tags a statement groups by, the bucket and tag keys
//! its parts group on, and the filling of its aggregates' missing values (`fill(...)`).

use std::collections::BTreeSet;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{lit, Expr as DfExpr, LogicalPlan};
use datafusion::prelude::ident;
use quiver_model::TimeBucket;

use super::functions::is_count;
use super::{tag_role, timestamp, OutputColumn};
use crate::ast::{Dimension, Fill, SelectStatement};
use crate::plan::expr::{self, Columns, Resolved};
use crate::plan::fill::{self, FillRange};
use crate::plan::time_range::TimeRange;
use crate::plan::{PlanContext, PlanError};

/// What is grouped by.
pub(in crate::plan) struct Grouping {
    /// `GROUP BY time(interval, offset)`.
    pub(in crate::plan) interval: Option<(i64, i64)>,
    /// The tags, sorted.
    pub(in crate::plan) tags: Vec<String>,
}

/// Aggregates with their missing values filled (`fill()`, null by default): with `GROUP BY
/// time` over a range with a start, every bucket of every series first gets a row (the
/// gap-fill operator SQL's `date_bin_gapfill` uses).
pub(super) fn fill_aggregates(
    plan: LogicalPlan,
    select: &SelectStatement,
    ctx: &PlanContext<'_>,
    grouping: &Grouping,
    range: TimeRange,
    columns: &[OutputColumn],
) -> Result<LogicalPlan, PlanError> {
    let fill = select.fill.clone().unwrap_or(Fill::Null);
    let outputs: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let counts: Vec<bool> = columns.iter().map(|c| is_count(&c.expr)).collect();
    let fill_range = match (grouping.interval, &fill) {
        (Some((width, origin)), fill) if *fill != Fill::None => {
            let bucket = TimeBucket { width, origin };
            let upper = range.upper.unwrap_or(ctx.now_ns.saturating_add(1));
            Some(FillRange::new(bucket, range.lower, upper, ctx.max_buckets)?)
        }
        _ => None,
    };
    fill::fill_aggregates(plan, &grouping.tags, &outputs, &counts, &fill, fill_range)
}

/// The `GROUP BY` of `select`: its time interval and the tags (a regular expression or `*`
/// matched against every measurement's tags).
pub(super) fn grouping(select: &SelectStatement, all: &[Columns]) -> Result<Grouping, PlanError> {
    let mut interval = None;
    let mut tags = BTreeSet::new();
    let every_tag: BTreeSet<String> = all.iter().flat_map(Columns::tags).collect();
    for dimension in &select.group_by {
        match dimension {
            Dimension::Time {
                interval: i,
                offset,
            } => {
                if interval.is_some() {
                    return Err(PlanError::new("multiple time dimensions not allowed"));
                }
                if *i <= 0 {
                    return Err(PlanError::new("GROUP BY time() needs a positive interval"));
                }
                interval = Some((*i, offset.unwrap_or(0).rem_euclid(*i)));
            }
            Dimension::Tag(tag) => {
                tags.insert(tag.clone());
            }
            Dimension::Wildcard => tags.extend(every_tag.iter().cloned()),
            Dimension::Regex(pattern) => {
                let regex = expr::bounded_regex(pattern)?;
                tags.extend(
                    every_tag
                        .iter()
                        .filter(|t| regex.is_match(t.as_str()))
                        .cloned(),
                );
            }
        }
    }
    Ok(Grouping {
        interval,
        tags: tags.into_iter().collect(),
    })
}

/// `GROUP BY time` bucket of a point: `date_bin` aligned to the epoch plus `offset`.
pub(in crate::plan) fn bucket(interval: i64, offset: i64) -> DfExpr {
    bucket_of(ident("time"), interval, offset)
}

/// The `GROUP BY time` bucket of `time`.
pub(in crate::plan) fn bucket_of(time: DfExpr, interval: i64, offset: i64) -> DfExpr {
    let stride = lit(ScalarValue::IntervalMonthDayNano(Some(
        arrow::datatypes::IntervalMonthDayNano::new(0, 0, interval),
    )));
    datafusion::functions::expr_fn::date_bin(stride, time, timestamp(offset))
}

/// Grouped tag `tag` as a key over `cols`' rows: the tag column itself (dictionary keys, no
/// per-row conversion), or `''` if the measurement has no such tag.
pub(in crate::plan) fn tag_key(cols: &Columns, tag: &str) -> DfExpr {
    match cols.resolve(tag, None) {
        Resolved::Tag(tag) => ident(tag),
        _ => lit(""),
    }
}

/// The grouped tags of a part grouped by `__tag_<tag>` keys, as the answer shows them.
pub(in crate::plan) fn key_tags(grouping: &Grouping) -> Vec<DfExpr> {
    grouping
        .tags
        .iter()
        .map(|tag| {
            expr::tag_value(&format!("__tag_{tag}")).alias_with_metadata(tag.clone(), tag_role())
        })
        .collect()
}

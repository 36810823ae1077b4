//! `fill()` for `GROUP BY time`, planned onto the gap-fill operator SQL's `date_bin_gapfill`
//! uses (`quiver_exec::gap_fill`): every series that has a point in the range gets a row for
//! every bucket of the range, and the empty buckets' values (and the nulls the aggregates
//! gave) are filled as InfluxDB 1.x fills them: null (but `0` for `count`), a constant, the
//! previous value (the operator's `locf`), or a line between the neighbouring values (its
//! `interpolate`, numbers only; edges stay null). Without a start there is no first bucket:
//! the rows there are get their nulls filled, no bucket is added. The number of buckets is
//! checked against the statement's limit before anything is built.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{cast, lit, Expr as DfExpr, Extension, LogicalPlan};
use datafusion::logical_expr::{LogicalPlanBuilder, UserDefinedLogicalNode};
use datafusion::prelude::{coalesce, ident};
use quiver_exec::gap_fill::{Bound, FillMethod, GapFill};
use quiver_model::TimeBucket;

use super::expr::literal;
use super::{PlanError, MEASUREMENT_COLUMN};
use crate::ast::Fill;

/// The buckets a `GROUP BY time` fills: `bucket`'s from the one holding `lower` (none
/// without it) to the one holding the last instant before `upper`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FillRange {
    pub(crate) bucket: TimeBucket,
    pub(crate) lower: Option<i64>,
    pub(crate) upper: i64,
}

impl FillRange {
    /// The range, refused (with InfluxDB 1.x's message) if it makes more than `max` buckets.
    pub(crate) fn new(
        bucket: TimeBucket,
        lower: Option<i64>,
        upper: i64,
        max: u64,
    ) -> Result<Self, PlanError> {
        if let Some(lower) = lower {
            let count = bucket_count(bucket, lower, upper);
            if count > max as i128 {
                return Err(PlanError::new(format!(
                    "max-select-buckets limit exceeded: ({count}/{max}): GROUP BY time over \
                     this range makes {count} buckets (narrow the time range, widen the \
                     interval or use fill(none))"
                )));
            }
        }
        Ok(FillRange {
            bucket,
            lower,
            upper,
        })
    }
}

/// How many buckets of `bucket` hold `lower <= time < upper` (bounds at the ends of time
/// stay there: an open range's).
fn bucket_count(bucket: TimeBucket, lower: i64, upper: i64) -> i128 {
    let first = bucket.floor_saturating(lower);
    let last = bucket.floor_saturating(upper.saturating_sub(1).max(lower));
    (last as i128 - first as i128) / bucket.width as i128 + 1
}

/// `plan` (measurement, time, `tags`, `outputs`) with its missing values filled as `fill`
/// says; with `range` (a `GROUP BY time`), every series first gets a row for every bucket of
/// the range. `counts` marks the outputs that are a `count()`.
pub(crate) fn fill_aggregates(
    plan: LogicalPlan,
    tags: &[String],
    outputs: &[String],
    counts: &[bool],
    fill: &Fill,
    range: Option<FillRange>,
) -> Result<LogicalPlan, PlanError> {
    let mut columns = row_keys(tags);
    columns.extend(outputs.iter().map(|o| ident(o.as_str())));
    let plan = LogicalPlanBuilder::from(plan).project(columns)?.build()?;
    if *fill == Fill::None {
        return Ok(plan);
    }
    let types = output_types(&plan, outputs)?;
    let (plan, filled) = match range {
        Some(range) => gap_fill(plan, tags, outputs, &types, fill, range)?,
        None => (plan, outputs.iter().map(Column::from_name).collect()),
    };
    let mut projection = row_keys(tags);
    for (((output, column), is_count), data_type) in
        outputs.iter().zip(filled).zip(counts).zip(&types)
    {
        let value = DfExpr::Column(column);
        let value = match fill {
            Fill::Null if *is_count => coalesce(vec![value, lit(0i64)]),
            Fill::Value(constant) if *data_type != DataType::Null => {
                coalesce(vec![value, cast(literal(constant), data_type.clone())])
            }
            _ => value,
        };
        projection.push(value.alias(output));
    }
    Ok(LogicalPlanBuilder::from(plan)
        .project(projection)?
        .build()?)
}

/// `plan` under the gap-fill node that adds `range`'s buckets to every series, and the column
/// each output is read from (the node's `locf` / `interpolate` column where `fill` fills by
/// the series' values).
fn gap_fill(
    plan: LogicalPlan,
    tags: &[String],
    outputs: &[String],
    types: &[DataType],
    fill: &Fill,
    range: FillRange,
) -> Result<(LogicalPlan, Vec<Column>), PlanError> {
    let timestamp = |ns: i64| {
        lit(ScalarValue::TimestampNanosecond(
            Some(ns),
            Some("UTC".into()),
        ))
    };
    let lower = range.lower.map(|ns| Bound {
        expr: timestamp(ns),
        inclusive: true,
    });
    let upper = Bound {
        expr: timestamp(range.upper),
        inclusive: false,
    };
    // measurement, time, tags...: the series are the measurement and the tags
    let series = std::iter::once(0).chain(2..2 + tags.len()).collect();
    let mut node = GapFill::try_new(
        Arc::new(plan),
        1,
        series,
        range.bucket,
        lower.into_iter().collect(),
        vec![upper],
        Vec::new(),
    )?;
    let method = match fill {
        Fill::Previous => Some(FillMethod::Locf),
        Fill::Linear => Some(FillMethod::Interpolate),
        _ => None,
    };
    let mut filled = Vec::with_capacity(outputs.len());
    for (output, data_type) in outputs.iter().zip(types) {
        let column = Column::from_name(output);
        match method {
            Some(method) if method.fills(data_type) => {
                let (with_fill, column) = node.fill_column(&column, method, "fill")?;
                node = with_fill;
                filled.push(column);
            }
            _ => filled.push(column),
        }
    }
    let node: Arc<dyn UserDefinedLogicalNode> = Arc::new(node);
    Ok((LogicalPlan::Extension(Extension { node }), filled))
}

/// The measurement, time and `tags` columns: what names a row.
fn row_keys(tags: &[String]) -> Vec<DfExpr> {
    std::iter::once(MEASUREMENT_COLUMN)
        .chain(std::iter::once("time"))
        .chain(tags.iter().map(String::as_str))
        .map(ident)
        .collect()
}

fn output_types(plan: &LogicalPlan, outputs: &[String]) -> Result<Vec<DataType>, PlanError> {
    Ok(outputs
        .iter()
        .map(|o| {
            plan.schema()
                .field_with_unqualified_name(o)
                .map(|f| f.data_type().clone())
        })
        .collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(lower: i64, upper: i64, width: i64, origin: i64) -> i128 {
        bucket_count(TimeBucket { width, origin }, lower, upper)
    }

    #[test]
    fn buckets_run_from_the_one_holding_the_start_to_the_one_holding_the_last_instant() {
        // 120, 180
        assert_eq!(count(130, 200, 60, 0), 2);
        assert_eq!(count(130, 181, 60, 0), 2);
        // 120 only
        assert_eq!(count(130, 180, 60, 0), 1);
        // 75, 135, 195
        assert_eq!(count(130, 200, 60, 15), 3);
        // -180, -120, -60
        assert_eq!(count(-130, 0, 60, 0), 3);
    }

    #[test]
    fn too_many_buckets_are_refused_before_anything_is_built() {
        let year = 365 * 24 * 3600 * 1_000_000_000i64;
        let nanosecond = TimeBucket {
            width: 1,
            origin: 0,
        };
        let error = FillRange::new(nanosecond, Some(0), year, 1_000_000).unwrap_err();
        assert!(
            error.0.contains("max-select-buckets limit exceeded"),
            "{error}"
        );
        assert!(FillRange::new(nanosecond, Some(i64::MIN), i64::MAX, 10).is_err());
        // without a start nothing is added, whatever the range
        assert!(FillRange::new(nanosecond, None, i64::MAX, 10).is_ok());
    }
}

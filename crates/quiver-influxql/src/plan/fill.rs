//! `fill()` for `GROUP BY time`: every series that has a point in the range gets a row for
//! every bucket of the range (the grid of series × buckets, left-joined with the aggregates),
//! and the empty buckets' values are filled: null (but `0` for `count`, as InfluxDB 1.x does),
//! a constant, the previous value, or a linear interpolation between the neighbouring values
//! (edges stay null). The number of buckets is checked before anything is built.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::NullTreatment;
use datafusion::logical_expr::{
    cast, lit, Expr as DfExpr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder, WindowFrame,
    WindowFrameBound, WindowFrameUnits,
};
use datafusion::prelude::{coalesce, ident};
use quiver_model::TimeBucket;

use super::expr::literal;
use super::{PlanError, MEASUREMENT_COLUMN};
use crate::ast::Fill;

/// The buckets of a `GROUP BY time` over a time range: from the one holding the range's
/// start to the one holding its last instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buckets {
    first: i64,
    last: i64,
    interval: i64,
}

impl Buckets {
    /// The buckets of `interval` (aligned to the epoch plus `offset`) covering
    /// `lower <= time < upper`; refused past `max` buckets.
    pub(crate) fn new(
        lower: i64,
        upper: i64,
        interval: i64,
        offset: i64,
        max: u64,
    ) -> Result<Self, PlanError> {
        // (bounds at the ends of time stay there: an open range's)
        let bucket = TimeBucket {
            width: interval,
            origin: offset,
        };
        let first = bucket.floor_saturating(lower);
        let last = bucket.floor_saturating(upper.saturating_sub(1).max(lower));
        let count = ((last as i128 - first as i128) / interval as i128) + 1;
        if count > max as i128 {
            return Err(PlanError::new(format!(
                "max-select-buckets limit exceeded: ({count}/{max}): GROUP BY time over this \
                 range makes {count} buckets (narrow the time range, widen the interval or use \
                 fill(none))"
            )));
        }
        Ok(Buckets {
            first,
            last,
            interval,
        })
    }

    /// One row per bucket start, column `time`.
    fn plan(&self) -> Result<LogicalPlan, PlanError> {
        let starts = datafusion::functions_nested::expr_fn::range(
            lit(self.first),
            lit(self.last.saturating_add(1)),
            lit(self.interval),
        );
        let utc = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        Ok(LogicalPlanBuilder::empty(true)
            .project(vec![starts.alias("__start")])?
            .unnest_column("__start")?
            .project(vec![cast(ident("__start"), utc).alias("time")])?
            .build()?)
    }
}

/// `plan` (measurement, time, `tags`, `outputs`) with a row for every bucket of every series
/// it has; the new rows' outputs are null.
///
/// The grid (series × buckets, outputs null) and the aggregates are one union grouped by
/// series and bucket: a bucket's value is its aggregate's, if it has one (each key has at most
/// one aggregate row, so `max` takes it).
pub(crate) fn grid(
    plan: LogicalPlan,
    buckets: &Buckets,
    tags: &[String],
    outputs: &[String],
) -> Result<LogicalPlan, PlanError> {
    let keys = series_keys(tags);
    let series = LogicalPlanBuilder::from(plan.clone())
        .project(keys.iter().map(|k| ident(k.as_str())).collect::<Vec<_>>())?
        .distinct()?
        .build()?;
    let types = output_types(&plan, outputs)?;
    let mut grid_columns: Vec<DfExpr> = vec![ident(MEASUREMENT_COLUMN), ident("time")];
    grid_columns.extend(tags.iter().map(|t| ident(t.as_str())));
    grid_columns.extend(
        outputs
            .iter()
            .zip(&types)
            .map(|(o, t)| cast(lit(ScalarValue::Null), t.clone()).alias(o)),
    );
    let grid = LogicalPlanBuilder::from(series)
        .cross_join(buckets.plan()?)?
        .project(grid_columns)?
        .build()?;
    let group = row_keys(tags);
    let mut data_columns = group.clone();
    data_columns.extend(outputs.iter().map(|o| ident(o.as_str())));
    let data = LogicalPlanBuilder::from(plan)
        .project(data_columns)?
        .build()?;
    let taken: Vec<DfExpr> = outputs
        .iter()
        .map(|o| datafusion::functions_aggregate::expr_fn::max(ident(o.as_str())).alias(o))
        .collect();
    Ok(LogicalPlanBuilder::from(grid)
        .union(data)?
        .aggregate(group, taken)?
        .build()?)
}

/// The measurement and `tags`: what names a series.
fn series_keys(tags: &[String]) -> Vec<String> {
    std::iter::once(MEASUREMENT_COLUMN.to_string())
        .chain(tags.iter().cloned())
        .collect()
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

/// `plan`'s missing values (null outputs: a bucket, or a field, without points) filled as
/// `fill` says, as InfluxDB 1.x fills them: with `fill(null)` a count is `0`; a constant takes
/// its column's type; `previous` and `linear` look along the series (linear only between two
/// numbers; edges and non-numeric columns stay as they are).
pub(crate) fn fill_values(
    plan: LogicalPlan,
    tags: &[String],
    outputs: &[String],
    counts: &[bool],
    fill: &Fill,
) -> Result<LogicalPlan, PlanError> {
    let types = output_types(&plan, outputs)?;
    let partition: Vec<DfExpr> = series_keys(tags)
        .iter()
        .map(|k| ident(k.as_str()))
        .collect();
    let mut windows = Vec::new();
    let mut filled: Vec<DfExpr> = row_keys(tags);
    for (i, ((output, is_count), data_type)) in outputs.iter().zip(counts).zip(&types).enumerate() {
        let value = ident(output.as_str());
        let value = match fill {
            Fill::Null if *is_count => coalesce(vec![value, lit(0i64)]),
            Fill::Null | Fill::None => value,
            Fill::Value(_) if *data_type == DataType::Null => value,
            Fill::Value(constant) => {
                coalesce(vec![value, cast(literal(constant), data_type.clone())])
            }
            Fill::Previous => {
                let previous = format!("__previous_{i}");
                windows.push(nearest(value, &partition, true)?.alias(&previous));
                ident(previous)
            }
            Fill::Linear if data_type.is_numeric() => cast(
                linear(value, &partition, i, &mut windows)?,
                data_type.clone(),
            ),
            Fill::Linear => value,
        };
        filled.push(value.alias(output));
    }
    let mut builder = LogicalPlanBuilder::from(plan);
    if !windows.is_empty() {
        builder = builder.window(windows)?;
    }
    Ok(builder.project(filled)?.build()?)
}

fn frame(preceding: bool) -> WindowFrame {
    let unbounded = ScalarValue::UInt64(None);
    match preceding {
        true => WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(unbounded),
            WindowFrameBound::CurrentRow,
        ),
        false => WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::CurrentRow,
            WindowFrameBound::Following(unbounded),
        ),
    }
}

/// The nearest non-null value of `value` in the series, at or before the row (`preceding`)
/// or at or after it.
fn nearest(value: DfExpr, partition: &[DfExpr], preceding: bool) -> Result<DfExpr, PlanError> {
    use datafusion::functions_window::expr_fn::{first_value, last_value};
    let function = match preceding {
        true => last_value(value),
        false => first_value(value),
    };
    Ok(function
        .null_treatment(NullTreatment::IgnoreNulls)
        .partition_by(partition.to_vec())
        .order_by(vec![ident("time").sort(true, false)])
        .window_frame(frame(preceding))
        .build()?)
}

/// `value`, or between the previous and the next non-null values, interpolated at the row's
/// time (null at the series' edges); the window columns it reads are added to `windows`.
fn linear(
    value: DfExpr,
    partition: &[DfExpr],
    i: usize,
    windows: &mut Vec<DfExpr>,
) -> Result<DfExpr, PlanError> {
    let as_float = |e: DfExpr| cast(e, DataType::Float64);
    let time_ns = cast(ident("time"), DataType::Int64);
    let time_where_set = DfExpr::Case(datafusion::logical_expr::Case::new(
        None,
        vec![(
            Box::new(value.clone().is_not_null()),
            Box::new(time_ns.clone()),
        )],
        None,
    ));
    let names = [
        format!("__prev_v_{i}"),
        format!("__next_v_{i}"),
        format!("__prev_t_{i}"),
        format!("__next_t_{i}"),
    ];
    windows.push(nearest(value.clone(), partition, true)?.alias(&names[0]));
    windows.push(nearest(value.clone(), partition, false)?.alias(&names[1]));
    windows.push(nearest(time_where_set.clone(), partition, true)?.alias(&names[2]));
    windows.push(nearest(time_where_set, partition, false)?.alias(&names[3]));
    let [prev_v, next_v, prev_t, next_t] = names.map(|n| as_float(ident(n)));
    let interpolated = prev_v.clone()
        + (next_v - prev_v) * (as_float(time_ns) - prev_t.clone()) / (next_t - prev_t);
    Ok(coalesce(vec![as_float(value), interpolated]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_run_from_the_one_holding_the_start_to_the_one_holding_the_last_instant() {
        let b = Buckets::new(130, 200, 60, 0, 100).unwrap();
        assert_eq!((b.first, b.last), (120, 180));
        let b = Buckets::new(130, 181, 60, 0, 100).unwrap();
        assert_eq!(b.last, 180);
        let b = Buckets::new(130, 180, 60, 0, 100).unwrap();
        assert_eq!(b.last, 120);
        let offset = Buckets::new(130, 200, 60, 15, 100).unwrap();
        assert_eq!((offset.first, offset.last), (75, 195));
        let negative = Buckets::new(-130, 0, 60, 0, 100).unwrap();
        assert_eq!((negative.first, negative.last), (-180, -60));
    }

    #[test]
    fn too_many_buckets_are_refused_before_anything_is_built() {
        let year = 365 * 24 * 3600 * 1_000_000_000i64;
        let error = Buckets::new(0, year, 1, 0, 1_000_000).unwrap_err();
        assert!(
            error.0.contains("max-select-buckets limit exceeded"),
            "{error}"
        );
        assert!(Buckets::new(i64::MIN, i64::MAX, 1, 0, 10).is_err());
    }
}

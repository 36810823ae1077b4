//! InfluxQL's transformations, point by point along each series: `derivative`,
//! `non_negative_derivative`, `difference`, `non_negative_difference`, `cumulative_sum`,
//! `moving_average` and `elapsed`, over a field (raw points) or an aggregate (its `GROUP BY
//! time` buckets). The statement is first planned with each transformation's argument as a
//! hidden column; window functions over the series in time order then compute the
//! transformations, and a row none of them has a value for (a series' first point, a null
//! bucket) is dropped, as in InfluxDB 1.x.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    cast, lit, Case, Expr as DfExpr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder, WindowFrame,
    WindowFrameBound, WindowFrameUnits,
};
use datafusion::prelude::ident;

use super::{PlanError, MEASUREMENT_COLUMN};
use crate::ast::{Expr, Literal};

/// A transformation of one selected column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Transformation {
    kind: Kind,
    /// The hidden column holding its argument's value.
    pub(crate) input: String,
    /// The answer's column.
    pub(crate) output: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Change per `unit` nanoseconds; negative changes dropped if `non_negative`.
    Derivative {
        unit: i64,
        non_negative: bool,
    },
    Difference {
        non_negative: bool,
    },
    CumulativeSum,
    MovingAverage {
        points: u64,
    },
    /// Time since the previous point, in `unit` nanoseconds.
    Elapsed {
        unit: i64,
    },
}

/// Whether `name` is a transformation this module computes.
pub(crate) fn is_transformation(name: &str) -> bool {
    matches!(
        name,
        "derivative"
            | "non_negative_derivative"
            | "difference"
            | "non_negative_difference"
            | "cumulative_sum"
            | "moving_average"
            | "elapsed"
    )
}

impl Transformation {
    /// The transformation `name(args)` for the column `output`; its argument (the first of
    /// `args`) becomes the hidden column `input`.
    /// `interval`: the `GROUP BY time` interval, a derivative's unit when it names none (as in
    /// InfluxDB 1.x; one second over raw points).
    pub(crate) fn new(
        name: &str,
        args: &[Expr],
        (input, output): (String, String),
        interval: Option<i64>,
    ) -> Result<(Self, Expr), PlanError> {
        let arity = |min: usize, max: usize| {
            if (min..=max).contains(&args.len()) {
                Ok(())
            } else {
                Err(PlanError::new(format!(
                    "invalid number of arguments for {name}, expected {}, got {}",
                    if min == max {
                        min.to_string()
                    } else {
                        format!("{min} or {max}")
                    },
                    args.len()
                )))
            }
        };
        let duration = |default: i64| match args.get(1) {
            None => Ok(default),
            Some(Expr::Literal(Literal::Duration(ns))) if *ns > 0 => Ok(*ns),
            Some(other) => Err(PlanError::new(format!(
                "second argument to {name} must be a duration, got {other}"
            ))),
        };
        let kind = match name {
            "derivative" | "non_negative_derivative" => {
                arity(1, 2)?;
                Kind::Derivative {
                    unit: duration(interval.unwrap_or(1_000_000_000))?,
                    non_negative: name.starts_with("non_negative"),
                }
            }
            "difference" | "non_negative_difference" => {
                arity(1, 1)?;
                Kind::Difference {
                    non_negative: name.starts_with("non_negative"),
                }
            }
            "cumulative_sum" => {
                arity(1, 1)?;
                Kind::CumulativeSum
            }
            "moving_average" => {
                arity(2, 2)?;
                match &args[1] {
                    Expr::Literal(Literal::Integer(n)) if *n >= 1 => {
                        Kind::MovingAverage { points: *n as u64 }
                    }
                    other => {
                        return Err(PlanError::new(format!(
                            "moving_average window must be greater than 1, got {other}"
                        )))
                    }
                }
            }
            "elapsed" => {
                arity(1, 2)?;
                Kind::Elapsed { unit: duration(1)? }
            }
            other => return Err(PlanError::new(format!("{other}() is not supported yet"))),
        };
        Ok((
            Transformation {
                kind,
                input,
                output,
            },
            args[0].clone(),
        ))
    }
}

/// Aggregate `function` of `value` as a window function (its window set by the caller).
fn over(function: std::sync::Arc<datafusion::logical_expr::AggregateUDF>, value: DfExpr) -> DfExpr {
    DfExpr::WindowFunction(Box::new(
        datafusion::logical_expr::expr::WindowFunction::new(function, vec![value]),
    ))
}

fn frame(preceding: Option<u64>) -> WindowFrame {
    WindowFrame::new_bounds(
        WindowFrameUnits::Rows,
        WindowFrameBound::Preceding(ScalarValue::UInt64(preceding)),
        WindowFrameBound::CurrentRow,
    )
}

impl Transformation {
    /// How many buckets before a `GROUP BY time` range this transformation reads (the range's
    /// first bucket is computed from the one before it, as InfluxDB 1.x does; one, also for a
    /// moving average, whose first value then comes where it has enough points).
    pub(crate) fn lookback(&self) -> i64 {
        match self.kind {
            Kind::CumulativeSum => 0,
            _ => 1,
        }
    }
}

/// `plan` (measurement, time, `tags`, then `columns`, some of them transformations' hidden
/// inputs) with the transformations computed and the other columns kept; rows where every
/// transformation is null dropped.
pub(crate) fn apply(
    plan: LogicalPlan,
    tags: &[String],
    columns: &[String],
    transformations: &[Transformation],
) -> Result<LogicalPlan, PlanError> {
    use datafusion::functions_window::expr_fn::lag;
    let partition: Vec<DfExpr> = std::iter::once(MEASUREMENT_COLUMN)
        .chain(tags.iter().map(String::as_str))
        .map(ident)
        .collect();
    let in_order = |f: DfExpr| {
        f.partition_by(partition.clone())
            .order_by(vec![ident("time").sort(true, false)])
    };
    let as_float = |e: DfExpr| cast(e, DataType::Float64);
    let time_ns = cast(ident("time"), DataType::Int64);
    let mut windows = Vec::new();
    let mut outputs = Vec::new();
    for (i, t) in transformations.iter().enumerate() {
        let value = ident(t.input.as_str());
        let set = value.clone().is_not_null();
        let when_set = |e: DfExpr| {
            DfExpr::Case(Case::new(
                None,
                vec![(Box::new(set.clone()), Box::new(e))],
                None,
            ))
        };
        let (previous, previous_time) = (format!("__previous_{i}"), format!("__previous_time_{i}"));
        let previous_of = |e: DfExpr, name: &str| -> Result<DfExpr, PlanError> {
            Ok(in_order(lag(e, Some(1), None))
                .null_treatment(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls)
                .build()?
                .alias(name))
        };
        windows.push(previous_of(value.clone(), &previous)?);
        windows.push(previous_of(when_set(time_ns.clone()), &previous_time)?);
        let change = value.clone() - ident(previous.as_str());
        let elapsed = time_ns.clone() - ident(previous_time.as_str());
        let non_negative = |e: DfExpr| {
            DfExpr::Case(Case::new(
                None,
                vec![(Box::new(e.clone().gt_eq(lit(0))), Box::new(e))],
                None,
            ))
        };
        let output = match t.kind {
            Kind::Derivative {
                unit,
                non_negative: nn,
            } => {
                let rate = as_float(change) / (as_float(elapsed) / lit(unit as f64));
                if nn {
                    non_negative(rate)
                } else {
                    rate
                }
            }
            Kind::Difference { non_negative: nn } => {
                if nn {
                    non_negative(change)
                } else {
                    change
                }
            }
            Kind::Elapsed { unit } => elapsed / lit(unit),
            Kind::CumulativeSum => {
                let name = format!("__sum_{i}");
                windows.push(
                    in_order(over(
                        datafusion::functions_aggregate::sum::sum_udaf(),
                        value.clone(),
                    ))
                    .window_frame(frame(None))
                    .build()?
                    .alias(&name),
                );
                ident(name)
            }
            Kind::MovingAverage { points } => {
                let (mean, count) = (format!("__mean_{i}"), format!("__count_{i}"));
                let last_points = frame(Some(points - 1));
                windows.push(
                    in_order(over(
                        datafusion::functions_aggregate::average::avg_udaf(),
                        as_float(value.clone()),
                    ))
                    .window_frame(last_points.clone())
                    .build()?
                    .alias(&mean),
                );
                windows.push(
                    in_order(over(
                        datafusion::functions_aggregate::count::count_udaf(),
                        value.clone(),
                    ))
                    .window_frame(last_points)
                    .build()?
                    .alias(&count),
                );
                DfExpr::Case(Case::new(
                    None,
                    vec![(
                        Box::new(ident(count).eq(lit(points as i64))),
                        Box::new(ident(mean)),
                    )],
                    None,
                ))
            }
        };
        outputs.push((t.output.clone(), when_set(output)));
    }
    let mut projection: Vec<DfExpr> = std::iter::once(MEASUREMENT_COLUMN)
        .chain(std::iter::once("time"))
        .chain(tags.iter().map(String::as_str))
        .map(ident)
        .collect();
    for column in columns {
        match transformations.iter().position(|t| &t.input == column) {
            Some(i) => projection.push(outputs[i].1.clone().alias(&outputs[i].0)),
            None => projection.push(ident(column.as_str())),
        }
    }
    let any = transformations
        .iter()
        .map(|t| ident(t.output.as_str()).is_not_null())
        .reduce(DfExpr::or)
        .unwrap_or_else(|| lit(true));
    Ok(LogicalPlanBuilder::from(plan)
        .window(windows)?
        .project(projection)?
        .filter(any)?
        .build()?)
}

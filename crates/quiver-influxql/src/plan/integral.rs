//! `integral(field[, unit])`: the area under a series' points (trapezoids between neighbours,
//! in `unit`s, default 1s), per `GROUP BY time` bucket, as InfluxDB 1.x computes it.
//!
//! 1.x walks the points in time order: a trapezoid between two points of one bucket is that
//! bucket's; one that crosses a bucket's end is cut there (the value at the end interpolated
//! on the line between the two points): the part before the end is the earlier point's
//! bucket's, the whole rest (over any empty buckets between) the later point's bucket's. A
//! bucket is answered if it holds a point, except the series' last bucket when its last
//! point is exactly at the bucket's start. So each point brings its bucket the area from its
//! previous point (all of it, or the part after the previous point's bucket ended) and the
//! area up to its bucket's end when the next point is in a later bucket: two window
//! functions (`lag`, `lead`) and a sum per bucket. For an integer field 1.x's reducer draws
//! the carried-over trapezoid from the value at the bucket's end to the *previous* point's
//! value (its integer reducer overwrites the point's value with the interpolated one): the
//! same here, so that the answers agree.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::functions_aggregate::expr_fn::{max, sum};
use datafusion::functions_aggregate::min_max::max_udaf;
use datafusion::functions_window::expr_fn::{lag, lead};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::{
    cast, lit, when, Expr as DfExpr, ExprFunctionExt, LogicalPlan, TableSource,
};
use datafusion::prelude::ident;

use super::expr::{self, Columns, Resolved};
use super::select::{
    bucket, bucket_of, key_tags, scan, tag_key, timestamp, Grouping, OutputColumn,
};
use super::time_range::TimeRange;
use super::{PlanError, MEASUREMENT_COLUMN};
use crate::ast::{Expr, Literal};
use quiver_model::schema::FieldType;

/// A statement's `integral()` column.
pub(crate) struct Integral {
    field: Expr,
    /// Nanoseconds per unit of the answer's time axis.
    unit: i64,
}

impl Integral {
    /// The statement's `integral()`, if it selects one; it must be the only column.
    pub(crate) fn find(columns: &[OutputColumn]) -> Result<Option<Integral>, PlanError> {
        let Some(args) = columns.iter().find_map(|c| match &c.expr {
            Expr::Call { name, args } if name == "integral" => Some(args),
            _ => None,
        }) else {
            return Ok(None);
        };
        if columns.len() > 1 {
            return Err(PlanError::new(
                "integral() beside other columns is not supported yet",
            ));
        }
        let (field, unit) = match args.as_slice() {
            [field @ Expr::VarRef { .. }] => (field, 1_000_000_000),
            [field @ Expr::VarRef { .. }, Expr::Literal(Literal::Duration(ns))] if *ns > 0 => {
                (field, *ns)
            }
            [_, other] => {
                return Err(PlanError::new(format!(
                    "second argument must be a duration, got {other}"
                )))
            }
            _ => {
                return Err(PlanError::new(format!(
                    "invalid number of arguments for integral, expected 1 or 2, got {}",
                    args.len()
                )))
            }
        };
        Ok(Some(Integral {
            field: field.clone(),
            unit,
        }))
    }

    /// One measurement's integrals per series and bucket; `None` if the field is not one of
    /// its fields.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn part(
        &self,
        measurement: &str,
        table: &Arc<dyn TableSource>,
        cols: &Columns,
        column: &OutputColumn,
        grouping: &Grouping,
        range: TimeRange,
        rest: Option<&Expr>,
    ) -> Result<Option<LogicalPlan>, PlanError> {
        // for an integer field 1.x's next bucket's first trapezoid ends at the previous
        // point's value, not the point's (module docs)
        let (value, integer) = match &self.field {
            Expr::VarRef { name, data_type } => match cols.resolve(name, *data_type) {
                Resolved::Field(_, field_type) => (
                    expr::scalar(&self.field, cols)?,
                    data_type.is_none()
                        && matches!(field_type, FieldType::Integer | FieldType::UInteger),
                ),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let series: Vec<DfExpr> = grouping.tags.iter().map(|tag| tag_key(cols, tag)).collect();
        let neighbour = |f: DfExpr| -> Result<DfExpr, PlanError> {
            Ok(f.partition_by(series.clone())
                .order_by(vec![ident("time").sort(true, false)])
                .build()?)
        };
        let float = |e: DfExpr| cast(e, DataType::Float64);
        let ns = |e: DfExpr| float(cast(e, DataType::Int64));
        let window_start = |time: DfExpr| match grouping.interval {
            Some((interval, offset)) => ns(bucket_of(time, interval, offset)),
            None => lit(0.0),
        };
        let interval = grouping.interval.map_or(0.0, |(i, _)| i as f64);
        let unit = self.unit as f64;
        // a trapezoid from (t0, v0) to (t1, v1), in units
        let area = |t0: DfExpr, v0: DfExpr, t1: DfExpr, v1: DfExpr| {
            lit(0.5) * (v0 + v1) * (t1 - t0) / lit(unit)
        };
        // the value at `at` on the line from (t0, v0) to (t1, v1)
        let line = |t0: DfExpr, v0: DfExpr, t1: DfExpr, v1: DfExpr, at: DfExpr| {
            v0.clone() + (v1 - v0) * (at - t0.clone()) / (t1 - t0)
        };
        let (t, v) = (ns(ident("time")), ident("__v"));
        let (pt, pv) = (ns(ident("__prev_t")), ident("__prev_v"));
        let (nt, nv) = (ns(ident("__next_t")), ident("__next_v"));
        let own_end = window_start(ident("time")) + lit(interval);
        let prev_end = window_start(ident("__prev_t")) + lit(interval);
        let area_in = when(ident("__prev_t").is_null(), lit(0.0))
            .when(
                window_start(ident("__prev_t")).eq(window_start(ident("time"))),
                area(pt.clone(), pv.clone(), t.clone(), v.clone()),
            )
            .otherwise(area(
                prev_end.clone(),
                line(pt.clone(), pv.clone(), t.clone(), v.clone(), prev_end),
                t.clone(),
                match integer {
                    true => pv.clone(),
                    false => v.clone(),
                },
            ))?;
        let area_out = when(
            ident("__next_t")
                .is_null()
                .or(window_start(ident("__next_t")).eq(window_start(ident("time")))),
            lit(0.0),
        )
        .otherwise(area(
            t.clone(),
            v.clone(),
            own_end.clone(),
            line(t.clone(), v.clone(), nt, nv, own_end),
        ))?;
        let windows = vec![
            neighbour(lag(ident("time"), Some(1), None))?.alias("__prev_t"),
            neighbour(lag(ident("__v"), Some(1), None))?.alias("__prev_v"),
            neighbour(lead(ident("time"), Some(1), None))?.alias("__next_t"),
            neighbour(lead(ident("__v"), Some(1), None))?.alias("__next_v"),
        ];
        let mut keys: Vec<DfExpr> = vec![match grouping.interval {
            Some((interval, offset)) => bucket(interval, offset).alias("__bucket"),
            None => timestamp(0).alias("__bucket"),
        }];
        keys.extend(
            series
                .iter()
                .zip(&grouping.tags)
                .map(|(s, tag)| s.clone().alias(format!("__tag_{tag}"))),
        );
        let tag_keys: Vec<DfExpr> = grouping
            .tags
            .iter()
            .map(|tag| ident(format!("__tag_{tag}")))
            .collect();
        let series_last = DfExpr::from(WindowFunction::new(max_udaf(), vec![ident("__bucket")]))
            .partition_by(tag_keys)
            .build()?
            .alias("__series_last");
        // 1.x drops the series' last bucket when its last point is at the bucket's start
        let dropped = ident("__bucket")
            .eq(ident("__series_last"))
            .and(ident("__last_t").eq(ident("__bucket")));
        // without GROUP BY time 1.x answers at time 0, whatever the range
        let time = ident("__bucket");
        let mut projection = vec![
            lit(measurement.to_string()).alias(MEASUREMENT_COLUMN),
            time.alias("time"),
        ];
        projection.extend(key_tags(grouping));
        projection.push(ident("__integral").alias(&column.name));
        let plan = scan(measurement, table, cols, range, rest)?
            .filter(value.clone().is_not_null())?
            .project(
                vec![
                    ident("time"),
                    float(value).alias("__v"),
                    // the series' tags, for the windows and the grouping
                ]
                .into_iter()
                .chain(
                    series
                        .iter()
                        .zip(&grouping.tags)
                        .map(|(s, tag)| s.clone().alias(tag)),
                )
                .collect::<Vec<_>>(),
            )?
            .window(windows)?
            .aggregate(
                keys,
                vec![
                    sum(area_in + area_out).alias("__integral"),
                    max(ident("time")).alias("__last_t"),
                ],
            )?
            .window(vec![series_last])?
            .filter(datafusion::logical_expr::not(dropped))?
            .project(projection)?
            .build()?;
        Ok(Some(plan))
    }
}

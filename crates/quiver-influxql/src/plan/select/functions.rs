//! The catalogue of InfluxQL's functions as `SELECT` plans them: which are aggregates,
//! selectors, transformations not computed yet, or functions that answer rows of their own;
//! the field types an aggregate applies to; each aggregate's arguments (their number, the
//! field they name) and its DataFusion aggregate; and how a selector chooses its point.

use arrow::datatypes::DataType;
use datafusion::logical_expr::{cast, lit, Expr as DfExpr, ExprFunctionExt, SortExpr};
use datafusion::prelude::{ident, nullif};
use quiver_model::schema::FieldType;

use super::OutputColumn;
use crate::ast::Expr;
use crate::plan::expr::{self, Columns, Resolved};
use crate::plan::PlanError;

/// The function in `expr` that answers rows of its own (`distinct`, `top`, `bottom`,
/// `integral`), which a transformation cannot run along.
pub(super) fn rows_of_their_own(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Call { name, .. }
            if matches!(name.as_str(), "distinct" | "top" | "bottom" | "integral") =>
        {
            Some(name)
        }
        Expr::Call { args, .. } => args.iter().find_map(rows_of_their_own),
        Expr::Binary { lhs, rhs, .. } => rows_of_their_own(lhs).or_else(|| rows_of_their_own(rhs)),
        Expr::Paren(inner) => rows_of_their_own(inner),
        _ => None,
    }
}

pub(super) fn is_count(expr: &Expr) -> bool {
    matches!(expr, Expr::Call { name, .. } if name == "count")
}

/// Whether aggregate `function` applies to a field of `field_type` (for `mean(*)` and
/// friends, which skip the fields it does not).
pub(super) fn accepts(function: &str, field_type: FieldType) -> bool {
    let numeric = matches!(
        field_type,
        FieldType::Float | FieldType::Integer | FieldType::UInteger
    );
    match function {
        "count" | "first" | "last" | "distinct" | "mode" => true,
        "max" | "min" => numeric || field_type == FieldType::Boolean,
        _ => numeric,
    }
}

/// InfluxQL's aggregate and selector functions.
pub(super) fn is_aggregate_function(name: &str) -> bool {
    matches!(
        name,
        "count"
            | "sum"
            | "mean"
            | "median"
            | "mode"
            | "spread"
            | "stddev"
            | "min"
            | "max"
            | "first"
            | "last"
            | "percentile"
            | "distinct"
            | "top"
            | "bottom"
            | "sample"
            | "integral"
    )
}

/// Transformations not computed yet (the others are rewritten by
/// [`take_transformations`](super::take_transformations) before any of this sees them).
pub(super) fn is_transformation(name: &str) -> bool {
    matches!(
        name,
        "holt_winters"
            | "holt_winters_with_fit"
            | "exponential_moving_average"
            | "double_exponential_moving_average"
            | "triple_exponential_moving_average"
            | "relative_strength_index"
            | "chande_momentum_oscillator"
            | "kaufmans_efficiency_ratio"
            | "kaufmans_adaptive_moving_average"
            | "triple_exponential_derivative"
    )
}

pub(super) fn has_aggregate(expr: &Expr) -> bool {
    match expr {
        Expr::Call { name, args } => {
            is_aggregate_function(name) || is_transformation(name) || args.iter().any(has_aggregate)
        }
        Expr::Binary { lhs, rhs, .. } => has_aggregate(lhs) || has_aggregate(rhs),
        Expr::Paren(inner) => has_aggregate(inner),
        _ => false,
    }
}

/// The point a statement's only call chooses, when that call is a selector (first, last,
/// min, max, percentile): the answer's time, and its other selected columns, are that
/// point's.
pub(super) struct Selector {
    /// The selector's field.
    field: String,
    /// The order of the points it chooses among (those where the field is set).
    order: Vec<SortExpr>,
    /// Which of them, `None` for the first; `Some(n)`: the `percentile(field, n)` rank.
    percentile: Option<f64>,
}

impl Selector {
    pub(super) fn single(columns: &[OutputColumn]) -> Option<Selector> {
        let calls: Vec<&Expr> = columns
            .iter()
            .map(|c| &c.expr)
            .filter(|e| has_aggregate(e))
            .collect();
        let [Expr::Call { name, args }] = calls.as_slice() else {
            return None;
        };
        let Some(Expr::VarRef { name: field, .. }) = args.first() else {
            return None;
        };
        let time = ident("time");
        let value = ident(field.as_str());
        let (order, percentile) = match (name.as_str(), args.get(1)) {
            ("first", _) => (vec![time.sort(true, false)], None),
            ("last", _) => (vec![time.sort(false, false)], None),
            ("max", _) => (vec![value.sort(false, false), time.sort(true, false)], None),
            ("min", _) => (vec![value.sort(true, false), time.sort(true, false)], None),
            ("percentile", Some(n)) => (
                vec![value.sort(true, false), time.sort(true, false)],
                Some(percentile_rank(n).ok()?),
            ),
            _ => return None,
        };
        Some(Selector {
            field: field.clone(),
            order,
            percentile,
        })
    }

    /// `value` at the chosen point.
    pub(super) fn pick(&self, value: DfExpr) -> Result<DfExpr, PlanError> {
        let set = ident(self.field.as_str()).is_not_null();
        match self.percentile {
            None => Ok(
                datafusion::functions_aggregate::first_last::first_value_udaf()
                    .call(vec![value])
                    .order_by(self.order.clone())
                    .filter(set)
                    .build()?,
            ),
            Some(n) => nearest_rank(value, self.order.clone(), set, n),
        }
    }
}

/// `percentile()`'s second argument.
fn percentile_rank(arg: &Expr) -> Result<f64, PlanError> {
    match arg {
        Expr::Literal(crate::ast::Literal::Integer(i)) => Ok(*i as f64),
        Expr::Literal(crate::ast::Literal::Float(f)) => Ok(*f),
        other => Err(PlanError::new(format!(
            "expected float argument in percentile(), got {other}"
        ))),
    }
}

/// InfluxDB's nearest rank: `value` of the point at index `floor(count * n / 100 + 0.5)`
/// (1-based) of the points where `set` holds, in `order`; null below the first.
fn nearest_rank(
    value: DfExpr,
    order: Vec<SortExpr>,
    set: DfExpr,
    n: f64,
) -> Result<DfExpr, PlanError> {
    use datafusion::functions_nested::expr_fn::{array_element, cardinality};
    let sorted = datafusion::functions_aggregate::array_agg::array_agg_udaf()
        .call(vec![value])
        .order_by(order)
        .filter(set)
        .build()?;
    let index = cast(
        datafusion::functions::math::expr_fn::floor(
            cast(cardinality(sorted.clone()), DataType::Float64) * lit(n / 100.0) + lit(0.5),
        ),
        DataType::Int64,
    );
    Ok(array_element(sorted, index))
}

/// One aggregate call over a field.
pub(super) fn aggregate_call(
    name: &str,
    args: &[Expr],
    cols: &Columns,
) -> Result<DfExpr, PlanError> {
    use datafusion::functions_aggregate::expr_fn as agg;
    if is_transformation(name) || name == "sample" {
        return Err(PlanError::new(format!("{name}() is not supported yet")));
    }
    if name == "distinct" {
        return Err(PlanError::new(
            "aggregate function distinct() cannot be combined with other functions or fields",
        ));
    }
    let (field, rest) = match args {
        [Expr::Call {
            name: inner,
            args: inner_args,
        }, rest @ ..]
            if inner == "distinct" && name == "count" =>
        {
            let [field] = inner_args.as_slice() else {
                return Err(PlanError::new("distinct() takes one field"));
            };
            let value = field_value(field, cols)?;
            let _ = rest;
            return Ok(nullif(agg::count_distinct(value), lit(0i64)));
        }
        [field, rest @ ..] => (field_value(field, cols)?, rest),
        [] => {
            return Err(PlanError::new(format!(
                "invalid number of arguments for {name}, expected at least 1, got 0"
            )))
        }
    };
    let expect_args = |n: usize| {
        if rest.len() + 1 == n {
            Ok(())
        } else {
            Err(PlanError::new(format!(
                "invalid number of arguments for {name}, expected {n}, got {}",
                rest.len() + 1
            )))
        }
    };
    let float = |e: DfExpr| cast(e, DataType::Float64);
    let set = field.clone().is_not_null();
    Ok(match name {
        // a count of no points is a missing value, which fill() turns into 0 (or not)
        "count" => {
            expect_args(1)?;
            nullif(agg::count(field), lit(0i64))
        }
        "sum" => {
            expect_args(1)?;
            agg::sum(field)
        }
        "mean" => {
            expect_args(1)?;
            agg::avg(float(field))
        }
        "median" => {
            expect_args(1)?;
            agg::median(float(field))
        }
        "stddev" => {
            expect_args(1)?;
            agg::stddev(float(field))
        }
        "spread" => {
            expect_args(1)?;
            agg::max(field.clone()) - agg::min(field)
        }
        "min" => {
            expect_args(1)?;
            agg::min(field)
        }
        "max" => {
            expect_args(1)?;
            agg::max(field)
        }
        "first" | "last" => {
            expect_args(1)?;
            let ascending = name == "first";
            datafusion::functions_aggregate::first_last::first_value_udaf()
                .call(vec![field])
                .order_by(vec![ident("time").sort(ascending, false)])
                .filter(set)
                .build()?
        }
        "mode" => {
            expect_args(1)?;
            crate::plan::mode::mode(field, set)?
        }
        "percentile" => {
            expect_args(2)?;
            let n = percentile_rank(&rest[0])?;
            nearest_rank(field.clone(), vec![field.sort(true, false)], set, n)?
        }
        other => return Err(PlanError::new(format!("undefined function {other}()"))),
    })
}

/// The field an aggregate's argument names (with its `::type` cast), refusing anything else.
pub(super) fn field_value(arg: &Expr, cols: &Columns) -> Result<DfExpr, PlanError> {
    match arg {
        Expr::VarRef { name, data_type } => match cols.resolve(name, *data_type) {
            Resolved::Field(..) | Resolved::Missing => expr::scalar(arg, cols),
            Resolved::Tag(_) | Resolved::Time => Err(PlanError::new(format!(
                "expected field argument in aggregate, got tag or time {name}"
            ))),
        },
        other => Err(PlanError::new(format!(
            "expected field argument in aggregate, got {other}"
        ))),
    }
}

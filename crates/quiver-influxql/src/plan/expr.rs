//! InfluxQL expressions onto DataFusion's, against one measurement's columns: names resolved
//! to its tags and fields (`::tag` / `::field` choose; a name it lacks is a tag with the empty
//! value, as InfluxDB 1.x treats it), InfluxDB's arithmetic (`/` divides as floats), its math
//! functions, and `WHERE` conditions (a tag compares as `''` where a point lacks it; a field
//! comparison is false where the field is missing).

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{binary_expr, cast, lit, Expr as DfExpr, Operator};
use datafusion::prelude::{coalesce, ident};
use quiver_model::schema::{ColumnType, FieldType};
use std::ops::Not as _;

use super::PlanError;
use crate::ast::{BinaryOp, Expr, Literal, VarType};

/// Largest compiled regular expression a statement may use (the `regex` crate's size limit).
const MAX_REGEX_BYTES: usize = 1 << 20;

/// `pattern` compiled with a bounded size, or why not.
pub(crate) fn bounded_regex(pattern: &str) -> Result<regex::Regex, PlanError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| PlanError::new(format!("invalid regular expression /{pattern}/: {e}")))
}

/// What a name in a statement designates in one measurement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Resolved {
    /// The `time` column.
    Time,
    /// A tag column.
    Tag(String),
    /// A field column of a type.
    Field(String, FieldType),
    /// Nothing this measurement has.
    Missing,
}

/// One measurement's columns, as expressions are resolved against them.
pub(crate) struct Columns {
    schema: SchemaRef,
}

impl Columns {
    pub(crate) fn new(schema: SchemaRef) -> Self {
        Columns { schema }
    }

    /// What `name` (with an optional `::type`) designates.
    pub(crate) fn resolve(&self, name: &str, data_type: Option<VarType>) -> Resolved {
        if name == "time" {
            return Resolved::Time;
        }
        let kind = self
            .schema
            .field_with_name(name)
            .ok()
            .and_then(|f| ColumnType::from_arrow(f.name(), f.data_type()));
        match (kind, data_type) {
            (Some(ColumnType::Tag), None | Some(VarType::Tag)) => Resolved::Tag(name.into()),
            (Some(ColumnType::Field(_)), Some(VarType::Tag)) => Resolved::Missing,
            (Some(ColumnType::Field(t)), _) => Resolved::Field(name.into(), t),
            (Some(ColumnType::Tag), Some(_)) => Resolved::Missing,
            (Some(ColumnType::Time), _) => Resolved::Time,
            (None, _) => Resolved::Missing,
        }
    }

    /// The tag columns, sorted.
    pub(crate) fn tags(&self) -> Vec<String> {
        self.columns_of(|t| t == ColumnType::Tag)
    }

    /// The field columns and their types, sorted by name.
    pub(crate) fn fields(&self) -> Vec<(String, FieldType)> {
        let mut fields: Vec<(String, FieldType)> = self
            .schema
            .fields()
            .iter()
            .filter_map(|f| match ColumnType::from_arrow(f.name(), f.data_type()) {
                Some(ColumnType::Field(t)) => Some((f.name().clone(), t)),
                _ => None,
            })
            .collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        fields
    }

    fn columns_of(&self, keep: impl Fn(ColumnType) -> bool) -> Vec<String> {
        let mut names: Vec<String> = self
            .schema
            .fields()
            .iter()
            .filter(|f| ColumnType::from_arrow(f.name(), f.data_type()).is_some_and(&keep))
            .map(|f| f.name().clone())
            .collect();
        names.sort();
        names
    }
}

/// A tag's value as InfluxDB compares it: `''` where a point lacks the tag.
pub(crate) fn tag_value(name: &str) -> DfExpr {
    coalesce(vec![cast(ident(name), DataType::Utf8), lit("")])
}

/// A literal as a DataFusion value.
pub(crate) fn literal(value: &Literal) -> DfExpr {
    match value {
        Literal::Integer(i) => lit(*i),
        Literal::Unsigned(u) => lit(*u),
        Literal::Float(f) => lit(*f),
        Literal::String(s) => lit(s.clone()),
        Literal::Boolean(b) => lit(*b),
        Literal::Duration(ns) => lit(*ns),
    }
}

/// A value expression (a `SELECT` column of a raw query, or an argument): names, literals,
/// arithmetic and math functions.
pub(crate) fn scalar(expr: &Expr, columns: &Columns) -> Result<DfExpr, PlanError> {
    match expr {
        Expr::VarRef { name, data_type } => Ok(var_ref(columns, name, *data_type)),
        Expr::Literal(value) => Ok(literal(value)),
        Expr::Paren(inner) => scalar(inner, columns),
        Expr::Binary { op, lhs, rhs } => {
            let (l, r) = (scalar(lhs, columns)?, scalar(rhs, columns)?);
            arithmetic(*op, l, r).ok_or_else(|| {
                PlanError::new(format!(
                    "invalid operator {op} in a value expression: {expr}"
                ))
            })
        }
        Expr::Call { name, args } => math_call(name, args, columns),
        Expr::Wildcard { .. } | Expr::Regex(_) => Err(PlanError::new(format!(
            "unsupported expression: {expr} (a wildcard or regular expression selects columns, \
             it is not a value)"
        ))),
    }
}

/// A column reference, cast as `::float`, `::integer`, ... ask; `NULL` for a name the
/// measurement lacks.
fn var_ref(columns: &Columns, name: &str, data_type: Option<VarType>) -> DfExpr {
    let column = match columns.resolve(name, data_type) {
        Resolved::Time => ident("time"),
        Resolved::Tag(tag) => cast(ident(tag), DataType::Utf8),
        Resolved::Field(field, _) => ident(field),
        Resolved::Missing => return lit(ScalarValue::Null),
    };
    match data_type {
        Some(VarType::Float) => cast(column, DataType::Float64),
        Some(VarType::Integer) => cast(column, DataType::Int64),
        Some(VarType::Unsigned) => cast(column, DataType::UInt64),
        Some(VarType::String) => cast(column, DataType::Utf8),
        Some(VarType::Boolean) => cast(column, DataType::Boolean),
        _ => column,
    }
}

/// `l op r` for InfluxQL's arithmetic operators (`/` always divides as floats, as InfluxDB
/// does for integers); `None` for a comparison or logical operator.
pub(crate) fn arithmetic(op: BinaryOp, l: DfExpr, r: DfExpr) -> Option<DfExpr> {
    let op = match op {
        BinaryOp::Add => Operator::Plus,
        BinaryOp::Sub => Operator::Minus,
        BinaryOp::Mul => Operator::Multiply,
        BinaryOp::Div => {
            return Some(binary_expr(
                cast(l, DataType::Float64),
                Operator::Divide,
                cast(r, DataType::Float64),
            ))
        }
        BinaryOp::Mod => Operator::Modulo,
        BinaryOp::BitAnd => Operator::BitwiseAnd,
        BinaryOp::BitOr => Operator::BitwiseOr,
        BinaryOp::BitXor => Operator::BitwiseXor,
        _ => return None,
    };
    Some(binary_expr(l, op, r))
}

/// InfluxQL's math functions on a value.
fn math_call(name: &str, args: &[Expr], columns: &Columns) -> Result<DfExpr, PlanError> {
    use datafusion::functions::math::expr_fn as math;
    let values = args
        .iter()
        .map(|a| scalar(a, columns).map(|e| cast(e, DataType::Float64)))
        .collect::<Result<Vec<_>, _>>()?;
    let arity = |n: usize| {
        if values.len() == n {
            Ok(())
        } else {
            Err(PlanError::new(format!(
                "invalid number of arguments for {name}, expected {n}, got {}",
                values.len()
            )))
        }
    };
    let mut v = values.clone().into_iter();
    let mut next = || v.next().unwrap_or_else(|| lit(ScalarValue::Null));
    Ok(match name {
        "abs" | "sin" | "cos" | "tan" | "asin" | "acos" | "atan" | "exp" | "ln" | "log2"
        | "log10" | "sqrt" | "floor" | "ceil" | "round" => {
            arity(1)?;
            let x = next();
            match name {
                "abs" => math::abs(x),
                "sin" => math::sin(x),
                "cos" => math::cos(x),
                "tan" => math::tan(x),
                "asin" => math::asin(x),
                "acos" => math::acos(x),
                "atan" => math::atan(x),
                "exp" => math::exp(x),
                "ln" => math::ln(x),
                "log2" => math::log2(x),
                "log10" => math::log10(x),
                "sqrt" => math::sqrt(x),
                "floor" => math::floor(x),
                "ceil" => math::ceil(x),
                _ => math::round(vec![x]),
            }
        }
        "atan2" | "pow" | "log" => {
            arity(2)?;
            let (a, b) = (next(), next());
            match name {
                "atan2" => math::atan2(a, b),
                "pow" => math::power(a, b),
                // InfluxQL's log(x, base); DataFusion's log(base, x)
                _ => math::log(b, a),
            }
        }
        other => {
            return Err(PlanError::new(format!(
                "undefined function {other}() (or not allowed here)"
            )))
        }
    })
}

/// A `WHERE` condition (its time comparisons taken out before).
pub(crate) fn condition(expr: &Expr, columns: &Columns) -> Result<DfExpr, PlanError> {
    match expr {
        Expr::Paren(inner) => condition(inner, columns),
        Expr::Literal(Literal::Boolean(b)) => Ok(lit(*b)),
        Expr::Binary { op, lhs, rhs } => match op {
            BinaryOp::And => Ok(condition(lhs, columns)?.and(condition(rhs, columns)?)),
            BinaryOp::Or => Ok(condition(lhs, columns)?.or(condition(rhs, columns)?)),
            BinaryOp::EqRegex | BinaryOp::NotEqRegex => regex_match(*op, lhs, rhs, columns),
            BinaryOp::Eq
            | BinaryOp::NotEq
            | BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Gt
            | BinaryOp::GtEq => comparison(*op, lhs, rhs, columns),
            _ => Err(PlanError::new(format!("invalid condition: {expr}"))),
        },
        other => Err(PlanError::new(format!(
            "invalid condition: {other} (expected a comparison)"
        ))),
    }
}

fn comparison_operator(op: BinaryOp) -> Operator {
    match op {
        BinaryOp::Eq => Operator::Eq,
        BinaryOp::NotEq => Operator::NotEq,
        BinaryOp::Lt => Operator::Lt,
        BinaryOp::LtEq => Operator::LtEq,
        BinaryOp::Gt => Operator::Gt,
        _ => Operator::GtEq,
    }
}

/// One side of a comparison: a tag compares by its value (`''` where absent), a name the
/// measurement lacks as `''` too.
fn compared(expr: &Expr, columns: &Columns) -> Result<DfExpr, PlanError> {
    match expr {
        Expr::VarRef { name, data_type } => match columns.resolve(name, *data_type) {
            Resolved::Tag(tag) => Ok(tag_value(&tag)),
            Resolved::Missing => Ok(lit("")),
            _ => scalar(expr, columns),
        },
        Expr::Paren(inner) => compared(inner, columns),
        other => scalar(other, columns),
    }
}

fn comparison(
    op: BinaryOp,
    lhs: &Expr,
    rhs: &Expr,
    columns: &Columns,
) -> Result<DfExpr, PlanError> {
    if let Some(compared) = tag_equality(op, lhs, rhs, columns) {
        return Ok(compared);
    }
    // a missing field compares as NULL, which a filter takes as false
    let (l, r) = (compared(lhs, columns)?, compared(rhs, columns)?);
    Ok(binary_expr(l, comparison_operator(op), r))
}

/// `tag = 'v'` and `tag != 'v'` on the tag column itself (so that the scan's tag filters and
/// series pruning see them), with InfluxDB's rule that a point without the tag has `''`.
fn tag_equality(op: BinaryOp, lhs: &Expr, rhs: &Expr, columns: &Columns) -> Option<DfExpr> {
    let (name, value) = match (lhs, rhs) {
        (Expr::VarRef { name, data_type }, Expr::Literal(Literal::String(v)))
        | (Expr::Literal(Literal::String(v)), Expr::VarRef { name, data_type }) => {
            match columns.resolve(name, *data_type) {
                Resolved::Tag(tag) => (tag, v),
                _ => return None,
            }
        }
        _ => return None,
    };
    let tag = ident(name);
    Some(match (op, value.is_empty()) {
        (BinaryOp::Eq, false) => tag.eq(lit(value.clone())),
        (BinaryOp::Eq, true) => tag.clone().is_null().or(tag.eq(lit(""))),
        (BinaryOp::NotEq, false) => tag.clone().is_null().or(tag.not_eq(lit(value.clone()))),
        (BinaryOp::NotEq, true) => tag.clone().is_not_null().and(tag.not_eq(lit(""))),
        _ => return None,
    })
}

fn regex_match(
    op: BinaryOp,
    lhs: &Expr,
    rhs: &Expr,
    columns: &Columns,
) -> Result<DfExpr, PlanError> {
    let (value, pattern) = match (lhs, rhs) {
        (value, Expr::Regex(pattern)) | (Expr::Regex(pattern), value) => (value, pattern),
        _ => {
            return Err(PlanError::new(format!(
                "invalid condition: {lhs} {op} {rhs} (=~ and !~ need a /regular expression/)"
            )))
        }
    };
    let matches_empty = bounded_regex(pattern)?.is_match("");
    let like = |value: DfExpr| {
        datafusion::functions::regex::expr_fn::regexp_like(
            cast(value, DataType::Utf8),
            lit(pattern.clone()),
            None,
        )
    };
    // a tag a point lacks is `''`: it matches if the expression matches the empty string
    let matched = match value {
        Expr::VarRef { name, data_type } => match columns.resolve(name, *data_type) {
            Resolved::Tag(tag) if matches_empty => {
                ident(tag.as_str()).is_null().or(like(ident(tag.as_str())))
            }
            Resolved::Tag(tag) => like(ident(tag)),
            _ => like(compared(value, columns)?),
        },
        other => like(compared(other, columns)?),
    };
    Ok(match op {
        BinaryOp::EqRegex => matched,
        _ => matched.not(),
    })
}

/// The column name InfluxDB 1.x gives a selected expression without an alias: a call's
/// function name, a name's own, an operation's names joined by `_` (`usage + idle` is
/// `usage_idle`, `usage * 2 + 1` is `usage`).
pub(crate) fn column_name(expr: &Expr) -> String {
    fn names(expr: &Expr, out: &mut Vec<String>) {
        match expr {
            Expr::VarRef { name, .. } | Expr::Call { name, .. } => out.push(name.clone()),
            Expr::Paren(inner) => names(inner, out),
            Expr::Binary { lhs, rhs, .. } => {
                names(lhs, out);
                names(rhs, out);
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    names(expr, &mut found);
    found.join("_")
}

//! Comparisons of a `Float64` column with a number in filters, in one pass:
//! [`FloatCompareRule`] puts [`FloatCompareExpr`] in place of `field > 90.0` and the like
//! inside `FilterExec` predicates.
//!
//! DataFusion compares floats with Arrow's total-order kernels after rewriting `-0.0` to
//! `0.0` (SQL says they are equal; total order says they are not): a scan of the column for
//! `-0.0`, then a comparison through `f64::total_cmp`. For `count(*) WHERE usage_user > 90`
//! over a million rows those two passes were most of the query. `FloatCompareExpr` gives the
//! same answer in one branch-free pass: IEEE 754 comparison (where `-0.0 = 0.0` already),
//! except that a NaN sorts as total order puts it, a NaN with the sign bit clear above every
//! number and one with the sign bit set below every number (PostgreSQL likewise puts NaN
//! above every number). Only comparisons with a number that is not NaN are replaced.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::array::{Array, AsArray, BooleanArray};
use arrow::buffer::{BooleanBuffer, Buffer};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::ExecutionPlan;

use crate::plan_nodes::{only_child, rewrite_nodes};

/// The physical rule that puts [`FloatCompareExpr`] in filter predicates (module docs).
#[derive(Debug, Default)]
pub struct FloatCompareRule;

impl PhysicalOptimizerRule for FloatCompareRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        rewrite_nodes(plan, |filter: &FilterExec, _| {
            let schema = filter.input().schema();
            let predicate = filter
                .predicate()
                .clone()
                .transform_up(|expr| Ok(replace(expr, &schema)))?;
            if !predicate.transformed {
                return Ok(None);
            }
            // the same filter (projection, selectivity, batch size, fetch), new predicate
            let rewritten = FilterExecBuilder::from(filter)
                .with_predicate(predicate.data)
                .build()?;
            Ok(Some(Arc::new(rewritten) as Arc<dyn ExecutionPlan>))
        })
    }

    fn name(&self) -> &str {
        "quiver_float_compare"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `expr` as a [`FloatCompareExpr`] if it compares a `Float64` column with a number that is
/// not NaN.
fn replace(expr: Arc<dyn PhysicalExpr>, schema: &Schema) -> Transformed<Arc<dyn PhysicalExpr>> {
    let Some(binary) = expr.downcast_ref::<BinaryExpr>() else {
        return Transformed::no(expr);
    };
    let number = |e: &Arc<dyn PhysicalExpr>| match e.downcast_ref::<Literal>()?.value() {
        ScalarValue::Float64(Some(v)) if !v.is_nan() => Some(*v),
        _ => None,
    };
    let column = |e: &Arc<dyn PhysicalExpr>| {
        let column = e.downcast_ref::<Column>()?;
        (schema.fields().get(column.index())?.data_type() == &DataType::Float64).then(|| e.clone())
    };
    let op = *binary.op();
    let (column, op, number) = match (column(binary.left()), number(binary.right())) {
        (Some(c), Some(n)) => (c, op, n),
        _ => match (number(binary.left()), column(binary.right())) {
            (Some(n), Some(c)) => match op.swap() {
                Some(swapped) => (c, swapped, n),
                None => return Transformed::no(expr),
            },
            _ => return Transformed::no(expr),
        },
    };
    let Some(comparison) = Comparison::of(op) else {
        return Transformed::no(expr);
    };
    Transformed::yes(Arc::new(FloatCompareExpr {
        column,
        comparison,
        number: number.to_bits(),
    }))
}

/// The comparisons [`FloatCompareExpr`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Comparison {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl Comparison {
    fn of(op: Operator) -> Option<Self> {
        Some(match op {
            Operator::Eq => Comparison::Eq,
            Operator::NotEq => Comparison::NotEq,
            Operator::Lt => Comparison::Lt,
            Operator::LtEq => Comparison::LtEq,
            Operator::Gt => Comparison::Gt,
            Operator::GtEq => Comparison::GtEq,
            _ => return None,
        })
    }

    fn operator(self) -> Operator {
        match self {
            Comparison::Eq => Operator::Eq,
            Comparison::NotEq => Operator::NotEq,
            Comparison::Lt => Operator::Lt,
            Comparison::LtEq => Operator::LtEq,
            Comparison::Gt => Operator::Gt,
            Comparison::GtEq => Operator::GtEq,
        }
    }

    /// `value <op> number` for every value, `number` not being NaN (module docs). One loop
    /// per operator, so that each is a branch-free pass the compiler can vectorize.
    fn over(self, values: &[f64], number: f64) -> BooleanBuffer {
        match self {
            Comparison::Eq => collect(values, |v| v == number),
            Comparison::NotEq => collect(values, |v| v != number),
            Comparison::Lt => collect(values, |v| (v < number) | nan_below(v)),
            Comparison::LtEq => collect(values, |v| (v <= number) | nan_below(v)),
            Comparison::Gt => collect(values, |v| (v > number) | nan_above(v)),
            Comparison::GtEq => collect(values, |v| (v >= number) | nan_above(v)),
        }
    }

    /// `value <op> number` for one value.
    fn holds(self, value: f64, number: f64) -> bool {
        self.over(&[value], number).value(0)
    }
}

/// The bits of `+inf`; a NaN with the sign bit clear has bits above them.
const POSITIVE_INFINITY_BITS: u64 = 0x7ff0_0000_0000_0000;
/// The bits of `-inf`; a NaN with the sign bit set has bits above them.
const NEGATIVE_INFINITY_BITS: u64 = 0xfff0_0000_0000_0000;
/// The sign bit.
const SIGN_BIT: u64 = 0x8000_0000_0000_0000;

/// A NaN that total order puts above every number (sign bit clear).
#[inline(always)]
fn nan_above(v: f64) -> bool {
    let bits = v.to_bits();
    (bits > POSITIVE_INFINITY_BITS) & (bits < SIGN_BIT)
}

/// A NaN that total order puts below every number (sign bit set).
#[inline(always)]
fn nan_below(v: f64) -> bool {
    v.to_bits() > NEGATIVE_INFINITY_BITS
}

/// Whether `holds` for each value, packed 64 values to a word over exact chunks (no bounds
/// check per value, so the loop vectorizes; Arrow's `collect_bool` indexes each value).
#[inline(always)]
fn collect(values: &[f64], holds: impl Fn(f64) -> bool) -> BooleanBuffer {
    let pack = |chunk: &[f64]| {
        chunk
            .iter()
            .enumerate()
            .fold(0u64, |word, (bit, &v)| word | (u64::from(holds(v)) << bit))
    };
    let chunks = values.chunks_exact(64);
    let rest = chunks.remainder();
    let mut words: Vec<u64> = chunks.map(pack).collect();
    if !rest.is_empty() {
        words.push(pack(rest));
    }
    BooleanBuffer::new(Buffer::from_vec(words), 0, values.len())
}

/// `column <op> number` over a `Float64` column (module docs).
#[derive(Debug, Clone)]
pub struct FloatCompareExpr {
    column: Arc<dyn PhysicalExpr>,
    comparison: Comparison,
    /// The number's bits (so that the expression is `Eq` and `Hash`); never a NaN.
    number: u64,
}

impl PartialEq for FloatCompareExpr {
    fn eq(&self, other: &Self) -> bool {
        self.column.as_ref() == other.column.as_ref()
            && self.comparison == other.comparison
            && self.number == other.number
    }
}

impl Eq for FloatCompareExpr {}

impl Hash for FloatCompareExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.column.hash(state);
        self.comparison.hash(state);
        self.number.hash(state);
    }
}

impl fmt::Display for FloatCompareExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = f64::from_bits(self.number);
        write!(
            f,
            "{} {} {number:?}",
            self.column,
            self.comparison.operator()
        )
    }
}

impl PhysicalExpr for FloatCompareExpr {
    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        let nullable = self.column.nullable(input_schema)?;
        Ok(Arc::new(Field::new("", DataType::Boolean, nullable)))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let number = f64::from_bits(self.number);
        let comparison = self.comparison;
        match self.column.evaluate(batch)? {
            ColumnarValue::Array(array) => {
                let values = array.as_primitive_opt::<Float64Type>().ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "FloatCompareExpr over {}, not Float64",
                        array.data_type()
                    ))
                })?;
                let bits = comparison.over(values.values(), number);
                let nulls = values.nulls().cloned();
                Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
                    bits, nulls,
                ))))
            }
            ColumnarValue::Scalar(ScalarValue::Float64(value)) => Ok(ColumnarValue::Scalar(
                ScalarValue::Boolean(value.map(|v| comparison.holds(v, number))),
            )),
            ColumnarValue::Scalar(other) => Err(DataFusionError::Internal(format!(
                "FloatCompareExpr over {other:?}, not Float64"
            ))),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.column]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(FloatCompareExpr {
            column: only_child(children, "FloatCompareExpr")?,
            comparison: self.comparison,
            number: self.number,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Float64Array;
    use datafusion::physical_expr::expressions::{binary, col, lit};
    use proptest::prelude::*;

    const OPERATORS: [Operator; 6] = [
        Operator::Eq,
        Operator::NotEq,
        Operator::Lt,
        Operator::LtEq,
        Operator::Gt,
        Operator::GtEq,
    ];

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, true)]))
    }

    /// DataFusion's answer and ours to `v <op> number` (or `number <op> v`) over `values`.
    fn answers(
        values: &[Option<f64>],
        op: Operator,
        number: f64,
        number_first: bool,
    ) -> (ArrayAnswer, ArrayAnswer) {
        let schema = schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Float64Array::from(values.to_vec()))],
        )
        .unwrap();
        let (left, right) = if number_first {
            (lit(number), col("v", &schema).unwrap())
        } else {
            (col("v", &schema).unwrap(), lit(number))
        };
        let plain = binary(left, op, right, &schema).unwrap();
        let ours = replace(plain.clone(), &schema);
        assert!(ours.transformed, "{plain} was not replaced");
        let run = |e: &Arc<dyn PhysicalExpr>| -> ArrayAnswer {
            let out = e
                .evaluate(&batch)
                .unwrap()
                .into_array(values.len())
                .unwrap();
            out.as_boolean().iter().collect()
        };
        (run(&plain), run(&ours.data))
    }

    type ArrayAnswer = Vec<Option<bool>>;

    fn special() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::NAN),
            Just(-f64::NAN),
            Just(90.0),
            -100.0f64..100.0,
        ]
    }

    proptest! {
        #[test]
        fn answers_as_datafusion_does(
            values in prop::collection::vec(prop::option::weighted(0.9, special()), 0..200),
            op in prop::sample::select(OPERATORS.to_vec()),
            number in special().prop_filter("a number", |n| !n.is_nan()),
            number_first in any::<bool>(),
        ) {
            let (expected, actual) = answers(&values, op, number, number_first);
            prop_assert_eq!(actual, expected);
        }
    }

    #[test]
    fn leaves_nan_other_types_and_other_operators_alone() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Float64, true),
            Field::new("i", DataType::Int64, true),
        ]));
        let v = || col("v", &schema).unwrap();
        for expr in [
            binary(v(), Operator::Gt, lit(f64::NAN), &schema).unwrap(),
            binary(col("i", &schema).unwrap(), Operator::Gt, lit(3i64), &schema).unwrap(),
            binary(v(), Operator::Plus, lit(1.0), &schema).unwrap(),
            binary(v(), Operator::Gt, v(), &schema).unwrap(),
        ] {
            assert!(!replace(expr.clone(), &schema).transformed, "{expr}");
        }
    }
}

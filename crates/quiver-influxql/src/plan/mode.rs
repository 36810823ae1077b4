//! `mode(field)`: the most frequent value of a bucket; of equally frequent values, the
//! smallest.
//!
//! InfluxDB 1.x breaks ties by where its unstable sort (Go's `sort.Sort` by value alone) happens
//! to leave equal values, which depends on the order points arrive in: no rule to match. The
//! smallest value is a rule a user can rely on (docs/protocols.md, deliberate differences).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::Result;
use datafusion::functions_aggregate::array_agg::array_agg_udaf;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprFunctionExt, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::PlanError;

/// The mode of `field` over the points where `set` holds (module docs).
pub(crate) fn mode(field: Expr, set: Expr) -> Result<Expr, PlanError> {
    let values = array_agg_udaf()
        .call(vec![field.clone()])
        .order_by(vec![field.sort(true, false)])
        .filter(set)
        .build()?;
    Ok(Arc::new(ScalarUDF::new_from_impl(ModeOfSorted::default())).call(vec![values]))
}

/// `influxql_mode(values)`: the mode of each row's list of values, sorted.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ModeOfSorted {
    signature: Signature,
}

impl Default for ModeOfSorted {
    fn default() -> Self {
        ModeOfSorted {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ModeOfSorted {
    fn name(&self) -> &str {
        "influxql_mode"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first() {
            Some(DataType::List(field) | DataType::LargeList(field)) => {
                Ok(field.data_type().clone())
            }
            other => exec_err!("influxql_mode takes a list of values, got {other:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [values] = arrays.as_slice() else {
            return exec_err!("influxql_mode takes a list of values");
        };
        let element = self.return_type(&[values.data_type().clone()])?;
        let values = values.as_list::<i32>();
        let modes = (0..values.len().min(rows.max(1)))
            .map(|row| match values.is_null(row) {
                true => ScalarValue::try_from(&element),
                false => mode_of_sorted(&values.value(row), &element),
            })
            .collect::<Result<Vec<_>>>()?;
        if modes.is_empty() {
            return Ok(ColumnarValue::Array(arrow::array::new_empty_array(
                &element,
            )));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(modes)?))
    }
}

/// The first of the longest runs of equal values in sorted `values` (null if none).
fn mode_of_sorted(values: &ArrayRef, element: &DataType) -> Result<ScalarValue> {
    let runs = arrow::compute::partition(std::slice::from_ref(values))?.ranges();
    // the first longest run: `max_by_key` would take the last of equal lengths
    let longest = runs.iter().rev().max_by_key(|run| run.len());
    match longest {
        Some(run) => ScalarValue::try_from_array(values, run.start),
        None => ScalarValue::try_from(element),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, StringArray};

    fn floats(v: &[f64]) -> ArrayRef {
        Arc::new(Float64Array::from(v.to_vec()))
    }

    #[test]
    fn the_most_frequent_value_and_the_smallest_of_a_tie() {
        let mode = mode_of_sorted(&floats(&[1.0, 2.0, 2.0, 2.0, 3.0, 3.0]), &DataType::Float64);
        assert_eq!(mode.unwrap(), ScalarValue::Float64(Some(2.0)));
        let mode = mode_of_sorted(&floats(&[1.0, 1.0, 2.0, 2.0]), &DataType::Float64);
        assert_eq!(mode.unwrap(), ScalarValue::Float64(Some(1.0)));
        let mode = mode_of_sorted(&floats(&[1.0, 2.0, 3.0, 5.0]), &DataType::Float64);
        assert_eq!(mode.unwrap(), ScalarValue::Float64(Some(1.0)));
        let strings: ArrayRef = Arc::new(StringArray::from(vec!["x", "y", "y"]));
        let mode = mode_of_sorted(&strings, &DataType::Utf8);
        assert_eq!(mode.unwrap(), ScalarValue::Utf8(Some("y".into())));
        let mode = mode_of_sorted(&floats(&[]), &DataType::Float64);
        assert_eq!(mode.unwrap(), ScalarValue::Float64(None));
    }
}

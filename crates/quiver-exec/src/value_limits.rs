//! Functions whose arguments decide how much they produce (`repeat('x', 2000000000)`,
//! `lpad`, `array_repeat`, `generate_series`/`range` as values) are capped: before one runs,
//! the bytes it would produce for the batch are estimated from its arguments, and past
//! `max_value_bytes` the query fails with [`ValueTooLarge`] instead of allocating. DataFusion's
//! memory pool does not see function outputs (apache/datafusion#12919), so without this a
//! single call can take the process down.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, FieldRef, IntervalMonthDayNanoType, IntervalUnit, TimeUnit};
use datafusion::common::Result;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature,
};
use datafusion::prelude::SessionContext;

/// A function call that would produce more than a value (or a batch) may hold.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{function}() would produce {bytes} bytes {scope}, more than the {limit} bytes allowed \
     ({setting})"
)]
pub struct ValueTooLarge {
    /// The function.
    pub function: String,
    /// The bytes it would have produced (estimated from its arguments).
    pub bytes: u64,
    /// `for one value`, or `for one batch of N rows`.
    pub scope: String,
    /// The limit.
    pub limit: u64,
    /// The setting that sets the limit.
    pub setting: &'static str,
}

/// How a capped function's output size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(text, n)`: the text's bytes times `n`.
    Repeat,
    /// `lpad`/`rpad(text, n[, fill])`: `n` characters.
    Pad,
    /// `array_repeat(element, n)`: `n` elements.
    ArrayRepeat,
    /// `generate_series`/`range(start, stop[, step])`: one 8-byte element per step.
    Series,
}

const CAPPED: [(&str, Growth); 6] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("array_repeat", Growth::ArrayRepeat),
    ("generate_series", Growth::Series),
    ("range", Growth::Series),
];

/// The most a capped function may produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutputLimits {
    /// Bytes of one value (`max_value_bytes`, at most `query_memory_bytes`).
    pub value: u64,
    /// Bytes of one call's output over a batch (`query_memory_bytes`).
    pub batch: u64,
}

/// Whether `name` is a function whose output this server caps (executors elsewhere would run
/// it uncapped).
pub fn is_capped(name: &str) -> bool {
    CAPPED.iter().any(|(capped, _)| *capped == name)
}

/// Replaces the session's capped functions with versions that refuse outputs over `limits`.
pub fn cap_functions(ctx: &SessionContext, limits: OutputLimits) {
    for (name, growth) in CAPPED {
        if let Ok(inner) = ctx.udf(name) {
            let capped = Capped {
                inner: inner.as_ref().clone(),
                growth,
                limits,
            };
            ctx.register_udf(ScalarUDF::new_from_impl(capped));
        }
    }
}

/// A function with its output capped.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Capped {
    inner: ScalarUDF,
    growth: Growth,
    limits: OutputLimits,
}

impl Capped {
    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        // a scalar argument is one value used for every row: never expanded to the batch
        let arrays = args
            .args
            .iter()
            .map(|arg| match arg {
                ColumnarValue::Array(array) => Ok(array.clone()),
                ColumnarValue::Scalar(scalar) => scalar.to_array_of_size(1),
            })
            .collect::<Result<Vec<_>>>()?;
        let rows = arrays.iter().map(|a| a.len()).max().unwrap_or(0);
        let per_row = estimate(self.growth, &arrays, rows)?;
        let largest = per_row.iter().copied().max().unwrap_or(0);
        let total = per_row.iter().fold(0u64, |sum, &b| sum.saturating_add(b));
        let too_large = |bytes, scope, limit, setting| {
            datafusion::error::DataFusionError::External(Box::new(ValueTooLarge {
                function: self.inner.name().to_string(),
                bytes,
                scope,
                limit,
                setting,
            }))
        };
        if largest > self.limits.value {
            let scope = "for one value".to_string();
            return Err(too_large(
                largest,
                scope,
                self.limits.value,
                "max_value_bytes",
            ));
        }
        if total > self.limits.batch {
            let scope = format!("for one batch of {rows} rows");
            return Err(too_large(
                total,
                scope,
                self.limits.batch,
                "query_memory_bytes",
            ));
        }
        Ok(())
    }
}

impl ScalarUDFImpl for Capped {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn is_strict(&self) -> bool {
        self.inner.inner().is_strict()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.check(&args)?;
        self.inner.invoke_with_args(args)
    }
}

/// The bytes a call produces for each of `rows` rows of `args` (an argument of one value
/// stands for every row). A lower bound: what matters is that it is not wildly under.
fn estimate(growth: Growth, args: &[ArrayRef], rows: usize) -> Result<Vec<u64>> {
    let (Some(first), second) = (args.first(), args.get(1)) else {
        return Ok(Vec::new());
    };
    Ok(match (growth, second) {
        (Growth::Repeat, Some(count)) => {
            let (lengths, counts) = (text_bytes(first)?, integers(count)?);
            (0..rows)
                .map(|i| at(&lengths, i).saturating_mul(at(&counts, i).max(0) as u64))
                .collect()
        }
        (Growth::Pad, Some(count)) => {
            let counts = integers(count)?;
            (0..rows).map(|i| at(&counts, i).max(0) as u64).collect()
        }
        (Growth::ArrayRepeat, Some(count)) => {
            let element_bytes = element_bytes(first);
            let counts = integers(count)?;
            (0..rows)
                .map(|i| (at(&counts, i).max(0) as u64).saturating_mul(element_bytes))
                .collect()
        }
        (Growth::Series, _) => {
            let series = series_bytes(args)?;
            (0..rows).map(|i| at(&series, i)).collect()
        }
        _ => Vec::new(),
    })
}

/// Row `i` of per-row values, or the one value of an argument given once.
fn at<T: Copy + Default>(values: &[T], i: usize) -> T {
    match values {
        [one] => *one,
        _ => values.get(i).copied().unwrap_or_default(),
    }
}

/// The bytes of one element of `array`: its type's width, or its rows' bytes per row (a
/// slice counting only its own rows), at least 1.
fn element_bytes(array: &ArrayRef) -> u64 {
    if let Some(width) = array.data_type().primitive_width() {
        return width as u64;
    }
    let bytes = array
        .to_data()
        .get_slice_memory_size()
        .unwrap_or_else(|_| array.get_array_memory_size());
    (bytes / array.len().max(1)).max(1) as u64
}

/// Each row's text length in bytes (0 for null).
fn text_bytes(array: &ArrayRef) -> Result<Vec<u64>> {
    let text = arrow::compute::cast(array, &DataType::LargeUtf8)?;
    let text = text.as_string::<i64>();
    Ok((0..text.len())
        .map(|i| {
            if text.is_null(i) {
                0
            } else {
                text.value_length(i) as u64
            }
        })
        .collect())
}

/// Each row as a 64-bit integer (0 for null).
fn integers(array: &ArrayRef) -> Result<Vec<i64>> {
    let values = arrow::compute::cast(array, &DataType::Int64)?;
    let values = values.as_primitive::<arrow::datatypes::Int64Type>();
    Ok((0..values.len())
        .map(|i| {
            if values.is_null(i) {
                0
            } else {
                values.value(i)
            }
        })
        .collect())
}

/// The bytes of each row's series: `(start, stop, step)`, `(start, stop)` or `(stop)`.
fn series_bytes(args: &[ArrayRef]) -> Result<Vec<u64>> {
    let Some(first) = args.first() else {
        return Ok(Vec::new());
    };
    let rows = args.iter().map(|a| a.len()).max().unwrap_or(0);
    let (start, stop) = match args {
        [stop] => (vec![0], instants(stop)?),
        [start, stop, ..] => (instants(start)?, instants(stop)?),
        [] => return Ok(Vec::new()),
    };
    let step = match args.get(2) {
        Some(step) => steps(step)?,
        None if matches!(first.data_type(), DataType::Int64 | DataType::Int32) => vec![1],
        // a series of dates or times needs a step; DataFusion will say so
        None => return Ok(vec![0]),
    };
    Ok((0..rows)
        .map(|i| {
            let span = at(&stop, i).abs_diff(at(&start, i));
            let step = at(&step, i).unsigned_abs().max(1);
            (span / step).saturating_add(1).saturating_mul(8)
        })
        .collect())
}

/// Integers as they are; dates and timestamps in nanoseconds.
fn instants(array: &ArrayRef) -> Result<Vec<i64>> {
    let nanos_per = |unit: &TimeUnit| match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    };
    let scale: i64 = match array.data_type() {
        DataType::Timestamp(unit, _) => nanos_per(unit),
        DataType::Date32 => 86_400_000_000_000,
        DataType::Date64 => 1_000_000,
        _ => 1,
    };
    let values = match array.data_type() {
        DataType::Timestamp(unit, _) => {
            let plain = arrow::compute::cast(array, &DataType::Timestamp(*unit, None))?;
            integers(&arrow::compute::cast(&plain, &DataType::Int64)?)?
        }
        DataType::Date32 => integers(&arrow::compute::cast(array, &DataType::Int32)?)?,
        DataType::Date64 => integers(&arrow::compute::cast(array, &DataType::Int64)?)?,
        _ => integers(array)?,
    };
    Ok(values.iter().map(|v| v.saturating_mul(scale)).collect())
}

/// Steps as integers, or intervals in nanoseconds (a month counted as 30 days).
fn steps(array: &ArrayRef) -> Result<Vec<i64>> {
    if !matches!(array.data_type(), DataType::Interval(_)) {
        return integers(array);
    }
    let intervals = arrow::compute::cast(array, &DataType::Interval(IntervalUnit::MonthDayNano))?;
    let intervals = intervals.as_primitive::<IntervalMonthDayNanoType>();
    const DAY: i64 = crate::bucket_expr::NANOS_PER_DAY;
    Ok((0..intervals.len())
        .map(|i| {
            let v = intervals.value(i);
            (v.months as i64)
                .saturating_mul(30 * DAY)
                .saturating_add((v.days as i64).saturating_mul(DAY))
                .saturating_add(v.nanoseconds)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, IntervalMonthDayNanoArray, StringArray};
    use arrow::datatypes::IntervalMonthDayNano;

    use super::*;

    #[test]
    fn one_value_stands_for_every_row_and_rows_are_estimated_apart() {
        let text: ArrayRef = Arc::new(StringArray::from(vec!["abc"]));
        let counts: ArrayRef = Arc::new(Int64Array::from(vec![1, 10, -5]));
        let bytes = estimate(Growth::Repeat, &[text, counts], 3).unwrap();
        assert_eq!(bytes, vec![3, 30, 0]);
        let count: ArrayRef = Arc::new(Int64Array::from(vec![4]));
        let element: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        assert_eq!(
            estimate(Growth::ArrayRepeat, &[element, count], 2).unwrap(),
            vec![32, 32]
        );
    }

    #[test]
    fn series_sizes_follow_their_bounds_and_steps_without_overflow() {
        let start: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        let stop: ArrayRef = Arc::new(Int64Array::from(vec![1000]));
        let step: ArrayRef = Arc::new(Int64Array::from(vec![10]));
        assert_eq!(
            series_bytes(&[start.clone(), stop.clone()]).unwrap(),
            vec![8000]
        );
        assert_eq!(series_bytes(&[start, stop, step]).unwrap(), vec![800]);
        let huge: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(vec![
            IntervalMonthDayNano::new(i32::MAX, i32::MAX, i64::MAX),
        ]));
        assert_eq!(steps(&huge).unwrap(), vec![i64::MAX]);
    }
}

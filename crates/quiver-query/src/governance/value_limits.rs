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

/// A function call that would produce more than one value may hold.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{function}() would produce {bytes} bytes, more than the {limit} bytes one value may hold \
     (max_value_bytes, at most query_memory_bytes)"
)]
pub struct ValueTooLarge {
    /// The function.
    pub function: String,
    /// The bytes it would have produced (estimated from its arguments).
    pub bytes: u64,
    /// The limit.
    pub limit: u64,
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

/// Replaces the session's capped functions with versions that refuse outputs over `limit`
/// bytes.
pub(crate) fn cap_functions(ctx: &SessionContext, limit: u64) {
    for (name, growth) in CAPPED {
        if let Ok(inner) = ctx.udf(name) {
            let capped = Capped {
                inner: inner.as_ref().clone(),
                growth,
                limit,
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
    limit: u64,
}

impl Capped {
    fn check(&self, args: &ScalarFunctionArgs) -> Result<()> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        // estimated per row over arrays of at most one batch; scalars count once
        let rows = if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            1
        } else {
            args.number_rows
        };
        let bytes = estimate(self.growth, &arrays, rows)?;
        if bytes > self.limit {
            return Err(datafusion::error::DataFusionError::External(Box::new(
                ValueTooLarge {
                    function: self.inner.name().to_string(),
                    bytes,
                    limit: self.limit,
                },
            )));
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

/// The bytes a call produces for `rows` rows of `args` (a lower bound: what matters is that
/// it is not wildly under).
fn estimate(growth: Growth, args: &[ArrayRef], rows: usize) -> Result<u64> {
    let rows = rows.min(args.first().map_or(0, |a| a.len()));
    let per_row: Vec<u64> = match growth {
        Growth::Repeat => {
            let (Some(text), Some(count)) = (args.first(), args.get(1)) else {
                return Ok(0);
            };
            let lengths = text_bytes(text)?;
            let counts = integers(count)?;
            (0..rows)
                .map(|i| lengths[i].saturating_mul(counts[i].max(0) as u64))
                .collect()
        }
        Growth::Pad => {
            let Some(count) = args.get(1) else {
                return Ok(0);
            };
            integers(count)?.iter().map(|&n| n.max(0) as u64).collect()
        }
        Growth::ArrayRepeat => {
            let (Some(element), Some(count)) = (args.first(), args.get(1)) else {
                return Ok(0);
            };
            let element_bytes =
                (element.get_array_memory_size() / element.len().max(1)).max(1) as u64;
            integers(count)?
                .iter()
                .map(|&n| (n.max(0) as u64).saturating_mul(element_bytes))
                .collect()
        }
        Growth::Series => series_bytes(args)?,
    };
    Ok(per_row
        .iter()
        .take(rows)
        .fold(0u64, |total, &b| total.saturating_add(b)))
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
    let rows = first.len();
    let (start, stop) = match args {
        [stop] => (vec![0; rows], instants(stop)?),
        [start, stop, ..] => (instants(start)?, instants(stop)?),
        [] => return Ok(Vec::new()),
    };
    let step = match args.get(2) {
        Some(step) => steps(step)?,
        None if matches!(first.data_type(), DataType::Int64 | DataType::Int32) => vec![1; rows],
        // a series of dates or times needs a step; DataFusion will say so
        None => return Ok(vec![0; rows]),
    };
    Ok((0..rows)
        .map(|i| {
            let span = stop[i].abs_diff(start[i]);
            let step = step[i].unsigned_abs().max(1);
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
    const DAY: i64 = 86_400_000_000_000;
    Ok((0..intervals.len())
        .map(|i| {
            let v = intervals.value(i);
            (v.months as i64 * 30 * DAY)
                .saturating_add(v.days as i64 * DAY)
                .saturating_add(v.nanoseconds)
        })
        .collect())
}

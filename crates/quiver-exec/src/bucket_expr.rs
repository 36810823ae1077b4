//! Reading a [`TimeBucket`] out of a query: the `date_bin(width, time[, origin])` call (or a
//! function taking its arguments, such as `date_bin_gapfill`) whose width and origin are
//! constants.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::Expr;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use quiver_model::schema::TIME_COLUMN;
use quiver_model::TimeBucket;

use crate::time_filter::timestamp_ns;

/// The bucket `expr` computes, if it is `date_bin` of the `time` column with a fixed width and
/// origin; `Err` with the reason if it is `date_bin` of something else; `Ok(None)` if it is
/// not `date_bin` at all.
pub fn read_bucket(expr: &Expr) -> Result<Option<TimeBucket>, String> {
    read_bucket_call(expr, "date_bin")
}

/// Like [`read_bucket`], for a call of `function`, which takes `date_bin`'s arguments.
pub fn read_bucket_call(expr: &Expr, function: &str) -> Result<Option<TimeBucket>, String> {
    let Expr::ScalarFunction(ScalarFunction { func, args }) = expr else {
        return Ok(None);
    };
    if func.name() != function {
        return Ok(None);
    }
    let (width, source, origin) = match args.as_slice() {
        [width, source] => (width, source, None),
        [width, source, origin] => (width, source, Some(origin)),
        _ => {
            return Err(format!(
                "{expr}: {function} takes a width, time and an origin"
            ))
        }
    };
    if !matches!(source, Expr::Column(c) if c.name == TIME_COLUMN) {
        return Err(format!("{expr}: buckets must be of the time column itself"));
    }
    let width = match constant(width) {
        Some(ScalarValue::IntervalMonthDayNano(Some(v))) if v.months != 0 => {
            return Err(months(expr))
        }
        Some(ScalarValue::IntervalYearMonth(Some(_))) => return Err(months(expr)),
        Some(value) => fixed_interval_ns(&value),
        None => None,
    }
    .filter(|&w| w > 0)
    .ok_or_else(|| format!("{expr}: the bucket width must be a constant positive interval"))?;
    let origin = match origin {
        None => 0,
        Some(origin) => constant(origin)
            .and_then(|v| timestamp_ns(&Expr::Literal(v, None)))
            .ok_or_else(|| format!("{expr}: the origin must be a constant timestamp"))?,
    };
    Ok(TimeBucket::new(width, origin))
}

/// Why buckets of `expr` cannot be of months.
fn months(expr: &Expr) -> String {
    format!("{expr}: buckets of months vary in length; use days or less")
}

/// Nanoseconds in a day (an interval's day counts as this many: Quiver's time is UTC).
pub const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// A fixed interval literal (days and smaller: no months) in nanoseconds, if it is one and
/// fits in `i64`: the one conversion every bucket width and time bin goes through.
pub fn fixed_interval_ns(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => i64::from(v.days)
            .checked_mul(NANOS_PER_DAY)?
            .checked_add(v.nanoseconds),
        ScalarValue::IntervalDayTime(Some(v)) => i64::from(v.days)
            .checked_mul(NANOS_PER_DAY)?
            .checked_add(i64::from(v.milliseconds).checked_mul(1_000_000)?),
        _ => None,
    }
}

/// The value of an expression that reads no column, if it folds to one (the clock is not
/// known here: `now()` does not fold).
pub fn constant(expr: &Expr) -> Option<ScalarValue> {
    if !expr.column_refs().is_empty() {
        return None;
    }
    match ExprSimplifier::new(SimplifyContext::default()).simplify(expr.clone()) {
        Ok(Expr::Literal(value, _)) => Some(value),
        _ => None,
    }
}

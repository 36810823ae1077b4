//! Recognising the parts of a comparison between one column and constants, as type coercion
//! leaves them: a column or a literal, possibly wrapped in casts. Shared by the rules that
//! reorder filters (`quiver-query`'s `filter_order`) and the scans that answer tag comparisons on
//! dictionary codes ([`crate::tag_filter`]).

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Expr;

/// The column `expr` reads, as is or through casts (`CAST` or `TRY_CAST`) to types `cast_ok`
/// accepts. `TRY_CAST` is held to the same test: it never fails, but a cast to another type
/// changes the value compared (`CAST(TRY_CAST(host AS BIGINT) AS VARCHAR) = '5'` holds for
/// `host = '05'`), which a tag comparison on dictionary codes must not assume away.
pub fn column_name(expr: &Expr, cast_ok: impl Fn(&DataType) -> bool + Copy) -> Option<&str> {
    match expr {
        Expr::Column(column) => Some(&column.name),
        Expr::Cast(cast) if cast_ok(cast.field.data_type()) => column_name(&cast.expr, cast_ok),
        Expr::TryCast(cast) if cast_ok(cast.field.data_type()) => column_name(&cast.expr, cast_ok),
        _ => None,
    }
}

/// The literal `expr` is, as is or through casts to types `cast_ok` accepts.
pub fn literal(expr: &Expr, cast_ok: impl Fn(&DataType) -> bool + Copy) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value),
        Expr::Cast(cast) if cast_ok(cast.field.data_type()) => literal(&cast.expr, cast_ok),
        Expr::TryCast(cast) if cast_ok(cast.field.data_type()) => literal(&cast.expr, cast_ok),
        _ => None,
    }
}

/// A string type, or a dictionary of one: what a tag is, and what a tag can always be cast
/// to.
pub fn is_string(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) || matches!(data_type, DataType::Dictionary(_, value) if is_string(value))
}

/// Any type: a constant's cast fails, if at all, wherever it is evaluated.
pub fn any_type(_: &DataType) -> bool {
    true
}

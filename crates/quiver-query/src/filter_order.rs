//! The order of a filter's conjuncts over a Quiver table: comparisons of a tag with constants
//! first, then comparisons of `time` with constants, then everything else in the order
//! written.
//!
//! DataFusion evaluates `a AND b` by evaluating `a` and, when few rows pass it, copying those
//! rows (every column of the batch) to evaluate `b` on them. A field comparison that keeps a
//! tenth of the rows (`usage > 90 AND host = 'h1'`) thus copies a tenth of every column of
//! every batch before the tag comparison that keeps one row in a hundred; tag first, the copy
//! is a hundredth. `WHERE usage_user > 90 AND hostname = ...` over 1M rows and 21 columns cost
//! 12.5 ms of filtering written that way and about 3 ms tag first.
//!
//! Only comparisons that cannot fail move (a tag or `time` against literals: `=`, `<>`, `<`,
//! `<=`, `>`, `>=`, `IN`, the column cast at most to a type it always converts to: a tag to
//! strings, `time` to strings or timestamps); the other conjuncts keep their order, so a guard written before an
//! expression that needs it (`count > 0 AND 100 / count > 5`) still comes first. SQL gives no
//! evaluation order for `AND` in any case; the answer is the same.

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::error::Result;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{BinaryExpr, Expr, Filter, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;
use quiver_model::schema::TIME_COLUMN;

use crate::latest::ScanBelow;
use quiver_exec::column_compare::{any_type, column_name, is_string, literal};

/// The analyzer rule that orders filter conjuncts over Quiver tables (module docs).
#[derive(Debug, Default)]
pub struct FilterOrderRule;

impl AnalyzerRule for FilterOrderRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(order_conjuncts)
            .map(|rewritten| rewritten.data)
    }

    fn name(&self) -> &str {
        "quiver_filter_order"
    }
}

fn order_conjuncts(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Filter(filter) = &node else {
        return Ok(Transformed::no(node));
    };
    let Some(ScanBelow { tags, .. }) = ScanBelow::find(&filter.input) else {
        return Ok(Transformed::no(node));
    };
    let conjuncts = split_conjunction(&filter.predicate);
    let rank = |expr: &Expr| -> u8 {
        if compares_with_literals(expr, |name| tags.contains(name), is_string) {
            0
        } else if compares_with_literals(expr, |name| name == TIME_COLUMN, time_cast_ok) {
            1
        } else {
            2
        }
    };
    let ranks: Vec<u8> = conjuncts.iter().map(|c| rank(c)).collect();
    if ranks.is_sorted() {
        return Ok(Transformed::no(node));
    }
    let mut ordered: Vec<(u8, Expr)> = ranks
        .into_iter()
        .zip(conjuncts.into_iter().cloned())
        .collect();
    // stable: within a rank, as written
    ordered.sort_by_key(|(rank, _)| *rank);
    let predicate = conjunction(ordered.into_iter().map(|(_, expr)| expr))
        .expect("a filter has at least one conjunct");
    let filter = Filter::try_new(predicate, filter.input.clone())?;
    Ok(Transformed::yes(LogicalPlan::Filter(filter)))
}

/// `column <op> literal` (either side) or `column [NOT] IN (literals)` for a column
/// `is_column` accepts: comparisons that cannot fail. The column may be cast to types
/// `cast_ok` accepts: the ones it can always be cast to (what type coercion adds).
fn compares_with_literals(
    expr: &Expr,
    is_column: impl Fn(&str) -> bool,
    cast_ok: impl Fn(&DataType) -> bool + Copy,
) -> bool {
    let column_ok = |e: &Expr| column_name(e, cast_ok).is_some_and(&is_column);
    let constant = |e: &Expr| literal(e, any_type).is_some();
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
            ) && ((column_ok(left) && constant(right)) || (constant(left) && column_ok(right)))
        }
        Expr::InList(InList { expr, list, .. }) => column_ok(expr) && list.iter().all(constant),
        _ => false,
    }
}

/// Types `time` (a timestamp) can always be cast to: strings and other timestamps.
fn time_cast_ok(data_type: &DataType) -> bool {
    is_string(data_type) || matches!(data_type, DataType::Timestamp(..))
}

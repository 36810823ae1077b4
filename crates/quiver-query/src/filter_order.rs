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
//! `<=`, `>`, `>=`, `IN`); the other conjuncts keep their order, so a guard written before an
//! expression that needs it (`count > 0 AND 100 / count > 5`) still comes first. SQL gives no
//! evaluation order for `AND` in any case; the answer is the same.

use std::collections::HashSet;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::source_as_provider;
use datafusion::error::Result;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{BinaryExpr, Expr, Filter, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;
use quiver_model::schema::TIME_COLUMN;
use quiver_storage::series_key_and_fields;

use crate::provider::QuiverTable;

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
    let Some(tags) = tags_below(&filter.input) else {
        return Ok(Transformed::no(node));
    };
    let conjuncts = split_conjunction(&filter.predicate);
    let rank = |expr: &Expr| -> u8 {
        if compares_with_literals(expr, |name| tags.contains(name)) {
            0
        } else if compares_with_literals(expr, |name| name == TIME_COLUMN) {
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

/// The tag columns of the Quiver table a plan reads through aliases and filters only.
fn tags_below(mut plan: &LogicalPlan) -> Option<HashSet<String>> {
    loop {
        match plan {
            LogicalPlan::SubqueryAlias(alias) => plan = &alias.input,
            LogicalPlan::Filter(filter) => plan = &filter.input,
            LogicalPlan::TableScan(scan) => {
                let provider = source_as_provider(&scan.source).ok()?;
                let table = provider.downcast_ref::<QuiverTable>()?;
                let schema = datafusion::catalog::TableProvider::schema(table);
                let (keys, _) = series_key_and_fields(&schema).ok()?;
                return Some(
                    keys.iter()
                        .map(|&i| schema.field(i).name().clone())
                        .filter(|name| name != TIME_COLUMN)
                        .collect(),
                );
            }
            _ => return None,
        }
    }
}

/// `column <op> literal` (either side) or `column [NOT] IN (literals)` for a column
/// `is_column` accepts: comparisons that cannot fail. The column may be cast to a string or
/// timestamp type (what type coercion adds, and what cannot fail for a tag or `time`).
fn compares_with_literals(expr: &Expr, is_column: impl Fn(&str) -> bool + Copy) -> bool {
    let column_ok = |e: &Expr| is_safe_column(e, is_column);
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
            ) && ((column_ok(left) && is_literal(right)) || (is_literal(left) && column_ok(right)))
        }
        Expr::InList(InList { expr, list, .. }) => column_ok(expr) && list.iter().all(is_literal),
        _ => false,
    }
}

fn is_safe_column(expr: &Expr, is_column: impl Fn(&str) -> bool + Copy) -> bool {
    match expr {
        Expr::Column(column) => is_column(&column.name),
        Expr::Cast(cast) if cannot_fail_into(cast.field.data_type()) => {
            is_safe_column(&cast.expr, is_column)
        }
        Expr::TryCast(cast) => is_safe_column(&cast.expr, is_column),
        _ => false,
    }
}

/// Types a tag (a string) or `time` (a timestamp) can always be cast to.
fn cannot_fail_into(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Timestamp(..)
    ) || matches!(data_type, DataType::Dictionary(_, value) if cannot_fail_into(value))
}

/// A literal, possibly cast (constant: it fails, if at all, wherever it is evaluated).
fn is_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Literal(..) => true,
        Expr::Cast(cast) => is_literal(&cast.expr),
        Expr::TryCast(cast) => is_literal(&cast.expr),
        _ => false,
    }
}

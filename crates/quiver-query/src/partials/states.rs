//! Aggregates that merge exactly from partial states ([`Derivable`], [`State`]): sums,
//! counts, minima, maxima, averages as sum and count, and first / last values with the time
//! they were seen at. What a rollup keeps per bucket and what a reused time part holds per
//! group are these states.

use arrow::datatypes::DataType;
use datafusion::common::Column;
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions_aggregate::expr_fn::{count, first_value, last_value, max, min, sum};
use datafusion::logical_expr::expr::{AggregateFunction, NullTreatment};
use datafusion::logical_expr::{cast, col, lit, Expr, SortExpr};
use quiver_model::schema::TIME_COLUMN;

/// One partial state kept per group (and bucket, or part) that merges exactly.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct State {
    kind: StateKind,
    /// The field it is of (`None` for the row count).
    column: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum StateKind {
    Sum,
    Count,
    Rows,
    Min,
    Max,
    First,
    FirstTime,
    Last,
    LastTime,
}

impl State {
    fn of(kind: StateKind, column: &str) -> Self {
        State {
            kind,
            column: Some(column.to_string()),
        }
    }

    /// The state's column name in rows of partial states, e.g. `sum(usage)`.
    pub(crate) fn name(&self) -> String {
        let function = match self.kind {
            StateKind::Sum => "sum",
            StateKind::Count => "count",
            StateKind::Rows => return "count(*)".to_string(),
            StateKind::Min => "min",
            StateKind::Max => "max",
            StateKind::First => "first",
            StateKind::FirstTime => "first_time",
            StateKind::Last => "last",
            StateKind::LastTime => "last_time",
        };
        format!("{function}({})", self.column.as_deref().unwrap_or_default())
    }

    /// The state as a column of a plan over rows of partial states.
    fn column(&self) -> Expr {
        Expr::Column(Column::new_unqualified(self.name()))
    }

    /// The aggregate computing the state from raw rows, named [`State::name`].
    pub(crate) fn partial(&self) -> Expr {
        let field = || {
            Expr::Column(Column::new_unqualified(
                self.column.clone().unwrap_or_default(),
            ))
        };
        let time = || col(TIME_COLUMN);
        let by_time = || vec![time().sort(true, false)];
        let aggregate = match self.kind {
            StateKind::Sum => sum(field()),
            StateKind::Count => count(field()),
            StateKind::Rows => count(lit(1i64)),
            StateKind::Min => min(field()),
            StateKind::Max => max(field()),
            StateKind::First => first_value(field(), by_time()),
            StateKind::FirstTime => min(time()),
            StateKind::Last => last_value(field(), by_time()),
            StateKind::LastTime => max(time()),
        };
        aggregate.alias(self.name())
    }
}

/// An aggregate that merges exactly from partial states, over one field (or the rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Derivable {
    function: Function,
    column: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Function {
    Sum,
    Count,
    CountRows,
    Min,
    Max,
    Avg,
    First,
    Last,
}

impl Derivable {
    /// The aggregate `expr` is, if it merges exactly from partial states; the reason
    /// otherwise (worded for a rollup's definition, whose refusals users read).
    pub(crate) fn read(expr: &Expr) -> Result<Self, String> {
        let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
            return Err(format!("{expr} is not an aggregate"));
        };
        let name = func.name().to_ascii_lowercase();
        if params.distinct {
            return Err(format!(
                "{expr}: DISTINCT aggregates cannot be merged from partial states"
            ));
        }
        if params.filter.is_some() {
            return Err(format!("{expr}: aggregates with FILTER are not kept"));
        }
        if params.null_treatment == Some(NullTreatment::IgnoreNulls) {
            return Err(format!(
                "{expr}: IGNORE NULLS is not kept (partial first and last values keep nulls)"
            ));
        }
        if NOT_MERGEABLE.contains(&name.as_str()) {
            return Err(format!(
                "{expr}: {name} cannot be maintained exactly (partial results of a median or percentile do not merge)"
            ));
        }
        let column = match params.args.as_slice() {
            [Expr::Column(c)] => Some(c.name.clone()),
            [Expr::Literal(v, _)] if name == "count" && !v.is_null() => None,
            _ => {
                return Err(format!(
                    "{expr}: a rollup keeps aggregates of a column as it is (or count(*))"
                ))
            }
        };
        let ordered_by_time = |ascending: bool| match params.order_by.as_slice() {
            [SortExpr { expr, asc, .. }] => {
                matches!(expr, Expr::Column(c) if c.name == TIME_COLUMN) && *asc == ascending
            }
            _ => false,
        };
        let function = match name.as_str() {
            "count" if column.is_none() => Function::CountRows,
            "count" => Function::Count,
            "sum" => Function::Sum,
            "min" => Function::Min,
            "max" => Function::Max,
            "avg" | "mean" => Function::Avg,
            "first_value" if ordered_by_time(true) => Function::First,
            "first_value" if ordered_by_time(false) => Function::Last,
            "last_value" if ordered_by_time(true) => Function::Last,
            "last_value" if ordered_by_time(false) => Function::First,
            "first_value" | "last_value" => {
                return Err(format!(
                    "{expr}: first_value and last_value are kept only ordered by time alone"
                ))
            }
            _ => {
                return Err(format!(
                    "{expr}: {name} is not kept by rollups (sum, count, min, max, avg, and first_value / last_value ordered by time are)"
                ))
            }
        };
        if params.order_by.len() > usize::from(matches!(function, Function::First | Function::Last))
        {
            return Err(format!(
                "{expr}: an ORDER BY inside this aggregate is not kept"
            ));
        }
        Ok(Derivable { function, column })
    }

    /// The states the aggregate is merged from.
    pub(crate) fn states(&self) -> Vec<State> {
        let column = self.column.as_deref().unwrap_or_default();
        match self.function {
            Function::Sum => vec![State::of(StateKind::Sum, column)],
            Function::Count => vec![State::of(StateKind::Count, column)],
            Function::CountRows => vec![State {
                kind: StateKind::Rows,
                column: None,
            }],
            Function::Min => vec![State::of(StateKind::Min, column)],
            Function::Max => vec![State::of(StateKind::Max, column)],
            Function::Avg => vec![
                State::of(StateKind::Sum, column),
                State::of(StateKind::Count, column),
            ],
            Function::First => vec![
                State::of(StateKind::First, column),
                State::of(StateKind::FirstTime, column),
            ],
            Function::Last => vec![
                State::of(StateKind::Last, column),
                State::of(StateKind::LastTime, column),
            ],
        }
    }

    /// The aggregate over rows of partial states (a rollup's, reused parts', raw rows')
    /// that gives the aggregate's answer.
    pub(crate) fn merge(&self) -> Expr {
        let states = self.states();
        let state = |i: usize| states[i].column();
        match self.function {
            Function::Sum => sum(state(0)),
            // a count of no rows is 0, not the null a sum of no partial counts is
            Function::Count | Function::CountRows => coalesce(vec![sum(state(0)), lit(0i64)]),
            Function::Min => min(state(0)),
            Function::Max => max(state(0)),
            Function::Avg => {
                cast(sum(state(0)), DataType::Float64) / cast(sum(state(1)), DataType::Float64)
            }
            Function::First => first_value(state(0), vec![state(1).sort(true, false)]),
            Function::Last => last_value(state(0), vec![state(1).sort(true, false)]),
        }
    }
}

/// Aggregates whose partial results do not merge into the exact answer.
const NOT_MERGEABLE: &[&str] = &[
    "median",
    "approx_median",
    "percentile_cont",
    "approx_percentile_cont",
    "approx_percentile_cont_with_weight",
    "quantile_cont",
    "approx_distinct",
    "mode",
];

/// `expr` without an alias around it.
pub(crate) fn strip_alias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => strip_alias(&alias.expr),
        other => other,
    }
}

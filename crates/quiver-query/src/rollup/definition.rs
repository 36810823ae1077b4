//! A rollup's definition read from its statement ([`RollupShape::read`]): the base table, the
//! time bucket, the tags kept, the tag filter, and the aggregates, each kept as partial
//! states that merge exactly ([`State`]): sums, counts, minima, maxima, and first / last
//! values with the time they were seen at. What cannot be kept that way is refused with the
//! reason.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::error::Result;
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions::datetime::expr_fn::date_bin;
use datafusion::functions_aggregate::expr_fn::{count, first_value, last_value, max, min, sum};
use datafusion::logical_expr::expr::{AggregateFunction, NullTreatment};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    cast, col, lit, Expr, LogicalPlan, LogicalPlanBuilder, SortExpr, TableSource,
};
use quiver_model::schema::TIME_COLUMN;
use quiver_model::TimeBucket;

use crate::provider::QuiverTable;

/// One partial state a rollup keeps per bucket and group.
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

    /// The state's column name in the rollup's rows, e.g. `sum(usage)`.
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

    /// The state as a column of a plan over rollup rows.
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

/// An aggregate a rollup can answer, over one field (or the rows).
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
    /// The aggregate `expr` is, if a rollup can keep it exactly; the reason otherwise.
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

    /// The aggregate over rollup rows (or partial states of raw rows) that gives the
    /// aggregate's answer.
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

/// What a rollup keeps (see the module docs).
#[derive(Debug)]
pub(crate) struct RollupShape {
    /// The base table.
    pub(crate) table: String,
    /// Its buckets.
    pub(crate) bucket: TimeBucket,
    /// The tags it groups by, in the order given.
    pub(crate) tags: Vec<String>,
    /// Its filter's conjuncts (over tags; columns unqualified).
    pub(crate) filter: Vec<Expr>,
    /// Its states, sorted.
    pub(crate) states: Vec<State>,
    /// The defining statement's plan (analysed), which reading the rollup as a table runs.
    pub(crate) plan: LogicalPlan,
}

/// The shape every rollup has, for error messages.
const SHAPE: &str = "a rollup is SELECT date_bin(<interval>, time) AS time, <tag columns>, <aggregates> FROM <table> [WHERE <tag predicates>] GROUP BY <the bucket and the tags>";

impl RollupShape {
    /// Reads an analysed plan of a rollup's statement; the reason if it is not one a rollup
    /// can keep exactly.
    pub(crate) fn read(plan: &LogicalPlan) -> Result<Self, String> {
        let aggregate = match plan {
            LogicalPlan::Projection(p) => match p.input.as_ref() {
                LogicalPlan::Aggregate(a) => a,
                other => return Err(refuse(other)),
            },
            LogicalPlan::Aggregate(a) => a,
            other => return Err(refuse(other)),
        };
        let (filter, source) = filter_and_scan(&aggregate.input)?;
        let table = source
            .downcast_ref::<QuiverTable>()
            .ok_or_else(|| format!("{SHAPE}: the table must be a table of the database"))?;
        let tag_set = table.tag_columns();
        let mut bucket = None;
        let mut tags = Vec::new();
        for group in aggregate.group_expr.iter() {
            let group = strip_alias(group);
            if let Some(found) = quiver_exec::bucket_expr::read_bucket(group)? {
                if bucket.replace(found).is_some() {
                    return Err(format!("{SHAPE}: group by one time bucket only"));
                }
            } else {
                match group {
                    Expr::Column(c) if tag_set.contains(&c.name) => tags.push(c.name.clone()),
                    Expr::Column(c) if c.name == TIME_COLUMN => {
                        return Err(format!(
                            "{SHAPE}: group by date_bin(<interval>, time), not by time itself"
                        ))
                    }
                    Expr::Column(c) => {
                        return Err(format!(
                            "{SHAPE}: {:?} is a field; a rollup groups by tags only",
                            c.name
                        ))
                    }
                    other => return Err(format!("{SHAPE}: cannot group by {other}")),
                }
            }
        }
        let bucket = bucket.ok_or_else(|| format!("{SHAPE}: group by a date_bin of time"))?;
        let mut states = BTreeSet::new();
        for expr in &aggregate.aggr_expr {
            states.extend(Derivable::read(strip_alias(expr))?.states());
        }
        if states.is_empty() {
            return Err(format!("{SHAPE}: name at least one aggregate"));
        }
        let filter = read_filter(filter, &tag_set)?;
        Ok(RollupShape {
            table: table.table().name().to_string(),
            bucket,
            tags,
            filter,
            states: states.into_iter().collect(),
            plan: plan.clone(),
        })
    }

    /// True if the rollup keeps `state`.
    pub(crate) fn keeps(&self, state: &State) -> bool {
        self.states.binary_search(state).is_ok()
    }

    /// The partial states of the raw rows of `source` that pass `filter`, per bucket of the
    /// rollup and group of its tags: what the rollup keeps, and what a routed query reads
    /// for the buckets the rollup does not cover.
    pub(crate) fn partial_plan(
        &self,
        source: Arc<dyn TableSource>,
        table: &str,
        filter: Option<Expr>,
    ) -> Result<LogicalPlan> {
        let mut builder = LogicalPlanBuilder::scan(table, source, None)?;
        if let Some(filter) = filter {
            builder = builder.filter(filter)?;
        }
        let mut group = vec![date_bin(
            lit(ScalarValue::new_interval_mdn(0, 0, self.bucket.width)),
            col(TIME_COLUMN),
            lit(ScalarValue::TimestampNanosecond(
                Some(self.bucket.origin),
                Some("UTC".into()),
            )),
        )
        .alias(TIME_COLUMN)];
        group.extend(
            self.tags
                .iter()
                .map(|t| Expr::Column(Column::new_unqualified(t))),
        );
        let aggregates: Vec<Expr> = self.states.iter().map(State::partial).collect();
        builder.aggregate(group, aggregates)?.build()
    }
}

/// The rollup's Filter (if any) and the provider of the table scan below it.
fn filter_and_scan(
    input: &LogicalPlan,
) -> Result<(Option<&Expr>, Arc<dyn datafusion::catalog::TableProvider>), String> {
    let (filter, scan) = match input {
        LogicalPlan::Filter(f) => (Some(&f.predicate), f.input.as_ref()),
        other => (None, other),
    };
    let LogicalPlan::TableScan(scan) = scan else {
        return Err(refuse(scan));
    };
    let provider = source_as_provider(&scan.source).map_err(|e| e.to_string())?;
    Ok((filter, provider))
}

/// The conjuncts of a rollup's filter, each over tags only; the reason otherwise.
fn read_filter(filter: Option<&Expr>, tags: &HashSet<String>) -> Result<Vec<Expr>, String> {
    let Some(filter) = filter else {
        return Ok(Vec::new());
    };
    let mut conjuncts = Vec::new();
    for conjunct in split_conjunction(filter) {
        if conjunct.is_volatile() {
            return Err(format!(
                "{conjunct}: a rollup's filter cannot use now() or other volatile functions (it would change over time)"
            ));
        }
        for column in conjunct.column_refs() {
            if column.name == TIME_COLUMN {
                return Err(format!(
                    "{conjunct}: a rollup covers all time; filter on time in the queries instead"
                ));
            }
            if !tags.contains(&column.name) {
                return Err(format!(
                    "{conjunct}: {:?} is a field; a rollup's filter may test tags only (a field predicate cannot be maintained exactly)",
                    column.name
                ));
            }
        }
        conjuncts.push(datafusion::logical_expr::expr_rewriter::unnormalize_col(
            conjunct.clone(),
        ));
    }
    Ok(conjuncts)
}

/// `expr` without an alias around it.
pub(crate) fn strip_alias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => strip_alias(&alias.expr),
        other => other,
    }
}

/// Why a plan node below a rollup's aggregate is refused.
fn refuse(plan: &LogicalPlan) -> String {
    let what = match plan {
        LogicalPlan::Join(_) => "joins cannot be maintained exactly",
        LogicalPlan::Sort(_) => "ORDER BY has no meaning in a rollup",
        LogicalPlan::Limit(_) => "LIMIT has no meaning in a rollup",
        LogicalPlan::Filter(_) => "HAVING is not kept (filter the queries instead)",
        LogicalPlan::Window(_) => "window functions are not kept",
        LogicalPlan::Union(_) => "a rollup reads one table",
        LogicalPlan::Distinct(_) => "DISTINCT is not kept",
        LogicalPlan::Subquery(_) | LogicalPlan::SubqueryAlias(_) => "subqueries are not kept",
        LogicalPlan::Projection(_) => "computed columns below the aggregate are not kept",
        _ => "this statement is not one",
    };
    format!("{SHAPE}: {what}")
}

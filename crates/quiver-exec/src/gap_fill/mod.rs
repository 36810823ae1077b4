//! Gap filling in SQL, as InfluxDB 3 spells it: `date_bin_gapfill(<interval>, time[,
//! <origin>])` as a GROUP BY expression of an aggregate query whose WHERE bounds `time` on
//! both sides, and `locf(<aggregate>)` (the last value seen, carried forward) or
//! `interpolate(<aggregate>)` (linear, between the values on either side) in its SELECT
//! list:
//!
//! ```sql
//! SELECT date_bin_gapfill(INTERVAL '1 minute', time) AS minute, host,
//!        avg(usage), locf(max(usage)), interpolate(min(usage))
//! FROM cpu WHERE time >= now() - INTERVAL '1 hour' AND time < now()
//! GROUP BY 1, host
//! ```
//!
//! answers one row per host and minute of the range, the minutes without rows included: a
//! plain aggregate is null there (`count` too), `locf` repeats the host's last non-null value,
//! `interpolate` draws a line between the host's non-null values before and after (null
//! before the first and after the last). Nulls the aggregate itself gives are filled alike.
//!
//! How: [`GapFillRule`] (an analyzer rule) turns the aggregate's `date_bin_gapfill` into
//! `date_bin` and puts a [`node::GapFill`] above it, moving the `locf` / `interpolate` of the
//! SELECT list into that node; [`node::GapFillPlanner`] makes it an [`exec::GapFillExec`],
//! which reads the aggregate's rows sorted by series and bucket and adds the missing buckets
//! as it streams. The range's bounds are evaluated when the physical plan is made, so
//! `now()` is the statement's clock. Bounded: at most [`MAX_BUCKETS`] buckets per series
//! (refused at planning), and an answer larger than the query's memory limit is refused
//! before its first row is made.
//!
//! The three functions are markers: called anywhere else they fail with a message that says
//! where they belong.
//!
//! InfluxQL's `fill()` plans onto the same [`GapFill`] node (`quiver-influxql`'s `plan::fill`):
//! `fill(previous)` is `locf`, `fill(linear)` `interpolate`, and the constant fills are a
//! projection above it.

mod exec;
mod node;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::plan_err;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::functions::datetime::date_bin;
use datafusion::functions::datetime::date_bin::DateBinFunc;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    Aggregate, ColumnarValue, Expr, Extension, Filter, LogicalPlan, Operator, Projection,
    ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionContext;

pub use exec::{GapFillExec, Grid};
pub use node::{Bound, FillMethod, GapFill, QuiverQueryPlanner};

use crate::time_filter::{compared_with_time, is_time_column};

/// The bucketing function whose GROUP BY fills gaps.
const DATE_BIN_GAPFILL: &str = "date_bin_gapfill";
/// Fills a gap with the series' last value.
const LOCF: &str = "locf";
/// Fills a gap with a line between the series' values on either side.
const INTERPOLATE: &str = "interpolate";

/// The name of [`GapFillRule`] (which DataFusion puts before the rule's errors).
pub const RULE_NAME: &str = "gap_fill";

/// Most buckets one series may be filled with (as InfluxQL's `GROUP BY time` allows).
pub const MAX_BUCKETS: u64 = quiver_model::MAX_QUERY_BUCKETS;

/// Registers `date_bin_gapfill`, `locf` and `interpolate` in `ctx`, and the rule that plans
/// them (before `next_rules`, which must see the rewritten aggregate).
pub fn register_functions(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::new_from_impl(DateBinGapfill::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(FillMarker::new(LOCF)));
    ctx.register_udf(ScalarUDF::new_from_impl(FillMarker::new(INTERPOLATE)));
}

/// `date_bin_gapfill`: `date_bin`'s arguments and type, planned by [`GapFillRule`].
#[derive(Debug, PartialEq, Eq, Hash, Default)]
struct DateBinGapfill {
    date_bin: DateBinFunc,
}

impl ScalarUDFImpl for DateBinGapfill {
    fn name(&self) -> &str {
        DATE_BIN_GAPFILL
    }

    fn signature(&self) -> &Signature {
        self.date_bin.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.date_bin.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.date_bin.return_field_from_args(args)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        plan_err!("{}", misplaced(DATE_BIN_GAPFILL))
    }
}

/// `locf(x)` / `interpolate(x)`: the type of `x`, planned by [`GapFillRule`].
#[derive(Debug, PartialEq, Eq, Hash)]
struct FillMarker {
    name: &'static str,
    signature: Signature,
}

impl FillMarker {
    fn new(name: &'static str) -> Self {
        FillMarker {
            name,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for FillMarker {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [one] => Ok(one.clone()),
            _ => plan_err!("{} takes one argument", self.name),
        }
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        plan_err!("{}", misplaced(self.name))
    }
}

/// Where a gap-filling function belongs, for one found anywhere else.
fn misplaced(function: &str) -> String {
    match function {
        DATE_BIN_GAPFILL => "date_bin_gapfill() is allowed only as a GROUP BY expression of an \
             aggregate query whose WHERE bounds time on both sides, e.g. SELECT \
             date_bin_gapfill(INTERVAL '1 minute', time) AS t, avg(x) FROM m WHERE time >= \
             now() - INTERVAL '1 hour' AND time < now() GROUP BY 1"
            .to_string(),
        _ => format!(
            "{function}() is allowed only around an aggregate in the SELECT list of a query \
             that groups by date_bin_gapfill(), e.g. {function}(avg(x))"
        ),
    }
}

/// The analyzer rule that plans gap filling (module docs).
#[derive(Debug)]
pub struct GapFillRule;

impl AnalyzerRule for GapFillRule {
    fn name(&self) -> &str {
        RULE_NAME
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if first_call(&plan)?.is_none() {
            return Ok(plan);
        }
        let plan = plan
            .transform_up_with_subqueries(|node| {
                let node = plan_gap_fill(node)?;
                if node.transformed {
                    Ok(node)
                } else {
                    // a parent of a rewritten node: its schema follows its input's
                    node.data.recompute_schema().map(Transformed::no)
                }
            })?
            .data;
        if let Some(function) = first_call(&plan)? {
            return plan_err!("{}", misplaced(&function));
        }
        Ok(plan)
    }
}

/// Whether `plan` calls a gap-filling function (before [`GapFillRule`] plans them).
pub fn uses_gap_fill(plan: &LogicalPlan) -> Result<bool> {
    Ok(first_call(plan)?.is_some())
}

/// The first gap-filling function `plan` calls, if any.
fn first_call(plan: &LogicalPlan) -> Result<Option<String>> {
    let mut found = None;
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Some(name) = gap_fill_function(e) {
                    found = Some(name.to_string());
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(found)
}

/// The name of the gap-filling function `expr` calls (itself, not in its arguments).
fn gap_fill_function(expr: &Expr) -> Option<&'static str> {
    let Expr::ScalarFunction(ScalarFunction { func, .. }) = expr else {
        return None;
    };
    [DATE_BIN_GAPFILL, LOCF, INTERPOLATE]
        .into_iter()
        .find(|name| func.name() == *name)
}

/// One step of the rule's bottom-up walk: an aggregate grouped by `date_bin_gapfill` gets a
/// [`GapFill`] above it; a projection over one (directly or through HAVING's filter) hands
/// it the `locf` / `interpolate` of its expressions.
fn plan_gap_fill(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    match node {
        LogicalPlan::Aggregate(aggregate) if groups_by_gapfill(&aggregate) => {
            let gap_fill = gap_fill_over(aggregate)?;
            Ok(Transformed::yes(extension(gap_fill)))
        }
        LogicalPlan::Projection(projection) => match fill_of_projection(&projection)? {
            Some(plan) => Ok(Transformed::yes(plan)),
            None => Ok(Transformed::no(LogicalPlan::Projection(projection))),
        },
        other => Ok(Transformed::no(other)),
    }
}

fn extension(gap_fill: GapFill) -> LogicalPlan {
    LogicalPlan::Extension(Extension {
        node: Arc::new(gap_fill),
    })
}

fn groups_by_gapfill(aggregate: &Aggregate) -> bool {
    aggregate.group_expr.iter().any(|e| {
        e.exists(|e| Ok(gap_fill_function(e) == Some(DATE_BIN_GAPFILL)))
            .unwrap_or(false)
    })
}

/// `aggregate` grouped by `date_bin` instead of `date_bin_gapfill` (under the same name), and
/// the [`GapFill`] above it.
fn gap_fill_over(aggregate: Aggregate) -> Result<GapFill> {
    if aggregate.group_expr.len() != aggregate.group_expr_len()? {
        return plan_err!("date_bin_gapfill() cannot be used with GROUPING SETS, CUBE or ROLLUP");
    }
    let mut bucket = None;
    let mut group_expr = Vec::with_capacity(aggregate.group_expr.len());
    for (index, expr) in aggregate.group_expr.iter().enumerate() {
        let read = crate::bucket_expr::read_bucket_call(expr, DATE_BIN_GAPFILL)
            .map_err(DataFusionError::Plan)?;
        match read {
            Some(_) if bucket.is_some() => {
                return plan_err!("a query may group by one date_bin_gapfill() only")
            }
            Some(found) => {
                bucket = Some((index, found));
                group_expr.push(as_date_bin(expr)?);
            }
            None if gap_fill_function(expr).is_none()
                && expr.exists(|e| Ok(gap_fill_function(e).is_some()))? =>
            {
                return plan_err!(
                    "date_bin_gapfill() must be a GROUP BY expression by itself, not part of {expr}"
                )
            }
            None => group_expr.push(expr.clone()),
        }
    }
    let (time_index, bucket) = bucket.ok_or_else(|| {
        DataFusionError::Plan("date_bin_gapfill() must be a GROUP BY expression".into())
    })?;
    let (lower, upper) = time_range(&aggregate.input)?;
    let rebuilt = Aggregate::try_new(aggregate.input, group_expr, aggregate.aggr_expr)?;
    let series = (0..rebuilt.group_expr.len())
        .filter(|&i| i != time_index)
        .collect();
    GapFill::try_new(
        Arc::new(LogicalPlan::Aggregate(rebuilt)),
        time_index,
        series,
        bucket,
        lower,
        upper,
        Vec::new(),
    )
}

/// `date_bin_gapfill(args)` as `date_bin(args)`, keeping the name the plan above knows.
fn as_date_bin(expr: &Expr) -> Result<Expr> {
    let Expr::ScalarFunction(ScalarFunction { args, .. }) = expr else {
        return plan_err!("{expr} is not a call of date_bin_gapfill");
    };
    let call = Expr::ScalarFunction(ScalarFunction::new_udf(date_bin(), args.clone()));
    Ok(call.alias(expr.schema_name().to_string()))
}

/// The bounds the filters under an aggregate put on `time`: the conjuncts `time <op> <expr>`
/// (and `BETWEEN`) whose other side reads no column, in every `Filter` down to the scan.
fn time_range(input: &LogicalPlan) -> Result<(Vec<Bound>, Vec<Bound>)> {
    let (mut lower, mut upper) = (Vec::new(), Vec::new());
    let mut node = input;
    loop {
        let predicates: Vec<&Expr> = match node {
            LogicalPlan::Filter(filter) => split_conjunction(&filter.predicate),
            LogicalPlan::TableScan(scan) => scan.filters.iter().collect(),
            _ => Vec::new(),
        };
        for predicate in predicates {
            collect_bounds(predicate, &mut lower, &mut upper);
        }
        match node {
            LogicalPlan::Filter(Filter { input, .. })
            | LogicalPlan::SubqueryAlias(datafusion::logical_expr::SubqueryAlias {
                input, ..
            }) => node = input,
            _ => break,
        }
    }
    if lower.is_empty() {
        return plan_err!(
            "date_bin_gapfill() needs a lower bound on time in WHERE, e.g. time >= now() - \
             INTERVAL '1 hour' (the range decides which buckets are filled)"
        );
    }
    if upper.is_empty() {
        return plan_err!(
            "date_bin_gapfill() needs an upper bound on time in WHERE, e.g. time < now() \
             (the range decides which buckets are filled)"
        );
    }
    Ok((lower, upper))
}

fn collect_bounds(predicate: &Expr, lower: &mut Vec<Bound>, upper: &mut Vec<Bound>) {
    let constant = |e: &Expr| e.column_refs().is_empty();
    match predicate {
        Expr::BinaryExpr(binary) => {
            let Some((op, other)) = compared_with_time(&binary.left, binary.op, &binary.right)
            else {
                return;
            };
            if !constant(other) {
                return;
            }
            let bound = |inclusive| Bound {
                expr: other.clone(),
                inclusive,
            };
            match op {
                Operator::Gt => lower.push(bound(false)),
                Operator::GtEq => lower.push(bound(true)),
                Operator::Lt => upper.push(bound(false)),
                Operator::LtEq => upper.push(bound(true)),
                Operator::Eq => {
                    lower.push(bound(true));
                    upper.push(bound(true));
                }
                _ => {}
            }
        }
        Expr::Between(between)
            if !between.negated
                && is_time_column(&between.expr)
                && constant(&between.low)
                && constant(&between.high) =>
        {
            lower.push(Bound {
                expr: (*between.low).clone(),
                inclusive: true,
            });
            upper.push(Bound {
                expr: (*between.high).clone(),
                inclusive: true,
            });
        }
        _ => {}
    }
}

/// `projection` with its `locf(c)` / `interpolate(c)` read from the columns the [`GapFill`]
/// below it adds for them, if there is one (directly or under HAVING's filter).
fn fill_of_projection(projection: &Projection) -> Result<Option<LogicalPlan>> {
    let (having, gap_fill) = match projection.input.as_ref() {
        LogicalPlan::Filter(filter) => (Some(filter), filter.input.as_ref()),
        other => (None, other),
    };
    let LogicalPlan::Extension(Extension { node }) = gap_fill else {
        return Ok(None);
    };
    let Some(gap_fill) = node.as_any().downcast_ref::<GapFill>() else {
        return Ok(None);
    };
    let mut gap_fill = gap_fill.clone();
    let names = NamePreserver::new_for_projection();
    let mut exprs = Vec::with_capacity(projection.expr.len());
    for expr in &projection.expr {
        let saved = names.save(expr);
        let rewritten = expr
            .clone()
            .transform_up(|e| take_fill(e, &mut gap_fill))?
            .data;
        exprs.push(saved.restore(rewritten));
    }
    let mut input = extension(gap_fill);
    if let Some(filter) = having {
        input = LogicalPlan::Filter(Filter::try_new(filter.predicate.clone(), Arc::new(input))?);
    }
    Ok(Some(LogicalPlan::Projection(Projection::try_new(
        exprs,
        Arc::new(input),
    )?)))
}

/// `locf(c)` / `interpolate(c)` as the column of `gap_fill` that holds `c` filled so.
fn take_fill(expr: Expr, gap_fill: &mut GapFill) -> Result<Transformed<Expr>> {
    let method = match gap_fill_function(&expr) {
        Some(LOCF) => FillMethod::Locf,
        Some(INTERPOLATE) => FillMethod::Interpolate,
        _ => return Ok(Transformed::no(expr)),
    };
    let Expr::ScalarFunction(ScalarFunction { args, func }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let name = func.name();
    let [Expr::Column(column)] = args.as_slice() else {
        return plan_err!("{name}() takes an aggregate of the query, e.g. {name}(avg(x)): {expr}");
    };
    let (filled, output) = gap_fill.fill_column(column, method, name)?;
    *gap_fill = filled;
    Ok(Transformed::yes(Expr::Column(output)))
}

/// The answer's schema of a statement whose plan is `plan` and optimized plan `optimized`: the
/// statement's (`schema`), except that a gap-filling statement's columns are nullable where
/// the optimized plan has them so (`count` is null in a gap). Describing the statement gives
/// the same, so that Flight SQL's announced schema is the one streamed.
pub fn gap_filled_schema(
    schema: SchemaRef,
    plan: &LogicalPlan,
    optimized: &LogicalPlan,
) -> Result<SchemaRef, DataFusionError> {
    Ok(match uses_gap_fill(plan)? {
        true => nullable_where_either(schema, optimized.schema().as_arrow()),
        false => schema,
    })
}

/// `statement`'s schema with a column nullable where `optimized` has it nullable too.
fn nullable_where_either(statement: SchemaRef, optimized: &Schema) -> SchemaRef {
    let widen = statement
        .fields()
        .iter()
        .zip(optimized.fields())
        .any(|(s, o)| !s.is_nullable() && o.is_nullable());
    if !widen || statement.fields().len() != optimized.fields().len() {
        return statement;
    }
    let fields: Vec<Field> = statement
        .fields()
        .iter()
        .zip(optimized.fields())
        .map(|(s, o)| {
            s.as_ref()
                .clone()
                .with_nullable(s.is_nullable() || o.is_nullable())
        })
        .collect();
    Arc::new(Schema::new_with_metadata(
        fields,
        statement.metadata().clone(),
    ))
}

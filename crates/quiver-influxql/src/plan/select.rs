//! `SELECT`: raw queries (points, with InfluxDB's rule that a row whose selected fields are all
//! null is not a point) and aggregate queries (per series and `GROUP BY time` bucket, with
//! selectors that return the time, and the other selected columns, of the point they chose);
//! `distinct()`, `top()`/`bottom()` and `integral()`, which answer rows of their own; several
//! measurements as one union, or a subquery read as a view; then fill, order and the
//! per-series `LIMIT`/`OFFSET` and `SLIMIT`/`SOFFSET`.
//!
//! This module plans the statement and its parts (raw points, aggregates, `distinct()`),
//! unions the parts and orders and limits the answer; `functions` is the catalogue of
//! InfluxQL's functions, `grouping` the `GROUP BY` and `fill()`, `ranked` `top()` and
//! `bottom()`, `sources` the `FROM`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::FieldMetadata;
use datafusion::logical_expr::{
    cast, lit, Expr as DfExpr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder, SortExpr,
    TableSource,
};
use datafusion::prelude::ident;
use quiver_model::schema::FieldType;
use quiver_model::TimeBucket;

use super::expr::{self, Columns, Resolved};
use super::integral::Integral;
use super::transform::{self, Transformation};

use super::time_range::{self, TimeRange};
use super::{PlanContext, PlanError, MEASUREMENT_COLUMN, ROLE_METADATA_KEY, TAG_ROLE};
use crate::ast::{Expr, SelectStatement, Source, WildcardKind};

mod functions;
mod grouping;
mod ranked;
mod sources;

use functions::{
    accepts, aggregate_call, field_value, has_aggregate, is_aggregate_function, is_transformation,
    rows_of_their_own, Selector,
};
pub(super) use grouping::{bucket, bucket_of, key_tags, tag_key, Grouping};
use grouping::{fill_aggregates, grouping};
use ranked::Ranked;
use sources::sources;

/// Most columns a statement may select (after wildcards are expanded): twice what a table may
/// hold by default (`max_columns_per_table`); planning is not linear in them.
const MAX_SELECTED_COLUMNS: usize = 2_048;

/// Hidden column: points behind an aggregate row (a row with none is not a series' row).
const POINTS: &str = "__points";

/// One column of the answer: its name and its expression (over raw rows, or over the
/// aggregate's outputs).
pub(super) struct OutputColumn {
    pub(super) name: String,
    pub(super) expr: Expr,
}

pub(crate) fn plan_select(
    select: &SelectStatement,
    ctx: &PlanContext<'_>,
) -> Result<LogicalPlan, PlanError> {
    plan_select_within(select, ctx, TimeRange::default())
}

/// `select` planned within `outer`, the time range of the statement it is a subquery of (1.x
/// hands an outer statement's range down to its subqueries).
fn plan_select_within(
    select: &SelectStatement,
    ctx: &PlanContext<'_>,
    outer: TimeRange,
) -> Result<LogicalPlan, PlanError> {
    if select.timezone.is_some() {
        return Err(PlanError::new(
            "tz() is not supported yet: times are in UTC",
        ));
    }
    let (range, rest) = time_range::split(select.condition.as_ref(), ctx.now_ns)?;
    let range = range.within(outer);
    let mut tables = sources(select, ctx, range)?;
    let all_columns: Vec<Columns> = tables
        .iter()
        .map(|(_, t)| Columns::new(t.schema()))
        .collect();
    let grouping = grouping(select, &all_columns)?;
    if tables.is_empty() {
        return empty(&grouping);
    }
    let mut columns = output_columns(select, &all_columns, &grouping)?;
    let transformations = take_transformations(&mut columns, &grouping)?;
    let aggregate = columns.iter().any(|c| has_aggregate(&c.expr));
    let ranked = Ranked::find(&columns, select)?;
    if let Some(ranked) = &ranked {
        ranked.add_tag_columns(&mut columns, &grouping.tags);
    }
    let distinct = distinct_column(&columns)?;
    let integral = Integral::find(&columns)?;
    // a transformation of buckets starts from the buckets before the range (as in 1.x), which
    // are read too and cut off after it
    let (range, range_start) = match (grouping.interval, range.lower) {
        (Some((interval, offset)), Some(lower)) if !transformations.is_empty() => {
            let lookback = transformations.iter().map(Transformation::lookback).max();
            let start = TimeBucket {
                width: interval,
                origin: offset,
            }
            .floor_saturating(lower);
            let earlier = start.saturating_sub(interval.saturating_mul(lookback.unwrap_or(0)));
            let extended = TimeRange {
                lower: Some(earlier),
                upper: range.upper,
            };
            (extended, Some(start))
        }
        _ => (range, None),
    };
    // a subquery read for a transformation starts at the bucket before the range too
    if range_start.is_some() && select.from.iter().any(|s| matches!(s, Source::Subquery(_))) {
        tables = sources(select, ctx, range)?;
    }
    if !aggregate && grouping.interval.is_some() {
        return Err(PlanError::new(
            "GROUP BY requires at least one aggregate function",
        ));
    }
    if aggregate
        && columns
            .iter()
            .any(|c| !has_aggregate(&c.expr) && !is_var_ref(&c.expr))
    {
        return Err(PlanError::new(
            "mixing aggregate and non-aggregate queries is not supported",
        ));
    }
    let mut parts = Vec::new();
    for ((measurement, table), cols) in tables.iter().zip(&all_columns) {
        let part = if let Some(ranked) = &ranked {
            ranked.part(
                measurement,
                table,
                cols,
                &columns,
                &grouping,
                range,
                rest.as_ref(),
            )?
        } else if let Some(integral) = &integral {
            integral.part(
                measurement,
                table,
                cols,
                &columns[0],
                &grouping,
                range,
                rest.as_ref(),
            )?
        } else if let Some(distinct) = distinct {
            distinct_part(
                measurement,
                table,
                cols,
                distinct,
                &grouping,
                range,
                rest.as_ref(),
            )?
        } else if aggregate {
            aggregate_part(
                measurement,
                table,
                cols,
                &columns,
                &grouping,
                range,
                rest.as_ref(),
            )?
        } else {
            raw_part(
                measurement,
                table,
                cols,
                &columns,
                &grouping,
                range,
                rest.as_ref(),
            )?
        };
        if let Some(part) = part {
            parts.push(part);
        }
    }
    let Some(plan) = union(parts, &columns)? else {
        return empty(&grouping);
    };
    // distinct(), top(), bottom() and integral() answer the values there are: nothing to fill
    let plan = match aggregate && distinct.is_none() && ranked.is_none() && integral.is_none() {
        true => fill_aggregates(plan, select, ctx, &grouping, range, &columns)?,
        false => plan,
    };
    let plan = match transformations.is_empty() {
        true => plan,
        false => {
            let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
            let plan = transform::apply(plan, &grouping.tags, &names, &transformations)?;
            match range_start {
                Some(start) => LogicalPlanBuilder::from(plan)
                    .filter(ident("time").gt_eq(timestamp(start)))?
                    .build()?,
                None => plan,
            }
        }
    };
    let tiebreak = distinct.map(|_| FIRST_SEEN);
    order_and_limit(plan, select, &grouping.tags, tiebreak)
}

/// Hidden column of a `distinct()` answer: when a value was first seen in its bucket (1.x
/// lists a bucket's values in that order; with `ORDER BY time DESC` too, here).
const FIRST_SEEN: &str = "__first_seen";

/// The `distinct(field)` column, if the statement selects one (outside `count()`); 1.x
/// allows nothing beside it.
fn distinct_column(columns: &[OutputColumn]) -> Result<Option<&OutputColumn>, PlanError> {
    let is_distinct =
        |c: &&OutputColumn| matches!(&c.expr, Expr::Call { name, .. } if name == "distinct");
    let Some(column) = columns.iter().find(is_distinct) else {
        return Ok(None);
    };
    if columns.len() > 1 {
        return Err(PlanError::new(
            "aggregate function distinct() cannot be combined with other functions or fields",
        ));
    }
    match &column.expr {
        Expr::Call { args, .. } if matches!(args.as_slice(), [Expr::VarRef { .. }]) => {
            Ok(Some(column))
        }
        _ => Err(PlanError::new(
            "distinct function requires at least one argument",
        )),
    }
}

/// The distinct values of one measurement's series per bucket, each with the time it was
/// first seen ([`FIRST_SEEN`]).
fn distinct_part(
    measurement: &str,
    table: &Arc<dyn TableSource>,
    cols: &Columns,
    column: &OutputColumn,
    grouping: &Grouping,
    range: TimeRange,
    rest: Option<&Expr>,
) -> Result<Option<LogicalPlan>, PlanError> {
    let Expr::Call { args, .. } = &column.expr else {
        return Ok(None);
    };
    if field_names(&args[0], cols).is_empty() {
        return Ok(None);
    }
    let value = field_value(&args[0], cols)?;
    let mut group_keys: Vec<DfExpr> = Vec::new();
    if let Some((interval, offset)) = grouping.interval {
        group_keys.push(bucket(interval, offset).alias("__bucket"));
    }
    for tag in &grouping.tags {
        group_keys.push(tag_key(cols, tag).alias(format!("__tag_{tag}")));
    }
    group_keys.push(value.clone().alias("__distinct"));
    let first_seen = datafusion::functions_aggregate::expr_fn::min(ident("time"));
    let time = match grouping.interval {
        Some(_) => ident("__bucket"),
        None => timestamp(range.lower.unwrap_or(0)),
    };
    let mut projection = vec![
        lit(measurement.to_string()).alias(MEASUREMENT_COLUMN),
        time.alias("time"),
    ];
    projection.extend(key_tags(grouping));
    projection.push(ident("__distinct").alias(&column.name));
    projection.push(ident(FIRST_SEEN));
    let plan = scan(measurement, table, cols, range, rest)?
        .filter(value.is_not_null())?
        .aggregate(group_keys, vec![first_seen.alias(FIRST_SEEN)])?
        .project(projection)?
        .build()?;
    Ok(Some(plan))
}

/// The transformations among `columns` (`derivative(mean(x), 1s)`, `difference(x)`, ...),
/// each replaced by its argument as a hidden column; refused where InfluxDB 1.x refuses them
/// (an aggregate argument without `GROUP BY time`, a raw one with it, a mix of both).
fn take_transformations(
    columns: &mut [OutputColumn],
    grouping: &Grouping,
) -> Result<Vec<Transformation>, PlanError> {
    let mut found = Vec::new();
    for (i, column) in columns.iter_mut().enumerate() {
        let Expr::Call { name, args } = &column.expr else {
            continue;
        };
        if !transform::is_transformation(name) {
            continue;
        }
        let input = format!("__input_{i}");
        let interval = grouping.interval.map(|(interval, _)| interval);
        let (transformation, argument) =
            Transformation::new(name, args, (input.clone(), column.name.clone()), interval)?;
        if let Some(rows) = rows_of_their_own(&argument) {
            return Err(PlanError::new(format!(
                "{name}() of {rows}() is not supported yet"
            )));
        }
        match (has_aggregate(&argument), grouping.interval.is_some()) {
            (true, false) => {
                return Err(PlanError::new(format!(
                    "{name} aggregate requires a GROUP BY interval"
                )))
            }
            (false, true) => {
                return Err(PlanError::new(format!(
                    "aggregate function required inside the call to {name}"
                )))
            }
            _ => {}
        }
        column.expr = argument;
        column.name = input;
        found.push(transformation);
    }
    Ok(found)
}

/// The selected columns, wildcards and regular expressions expanded over every measurement's
/// fields and tags, named as InfluxDB 1.x names them (a repeated name gets `_1`, `_2`, ...).
fn output_columns(
    select: &SelectStatement,
    all: &[Columns],
    grouping: &Grouping,
) -> Result<Vec<OutputColumn>, PlanError> {
    let fields: BTreeMap<String, FieldType> = all.iter().flat_map(Columns::fields).collect();
    let field_names: BTreeSet<String> = fields.keys().cloned().collect();
    let tags: BTreeSet<String> = all
        .iter()
        .flat_map(Columns::tags)
        .filter(|t| !grouping.tags.contains(t))
        .collect();
    let var = |name: &str| Expr::VarRef {
        name: name.to_string(),
        data_type: None,
    };
    let mut columns: Vec<OutputColumn> = Vec::new();
    for field in &select.fields {
        if columns.len() > MAX_SELECTED_COLUMNS {
            break; // refused below, before anything more is expanded
        }
        match &field.expr {
            Expr::Wildcard { kind } => {
                let mut names: BTreeSet<String> = BTreeSet::new();
                if *kind != Some(WildcardKind::Tag) {
                    names.extend(field_names.iter().cloned());
                }
                if *kind != Some(WildcardKind::Field) {
                    names.extend(tags.iter().cloned());
                }
                columns.extend(names.into_iter().map(|n| OutputColumn {
                    expr: var(&n),
                    name: n,
                }));
            }
            Expr::Regex(pattern) => {
                let regex = expr::bounded_regex(pattern)?;
                let names: BTreeSet<String> = field_names
                    .iter()
                    .chain(tags.iter())
                    .filter(|n| regex.is_match(n.as_str()))
                    .cloned()
                    .collect();
                columns.extend(names.into_iter().map(|n| OutputColumn {
                    expr: var(&n),
                    name: n,
                }));
            }
            Expr::Call { name, args }
                if matches!(args.first(), Some(Expr::Wildcard { .. } | Expr::Regex(_))) =>
            {
                let regex = match &args[0] {
                    Expr::Regex(pattern) => Some(expr::bounded_regex(pattern)?),
                    _ => None,
                };
                for (field_name, field_type) in &fields {
                    if regex.as_ref().is_some_and(|r| !r.is_match(field_name))
                        || !accepts(name, *field_type)
                    {
                        continue;
                    }
                    let mut args = args.clone();
                    args[0] = var(field_name);
                    columns.push(OutputColumn {
                        name: format!("{name}_{field_name}"),
                        expr: Expr::Call {
                            name: name.clone(),
                            args,
                        },
                    });
                }
            }
            other => columns.push(OutputColumn {
                name: field
                    .alias
                    .clone()
                    .unwrap_or_else(|| expr::column_name(other)),
                expr: other.clone(),
            }),
        }
    }
    if columns.is_empty() {
        return Err(PlanError::new(
            "statement must have at least one field in select clause",
        ));
    }
    if columns.len() > MAX_SELECTED_COLUMNS {
        return Err(PlanError::new(format!(
            "the statement selects {} columns; at most {MAX_SELECTED_COLUMNS} are allowed",
            columns.len()
        )));
    }
    dedupe_names(&mut columns);
    Ok(columns)
}

fn dedupe_names(columns: &mut [OutputColumn]) {
    let mut seen: std::collections::HashSet<String> = ["time".to_string()].into();
    for column in columns.iter_mut() {
        let base = column.name.clone();
        let mut name = base.clone();
        let mut n = 0;
        while seen.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        seen.insert(name.clone());
        column.name = name;
    }
}

fn is_var_ref(expr: &Expr) -> bool {
    matches!(expr, Expr::VarRef { .. })
}

pub(super) fn timestamp(ns: i64) -> DfExpr {
    lit(ScalarValue::TimestampNanosecond(
        Some(ns),
        Some("UTC".into()),
    ))
}

/// The metadata that marks a `GROUP BY` tag column.
fn tag_role() -> Option<FieldMetadata> {
    Some(FieldMetadata::from(std::collections::BTreeMap::from([(
        ROLE_METADATA_KEY.to_string(),
        TAG_ROLE.to_string(),
    )])))
}

/// The key columns every part starts with: measurement, time, the grouped tags (`''` where
/// a point lacks one, as InfluxDB shows it).
fn key_columns(
    measurement: &str,
    time: DfExpr,
    grouping: &Grouping,
    cols: &Columns,
) -> Vec<DfExpr> {
    let mut keys = vec![
        lit(measurement.to_string()).alias(MEASUREMENT_COLUMN),
        time.alias("time"),
    ];
    for tag in &grouping.tags {
        let value = match cols.resolve(tag, None) {
            Resolved::Tag(tag) => expr::tag_value(&tag),
            _ => lit(""),
        };
        keys.push(value.alias_with_metadata(tag.clone(), tag_role()));
    }
    keys
}

/// Scan of `table` with the statement's time range and condition applied.
pub(super) fn scan(
    measurement: &str,
    table: &Arc<dyn TableSource>,
    cols: &Columns,
    range: TimeRange,
    rest: Option<&Expr>,
) -> Result<LogicalPlanBuilder, PlanError> {
    let mut builder = LogicalPlanBuilder::scan(measurement, Arc::clone(table), None)?;
    let mut filters = Vec::new();
    if let Some(lower) = range.lower {
        filters.push(ident("time").gt_eq(timestamp(lower)));
    }
    if let Some(upper) = range.upper {
        filters.push(ident("time").lt(timestamp(upper)));
    }
    if let Some(rest) = rest {
        filters.push(expr::condition(rest, cols)?);
    }
    if let Some(filter) = filters.into_iter().reduce(DfExpr::and) {
        builder = builder.filter(filter)?;
    }
    Ok(builder)
}

/// One measurement's points: its key columns and the selected values; a row whose selected
/// fields are all null is no point and left out. `None` if none of the selected names is a
/// field of the measurement.
fn raw_part(
    measurement: &str,
    table: &Arc<dyn TableSource>,
    cols: &Columns,
    columns: &[OutputColumn],
    grouping: &Grouping,
    range: TimeRange,
    rest: Option<&Expr>,
) -> Result<Option<LogicalPlan>, PlanError> {
    let field_refs: Vec<DfExpr> = columns
        .iter()
        .flat_map(|c| field_names(&c.expr, cols))
        .map(|f| ident(f).is_not_null())
        .collect();
    let Some(any_field) = field_refs.into_iter().reduce(DfExpr::or) else {
        return Ok(None);
    };
    let mut projection = key_columns(measurement, ident("time"), grouping, cols);
    for column in columns {
        projection.push(expr::scalar(&column.expr, cols)?.alias(&column.name));
    }
    let plan = scan(measurement, table, cols, range, rest)?
        .filter(any_field)?
        .project(projection)?
        .build()?;
    Ok(Some(plan))
}

/// The fields of `cols` that `expr` names.
fn field_names(expr: &Expr, cols: &Columns) -> Vec<String> {
    match expr {
        Expr::VarRef { name, data_type } => match cols.resolve(name, *data_type) {
            Resolved::Field(field, _) => vec![field],
            _ => vec![],
        },
        Expr::Call { args, .. } => args.iter().flat_map(|a| field_names(a, cols)).collect(),
        Expr::Binary { lhs, rhs, .. } => {
            let mut names = field_names(lhs, cols);
            names.extend(field_names(rhs, cols));
            names
        }
        Expr::Paren(inner) => field_names(inner, cols),
        _ => vec![],
    }
}

/// The aggregates of one measurement's series, per time bucket if grouped by time.
fn aggregate_part(
    measurement: &str,
    table: &Arc<dyn TableSource>,
    cols: &Columns,
    columns: &[OutputColumn],
    grouping: &Grouping,
    range: TimeRange,
    rest: Option<&Expr>,
) -> Result<Option<LogicalPlan>, PlanError> {
    let fields: Vec<String> = columns
        .iter()
        .flat_map(|c| field_names(&c.expr, cols))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // the points behind a row: the sum of the fields' counts, positive if any field has a
    // value (plain counts, which DataFusion computes alongside the other aggregates)
    let Some(points) = fields
        .iter()
        .map(|f| datafusion::functions_aggregate::expr_fn::count(ident(f.as_str())))
        .reduce(|a, b| a + b)
    else {
        return Ok(None);
    };
    let selector = Selector::single(columns);
    let mut aggregates = Aggregates::default();
    let mut values = Vec::new();
    for column in columns {
        let value = match (&column.expr, &selector) {
            (var @ Expr::VarRef { .. }, Some(selector)) => {
                aggregates.add(selector.pick(expr::scalar(var, cols)?)?)
            }
            (expr, _) => aggregate_value(expr, cols, &mut aggregates)?,
        };
        values.push(value.alias(&column.name));
    }
    // with GROUP BY time a selector's time is its bucket's; the other columns still follow it
    let time = match (grouping.interval, &selector) {
        (Some((interval, offset)), _) => bucket(interval, offset),
        (None, Some(selector)) => aggregates.add(selector.pick(ident("time"))?),
        (None, None) => timestamp(range.lower.unwrap_or(0)),
    };
    let points = points.alias(POINTS);
    let mut group_keys: Vec<DfExpr> = Vec::new();
    if let Some((interval, offset)) = grouping.interval {
        group_keys.push(bucket(interval, offset).alias("__bucket"));
    }
    // grouped by the tag columns themselves (dictionary keys, no per-row conversion); a
    // missing tag becomes `''` on the grouped rows
    for tag in &grouping.tags {
        group_keys.push(tag_key(cols, tag).alias(format!("__tag_{tag}")));
    }
    let mut aggregate_exprs = aggregates.exprs;
    aggregate_exprs.push(points);
    let builder =
        scan(measurement, table, cols, range, rest)?.aggregate(group_keys, aggregate_exprs)?;
    let time = match grouping.interval {
        Some(_) => ident("__bucket"),
        None => time,
    };
    let mut projection = vec![
        lit(measurement.to_string()).alias(MEASUREMENT_COLUMN),
        time.alias("time"),
    ];
    projection.extend(key_tags(grouping));
    projection.extend(values);
    let plan = builder
        .filter(ident(POINTS).gt(lit(0i64)))?
        .project(projection)?
        .build()?;
    Ok(Some(plan))
}

/// The aggregate expressions of a part, each named `__agg_N`.
#[derive(Default)]
struct Aggregates {
    exprs: Vec<DfExpr>,
}

impl Aggregates {
    /// Adds `aggregate` and returns the column that will hold it.
    fn add(&mut self, aggregate: DfExpr) -> DfExpr {
        let name = format!("__agg_{}", self.exprs.len());
        self.exprs.push(aggregate.alias(&name));
        ident(name)
    }
}

/// An aggregate column's value: its calls become aggregates, the arithmetic around them is
/// done on their results.
fn aggregate_value(
    expr: &Expr,
    cols: &Columns,
    aggregates: &mut Aggregates,
) -> Result<DfExpr, PlanError> {
    match expr {
        Expr::Call { name, args } if is_aggregate_function(name) || is_transformation(name) => {
            let aggregate = aggregate_call(name, args, cols)?;
            Ok(aggregates.add(aggregate))
        }
        Expr::Binary { op, lhs, rhs } => {
            let l = aggregate_value(lhs, cols, aggregates)?;
            let r = aggregate_value(rhs, cols, aggregates)?;
            expr::arithmetic(*op, l, r)
                .ok_or_else(|| PlanError::new(format!("invalid operator {op} in {expr}")))
        }
        Expr::Paren(inner) => aggregate_value(inner, cols, aggregates),
        Expr::Literal(value) => Ok(expr::literal(value)),
        _ => Err(PlanError::new(
            "mixing aggregate and non-aggregate queries is not supported",
        )),
    }
}

/// The parts as one plan; each output column cast to one type across the parts (a field
/// that is a float in one measurement and missing in another is a float column).
fn union(
    parts: Vec<LogicalPlan>,
    columns: &[OutputColumn],
) -> Result<Option<LogicalPlan>, PlanError> {
    if parts.len() <= 1 {
        return Ok(parts.into_iter().next());
    }
    let types: Vec<DataType> = columns
        .iter()
        .map(|c| {
            let all: Vec<DataType> = parts
                .iter()
                .filter_map(|p| p.schema().field_with_unqualified_name(&c.name).ok())
                .map(|f| f.data_type().clone())
                .filter(|t| *t != DataType::Null)
                .collect();
            common_type(&all)
        })
        .collect();
    let mut unified = Vec::new();
    for part in parts {
        let schema = part.schema().clone();
        let projection: Vec<DfExpr> = schema
            .iter()
            .map(|(qualifier, field)| {
                let column = DfExpr::Column(datafusion::common::Column::from((qualifier, field)));
                match columns.iter().position(|c| &c.name == field.name()) {
                    Some(i) if field.data_type() != &types[i] => {
                        cast(column, types[i].clone()).alias(field.name())
                    }
                    _ => column,
                }
            })
            .collect();
        unified.push(
            LogicalPlanBuilder::from(part)
                .project(projection)?
                .build()?,
        );
    }
    let mut parts = unified.into_iter();
    let first = parts.next().expect("more than one part");
    let mut builder = LogicalPlanBuilder::from(first);
    for part in parts {
        builder = builder.union(part)?;
    }
    Ok(Some(builder.build()?))
}

/// One type for a column holding `types` in different parts.
fn common_type(types: &[DataType]) -> DataType {
    match types.first() {
        None => DataType::Null,
        Some(first) if types.iter().all(|t| t == first) => first.clone(),
        Some(_) if types.iter().all(DataType::is_numeric) => DataType::Float64,
        Some(_) => DataType::Utf8,
    }
}

/// The answer of a statement whose measurements or fields do not exist: no rows.
fn empty(grouping: &Grouping) -> Result<LogicalPlan, PlanError> {
    let mut projection = vec![
        lit("").alias(MEASUREMENT_COLUMN),
        cast(
            lit(0i64),
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        )
        .alias("time"),
    ];
    for tag in &grouping.tags {
        projection.push(lit("").alias_with_metadata(tag.clone(), tag_role()));
    }
    Ok(LogicalPlanBuilder::empty(false)
        .project(projection)?
        .build()?)
}

/// Sorted by series, then time (descending with `ORDER BY time DESC`); `LIMIT`/`OFFSET`
/// counted per series, `SLIMIT`/`SOFFSET` in series.
fn order_and_limit(
    plan: LogicalPlan,
    select: &SelectStatement,
    tags: &[String],
    tiebreak: Option<&str>,
) -> Result<LogicalPlan, PlanError> {
    use datafusion::functions_window::expr_fn::{dense_rank, row_number};
    let series: Vec<DfExpr> = std::iter::once(ident(MEASUREMENT_COLUMN))
        .chain(tags.iter().map(|t| ident(t.as_str())))
        .collect();
    let ascending = !select.order_desc;
    let mut order: Vec<SortExpr> = series.iter().map(|e| e.clone().sort(true, false)).collect();
    let mut in_series = vec![ident("time").sort(ascending, false)];
    in_series.extend(tiebreak.map(|column| ident(column).sort(true, false)));
    order.extend(in_series.iter().cloned());
    let output: Vec<DfExpr> = plan
        .schema()
        .iter()
        .filter(|(_, f)| Some(f.name().as_str()) != tiebreak)
        .map(|(q, f)| DfExpr::Column(datafusion::common::Column::from((q, f))))
        .collect();
    let mut builder = LogicalPlanBuilder::from(plan);
    let mut filters = Vec::new();
    // LIMIT 0 is no limit, as in 1.x
    let limit = select.limit.filter(|&limit| limit > 0);
    if limit.is_some() || select.offset.is_some() {
        let rank = row_number()
            .partition_by(series.clone())
            .order_by(in_series.clone())
            .build()?
            .alias("__row");
        builder = builder.window(vec![rank])?;
        let offset = select.offset.unwrap_or(0);
        filters.push(ident("__row").gt(lit(offset)));
        if let Some(limit) = limit {
            filters.push(ident("__row").lt_eq(lit(offset.saturating_add(limit))));
        }
    }
    if select.slimit.is_some() || select.soffset.is_some() {
        let rank = dense_rank()
            .order_by(series.iter().map(|e| e.clone().sort(true, false)).collect())
            .build()?
            .alias("__series");
        builder = builder.window(vec![rank])?;
        let offset = select.soffset.unwrap_or(0);
        filters.push(ident("__series").gt(lit(offset)));
        if let Some(limit) = select.slimit {
            filters.push(ident("__series").lt_eq(lit(offset.saturating_add(limit))));
        }
    }
    if let Some(filter) = filters.into_iter().reduce(DfExpr::and) {
        builder = builder.filter(filter)?;
    }
    Ok(builder.sort(order)?.project(output)?.build()?)
}

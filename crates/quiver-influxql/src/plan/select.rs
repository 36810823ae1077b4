//! `SELECT`: raw queries (points, with InfluxDB's rule that a row whose selected fields are all
//! null is not a point) and aggregate queries (per series and `GROUP BY time` bucket, with
//! selectors that return the time, and the other selected columns, of the point they chose);
//! `distinct()`, `top()`/`bottom()` and `integral()`, which answer rows of their own; several
//! measurements as one union, or a subquery read as a view; then fill, order and the
//! per-series `LIMIT`/`OFFSET` and `SLIMIT`/`SOFFSET`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::FieldMetadata;
use datafusion::logical_expr::{
    cast, lit, Expr as DfExpr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder, SortExpr,
    TableSource,
};
use datafusion::prelude::{ident, nullif};
use quiver_model::schema::FieldType;

use super::expr::{self, Columns, Resolved};
use super::fill::{self, Buckets};
use super::integral::Integral;
use super::transform::{self, Transformation};

use super::time_range::{self, TimeRange};
use super::{PlanContext, PlanError, MEASUREMENT_COLUMN, ROLE_METADATA_KEY, TAG_ROLE};
use crate::ast::{Dimension, Expr, Fill, SelectStatement, Source, WildcardKind};

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

/// What is grouped by.
pub(super) struct Grouping {
    /// `GROUP BY time(interval, offset)`.
    pub(super) interval: Option<(i64, i64)>,
    /// The tags, sorted.
    pub(super) tags: Vec<String>,
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
            let start = lower - (lower - offset).rem_euclid(interval);
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

/// `top(field, [tag, ...,] n)` / `bottom(...)`: the `n` points of a bucket with the largest
/// (smallest) values, earlier points first among equal values, each with its own time and
/// the other columns selected beside it; with tags, first the best point of each
/// combination of their values, then the best `n` of those.
struct Ranked {
    /// Which output column it is.
    column: usize,
    field: Expr,
    tags: Vec<String>,
    n: i64,
    largest: bool,
}

impl Ranked {
    /// The statement's `top()` / `bottom()`, if it has one; refused where 1.x refuses it.
    fn find(
        columns: &[OutputColumn],
        select: &SelectStatement,
    ) -> Result<Option<Ranked>, PlanError> {
        let Some((column, name, args)) =
            columns.iter().enumerate().find_map(|(i, c)| match &c.expr {
                Expr::Call { name, args } if name == "top" || name == "bottom" => {
                    Some((i, name, args))
                }
                _ => None,
            })
        else {
            return Ok(None);
        };
        if columns
            .iter()
            .enumerate()
            .any(|(i, c)| i != column && !is_var_ref(&c.expr))
        {
            return Err(PlanError::new(format!(
                "selector function {name}() cannot be combined with other functions"
            )));
        }
        let (field, rest) = match args.as_slice() {
            [field @ Expr::VarRef { .. }, rest @ .., _] => (field.clone(), rest),
            _ => {
                return Err(PlanError::new(format!(
                    "invalid number of arguments for {name}, expected at least 2, got {}",
                    args.len()
                )))
            }
        };
        let n = match args.last() {
            Some(Expr::Literal(crate::ast::Literal::Integer(n))) if *n > 0 => *n,
            Some(other) => {
                return Err(PlanError::new(format!(
                    "expected integer as last argument in {name}(), found {other}"
                )))
            }
            None => 0,
        };
        let mut tags = Vec::new();
        for arg in rest {
            match arg {
                Expr::VarRef { name, .. } => tags.push(name.clone()),
                other => {
                    return Err(PlanError::new(format!(
                        "only fields or tags are allowed in {name}(), found {other}"
                    )))
                }
            }
        }
        // (LIMIT 0 is no limit)
        if let Some(limit) = select
            .limit
            .filter(|&limit| limit > 0 && (limit as i128) < n as i128)
        {
            return Err(PlanError::new(format!(
                "limit ({n}) in {name} function can not be larger than the LIMIT ({limit}) in \
                 the select statement"
            )));
        }
        Ok(Some(Ranked {
            column,
            field,
            tags,
            n,
            largest: name == "top",
        }))
    }

    /// Shows the tags of `top(field, tag, ..., n)` right after it, as 1.x does (renamed
    /// `<tag>_1` if the statement groups by it too: the series' key shows it).
    fn add_tag_columns(&self, columns: &mut Vec<OutputColumn>, grouped: &[String]) {
        let tags = self.tags.iter().map(|tag| OutputColumn {
            name: match grouped.contains(tag) {
                true => format!("{tag}_1"),
                false => tag.clone(),
            },
            expr: Expr::VarRef {
                name: tag.clone(),
                data_type: None,
            },
        });
        columns.splice(self.column + 1..self.column + 1, tags);
        dedupe_names(columns);
    }

    /// One measurement's chosen points; `None` if the field is not one of its fields.
    #[allow(clippy::too_many_arguments)]
    fn part(
        &self,
        measurement: &str,
        table: &Arc<dyn TableSource>,
        cols: &Columns,
        columns: &[OutputColumn],
        grouping: &Grouping,
        range: TimeRange,
        rest: Option<&Expr>,
    ) -> Result<Option<LogicalPlan>, PlanError> {
        use datafusion::functions_window::expr_fn::row_number;
        if field_names(&self.field, cols).is_empty() {
            return Ok(None);
        }
        let value = field_value(&self.field, cols)?;
        let order = vec![
            value.clone().sort(!self.largest, false),
            ident("time").sort(true, false),
        ];
        let mut partition: Vec<DfExpr> = grouping
            .interval
            .map(|(interval, offset)| bucket(interval, offset))
            .into_iter()
            .collect();
        partition.extend(grouping.tags.iter().map(|tag| tag_key(cols, tag)));
        let mut builder =
            scan(measurement, table, cols, range, rest)?.filter(value.clone().is_not_null())?;
        if !self.tags.is_empty() {
            // the best point of each combination of the tags' values first
            let mut by_tags = partition.clone();
            by_tags.extend(
                self.tags
                    .iter()
                    .map(|t| {
                        expr::scalar(
                            &Expr::VarRef {
                                name: t.clone(),
                                data_type: None,
                            },
                            cols,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            );
            let best = row_number()
                .partition_by(by_tags)
                .order_by(order.clone())
                .build()?;
            builder = builder
                .window(vec![best.alias("__best")])?
                .filter(ident("__best").eq(lit(1u64)))?;
        }
        let rank = row_number()
            .partition_by(partition)
            .order_by(order)
            .build()?;
        let mut projection = key_columns(measurement, ident("time"), grouping, cols);
        for (i, column) in columns.iter().enumerate() {
            let value = match i == self.column {
                true => value.clone(),
                false => expr::scalar(&column.expr, cols)?,
            };
            projection.push(value.alias(&column.name));
        }
        let plan = builder
            .window(vec![rank.alias("__rank")])?
            .filter(ident("__rank").lt_eq(lit(self.n as u64)))?
            .project(projection)?
            .build()?;
        Ok(Some(plan))
    }
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

/// The function in `expr` that answers rows of its own (`distinct`, `top`, `bottom`,
/// `integral`), which a transformation cannot run along.
fn rows_of_their_own(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Call { name, .. }
            if matches!(name.as_str(), "distinct" | "top" | "bottom" | "integral") =>
        {
            Some(name)
        }
        Expr::Call { args, .. } => args.iter().find_map(rows_of_their_own),
        Expr::Binary { lhs, rhs, .. } => rows_of_their_own(lhs).or_else(|| rows_of_their_own(rhs)),
        Expr::Paren(inner) => rows_of_their_own(inner),
        _ => None,
    }
}

/// Aggregates with their missing values filled (`fill()`, null by default): with `GROUP BY
/// time` over a range with a start, every bucket of every series first gets a row.
fn fill_aggregates(
    plan: LogicalPlan,
    select: &SelectStatement,
    ctx: &PlanContext<'_>,
    grouping: &Grouping,
    range: TimeRange,
    columns: &[OutputColumn],
) -> Result<LogicalPlan, PlanError> {
    let fill = select.fill.clone().unwrap_or(Fill::Null);
    let outputs: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let counts: Vec<bool> = columns.iter().map(|c| is_count(&c.expr)).collect();
    let plan = match (grouping.interval, range.lower, &fill) {
        (Some((interval, offset)), Some(lower), fill) if *fill != Fill::None => {
            let upper = range.upper.unwrap_or(ctx.now_ns.saturating_add(1));
            let buckets = Buckets::new(lower, upper, interval, offset, ctx.max_buckets)?;
            fill::grid(plan, &buckets, &grouping.tags, &outputs)?
        }
        // without a start there is no first bucket to fill from
        _ => plan,
    };
    fill::fill_values(plan, &grouping.tags, &outputs, &counts, &fill)
}

fn is_count(expr: &Expr) -> bool {
    matches!(expr, Expr::Call { name, .. } if name == "count")
}

/// The `GROUP BY` of `select`: its time interval and the tags (a regular expression or `*`
/// matched against every measurement's tags).
fn grouping(select: &SelectStatement, all: &[Columns]) -> Result<Grouping, PlanError> {
    let mut interval = None;
    let mut tags = BTreeSet::new();
    let every_tag: BTreeSet<String> = all.iter().flat_map(Columns::tags).collect();
    for dimension in &select.group_by {
        match dimension {
            Dimension::Time {
                interval: i,
                offset,
            } => {
                if interval.is_some() {
                    return Err(PlanError::new("multiple time dimensions not allowed"));
                }
                if *i <= 0 {
                    return Err(PlanError::new("GROUP BY time() needs a positive interval"));
                }
                interval = Some((*i, offset.unwrap_or(0).rem_euclid(*i)));
            }
            Dimension::Tag(tag) => {
                tags.insert(tag.clone());
            }
            Dimension::Wildcard => tags.extend(every_tag.iter().cloned()),
            Dimension::Regex(pattern) => {
                let regex = expr::bounded_regex(pattern)?;
                tags.extend(
                    every_tag
                        .iter()
                        .filter(|t| regex.is_match(t.as_str()))
                        .cloned(),
                );
            }
        }
    }
    Ok(Grouping {
        interval,
        tags: tags.into_iter().collect(),
    })
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

/// Whether aggregate `function` applies to a field of `field_type` (for `mean(*)` and
/// friends, which skip the fields it does not).
fn accepts(function: &str, field_type: FieldType) -> bool {
    let numeric = matches!(
        field_type,
        FieldType::Float | FieldType::Integer | FieldType::UInteger
    );
    match function {
        "count" | "first" | "last" | "distinct" | "mode" => true,
        "max" | "min" => numeric || field_type == FieldType::Boolean,
        _ => numeric,
    }
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

/// InfluxQL's aggregate and selector functions.
fn is_aggregate_function(name: &str) -> bool {
    matches!(
        name,
        "count"
            | "sum"
            | "mean"
            | "median"
            | "mode"
            | "spread"
            | "stddev"
            | "min"
            | "max"
            | "first"
            | "last"
            | "percentile"
            | "distinct"
            | "top"
            | "bottom"
            | "sample"
            | "integral"
    )
}

/// Functions that transform a series point by point (not supported yet).
/// A source a statement reads, under the measurement name its series take.
type NamedSource = (String, Arc<dyn TableSource>);

/// What `select` reads: its measurements, or its one subquery planned as a view whose columns
/// look like a measurement's (its grouped tags as tags, its values as fields) named after
/// the measurement it reads.
fn sources(
    select: &SelectStatement,
    ctx: &PlanContext<'_>,
    range: TimeRange,
) -> Result<Vec<NamedSource>, PlanError> {
    let mut names = Vec::new();
    let mut subqueries = Vec::new();
    for source in &select.from {
        match source {
            Source::Measurement(name) => names.push(name.clone()),
            Source::Subquery(inner) => subqueries.push(inner),
        }
    }
    match (names.is_empty(), subqueries.as_slice()) {
        (true, [inner]) => Ok(subquery_source(inner, ctx, range)?.into_iter().collect()),
        (_, []) => {
            let measurements = super::resolve_names(&names, &ctx.schemas.measurements())?;
            Ok(measurements
                .into_iter()
                .filter_map(|m| ctx.schemas.table(&m).map(|t| (m, t)))
                .collect())
        }
        _ => Err(PlanError::new(
            "reading several subqueries, or subqueries and measurements, in one FROM is not \
             supported yet",
        )),
    }
}

/// A subquery as a source (see [`sources`]); `None` if it reads no measurement.
fn subquery_source(
    inner: &SelectStatement,
    ctx: &PlanContext<'_>,
    range: TimeRange,
) -> Result<Option<NamedSource>, PlanError> {
    let Some(name) = measurement_of(inner, ctx)? else {
        return Ok(None);
    };
    let plan = plan_select_within(inner, ctx, range)?;
    let columns: Vec<DfExpr> = plan
        .schema()
        .iter()
        .filter(|(_, f)| f.name() != MEASUREMENT_COLUMN)
        .map(|(qualifier, field)| {
            let column = DfExpr::Column(datafusion::common::Column::from((qualifier, field)));
            match field.metadata().get(ROLE_METADATA_KEY).map(String::as_str) {
                Some(TAG_ROLE) => cast(column, tag_type()).alias(field.name()),
                _ => column,
            }
        })
        .collect();
    let plan = LogicalPlanBuilder::from(plan).project(columns)?.build()?;
    let view = datafusion::catalog::view::ViewTable::new(plan, None);
    Ok(Some((
        name,
        datafusion::datasource::provider_as_source(Arc::new(view)),
    )))
}

/// The type of a tag column (what tells a tag from a string field).
fn tag_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The one measurement a subquery reads (through its own subqueries), which names the outer
/// statement's series; `None` if it reads none.
fn measurement_of(
    select: &SelectStatement,
    ctx: &PlanContext<'_>,
) -> Result<Option<String>, PlanError> {
    let mut found = Vec::new();
    for source in &select.from {
        match source {
            Source::Measurement(name) => found.extend(super::resolve_names(
                std::slice::from_ref(name),
                &ctx.schemas.measurements(),
            )?),
            Source::Subquery(inner) => found.extend(measurement_of(inner, ctx)?),
        }
    }
    found.dedup();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(PlanError::new(
            "a subquery reading several measurements is not supported yet",
        )),
    }
}

/// Transformations not computed yet (the others are rewritten by [`take_transformations`]
/// before any of this sees them).
fn is_transformation(name: &str) -> bool {
    matches!(
        name,
        "holt_winters"
            | "holt_winters_with_fit"
            | "exponential_moving_average"
            | "double_exponential_moving_average"
            | "triple_exponential_moving_average"
            | "relative_strength_index"
            | "chande_momentum_oscillator"
            | "kaufmans_efficiency_ratio"
            | "kaufmans_adaptive_moving_average"
            | "triple_exponential_derivative"
    )
}

fn has_aggregate(expr: &Expr) -> bool {
    match expr {
        Expr::Call { name, args } => {
            is_aggregate_function(name) || is_transformation(name) || args.iter().any(has_aggregate)
        }
        Expr::Binary { lhs, rhs, .. } => has_aggregate(lhs) || has_aggregate(rhs),
        Expr::Paren(inner) => has_aggregate(inner),
        _ => false,
    }
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

/// `GROUP BY time` bucket of a point: `date_bin` aligned to the epoch plus `offset`.
pub(super) fn bucket(interval: i64, offset: i64) -> DfExpr {
    bucket_of(ident("time"), interval, offset)
}

/// The `GROUP BY time` bucket of `time`.
pub(super) fn bucket_of(time: DfExpr, interval: i64, offset: i64) -> DfExpr {
    let stride = lit(ScalarValue::IntervalMonthDayNano(Some(
        arrow::datatypes::IntervalMonthDayNano::new(0, 0, interval),
    )));
    datafusion::functions::expr_fn::date_bin(stride, time, timestamp(offset))
}

/// Grouped tag `tag` as a key over `cols`' rows: the tag column itself (dictionary keys, no
/// per-row conversion), or `''` if the measurement has no such tag.
pub(super) fn tag_key(cols: &Columns, tag: &str) -> DfExpr {
    match cols.resolve(tag, None) {
        Resolved::Tag(tag) => ident(tag),
        _ => lit(""),
    }
}

/// The grouped tags of a part grouped by `__tag_<tag>` keys, as the answer shows them.
pub(super) fn key_tags(grouping: &Grouping) -> Vec<DfExpr> {
    grouping
        .tags
        .iter()
        .map(|tag| {
            expr::tag_value(&format!("__tag_{tag}")).alias_with_metadata(tag.clone(), tag_role())
        })
        .collect()
}

/// The point a statement's only call chooses, when that call is a selector (first, last,
/// min, max, percentile): the answer's time, and its other selected columns, are that
/// point's.
struct Selector {
    /// The selector's field.
    field: String,
    /// The order of the points it chooses among (those where the field is set).
    order: Vec<SortExpr>,
    /// Which of them, `None` for the first; `Some(n)`: the `percentile(field, n)` rank.
    percentile: Option<f64>,
}

impl Selector {
    fn single(columns: &[OutputColumn]) -> Option<Selector> {
        let calls: Vec<&Expr> = columns
            .iter()
            .map(|c| &c.expr)
            .filter(|e| has_aggregate(e))
            .collect();
        let [Expr::Call { name, args }] = calls.as_slice() else {
            return None;
        };
        let Some(Expr::VarRef { name: field, .. }) = args.first() else {
            return None;
        };
        let time = ident("time");
        let value = ident(field.as_str());
        let (order, percentile) = match (name.as_str(), args.get(1)) {
            ("first", _) => (vec![time.sort(true, false)], None),
            ("last", _) => (vec![time.sort(false, false)], None),
            ("max", _) => (vec![value.sort(false, false), time.sort(true, false)], None),
            ("min", _) => (vec![value.sort(true, false), time.sort(true, false)], None),
            ("percentile", Some(n)) => (
                vec![value.sort(true, false), time.sort(true, false)],
                Some(percentile_rank(n).ok()?),
            ),
            _ => return None,
        };
        Some(Selector {
            field: field.clone(),
            order,
            percentile,
        })
    }

    /// `value` at the chosen point.
    fn pick(&self, value: DfExpr) -> Result<DfExpr, PlanError> {
        let set = ident(self.field.as_str()).is_not_null();
        match self.percentile {
            None => Ok(
                datafusion::functions_aggregate::first_last::first_value_udaf()
                    .call(vec![value])
                    .order_by(self.order.clone())
                    .filter(set)
                    .build()?,
            ),
            Some(n) => nearest_rank(value, self.order.clone(), set, n),
        }
    }
}

/// `percentile()`'s second argument.
fn percentile_rank(arg: &Expr) -> Result<f64, PlanError> {
    match arg {
        Expr::Literal(crate::ast::Literal::Integer(i)) => Ok(*i as f64),
        Expr::Literal(crate::ast::Literal::Float(f)) => Ok(*f),
        other => Err(PlanError::new(format!(
            "expected float argument in percentile(), got {other}"
        ))),
    }
}

/// InfluxDB's nearest rank: `value` of the point at index `floor(count * n / 100 + 0.5)`
/// (1-based) of the points where `set` holds, in `order`; null below the first.
fn nearest_rank(
    value: DfExpr,
    order: Vec<SortExpr>,
    set: DfExpr,
    n: f64,
) -> Result<DfExpr, PlanError> {
    use datafusion::functions_nested::expr_fn::{array_element, cardinality};
    let sorted = datafusion::functions_aggregate::array_agg::array_agg_udaf()
        .call(vec![value])
        .order_by(order)
        .filter(set)
        .build()?;
    let index = cast(
        datafusion::functions::math::expr_fn::floor(
            cast(cardinality(sorted.clone()), DataType::Float64) * lit(n / 100.0) + lit(0.5),
        ),
        DataType::Int64,
    );
    Ok(array_element(sorted, index))
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

/// One aggregate call over a field.
fn aggregate_call(name: &str, args: &[Expr], cols: &Columns) -> Result<DfExpr, PlanError> {
    use datafusion::functions_aggregate::expr_fn as agg;
    if is_transformation(name) || name == "sample" {
        return Err(PlanError::new(format!("{name}() is not supported yet")));
    }
    if name == "distinct" {
        return Err(PlanError::new(
            "aggregate function distinct() cannot be combined with other functions or fields",
        ));
    }
    let (field, rest) = match args {
        [Expr::Call {
            name: inner,
            args: inner_args,
        }, rest @ ..]
            if inner == "distinct" && name == "count" =>
        {
            let [field] = inner_args.as_slice() else {
                return Err(PlanError::new("distinct() takes one field"));
            };
            let value = field_value(field, cols)?;
            let _ = rest;
            return Ok(nullif(agg::count_distinct(value), lit(0i64)));
        }
        [field, rest @ ..] => (field_value(field, cols)?, rest),
        [] => {
            return Err(PlanError::new(format!(
                "invalid number of arguments for {name}, expected at least 1, got 0"
            )))
        }
    };
    let expect_args = |n: usize| {
        if rest.len() + 1 == n {
            Ok(())
        } else {
            Err(PlanError::new(format!(
                "invalid number of arguments for {name}, expected {n}, got {}",
                rest.len() + 1
            )))
        }
    };
    let float = |e: DfExpr| cast(e, DataType::Float64);
    let set = field.clone().is_not_null();
    Ok(match name {
        // a count of no points is a missing value, which fill() turns into 0 (or not)
        "count" => {
            expect_args(1)?;
            nullif(agg::count(field), lit(0i64))
        }
        "sum" => {
            expect_args(1)?;
            agg::sum(field)
        }
        "mean" => {
            expect_args(1)?;
            agg::avg(float(field))
        }
        "median" => {
            expect_args(1)?;
            agg::median(float(field))
        }
        "stddev" => {
            expect_args(1)?;
            agg::stddev(float(field))
        }
        "spread" => {
            expect_args(1)?;
            agg::max(field.clone()) - agg::min(field)
        }
        "min" => {
            expect_args(1)?;
            agg::min(field)
        }
        "max" => {
            expect_args(1)?;
            agg::max(field)
        }
        "first" | "last" => {
            expect_args(1)?;
            let ascending = name == "first";
            datafusion::functions_aggregate::first_last::first_value_udaf()
                .call(vec![field])
                .order_by(vec![ident("time").sort(ascending, false)])
                .filter(set)
                .build()?
        }
        "mode" => {
            expect_args(1)?;
            super::mode::mode(field, set)?
        }
        "percentile" => {
            expect_args(2)?;
            let n = percentile_rank(&rest[0])?;
            nearest_rank(field.clone(), vec![field.sort(true, false)], set, n)?
        }
        other => return Err(PlanError::new(format!("undefined function {other}()"))),
    })
}

/// The field an aggregate's argument names (with its `::type` cast), refusing anything else.
fn field_value(arg: &Expr, cols: &Columns) -> Result<DfExpr, PlanError> {
    match arg {
        Expr::VarRef { name, data_type } => match cols.resolve(name, *data_type) {
            Resolved::Field(..) | Resolved::Missing => expr::scalar(arg, cols),
            Resolved::Tag(_) | Resolved::Time => Err(PlanError::new(format!(
                "expected field argument in aggregate, got tag or time {name}"
            ))),
        },
        other => Err(PlanError::new(format!(
            "expected field argument in aggregate, got {other}"
        ))),
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

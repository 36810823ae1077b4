//! `SHOW` statements, in InfluxDB 1.x's shapes: what the catalog knows (databases, retention
//! policies, measurements, tag and field keys) as values, and what only the data knows (tag
//! values, series, measurements with a `WHERE`) as distinct scans.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::logical_expr::{
    cast, lit, when, Expr as DfExpr, LogicalPlan, LogicalPlanBuilder, TableSource,
};
use datafusion::prelude::{concat, ident};
use quiver_model::schema::FieldType;

use super::expr::{self, Columns};
use super::time_range;
use super::{PlanContext, PlanError, MEASUREMENT_COLUMN};
use crate::ast::{Expr, MeasurementMatch, MeasurementName, Statement, TagKeyMatch};

pub(crate) fn plan_show(
    statement: &Statement,
    ctx: &PlanContext<'_>,
) -> Result<LogicalPlan, PlanError> {
    match statement {
        Statement::ShowDatabases => {
            let rows = ctx
                .schemas
                .databases()
                .into_iter()
                .map(|d| vec![lit("databases"), lit(d)])
                .collect();
            values(rows, &["name"], "databases")
        }
        Statement::ShowRetentionPolicies { .. } => {
            let duration = ctx
                .schemas
                .retention_ns()
                .map_or("0s".to_string(), go_duration);
            let row = vec![
                lit(""),
                lit("autogen"),
                lit(duration),
                lit("168h0m0s"),
                lit(1i64),
                lit(true),
            ];
            values(
                vec![row],
                &[
                    "name",
                    "duration",
                    "shardGroupDuration",
                    "replicaN",
                    "default",
                ],
                "",
            )
        }
        Statement::ShowMeasurements {
            with_measurement,
            condition,
            limit,
            offset,
            ..
        } => show_measurements(
            ctx,
            with_measurement.as_ref(),
            condition.as_ref(),
            *limit,
            *offset,
        ),
        Statement::ShowTagKeys {
            from,
            condition,
            limit,
            offset,
            ..
        } => {
            if let Some(condition) = condition {
                return show_tag_keys_where(ctx, from, condition, *limit, *offset);
            }
            let mut rows = Vec::new();
            for (m, table) in tables(ctx, from)? {
                let tags = Columns::new(table.schema()).tags();
                rows.extend(
                    page(tags, *limit, *offset)
                        .into_iter()
                        .map(|t| vec![lit(m.clone()), lit(t)]),
                );
            }
            values(rows, &["tagKey"], "")
        }
        Statement::ShowFieldKeys {
            from,
            limit,
            offset,
            ..
        } => {
            let mut rows = Vec::new();
            for (m, table) in tables(ctx, from)? {
                let fields = Columns::new(table.schema()).fields();
                rows.extend(
                    page(fields, *limit, *offset)
                        .into_iter()
                        .map(|(f, t)| vec![lit(m.clone()), lit(f), lit(field_type_name(t))]),
                );
            }
            values(rows, &["fieldKey", "fieldType"], "")
        }
        Statement::ShowTagValues {
            from,
            key,
            condition,
            limit,
            offset,
            ..
        } => show_tag_values(ctx, from, key, condition.as_ref(), *limit, *offset),
        Statement::ShowSeries {
            from,
            condition,
            limit,
            offset,
            ..
        } => show_series(ctx, from, condition.as_ref(), *limit, *offset),
        Statement::Select(select) => super::select::plan_select(select, ctx),
    }
}

/// InfluxDB's spelling of a duration (`168h0m0s`).
fn go_duration(ns: i64) -> String {
    let secs = ns / 1_000_000_000;
    format!("{}h{}m{}s", secs / 3600, secs % 3600 / 60, secs % 60)
}

fn field_type_name(t: FieldType) -> &'static str {
    match t {
        FieldType::Float => "float",
        FieldType::Integer => "integer",
        FieldType::UInteger => "unsigned",
        FieldType::String => "string",
        FieldType::Boolean => "boolean",
    }
}

fn page<T>(items: Vec<T>, limit: Option<u64>, offset: Option<u64>) -> Vec<T> {
    let offset = usize::try_from(offset.unwrap_or(0)).unwrap_or(usize::MAX);
    let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    items.into_iter().skip(offset).take(limit).collect()
}

/// A measurement and its table.
type NamedTable = (String, Arc<dyn TableSource>);

/// The measurements `from` names (all when empty) and their tables.
fn tables(ctx: &PlanContext<'_>, from: &[MeasurementName]) -> Result<Vec<NamedTable>, PlanError> {
    let all = ctx.schemas.measurements();
    let names = match from.is_empty() {
        true => all,
        false => {
            let mut names = super::resolve_names(from, &all)?;
            names.sort();
            names
        }
    };
    Ok(names
        .into_iter()
        .filter_map(|m| ctx.schemas.table(&m).map(|t| (m, t)))
        .collect())
}

/// A plan of literal rows: the first value of each row is the series name, then `columns`.
/// With no rows, an empty plan of that layout (`name` is what the series would be called).
fn values(rows: Vec<Vec<DfExpr>>, columns: &[&str], name: &str) -> Result<LogicalPlan, PlanError> {
    let names: Vec<&str> = std::iter::once(MEASUREMENT_COLUMN)
        .chain(columns.iter().copied())
        .collect();
    if rows.is_empty() {
        let projection: Vec<DfExpr> = names
            .iter()
            .enumerate()
            .map(|(i, n)| match i {
                0 => lit(name.to_string()).alias(*n),
                _ => cast(lit(""), DataType::Utf8).alias(*n),
            })
            .collect();
        return Ok(LogicalPlanBuilder::empty(false)
            .project(projection)?
            .build()?);
    }
    let plan = LogicalPlanBuilder::values(rows)?.build()?;
    let projection: Vec<DfExpr> = plan
        .schema()
        .iter()
        .zip(&names)
        .map(|((q, f), n)| DfExpr::Column(datafusion::common::Column::from((q, f))).alias(*n))
        .collect();
    Ok(LogicalPlanBuilder::from(plan)
        .project(projection)?
        .build()?)
}

fn show_measurements(
    ctx: &PlanContext<'_>,
    with: Option<&MeasurementMatch>,
    condition: Option<&Expr>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Result<LogicalPlan, PlanError> {
    let mut names = ctx.schemas.measurements();
    match with {
        Some(MeasurementMatch::Eq(name)) => names.retain(|m| m == name),
        Some(MeasurementMatch::Regex(pattern)) => {
            let regex = expr::bounded_regex(pattern)?;
            names.retain(|m| regex.is_match(m));
        }
        None => {}
    }
    let Some(condition) = condition else {
        let rows = page(names, limit, offset)
            .into_iter()
            .map(|m| vec![lit("measurements"), lit(m)])
            .collect();
        return values(rows, &["name"], "measurements");
    };
    // with a WHERE: the measurements that have a matching point
    let mut parts = Vec::new();
    for m in names {
        let Some(table) = ctx.schemas.table(&m) else {
            continue;
        };
        let cols = Columns::new(table.schema());
        let (range, rest) = time_range::split(Some(condition), ctx.now_ns)?;
        let filter = scan_filter(&cols, range, rest.as_ref())?;
        let mut builder = LogicalPlanBuilder::scan(m.as_str(), table, None)?;
        if let Some(filter) = filter {
            builder = builder.filter(filter)?;
        }
        parts.push(
            builder
                .limit(0, Some(1))?
                .project(vec![
                    lit("measurements").alias(MEASUREMENT_COLUMN),
                    lit(m).alias("name"),
                ])?
                .build()?,
        );
    }
    finish(parts, &["name"], "measurements", limit, offset)
}

fn scan_filter(
    cols: &Columns,
    range: time_range::TimeRange,
    rest: Option<&Expr>,
) -> Result<Option<DfExpr>, PlanError> {
    let timestamp = |ns: i64| {
        lit(datafusion::common::ScalarValue::TimestampNanosecond(
            Some(ns),
            Some("UTC".into()),
        ))
    };
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
    Ok(filters.into_iter().reduce(DfExpr::and))
}

/// The parts as one plan sorted by every column, paged; empty of that layout if none.
fn finish(
    parts: Vec<LogicalPlan>,
    columns: &[&str],
    name: &str,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Result<LogicalPlan, PlanError> {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return values(vec![], columns, name);
    };
    let mut builder = LogicalPlanBuilder::from(first);
    for part in parts {
        builder = builder.union(part)?;
    }
    let order = std::iter::once(MEASUREMENT_COLUMN)
        .chain(columns.iter().copied())
        .map(|c| ident(c).sort(true, false))
        .collect::<Vec<_>>();
    let mut builder = builder.sort(order)?;
    if limit.is_some() || offset.is_some() {
        let skip = usize::try_from(offset.unwrap_or(0)).unwrap_or(usize::MAX);
        let fetch = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        builder = builder.limit(skip, fetch)?;
    }
    Ok(builder.build()?)
}

fn key_matches(key: &TagKeyMatch, tag: &str) -> Result<bool, PlanError> {
    Ok(match key {
        TagKeyMatch::Eq(k) => k == tag,
        TagKeyMatch::NotEq(k) => k != tag,
        TagKeyMatch::In(keys) => keys.iter().any(|k| k == tag),
        TagKeyMatch::Regex(pattern) => expr::bounded_regex(pattern)?.is_match(tag),
        TagKeyMatch::NotRegex(pattern) => !expr::bounded_regex(pattern)?.is_match(tag),
    })
}

/// `SHOW TAG KEYS ... WHERE`: the tags some point matching the condition has, per
/// measurement (`LIMIT`/`OFFSET` per measurement, as without `WHERE`): one scan per
/// measurement counting every tag's values, the tags with any listed.
fn show_tag_keys_where(
    ctx: &PlanContext<'_>,
    from: &[MeasurementName],
    condition: &Expr,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Result<LogicalPlan, PlanError> {
    use datafusion::functions_aggregate::expr_fn::count;
    use datafusion::functions_nested::expr_fn::make_array;
    let (range, rest) = time_range::split(Some(condition), ctx.now_ns)?;
    let mut parts = Vec::new();
    for (m, table) in tables(ctx, from)? {
        let cols = Columns::new(table.schema());
        let tags = cols.tags();
        if tags.is_empty() {
            continue;
        }
        let mut builder = LogicalPlanBuilder::scan(m.as_str(), Arc::clone(&table), None)?;
        if let Some(filter) = scan_filter(&cols, range, rest.as_ref())? {
            builder = builder.filter(filter)?;
        }
        let counts: Vec<DfExpr> = tags
            .iter()
            .enumerate()
            .map(|(i, tag)| count(ident(tag.as_str())).alias(format!("__count_{i}")))
            .collect();
        // the names of the tags counted at least once, as one list, then one row each
        let present = make_array(
            tags.iter()
                .enumerate()
                .map(|(i, tag)| {
                    when(
                        ident(format!("__count_{i}")).gt(lit(0i64)),
                        lit(tag.clone()),
                    )
                    .end()
                })
                .collect::<Result<Vec<_>, _>>()?,
        );
        let part = builder
            .aggregate(Vec::<DfExpr>::new(), counts)?
            .project(vec![present.alias("tagKey")])?
            .unnest_column(datafusion::common::Column::new_unqualified("tagKey"))?
            .filter(ident("tagKey").is_not_null())?
            .project(vec![
                lit(m.clone()).alias(MEASUREMENT_COLUMN),
                ident("tagKey"),
            ])?
            .build()?;
        parts.push(finish(vec![part], &["tagKey"], "", limit, offset)?);
    }
    finish(parts, &["tagKey"], "", None, None)
}

fn show_tag_values(
    ctx: &PlanContext<'_>,
    from: &[MeasurementName],
    key: &TagKeyMatch,
    condition: Option<&Expr>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Result<LogicalPlan, PlanError> {
    let mut parts = Vec::new();
    for (m, table) in tables(ctx, from)? {
        let cols = Columns::new(table.schema());
        let (range, rest) = time_range::split(condition, ctx.now_ns)?;
        for tag in cols.tags() {
            if !key_matches(key, &tag)? {
                continue;
            }
            let mut builder = LogicalPlanBuilder::scan(m.as_str(), Arc::clone(&table), None)?;
            if let Some(filter) = scan_filter(&cols, range, rest.as_ref())? {
                builder = builder.filter(filter)?;
            }
            // distinct on the tag column itself (dictionary keys, what `SELECT DISTINCT tag`
            // runs as), converted afterwards
            parts.push(
                builder
                    .project(vec![ident(tag.as_str())])?
                    .distinct()?
                    .filter(ident(tag.as_str()).is_not_null())?
                    .project(vec![
                        lit(m.clone()).alias(MEASUREMENT_COLUMN),
                        lit(tag.clone()).alias("key"),
                        cast(ident(tag.as_str()), DataType::Utf8).alias("value"),
                    ])?
                    .build()?,
            );
        }
    }
    finish(parts, &["key", "value"], "", limit, offset)
}

/// Line protocol's escaping of a measurement, tag key or tag value in a series key.
fn escape_key(value: DfExpr) -> DfExpr {
    use datafusion::functions::string::expr_fn::replace;
    let mut escaped = replace(value, lit(","), lit("\\,"));
    escaped = replace(escaped, lit("="), lit("\\="));
    replace(escaped, lit(" "), lit("\\ "))
}

fn show_series(
    ctx: &PlanContext<'_>,
    from: &[MeasurementName],
    condition: Option<&Expr>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> Result<LogicalPlan, PlanError> {
    let mut parts = Vec::new();
    for (m, table) in tables(ctx, from)? {
        let cols = Columns::new(table.schema());
        let (range, rest) = time_range::split(condition, ctx.now_ns)?;
        // `cpu,host=a,region=eu`: each tag the point has, in key order
        let mut pieces = vec![escape_key(lit(m.clone()))];
        for tag in cols.tags() {
            let value = cast(ident(tag.as_str()), DataType::Utf8);
            let piece = concat(vec![
                lit(format!(",{}=", tag_key_escaped(&tag))),
                escape_key(value.clone()),
            ]);
            pieces.push(DfExpr::Case(datafusion::logical_expr::Case::new(
                None,
                vec![(Box::new(value.is_not_null()), Box::new(piece))],
                Some(Box::new(lit(""))),
            )));
        }
        let mut builder = LogicalPlanBuilder::scan(m.as_str(), Arc::clone(&table), None)?;
        if let Some(filter) = scan_filter(&cols, range, rest.as_ref())? {
            builder = builder.filter(filter)?;
        }
        parts.push(
            builder
                .project(vec![
                    lit("").alias(MEASUREMENT_COLUMN),
                    concat(pieces).alias("key"),
                ])?
                .distinct()?
                .build()?,
        );
    }
    finish(parts, &["key"], "", limit, offset)
}

fn tag_key_escaped(key: &str) -> String {
    key.replace(',', "\\,")
        .replace('=', "\\=")
        .replace(' ', "\\ ")
}

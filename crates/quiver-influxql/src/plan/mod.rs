//! InfluxQL statements onto DataFusion logical plans.
//!
//! Every statement becomes one plan whose answer has the same layout, which the protocols turn
//! into InfluxDB's series (`/query`) or send as it is (Flight):
//! - [`MEASUREMENT_COLUMN`] (`iox::measurement`, as InfluxDB 3 names it): the series' name;
//! - `time` for `SELECT` (the point's time, or its bucket's start);
//! - the `GROUP BY` tags, marked by [`ROLE_METADATA_KEY`] = [`TAG_ROLE`] in their field
//!   metadata: with the name they identify a series;
//! - then the selected columns, named as InfluxDB 1.x names them (`mean`, `mean_1`, ...).
//!
//! Rows come sorted by series, then time; a series' rows are contiguous.
//!
//! The planner reads the catalog through [`SchemaSource`] and the clock from [`PlanContext`]
//! (the statement's one `now()`), so it is pure: it plans, it never runs anything.

mod expr;
mod fill;
mod integral;
mod mode;
mod select;
mod show;
mod time_range;
mod transform;

use std::sync::Arc;

use datafusion::common::DataFusionError;
use datafusion::logical_expr::{LogicalPlan, TableSource};

use crate::ast::{MeasurementName, NameOrRegex, SelectStatement, Source, Statement};

/// The column naming each row's series (its measurement, or what a `SHOW` lists).
pub const MEASUREMENT_COLUMN: &str = "iox::measurement";
/// Field metadata key marking a column's role in the answer.
pub const ROLE_METADATA_KEY: &str = "quiver.influxql.role";
/// The role of a `GROUP BY` tag column: part of the series' identity, not a value column.
pub const TAG_ROLE: &str = "tag";
/// Most time buckets one `GROUP BY time(...)` may make over its time range (InfluxDB 1.x's
/// `max-select-buckets`, which is unlimited there): past it a statement is refused before
/// anything is allocated.
pub const DEFAULT_MAX_BUCKETS: u64 = quiver_model::MAX_QUERY_BUCKETS;

/// What the planner needs to know of the database a statement runs in.
pub trait SchemaSource {
    /// The measurements (tables) of the database, sorted.
    fn measurements(&self) -> Vec<String>;
    /// A measurement's table, if it exists.
    fn table(&self, name: &str) -> Option<Arc<dyn TableSource>>;
    /// The databases the caller may see, sorted (`SHOW DATABASES`).
    fn databases(&self) -> Vec<String>;
    /// The database's retention period in nanoseconds, `None` if it keeps data forever
    /// (`SHOW RETENTION POLICIES`).
    fn retention_ns(&self) -> Option<i64>;
}

/// The catalog and clock one statement is planned with.
pub struct PlanContext<'a> {
    /// The database's measurements and their tables.
    pub schemas: &'a dyn SchemaSource,
    /// `now()`, in nanoseconds since the epoch: one instant for the whole statement.
    pub now_ns: i64,
    /// Most `GROUP BY time` buckets a statement may make ([`DEFAULT_MAX_BUCKETS`]).
    pub max_buckets: u64,
}

/// Why a statement cannot be planned: InfluxDB 1.x's message where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

impl PlanError {
    fn new(message: impl Into<String>) -> Self {
        PlanError(message.into())
    }
}

impl From<DataFusionError> for PlanError {
    fn from(e: DataFusionError) -> Self {
        PlanError(e.to_string())
    }
}

/// The plan of `statement` (see the module documentation for its answer's layout).
pub fn plan(statement: &Statement, ctx: &PlanContext<'_>) -> Result<LogicalPlan, PlanError> {
    match statement {
        Statement::Select(select) => select::plan_select(select, ctx),
        show => show::plan_show(show, ctx),
    }
}

/// Whether `statement`'s answer depends on the clock: it says `now()`, or groups by time
/// without an upper time bound (which is then `now()`).
pub fn uses_clock(statement: &Statement) -> bool {
    match statement {
        Statement::Select(select) => select_uses_clock(select),
        _ => false,
    }
}

fn select_uses_clock(select: &SelectStatement) -> bool {
    let says_now = select
        .condition
        .as_ref()
        .is_some_and(time_range::mentions_now);
    let open_ended_buckets = select
        .group_by
        .iter()
        .any(|d| matches!(d, crate::ast::Dimension::Time { .. }))
        && !time_range::has_upper_bound(select.condition.as_ref());
    let inner = select.from.iter().any(|source| match source {
        Source::Subquery(inner) => select_uses_clock(inner),
        Source::Measurement(_) => false,
    });
    says_now || open_ended_buckets || inner
}

/// The database `statement` names itself (`ON db`, or `FROM db.rp.measurement`), if any;
/// fails for a retention policy other than `autogen` (the only one a Quiver database has) or
/// for measurements of several databases in one statement.
pub fn database_of(statement: &Statement) -> Result<Option<String>, PlanError> {
    let (on, from): (&Option<String>, Vec<&MeasurementName>) = match statement {
        Statement::Select(select) => (&None, select_names(select)),
        Statement::ShowRetentionPolicies { database } => (database, vec![]),
        Statement::ShowMeasurements { database, .. } => (database, vec![]),
        Statement::ShowTagKeys { database, from, .. }
        | Statement::ShowTagValues { database, from, .. }
        | Statement::ShowFieldKeys { database, from, .. }
        | Statement::ShowSeries { database, from, .. } => (database, from.iter().collect()),
        Statement::ShowDatabases => (&None, vec![]),
    };
    let mut named: Option<String> = on.clone();
    for name in from {
        if let Some(rp) = &name.retention_policy {
            if rp != "autogen" {
                return Err(PlanError::new(format!("retention policy not found: {rp}")));
            }
        }
        if let Some(db) = &name.database {
            match &named {
                Some(other) if other != db => {
                    return Err(PlanError::new(
                        "a statement reads one database: its measurements name two",
                    ))
                }
                _ => named = Some(db.clone()),
            }
        }
    }
    Ok(named)
}

fn select_names(select: &SelectStatement) -> Vec<&MeasurementName> {
    select
        .from
        .iter()
        .flat_map(|source| match source {
            Source::Measurement(name) => vec![name],
            Source::Subquery(inner) => select_names(inner),
        })
        .collect()
}

/// The measurements `statement` reads in a database holding `measurements` (regular
/// expressions matched against them; names that do not exist are left out).
pub fn measurements_read(
    statement: &Statement,
    measurements: &[String],
) -> Result<Vec<String>, PlanError> {
    let mut read = Vec::new();
    match statement {
        Statement::Select(select) => collect_select_sources(select, measurements, &mut read)?,
        Statement::ShowTagValues { from, .. }
        | Statement::ShowSeries { from, .. }
        | Statement::ShowTagKeys { from, .. }
        | Statement::ShowFieldKeys { from, .. } => {
            read.extend(resolve_names(from, measurements)?);
            if from.is_empty() {
                read.extend(measurements.iter().cloned());
            }
        }
        Statement::ShowMeasurements { .. } => read.extend(measurements.iter().cloned()),
        Statement::ShowDatabases | Statement::ShowRetentionPolicies { .. } => {}
    }
    read.sort();
    read.dedup();
    Ok(read)
}

fn collect_select_sources(
    select: &SelectStatement,
    measurements: &[String],
    read: &mut Vec<String>,
) -> Result<(), PlanError> {
    for source in &select.from {
        match source {
            Source::Measurement(name) => {
                read.extend(resolve_names(std::slice::from_ref(name), measurements)?)
            }
            Source::Subquery(inner) => collect_select_sources(inner, measurements, read)?,
        }
    }
    Ok(())
}

/// The existing measurements `names` designate, in order of first mention.
pub(crate) fn resolve_names(
    names: &[MeasurementName],
    measurements: &[String],
) -> Result<Vec<String>, PlanError> {
    let mut resolved: Vec<String> = Vec::new();
    for name in names {
        match &name.name {
            NameOrRegex::Name(name) => {
                if measurements.contains(name) && !resolved.contains(name) {
                    resolved.push(name.clone());
                }
            }
            NameOrRegex::Regex(pattern) => {
                let regex = expr::bounded_regex(pattern)?;
                for m in measurements {
                    if regex.is_match(m) && !resolved.contains(m) {
                        resolved.push(m.clone());
                    }
                }
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests;

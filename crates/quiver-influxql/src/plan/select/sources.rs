//! `FROM`: the measurements a statement reads, or its subquery planned as a view that looks
//! like a measurement.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::logical_expr::{cast, Expr as DfExpr, LogicalPlanBuilder, TableSource};

use super::plan_select_within;
use crate::ast::{SelectStatement, Source};
use crate::plan::time_range::TimeRange;
use crate::plan::{PlanContext, PlanError, MEASUREMENT_COLUMN, ROLE_METADATA_KEY, TAG_ROLE};

/// A source a statement reads, under the measurement name its series take.
type NamedSource = (String, Arc<dyn TableSource>);

/// What `select` reads: its measurements, or its one subquery planned as a view whose columns
/// look like a measurement's (its grouped tags as tags, its values as fields) named after
/// the measurement it reads.
pub(super) fn sources(
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
            let measurements = crate::plan::resolve_names(&names, &ctx.schemas.measurements())?;
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
            Source::Measurement(name) => found.extend(crate::plan::resolve_names(
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

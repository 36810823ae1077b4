//! The logical `GapFill` node (above an aggregate grouped by a time bucket) and its physical
//! planner, which evaluates the time range's bounds with the statement's clock.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, TimeUnit};
use arrow::record_batch::RecordBatchOptions;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{plan_err, Column, DFSchema, DFSchemaRef, ScalarValue, TableReference};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use quiver_model::TimeBucket;

use super::exec::{GapFillExec, Grid};
use super::MAX_BUCKETS;
use crate::plan_nodes::only_child;
use crate::time_filter::timestamp_ns;

/// How a gap (or a null the aggregate gave) of one aggregate column is filled; columns
/// without one stay null there.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum FillMethod {
    /// The series' last non-null value before it.
    Locf,
    /// A line between the series' non-null values before and after it.
    Interpolate,
}

impl fmt::Display for FillMethod {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            FillMethod::Locf => "locf",
            FillMethod::Interpolate => "interpolate",
        })
    }
}

/// The series columns and the fills (`locf(avg(x))`) of a gap fill as `EXPLAIN` lists them,
/// `name` naming a column by index.
pub(super) fn describe_keys(
    name: &dyn Fn(usize) -> String,
    series: &[usize],
    fills: &[(usize, FillMethod)],
) -> (String, String) {
    let series: Vec<String> = series.iter().map(|&i| name(i)).collect();
    let fills: Vec<String> = fills
        .iter()
        .map(|(i, m)| format!("{m}({})", name(*i)))
        .collect();
    (series.join(", "), fills.join(", "))
}

/// One bound of the time range: `time >= expr` (`inclusive`) or `time > expr` for a lower
/// bound, `<=` / `<` for an upper one. `expr` reads no column.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Hash)]
pub struct Bound {
    /// The bound's value (a timestamp once evaluated).
    pub expr: Expr,
    /// Whether `time` may equal it.
    pub inclusive: bool,
}

/// Fills the gaps of its input, an aggregate grouped by a time bucket (module docs of
/// [`super`]). SQL's `date_bin_gapfill` and InfluxQL's `fill()` both plan onto it; without a
/// lower bound (InfluxQL allows none) it adds no bucket and fills the nulls of the rows there
/// are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GapFill {
    input: Arc<LogicalPlan>,
    /// The input's columns, every one but the keys nullable (a gap has no value), then one
    /// column per fill.
    schema: DFSchemaRef,
    /// The bucket column's index in the input.
    time_column: usize,
    /// The other GROUP BY columns: one series per distinct combination.
    series_columns: Vec<usize>,
    bucket: TimeBucket,
    /// The range's bounds: the buckets filled are those from the latest lower bound's to
    /// the earliest upper bound's (none without a lower bound).
    lower: Vec<Bound>,
    upper: Vec<Bound>,
    /// The filled columns after the input's: the input column each fills, and how.
    fills: Vec<(usize, FillMethod)>,
}

impl GapFill {
    /// A gap fill of `input`: every aggregate column null in a gap, and one column more
    /// per fill of `fills`.
    pub fn try_new(
        input: Arc<LogicalPlan>,
        time_column: usize,
        series_columns: Vec<usize>,
        bucket: TimeBucket,
        lower: Vec<Bound>,
        upper: Vec<Bound>,
        fills: Vec<(usize, FillMethod)>,
    ) -> Result<Self> {
        let time_type = input.schema().field(time_column).data_type();
        if !matches!(time_type, DataType::Timestamp(TimeUnit::Nanosecond, _)) {
            return plan_err!(
                "date_bin_gapfill() buckets nanosecond timestamps; its time is {time_type}"
            );
        }
        let mut keys = series_columns.clone();
        keys.push(time_column);
        let schema = output_schema(input.schema(), &keys, &fills)?;
        Ok(GapFill {
            input,
            schema,
            time_column,
            series_columns,
            bucket,
            lower,
            upper,
            fills,
        })
    }

    /// This node with the aggregate column `column` filled by `method` (`function` is its SQL
    /// name, for errors), and the column that holds the filled values.
    pub fn fill_column(
        &self,
        column: &Column,
        method: FillMethod,
        function: &str,
    ) -> Result<(GapFill, Column)> {
        let index = self.input.schema().index_of_column(column)?;
        if index == self.time_column || self.series_columns.contains(&index) {
            return plan_err!(
                "{function}() takes an aggregate, e.g. {function}(avg(x)); {} is a GROUP BY \
                 column",
                column.name
            );
        }
        let data_type = self.input.schema().field(index).data_type();
        if !method.fills(data_type) {
            return plan_err!(
                "interpolate() needs a numeric aggregate; {} is {data_type}",
                column.name
            );
        }
        let mut fills = self.fills.clone();
        let position = match fills.iter().position(|f| *f == (index, method)) {
            Some(position) => position,
            None => {
                fills.push((index, method));
                fills.len() - 1
            }
        };
        let node = GapFill::try_new(
            self.input.clone(),
            self.time_column,
            self.series_columns.clone(),
            self.bucket,
            self.lower.clone(),
            self.upper.clone(),
            fills,
        )?;
        let filled = node.schema.columns()[self.input.schema().fields().len() + position].clone();
        Ok((node, filled))
    }
}

impl FillMethod {
    /// Whether this method can fill values of `data_type` (`locf` any, `interpolate` numbers
    /// only).
    pub fn fills(&self, data_type: &DataType) -> bool {
        match self {
            FillMethod::Locf => true,
            FillMethod::Interpolate => data_type.is_integer() || data_type.is_floating(),
        }
    }
}

/// `schema` with every column but `keys` nullable, then a column `<method>(<column>)` per
/// fill.
fn output_schema(
    schema: &DFSchema,
    keys: &[usize],
    fills: &[(usize, FillMethod)],
) -> Result<DFSchemaRef> {
    let nullable = |field: &Field| Arc::new(field.clone().with_nullable(true));
    let mut fields: Vec<(Option<TableReference>, FieldRef)> = schema
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            let field = if keys.contains(&i) {
                field.clone()
            } else {
                nullable(field)
            };
            (qualifier.cloned(), field)
        })
        .collect();
    for &(index, method) in fills {
        let source = schema.columns()[index].flat_name();
        let field = schema.field(index).as_ref().clone();
        fields.push((
            None,
            nullable(&field.with_name(format!("{method}({source})"))),
        ));
    }
    Ok(Arc::new(DFSchema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )?))
}

impl PartialOrd for GapFill {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        let key = |n: &Self| {
            (
                n.input.clone(),
                n.time_column,
                n.series_columns.clone(),
                n.bucket,
                n.lower.clone(),
                n.upper.clone(),
                n.fills.clone(),
            )
        };
        key(self).partial_cmp(&key(other))
    }
}

impl UserDefinedLogicalNodeCore for GapFill {
    fn name(&self) -> &str {
        "GapFill"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.lower
            .iter()
            .chain(&self.upper)
            .map(|b| b.expr.clone())
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let name = |i: usize| self.schema.field(i).name().clone();
        let (series, fills) = describe_keys(&name, &self.series_columns, &self.fills);
        let bounds = |bounds: &[Bound], strict: &str, inclusive: &str| {
            bounds
                .iter()
                .map(|b| {
                    format!(
                        "time {} {}",
                        if b.inclusive { inclusive } else { strict },
                        b.expr
                    )
                })
                .collect::<Vec<_>>()
        };
        let mut range = bounds(&self.lower, ">", ">=");
        range.extend(bounds(&self.upper, "<", "<="));
        let range = match self.lower.is_empty() {
            true => "none".to_string(),
            false => range.join(" AND "),
        };
        write!(
            f,
            "GapFill: time={}, stride={}ns, origin={}, series=[{}], range={range}, fill=[{}]",
            name(self.time_column),
            self.bucket.width,
            self.bucket.origin,
            series,
            fills
        )
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let input = only_child(inputs, "GapFill")?;
        if exprs.len() != self.lower.len() + self.upper.len() {
            return Err(DataFusionError::Internal(format!(
                "GapFill has {} bound expressions, was given {}",
                self.lower.len() + self.upper.len(),
                exprs.len()
            )));
        }
        let rebound = |bounds: &[Bound], exprs: &[Expr]| {
            bounds
                .iter()
                .zip(exprs)
                .map(|(b, e)| Bound {
                    expr: e.clone(),
                    inclusive: b.inclusive,
                })
                .collect()
        };
        GapFill::try_new(
            Arc::new(input),
            self.time_column,
            self.series_columns.clone(),
            self.bucket,
            rebound(&self.lower, &exprs[..self.lower.len()]),
            rebound(&self.upper, &exprs[self.lower.len()..]),
            self.fills.clone(),
        )
    }
}

/// Quiver's physical planner: DataFusion's, with the planners of Quiver's logical nodes.
#[derive(Debug)]
pub struct QuiverQueryPlanner;

#[async_trait]
impl QueryPlanner for QuiverQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(GapFillPlanner)])
            .create_physical_plan(logical_plan, session)
            .await
    }
}

/// Plans [`GapFill`] as [`GapFillExec`].
#[derive(Debug)]
pub struct GapFillPlanner;

#[async_trait]
impl ExtensionPlanner for GapFillPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(gap_fill) = node.as_any().downcast_ref::<GapFill>() else {
            return Ok(None);
        };
        let input = only_child(physical_inputs.to_vec(), "GapFill")?;
        let evaluate = |bound: &Bound| -> Result<i64> {
            let expr = planner.create_physical_expr(
                &bound.expr,
                &DFSchema::empty(),
                session,
                planning_ctx,
            )?;
            let one_row = RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                vec![],
                &RecordBatchOptions::new().with_row_count(Some(1)),
            )?;
            let value = expr.evaluate(&one_row)?.into_array(1)?;
            let value = ScalarValue::try_from_array(&value, 0)?;
            timestamp_ns(&Expr::Literal(value.clone(), None)).ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "date_bin_gapfill(): the time bound {} is {}, not a timestamp within \
                     1677-09-21..2262-04-11",
                    bound.expr,
                    describe(&value)
                ))
            })
        };
        if gap_fill.lower.is_empty() {
            // no start, no first bucket: the rows there are, their nulls filled
            return Ok(Some(Arc::new(GapFillExec::try_new(
                input,
                Arc::new(gap_fill.schema.as_arrow().clone()),
                gap_fill.time_column,
                gap_fill.series_columns.clone(),
                Grid::empty(gap_fill.bucket),
                gap_fill.fills.to_vec(),
            )?)));
        }
        let mut lower = i64::MIN;
        for bound in &gap_fill.lower {
            let value = evaluate(bound)?;
            let first = if bound.inclusive {
                value
            } else {
                value.saturating_add(1)
            };
            lower = lower.max(first);
        }
        let mut upper = i64::MAX;
        for bound in &gap_fill.upper {
            let value = evaluate(bound)?;
            let last = if bound.inclusive {
                value
            } else {
                value.saturating_sub(1)
            };
            upper = upper.min(last);
        }
        let grid = Grid::try_new(gap_fill.bucket, lower, upper, MAX_BUCKETS)?;
        let fills = gap_fill.fills.to_vec();
        Ok(Some(Arc::new(GapFillExec::try_new(
            input,
            Arc::new(gap_fill.schema.as_arrow().clone()),
            gap_fill.time_column,
            gap_fill.series_columns.clone(),
            grid,
            fills,
        )?)))
    }
}

fn describe(value: &ScalarValue) -> String {
    if value.is_null() {
        "null".into()
    } else {
        format!("{value} ({})", value.data_type())
    }
}

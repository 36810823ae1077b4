//! `row_number() OVER (PARTITION BY k ORDER BY o) ... WHERE rank = 1` without numbering every
//! row: [`FirstRowsRule`] replaces the window under such a filter with [`FirstRowsExec`],
//! which keeps the first row of each run of equal keys.
//!
//! This is how [`crate::latest`] answers `DISTINCT ON` (and how users write "the newest row
//! per series"). DataFusion's window operator slices its input batch once per partition key,
//! every column each time: over the hundred newest rows of a hundred hosts, with twenty-one
//! columns, that was a fifth of a last-point query's time. The window only runs on input
//! sorted by its keys and then its order (`InputOrderMode::Sorted`), so each key's rows are
//! one run and its first row is the one numbered 1; `FirstRowsExec` compares each row's keys
//! with the row before (carried across batches) and takes the first rows of the runs in one
//! `take`. Its output has the window's schema, the rank column all ones, so the filter above
//! stays and keeps every row.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::{split_conjunction, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, StandardWindowExpr, WindowUDFExpr};
use datafusion::physical_plan::{
    apply_expression_roots, DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode,
    PlanProperties,
};
use futures::StreamExt;

use crate::plan_nodes::{only_child, rewrite_nodes};

/// The physical rule that puts [`FirstRowsExec`] in place of a rank-one `row_number()` window
/// (module docs).
#[derive(Debug, Default)]
pub struct FirstRowsRule;

impl PhysicalOptimizerRule for FirstRowsRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        rewrite_nodes(plan, |filter: &FilterExec, node| {
            let Some(first_rows) = FirstRowsExec::replacing(filter) else {
                return Ok(None);
            };
            let first_rows: Arc<dyn ExecutionPlan> = Arc::new(first_rows);
            replace_children_if_necessary(node.clone(), vec![first_rows]).map(Some)
        })
    }

    fn name(&self) -> &str {
        "quiver_first_rows"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The first row of each run of equal keys in input sorted by them, with a rank column of
/// ones after the input's columns (module docs).
#[derive(Debug)]
pub struct FirstRowsExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The input's columns, then the rank.
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl FirstRowsExec {
    /// The replacement of `filter`'s input, if `filter` keeps only rows numbered 1 (`rank = 1`
    /// or `rank = 1 AND ...`) by a `row_number()` window over sorted input.
    fn replacing(filter: &FilterExec) -> Option<Self> {
        let window = filter.input().downcast_ref::<BoundedWindowAggExec>()?;
        let [expr] = window.window_expr() else {
            return None;
        };
        let is_row_number = expr
            .as_any()
            .downcast_ref::<StandardWindowExpr>()
            .and_then(|standard| {
                standard
                    .get_standard_func_expr()
                    .as_any()
                    .downcast_ref::<WindowUDFExpr>()
            })
            .is_some_and(|udf| udf.fun().name() == "row_number");
        let rank_index = window.input().schema().fields().len();
        let keeps_first = split_conjunction(filter.predicate())
            .into_iter()
            .any(|conjunct| is_rank_one(conjunct, rank_index));
        let sorted = matches!(window.input_order_mode, InputOrderMode::Sorted);
        let partitioned = !expr.partition_by().is_empty();
        (is_row_number && keeps_first && sorted && partitioned).then(|| FirstRowsExec {
            input: window.input().clone(),
            keys: expr.partition_by().to_vec(),
            schema: window.schema(),
            properties: window.properties().clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

/// True for `rank = 1` (either way round), `rank` being column `rank_index`.
fn is_rank_one(predicate: &Arc<dyn PhysicalExpr>, rank_index: usize) -> bool {
    let Some(binary) = predicate.downcast_ref::<BinaryExpr>() else {
        return false;
    };
    let is_rank = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<Column>()
            .is_some_and(|c| c.index() == rank_index)
    };
    let is_one = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<Literal>()
            .is_some_and(|l| l.value() == &ScalarValue::UInt64(Some(1)))
    };
    *binary.op() == Operator::Eq
        && ((is_rank(binary.left()) && is_one(binary.right()))
            || (is_one(binary.left()) && is_rank(binary.right())))
}

impl DisplayAs for FirstRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(f, "FirstRowsExec: keys=[{}]", keys.join(", "))
    }
}

impl ExecutionPlan for FirstRowsExec {
    fn name(&self) -> &str {
        "FirstRowsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(&self.keys, f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(FirstRowsExec {
            input: only_child(children, "FirstRowsExec")?,
            keys: self.keys.clone(),
            schema: self.schema.clone(),
            properties: self.properties.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input_schema = self.input.schema();
        let fields = self
            .keys
            .iter()
            .map(|k| Ok(SortField::new(k.data_type(&input_schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut state = RunStarts {
            keys: self.keys.clone(),
            converter: RowConverter::new(fields)?,
            previous: None,
            schema: self.schema.clone(),
        };
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let input = self.input.execute(partition, context)?;
        let stream = input.map(move |batch| {
            let timer = metrics.elapsed_compute().timer();
            let first = batch.and_then(|batch| state.first_rows(&batch));
            timer.done();
            if let Ok(rows) = &first {
                metrics.record_output(rows.num_rows());
            }
            first
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// Finds where runs of equal keys start, across batches.
struct RunStarts {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    converter: RowConverter,
    /// The keys of the last row seen.
    previous: Option<OwnedRow>,
    schema: SchemaRef,
}

impl RunStarts {
    /// The rows of `batch` that start a run, with a rank of one.
    fn first_rows(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let keys = self
            .keys
            .iter()
            .map(|k| k.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let rows = self.converter.convert_columns(&keys)?;
        let mut starts = Vec::new();
        for i in 0..rows.num_rows() {
            let starts_run = match i {
                0 => self
                    .previous
                    .as_ref()
                    .is_none_or(|p| p.row() != rows.row(0)),
                _ => rows.row(i - 1) != rows.row(i),
            };
            if starts_run {
                starts.push(i as u32);
            }
        }
        if rows.num_rows() > 0 {
            self.previous = Some(rows.row(rows.num_rows() - 1).owned());
        }
        let kept = take_record_batch(batch, &UInt32Array::from(starts))?;
        let mut columns = kept.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from_value(1, kept.num_rows())));
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan_nodes::testing::answer_and_use;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::execution::session_state::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use proptest::prelude::*;

    type Row = (Option<&'static str>, Option<i64>, i64);

    fn table(rows: &[Row], batch_rows: usize) -> MemTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("j", DataType::Int64, true),
            Field::new("t", DataType::Int64, false),
        ]));
        let batches = rows
            .chunks(batch_rows.max(1))
            .map(|chunk| {
                let k: StringArray = chunk.iter().map(|r| r.0).collect();
                let j: Int64Array = chunk.iter().map(|r| r.1).collect();
                let t: Int64Array = chunk.iter().map(|r| Some(r.2)).collect();
                RecordBatch::try_new(schema.clone(), vec![Arc::new(k), Arc::new(j), Arc::new(t)])
                    .unwrap()
            })
            .collect();
        MemTable::try_new(schema, vec![batches]).unwrap()
    }

    fn context(with_rule: bool, rows: &[Row]) -> SessionContext {
        // two-row batches: runs of keys cross batch boundaries
        let config = SessionConfig::new()
            .with_target_partitions(2)
            .with_batch_size(2);
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if with_rule {
            builder = builder.with_physical_optimizer_rule(Arc::new(FirstRowsRule));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        ctx.register_table("t", Arc::new(table(rows, 3))).unwrap();
        ctx
    }

    /// The answer as lines in the query's order, and whether the plan used the operator.
    async fn run(ctx: &SessionContext, sql: &str) -> (Vec<String>, bool) {
        answer_and_use(ctx, sql, "FirstRowsExec").await
    }

    const ROWS: &[Row] = &[
        (Some("a"), Some(1), 5),
        (Some("b"), Some(1), 3),
        (Some("a"), Some(2), 9),
        (None, Some(1), 4),
        (Some("a"), Some(1), 7),
        (None, None, 1),
        (Some("b"), Some(2), 8),
        (Some("c"), None, 2),
        (None, None, 6),
    ];

    const REPLACED: &[&str] = &[
        "SELECT k, j, t FROM (SELECT *, row_number() OVER (PARTITION BY k ORDER BY t DESC) AS r \
         FROM t) WHERE r = 1 ORDER BY k, t",
        "SELECT k, j, t, r FROM (SELECT *, row_number() OVER (PARTITION BY k, j ORDER BY t) AS r \
         FROM t) WHERE 1 = r ORDER BY k, j",
        "SELECT k, t FROM (SELECT *, row_number() OVER (PARTITION BY upper(k) ORDER BY t) AS r \
         FROM t) WHERE r = 1 AND t > 2 ORDER BY k",
    ];

    #[tokio::test]
    async fn answers_as_the_window_does() {
        let plain = context(false, ROWS);
        let rewritten = context(true, ROWS);
        for sql in REPLACED {
            let (expected, used_plain) = run(&plain, sql).await;
            let (actual, used) = run(&rewritten, sql).await;
            assert!(!used_plain && used, "{sql}: the operator was not used");
            assert_eq!(actual, expected, "{sql}");
        }
    }

    #[tokio::test]
    async fn leaves_other_windows_alone() {
        let ctx = context(true, ROWS);
        for sql in [
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY k ORDER BY t) AS r FROM t) \
             WHERE r = 2",
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY k ORDER BY t) AS r FROM t) \
             WHERE r <= 1",
            "SELECT * FROM (SELECT *, rank() OVER (PARTITION BY k ORDER BY j) AS r FROM t) \
             WHERE r = 1",
            "SELECT * FROM (SELECT *, row_number() OVER (ORDER BY t) AS r FROM t) WHERE r = 1",
            "SELECT *, row_number() OVER (PARTITION BY k ORDER BY t) AS r FROM t",
        ] {
            let (_, used) = run(&ctx, sql).await;
            assert!(!used, "{sql}: the operator should not be used");
        }
    }

    fn row() -> impl Strategy<Value = Row> {
        let key = prop::option::weighted(0.85, prop::sample::select(vec!["a", "b", "c", "d"]));
        let j = prop::option::weighted(0.8, 0i64..3);
        (key, j, 0i64..1000)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn random_rows_answer_as_the_window_does(rows in prop::collection::vec(row(), 0..30)) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            // ties in t make the window's pick arbitrary: order by every column
            let sql = "SELECT k, j, t FROM (SELECT *, row_number() OVER \
                       (PARTITION BY k, j ORDER BY t DESC) AS r FROM t) WHERE r = 1 \
                       ORDER BY k, j";
            let (expected, actual) = runtime.block_on(async {
                (run(&context(false, &rows), sql).await.0, run(&context(true, &rows), sql).await.0)
            });
            prop_assert_eq!(actual, expected);
        }
    }
}

//! `DeduplicateExec`: the streaming operator that applies "same series + same time: later
//! write wins per field" across sources (Parquet files and the write buffer) whose rows
//! overlap in time.
//!
//! Its input is one stream sorted by the series key (every tag), then time, then source order
//! (older sources first), as a `SortPreservingMergeExec` over per-source sorted scans produces.
//! Runs of equal (series, time) keys are merged as storage merges them in the buffer; a run
//! that reaches the end of a batch is carried into the next one, so memory stays bounded by a
//! batch plus the duplicates of one key.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{LexOrdering, LexRequirement, OrderingRequirements, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties,
};
use futures::StreamExt;
use quiver_storage::{deduplicate_complete_runs, deduplicate_sorted};

use crate::plan_nodes::{only_child, only_partition};

/// Merges rows of equal (series, time) in a sorted stream; see the module documentation.
#[derive(Debug)]
pub struct DeduplicateExec {
    input: Arc<dyn ExecutionPlan>,
    /// Series key then time, as column indices of the input.
    key_columns: Vec<usize>,
    /// Field columns: the latest non-null value wins. Other columns take the run's first row.
    field_columns: Vec<usize>,
    /// The order the input must have: keys, then source order.
    input_order: LexOrdering,
    properties: Arc<PlanProperties>,
}

impl DeduplicateExec {
    /// A deduplication of `input`, which must be sorted by `input_order`: `key_columns`,
    /// then source order.
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        key_columns: Vec<usize>,
        field_columns: Vec<usize>,
        input_order: LexOrdering,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            input.equivalence_properties().clone(),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        DeduplicateExec {
            input,
            key_columns,
            field_columns,
            input_order,
            properties,
        }
    }
}

impl DeduplicateExec {
    /// Series key then time, as column indices of the input.
    pub fn key_columns(&self) -> &[usize] {
        &self.key_columns
    }

    /// Field columns (the latest non-null value wins).
    pub fn field_columns(&self) -> &[usize] {
        &self.field_columns
    }

    /// The order the input must have: keys, then source order.
    pub fn input_order(&self) -> &LexOrdering {
        &self.input_order
    }
}

impl DisplayAs for DeduplicateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let schema = self.input.schema();
        let keys: Vec<&str> = self
            .key_columns
            .iter()
            .map(|&i| schema.field(i).name().as_str())
            .collect();
        write!(f, "DeduplicateExec: key=[{}]", keys.join(", "))
    }
}

impl ExecutionPlan for DeduplicateExec {
    fn name(&self) -> &str {
        "DeduplicateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        vec![Some(OrderingRequirements::new(LexRequirement::from(
            self.input_order.clone(),
        )))]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(DeduplicateExec::new(
            only_child(children, "DeduplicateExec")?,
            self.key_columns.clone(),
            self.field_columns.clone(),
            self.input_order.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        only_partition(partition, "DeduplicateExec")?;
        let schema = self.input.schema();
        let state = DedupState {
            input: self.input.execute(0, context)?,
            carry: None,
            schema: schema.clone(),
            key_columns: self.key_columns.clone(),
            field_columns: self.field_columns.clone(),
            done: false,
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            let next = state.next_batch().await?;
            Some((next, state))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

struct DedupState {
    input: SendableRecordBatchStream,
    /// The last key run seen, which the next batch may continue.
    carry: Option<RecordBatch>,
    schema: SchemaRef,
    key_columns: Vec<usize>,
    field_columns: Vec<usize>,
    done: bool,
}

impl DedupState {
    /// The next deduplicated batch, `None` at the end.
    async fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        if self.done {
            return None;
        }
        loop {
            let result = match self.input.next().await {
                Some(Ok(batch)) => self.absorb(batch).transpose(),
                Some(Err(e)) => Some(Err(e)),
                None => {
                    self.done = true;
                    return self.carry.take().map(|rest| self.merge(&rest));
                }
            };
            if let Some(result) = result {
                if result.is_err() {
                    self.done = true;
                }
                return Some(result);
            }
        }
    }

    /// Adds `batch` after the carried run; returns the merged rows that are complete.
    fn absorb(&mut self, batch: RecordBatch) -> Result<Option<RecordBatch>> {
        let batch = match self.carry.take() {
            Some(carry) => arrow::compute::concat_batches(&self.schema, [&carry, &batch])?,
            None => batch,
        };
        let (complete, start) =
            deduplicate_complete_runs(&batch, &self.key_columns, &self.field_columns)
                .map_err(external)?;
        self.carry = Some(batch.slice(start, batch.num_rows() - start));
        Ok(complete)
    }

    fn merge(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        deduplicate_sorted(batch, &self.key_columns, &self.field_columns).map_err(external)
    }
}

fn external(e: quiver_storage::StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

//! `PartCollectExec`: passes an aggregate's rows on (without their part column, if they have
//! one) and, once every row was read, keeps the rows of each missed part in the store (a part with no
//! rows too: it is as reusable as any). A query that fails or is cancelled keeps nothing.
//! Bounded: the gathered rows are counted in the query's memory pool; a part whose rows
//! outgrow the store's largest part is let go as soon as it does, and all of them once
//! together they outgrow the store or the memory the query may use (the query itself goes on).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch, SortColumn};
use arrow::datatypes::{SchemaRef, TimestampNanosecondType};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalExpr};
use datafusion::physical_plan::execution_plan::Boundedness;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;
use quiver_exec::plan_nodes::{only_child, only_partition};

use super::{PartKey, PartReuse, PartRows};

/// Which part a computed row belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PartOf {
    /// The start of its part is in this column, which is not passed on.
    Column(usize),
    /// Its time bucket starts in this column, in the part of `width` holding it.
    Bucket {
        /// The bucket column.
        column: usize,
        /// The parts' width.
        width: i64,
    },
}

/// Keeps the missed parts an aggregate computes (module docs).
#[derive(Debug)]
pub(crate) struct PartCollectExec {
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    part_of: PartOf,
    missed: Arc<Vec<PartKey>>,
    reuse: PartReuse,
    /// The order kept parts' rows are put in, if any.
    ordering: Option<LexOrdering>,
    properties: Arc<PlanProperties>,
}

impl PartCollectExec {
    /// Passes `input`'s rows on as `schema` (without the part column if `part_of` names
    /// one), keeping the `missed` parts in `reuse`'s store, their rows in `ordering` if given.
    pub(crate) fn try_new(
        input: Arc<dyn ExecutionPlan>,
        schema: SchemaRef,
        part_of: PartOf,
        missed: Vec<PartKey>,
        (reuse, ordering): (PartReuse, Option<LexOrdering>),
    ) -> Result<Self> {
        let extra = usize::from(matches!(part_of, PartOf::Column(_)));
        if input.schema().fields().len() != schema.fields().len() + extra {
            return Err(DataFusionError::Internal(format!(
                "PartCollectExec: the aggregate has {} columns, the parts {} (and {extra} part column)",
                input.schema().fields().len(),
                schema.fields().len()
            )));
        }
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            input.properties().emission_type,
            Boundedness::Bounded,
        ));
        Ok(PartCollectExec {
            input,
            schema,
            part_of,
            missed: Arc::new(missed),
            reuse,
            ordering,
            properties,
        })
    }
}

impl DisplayAs for PartCollectExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PartCollectExec: parts to keep={}", self.missed.len())
    }
}

impl ExecutionPlan for PartCollectExec {
    fn name(&self) -> &str {
        "PartCollectExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
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
        Ok(Arc::new(PartCollectExec::try_new(
            only_child(children, "PartCollectExec")?,
            self.schema.clone(),
            self.part_of,
            self.missed.as_ref().clone(),
            (self.reuse.clone(), self.ordering.clone()),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        only_partition(partition, "PartCollectExec")?;
        let input = self.input.execute(0, context.clone())?;
        let collector = Collector {
            schema: self.schema.clone(),
            part_of: self.part_of,
            missed: self
                .missed
                .iter()
                .map(|key| {
                    let gathered = Gathered {
                        key: key.clone(),
                        batches: Vec::new(),
                        bytes: 0,
                    };
                    (key.start, gathered)
                })
                .collect(),
            reuse: self.reuse.clone(),
            ordering: self.ordering.clone(),
            rows: 0,
            reservation: MemoryConsumer::new("PartCollectExec").register(context.memory_pool()),
        };
        let stream = futures::stream::unfold(
            (input, Some(collector)),
            |(mut input, mut collector)| async move {
                let collecting = collector.as_mut()?;
                match input.next().await {
                    Some(Ok(batch)) => {
                        let passed = collecting.take(&batch);
                        Some((passed, (input, collector)))
                    }
                    // nothing is kept of a query that fails
                    Some(Err(e)) => Some((Err(e), (input, None))),
                    None => {
                        collector.take()?.keep();
                        None
                    }
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// The rows of the missed parts, gathered as they pass.
struct Collector {
    schema: SchemaRef,
    part_of: PartOf,
    /// Each missed part by its start, with its rows so far.
    missed: HashMap<i64, Gathered>,
    reuse: PartReuse,
    /// The order kept parts' rows are put in, if any.
    ordering: Option<LexOrdering>,
    /// Rows passed on.
    rows: usize,
    /// The gathered rows' bytes, counted in the query's memory pool: past its limit (or the
    /// store's capacity) nothing is kept, and the query goes on.
    reservation: MemoryReservation,
}

/// One missed part's rows so far.
struct Gathered {
    key: PartKey,
    batches: Vec<RecordBatch>,
    bytes: usize,
}

impl Collector {
    /// `batch` as passed on; the rows of missed parts kept aside (one pass over the part
    /// column, then one `take` per part present).
    fn take(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let mut columns = batch.columns().to_vec();
        let (times, width) = match self.part_of {
            PartOf::Column(column) => (columns.remove(column), None),
            PartOf::Bucket { column, width } => (columns[column].clone(), Some(width)),
        };
        let passed = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.rows += passed.num_rows();
        if self.missed.is_empty() {
            return Ok(passed);
        }
        let times = times
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "PartCollectExec: the part column is {}",
                    times.data_type()
                ))
            })?;
        let mut rows_of: HashMap<i64, Vec<u32>> = HashMap::new();
        for (row, time) in times.iter().enumerate() {
            let Some(time) = time else { continue };
            let start = match width {
                None => time,
                Some(width) => time.div_euclid(width).saturating_mul(width),
            };
            if self.missed.contains_key(&start) {
                rows_of.entry(start).or_default().push(row as u32);
            }
        }
        for (start, rows) in rows_of {
            let part_rows = take_record_batch(&passed, &UInt32Array::from(rows))?;
            self.gather(start, part_rows);
        }
        Ok(passed)
    }

    /// Adds `rows` to the missed part starting at `start`, or lets the part go (past the
    /// store's largest part) or every part (past the memory the query may use).
    fn gather(&mut self, start: i64, rows: RecordBatch) {
        let Some(part) = self.missed.get_mut(&start) else {
            return;
        };
        let bytes = rows.get_array_memory_size();
        part.batches.push(rows);
        part.bytes += bytes;
        let over_store = self.reservation.size() + bytes > self.reuse.store.capacity_bytes();
        if over_store || self.reservation.try_grow(bytes).is_err() {
            self.missed.clear();
            self.reservation.free();
            return;
        }
        if part.bytes > self.reuse.store.max_part_bytes() {
            let gone = part.bytes;
            self.missed.remove(&start);
            self.reservation.shrink(gone);
        }
    }

    /// Offers every missed part to the store and reports what was computed.
    fn keep(self) {
        for (_, Gathered { key, batches, .. }) in self.missed {
            let batches = match &self.ordering {
                None => batches,
                Some(ordering) => match sorted(&self.schema, &batches, ordering) {
                    Ok(sorted) => vec![sorted],
                    Err(e) => {
                        tracing::warn!(error = %e, "a time part could not be sorted; not kept");
                        continue;
                    }
                },
            };
            let rows = batches.iter().map(RecordBatch::num_rows).sum();
            let bytes = batches.iter().map(RecordBatch::get_array_memory_size).sum();
            let part = PartRows {
                batches,
                rows,
                bytes,
            };
            self.reuse.store.insert(key, Arc::new(part));
        }
        self.reuse.computed(self.rows);
    }
}

/// `batches` as one batch sorted by `ordering`.
fn sorted(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    ordering: &LexOrdering,
) -> Result<RecordBatch> {
    let batch = concat_batches(schema, batches)?;
    let columns = ordering
        .iter()
        .map(|sort| {
            Ok(SortColumn {
                values: sort.expr.evaluate(&batch)?.into_array(batch.num_rows())?,
                options: Some(sort.options),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let indices = lexsort_to_indices(&columns, None)?;
    Ok(take_record_batch(&batch, &indices)?)
}

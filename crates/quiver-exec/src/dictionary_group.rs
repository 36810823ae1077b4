//! Grouping by a tag, a time bin or both without hashing every row: [`DictionaryGroupRule`]
//! replaces the partial stage of `GROUP BY <tag>`, `GROUP BY date_bin(<interval>, time)` and
//! `GROUP BY <tag>, date_bin(...)` (either order) with [`DictionaryGroupExec`].
//!
//! A tag column is `Dictionary(Int32, Utf8)`. DataFusion groups a dictionary column through
//! its generic row format: every row's value is encoded to bytes, hashed and compared, which
//! was two thirds of `SELECT hostname, avg(usage_user) ... GROUP BY hostname` over a million
//! rows. Rows of one batch that share a dictionary key share a tag, so the operator maps
//! each distinct key of a dictionary to a tag id once (the mapping is kept while batches share
//! their dictionary, as slices of one write-buffer chunk do). A time bin is computed with one
//! integer operation per row and its group found by indexing a table, not hashing
//! ([`crate::time_bin`]); with a tag, each tag id has its own table. Rows arrive sorted by
//! series then time, so a group is a run of rows: its group is looked up once per run, and
//! for the common aggregates its state is computed over the run ([`crate::run_states`]). The
//! accumulators are DataFusion's own (`GroupsAccumulator`), fed the same group indices and
//! arguments the plain aggregate would feed them (or states of runs, merged as its final
//! stage merges partial states), and the output is the partial aggregate's own schema, so
//! the final stage above is unchanged.
//!
//! Only the partial stage (raw rows in, accumulator state out) is replaced, and only when the
//! group key is one of those (the bin over a non-nullable nanosecond timestamp, with a fixed
//! interval and the default origin), no aggregate has a `FILTER`,
//! `DISTINCT` or `ORDER BY`, every aggregate has a groups accumulator, and the aggregate has
//! no limit, dynamic filter or input order to exploit. A partial stage may emit a group more
//! than once (the final stage merges states), so when its memory reservation is refused the
//! operator emits what it holds and starts over instead of failing.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, DictionaryArray, Int32Array, RecordBatch};
use arrow::array::{StringArray, StringBuilder};
use arrow::datatypes::{DataType, Int32Type, Schema, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{evaluate_many, AggregateExec, AggregateMode};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    apply_expression_roots, DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode,
    PlanProperties,
};
use futures::StreamExt;

use crate::plan_nodes::{only_child, rewrite_nodes};
use crate::run_states::{Run, RunAggregate};
use crate::time_bin::{BinGroups, Bins, TimeBin};

/// The physical rule that puts [`DictionaryGroupExec`] in place of qualifying partial
/// aggregates (module docs).
#[derive(Debug, Default)]
pub struct DictionaryGroupRule;

impl PhysicalOptimizerRule for DictionaryGroupRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        rewrite_nodes(plan, |aggregate: &AggregateExec, _| {
            Ok(DictionaryGroupExec::replacing(aggregate)
                .map(|exec| Arc::new(exec) as Arc<dyn ExecutionPlan>))
        })
    }

    fn name(&self) -> &str {
        "quiver_dictionary_group"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The partial stage of an aggregate grouped by one dictionary-encoded column (module docs).
#[derive(Debug)]
pub struct DictionaryGroupExec {
    input: Arc<dyn ExecutionPlan>,
    /// What the groups are keyed by.
    key: GroupKey,
    /// The aggregates, in the order of their state columns in the output.
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Each aggregate's state over a run of rows, where it is computed here.
    run_aggregates: Vec<Option<RunAggregate>>,
    /// The output: the group column, then every aggregate's state fields.
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl DictionaryGroupExec {
    /// The replacement of `aggregate`, if it qualifies (module docs).
    fn replacing(aggregate: &AggregateExec) -> Option<Self> {
        let qualifies = *aggregate.mode() == AggregateMode::Partial
            && aggregate.group_expr().is_single()
            && aggregate.limit_options().is_none()
            && aggregate.dynamic_expressions_produced().is_empty()
            && *aggregate.input_order_mode() == InputOrderMode::Linear
            && aggregate.filter_expr().iter().all(Option::is_none)
            && aggregate.aggr_expr().iter().all(|a| {
                a.groups_accumulator_supported() && !a.is_distinct() && a.order_bys().is_empty()
            });
        let input = aggregate.input();
        let input_schema = input.schema();
        let key = GroupKey::of(aggregate.group_expr().expr(), &input_schema)?;
        qualifies.then(|| DictionaryGroupExec {
            input: input.clone(),
            key,
            aggregates: aggregate.aggr_expr().to_vec(),
            run_aggregates: aggregate
                .aggr_expr()
                .iter()
                .map(|a| RunAggregate::of(a, &input_schema))
                .collect(),
            schema: aggregate.schema(),
            properties: aggregate.properties().clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }
}

/// What a [`DictionaryGroupExec`] groups by: a tag, a time bin, or both (in either order).
#[derive(Debug, Clone)]
struct GroupKey {
    /// The tag column's index in the input, if the key has a tag.
    tag: Option<usize>,
    /// The time bin, if the key has one.
    bin: Option<TimeBin>,
    /// Whether the bin is the first key column (else the tag is, or there is no bin).
    bin_first: bool,
}

impl GroupKey {
    /// The key of an aggregate grouped by `exprs` over rows of `input`, if it is one.
    fn of(exprs: &[(Arc<dyn PhysicalExpr>, String)], input: &Schema) -> Option<GroupKey> {
        if exprs.is_empty() || exprs.len() > 2 {
            return None;
        }
        let mut key = GroupKey {
            tag: None,
            bin: None,
            bin_first: false,
        };
        for (position, (expr, _)) in exprs.iter().enumerate() {
            let tag = expr
                .downcast_ref::<Column>()
                .filter(|column| is_tag(input.field(column.index()).data_type()));
            match (tag, TimeBin::of(expr, input)) {
                (Some(column), _) if key.tag.is_none() => key.tag = Some(column.index()),
                (None, Some(bin)) if key.bin.is_none() => {
                    key.bin = Some(bin);
                    key.bin_first = position == 0;
                }
                _ => return None,
            }
        }
        Some(key)
    }

    /// What `EXPLAIN` shows of the key.
    fn describe(&self, input: &Schema) -> String {
        let tag = self.tag.map(|column| input.field(column).name().clone());
        let bin = self.bin.as_ref().map(|bin| bin.describe(input));
        let parts: Vec<String> = if self.bin_first {
            bin.into_iter().chain(tag).collect()
        } else {
            tag.into_iter().chain(bin).collect()
        };
        parts.join(", ")
    }
}

/// What a tag is (`quiver_model::schema::tag_data_type`).
fn is_tag(data_type: &DataType) -> bool {
    *data_type == quiver_model::schema::tag_data_type()
}

impl DisplayAs for DictionaryGroupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "DictionaryGroupExec: gby=[{}], aggr=[{}]",
            self.key.describe(&self.input.schema()),
            names.join(", ")
        )
    }
}

impl ExecutionPlan for DictionaryGroupExec {
    fn name(&self) -> &str {
        "DictionaryGroupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(self.aggregates.iter().flat_map(|a| a.expressions()), f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(DictionaryGroupExec {
            input: only_child(children, "DictionaryGroupExec")?,
            key: self.key.clone(),
            aggregates: self.aggregates.clone(),
            run_aggregates: self.run_aggregates.clone(),
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
        let accumulators = self
            .aggregates
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect::<Result<Vec<_>>>()?;
        let reservation = MemoryConsumer::new(format!("DictionaryGroupExec[{partition}]"))
            .with_can_spill(true)
            .register(context.memory_pool());
        let state = GroupState {
            input: self.input.execute(partition, context.clone())?,
            key: self.key.clone(),
            arguments: self.aggregates.iter().map(|a| a.expressions()).collect(),
            accumulators,
            run_aggregates: self.run_aggregates.clone(),
            groups: Groups::default(),
            reservation,
            schema: self.schema.clone(),
            batch_size: context.session_config().batch_size(),
            pending: Vec::new(),
            done: false,
            metrics: BaselineMetrics::new(&self.metrics, partition),
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            let next = state.next_batch().await?;
            Some((next, state))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// No id assigned to a dictionary key yet.
const UNMAPPED: usize = usize::MAX;

/// The shortest average run of one group for which states are computed per run rather than
/// rows fed one by one.
const MIN_RUN: usize = 8;

/// The groups seen so far: each a tag value, a time bin, or a pair of both.
#[derive(Default)]
struct Groups {
    /// The tag values seen (ids of a key without a tag are all 0).
    tags: TagIds,
    /// For a key with a bin, each group's tag id and bin.
    keyed: Vec<(usize, Option<i64>)>,
    /// For a key with a bin, the groups of each tag id's bins.
    bins: Vec<BinGroups>,
}

impl Groups {
    /// The runs of rows of `batch` that share a group under `key`, and their groups.
    fn runs(&mut self, key: &GroupKey, batch: &RecordBatch) -> Result<Vec<Run>> {
        let rows = batch.num_rows();
        let tag_runs = match key.tag {
            Some(column) => {
                let column = batch
                    .column(column)
                    .as_dictionary_opt::<Int32Type>()
                    .ok_or_else(|| {
                        DataFusionError::Internal(format!(
                            "DictionaryGroupExec: the group column {column} ({}) was planned \
                             as a tag (Dictionary(Int32, Utf8)), but a batch holds {}",
                            batch.schema().field(column).name(),
                            batch.column(column).data_type()
                        ))
                    })?;
                self.tags.runs(column)
            }
            None if rows == 0 => Vec::new(),
            None => vec![Run {
                start: 0,
                end: rows,
                group: 0,
            }],
        };
        let Some(bin) = &key.bin else {
            return Ok(tag_runs);
        };
        Ok(match bin.bins(batch)? {
            Bins::Every(bins) => self.split(tag_runs, &bins, Some, bin.stride()),
            Bins::Partial(bins) => self.split(tag_runs, &bins, |bin| bin, bin.stride()),
        })
    }

    /// `tag_runs` cut where the bin changes, each piece with the group of its tag and bin.
    fn split<T: Copy + PartialEq>(
        &mut self,
        tag_runs: Vec<Run>,
        bins: &[T],
        bin_of: impl Fn(T) -> Option<i64>,
        stride: i64,
    ) -> Vec<Run> {
        let mut runs = Vec::with_capacity(tag_runs.len());
        for tag_run in tag_runs {
            let mut start = tag_run.start;
            for row in tag_run.start + 1..=tag_run.end {
                if row == tag_run.end || bins[row] != bins[start] {
                    let group = self.bin_group(tag_run.group, bin_of(bins[start]), stride);
                    runs.push(Run {
                        start,
                        end: row,
                        group,
                    });
                    start = row;
                }
            }
        }
        runs
    }

    /// The group of `bin` (of `stride`, or none) under tag id `tag`.
    fn bin_group(&mut self, tag: usize, bin: Option<i64>, stride: i64) -> usize {
        if self.bins.len() <= tag {
            self.bins.resize_with(tag + 1, BinGroups::default);
        }
        let keyed = &mut self.keyed;
        self.bins[tag].group(bin, stride, || {
            keyed.push((tag, bin));
            keyed.len() - 1
        })
    }

    /// How many groups there are.
    fn len(&self, key: &GroupKey) -> usize {
        match key.bin {
            Some(_) => self.keyed.len(),
            None => self.tags.values.len(),
        }
    }

    /// The bytes the groups hold, roughly.
    fn size(&self) -> usize {
        self.tags.size()
            + self.keyed.capacity() * std::mem::size_of::<(usize, Option<i64>)>()
            + self.bins.capacity() * std::mem::size_of::<BinGroups>()
            + self.bins.iter().map(BinGroups::size).sum::<usize>()
    }

    /// The groups as the output's key columns (in the key's order), emptying them.
    fn take(&mut self, key: &GroupKey) -> Result<Vec<ArrayRef>> {
        let Some(bin) = &key.bin else {
            let ids: Vec<usize> = (0..self.tags.values.len()).collect();
            let column = self.tags.column(&ids)?;
            *self = Groups::default();
            return Ok(vec![column]);
        };
        let (ids, bins): (Vec<usize>, Vec<Option<i64>>) =
            std::mem::take(&mut self.keyed).into_iter().unzip();
        let mut columns = vec![bin.column(bins)?];
        if key.tag.is_some() {
            let tags = self.tags.column(&ids)?;
            if key.bin_first {
                columns.push(tags);
            } else {
                columns.insert(0, tags);
            }
        }
        *self = Groups::default();
        Ok(columns)
    }
}

/// The tag values seen so far, each with an id, and the mapping of the current dictionary's
/// keys to them.
#[derive(Default)]
struct TagIds {
    /// Every id's value (null for rows without the tag).
    values: Vec<Option<Arc<str>>>,
    index: HashMap<Arc<str>, usize>,
    null_id: Option<usize>,
    /// The dictionary the mapping is for, and each of its keys' id (or [`UNMAPPED`]).
    dictionary: Option<ArrayRef>,
    mapping: Vec<usize>,
    /// Heap bytes of the values.
    value_bytes: usize,
}

impl TagIds {
    /// Maps the keys of `dictionary` from now on (keeps the mapping if it is the last one).
    fn use_dictionary(&mut self, dictionary: &ArrayRef) {
        if !self
            .dictionary
            .as_ref()
            .is_some_and(|known| Arc::ptr_eq(known, dictionary))
        {
            self.dictionary = Some(dictionary.clone());
            self.mapping.clear();
            self.mapping.resize(dictionary.len(), UNMAPPED);
        }
    }

    /// The runs of rows with equal keys (or no key) in `column`, each with its id.
    fn runs(&mut self, column: &DictionaryArray<Int32Type>) -> Vec<Run> {
        self.use_dictionary(column.values());
        let values = column.values().as_string::<i32>();
        let keys = column.keys();
        let raw = keys.values();
        let same = |a: usize, b: usize| match keys.nulls() {
            None => raw[a] == raw[b],
            Some(valid) => match (valid.is_valid(a), valid.is_valid(b)) {
                (true, true) => raw[a] == raw[b],
                (a, b) => a == b,
            },
        };
        let mut runs = Vec::new();
        let mut start = 0;
        while start < raw.len() {
            let end = (start + 1..raw.len())
                .find(|&row| !same(start, row))
                .unwrap_or(raw.len());
            let id = if keys.is_null(start) {
                self.null_id()
            } else {
                self.id_of_key(values, raw[start] as usize)
            };
            runs.push(Run {
                start,
                end,
                group: id,
            });
            start = end;
        }
        runs
    }

    fn id_of_key(&mut self, values: &StringArray, key: usize) -> usize {
        let known = self.mapping[key];
        if known != UNMAPPED {
            return known;
        }
        let id = if values.is_null(key) {
            self.null_id()
        } else {
            self.intern(values.value(key))
        };
        self.mapping[key] = id;
        id
    }

    fn intern(&mut self, value: &str) -> usize {
        if let Some(&id) = self.index.get(value) {
            return id;
        }
        let id = self.values.len();
        let value: Arc<str> = Arc::from(value);
        self.value_bytes += value.len();
        self.values.push(Some(value.clone()));
        self.index.insert(value, id);
        id
    }

    fn null_id(&mut self) -> usize {
        *self.null_id.get_or_insert_with(|| {
            self.values.push(None);
            self.values.len() - 1
        })
    }

    /// The bytes held, roughly: each value, its entry in the map and the list.
    fn size(&self) -> usize {
        self.value_bytes
            + self.values.capacity() * std::mem::size_of::<Option<Arc<str>>>()
            + self.index.capacity() * (std::mem::size_of::<(Arc<str>, usize)>() + 1)
            + self.mapping.capacity() * std::mem::size_of::<usize>()
    }

    /// The tag column of rows with these `ids`: a dictionary of every value seen.
    fn column(&self, ids: &[usize]) -> Result<ArrayRef> {
        let mut names = StringBuilder::with_capacity(self.values.len(), 0);
        for value in &self.values {
            names.append_option(value.as_deref());
        }
        let keys: Int32Array = ids
            .iter()
            .map(|&id| self.values[id].as_ref().map(|_| id as i32))
            .collect();
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(
            keys,
            Arc::new(names.finish()),
        )?))
    }
}

/// One partition's run of [`DictionaryGroupExec`].
struct GroupState {
    input: SendableRecordBatchStream,
    key: GroupKey,
    /// Every aggregate's argument expressions.
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    run_aggregates: Vec<Option<RunAggregate>>,
    groups: Groups,
    reservation: MemoryReservation,
    schema: SchemaRef,
    batch_size: usize,
    /// Output batches not handed out yet, the last first.
    pending: Vec<RecordBatch>,
    done: bool,
    metrics: BaselineMetrics,
}

impl GroupState {
    /// The next output batch, `None` at the end.
    async fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(batch) = self.pending.pop() {
                self.metrics.record_output(batch.num_rows());
                return Some(Ok(batch));
            }
            if self.done {
                self.metrics.done();
                return None;
            }
            let input = self.input.next().await;
            let elapsed = self.metrics.elapsed_compute().clone();
            let timer = elapsed.timer();
            let step = match input {
                Some(Ok(batch)) => self.aggregate(&batch),
                Some(Err(e)) => Err(e),
                None => {
                    self.done = true;
                    self.emit()
                }
            };
            timer.done();
            if let Err(e) = step {
                self.done = true;
                self.pending.clear();
                return Some(Err(e));
            }
        }
    }

    /// Adds `batch`'s rows to their groups; emits everything held when the memory pool
    /// refuses more.
    fn aggregate(&mut self, batch: &RecordBatch) -> Result<()> {
        let arguments = evaluate_many(&self.arguments, batch)?;
        let runs = self.groups.runs(&self.key, batch)?;
        let total = self.groups.len(&self.key);
        let long_runs = runs.len() * MIN_RUN <= batch.num_rows();
        let mut indices = Vec::new();
        let aggregates = self.accumulators.iter_mut().zip(&self.run_aggregates);
        for ((accumulator, kind), values) in aggregates.zip(&arguments) {
            if let (true, Some(kind)) = (long_runs, kind) {
                kind.merge_runs(accumulator.as_mut(), &values[0], &runs, total)?;
                continue;
            }
            if indices.is_empty() {
                indices = runs
                    .iter()
                    .flat_map(|r| std::iter::repeat_n(r.group, r.end - r.start))
                    .collect();
            }
            accumulator.update_batch(values, &indices, None, total)?
        }
        let held = self.groups.size() + self.accumulators.iter().map(|a| a.size()).sum::<usize>();
        if self.reservation.try_resize(held).is_err() {
            self.emit()?;
        }
        Ok(())
    }

    /// Every group's state as output batches (queued in `pending`), then no groups.
    fn emit(&mut self) -> Result<()> {
        if self.groups.len(&self.key) == 0 {
            return Ok(());
        }
        let mut columns = self.groups.take(&self.key)?;
        for accumulator in &mut self.accumulators {
            columns.extend(accumulator.state(EmitTo::All)?);
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.reservation.free();
        let mut start = batch.num_rows();
        while start > 0 {
            let len = start.min(self.batch_size);
            start -= len;
            self.pending.push(batch.slice(start, len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan_nodes::testing::{answer_and_use, physical_plan};
    use arrow::array::{Float64Array, Int64Array};
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use datafusion::execution::session_state::SessionStateBuilder;
    use datafusion::prelude::{SessionConfig, SessionContext};
    use proptest::prelude::*;

    fn schema() -> SchemaRef {
        let tag = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let time = DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, Some("UTC".into()));
        Arc::new(Schema::new(vec![
            Field::new("tag", tag, true),
            Field::new("v", DataType::Float64, true),
            Field::new("i", DataType::Int64, true),
            Field::new("time", time, false),
        ]))
    }

    /// A batch whose tag column has `dictionary` as its values and `keys` as its keys.
    fn batch(dictionary: &[Option<&str>], keys: &[Option<i32>]) -> RecordBatch {
        let values = Arc::new(StringArray::from(dictionary.to_vec()));
        let tag =
            DictionaryArray::<Int32Type>::try_new(Int32Array::from(keys.to_vec()), values).unwrap();
        let n = keys.len();
        // nulls; both zeros and NaN in batches of a length divisible by three (a float
        // minimum or maximum of those depends on the order it is given the rows in)
        let v: Float64Array = (0..n)
            .map(|r| match (r % 7, r % 13) {
                (3, _) => None,
                (_, 0) => Some(-0.0),
                (_, 1) => Some(0.0),
                _ if n.is_multiple_of(3) && r % 11 == 5 => Some(f64::NAN),
                _ => Some(r as f64 * 1.5 - 4.0),
            })
            .collect();
        let i: Int64Array = (0..n).map(|r| Some(r as i64 * 3 - 10)).collect();
        // ascending within the batch, some before the epoch: 13 s apart, so a minute's bin
        // is a run of four or five rows
        let time = arrow::array::TimestampNanosecondArray::from_iter_values(
            (0..n as i64).map(|r| (r - 20) * 13_000_000_000 + 7),
        )
        .with_timezone("UTC");
        let columns: Vec<ArrayRef> = vec![Arc::new(tag), Arc::new(v), Arc::new(i), Arc::new(time)];
        RecordBatch::try_new(schema(), columns).unwrap()
    }

    /// Two partitions: dictionaries in different orders, with a null value, null keys, and
    /// slices of one batch (which share a dictionary).
    fn partitions() -> Vec<Vec<RecordBatch>> {
        let shared = batch(
            &[Some("b"), Some("c"), Some("a")],
            &[
                Some(0),
                Some(1),
                Some(2),
                Some(0),
                None,
                Some(2),
                Some(2),
                Some(1),
            ],
        );
        vec![
            vec![
                batch(
                    &[Some("a"), Some("b"), None],
                    &[Some(0), Some(1), Some(2), Some(0)],
                ),
                shared.slice(0, 5),
                shared.slice(5, 3),
            ],
            vec![
                batch(&[Some("d"), Some("a")], &[Some(1), Some(0), None, Some(1)]),
                // long runs of one key, as sorted data has them: states computed per run
                batch(
                    &[Some("a"), Some("e"), None],
                    &sorted_keys(&[(0, 20), (1, 12), (2, 9)]),
                ),
            ],
        ]
    }

    /// `count` rows of each `(key, count)`, in order.
    fn sorted_keys(runs: &[(i32, usize)]) -> Vec<Option<i32>> {
        runs.iter()
            .flat_map(|&(key, count)| std::iter::repeat_n(Some(key), count))
            .collect()
    }

    fn context(with_rule: bool, data: Vec<Vec<RecordBatch>>) -> SessionContext {
        let mut builder = SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_target_partitions(2))
            .with_default_features();
        if with_rule {
            builder = builder.with_physical_optimizer_rule(Arc::new(DictionaryGroupRule));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        let table = MemTable::try_new(schema(), data).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        ctx
    }

    /// The answer as sorted lines, and whether the plan used the operator.
    async fn run(ctx: &SessionContext, sql: &str) -> (Vec<String>, bool) {
        let (mut lines, used) = answer_and_use(ctx, sql, "DictionaryGroupExec").await;
        lines.sort();
        (lines, used)
    }

    /// `sql` over `data` uses the operator and answers as the plain aggregate does.
    async fn assert_operator_answers_as_plain(data: &[Vec<RecordBatch>], sql: &str) {
        let (expected, _) = run(&context(false, data.to_vec()), sql).await;
        let (actual, used) = run(&context(true, data.to_vec()), sql).await;
        assert!(used, "{sql}: the operator was not used");
        assert_eq!(actual, expected, "{sql}");
    }

    const REPLACED: &[&str] = &[
        "SELECT tag, avg(v), sum(i), count(*), count(v), min(v), max(i), min(tag), max(tag), \
         sum(v), min(i) FROM t GROUP BY tag",
        "SELECT tag, sum(v) FROM t WHERE i > 0 GROUP BY tag HAVING count(*) > 1",
        "SELECT upper(tag) AS u, n FROM (SELECT tag, count(*) AS n FROM t GROUP BY tag) s",
        "SELECT tag FROM t GROUP BY tag",
        "SELECT tag, stddev(v), var_pop(i), bool_and(v > 0) FROM t GROUP BY tag",
        // planned as a count over `GROUP BY tag, v`: the outer stage is replaced
        "SELECT tag, count(DISTINCT v) FROM t GROUP BY tag",
        "SELECT date_bin(INTERVAL '1 minute', time) AS m, tag, avg(v), max(v), min(v), \
         count(*), max(i), sum(v) FROM t GROUP BY m, tag",
        "SELECT tag, date_bin(INTERVAL '30 seconds', time) AS m, min(v), min(i), count(v) \
         FROM t GROUP BY tag, m",
        "SELECT date_bin(INTERVAL '1 minute', time) AS m, max(v), count(v), min(tag) FROM t \
         GROUP BY m",
        "SELECT date_bin(INTERVAL '1 day', time) AS d, count(*), avg(i) FROM t GROUP BY d",
    ];

    #[tokio::test]
    async fn answers_as_the_plain_aggregate_does() {
        let plain = context(false, partitions());
        let rewritten = context(true, partitions());
        for sql in REPLACED {
            let (expected, used_plain) = run(&plain, sql).await;
            let (actual, used) = run(&rewritten, sql).await;
            assert!(!used_plain && used, "{sql}: the operator was not used");
            assert_eq!(actual, expected, "{sql}");
        }
    }

    #[tokio::test]
    async fn a_time_whose_bin_is_not_an_i64_is_binned_as_datafusion_bins_it() {
        // DataFusion answers NULL for a bin below i64::MIN, and the exact bin where the
        // stride divides the distance
        let minute = 60_000_000_000i64;
        let times = [i64::MIN, i64::MIN + 5, i64::MIN + minute + 1, -1, 0, 7];
        let base = batch(&[Some("a"), Some("b")], &sorted_keys(&[(0, 3), (1, 3)]));
        let time =
            arrow::array::TimestampNanosecondArray::from(times.to_vec()).with_timezone("UTC");
        let mut columns = base.columns().to_vec();
        columns[3] = Arc::new(time);
        let data = vec![vec![RecordBatch::try_new(schema(), columns).unwrap()]];
        for sql in [
            "SELECT date_bin(INTERVAL '1 minute', time) AS m, count(*), sum(i) FROM t GROUP BY m",
            "SELECT tag, date_bin(INTERVAL '1 nanosecond', time) AS m, count(*) FROM t \
             GROUP BY tag, m",
        ] {
            assert_operator_answers_as_plain(&data, sql).await;
        }
    }

    #[tokio::test]
    async fn a_group_whose_values_are_all_null_aggregates_to_null() {
        // long runs of `a` and `b` (states per run), then a minute of `b` whose `v` and `i`
        // are all null: its average, sum, minimum and maximum are NULL, not NaN or 0
        let base = batch(&[Some("a"), Some("b")], &sorted_keys(&[(0, 30), (1, 30)]));
        let v: Float64Array = (0..60).map(|r| (r < 55).then_some(r as f64)).collect();
        let i: Int64Array = (0..60).map(|r| (r < 55).then_some(r)).collect();
        // the last five an hour after the rest: a minute of their own
        let time = arrow::array::TimestampNanosecondArray::from_iter_values(
            (0..60i64).map(|r| (r + if r < 55 { 0 } else { 3600 }) * 1_000_000_000),
        )
        .with_timezone("UTC");
        let mut columns = base.columns().to_vec();
        columns[1] = Arc::new(v);
        columns[2] = Arc::new(i);
        columns[3] = Arc::new(time);
        let whole = RecordBatch::try_new(schema(), columns).unwrap();
        for data in [
            vec![vec![whole.clone()]],
            vec![vec![whole.slice(0, 40)], vec![whole.slice(40, 20)]],
        ] {
            for sql in [
                "SELECT date_bin(INTERVAL '1 minute', time) AS m, count(*), avg(v), sum(v), \
                 min(i), max(i), sum(i), count(v) FROM t GROUP BY m",
                "SELECT tag, date_bin(INTERVAL '1 minute', time) AS m, avg(v), sum(v), max(i) \
                 FROM t GROUP BY tag, m",
            ] {
                assert_operator_answers_as_plain(&data, sql).await;
            }
        }
    }

    #[tokio::test]
    async fn leaves_what_it_cannot_do_to_the_plain_aggregate() {
        let ctx = context(true, partitions());
        for sql in [
            "SELECT tag, sum(v) FILTER (WHERE i > 0) FROM t GROUP BY tag",
            "SELECT tag, array_agg(v ORDER BY i) FROM t GROUP BY tag",
            "SELECT tag, i, sum(v) FROM t GROUP BY tag, i",
            "SELECT upper(tag), sum(v) FROM t GROUP BY upper(tag)",
            "SELECT i, sum(v) FROM t GROUP BY i",
            "SELECT tag, sum(v) FROM t GROUP BY GROUPING SETS ((tag), ())",
            "SELECT date_bin(INTERVAL '1 month', time) AS m, sum(v) FROM t GROUP BY m",
            "SELECT date_bin(INTERVAL '1 hour', time, TIMESTAMP '2000-01-01T00:30:00Z') AS m, \
             sum(v) FROM t GROUP BY m",
            "SELECT date_bin(INTERVAL '1 hour', time) AS m, i, sum(v) FROM t GROUP BY m, i",
            "SELECT date_bin(INTERVAL '1 hour', time) AS m, date_bin(INTERVAL '1 day', time) AS d, \
             sum(v) FROM t GROUP BY m, d",
        ] {
            let (_, used) = run(&ctx, sql).await;
            assert!(!used, "{sql}: the operator should not be used");
        }
    }

    /// Each group's count summed over `batches` of (group keys..., count) rows, the `keys`
    /// first columns being the group (as text), and how many of those rows each group had.
    fn counts_by_group(
        batches: &[RecordBatch],
        keys: usize,
    ) -> HashMap<Vec<Option<String>>, (i64, usize)> {
        let mut counts: HashMap<Vec<Option<String>>, (i64, usize)> = HashMap::new();
        for batch in batches {
            let texts: Vec<ArrayRef> = (0..keys)
                .map(|k| arrow::compute::cast(batch.column(k), &DataType::Utf8).unwrap())
                .collect();
            let n = batch
                .column(keys)
                .as_primitive::<arrow::datatypes::Int64Type>();
            for row in 0..batch.num_rows() {
                let group = texts
                    .iter()
                    .map(|text| {
                        let text = text.as_string::<i32>();
                        text.is_valid(row).then(|| text.value(row).to_string())
                    })
                    .collect();
                let entry = counts.entry(group).or_default();
                entry.0 += n.value(row);
                entry.1 += 1;
            }
        }
        counts
    }

    #[tokio::test]
    async fn a_refused_reservation_emits_partial_states_that_merge_to_the_exact_answer() {
        // every reservation fails: the operator emits after every input batch, so a group
        // shows up in several partial states; summed, they are the plain plan's counts (by a
        // tag, and by a time bin and a tag, whose table of bins starts over after each)
        for (sql, keys) in [
            ("SELECT tag, count(*) AS n FROM t GROUP BY tag", 1),
            (
                "SELECT date_bin(INTERVAL '1 minute', time) AS m, tag, count(*) AS n FROM t \
                 GROUP BY m, tag",
                2,
            ),
        ] {
            let plain = context(false, partitions()).sql(sql).await.unwrap();
            let expected: HashMap<Vec<Option<String>>, i64> =
                counts_by_group(&plain.collect().await.unwrap(), keys)
                    .into_iter()
                    .map(|(group, (n, _))| (group, n))
                    .collect();
            let runtime = RuntimeEnvBuilder::new()
                .with_memory_pool(Arc::new(GreedyMemoryPool::new(1)))
                .build_arc()
                .unwrap();
            let ctx = context(true, partitions());
            let plan = physical_plan(&ctx, sql).await;
            let partial = find_operator(&plan).expect("the operator is in the plan");
            let task = Arc::new(TaskContext::from(&ctx.state()).with_runtime(runtime));
            let mut states = Vec::new();
            for partition in 0..partial.properties().partitioning.partition_count() {
                let stream = partial.execute(partition, task.clone()).unwrap();
                states.extend(stream.map(|b| b.unwrap()).collect::<Vec<_>>().await);
            }
            assert_eq!(states.len(), 5, "{sql}: one emission per input batch");
            let merged = counts_by_group(&states, keys);
            assert!(
                merged.values().any(|&(_, rows)| rows > 1),
                "{sql}: some group was emitted more than once: {merged:?}"
            );
            let merged: HashMap<Vec<Option<String>>, i64> = merged
                .into_iter()
                .map(|(group, (n, _))| (group, n))
                .collect();
            assert_eq!(merged, expected, "{sql}");
        }
    }

    fn find_operator(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        if plan.name() == "DictionaryGroupExec" {
            return Some(plan.clone());
        }
        plan.children().into_iter().find_map(find_operator)
    }

    /// `batch` with `v` and `i` null in every row whose key is `key`.
    fn without_values_of(batch: &RecordBatch, key: Option<i32>) -> RecordBatch {
        let keys = batch.column(0).as_dictionary::<Int32Type>().keys();
        let blank: arrow::array::BooleanArray = keys.iter().map(|k| Some(k == key)).collect();
        let mut columns = batch.columns().to_vec();
        for column in &mut columns[1..3] {
            *column = arrow::compute::nullif(column, &blank).unwrap();
        }
        RecordBatch::try_new(batch.schema(), columns).unwrap()
    }

    /// Random batches over random dictionaries (values may repeat across dictionaries, be
    /// null, or be unused; keys may be null).
    fn random_partitions() -> impl Strategy<Value = Vec<Vec<RecordBatch>>> {
        let word = prop::option::weighted(0.9, "[a-e]{0,2}");
        let dictionary = prop::collection::vec(word, 1..6);
        let one = dictionary.prop_flat_map(|dictionary| {
            let len = dictionary.len() as i32;
            let keys = prop::collection::vec(prop::option::weighted(0.9, 0..len), 0..40);
            // half of the batches sorted, without null keys: long runs of one key; some with
            // no value at all for the first row's key
            (keys, any::<bool>(), any::<bool>()).prop_map(move |(mut keys, sorted, blank)| {
                if sorted {
                    keys.retain(Option::is_some);
                    keys.sort();
                }
                let words: Vec<Option<&str>> = dictionary.iter().map(|w| w.as_deref()).collect();
                let made = batch(&words, &keys);
                match keys.first() {
                    Some(&first) if blank => without_values_of(&made, first),
                    _ => made,
                }
            })
        });
        prop::collection::vec(prop::collection::vec(one, 0..4), 1..3)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn random_data_answers_as_the_plain_aggregate_does(data in random_partitions()) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            for sql in [REPLACED[0], REPLACED[6], REPLACED[8]] {
                let ((expected, partial), (actual, used)) = runtime.block_on(async {
                    let plain = context(false, data.clone());
                    let plain = answer_and_use(&plain, sql, "mode=Partial").await;
                    (plain, run(&context(true, data.clone()), sql).await)
                });
                // wherever the plain plan has a partial stage, the operator takes its place
                // (one small partition, or no rows, get a single-stage aggregate)
                prop_assert_eq!(used, partial, "{}: the operator was not used", sql);
                let mut expected = expected;
                expected.sort();
                prop_assert_eq!(actual, expected, "{}", sql);
            }
        }
    }
}

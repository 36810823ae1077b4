//! `GapFillExec`: adds the missing buckets of every series to an aggregate's rows, sorted by
//! series then bucket, filling each aggregate column with null, the series' last value
//! (`locf`) or a line between its neighbours (`interpolate`).
//!
//! It holds its input (one aggregate row per series and bucket, in the query's memory pool),
//! checks that the filled answer fits the query's memory limit before making any of it, then
//! makes it one batch at a time.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, RecordBatch, UInt32Array,
};
use arrow::compute::kernels::zip::zip;
use arrow::compute::SortOptions;
use arrow::compute::{cast, concat_batches, partition, take};
use arrow::datatypes::{DataType, Float64Type, Int64Type, SchemaRef};
use chrono::DateTime;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, LexRequirement, OrderingRequirements, PhysicalExpr,
    PhysicalSortExpr,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use quiver_model::TimeBucket;

use super::node::{describe_keys, FillMethod};
use crate::plan_nodes::{only_child, only_partition};

/// The buckets every series is filled with: `count` buckets of `stride` nanoseconds from
/// `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    first: i64,
    count: u64,
    stride: i64,
}

impl Grid {
    /// The buckets of `bucket` from the one holding `lower` to the one holding `upper`
    /// (inclusive; none if `lower > upper`); refused past `max` buckets.
    pub fn try_new(bucket: TimeBucket, lower: i64, upper: i64, max: u64) -> Result<Grid> {
        let stride = bucket.width;
        if lower > upper {
            return Ok(Grid::empty(bucket));
        }
        // the first bucket that starts within i64 (the one holding `lower` may start before)
        let first = bucket.floor(lower).or_else(|| bucket.ceil(lower));
        let count = match (first, bucket.floor(upper)) {
            (Some(first), Some(last)) if last >= first => {
                (last as i128 - first as i128) / stride as i128 + 1
            }
            _ => 0,
        };
        if count > max as i128 {
            return Err(DataFusionError::Plan(format!(
                "date_bin_gapfill() would make {count} buckets of {} per series from {} to {} \
                 (at most {max}): use a wider interval or a shorter time range",
                duration(stride),
                rfc3339(lower),
                rfc3339(upper)
            )));
        }
        Ok(Grid {
            first: first.unwrap_or(0),
            count: count as u64,
            stride,
        })
    }

    /// No bucket: the rows there are, their nulls filled.
    pub fn empty(bucket: TimeBucket) -> Grid {
        Grid {
            first: 0,
            count: 0,
            stride: bucket.width,
        }
    }

    /// The first bucket, how many there are, and their width (what [`Grid::from_parts`]
    /// takes).
    pub fn parts(&self) -> (i64, u64, i64) {
        (self.first, self.count, self.stride)
    }

    /// The grid [`Grid::parts`] described; fails unless the width is positive.
    pub fn from_parts((first, count, stride): (i64, u64, i64)) -> Result<Grid> {
        if stride <= 0 {
            return Err(DataFusionError::Internal(format!(
                "a gap-fill grid of buckets {stride} ns wide"
            )));
        }
        Ok(Grid {
            first,
            count,
            stride,
        })
    }

    /// Whether `time` is one of the buckets.
    fn holds(&self, time: Option<i64>) -> bool {
        time.is_some_and(|t| {
            let offset = t as i128 - self.first as i128;
            offset >= 0
                && offset % self.stride as i128 == 0
                && offset / (self.stride as i128) < self.count as i128
        })
    }

    /// The start of bucket `k` (< `count`).
    fn time(&self, k: u64) -> i64 {
        self.first + k as i64 * self.stride
    }
}

fn rfc3339(ns: i64) -> String {
    DateTime::from_timestamp_nanos(ns).to_rfc3339()
}

fn duration(ns: i64) -> String {
    format!("{:?}", std::time::Duration::from_nanos(ns.unsigned_abs()))
}

/// What each column of the output is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A GROUP BY column other than the bucket: the series' value.
    Series,
    /// The bucket.
    Time,
    /// An aggregate: null in a gap.
    Value,
    /// An aggregate (the input column given) filled by a method.
    Filled(usize, FillMethod),
}

/// Fills the gaps of its input; see the module documentation.
#[derive(Debug)]
pub struct GapFillExec {
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    time_column: usize,
    series_columns: Vec<usize>,
    grid: Grid,
    /// The output's columns after the input's: the input column each fills, and how.
    fills: Vec<(usize, FillMethod)>,
    /// Series columns, then the bucket, ascending (nulls first).
    order: LexOrdering,
    properties: Arc<PlanProperties>,
}

impl GapFillExec {
    /// A gap fill of `input` with `grid`'s buckets; `schema` is the input's (but for
    /// nullability), then a column per fill.
    pub fn try_new(
        input: Arc<dyn ExecutionPlan>,
        schema: SchemaRef,
        time_column: usize,
        series_columns: Vec<usize>,
        grid: Grid,
        fills: Vec<(usize, FillMethod)>,
    ) -> Result<Self> {
        let sort_expr = |i: usize| {
            PhysicalSortExpr::new(
                Arc::new(Column::new(schema.field(i).name(), i)),
                SortOptions::default(),
            )
        };
        let order = LexOrdering::new(
            series_columns
                .iter()
                .chain([&time_column])
                .map(|&i| sort_expr(i)),
        )
        .ok_or_else(|| DataFusionError::Internal("GapFillExec without keys".into()))?;
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new_with_orderings(schema.clone(), [order.clone()]),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(GapFillExec {
            input,
            schema,
            time_column,
            series_columns,
            grid,
            fills,
            order,
            properties,
        })
    }

    /// The bucket column.
    pub fn time_column(&self) -> usize {
        self.time_column
    }

    /// The GROUP BY columns other than the bucket.
    pub fn series_columns(&self) -> &[usize] {
        &self.series_columns
    }

    /// The buckets every series is filled with.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// The output's columns after the input's: the input column each fills, and how.
    pub fn fills(&self) -> &[(usize, FillMethod)] {
        &self.fills
    }

    fn role(&self, column: usize) -> Role {
        let inputs = self.input.schema().fields().len();
        if column == self.time_column {
            Role::Time
        } else if self.series_columns.contains(&column) {
            Role::Series
        } else if column >= inputs {
            let (source, method) = self.fills[column - inputs];
            Role::Filled(source, method)
        } else {
            Role::Value
        }
    }
}

impl DisplayAs for GapFillExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let name = |i: usize| self.schema.field(i).name().clone();
        let (series, fills) = describe_keys(&name, &self.series_columns, &self.fills);
        let (from, to) = match self.grid.count {
            0 => ("none".to_string(), "none".to_string()),
            n => (rfc3339(self.grid.first), rfc3339(self.grid.time(n - 1))),
        };
        write!(
            f,
            "GapFillExec: time={}, series=[{}], buckets={} of {} from {from} to {to}, fill=[{}]",
            name(self.time_column),
            series,
            self.grid.count,
            duration(self.grid.stride),
            fills
        )
    }
}

impl ExecutionPlan for GapFillExec {
    fn name(&self) -> &str {
        "GapFillExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        vec![Some(OrderingRequirements::new(LexRequirement::from(
            self.order.clone(),
        )))]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        // it adds rows: an order asked of its output must not be pushed below it (the order it
        // keeps is declared in its equivalence properties)
        vec![false]
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
        Ok(Arc::new(GapFillExec::try_new(
            only_child(children, "GapFillExec")?,
            self.schema.clone(),
            self.time_column,
            self.series_columns.clone(),
            self.grid,
            self.fills.clone(),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        only_partition(partition, "GapFillExec")?;
        let input = self.input.execute(0, context.clone())?;
        let reservation = MemoryConsumer::new("GapFillExec").register(context.memory_pool());
        let limit = match context.memory_pool().memory_limit() {
            MemoryLimit::Finite(bytes) => Some(bytes),
            MemoryLimit::Infinite | MemoryLimit::Unknown => None,
        };
        let layout = Layout {
            schema: self.schema.clone(),
            roles: (0..self.schema.fields().len())
                .map(|i| self.role(i))
                .collect(),
            time_column: self.time_column,
            series_columns: self.series_columns.clone(),
            grid: self.grid,
            batch_size: context.session_config().batch_size().max(1),
        };
        let filled = futures::stream::once(read_all(input, reservation))
            .map(move |read| {
                let (rows, reservation) = read?;
                Filler::try_new(layout.clone(), rows, reservation, limit)
            })
            .map_ok(futures::stream::iter)
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            filled,
        )))
    }
}

/// Every row of `input` in one batch, held in `reservation`.
async fn read_all(
    mut input: SendableRecordBatchStream,
    reservation: MemoryReservation,
) -> Result<(RecordBatch, MemoryReservation)> {
    let schema = input.schema();
    let mut batches = Vec::new();
    while let Some(batch) = input.next().await {
        let batch = batch?;
        reservation.try_grow(batch.get_array_memory_size())?;
        batches.push(batch);
    }
    let rows = concat_batches(&schema, &batches)?;
    reservation.try_grow(rows.get_array_memory_size())?;
    drop(batches);
    reservation.try_resize(rows.get_array_memory_size())?;
    Ok((rows, reservation))
}

/// What the output is made of, shared by every batch.
#[derive(Debug, Clone)]
struct Layout {
    schema: SchemaRef,
    roles: Vec<Role>,
    time_column: usize,
    series_columns: Vec<usize>,
    grid: Grid,
    batch_size: usize,
}

/// One row of output: its series, its bucket, and the input row it shows (none: a gap).
#[derive(Debug, Clone, Copy)]
struct OutRow {
    series: usize,
    time: Option<i64>,
    row: Option<usize>,
}

/// Where the next output row comes from.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    series: usize,
    /// The next input row of the series not yet shown.
    row: usize,
    /// The next bucket of the grid not yet shown.
    bucket: u64,
}

/// A fill's memory of the current series: the last row with a value, and (interpolate) the
/// first row with a value at or after a point.
#[derive(Debug, Clone, Copy, Default)]
struct FillState {
    /// The series this state is of.
    series: usize,
    last: Option<usize>,
    /// `Some(v)`: `v` is the first row with a value at or after the row last asked about (the
    /// series' end if none).
    next: Option<usize>,
}

/// Makes the filled batches from the input's rows, one batch per call.
struct Filler {
    layout: Layout,
    rows: RecordBatch,
    /// The input's buckets (`None`: a null bucket).
    times: Vec<Option<i64>>,
    /// The input rows of each series.
    series: Vec<Range<usize>>,
    /// Interpolated columns as floats, by column index.
    floats: Vec<Option<Float64Array>>,
    cursor: Cursor,
    /// Each column's fill state.
    states: Vec<FillState>,
    _reservation: MemoryReservation,
}

impl Filler {
    fn try_new(
        layout: Layout,
        rows: RecordBatch,
        reservation: MemoryReservation,
        memory_limit: Option<usize>,
    ) -> Result<Filler> {
        let times = cast(rows.column(layout.time_column), &DataType::Int64)?;
        let times: Vec<Option<i64>> = times.as_primitive::<Int64Type>().iter().collect();
        let series = series_ranges(&rows, &layout.series_columns)?;
        let floats = layout
            .roles
            .iter()
            .map(|role| match role {
                Role::Filled(source, FillMethod::Interpolate) => {
                    cast(rows.column(*source), &DataType::Float64)
                        .map(|a| Some(a.as_primitive::<Float64Type>().clone()))
                }
                _ => Ok(None),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if let Some(limit) = memory_limit {
            let off_grid = times.iter().filter(|t| !layout.grid.holds(**t)).count();
            check_size(&layout, &rows, series.len(), off_grid, limit)?;
        }
        let start = series.first().map_or(0, |r| r.start);
        Ok(Filler {
            states: vec![FillState::default(); layout.roles.len()],
            layout,
            rows,
            times,
            series,
            floats,
            cursor: Cursor {
                series: 0,
                row: start,
                bucket: 0,
            },
            _reservation: reservation,
        })
    }

    /// The next up to `batch_size` output rows.
    fn next_rows(&mut self) -> Vec<OutRow> {
        let grid = self.layout.grid;
        let mut out = Vec::with_capacity(self.layout.batch_size);
        while out.len() < self.layout.batch_size && self.cursor.series < self.series.len() {
            let Cursor {
                series,
                row,
                bucket,
            } = self.cursor;
            let end = self.series[series].end;
            let next_row = (row < end).then(|| self.times[row]);
            let next_bucket = (bucket < grid.count).then(|| grid.time(bucket));
            let shown = match (next_row, next_bucket) {
                (None, None) => {
                    self.cursor = Cursor {
                        series: series + 1,
                        row: self.series.get(series + 1).map_or(end, |r| r.start),
                        bucket: 0,
                    };
                    continue;
                }
                // a null bucket sorts first
                (Some(None), _) => (None, Some(row), false),
                (Some(Some(t)), Some(b)) if t == b => (Some(t), Some(row), true),
                (Some(Some(t)), Some(b)) if t < b => (Some(t), Some(row), false),
                (Some(Some(t)), None) => (Some(t), Some(row), false),
                (_, Some(b)) => (Some(b), None, true),
            };
            let (time, shown_row, advances_grid) = shown;
            if shown_row.is_some() {
                self.cursor.row += 1;
            }
            if advances_grid {
                self.cursor.bucket += 1;
            }
            out.push(OutRow {
                series,
                time,
                row: shown_row,
            });
        }
        out
    }

    /// The output batch of `out`.
    fn batch(&mut self, out: &[OutRow]) -> Result<RecordBatch> {
        let layout = self.layout.clone();
        let columns = layout
            .roles
            .iter()
            .enumerate()
            .map(|(i, role)| self.column(i, *role, out))
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(layout.schema.clone(), columns)?)
    }

    /// Output column `index` over `out`.
    fn column(&mut self, index: usize, role: Role, out: &[OutRow]) -> Result<ArrayRef> {
        let array = match role {
            Role::Time => {
                let times: Int64Array = out.iter().map(|r| r.time).collect();
                cast(&times, self.layout.schema.field(index).data_type())?
            }
            Role::Series => {
                let first: UInt32Array = out
                    .iter()
                    .map(|r| self.series[r.series].start as u32)
                    .collect();
                take(self.rows.column(index), &first, None)?
            }
            Role::Value => {
                let rows: UInt32Array = out.iter().map(|r| r.row.map(|i| i as u32)).collect();
                take(self.rows.column(index), &rows, None)?
            }
            Role::Filled(source, FillMethod::Locf) => {
                let rows: UInt32Array = out
                    .iter()
                    .map(|r| self.locf(index, source, r).map(|i| i as u32))
                    .collect();
                take(self.rows.column(source), &rows, None)?
            }
            Role::Filled(source, FillMethod::Interpolate) => {
                self.interpolated(index, source, out)?
            }
        };
        Ok(array)
    }

    /// The fill state of column `index` for a row of `series` (reset when the series changes).
    fn state(&mut self, index: usize, series: usize) -> &mut FillState {
        let state = &mut self.states[index];
        if state.series != series {
            *state = FillState {
                series,
                ..FillState::default()
            };
        }
        state
    }

    /// The input row whose value `locf` of input column `source` (output column `index`)
    /// shows in `out`'s place.
    fn locf(&mut self, index: usize, source: usize, out: &OutRow) -> Option<usize> {
        let valid = out.row.filter(|&r| self.rows.column(source).is_valid(r));
        let state = self.state(index, out.series);
        if valid.is_some() {
            state.last = valid;
        }
        state.last
    }

    /// Input column `source` interpolated over `out` (as output column `index`).
    fn interpolated(&mut self, index: usize, source: usize, out: &[OutRow]) -> Result<ArrayRef> {
        let source = self.rows.column(source).clone();
        let mut direct = Vec::with_capacity(out.len());
        let mut lines = Vec::with_capacity(out.len());
        for row in out {
            let valid = row.row.filter(|&r| source.is_valid(r));
            direct.push(valid.map(|r| r as u32));
            lines.push(match valid {
                Some(r) => {
                    self.state(index, row.series).last = Some(r);
                    None
                }
                None => self.line(index, &source, row),
            });
        }
        let direct = UInt32Array::from(direct);
        let shown = take(&source, &direct, None)?;
        let lines = cast(&Float64Array::from(lines), source.data_type())?;
        let is_direct = BooleanArray::from_iter(direct.iter().map(|r| Some(r.is_some())));
        Ok(zip(&is_direct, &shown, &lines)?)
    }

    /// The value on the line between the series' values around `row` (a gap or a null).
    fn line(&mut self, index: usize, source: &ArrayRef, row: &OutRow) -> Option<f64> {
        let time = row.time?;
        let end = self.series[row.series].end;
        // the first input row after the gap: a null row's successor, or the next unshown row
        let from = match row.row {
            Some(r) => r + 1,
            None => self.next_input_row(row, end),
        };
        let next = self.next_valid(index, source, row.series, from, end)?;
        let prev = self.state(index, row.series).last?;
        let floats = self.floats[index].as_ref()?;
        let (t0, t1) = (self.times[prev]?, self.times[next]?);
        let (v0, v1) = (floats.value(prev), floats.value(next));
        let share = (time as f64 - t0 as f64) / (t1 as f64 - t0 as f64);
        Some(v0 + (v1 - v0) * share)
    }

    /// The first input row of `row`'s series whose bucket is after `row`'s.
    fn next_input_row(&self, row: &OutRow, end: usize) -> usize {
        let range = &self.series[row.series];
        let times = &self.times[range.start..end];
        range.start + times.partition_point(|t| t.is_none_or(|t| Some(t) <= row.time))
    }

    /// The first row at or after `from` (before `end`) with a value in `source` (whose
    /// fill is output column `index`).
    fn next_valid(
        &mut self,
        index: usize,
        source: &ArrayRef,
        series: usize,
        from: usize,
        end: usize,
    ) -> Option<usize> {
        let state = self.state(index, series);
        let found = match state.next {
            Some(v) if v >= from => v,
            _ => (from..end).find(|&r| source.is_valid(r)).unwrap_or(end),
        };
        state.next = Some(found);
        (found < end).then_some(found)
    }
}

impl Iterator for Filler {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let out = self.next_rows();
        if out.is_empty() {
            return None;
        }
        Some(self.batch(&out))
    }
}

/// The input rows of each series (one series of every row, possibly none, if the query
/// groups by the bucket only).
fn series_ranges(rows: &RecordBatch, series_columns: &[usize]) -> Result<Vec<Range<usize>>> {
    if series_columns.is_empty() {
        return Ok(std::iter::once(0..rows.num_rows()).collect());
    }
    let columns: Vec<ArrayRef> = series_columns
        .iter()
        .map(|&i| rows.column(i).clone())
        .collect();
    Ok(partition(&columns)?.ranges())
}

/// Refuses an answer larger than `limit` bytes: `series` series of the grid's buckets and
/// the `off_grid` input rows that are not in one, at the input's bytes per row.
fn check_size(
    layout: &Layout,
    rows: &RecordBatch,
    series: usize,
    off_grid: usize,
    limit: usize,
) -> Result<()> {
    let answer_rows = (series as u128) * (layout.grid.count as u128) + off_grid as u128;
    let row_bytes: u128 = rows
        .columns()
        .iter()
        .map(|c| match c.data_type().primitive_width() {
            Some(width) => width as u128,
            None => (c.get_array_memory_size() / rows.num_rows().max(1)).max(1) as u128,
        })
        .sum::<u128>()
        .max(1);
    let bytes = answer_rows.saturating_mul(row_bytes);
    if bytes > limit as u128 {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "date_bin_gapfill() would answer {answer_rows} rows ({series} series x {} buckets, \
             about {} MiB), more than this query may hold ({} MiB, query_memory_bytes): use a \
             shorter time range, a wider interval or fewer series",
            layout.grid.count,
            bytes / (1 << 20),
            limit / (1 << 20)
        )));
    }
    Ok(())
}

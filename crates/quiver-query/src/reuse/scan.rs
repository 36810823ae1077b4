//! [`ReusedParts`]: the partial results an aggregate merges, decided when its physical plan is
//! made (at the query's clock, so a kept logical plan is never stale).
//!
//! The query's time range is cut into parts of one width (a multiple of storage's version
//! chunk, at least the query's bucket and a multiple of it where parts hold final rows, at
//! most [`MAX_PARTS`] of them), aligned to the epoch.
//! A whole part that ends by the query's clock and starts at or after the retention cutoff is
//! *reusable*: its partial result depends only on the rows of its stretch of time, whose
//! version storage gives in the same instant as the snapshot the rest is computed from. Each
//! reusable part the [`super::PartStore`] holds at that version is read from there; all the
//! rest (missed parts, the range's unaligned ends, the stretch after the clock, anything
//! before the cutoff) is computed from that one snapshot in one scan (partial states also
//! grouped by part; final rows carry their part in their bucket), and the missed parts are
//! then kept ([`super::collect`]). Without a store (the
//! caller does not let the query reuse parts) or without a lower time bound, everything is
//! computed, as one partial aggregate.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{concat_batches, SortOptions};
use arrow::datatypes::{Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::provider_as_source;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result;
use datafusion::functions::datetime::expr_fn::date_bin;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    col, lit, Expr, LogicalPlan, LogicalPlanBuilder, TableSource, TableType,
};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;
use quiver_model::schema::TIME_COLUMN;
use quiver_model::TimeBucket;
use quiver_storage::{Ranges, Table, TableSnapshot, VERSION_CHUNK_NS};

use super::collect::{PartCollectExec, PartOf};
use super::{PartKey, PartReuse, PartRows};
use crate::partials::states::State;
use crate::partials::{folded_time_range, side_by_side, RawRows, Remainder};
use crate::plan_cache::ScansRead;
use crate::provider::{external, query_now_ns, QuiverTable};

/// The widths a part may have, in minutes: multiples of storage's version chunk (ten
/// minutes) that divide a day, so parts line up with days.
const PART_WIDTHS_MINUTES: [i64; 7] = [10, 30, 60, 180, 360, 720, 1440];

/// At most this many parts per query: a wider range takes wider parts.
const MAX_PARTS: i64 = 128;

/// The column of the raw partial results naming the part a row belongs to.
const PART_COLUMN: &str = "__quiver_part";

/// How many times the table's time versions and snapshot are read before giving up reuse
/// for the query (writes in between make them disagree).
const CONSISTENT_READ_ATTEMPTS: usize = 3;

/// The aggregate whose rows a query's parts hold (see [`super::rule`]).
#[derive(Debug)]
pub(crate) struct PartsShape {
    /// The grouping expressions (columns unqualified), aliased to the parts' group columns.
    pub(crate) group: Vec<Expr>,
    /// What a part holds per group.
    pub(crate) values: PartValues,
    /// The row conditions other than the time range.
    pub(crate) filter: Vec<Expr>,
    /// The conditions on `time`.
    pub(crate) time: Vec<Expr>,
}

/// What a part holds per group.
#[derive(Debug)]
pub(crate) enum PartValues {
    /// Partial states, merged above (a group may span parts).
    States {
        /// The states, each once.
        states: Vec<State>,
        /// The widest time bucket grouped by, in nanoseconds.
        bucket_width: Option<i64>,
    },
    /// The aggregates' final values: the query groups by a bucket that nests in parts, so
    /// every group lies in one part.
    Final {
        /// The aggregates (columns unqualified), aliased to the parts' value columns.
        aggregates: Vec<Expr>,
        /// The group column holding the bucket.
        bucket_column: usize,
        /// The bucket.
        bucket: TimeBucket,
    },
}

impl PartsShape {
    /// The rows of `source` that pass `filter`, aggregated per group: final values, or
    /// partial states per group and per part of `part_width` if given (as the last group
    /// column).
    fn partial_plan(
        &self,
        source: Arc<dyn TableSource>,
        table: &str,
        filter: Option<Expr>,
        part_width: Option<i64>,
    ) -> Result<LogicalPlan> {
        let mut builder = LogicalPlanBuilder::scan(table, source, None)?;
        if let Some(filter) = filter {
            builder = builder.filter(filter)?;
        }
        let states = match &self.values {
            PartValues::Final { aggregates, .. } => {
                return builder
                    .aggregate(self.group.clone(), aggregates.clone())?
                    .build()
            }
            PartValues::States { states, .. } => states,
        };
        let mut group = self.group.clone();
        if let Some(width) = part_width {
            group.push(
                date_bin(
                    lit(ScalarValue::new_interval_mdn(0, 0, width)),
                    col(TIME_COLUMN),
                    lit(ScalarValue::TimestampNanosecond(
                        Some(0),
                        Some("UTC".into()),
                    )),
                )
                .alias(PART_COLUMN),
            );
        }
        let states: Vec<Expr> = states.iter().map(State::partial).collect();
        builder.aggregate(group, states)?.build()
    }

    /// How a row of the rows computed for parts of `width` names its part.
    fn part_of(&self, width: i64) -> PartOf {
        match &self.values {
            PartValues::Final { bucket_column, .. } => PartOf::Bucket {
                column: *bucket_column,
                width,
            },
            PartValues::States { .. } => PartOf::Column(self.group.len()),
        }
    }

    /// The order of the rows of parts holding final rows grouped by their bucket first: by
    /// every group column (nulls last, as `ORDER BY` puts them), so that the parts of a range,
    /// in time order, are in that order too and an `ORDER BY` of the groups above needs no
    /// sort, only a merge with the rows computed now.
    fn ordering(&self, schema: &SchemaRef) -> Option<LexOrdering> {
        let PartValues::Final {
            bucket_column: 0, ..
        } = &self.values
        else {
            return None;
        };
        let options = SortOptions {
            descending: false,
            nulls_first: false,
        };
        LexOrdering::new((0..self.group.len()).map(|i| {
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(schema.field(i).name(), i));
            PhysicalSortExpr::new(column, options)
        }))
    }

    /// The bucket the parts must be made of whole, if they hold final rows.
    fn nested_bucket(&self) -> Option<TimeBucket> {
        match &self.values {
            PartValues::Final { bucket, .. } => Some(*bucket),
            PartValues::States { .. } => None,
        }
    }

    /// The widest bucket grouped by.
    fn bucket_width(&self) -> Option<i64> {
        match &self.values {
            PartValues::Final { bucket, .. } => Some(bucket.width),
            PartValues::States { bucket_width, .. } => *bucket_width,
        }
    }

    /// Everything the partial results depend on besides the rows' time range, written
    /// structurally (`Debug`: strings quoted and escaped, lists delimited), so two different
    /// shapes never read alike.
    fn fingerprint(&self, table: &Table) -> String {
        format!(
            "{:?}.{:?} group {:?} {:?} where {:?}",
            table.database(),
            table.name(),
            self.group,
            self.values,
            self.filter
        )
    }
}

/// The partial results of one aggregate's time range (module docs).
pub(crate) struct ReusedParts {
    base: QuiverTable,
    shape: PartsShape,
    fingerprint: String,
    schema: SchemaRef,
}

impl fmt::Debug for ReusedParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReusedParts({})", self.fingerprint)
    }
}

/// How one query's range is answered: parts from the store, and the rest computed.
struct Split {
    snapshot: Arc<TableSnapshot>,
    width: i64,
    reused: Vec<Arc<PartRows>>,
    missed: Vec<PartKey>,
    computed: Ranges,
    reuse: PartReuse,
}

impl ReusedParts {
    pub(crate) fn new(base: QuiverTable, shape: PartsShape) -> Result<Self> {
        let raw = provider_as_source(Arc::new(RawRows::of(base.clone())));
        let partial = shape.partial_plan(raw, base.table().name(), None, None)?;
        let fields: Vec<Field> = partial
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let fingerprint = shape.fingerprint(base.table());
        Ok(ReusedParts {
            base,
            shape,
            fingerprint,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// Which parts of `[lo, hi)` are reused and which computed, at the query's clock
    /// `now_ns`; `None` if no part is reusable.
    fn split(
        &self,
        reuse: &PartReuse,
        (lo, hi): (i64, Option<i64>),
        now_ns: i64,
    ) -> Result<Option<Split>> {
        let table = self.base.table();
        let end = hi.unwrap_or(i64::MAX).min(now_ns);
        let start = match table.retention_cutoff_ns(now_ns) {
            Some(cutoff) => lo.max(cutoff),
            None => lo,
        };
        // parts and buckets are computed as multiples of their widths: far from the ends of
        // the timestamp range, nothing overflows
        if end <= start || start < i64::MIN / 2 || end > i64::MAX / 2 {
            return Ok(None);
        }
        let width = part_width(
            end.saturating_sub(start),
            self.shape.bucket_width(),
            self.shape.nested_bucket(),
        );
        let parts = whole_parts(start, end, width);
        if parts.is_empty() {
            return Ok(None);
        }
        let Some((snapshot, versions)) = consistent_read(table, &parts)? else {
            return Ok(None);
        };
        let shape: Arc<str> = format!("{}\u{1}{}", reuse.namespace, self.fingerprint).into();
        let mut computed = Ranges::of(lo, hi.unwrap_or(i64::MAX));
        let (mut reused, mut missed) = (Vec::new(), Vec::new());
        for ((start, end), version) in parts.into_iter().zip(versions) {
            let key = PartKey {
                shape: shape.clone(),
                start,
                end,
                version,
            };
            match reuse.store.get(&key) {
                Some(rows) => {
                    reuse.reused(rows.rows);
                    computed.remove(start, end);
                    reused.push(rows);
                }
                None => missed.push(key),
            }
        }
        Ok(Some(Split {
            snapshot,
            width,
            reused,
            missed,
            computed,
            reuse: reuse.clone(),
        }))
    }

    /// The plan of a split range: the reused parts' rows beside the rest's partial results.
    async fn split_plan(
        &self,
        state: &dyn Session,
        split: Split,
        projection: Option<&Vec<usize>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let remainder = Remainder::read(state, &self.base, split.snapshot, split.computed);
        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        let reused = coalesced(
            &self.schema,
            split.reused.iter().flat_map(|part| part.batches.iter()),
            state.config().batch_size(),
        )?;
        let ordering = self.shape.ordering(&self.schema);
        if !reused.is_empty() {
            let mut source = MemorySourceConfig::try_new(&[reused], self.schema.clone(), None)?;
            if let Some(ordering) = &ordering {
                source = source.try_with_sort_information(vec![ordering.clone()])?;
            }
            inputs.push(DataSourceExec::from_data_source(source));
        }
        if !remainder.ranges.is_empty() {
            let mut conjuncts = self.shape.filter.clone();
            conjuncts.extend(self.shape.time.iter().cloned());
            let (rows, filter) = remainder.rows(&self.base, conjuncts);
            let partial = self.shape.partial_plan(
                rows,
                self.base.table().name(),
                filter,
                Some(split.width),
            )?;
            let computed = state.create_physical_plan(&partial).await?;
            let collected: Arc<dyn ExecutionPlan> = Arc::new(PartCollectExec::try_new(
                computed,
                self.schema.clone(),
                self.shape.part_of(split.width),
                split.missed,
                (split.reuse, ordering.clone()),
            )?);
            inputs.push(match ordering {
                Some(ordering) => Arc::new(SortExec::new(ordering, collected)),
                None => collected,
            });
        }
        side_by_side(&self.schema, inputs, projection)
    }

    /// The plan computing the whole range from the table's rows.
    async fn whole_plan(&self, state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        let mut filter = self.shape.filter.clone();
        filter.extend(self.shape.time.iter().cloned());
        let source = provider_as_source(Arc::new(RawRows::of(self.base.clone())));
        let partial =
            self.shape
                .partial_plan(source, self.base.table().name(), conjunction(filter), None)?;
        state.create_physical_plan(&partial).await
    }
}

/// `batches` (of `schema`) in batches of at least `batch_size` rows (but the last): a part
/// holds a few hundred or thousand rows, and every operator above pays per batch.
fn coalesced<'a>(
    schema: &SchemaRef,
    batches: impl Iterator<Item = &'a RecordBatch>,
    batch_size: usize,
) -> Result<Vec<RecordBatch>> {
    let mut coalesced = Vec::new();
    let mut pending: Vec<&RecordBatch> = Vec::new();
    let mut rows = 0;
    for batch in batches.filter(|b| b.num_rows() > 0) {
        pending.push(batch);
        rows += batch.num_rows();
        if rows >= batch_size {
            coalesced.push(joined(schema, std::mem::take(&mut pending))?);
            rows = 0;
        }
    }
    if !pending.is_empty() {
        coalesced.push(joined(schema, pending)?);
    }
    Ok(coalesced)
}

/// `batches` as one batch: copied only if there are several.
fn joined(schema: &SchemaRef, batches: Vec<&RecordBatch>) -> Result<RecordBatch> {
    match batches.as_slice() {
        [one] => Ok((*one).clone()),
        _ => Ok(concat_batches(schema, batches)?),
    }
}

/// The widths parts may have, narrowest first: [`PART_WIDTHS_MINUTES`], then doublings of a
/// day.
fn part_widths() -> impl Iterator<Item = i64> {
    const MINUTE: i64 = 60_000_000_000;
    debug_assert_eq!(VERSION_CHUNK_NS % (10 * MINUTE), 0);
    let day = 1440 * MINUTE;
    let doublings = std::iter::successors(Some(2 * day), |w| w.checked_mul(2))
        .take_while(|&w| w < i64::MAX / 4);
    PART_WIDTHS_MINUTES
        .iter()
        .map(|m| m * MINUTE)
        .chain(doublings)
}

/// True if buckets of `bucket` nest in parts of some width: every part boundary is a bucket
/// boundary (the width is a multiple of the bucket's, whose origin is a multiple of it).
pub(crate) fn nests_in_parts(bucket: &TimeBucket) -> bool {
    bucket.origin.rem_euclid(bucket.width) == 0 && part_widths().any(|w| w % bucket.width == 0)
}

/// The width of the parts of a range `span` nanoseconds long grouped by buckets of
/// `bucket_width`: the narrowest of [`part_widths`] at least a bucket wide (a multiple of
/// `nested`'s width if given) that cuts the range into at most [`MAX_PARTS`] parts, or the
/// widest that qualifies.
fn part_width(span: i64, bucket_width: Option<i64>, nested: Option<TimeBucket>) -> i64 {
    let allowed = |width: i64| {
        width >= bucket_width.unwrap_or(0) && nested.is_none_or(|b| width % b.width == 0)
    };
    let mut widest = None;
    for width in part_widths().filter(|&w| allowed(w)) {
        if span / width <= MAX_PARTS {
            return width;
        }
        widest = Some(width);
    }
    widest.unwrap_or(i64::MAX / 4)
}

/// The whole parts of `width` within `[start, end)`, aligned to the epoch.
fn whole_parts(start: i64, end: i64, width: i64) -> Vec<(i64, i64)> {
    let Some(first) = TimeBucket::new(width, 0).and_then(|parts| parts.ceil(start)) else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    let mut part = first;
    while part <= end.saturating_sub(width) && part.checked_add(width).is_some() {
        parts.push((part, part + width));
        part += width;
    }
    parts
}

/// A snapshot of `table` and the versions of `parts`' rows as of that snapshot; `None` if
/// writes kept moving the table between the two reads.
fn consistent_read(
    table: &Table,
    parts: &[(i64, i64)],
) -> Result<Option<(Arc<TableSnapshot>, Vec<u64>)>> {
    for _ in 0..CONSISTENT_READ_ATTEMPTS {
        let (version, versions) = table.time_versions(parts);
        let snapshot = table.snapshot().map_err(external)?;
        if snapshot.version == version {
            return Ok(Some((snapshot, versions)));
        }
    }
    Ok(None)
}

#[async_trait]
impl TableProvider for ReusedParts {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // which parts are reused depends on the clock and the store: never run again
        if let Some(scans) = ScansRead::of(state) {
            scans.unrepeatable();
        }
        let reuse = state.config().get_extension::<PartReuse>();
        let range = folded_time_range(&self.base, &self.shape.time, state);
        let split = match (reuse, range) {
            (Some(reuse), Some((Some(lo), hi))) => {
                self.split(&reuse, (lo, hi), query_now_ns(state))?
            }
            _ => None,
        };
        match split {
            Some(split) => self.split_plan(state, split, projection).await,
            None => {
                let whole = self.whole_plan(state).await?;
                side_by_side(&self.schema, vec![whole], projection)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000_000_000;

    #[test]
    fn parts_are_whole_and_aligned() {
        let width = 10 * MINUTE;
        let parts = whole_parts(3 * MINUTE, 35 * MINUTE, width);
        assert_eq!(
            parts,
            vec![(10 * MINUTE, 20 * MINUTE), (20 * MINUTE, 30 * MINUTE)]
        );
        assert_eq!(whole_parts(-15 * MINUTE, 0, width), vec![(-10 * MINUTE, 0)]);
        assert!(whole_parts(1, 9 * MINUTE, width).is_empty());
    }

    #[test]
    fn parts_are_at_least_a_bucket_wide_and_few() {
        let hour = 60 * MINUTE;
        assert_eq!(part_width(6 * hour, Some(MINUTE), None), 10 * MINUTE);
        assert_eq!(part_width(6 * hour, Some(hour), None), hour);
        assert_eq!(part_width(6 * hour, Some(15 * MINUTE), None), 30 * MINUTE);
        assert_eq!(part_width(30 * 24 * hour, None, None), 360 * MINUTE);
        let year = part_width(365 * 24 * hour, None, None);
        assert!(365 * 24 * hour / year <= MAX_PARTS);
        assert_eq!(year % VERSION_CHUNK_NS, 0);
        // final rows: parts made of whole buckets
        let twenty = TimeBucket {
            width: 20 * MINUTE,
            origin: 0,
        };
        assert_eq!(part_width(6 * hour, Some(twenty.width), Some(twenty)), hour);
    }

    #[test]
    fn buckets_nest_in_parts_when_parts_are_made_of_them() {
        let bucket = |minutes: i64, origin: i64| TimeBucket {
            width: minutes * MINUTE,
            origin: origin * MINUTE,
        };
        assert!(nests_in_parts(&bucket(1, 0)));
        assert!(nests_in_parts(&bucket(15, 30)));
        assert!(nests_in_parts(&bucket(1440, 0)));
        assert!(!nests_in_parts(&bucket(7, 0)));
        assert!(!nests_in_parts(&bucket(60, 5)));
        assert!(!nests_in_parts(&bucket(7 * 1440, 4 * 1440)));
    }
}

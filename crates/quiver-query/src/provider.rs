//! `QuiverTable`: the DataFusion table provider over one table's buffered rows and Parquet
//! files.
//!
//! A scan takes a [`TableSnapshot`] (buffer and file list at one instant), drops files (and
//! the buffer) whose time range cannot match the query's `time` filters, and splits the rest
//! into groups whose time ranges overlap:
//! - a source that overlaps nothing is scanned as is: files by one Parquet scan with the
//!   projection and every filter pushed in (row-group statistics and page index prune), the
//!   buffer from memory;
//! - sources that overlap may hold the same (series, time) point, so each is scanned sorted
//!   (every file is written sorted by series then time, the buffer snapshot is sorted), tagged
//!   with its write order, merged by a `SortPreservingMergeExec` and deduplicated by
//!   [`DeduplicateExec`] (later write wins per field). Only `time` range filters and filters
//!   on tags alone go below the deduplication: a filter on a field could hide the newer row
//!   of a point and let an older value through, while every copy of a point has the same time
//!   and the same tags. Tag filters prune row groups and pages and then filter rows for real
//!   (a `FilterExec` on each sorted source), because DataFusion derives orderings from them
//!   (see `Scan::series_filters`).
//!
//! Every filter is reported as `Inexact`, so DataFusion still applies all of them on top.
//!
//! Rows older than the database's retention period (measured from the query's start time,
//! see [`quiver_storage::Table::retention_filter_ns`]) are invisible: the cutoff prunes like a
//! `time >=` filter and, when some source holds older rows, filters the rows.

use std::fmt;
use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Fields, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::{DFSchema, ScalarValue, Statistics};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;
use quiver_exec::chunk_reader::CachedChunkReaderFactory;
use quiver_exec::dedup_exec::DeduplicateExec;
use quiver_exec::plan_nodes::batch_of;
use quiver_exec::table_files::{table_files, table_files_url};
use quiver_exec::time_filter::{is_time_range, TimeStretches};
use quiver_model::schema::TIME_COLUMN;
use quiver_storage::{
    series_key_and_fields, ChunkCache, ParquetFile, StorageError, Table, TableSnapshot,
};

use crate::plan_cache::ScansRead;
use quiver_exec::series_filter::{narrows, rows_in_matching_series, SeriesEnd};
use quiver_exec::tag_filter::keep_matching_tags;

/// Name of the column that carries a source's write order into the merge.
const SOURCE_COLUMN: &str = "__quiver_source";

/// A table read from the write buffer and its Parquet files.
///
/// The schema is captured when the query is planned; the data is read at scan time. Schemas
/// only grow, so the snapshot has every planned column (results are projected back to the
/// planned schema).
#[derive(Clone)]
pub struct QuiverTable {
    table: Arc<Table>,
    schema: SchemaRef,
    /// What every scan of the table's files reads through.
    chunk_cache: Arc<ChunkCache>,
    /// Only this end of each series is wanted ([`crate::time_order_limit`]).
    series_end: Option<SeriesEnd>,
}

impl QuiverTable {
    /// A provider for `table` with its current schema, reading files through `chunk_cache`.
    pub fn new(table: Arc<Table>, chunk_cache: Arc<ChunkCache>) -> Self {
        let schema = table.schema();
        QuiverTable {
            table,
            schema,
            chunk_cache,
            series_end: None,
        }
    }

    /// This provider, its scans handing on only `end` of each series where they know where
    /// series begin and every filter they get is one they apply exactly (tag comparisons
    /// decide whole series, `time` ranges are cut by binary search); the rest of the rows
    /// otherwise, as a plain scan.
    pub(crate) fn with_series_end(self, end: SeriesEnd) -> Self {
        QuiverTable {
            series_end: Some(end),
            ..self
        }
    }
}

impl fmt::Debug for QuiverTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QuiverTable({})", self.table.name())
    }
}

/// One place rows of the table come from, in write order.
#[derive(Clone)]
enum Source {
    File(Arc<ParquetFile>),
    Buffer,
}

#[async_trait]
impl TableProvider for QuiverTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let snapshot = self.table.snapshot().map_err(external)?;
        note_read(state, &self.table, &snapshot, query_now_ns(state));
        self.scan_of(state, &snapshot, projection, filters)
    }
}

impl QuiverTable {
    /// The plan reading `snapshot` of the table (noted by the caller) with `projection` and
    /// `filters`, rows the query's retention cutoff removes left out.
    pub(crate) fn scan_of(
        &self,
        state: &dyn Session,
        snapshot: &TableSnapshot,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let cutoff = self
            .table
            .retention_filter_ns(snapshot, query_now_ns(state));
        match cutoff {
            None => self.scan_snapshot(state, snapshot, projection, filters),
            Some(cutoff) => self.scan_retained(state, snapshot, (projection, filters), cutoff),
        }
    }
}

/// Notes for the plan cache that a scan planned in `state` at `now_ns` read `snapshot` of
/// `table`; a plan over a table with a retention period is not run again (which rows it may
/// see depends on the clock).
pub(crate) fn note_read(
    state: &dyn Session,
    table: &Arc<Table>,
    snapshot: &Arc<TableSnapshot>,
    now_ns: i64,
) {
    if let Some(scans) = ScansRead::of(state) {
        scans.read(table, snapshot);
        if table.retention_cutoff_ns(now_ns).is_some() {
            scans.unrepeatable();
        }
    }
}

/// The query's clock in nanoseconds (what retention is measured from).
pub(crate) fn query_now_ns(state: &dyn Session) -> i64 {
    let started = state
        .execution_props()
        .query_execution_start_time
        .unwrap_or_else(chrono::Utc::now);
    started.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

impl QuiverTable {
    /// The table's tag columns (its series key without `time`), by name.
    pub(crate) fn tag_columns(&self) -> std::collections::HashSet<String> {
        series_key_and_fields(&self.schema)
            .map(|(keys, _)| {
                keys.iter()
                    .map(|&i| self.schema.field(i).name().clone())
                    .filter(|name| name != TIME_COLUMN)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The table read.
    pub(crate) fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// What the table's files are read through.
    pub(crate) fn chunk_cache(&self) -> &Arc<ChunkCache> {
        &self.chunk_cache
    }

    /// The scan of `snapshot` with only the rows at or after `cutoff` (the retention
    /// period's start): `time` is read even if the query does not ask for it, filtered on,
    /// and projected away again by the filter.
    fn scan_retained(
        &self,
        state: &dyn Session,
        snapshot: &TableSnapshot,
        (projection, filters): (Option<&Vec<usize>>, &[Expr]),
        cutoff: i64,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let time = self.schema.index_of(TIME_COLUMN)?;
        let mut wanted = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let added_time = !wanted.contains(&time);
        if added_time {
            wanted.push(time);
        }
        let retained =
            datafusion::logical_expr::col(TIME_COLUMN).gt_eq(datafusion::logical_expr::lit(
                ScalarValue::TimestampNanosecond(Some(cutoff), Some("UTC".into())),
            ));
        let mut filters = filters.to_vec();
        filters.push(retained.clone());
        let input = self.scan_snapshot(state, snapshot, Some(&wanted), &filters)?;
        let schema = DFSchema::try_from(input.schema().as_ref().clone())?;
        let predicate = state.create_physical_expr(retained, &schema)?;
        // without the `time` column added for the filter
        let output = added_time.then(|| (0..wanted.len() - 1).collect());
        let filtered = FilterExecBuilder::new(predicate, input)
            .apply_projection(output)?
            .build()?;
        Ok(Arc::new(filtered))
    }

    /// The plan reading `snapshot`'s files and buffer with `projection` and `filters`.
    fn scan_snapshot(
        &self,
        state: &dyn Session,
        snapshot: &TableSnapshot,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projected = Arc::new(
            self.schema.project(
                &projection
                    .cloned()
                    .unwrap_or_else(|| (0..self.schema.fields().len()).collect()),
            )?,
        );
        let scan = Scan {
            state,
            chunk_cache: &self.chunk_cache,
            snapshot,
            planned: &self.schema,
            projected: &projected,
            projection,
            filters,
            times: TimeStretches::of(filters),
            series_end: self.series_end.filter(|_| {
                let tags = self.tag_columns();
                filters.iter().all(|f| applied_exactly(f, &tags))
            }),
            shipped: state
                .config_options()
                .extensions
                .get::<quiver_exec::plan_settings::PlanSettings>()
                .is_some_and(|routing| routing.ship_scans),
        };
        let times = &scan.times;
        let mut sources: Vec<(Source, (i64, i64))> = snapshot
            .files
            .iter()
            .map(|f| (f.entry.min_time_ns, f.entry.max_time_ns, f))
            .filter(|(lo, hi, _)| times.overlaps(*lo, *hi))
            .map(|(lo, hi, f)| (Source::File(f.clone()), (lo, hi)))
            .collect();
        if let Some((lo, hi)) = snapshot.buffer_time_range() {
            if times.overlaps(lo, hi) {
                sources.push((Source::Buffer, (lo, hi)));
            }
        }
        let mut alone_files = Vec::new();
        let mut parts: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
        for group in overlapping_groups(sources) {
            match group.as_slice() {
                [Source::File(file)] => alone_files.push(file.clone()),
                [Source::Buffer] => parts.push(scan.buffer()?),
                _ => parts.push(scan.deduplicated(&group)?),
            }
        }
        if !alone_files.is_empty() {
            parts.insert(0, scan.files(&alone_files)?);
        }
        match parts.len() {
            0 => Ok(Arc::new(EmptyExec::new(projected))),
            _ => UnionExec::try_new(parts),
        }
    }
}

/// Groups sources whose time ranges overlap (transitively); each group keeps write order.
fn overlapping_groups(sources: Vec<(Source, (i64, i64))>) -> Vec<Vec<Source>> {
    let mut by_start: Vec<usize> = (0..sources.len()).collect();
    by_start.sort_by_key(|&i| sources[i].1 .0);
    let mut groups: Vec<(i64, Vec<usize>)> = Vec::new();
    for i in by_start {
        let (lo, hi) = sources[i].1;
        match groups.last_mut() {
            Some((end, members)) if lo <= *end => {
                *end = (*end).max(hi);
                members.push(i);
            }
            _ => groups.push((hi, vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(_, mut members)| {
            members.sort_unstable();
            members.into_iter().map(|i| sources[i].0.clone()).collect()
        })
        .collect()
}

/// What one scan needs to build its plans.
struct Scan<'a> {
    state: &'a dyn Session,
    /// What the scan's files are read through.
    chunk_cache: &'a Arc<ChunkCache>,
    snapshot: &'a TableSnapshot,
    /// The schema the query was planned with.
    planned: &'a SchemaRef,
    /// `planned` with the query's projection applied: every part of the plan produces this.
    projected: &'a SchemaRef,
    projection: Option<&'a Vec<usize>>,
    filters: &'a [Expr],
    /// The stretches of time `filters` allow.
    times: TimeStretches,
    /// Only this end of each series is handed on, where series starts are known.
    series_end: Option<SeriesEnd>,
    /// Planned for Ballista's executors: files are read from Parquet only, never from this
    /// server's decoded columns ([`crate::distributed`]).
    shipped: bool,
}

impl Scan<'_> {
    /// Readers of the data store's files through the chunk cache (only stores with files have
    /// a data store registered).
    fn readers(&self) -> Result<Arc<CachedChunkReaderFactory>> {
        let store = table_files(self.state.runtime_env())?;
        Ok(Arc::new(CachedChunkReaderFactory::new(
            store,
            self.chunk_cache.clone(),
        )))
    }

    /// Files that overlap no other source: those whose columns the chunk cache holds decoded
    /// from memory, the rest by a Parquet scan (which has their columns decoded for next
    /// time, see [`Scan::decode_later`]).
    fn files(&self, files: &[Arc<ParquetFile>]) -> Result<Arc<dyn ExecutionPlan>> {
        let wanted = self.projected.fields();
        let mut decoded = Vec::new();
        let mut encoded = Vec::new();
        let mut without_starts = Vec::new();
        for file in files {
            let Some(batch) = self.decoded(file, self.projected)? else {
                encoded.push(file.clone());
                continue;
            };
            match self.chunk_cache.series_starts(&file.entry.path) {
                Some(starts) => decoded.extend(self.matching(&batch, &starts)?),
                None => {
                    decoded.push(keep_matching_tags(&batch, self.filters)?);
                    without_starts.push(file.clone());
                }
            }
        }
        // the files read from Parquet, and those whose series starts were evicted or are not
        // kept yet (decoding finds them again): one background decoding for all of them
        let to_decode: Vec<Arc<ParquetFile>> =
            encoded.iter().chain(&without_starts).cloned().collect();
        self.decode_later(&to_decode, wanted);
        let mut parts = Vec::new();
        // (no rows of decoded files kept is still a part: the plan needs one)
        if !decoded.is_empty() || encoded.is_empty() {
            parts.push(self.in_memory(&decoded)?);
        }
        if !encoded.is_empty() {
            parts.push(self.parquet_files(&encoded)?);
        }
        match parts.len() {
            1 => Ok(parts.remove(0)),
            _ => UnionExec::try_new(parts),
        }
    }

    /// Has the chunk cache decode `columns` of `files` in the background, for the next scans:
    /// one blocking task decoding them one after the other, unless a decoding already runs
    /// (the next scan asks again), the cache is off, or a file would take more than a quarter
    /// of it.
    fn decode_later(&self, files: &[Arc<ParquetFile>], columns: &Fields) {
        if files.is_empty() || self.shipped {
            return;
        }
        // the next plan will read them decoded: this one is not kept
        if let Some(scans) = ScansRead::of(self.state) {
            scans.unrepeatable();
        }
        let cache = self.chunk_cache;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !cache.enabled() || !cache.decoding_idle() {
            return;
        }
        let files: Vec<Arc<ParquetFile>> = files
            .iter()
            .filter(|file| file.entry.memory_bytes() <= cache.capacity_bytes() / 4)
            .cloned()
            .collect();
        if files.is_empty() {
            return;
        }
        let Ok(store) = table_files(self.state.runtime_env()) else {
            return;
        };
        let (columns, cache) = (columns.to_vec(), cache.clone());
        // a failure leaves the columns undecoded: scans keep reading the file (and fail
        // themselves if it cannot be read)
        drop(runtime.spawn_blocking(move || {
            for file in files {
                if let Err(error) = quiver_storage::decode_columns(&store, &file, &columns, &cache)
                {
                    tracing::warn!(
                        file = %file.entry.path, %error,
                        "cannot decode the file's columns; scans keep reading it from Parquet"
                    );
                    return;
                }
            }
        }));
    }

    /// `columns` of `file` as the chunk cache holds them decoded, if it does and the plan
    /// runs here.
    fn decoded(&self, file: &ParquetFile, columns: &SchemaRef) -> Result<Option<RecordBatch>> {
        match self.shipped {
            true => Ok(None),
            false => decoded_batch(file, columns, self.chunk_cache),
        }
    }

    /// Files read by one Parquet scan, with the projection and every filter pushed in.
    fn parquet_files(&self, files: &[Arc<ParquetFile>]) -> Result<Arc<dyn ExecutionPlan>> {
        let predicate = self.predicate(self.planned)?;
        let partitions = self
            .state
            .config()
            .options()
            .execution
            .target_partitions
            .clamp(1, files.len());
        let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions];
        for (i, file) in files.iter().enumerate() {
            groups[i % partitions].push(partitioned_file(file));
        }
        let mut source = ParquetSource::new(self.planned.clone())
            .with_parquet_file_reader_factory(self.readers()?);
        if let Some(predicate) = predicate {
            source = source.with_predicate(predicate);
        }
        let config = FileScanConfigBuilder::new(table_files_url(), Arc::new(source))
            .with_file_groups(groups.into_iter().map(FileGroup::new).collect())
            .with_statistics(files_statistics(self.planned, files))
            .with_projection_indices(self.projection.cloned())?
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }

    /// The buffer when it overlaps no file: zero-copy slices spread over the partitions (only
    /// the series and times the filters can keep).
    fn buffer(&self) -> Result<Arc<dyn ExecutionPlan>> {
        // the query's columns only, before any rows are copied out
        let mut batches = Vec::new();
        if narrows(self.filters, &self.times) || self.series_end.is_some() {
            let starts = self.snapshot.buffer_series_starts().map_err(external)?;
            for (batch, starts) in self.snapshot.batches.iter().zip(starts) {
                batches.extend(self.matching(&project_by_name(batch, self.projected)?, starts)?);
            }
        } else {
            for batch in &self.snapshot.batches {
                batches.push(project_by_name(batch, self.projected)?);
            }
        }
        self.in_memory(&batches)
    }

    /// The parts of `batch` (sorted by series then time, its runs beginning at `starts`) that
    /// the scan's tag comparisons and time bounds can keep ([`quiver_exec::series_filter`]).
    fn matching(&self, batch: &RecordBatch, starts: &[usize]) -> Result<Vec<RecordBatch>> {
        rows_in_matching_series(batch, starts, (self.filters, &self.times), self.series_end)
    }

    /// A scan of `batches` (already of the query's columns), sliced into batches of the
    /// session's size and spread over its partitions.
    fn in_memory(&self, batches: &[RecordBatch]) -> Result<Arc<dyn ExecutionPlan>> {
        let options = self.state.config().options();
        let partitions = partition(
            batches,
            self.projected,
            options.execution.target_partitions,
            usize::from(options.execution.batch_size),
        )?;
        Ok(MemorySourceConfig::try_new_exec(
            &partitions,
            self.projected.clone(),
            None,
        )?)
    }

    /// Overlapping sources merged in series/time/write order and deduplicated, projected to
    /// the query's columns.
    fn deduplicated(&self, group: &[Source]) -> Result<Arc<dyn ExecutionPlan>> {
        // The snapshot's schema has every tag (the full series key), which the planned schema
        // may lack if a tag appeared since planning.
        let full = &self.snapshot.schema;
        let (full_keys, _) = series_key_and_fields(full).map_err(external)?;
        let wanted: Vec<usize> = (0..full.fields().len())
            .filter(|i| {
                full_keys.contains(i)
                    || self
                        .projected
                        .field_with_name(full.field(*i).name())
                        .is_ok()
            })
            .collect();
        // Orderings of scans are stated over the unprojected (full) schema.
        let table_order = sort_order(full, false)?;
        let series_filters = self.series_filters(full, &full_keys);
        let mut inputs = Vec::with_capacity(group.len());
        for (order, source) in group.iter().enumerate() {
            let input = match source {
                Source::File(file) => {
                    self.sorted_file(file, full, &wanted, &table_order, &series_filters)?
                }
                Source::Buffer => self.sorted_buffer(full, &wanted)?,
            };
            let input = self.filtered(input, &series_filters)?;
            inputs.push(with_source_column(input, order as u64)?);
        }
        // The scanned columns, then the source column.
        let merged_schema = inputs[0].schema();
        let merge_order = sort_order(&merged_schema, true)?;
        let merged = Arc::new(SortPreservingMergeExec::new(
            merge_order.clone(),
            UnionExec::try_new(inputs)?,
        ));
        let (keys, fields) = series_key_and_fields(&full.project(&wanted)?).map_err(external)?;
        let deduplicated = Arc::new(DeduplicateExec::new(merged, keys, fields, merge_order));
        let output: Vec<(Arc<dyn PhysicalExpr>, String)> = self
            .projected
            .fields()
            .iter()
            .map(|f| {
                let index = merged_schema.index_of(f.name())?;
                Ok((
                    Arc::new(Column::new(f.name(), index)) as Arc<dyn PhysicalExpr>,
                    f.name().clone(),
                ))
            })
            .collect::<Result<_>>()?;
        Ok(Arc::new(ProjectionExec::try_new(output, deduplicated)?))
    }

    /// One file, read in its stored order (series then time): from its decoded columns if the
    /// chunk cache has them, else pruned by `time` range filters and by `series_filters`
    /// (which the caller also applies to the rows).
    fn sorted_file(
        &self,
        file: &Arc<ParquetFile>,
        full: &SchemaRef,
        wanted: &[usize],
        ordering: &LexOrdering,
        series_filters: &[Expr],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns = Arc::new(full.project(wanted)?);
        if let Some(batch) = self.decoded(file, &columns)? {
            let order = sort_order(&columns, false)?;
            let source = MemorySourceConfig::try_new(&[vec![batch]], columns, None)?
                .try_with_sort_information(vec![order])?;
            return Ok(DataSourceExec::from_data_source(source));
        }
        self.decode_later(std::slice::from_ref(file), columns.fields());
        let mut source =
            ParquetSource::new(full.clone()).with_parquet_file_reader_factory(self.readers()?);
        let mut pruning: Vec<Expr> = self
            .filters
            .iter()
            .filter(|f| is_time_range(f))
            .cloned()
            .collect();
        pruning.extend_from_slice(series_filters);
        if let Some(predicate) = self.physical(full, pruning)? {
            source = source.with_predicate(predicate);
        }
        let config = FileScanConfigBuilder::new(table_files_url(), Arc::new(source))
            .with_file(partitioned_file(file))
            .with_output_ordering(vec![ordering.clone()])
            .with_projection_indices(Some(wanted.to_vec()))?
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }

    /// The buffer snapshot's runs (each sorted by series then time, no point in two of them)
    /// as one sorted partition each, of the `wanted` columns of `full` (which keep every
    /// series key column).
    fn sorted_buffer(&self, full: &SchemaRef, wanted: &[usize]) -> Result<Arc<dyn ExecutionPlan>> {
        // The snapshot's batches have exactly the snapshot's (full) schema. They are projected
        // here (sharing the columns) rather than by the source, whose projection a plan
        // shipped to Ballista does not carry intact.
        let columns = Arc::new(full.project(wanted)?);
        let runs: Vec<Vec<RecordBatch>> = self
            .snapshot
            .batches
            .iter()
            .map(|run| Ok(vec![run.project(wanted)?]))
            .collect::<Result<_>>()?;
        let ordering = sort_order(&columns, false)?;
        let source = MemorySourceConfig::try_new(&runs, columns, None)?
            .try_with_sort_information(vec![ordering])?;
        Ok(DataSourceExec::from_data_source(source))
    }

    /// Every filter, as one physical predicate over `schema`.
    fn predicate(&self, schema: &SchemaRef) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        self.physical(schema, self.filters.to_vec())
    }

    /// The filters that read tags alone (deterministic ones): a series passes them whole or
    /// not at all, so they may go below a deduplication.
    ///
    /// A Parquet scan prunes row groups and pages with its predicate but does not filter rows,
    /// while DataFusion derives orderings as if it did: an equality (`host = 'a'`) would make
    /// `host` look constant and drop it from the merge order of rows that are not actually
    /// filtered. So these filters are also applied to the rows ([`Scan::filtered`]). Time
    /// ranges imply no such thing (pruning by time never separates a point from its newer
    /// version, which has the same time) and only prune.
    fn series_filters(&self, full: &SchemaRef, keys: &[usize]) -> Vec<Expr> {
        let tags: Vec<&str> = keys
            .iter()
            .map(|&i| full.field(i).name().as_str())
            .filter(|name| *name != TIME_COLUMN)
            .collect();
        self.filters
            .iter()
            .filter(|f| {
                let columns = f.column_refs();
                !columns.is_empty()
                    && !f.is_volatile()
                    && columns.iter().all(|c| tags.contains(&c.name.as_str()))
            })
            .cloned()
            .collect()
    }

    /// `input` with only the rows that pass `filters` (none: `input` as is).
    fn filtered(
        &self,
        input: Arc<dyn ExecutionPlan>,
        filters: &[Expr],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match self.physical(&input.schema(), filters.to_vec())? {
            Some(predicate) => Ok(Arc::new(FilterExec::try_new(predicate, input)?)),
            None => Ok(input),
        }
    }

    fn physical(
        &self,
        schema: &SchemaRef,
        filters: Vec<Expr>,
    ) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let Some(expr) = conjunction(filters) else {
            return Ok(None);
        };
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        Ok(Some(self.state.create_physical_expr(expr, &df_schema)?))
    }
}

/// True if every row `expr` (a scan's filter) rejects is one a series-by-series scan drops
/// too: a comparison of tags alone (a series passes it whole or not at all) or a `time`
/// range ([`quiver_exec::series_filter`] cuts each series to it), conjunct by conjunct.
fn applied_exactly(expr: &Expr, tags: &std::collections::HashSet<String>) -> bool {
    split_conjunction(expr).into_iter().all(|conjunct| {
        let reads_tags_only = conjunct
            .column_refs()
            .iter()
            .all(|column| tags.contains(&column.name));
        (reads_tags_only && !conjunct.is_volatile()) || is_time_range(conjunct)
    })
}

/// The rows of `file` under `schema` from the columns the chunk cache holds decoded, if it
/// holds every one of them.
fn decoded_batch(
    file: &ParquetFile,
    schema: &SchemaRef,
    cache: &ChunkCache,
) -> Result<Option<RecordBatch>> {
    let Some(columns) = quiver_storage::cached_columns(file, schema.fields(), cache) else {
        return Ok(None);
    };
    let rows = usize::try_from(file.entry.rows).unwrap_or(usize::MAX);
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(Some(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?))
}

/// What the catalog knows exactly of files that overlap nothing: their rows and their time
/// range (so `count(*)`, `min(time)` and `max(time)` need not read them when nothing filters).
fn files_statistics(schema: &SchemaRef, files: &[Arc<ParquetFile>]) -> Statistics {
    let mut statistics = Statistics::new_unknown(schema);
    let rows: u64 = files.iter().map(|f| f.entry.rows).sum();
    statistics.num_rows = Precision::Exact(usize::try_from(rows).unwrap_or(usize::MAX));
    let time = schema
        .index_of(TIME_COLUMN)
        .ok()
        .map(|i| (i, schema.field(i).data_type()));
    if let Some((i, DataType::Timestamp(TimeUnit::Nanosecond, zone))) = time {
        let at =
            |ns: Option<i64>| Precision::Exact(ScalarValue::TimestampNanosecond(ns, zone.clone()));
        let column = &mut statistics.column_statistics[i];
        column.min_value = at(files.iter().map(|f| f.entry.min_time_ns).min());
        column.max_value = at(files.iter().map(|f| f.entry.max_time_ns).max());
        column.null_count = Precision::Exact(0);
    }
    statistics
}

/// A file as the data store addresses it (by its catalog-relative path), holding the file
/// itself: compaction deletes a replaced file only once nothing holds it, so a running scan
/// never loses its files (its readers keep the hold too, see [`CachedChunkReaderFactory`]).
fn partitioned_file(file: &Arc<ParquetFile>) -> PartitionedFile {
    let mut scanned = PartitionedFile::new(file.entry.path.clone(), file.entry.bytes);
    scanned.extensions.insert_arc(file.clone());
    scanned
}

/// Every tag then time, ascending with nulls first (storage's sort order), plus the source
/// column when `with_source`.
fn sort_order(schema: &Schema, with_source: bool) -> Result<LexOrdering> {
    let (keys, _) = series_key_and_fields(schema).map_err(external)?;
    let mut exprs: Vec<PhysicalSortExpr> = keys.iter().map(|&i| sort_expr(schema, i)).collect();
    if with_source {
        exprs.push(sort_expr(schema, schema.index_of(SOURCE_COLUMN)?));
    }
    Ok(LexOrdering::new(exprs).expect("the series key has at least the time column"))
}

fn sort_expr(schema: &Schema, index: usize) -> PhysicalSortExpr {
    PhysicalSortExpr::new(
        Arc::new(Column::new(schema.field(index).name(), index)),
        arrow::compute::SortOptions {
            descending: false,
            nulls_first: true,
        },
    )
}

pub(crate) fn external(e: StorageError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Appends a constant column with the source's write order.
fn with_source_column(input: Arc<dyn ExecutionPlan>, order: u64) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = input.schema();
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| (Arc::new(Column::new(f.name(), i)) as _, f.name().clone()))
        .collect();
    exprs.push((
        Arc::new(Literal::new(ScalarValue::UInt64(Some(order)))),
        SOURCE_COLUMN.to_string(),
    ));
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

/// Splits batches into `partitions` roughly equal, zero-copy groups of batches of at most
/// `batch_size` rows, each projected to `schema` (the schema the query was planned with).
fn partition(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    partitions: usize,
    batch_size: usize,
) -> Result<Vec<Vec<RecordBatch>>> {
    let mut slices = Vec::new();
    for batch in batches {
        let batch = project_by_name(batch, schema)?;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = batch_size.min(batch.num_rows() - offset);
            slices.push(batch.slice(offset, len));
            offset += len;
        }
    }
    let per_partition = slices.len().div_ceil(partitions).max(1);
    let mut out: Vec<Vec<RecordBatch>> = slices
        .chunks(per_partition)
        .map(<[RecordBatch]>::to_vec)
        .collect();
    if out.is_empty() {
        out.push(Vec::new());
    }
    Ok(out)
}

/// The columns of `schema`, taken by name from `batch` (whose schema is a superset).
pub(crate) fn project_by_name(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            batch.column_by_name(f.name()).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("column {} vanished from the table", f.name()))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // (no columns at all for `count(*)`: the row count says how many rows)
    batch_of(schema, columns, batch.num_rows())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(id: u64) -> Source {
        Source::File(Arc::new(ParquetFile {
            entry: quiver_storage::FileEntry {
                id,
                path: String::new(),
                partition_start_ns: 0,
                min_time_ns: 0,
                max_time_ns: 0,
                rows: 0,
                bytes: 0,
                generation: 0,
                arrow_bytes: 0,
            },
        }))
    }

    fn ids(group: &[Source]) -> Vec<Option<u64>> {
        group
            .iter()
            .map(|s| match s {
                Source::File(f) => Some(f.entry.id),
                Source::Buffer => None,
            })
            .collect()
    }

    #[test]
    fn overlapping_sources_group_transitively_in_write_order() {
        let groups = overlapping_groups(vec![
            (file(0), (15, 30)),
            (file(1), (0, 5)),
            (file(2), (10, 20)),
            (file(3), (30, 40)),
            (Source::Buffer, (50, 60)),
        ]);
        let groups: Vec<_> = groups.iter().map(|g| ids(g)).collect();
        // file 2 starts first but was written after file 0: write order decides the merge
        assert_eq!(
            groups,
            [vec![Some(1)], vec![Some(0), Some(2), Some(3)], vec![None]]
        );
    }
}

//! The rows of a table's batches, below every module that reads or writes them (the table,
//! its buffered runs, persists, compaction, the newest rows): widening a batch to the table's
//! schema, merging chunks into series-then-time order with "later write wins", the `time`
//! column and its range, rows grouped by a key of their time, a table's schema from its
//! columns.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, RecordBatch, TimestampNanosecondArray, UInt32Array,
};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::error::ArrowError;
use quiver_model::schema::ColumnType;

use crate::dedup::compact_dictionaries;
use crate::error::StorageError;

/// Widens chunks (in write order) to `schema`, concatenates them, sorts by series then time
/// and applies "later write wins". The chunks are let go of before the sort: of rows nobody
/// else holds (a merge's), at most two copies are alive at any moment.
pub(crate) fn merge_chunks(
    schema: &SchemaRef,
    chunks: Vec<RecordBatch>,
) -> Result<RecordBatch, StorageError> {
    Ok(merge_chunks_with_starts(schema, chunks)?.0)
}

/// [`merge_chunks`], with where each series begins among the merged rows when the sort knew
/// ([`crate::dedup::sort_and_deduplicate_with_starts`]).
pub(crate) fn merge_chunks_with_starts(
    schema: &SchemaRef,
    chunks: Vec<RecordBatch>,
) -> Result<(RecordBatch, Option<Vec<usize>>), StorageError> {
    let aligned = chunks
        .into_iter()
        .map(|chunk| align_to_schema(&chunk, schema))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = arrow::compute::concat_batches(schema, &aligned)?;
    drop(aligned);
    crate::dedup::sort_and_deduplicate_with_starts(&compact_dictionaries(merged)?)
}

/// Smallest and largest `time` in `batches`, if they hold any rows.
pub(crate) fn time_range(batches: &[RecordBatch]) -> Option<(i64, i64)> {
    let mut range: Option<(i64, i64)> = None;
    // A batch without rows may lack every column (a table that has none yet).
    for time in batches.iter().filter_map(|b| time_column(b).ok()) {
        if let (Some(lo), Some(hi)) = (arrow::compute::min(time), arrow::compute::max(time)) {
            range = Some(match range {
                Some((a, b)) => (a.min(lo), b.max(hi)),
                None => (lo, hi),
            });
        }
    }
    range
}

/// The row indices of `batch` grouped by `key` of each row's `time`, in key order; each group
/// keeps the rows' order (so rows sorted by series then time stay sorted in every group). How
/// a persist splits rows into time partitions and a compaction cuts them into files.
pub(crate) fn rows_by_time(
    batch: &RecordBatch,
    key: impl Fn(i64) -> i64,
) -> Result<Vec<(i64, UInt32Array)>, StorageError> {
    let mut groups: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    for (row, t) in time_column(batch)?.values().iter().enumerate() {
        groups.entry(key(*t)).or_default().push(row as u32);
    }
    Ok(groups
        .into_iter()
        .map(|(k, rows)| (k, UInt32Array::from(rows)))
        .collect())
}

/// The `time` column of a table's batch, or an error naming the columns it has instead.
pub(crate) fn time_column(batch: &RecordBatch) -> Result<&TimestampNanosecondArray, StorageError> {
    batch
        .column_by_name(quiver_model::schema::TIME_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>())
        .ok_or_else(|| {
            let schema = batch.schema();
            let columns: Vec<String> = schema
                .fields()
                .iter()
                .map(|f| format!("{} {}", f.name(), f.data_type()))
                .collect();
            ArrowError::SchemaError(format!(
                "a table batch has no `time` column of type Timestamp(ns, \"UTC\"); it has: {}",
                columns.join(", ")
            ))
            .into()
        })
}

/// The Arrow schema of a table with these columns (sorted by name, as every table's is).
pub(crate) fn schema_of(columns: &BTreeMap<String, ColumnType>) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, t)| t.arrow_field(name))
            .collect::<Vec<_>>(),
    ))
}

/// Widens a batch written under an older (smaller) schema to `schema`: missing columns are
/// null, never 0.
pub(crate) fn align_to_schema(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, StorageError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) => column.clone(),
            None => new_null_array(field.data_type(), batch.num_rows()),
        })
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

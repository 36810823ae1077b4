//! One table's buffered data: its schema (which only grows), its Arrow chunks in write order,
//! its version, and the deduplicated snapshot that queries read.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use parking_lot::RwLock;
use quiver_ingest::schema::ColumnType;

use crate::dedup::sort_and_deduplicate;
use crate::error::StorageError;
use crate::StoreLimits;

/// The rows of a table at one version, ready for queries: every column of the current schema,
/// sorted by series key (tags) then time, with "same series + same time: later write wins per
/// field" already applied.
#[derive(Debug)]
pub struct TableSnapshot {
    /// The table version these rows reflect.
    pub version: u64,
    /// The table schema at that version (columns sorted by name).
    pub schema: SchemaRef,
    /// The rows (one batch today; a list so persisted files can join later).
    pub batches: Vec<RecordBatch>,
}

impl TableSnapshot {
    /// Number of rows in the snapshot.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

struct TableState {
    columns: BTreeMap<String, ColumnType>,
    schema: SchemaRef,
    /// Appended batches in write order, each with the schema it was written with.
    chunks: Vec<RecordBatch>,
    version: u64,
    buffered_bytes: usize,
    snapshot: Option<Arc<TableSnapshot>>,
}

/// A table: a named, versioned, append-only set of rows with an evolving schema.
pub struct Table {
    name: String,
    state: RwLock<TableState>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.name).finish()
    }
}

impl Table {
    pub(crate) fn new(name: String) -> Self {
        Table {
            name,
            state: RwLock::new(TableState {
                columns: BTreeMap::new(),
                schema: Arc::new(Schema::empty()),
                chunks: Vec::new(),
                version: 0,
                buffered_bytes: 0,
                snapshot: None,
            }),
        }
    }

    /// The table (measurement) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current Arrow schema: columns sorted by name.
    pub fn schema(&self) -> SchemaRef {
        self.state.read().schema.clone()
    }

    /// The current columns and their roles.
    pub fn columns(&self) -> Vec<(String, ColumnType)> {
        let state = self.state.read();
        state.columns.iter().map(|(n, t)| (n.clone(), *t)).collect()
    }

    /// The version: bumped by every acknowledged write to this table, never reused.
    pub fn version(&self) -> u64 {
        self.state.read().version
    }

    /// Bytes of Arrow data buffered for this table.
    pub fn buffered_bytes(&self) -> usize {
        self.state.read().buffered_bytes
    }

    /// The rows as of now, deduplicated. Cached per version: repeated reads between writes
    /// cost an `Arc` clone. Computed outside the lock so writers are never blocked by it.
    pub fn snapshot(&self) -> Result<Arc<TableSnapshot>, StorageError> {
        let (version, schema, chunks) = {
            let state = self.state.read();
            if let Some(snapshot) = &state.snapshot {
                return Ok(snapshot.clone());
            }
            (state.version, state.schema.clone(), state.chunks.clone())
        };
        let aligned = chunks
            .iter()
            .map(|chunk| align_to_schema(chunk, &schema))
            .collect::<Result<Vec<_>, _>>()?;
        let merged = arrow::compute::concat_batches(&schema, &aligned)?;
        let deduplicated = sort_and_deduplicate(&merged)?;
        let snapshot = Arc::new(TableSnapshot {
            version,
            schema,
            batches: vec![deduplicated],
        });
        let mut state = self.state.write();
        if state.version == version && Arc::ptr_eq(&state.schema, &snapshot.schema) {
            // Nothing was written meanwhile: the snapshot replaces the chunks it covers, so the
            // next snapshot only merges what arrives after it.
            state.chunks = snapshot.batches.clone();
            state.buffered_bytes = snapshot
                .batches
                .iter()
                .map(RecordBatch::get_array_memory_size)
                .sum();
            state.snapshot = Some(snapshot.clone());
        }
        Ok(snapshot)
    }
}

/// Rows for several tables that passed every check and whose new columns are already part of
/// their tables' schemas: applying them cannot fail. Produced by [`prepare_rows`], consumed by
/// [`apply_rows`] (directly, or by the WAL's commit thread once the write is durable).
pub struct PreparedRows(Vec<(Arc<Table>, RecordBatch)>);

impl std::fmt::Debug for PreparedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(t, b)| (&t.name, b.num_rows())))
            .finish()
    }
}

/// Checks batches for several tables as one unit and reserves their new columns: every target
/// table is locked (in name order, so concurrent writers cannot deadlock), every batch is
/// checked against its table's schema and limits, and only if all pass are the new columns
/// added (rows are added by [`apply_rows`]).
///
/// Fails without changing anything if a column's type conflicts with its table, a type is
/// outside the data model, or a table would exceed its column limit.
pub(crate) fn prepare_rows(
    mut items: Vec<(Arc<Table>, RecordBatch)>,
    limits: &StoreLimits,
) -> Result<PreparedRows, StorageError> {
    items.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if items.windows(2).any(|w| Arc::ptr_eq(&w[0].0, &w[1].0)) {
        // Merge batches of one table so that each lock is taken once.
        let mut merged: Vec<(Arc<Table>, RecordBatch)> = Vec::new();
        for (table, batch) in items {
            match merged.last_mut() {
                Some((last, existing)) if Arc::ptr_eq(last, &table) => {
                    *existing = concat_widening(existing, &batch)?;
                }
                _ => merged.push((table, batch)),
            }
        }
        items = merged;
    }
    let mut guards: Vec<_> = items.iter().map(|(t, _)| t.state.write()).collect();
    let mut plans = Vec::with_capacity(items.len());
    for ((table, batch), state) in items.iter().zip(&guards) {
        plans.push(table.new_columns(state, batch, limits)?);
    }
    for (state, added) in guards.iter_mut().zip(plans) {
        add_columns(state, added);
    }
    drop(guards);
    Ok(PreparedRows(items))
}

/// Appends prepared rows, all tables at once (readers see all of them or none), and returns
/// the tables' new versions in table-name order.
pub(crate) fn apply_rows(rows: PreparedRows) -> Vec<u64> {
    let mut guards: Vec<_> = rows.0.iter().map(|(t, _)| t.state.write()).collect();
    guards
        .iter_mut()
        .zip(rows.0.iter())
        .map(|(state, (_, batch))| push_chunk(state, batch.clone()))
        .collect()
}

impl Table {
    /// The columns `batch` would add to the table, after checking types and limits.
    fn new_columns(
        &self,
        state: &TableState,
        batch: &RecordBatch,
        limits: &StoreLimits,
    ) -> Result<Vec<(String, ColumnType)>, StorageError> {
        let mut added = Vec::new();
        for field in batch.schema().fields() {
            let column_type =
                ColumnType::from_arrow(field.name(), field.data_type()).ok_or_else(|| {
                    StorageError::UnsupportedColumn {
                        table: self.name.clone(),
                        column: field.name().clone(),
                        data_type: field.data_type().to_string(),
                    }
                })?;
            match state.columns.get(field.name()) {
                Some(existing) if *existing == column_type => {}
                Some(existing) => {
                    return Err(StorageError::SchemaConflict {
                        table: self.name.clone(),
                        column: field.name().clone(),
                        existing: existing.describe(),
                        written: column_type.describe(),
                    })
                }
                None => added.push((field.name().clone(), column_type)),
            }
        }
        if state.columns.len() + added.len() > limits.max_columns_per_table {
            return Err(StorageError::TooManyColumns {
                table: self.name.clone(),
                limit: limits.max_columns_per_table,
            });
        }
        Ok(added)
    }
}

fn add_columns(state: &mut TableState, added: Vec<(String, ColumnType)>) {
    if added.is_empty() {
        return;
    }
    state.columns.extend(added);
    state.schema = Arc::new(Schema::new(
        state
            .columns
            .iter()
            .map(|(name, t)| t.arrow_field(name))
            .collect::<Vec<_>>(),
    ));
    state.snapshot = None;
}

fn push_chunk(state: &mut TableState, batch: RecordBatch) -> u64 {
    state.buffered_bytes += batch.get_array_memory_size();
    state.chunks.push(batch);
    state.version += 1;
    state.snapshot = None;
    state.version
}

/// Concatenates two batches of one table whose schemas may differ in their column sets.
fn concat_widening(a: &RecordBatch, b: &RecordBatch) -> Result<RecordBatch, StorageError> {
    let schema = Arc::new(Schema::try_merge([
        a.schema().as_ref().clone(),
        b.schema().as_ref().clone(),
    ])?);
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.sort_by(|x, y| x.name().cmp(y.name()));
    let schema = Arc::new(Schema::new(fields));
    let parts = [align_to_schema(a, &schema)?, align_to_schema(b, &schema)?];
    Ok(arrow::compute::concat_batches(&schema, &parts)?)
}

/// Widens a batch written under an older (smaller) schema to `schema`: missing columns are
/// null, never 0.
fn align_to_schema(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, StorageError> {
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

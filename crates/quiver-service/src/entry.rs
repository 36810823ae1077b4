//! One cached answer: the Arrow batches, shared by reference, and the encodings produced so far.

use std::any::Any;
use std::fmt::Debug;
use std::time::Instant;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use parking_lot::RwLock;
use quiver_storage::{data_bytes, retained_bytes};

/// An output format a cached answer can keep its encoded bytes in. Each protocol names its
/// formats with a type of its own (an HTTP body format, Flight data for a kind of client,
/// PostgreSQL rows for a choice of column formats); keys of different types never match.
pub trait EncodingKey: Any + Clone + PartialEq + Debug + Send + Sync {}

/// An [`EncodingKey`] of any type, as an entry keeps it.
trait KeptKey: Any + Debug + Send + Sync {}

impl<K: EncodingKey> KeptKey for K {}

/// Most encodings one entry keeps: a PostgreSQL client picks text or binary per column, so
/// without a bound one answer could be kept in one encoding per combination.
pub const MAX_ENCODINGS_PER_ENTRY: usize = 8;

/// Bytes each kept encoding is charged beyond its own (its key and bookkeeping), so that
/// encodings of empty answers count too.
const ENCODING_OVERHEAD_BYTES: usize = 64;

/// True if `kept` is `key` (of the same type and equal).
fn is_key<K: EncodingKey>(kept: &dyn KeptKey, key: &K) -> bool {
    (kept as &dyn Any).downcast_ref::<K>() == Some(key)
}

/// A query's whole answer as Arrow batches, plus the bytes of every output format it was
/// encoded to so far (see [`EncodingKey`]).
#[derive(Debug)]
pub struct CachedResult {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rows: usize,
    batch_bytes: usize,
    encodings: RwLock<Vec<(Box<dyn KeptKey>, Bytes)>>,
    computed_at: Instant,
}

impl CachedResult {
    /// A result of `batches` (all of `schema`).
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        let batch_bytes = batches_size(&batches);
        CachedResult {
            schema,
            batches,
            rows,
            batch_bytes,
            encodings: RwLock::new(Vec::new()),
            computed_at: Instant::now(),
        }
    }

    /// The result's schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The result's rows.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// The bytes of `format`, if the result was encoded to it before.
    pub fn encoding<K: EncodingKey>(&self, format: &K) -> Option<Bytes> {
        self.encodings
            .read()
            .iter()
            .find(|(kept, _)| is_key(kept.as_ref(), format))
            .map(|(_, bytes)| bytes.clone())
    }

    /// Keeps `bytes` as the encoding of `format` if the whole entry stays within `max_bytes`
    /// and keeps fewer than [`MAX_ENCODINGS_PER_ENTRY`]; returns whether it was kept.
    pub(crate) fn add_encoding<K: EncodingKey>(
        &self,
        format: &K,
        bytes: Bytes,
        max_bytes: usize,
    ) -> bool {
        let mut encodings = self.encodings.write();
        if encodings
            .iter()
            .any(|(kept, _)| is_key(kept.as_ref(), format))
            || encodings.len() >= MAX_ENCODINGS_PER_ENTRY
        {
            return false;
        }
        let encoded: usize = encodings
            .iter()
            .map(|(_, b)| b.len() + ENCODING_OVERHEAD_BYTES)
            .sum();
        if self.batch_bytes + encoded + bytes.len() + ENCODING_OVERHEAD_BYTES > max_bytes {
            return false;
        }
        encodings.push((Box::new(format.clone()), bytes));
        true
    }

    /// Bytes of memory held: batches plus encodings.
    pub fn size(&self) -> usize {
        self.batch_bytes
            + self
                .encodings
                .read()
                .iter()
                .map(|(_, b)| b.len() + ENCODING_OVERHEAD_BYTES)
                .sum::<usize>()
    }

    /// When the result was computed.
    pub(crate) fn computed_at(&self) -> Instant {
        self.computed_at
    }
}

/// Memory held by `batches`: each allocation counted once (see [`retained_bytes`]).
pub(crate) fn batches_size(batches: &[RecordBatch]) -> usize {
    batches.iter().map(retained_bytes).sum()
}

/// `batch`, copied into buffers of its own if it is a small slice of larger ones (a `LIMIT`
/// over buffered rows, say): a cached answer must not keep megabytes of table data alive, nor
/// be weighed as if it were them.
pub(crate) fn compact(batch: RecordBatch) -> RecordBatch {
    if retained_bytes(&batch) <= 2 * data_bytes(&batch) + 4096 {
        return batch;
    }
    let indices = UInt32Array::from_iter_values(0..batch.num_rows() as u32);
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<_>, _>>();
    match columns.and_then(|columns| RecordBatch::try_new(batch.schema(), columns)) {
        Ok(compacted) => compacted,
        Err(e) => {
            tracing::warn!(error = %e, "cannot compact a cached batch; keeping it as it is");
            batch
        }
    }
}

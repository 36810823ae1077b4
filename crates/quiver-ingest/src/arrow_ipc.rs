//! Arrow IPC streams sent by clients (`POST /api/v3/write_arrow`), decoded into the data model
//! without trusting a size the stream declares.
//!
//! Arrow's own stream reader believes the lengths in a stream: it slices buffers at the
//! offsets a message states (panicking past the end of the body) and sizes decompression
//! output by the length a compressed buffer claims. So the stream's framing is checked first,
//! reading only message metadata: every message and body lies inside the bytes received,
//! every buffer inside its body, the uncompressed sizes compressed buffers claim add up to no
//! more than a limit, and the schema fits the data model (see [`crate::arrow_ingest`]) before
//! any batch is read. Only then does Arrow's zero-copy [`StreamDecoder`] decode the bytes
//! (validating every array), and each batch is converted with
//! [`table_from_arrow`](crate::arrow_ingest::table_from_arrow).
//!
//! A stream may end with or without the end-of-stream marker; bytes after the marker are an
//! error, and so is a message cut short.
//!
//! Over 700 lines: about 210 of them are tests of hostile streams beside the checks they
//! exercise.

use std::collections::HashMap;

use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Schema};
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::{self as fb, MessageHeader};

use crate::arrow_ingest::{check_schema, table_from_arrow, ArrowIngestError};
use quiver_model::schema::DecodedTable;

/// Marks a message length in the stream framing of Arrow 0.15 and later.
const CONTINUATION: u32 = 0xFFFF_FFFF;

/// Why a stream was rejected, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IpcStreamError {
    /// The message at fault (0-based, the schema is message 0), if one is.
    pub message_index: Option<usize>,
    /// The record batch at fault (0-based, counting record batches only), if one is.
    pub batch: Option<usize>,
    /// The column at fault, if one is.
    pub column: Option<String>,
    /// What is wrong, naming the message or batch, the byte offset or the column.
    pub message: String,
}

impl IpcStreamError {
    fn framing(message_index: usize, offset: usize, what: impl std::fmt::Display) -> Self {
        IpcStreamError {
            message_index: Some(message_index),
            batch: None,
            column: None,
            message: format!("message {message_index} at byte {offset}: {what}"),
        }
    }
}

/// Decodes an Arrow IPC stream into rows of `table`, one [`DecodedTable`] per non-empty
/// record batch. Compressed buffers may claim at most `max_uncompressed_bytes` in all.
/// All or nothing: the first problem fails the whole stream.
pub fn decode_ipc_stream(
    table: &str,
    body: Buffer,
    max_uncompressed_bytes: usize,
) -> Result<Vec<DecodedTable>, IpcStreamError> {
    if body.is_empty() {
        return Err(IpcStreamError {
            message_index: None,
            batch: None,
            column: None,
            message: "the body is empty: send an Arrow IPC stream".into(),
        });
    }
    check_framing(&body, max_uncompressed_bytes)?;
    let mut decoder = StreamDecoder::new();
    let mut rest = body;
    let mut tables = Vec::new();
    let mut batch_index = 0;
    let at_batch = |batch: usize, what: String| IpcStreamError {
        message_index: None,
        batch: Some(batch),
        column: None,
        message: format!("batch {batch}: {what}"),
    };
    while !rest.is_empty() {
        let decoded = decoder
            .decode(&mut rest)
            .map_err(|e| at_batch(batch_index, format!("invalid Arrow IPC data: {e}")))?;
        let Some(batch) = decoded else { continue };
        if batch.num_rows() > 0 {
            let rows = table_from_arrow(table, &batch).map_err(|e| IpcStreamError {
                column: e.column.clone(),
                ..at_batch(batch_index, e.message)
            })?;
            tables.push(rows);
        }
        batch_index += 1;
    }
    decoder.finish().map_err(|e| {
        at_batch(
            batch_index,
            format!("the stream ends inside a message: {e}"),
        )
    })?;
    Ok(tables)
}

/// Walks the stream's messages, checking what [`decode_ipc_stream`] must not trust.
fn check_framing(body: &[u8], max_uncompressed_bytes: usize) -> Result<(), IpcStreamError> {
    let mut position = 0;
    let mut uncompressed = 0usize;
    let mut checker = MessageChecker::default();
    for index in 0.. {
        if position == body.len() {
            return Ok(()); // a stream without the end-of-stream marker
        }
        let start = position;
        let fail = |what: String| IpcStreamError::framing(index, start, what);
        let mut length =
            read_u32(body, &mut position).ok_or_else(|| fail(truncated(body, start)))?;
        if length == CONTINUATION {
            length = read_u32(body, &mut position).ok_or_else(|| fail(truncated(body, start)))?;
        }
        if length == 0 {
            if position != body.len() {
                return Err(fail(format!(
                    "{} bytes follow the end-of-stream marker",
                    body.len() - position
                )));
            }
            return Ok(());
        }
        let metadata = take(body, &mut position, length as usize).ok_or_else(|| {
            fail(format!(
                "the message declares {length} bytes of metadata; {} are left",
                body.len() - position
            ))
        })?;
        let body_length = fb::root_as_message(metadata)
            .map(|message| message.bodyLength())
            .map_err(|e| fail(format!("the message metadata is not valid: {e}")))?;
        let body_length = usize::try_from(body_length)
            .map_err(|_| fail(format!("negative body length {body_length}")))?;
        let message_body = take(body, &mut position, body_length).ok_or_else(|| {
            fail(format!(
                "the message declares a body of {body_length} bytes; {} are left",
                body.len() - position
            ))
        })?;
        let claimed = checker
            .check(metadata, message_body)
            .map_err(|e| IpcStreamError {
                column: e.column,
                ..fail(e.message)
            })?;
        uncompressed = uncompressed.saturating_add(claimed);
        if uncompressed > max_uncompressed_bytes {
            return Err(fail(format!(
                "compressed buffers claim {uncompressed} bytes uncompressed; at most \
                 {max_uncompressed_bytes} are accepted"
            )));
        }
    }
    unreachable!("the loop returns")
}

/// Checks the messages of one Arrow IPC stream, one at a time and in order, for what Arrow's
/// reader must not be given (see the module documentation): the schema (the data model's flat
/// types only), then every batch's buffers against its body and against the rows they must
/// hold. For streams that arrive message by message (Flight SQL's `DoPut`); an HTTP body goes
/// through [`decode_ipc_stream`], which also checks the framing between messages.
#[derive(Debug, Default)]
pub struct MessageChecker {
    /// Once the schema is read: its columns, and for each dictionary id the column it encodes
    /// (with the dictionary's value type).
    schema: Option<(Vec<Column>, HashMap<i64, Column>)>,
}

/// A column as a batch message carries it.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    /// The type of its buffers (a dictionary-encoded column's keys; a dictionary's values).
    data_type: DataType,
}

impl MessageChecker {
    /// A checker for a new stream.
    pub fn new() -> Self {
        MessageChecker::default()
    }

    /// Checks one message: its flatbuffer `metadata` (without the length prefix) and its
    /// `body`. Returns the bytes its compressed buffers claim uncompressed (0 if none), which
    /// the caller bounds. An error names the column at fault when one is.
    pub fn check(&mut self, metadata: &[u8], body: &[u8]) -> Result<usize, ArrowIngestError> {
        let message = fb::root_as_message(metadata)
            .map_err(|e| unnamed(format!("the message metadata is not valid: {e}")))?;
        let (batch, columns) = match (message.header_type(), &self.schema) {
            (MessageHeader::Schema, None) => {
                let ipc_schema = message
                    .header_as_schema()
                    .ok_or_else(|| unnamed("the schema message has no schema"))?;
                check_ipc_fields(ipc_schema)?;
                let converted = fb::convert::fb_to_schema(ipc_schema);
                check_schema(&converted)?;
                self.schema = Some(columns_of(ipc_schema, &converted));
                return Ok(0);
            }
            (MessageHeader::NONE, _) => return Ok(0), // no content; readers skip it
            (MessageHeader::Schema, Some(_)) => return Err(unnamed("a second schema message")),
            (_, None) => return Err(unnamed("the stream must start with a schema message")),
            (MessageHeader::RecordBatch, Some((columns, _))) => {
                (message.header_as_record_batch(), columns.as_slice())
            }
            (MessageHeader::DictionaryBatch, Some((_, dictionaries))) => {
                let dictionary = message
                    .header_as_dictionary_batch()
                    .ok_or_else(|| unnamed("the dictionary message has no dictionary"))?;
                let column = dictionaries.get(&dictionary.id()).ok_or_else(|| {
                    unnamed(format!(
                        "dictionary {} belongs to no column of the schema",
                        dictionary.id()
                    ))
                })?;
                (dictionary.data(), std::slice::from_ref(column))
            }
            (other, _) => {
                return Err(unnamed(format!(
                    "{other:?} messages are not part of a record batch stream"
                )))
            }
        };
        let batch = batch.ok_or_else(|| unnamed("the message has no record batch"))?;
        let (lengths, claimed) = check_buffers(&batch, body).map_err(unnamed)?;
        check_layout(&batch, &lengths, columns)?;
        Ok(claimed)
    }
}

/// An error no single column is at fault for.
fn unnamed(message: impl Into<String>) -> ArrowIngestError {
    ArrowIngestError {
        column: None,
        message: message.into(),
    }
}

/// Checks that every field of `schema` is one of the data model's flat types, fully described:
/// Arrow's conversion of a schema message panics on a missing type table, an integer width or
/// time unit it does not know, and many types the data model has no use for. The error names
/// the field.
fn check_ipc_fields(schema: fb::Schema<'_>) -> Result<(), ArrowIngestError> {
    let fields = schema
        .fields()
        .ok_or_else(|| unnamed("the schema has no fields"))?;
    for field in fields {
        let name = field.name().unwrap_or_default();
        let unsupported = |what: String| {
            Err(ArrowIngestError::column(
                name,
                format!(
                    "{what} is not supported; supported: timestamp (time), dictionary-encoded \
                     strings (tags), float, integer, unsigned integer, string, boolean (fields)"
                ),
            ))
        };
        if field.children().is_some_and(|c| !c.is_empty()) {
            return unsupported("a nested type".into());
        }
        if let Some(dictionary) = field.dictionary() {
            let keys = dictionary.indexType();
            if !keys.is_some_and(|k| matches!(k.bitWidth(), 8 | 16 | 32 | 64)) {
                return unsupported("a dictionary without a valid index type".into());
            }
            if !matches!(
                field.type_type(),
                fb::Type::Utf8 | fb::Type::LargeUtf8 | fb::Type::Utf8View
            ) {
                return unsupported(format!("a dictionary of {:?} values", field.type_type()));
            }
            continue;
        }
        let described = match field.type_type() {
            fb::Type::Utf8 | fb::Type::LargeUtf8 | fb::Type::Utf8View | fb::Type::Bool => true,
            fb::Type::Int => field
                .type_as_int()
                .is_some_and(|i| matches!(i.bitWidth(), 8 | 16 | 32 | 64)),
            fb::Type::FloatingPoint => field.type_as_floating_point().is_some_and(|f| {
                matches!(
                    f.precision(),
                    fb::Precision::HALF | fb::Precision::SINGLE | fb::Precision::DOUBLE
                )
            }),
            fb::Type::Timestamp => field.type_as_timestamp().is_some_and(|t| {
                matches!(
                    t.unit(),
                    fb::TimeUnit::SECOND
                        | fb::TimeUnit::MILLISECOND
                        | fb::TimeUnit::MICROSECOND
                        | fb::TimeUnit::NANOSECOND
                )
            }),
            other => return unsupported(format!("type {other:?}")),
        };
        if !described {
            return unsupported(format!(
                "a {:?} type without a valid description",
                field.type_type()
            ));
        }
    }
    Ok(())
}

/// Each column as its batches carry it (a dictionary-encoded column as its keys), and for each
/// dictionary id the column it encodes, typed as the dictionary's values. `converted` is
/// `ipc`, converted, and holds only the data model's flat types ([`check_schema`] passed).
fn columns_of(ipc: fb::Schema<'_>, converted: &Schema) -> (Vec<Column>, HashMap<i64, Column>) {
    let mut dictionaries = HashMap::new();
    let mut columns = Vec::with_capacity(converted.fields().len());
    let ipc_fields = ipc.fields().into_iter().flatten();
    for (ipc_field, field) in ipc_fields.zip(converted.fields()) {
        let column = |data_type: &DataType| Column {
            name: field.name().clone(),
            data_type: data_type.clone(),
        };
        match (ipc_field.dictionary(), field.data_type()) {
            (Some(encoding), DataType::Dictionary(keys, values)) => {
                dictionaries.insert(encoding.id(), column(values));
                columns.push(column(keys));
            }
            (_, data_type) => columns.push(column(data_type)),
        }
    }
    (columns, dictionaries)
}

/// Checks that `batch`'s buffers (`lengths`: their sizes once decompressed) hold what its
/// nodes say for `columns`: Arrow's reader builds arrays from them before it validates, and
/// panics on a validity bitmap shorter than the rows it covers.
fn check_layout(
    batch: &fb::RecordBatch<'_>,
    lengths: &[usize],
    columns: &[Column],
) -> Result<(), ArrowIngestError> {
    let nodes: Vec<_> = batch.nodes().into_iter().flatten().collect();
    if nodes.len() != columns.len() {
        return Err(unnamed(format!(
            "the batch has {} column nodes; the schema has {} columns",
            nodes.len(),
            columns.len()
        )));
    }
    let mut buffers = lengths.iter().copied();
    let mut variadic = batch.variadicBufferCounts().into_iter().flatten();
    for (node, Column { name, data_type }) in nodes.iter().zip(columns) {
        let fail = |what: String| ArrowIngestError::column(name, format!("({data_type}) {what}"));
        let rows = usize::try_from(node.length())
            .map_err(|_| fail(format!("negative length {}", node.length())))?;
        let nulls = usize::try_from(node.null_count())
            .ok()
            .filter(|&n| n <= rows)
            .ok_or_else(|| fail(format!("null count {} for {rows} rows", node.null_count())))?;
        // A buffer of `what`, of at least `needed` bytes, in whole elements of `element` bytes
        // (Arrow views a typed buffer as a slice of its type and panics on a partial one).
        let mut next =
            |what: &str, needed: Option<usize>, element: usize| -> Result<(), ArrowIngestError> {
                let length = buffers
                    .next()
                    .ok_or_else(|| fail(format!("the batch has no {what} buffer")))?;
                match needed {
                    None => Err(fail(format!("{rows} rows are too many"))),
                    Some(needed) if length < needed => Err(fail(format!(
                    "a {what} buffer of {length} bytes cannot hold {rows} rows ({needed} needed)"
                ))),
                    Some(_) if length % element != 0 => Err(fail(format!(
                        "a {what} buffer of {length} bytes is not a whole number of \
                     {element}-byte values"
                    ))),
                    Some(_) => Ok(()),
                }
            };
        next(
            "validity",
            Some(if nulls > 0 { rows.div_ceil(8) } else { 0 }),
            1,
        )?;
        let offsets = |width: usize| {
            if rows == 0 {
                Some(0)
            } else {
                rows.checked_add(1)?.checked_mul(width)
            }
        };
        match data_type {
            DataType::Boolean => next("values", Some(rows.div_ceil(8)), 1)?,
            DataType::Utf8 => {
                next("offsets", offsets(4), 4)?;
                next("data", Some(0), 1)?;
            }
            DataType::LargeUtf8 => {
                next("offsets", offsets(8), 8)?;
                next("data", Some(0), 1)?;
            }
            DataType::Utf8View => {
                next("views", rows.checked_mul(16), 16)?;
                let count = variadic
                    .next()
                    .ok_or_else(|| fail("no count of its data buffers".into()))?;
                let count = usize::try_from(count)
                    .ok()
                    .filter(|&c| c <= lengths.len())
                    .ok_or_else(|| fail(format!("{count} data buffers")))?;
                for _ in 0..count {
                    next("data", Some(0), 1)?;
                }
            }
            other => {
                let width = other
                    .primitive_width()
                    .ok_or_else(|| fail("not a type of the data model".into()))?;
                next("values", rows.checked_mul(width), width)?;
            }
        }
    }
    // Arrow's reader asserts that every count is used.
    if variadic.next().is_some() {
        return Err(unnamed(
            "the batch counts data buffers for more string-view columns than it has",
        ));
    }
    Ok(())
}

/// Checks that every buffer of `batch` lies inside `body`; returns each buffer's length as
/// the reader will see it (decompressed) and the bytes compressed buffers claim in all.
/// LZ4-compressed batches are refused: Arrow's LZ4 decoder does not bound its output by the
/// size a buffer claims, so a small frame could expand without limit.
fn check_buffers(batch: &fb::RecordBatch<'_>, body: &[u8]) -> Result<(Vec<usize>, usize), String> {
    let compression = batch.compression().map(|c| c.codec());
    if compression == Some(fb::CompressionType::LZ4_FRAME) {
        return Err(
            "LZ4-compressed IPC buffers are not accepted: send the stream uncompressed \
                    or with ZSTD buffer compression, or compress the request body \
                    (Content-Encoding: zstd or gzip)"
                .into(),
        );
    }
    let mut uncompressed = 0usize;
    let mut lengths = Vec::new();
    for (index, buffer) in batch.buffers().iter().flatten().enumerate() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let end = offset
            .checked_add(length)
            .filter(|_| offset >= 0 && length >= 0);
        let Some(slice) = end.and_then(|end| body.get(offset as usize..end as usize)) else {
            return Err(format!(
                "buffer {index} (offset {offset}, length {length}) lies outside the message \
                 body of {} bytes",
                body.len()
            ));
        };
        let length = match (compression, slice.get(..8)) {
            (None, _) | (Some(_), None) => slice.len(),
            (Some(_), Some(prefix)) => {
                match i64::from_le_bytes(prefix.try_into().expect("8 bytes")) {
                    // stored uncompressed after the prefix
                    -1 => slice.len() - 8,
                    // the size decompression allocates (and checks it got)
                    claimed => {
                        let claimed = usize::try_from(claimed).map_err(|_| {
                            format!("buffer {index} claims {claimed} bytes uncompressed")
                        })?;
                        uncompressed = uncompressed.saturating_add(claimed);
                        claimed
                    }
                }
            }
        };
        lengths.push(length);
    }
    Ok((lengths, uncompressed))
}

fn read_u32(body: &[u8], position: &mut usize) -> Option<u32> {
    let bytes = take(body, position, 4)?;
    Some(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

fn take<'a>(body: &'a [u8], position: &mut usize, length: usize) -> Option<&'a [u8]> {
    let end = position.checked_add(length)?;
    let bytes = body.get(*position..end)?;
    *position = end;
    Some(bytes)
}

fn truncated(body: &[u8], start: usize) -> String {
    format!(
        "the stream ends inside a message length ({} bytes left)",
        body.len() - start
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float64Array, RecordBatch, TimestampNanosecondArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};

    use super::*;

    fn batch(rows: usize) -> RecordBatch {
        let time: Vec<i64> = (0..rows as i64).collect();
        let value: Vec<f64> = (0..rows).map(|i| i as f64).collect();
        RecordBatch::try_from_iter([
            (
                "time",
                Arc::new(TimestampNanosecondArray::from(time).with_timezone("UTC")) as ArrayRef,
            ),
            ("v", Arc::new(Float64Array::from(value)) as ArrayRef),
        ])
        .unwrap()
    }

    fn stream(batches: &[RecordBatch], options: IpcWriteOptions, finish: bool) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut writer =
                StreamWriter::try_new_with_options(&mut out, &batches[0].schema(), options)
                    .unwrap();
            for b in batches {
                writer.write(b).unwrap();
            }
            if finish {
                writer.finish().unwrap();
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Vec<DecodedTable>, IpcStreamError> {
        decode_ipc_stream("t", Buffer::from(bytes.to_vec()), 1 << 20)
    }

    #[test]
    fn streams_with_and_without_the_end_marker_decode() {
        let batches = [batch(3), batch(0), batch(2)];
        for finish in [true, false] {
            let tables = decode(&stream(&batches, IpcWriteOptions::default(), finish)).unwrap();
            let rows: Vec<usize> = tables.iter().map(|t| t.batch.num_rows()).collect();
            assert_eq!(rows, vec![3, 2]);
        }
    }

    #[test]
    fn every_cut_inside_a_message_is_an_error() {
        let bytes = stream(&[batch(3), batch(2)], IpcWriteOptions::default(), true);
        let mut accepted = Vec::new();
        for cut in 1..bytes.len() {
            if decode(&bytes[..cut]).is_ok() {
                accepted.push(cut);
            }
        }
        // Only cuts at a message boundary after a batch (a stream without its end marker, or
        // with fewer batches: indistinguishable from a shorter stream) decode.
        let whole = bytes.len();
        assert!(accepted.iter().all(|&cut| cut < whole), "{accepted:?}");
        assert!(accepted.len() <= 3, "accepted cuts: {accepted:?}");
    }

    #[test]
    fn a_buffer_outside_its_body_is_an_error_not_a_panic() {
        let mut bytes = stream(&[batch(4)], IpcWriteOptions::default(), true);
        // Move a buffer of the batch beyond its body: the first buffer offset or length of
        // 32 (4 rows of 8 bytes) in the batch's metadata becomes 2^40.
        let batch_start = schema_message_len(&bytes);
        let meta_len =
            u32::from_le_bytes(bytes[batch_start + 4..batch_start + 8].try_into().unwrap());
        let metadata = batch_start + 8..batch_start + 8 + meta_len as usize;
        let needle = 32i64.to_le_bytes();
        let at = bytes[metadata.clone()]
            .windows(8)
            .position(|w| w == needle)
            .expect("a buffer offset or length of 32 is in the metadata")
            + metadata.start;
        bytes[at..at + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
        let e = decode(&bytes).unwrap_err();
        assert!(e.message.contains("outside the message body"), "{e}");
        assert_eq!(e.message_index, Some(1));
    }

    #[test]
    fn a_validity_bitmap_shorter_than_its_rows_is_an_error_not_a_panic() {
        // The fuzzer's case: a column with nulls whose validity buffer is empty.
        let values: Vec<Option<f64>> = vec![Some(1.0), None, Some(3.0), None];
        let time = TimestampNanosecondArray::from(vec![1, 2, 3, 4]).with_timezone("UTC");
        let with_nulls = RecordBatch::try_from_iter([
            ("time", Arc::new(time) as ArrayRef),
            ("v", Arc::new(Float64Array::from(values)) as ArrayRef),
        ])
        .unwrap();
        let mut bytes = stream(&[with_nulls], IpcWriteOptions::default(), true);
        // The batch's buffers: time validity, time values, v validity, v values. Find where
        // the metadata stores v's validity (offset, length) and make its length 0.
        let batch_start = schema_message_len(&bytes);
        let meta_len =
            u32::from_le_bytes(bytes[batch_start + 4..batch_start + 8].try_into().unwrap());
        let metadata = &bytes[batch_start + 8..batch_start + 8 + meta_len as usize];
        let message = fb::root_as_message(metadata).unwrap();
        let buffers = message.header_as_record_batch().unwrap().buffers().unwrap();
        assert!(buffers.get(2).length() > 0, "v has a validity bitmap");
        let table_at = buffers.bytes().as_ptr() as usize - metadata.as_ptr() as usize;
        let at = batch_start + 8 + table_at + 2 * 16;
        bytes[at + 8..at + 16].copy_from_slice(&0i64.to_le_bytes());
        let e = decode(&bytes).unwrap_err();
        assert!(
            e.message
                .contains("validity buffer of 0 bytes cannot hold 4 rows"),
            "{e}"
        );
        assert_eq!(e.column.as_deref(), Some("v"), "{e}");
        assert!(e.message.contains("column \"v\""), "{e}");
    }

    /// The byte length of the first (schema) message, framing included.
    fn schema_message_len(bytes: &[u8]) -> usize {
        let meta = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        8 + meta
    }

    #[test]
    fn compressed_buffers_may_not_claim_more_than_the_limit() {
        let options = IpcWriteOptions::default()
            .try_with_compression(Some(fb::CompressionType::ZSTD))
            .unwrap();
        let bytes = stream(&[batch(1000)], options, true);
        assert_eq!(decode(&bytes).unwrap()[0].batch.num_rows(), 1000);
        let e = decode_ipc_stream("t", Buffer::from(bytes.clone()), 1000).unwrap_err();
        assert!(e.message.contains("claim"), "{e}");
    }

    /// Found by the fuzzer: compressed buffers whose claimed sizes add up past `usize::MAX`
    /// wrapped to a small total and reached the decompressor.
    #[test]
    fn claimed_sizes_cannot_wrap_around() {
        let bytes = include_bytes!("../../../fuzz/seeds/arrow_ipc/regression_claims_overflow");
        let e = decode(bytes).unwrap_err();
        assert!(e.message.contains("uncompressed"), "{e}");
    }

    #[test]
    fn the_schema_is_checked_before_any_batch_is_read() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, false)]));
        let no_time = RecordBatch::try_new(
            schema,
            vec![Arc::new(Float64Array::from(vec![1.0])) as ArrayRef],
        )
        .unwrap();
        let e = decode(&stream(&[no_time], IpcWriteOptions::default(), true)).unwrap_err();
        assert_eq!(e.message_index, Some(0));
        assert!(
            e.message.contains("\"time\" timestamp column is required"),
            "{e}"
        );
    }

    /// The fuzz seeds, written by pyarrow: plain, zstd and lz4 compressed (lz4 is refused),
    /// without the end marker, narrow types, no time column.
    #[test]
    fn pyarrow_streams_decode() {
        let seed = |bytes: &[u8]| decode(bytes).map(|t| t.iter().map(|t| t.batch.num_rows()).sum());
        let rows: Result<usize, _> = seed(include_bytes!("../../../fuzz/seeds/arrow_ipc/metrics"));
        assert_eq!(rows, Ok(5));
        for (name, bytes) in [
            (
                "zstd",
                &include_bytes!("../../../fuzz/seeds/arrow_ipc/metrics_zstd")[..],
            ),
            (
                "no end marker",
                include_bytes!("../../../fuzz/seeds/arrow_ipc/no_end_marker"),
            ),
            (
                "narrow",
                include_bytes!("../../../fuzz/seeds/arrow_ipc/narrow_types"),
            ),
        ] {
            assert!(
                seed(bytes).is_ok_and(|n| n >= 2),
                "{name}: {:?}",
                seed(bytes)
            );
        }
        let lz4 = seed(include_bytes!("../../../fuzz/seeds/arrow_ipc/metrics_lz4")).unwrap_err();
        assert!(
            lz4.message
                .contains("LZ4-compressed IPC buffers are not accepted"),
            "{lz4}"
        );
        let no_time = seed(include_bytes!("../../../fuzz/seeds/arrow_ipc/no_time")).unwrap_err();
        assert!(no_time.message.contains("\"time\""), "{no_time}");
    }

    #[test]
    fn garbage_and_trailing_bytes_are_errors() {
        assert!(decode(b"not arrow at all").is_err());
        assert!(decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err());
        let mut bytes = stream(&[batch(1)], IpcWriteOptions::default(), true);
        bytes.extend_from_slice(b"junk");
        let e = decode(&bytes).unwrap_err();
        assert!(e.message.contains("follow the end-of-stream marker"), "{e}");
    }
}

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

use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::{self as fb, MessageHeader};

use crate::arrow_ingest::{check_schema, table_from_arrow};
use crate::line_protocol::DecodedTable;

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
    let mut saw_schema = false;
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
        let message = fb::root_as_message(metadata)
            .map_err(|e| fail(format!("the message metadata is not valid: {e}")))?;
        let body_length = usize::try_from(message.bodyLength())
            .map_err(|_| fail(format!("negative body length {}", message.bodyLength())))?;
        let message_body = take(body, &mut position, body_length).ok_or_else(|| {
            fail(format!(
                "the message declares a body of {body_length} bytes; {} are left",
                body.len() - position
            ))
        })?;
        let batch = match message.header_type() {
            MessageHeader::Schema if !saw_schema => {
                saw_schema = true;
                let schema = message
                    .header_as_schema()
                    .ok_or_else(|| fail("the schema message has no schema".into()))?;
                check_schema(&fb::convert::fb_to_schema(schema)).map_err(|e| IpcStreamError {
                    column: e.column.clone(),
                    ..fail(e.message)
                })?;
                continue;
            }
            MessageHeader::Schema => return Err(fail("a second schema message".into())),
            _ if !saw_schema => {
                return Err(fail("the stream must start with a schema message".into()))
            }
            MessageHeader::RecordBatch => message.header_as_record_batch(),
            MessageHeader::DictionaryBatch => message
                .header_as_dictionary_batch()
                .and_then(|dictionary| dictionary.data()),
            other => {
                return Err(fail(format!(
                    "{other:?} messages are not part of a record batch stream"
                )))
            }
        };
        let batch = batch.ok_or_else(|| fail("the message has no record batch".into()))?;
        uncompressed += check_buffers(&batch, message_body).map_err(fail)?;
        if uncompressed > max_uncompressed_bytes {
            return Err(fail(format!(
                "compressed buffers claim {uncompressed} bytes uncompressed; at most \
                 {max_uncompressed_bytes} are accepted"
            )));
        }
    }
    unreachable!("the loop returns")
}

/// Checks that every buffer of `batch` lies inside `body`; returns the bytes its compressed
/// buffers claim to hold uncompressed (0 if it is not compressed).
fn check_buffers(batch: &fb::RecordBatch<'_>, body: &[u8]) -> Result<usize, String> {
    let mut uncompressed = 0usize;
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
        if batch.compression().is_some() {
            if let Some(prefix) = slice.get(..8) {
                let claimed = i64::from_le_bytes(prefix.try_into().expect("8 bytes"));
                // -1: stored uncompressed; otherwise the size decompression allocates.
                if claimed != -1 {
                    let claimed = usize::try_from(claimed).map_err(|_| {
                        format!("buffer {index} claims {claimed} bytes uncompressed")
                    })?;
                    uncompressed = uncompressed.saturating_add(claimed);
                }
            }
        }
    }
    Ok(uncompressed)
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

    /// The fuzz seeds, written by pyarrow: plain, zstd and lz4 compressed, without the end
    /// marker, narrow types, no time column.
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
                "lz4",
                include_bytes!("../../../fuzz/seeds/arrow_ipc/metrics_lz4"),
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

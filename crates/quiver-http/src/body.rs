//! Reading request bodies safely: a byte limit enforced before and after decompression
//! (413 beyond it), and `Content-Encoding: gzip | zstd | identity` (415 for anything else,
//! 400 for a corrupt stream). A body is either read whole ([`read_body`]) or streamed to a
//! blocking consumer as it arrives ([`stream_body`], never held whole); a streamed body may
//! also be recognised as gzip or zstd by its magic bytes, for formats whose clients compress
//! without saying so (Arc's MessagePack).

use std::io::Read;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use bytes::BytesMut;
use http_body_util::BodyExt;
use tokio_util::io::{StreamReader, SyncIoBridge};

use super::error::ApiError;

/// Reads and decompresses a body of at most `limit` bytes (compressed and decompressed).
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let raw = read_raw_body(headers, body, limit).await?;
    decode_content(headers, raw, limit)
}

/// How much of an oversized body the server reads and discards before answering 413, so a
/// client still sending can read the answer instead of failing with a broken pipe. Beyond
/// this (or [`DRAIN_TIMEOUT`]) the connection is simply closed.
const DRAIN_LIMIT_BYTES: u64 = 64 << 20;

/// How long the server keeps discarding an oversized body before closing the connection.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads a body of at most `limit` bytes as sent (still compressed); decode it with
/// [`decode_content`], which is CPU work worth moving off the async workers for big bodies.
pub async fn read_raw_body(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds the limit of {limit} bytes (max_request_bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared {
        if length > limit as u64 {
            if length <= DRAIN_LIMIT_BYTES {
                drain(body, length).await;
            }
            return Err(too_large());
        }
    }
    let mut collected = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if collected.len() + data.len() > limit {
            drain(body, DRAIN_LIMIT_BYTES).await;
            return Err(too_large());
        }
        collected.extend_from_slice(&data);
    }
    Ok(collected.freeze())
}

/// Reads and discards up to `max_bytes` more of `body`, for at most [`DRAIN_TIMEOUT`].
async fn drain(mut body: Body, max_bytes: u64) {
    let discard = async {
        let mut seen = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen += data.len() as u64;
                if seen > max_bytes {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, discard).await;
}

/// Decompresses `raw` per the request's `Content-Encoding`, to at most `limit` bytes.
pub fn decode_content(headers: &HeaderMap, raw: Bytes, limit: usize) -> Result<Bytes, ApiError> {
    match content_encoding(headers)? {
        Encoding::Identity => Ok(raw),
        encoding => {
            let mut out = Vec::new();
            decoder(encoding, Box::new(std::io::Cursor::new(raw)), limit)?
                .read_to_end(&mut out)
                .map_err(body_error)?;
            Ok(Bytes::from(out))
        }
    }
}

/// A body's compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
    Zstd,
}

/// The request's `Content-Encoding` (415 for one we do not serve).
fn content_encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default();
    match encoding.as_str() {
        "" | "identity" => Ok(Encoding::Identity),
        "gzip" | "x-gzip" => Ok(Encoding::Gzip),
        "zstd" => Ok(Encoding::Zstd),
        other => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("unsupported Content-Encoding {other:?}: use gzip, zstd or identity"),
        )),
    }
}

/// `reader` decompressed as `encoding` says, to at most `limit` bytes.
fn decoder(
    encoding: Encoding,
    reader: Box<dyn Read + Send>,
    limit: usize,
) -> Result<Box<dyn Read + Send>, ApiError> {
    Ok(match encoding {
        Encoding::Identity => reader,
        Encoding::Gzip => Box::new(Decompressed::new(
            flate2::read::MultiGzDecoder::new(reader),
            "gzip",
            limit,
        )),
        Encoding::Zstd => {
            let decoder = zstd::stream::read::Decoder::new(reader)
                .map_err(|e| ApiError::bad_request(format!("invalid zstd body: {e}")))?;
            Box::new(Decompressed::new(decoder, "zstd", limit))
        }
    })
}

/// `reader` decompressed if it starts with the gzip (`1f 8b`) or zstd (`28 b5 2f fd`) magic
/// bytes, as it is otherwise.
fn magic_decoder(
    mut reader: Box<dyn Read + Send>,
    limit: usize,
) -> Result<Box<dyn Read + Send>, ApiError> {
    let mut head = Vec::with_capacity(4);
    (&mut reader)
        .take(4)
        .read_to_end(&mut head)
        .map_err(body_error)?;
    let encoding = if head.starts_with(&[0x1f, 0x8b]) {
        Encoding::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Encoding::Zstd
    } else {
        Encoding::Identity
    };
    let whole = Box::new(std::io::Cursor::new(head).chain(reader));
    decoder(encoding, whole, limit)
}

/// A decompressor's output: its errors say which encoding was corrupt, and more than `limit`
/// bytes of output is a 413.
struct Decompressed<R> {
    inner: R,
    name: &'static str,
    limit: usize,
    produced: usize,
}

impl<R: Read> Decompressed<R> {
    fn new(inner: R, name: &'static str, limit: usize) -> Self {
        Decompressed {
            inner,
            name,
            limit,
            produced: 0,
        }
    }
}

impl<R: Read> Read for Decompressed<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out).map_err(|e| {
            if e.get_ref().is_some_and(|inner| inner.is::<CarriedError>()) {
                e // an error of the bytes underneath, already an answer
            } else {
                carried(ApiError::bad_request(format!(
                    "invalid {} body: {e}",
                    self.name
                )))
            }
        })?;
        self.produced += n;
        if self.produced > self.limit {
            return Err(carried(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "decompressed request body exceeds the limit of {} bytes (max_request_bytes)",
                    self.limit
                ),
            )));
        }
        Ok(n)
    }
}

/// An `ApiError` carried through `std::io` by the readers of this module.
#[derive(Debug)]
struct CarriedError(ApiError);

impl std::fmt::Display for CarriedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for CarriedError {}

fn carried(error: ApiError) -> std::io::Error {
    std::io::Error::other(CarriedError(error))
}

/// The `ApiError` an I/O error of this module's readers stands for.
fn body_error(e: std::io::Error) -> ApiError {
    if e.get_ref().is_some_and(|inner| inner.is::<CarriedError>()) {
        let inner = e.into_inner().expect("checked above");
        let CarriedError(error) = *inner.downcast::<CarriedError>().expect("checked above");
        return error;
    }
    ApiError::bad_request(format!("failed to read the request body: {e}"))
}

/// A request body read piece by piece on a blocking thread (see [`stream_body`]), already
/// decompressed.
pub struct BodyStream {
    reader: Box<dyn Read + Send>,
}

impl BodyStream {
    /// Appends the next `max` bytes of the body to `out` (fewer only at its end); returns how
    /// many (0 at the end). An error is the answer the request should end with.
    pub fn read_into(&mut self, out: &mut Vec<u8>, max: usize) -> Result<usize, ApiError> {
        (&mut self.reader)
            .take(max as u64)
            .read_to_end(out)
            .map_err(body_error)
    }
}

/// The size of the pieces [`stream_body`] hands its consumer.
const SEND_BYTES: usize = 256 << 10;

/// Runs `consume` on a blocking thread with the body, decompressed, as it arrives: the body
/// is never held whole. Compression is recognised by `Content-Encoding` and then, on what
/// that gives, by the gzip or zstd magic bytes. At most `limit` bytes as sent and after each
/// decompression (413 beyond). If `consume` is done before the body is (an error early in
/// it), the rest is read and discarded (within [`DRAIN_LIMIT_BYTES`] and [`DRAIN_TIMEOUT`]) so
/// that the client, still sending, can read the answer.
pub async fn stream_body<T: Send + 'static>(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
    consume: impl FnOnce(&mut BodyStream) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds the limit of {limit} bytes (max_request_bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared.filter(|&length| length > limit as u64) {
        if length <= DRAIN_LIMIT_BYTES {
            drain(body, length).await;
        }
        return Err(too_large());
    }
    let encoding = content_encoding(headers)?;
    let (sender, pieces) = tokio::sync::mpsc::channel::<Bytes>(8);
    let pieces = futures::stream::unfold(pieces, |mut pieces| async move {
        let piece = pieces.recv().await?;
        Some((Ok::<_, std::io::Error>(piece), pieces))
    });
    // the pieces as they arrive, as a blocking `Read` for the decoder's thread
    let raw = SyncIoBridge::new(StreamReader::new(Box::pin(pieces)));
    let task = tokio::task::spawn_blocking(move || {
        let reader = magic_decoder(decoder(encoding, Box::new(raw), limit)?, limit)?;
        consume(&mut BodyStream { reader })
    });
    let mut received = 0usize;
    let mut failure = None;
    // Frames are passed on in pieces of about SEND_BYTES: one wake-up of the consumer per
    // piece, not per (often small) frame.
    let mut piece = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let data = match frame.map(|frame| frame.into_data()) {
            Ok(Ok(data)) => data,
            Ok(Err(_)) => continue, // trailers
            Err(e) => {
                failure = Some(ApiError::bad_request(format!(
                    "failed to read the request body: {e}"
                )));
                break;
            }
        };
        received += data.len();
        if received > limit {
            failure = Some(too_large());
            break;
        }
        piece.extend_from_slice(&data);
        if piece.len() >= SEND_BYTES && sender.send(piece.split().freeze()).await.is_err() {
            break; // `consume` is done: it failed before the end of the body
        }
    }
    if failure.is_none() && !piece.is_empty() {
        let _ = sender.send(piece.freeze()).await;
    }
    drop(sender);
    drain(body, DRAIN_LIMIT_BYTES).await;
    let outcome = task.await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("decoding task failed: {e}"),
        )
    })?;
    match failure {
        Some(error) => Err(error),
        None => outcome,
    }
}

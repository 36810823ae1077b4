//! Reading request bodies safely: a byte limit enforced before and after decompression
//! (413 beyond it), and `Content-Encoding: gzip | zstd | identity` (415 for anything else,
//! 400 for a corrupt stream); for formats whose clients compress without saying so (Arc's
//! MessagePack), gzip and zstd recognised by their magic bytes.

use std::io::Read;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use bytes::BytesMut;
use http_body_util::BodyExt;

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
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default();
    match encoding.as_str() {
        "" | "identity" => Ok(raw),
        "gzip" | "x-gzip" => decompress(flate2::read::MultiGzDecoder::new(&raw[..]), "gzip", limit),
        "zstd" => {
            let decoder = zstd::stream::read::Decoder::new(&raw[..])
                .map_err(|e| ApiError::bad_request(format!("invalid zstd body: {e}")))?;
            decompress(decoder, "zstd", limit)
        }
        other => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("unsupported Content-Encoding {other:?}: use gzip, zstd or identity"),
        )),
    }
}

/// `raw` decompressed if it starts with the gzip (`1f 8b`) or zstd (`28 b5 2f fd`) magic
/// bytes (to at most `limit` bytes), as it is otherwise.
pub fn decode_by_magic(raw: Bytes, limit: usize) -> Result<Bytes, ApiError> {
    if raw.starts_with(&[0x1f, 0x8b]) {
        return decompress(flate2::read::MultiGzDecoder::new(&raw[..]), "gzip", limit);
    }
    if raw.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let decoder = zstd::stream::read::Decoder::new(&raw[..])
            .map_err(|e| ApiError::bad_request(format!("invalid zstd body: {e}")))?;
        return decompress(decoder, "zstd", limit);
    }
    Ok(raw)
}

fn decompress(reader: impl Read, name: &str, limit: usize) -> Result<Bytes, ApiError> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ApiError::bad_request(format!("invalid {name} body: {e}")))?;
    if out.len() > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "decompressed request body exceeds the limit of {limit} bytes (max_request_bytes)"
            ),
        ));
    }
    Ok(Bytes::from(out))
}

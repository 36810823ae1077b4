//! Reading request bodies safely: a byte limit enforced before and after decompression
//! (413 beyond it), and `Content-Encoding: gzip | zstd | identity` (415 for anything else,
//! 400 for a corrupt stream).

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};

use super::error::ApiError;

/// Reads and decompresses a body of at most `limit` bytes (compressed and decompressed).
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let raw = read_raw_body(headers, body, limit).await?;
    decode_content(headers, raw, limit)
}

/// Reads a body of at most `limit` bytes as sent (still compressed); decode it with
/// [`decode_content`], which is CPU work worth moving off the async workers for big bodies.
pub async fn read_raw_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds the limit of {limit} bytes (max_request_bytes)"),
        )
    };
    if let Some(length) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if length > limit as u64 {
            return Err(too_large());
        }
    }
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(bytes),
        Err(e) => {
            let length_limit = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if length_limit {
                too_large()
            } else {
                ApiError::bad_request(format!("failed to read the request body: {e}"))
            })
        }
    }
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

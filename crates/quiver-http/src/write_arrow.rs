//! Arrow IPC stream upload: `POST /api/v3/write_arrow?db=&table=&no_sync=` with an
//! `application/vnd.apache.arrow.stream` body (gzip or zstd `Content-Encoding` accepted).
//!
//! The stream's framing and schema are checked before any batch is read (no size the client
//! declares is trusted: see `quiver_ingest::arrow_ipc`), then every batch against the data
//! model (`time` required; dictionary-encoded strings are tags; other columns fields of their
//! own type, narrower numeric and string types widened; see `quiver_ingest::arrow_ingest`)
//! before anything is written: a bad stream is a 400 naming the message or batch, the byte
//! offset or the column, and nothing of the request is written. A good request is one durable
//! write through the WAL, acknowledged with 204 like line protocol.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::buffer::Buffer;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use quiver_auth::Caller;
use quiver_ingest::arrow_ipc::decode_ipc_stream;
use quiver_model::schema::DecodedTable;

use super::auth::{admit_write_bytes, require_write};
use super::blocking::off_the_workers;
use super::body::read_body;
use super::error::ApiError;
use super::params::required;
use super::write::{durability, write_all_or_nothing};
use super::AppState;

/// `POST /api/v3/write_arrow?db=&table=&no_sync=`
pub async fn write_arrow(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let database = required(&params, "db")?;
    let table = required(&params, "table")?;
    let durability = durability(&params)?;
    quiver_storage::validate_database_name(&database)?;
    quiver_storage::validate_table_name(&table)?;
    require_write(&caller, &database)?;
    if let Some(content_type) = headers.get(axum::http::header::CONTENT_TYPE) {
        let content_type = content_type.to_str().unwrap_or_default();
        if !content_type.starts_with("application/vnd.apache.arrow.stream")
            && !content_type.starts_with("application/octet-stream")
        {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Content-Type {content_type:?}: send an Arrow IPC stream \
                     (application/vnd.apache.arrow.stream)"
                ),
            ));
        }
    }
    let bytes = read_body(&headers, body, app.limits.max_request_bytes).await?;
    admit_write_bytes(&app, &caller, bytes.len())?;
    let max_bytes = app.limits.max_request_bytes;
    let tables =
        off_the_workers("decoding", move || decode_stream(&table, bytes, max_bytes)).await?;
    write_all_or_nothing(&app, &database, tables, durability).await
}

/// Every non-empty batch of the stream, converted to the data model; the first bad one fails
/// the whole request. Compressed IPC buffers may hold at most what a request body may.
fn decode_stream(
    table: &str,
    bytes: bytes::Bytes,
    max_bytes: usize,
) -> Result<Vec<DecodedTable>, ApiError> {
    decode_ipc_stream(table, Buffer::from(bytes), max_bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "Arrow IPC stream rejected: {e}; nothing was written"
        ))
    })
}

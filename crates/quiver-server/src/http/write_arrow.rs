//! Arrow IPC stream upload: `POST /api/v3/write_arrow?db=&table=&no_sync=` with an
//! `application/vnd.apache.arrow.stream` body (gzip or zstd `Content-Encoding` accepted).
//!
//! Every batch is checked against the data model (`time` required; dictionary-encoded strings
//! are tags; other columns fields of their own type, narrower numeric and string types widened;
//! see `quiver_ingest::arrow_ingest`) before anything is written: a bad batch is a 400 naming
//! the batch and column, and nothing of the request is written. A good request is one durable
//! write through the WAL, acknowledged with 204 like line protocol.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use quiver_ingest::arrow_ingest::table_from_arrow;
use quiver_ingest::line_protocol::DecodedTable;
use quiver_storage::Durability;

use super::body::read_body;
use super::error::ApiError;
use super::write::{boolean, required};
use super::AppState;

/// `POST /api/v3/write_arrow?db=&table=&no_sync=`
pub async fn write_arrow(
    State(app): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let database = required(&params, "db")?;
    let table = required(&params, "table")?;
    let durability = if boolean(&params, "no_sync", false)? {
        Durability::NoSync
    } else {
        Durability::Sync
    };
    quiver_storage::validate_database_name(&database)?;
    quiver_storage::validate_table_name(&table)?;
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
    let bytes = read_body(&headers, body, app.max_request_bytes).await?;
    let tables = tokio::task::spawn_blocking(move || decode_stream(&table, bytes))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("decoding task failed: {e}"),
            )
        })??;
    if !tables.is_empty() {
        app.store.write(&database, tables, durability).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Every non-empty batch of the stream, converted to the data model; the first bad one fails
/// the whole request.
fn decode_stream(table: &str, bytes: bytes::Bytes) -> Result<Vec<DecodedTable>, ApiError> {
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| ApiError::bad_request(format!("the body is not an Arrow IPC stream: {e}")))?;
    let mut tables = Vec::new();
    for (index, batch) in reader.enumerate() {
        let batch = batch.map_err(|e| {
            ApiError::bad_request(format!(
                "the Arrow IPC stream is invalid at batch {index}: {e}; nothing was written"
            ))
        })?;
        if batch.num_rows() == 0 {
            continue;
        }
        let decoded = table_from_arrow(table, &batch).map_err(|e| {
            ApiError::bad_request(format!("batch {index}: {e}; nothing was written"))
        })?;
        tables.push(decoded);
    }
    Ok(tables)
}

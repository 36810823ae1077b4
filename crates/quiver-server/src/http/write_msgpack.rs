//! Arc-compatible MessagePack writes: `POST /api/v1/write/msgpack`, the database from the
//! `x-arc-database` header (`default` without one), columnar and row records and batches of
//! both (see `quiver_ingest::msgpack`), gzip or zstd bodies recognised by `Content-Encoding` or
//! by their magic bytes (Arc's clients compress without always saying so), `no_sync=true` as
//! on the other write endpoints.
//!
//! A good request is one durable write through the WAL, acknowledged with 204. A bad one is a
//! 400 naming what is wrong and where (`data.record`, 0-based, and `data.offset`, the byte
//! offset in the decompressed body), and nothing of it is written.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::Response;
use quiver_ingest::msgpack::{decode_msgpack, MsgpackOptions};
use quiver_ingest::schema::NoExistingTables;
use serde_json::json;

use super::body::{decode_by_magic, decode_content, read_raw_body};
use super::error::ApiError;
use super::write::{durability, now_ns, off_the_workers, write_all_or_nothing};
use super::AppState;

/// The header naming the database, as Arc's clients send it.
const DATABASE_HEADER: HeaderName = HeaderName::from_static("x-arc-database");

/// `POST /api/v1/write/msgpack` (`x-arc-database: <db>`; `?no_sync=true`)
pub async fn write_msgpack(
    State(app): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let database = match headers.get(DATABASE_HEADER) {
        None => "default".to_string(),
        Some(value) => value
            .to_str()
            .map(|v| v.trim().to_string())
            .map_err(|_| ApiError::bad_request("x-arc-database must be ASCII text"))?,
    };
    let database = if database.is_empty() {
        "default".to_string()
    } else {
        database
    };
    quiver_storage::validate_database_name(&database)?;
    let durability = durability(&params)?;
    let raw = read_raw_body(&headers, body, app.max_request_bytes).await?;
    let options = MsgpackOptions {
        default_time_ns: now_ns(),
    };
    let store = app.store.clone();
    let db = database.clone();
    let limit = app.max_request_bytes;
    let tables = off_the_workers(move || {
        let body = decode_by_magic(decode_content(&headers, raw, limit)?, limit)?;
        let decoded = match store.database(&db) {
            Some(existing) => decode_msgpack(&body, &options, existing.as_ref()),
            None => decode_msgpack(&body, &options, &NoExistingTables),
        };
        decoded.map_err(|e| {
            ApiError::with_data(
                StatusCode::BAD_REQUEST,
                format!("invalid MessagePack payload: {e}; nothing was written"),
                json!({ "record": e.record, "offset": e.offset }),
            )
        })
    })
    .await?;
    write_all_or_nothing(&app, &database, tables, durability).await
}

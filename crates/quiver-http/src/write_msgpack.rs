//! Arc-compatible MessagePack writes: `POST /api/v1/write/msgpack`, the database from the
//! `x-arc-database` header (`default` without one), columnar and row records and batches of
//! both (see `quiver_ingest::msgpack`), gzip or zstd bodies recognised by `Content-Encoding` or
//! by their magic bytes (Arc's clients compress without always saying so), `no_sync=true` as
//! on the other write endpoints.
//!
//! The body is decoded as it arrives (decompressed on the fly), never held whole: a request
//! needs memory for its decoded rows and about one record's bytes, not for the whole body.
//! A good request is one durable write through the WAL, acknowledged with 204. A bad one is a
//! 400 naming what is wrong and where (`data.record`, 0-based, and `data.offset`, the byte
//! offset in the decompressed body), and nothing of it is written.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::Response;
use axum::Extension;
use quiver_auth::Caller;
use quiver_ingest::msgpack::{MsgpackError, MsgpackOptions, MsgpackStream};
use quiver_model::schema::DecodedTable;
use quiver_model::schema::NoExistingTables;
use quiver_storage::Store;
use serde_json::json;

use super::auth::{admit_write_bytes, require_write};
use super::body::{stream_body, BodyStream};
use super::error::ApiError;
use super::write::{durability, now_ns, write_all_or_nothing};
use super::AppState;

/// The header naming the database, as Arc's clients send it.
const DATABASE_HEADER: HeaderName = HeaderName::from_static("x-arc-database");

/// `POST /api/v1/write/msgpack` (`x-arc-database: <db>`; `?no_sync=true`)
pub async fn write_msgpack(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
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
    require_write(&caller, &database)?;
    let durability = durability(&params)?;
    let options = MsgpackOptions {
        default_time_ns: now_ns(),
    };
    let store = app.store.clone();
    let db = database.clone();
    let tables = stream_body(&headers, body, app.limits.max_request_bytes, move |body| {
        decode_stream(body, &options, &store, &db)
    })
    .await?;
    // the body was decoded as it streamed in: its size is what it decoded to (or what the
    // client declared, if larger)
    let decoded: usize = tables.iter().map(|t| t.batch.get_array_memory_size()).sum();
    admit_write_bytes(&app, &caller, decoded.max(declared_length(&headers)))?;
    write_all_or_nothing(&app, &database, tables, durability).await
}

/// The body's `Content-Length`, or 0.
fn declared_length(headers: &HeaderMap) -> usize {
    headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// How many bytes the decoder asks the body for at a time.
const READ_BYTES: usize = 256 << 10;

/// Bytes gathered before records are decoded (unless the body ends first): a body up to this
/// size is decoded in one go, as a whole.
const DECODE_BYTES: usize = 1 << 20;

/// Decodes the body's records as its bytes arrive (see `MsgpackStream`), keeping only a
/// record cut off at the end of what has arrived. A cut-off record is decoded again once the
/// bytes kept have doubled, so a record spanning many reads costs linear, not quadratic, work.
fn decode_stream(
    body: &mut BodyStream,
    options: &MsgpackOptions,
    store: &Store,
    database: &str,
) -> Result<Vec<DecodedTable>, ApiError> {
    let mut stream = MsgpackStream::new(options);
    let mut pending = Vec::new();
    let mut decode_at = DECODE_BYTES;
    loop {
        let last = body.read_into(&mut pending, READ_BYTES)? == 0;
        if last || pending.len() >= decode_at {
            let used = stream.decode(&pending, last).map_err(invalid)?;
            pending.drain(..used);
            decode_at = DECODE_BYTES.max(2 * pending.len());
        }
        if last {
            break;
        }
    }
    match store.database(database) {
        Some(existing) => stream.finish(existing.as_ref()),
        None => stream.finish(&NoExistingTables),
    }
    .map_err(invalid)
}

fn invalid(e: MsgpackError) -> ApiError {
    ApiError::with_data(
        StatusCode::BAD_REQUEST,
        format!("invalid MessagePack payload: {e}; nothing was written"),
        json!({ "record": e.record, "offset": e.offset }),
    )
}

//! The write endpoints: InfluxDB v3 `/api/v3/write_lp`, v2 `/api/v2/write` and v1 `/write`.
//!
//! All three decode line protocol into per-table Arrow batches and append them to the database
//! (created by its first successful write). v3 defaults to `accept_partial=true`: good lines are
//! written and bad ones reported with a 400. v1 and v2 write nothing if any line is bad.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use quiver_auth::Caller;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions, Precision};
use quiver_model::schema::{DecodedTable, NoExistingTables};
use quiver_storage::Durability;
use serde_json::json;

use super::auth::{admit_write_bytes, require_write};
use super::blocking::off_the_workers;
use super::body::{decode_content, read_raw_body};
use super::error::ApiError;
use super::params::required;
use super::AppState;

/// `POST /api/v3/write_lp?db=&precision=&accept_partial=&no_sync=`
pub async fn write_v3(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = WriteRequest {
        endpoint: "write_lp",
        database: required(&params, "db")?,
        precision: precision(&params, Precision::Auto)?,
        accept_partial: boolean(&params, "accept_partial", true)?,
        durability: durability(&params)?,
    };
    write(app, &caller, request, &headers, body).await
}

/// `POST /api/v2/write?bucket=&org=&precision=`
pub async fn write_v2(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = WriteRequest {
        endpoint: "/api/v2/write",
        database: required(&params, "bucket")?,
        precision: precision(&params, Precision::Nanosecond)?,
        accept_partial: false,
        durability: Durability::Sync,
    };
    write(app, &caller, request, &headers, body).await
}

/// `POST /write?db=&precision=` (InfluxDB v1)
pub async fn write_v1(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = WriteRequest {
        endpoint: "/write",
        database: required(&params, "db")?,
        precision: precision(&params, Precision::Nanosecond)?,
        accept_partial: false,
        durability: Durability::Sync,
    };
    write(app, &caller, request, &headers, body).await
}

struct WriteRequest {
    /// The endpoint as errors name it (`write_lp`, as InfluxDB 3 says, or the v1/v2 path).
    endpoint: &'static str,
    database: String,
    precision: Precision,
    accept_partial: bool,
    /// `no_sync=true` (v3 only): acknowledge once the WAL record is written, before fsync.
    durability: Durability,
}

fn precision(params: &HashMap<String, String>, default: Precision) -> Result<Precision, ApiError> {
    match params.get("precision") {
        None => Ok(default),
        Some(p) => p.parse().map_err(|e| ApiError::bad_request(format!("{e}"))),
    }
}

pub(super) fn boolean(
    params: &HashMap<String, String>,
    name: &str,
    default: bool,
) -> Result<bool, ApiError> {
    match params.get(name).map(|s| s.as_str()) {
        None => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(ApiError::bad_request(format!(
            "query parameter {name}={other:?} must be true or false"
        ))),
    }
}

/// `no_sync=true` acknowledges a write once its WAL record is written, before the fsync.
pub(super) fn durability(params: &HashMap<String, String>) -> Result<Durability, ApiError> {
    Ok(if boolean(params, "no_sync", false)? {
        Durability::NoSync
    } else {
        Durability::Sync
    })
}

/// Writes a request's decoded tables to `database` as one write (nothing when there are
/// none) and acknowledges it with 204.
pub(super) async fn write_all_or_nothing(
    app: &AppState,
    database: &str,
    tables: Vec<DecodedTable>,
    durability: Durability,
) -> Result<Response, ApiError> {
    if !tables.is_empty() {
        app.store.write(database, tables, durability).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Now, in nanoseconds since the epoch (the time of lines and records that carry none).
pub(super) fn now_ns() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since_epoch.as_nanos()).expect("clock before 2262")
}

async fn write(
    app: Arc<AppState>,
    caller: &Caller,
    request: WriteRequest,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    quiver_storage::validate_database_name(&request.database)?;
    require_write(caller, &request.database)?;
    let raw = read_raw_body(headers, body, app.limits.max_request_bytes).await?;
    admit_write_bytes(&app, caller, raw.len())?;
    let options = DecodeOptions {
        precision: request.precision,
        default_time_ns: now_ns(),
        max_reported_errors: app.limits.max_reported_line_errors,
    };
    let store = app.store.clone();
    let database = request.database.clone();
    let (headers, limit) = (headers.clone(), app.limits.max_request_bytes);
    let mut decoded = off_the_workers("decoding", move || {
        let body = decode_content(&headers, raw, limit)?;
        Ok(match store.database(&database) {
            Some(db) => decode_line_protocol(&body, &options, db.as_ref()),
            None => decode_line_protocol(&body, &options, &NoExistingTables),
        })
    })
    .await?;
    let writable = decoded.error_count == 0 || request.accept_partial;
    if writable && decoded.accepted_lines > 0 {
        let tables = std::mem::take(&mut decoded.tables);
        app.store
            .write(&request.database, tables, request.durability)
            .await?;
    }
    let written = if writable { decoded.accepted_lines } else { 0 };
    if decoded.error_count == 0 {
        return Ok(with_line_counts(
            StatusCode::NO_CONTENT.into_response(),
            written,
            0,
        ));
    }
    let data: Vec<_> = decoded
        .errors
        .iter()
        .map(|e| {
            json!({
                "error_message": e.message,
                "line_number": e.line_number,
                "original_line": e.original_line,
            })
        })
        .collect();
    let message = if request.accept_partial {
        "partial write of line protocol occurred".to_string()
    } else {
        format!(
            "parsing failed for {} endpoint; no lines were written",
            request.endpoint
        )
    };
    let refused = ApiError::with_data(StatusCode::BAD_REQUEST, message, json!(data));
    Ok(with_line_counts(
        refused.into_response(),
        written,
        decoded.error_count,
    ))
}

/// The header that says how many lines a line-protocol write wrote.
pub const LINES_WRITTEN_HEADER: &str = "x-quiver-lines-written";
/// The header that says how many lines a line-protocol write rejected (all of them, where
/// the body lists at most `max_reported_line_errors`).
pub const LINES_REJECTED_HEADER: &str = "x-quiver-lines-rejected";

/// `response` with the counts of written and rejected lines in its headers (what
/// `quiver write` reports).
fn with_line_counts(mut response: Response, written: usize, rejected: usize) -> Response {
    let headers = response.headers_mut();
    headers.insert(LINES_WRITTEN_HEADER, written.into());
    headers.insert(LINES_REJECTED_HEADER, rejected.into());
    response
}

//! The SQL query endpoint: `GET|POST /api/v3/query_sql` with `db`, `q`, `format` (`json` by
//! default; also chosen by the `Accept` header) and `params` (a JSON object for `$name`
//! placeholders or an array for `$1`, `$2`, ...).
//!
//! Every query goes through the result cache; the response says `X-Quiver-Cache: HIT`, `MISS`
//! or `BYPASS`. `Cache-Control: no-cache` (or `no-store`) runs the query afresh and stores
//! nothing. Answers are cached per caller: the access scope is the presented credential
//! (`Authorization` header), so callers with different credentials never share an entry.
//!
//! A cached answer is served as the ready bytes of the requested format (encoded once, on the
//! first request in that format). An uncached `format=arrow` answer streams an Arrow IPC stream
//! batch by batch; the other formats are encoded from the collected result. Errors before the
//! first row are JSON error responses (404 for an unknown database or table, 400 for bad SQL);
//! an error after rows have been sent aborts the response, so a client never mistakes a
//! partial result for a whole one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};
use quiver_cache::{AnswerBody, CachedAnswer, QueryRequest};
use quiver_model::AccessScope;
use quiver_query::{QueryError, QueryOutput, QueryParams};
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::AppState;
use crate::format::{ArrowStreamEncoder, Format};

/// The response header carrying the result cache's verdict.
pub const CACHE_HEADER: HeaderName = HeaderName::from_static("x-quiver-cache");

/// The JSON body of `POST /api/v3/query_sql` (query-string parameters are accepted too).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    db: Option<String>,
    q: Option<String>,
    format: Option<String>,
    params: Option<Value>,
}

/// `GET /api/v3/query_sql?db=&q=&format=&params=`
pub async fn query_get(
    State(app): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let request = QueryBody {
        db: params.get("db").cloned(),
        q: params.get("q").cloned(),
        format: params.get("format").cloned(),
        params: params
            .get("params")
            .map(|p| params_from_text(p))
            .transpose()?,
    };
    run(app, request, &headers).await
}

/// `POST /api/v3/query_sql` with a JSON body `{"db": ..., "q": ..., "format": ..., "params": ...}`.
pub async fn query_post(
    State(app): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = super::body::read_body(&headers, body, app.limits.max_request_bytes).await?;
    let mut request: QueryBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        QueryBody::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "request body must be JSON like {{\"db\": \"...\", \"q\": \"...\"}}: {e}"
            ))
        })?
    };
    request.db = request.db.or_else(|| params.get("db").cloned());
    request.q = request.q.or_else(|| params.get("q").cloned());
    request.format = request.format.or_else(|| params.get("format").cloned());
    if request.params.is_none() {
        request.params = params
            .get("params")
            .map(|p| params_from_text(p))
            .transpose()?;
    }
    run(app, request, &headers).await
}

async fn run(
    app: Arc<AppState>,
    request: QueryBody,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let db = request
        .db
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("missing parameter \"db\""))?;
    let sql = request
        .q
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("missing parameter \"q\" (the SQL query)"))?;
    let format = match request.format {
        Some(f) => f.parse::<Format>().map_err(ApiError::bad_request)?,
        None => headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .and_then(Format::from_accept)
            .unwrap_or(Format::Json),
    };
    let query = QueryRequest {
        database: db,
        sql,
        params: query_params(request.params)?,
        scope: access_scope(headers),
        no_cache: asks_no_cache(headers),
    };
    let answer = app.queries.query(&query).await?;
    let mut response = match answer.body {
        AnswerBody::Cached(cached) => cached_response(&app, &cached, format).await?,
        AnswerBody::Streamed(output) => streamed_response(output, format).await?,
    };
    response.headers_mut().insert(
        CACHE_HEADER,
        HeaderValue::from_static(answer.verdict.as_str()),
    );
    Ok(response)
}

/// A whole answer in `format`: its ready bytes, or encoded now and kept for the next request.
async fn cached_response(
    app: &AppState,
    cached: &CachedAnswer,
    format: Format,
) -> Result<Response, ApiError> {
    let bytes = match app.queries.encoding(cached, &format) {
        Some(bytes) => bytes,
        None => {
            let result = cached.result().clone();
            let schema = result.schema().clone();
            let bytes = result
                .batches()
                .iter()
                .map(RecordBatch::get_array_memory_size)
                .sum();
            let encoded = encode_off_the_workers(format, bytes, move || {
                format.encode(&schema, result.batches())
            })
            .await?;
            let bytes = Bytes::from(encoded);
            app.queries.keep_encoding(cached, &format, bytes.clone());
            bytes
        }
    };
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        bytes,
    )
        .into_response())
}

/// An answer computed as it is sent.
async fn streamed_response(output: QueryOutput, format: Format) -> Result<Response, ApiError> {
    let mut stream = output.stream;
    // Run the query up to its first batch before answering, so that most execution errors
    // still become a proper error status rather than a truncated body.
    let first = stream.try_next().await.map_err(QueryError::from)?;
    let content_type = [(header::CONTENT_TYPE, format.content_type())];
    if format == Format::Arrow {
        let body = arrow_body(&output.schema, first, stream)?;
        return Ok((StatusCode::OK, content_type, body).into_response());
    }
    let mut batches: Vec<RecordBatch> = first.into_iter().collect();
    while let Some(batch) = stream.try_next().await.map_err(QueryError::from)? {
        batches.push(batch);
    }
    let schema = output.schema;
    let bytes = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    let encoded =
        encode_off_the_workers(format, bytes, move || format.encode(&schema, &batches)).await?;
    Ok((StatusCode::OK, content_type, encoded).into_response())
}

/// Answers holding at most this many bytes of Arrow arrays are encoded on the async thread
/// that has them: that takes microseconds, less than handing the work to a blocking thread
/// and back.
const INLINE_ENCODE_BYTES: usize = 256 << 10;

/// Runs an encoder of an answer of `bytes` bytes off the async threads, unless it is small.
async fn encode_off_the_workers(
    format: Format,
    bytes: usize,
    encode: impl FnOnce() -> Result<Vec<u8>, arrow::error::ArrowError> + Send + 'static,
) -> Result<Vec<u8>, ApiError> {
    let encoded = if bytes <= INLINE_ENCODE_BYTES {
        // an encoder's panic is the same 500 as on a blocking thread, not a dropped connection
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(encode)).map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the answer failed (a bug: see the server log)",
            )
        })?
    } else {
        tokio::task::spawn_blocking(encode).await.map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding task failed: {e}"),
            )
        })?
    };
    encoded.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the result as {format:?}: {e}"),
        )
    })
}

/// Who is asking. Until tokens exist, the presented credential itself is the scope, so callers
/// presenting different credentials never share cached answers.
fn access_scope(headers: &HeaderMap) -> AccessScope {
    match headers.get(header::AUTHORIZATION) {
        Some(value) => AccessScope::credential(value.as_bytes()),
        None => AccessScope::Anonymous,
    }
}

/// True if `Cache-Control` says `no-cache` or `no-store`.
fn asks_no_cache(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|directive| directive.trim().to_ascii_lowercase())
        .any(|d| d == "no-cache" || d == "no-store")
}

/// `params` given as text in the query string.
fn params_from_text(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| {
        ApiError::bad_request(format!(
            "parameter \"params\" must be JSON (an object or an array): {e}"
        ))
    })
}

/// Placeholder values from JSON: an object binds `$name`s, an array `$1`, `$2`, ...
fn query_params(params: Option<Value>) -> Result<QueryParams, ApiError> {
    Ok(match params {
        None | Some(Value::Null) => QueryParams::None,
        Some(Value::Object(values)) => QueryParams::Named(
            values
                .into_iter()
                .map(|(name, v)| Ok((name.clone(), scalar(v, &format!("${name}"))?)))
                .collect::<Result<BTreeMap<_, _>, ApiError>>()?,
        ),
        Some(Value::Array(values)) => QueryParams::Positional(
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| scalar(v, &format!("${}", i + 1)))
                .collect::<Result<_, _>>()?,
        ),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "\"params\" must be a JSON object (for $name placeholders) or an array (for $1, $2, ...), not {other}"
            )))
        }
    })
}

fn scalar(value: Value, placeholder: &str) -> Result<ScalarValue, ApiError> {
    Ok(match value {
        Value::Null => ScalarValue::Null,
        Value::Bool(b) => ScalarValue::Boolean(Some(b)),
        Value::String(s) => ScalarValue::Utf8(Some(s)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                ScalarValue::Int64(Some(i))
            } else if let Some(u) = n.as_u64() {
                ScalarValue::UInt64(Some(u))
            } else {
                ScalarValue::Float64(n.as_f64())
            }
        }
        Value::Array(_) | Value::Object(_) => {
            return Err(ApiError::bad_request(format!(
                "parameter {placeholder} must be a string, number, boolean or null"
            )))
        }
    })
}

/// An Arrow IPC stream body: schema, the first batch, then each batch as it is produced.
fn arrow_body(
    schema: &SchemaRef,
    first: Option<RecordBatch>,
    rest: SendableRecordBatchStream,
) -> Result<Body, ApiError> {
    let encode_error = |e: arrow::error::ArrowError| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode Arrow IPC: {e}"),
        )
    };
    let mut encoder = ArrowStreamEncoder::new(schema).map_err(encode_error)?;
    let mut head = encoder.take_bytes();
    if let Some(batch) = &first {
        head.extend(encoder.encode(batch).map_err(encode_error)?);
    }
    let state = (Some(encoder), rest);
    let tail = futures::stream::unfold(state, |(encoder, mut rest)| async move {
        let mut encoder = encoder?;
        let chunk = match rest.next().await {
            Some(Ok(batch)) => encoder.encode(&batch).map(|bytes| (bytes, Some(encoder))),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "query failed while streaming Arrow; aborting the response");
                return Some((Err(std::io::Error::other(e.to_string())), (None, rest)));
            }
            None => encoder.finish().map(|bytes| (bytes, None)),
        };
        match chunk {
            Ok((bytes, next)) => Some((Ok(Bytes::from(bytes)), (next, rest))),
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), (None, rest))),
        }
    });
    let body = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(head)) })
        .chain(tail);
    Ok(Body::from_stream(body))
}

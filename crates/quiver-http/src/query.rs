//! The SQL query endpoint: `GET|POST /api/v3/query_sql` with `db`, `q`, `format` (`json` by
//! default; also chosen by the `Accept` header) and `params` (a JSON object for `$name`
//! placeholders or an array for `$1`, `$2`, ...).
//!
//! Every query goes through the result cache; the response says `X-Quiver-Cache: HIT`, `MISS`
//! or `BYPASS`. `Cache-Control: no-cache` (or `no-store`) runs the query afresh and stores
//! nothing. Answers are cached per access scope (the caller's grants): a caller is answered
//! only if it may read every table the statement reads, before the cache is consulted.
//!
//! A cached answer is served as the ready bytes of the requested format (encoded once, on the
//! first request in that format). An uncached answer streams batch by batch as it is
//! computed, with backpressure (every format but `pretty`). Errors before the first row are
//! JSON error responses (404 for an unknown database or table, 400 for bad SQL, 422 over a
//! memory limit, 504 past a time limit, 499 when cancelled, 503 with `Retry-After` when the
//! query queue is full); an error after rows have been sent aborts the response, so a client
//! never mistakes a partial result for a whole one. A client that goes away stops its query.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use datafusion::execution::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};
use quiver_auth::Caller;
use quiver_query::{QueryControl, QueryProtocol};
use quiver_query::{QueryError, QueryOutput, QueryParams};
use quiver_service::{AnswerBody, CachedAnswer, QueryInvocation, QueryRequest};
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::AppState;
use crate::format::{Format, StreamEncoder};

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
    /// Seconds the query may run (a number; lowers `query_timeout_secs`, never raises it).
    timeout_secs: Option<Value>,
    /// `false`: answer from raw rows only, never from a rollup (or the result cache).
    use_rollups: Option<Value>,
    /// `off`, `auto` or `on`: where the query runs (the server's `distributed` otherwise).
    distributed: Option<String>,
}

/// `GET /api/v3/query_sql?db=&q=&format=&params=`
pub async fn query_get(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let request = body_from_params(&params)?;
    run(app, &caller, request, &headers, Language::Sql).await
}

/// `POST /api/v3/query_sql` with a JSON body `{"db": ..., "q": ..., "format": ..., "params": ...}`.
pub async fn query_post(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = read_query_body(&app, &params, &headers, body).await?;
    run(app, &caller, request, &headers, Language::Sql).await
}

/// A query's parameters from the query string.
fn body_from_params(params: &HashMap<String, String>) -> Result<QueryBody, ApiError> {
    Ok(QueryBody {
        db: params.get("db").cloned(),
        q: params.get("q").cloned(),
        format: params.get("format").cloned(),
        params: params
            .get("params")
            .map(|p| params_from_text(p))
            .transpose()?,
        timeout_secs: params.get("timeout_secs").map(|t| Value::String(t.clone())),
        use_rollups: params.get("use_rollups").map(|t| Value::String(t.clone())),
        distributed: params.get("distributed").cloned(),
    })
}

/// A query's JSON body, each parameter it lacks taken from the query string.
async fn read_query_body(
    app: &AppState,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<QueryBody, ApiError> {
    let bytes = super::body::read_body(headers, body, app.limits.max_request_bytes).await?;
    let request: QueryBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        QueryBody::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "request body must be JSON like {{\"db\": \"...\", \"q\": \"...\"}}: {e}"
            ))
        })?
    };
    let from_query = body_from_params(params)?;
    Ok(QueryBody {
        db: request.db.or(from_query.db),
        q: request.q.or(from_query.q),
        format: request.format.or(from_query.format),
        params: request.params.or(from_query.params),
        timeout_secs: request.timeout_secs.or(from_query.timeout_secs),
        use_rollups: request.use_rollups.or(from_query.use_rollups),
        distributed: request.distributed.or(from_query.distributed),
    })
}

/// The language of a query endpoint's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Language {
    /// `/api/v3/query_sql`.
    Sql,
    /// `/api/v3/query_influxql`: one InfluxQL statement, answered in InfluxDB 3's layout
    /// (`iox::measurement`, `time`, the grouped tags, the selected columns).
    Influxql,
}

/// `GET /api/v3/query_influxql?db=&q=&format=`.
pub async fn query_influxql_get(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let request = body_from_params(&params)?;
    run(app, &caller, request, &headers, Language::Influxql).await
}

/// `POST /api/v3/query_influxql` with a JSON body `{"db": ..., "q": ..., "format": ...}`.
pub async fn query_influxql_post(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = read_query_body(&app, &params, &headers, body).await?;
    run(app, &caller, request, &headers, Language::Influxql).await
}

async fn run(
    app: Arc<AppState>,
    caller: &Caller,
    request: QueryBody,
    headers: &HeaderMap,
    language: Language,
) -> Result<Response, ApiError> {
    let db = request
        .db
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("missing parameter \"db\""))?;
    let sql = request
        .q
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("missing parameter \"q\" (the query)"))?;
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
        scope: caller.scope().clone(),
        no_cache: asks_no_cache(headers),
        control: QueryControl {
            protocol: QueryProtocol::Http,
            timeout: timeout(request.timeout_secs)?,
            timeout_setting: "timeout_secs",
            grants: caller.read_grants(),
            skip_rollups: !use_rollups(request.use_rollups)?,
            distributed: request
                .distributed
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(ApiError::bad_request)?,
        },
    };
    let answer = match language {
        Language::Sql => app.queries.query(&query).await?,
        Language::Influxql => {
            if query.params != QueryParams::None {
                return Err(ApiError::bad_request(
                    "InfluxQL statements take no \"params\" (bound parameters are SQL's)",
                ));
            }
            let statement = crate::query_v1::single_statement(&app, &query.sql)?;
            let how = QueryInvocation {
                scope: &query.scope,
                no_cache: query.no_cache,
                control: &query.control,
            };
            app.queries
                .query_influxql(&query.database, statement, how)
                .await?
        }
    };
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

/// The `use_rollups` parameter: a switch ([`quiver_model::settings::parse_switch`], or a JSON
/// boolean); absent is `true`.
fn use_rollups(value: Option<Value>) -> Result<bool, ApiError> {
    let parsed = match &value {
        None => Some(true),
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::String(text)) => quiver_model::settings::parse_switch(text),
        Some(_) => None,
    };
    parsed.ok_or_else(|| {
        let given = value.map(|v| v.to_string()).unwrap_or_default();
        ApiError::bad_request(format!("use_rollups must be true or false, not {given}"))
    })
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

/// An answer computed as it is sent: the status goes out with the first batch (so a query
/// that fails before it still gets an error status and body), then each batch as it is
/// encoded, with backpressure from the client. A failure after rows were sent cuts the body
/// short (after a last error record, in JSON Lines), so a client never mistakes a partial
/// answer for a whole one.
async fn streamed_response(output: QueryOutput, format: Format) -> Result<Response, ApiError> {
    let mut stream = output.stream;
    let first = stream.try_next().await.map_err(QueryError::from)?;
    let content_type = [(header::CONTENT_TYPE, format.content_type())];
    let Some(mut encoder) = StreamEncoder::new(format, &output.schema).map_err(encode_error)?
    else {
        // `pretty` sizes its columns from the whole answer
        let mut batches: Vec<RecordBatch> = first.into_iter().collect();
        while let Some(batch) = stream.try_next().await.map_err(QueryError::from)? {
            batches.push(batch);
        }
        let schema = output.schema;
        let bytes = batches.iter().map(RecordBatch::get_array_memory_size).sum();
        let encoded =
            encode_off_the_workers(format, bytes, move || format.encode(&schema, &batches)).await?;
        return Ok((StatusCode::OK, content_type, encoded).into_response());
    };
    let mut head = encoder.head();
    if let Some(batch) = first {
        let (returned, bytes) = encode_batch(encoder, batch).await;
        encoder = returned;
        head.extend(bytes.map_err(encode_error)?);
    }
    let body = futures::stream::once(async move { Ok(Bytes::from(head)) })
        .chain(encoded_rest(encoder, stream));
    Ok((StatusCode::OK, content_type, Body::from_stream(body)).into_response())
}

/// The encoded bytes of the batches after the first, then the end of the answer; an error
/// (after the format's last error record, if it has one) ends the body abnormally.
fn encoded_rest(
    encoder: StreamEncoder,
    rest: SendableRecordBatchStream,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::unfold(Some((encoder, rest)), |state| async move {
        let (encoder, mut rest) = state?;
        let (items, next) = match rest.next().await {
            Some(Ok(batch)) => match encode_batch(encoder, batch).await {
                (encoder, Ok(bytes)) => (vec![Ok(Bytes::from(bytes))], Some((encoder, rest))),
                (_, Err(e)) => (vec![Err(std::io::Error::other(e.to_string()))], None),
            },
            Some(Err(e)) => {
                let message = ApiError::from(QueryError::from(e)).message();
                tracing::warn!(error = %message, "query failed while its answer streamed: cutting the response short");
                let record = encoder.error_record(&message).map(Bytes::from);
                return Some((failed_end(record, message).boxed(), None));
            }
            None => {
                let last = encoder
                    .finish()
                    .map(Bytes::from)
                    .map_err(|e| std::io::Error::other(e.to_string()));
                (vec![last], None)
            }
        };
        Some((futures::stream::iter(items).boxed(), next))
    })
    .flatten()
}

/// The end of an answer that failed: the format's error record, if it has one, then the
/// error, which ends the body abnormally. The error waits one turn of the scheduler, so that
/// the server writes the record out before it cuts the connection.
fn failed_end(
    record: Option<Bytes>,
    message: String,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::iter(record.map(Ok)).chain(futures::stream::once(async move {
        tokio::task::yield_now().await;
        Err(std::io::Error::other(message))
    }))
}

/// Encodes one batch, off the async workers if it is big; the encoder comes back with it.
async fn encode_batch(
    mut encoder: StreamEncoder,
    batch: RecordBatch,
) -> (StreamEncoder, Result<Vec<u8>, arrow::error::ArrowError>) {
    if batch.get_array_memory_size() <= INLINE_ENCODE_BYTES {
        let bytes = encoder.encode(&batch);
        return (encoder, bytes);
    }
    let encoded = tokio::task::spawn_blocking(move || {
        let bytes = encoder.encode(&batch);
        (encoder, bytes)
    });
    match encoded.await {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

fn encode_error(e: arrow::error::ArrowError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot encode the answer: {e}"),
    )
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

/// True if `Cache-Control` says `no-cache` or `no-store`.
pub(crate) fn asks_no_cache(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|directive| directive.trim().to_ascii_lowercase())
        .any(|d| d == "no-cache" || d == "no-store")
}

/// The time limit a request asks for: `timeout_secs`, a positive number of seconds (in the
/// query string or the JSON body).
fn timeout(value: Option<Value>) -> Result<Option<Duration>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let secs = match &value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match secs.and_then(|s| Duration::try_from_secs_f64(s).ok()) {
        Some(limit) if !limit.is_zero() => Ok(Some(limit)),
        _ => Err(ApiError::bad_request(format!(
            "\"timeout_secs\" must be a positive number of seconds, not {value}"
        ))),
    }
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
    QueryParams::from_json(params.unwrap_or(Value::Null)).map_err(ApiError::bad_request)
}

//! The SQL query endpoint: `GET|POST /api/v3/query_sql` with `db`, `q` and `format`
//! (`json` by default; also chosen by the `Accept` header).
//!
//! `format=arrow` streams an Arrow IPC stream batch by batch as the query produces it; the other
//! formats are encoded from the collected result. Errors before the first row are JSON error
//! responses (404 for an unknown database or table, 400 for bad SQL); an error after rows have
//! been sent aborts the response, so a client never mistakes a partial result for a whole one.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use datafusion::execution::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};
use quiver_query::QueryError;
use serde::Deserialize;

use super::error::ApiError;
use super::AppState;
use crate::format::{ArrowStreamEncoder, Format};

/// The JSON body of `POST /api/v3/query_sql` (query-string parameters are accepted too).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    db: Option<String>,
    q: Option<String>,
    format: Option<String>,
}

/// `GET /api/v3/query_sql?db=&q=&format=`
pub async fn query_get(
    State(app): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let request = QueryBody {
        db: params.get("db").cloned(),
        q: params.get("q").cloned(),
        format: params.get("format").cloned(),
    };
    run(app, request, &headers).await
}

/// `POST /api/v3/query_sql` with a JSON body `{"db": ..., "q": ..., "format": ...}`.
pub async fn query_post(
    State(app): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = super::body::read_body(&headers, body, app.max_request_bytes).await?;
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
    let output = app.engine.execute(&db, &sql).await?;
    let mut stream = output.stream;
    // Run the query up to its first batch before answering, so that most execution errors
    // still become a proper error status rather than a truncated body.
    let first = stream.try_next().await.map_err(QueryError::from)?;
    let content_type = [(header::CONTENT_TYPE, format.content_type())];
    if format == Format::Arrow {
        let body = arrow_body(&output.schema, first, stream)?;
        return Ok((StatusCode::OK, content_type, body).into_response());
    }
    let mut batches: Vec<_> = first.into_iter().collect();
    while let Some(batch) = stream.try_next().await.map_err(QueryError::from)? {
        batches.push(batch);
    }
    let schema = output.schema;
    let encoded = tokio::task::spawn_blocking(move || format.encode(&schema, &batches))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding task failed: {e}"),
            )
        })?
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the result as {format:?}: {e}"),
            )
        })?;
    Ok((StatusCode::OK, content_type, encoded).into_response())
}

/// An Arrow IPC stream body: schema, the first batch, then each batch as it is produced.
fn arrow_body(
    schema: &arrow::datatypes::SchemaRef,
    first: Option<arrow::array::RecordBatch>,
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

//! The running queries: `GET /api/v3/queries` lists those running and queued (`id`, `db`,
//! `sql`, `protocol`, `state`, `elapsed_secs`, `memory_bytes`), oldest first;
//! `DELETE /api/v3/queries/{id}` cancels one (its caller gets a "cancelled" error).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::AppState;

/// `GET /api/v3/queries`
pub async fn list(State(app): State<Arc<AppState>>) -> Response {
    let queries = app.queries.engine().governor().list();
    Json(serde_json::json!({ "queries": queries })).into_response()
}

/// `DELETE /api/v3/queries/{id}`
pub async fn kill(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("query id must be a number, not {id:?}")))?;
    if app.queries.engine().governor().kill(id) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no query {id} is running or queued"),
        ))
    }
}

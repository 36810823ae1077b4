//! The running queries: `GET /api/v3/queries` lists those running and queued (`id`, `db`,
//! `sql`, `protocol`, `state`, `elapsed_secs`, `memory_bytes`), oldest first;
//! `DELETE /api/v3/queries/{id}` cancels one (its caller gets a "cancelled" error). An admin
//! sees and cancels every query; a scoped token only its own (`token` names the caller).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use quiver_auth::Caller;
use quiver_query::governance::QueryInfo;

use super::error::ApiError;
use super::AppState;

/// `GET /api/v3/queries`
pub async fn list(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let mut queries = app.queries.engine().governor().list();
    queries.retain(|query| may_see(&caller, query));
    Json(serde_json::json!({ "queries": queries })).into_response()
}

/// True if `caller` may see (and cancel) `query`: admins every query, a token its own.
fn may_see(caller: &Caller, query: &QueryInfo) -> bool {
    caller.is_admin() || query.token.as_deref() == Some(caller.name())
}

/// `DELETE /api/v3/queries/{id}`
pub async fn kill(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("query id must be a number, not {id:?}")))?;
    let governor = app.queries.engine().governor();
    let visible = governor
        .list()
        .iter()
        .any(|query| query.id == id && may_see(&caller, query));
    if visible && governor.kill(id) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no query {id} is running or queued"),
        ))
    }
}

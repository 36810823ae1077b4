//! Rollups over HTTP: `POST /api/v3/configure/rollup` `{"db", "name", "sql"}` creates one
//! (backfilled in the background; answered at once with its state), `GET` lists them
//! (`?db=` for one database's) with their state, rows, bytes and lag, and
//! `DELETE ?db=&name=` drops one. A statement a rollup cannot keep exactly is a 400 saying
//! why. Queries use rollups without naming them ([`quiver_query::RollupRouter`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use quiver_auth::Caller;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::params::{check_params, required};
use super::AppState;

/// The body of `POST /api/v3/configure/rollup`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RollupRequest {
    /// The database of the rollup and its table.
    db: String,
    /// The rollup's name (a table name no table of the database has).
    name: String,
    /// `SELECT date_bin(...) AS time, <tags>, <aggregates> FROM <table> ... GROUP BY ...`.
    sql: String,
}

/// Creates a rollup: 200 with its state (`backfilling`), 400 for a statement that cannot
/// be kept exactly, 404 for a missing database or table, 409 for a name in use.
pub async fn create_rollup(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: RollupRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid request body: {e}; expected JSON such as {{\"db\": \"metrics\", \"name\": \"cpu_10m\", \
             \"sql\": \"SELECT date_bin(INTERVAL '10 minutes', time) AS time, host, max(usage) AS max_usage FROM cpu GROUP BY 1, 2\"}}"
        ))
    })?;
    let rollups = state.queries.engine().rollups();
    let info = rollups
        .create(&request.db, &request.name, &request.sql)
        .await
        .map_err(|e| ApiError::classified(&e))?;
    Ok(Json(json!(info)))
}

/// Lists the rollups the caller may see (of database `db`, if given).
pub async fn list_rollups(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["db"])?;
    let visible = caller.visible_databases();
    let rollups: Vec<_> = state
        .queries
        .engine()
        .rollups()
        .list(params.get("db").map(String::as_str))
        .into_iter()
        .filter(|info| visible.shows(&info.db))
        .collect();
    Ok(Json(json!(rollups)))
}

/// Drops a rollup (its base table keeps its rows).
pub async fn delete_rollup(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["db", "name"])?;
    let db = required(&params, "db")?;
    let name = required(&params, "name")?;
    state
        .queries
        .engine()
        .rollups()
        .drop_rollup(&db, &name)
        .map_err(|e| ApiError::classified(&e))?;
    Ok(Json(json!({ "db": db, "name": name, "dropped": true })))
}

//! Databases and tables over HTTP, in InfluxDB 3's shapes: `POST /api/v3/configure/database`
//! `{"db", "retention_period"}` creates a database, `PUT` changes its retention period, `GET`
//! lists databases, `DELETE ?db=` drops one with all its tables, and
//! `DELETE /api/v3/configure/table?db=&table=` drops one table. Drops and settings are durable
//! when the answer arrives; the storage layer ([`quiver_storage::Store`]) does the work.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use quiver_auth::Caller;
use quiver_storage::{Database, RetentionPeriod, StorageError, Store};
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking::run_blocking;
use super::error::ApiError;
use super::params::{check_params, required};
use super::AppState;

/// The body of `POST` and `PUT /api/v3/configure/database`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DatabaseRequest {
    /// The database.
    db: String,
    /// `30d`, `12h`, `none`, ...; absent: the server's `retention_period`.
    retention_period: Option<String>,
}

impl DatabaseRequest {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "invalid request body: {e}; expected JSON such as \
                     {{\"db\": \"metrics\", \"retention_period\": \"30d\"}}"
            ))
        })
    }

    fn retention(&self) -> Result<Option<RetentionPeriod>, ApiError> {
        self.retention_period
            .as_deref()
            .map(RetentionPeriod::parse)
            .transpose()
            .map_err(|e| ApiError::classified(&e))
    }
}

/// Creates a database: 200, or 409 if it exists.
pub async fn create_database(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request = DatabaseRequest::parse(&body)?;
    change_database(&state, request, Store::create_database).await
}

/// Changes a database's retention period (`retention_period` is required).
pub async fn update_database(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request = DatabaseRequest::parse(&body)?;
    if request.retention_period.is_none() {
        return Err(ApiError::bad_request(
            "retention_period is required: a duration such as \"30d\", or \"none\"",
        ));
    }
    change_database(&state, request, Store::set_retention).await
}

/// A store operation on a database and a retention period: create, or change the period.
type DatabaseChange =
    fn(&Store, &str, Option<RetentionPeriod>) -> Result<Arc<Database>, StorageError>;

/// Applies `change` with the request's database and retention period, then answers with the
/// database as the list shows it.
async fn change_database(
    state: &AppState,
    request: DatabaseRequest,
    change: DatabaseChange,
) -> Result<Json<Value>, ApiError> {
    let retention = request.retention()?;
    let db = request.db;
    let changed = run_blocking(&state.store, "configuration", move |store| {
        change(store, &db, retention)
    })
    .await?;
    Ok(Json(describe(&changed)))
}

/// Lists the databases with their retention periods and table counts.
pub async fn list_databases(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["format"])?;
    if let Some(format) = params.get("format").filter(|f| f.as_str() != "json") {
        return Err(ApiError::bad_request(format!(
            "unsupported format {format:?}: the database list is JSON"
        )));
    }
    let store = &state.store;
    let visible = caller.visible_databases();
    let databases = store
        .database_names()
        .iter()
        .filter(|name| visible.shows(name))
        .filter_map(|name| store.database(name))
        .map(|db| describe(&db))
        .collect();
    Ok(Json(Value::Array(databases)))
}

/// Drops a database with all its tables.
pub async fn delete_database(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["db"])?;
    let db = required(&params, "db")?;
    let name = db.clone();
    run_blocking(&state.store, "drop", move |store| {
        store.drop_database(&name)
    })
    .await?;
    Ok(Json(json!({ "db": db, "dropped": true })))
}

/// Drops one table of a database.
pub async fn delete_table(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["db", "table"])?;
    let db = required(&params, "db")?;
    let table = required(&params, "table")?;
    let (name, table_name) = (db.clone(), table.clone());
    run_blocking(&state.store, "drop", move |store| {
        store.drop_table(&name, &table_name)
    })
    .await?;
    Ok(Json(json!({ "db": db, "table": table, "dropped": true })))
}

/// A database as the list shows it.
fn describe(db: &Database) -> Value {
    json!({
        "db": db.name(),
        "retention_period": db.retention_period().to_string(),
        "retention_period_source": match db.retention_setting() {
            Some(_) => "database",
            None => "server",
        },
        "tables": db.table_names().len(),
    })
}

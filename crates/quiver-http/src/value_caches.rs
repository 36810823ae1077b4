//! InfluxDB 3's last-value and distinct-value cache API: `POST /api/v3/configure/last_cache`
//! `{"db", "table", "name"?, "key_columns"?, "value_columns"?, "count"?, "ttl"?}` and
//! `POST /api/v3/configure/distinct_cache` `{"db", "table", "name"?, "columns",
//! "max_cardinality"?, "max_age"?}` (201 created, 409 if it exists), `DELETE` of either with
//! `?db=&table=&name=`. The settings are durable; the values are what storage keeps anyway,
//! read through `last_cache()` and `distinct_cache()` in SQL.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use quiver_model::schema::ColumnType;
use quiver_storage::{Store, ValueCache, ValueCacheKind};
use serde::Deserialize;
use serde_json::{json, Value};

use super::blocking::run_blocking;
use super::error::ApiError;
use super::params::{check_params, required};
use super::AppState;

/// The body of `POST /api/v3/configure/last_cache`, as InfluxDB 3 takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LastCacheRequest {
    db: String,
    table: String,
    name: Option<String>,
    key_columns: Option<Vec<String>>,
    value_columns: Option<Vec<String>>,
    count: Option<usize>,
    /// Seconds.
    ttl: Option<u64>,
}

/// The body of `POST /api/v3/configure/distinct_cache`, as InfluxDB 3 takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DistinctCacheRequest {
    db: String,
    table: String,
    name: Option<String>,
    columns: Vec<String>,
    max_cardinality: Option<usize>,
    /// Seconds.
    max_age: Option<u64>,
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8], example: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid request body: {e}; expected JSON such as {example}"
        ))
    })
}

/// Creates a last-value cache (InfluxDB 3's defaults: [`ValueCacheKind::last`]).
pub async fn create_last_cache(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: LastCacheRequest = parse(
        &body,
        r#"{"db": "metrics", "table": "cpu", "key_columns": ["host"], "value_columns": ["usage"], "count": 1, "ttl": 14400}"#,
    )?;
    let columns = table_columns(&state.store, &request.db, &request.table)?;
    let kind = ValueCacheKind::last(
        &columns,
        request.key_columns,
        request.value_columns,
        request.count,
        request.ttl,
    );
    let name = request
        .name
        .unwrap_or_else(|| kind.default_name(&request.table));
    create(&state, request.db, request.table, name, kind).await
}

/// Creates a distinct-value cache (InfluxDB 3's defaults: [`ValueCacheKind::distinct`]).
pub async fn create_distinct_cache(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: DistinctCacheRequest = parse(
        &body,
        r#"{"db": "metrics", "table": "cpu", "columns": ["region", "host"], "max_cardinality": 1000, "max_age": 86400}"#,
    )?;
    let columns = table_columns(&state.store, &request.db, &request.table)?;
    let kind = ValueCacheKind::distinct(
        &columns,
        Some(request.columns),
        request.max_cardinality,
        request.max_age,
    );
    let name = request
        .name
        .unwrap_or_else(|| kind.default_name(&request.table));
    create(&state, request.db, request.table, name, kind).await
}

/// Deletes a last-value cache.
pub async fn delete_last_cache(
    state: State<Arc<AppState>>,
    params: Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    delete(state, params, "last").await
}

/// Deletes a distinct-value cache.
pub async fn delete_distinct_cache(
    state: State<Arc<AppState>>,
    params: Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    delete(state, params, "distinct").await
}

/// The table's columns and their types; 404 if there is no such table.
fn table_columns(
    store: &Store,
    db: &str,
    table: &str,
) -> Result<Vec<(String, ColumnType)>, ApiError> {
    let table = store
        .database(db)
        .and_then(|d| d.table(table))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("table {table:?} not found in database {db:?}"),
            )
        })?;
    Ok(table.columns())
}

async fn create(
    state: &AppState,
    db: String,
    table: String,
    name: String,
    kind: ValueCacheKind,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let cache = ValueCache {
        db,
        table,
        name,
        kind,
    };
    let answer = json!(cache);
    run_blocking(&state.store, "configuration", move |store| {
        store.create_value_cache(cache)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(answer)))
}

async fn delete(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    kind: &'static str,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["db", "table", "name"])?;
    let db = required(&params, "db")?;
    let table = required(&params, "table")?;
    let name = required(&params, "name")?;
    let (d, t, n) = (db.clone(), table.clone(), name.clone());
    run_blocking(&state.store, "configuration", move |store| {
        store.drop_value_cache(kind, &d, &t, &n)
    })
    .await?;
    Ok(Json(
        json!({ "db": db, "table": table, "name": name, "deleted": true }),
    ))
}

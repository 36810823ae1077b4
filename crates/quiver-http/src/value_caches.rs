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

/// Creates a last-value cache (defaults: the table's tags as keys, every other column as
/// values, a count of 1, a TTL of four hours).
pub async fn create_last_cache(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: LastCacheRequest = parse(
        &body,
        r#"{"db": "metrics", "table": "cpu", "key_columns": ["host"], "value_columns": ["usage"], "count": 1, "ttl": 14400}"#,
    )?;
    let columns = table_columns(&state.store, &request.db, &request.table)?;
    let key_columns = request.key_columns.unwrap_or_else(|| {
        columns
            .iter()
            .filter(|(_, tag)| *tag)
            .map(|(n, _)| n.clone())
            .collect()
    });
    let value_columns = request.value_columns.unwrap_or_else(|| {
        columns
            .iter()
            .filter(|(n, _)| n != "time" && !key_columns.contains(n))
            .map(|(n, _)| n.clone())
            .collect()
    });
    let name = request
        .name
        .unwrap_or_else(|| default_name(&request.table, &key_columns, "last_cache"));
    let kind = ValueCacheKind::Last {
        key_columns,
        value_columns,
        count: request.count.unwrap_or(1),
        ttl: request.ttl.unwrap_or(4 * 3600),
    };
    create(&state, request.db, request.table, name, kind).await
}

/// Creates a distinct-value cache (defaults: 100,000 combinations, values of the last day).
pub async fn create_distinct_cache(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: DistinctCacheRequest = parse(
        &body,
        r#"{"db": "metrics", "table": "cpu", "columns": ["region", "host"], "max_cardinality": 1000, "max_age": 86400}"#,
    )?;
    let name = request
        .name
        .unwrap_or_else(|| default_name(&request.table, &request.columns, "distinct_cache"));
    let kind = ValueCacheKind::Distinct {
        columns: request.columns,
        max_cardinality: request.max_cardinality.unwrap_or(100_000),
        max_age: request.max_age.unwrap_or(24 * 3600),
    };
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

/// The table's columns, each with whether it is a tag; 404 if there is no such table.
fn table_columns(store: &Store, db: &str, table: &str) -> Result<Vec<(String, bool)>, ApiError> {
    let table = store
        .database(db)
        .and_then(|d| d.table(table))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("table {table:?} not found in database {db:?}"),
            )
        })?;
    Ok(table
        .columns()
        .into_iter()
        .map(|(name, t)| (name, matches!(t, quiver_model::schema::ColumnType::Tag)))
        .collect())
}

/// InfluxDB 3's generated name: `<table>_<columns>_<suffix>`.
fn default_name(table: &str, columns: &[String], suffix: &str) -> String {
    let mut parts = vec![table.to_string()];
    parts.extend(columns.iter().cloned());
    parts.push(suffix.to_string());
    parts.join("_")
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

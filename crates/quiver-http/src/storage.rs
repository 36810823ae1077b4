//! Storage operations over HTTP: `POST /api/v3/persist` writes the whole write buffer to
//! Parquet now (before a backup, or to measure persistence), `POST /api/v3/compact` merges
//! the small and overlapping files of a database or table now, and `GET /api/v3/storage`
//! reports the WAL, persistence, compaction and chunk cache counters.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::blocking::run_blocking;
use super::error::ApiError;
use super::params::check_params;
use super::AppState;
use quiver_storage::Store;

/// Persists everything buffered and answers with what was written.
pub async fn persist(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let started = std::time::Instant::now();
    let summary = run_blocking(&state.store, "persist", Store::persist_now).await?;
    Ok(Json(json!({
        "tables": summary.tables,
        "files": summary.files,
        "rows": summary.rows,
        "parquet_bytes": summary.bytes,
        "buffer_bytes_released": summary.buffer_bytes,
        "persisted_through_seq": summary.through_seq,
        "wal_segments_removed": summary.wal_segments_removed,
        "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
    })))
}

/// Merges the small and overlapping files of every partition of `db` (all databases if
/// absent), or only of its `table`, now; answers with what was merged.
pub async fn compact(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_params(&params, &["db", "table"])?;
    let (database, table) = (params.get("db").cloned(), params.get("table").cloned());
    if table.is_some() && database.is_none() {
        return Err(ApiError::bad_request(
            "table needs db: POST /api/v3/compact?db=<database>&table=<table>",
        ));
    }
    let started = std::time::Instant::now();
    let summary = run_blocking(&state.store, "compaction", move |store| {
        store.compact_now(quiver_storage::CompactionScope {
            database: database.as_deref(),
            table: table.as_deref(),
        })
    })
    .await?;
    let mut answer = serde_json::to_value(summary).expect("a summary serializes");
    answer["elapsed_ms"] = json!(started.elapsed().as_secs_f64() * 1e3);
    Ok(Json(answer))
}

/// Where the data is, WAL, persistence (writer) or catalog following (query node),
/// compaction and chunk cache counters since start.
pub async fn stats(State(state): State<Arc<AppState>>) -> Json<Value> {
    let wal = state.store.wal_stats().map(|w| {
        json!({
            "records": w.records,
            "bytes": w.bytes,
            "group_commits": w.groups,
            "fsyncs": w.syncs,
        })
    });
    let persist = state.store.persist_stats().map(|p| {
        json!({
            "persists": p.persists,
            "files": p.files,
            "rows": p.rows,
            "parquet_bytes": p.bytes,
            "failures": p.failures,
            "buffered_bytes": p.buffered_bytes,
            "persist_at_bytes": p.persist_at_bytes,
            "buffer_limit_bytes": p.buffer_limit_bytes,
            "lag_seconds": p.unpersisted_for.unwrap_or_default().as_secs_f64(),
            "write_waits": p.write_waits,
            "write_waited_seconds": p.write_wait_time.as_secs_f64(),
            "write_refusals": p.write_refusals,
            "times": p.times,
        })
    });
    let chunk_cache =
        serde_json::to_value(state.store.chunk_cache().stats()).expect("counters serialize");
    let compaction = state
        .store
        .compaction_stats()
        .map(|c| serde_json::to_value(c).expect("counters serialize"));
    // a query node: how it follows the writer's catalog
    let following = state.store.follow_stats().map(|f| {
        json!({
            "catalog_version": f.catalog_version,
            "catalogs_applied": f.catalogs_applied,
            "last_check_ms_ago": f.last_check_ms_ago,
            "error": f.error,
        })
    });
    Json(json!({
        "data": state.store.data_location(),
        "wal": wal,
        "persistence": persist,
        "following": following,
        "compaction": compaction,
        "chunk_cache": chunk_cache,
    }))
}

//! Storage operations over HTTP: `POST /api/v3/persist` writes the whole write buffer to
//! Parquet now (before a backup, or to measure persistence), and `GET /api/v3/storage`
//! reports the WAL, persistence and chunk cache counters.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

/// Persists everything buffered and answers with what was written.
pub async fn persist(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let store = state.store.clone();
    let started = std::time::Instant::now();
    let summary = tokio::task::spawn_blocking(move || store.persist_now())
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the persist task did not finish: {e}"),
            )
        })??;
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

/// WAL, persistence and chunk cache counters since start.
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
        })
    });
    let chunks = state.store.chunk_cache().stats();
    let chunk_cache = json!({
        "hits": chunks.hits,
        "misses": chunks.misses,
        "evictions": chunks.evictions,
        "bytes": chunks.bytes,
        "entries": chunks.entries,
        "capacity_bytes": chunks.capacity_bytes,
    });
    Json(json!({ "wal": wal, "persistence": persist, "chunk_cache": chunk_cache }))
}

//! The result cache over HTTP: `GET /api/v3/cache` reports entries, bytes and counters (hits,
//! misses, hit ratio, evictions, ...) with the settings; `DELETE /api/v3/cache` drops every
//! entry.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::AppState;

/// The cache's counters and settings.
pub async fn stats(State(state): State<Arc<AppState>>) -> Json<Value> {
    let stats = state.queries.stats();
    let config = state.queries.config();
    let mut body = serde_json::to_value(&stats).expect("stats serialize");
    body["enabled"] = json!(config.enabled);
    body["max_entry_bytes"] = json!(config.max_entry_bytes);
    body["ttl_secs"] = json!(config.ttl.as_secs());
    body["idle_secs"] = json!(config.idle.as_secs());
    body["clock_granularity_secs"] = json!(config.clock_granularity.map(|g| g.as_secs()));
    body["reuse_parts"] = json!(config.reuse_parts);
    Json(body)
}

/// Drops every cached answer; answers with how many there were.
pub async fn clear(State(state): State<Arc<AppState>>) -> Json<Value> {
    let cleared = state.queries.clear();
    tracing::info!(cleared, "result cache cleared");
    Json(json!({ "cleared": cleared }))
}

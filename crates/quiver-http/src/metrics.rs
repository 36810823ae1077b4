//! Prometheus metrics: `GET /metrics` in the text exposition format, and the counts and
//! latencies of HTTP requests ([`observe`]).
//!
//! What happens per request is recorded where it happens, through the `metrics` facade:
//! requests and latencies per protocol and endpoint (here, in `quiver-flight` and
//! `quiver-pgwire`), authentication failures and rate-limit refusals (`quiver-auth`),
//! ingested rows (`quiver-storage`). Counters the layers keep themselves (the WAL's group
//! commits and fsyncs, persistence, compaction, both caches, the query governor) are read
//! at each scrape ([`record_layer_stats`]).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use quiver_query::governance::QueryState;

use super::AppState;

/// Request latency buckets, in seconds: from a cache hit (~0.1 ms) to a long query.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// The name of the request counter every protocol records.
pub const REQUESTS: &str = "quiver_requests_total";
/// The name of the request latency histogram every protocol records.
pub const REQUEST_SECONDS: &str = "quiver_request_duration_seconds";

/// Installs the process-wide Prometheus recorder (once, at start-up) and describes the
/// metrics; the handle renders them.
pub fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    describe();
    Ok(handle)
}

fn describe() {
    describe_counter!(
        REQUESTS,
        "Requests answered, by protocol, endpoint and status."
    );
    describe_histogram!(
        REQUEST_SECONDS,
        metrics::Unit::Seconds,
        "Time to answer a request (to the first byte of a streamed answer), by protocol and endpoint."
    );
    for (name, help) in [
        (
            "quiver_ingest_rows_total",
            "Rows written (every write API and Flight SQL ingest).",
        ),
        (
            "quiver_ingest_bytes_total",
            "Request bytes of writes, as received.",
        ),
        (
            "quiver_auth_failures_total",
            "Failed authentications, by reason.",
        ),
        (
            "quiver_rate_limited_total",
            "Requests refused by a rate limit, by limit.",
        ),
        (
            "quiver_tls_handshake_failures_total",
            "TLS handshakes that failed or timed out (untrusting clients, scanners, plain-text clients on a TLS port), by protocol.",
        ),
        ("quiver_wal_records_total", "WAL records written."),
        ("quiver_wal_bytes_total", "WAL bytes written."),
        (
            "quiver_wal_group_commits_total",
            "WAL group commits (records per group = records / group commits).",
        ),
        (
            "quiver_wal_fsyncs_total",
            "fdatasync calls on WAL segments.",
        ),
        (
            "quiver_persist_total",
            "Completed persists of the write buffer to Parquet.",
        ),
        ("quiver_persist_failures_total", "Failed persists."),
        (
            "quiver_write_buffer_waits_total",
            "Writes that found the write buffer full and waited for a persist.",
        ),
        (
            "quiver_write_buffer_refusals_total",
            "Writes refused with 503 after waiting max_buffer_wait_secs for buffer space.",
        ),
        (
            "quiver_persist_files_total",
            "Parquet files written by persists.",
        ),
        ("quiver_persist_rows_total", "Rows persisted to Parquet."),
        (
            "quiver_persist_bytes_total",
            "Parquet bytes written by persists.",
        ),
        ("quiver_compactions_total", "Compaction merges."),
        (
            "quiver_compaction_failures_total",
            "Failed compaction merges.",
        ),
        (
            "quiver_compaction_files_in_total",
            "Files merged away by compaction.",
        ),
        (
            "quiver_compaction_bytes_out_total",
            "Bytes written by compaction.",
        ),
        (
            "quiver_result_cache_hits_total",
            "Answers served from the result cache.",
        ),
        (
            "quiver_result_cache_misses_total",
            "Cacheable queries not in the result cache.",
        ),
        (
            "quiver_result_cache_bypasses_total",
            "Queries that skipped the result cache.",
        ),
        (
            "quiver_result_cache_evictions_total",
            "Result cache entries evicted.",
        ),
        (
            "quiver_result_cache_partial_hits_total",
            "Queries answered in part from reused time parts (PARTIAL).",
        ),
        (
            "quiver_result_cache_part_rows_reused_total",
            "Partial-result rows taken from reused time parts.",
        ),
        (
            "quiver_result_cache_part_rows_computed_total",
            "Partial-result rows computed by queries that could reuse time parts.",
        ),
        (
            "quiver_chunk_cache_hits_total",
            "Parquet metadata and chunk lookups served from the chunk cache.",
        ),
        (
            "quiver_chunk_cache_misses_total",
            "Parquet metadata and chunk lookups that read the file.",
        ),
        (
            "quiver_chunk_cache_evictions_total",
            "Chunk cache entries evicted.",
        ),
        (
            "quiver_plan_cache_hits_total",
            "Queries run from the kept plan of the same statement.",
        ),
        (
            "quiver_plan_cache_misses_total",
            "Queries whose plan could have been kept but was made anew.",
        ),
        (
            "quiver_plan_cache_physical_hits_total",
            "Queries run from the kept physical plan of the same statement over the same rows.",
        ),
        (
            "quiver_catalogs_applied_total",
            "Catalog versions a query node applied (its first load included).",
        ),
    ] {
        describe_counter!(name, help);
    }
    for (name, help) in [
        (
            "quiver_write_buffer_bytes",
            "Bytes in the write buffer, not yet persisted.",
        ),
        (
            "quiver_write_buffer_persist_bytes",
            "The write buffer's size at which a persist starts (persist_buffer_bytes).",
        ),
        (
            "quiver_write_buffer_limit_bytes",
            "The write buffer's size at which writes wait for a persist (max_buffer_bytes).",
        ),
        (
            "quiver_persist_lag_seconds",
            "How long the oldest acknowledged write not yet in Parquet has waited (0: none).",
        ),
        (
            "quiver_write_buffer_waited_seconds",
            "Seconds writes have waited for buffer space since start, summed.",
        ),
        (
            "quiver_persist_step_seconds",
            "Seconds persists spent in each step (merge, encode, store) since start, summed.",
        ),
        (
            "quiver_compaction_step_seconds",
            "Seconds compactions spent in each step (read, merge, encode, store) since start, \
             summed.",
        ),
        ("quiver_parquet_files", "Parquet files the catalog names."),
        (
            "quiver_persist_failing",
            "1 while the last persist failed (writes are still acknowledged from the WAL), else 0.",
        ),
        (
            "quiver_catalog_version",
            "The catalog version this node writes (writer) or answers from (query node).",
        ),
        (
            "quiver_catalog_check_age_seconds",
            "Seconds since the object store last answered a query node's catalog check.",
        ),
        (
            "quiver_catalog_follow_failing",
            "1 while a query node cannot read the writer's newest catalog, else 0.",
        ),
        ("quiver_result_cache_bytes", "Bytes the result cache holds."),
        (
            "quiver_result_cache_entries",
            "Entries the result cache holds.",
        ),
        (
            "quiver_result_cache_part_bytes",
            "Bytes the result cache's time parts hold.",
        ),
        ("quiver_chunk_cache_bytes", "Bytes the chunk cache holds."),
        ("quiver_plan_cache_plans", "Plans the plan cache holds."),
        (
            "quiver_plan_cache_physical_plans",
            "Physical plans the plan cache holds (with the rows they read).",
        ),
        ("quiver_queries_running", "Queries running now."),
        ("quiver_queries_queued", "Queries waiting for a slot now."),
        (
            "quiver_query_memory_reserved_bytes",
            "Bytes the running queries' operators hold (their memory pools).",
        ),
        (
            "quiver_process_resident_bytes",
            "The server process's resident memory (absent where the platform does not say).",
        ),
    ] {
        describe_gauge!(name, help);
    }
}

/// `GET /metrics`
pub async fn scrape(State(app): State<Arc<AppState>>) -> Response {
    let Some(handle) = &app.metrics else {
        return (
            axum::http::StatusCode::NOT_FOUND,
            "metrics are not enabled in this process",
        )
            .into_response();
    };
    record_layer_stats(&app);
    handle.run_upkeep();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// Sets `name{step=…}` to the seconds spent in each step of writing files.
fn record_step_times(name: &'static str, times: &quiver_storage::WriteTimes) {
    for (step, seconds) in [
        ("read", times.read_seconds),
        ("merge", times.merge_seconds),
        ("encode", times.encode_seconds),
        ("store", times.store_seconds),
    ] {
        gauge!(name, "step" => step).set(seconds);
    }
}

/// Sets the counters and gauges the layers keep themselves.
fn record_layer_stats(app: &AppState) {
    let store = &app.store;
    if let Some(wal) = store.wal_stats() {
        counter!("quiver_wal_records_total").absolute(wal.records);
        counter!("quiver_wal_bytes_total").absolute(wal.bytes);
        counter!("quiver_wal_group_commits_total").absolute(wal.groups);
        counter!("quiver_wal_fsyncs_total").absolute(wal.syncs);
    }
    if let Some(persist) = store.persist_stats() {
        counter!("quiver_persist_total").absolute(persist.persists);
        counter!("quiver_persist_failures_total").absolute(persist.failures);
        counter!("quiver_persist_files_total").absolute(persist.files);
        counter!("quiver_persist_rows_total").absolute(persist.rows);
        counter!("quiver_persist_bytes_total").absolute(persist.bytes);
        gauge!("quiver_write_buffer_bytes").set(persist.buffered_bytes as f64);
        gauge!("quiver_write_buffer_persist_bytes").set(persist.persist_at_bytes as f64);
        gauge!("quiver_write_buffer_limit_bytes").set(persist.buffer_limit_bytes as f64);
        let lag = persist.unpersisted_for.unwrap_or_default();
        gauge!("quiver_persist_lag_seconds").set(lag.as_secs_f64());
        counter!("quiver_write_buffer_waits_total").absolute(persist.write_waits);
        counter!("quiver_write_buffer_refusals_total").absolute(persist.write_refusals);
        record_step_times("quiver_persist_step_seconds", &persist.times);
        gauge!("quiver_write_buffer_waited_seconds").set(persist.write_wait_time.as_secs_f64());
        gauge!("quiver_persist_failing").set(u8::from(persist.last_error.is_some()) as f64);
        gauge!("quiver_catalog_version").set(persist.catalog_version as f64);
    }
    if let Some(follow) = store.follow_stats() {
        gauge!("quiver_catalog_version").set(follow.catalog_version as f64);
        gauge!("quiver_catalog_check_age_seconds").set(follow.last_check_ms_ago as f64 / 1e3);
        gauge!("quiver_catalog_follow_failing").set(u8::from(follow.error.is_some()) as f64);
        counter!("quiver_catalogs_applied_total").absolute(follow.catalogs_applied);
    }
    if let Some(compaction) = store.compaction_stats() {
        counter!("quiver_compactions_total").absolute(compaction.done.compactions);
        counter!("quiver_compaction_failures_total").absolute(compaction.failures);
        counter!("quiver_compaction_files_in_total").absolute(compaction.done.files_in);
        counter!("quiver_compaction_bytes_out_total").absolute(compaction.done.bytes_out);
        gauge!("quiver_parquet_files").set(compaction.files as f64);
        record_step_times("quiver_compaction_step_seconds", &compaction.times);
    }
    let chunks = store.chunk_cache().stats();
    counter!("quiver_chunk_cache_hits_total").absolute(chunks.hits);
    counter!("quiver_chunk_cache_misses_total").absolute(chunks.misses);
    counter!("quiver_chunk_cache_evictions_total").absolute(chunks.evictions);
    gauge!("quiver_chunk_cache_bytes").set(chunks.bytes as f64);
    let plans = app.queries.engine().plan_cache_stats();
    counter!("quiver_plan_cache_hits_total").absolute(plans.hits);
    counter!("quiver_plan_cache_misses_total").absolute(plans.misses);
    gauge!("quiver_plan_cache_plans").set(plans.plans as f64);
    counter!("quiver_plan_cache_physical_hits_total").absolute(plans.physical_hits);
    gauge!("quiver_plan_cache_physical_plans").set(plans.physical_plans as f64);
    let cache = app.queries.stats();
    counter!("quiver_result_cache_hits_total").absolute(cache.hits);
    counter!("quiver_result_cache_misses_total").absolute(cache.misses);
    counter!("quiver_result_cache_bypasses_total").absolute(cache.bypasses);
    counter!("quiver_result_cache_evictions_total").absolute(cache.evictions);
    gauge!("quiver_result_cache_bytes").set(cache.bytes as f64);
    gauge!("quiver_result_cache_entries").set(cache.entries as f64);
    counter!("quiver_result_cache_partial_hits_total").absolute(cache.partial_hits);
    counter!("quiver_result_cache_part_rows_reused_total").absolute(cache.part_rows_reused);
    counter!("quiver_result_cache_part_rows_computed_total").absolute(cache.part_rows_computed);
    gauge!("quiver_result_cache_part_bytes").set(cache.part_bytes as f64);
    let queries = app.queries.engine().governor().list();
    let running = queries
        .iter()
        .filter(|q| q.state == QueryState::Running)
        .count();
    gauge!("quiver_queries_running").set(running as f64);
    gauge!("quiver_queries_queued").set((queries.len() - running) as f64);
    let governor = app.queries.engine().governor();
    gauge!("quiver_query_memory_reserved_bytes").set(governor.reserved_bytes() as f64);
    if let Some(resident) = quiver_model::machine::resident_bytes() {
        gauge!("quiver_process_resident_bytes").set(resident as f64);
    }
}

/// Counts each HTTP request and its latency by endpoint (the route, never the raw path:
/// unknown paths are one `unmatched` endpoint) and status.
pub(crate) async fn observe(request: Request, next: Next) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    counter!(REQUESTS, "protocol" => "http", "endpoint" => endpoint.clone(), "status" => status)
        .increment(1);
    histogram!(REQUEST_SECONDS, "protocol" => "http", "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
    response
}

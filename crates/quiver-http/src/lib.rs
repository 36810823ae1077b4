//! `quiver-http` is Quiver's HTTP API (axum): InfluxDB-compatible writes (line protocol v1, v2
//! and v3), Arc-compatible MessagePack and Arrow IPC ingest, SQL queries in every output format
//! ([`format`]), storage and cache operations, health, and the web console (`console`: its
//! assets at `/`). It extracts what a request says, hands
//! it to the store or the result cache, and maps their errors to statuses by kind
//! ([`status_of`]); it knows nothing of the other protocols.

mod auth;
mod blocking;
mod body;
mod cache;
mod configure;
mod console;
mod error;
pub mod format;
pub mod metrics;
mod params;
mod queries;
mod query;
mod query_v1;
mod rollup;
mod storage;
mod value_caches;
mod write;
mod write_arrow;
mod write_msgpack;

use std::sync::Arc;

use axum::http::{header, HeaderName, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use axum::{middleware, Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use quiver_auth::Authenticator;
use quiver_model::RequestLimits;
use quiver_service::QueryService;
use quiver_storage::Store;

pub use error::{status_of, ApiError};
pub use query::CACHE_HEADER;
pub use write::{LINES_REJECTED_HEADER, LINES_WRITTEN_HEADER};

/// What every handler shares.
pub struct AppState {
    /// Who requests act for: tokens, the auth mode, rate limits.
    pub auth: Arc<Authenticator>,
    /// All databases.
    pub store: Arc<Store>,
    /// The SQL engine over `store`, behind the result cache.
    pub queries: Arc<QueryService>,
    /// Largest request body (compressed or not) and most line errors listed in one write
    /// response.
    pub limits: RequestLimits,
    /// Renders `/metrics` (`None`: no recorder is installed in this process).
    pub metrics: Option<PrometheusHandle>,
    /// The server's `role` as configured (`all`, `query`), which `/health` names.
    pub role: &'static str,
}

/// The server's routes. Serve them with
/// [`Router::into_make_service_with_connect_info`]`::<SocketAddr>` (the `auth` mode needs
/// the client's address: without it every client counts as remote).
pub fn router(state: Arc<AppState>) -> Router {
    let public = Router::new()
        .route("/health", get(health))
        .route("/ping", get(ping).head(ping))
        .route("/", get(console::index))
        .route("/console/{*file}", get(console::asset));
    let admin = Router::new()
        .route("/api/v3/persist", post(storage::persist))
        .route("/api/v3/compact", post(storage::compact))
        .route("/api/v3/storage", get(storage::stats))
        .route("/api/v3/cache", get(cache::stats).delete(cache::clear))
        .route(
            "/api/v3/configure/database",
            post(configure::create_database)
                .put(configure::update_database)
                .delete(configure::delete_database),
        )
        .route("/api/v3/configure/table", delete(configure::delete_table))
        .route(
            "/api/v3/configure/rollup",
            post(rollup::create_rollup).delete(rollup::delete_rollup),
        )
        .route(
            "/api/v3/configure/last_cache",
            post(value_caches::create_last_cache).delete(value_caches::delete_last_cache),
        )
        .route(
            "/api/v3/configure/distinct_cache",
            post(value_caches::create_distinct_cache).delete(value_caches::delete_distinct_cache),
        )
        .route(
            "/api/v3/configure/token",
            get(auth::list_tokens)
                .post(auth::create_token)
                .delete(auth::revoke_token),
        )
        .route_layer(middleware::from_fn(auth::require_admin));
    let callers = Router::new()
        .route("/api/v3/write_lp", post(write::write_v3))
        .route("/api/v2/write", post(write::write_v2))
        .route("/write", post(write::write_v1))
        .route("/api/v3/write_arrow", post(write_arrow::write_arrow))
        .route("/api/v1/write/msgpack", post(write_msgpack::write_msgpack))
        .route(
            "/api/v3/query_sql",
            get(query::query_get).post(query::query_post),
        )
        .route(
            "/api/v3/query_influxql",
            get(query::query_influxql_get).post(query::query_influxql_post),
        )
        .route("/query", get(query_v1::query_v1).post(query_v1::query_v1))
        .route("/metrics", get(metrics::scrape))
        .route("/api/v3/queries", get(queries::list))
        .route("/api/v3/queries/{id}", delete(queries::kill))
        .route("/api/v3/configure/database", get(configure::list_databases))
        .route("/api/v3/configure/rollup", get(rollup::list_rollups))
        .merge(admin)
        .fallback(not_found)
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    public
        .merge(callers)
        .layer(middleware::from_fn(metrics::observe))
        .with_state(state)
}

/// Liveness and what needs an operator: `pass`; `warn` (200) while persisting fails on the
/// writer (writes are still acknowledged from the WAL, up to `max_buffer_bytes`); `fail`
/// (503) while a query node cannot know its answers are current. Names the role and where
/// the data is.
async fn health(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> impl IntoResponse {
    let store = &state.store;
    let mut body = serde_json::json!({
        "status": "pass",
        "version": env!("CARGO_PKG_VERSION"),
        "role": state.role,
        "data": store.data_location(),
    });
    let mut status = StatusCode::OK;
    if let Some(persist) = store.persist_stats() {
        body["catalog_version"] = persist.catalog_version.into();
        if let Some(error) = persist.last_error {
            body["status"] = "warn".into();
            body["persistence_error"] = error.into();
        }
    }
    if let Some(follow) = store.follow_stats() {
        body["catalog_version"] = follow.catalog_version.into();
        body["last_catalog_check_ms_ago"] = follow.last_check_ms_ago.into();
        if let Some(error) = follow.error {
            body["catalog_follow_error"] = error.into();
            body["status"] = "warn".into();
        }
    }
    if let Err(e) = store.check_current() {
        body["status"] = "fail".into();
        body["error"] = e.to_string().into();
        status = StatusCode::SERVICE_UNAVAILABLE;
    }
    (status, [(header::CACHE_CONTROL, "no-store")], Json(body))
}

/// InfluxDB clients probe `/ping` for liveness and the server version.
async fn ping() -> impl IntoResponse {
    (
        StatusCode::NO_CONTENT,
        [
            (
                HeaderName::from_static("x-influxdb-version"),
                concat!("quiver-", env!("CARGO_PKG_VERSION")),
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
    )
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {}", uri.path()),
    )
}

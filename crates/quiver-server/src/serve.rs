//! `quiver serve`: logging, the store and query engine, the HTTP, Flight SQL and PostgreSQL
//! listeners, graceful shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use axum::serve::ListenerExt;
use quiver_auth::{AuthMode, Authenticator, TokenStore};
use quiver_distributed::roles::{run_executor, run_scheduler, ExecutorSettings, RoleError};
use quiver_flight::{GrpcMetricsLayer, QuiverFlightService, QuiverFlightSql};
use quiver_http::{self as http, AppState};
use quiver_pgwire::{PgServer, PostgresCatalog};
use quiver_query::QueryEngine;
use quiver_service::QueryService;
use quiver_storage::{Store, StoreOptions};
use quiver_tls::{Protocol, ServerTls, TlsIncoming};
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat, Role};
use crate::token_sharing;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The log filter in the configuration is not valid `tracing` syntax.
    #[error("log_filter {filter:?} is invalid: {source}")]
    LogFilter {
        /// The configured filter.
        filter: String,
        /// The parser's complaint.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A file-system or socket operation failed; `context` says which.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// The store could not be opened (WAL replay failed, data directory unusable).
    #[error("cannot open the data directory: {0}")]
    Storage(#[from] quiver_storage::StorageError),
    /// The query engine could not be built.
    #[error("cannot start the query engine: {0}")]
    Query(#[from] quiver_query::QueryError),
}

impl From<RoleError> for ServeError {
    fn from(e: RoleError) -> Self {
        match e {
            RoleError::Config(message) => ServeError::Config(message),
            RoleError::Io { context, source } => ServeError::Io { context, source },
        }
    }
}

/// Runs this process as Ballista's scheduler or one of its executors (`role`) until SIGTERM
/// or Ctrl-C, on the tables' files in `object_store_url` (the writer's).
async fn serve_cluster_role(config: &Config) -> Result<(), ServeError> {
    let url = &config.store.object_store_url;
    if url.is_empty() {
        return Err(ServeError::Config(format!(
            "role = {} works on the files of object_store_url: set it to the writer's",
            config.role.name()
        )));
    }
    let files = quiver_storage::shared_files(url)?;
    if config.role == Role::Scheduler {
        return Ok(run_scheduler(&config.query.scheduler_addr, files, shutdown_signal()).await?);
    }
    let settings = ExecutorSettings {
        executor_addr: config.executor_addr.clone(),
        scheduler_addr: config.query.scheduler_addr.clone(),
        data_dir: config.store.data_dir.clone(),
        object_store_url: url.clone(),
    };
    Ok(run_executor(&settings, files).await?)
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
    let context = context.into();
    move |source| ServeError::Io { context, source }
}

/// Runs the server until SIGTERM or Ctrl-C, then drains in-flight requests and returns.
pub fn run(config: Config) -> Result<(), ServeError> {
    init_logging(&config)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("quiver")
        .thread_stack_size(quiver_query::statement_limits::THREAD_STACK_BYTES)
        .build()
        .map_err(io_error("cannot start the async runtime"))?
        .block_on(serve(config))
}

fn init_logging(config: &Config) -> Result<(), ServeError> {
    let filter =
        EnvFilter::try_new(&config.log_filter).map_err(|source| ServeError::LogFilter {
            filter: config.log_filter.clone(),
            source,
        })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if config.log_format == LogFormat::Json {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}

async fn serve(config: Config) -> Result<(), ServeError> {
    let Some(access) = config.role.store_access() else {
        return serve_cluster_role(&config).await;
    };
    let started = std::time::Instant::now();
    let store_options = StoreOptions {
        access,
        ..config.store.clone()
    };
    let (store, opened) = Store::open(config.limits.clone(), store_options)?;
    tracing::info!(
        parquet_files = opened.files,
        persisted_through_seq = opened.persisted_through_seq,
        orphaned_files_removed = opened.orphans_removed,
        wal_segments = opened.replay.segments,
        wal_records = opened.replay.records,
        wal_records_applied = opened.replayed_records,
        wal_bytes = opened.replay.bytes,
        last_sequence = opened.replay.last_seq,
        torn_tail = ?opened.replay.truncated_at,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "storage opened: catalog loaded, WAL replayed"
    );
    if !config.store.wal.fsync {
        tracing::warn!(
            "wal_fsync = false: acknowledged writes can be lost on a power cut or OS crash"
        );
    }
    let postgres_catalog = PostgresCatalog::new(store.clone())
        .map_err(|e| ServeError::Config(format!("cannot build the PostgreSQL catalog: {e}")))?;
    let mut query_options = config.query.clone();
    tracing::info!(
        query_memory_bytes = query_options.memory_limit_bytes,
        max_server_memory_bytes = query_options.max_server_memory_bytes,
        max_value_bytes = query_options.max_value_bytes,
        query_timeout_secs = query_options.query_timeout_secs,
        query_stall_timeout_secs = query_options.query_stall_timeout_secs,
        max_concurrent_queries = query_options.concurrent_queries(),
        max_queued_queries = query_options.max_queued_queries,
        max_sql_bytes = query_options.max_sql_bytes,
        max_sql_depth = query_options.max_sql_depth,
        allocator = crate::allocator::NAME,
        "query governance"
    );
    query_options.session_setup.push(Arc::new(postgres_catalog));
    let engine = Arc::new(QueryEngine::new(store.clone(), query_options)?);
    let cache = config.cache.clone();
    tracing::info!(
        enabled = cache.enabled,
        capacity_bytes = cache.capacity_bytes,
        max_entry_bytes = cache.max_entry_bytes,
        "result cache"
    );
    let queries = QueryService::new(engine, cache);
    let data_dir = store.data_dir().unwrap_or(&config.store.data_dir);
    token_sharing::take_over_before_serving(&store, data_dir)
        .map_err(|e| ServeError::Config(format!("cannot take over the writer's tokens: {e}")))?;
    let auth = start_auth(&config, data_dir)?;
    token_sharing::follow(&store, auth.tokens().clone())
        .map_err(|e| ServeError::Config(format!("cannot follow the writer's tokens: {e}")))?;
    let token_sharing = token_sharing::start_publishing(store.clone(), auth.tokens().clone())
        .map_err(io_error("cannot start publishing the tokens".to_string()))?;
    let tls = start_tls(&config)?;
    let metrics = http::metrics::install().map_err(ServeError::Config)?;
    let state = Arc::new(AppState {
        metrics: Some(metrics),
        auth: auth.clone(),
        store: store.clone(),
        queries: queries.clone(),
        limits: config.requests.clone(),
        role: config.role.name(),
    });
    let listener = tokio::net::TcpListener::bind(&config.http_addr)
        .await
        .map_err(io_error(format!(
            "cannot listen for HTTP on {}",
            config.http_addr
        )))?;
    let flight_listener = tokio::net::TcpListener::bind(&config.flight_addr)
        .await
        .map_err(io_error(format!(
            "cannot listen for Arrow Flight SQL on {}",
            config.flight_addr
        )))?;
    let pg_listener = tokio::net::TcpListener::bind(&config.pg_addr)
        .await
        .map_err(io_error(format!(
            "cannot listen for the PostgreSQL wire protocol on {}",
            config.pg_addr
        )))?;
    tracing::info!(
        http_addr = %config.http_addr,
        flight_addr = %config.flight_addr,
        pg_addr = %config.pg_addr,
        data_dir = %store.data_dir().unwrap_or(&config.store.data_dir).display(),
        version = env!("CARGO_PKG_VERSION"),
        "quiver is serving"
    );
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    let postgres = Arc::new(PgServer::new(
        store.clone(),
        queries.clone(),
        auth.clone(),
        tls.as_ref().map(|tls| tls.acceptor(Protocol::Postgres)),
    ))
    .serve(pg_listener, stopped(stopping.clone()));
    let flight_sql = QuiverFlightSql::new(
        store.clone(),
        queries,
        auth,
        config.requests.max_request_bytes,
    );
    let flight_service = QuiverFlightService::new(flight_sql);
    let flight_server = || {
        FlightServiceServer::new(flight_service.clone())
            .max_decoding_message_size(config.requests.max_request_bytes)
            .max_encoding_message_size(usize::MAX)
    };
    let grpc_on_http = tonic::service::Routes::new(flight_server())
        .prepare()
        .into_axum_router()
        .layer(GrpcMetricsLayer);
    let flight = flight_server();
    let flight = tonic::transport::Server::builder()
        .layer(GrpcMetricsLayer)
        .add_service(flight);
    let flight_stopped = stopped(stopping.clone());
    let flight = async {
        match &tls {
            Some(tls) => {
                let incoming = TlsIncoming::new(flight_listener, tls, Protocol::Grpc)?;
                flight
                    .serve_with_incoming_shutdown(incoming.into_stream(), flight_stopped)
                    .await
            }
            None => {
                flight
                    .serve_with_incoming_shutdown(
                        accepted_connections(flight_listener),
                        flight_stopped,
                    )
                    .await
            }
        }
        .map_err(std::io::Error::other)
    };
    let app = with_grpc(http::router(state), grpc_on_http)
        .into_make_service_with_connect_info::<SocketAddr>();
    let http = async {
        match &tls {
            Some(tls) => {
                let incoming = TlsIncoming::new(listener, tls, Protocol::Http)?;
                // tap_io: axum gives a listener's address type as ConnectInfo through it
                axum::serve(incoming.tap_io(|_| ()), app)
                    .with_graceful_shutdown(stopped(stopping))
                    .await
            }
            None => {
                // Without TCP_NODELAY, an answer written in two pieces (headers and a first
                // chunk, then the rest) waits for the client's delayed ACK: 40 ms on a
                // keep-alive connection. axum::serve does not set it.
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped(stopping))
                    .await
            }
        }
    };
    let (http, flight, ()) = tokio::join!(http, flight, postgres);
    http.map_err(io_error("HTTP server failed"))?;
    flight.map_err(io_error("Arrow Flight SQL server failed"))?;
    token_sharing.stop();
    store.close();
    if let Some(wal) = store.wal_stats() {
        tracing::info!(
            records = wal.records,
            bytes = wal.bytes,
            group_commits = wal.groups,
            fsyncs = wal.syncs,
            "WAL totals since start"
        );
    }
    if let Some(persist) = store.persist_stats() {
        tracing::info!(
            persists = persist.persists,
            files = persist.files,
            rows = persist.rows,
            parquet_bytes = persist.bytes,
            failures = persist.failures,
            buffered_bytes = persist.buffered_bytes,
            "persistence totals since start"
        );
    }
    tracing::info!("quiver stopped");
    Ok(())
}

/// The token store of `data_dir` and the authenticator over it; refuses to start a server
/// reachable from the network with no way to authenticate (see [`quiver_auth::check_startup`]).
fn start_auth(config: &Config, data_dir: &Path) -> Result<Arc<Authenticator>, ServeError> {
    let tokens = TokenStore::open(data_dir)
        .map_err(|e| ServeError::Config(format!("cannot read the tokens: {e}")))?;
    let binds: Vec<SocketAddr> = [&config.http_addr, &config.flight_addr, &config.pg_addr]
        .into_iter()
        .filter_map(|addr| addr.parse().ok())
        .collect();
    let mode = config.auth.auth;
    quiver_auth::check_startup(mode, &binds, &tokens, data_dir).map_err(ServeError::Config)?;
    let token_count = tokens.list().len();
    match mode {
        AuthMode::Loopback => tracing::warn!(
            tokens = token_count,
            "auth = loopback: clients on this machine are served without a token; set auth = \"required\" to ask every client for one"
        ),
        AuthMode::Disabled => tracing::warn!(
            "auth = disabled: every client may read and write everything without a token"
        ),
        AuthMode::Required => tracing::info!(tokens = token_count, "auth = required"),
    }
    Ok(Arc::new(Authenticator::new(
        config.auth.clone(),
        Arc::new(tokens),
    )))
}

/// The TLS identity of `tls_cert_file` / `tls_key_file`, if set; warns when a listener is
/// reachable from the network without it.
fn start_tls(config: &Config) -> Result<Option<ServerTls>, ServeError> {
    if config.tls_cert_file.as_os_str().is_empty() {
        let exposed: Vec<&str> = [&config.http_addr, &config.flight_addr, &config.pg_addr]
            .into_iter()
            .filter(|addr| {
                addr.parse::<SocketAddr>()
                    .is_ok_and(|addr| !quiver_auth::is_loopback(addr.ip()))
            })
            .map(String::as_str)
            .collect();
        if !exposed.is_empty() {
            tracing::warn!(
                listeners = ?exposed,
                "no TLS: tokens and data cross the network in the clear; set tls_cert_file and tls_key_file"
            );
        }
        return Ok(None);
    }
    let tls = ServerTls::load(&config.tls_cert_file, &config.tls_key_file)
        .map_err(|e| ServeError::Config(format!("cannot serve TLS: {e}")))?;
    tracing::info!(
        certificate = %tls.describe(),
        "TLS on HTTP, Arrow Flight SQL and PostgreSQL (re-read when the files change)"
    );
    Ok(Some(tls))
}

/// Resolves once `stopping` turns true.
async fn stopped(mut stopping: tokio::sync::watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// The connections `listener` accepts, as tonic serves them.
fn accepted_connections(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| {
            let _ = stream.set_nodelay(true);
            stream
        });
        Some((accepted, listener))
    })
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested: finishing in-flight requests");
}

/// `http` with gRPC requests (`content-type: application/grpc…`, HTTP/2) sent to `grpc`
/// instead, with the client's address where tonic looks for it: the InfluxDB 3 client libraries
/// query over Flight on the host and port they write to.
fn with_grpc(http: axum::Router, grpc: axum::Router) -> axum::Router {
    use tower::ServiceExt as _;
    http.layer(axum::middleware::from_fn(
        move |mut request: axum::extract::Request, next: axum::middleware::Next| {
            let grpc = grpc.clone();
            let peer = request
                .extensions()
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|info| info.0);
            request
                .extensions_mut()
                .insert(tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: peer,
                });
            async move {
                let is_grpc = request
                    .headers()
                    .get(axum::http::header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
                match is_grpc {
                    true => match grpc.oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    },
                    false => next.run(request).await,
                }
            }
        },
    ))
}

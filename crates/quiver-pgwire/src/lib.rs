//! `quiver-pgwire` is Quiver's PostgreSQL wire protocol (`pg_addr`, 127.0.0.1:5433 by default):
//! what `psql`, psycopg,
//! pgjdbc (DBeaver), Grafana's PostgreSQL data source and every language's Postgres driver speak.
//!
//! - Authentication ([`startup`]): the user is a token's name and the password its secret,
//!   checked with SCRAM-SHA-256; loopback clients log in without one where the `auth` mode
//!   allows. Every statement checks that the session's token is still valid, may read what
//!   the statement reads (`42501` otherwise) and is within its rate limit (`53400`).
//! - The database is the connection's `dbname` (it must exist: `3D000` otherwise).
//! - Simple and extended query protocol, named statements and portals, text and binary
//!   parameters and results, pipelining, cancel requests, `SET` / `SHOW` / `BEGIN` / `COMMIT`
//!   for drivers (see [`statement`]); errors carry SQLSTATE codes ([`errors`]).
//! - `pg_catalog` and the PostgreSQL functions clients call ([`pg_catalog`], [`table_visibility`]).
//! - Queries go through the result cache with the same keys as HTTP and Flight SQL.
//!
//! A broken or malicious connection only ends itself: each connection is its own task.

mod cancel;
mod connection;
mod errors;
mod handler;
mod kept_rows;
mod pg_catalog;
mod settings;
mod startup;
mod statement;
mod table_visibility;

use std::sync::Arc;

use quiver_auth::Authenticator;
use quiver_service::QueryService;
use quiver_storage::Store;
use tokio::net::TcpListener;

pub use pg_catalog::PostgresCatalog;

use cancel::CancelRegistry;
use handler::PgHandler;
use startup::Startup;

/// The handlers every connection uses (they keep per-connection state in the connection; see
/// [`connection`] for the message loop).
pub struct PgServer {
    handler: Arc<PgHandler>,
    startup: Arc<Startup>,
    cancels: Arc<CancelRegistry>,
    tls: Option<quiver_tls::TlsAcceptor>,
}

impl PgServer {
    /// A server answering from `queries` over `store`, to the callers `auth` admits; with
    /// `tls`, clients may (and clients on other machines must) encrypt.
    pub fn new(
        store: Arc<Store>,
        queries: Arc<QueryService>,
        auth: Arc<Authenticator>,
        tls: Option<quiver_tls::TlsAcceptor>,
    ) -> Self {
        let cancels = Arc::new(CancelRegistry::default());
        PgServer {
            handler: Arc::new(PgHandler::new(queries, auth.clone())),
            startup: Arc::new(Startup::new(store, auth, cancels.clone())),
            cancels,
            tls,
        }
    }

    /// Accepts connections on `listener` until `stopping` resolves; then stops accepting and
    /// closes open sessions (their statements only read, so nothing is lost).
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        stopping: impl std::future::Future<Output = ()>,
    ) {
        let mut sessions = tokio::task::JoinSet::new();
        tokio::pin!(stopping);
        loop {
            tokio::select! {
                () = &mut stopping => break,
                accepted = listener.accept() => match accepted {
                    Ok((socket, peer)) => {
                        let server = self.clone();
                        sessions.spawn(async move {
                            if let Err(e) = connection::serve(socket, server).await {
                                tracing::debug!(%peer, error = %e, "PostgreSQL connection ended");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot accept a PostgreSQL connection");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
                Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            }
        }
        sessions.shutdown().await;
    }
}

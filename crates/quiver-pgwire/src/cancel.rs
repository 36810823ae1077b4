//! Query cancellation. A client cancels by opening a new connection and sending the process id
//! and secret key it was given at startup (`BackendKeyData`); the query its session is running
//! at that moment stops with SQLSTATE `57014` and the session stays usable.
//!
//! pgwire's own cancellation only interrupts the handler's future, but DataFusion does most of
//! its work while the rows are streamed to the client, after that future has returned. So each
//! session registers a [`SessionCancel`] here, and a running query watches it both while it is
//! computed and while its rows are sent.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use pgwire::api::cancel::CancelHandler;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::sync::watch;

type SessionKey = (i32, Bytes);

/// The sessions that can be cancelled, by process id and secret key.
#[derive(Default)]
pub(super) struct CancelRegistry {
    sessions: Mutex<HashMap<SessionKey, Arc<SessionCancel>>>,
}

/// One session's cancel signal: a counter bumped by each cancel request.
pub(super) struct SessionCancel {
    requests: watch::Sender<u64>,
}

/// Keeps a session registered while the connection lives (held in the connection's session
/// extensions, dropped with it).
pub(super) struct Registration {
    registry: Weak<CancelRegistry>,
    key: SessionKey,
    /// The session's signal.
    pub(super) cancel: Arc<SessionCancel>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.sessions.lock().remove(&self.key);
        }
    }
}

impl CancelRegistry {
    /// Registers the session with `pid` and `secret`; it is unregistered when the returned
    /// registration is dropped.
    pub(super) fn register(self: &Arc<Self>, pid: i32, secret: &SecretKey) -> Registration {
        let key = (pid, secret.to_bytes());
        let cancel = Arc::new(SessionCancel {
            requests: watch::channel(0).0,
        });
        self.sessions.lock().insert(key.clone(), cancel.clone());
        Registration {
            registry: Arc::downgrade(self),
            key,
            cancel,
        }
    }
}

#[async_trait]
impl CancelHandler for CancelRegistry {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let session = self.sessions.lock().get(&key).cloned();
        match session {
            Some(session) => {
                tracing::debug!(pid = request.pid, "PostgreSQL cancel request");
                session.requests.send_modify(|n| *n += 1);
            }
            // A wrong key is ignored silently, as PostgreSQL does.
            None => tracing::debug!(pid = request.pid, "cancel request for no known session"),
        }
    }
}

/// What a running query watches: resolves once a cancel request arrives after the query
/// started (requests from before it do not count).
#[derive(Clone)]
pub(super) struct CancelSignal(watch::Receiver<u64>);

impl SessionCancel {
    /// The signal for a query starting now.
    pub(super) fn signal(&self) -> CancelSignal {
        CancelSignal(self.requests.subscribe())
    }
}

impl CancelSignal {
    /// Resolves when the query is cancelled (never, if the session is gone).
    pub(super) async fn cancelled(mut self) {
        if self.0.changed().await.is_err() {
            futures::future::pending::<()>().await;
        }
    }

    /// Runs `work` unless the query is cancelled first (then `57014`).
    pub(super) async fn run<T>(
        &self,
        work: impl std::future::Future<Output = PgWireResult<T>>,
    ) -> PgWireResult<T> {
        tokio::select! {
            result = work => result,
            () = self.clone().cancelled() => Err(PgWireError::QueryCanceled),
        }
    }

    /// `rows`, ending with `57014` if the query is cancelled while they are sent.
    pub(super) fn guard<S, T>(self, rows: S) -> impl Stream<Item = PgWireResult<T>> + Send
    where
        S: Stream<Item = PgWireResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let cancelled = Box::pin(self.cancelled());
        futures::stream::unfold(
            (Box::pin(rows), Some(cancelled)),
            |(mut rows, cancelled)| async move {
                let mut cancelled = cancelled?;
                tokio::select! {
                    biased;
                    () = &mut cancelled => Some((Err(PgWireError::QueryCanceled), (rows, None))),
                    row = rows.next() => row.map(|row| (row, (rows, Some(cancelled)))),
                }
            },
        )
    }
}

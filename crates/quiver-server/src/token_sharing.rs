//! Query nodes use the writer's tokens: with a shared store (`object_store_url`), the writer
//! publishes its token file (names, grants and digests of the secrets, never a secret) to
//! the store whenever it changes, and every query node takes it over, once before it starts
//! serving and then every [`SHARE_INTERVAL`]. A token created or revoked on the writer works
//! or stops working on every query node within about two intervals.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use quiver_auth::TokenStore;
use quiver_storage::{Store, StoreAccess};

/// How often the token file is published (writer) or taken over (query node).
pub const SHARE_INTERVAL: Duration = Duration::from_secs(1);

/// The token file's name among the shared documents.
const SHARED_TOKENS: &str = "tokens.json";

/// What was last published or taken over, so that an unchanged file costs nothing.
#[derive(Default)]
pub struct TokenSharing {
    last: Option<Vec<u8>>,
}

impl TokenSharing {
    /// Publishes the writer's tokens, or takes them over on a query node, if they changed.
    pub fn share(&mut self, store: &Store, tokens: &TokenStore) -> Result<(), String> {
        match store.access() {
            StoreAccess::Writer => {
                let bytes = tokens.export().map_err(|e| e.to_string())?;
                if self.last.as_ref() != Some(&bytes) {
                    store
                        .publish(SHARED_TOKENS, bytes.clone().into())
                        .map_err(|e| e.to_string())?;
                    self.last = Some(bytes);
                }
            }
            StoreAccess::Follower => {
                let Some(bytes) = store.published(SHARED_TOKENS).map_err(|e| e.to_string())? else {
                    return Ok(());
                };
                if self.last.as_deref() != Some(&bytes[..]) {
                    if tokens.replace_all(&bytes).map_err(|e| e.to_string())? {
                        tracing::info!("took over the writer's tokens");
                    }
                    self.last = Some(bytes.to_vec());
                }
            }
        }
        Ok(())
    }
}

/// On a query node, takes over the writer's tokens in `data_dir` before the node serves (so
/// `auth = required` finds them); nothing to do on the writer or without a shared store.
pub fn take_over_before_serving(store: &Store, data_dir: &Path) -> Result<(), String> {
    if store.access() != StoreAccess::Follower {
        return Ok(());
    }
    let tokens = TokenStore::open(data_dir).map_err(|e| e.to_string())?;
    TokenSharing::default().share(store, &tokens)
}

/// The thread that shares the tokens; [`SharingThread::stop`] ends it.
#[derive(Default)]
pub struct SharingThread {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SharingThread {
    /// Ends the sharing (after a share under way) and waits for the thread.
    pub fn stop(mut self) {
        *self.stop.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Shares the tokens every [`SHARE_INTERVAL`] on a thread of its own until stopped (a
/// failure is logged and tried again); nothing to do without a shared store.
pub fn start(store: Arc<Store>, tokens: Arc<TokenStore>) -> std::io::Result<SharingThread> {
    if !store.shares_data() {
        return Ok(SharingThread::default());
    }
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new()
        .name("quiver-tokens".into())
        .spawn(move || {
            let mut sharing = TokenSharing::default();
            let (flag, wake) = &*stopped;
            loop {
                if let Err(e) = sharing.share(&store, &tokens) {
                    tracing::warn!(error = %e, "could not share the tokens through the object store");
                }
                let stopping = flag.lock().unwrap_or_else(PoisonError::into_inner);
                let (stopping, _) = wake
                    .wait_timeout_while(stopping, SHARE_INTERVAL, |stop| !*stop)
                    .unwrap_or_else(PoisonError::into_inner);
                if *stopping {
                    return;
                }
            }
        })?;
    Ok(SharingThread {
        stop,
        thread: Some(thread),
    })
}

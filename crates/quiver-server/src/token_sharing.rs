//! Query nodes use the writer's tokens: with a shared store (`object_store_url`), the writer
//! publishes its token file (names, grants and digests of the secrets, never a secret) to
//! the store whenever it changes (looking every [`SHARE_INTERVAL`], since `quiver token` may
//! change it from another process), and every query node takes it over, once before it
//! starts serving and then from the loop that follows the writer's catalog
//! ([`quiver_storage::Store::follow_published`]). A token created or revoked on the writer
//! works or stops working on every query node within about two intervals.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use quiver_auth::TokenStore;
use quiver_storage::{Store, StoreAccess};

/// How often the writer looks for a changed token file to publish.
pub const SHARE_INTERVAL: Duration = Duration::from_secs(1);

/// The token file's name among the shared documents.
const SHARED_TOKENS: &str = "tokens.json";

/// Makes `tokens` (of a query node) those of the writer's published file: `Ok(false)` if
/// they already are.
fn take_over(tokens: &TokenStore, published: &[u8]) -> Result<bool, String> {
    let changed = tokens.replace_all(published).map_err(|e| e.to_string())?;
    if changed {
        tracing::info!("took over the writer's tokens");
    }
    Ok(changed)
}

/// On a query node, takes over the writer's tokens in `data_dir` before the node serves (so
/// `auth = required` finds them); nothing to do on the writer or without a shared store.
pub fn take_over_before_serving(store: &Store, data_dir: &Path) -> Result<(), String> {
    if store.access() != StoreAccess::Follower {
        return Ok(());
    }
    let Some(published) = store.published(SHARED_TOKENS).map_err(|e| e.to_string())? else {
        return Ok(());
    };
    let tokens = TokenStore::open(data_dir).map_err(|e| e.to_string())?;
    take_over(&tokens, &published).map(|_| ())
}

/// On a query node, keeps `tokens` those of the writer from the loop that follows its
/// catalog; nothing to do on the writer or without a shared store.
pub fn follow(store: &Store, tokens: Arc<TokenStore>) -> Result<(), String> {
    let apply = Box::new(move |published: &[u8]| take_over(&tokens, published).map(|_| ()));
    store
        .follow_published(SHARED_TOKENS, apply)
        .map_err(|e| e.to_string())
}

/// The writer's thread that publishes the tokens; [`SharingThread::stop`] ends it.
#[derive(Default)]
pub struct SharingThread {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SharingThread {
    /// Ends the publishing (after one under way) and waits for the thread.
    pub fn stop(mut self) {
        *self.stop.0.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// On the writer, publishes the tokens whenever they changed, looking every
/// [`SHARE_INTERVAL`] on a thread of its own until stopped (a failure is logged and tried
/// again); nothing to do on a query node or without a shared store.
pub fn start_publishing(
    store: Arc<Store>,
    tokens: Arc<TokenStore>,
) -> std::io::Result<SharingThread> {
    if !store.shares_data() || store.access() != StoreAccess::Writer {
        return Ok(SharingThread::default());
    }
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new()
        .name("quiver-tokens".into())
        .spawn(move || {
            let mut published: Option<Vec<u8>> = None;
            let (flag, wake) = &*stopped;
            loop {
                if let Err(e) = publish(&store, &tokens, &mut published) {
                    tracing::warn!(error = %e, "could not publish the tokens to the object store");
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

/// Publishes the writer's tokens if they changed since `published`.
fn publish(
    store: &Store,
    tokens: &TokenStore,
    published: &mut Option<Vec<u8>>,
) -> Result<(), String> {
    let bytes = tokens.export().map_err(|e| e.to_string())?;
    if published.as_ref() != Some(&bytes) {
        store
            .publish(SHARED_TOKENS, bytes.clone().into())
            .map_err(|e| e.to_string())?;
        *published = Some(bytes);
    }
    Ok(())
}

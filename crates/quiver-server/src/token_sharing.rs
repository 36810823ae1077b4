//! Query nodes use the writer's tokens: with a shared store (`object_store_url`), the writer
//! publishes its token file (names, grants and digests of the secrets, never a secret) to
//! the store whenever it changes, and every query node takes it over, once before it starts
//! serving and then every [`SHARE_INTERVAL`]. A token created or revoked on the writer works
//! or stops working on every query node within about two intervals.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quiver_auth::TokenStore;
use quiver_storage::{Role, Store};

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
        match store.role() {
            Role::All => {
                let bytes = tokens.export().map_err(|e| e.to_string())?;
                if self.last.as_ref() != Some(&bytes) {
                    store
                        .publish(SHARED_TOKENS, bytes.clone().into())
                        .map_err(|e| e.to_string())?;
                    self.last = Some(bytes);
                }
            }
            Role::Query => {
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
            // a scheduler or an executor opens no store (and takes no tokens)
            Role::Scheduler | Role::Executor => {}
        }
        Ok(())
    }
}

/// On a query node, takes over the writer's tokens in `data_dir` before the node serves (so
/// `auth = required` finds them); nothing to do on the writer or without a shared store.
pub fn take_over_before_serving(store: &Store, data_dir: &Path) -> Result<(), String> {
    if store.role() != Role::Query {
        return Ok(());
    }
    let tokens = TokenStore::open(data_dir).map_err(|e| e.to_string())?;
    TokenSharing::default().share(store, &tokens)
}

/// Shares the tokens every [`SHARE_INTERVAL`] on a thread of its own, while the process runs
/// (a failure is logged and tried again); nothing to do without a shared store.
pub fn start(store: Arc<Store>, tokens: Arc<TokenStore>) -> std::io::Result<()> {
    if !store.shares_data() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("quiver-tokens".into())
        .spawn(move || {
            let mut sharing = TokenSharing::default();
            loop {
                if let Err(e) = sharing.share(&store, &tokens) {
                    tracing::warn!(error = %e, "could not share the tokens through the object store");
                }
                std::thread::sleep(SHARE_INTERVAL);
            }
        })
        .map(|_| ())
}

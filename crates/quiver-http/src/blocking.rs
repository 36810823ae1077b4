//! Work that would block an async worker (decoding a body, file writes and fsyncs, a
//! persist) runs on tokio's blocking threads through here.

use std::sync::Arc;

use axum::http::StatusCode;
use quiver_storage::{StorageError, Store};

use super::error::ApiError;

/// Runs `work` (named `what` in the error if its task dies) on a blocking thread.
pub(crate) async fn off_the_workers<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the {what} task did not finish: {e}"),
        )
    })?
}

/// Runs a store `operation` on a blocking thread; a storage error becomes the status of its
/// kind.
pub(crate) async fn run_blocking<T: Send + 'static>(
    store: &Arc<Store>,
    what: &str,
    operation: impl FnOnce(&Store) -> Result<T, StorageError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = store.clone();
    off_the_workers(what, move || {
        operation(&store).map_err(|e| ApiError::classified(&e))
    })
    .await
}

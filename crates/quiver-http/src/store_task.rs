//! What the storage and configuration endpoints share: running a store operation that blocks
//! (file writes, fsyncs, a persist) off the async workers, and checking the query parameters
//! of endpoints that take a fixed set of them.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use quiver_storage::{StorageError, Store};

use super::error::ApiError;

/// Runs `operation` (named `what` in the error if its task dies) on a blocking thread; a
/// storage error becomes the status of its kind.
pub(crate) async fn run_blocking<T: Send + 'static>(
    store: &Arc<Store>,
    what: &str,
    operation: impl FnOnce(&Store) -> Result<T, StorageError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || operation(&store))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the {what} task did not finish: {e}"),
            )
        })?
        .map_err(|e| ApiError::classified(&e))
}

/// 400 naming the first parameter that is not one of `known`.
pub(crate) fn check_params(
    params: &HashMap<String, String>,
    known: &[&str],
) -> Result<(), ApiError> {
    match params.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "unknown parameter {unknown:?}: this endpoint takes {}",
                known.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The parameter `name`, or 400 saying it is required and how the endpoint is called.
pub(crate) fn required(
    params: &HashMap<String, String>,
    name: &str,
    usage: &str,
) -> Result<String, ApiError> {
    params.get(name).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{name} is required: {usage}"),
        )
    })
}

//! Query parameters every endpoint reads the same way: required ones, and the fixed set an
//! endpoint takes.

use std::collections::HashMap;

use super::error::ApiError;

/// The parameter `name`, trimmed; 400 if it is missing or empty.
pub(crate) fn required(params: &HashMap<String, String>, name: &str) -> Result<String, ApiError> {
    match params.get(name).map(|s| s.trim()) {
        Some(value) if !value.is_empty() => Ok(value.to_string()),
        _ => Err(ApiError::bad_request(format!(
            "missing query parameter {name:?}"
        ))),
    }
}

/// 400 naming the first parameter that is not one of `known`.
pub(crate) fn check_params(
    params: &HashMap<String, String>,
    known: &[&str],
) -> Result<(), ApiError> {
    match params.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::bad_request(format!(
            "unknown parameter {unknown:?}: this endpoint takes {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

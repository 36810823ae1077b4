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

/// Parameters every endpoint accepts: InfluxDB 1's credentials (`u`, `p`), read when the
/// request is authenticated.
const CREDENTIAL_PARAMS: [&str; 2] = ["u", "p"];

/// 400 naming the first parameter that is not one of `known` (or a credential).
pub(crate) fn check_params(
    params: &HashMap<String, String>,
    known: &[&str],
) -> Result<(), ApiError> {
    let unknown =
        |k: &&String| !known.contains(&k.as_str()) && !CREDENTIAL_PARAMS.contains(&k.as_str());
    match params.keys().find(unknown) {
        Some(unknown) => Err(ApiError::bad_request(format!(
            "unknown parameter {unknown:?}: this endpoint takes {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

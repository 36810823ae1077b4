//! HTTP errors: a status and an InfluxDB-3-shaped JSON body (`{"error": "...", "data": ...}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use quiver_model::{Classify, ErrorKind};
use quiver_query::QueryError;
use quiver_storage::StorageError;
use serde_json::{json, Value};

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Value,
    /// Seconds after which a retry may succeed (`Retry-After`), for errors a retry can cure.
    retry_after: Option<u32>,
    /// The kind of failure of a lower layer's error; `None` for the HTTP layer's own errors
    /// (whose status says what they are).
    kind: Option<ErrorKind>,
}

/// Seconds a client refused because the server is busy is asked to wait.
const BUSY_RETRY_AFTER_SECS: u32 = 1;

/// The status of a request cancelled by its client or an operator (nginx's "client closed
/// request"; no standard code says "cancelled").
const CANCELLED: u16 = 499;

impl ApiError {
    /// An error with a message and no details.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: json!({ "error": message.into() }),
            retry_after: None,
            kind: None,
        }
    }

    /// An error with a message and structured details under `data`.
    pub fn with_data(status: StatusCode, message: impl Into<String>, data: Value) -> Self {
        ApiError {
            status,
            body: json!({ "error": message.into(), "data": data }),
            retry_after: None,
            kind: None,
        }
    }

    /// The error message.
    pub fn message(&self) -> String {
        match self.body.get("error") {
            Some(Value::String(message)) => message.clone(),
            _ => self.body.to_string(),
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// An error of a lower layer, with the status of its kind.
    pub fn classified(e: &(impl Classify + ?Sized)) -> Self {
        let mut error = ApiError::new(status_of(e.kind()), e.to_string());
        error.kind = Some(e.kind());
        if e.kind() == ErrorKind::Busy {
            error.retry_after = Some(BUSY_RETRY_AFTER_SECS);
        }
        error
    }
}

/// The HTTP status of each kind of failure: the one place HTTP decides it.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        // a query over its memory or value limit fails again if retried: not a 503
        ErrorKind::LimitExceeded | ErrorKind::ResourcesExhausted => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        ErrorKind::TimedOut => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Cancelled => StatusCode::from_u16(CANCELLED).expect("a valid status code"),
        ErrorKind::Busy | ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = self.kind.unwrap_or(if self.status.is_server_error() {
            ErrorKind::Internal
        } else {
            ErrorKind::Invalid
        });
        kind.log_failure("http", &self.body.to_string());
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"quiver\""),
            );
        }
        response
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        ApiError::classified(&e)
    }
}

impl From<std::sync::Arc<QueryError>> for ApiError {
    fn from(e: std::sync::Arc<QueryError>) -> Self {
        ApiError::classified(e.as_ref())
    }
}

impl From<&QueryError> for ApiError {
    fn from(e: &QueryError) -> Self {
        ApiError::classified(e)
    }
}

impl From<quiver_auth::AuthError> for ApiError {
    fn from(e: quiver_auth::AuthError) -> Self {
        let mut error = ApiError::classified(&e);
        if let Some(wait) = e.retry_after() {
            error.retry_after =
                Some(u32::try_from(quiver_auth::retry_secs(wait)).unwrap_or(u32::MAX));
        }
        error
    }
}

impl From<quiver_auth::TokenError> for ApiError {
    fn from(e: quiver_auth::TokenError) -> Self {
        ApiError::classified(&e)
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        ApiError::classified(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: StorageError) -> StatusCode {
        ApiError::from(e).status
    }

    #[test]
    fn storage_errors_keep_their_statuses() {
        let limit = StorageError::TooManyDatabases { limit: 1 };
        assert_eq!(status(limit), StatusCode::UNPROCESSABLE_ENTITY);
        let too_large = quiver_storage::WalError::RecordTooLarge { size: 2, limit: 1 };
        assert_eq!(
            status(StorageError::Wal(too_large)),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        let closed = quiver_storage::WalError::Closed("fsync failed".into());
        assert_eq!(
            status(StorageError::Wal(closed)),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status(StorageError::Closed),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let missing = StorageError::io(
            std::path::Path::new("/d/tables/x.parquet"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(status(missing), StatusCode::INTERNAL_SERVER_ERROR);
        let conflict = StorageError::SchemaConflict {
            table: "t".into(),
            column: "c".into(),
            existing: "float".into(),
            written: "string".into(),
        };
        assert_eq!(status(conflict), StatusCode::BAD_REQUEST);
    }
}

//! HTTP errors: a status and an InfluxDB-3-shaped JSON body (`{"error": "...", "data": ...}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use quiver_query::QueryError;
use quiver_storage::{StorageError, WalError};
use serde_json::{json, Value};

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Value,
}

impl ApiError {
    /// An error with a message and no details.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: json!({ "error": message.into() }),
        }
    }

    /// An error with a message and structured details under `data`.
    pub fn with_data(status: StatusCode, message: impl Into<String>, data: Value) -> Self {
        ApiError {
            status,
            body: json!({ "error": message.into(), "data": data }),
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// The same error for a gRPC caller: the status mapped to the nearest gRPC code.
    pub fn to_grpc(&self) -> tonic::Status {
        let message = self.body["error"].as_str().unwrap_or("request failed");
        match self.status {
            StatusCode::NOT_FOUND => tonic::Status::not_found(message),
            StatusCode::SERVICE_UNAVAILABLE => tonic::Status::unavailable(message),
            status if status.is_client_error() => tonic::Status::invalid_argument(message),
            _ => tonic::Status::internal(message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, body = %self.body, "request failed");
        } else {
            tracing::debug!(status = %self.status, body = %self.body, "request rejected");
        }
        (self.status, Json(self.body)).into_response()
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        ApiError::from(&e)
    }
}

impl From<std::sync::Arc<QueryError>> for ApiError {
    fn from(e: std::sync::Arc<QueryError>) -> Self {
        ApiError::from(e.as_ref())
    }
}

impl From<&QueryError> for ApiError {
    fn from(e: &QueryError) -> Self {
        let status = match e {
            QueryError::DatabaseNotFound(_) | QueryError::TableNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            QueryError::Invalid(_) => StatusCode::BAD_REQUEST,
            QueryError::ResourcesExhausted(_) => StatusCode::SERVICE_UNAVAILABLE,
            QueryError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        let status = match &e {
            StorageError::TooManyColumns { .. }
            | StorageError::TooManyTables { .. }
            | StorageError::TooManyDatabases { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            StorageError::BufferFull { .. } | StorageError::Closed => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            StorageError::Wal(WalError::RecordTooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            // the write was not acknowledged: the log is failing or the server is stopping
            StorageError::Wal(_) => StatusCode::SERVICE_UNAVAILABLE,
            e if e.is_server_fault() => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.to_string())
    }
}

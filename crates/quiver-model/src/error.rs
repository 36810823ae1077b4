//! The protocol-neutral kinds of failure. A layer's error says which kind it is
//! ([`Classify`]); a protocol turns the kind into its status. Whether a failure is the
//! caller's or the server's is decided once, here and in the layers' `kind` methods, never
//! again in a protocol.

/// What kind of failure an error is, whatever protocol reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request is malformed or asks for something invalid: bad syntax, a value of the
    /// wrong type, a type conflict with stored data, an invalid name. Retrying it unchanged
    /// fails again.
    Invalid,
    /// Something the request names does not exist (a database, a table).
    NotFound,
    /// The request is larger than a configured bound on one request allows.
    TooLarge,
    /// The request would create something that exists already (a database, a token).
    Conflict,
    /// The request carries no valid credential: none where one is required, an unknown or
    /// revoked token, a malformed `Authorization`.
    Unauthenticated,
    /// The credential is valid but does not grant what the request does.
    PermissionDenied,
    /// The caller sent more than its rate limit allows (requests or written bytes per
    /// second, or failed authentications); the same request succeeds after a pause.
    RateLimited,
    /// The request would grow what the server holds past a configured limit (databases,
    /// tables, columns).
    LimitExceeded,
    /// The request needs more memory than the server grants it, or would produce a value
    /// larger than the largest one allowed. Retrying it unchanged fails again.
    ResourcesExhausted,
    /// The request ran longer than its time limit and was stopped.
    TimedOut,
    /// The request was cancelled: by its client, or by an operator.
    Cancelled,
    /// The server is running and queueing as many requests of this kind as it takes; the
    /// same request may succeed in a moment.
    Busy,
    /// The server cannot take the request now (its write buffer is full and not draining,
    /// it is stopping); the same request may succeed later.
    Unavailable,
    /// The server failed: its files, its log, its catalog, a bug. Not the caller's fault;
    /// reported as such and logged for the operator.
    Internal,
}

impl ErrorKind {
    /// True for the kinds that are the server's fault rather than the request's.
    pub fn is_server_fault(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Internal)
    }

    /// Logs a failed request of this kind at the level it deserves, the one place every
    /// protocol's failures are logged: the server's faults as errors (an operator must act);
    /// time limits, a full queue and memory refusals as warnings (the operator may want to
    /// raise a limit); cancellations as information (a client or an operator asked for
    /// them); every other fault of the request at debug level (the client was told).
    /// `protocol` names the front end (`http`, `flight`, `postgres`).
    pub fn log_failure(self, protocol: &str, message: &str) {
        match self {
            ErrorKind::Internal | ErrorKind::Unavailable => {
                tracing::error!(protocol, kind = ?self, error = %message, "request failed")
            }
            ErrorKind::TimedOut | ErrorKind::Busy | ErrorKind::ResourcesExhausted => {
                tracing::warn!(protocol, kind = ?self, error = %message, "request stopped by a limit")
            }
            ErrorKind::Cancelled => {
                tracing::info!(protocol, kind = ?self, error = %message, "request cancelled")
            }
            _ => tracing::debug!(protocol, kind = ?self, error = %message, "request rejected"),
        }
    }
}

/// An error that knows which [`ErrorKind`] it is.
pub trait Classify: std::error::Error {
    /// The kind of this failure.
    fn kind(&self) -> ErrorKind;
}

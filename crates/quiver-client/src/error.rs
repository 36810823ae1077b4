//! What can go wrong talking to a server: [`ClientError`], and [`ServerError`], a server's own
//! error answer (its status and body, rendered as the `quiver` commands print it, rejected
//! lines numbered).

use std::fmt;

/// Why a request of a [`crate::Client`] failed.
#[derive(Debug)]
pub enum ClientError {
    /// The base URL is `https://`: the client speaks plain HTTP only.
    PlainHttpOnly {
        /// The base URL, without trailing slashes.
        base_url: String,
    },
    /// The request could not be sent (no connection, or it broke off before an answer).
    Unreachable(reqwest::Error),
    /// The server's answer broke off before its end.
    BrokenResponse(reqwest::Error),
    /// The server answered with an error status.
    Server(ServerError),
    /// An Arrow IPC stream could not be encoded (a write) or decoded (an answer).
    Arrow(arrow::error::ArrowError),
    /// The server answered something this client cannot read.
    UnexpectedAnswer(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PlainHttpOnly { base_url } => write!(
                f,
                "quiver query, quiver write and quiver import speak plain HTTP only; for a server with TLS use an HTTPS client, e.g. curl --cacert CA.pem {base_url}/api/v3/query_sql"
            ),
            Self::Unreachable(e) => write!(f, "cannot reach the server: {e}"),
            Self::BrokenResponse(e) => write!(f, "the server's response broke off: {e}"),
            Self::Server(e) => e.fmt(f),
            Self::Arrow(e) => e.fmt(f),
            Self::UnexpectedAnswer(what) => write!(f, "unexpected answer from the server: {what}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreachable(e) | Self::BrokenResponse(e) => Some(e),
            Self::Server(e) => Some(e),
            Self::Arrow(e) => Some(e),
            Self::PlainHttpOnly { .. } | Self::UnexpectedAnswer(_) => None,
        }
    }
}

/// A server's error answer: its status and body (Quiver's JSON `{"error": ..., "data": [...]}`,
/// or whatever a proxy in between sent). Displayed as `server answered STATUS: MESSAGE`, with
/// each rejected line of a write on a line of its own.
#[derive(Debug, Clone)]
pub struct ServerError {
    status: reqwest::StatusCode,
    body: Vec<u8>,
}

/// One line a line-protocol write rejected, as the server names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedLine {
    /// Its number in the request's body, from 1.
    pub line_number: u64,
    /// Why it was rejected.
    pub error_message: String,
    /// The line as sent.
    pub original_line: String,
}

impl ServerError {
    /// The error answer with `status` and `body`.
    pub fn new(status: reqwest::StatusCode, body: Vec<u8>) -> Self {
        Self { status, body }
    }

    /// The answer's HTTP status.
    pub fn status(&self) -> reqwest::StatusCode {
        self.status
    }

    /// The answer's body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The server's message (the JSON body's `error`), if the body is Quiver's JSON.
    pub fn message(&self) -> Option<String> {
        let json = serde_json::from_slice::<serde_json::Value>(&self.body).ok()?;
        json["error"].as_str().map(str::to_string)
    }

    /// The lines a write rejected (the JSON body's `data`), numbered as in the request.
    pub fn rejected_lines(&self) -> Vec<RejectedLine> {
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(&self.body) else {
            return Vec::new();
        };
        let Some(lines) = json["data"].as_array() else {
            return Vec::new();
        };
        lines
            .iter()
            .map(|line| RejectedLine {
                line_number: line["line_number"].as_u64().unwrap_or(0),
                error_message: line["error_message"].as_str().unwrap_or("").to_string(),
                original_line: line["original_line"].as_str().unwrap_or("").to_string(),
            })
            .collect()
    }

    /// The error as displayed, for a request whose body began at line `first_line` of the
    /// user's input (rejected lines are numbered as the input numbers them).
    pub fn describe_from_line(&self, first_line: u64) -> String {
        let (status, body) = (self.status, &self.body);
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
            return format!(
                "server answered {status}: {}",
                String::from_utf8_lossy(body)
            );
        };
        let mut message = format!(
            "server answered {status}: {}",
            json["error"].as_str().unwrap_or("(no message)")
        );
        if let Some(lines) = json["data"].as_array() {
            for line in lines {
                let number = line["line_number"].as_u64().unwrap_or(0) + first_line - 1;
                message.push_str(&format!(
                    "\n  line {number}: {} ({})",
                    line["error_message"].as_str().unwrap_or(""),
                    line["original_line"].as_str().unwrap_or("")
                ));
            }
        }
        message
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe_from_line(1))
    }
}

impl std::error::Error for ServerError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_render_as_the_commands_print_them() {
        let plain = ServerError::new(reqwest::StatusCode::BAD_GATEWAY, b"<html>".to_vec());
        assert_eq!(plain.to_string(), "server answered 502 Bad Gateway: <html>");
        assert_eq!(plain.message(), None);
        assert!(plain.rejected_lines().is_empty());
        let quiet = ServerError::new(reqwest::StatusCode::NOT_FOUND, b"{}".to_vec());
        assert_eq!(
            quiet.to_string(),
            "server answered 404 Not Found: (no message)"
        );
        let json = br#"{"error":"database \"x\" not found"}"#.to_vec();
        let missing = ServerError::new(reqwest::StatusCode::NOT_FOUND, json);
        assert_eq!(
            missing.message().as_deref(),
            Some("database \"x\" not found")
        );
        assert_eq!(
            ClientError::Server(missing).to_string(),
            "server answered 404 Not Found: database \"x\" not found"
        );
    }
}

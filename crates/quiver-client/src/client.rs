//! [`Client`]: one server's HTTP API, as the requests a program makes of it. Every request goes
//! through one `reqwest` client (its connections are reused: a `quiver write` of a large file
//! sends many requests) and carries the token if there is one.

use arrow::array::RecordBatch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::error::{ClientError, ServerError};

/// The server's default HTTP address, which the commands talk to unless told otherwise.
pub const DEFAULT_HOST: &str = "http://127.0.0.1:8086";

/// The database the commands use when none is named.
pub const DEFAULT_DATABASE: &str = "default";

/// The response header holding the result cache's verdict on a query (`HIT`, `PARTIAL`, `MISS`
/// or `BYPASS`; the name `quiver-http` sets).
pub const CACHE_HEADER: &str = "x-quiver-cache";

/// The response header of a line-protocol write holding how many lines it wrote (the name
/// `quiver-http` sets).
pub const LINES_WRITTEN_HEADER: &str = "x-quiver-lines-written";

/// The response header of a line-protocol write holding how many lines it rejected (the name
/// `quiver-http` sets).
pub const LINES_REJECTED_HEADER: &str = "x-quiver-lines-rejected";

/// The media type of an Arrow IPC stream (the body of an Arrow write or answer).
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// A client of one Quiver server: its base URL, the token to present (if any) and the HTTP
/// client every request reuses. Cheap to clone (clones share connections).
///
/// A base URL beginning `https://` is refused by every request with
/// [`ClientError::PlainHttpOnly`]: this client speaks plain HTTP only.
#[derive(Debug, Clone)]
pub struct Client {
    base_url: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// A server's answer: its status, headers and whole body, whatever the status.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status.
    pub status: reqwest::StatusCode,
    /// The response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// The response itself if its status is a success, else the server's error.
    pub fn error_for_status(self) -> Result<Response, ClientError> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(ClientError::Server(ServerError::new(
                self.status,
                self.body,
            )))
        }
    }

    /// The header `name` as text, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What a line-protocol write did: the lines written and, when the server rejected some (and
/// wrote the others), how many and its error naming them.
#[derive(Debug, Clone)]
pub struct LpWritten {
    /// Lines the server wrote.
    pub lines_written: u64,
    /// Lines it rejected.
    pub lines_rejected: u64,
    /// The server's error listing the rejected lines (`None` when every line was written).
    pub rejection: Option<ServerError>,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:8086`), without a token.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            token: None,
            http: reqwest::Client::new(),
        }
    }

    /// The same client presenting `token` (as a bearer token) with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The server's base URL, as given.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Writes line protocol into database `db` (`POST /api/v3/write_lp`; the server creates the
    /// database on its first write). `precision` is the timestamps' unit: `auto`, `ns`, `us`,
    /// `ms` or `s`. When the server rejects some lines and writes the others the answer is
    /// still `Ok`, with [`LpWritten::rejection`] naming the rejected lines; a request refused
    /// outright is [`ClientError::Server`].
    pub async fn write_lp(
        &self,
        db: &str,
        precision: &str,
        body: impl Into<Vec<u8>>,
    ) -> Result<LpWritten, ClientError> {
        let request = self
            .request(reqwest::Method::POST, "/api/v3/write_lp")?
            .query(&[("db", db), ("precision", precision)])
            .body(body.into());
        let reply = self.exchange(request).await?;
        let count = |header: &str| reply.header(header).and_then(|v| v.parse::<u64>().ok());
        let written = count(LINES_WRITTEN_HEADER);
        if reply.status.is_success() {
            return Ok(LpWritten {
                lines_written: written.unwrap_or(0),
                lines_rejected: 0,
                rejection: None,
            });
        }
        match written {
            // some lines rejected, the others written
            Some(lines) if reply.status == reqwest::StatusCode::BAD_REQUEST => Ok(LpWritten {
                lines_written: lines,
                lines_rejected: count(LINES_REJECTED_HEADER).unwrap_or(0),
                rejection: Some(ServerError::new(reply.status, reply.body)),
            }),
            _ => Err(ClientError::Server(ServerError::new(
                reply.status,
                reply.body,
            ))),
        }
    }

    /// Runs `sql` against database `db` (`POST /api/v3/query_sql`) and returns the server's
    /// answer whatever its status. `format` is one of the server's output formats: `pretty`,
    /// `json`, `jsonl`, `csv`, `arrow` or `parquet`.
    pub async fn query_sql_response(
        &self,
        db: &str,
        sql: &str,
        format: &str,
    ) -> Result<Response, ClientError> {
        let body = serde_json::json!({ "db": db, "q": sql, "format": format });
        let request = self
            .request(reqwest::Method::POST, "/api/v3/query_sql")?
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        self.exchange(request).await
    }

    /// Runs `sql` against database `db` and returns the result in `format` (see
    /// [`Client::query_sql_response`]); an error answer is [`ClientError::Server`].
    pub async fn query_sql(
        &self,
        db: &str,
        sql: &str,
        format: &str,
    ) -> Result<Vec<u8>, ClientError> {
        Ok(self
            .query_sql_response(db, sql, format)
            .await?
            .error_for_status()?
            .body)
    }

    /// Runs `sql` against database `db` and returns the result as Arrow record batches (the
    /// server's `arrow` format, an Arrow IPC stream).
    pub async fn query_arrow(&self, db: &str, sql: &str) -> Result<Vec<RecordBatch>, ClientError> {
        let body = self.query_sql(db, sql, "arrow").await?;
        StreamReader::try_new(std::io::Cursor::new(body), None)
            .and_then(|reader| reader.collect::<Result<Vec<_>, _>>())
            .map_err(ClientError::Arrow)
    }

    /// Writes `batch` into table `table` of database `db` through the Arrow path
    /// (`POST /api/v3/write_arrow`, one Arrow IPC stream). The batch must already be in
    /// Quiver's data model (a `time` column of UTC nanosecond timestamps, tags
    /// dictionary-encoded); [`crate::import`] shapes a file's batches so.
    pub async fn write_arrow(
        &self,
        db: &str,
        table: &str,
        batch: &RecordBatch,
    ) -> Result<(), ClientError> {
        let body = ipc_stream(batch).map_err(ClientError::Arrow)?;
        self.write_arrow_stream(db, table, body).await
    }

    /// Writes an Arrow IPC stream (`body`, already encoded) into table `table` of database
    /// `db` (`POST /api/v3/write_arrow`).
    pub async fn write_arrow_stream(
        &self,
        db: &str,
        table: &str,
        body: Vec<u8>,
    ) -> Result<(), ClientError> {
        let request = self
            .request(reqwest::Method::POST, "/api/v3/write_arrow")?
            .query(&[("db", db), ("table", table)])
            .header(reqwest::header::CONTENT_TYPE, ARROW_STREAM)
            .body(body);
        self.exchange(request).await?.error_for_status()?;
        Ok(())
    }

    /// The names of the server's databases the token may see (`GET /api/v3/configure/database`).
    pub async fn databases(&self) -> Result<Vec<String>, ClientError> {
        let request = self.request(reqwest::Method::GET, "/api/v3/configure/database")?;
        let reply = self.exchange(request).await?.error_for_status()?;
        match serde_json::from_slice::<serde_json::Value>(&reply.body) {
            Ok(serde_json::Value::Array(databases)) => Ok(databases
                .iter()
                .filter_map(|db| db["db"].as_str())
                .map(str::to_string)
                .collect()),
            _ => Err(ClientError::UnexpectedAnswer(
                "the database list is not a JSON array".to_string(),
            )),
        }
    }

    /// Sends `request` (made with [`Client::request`]) and reads the whole response, whatever
    /// its status.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<Response, ClientError> {
        self.exchange(request).await
    }

    /// A request of `path` (e.g. `/health`) of the server, carrying the token if there is one,
    /// for an endpoint this client has no method for; send it with [`Client::send`].
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        let base = self.base_url.trim_end_matches('/');
        if self.base_url.to_ascii_lowercase().starts_with("https://") {
            return Err(ClientError::PlainHttpOnly {
                base_url: base.to_string(),
            });
        }
        let request = self.http.request(method, format!("{base}{path}"));
        Ok(match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
    }

    /// Sends `request` and reads the whole response.
    async fn exchange(&self, request: reqwest::RequestBuilder) -> Result<Response, ClientError> {
        let response = request.send().await.map_err(ClientError::Unreachable)?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(ClientError::BrokenResponse)?;
        Ok(Response {
            status,
            headers,
            body: body.to_vec(),
        })
    }
}

/// `batch` as one Arrow IPC stream.
pub(crate) fn ipc_stream(batch: &RecordBatch) -> Result<Vec<u8>, arrow::error::ArrowError> {
    let mut writer = StreamWriter::try_new(Vec::new(), &batch.schema())?;
    writer.write(batch)?;
    writer.into_inner()
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};

    use super::*;
    use crate::test_server::answer_once;

    #[tokio::test]
    async fn a_partial_write_is_an_answer_naming_the_rejected_lines() {
        let error = br#"{"error":"partial write of line protocol occurred","data":[{"original_line":"cpu v=oops 2","line_number":2,"error_message":"invalid field value"}]}"#;
        let (url, served) = answer_once(
            "400 Bad Request",
            &[
                (LINES_WRITTEN_HEADER, "1"),
                (LINES_REJECTED_HEADER, "1"),
                ("content-type", "application/json"),
            ],
            error.to_vec(),
        );
        let client = Client::new(format!("{url}/")).with_token("secret");
        let written = client
            .write_lp("db1", "s", "cpu v=1 1\ncpu v=oops 2\n")
            .await
            .unwrap();
        assert_eq!((written.lines_written, written.lines_rejected), (1, 1));
        let rejection = written.rejection.unwrap();
        assert_eq!(
            rejection.describe_from_line(10),
            "server answered 400 Bad Request: partial write of line protocol occurred\n  \
             line 11: invalid field value (cpu v=oops 2)"
        );
        assert_eq!(rejection.rejected_lines()[0].line_number, 2);
        let request = served.join().unwrap().0;
        assert!(
            request.starts_with("POST /api/v3/write_lp?db=db1&precision=s HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("authorization: Bearer secret\r\n"),
            "{request}"
        );
        assert!(
            request.ends_with("\r\n\r\ncpu v=1 1\ncpu v=oops 2\n"),
            "{request}"
        );
    }

    #[tokio::test]
    async fn a_write_refused_outright_is_an_error() {
        let (url, served) = answer_once("413 Payload Too Large", &[], b"too big".to_vec());
        let refused = Client::new(url).write_lp("db", "auto", "m v=1").await;
        let Err(ClientError::Server(error)) = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(
            error.to_string(),
            "server answered 413 Payload Too Large: too big"
        );
        assert!(!served.join().unwrap().0.contains("authorization"));
    }

    #[tokio::test]
    async fn arrow_answers_decode_to_batches() {
        let batch = RecordBatch::try_from_iter([(
            "n",
            Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
        )])
        .unwrap();
        let (url, served) = answer_once(
            "200 OK",
            &[("content-type", ARROW_STREAM), (CACHE_HEADER, "MISS")],
            ipc_stream(&batch).unwrap(),
        );
        let batches = Client::new(url)
            .query_arrow("db", "SELECT n FROM t")
            .await
            .unwrap();
        assert_eq!(batches, vec![batch]);
        let request = served.join().unwrap().0;
        assert!(request.starts_with("POST /api/v3/query_sql HTTP/1.1\r\n"));
        assert!(
            request.contains("content-type: application/json\r\n"),
            "{request}"
        );
        let (_, body) = request.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(body).unwrap(),
            serde_json::json!({ "db": "db", "q": "SELECT n FROM t", "format": "arrow" })
        );
    }

    #[tokio::test]
    async fn https_is_refused_before_anything_is_sent() {
        let refused = Client::new("HTTPS://quiver.example:8086/")
            .query_sql("db", "SELECT 1", "csv")
            .await
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "quiver query, quiver write and quiver import speak plain HTTP only; for a server \
             with TLS use an HTTPS client, e.g. curl --cacert CA.pem \
             HTTPS://quiver.example:8086/api/v3/query_sql"
        );
    }

    #[tokio::test]
    async fn an_absent_server_is_unreachable() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let error = Client::new(url).databases().await.unwrap_err();
        assert!(matches!(error, ClientError::Unreachable(_)), "{error:?}");
        assert!(error.to_string().starts_with("cannot reach the server: "));
    }
}

//! `quiver query`, `quiver write` and `quiver import`: command-line clients of the HTTP API.
//! This module owns what they share (the server's address and token, one HTTP connection
//! reused by every request, error rendering) and `quiver query`; [`write`] sends line protocol,
//! [`import`] Parquet and CSV files through the Arrow path, both with a [`progress`] bar.

mod import;
mod progress;
mod write;

use std::sync::OnceLock;
use std::time::Instant;

use clap::Args;

pub use import::{import, ImportArgs};
pub use write::{write, WriteArgs};

/// Default server URL of the client subcommands (the server's default HTTP address).
const DEFAULT_HOST: &str = "http://127.0.0.1:8086";

/// Which server the client subcommands talk to, and as whom.
#[derive(Debug, Args)]
pub struct ServerAddress {
    /// Base URL of the server.
    #[arg(long, default_value = DEFAULT_HOST)]
    host: String,
    /// The token to present (default: `$QUIVER_TOKEN`; none: the server's `auth` mode
    /// decides whether a local client needs one).
    #[arg(long, env = "QUIVER_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl ServerAddress {
    /// A POST to `path` of the server, carrying the token if there is one.
    fn post(&self, path: &str) -> Result<reqwest::RequestBuilder, String> {
        self.request(reqwest::Method::POST, path)
    }

    /// A GET of `path` of the server, carrying the token if there is one.
    fn get(&self, path: &str) -> Result<reqwest::RequestBuilder, String> {
        self.request(reqwest::Method::GET, path)
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, String> {
        if self.host.to_ascii_lowercase().starts_with("https://") {
            return Err(format!(
                "quiver query, quiver write and quiver import speak plain HTTP only; for a server with TLS use an HTTPS client, e.g. curl --cacert CA.pem {}/api/v3/query_sql",
                self.host.trim_end_matches('/')
            ));
        }
        let url = format!("{}{path}", self.host.trim_end_matches('/'));
        let request = http_client().request(method, url);
        Ok(match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
    }
}

/// The database the client commands use when `--db` names none.
const DEFAULT_DATABASE: &str = "default";

/// Arguments of `quiver query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    server: ServerAddress,
    /// Database to query (default: `default`).
    #[arg(long)]
    db: Option<String>,
    /// Output format: pretty, json, jsonl, csv, arrow or parquet (the last two are binary).
    #[arg(long, default_value = "pretty")]
    format: String,
    /// Also print, on standard error, how long the answer took and the result cache's
    /// verdict (HIT, PARTIAL, MISS or BYPASS).
    #[arg(long, short)]
    verbose: bool,
    /// The SQL statement.
    sql: String,
}

/// Runs `quiver query`: prints the server's answer to stdout, or its error to the caller.
pub fn query(args: QueryArgs) -> Result<(), String> {
    let database = args.db.as_deref().unwrap_or(DEFAULT_DATABASE);
    let body = serde_json::json!({ "db": database, "q": args.sql, "format": args.format });
    let started = Instant::now();
    let reply = exchange(args.server.post("/api/v3/query_sql")?.json_body(&body))?;
    if args.verbose {
        eprintln!("{}", describe_timing(&reply, started));
    }
    if !reply.status.is_success() {
        let mut message = describe_error(reply.status, &reply.body);
        // only for the default database's absence: a missing table in it needs no hint
        let missing = format!("database {database:?} not found");
        if args.db.is_none() && message.contains(&missing) {
            message.push_str(&database_hint(&args.server));
        }
        return Err(message);
    }
    use std::io::Write;
    std::io::stdout()
        .write_all(&reply.body)
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

/// `quiver query --verbose`'s line: the status, the time to the answer's last byte, its size
/// and the result cache's verdict.
fn describe_timing(reply: &Reply, started: Instant) -> String {
    let verdict = reply
        .headers
        .get(quiver_http::CACHE_HEADER.as_str())
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none (not answered)");
    format!(
        "{} in {:.1} ms, {} bytes; result cache: {verdict}",
        reply.status,
        started.elapsed().as_secs_f64() * 1e3,
        reply.body.len()
    )
}

/// What to tell a user whose query without `--db` found no database `default`: how to name
/// one, and which there are.
fn database_hint(server: &ServerAddress) -> String {
    let mut hint = format!(
        "\n  quiver query reads database {DEFAULT_DATABASE:?} unless --db names one: \
         quiver query --db NAME \"SQL\""
    );
    let listed = server
        .get("/api/v3/configure/database")
        .and_then(exchange)
        .ok()
        .filter(|reply| reply.status.is_success())
        .and_then(|reply| serde_json::from_slice::<serde_json::Value>(&reply.body).ok());
    if let Some(serde_json::Value::Array(databases)) = listed {
        let names: Vec<&str> = databases
            .iter()
            .filter_map(|db| db["db"].as_str())
            .collect();
        if names.is_empty() {
            hint.push_str("\n  the server has no databases yet (a write creates one)");
        } else {
            hint.push_str(&format!(
                "\n  databases on the server: {}",
                names.join(", ")
            ));
        }
    }
    hint
}

/// "s" unless `count` is one.
fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// Builds a JSON request body without reqwest's `json` feature.
trait JsonBody {
    fn json_body(self, value: &serde_json::Value) -> Self;
}

impl JsonBody for reqwest::RequestBuilder {
    fn json_body(self, value: &serde_json::Value) -> Self {
        self.header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(value.to_string())
    }
}

/// A server's response: its status, headers and whole body.
struct Reply {
    status: reqwest::StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

/// The one HTTP client of the process: its connections are reused by every request (a
/// `quiver write` of a large file sends many).
fn http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(reqwest::Client::new)
}

/// The runtime the client's requests run on (the CLI is otherwise synchronous).
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the client runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Sends `request` and reads the whole response.
fn exchange(request: reqwest::RequestBuilder) -> Result<Reply, String> {
    runtime()?.block_on(async {
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach the server: {e}"))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("the server's response broke off: {e}"))?;
        Ok(Reply {
            status,
            headers,
            body: body.to_vec(),
        })
    })
}

/// Renders an error response: the `error` message and, for rejected lines, each line with its
/// number.
fn describe_error(status: reqwest::StatusCode, body: &[u8]) -> String {
    describe_error_from_line(status, body, 1)
}

/// [`describe_error`] of a request whose body began at line `first_line` of the user's input
/// (rejected lines are numbered as the input numbers them).
fn describe_error_from_line(status: reqwest::StatusCode, body: &[u8], first_line: u64) -> String {
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

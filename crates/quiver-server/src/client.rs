//! `quiver query` and `quiver write`: thin command-line clients of the HTTP API.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;

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
    /// A request to `path` of the server, carrying the token if there is one.
    fn post(&self, path: &str) -> Result<reqwest::RequestBuilder, String> {
        if self.host.to_ascii_lowercase().starts_with("https://") {
            return Err(format!(
                "quiver query and quiver write speak plain HTTP only; for a server with TLS use an HTTPS client, e.g. curl --cacert CA.pem {}/api/v3/query_sql",
                self.host.trim_end_matches('/')
            ));
        }
        let url = format!("{}{path}", self.host.trim_end_matches('/'));
        let request = reqwest::Client::new().post(url);
        Ok(match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
    }
}

/// Arguments of `quiver query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    server: ServerAddress,
    /// Database to query.
    #[arg(long, default_value = "default")]
    db: String,
    /// Output format: pretty, json, jsonl, csv, arrow or parquet (the last two are binary).
    #[arg(long, default_value = "pretty")]
    format: String,
    /// The SQL statement.
    sql: String,
}

/// Arguments of `quiver write`.
#[derive(Debug, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    server: ServerAddress,
    /// Database to write into (created on first write).
    #[arg(long, default_value = "default")]
    db: String,
    /// Timestamp precision: auto, ns, us, ms or s.
    #[arg(long, default_value = "auto")]
    precision: String,
    /// Line-protocol file, or `-` for standard input.
    file: PathBuf,
}

/// Runs `quiver query`: prints the server's answer to stdout, or its error to the caller.
pub fn query(args: QueryArgs) -> Result<(), String> {
    let body = serde_json::json!({ "db": args.db, "q": args.sql, "format": args.format });
    let bytes = send(args.server.post("/api/v3/query_sql")?.json_body(&body))?;
    use std::io::Write;
    std::io::stdout()
        .write_all(&bytes)
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

/// Runs `quiver write`: sends the whole file in one request.
pub fn write(args: WriteArgs) -> Result<(), String> {
    let mut data = Vec::new();
    let read = if args.file.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut data)
    } else {
        std::fs::File::open(&args.file).and_then(|mut f| f.read_to_end(&mut data))
    };
    read.map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let request = args
        .server
        .post("/api/v3/write_lp")?
        .query(&[
            ("db", args.db.as_str()),
            ("precision", args.precision.as_str()),
        ])
        .body(data);
    send(request)?;
    Ok(())
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

/// Sends `request` and returns the body of a successful response; an error response becomes
/// the server's message (with its per-line details, if any).
fn send(request: reqwest::RequestBuilder) -> Result<Vec<u8>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))?;
    runtime.block_on(async {
        let response = request
            .send()
            .await
            .map_err(|e| format!("cannot reach the server: {e}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("the server's response broke off: {e}"))?;
        if status.is_success() {
            return Ok(body.to_vec());
        }
        Err(describe_error(status, &body))
    })
}

/// Renders an error response: the `error` message and, for partial writes, each rejected line.
fn describe_error(status: reqwest::StatusCode, body: &[u8]) -> String {
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
            message.push_str(&format!(
                "\n  line {}: {} ({})",
                line["line_number"],
                line["error_message"].as_str().unwrap_or(""),
                line["original_line"].as_str().unwrap_or("")
            ));
        }
    }
    message
}

//! `quiver query`, `quiver write` and `quiver import`: the `quiver` binary's client
//! subcommands, built on [`Client`]; and `quiver token`, which manages a data directory's
//! tokens without a server ([`token()`]). This module owns what they share (the server's address and
//! token as flags, the runtime their requests run on, error rendering) and `quiver query`;
//! [`write()`] sends line protocol, [`import()`] Parquet and CSV files through the Arrow path,
//! both with a progress bar. Each command prints its result on standard output and returns the
//! message of what went wrong (the binary prints it after `error: ` and exits non-zero).

mod import;
mod progress;
mod token;
mod write;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Instant;

use clap::Args;

use crate::{Client, Response, CACHE_HEADER, DEFAULT_DATABASE, DEFAULT_HOST};

pub use import::{import, ImportArgs};
pub use token::{token, DataDirFlags, TokenArgs};
pub use write::{write, WriteArgs};

/// Which server the client subcommands talk to, and as whom (`--host`, `--token`).
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
    /// A client of this server, presenting the token if there is one.
    pub fn client(&self) -> Client {
        let client = Client::new(self.host.clone());
        match &self.token {
            Some(token) => client.with_token(token.clone()),
            None => client,
        }
    }
}

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
    let client = args.server.client();
    let started = Instant::now();
    let reply = block_on(client.query_sql_response(database, &args.sql, &args.format))?
        .map_err(|e| e.to_string())?;
    if args.verbose {
        eprintln!("{}", describe_timing(&reply, started));
    }
    let body = match reply.error_for_status() {
        Ok(reply) => reply.body,
        Err(error) => {
            let mut message = error.to_string();
            // only for the default database's absence: a missing table in it needs no hint
            let missing = format!("database {database:?} not found");
            if args.db.is_none() && message.contains(&missing) {
                message.push_str(&database_hint(&client));
            }
            return Err(message);
        }
    };
    use std::io::Write;
    std::io::stdout()
        .write_all(&body)
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

/// `quiver query --verbose`'s line: the status, the time to the answer's last byte, its size
/// and the result cache's verdict.
fn describe_timing(reply: &Response, started: Instant) -> String {
    let verdict = reply.header(CACHE_HEADER).unwrap_or("none (not answered)");
    format!(
        "{} in {:.1} ms, {} bytes; result cache: {verdict}",
        reply.status,
        started.elapsed().as_secs_f64() * 1e3,
        reply.body.len()
    )
}

/// What to tell a user whose query without `--db` found no database `default`: how to name
/// one, and which there are.
fn database_hint(client: &Client) -> String {
    let mut hint = format!(
        "\n  quiver query reads database {DEFAULT_DATABASE:?} unless --db names one: \
         quiver query --db NAME \"SQL\""
    );
    if let Ok(Ok(names)) = block_on(client.databases()) {
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

/// The runtime the commands' requests run on (the CLI is otherwise synchronous).
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

/// Runs `future` (requests of a [`Client`]) to its end on the commands' runtime.
fn block_on<F: Future>(future: F) -> Result<F::Output, String> {
    Ok(runtime()?.block_on(future))
}

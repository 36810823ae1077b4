//! Quiver's client: a Quiver server's HTTP API as a Rust library, and the `quiver query`,
//! `quiver write` and `quiver import` commands built on it (as `influxdb3_client` is
//! InfluxDB 3's).
//!
//! This crate owns everything that talks to a server from the outside:
//!
//! - [`Client`]: a server's base URL, an optional token and one HTTP client whose connections
//!   every request reuses; line-protocol writes ([`Client::write_lp`]), SQL queries in any of the
//!   server's output formats or as Arrow record batches ([`Client::query_sql`],
//!   [`Client::query_arrow`]), Arrow writes ([`Client::write_arrow`]) and the database list;
//!   errors as [`ClientError`] (a server's refusal as [`ServerError`]).
//! - [`import`]: a Parquet or CSV file read in batches, each shaped into Quiver's data model
//!   (a `time` timestamp, dictionary-encoded tags) and written through the Arrow path.
//! - [`cli`]: the `quiver` binary's client subcommands (their clap arguments, progress bars,
//!   messages and exit behaviour).
//!
//! It knows nothing of the server's internals, only the HTTP API (paths, parameters, headers)
//! and the data model of `quiver-model`. The client speaks plain HTTP only (no TLS). Its
//! methods are async and run on a Tokio runtime; the commands start a single-threaded one.
//!
//! ```no_run
//! # async fn example() -> Result<(), quiver_client::ClientError> {
//! let client = quiver_client::Client::new("http://127.0.0.1:8086").with_token("apiv3_...");
//! client.write_lp("metrics", "auto", "cpu,host=a usage=1 1").await?;
//! let batches = client.query_arrow("metrics", "SELECT * FROM cpu").await?;
//! # Ok(()) }
//! ```

pub mod cli;
mod client;
mod error;
pub mod import;
#[cfg(test)]
mod test_server;

pub use client::{
    Client, LpWritten, Response, CACHE_HEADER, DEFAULT_DATABASE, DEFAULT_HOST,
    LINES_REJECTED_HEADER, LINES_WRITTEN_HEADER,
};
pub use error::{ClientError, RejectedLine, ServerError};

//! The `quiver` binary: `serve` runs the server; `query`, `write` and `import` are the HTTP
//! clients of `quiver-client`, `config` and `token` helpers around it (see the command-line
//! contract in `docs/architecture.md`).

mod allocator;
mod config;
mod serve;
mod token_sharing;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, FlagOverrides};

/// Quiver: an Arrow-native time-series and analytics server.
#[derive(Debug, Parser)]
#[command(name = "quiver", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (HTTP API) on the effective configuration.
    Serve(ServerArgs),
    /// Run one SQL query against a server and print the result.
    Query(quiver_client::cli::QueryArgs),
    /// Send line protocol from a file (or `-` for stdin) to a server, with a progress bar.
    Write(quiver_client::cli::WriteArgs),
    /// Load a Parquet or CSV file into a table of a server (through the Arrow path).
    Import(quiver_client::cli::ImportArgs),
    /// Print the effective configuration as TOML.
    Config(ServerArgs),
    /// Create, list or revoke tokens in a data directory (works offline).
    Token(quiver_client::cli::TokenArgs),
}

/// The settings `serve` and `config` accept on the command line.
#[derive(Debug, Args)]
struct ServerArgs {
    /// Configuration file (default: `$QUIVER_CONFIG`, else `./quiver.toml` if it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(flatten)]
    flags: FlagOverrides,
}

impl ServerArgs {
    fn load(self) -> Result<Config, config::ConfigError> {
        Config::load(self.config.as_deref(), std::env::vars(), &self.flags)
    }
}

/// The data directory `quiver token` works on: `--data-dir`, else the configured one.
fn token_data_dir(location: &quiver_client::cli::DataDirFlags) -> Result<PathBuf, String> {
    let flags = FlagOverrides {
        data_dir: location.data_dir.clone(),
        ..FlagOverrides::default()
    };
    Config::load(location.config.as_deref(), std::env::vars(), &flags)
        .map(|config| config.store.data_dir)
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => args
            .load()
            .map_err(|e| e.to_string())
            .and_then(|config| serve::run(config).map_err(|e| e.to_string())),
        Command::Config(args) => args
            .load()
            .map(|c| print!("{}", c.to_toml()))
            .map_err(|e| e.to_string()),
        Command::Query(args) => quiver_client::cli::query(args),
        Command::Write(args) => quiver_client::cli::write(args),
        Command::Import(args) => quiver_client::cli::import(args),
        Command::Token(args) => token_data_dir(&args.location)
            .and_then(|data_dir| quiver_client::cli::token(args, &data_dir)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

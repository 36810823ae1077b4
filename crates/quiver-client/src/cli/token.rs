//! `quiver token`: creates, lists and revokes tokens in a data directory, without a running
//! server (a running server sees the change at once: it re-reads the token file when a
//! credential is not found). `create` prints the new token on standard output, once.
//!
//! Which data directory is the binary's to say (it reads the server's configuration):
//! [`TokenArgs::location`] holds the flags, [`token()`] is handed the directory they name.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use quiver_auth::{Permission, TokenStore};

/// Arguments of `quiver token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Where the tokens are (flags accepted after the action too).
    #[command(flatten)]
    pub location: DataDirFlags,
    #[command(subcommand)]
    action: TokenAction,
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Create a token and print it (it is shown only this once).
    Create {
        /// An admin token: may do everything, including managing tokens.
        #[arg(long)]
        admin: bool,
        /// The token's name (also its PostgreSQL user name); `admin` by default for admins.
        #[arg(long)]
        name: Option<String>,
        /// A permission, `db:<name|*>:read|write` (repeat the flag for more).
        #[arg(long = "permission")]
        permissions: Vec<String>,
    },
    /// List tokens (names and permissions; secrets are never stored).
    List,
    /// Revoke a token: it stops working at once.
    Revoke {
        /// The token's name.
        #[arg(long)]
        name: String,
    },
}

/// Where the tokens are: `--data-dir`, else the data directory the configuration names.
#[derive(Debug, Args)]
pub struct DataDirFlags {
    /// The server's data directory (default: the configured `data_dir`).
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
    /// Configuration file (default: `$QUIVER_CONFIG`, else `./quiver.toml` if it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
}

/// Runs `quiver token` on the tokens of `data_dir` (the directory `args.location` names).
pub fn token(args: TokenArgs, data_dir: &Path) -> Result<(), String> {
    let open = || {
        let data_dir = std::path::absolute(data_dir)
            .map_err(|e| format!("data directory {}: {e}", data_dir.display()))?;
        TokenStore::open(&data_dir).map_err(|e| e.to_string())
    };
    match args.action {
        TokenAction::Create {
            admin,
            name,
            permissions,
        } => {
            let permissions = permissions
                .iter()
                .map(|p| p.parse::<Permission>())
                .collect::<Result<Vec<_>, _>>()?;
            if admin && !permissions.is_empty() {
                return Err(
                    "an admin token may do everything: give --admin or --permission, not both"
                        .into(),
                );
            }
            if !admin && permissions.is_empty() {
                return Err(
                    "give --admin, or at least one --permission db:<name|*>:read|write".into(),
                );
            }
            let name = match name {
                Some(name) => name,
                None if admin => "admin".to_string(),
                None => return Err("a scoped token needs --name".into()),
            };
            let created = open()?
                .create(&name, admin, &permissions)
                .map_err(|e| e.to_string())?;
            eprintln!(
                "token {:?} created ({}); it is shown only now: keep it safe",
                created.info.name,
                if admin {
                    "admin".to_string()
                } else {
                    created.info.permissions.join(", ")
                }
            );
            println!("{}", created.secret);
            Ok(())
        }
        TokenAction::List => {
            for token in open()?.list() {
                let grants = if token.admin {
                    "admin".to_string()
                } else {
                    token.permissions.join(",")
                };
                println!(
                    "{}\t{}\tcreated_at={}",
                    token.name,
                    grants,
                    rfc3339(token.created_at)
                );
            }
            Ok(())
        }
        TokenAction::Revoke { name } => {
            open()?.revoke(&name).map_err(|e| e.to_string())?;
            eprintln!(
                "token {name:?} revoked (a running server on this data directory refuses it \
                 within {} ms, in open sessions too)",
                quiver_auth::REFRESH_INTERVAL.as_millis()
            );
            Ok(())
        }
    }
}

/// Seconds since the epoch as an RFC 3339 UTC time (`2026-11-27T04:20:19Z`).
fn rfc3339(epoch_secs: u64) -> String {
    i64::try_from(epoch_secs)
        .ok()
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .map_or_else(
            || format!("{epoch_secs} (seconds since the epoch)"),
            |time| time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
}

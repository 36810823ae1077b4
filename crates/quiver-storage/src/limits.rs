//! What writes may create: how many databases, tables and columns a store holds
//! ([`StoreLimits`]), and which names databases and tables may have. Checked before anything
//! is written, so a refused write changes nothing.

use crate::error::StorageError;

/// Bounds that keep hostile or runaway writes from exhausting memory. The serde names are the
/// server's configuration keys.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StoreLimits {
    /// Most databases a server holds.
    pub max_databases: usize,
    /// Most tables one database holds.
    pub max_tables_per_database: usize,
    /// Most columns (time, tags and fields) one table holds.
    pub max_columns_per_table: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_databases: 1_000,
            max_tables_per_database: 10_000,
            max_columns_per_table: 1_000,
        }
    }
}

/// Names SQL front ends use for their system schemas (the SQL standard's catalog views and
/// PostgreSQL's catalog); a database of that name would shadow them, so none may be created.
pub const RESERVED_DATABASE_NAMES: &[&str] = &["information_schema", "pg_catalog"];

/// Database names: 1–64 characters of ASCII letters, digits, `_` and `-`, starting with a
/// letter or digit (so they are usable unquoted as SQL schema names in most cases and safe as
/// directory names), and not one of [`RESERVED_DATABASE_NAMES`].
pub fn validate_database_name(name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if RESERVED_DATABASE_NAMES.contains(&name) {
        Some("it is reserved for a system schema")
    } else if name.len() > 64 {
        Some("it is longer than 64 characters")
    } else if !name.as_bytes()[0].is_ascii_alphanumeric() {
        Some("it must start with a letter or digit")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only ASCII letters, digits, '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StorageError::InvalidDatabaseName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Table names: non-empty and at most 512 bytes (checked before any write; the message says
/// which rule a name breaks).
pub fn validate_table_name(name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > 512 {
        "it is longer than 512 bytes"
    } else {
        return Ok(());
    };
    Err(StorageError::InvalidTableName {
        name: name.to_string(),
        reason,
    })
}

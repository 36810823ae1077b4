//! The names SQL sees the store by: the one catalog (`quiver`) and the system schemas beside
//! its databases.

use quiver_storage::RESERVED_DATABASE_NAMES;

/// The name of the one catalog Quiver exposes.
pub const CATALOG_NAME: &str = "quiver";

/// True for the names of system schemas (`information_schema`, `pg_catalog`): they describe
/// the catalog, they are not Quiver databases.
pub fn is_system_schema(name: &str) -> bool {
    RESERVED_DATABASE_NAMES.contains(&name)
}

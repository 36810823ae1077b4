//! Who a request acts for, in one shape for every protocol: [`AccessScope`] (the result cache
//! keeps answers per scope), [`VisibleDatabases`] (what the catalog shows the caller) and
//! [`ReadGrants`] (what the layers below the protocols ask before answering).

use crate::ErrorKind;

use std::collections::BTreeSet;
use std::sync::Arc;

/// The grants a request acts under, as the result cache keys answers by them: two callers
/// share cached answers exactly when they hold the same grants.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub enum AccessScope {
    /// Allowed everything: an admin token, or the local caller of the `loopback` and
    /// `disabled` auth modes.
    #[default]
    Everything,
    /// A scoped token's permissions in one canonical text (sorted, without duplicates).
    Grants(String),
}

impl AccessScope {
    /// The scope of a canonical permission list.
    pub fn grants(canonical: impl Into<String>) -> AccessScope {
        AccessScope::Grants(canonical.into())
    }

    /// Approximate bytes the scope occupies (for cache accounting).
    pub fn size(&self) -> usize {
        std::mem::size_of::<AccessScope>()
            + match self {
                AccessScope::Grants(grants) => grants.len(),
                AccessScope::Everything => 0,
            }
    }
}

impl std::fmt::Debug for AccessScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessScope::Everything => f.write_str("everything"),
            AccessScope::Grants(grants) => write!(f, "grants:{grants}"),
        }
    }
}

/// The databases a caller sees in the catalog (`information_schema`, `SHOW TABLES`,
/// `pg_catalog`): all of them, or only those it may read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum VisibleDatabases {
    /// Every database.
    #[default]
    All,
    /// Only these.
    Only(Arc<BTreeSet<String>>),
}

impl VisibleDatabases {
    /// True if `database` is shown.
    pub fn shows(&self, database: &str) -> bool {
        match self {
            VisibleDatabases::All => true,
            VisibleDatabases::Only(names) => names.contains(database),
        }
    }
}

/// What a caller may read, as the query layers check it before answering (from the cache or
/// not): implemented by the authenticated caller.
pub trait ReadGrants: Send + Sync + std::fmt::Debug {
    /// Fails if the caller may not read `database`; the error names what is missing.
    fn check_read(&self, database: &str) -> Result<(), Denied>;

    /// The caller's name, as the list of running queries shows it.
    fn caller_name(&self) -> &str;

    /// The databases the catalog shows the caller.
    fn visible_databases(&self) -> VisibleDatabases;
}

/// A refusal: its kind (unauthenticated, permission denied) and what to tell the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// Which kind of failure.
    pub kind: ErrorKind,
    /// The message for the caller.
    pub message: String,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Denied {}

impl crate::Classify for Denied {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_equal_only_for_equal_grants() {
        assert_eq!(
            AccessScope::grants("db:a:read"),
            AccessScope::grants("db:a:read")
        );
        assert_ne!(
            AccessScope::grants("db:a:read"),
            AccessScope::grants("db:b:read")
        );
        assert_ne!(AccessScope::grants(""), AccessScope::Everything);
    }

    #[test]
    fn visibility_filters_by_name() {
        let only = VisibleDatabases::Only(Arc::new(["a".to_string()].into_iter().collect()));
        assert!(only.shows("a") && !only.shows("b"));
        assert!(VisibleDatabases::All.shows("b"));
    }
}

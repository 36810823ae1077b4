//! Result-cache keys: everything an answer depends on.

use std::sync::Arc;

use quiver_model::AccessScope;
use quiver_query::ScannedTable;

/// The key of one cached answer. Cheap to clone; equal keys denote the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey(Arc<KeyParts>);

#[derive(Debug, PartialEq, Eq, Hash)]
struct KeyParts {
    /// The canonical query text.
    canonical: String,
    /// The database the query runs in (unqualified names resolve there).
    database: String,
    /// Bound parameter values with their types.
    params: String,
    /// Session settings that change answers (time zone, ...).
    settings: String,
    /// Who is asking: answers are never shared across access scopes.
    scope: AccessScope,
    /// The query clock, rounded, for clock-dependent queries.
    clock_bucket: Option<i64>,
    /// Every scanned table and the version the answer was computed at.
    versions: Vec<(ScannedTable, u64)>,
    /// For each scanned table (in `versions`' order), the oldest time visible to the answer
    /// if its database has a retention period: rows expire without a write.
    retention_cutoffs: Vec<Option<i64>>,
}

/// The parts of a key, named (see [`CacheKey::new`]).
pub(crate) struct KeySpec<'a> {
    pub canonical: &'a str,
    pub database: &'a str,
    pub params: String,
    pub settings: &'a str,
    pub scope: &'a AccessScope,
    pub clock_bucket: Option<i64>,
    pub versions: Vec<(ScannedTable, u64)>,
    pub retention_cutoffs: Vec<Option<i64>>,
}

impl CacheKey {
    pub(crate) fn new(spec: KeySpec<'_>) -> Self {
        CacheKey(Arc::new(KeyParts {
            canonical: spec.canonical.to_string(),
            database: spec.database.to_string(),
            params: spec.params,
            settings: spec.settings.to_string(),
            scope: spec.scope.clone(),
            clock_bucket: spec.clock_bucket,
            versions: spec.versions,
            retention_cutoffs: spec.retention_cutoffs,
        }))
    }

    /// The scanned tables and their versions.
    pub(crate) fn versions(&self) -> &[(ScannedTable, u64)] {
        &self.0.versions
    }

    /// The version of `table` this key was built at (`None` if it does not scan it).
    pub(crate) fn version_of(&self, table: &ScannedTable) -> Option<u64> {
        self.0
            .versions
            .iter()
            .find(|(t, _)| t == table)
            .map(|(_, v)| *v)
    }

    /// Approximate bytes the key occupies (counted in its entry's weight).
    pub(crate) fn size(&self) -> usize {
        let parts = &self.0;
        std::mem::size_of::<KeyParts>()
            + parts.canonical.len()
            + parts.database.len()
            + parts.params.len()
            + parts.settings.len()
            + parts.scope.size()
            + parts
                .versions
                .iter()
                .map(|(t, _)| t.database.len() + t.table.len() + 64)
                .sum::<usize>()
            + parts.retention_cutoffs.len() * 16
    }
}

//! The last-value and distinct-value caches configured through InfluxDB 3's API
//! (`/api/v3/configure/last_cache`, `/distinct_cache`): their settings, kept in the catalog
//! (`CatalogState::value_caches`, written by the catalog's one writer) so that they outlive a
//! restart and query nodes following the catalog serve them like the writer. Quiver keeps no
//! separate copy of their values: each series' newest rows and its tag values are what
//! storage already keeps (see [`crate::latest_rows`]), so a configured cache only names the
//! columns, the count and the age its queries use.

use std::path::Path;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use quiver_model::durable_fs::sync_dir;
use quiver_model::schema::{ColumnType, FieldType};

use crate::StorageError;

/// The file a data directory kept the settings in before they moved into the catalog; a
/// writer that finds it moves its caches into the catalog and deletes it.
pub const VALUE_CACHES_FILE: &str = "value_caches.json";

/// One configured cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueCache {
    /// Its database.
    pub db: String,
    /// Its table.
    pub table: String,
    /// Its name (unique per table and kind).
    pub name: String,
    /// What it holds.
    #[serde(flatten)]
    pub kind: ValueCacheKind,
}

/// A last-value or a distinct-value cache, with InfluxDB 3's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ValueCacheKind {
    /// The newest `count` rows of each combination of `key_columns`.
    Last {
        /// The columns identifying a series (default: the table's tags).
        key_columns: Vec<String>,
        /// The columns returned besides the keys and `time` (default: all others).
        value_columns: Vec<String>,
        /// Rows kept per key combination (1–10).
        count: usize,
        /// Rows older than this many seconds are not returned.
        ttl: u64,
    },
    /// The distinct combinations of `columns`.
    Distinct {
        /// The columns (tags, or string fields).
        columns: Vec<String>,
        /// At most this many combinations are returned.
        max_cardinality: usize,
        /// Values last seen longer ago than this many seconds are not returned.
        max_age: u64,
    },
}

impl ValueCache {
    /// True if this is the cache of `kind_name` on `table` of `db` called `name` (any name
    /// for `None`).
    pub(crate) fn is(&self, kind_name: &str, db: &str, table: &str, name: Option<&str>) -> bool {
        self.kind.kind_name() == kind_name
            && self.db == db
            && self.table == table
            && name.is_none_or(|n| n == self.name)
    }
}

/// The most caches of one kind a table may have.
pub const MAX_VALUE_CACHES_PER_TABLE: usize = 16;

/// InfluxDB 3's default age limit of a last-value cache, in seconds (four hours).
pub const LAST_CACHE_TTL_SECS: u64 = 4 * 3600;
/// InfluxDB 3's default age limit of a distinct-value cache, in seconds (a day).
pub const DISTINCT_CACHE_MAX_AGE_SECS: u64 = 24 * 3600;
/// InfluxDB 3's default bound on a distinct-value cache's combinations.
pub const DISTINCT_CACHE_MAX_CARDINALITY: usize = 100_000;

/// The tags of a table's `columns`, in order.
fn tags(columns: &[(String, ColumnType)]) -> Vec<String> {
    columns
        .iter()
        .filter(|(_, t)| matches!(t, ColumnType::Tag))
        .map(|(n, _)| n.clone())
        .collect()
}

impl ValueCacheKind {
    /// A last-value cache over a table with `columns`, InfluxDB 3's defaults filling in what
    /// is not given: the tags as keys, every other column but `time` as values, a count of
    /// one, four hours.
    pub fn last(
        columns: &[(String, ColumnType)],
        key_columns: Option<Vec<String>>,
        value_columns: Option<Vec<String>>,
        count: Option<usize>,
        ttl: Option<u64>,
    ) -> Self {
        let key_columns = key_columns.unwrap_or_else(|| tags(columns));
        let value_columns = value_columns.unwrap_or_else(|| {
            columns
                .iter()
                .filter(|(n, t)| !matches!(t, ColumnType::Time) && !key_columns.contains(n))
                .map(|(n, _)| n.clone())
                .collect()
        });
        ValueCacheKind::Last {
            key_columns,
            value_columns,
            count: count.unwrap_or(1),
            ttl: ttl.unwrap_or(LAST_CACHE_TTL_SECS),
        }
    }

    /// A distinct-value cache over a table with `columns`, InfluxDB 3's defaults filling in
    /// what is not given: the tags, 100,000 combinations, a day.
    pub fn distinct(
        table_columns: &[(String, ColumnType)],
        columns: Option<Vec<String>>,
        max_cardinality: Option<usize>,
        max_age: Option<u64>,
    ) -> Self {
        ValueCacheKind::Distinct {
            columns: columns.unwrap_or_else(|| tags(table_columns)),
            max_cardinality: max_cardinality.unwrap_or(DISTINCT_CACHE_MAX_CARDINALITY),
            max_age: max_age.unwrap_or(DISTINCT_CACHE_MAX_AGE_SECS),
        }
    }

    /// The name InfluxDB 3 generates for a cache on `table`: `<table>_<columns>_<kind>_cache`.
    pub fn default_name(&self, table: &str) -> String {
        let columns = match self {
            ValueCacheKind::Last { key_columns, .. } => key_columns,
            ValueCacheKind::Distinct { columns, .. } => columns,
        };
        let mut parts = vec![table.to_string()];
        parts.extend(columns.iter().cloned());
        parts.push(format!("{}_cache", self.kind_name()));
        parts.join("_")
    }

    /// `last` or `distinct`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ValueCacheKind::Last { .. } => "last",
            ValueCacheKind::Distinct { .. } => "distinct",
        }
    }
}

/// Checks `cache`'s columns against its table's `columns`: keys must be tags, strings,
/// integers or booleans, distinct columns tags or strings, and every column must exist.
pub(crate) fn check_columns(
    cache: &ValueCache,
    columns: &[(String, ColumnType)],
) -> Result<(), StorageError> {
    let type_of = |name: &str| {
        columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| invalid(format!("table {:?} has no column {name:?}", cache.table)))
    };
    let (keyed, listed, allowed): (&[String], &[String], &str) = match &cache.kind {
        ValueCacheKind::Last {
            key_columns,
            value_columns,
            count,
            ..
        } => {
            if !(1..=10).contains(count) {
                return Err(invalid(format!("count must be 1 to 10, not {count}")));
            }
            (
                key_columns.as_slice(),
                value_columns.as_slice(),
                "tags, strings, integers or booleans",
            )
        }
        ValueCacheKind::Distinct {
            columns,
            max_cardinality,
            ..
        } => {
            if columns.is_empty() || *max_cardinality == 0 {
                return Err(invalid(
                    "a distinct cache needs columns and a max_cardinality above 0".to_string(),
                ));
            }
            (columns.as_slice(), &[], "tags or strings")
        }
    };
    for name in keyed {
        let fits = match (&cache.kind, type_of(name)?) {
            (_, ColumnType::Tag | ColumnType::Field(FieldType::String)) => true,
            (ValueCacheKind::Last { .. }, ColumnType::Field(field)) => {
                !matches!(field, FieldType::Float)
            }
            _ => false,
        };
        if !fits {
            return Err(invalid(format!(
                "column {name:?} cannot key this cache: use {allowed}"
            )));
        }
    }
    for name in listed {
        type_of(name)?;
    }
    Ok(())
}

fn invalid(reason: String) -> StorageError {
    StorageError::InvalidValueCache { reason }
}

/// Every configured cache of a store: the catalog's list, as the writer last stored it or a
/// query node last followed it. Changes are made by the store: it asks for the changed list
/// ([`ValueCaches::with_created`], [`ValueCaches::retained`]), stores it in the catalog, then
/// [`ValueCaches::replace`]s this one.
#[derive(Debug, Default)]
pub struct ValueCaches {
    caches: RwLock<Vec<ValueCache>>,
}

impl ValueCaches {
    /// The caches `caches` (the catalog's).
    pub(crate) fn new(caches: Vec<ValueCache>) -> Self {
        ValueCaches {
            caches: RwLock::new(caches),
        }
    }

    /// Every configured cache.
    pub fn list(&self) -> Vec<ValueCache> {
        self.caches.read().clone()
    }

    /// The cache of `kind_name` (`last` or `distinct`) on `table` of `db` called `name`, or
    /// the only one there for `None` (several: an error asking for the name).
    pub fn find(
        &self,
        kind_name: &str,
        db: &str,
        table: &str,
        name: Option<&str>,
    ) -> Result<Option<ValueCache>, StorageError> {
        let caches = self.caches.read();
        let mut matching = caches.iter().filter(|c| c.is(kind_name, db, table, name));
        let first = matching.next().cloned();
        if name.is_none() && matching.next().is_some() {
            return Err(StorageError::Catalog(format!(
                "table {table:?} has several {kind_name} caches: name the one to read"
            )));
        }
        Ok(first)
    }

    /// The caches with `cache` added; refused if its table has one of its kind and name
    /// already, or [`MAX_VALUE_CACHES_PER_TABLE`] of its kind.
    pub(crate) fn with_created(&self, cache: ValueCache) -> Result<Vec<ValueCache>, StorageError> {
        let caches = self.caches.read();
        let kind_name = cache.kind.kind_name();
        if let Some(existing) = caches
            .iter()
            .find(|c| c.is(kind_name, &cache.db, &cache.table, Some(&cache.name)))
        {
            return Err(StorageError::AlreadyExists {
                what: format!(
                    "{} cache {:?} of table {:?}{}",
                    cache.kind.kind_name(),
                    cache.name,
                    cache.table,
                    if *existing == cache {
                        ""
                    } else {
                        " (with other settings)"
                    }
                ),
            });
        }
        let on_table = caches
            .iter()
            .filter(|c| c.is(kind_name, &cache.db, &cache.table, None))
            .count();
        if on_table >= MAX_VALUE_CACHES_PER_TABLE {
            return Err(StorageError::TooManyOnTable {
                table: cache.table,
                what: if kind_name == "last" {
                    "last caches"
                } else {
                    "distinct caches"
                },
                limit: MAX_VALUE_CACHES_PER_TABLE,
            });
        }
        let mut changed = caches.clone();
        changed.push(cache);
        Ok(changed)
    }

    /// The caches `keep` keeps, or `None` if it keeps them all.
    pub(crate) fn retained(&self, keep: impl Fn(&ValueCache) -> bool) -> Option<Vec<ValueCache>> {
        let caches = self.caches.read();
        let kept: Vec<ValueCache> = caches.iter().filter(|c| keep(c)).cloned().collect();
        (kept.len() != caches.len()).then_some(kept)
    }

    /// Makes `caches` the configured caches (once the catalog holds them).
    pub(crate) fn replace(&self, caches: Vec<ValueCache>) {
        *self.caches.write() = caches;
    }
}

/// The caches a data directory kept in [`VALUE_CACHES_FILE`] before they moved into the
/// catalog, if it has the file.
pub(crate) fn read_legacy_file(data_dir: &Path) -> Result<Option<Vec<ValueCache>>, StorageError> {
    let path = data_dir.join(VALUE_CACHES_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StorageError::Catalog(format!("{} is not valid: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(&path, e)),
    }
}

/// Deletes [`VALUE_CACHES_FILE`] (its caches are in the catalog now), durably.
pub(crate) fn remove_legacy_file(data_dir: &Path) -> Result<(), StorageError> {
    let path = data_dir.join(VALUE_CACHES_FILE);
    std::fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
    Ok(sync_dir(data_dir)?)
}

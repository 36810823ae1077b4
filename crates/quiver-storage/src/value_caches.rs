//! The last-value and distinct-value caches configured through InfluxDB 3's API
//! (`/api/v3/configure/last_cache`, `/distinct_cache`): their settings, kept durably in
//! `value_caches.json` so that they outlive a restart. Quiver keeps no separate copy of their
//! values: each series' newest rows and its tag values are what storage already keeps (see
//! [`crate::latest_rows`]), so a configured cache only names the columns, the count and the
//! age its queries use.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use quiver_model::schema::{ColumnType, FieldType};

use crate::durable_fs::replace_durably;
use crate::StorageError;

/// The file the settings are kept in, inside the data directory.
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
    fn is(&self, kind_name: &str, db: &str, table: &str, name: Option<&str>) -> bool {
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

/// The configured caches of a store.
#[derive(Debug, Default)]
pub struct ValueCaches {
    /// `<data_dir>/value_caches.json`; `None` for a memory-only store.
    path: Option<PathBuf>,
    caches: Mutex<Vec<ValueCache>>,
}

impl ValueCaches {
    /// The caches kept in `data_dir` (none for `None`).
    pub(crate) fn open(data_dir: Option<&Path>) -> Result<Self, StorageError> {
        let Some(data_dir) = data_dir else {
            return Ok(ValueCaches::default());
        };
        let path = data_dir.join(VALUE_CACHES_FILE);
        let caches = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                StorageError::Catalog(format!("{} is not valid: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        Ok(ValueCaches {
            path: Some(path),
            caches: Mutex::new(caches),
        })
    }

    /// Every cache, in creation order.
    pub fn list(&self) -> Vec<ValueCache> {
        self.caches.lock().clone()
    }

    /// The cache of `kind_name` (`last` or `distinct`) on `table` called `name`, or the
    /// table's only one of that kind when `name` is `None`.
    pub fn find(
        &self,
        kind_name: &str,
        db: &str,
        table: &str,
        name: Option<&str>,
    ) -> Result<Option<ValueCache>, StorageError> {
        let caches = self.caches.lock();
        let mut matching = caches.iter().filter(|c| c.is(kind_name, db, table, name));
        let first = matching.next().cloned();
        if name.is_none() && matching.next().is_some() {
            return Err(StorageError::Catalog(format!(
                "table {table:?} has several {kind_name} caches: name the one to read"
            )));
        }
        Ok(first)
    }

    /// Adds `cache`, durably. Fails if its table already has a cache of its kind and name
    /// (with other settings: a conflict; the same settings: it exists already).
    pub(crate) fn create(&self, cache: ValueCache) -> Result<(), StorageError> {
        let mut caches = self.caches.lock();
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
        self.save(&changed)?;
        *caches = changed;
        Ok(())
    }

    /// Removes the cache of `kind_name` on `table` called `name`, durably.
    pub(crate) fn remove(
        &self,
        kind_name: &str,
        db: &str,
        table: &str,
        name: &str,
    ) -> Result<(), StorageError> {
        self.retain_durably(|c| !c.is(kind_name, db, table, Some(name)))?
            .then_some(())
            .ok_or_else(|| StorageError::NotFound {
                what: format!("{kind_name} cache {name:?} of table {table:?} in database {db:?}"),
            })
    }

    /// Removes the caches of tables that no longer exist (`exists` says), durably.
    pub(crate) fn forget_missing(
        &self,
        exists: impl Fn(&str, &str) -> bool,
    ) -> Result<(), StorageError> {
        self.retain_durably(|c| exists(&c.db, &c.table)).map(|_| ())
    }

    /// Keeps the caches `keep` accepts; true if any went.
    fn retain_durably(&self, keep: impl Fn(&ValueCache) -> bool) -> Result<bool, StorageError> {
        let mut caches = self.caches.lock();
        let kept: Vec<ValueCache> = caches.iter().filter(|c| keep(c)).cloned().collect();
        if kept.len() == caches.len() {
            return Ok(false);
        }
        self.save(&kept)?;
        *caches = kept;
        Ok(true)
    }

    fn save(&self, caches: &[ValueCache]) -> Result<(), StorageError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let dir = path.parent().expect("a file in the data directory");
        let bytes = serde_json::to_vec_pretty(caches)
            .map_err(|e| StorageError::Catalog(format!("cannot encode the caches: {e}")))?;
        replace_durably(dir, VALUE_CACHES_FILE, &bytes)
    }
}

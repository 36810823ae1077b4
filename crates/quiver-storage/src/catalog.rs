//! The durable catalog: databases, tables (schema, version, Parquet files) and how far the
//! write-ahead log has been persisted, in one JSON document that is replaced atomically, so
//! a reader sees the old catalog or the new one, never a mix, whatever moment the writer
//! dies at. In the data directory it is `catalog.json`, written to a temporary file, fsynced,
//! renamed over the old one, and the directory fsynced. In a shared store (`object_store_url`)
//! each version is a new object `catalog/<version>.json`, created whole by one request and
//! never changed; the newest is the catalog, and query nodes follow it by listing
//! `catalog/` (see [`newest_version`]). The last [`KEPT_VERSIONS`] versions are kept, so a
//! reader that listed one a moment ago still finds it.

use std::collections::BTreeMap;

use bytes::Bytes;
use quiver_model::durable_fs::TEMP_SUFFIX;
use quiver_model::schema::{ColumnType, FieldType};
use serde::{Deserialize, Serialize};

use crate::data_store::DataStore;
use crate::error::StorageError;
use crate::file_entry::FileEntry;
use crate::retention::RetentionPeriod;
use crate::rollup::RollupDefinition;
use crate::value_caches::ValueCache;

/// The catalog file's name inside the data directory.
pub const CATALOG_FILE: &str = "catalog.json";

/// Where a shared store keeps the catalog's versions.
pub const CATALOG_DIR: &str = "catalog";

/// How many of the newest catalog versions a shared store keeps.
pub const KEPT_VERSIONS: u64 = 16;

/// The catalog format this build writes and reads.
const FORMAT: u32 = 1;

/// Everything the catalog records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CatalogState {
    /// Format version of the document.
    pub format: u32,
    /// How many times the catalog was stored (each store counts one up); in a shared store,
    /// the number in its object's name. Catalogs written before it was recorded read as 0.
    #[serde(default)]
    pub version: u64,
    /// Every WAL record with a sequence number up to this one is in the Parquet files below
    /// (replay skips them, and their segments may be deleted).
    pub persisted_through_seq: u64,
    /// The next Parquet file id to hand out (ids are never reused).
    pub next_file_id: u64,
    /// The next table id to hand out (table directories are named by id, never by name).
    pub next_table_id: u64,
    /// Databases by name.
    pub databases: BTreeMap<String, DatabaseEntry>,
    /// The last-value and distinct-value caches configured (their settings: their values
    /// are the tables' own rows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value_caches: Vec<ValueCache>,
    /// The rollups' definitions, in creation order (their kept rows are each node's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollups: Vec<RollupDefinition>,
}

/// One database in the catalog.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatabaseEntry {
    /// The database's own retention period; absent: the server-wide `retention_period`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_period: Option<RetentionPeriod>,
    /// Tables by name.
    pub tables: BTreeMap<String, TableEntry>,
}

/// One table in the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableEntry {
    /// Stable id; the table's files live under `tables/<database>/<id>/`.
    pub id: u64,
    /// The table version as of the last persist (versions only grow).
    pub version: u64,
    /// Columns and their types.
    pub columns: Vec<ColumnEntry>,
    /// Parquet files in the order they were written (later files hold later writes).
    pub files: Vec<FileEntry>,
}

/// One column in the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnEntry {
    /// Column name.
    pub name: String,
    /// `time`, `tag`, `float`, `integer`, `uinteger`, `string` or `boolean`.
    #[serde(rename = "type")]
    pub column_type: String,
}

impl TableEntry {
    /// The columns and their types (an unknown type name is a catalog error).
    pub fn column_types(&self) -> Result<Vec<(String, ColumnType)>, StorageError> {
        self.columns
            .iter()
            .map(|c| Ok((c.name.clone(), c.column_type()?)))
            .collect()
    }
}

impl ColumnEntry {
    /// The catalog entry for a column.
    pub fn new(name: &str, column_type: ColumnType) -> Self {
        let column_type = match column_type {
            ColumnType::Time => "time",
            ColumnType::Tag => "tag",
            ColumnType::Field(FieldType::Float) => "float",
            ColumnType::Field(FieldType::Integer) => "integer",
            ColumnType::Field(FieldType::UInteger) => "uinteger",
            ColumnType::Field(FieldType::String) => "string",
            ColumnType::Field(FieldType::Boolean) => "boolean",
        };
        ColumnEntry {
            name: name.to_string(),
            column_type: column_type.to_string(),
        }
    }

    /// The column's type, or an error naming the unknown type string.
    pub fn column_type(&self) -> Result<ColumnType, StorageError> {
        Ok(match self.column_type.as_str() {
            "time" => ColumnType::Time,
            "tag" => ColumnType::Tag,
            "float" => ColumnType::Field(FieldType::Float),
            "integer" => ColumnType::Field(FieldType::Integer),
            "uinteger" => ColumnType::Field(FieldType::UInteger),
            "string" => ColumnType::Field(FieldType::String),
            "boolean" => ColumnType::Field(FieldType::Boolean),
            other => {
                return Err(StorageError::Catalog(format!(
                    "column {:?} has unknown type {other:?}",
                    self.name
                )))
            }
        })
    }
}

/// Reads the catalog of `data`; none yet is an empty catalog.
pub fn load(data: &DataStore) -> Result<CatalogState, StorageError> {
    let found = match data.is_shared() {
        false => data
            .get(CATALOG_FILE)?
            .map(|bytes| (CATALOG_FILE.to_string(), bytes)),
        true => load_newest(data)?,
    };
    let Some((name, bytes)) = found else {
        return Ok(CatalogState {
            format: FORMAT,
            next_file_id: 1,
            next_table_id: 1,
            ..CatalogState::default()
        });
    };
    decode(&name, &bytes)
}

/// The catalog in `bytes`, read from the object or file `name` (which errors name).
fn decode(name: &str, bytes: &[u8]) -> Result<CatalogState, StorageError> {
    let state: CatalogState = serde_json::from_slice(bytes)
        .map_err(|e| StorageError::Catalog(format!("{name} is not a valid catalog: {e}")))?;
    if state.format != FORMAT {
        return Err(StorageError::Catalog(format!(
            "{name} has format {}, this build reads format {FORMAT}",
            state.format
        )));
    }
    Ok(state)
}

/// The newest catalog version's object name and bytes in a shared store.
fn load_newest(data: &DataStore) -> Result<Option<(String, Bytes)>, StorageError> {
    // a version listed but deleted before it was read has newer ones: list again
    for _ in 0..3 {
        let Some(version) = newest_version(data)? else {
            return Ok(None);
        };
        if let Some(found) = load_version(data, version)? {
            return Ok(Some((version_object(version), found)));
        }
    }
    Err(StorageError::Catalog(format!(
        "the catalog versions in {}/{CATALOG_DIR} kept disappearing while they were read",
        data.location()
    )))
}

/// The bytes of catalog version `version` of a shared store, or `None` if it is gone.
fn load_version(data: &DataStore, version: u64) -> Result<Option<Bytes>, StorageError> {
    data.get(&version_object(version))
}

/// Catalog version `version` of a shared store (one request, no listing), or `None` if it was
/// deleted meanwhile (newer versions exist then).
pub fn load_listed(data: &DataStore, version: u64) -> Result<Option<CatalogState>, StorageError> {
    load_version(data, version)?
        .map(|bytes| decode(&version_object(version), &bytes))
        .transpose()
}

/// The newest catalog version in a shared store (one listing), or `None` if it has none.
pub fn newest_version(data: &DataStore) -> Result<Option<u64>, StorageError> {
    Ok(data
        .list(CATALOG_DIR)?
        .iter()
        .filter_map(|meta| {
            meta.location
                .filename()?
                .strip_suffix(".json")?
                .parse()
                .ok()
        })
        .max())
}

/// The object name of catalog version `version` in a shared store.
pub fn version_object(version: u64) -> String {
    format!("{CATALOG_DIR}/{version:020}.json")
}

/// Stores `state` as the catalog of `data`, atomically and durably, as its next version
/// (`state.version` counts one up).
pub fn store(data: &DataStore, state: &mut CatalogState) -> Result<(), StorageError> {
    state.version += 1;
    let bytes = serde_json::to_vec_pretty(state)
        .map_err(|e| StorageError::Catalog(format!("cannot encode the catalog: {e}")))?;
    if !data.is_shared() {
        return data.put(CATALOG_FILE, bytes.into(), false);
    }
    let name = version_object(state.version);
    let bytes = Bytes::from(bytes);
    match data.put(&name, bytes.clone(), true) {
        Ok(()) => {}
        Err(StorageError::ObjectStore { source, .. })
            if matches!(*source, object_store::Error::AlreadyExists { .. }) =>
        {
            // a retried request whose first try landed finds its own bytes
            if data.get(&name)?.as_ref() != Some(&bytes) {
                return Err(StorageError::Catalog(format!(
                    "catalog version {} exists already in {}: another writer uses this object store (one writer per object_store_url)",
                    state.version,
                    data.location()
                )));
            }
        }
        Err(other) => return Err(other),
    }
    if let Some(old) = state.version.checked_sub(KEPT_VERSIONS).filter(|&v| v > 0) {
        if let Err(e) = data.delete(&version_object(old)) {
            tracing::warn!(error = %e, "could not delete an old catalog version");
        }
    }
    Ok(())
}

/// Deletes what a writer that died left of catalogs before version `current`: a temporary
/// file, and in a shared store the versions older than the [`KEPT_VERSIONS`] newest.
pub fn sweep(data: &DataStore, current: u64) -> Result<(), StorageError> {
    if !data.is_shared() {
        // temporary files of storage's documents there (the catalog, the caches' settings)
        for meta in data.list_top()? {
            let name = meta.location.as_ref();
            let ours = [CATALOG_FILE, crate::VALUE_CACHES_FILE]
                .iter()
                .any(|file| name.starts_with(&format!("{file}.")));
            if ours && name.ends_with(TEMP_SUFFIX) {
                data.delete(meta.location.as_ref())?;
            }
        }
        return Ok(());
    }
    let oldest_kept = current.saturating_sub(KEPT_VERSIONS - 1);
    for meta in data.list(CATALOG_DIR)? {
        let name = meta.location.filename().unwrap_or_default();
        let old = match name.strip_suffix(".json").map(str::parse::<u64>) {
            Some(Ok(version)) => version < oldest_kept,
            _ => name.ends_with(TEMP_SUFFIX),
        };
        if old {
            if let Err(e) = data.delete(meta.location.as_ref()) {
                tracing::warn!(error = %e, "could not delete an old catalog version");
            }
        }
    }
    Ok(())
}

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

/// An exclusive lock on a data directory, held while the file stays open: two processes
/// writing one catalog and one WAL would destroy each other's files (each deletes the files
/// its catalog does not name). The operating system releases it when the process dies, so a
/// crash never leaves a stale lock behind.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    /// Locks `data_dir`, or fails saying that another process holds it.
    pub fn acquire(data_dir: &std::path::Path) -> Result<Self, StorageError> {
        let path = data_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::DataDirInUse {
                data_dir: data_dir.to_path_buf(),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(StorageError::io(&path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_state(empty: &CatalogState) -> CatalogState {
        let mut state = empty.clone();
        state.persisted_through_seq = 42;
        state
            .databases
            .entry("db".into())
            .or_default()
            .tables
            .insert(
                "cpu".into(),
                TableEntry {
                    id: 1,
                    version: 7,
                    columns: vec![
                        ColumnEntry::new("host", ColumnType::Tag),
                        ColumnEntry::new("time", ColumnType::Time),
                        ColumnEntry::new("v", ColumnType::Field(FieldType::UInteger)),
                    ],
                    files: vec![FileEntry {
                        id: 3,
                        path: "tables/db/1/2026-11-23/3.parquet".into(),
                        partition_start_ns: 0,
                        min_time_ns: 1,
                        max_time_ns: 2,
                        rows: 2,
                        bytes: 100,
                        generation: 1,
                        arrow_bytes: 400,
                    }],
                },
            );
        state
    }

    #[test]
    fn round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataStore::directory(dir.path()).unwrap();
        let empty = load(&data).unwrap();
        assert_eq!(empty.next_file_id, 1);
        let mut state = sample_state(&empty);
        store(&data, &mut state).unwrap();
        assert_eq!(state.version, 1);
        assert_eq!(load(&data).unwrap(), state);
        assert!(dir.path().join(CATALOG_FILE).is_file());
        assert!(!dir.path().join("catalog.json.tmp").exists());
        let columns = &state.databases["db"].tables["cpu"].columns;
        assert_eq!(
            columns[2].column_type().unwrap(),
            ColumnType::Field(FieldType::UInteger)
        );
    }

    #[test]
    fn a_shared_store_keeps_one_object_per_version_and_reads_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("bucket").display());
        let data = DataStore::shared(&url).unwrap();
        assert_eq!(newest_version(&data).unwrap(), None);
        let mut state = sample_state(&load(&data).unwrap());
        for round in 1..=KEPT_VERSIONS + 3 {
            state.persisted_through_seq = round;
            store(&data, &mut state).unwrap();
            assert_eq!(load(&data).unwrap(), state);
        }
        assert_eq!(newest_version(&data).unwrap(), Some(KEPT_VERSIONS + 3));
        // the oldest versions were deleted, the newest KEPT_VERSIONS kept
        let kept = data.list(CATALOG_DIR).unwrap().len() as u64;
        assert_eq!(kept, KEPT_VERSIONS);
        // a retried request whose first try landed finds its own bytes: stored
        let mut again = state.clone();
        again.version -= 1;
        store(&data, &mut again).unwrap();
        assert_eq!(again, state);
        // a version that exists already is another writer's: refused, nothing overwritten
        let mut rival = state.clone();
        rival.version -= 1;
        rival.persisted_through_seq = 0;
        let err = store(&data, &mut rival).unwrap_err().to_string();
        assert!(err.contains("another writer"), "{err}");
        assert_eq!(load(&data).unwrap(), state);
        // a garbage newest version is an error naming its object
        let garbage = version_object(state.version + 1);
        data.put(&garbage, Bytes::from_static(b"{\"format\":1,"), true)
            .unwrap();
        let err = load(&data).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{garbage} is not a valid catalog")),
            "{err}"
        );
    }

    #[test]
    fn corrupt_or_unknown_catalogs_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataStore::directory(dir.path()).unwrap();
        std::fs::write(dir.path().join(CATALOG_FILE), b"{not json").unwrap();
        let err = load(&data).unwrap_err().to_string();
        assert!(err.contains("catalog.json is not a valid catalog"), "{err}");
        std::fs::write(
            dir.path().join(CATALOG_FILE),
            br#"{"format":99,"persisted_through_seq":0,"next_file_id":1,"next_table_id":1,"databases":{}}"#,
        )
        .unwrap();
        let err = load(&data).unwrap_err().to_string();
        assert!(err.contains("format 99"), "{err}");
    }
}

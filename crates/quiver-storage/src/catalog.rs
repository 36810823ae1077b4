//! The durable catalog: databases, tables (schema, version, Parquet files) and how far the
//! write-ahead log has been persisted, in one JSON document (`catalog.json` in the data
//! directory) that is replaced atomically: written to a temporary file, fsynced, renamed over
//! the old one, and the directory fsynced. A reader therefore sees the old catalog or the new
//! one, never a mix, whatever moment the process dies at.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use quiver_model::schema::{ColumnType, FieldType};
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::retention::RetentionPeriod;

/// The catalog file's name inside the data directory.
pub const CATALOG_FILE: &str = "catalog.json";

/// The catalog format this build writes and reads.
const FORMAT: u32 = 1;

/// Everything the catalog records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CatalogState {
    /// Format version of the document.
    pub format: u32,
    /// Every WAL record with a sequence number up to this one is in the Parquet files below
    /// (replay skips them, and their segments may be deleted).
    pub persisted_through_seq: u64,
    /// The next Parquet file id to hand out (ids are never reused).
    pub next_file_id: u64,
    /// The next table id to hand out (table directories are named by id, never by name).
    pub next_table_id: u64,
    /// Databases by name.
    pub databases: BTreeMap<String, DatabaseEntry>,
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

/// One immutable Parquet file of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Unique, never reused id (also the file name).
    pub id: u64,
    /// Path relative to the data directory.
    pub path: String,
    /// Start of the time partition the file belongs to (ns since the epoch, UTC).
    pub partition_start_ns: i64,
    /// Smallest `time` in the file (ns).
    pub min_time_ns: i64,
    /// Largest `time` in the file (ns).
    pub max_time_ns: i64,
    /// Row count.
    pub rows: u64,
    /// Size in bytes.
    pub bytes: u64,
    /// How many compactions the rows went through: 0 for a file written by a persist, one
    /// more than the newest of its inputs for a compacted file (catalogs written before
    /// compaction existed read as 0).
    #[serde(default)]
    pub generation: u32,
    /// Bytes its rows take in memory as Arrow arrays: what a merge holding them costs
    /// (catalogs written before it was recorded read as 0, see [`FileEntry::memory_bytes`]).
    #[serde(default)]
    pub arrow_bytes: u64,
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

impl FileEntry {
    /// Bytes the file's rows take in memory once read: as recorded, or, for files written
    /// before that was recorded, eight times the file's size (a generous guess).
    pub fn memory_bytes(&self) -> u64 {
        match self.arrow_bytes {
            0 => self.bytes.saturating_mul(8),
            recorded => recorded,
        }
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

/// Reads `catalog.json` from `data_dir`; a missing file is an empty catalog.
pub fn load(data_dir: &Path) -> Result<CatalogState, StorageError> {
    let path = data_dir.join(CATALOG_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(CatalogState {
                format: FORMAT,
                next_file_id: 1,
                next_table_id: 1,
                ..CatalogState::default()
            })
        }
        Err(e) => return Err(StorageError::io(&path, e)),
    };
    let state: CatalogState = serde_json::from_slice(&bytes).map_err(|e| {
        StorageError::Catalog(format!("{} is not a valid catalog: {e}", path.display()))
    })?;
    if state.format != FORMAT {
        return Err(StorageError::Catalog(format!(
            "{} has format {}, this build reads format {FORMAT}",
            path.display(),
            state.format
        )));
    }
    Ok(state)
}

/// Replaces `catalog.json` in `data_dir` with `state`, atomically and durably.
pub fn store(data_dir: &Path, state: &CatalogState) -> Result<(), StorageError> {
    let bytes = serde_json::to_vec_pretty(state)
        .map_err(|e| StorageError::Catalog(format!("cannot encode the catalog: {e}")))?;
    replace_durably(data_dir, CATALOG_FILE, &bytes)
}

/// Replaces the file `name` in `dir` with `bytes`, atomically (a reader sees the old or the
/// new file, never a part) and durably: written to `<name>.tmp`, fsynced, renamed over
/// `name`, and the directory fsynced.
pub(crate) fn replace_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StorageError> {
    let path = dir.join(name);
    let temp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&temp).map_err(|e| StorageError::io(&temp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| StorageError::io(&temp, e))?;
    drop(file);
    std::fs::rename(&temp, &path).map_err(|e| StorageError::io(&path, e))?;
    sync_dir(dir)
}

/// Fsyncs a directory so that entries created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(dir, e))
}

/// Creates `dir` and any missing parents, fsyncing each parent whose entries changed, so the
/// new directories survive a power cut.
pub fn create_dir_durably(dir: &Path) -> Result<(), StorageError> {
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cursor = d.parent();
    }
    for d in missing.iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StorageError::io(d, e)),
        }
        if let Some(parent) = d.parent() {
            sync_dir(parent)?;
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
    pub fn acquire(data_dir: &Path) -> Result<Self, StorageError> {
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

    #[test]
    fn round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let empty = load(dir.path()).unwrap();
        assert_eq!(empty.next_file_id, 1);
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
        store(dir.path(), &state).unwrap();
        assert_eq!(load(dir.path()).unwrap(), state);
        assert!(!dir.path().join("catalog.json.tmp").exists());
        let columns = &state.databases["db"].tables["cpu"].columns;
        assert_eq!(
            columns[2].column_type().unwrap(),
            ColumnType::Field(FieldType::UInteger)
        );
    }

    #[test]
    fn corrupt_or_unknown_catalogs_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CATALOG_FILE), b"{not json").unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("catalog.json is not a valid catalog"), "{err}");
        std::fs::write(
            dir.path().join(CATALOG_FILE),
            br#"{"format":99,"persisted_through_seq":0,"next_file_id":1,"next_table_id":1,"databases":{}}"#,
        )
        .unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("format 99"), "{err}");
    }
}

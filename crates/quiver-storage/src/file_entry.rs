//! One immutable Parquet file of a table as the catalog records it ([`FileEntry`]): below the
//! catalog, the data store and retention, which all read it.

use serde::{Deserialize, Serialize};

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

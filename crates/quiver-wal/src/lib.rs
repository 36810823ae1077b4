//! `quiver-wal` owns the write-ahead log: append-only segment files of CRC-checked records,
//! group commit (many writers share one `write` + one `fdatasync`), and replay on start.
//!
//! The log stores opaque payloads; it knows nothing about Arrow or SQL. Each record gets a
//! sequence number, strictly increasing across segments. The commit thread hands every record
//! to an [`Apply`] sink *in sequence order* once it is durable (or, for `no_sync` records, once
//! it is written), and only then completes the writer's future: so what a reader can see is
//! always a durable prefix of the log, and replay rebuilds exactly that state.
//!
//! Segment layout (`wal/<first sequence, 20 digits>.wal`):
//!
//! ```text
//! header:  b"QVRWAL01"
//! record:  len u32 LE | crc32 u32 LE (over seq and payload) | seq u64 LE | payload (len bytes)
//! ```

mod commit;
mod payload;
mod segment;

pub use commit::{Apply, Durability, Wal, WalOptions, WalStats};
pub use payload::Payload;
pub use segment::{Recovery, ReplaySummary};

use std::path::PathBuf;

/// Why the log could not be opened, replayed or written.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file-system operation failed.
    #[error("WAL I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A record that is not the last one failed its length or CRC check.
    #[error(
        "WAL segment {path} is corrupt at byte offset {offset}: {reason}; valid records follow it, \
         so this is not a torn write. Start with wal_recovery = \"truncate\" (QUIVER_WAL_RECOVERY=truncate) \
         to drop this record and everything after it"
    )]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the bad record in that file.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// A segment does not start with the WAL header.
    #[error("{path} is not a Quiver WAL segment (bad header)")]
    BadHeader {
        /// The file.
        path: PathBuf,
    },
    /// A payload is larger than a record may be.
    #[error("the write needs a WAL record of {size} bytes, more than the maximum of {limit}")]
    RecordTooLarge {
        /// The payload size.
        size: usize,
        /// The maximum record size.
        limit: usize,
    },
    /// The commit thread stopped after an I/O error; no further writes are accepted.
    #[error("the WAL is closed after an earlier write or sync failure: {0}")]
    Closed(String),
    /// The sink rejected a replayed record.
    #[error("replaying WAL record {seq} from {path} failed: {message}")]
    Replay {
        /// Sequence number of the record.
        seq: u64,
        /// Its segment.
        path: PathBuf,
        /// The sink's error.
        message: String,
    },
}

impl WalError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> WalError {
        let path = path.into();
        move |source| WalError::Io { path, source }
    }
}

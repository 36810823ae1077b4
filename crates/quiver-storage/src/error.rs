//! Errors of the storage layer, each a sentence a user can act on, and the kind of failure
//! each is.

use quiver_model::{Classify, ErrorKind};
use quiver_wal::WalError;

/// What can go wrong when writing to or reading from storage.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A database name outside the allowed alphabet or length.
    #[error("invalid database name {name:?}: {reason}")]
    InvalidDatabaseName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A table name that cannot be stored.
    #[error("invalid table name {name:?}: {reason}")]
    InvalidTableName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A column whose type differs from the one the table already has.
    #[error("column {column:?} of table {table:?} is {existing}; the write has it as {written}")]
    SchemaConflict {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The type the table has.
        existing: String,
        /// The type the write tried to use.
        written: String,
    },
    /// An Arrow type outside Quiver's data model.
    #[error("column {column:?} of table {table:?} has type {data_type}, which is not a Quiver column type")]
    UnsupportedColumn {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The offending Arrow type.
        data_type: String,
    },
    /// The write would give a table more columns than allowed.
    #[error("table {table:?} would exceed the limit of {limit} columns")]
    TooManyColumns {
        /// The table.
        table: String,
        /// The configured limit.
        limit: usize,
    },
    /// The write would give a database more tables than allowed.
    #[error("database {database:?} would exceed the limit of {limit} tables")]
    TooManyTables {
        /// The database.
        database: String,
        /// The configured limit.
        limit: usize,
    },
    /// A table would get more rollups, or caches of one kind, than allowed.
    #[error("table {table:?} would exceed the limit of {limit} {what}; drop one first")]
    TooManyOnTable {
        /// The table.
        table: String,
        /// `rollups`, `last caches` or `distinct caches`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// Too many databases.
    #[error("the server would exceed the limit of {limit} databases")]
    TooManyDatabases {
        /// The configured limit.
        limit: usize,
    },
    /// An Arrow kernel failed (a bug, or memory exhaustion).
    #[error("arrow error in storage: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// The write-ahead log failed (I/O, shutdown, corruption at startup).
    #[error(transparent)]
    Wal(#[from] quiver_wal::WalError),
    /// A WAL record could not be decoded during replay.
    #[error("corrupt WAL record: {0}")]
    CorruptRecord(String),
    /// A file of the data directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A request to the object store failed (after its retries).
    #[error("object store {location}: {path}: {source}")]
    ObjectStore {
        /// Where the store is (`s3://bucket/prefix`, a directory).
        location: String,
        /// The object.
        path: String,
        /// The store's complaint.
        source: Box<object_store::Error>,
    },
    /// A data file the catalog names could not be read whole.
    #[error("cannot read the data file {path}: {reason}")]
    Unreadable {
        /// The file's catalog-relative path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A change asked of a node that serves queries only.
    #[error(
        "this node serves queries only (role = query): {what} go to the writer node (role = all)"
    )]
    QueryNode {
        /// What was asked, e.g. `writes`.
        what: &'static str,
    },
    /// A query node has not heard from the object store for too long to know its answers
    /// are current.
    #[error("this query node has not reached the object store for {seconds} s, so its answers could be stale: {reason}")]
    Stale {
        /// Seconds since the store last answered.
        seconds: u64,
        /// The last failure.
        reason: String,
    },
    /// Another process (a second server) has the data directory open.
    #[error("data directory {} is in use by another Quiver process (it holds {}/LOCK); stop that process or choose another data_dir", data_dir.display(), data_dir.display())]
    DataDirInUse {
        /// The data directory.
        data_dir: std::path::PathBuf,
    },
    /// A database or table the request names does not exist.
    #[error("{what} does not exist")]
    NotFound {
        /// What was asked for, e.g. `database "metrics"`.
        what: String,
    },
    /// A database the request would create exists already.
    #[error("{what} already exists")]
    AlreadyExists {
        /// What exists, e.g. `database "metrics"`.
        what: String,
    },
    /// A last-value or distinct-value cache whose settings cannot be used.
    #[error("invalid cache: {reason}")]
    InvalidValueCache {
        /// Why.
        reason: String,
    },
    /// A write to a rollup: rollups are kept from their base table, never written.
    #[error("{name:?} is a rollup of table {table:?}: it is read-only (write to {table:?})")]
    RollupIsReadOnly {
        /// The rollup.
        name: String,
        /// Its base table.
        table: String,
    },
    /// A compaction was asked for while an asked-for one still runs.
    #[error("a requested compaction is already running; ask again once it has finished")]
    CompactionRunning,
    /// A retention period that is not a positive duration such as `30d`, or `none`.
    #[error("invalid retention period {value:?}: {reason}")]
    InvalidRetention {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store was closed (the server is stopping): nothing more is written.
    #[error("the store is closed: the server is stopping")]
    Closed,
    /// The catalog file is unreadable or inconsistent.
    #[error("catalog: {0}")]
    Catalog(String),
    /// Writing or reading a Parquet file failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Reading the Parquet file at `path` failed.
    #[error("cannot read the Parquet file {path}: {source}")]
    ParquetFile {
        /// The file's catalog-relative path.
        path: String,
        /// The decoder's complaint.
        source: parquet::errors::ParquetError,
    },
    /// The write buffer is full and persisting it to Parquet is failing.
    #[error("the write buffer is full ({buffered} of {limit} bytes) and persisting it failed: {reason}; writes resume once persistence succeeds")]
    BufferFull {
        /// Bytes buffered.
        buffered: usize,
        /// The configured maximum (`max_buffer_bytes`).
        limit: usize,
        /// The last persistence error.
        reason: String,
    },
    /// The write buffer is full, persisting is running but has not made room within
    /// `max_buffer_wait`: ingest outruns persisting. The write was not taken.
    #[error("the write buffer is full ({buffered} of {limit} bytes, max_buffer_bytes) and persisting has not made room within max_buffer_wait_secs ({waited:?}): ingest outruns persisting; the write was not taken, retry it in a moment")]
    BufferBusy {
        /// Bytes buffered.
        buffered: usize,
        /// The configured maximum (`max_buffer_bytes`).
        limit: usize,
        /// How long the write waited (`max_buffer_wait_secs`).
        waited: std::time::Duration,
    },
}

impl StorageError {
    /// A failure reading the Parquet file at `path` (catalog-relative).
    pub fn parquet(path: &str, source: parquet::errors::ParquetError) -> Self {
        StorageError::ParquetFile {
            path: path.to_string(),
            source,
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<quiver_model::durable_fs::DurableFsError> for StorageError {
    fn from(e: quiver_model::durable_fs::DurableFsError) -> Self {
        StorageError::Io {
            path: e.path,
            source: e.source,
        }
    }
}

impl Classify for StorageError {
    fn kind(&self) -> ErrorKind {
        match self {
            StorageError::InvalidDatabaseName { .. }
            | StorageError::InvalidTableName { .. }
            | StorageError::SchemaConflict { .. }
            | StorageError::UnsupportedColumn { .. }
            | StorageError::InvalidRetention { .. }
            | StorageError::RollupIsReadOnly { .. }
            | StorageError::InvalidValueCache { .. } => ErrorKind::Invalid,
            StorageError::AlreadyExists { .. } | StorageError::CompactionRunning => {
                ErrorKind::Conflict
            }
            StorageError::BufferBusy { .. } => ErrorKind::Busy,
            StorageError::NotFound { .. } => ErrorKind::NotFound,
            StorageError::TooManyColumns { .. }
            | StorageError::TooManyTables { .. }
            | StorageError::TooManyOnTable { .. }
            | StorageError::TooManyDatabases { .. } => ErrorKind::LimitExceeded,
            StorageError::Wal(WalError::RecordTooLarge { .. }) => ErrorKind::TooLarge,
            // the write was not acknowledged: the log is failing or the server is stopping
            StorageError::Wal(_)
            | StorageError::BufferFull { .. }
            | StorageError::Closed
            | StorageError::ObjectStore { .. }
            | StorageError::Stale { .. } => ErrorKind::Unavailable,
            StorageError::QueryNode { .. } => ErrorKind::PermissionDenied,
            StorageError::Arrow(_)
            | StorageError::CorruptRecord(_)
            | StorageError::Io { .. }
            | StorageError::DataDirInUse { .. }
            | StorageError::Catalog(_)
            | StorageError::Parquet(_)
            | StorageError::ParquetFile { .. }
            | StorageError::Unreadable { .. } => ErrorKind::Internal,
        }
    }
}

//! What a store is opened with: its [`StoreAccess`] (writer or follower) and [`StoreOptions`]
//! (the server's configuration keys for where the data lives, the WAL, persistence,
//! compaction, the chunk cache and retention), and the fixed names and delays of a data directory and a shared store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quiver_wal::WalOptions;
use serde::{Deserialize, Serialize};

use crate::compaction::CompactionOptions;
use crate::parquet_write::PersistOptions;
use crate::retention::RetentionPeriod;

/// The WAL's directory inside the data directory, unless the options name another.
pub const WAL_DIR: &str = "wal";

/// How long files that no catalog names any more stay in a shared store before they are
/// deleted: a query node may still be reading one through a catalog it holds.
pub(crate) const SHARED_DELETE_DELAY: Duration = Duration::from_secs(10 * 60);

/// Where a shared store keeps the documents the writer shares with query nodes (the tokens).
pub(crate) const SHARED_DIR: &str = "shared";

/// Where the writer's published document `name` is in a shared store (under [`SHARED_DIR`]).
pub(crate) fn shared_document(name: &str) -> String {
    format!("{SHARED_DIR}/{name}")
}

/// How a store is opened: by the one writer of its data, or by a follower of the writer's
/// catalog. The server derives it from its `role`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreAccess {
    /// Writes (WAL, persistence, compaction, retention) and reads: the one writer.
    #[default]
    Writer,
    /// Reads only, over the writer's `object_store_url`: no WAL; follows the writer's
    /// catalog.
    Follower,
}

/// Where a durable store keeps its data and when it persists. The serde names are the
/// server's configuration keys (the WAL's and persistence's keys sit beside `data_dir`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreOptions {
    /// Directory for the server's data: `catalog.json`, `tables/`, `wal/` and the `LOCK` that
    /// keeps a second server out. A relative name is resolved against the working directory
    /// once, at start-up. With `object_store_url`, the catalog and the tables' files live
    /// there instead and this directory keeps the WAL, rollups, caches' settings and tokens.
    pub data_dir: PathBuf,
    /// Where the catalog and the Parquet files live when not in `data_dir`: a directory
    /// (`file:///srv/quiver`) or an S3-compatible bucket (`s3://bucket/prefix`; endpoint,
    /// region and credentials from `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`) that query nodes read too. Empty: `data_dir`.
    pub object_store_url: String,
    /// Whether this store is the writer or a follower (not a configuration key of its own:
    /// the server sets it from its `role`).
    #[serde(skip)]
    pub access: StoreAccess,
    /// The write-ahead log (in `<data_dir>/wal` unless `wal.dir` names another directory).
    #[serde(flatten)]
    pub wal: WalOptions,
    /// Persistence thresholds and file layout.
    #[serde(flatten)]
    pub persist: PersistOptions,
    /// When and how files are merged.
    #[serde(flatten)]
    pub compaction: CompactionOptions,
    /// Bytes the chunk cache (parsed Parquet metadata and column chunks, see
    /// [`ChunkCache`](crate::ChunkCache)) may hold; 0 turns it off. Default: 1/16 of the
    /// memory available (physical or cgroup), 64 MiB–8 GiB.
    pub chunk_cache_bytes: u64,
    /// How long databases without a retention period of their own keep rows (`30d`, `12h`,
    /// ...); `none` (the default) keeps them forever.
    pub retention_period: RetentionPeriod,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            data_dir: PathBuf::from("./quiver-data"),
            object_store_url: String::new(),
            access: StoreAccess::Writer,
            wal: WalOptions::default(),
            persist: PersistOptions::default(),
            compaction: CompactionOptions::default(),
            chunk_cache_bytes: quiver_model::settings::share_of_memory(
                16,
                64 << 20,
                8 << 30,
                1 << 30,
            ),
            retention_period: RetentionPeriod::FOREVER,
        }
    }
}

impl StoreOptions {
    /// Options for tests and tools: data and WAL (`<dir>/wal`, 64 KiB segments, no fsync)
    /// in `dir`, persisting and compacting only when asked
    /// ([`Store::persist_now`](crate::Store::persist_now),
    /// [`Store::compact_now`](crate::Store::compact_now)). Adjust fields as needed.
    pub fn for_tests(dir: &Path) -> Self {
        StoreOptions {
            data_dir: dir.to_path_buf(),
            object_store_url: String::new(),
            access: StoreAccess::Writer,
            wal: WalOptions {
                segment_bytes: 64 << 10,
                fsync: false,
                ..WalOptions::default()
            },
            persist: PersistOptions {
                persist_bytes: usize::MAX / 2,
                max_buffer_bytes: usize::MAX,
                max_age: Duration::from_secs(24 * 3600),
                ..PersistOptions::default()
            },
            compaction: CompactionOptions {
                enabled: false,
                ..CompactionOptions::default()
            },
            chunk_cache_bytes: 64 << 20,
            retention_period: RetentionPeriod::FOREVER,
        }
    }
}

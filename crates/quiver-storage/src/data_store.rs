//! Where a store's data files and catalog live: one [`DataStore`] owned by the store and
//! shared by every reader (storage's own, and the query engine's Parquet scans, which
//! register its [`ObjectStore`]). It is the data directory by default, a directory or an
//! S3-compatible bucket named by `object_store_url` (shared with query nodes), or nothing for
//! a memory-only store. Files are addressed by their catalog-relative paths
//! ([`crate::FileEntry::path`]), so nothing about where the store is reaches a reader.
//!
//! Storage reads and writes from synchronous code (persister threads, the query runtime's
//! blocking pool): each request runs on a small runtime of storage's own ([`wait`]), so the
//! caller's thread may be any (none of tokio's, or a blocking-pool one) and a store that
//! needs a reactor (a network one) has one. Requests to a bucket are retried with backoff and
//! bounded by timeouts (see [`REQUEST_TIMEOUT`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{
    BackoffConfig, ClientConfigKey, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};
use quiver_model::durable_fs::{create_dir_durably, create_durably, replace_durably, Access};

use crate::file_entry::FileEntry;
use crate::StorageError;

/// How long one request to a bucket may take, each try.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connecting to a bucket's endpoint may take, each try.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a request to a bucket is retried (with backoff from 100 ms to 5 s) before it
/// fails: a persist that fails is tried again by the persister, so this only bounds one try.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the data files and the catalog are kept (see the module documentation).
#[derive(Debug, Clone)]
pub struct DataStore {
    objects: Arc<dyn ObjectStore>,
    /// The directory whose files the objects are, written with fsyncs; `None` for a bucket
    /// or memory.
    local_dir: Option<PathBuf>,
    /// Whether other servers read it (set by `object_store_url`): then the catalog is kept
    /// as one object per version (see [`crate::catalog`]), and files leave it only after
    /// a delay.
    shared: bool,
    /// Where it is, for messages: a directory, `s3://bucket/prefix` or `memory`.
    location: String,
}

impl DataStore {
    /// The data directory `data_dir`, an existing absolute directory, read only by this server.
    pub(crate) fn directory(data_dir: &Path) -> Result<Self, StorageError> {
        let objects = LocalFileSystem::new_with_prefix(data_dir)
            .map_err(|e| StorageError::io(data_dir, std::io::Error::other(e)))?;
        Ok(DataStore {
            objects: Arc::new(objects),
            local_dir: Some(data_dir.to_path_buf()),
            shared: false,
            location: data_dir.display().to_string(),
        })
    }

    /// The store of a memory-only store: it has no files.
    pub(crate) fn memory() -> Self {
        DataStore {
            objects: Arc::new(InMemory::new()),
            local_dir: None,
            shared: false,
            location: "memory".into(),
        }
    }

    /// The shared store `url` names: `file:///absolute/dir` (created if missing) or
    /// `s3://bucket[/prefix]`, whose endpoint, region and credentials come from the
    /// environment as the AWS tools read them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`).
    pub(crate) fn shared(url: &str) -> Result<Self, StorageError> {
        let invalid = |reason: String| {
            StorageError::Catalog(format!("object_store_url {url:?} cannot be used: {reason}"))
        };
        if let Some(path) = url.strip_prefix("file://") {
            let dir = Path::new(path);
            if !dir.is_absolute() {
                return Err(invalid(
                    "a file:// URL names an absolute directory, as file:///srv/quiver".into(),
                ));
            }
            create_dir_durably(dir)?;
            let dir = std::fs::canonicalize(dir).map_err(|e| StorageError::io(dir, e))?;
            return Ok(DataStore {
                shared: true,
                location: url.to_string(),
                ..DataStore::directory(&dir)?
            });
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(invalid("it must start with file:// or s3://".into()));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid("it names no bucket (s3://bucket/prefix)".into()));
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: 10,
            retry_timeout: RETRY_TIMEOUT,
        };
        // reqwest's TLS takes the process's crypto provider: ring, as the listeners use (a
        // second call finds it installed, which is fine)
        let _ = rustls::crypto::ring::default_provider().install_default();
        // set key by key: a whole `ClientOptions` would drop what the environment set
        // (`AWS_ALLOW_HTTP` is one of its keys)
        let seconds = |d: Duration| format!("{}s", d.as_secs());
        let bucket_store = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(retry)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                seconds(REQUEST_TIMEOUT),
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                seconds(CONNECT_TIMEOUT),
            )
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let prefix = prefix.trim_matches('/');
        let objects: Arc<dyn ObjectStore> = match prefix {
            "" => Arc::new(bucket_store),
            prefix => Arc::new(PrefixStore::new(bucket_store, prefix)),
        };
        Ok(DataStore {
            objects,
            local_dir: None,
            shared: true,
            location: url.trim_end_matches('/').to_string(),
        })
    }

    /// The object store itself, for readers that take one (DataFusion's scans).
    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    /// Whether other servers read it (`object_store_url` is set).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// How long a file no catalog names any more stays before it is deleted: in a shared
    /// store [`crate::SHARED_DELETE_DELAY`] (a query node may still read it through a catalog
    /// it holds), else nothing (this server's own readers hold what they read).
    pub(crate) fn delete_delay(&self) -> std::time::Duration {
        match self.shared {
            true => crate::SHARED_DELETE_DELAY,
            false => std::time::Duration::ZERO,
        }
    }

    /// Where it is: a directory, a `file://` or `s3://` URL, or `memory`.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The error for a failed request about `path`, naming the store and the object.
    fn failed(&self, path: &str, e: object_store::Error) -> StorageError {
        StorageError::ObjectStore {
            location: self.location.clone(),
            path: path.to_string(),
            source: Box::new(e),
        }
    }

    /// Stores `bytes` as the object `path`, durably (a local file is fsynced with its
    /// directory); with `create`, fails if the object exists already (where the store can
    /// tell: a bucket without conditional puts overwrites).
    pub(crate) fn put(&self, path: &str, bytes: Bytes, create: bool) -> Result<(), StorageError> {
        if let Some(dir) = &self.local_dir {
            let file = dir.join(path);
            if create {
                return create_durably(&file, &bytes).map_err(|e| {
                    match e.source.kind() == std::io::ErrorKind::AlreadyExists {
                        true => self.failed(
                            path,
                            object_store::Error::AlreadyExists {
                                path: path.to_string(),
                                source: e.source.into(),
                            },
                        ),
                        false => e.into(),
                    }
                });
            }
            let (parent, name) = (
                file.parent().expect("a parent"),
                file.file_name().expect("a name"),
            );
            create_dir_durably(parent)?;
            let name = name.to_string_lossy();
            return Ok(replace_durably(parent, &name, &bytes, Access::Default)?);
        }
        let mode = if create {
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        let (objects, object) = (self.objects.clone(), ObjectPath::from(path));
        let payload = PutPayload::from(bytes);
        let options = PutOptions::from(mode.clone());
        let stored = wait(async move {
            match objects.put_opts(&object, payload.clone(), options).await {
                // a bucket that cannot put conditionally: one writer per store is the rule
                Err(object_store::Error::NotImplemented { .. }) => {
                    objects.put(&object, payload).await.map(|_| ())
                }
                other => other.map(|_| ()),
            }
        });
        stored.map_err(|e| self.failed(path, e))
    }

    /// The object `path`, or `None` if there is none.
    pub(crate) fn get(&self, path: &str) -> Result<Option<Bytes>, StorageError> {
        let (objects, object) = (self.objects.clone(), ObjectPath::from(path));
        match wait(async move { objects.get(&object).await?.bytes().await }) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed(path, e)),
        }
    }

    /// Deletes the object `path`; one that is gone already is no error.
    pub(crate) fn delete(&self, path: &str) -> Result<(), StorageError> {
        if let Some(dir) = &self.local_dir {
            let file = dir.join(path);
            return match std::fs::remove_file(&file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(StorageError::io(&file, e))
                }
                _ => Ok(()),
            };
        }
        let (objects, object) = (self.objects.clone(), ObjectPath::from(path));
        match wait(async move { objects.delete(&object).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed(path, e)),
        }
    }

    /// The objects directly at the top of the store (not under a directory-like prefix).
    pub(crate) fn list_top(&self) -> Result<Vec<ObjectMeta>, StorageError> {
        let objects = self.objects.clone();
        wait(async move { objects.list_with_delimiter(None).await })
            .map(|listing| listing.objects)
            .map_err(|e| self.failed("", e))
    }

    /// Every object under `prefix` (a directory-like path such as `tables`), in no order.
    pub(crate) fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        if let Some(dir) = &self.local_dir {
            if !dir.join(prefix).exists() {
                return Ok(Vec::new());
            }
        }
        let (objects, under) = (self.objects.clone(), ObjectPath::from(prefix));
        wait(async move { objects.list(Some(&under)).try_collect::<Vec<_>>().await })
            .map_err(|e| self.failed(prefix, e))
    }
}

/// The runtime object store requests of synchronous readers run on.
fn io_runtime() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("quiver-storage-io")
            .enable_all()
            .build()
            .expect("the storage I/O runtime starts (threads and an I/O driver)")
    })
}

/// Runs `request` on the storage I/O runtime and waits for its outcome, from any thread but
/// one of that runtime's own.
fn wait<T: Send + 'static>(
    request: impl Future<Output = object_store::Result<T>> + Send + 'static,
) -> object_store::Result<T> {
    let (sender, outcome) = std::sync::mpsc::sync_channel(1);
    io_runtime().spawn(async move {
        // the receiver waits until this is sent: it cannot be gone
        let _ = sender.send(request.await);
    });
    outcome.recv().unwrap_or_else(|_| {
        Err(object_store::Error::Generic {
            store: "quiver",
            source: "the storage I/O task stopped before it answered".into(),
        })
    })
}

/// The whole of the file `entry` names in `store`, read in one request (storage reads files
/// whole or nearly: a merge, every file's last rows, a file's columns), checked against the
/// size the catalog recorded. The `parquet` crate reads it from memory.
pub(crate) fn read_whole(
    store: &Arc<dyn ObjectStore>,
    entry: &FileEntry,
) -> Result<Bytes, StorageError> {
    let (store, path) = (store.clone(), ObjectPath::from(entry.path.as_str()));
    let unreadable = |e: object_store::Error| StorageError::Unreadable {
        path: entry.path.clone(),
        reason: e.to_string(),
    };
    let bytes = wait(async move { store.get(&path).await?.bytes().await }).map_err(unreadable)?;
    if bytes.len() as u64 != entry.bytes {
        return Err(StorageError::Unreadable {
            path: entry.path.clone(),
            reason: format!(
                "it has {} bytes where the catalog recorded {}",
                bytes.len(),
                entry.bytes
            ),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, bytes: u64) -> FileEntry {
        FileEntry {
            id: 1,
            path: path.into(),
            partition_start_ns: 0,
            min_time_ns: 0,
            max_time_ns: 0,
            rows: 0,
            bytes,
            generation: 0,
            arrow_bytes: 0,
        }
    }

    #[test]
    fn reads_files_by_their_catalog_relative_paths_under_any_directory_name() {
        // the directory's own name may hold anything; the catalog's paths are made of
        // database names (ASCII letters, digits, '_', '-'), ids and partition labels, which an
        // object path keeps as they are
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data dir %é");
        let relative = "tables/metrics-1/7/2024-01-01/0000000000000001.parquet";
        let content: Vec<u8> = (0..300_017u32).map(|i| i as u8).collect();
        std::fs::create_dir_all(data_dir.join(relative).parent().unwrap()).unwrap();
        std::fs::write(data_dir.join(relative), &content).unwrap();
        let store = DataStore::directory(&data_dir).unwrap().objects().clone();
        let read = read_whole(&store, &entry(relative, content.len() as u64)).unwrap();
        assert_eq!(&read[..], &content[..]);
        // a file whose size is not the catalog's is refused, not half read
        let err = read_whole(&store, &entry(relative, 5)).unwrap_err();
        assert!(err.to_string().contains("the catalog recorded 5"), "{err}");
    }

    #[test]
    fn a_missing_file_is_an_error_not_a_hang_from_any_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = DataStore::directory(dir.path()).unwrap().objects().clone();
        let gone = entry("tables/gone.parquet", 10);
        assert!(read_whole(&store, &gone).is_err());
        // from a tokio blocking-pool thread too (how the query engine reads)
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let reading = runtime.spawn_blocking(move || read_whole(&store, &gone).is_err());
        assert!(runtime.block_on(reading).unwrap());
        assert!(read_whole(DataStore::memory().objects(), &entry("tables/x.parquet", 0)).is_err());
    }
}

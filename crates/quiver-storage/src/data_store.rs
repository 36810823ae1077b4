//! Where a store's data files are read from: one [`ObjectStore`] owned by the store and shared
//! by every reader (storage's own, and the query engine's Parquet scans, which register it).
//! A durable store's is its data directory; a memory-only store's is empty. Files are
//! addressed by their catalog-relative paths ([`crate::FileEntry::path`]), so nothing about
//! the directory's own path reaches a reader, and an object store of another kind can take the
//! directory's place.
//!
//! Storage reads files from synchronous code (persister threads, the query runtime's blocking
//! pool): [`read_whole`] fetches a file in one request, which runs on a small runtime of
//! storage's own ([`wait`]), so the caller's thread may be any (none of tokio's, or a
//! blocking-pool one) and a store that needs a reactor (a network one) has one.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::catalog::FileEntry;
use crate::StorageError;

/// The object store over `data_dir`, an existing absolute directory.
pub(crate) fn local(data_dir: &Path) -> Result<Arc<dyn ObjectStore>, StorageError> {
    let store = LocalFileSystem::new_with_prefix(data_dir)
        .map_err(|e| StorageError::io(data_dir, std::io::Error::other(e)))?;
    Ok(Arc::new(store))
}

/// The object store of a memory-only store: it has no files.
pub(crate) fn empty() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
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
    let unreadable =
        |e: object_store::Error| StorageError::io(Path::new(&entry.path), std::io::Error::other(e));
    let bytes = wait(async move { store.get(&path).await?.bytes().await }).map_err(unreadable)?;
    if bytes.len() as u64 != entry.bytes {
        return Err(StorageError::io(
            Path::new(&entry.path),
            std::io::Error::other(format!(
                "the file has {} bytes where the catalog recorded {}",
                bytes.len(),
                entry.bytes
            )),
        ));
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
        let store = local(&data_dir).unwrap();
        let read = read_whole(&store, &entry(relative, content.len() as u64)).unwrap();
        assert_eq!(&read[..], &content[..]);
        // a file whose size is not the catalog's is refused, not half read
        let err = read_whole(&store, &entry(relative, 5)).unwrap_err();
        assert!(err.to_string().contains("the catalog recorded 5"), "{err}");
    }

    #[test]
    fn a_missing_file_is_an_error_not_a_hang_from_any_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = local(dir.path()).unwrap();
        let gone = entry("tables/gone.parquet", 10);
        assert!(read_whole(&store, &gone).is_err());
        // from a tokio blocking-pool thread too (how the query engine reads)
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let reading = runtime.spawn_blocking(move || read_whole(&store, &gone).is_err());
        assert!(runtime.block_on(reading).unwrap());
        assert!(read_whole(&empty(), &entry("tables/x.parquet", 0)).is_err());
    }
}

//! Where a store's data files are read from: one [`ObjectStore`] owned by the store and shared
//! by every reader (storage's own, and the query engine's Parquet scans, which register it).
//! A durable store's is its data directory; a memory-only store's is empty. Files are
//! addressed by their catalog-relative paths ([`crate::FileEntry::path`]), so nothing about
//! the directory's own path reaches a reader, and an object store of another kind can take the
//! directory's place.
//!
//! Storage reads files from synchronous code (persister threads, the query runtime's blocking
//! pool): [`StoreFile`] is the `parquet` crate's synchronous reader over the object store. Its
//! requests run on a small runtime of storage's own ([`wait`]), so the caller's thread may be
//! any (none of tokio's, or a blocking-pool one) and a store that needs a reactor (a network
//! one) has one.

use std::future::Future;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use crate::catalog::FileEntry;
use crate::StorageError;

/// Bytes fetched at a time by a sequential read ([`ChunkReader::get_read`], which the
/// `parquet` crate uses for page headers and the pages after them).
const READ_BLOCK_BYTES: u64 = 256 * 1024;

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

/// A Parquet file of a data store, read synchronously by ranges: the footer and column chunks
/// as one request each, sequential reads in blocks of [`READ_BLOCK_BYTES`].
#[derive(Clone)]
pub(crate) struct StoreFile {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    /// The file's size as the catalog recorded it.
    size: u64,
}

impl StoreFile {
    /// The file `entry` names in `store`.
    pub(crate) fn new(store: &Arc<dyn ObjectStore>, entry: &FileEntry) -> Self {
        StoreFile {
            store: store.clone(),
            path: ObjectPath::from(entry.path.as_str()),
            size: entry.bytes,
        }
    }

    fn range(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        let (store, path) = (self.store.clone(), self.path.clone());
        wait(async move { store.get_range(&path, range).await })
            .map_err(|e| ParquetError::External(Box::new(e)))
    }
}

impl Length for StoreFile {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for StoreFile {
    type T = BlockReader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<BlockReader> {
        Ok(BlockReader {
            file: self.clone(),
            position: start,
            block: Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start.saturating_add(length as u64);
        if end > self.size {
            return Err(ParquetError::EOF(format!(
                "{} bytes at {start} are past the end of {} ({} bytes)",
                length, self.path, self.size
            )));
        }
        self.range(start..end)
    }
}

/// A sequential read of a [`StoreFile`] from a position, fetched block by block.
pub(crate) struct BlockReader {
    file: StoreFile,
    position: u64,
    /// Fetched bytes not yet read.
    block: Bytes,
}

impl Read for BlockReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.block.is_empty() {
            let end = self.file.size.min(self.position + READ_BLOCK_BYTES);
            if self.position >= end {
                return Ok(0);
            }
            self.block = self
                .file
                .range(self.position..end)
                .map_err(std::io::Error::other)?;
            self.position = end;
        }
        let taken = buf.len().min(self.block.len());
        buf[..taken].copy_from_slice(&self.block.split_to(taken));
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

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
        let content: Vec<u8> = (0..READ_BLOCK_BYTES * 2 + 17).map(|i| i as u8).collect();
        std::fs::create_dir_all(data_dir.join(relative).parent().unwrap()).unwrap();
        std::fs::write(data_dir.join(relative), &content).unwrap();
        let file = StoreFile::new(
            &local(&data_dir).unwrap(),
            &entry(relative, content.len() as u64),
        );
        assert_eq!(&file.get_bytes(5, 10).unwrap()[..], &content[5..15]);
        // a sequential read crosses blocks and ends at the end of the file
        let mut read = Vec::new();
        file.get_read(3).unwrap().read_to_end(&mut read).unwrap();
        assert_eq!(read, content[3..]);
        assert!(file.get_bytes(content.len() as u64 - 2, 5).is_err());
    }

    #[test]
    fn a_missing_file_is_an_error_not_a_hang_from_any_thread() {
        let dir = tempfile::tempdir().unwrap();
        let file = StoreFile::new(
            &local(dir.path()).unwrap(),
            &entry("tables/gone.parquet", 10),
        );
        assert!(file.get_bytes(0, 4).is_err());
        // from a tokio blocking-pool thread too (how the query engine reads)
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let reading = runtime.spawn_blocking(move || file.get_bytes(0, 4).is_err());
        let outcome = runtime.block_on(reading).unwrap();
        assert!(outcome);
    }
}

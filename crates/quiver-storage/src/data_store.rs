//! Where a durable store's data files are read from: one [`ObjectStore`] over the data
//! directory, owned by the store and shared by every reader (the query engine registers it as
//! the store its Parquet scans read). Files are addressed by their catalog-relative paths
//! ([`crate::FileEntry::path`]), so nothing about the directory's own path reaches a reader,
//! and an object store of another kind can take the directory's place.

use std::path::Path;
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::ObjectStore;

use crate::StorageError;

/// The object store over `data_dir`, an existing absolute directory.
pub(crate) fn local(data_dir: &Path) -> Result<Arc<dyn ObjectStore>, StorageError> {
    let store = LocalFileSystem::new_with_prefix(data_dir)
        .map_err(|e| StorageError::io(data_dir, std::io::Error::other(e)))?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::path::Path as ObjectPath;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn reads_files_by_their_catalog_relative_paths_under_any_directory_name() {
        // the directory's own name may hold anything; the catalog's paths are made of
        // database names (ASCII letters, digits, '_', '-'), ids and partition labels, which an
        // object path keeps as they are
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data dir %é");
        let relative = "tables/metrics-1/7/2024-01-01/0000000000000001.parquet";
        std::fs::create_dir_all(data_dir.join(relative).parent().unwrap()).unwrap();
        std::fs::write(data_dir.join(relative), b"bytes").unwrap();
        let store = local(&data_dir).unwrap();
        let read = store.get(&ObjectPath::from(relative)).await.unwrap();
        assert_eq!(&read.bytes().await.unwrap()[..], b"bytes");
    }
}

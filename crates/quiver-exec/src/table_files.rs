//! Where the table scans of a session read Parquet files from: storage's object store (a data
//! directory, or a shared store's), registered in the session's runtime under one URL, so a
//! scan names a file by its catalog-relative path, on this server and on an executor alike.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::object_store::ObjectStore;

/// The URL of the object store that holds a durable store's files (storage's own,
/// [`quiver_storage::Store::data_store`]), registered in the engine's runtime (see
/// [`register_table_files`]). Files are addressed by their catalog-relative paths
/// ([`quiver_storage::FileEntry::path`]), so nothing about the data directory's own path
/// (relative, symlinked, spaces, `%`, unicode) reaches DataFusion, and another object store
/// (S3-compatible, say) can take its place.
const DATA_STORE_URL: &str = "quiver://data/";

/// The URL under which [`register_table_files`] registered the tables' files (a scan's
/// file group names its files under it).
pub fn table_files_url() -> ObjectStoreUrl {
    ObjectStoreUrl::parse(DATA_STORE_URL).expect("a valid object store URL")
}

/// Registers storage's object store in `runtime` as the one the table scans read files from.
pub fn register_table_files(runtime: &RuntimeEnv, files: Arc<dyn ObjectStore>) {
    runtime.register_object_store(table_files_url().as_ref(), files);
}

/// The object store the table scans of `runtime` read files from (storage's).
pub fn table_files(runtime: &RuntimeEnv) -> Result<Arc<dyn ObjectStore>> {
    runtime.object_store(table_files_url())
}

//! How scans read Parquet files: through the store's [`ChunkCache`], plugged into DataFusion
//! as a [`ParquetFileReaderFactory`]. Metadata (footer and page index, loaded together once)
//! and whole column chunks come from the cache; a miss reads the object store and fills it.
//! Reads outside every column chunk (only the footer, on a metadata miss) go straight to the
//! store. Nothing here depends on the store being a local directory.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{ParquetFileMetrics, ParquetFileReaderFactory};
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::object_store::{ObjectStore, ObjectStoreExt};
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::{AsyncFileReader, MetadataFetch};
use datafusion::parquet::errors::{ParquetError, Result as ParquetResult};
use datafusion::parquet::file::metadata::{
    PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader,
};
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::future::BoxFuture;
use futures::FutureExt;
use quiver_storage::ChunkCache;

/// Bytes read from the end of a file on a metadata miss, in the hope that the footer (and the
/// page index before it) fit: one read instead of two or three for the files we write.
const FOOTER_PREFETCH_BYTES: usize = 512 << 10;

/// Makes a [`CachedChunkReader`] per file a scan opens.
#[derive(Debug)]
pub struct CachedChunkReaderFactory {
    store: Arc<dyn ObjectStore>,
    cache: Arc<ChunkCache>,
}

impl CachedChunkReaderFactory {
    /// Readers of files in `store`, through `cache`.
    pub fn new(store: Arc<dyn ObjectStore>, cache: Arc<ChunkCache>) -> Self {
        CachedChunkReaderFactory { store, cache }
    }
}

impl ParquetFileReaderFactory for CachedChunkReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        _metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::error::Result<Box<dyn AsyncFileReader + Send>> {
        let location = file.object_meta.location.clone();
        Ok(Box::new(CachedChunkReader {
            metrics: ParquetFileMetrics::new(partition_index, location.as_ref(), metrics),
            fetch: StoreFetch {
                store: self.store.clone(),
                location,
            },
            size: file.object_meta.size,
            cache: self.cache.clone(),
            chunks: Vec::new(),
            _held: file.extensions,
        }))
    }
}

/// Reads one file's byte ranges from the store.
struct StoreFetch {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
}

impl StoreFetch {
    async fn range(&self, range: Range<u64>) -> ParquetResult<Bytes> {
        self.store
            .get_range(&self.location, range)
            .await
            .map_err(|e| ParquetError::External(Box::new(e)))
    }

    /// Several ranges in one request (the store coalesces neighbours).
    async fn ranges(&self, ranges: &[Range<u64>]) -> ParquetResult<Vec<Bytes>> {
        self.store
            .get_ranges(&self.location, ranges)
            .await
            .map_err(|e| ParquetError::External(Box::new(e)))
    }
}

impl MetadataFetch for &StoreFetch {
    fn fetch(&mut self, range: Range<u64>) -> BoxFuture<'_, ParquetResult<Bytes>> {
        let fetch: &StoreFetch = self;
        fetch.range(range).boxed()
    }
}

/// One file as a scan reads it (see the module docs).
struct CachedChunkReader {
    metrics: ParquetFileMetrics,
    fetch: StoreFetch,
    size: u64,
    cache: Arc<ChunkCache>,
    /// The byte ranges of the file's column chunks, sorted (known once the metadata is).
    chunks: Vec<Range<u64>>,
    /// What the scan attached to the file, including the storage's hold on it: the file is
    /// not deleted by compaction while this reader lives.
    _held: datafusion::common::extensions::Extensions,
}

impl CachedChunkReader {
    fn file(&self) -> &str {
        self.fetch.location.as_ref()
    }

    /// The metadata with the page index: cached, or read now and kept.
    async fn metadata(&mut self) -> ParquetResult<Arc<ParquetMetaData>> {
        if let Some(metadata) = self.cache.metadata(self.file()) {
            return Ok(metadata);
        }
        let metadata = ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .with_prefetch_hint(Some(FOOTER_PREFETCH_BYTES))
            .load_and_finish(&self.fetch, self.size)
            .await
            .map_err(|e| {
                ParquetError::General(format!(
                    "Failed to fetch metadata for file {}: {e}",
                    self.fetch.location
                ))
            })?;
        let metadata = Arc::new(metadata);
        self.cache.keep_metadata(self.file(), metadata.clone());
        Ok(metadata)
    }

    /// The bytes of `ranges`: slices of their column chunks (cached, or read now in one
    /// request with everything else missing and kept), or read from the store if they lie in
    /// no chunk.
    async fn read(&self, ranges: &[Range<u64>]) -> ParquetResult<Vec<Bytes>> {
        // what to hold: whole chunks, and ranges outside every chunk as they are
        let mut units: Vec<(Range<u64>, bool)> = Vec::new();
        for range in ranges {
            let unit = match self.chunk_of(range) {
                Some(chunk) => (chunk, true),
                None => (range.clone(), false),
            };
            if !units.contains(&unit) {
                units.push(unit);
            }
        }
        let mut held: Vec<Option<Bytes>> = units
            .iter()
            .map(|(unit, is_chunk)| {
                is_chunk
                    .then(|| self.cache.chunk(self.file(), unit.start))
                    .flatten()
            })
            .collect();
        let missing: Vec<usize> = (0..units.len()).filter(|&i| held[i].is_none()).collect();
        if !missing.is_empty() {
            let wanted: Vec<Range<u64>> = missing.iter().map(|&i| units[i].0.clone()).collect();
            let fetched = self.fetch.ranges(&wanted).await?;
            for (i, bytes) in missing.into_iter().zip(fetched) {
                let (unit, is_chunk) = &units[i];
                if *is_chunk {
                    // a copy: the store may hand out slices of one buffer it read several
                    // neighbouring ranges into, which a kept slice would hold whole
                    let own = Bytes::copy_from_slice(&bytes);
                    self.cache.keep_chunk(self.file(), unit.start, own);
                }
                held[i] = Some(bytes);
            }
        }
        Ok(ranges
            .iter()
            .map(|range| {
                let i = units
                    .iter()
                    .position(|(unit, _)| unit.start <= range.start && range.end <= unit.end)
                    .expect("every range has its unit");
                let bytes = held[i].as_ref().expect("every unit is held");
                let offset = |at: u64| usize::try_from(at - units[i].0.start).expect("in memory");
                bytes.slice(offset(range.start)..offset(range.end))
            })
            .collect())
    }

    /// The column chunk `range` lies in, if any (and if the cache is on).
    fn chunk_of(&self, range: &Range<u64>) -> Option<Range<u64>> {
        if !self.cache.enabled() {
            return None;
        }
        let after = self.chunks.partition_point(|c| c.start <= range.start);
        let chunk = self.chunks.get(after.checked_sub(1)?)?;
        (range.end <= chunk.end).then(|| chunk.clone())
    }
}

/// The byte ranges of every column chunk in `metadata`, sorted by start.
fn chunk_ranges(metadata: &ParquetMetaData) -> Vec<Range<u64>> {
    let mut chunks: Vec<Range<u64>> = metadata
        .row_groups()
        .iter()
        .flat_map(|row_group| row_group.columns())
        .map(|column| {
            let (start, length) = column.byte_range();
            start..start + length
        })
        .collect();
    chunks.sort_unstable_by_key(|c| c.start);
    chunks
}

impl AsyncFileReader for CachedChunkReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, ParquetResult<Bytes>> {
        self.metrics
            .bytes_scanned
            .add(usize::try_from(range.end - range.start).unwrap_or(usize::MAX));
        async move {
            let mut bytes = self.read(std::slice::from_ref(&range)).await?;
            Ok(bytes.pop().expect("one range, one answer"))
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, ParquetResult<Vec<Bytes>>> {
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        self.metrics
            .bytes_scanned
            .add(usize::try_from(total).unwrap_or(usize::MAX));
        async move { self.read(&ranges).await }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, ParquetResult<Arc<ParquetMetaData>>> {
        async move {
            let metadata = self.metadata().await?;
            if self.chunks.is_empty() {
                self.chunks = chunk_ranges(&metadata);
            }
            Ok(metadata)
        }
        .boxed()
    }
}

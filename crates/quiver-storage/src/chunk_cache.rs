//! The chunk cache: one byte-bounded, process-wide cache of what reading a Parquet file costs
//! most to repeat, its parsed metadata (footer and page index) and the bytes of its column
//! chunks, so a repeated scan reads nothing from disk and parses no footer; and, for
//! last-point queries, each file's last rows of every series ([`crate::latest`]), so such a
//! query reads a file once in its life; and files' columns decoded into Arrow arrays
//! ([`crate::decoded`]), so a repeated scan of a hot file decodes nothing, with where each
//! series begins among them ([`crate::series`]), so it reads only the series and times it wants.
//!
//! Keys are a file's catalog path and which part of it (metadata, a chunk by its offset, the
//! last rows). Files are immutable and their names never reused, so an entry is never stale; a
//! file that leaves the catalog (compaction, retention, a drop) is forgotten at once
//! ([`ChunkCache::forget_files`]) to give its memory back. Whole column chunks are cached: a
//! read of any part of a chunk (a page that a filter kept) is served from the whole chunk, so
//! projections and filters share entries instead of bypassing the cache. Admission and eviction are moka's (TinyLFU, weighted by bytes).
//!
//! The cache knows nothing of where files live (a local directory today, an object store
//! later): the reader in front of it (quiver-query's Parquet reader factory) fetches on a miss.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use bytes::Bytes;
use moka::notification::RemovalCause;
use parquet::file::metadata::ParquetMetaData;

/// What is cached for a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ChunkKey {
    file: Arc<str>,
    part: Part,
}

/// Which part of a file an entry holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Part {
    /// The parsed footer and page index.
    Metadata,
    /// The column chunk starting at this byte.
    Chunk(u64),
    /// The last rows of each series ([`crate::latest`]).
    LastRows,
    /// One column, decoded ([`crate::decoded`]).
    Column(Arc<str>),
    /// Where each series begins among the file's rows ([`crate::series`]).
    SeriesStarts,
}

#[derive(Clone)]
enum Cached {
    Metadata(Arc<ParquetMetaData>),
    Chunk(Bytes),
    LastRows(RecordBatch),
    Column(ArrayRef),
    SeriesStarts(Arc<[usize]>),
}

impl Cached {
    /// Bytes of memory the entry holds (what the capacity bounds).
    fn weight(&self) -> u32 {
        let bytes = match self {
            Cached::Metadata(metadata) => metadata.memory_size(),
            Cached::Chunk(bytes) => bytes.len(),
            Cached::LastRows(batch) => crate::memory::retained_bytes(batch),
            Cached::Column(column) => column.get_array_memory_size(),
            Cached::SeriesStarts(starts) => std::mem::size_of_val(starts.as_ref()),
        };
        u32::try_from(bytes + 64).unwrap_or(u32::MAX)
    }
}

/// Counters and sizes of the chunk cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChunkCacheStats {
    /// Lookups of metadata, chunks and last rows answered from the cache.
    pub hits: u64,
    /// Lookups of metadata, chunks and last rows that had to read the file.
    pub misses: u64,
    /// Lookups of decoded columns answered from the cache.
    pub column_hits: u64,
    /// Lookups of decoded columns not in the cache (the scan read the file's chunks).
    pub column_misses: u64,
    /// Entries evicted to stay within the capacity.
    pub evictions: u64,
    /// Bytes held now (approximate: moka applies evictions lazily).
    pub bytes: u64,
    /// Entries held now.
    pub entries: u64,
    /// Most bytes the cache holds; 0 means the cache is off.
    pub capacity_bytes: u64,
}

/// The process-wide cache of Parquet metadata and column chunks (see the module docs).
pub struct ChunkCache {
    entries: moka::sync::Cache<ChunkKey, Cached>,
    /// The file whose columns are being decoded now, if any (one decoding at a time).
    decoding: parking_lot::Mutex<std::collections::HashSet<Arc<str>>>,
    capacity_bytes: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    column_hits: AtomicU64,
    column_misses: AtomicU64,
    evictions: Arc<AtomicU64>,
}

impl std::fmt::Debug for ChunkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCache")
            .field("stats", &self.stats())
            .finish()
    }
}

/// The right to decode one file's columns; given back when dropped.
pub(crate) struct DecodingClaim<'a> {
    cache: &'a ChunkCache,
    file: Arc<str>,
}

impl Drop for DecodingClaim<'_> {
    fn drop(&mut self) {
        self.cache.decoding.lock().remove(&self.file);
    }
}

impl ChunkCache {
    /// A cache holding at most `capacity_bytes` (0: nothing is ever kept).
    pub fn new(capacity_bytes: u64) -> ChunkCache {
        let evictions = Arc::new(AtomicU64::new(0));
        let evicted = evictions.clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_: &ChunkKey, cached: &Cached| cached.weight())
            .support_invalidation_closures()
            .eviction_listener(move |_, _, cause| {
                if cause == RemovalCause::Size {
                    evicted.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build();
        ChunkCache {
            entries,
            decoding: Default::default(),
            capacity_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            column_hits: AtomicU64::new(0),
            column_misses: AtomicU64::new(0),
            evictions,
        }
    }

    /// Most bytes the cache holds (0: the cache is off).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Entries evicted to stay within the capacity so far (cheap: no pending evictions are
    /// applied first, unlike [`ChunkCache::stats`]).
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// True if the cache keeps anything at all.
    pub fn enabled(&self) -> bool {
        self.capacity_bytes > 0
    }

    /// The parsed metadata of `file`, if cached.
    pub fn metadata(&self, file: &str) -> Option<Arc<ParquetMetaData>> {
        match self.lookup(file, Part::Metadata)? {
            Cached::Metadata(metadata) => Some(metadata),
            _ => None,
        }
    }

    /// Keeps the parsed metadata of `file`.
    pub fn keep_metadata(&self, file: &str, metadata: Arc<ParquetMetaData>) {
        self.keep(file, Part::Metadata, Cached::Metadata(metadata));
    }

    /// The bytes of the column chunk of `file` that starts at `offset`, if cached.
    pub fn chunk(&self, file: &str, offset: u64) -> Option<Bytes> {
        match self.lookup(file, Part::Chunk(offset))? {
            Cached::Chunk(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Keeps the bytes of the column chunk of `file` that starts at `offset`.
    pub fn keep_chunk(&self, file: &str, offset: u64, bytes: Bytes) {
        self.keep(file, Part::Chunk(offset), Cached::Chunk(bytes));
    }

    /// The last rows of each series in `file`, if cached.
    pub(crate) fn last_rows(&self, file: &str) -> Option<RecordBatch> {
        match self.lookup(file, Part::LastRows)? {
            Cached::LastRows(batch) => Some(batch),
            _ => None,
        }
    }

    /// Keeps the last rows of each series in `file`.
    pub(crate) fn keep_last_rows(&self, file: &str, batch: RecordBatch) {
        self.keep(file, Part::LastRows, Cached::LastRows(batch));
    }

    /// The decoded column `name` of `file`, if cached.
    pub fn column(&self, file: &str, name: &str) -> Option<ArrayRef> {
        match self.lookup(file, Part::Column(Arc::from(name)))? {
            Cached::Column(column) => Some(column),
            _ => None,
        }
    }

    /// Keeps the decoded column `name` of `file`.
    pub(crate) fn keep_column(&self, file: &str, name: &str, column: ArrayRef) {
        self.keep(file, Part::Column(Arc::from(name)), Cached::Column(column));
    }

    /// Where each run of one series begins among `file`'s rows, if cached.
    pub fn series_starts(&self, file: &str) -> Option<Arc<[usize]>> {
        match self.lookup(file, Part::SeriesStarts)? {
            Cached::SeriesStarts(starts) => Some(starts),
            _ => None,
        }
    }

    /// True if `file`'s columns are kept decoded (its series starts are: decoding keeps them
    /// with the columns); not counted as a lookup.
    pub(crate) fn holds_decoded(&self, file: &str) -> bool {
        self.enabled()
            && self.entries.contains_key(&ChunkKey {
                file: Arc::from(file),
                part: Part::SeriesStarts,
            })
    }

    /// Keeps where each run of one series begins among `file`'s rows.
    pub(crate) fn keep_series_starts(&self, file: &str, starts: Arc<[usize]>) {
        self.keep(file, Part::SeriesStarts, Cached::SeriesStarts(starts));
    }

    /// Claims the decoding of `file`'s columns: `None` if a decoding runs now (of this file or
    /// another: decoding is background work, one file at a time, so it never takes more than
    /// one core from queries and writes).
    pub(crate) fn claim_decoding(&self, file: &str) -> Option<DecodingClaim<'_>> {
        let mut decoding = self.decoding.lock();
        if !decoding.is_empty() {
            return None;
        }
        let file: Arc<str> = Arc::from(file);
        decoding.insert(file.clone());
        Some(DecodingClaim { cache: self, file })
    }

    /// True if no file's columns are being decoded now.
    pub fn decoding_idle(&self) -> bool {
        self.decoding.lock().is_empty()
    }

    /// Drops every entry of these files (they left the catalog). One call per batch of
    /// deleted files: each call adds one predicate that the cache checks its entries against
    /// until its housekeeping has applied it.
    pub fn forget_files<'a>(&self, files: impl IntoIterator<Item = &'a str>) {
        if !self.enabled() {
            return;
        }
        let files: std::collections::HashSet<Arc<str>> = files.into_iter().map(Arc::from).collect();
        if files.is_empty() {
            return;
        }
        self.entries
            .invalidate_entries_if(move |key, _| files.contains(&key.file))
            .expect("invalidation closures are enabled");
    }

    /// Counters and sizes now.
    pub fn stats(&self) -> ChunkCacheStats {
        self.entries.run_pending_tasks();
        ChunkCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            column_hits: self.column_hits.load(Ordering::Relaxed),
            column_misses: self.column_misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            bytes: self.entries.weighted_size(),
            entries: self.entries.entry_count(),
            capacity_bytes: self.capacity_bytes,
        }
    }

    fn lookup(&self, file: &str, part: Part) -> Option<Cached> {
        if !self.enabled() {
            return None;
        }
        let (hits, misses) = match part {
            Part::Column(_) | Part::SeriesStarts => (&self.column_hits, &self.column_misses),
            _ => (&self.hits, &self.misses),
        };
        let key = ChunkKey {
            file: Arc::from(file),
            part,
        };
        let found = self.entries.get(&key);
        let counter = if found.is_some() { hits } else { misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn keep(&self, file: &str, part: Part, cached: Cached) {
        if !self.enabled() || u64::from(cached.weight()) > self.capacity_bytes {
            return;
        }
        let key = ChunkKey {
            file: Arc::from(file),
            part,
        };
        self.entries.insert(key, cached);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_kept_per_file_and_offset_and_counted() {
        let cache = ChunkCache::new(1 << 20);
        assert_eq!(cache.chunk("a.parquet", 4), None);
        cache.keep_chunk("a.parquet", 4, Bytes::from_static(b"chunk"));
        assert_eq!(cache.chunk("a.parquet", 4).unwrap(), "chunk");
        assert_eq!(cache.chunk("a.parquet", 5), None);
        assert_eq!(cache.chunk("b.parquet", 4), None);
        assert!(
            cache.metadata("a.parquet").is_none(),
            "a chunk is not metadata"
        );
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (1, 4));
        assert_eq!(stats.entries, 1);
        assert!(stats.bytes >= 5, "{stats:?}");
    }

    #[test]
    fn forgetting_a_file_drops_only_its_entries() {
        let cache = ChunkCache::new(1 << 20);
        cache.keep_chunk("a.parquet", 4, Bytes::from_static(b"a4"));
        cache.keep_chunk("a.parquet", 90, Bytes::from_static(b"a90"));
        cache.keep_chunk("b.parquet", 4, Bytes::from_static(b"b4"));
        cache.forget_files(["a.parquet"]);
        assert_eq!(cache.chunk("a.parquet", 4), None);
        assert_eq!(cache.chunk("a.parquet", 90), None);
        assert_eq!(cache.chunk("b.parquet", 4).unwrap(), "b4");
    }

    #[test]
    fn the_capacity_bounds_the_bytes_held() {
        let cache = ChunkCache::new(64 << 10);
        for offset in 0..100u64 {
            cache.keep_chunk("a.parquet", offset, Bytes::from(vec![0u8; 4096]));
        }
        let stats = cache.stats();
        assert!(stats.bytes <= 64 << 10, "{stats:?}");
        assert!(stats.entries < 100, "{stats:?}");
        // larger than the whole cache: never admitted
        cache.keep_chunk("big.parquet", 0, Bytes::from(vec![0u8; 128 << 10]));
        assert_eq!(cache.chunk("big.parquet", 0), None);
    }

    #[test]
    fn a_zero_capacity_keeps_nothing_and_counts_nothing() {
        let cache = ChunkCache::new(0);
        cache.keep_chunk("a.parquet", 0, Bytes::from_static(b"x"));
        assert_eq!(cache.chunk("a.parquet", 0), None);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (0, 0, 0));
    }
}

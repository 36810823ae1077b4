//! Counters of the result cache.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Live counters; see [`CacheStats`] for their meaning.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub bypasses: AtomicU64,
    pub executions: AtomicU64,
    pub coalesced: AtomicU64,
    pub inserts: AtomicU64,
    pub too_large: AtomicU64,
    pub not_stored_changed: AtomicU64,
    pub invalidations: AtomicU64,
    pub evictions: AtomicU64,
    pub expirations: AtomicU64,
    pub partial_hits: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, entries: u64, bytes: u64, capacity_bytes: u64) -> CacheStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (hits, misses) = (get(&self.hits), get(&self.misses));
        CacheStats {
            entries,
            bytes,
            capacity_bytes,
            hits,
            misses,
            bypasses: get(&self.bypasses),
            hit_ratio: if hits + misses == 0 {
                0.0
            } else {
                hits as f64 / (hits + misses) as f64
            },
            executions: get(&self.executions),
            coalesced: get(&self.coalesced),
            inserts: get(&self.inserts),
            too_large: get(&self.too_large),
            not_stored_changed: get(&self.not_stored_changed),
            invalidations: get(&self.invalidations),
            evictions: get(&self.evictions),
            expirations: get(&self.expirations),
            partial_hits: get(&self.partial_hits),
            parts: 0,
            part_bytes: 0,
            part_rows_reused: 0,
            part_rows_computed: 0,
            part_rows_reused_ratio: 0.0,
        }
    }
}

/// A snapshot of the result cache's state and counters (since start).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheStats {
    /// Entries held.
    pub entries: u64,
    /// Bytes held by entries (batches, encodings, keys).
    pub bytes: u64,
    /// The configured capacity in bytes.
    pub capacity_bytes: u64,
    /// Answers served from the cache.
    pub hits: u64,
    /// Cacheable queries that were not in the cache.
    pub misses: u64,
    /// Queries that skipped the cache (volatile, `no-cache`, not a query, disabled).
    pub bypasses: u64,
    /// `hits / (hits + misses)`.
    pub hit_ratio: f64,
    /// Queries executed on behalf of misses (one per single-flight group).
    pub executions: u64,
    /// Misses that waited for an identical running query instead of executing.
    pub coalesced: u64,
    /// Answers stored.
    pub inserts: u64,
    /// Answers bigger than the entry limit, streamed and not stored.
    pub too_large: u64,
    /// Answers not stored because a table they read changed while they were computed.
    pub not_stored_changed: u64,
    /// Entries removed because a table they read changed (a newer version exists).
    pub invalidations: u64,
    /// Entries evicted to stay within capacity (or not admitted).
    pub evictions: u64,
    /// Entries dropped by TTL or idle expiry.
    pub expirations: u64,
    /// Queries not answered whole from the cache but in part from reused time parts
    /// (`PARTIAL`; counted among misses or bypasses too).
    pub partial_hits: u64,
    /// Time parts held (partial results of aggregates over stretches of time).
    pub parts: u64,
    /// Bytes the time parts hold.
    pub part_bytes: u64,
    /// Partial-result rows queries took from reused parts.
    pub part_rows_reused: u64,
    /// Partial-result rows queries that could reuse parts computed from the table's rows.
    pub part_rows_computed: u64,
    /// `part_rows_reused / (part_rows_reused + part_rows_computed)`: the share of those
    /// queries' partial results served from cached parts.
    pub part_rows_reused_ratio: f64,
}

impl CacheStats {
    /// Adds the time parts' state and counters.
    pub(crate) fn add_parts(&mut self, parts: u64, bytes: u64, reused: u64, computed: u64) {
        self.parts = parts;
        self.part_bytes = bytes;
        self.part_rows_reused = reused;
        self.part_rows_computed = computed;
        self.part_rows_reused_ratio = match reused + computed {
            0 => 0.0,
            all => reused as f64 / all as f64,
        };
    }
}

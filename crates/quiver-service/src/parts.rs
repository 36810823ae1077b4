//! The store of time parts ([`Parts`]): partial results of aggregates over stretches of time,
//! kept for rolling-window queries to reuse ([`quiver_query::reuse`]).
//!
//! A part's key holds the version of its stretch's rows, and versions only grow, so a part
//! whose rows changed can never be found again; it ages out (byte-weighted TinyLFU, the
//! result cache's TTL and idle time). A part bigger than the entry limit is not kept.

use std::sync::Arc;

use arrow::compute::concat_batches;
use moka::sync::Cache;
use quiver_query::reuse::{PartKey, PartRows, PartStore};

use crate::config::CacheConfig;
use crate::entry::batches_size;

/// The share of the result cache's capacity that parts may hold: one in four.
const PARTS_SHARE_OF_CAPACITY: u64 = 4;

/// The time parts kept (module docs).
#[derive(Debug)]
pub(crate) struct Parts {
    cache: Cache<PartKey, Arc<PartRows>>,
    max_part_bytes: usize,
}

impl Parts {
    pub(crate) fn new(config: &CacheConfig) -> Self {
        let cache = Cache::builder()
            .max_capacity(config.capacity_bytes / PARTS_SHARE_OF_CAPACITY)
            .weigher(|key: &PartKey, part: &Arc<PartRows>| {
                u32::try_from(key.size() + part.bytes).unwrap_or(u32::MAX)
            })
            .time_to_live(config.ttl)
            .time_to_idle(config.idle)
            .build();
        Parts {
            cache,
            max_part_bytes: usize::try_from(config.max_entry_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Parts held and their bytes (approximate: pending evictions are not settled).
    pub(crate) fn size(&self) -> (u64, u64) {
        (self.cache.entry_count(), self.cache.weighted_size())
    }

    /// Settles pending evictions, so that [`Parts::size`] is exact.
    pub(crate) fn settle(&self) {
        self.cache.run_pending_tasks();
    }

    /// Drops every part.
    pub(crate) fn clear(&self) {
        self.cache.invalidate_all();
    }
}

impl PartStore for Parts {
    fn get(&self, key: &PartKey) -> Option<Arc<PartRows>> {
        self.cache.get(key)
    }

    fn max_part_bytes(&self) -> usize {
        self.max_part_bytes
    }

    fn capacity_bytes(&self) -> usize {
        usize::try_from(self.cache.policy().max_capacity().unwrap_or(0)).unwrap_or(usize::MAX)
    }

    fn insert(&self, key: PartKey, rows: Arc<PartRows>) {
        if key.size() + rows.bytes > self.max_part_bytes {
            return;
        }
        // one batch in buffers of its own (a part gathered from several batches is copied
        // into one; a single one was taken or sorted into buffers of its own already)
        let batches = match rows.batches.as_slice() {
            [] | [_] => rows.batches.clone(),
            [first, ..] => match concat_batches(&first.schema(), &rows.batches) {
                Ok(batch) => vec![batch],
                Err(e) => {
                    tracing::warn!(error = %e, "cannot keep a time part");
                    return;
                }
            },
        };
        let bytes = batches_size(&batches);
        let part = PartRows {
            batches,
            rows: rows.rows,
            bytes,
        };
        self.cache.insert(key, Arc::new(part));
    }
}

//! The entries: a byte-weighted moka cache (TinyLFU admission, TTL and idle expiry) plus an
//! index from each table to the keys that scanned it, so that a write removes the entries of
//! the table's old versions at once instead of leaving them to age out.
//!
//! Correctness never depends on the index: a key holds the versions its answer was computed
//! at and versions only grow, so an old entry cannot match a lookup made after a write. The
//! index only frees memory early.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::notification::RemovalCause;
use moka::sync::Cache;
use moka::Expiry;
use parking_lot::Mutex;
use quiver_query::ScannedTable;

use crate::config::CacheConfig;
use crate::entry::CachedResult;
use crate::key::CacheKey;
use crate::stats::{CacheStats, Counters};

type Index = HashMap<ScannedTable, HashSet<CacheKey>>;

/// The cached answers.
pub(crate) struct Entries {
    cache: Cache<CacheKey, Arc<CachedResult>>,
    index: Arc<Mutex<Index>>,
    counters: Arc<Counters>,
    capacity_bytes: u64,
    max_entry_bytes: usize,
}

impl Entries {
    pub(crate) fn new(config: &CacheConfig, counters: Arc<Counters>) -> Self {
        let index: Arc<Mutex<Index>> = Arc::default();
        let listener_index = index.clone();
        let listener_counters = counters.clone();
        let cache = Cache::builder()
            .max_capacity(config.capacity_bytes)
            .weigher(|key: &CacheKey, value: &Arc<CachedResult>| {
                u32::try_from(key.size() + value.size()).unwrap_or(u32::MAX)
            })
            .expire_after(EntryExpiry {
                ttl: config.ttl,
                idle: config.idle,
            })
            .eviction_listener(move |key: Arc<CacheKey>, _, cause| {
                match cause {
                    RemovalCause::Replaced => return,
                    RemovalCause::Size => Counters::bump(&listener_counters.evictions),
                    RemovalCause::Expired => Counters::bump(&listener_counters.expirations),
                    RemovalCause::Explicit => {}
                }
                unindex(&mut listener_index.lock(), &key);
            })
            .build();
        Entries {
            cache,
            index,
            counters,
            capacity_bytes: config.capacity_bytes,
            max_entry_bytes: usize::try_from(config.max_entry_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Largest entry, in bytes.
    pub(crate) fn max_entry_bytes(&self) -> usize {
        self.max_entry_bytes
    }

    pub(crate) fn get(&self, key: &CacheKey) -> Option<Arc<CachedResult>> {
        self.cache.get(key)
    }

    /// Stores `entry` under `key` unless it is too big or a table it read has moved past the
    /// key's version (`current` gives a table's version now). Returns whether it is stored.
    ///
    /// The key is indexed before it is inserted and the versions are checked again after, so
    /// a write racing with this either finds the key in the index or is seen by the check.
    pub(crate) fn admit(
        &self,
        key: &CacheKey,
        entry: &Arc<CachedResult>,
        current: impl Fn(&ScannedTable) -> Option<u64>,
    ) -> bool {
        if key.size() + entry.size() > self.max_entry_bytes {
            return false;
        }
        let up_to_date = || key.versions().iter().all(|(t, v)| current(t) == Some(*v));
        if !up_to_date() {
            return false;
        }
        {
            let mut index = self.index.lock();
            for (table, _) in key.versions() {
                index.entry(table.clone()).or_default().insert(key.clone());
            }
        }
        self.cache.insert(key.clone(), entry.clone());
        if !up_to_date() {
            self.cache.invalidate(key);
            return false;
        }
        true
    }

    /// Re-weighs `key`'s entry after an encoding was added to it, if it is still cached.
    pub(crate) fn reweigh(
        &self,
        key: &CacheKey,
        entry: &Arc<CachedResult>,
        current: impl Fn(&ScannedTable) -> Option<u64>,
    ) {
        if self.cache.contains_key(key) {
            self.admit(key, entry, current);
        }
    }

    /// Removes every entry that read `table` at a version before `version`.
    pub(crate) fn table_changed(&self, table: &ScannedTable, version: u64) {
        let stale: Vec<CacheKey> = {
            let mut index = self.index.lock();
            let Some(keys) = index.get_mut(table) else {
                return;
            };
            let stale = keys
                .iter()
                .filter(|k| k.version_of(table).is_some_and(|v| v < version))
                .cloned()
                .collect::<Vec<_>>();
            for key in &stale {
                keys.remove(key);
            }
            if keys.is_empty() {
                index.remove(table);
            }
            stale
        };
        for key in stale {
            if self.cache.remove(&key).is_some() {
                Counters::bump(&self.counters.invalidations);
            }
        }
    }

    /// Drops every entry; returns how many there were.
    pub(crate) fn clear(&self) -> u64 {
        self.cache.run_pending_tasks();
        let entries = self.cache.entry_count();
        self.cache.invalidate_all();
        self.cache.run_pending_tasks();
        self.index.lock().clear();
        entries
    }

    /// Exact state: applies pending evictions and expirations first.
    pub(crate) fn stats(&self) -> CacheStats {
        self.cache.run_pending_tasks();
        self.approximate_stats()
    }

    /// State without settling pending maintenance (cheap; entries and bytes may lag).
    pub(crate) fn approximate_stats(&self) -> CacheStats {
        self.counters.snapshot(
            self.cache.entry_count(),
            self.cache.weighted_size(),
            self.capacity_bytes,
        )
    }
}

fn unindex(index: &mut Index, key: &CacheKey) {
    for (table, _) in key.versions() {
        if let Some(keys) = index.get_mut(table) {
            keys.remove(key);
            if keys.is_empty() {
                index.remove(table);
            }
        }
    }
}

/// TTL counted from when the answer was computed (re-weighing does not extend it), and idle
/// expiry from the last read.
struct EntryExpiry {
    ttl: Duration,
    idle: Duration,
}

impl EntryExpiry {
    fn remaining(&self, entry: &CachedResult) -> Duration {
        self.idle
            .min(self.ttl.saturating_sub(entry.computed_at().elapsed()))
    }
}

impl Expiry<CacheKey, Arc<CachedResult>> for EntryExpiry {
    fn expire_after_create(
        &self,
        _key: &CacheKey,
        value: &Arc<CachedResult>,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(self.remaining(value))
    }

    fn expire_after_read(
        &self,
        _key: &CacheKey,
        value: &Arc<CachedResult>,
        _read_at: Instant,
        _duration_until_expiry: Option<Duration>,
        _last_modified_at: Instant,
    ) -> Option<Duration> {
        Some(self.remaining(value))
    }

    fn expire_after_update(
        &self,
        _key: &CacheKey,
        value: &Arc<CachedResult>,
        _updated_at: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(self.remaining(value))
    }
}

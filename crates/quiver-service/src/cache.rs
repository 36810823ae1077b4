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
        // moka applies writes (and the evictions they call for) in batches: settle now, so
        // the bytes held exceed the capacity by at most what concurrent inserts add, never by
        // a batch of unsettled inserts of up to `max_entry_bytes` each. A miss costs far more.
        self.cache.run_pending_tasks();
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};

    use super::*;
    use crate::key::KeySpec;
    use quiver_model::AccessScope;

    /// An answer of `rows` 8-byte values.
    fn answer(rows: usize) -> Arc<CachedResult> {
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
        Arc::new(CachedResult::new(batch.schema(), vec![batch]))
    }

    fn key(n: usize) -> CacheKey {
        CacheKey::new(KeySpec {
            canonical: &format!("select {n}"),
            database: "db",
            params: String::new(),
            settings: "",
            scope: &AccessScope::Everything,
            clock_bucket: None,
            versions: vec![(
                ScannedTable {
                    database: "db".into(),
                    table: "t".into(),
                },
                1,
            )],
            retention_cutoffs: Vec::new(),
        })
    }

    /// What the entries present right now weigh, settled or not.
    fn held(entries: &Entries) -> u64 {
        entries
            .cache
            .iter()
            .map(|(k, v)| (k.size() + v.size()) as u64)
            .sum()
    }

    #[test]
    fn concurrent_inserts_never_hold_more_than_the_capacity_plus_one_entry_per_inserter() {
        let entry_bytes = answer(8_000).size() + key(0).size();
        let capacity = 40 * entry_bytes as u64;
        let threads = 8;
        let entries = Arc::new(Entries::new(
            &CacheConfig {
                capacity_bytes: capacity,
                max_entry_bytes: 2 * entry_bytes as u64,
                ttl: Duration::from_secs(3600),
                idle: Duration::from_secs(3600),
                ..CacheConfig::for_tests()
            },
            Arc::default(),
        ));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let entries = entries.clone();
                std::thread::spawn(move || {
                    let mut most = 0;
                    for i in 0..400 {
                        entries.admit(&key(t * 1000 + i), &answer(8_000), |_| Some(1));
                        most = most.max(held(&entries));
                    }
                    most
                })
            })
            .collect();
        let most = workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .max()
            .unwrap();
        // Each inserter may have one insert that no maintenance has settled yet.
        let slack = threads as u64 * entry_bytes as u64;
        assert!(
            most <= capacity + slack,
            "held {most} bytes; capacity {capacity} + {slack} for concurrent inserts"
        );
        assert!(
            most > capacity / 2,
            "the inserts never filled the cache: {most}"
        );
        entries.cache.run_pending_tasks();
        assert!(held(&entries) <= capacity);
    }
}

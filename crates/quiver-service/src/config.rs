//! The result cache's settings.

use std::time::Duration;

use quiver_model::settings::{secs, secs_or_zero};
use serde::{Deserialize, Serialize};

/// How the result cache behaves. The serde names are the server's configuration keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheConfig {
    /// Serve and store answers at all (`false`: every query is a BYPASS).
    #[serde(rename = "cache_enabled")]
    pub enabled: bool,
    /// Bytes all entries together may hold, batches and encodings (default: 1/16 of the memory
    /// available, physical or cgroup, 64 MiB–8 GiB).
    #[serde(rename = "cache_capacity_bytes")]
    pub capacity_bytes: u64,
    /// Largest single entry in bytes; bigger results stream through uncached.
    #[serde(rename = "cache_max_entry_bytes")]
    pub max_entry_bytes: u64,
    /// An entry is dropped this long after it was computed, however often it is used (whole
    /// seconds).
    #[serde(rename = "cache_ttl_secs", with = "secs")]
    pub ttl: Duration,
    /// An entry is dropped when it was not used for this long (whole seconds).
    #[serde(rename = "cache_idle_secs", with = "secs")]
    pub idle: Duration,
    /// If set, queries that read the clock (`now()`, `current_date`, ...) run with the clock
    /// rounded down to this granularity and are cached per rounded instant, so their answers
    /// may lag the wall clock by up to that much (never the data); if `None` (configured as
    /// 0 seconds) they bypass the cache.
    #[serde(rename = "cache_clock_granularity_secs", with = "secs_or_zero")]
    pub clock_granularity: Option<Duration>,
    /// Let aggregates over time ranges reuse the partial results of stretches of time
    /// ("time parts") whose rows did not change since an earlier query computed them, so a
    /// rolling window recomputes only its changed edges (kept in a quarter of the capacity).
    #[serde(rename = "cache_reuse_parts")]
    pub reuse_parts: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity_bytes: default_capacity(),
            ..CacheConfig::for_tests()
        }
    }
}

/// 1/16 of the memory available (physical or cgroup), between 64 MiB and 8 GiB (1 GiB if it
/// cannot be read).
fn default_capacity() -> u64 {
    quiver_model::settings::share_of_memory(16, 64 << 20, 8 << 30, 1 << 30)
}

impl CacheConfig {
    /// The defaults with a capacity that does not depend on the machine (1 GiB), for tests
    /// and tools. Adjust fields as needed.
    pub fn for_tests() -> Self {
        CacheConfig {
            enabled: true,
            capacity_bytes: 1 << 30,
            max_entry_bytes: 64 << 20,
            ttl: Duration::from_secs(3600),
            idle: Duration::from_secs(600),
            clock_granularity: None,
            reuse_parts: true,
        }
    }

    /// Checks the settings are usable; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_entry_bytes > self.capacity_bytes {
            return Err(format!(
                "cache max entry size ({} bytes) exceeds the cache capacity ({} bytes)",
                self.max_entry_bytes, self.capacity_bytes
            ));
        }
        if self.max_entry_bytes > u64::from(u32::MAX) {
            return Err(format!(
                "cache max entry size ({} bytes) must be at most {} bytes",
                self.max_entry_bytes,
                u32::MAX
            ));
        }
        if self.ttl.is_zero() || self.idle.is_zero() {
            return Err("cache ttl and idle time must be greater than 0".into());
        }
        if self.clock_granularity.is_some_and(|g| g.is_zero()) {
            return Err("cache clock granularity must be greater than 0".into());
        }
        Ok(())
    }
}

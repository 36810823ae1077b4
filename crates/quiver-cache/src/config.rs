//! The result cache's settings.

use std::time::Duration;

/// How the result cache behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Serve and store answers at all (`false`: every query is a BYPASS).
    pub enabled: bool,
    /// Bytes all entries together may hold (batches and encodings).
    pub capacity_bytes: u64,
    /// Largest single entry in bytes; bigger results stream through uncached.
    pub max_entry_bytes: u64,
    /// An entry is dropped this long after it was computed, however often it is used.
    pub ttl: Duration,
    /// An entry is dropped when it was not used for this long.
    pub idle: Duration,
    /// If set, queries that read the clock (`now()`, `current_date`, ...) run with the clock
    /// rounded down to this granularity and are cached per rounded instant; if `None` they
    /// bypass the cache.
    pub clock_granularity: Option<Duration>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            capacity_bytes: 1 << 30,
            max_entry_bytes: 64 << 20,
            ttl: Duration::from_secs(3600),
            idle: Duration::from_secs(600),
            clock_granularity: None,
        }
    }
}

impl CacheConfig {
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

//! Rate limits (the `governor` crate's GCRA): per token, requests per second and written bytes
//! per second; per client address, failed authentications per minute. A limiter's keys are
//! pruned when they pile up, so a flood of distinct addresses cannot grow it without bound.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use parking_lot::Mutex;

/// Keys a limiter holds before idle ones are dropped.
const PRUNE_AT_KEYS: usize = 10_000;

/// A per-key rate: `rate` units per second, bursts of one second's worth.
pub(crate) struct KeyedRate<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
    burst: NonZeroU32,
}

impl<K: Hash + Eq + Clone> KeyedRate<K> {
    /// `None` when `per_second` is 0 (no limit).
    pub(crate) fn per_second(per_second: u64) -> Option<Self> {
        let burst = NonZeroU32::new(u32::try_from(per_second).unwrap_or(u32::MAX))?;
        Some(KeyedRate {
            limiter: RateLimiter::keyed(Quota::per_second(burst)),
            burst,
        })
    }

    /// Takes `units` (at most a burst's worth: a larger request empties the bucket) from
    /// `key`'s allowance, or says how long until it has them.
    pub(crate) fn take(&self, key: &K, units: u64) -> Result<(), Duration> {
        if self.limiter.len() > PRUNE_AT_KEYS {
            self.limiter.retain_recent();
        }
        let units = u32::try_from(units)
            .ok()
            .and_then(NonZeroU32::new)
            .map_or(self.burst, |n| n.min(self.burst));
        match self.limiter.check_key_n(key, units) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(not_until.wait_time_from(DefaultClock::default().now())),
            // units never exceed the burst
            Err(_) => Err(Duration::from_secs(1)),
        }
    }
}

/// Failed authentications per client address: past `per_minute` failures in a minute, the
/// address is refused (even a right token) until its allowance refills, so guessing tokens
/// from one address goes at most that fast. IPv6 addresses count by their /64 network (one
/// host usually has a whole /64 to choose from).
pub(crate) struct FailedLogins {
    failures: Option<KeyedRate<IpAddr>>,
    blocked: Mutex<HashMap<IpAddr, Instant>>,
    per_minute: u32,
}

impl FailedLogins {
    pub(crate) fn per_minute(per_minute: u32) -> Self {
        let failures = NonZeroU32::new(per_minute).map(|n| KeyedRate {
            limiter: RateLimiter::keyed(Quota::per_minute(n)),
            burst: NonZeroU32::MIN,
        });
        FailedLogins {
            failures,
            blocked: Mutex::new(HashMap::new()),
            per_minute,
        }
    }

    /// How long `peer` must wait before it may try again, if it is blocked.
    pub(crate) fn blocked_for(&self, peer: IpAddr) -> Option<Duration> {
        let peer = network_of(peer);
        let mut blocked = self.blocked.lock();
        let until = *blocked.get(&peer)?;
        let now = Instant::now();
        if until <= now {
            blocked.remove(&peer);
            return None;
        }
        Some(until - now)
    }

    /// Counts a failure from `peer`; past the allowance the address is blocked and the
    /// wait is returned.
    pub(crate) fn record(&self, peer: IpAddr) -> Option<Duration> {
        let peer = network_of(peer);
        let wait = self.failures.as_ref()?.take(&peer, 1).err()?;
        let mut blocked = self.blocked.lock();
        if blocked.len() > PRUNE_AT_KEYS {
            let now = Instant::now();
            blocked.retain(|_, until| *until > now);
        }
        blocked.insert(peer, Instant::now() + wait);
        tracing::warn!(%peer, per_minute = self.per_minute, wait_ms = wait.as_millis() as u64, "too many failed authentications: address blocked");
        Some(wait)
    }
}

/// The address failures are counted by: IPv4 (and IPv4-mapped IPv6) addresses as they are,
/// other IPv6 addresses by their /64 network.
fn network_of(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_refuses_past_its_burst_and_says_how_long_to_wait() {
        let rate = KeyedRate::per_second(10).unwrap();
        for _ in 0..10 {
            rate.take(&"a", 1).unwrap();
        }
        let wait = rate.take(&"a", 1).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        rate.take(&"b", 1).expect("keys are independent");
        assert!(KeyedRate::<u8>::per_second(0).is_none(), "0 is no limit");
        // a request larger than the burst empties the bucket instead of never passing
        let bytes = KeyedRate::per_second(1000).unwrap();
        bytes.take(&"w", 1_000_000).unwrap();
        assert!(bytes.take(&"w", 1).is_err());
    }

    #[test]
    fn failures_past_the_allowance_block_the_address() {
        let logins = FailedLogins::per_minute(3);
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..3 {
            assert!(logins.record(peer).is_none());
            assert!(logins.blocked_for(peer).is_none());
        }
        let wait = logins.record(peer).expect("the fourth failure blocks");
        assert!(wait > Duration::from_secs(10), "{wait:?}");
        assert!(logins.blocked_for(peer).is_some());
        assert!(logins.blocked_for("192.0.2.2".parse().unwrap()).is_none());
        assert!(
            FailedLogins::per_minute(0).record(peer).is_none(),
            "0 is no limit"
        );
    }
}

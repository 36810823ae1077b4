//! Each query's memory pool: DataFusion's operators that buffer (sorts, joins, aggregates and
//! their states, such as `array_agg`) reserve from it, bounded by `query_memory_bytes` for the
//! query and by `max_server_memory_bytes` for all queries together. A sort or an aggregate
//! refused a reservation spills to disk first; anything else fails with an error naming the
//! limit and the setting that raises it.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::common::{resources_datafusion_err, Result};
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
    TrackConsumersPool,
};

/// How a refusal caused by the memory other queries hold begins: the query would fit once
/// they finish, so a retry can succeed (the engine's `QueryError::MemoryBusy`).
pub const OTHERS_HOLD_MEMORY: &str = "other running queries hold";

/// What all queries together have reserved, and the most they may.
#[derive(Debug)]
pub struct ServerMemory {
    reserved: AtomicUsize,
    limit: usize,
}

impl ServerMemory {
    /// Reservations of all queries bounded by `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(ServerMemory {
            reserved: AtomicUsize::new(0),
            limit,
        })
    }

    /// Bytes all queries hold now.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }
}

/// One query's pool (see the module comment).
#[derive(Debug)]
pub struct QueryPool {
    inner: TrackConsumersPool<GreedyMemoryPool>,
    limit: usize,
    server: Arc<ServerMemory>,
}

impl QueryPool {
    /// A pool of `limit` bytes drawing on `server`.
    pub fn new(limit: usize, server: Arc<ServerMemory>) -> Self {
        QueryPool {
            inner: TrackConsumersPool::new(
                GreedyMemoryPool::new(limit),
                NonZeroUsize::new(3).expect("3 is not zero"),
            ),
            limit,
            server,
        }
    }
}

impl std::fmt::Display for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "query pool: {} of {} bytes", self.reserved(), self.limit)
    }
}

impl QueryPool {
    /// The refusal of memory over the query's own limit, with `detail` of what was asked.
    fn over_own_limit(&self, detail: &str) -> datafusion::error::DataFusionError {
        resources_datafusion_err!(
            "the query needs more than its {} bytes of memory (query_memory_bytes: raise it, \
             or narrow the query). {}",
            self.limit,
            detail
        )
    }
}

impl MemoryPool for QueryPool {
    fn name(&self) -> &str {
        "quiver_query_pool"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.server
            .reserved
            .fetch_add(additional, Ordering::Relaxed);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        self.server.reserved.fetch_sub(shrink, Ordering::Relaxed);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        // the server's share first, so that the query's own pool never holds, even for an
        // instant, bytes it is then refused (a sibling partition would be refused them too)
        let before = self
            .server
            .reserved
            .fetch_add(additional, Ordering::Relaxed);
        if before.saturating_add(additional) <= self.server.limit {
            return self.inner.try_grow(reservation, additional).map_err(|e| {
                self.server
                    .reserved
                    .fetch_sub(additional, Ordering::Relaxed);
                let detail = e.strip_backtrace();
                self.over_own_limit(
                    detail
                        .strip_prefix("Resources exhausted: ")
                        .unwrap_or(&detail),
                )
            });
        }
        self.server
            .reserved
            .fetch_sub(additional, Ordering::Relaxed);
        let own = self.inner.reserved();
        // the query's own limit decides first: over it, the query fails again however idle the
        // server is
        if own.saturating_add(additional) > self.limit {
            return Err(self.over_own_limit(&format!(
                "{additional} more bytes for {} refused",
                reservation.consumer().name()
            )));
        }
        if own.saturating_add(additional) > self.server.limit {
            // alone over the ceiling: the same query fails again, however idle the server
            return Err(resources_datafusion_err!(
                "the query would hold more than the server's {} bytes \
                 (max_server_memory_bytes): {} more bytes for {} refused",
                self.server.limit,
                additional,
                reservation.consumer().name()
            ));
        }
        Err(resources_datafusion_err!(
            "{OTHERS_HOLD_MEMORY} {} of the server's {} bytes (max_server_memory_bytes): \
             {} more bytes for {} refused; retry once they finish",
            before.saturating_sub(own),
            self.server.limit,
            additional,
            reservation.consumer().name()
        ))
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_bounded_by_its_limit_and_by_the_server() {
        let server = ServerMemory::new(1000);
        let a: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(600, server.clone()));
        let b: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(600, server.clone()));
        let ra = MemoryConsumer::new("a").register(&a);
        let rb = MemoryConsumer::new("b").register(&b);
        ra.try_grow(500).unwrap();
        let over_query = ra.try_grow(200).unwrap_err().to_string();
        assert!(over_query.contains("query_memory_bytes"), "{over_query}");
        assert_eq!(server.reserved(), 500);
        let over_server = rb.try_grow(600).unwrap_err().to_string();
        assert!(
            over_server.contains("max_server_memory_bytes")
                && over_server.contains(OTHERS_HOLD_MEMORY)
                && over_server.contains(" 500 of the server's 1000 bytes"),
            "b alone would fit: {over_server}"
        );
        // a query allowed more than the server holds, asking for more than it alone
        let big: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(5000, server.clone()));
        let alone = MemoryConsumer::new("big")
            .register(&big)
            .try_grow(1001)
            .unwrap_err()
            .to_string();
        assert!(
            alone.contains("max_server_memory_bytes") && !alone.contains(OTHERS_HOLD_MEMORY),
            "it alone would not fit: {alone}"
        );
        assert_eq!(server.reserved(), 500, "a refusal holds nothing");
        assert_eq!(big.reserved(), 0);
        rb.try_grow(400).unwrap();
        assert_eq!(server.reserved(), 900);
        // over its own limit while others hold memory: its own limit is what it hears of
        let c: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(50, server.clone()));
        let rc = MemoryConsumer::new("c").register(&c);
        rc.try_grow(40).unwrap();
        let over_own = rc.try_grow(20).unwrap_err().to_string();
        assert!(
            over_own.contains("query_memory_bytes") && !over_own.contains(OTHERS_HOLD_MEMORY),
            "{over_own}"
        );
        let refused = rc.try_grow(90).unwrap_err().to_string();
        assert!(refused.contains("query_memory_bytes"), "{refused}");
        rc.free();
        assert_eq!(server.reserved(), 900);
        drop(ra);
        assert_eq!(server.reserved(), 400);
        rb.free();
        assert_eq!(server.reserved(), 0);
    }
}

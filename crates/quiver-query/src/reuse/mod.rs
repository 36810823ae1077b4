//! Reuse of time parts: an aggregate over a time range answered from the partial results of
//! stretches of time ("parts") that earlier queries computed, when no row of a part changed
//! since, plus partial results computed now for the rest; merged, the answer is exactly the
//! one a full computation gives.
//!
//! - [`rule`] finds aggregates whose partial results merge exactly (sum, count, min, max, avg
//!   via sum and count, first / last by time, grouped by anything deterministic, over one
//!   table, filtered by a time range and any deterministic row condition) and puts a merge of
//!   parts in their place;
//! - [`scan`] decides, when the plan becomes a physical plan (at the query's clock), which
//!   whole parts of the range a [`PartStore`] holds at their current version (storage keeps a
//!   version per stretch of time: [`quiver_storage::Table::time_versions`]) and computes the
//!   rest from one snapshot of the table;
//! - [`collect`] keeps the parts computed by a query for the next one.
//!
//! The store itself (memory bound, eviction) belongs to the result cache, which hands one to
//! each query it lets reuse parts ([`PartReuse`]), with a report of what was reused. The
//! partial states, the remainder computed from raw rows and their union are the mechanism
//! rollup routing uses too ([`crate::partials`]).

mod collect;
mod rule;
mod scan;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;

pub(crate) use rule::PartsReuseRule;

/// The key of one part: the query shape it is a partial result of, its stretch of time
/// `[start, end)` in nanoseconds, and the version of the table's rows in that stretch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartKey {
    /// Everything but the time range that the partial result depends on: the table, the
    /// grouping, the partial states, the row condition, the session settings and scope.
    pub shape: Arc<str>,
    /// First nanosecond of the stretch.
    pub start: i64,
    /// First nanosecond after the stretch.
    pub end: i64,
    /// The version of the table's rows in the stretch when the part was computed.
    pub version: u64,
}

impl PartKey {
    /// Approximate bytes the key occupies.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.shape.len()
    }
}

/// The partial result of one part (possibly no rows).
#[derive(Debug)]
pub struct PartRows {
    /// The rows, in the parts' schema.
    pub batches: Vec<RecordBatch>,
    /// Rows in `batches`.
    pub rows: usize,
    /// Bytes `batches` hold.
    pub bytes: usize,
}

/// Where parts are kept between queries (the result cache's).
pub trait PartStore: Send + Sync + Debug {
    /// The part stored under `key`, if kept.
    fn get(&self, key: &PartKey) -> Option<Arc<PartRows>>;
    /// Keeps `rows` under `key` (or not: the store decides).
    fn insert(&self, key: PartKey, rows: Arc<PartRows>);
    /// The largest part the store keeps, in bytes: a query stops gathering a part's rows
    /// past it.
    fn max_part_bytes(&self) -> usize;
    /// The bytes all parts together may hold: a query stops gathering parts past it.
    fn capacity_bytes(&self) -> usize;
}

/// What reusing parts did for one query.
#[derive(Debug, Default)]
pub struct PartsReport {
    reused_parts: AtomicU64,
    reused_rows: AtomicU64,
    computed_rows: AtomicU64,
}

impl PartsReport {
    /// Parts taken from the store.
    pub fn reused_parts(&self) -> u64 {
        self.reused_parts.load(Ordering::Relaxed)
    }

    /// Partial-result rows taken from the store.
    pub fn reused_rows(&self) -> u64 {
        self.reused_rows.load(Ordering::Relaxed)
    }

    /// Partial-result rows computed from the table's rows (whole parts and the rest of the
    /// range), known once the query's rows are all read.
    pub fn computed_rows(&self) -> u64 {
        self.computed_rows.load(Ordering::Relaxed)
    }

    fn add_reused(&self, rows: usize) {
        self.reused_parts.fetch_add(1, Ordering::Relaxed);
        self.reused_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    fn add_computed(&self, rows: usize) {
        self.computed_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }
}

/// Lets one query reuse parts: what the result cache hands the engine
/// ([`crate::ExecuteOptions::parts`]).
#[derive(Debug, Clone)]
pub struct PartReuse {
    /// Where parts are found and kept.
    pub store: Arc<dyn PartStore>,
    /// What this query reused and computed.
    pub report: Arc<PartsReport>,
    /// The same, summed over every query of the store's owner.
    pub totals: Arc<PartsReport>,
    /// What else the parts' rows depend on: the semantic session settings and the caller's
    /// access scope (parts are never shared between scopes).
    pub namespace: String,
}

impl PartReuse {
    /// Counts a part taken from the store, of `rows` rows.
    fn reused(&self, rows: usize) {
        self.report.add_reused(rows);
        self.totals.add_reused(rows);
    }

    /// Counts `rows` partial-result rows computed.
    fn computed(&self, rows: usize) {
        self.report.add_computed(rows);
        self.totals.add_computed(rows);
    }
}

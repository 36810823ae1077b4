//! Optimized logical plans of repeated statements, so that a dashboard's or an alert rule's
//! query, sent again and again over fresh data, is not analysed and optimized each time.
//!
//! A plan is reused only where it cannot differ from the plan a fresh run would make:
//! - the same statement: database, the databases the caller sees, SQL dialect and canonical
//!   text (see [`crate::canonical_sql`]);
//! - no bound parameters, and only statements whose answer depends on nothing but the data
//!   ([`Cacheability::Deterministic`]: no clock, which the optimizer folds into the plan as a
//!   constant, no volatile function, no system schema);
//! - every table it reads is still the same table (not dropped, or dropped and created again)
//!   with the same schema (a write that adds a column gives a table a new schema);
//! - a statement of at most [`MAX_KEPT_TEXT`] bytes, so that the cache stays small: at most
//!   [`MAX_PLANS`] plans of statements that size (a long `IN` list or `VALUES` is planned anew);
//! - a plan that could be made into a physical plan (a statement that fails is not kept).
//!
//! Table functions (`generate_series`) are planned into the plan with their arguments: one
//! whose rows change between runs (a cache of its own, say) must make its statements
//! non-deterministic ([`Cacheability`]), as the result cache already requires.
//!
//! Data is never part of a plan: a logical plan names its tables, and their rows (write buffer
//! and files) are read when the physical plan is made from it, at every run. So a cached plan
//! is never stale for new rows, and a write does not invalidate it.

use std::any::TypeId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;
use quiver_model::VisibleDatabases;
use quiver_storage::{Store, Table};

use crate::analyze::{Cacheability, QueryAnalysis};

/// Plans kept at most.
const MAX_PLANS: u64 = 1024;

/// Longest statement (canonical text, bytes) whose plan is kept.
const MAX_KEPT_TEXT: usize = 16 * 1024;

/// A plan not used for this long is dropped.
const PLAN_IDLE: Duration = Duration::from_secs(600);

/// What identifies a statement's plan (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PlanKey {
    database: String,
    visible: VisibleDatabases,
    dialect: TypeId,
    canonical: String,
}

/// A plan, the schema of the statement's answer, and the tables (with their schemas) it was
/// made for.
struct CachedPlan {
    plan: LogicalPlan,
    output: SchemaRef,
    tables: Vec<(Arc<Table>, SchemaRef)>,
}

/// The optimized logical plans of recent statements (module docs).
pub(crate) struct PlanCache {
    plans: moka::sync::Cache<PlanKey, Arc<CachedPlan>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// How the plan cache has done since start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Statements run from a kept plan.
    pub hits: u64,
    /// Statements that could have been (module docs) but were planned.
    pub misses: u64,
    /// Plans kept now.
    pub plans: u64,
}

/// A statement's place in the cache, and the tables it reads as they were before planning.
pub(crate) struct PlanSlot {
    key: PlanKey,
    tables: Vec<(Arc<Table>, SchemaRef)>,
}

impl PlanCache {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        PlanCache {
            plans: moka::sync::Cache::builder()
                .max_capacity(MAX_PLANS)
                .time_to_idle(PLAN_IDLE)
                .build(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Hits, misses and plans kept.
    pub(crate) fn stats(&self) -> PlanCacheStats {
        // moka counts entries lazily: settle its pending inserts first, or a scrape right
        // after the first plans were kept reads 0
        self.plans.run_pending_tasks();
        PlanCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            plans: self.plans.entry_count(),
        }
    }

    /// The slot of `analysis` run by a caller seeing `visible`, or `None` if its plan may not
    /// be reused (module docs) or a table it reads is gone.
    pub(crate) fn slot(
        store: &Store,
        analysis: &QueryAnalysis,
        visible: &VisibleDatabases,
        has_params: bool,
    ) -> Option<PlanSlot> {
        if has_params
            || analysis.cacheability != Cacheability::Deterministic
            || analysis.canonical.len() > MAX_KEPT_TEXT
        {
            return None;
        }
        let tables = analysis
            .tables
            .iter()
            .map(|t| {
                let table = store.database(&t.database)?.table(&t.table)?;
                let schema = table.schema();
                Some((table, schema))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PlanSlot {
            key: PlanKey {
                database: analysis.database.clone(),
                visible: visible.clone(),
                dialect: analysis.dialect,
                canonical: analysis.canonical.clone(),
            },
            tables,
        })
    }

    /// The plan kept in `slot` and its answer's schema, if it was made for the tables the
    /// slot found.
    pub(crate) fn get(&self, slot: &PlanSlot) -> Option<(LogicalPlan, SchemaRef)> {
        let plan = self.plans.get(&slot.key).and_then(|cached| {
            let same_tables = cached.tables.len() == slot.tables.len()
                && cached
                    .tables
                    .iter()
                    .zip(&slot.tables)
                    .all(|((t1, s1), (t2, s2))| Arc::ptr_eq(t1, t2) && Arc::ptr_eq(s1, s2));
            same_tables.then(|| (cached.plan.clone(), cached.output.clone()))
        });
        let counter = if plan.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        plan
    }

    /// Keeps `plan` (whose answer has `output` as its schema), made after `slot` was taken,
    /// for the slot's tables.
    pub(crate) fn insert(&self, slot: PlanSlot, plan: &LogicalPlan, output: &SchemaRef) {
        let cached = CachedPlan {
            plan: plan.clone(),
            output: output.clone(),
            tables: slot.tables,
        };
        self.plans.insert(slot.key, Arc::new(cached));
    }
}

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
//! Data is never part of a logical plan: it names its tables, and their rows (write buffer and
//! files) are read when the physical plan is made from it. So a kept logical plan is never
//! stale for new rows, and a write does not invalidate it.
//!
//! The physical plan is kept too, but only with the rows it was made over
//! ([`PhysicalPlans`]): a statement asked again before its table changed (a dashboard's panels,
//! a benchmark, an alert rule over a quiet table) runs the same physical plan, its operators'
//! state reset, instead of making one again (the physical planner and its optimizer are most
//! of a short query's cost). It is reused only while
//! - the statement's scans all read one table, and that table's snapshot is still the one they
//!   read (any write, persist, compaction, expiry or drop makes a new snapshot);
//! - every file was read from decoded columns (a plan reading Parquet has the columns decoded
//!   for the next plan, which will be faster) and the chunk cache has evicted nothing since
//!   (the plan holds the columns it read, which would otherwise outlive their eviction);
//! - the table's database keeps rows forever, then and now (a retention period makes the rows
//!   a scan may see depend on the clock, and setting one changes them without a write);
//! - no operator of the plan consumes a dynamic filter made by another operator (a
//!   `TopK`'s filter pushed into a scan), which resetting the operators' state cannot renew
//!   (an aggregate's reset copy even shares its filter with the plan it was copied from), and
//!   it runs no recursive query;
//! - every check a scan left still holds ([`ScansRead::valid_while`]: a routed scan's rollup
//!   has marked no bucket changed since it read which buckets the rollup covers).
//!
//! A kept physical plan holds the rows its scans read, so kept plans are few
//! ([`MAX_PHYSICAL_PLANS`]), dropped as soon as their table is written to or its rows move
//! (a persist, a compaction: a [`TableChangeListener`]), and dropped after [`PHYSICAL_IDLE`]
//! unused (checked whenever a plan is looked up or kept). What is left: plans holding
//! columns the chunk cache evicted since, until their next lookup or that idle time.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::Mutex;
use quiver_model::VisibleDatabases;
use quiver_storage::{ChunkCache, Store, Table, TableChangeListener, TableSnapshot};

use crate::analyze::{Cacheability, QueryAnalysis};

/// Plans kept at most.
const MAX_PLANS: u64 = 1024;

/// Longest statement (canonical text, bytes) whose plan is kept.
const MAX_KEPT_TEXT: usize = 16 * 1024;

/// A plan not used for this long is dropped.
const PLAN_IDLE: Duration = Duration::from_secs(600);

/// Physical plans kept at most.
const MAX_PHYSICAL_PLANS: usize = 64;

/// A physical plan not used for this long is dropped (when the next one is kept).
const PHYSICAL_IDLE: Duration = Duration::from_secs(60);

/// What identifies a statement's plan (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PlanKey {
    database: String,
    visible: VisibleDatabases,
    dialect: TypeId,
    canonical: String,
    /// Routing to rollups: off (`None`), or on under this generation of rollups.
    rollups: Option<u64>,
    /// Whether aggregates read reused time parts ([`crate::reuse`]).
    reuse_parts: bool,
}

/// A plan, the schema of the statement's answer, and the tables (with their schemas) it was
/// made for.
struct CachedPlan {
    plan: LogicalPlan,
    output: SchemaRef,
    tables: Vec<(Arc<Table>, SchemaRef)>,
}

/// The optimized logical plans of recent statements, and the physical plans of those whose
/// table did not change since (module docs).
pub(crate) struct PlanCache {
    plans: moka::sync::Cache<PlanKey, Arc<CachedPlan>>,
    physical: Arc<PhysicalPlans>,
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
    /// Statements run from a kept physical plan (also counted as `hits`).
    pub physical_hits: u64,
    /// Physical plans kept now.
    pub physical_plans: u64,
}

/// A statement's place in the cache, and the tables it reads as they were before planning.
pub(crate) struct PlanSlot {
    key: PlanKey,
    tables: Vec<(Arc<Table>, SchemaRef)>,
}

impl PlanCache {
    /// An empty cache of plans over `store`, whose physical plans are dropped as soon as a
    /// table they read is written to.
    pub(crate) fn new(store: &Store) -> Self {
        let physical = Arc::new(PhysicalPlans::new(store.chunk_cache().clone()));
        store.add_change_listener(physical.clone());
        PlanCache {
            plans: moka::sync::Cache::builder()
                .max_capacity(MAX_PLANS)
                .time_to_idle(PLAN_IDLE)
                .build(),
            physical,
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
            physical_hits: self.physical.hits.load(Ordering::Relaxed),
            physical_plans: self.physical.plans.lock().len() as u64,
        }
    }

    /// The slot of `analysis` run by a caller seeing `visible`, or `None` if its plan may not
    /// be reused (module docs) or a table it reads is gone.
    pub(crate) fn slot(
        store: &Store,
        analysis: &QueryAnalysis,
        visible: &VisibleDatabases,
        has_params: bool,
        (rollups, reuse_parts): (Option<u64>, bool),
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
                rollups,
                reuse_parts,
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

    /// The physical plan kept in `slot`, its state reset for one more run, and its answer's
    /// schema, if the rows it was made over are still the table's (module docs). A hit is
    /// counted among the plan cache's hits.
    pub(crate) fn physical(&self, slot: &PlanSlot) -> Option<(SchemaRef, Arc<dyn ExecutionPlan>)> {
        let (plan, output) = self.physical.get(slot)?;
        let plan = match reset_plan_states(plan) {
            Ok(plan) => plan,
            Err(e) => {
                // dropped and made anew (rather than failing the same way at every lookup)
                tracing::debug!(error = %e, "a kept physical plan could not be reset");
                self.physical.drop_if(|key, _| key == &slot.key);
                return None;
            }
        };
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.physical.hits.fetch_add(1, Ordering::Relaxed);
        Some((output, plan))
    }

    /// Keeps `plan`, made for `slot` from scans that read `scans` and answering with
    /// `output`, if it may be run again (module docs).
    pub(crate) fn keep_physical(
        &self,
        slot: &PlanSlot,
        plan: &Arc<dyn ExecutionPlan>,
        output: &SchemaRef,
        scans: &ScansRead,
    ) {
        let Some((table, snapshot)) = scans.one_snapshot() else {
            return;
        };
        if !slot.tables.iter().all(|(t, _)| Arc::ptr_eq(t, &table))
            || consumes_dynamic_filters(plan).unwrap_or(true)
            || recurses(plan)
        {
            return;
        }
        self.physical.insert(
            slot.key.clone(),
            KeptPhysical {
                plan: plan.clone(),
                output: output.clone(),
                table: table.clone(),
                snapshot: Arc::downgrade(&snapshot),
                evictions: self.physical.chunk_cache.evictions(),
                checks: scans.checks.lock().clone(),
                used: Instant::now(),
            },
        );
        // a write applied while the plan was made found nothing to drop: it goes now
        if table.version() != snapshot.version {
            self.physical.drop_if(|key, kept| {
                key == &slot.key && Weak::ptr_eq(&kept.snapshot, &Arc::downgrade(&snapshot))
            });
        }
    }
}

/// What the scans of one planning read, as the table providers note it: found in the
/// session's configuration (an extension the engine sets per query, see
/// [`ScansRead::of`]).
#[derive(Default)]
pub(crate) struct ScansRead {
    /// Each scan's table and the snapshot it read.
    reads: Mutex<Vec<(Arc<Table>, Arc<TableSnapshot>)>>,
    /// Set by a scan whose plan must not be run again (module docs).
    unrepeatable: AtomicBool,
    /// What must still hold for the plan to be run again, besides its snapshot.
    checks: Mutex<Vec<ValidityCheck>>,
}

/// A condition a kept physical plan is run again under ([`ScansRead::valid_while`]).
pub(crate) type ValidityCheck = Arc<dyn Fn() -> bool + Send + Sync>;

impl ScansRead {
    /// The record of the query being planned in `state`, if the engine keeps one.
    pub(crate) fn of(state: &dyn Session) -> Option<Arc<ScansRead>> {
        state.config().get_extension::<ScansRead>()
    }

    /// Notes that a scan read `snapshot` of `table`.
    pub(crate) fn read(&self, table: &Arc<Table>, snapshot: &Arc<TableSnapshot>) {
        self.reads.lock().push((table.clone(), snapshot.clone()));
    }

    /// Notes that a scan's plan may be run again only while `check` holds (it read state
    /// besides the table's snapshot that may change without a new snapshot).
    pub(crate) fn valid_while(&self, check: ValidityCheck) {
        self.checks.lock().push(check);
    }

    /// Notes that a scan's plan must not be run again: it reads Parquet, or rows the clock
    /// decides on.
    pub(crate) fn unrepeatable(&self) {
        self.unrepeatable.store(true, Ordering::Relaxed);
    }

    /// The one table and snapshot that every scan read, if the plan may be run again.
    fn one_snapshot(&self) -> Option<(Arc<Table>, Arc<TableSnapshot>)> {
        if self.unrepeatable.load(Ordering::Relaxed) {
            return None;
        }
        let reads = self.reads.lock();
        let (table, snapshot) = reads.first()?;
        reads
            .iter()
            .all(|(t, s)| Arc::ptr_eq(t, table) && Arc::ptr_eq(s, snapshot))
            .then(|| (table.clone(), snapshot.clone()))
    }
}

/// True if an operator of `plan` uses a dynamic filter that another operator makes (a filter
/// pushed down from a `TopK` or a join): resetting the maker's state gives it a new filter
/// that the kept consumer would never see.
fn consumes_dynamic_filters(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut consumes = false;
    plan.apply(|node| {
        let made: Vec<u64> = node
            .dynamic_expressions_produced()
            .iter()
            .filter_map(|e| e.expression_id())
            .collect();
        node.apply_expressions(&mut |root| {
            root.apply(|e| {
                let foreign = e
                    .downcast_ref::<DynamicFilterPhysicalExpr>()
                    .is_some_and(|d| d.expression_id().is_none_or(|id| !made.contains(&id)));
                consumes |= foreign;
                Ok(if foreign {
                    TreeNodeRecursion::Stop
                } else {
                    TreeNodeRecursion::Continue
                })
            })
        })?;
        Ok(if consumes {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(consumes)
}

/// True if `plan` holds a recursive query, which DataFusion does not promise to run again
/// after a reset.
fn recurses(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut recursive = false;
    let _ = plan.apply(|node| {
        recursive |= matches!(node.name(), "RecursiveQueryExec" | "WorkTableExec");
        Ok(if recursive {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    recursive
}

/// A physical plan kept with the rows it was made over.
struct KeptPhysical {
    plan: Arc<dyn ExecutionPlan>,
    output: SchemaRef,
    /// The one table its scans read, and the snapshot they read of it: not held, so that a
    /// snapshot the table replaced (and the files only it names, which a compaction replaced)
    /// goes as soon as no query reads it.
    table: Arc<Table>,
    snapshot: Weak<TableSnapshot>,
    /// The chunk cache's evictions when it was made.
    evictions: u64,
    /// What its scans said must still hold.
    checks: Vec<ValidityCheck>,
    /// When it was last run.
    used: Instant,
}

/// The physical plans kept (module docs); dropped when their table is written to.
pub(crate) struct PhysicalPlans {
    plans: Mutex<HashMap<PlanKey, KeptPhysical>>,
    /// What the plans' files were read through (its evictions make plans stale).
    chunk_cache: Arc<ChunkCache>,
    hits: AtomicU64,
}

impl PhysicalPlans {
    fn new(chunk_cache: Arc<ChunkCache>) -> Self {
        PhysicalPlans {
            plans: Mutex::new(HashMap::new()),
            chunk_cache,
            hits: AtomicU64::new(0),
        }
    }

    /// The plan kept for `slot` and its output schema, if its table's snapshot is the one it
    /// read and the chunk cache evicted nothing since; a stale plan is dropped. The lock is
    /// not held while the table makes its snapshot (after a write, that merges its buffer).
    fn get(&self, slot: &PlanSlot) -> Option<(Arc<dyn ExecutionPlan>, SchemaRef)> {
        let (table, read, evictions, checks) = {
            let plans = self.plans.lock();
            let kept = plans.get(&slot.key)?;
            let checks = kept.checks.clone();
            (
                kept.table.clone(),
                kept.snapshot.clone(),
                kept.evictions,
                checks,
            )
        };
        // (a weak reference keeps its snapshot's address from being reused while it exists;
        // a retention period set since changes which rows a scan may see, not the snapshot)
        let fresh = slot.tables.iter().all(|(t, _)| Arc::ptr_eq(t, &table))
            && evictions == self.chunk_cache.evictions()
            && table.retention_cutoff_ns(i64::MAX).is_none()
            && checks.iter().all(|holds| holds())
            && table
                .snapshot()
                .is_ok_and(|current| std::ptr::eq(Arc::as_ptr(&current), read.as_ptr()));
        if !fresh {
            // (unless another query's plan replaced it meanwhile: that one is not judged here)
            self.drop_if(|key, kept| key == &slot.key && Weak::ptr_eq(&kept.snapshot, &read));
            return None;
        }
        // (idle plans go: the only sweep a server that keeps no new plans gets)
        self.drop_if(|_, _| false);
        let mut plans = self.plans.lock();
        let kept = plans
            .get_mut(&slot.key)
            .filter(|kept| Weak::ptr_eq(&kept.snapshot, &read))?;
        kept.used = Instant::now();
        Some((kept.plan.clone(), kept.output.clone()))
    }

    /// Drops the plans `stale` says are, and those unused for [`PHYSICAL_IDLE`]. They are let
    /// go of after the lock (the last holder of a snapshot's rows frees them).
    fn drop_if(&self, stale: impl Fn(&PlanKey, &KeptPhysical) -> bool) {
        let now = Instant::now();
        let dropped: Vec<KeptPhysical> = {
            let mut plans = self.plans.lock();
            plans
                .extract_if(|key, kept| {
                    stale(key, kept) || now.duration_since(kept.used) >= PHYSICAL_IDLE
                })
                .map(|(_, kept)| kept)
                .collect()
        };
        drop(dropped);
    }

    /// Keeps `kept` for `key`, first dropping plans unused for [`PHYSICAL_IDLE`] and, if
    /// there are still [`MAX_PHYSICAL_PLANS`], the least recently used.
    fn insert(&self, key: PlanKey, kept: KeptPhysical) {
        self.drop_if(|_, _| false);
        let mut plans = self.plans.lock();
        let mut dropped = Vec::new();
        if plans.len() >= MAX_PHYSICAL_PLANS && !plans.contains_key(&key) {
            let oldest = plans
                .iter()
                .min_by_key(|(_, p)| p.used)
                .map(|(k, _)| k.clone());
            dropped.extend(oldest.and_then(|oldest| plans.remove(&oldest)));
        }
        dropped.extend(plans.insert(key, kept));
        drop(plans);
        drop(dropped);
    }

    /// Drops every plan reading `table` (and the idle ones).
    fn drop_table(&self, table: &Table) {
        self.drop_if(|_, kept| std::ptr::eq(Arc::as_ptr(&kept.table), table));
    }
}

/// A kept plan holds the rows it read: it goes as soon as its table's rows change, or move
/// (a persist or a compaction replaced its snapshot), so that it keeps nothing alive that the
/// table let go of.
impl TableChangeListener for PhysicalPlans {
    fn table_changed(&self, table: &Table) {
        self.drop_table(table);
    }

    fn rows_moved(&self, table: &Table) {
        self.drop_table(table);
    }
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::sorts::sort::SortExec;

    use super::*;

    #[test]
    fn a_plan_using_a_dynamic_filter_made_by_another_operator_is_not_run_again() {
        let schema = Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, false)]));
        let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let order = LexOrdering::new(vec![PhysicalSortExpr::new_default(
            col("t", &schema).unwrap(),
        )])
        .unwrap();
        let top_k: Arc<dyn ExecutionPlan> =
            Arc::new(SortExec::new(order.clone(), input.clone()).with_fetch(Some(3)));
        // a TopK's own filter is renewed when its state is reset
        assert!(!consumes_dynamic_filters(&top_k).unwrap());
        // the filter of another TopK, as if pushed down into a filter below this one
        let pushed = top_k.dynamic_expressions_produced().remove(0);
        let consumer = Arc::new(FilterExec::try_new(pushed, input).unwrap());
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(SortExec::new(order, consumer).with_fetch(Some(3)));
        assert!(consumes_dynamic_filters(&plan).unwrap());
    }
}

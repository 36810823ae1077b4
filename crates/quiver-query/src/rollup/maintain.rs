//! Keeping rollups up to date ([`Maintainer`]): a background task that, about once a second
//! (at once after a rollup is created), takes each rollup's pending buckets from storage,
//! recomputes their partial states from the base table's raw rows, and installs them; drops
//! the segments a retention period expired; and reads the definitions of rollups loaded at
//! start-up. Buckets still open (the one holding the current time, and later ones) are left
//! to queries to read raw until they close, so live ingest costs one recomputation per
//! bucket, not one per write.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use datafusion::datasource::provider_as_source;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::utils::conjunction;
use datafusion::prelude::SessionContext;
use quiver_storage::{Ranges, RollupState, Table};
use tokio::task::JoinHandle;

use super::definition::RollupShape;
use super::RollupRouter;
use crate::partials::time_ranges;
use crate::provider::{external, QuiverTable};

/// How often pending buckets are looked for when nothing wakes the task earlier.
const ROUND: Duration = Duration::from_secs(1);

/// How long one rollup's recomputation may run before the others get their turn.
const ROUND_BUDGET: Duration = Duration::from_secs(2);

/// The background task keeping rollups up to date; stops when dropped.
#[derive(Debug)]
pub(crate) struct Maintainer(Option<JoinHandle<()>>);

impl Maintainer {
    /// Starts the task on the current tokio runtime (none outside one: then rollups are
    /// never computed, and queries read raw rows).
    pub(crate) fn start(rollups: &Arc<RollupRouter>) -> Self {
        let handle = tokio::runtime::Handle::try_current()
            .ok()
            .map(|runtime| runtime.spawn(run(Arc::downgrade(rollups))));
        Maintainer(handle)
    }
}

impl Drop for Maintainer {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

async fn run(rollups: Weak<RollupRouter>) {
    loop {
        let Some(strong) = rollups.upgrade() else {
            return;
        };
        let worked = strong.maintain_round().await;
        let wake = strong.wake.clone();
        drop(strong);
        if !worked {
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(ROUND) => {}
            }
        }
    }
}

impl RollupRouter {
    /// One pass over every rollup; true if any recomputed something.
    async fn maintain_round(&self) -> bool {
        self.forget_dropped();
        let mut worked = false;
        for state in self.store.rollups().list() {
            if state.is_dropped() {
                continue;
            }
            let d = state.definition().clone();
            let spec = match self.spec(&d.database, &d.name) {
                Some(spec) => spec,
                None => match self.read_spec(&d.database, &d.sql).await {
                    Ok(spec) => self.keep_spec(&d.database, &d.name, spec),
                    Err(e) => {
                        let failure = format!(
                            "cannot read its definition, so it is not maintained or used: {e}"
                        );
                        self.note_failure(&d, Some(failure));
                        continue;
                    }
                },
            };
            let Some(table) = self
                .store
                .database(&d.database)
                .and_then(|db| db.table(&d.table))
            else {
                continue;
            };
            match self.maintain(&spec, &state, &table).await {
                Ok(recomputed) => {
                    worked |= recomputed;
                    self.note_failure(&d, None);
                }
                Err(e) => {
                    let failure = format!("maintenance failed (retried every round): {e}");
                    self.note_failure(&d, Some(failure));
                }
            }
        }
        worked
    }

    /// Records how rollup `d` last failed (`None`: it did not), logging only changes, so a
    /// failure that repeats every round is logged once and shown in the rollup's listing.
    fn note_failure(&self, d: &quiver_storage::RollupDefinition, failure: Option<String>) {
        let key = (d.database.clone(), d.name.clone());
        let mut failures = self.failures.lock();
        match failure {
            Some(failure) if failures.get(&key) != Some(&failure) => {
                tracing::warn!(db = %d.database, rollup = %d.name, "{failure}");
                failures.insert(key, failure);
            }
            Some(_) => {}
            None => {
                if failures.remove(&key).is_some() {
                    tracing::info!(db = %d.database, rollup = %d.name, "rollup maintenance recovered");
                }
            }
        }
    }

    /// Expires what retention removed, then recomputes pending buckets for up to
    /// [`ROUND_BUDGET`]; true if it recomputed any.
    async fn maintain(
        &self,
        spec: &RollupShape,
        state: &RollupState,
        table: &Arc<Table>,
    ) -> Result<bool> {
        let snapshot = table.snapshot().map_err(external)?;
        let data = snapshot.oldest_time().zip(snapshot.newest_time());
        // read before any bucket is taken: files persisted later mark it pending on restart
        let files_through_id = snapshot.newest_file_id();
        drop(snapshot);
        let now_ns = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
        if let Some(cutoff) = table.retention_cutoff_ns(now_ns) {
            state
                .expire_before(cutoff, files_through_id)
                .map_err(external)?;
        }
        let started = Instant::now();
        let mut worked = false;
        let ctx = self.planning_context(table.database());
        let raw = QuiverTable::new(table.clone(), self.store.chunk_cache().clone());
        while started.elapsed() < ROUND_BUDGET {
            let Some(range) = state.next_work(now_ns, data) else {
                break;
            };
            worked = true;
            let installed = match recompute(&ctx, spec, &raw, range).await {
                Ok(rows) => state
                    .install(range, &rows, files_through_id)
                    .map_err(external),
                Err(e) => Err(e),
            };
            if let Err(e) = installed {
                state.abandon(range);
                return Err(e);
            }
        }
        state.checkpoint(files_through_id).map_err(external)?;
        Ok(worked)
    }

    /// Reads a rollup's statement in `database` (routing off: a rollup is defined over raw
    /// rows).
    pub(crate) async fn read_spec(
        &self,
        database: &str,
        sql: &str,
    ) -> Result<RollupShape, super::RollupError> {
        let invalid = |e: DataFusionError| super::RollupError::Invalid(e.strip_backtrace());
        let ctx = self.planning_context(database);
        let state = ctx.state();
        let plan = state.create_logical_plan(sql).await.map_err(invalid)?;
        let analyzed = state
            .analyzer()
            .execute_and_check(plan, state.config_options(), |_, _| {})
            .map_err(invalid)?;
        RollupShape::read(&analyzed).map_err(super::RollupError::Invalid)
    }
}

/// The partial states of `raw`'s rows in `range`, per bucket and group, computed in `ctx` (a
/// session without routing).
async fn recompute(
    ctx: &SessionContext,
    spec: &RollupShape,
    raw: &QuiverTable,
    range: (i64, i64),
) -> Result<Vec<RecordBatch>> {
    let mut filter = spec.filter.clone();
    filter.extend(time_ranges(&Ranges::of(range.0, range.1)));
    let plan = spec.partial_plan(
        provider_as_source(Arc::new(raw.clone())),
        raw.table().name(),
        conjunction(filter),
    )?;
    ctx.execute_logical_plan(plan).await?.collect().await
}

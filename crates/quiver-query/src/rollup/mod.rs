//! Rollups: aggregates kept per time bucket and tag group, maintained from every write, and
//! used by queries on the base table without their asking, exactly.
//!
//! - [`definition`] reads a rollup's statement into what it keeps (partial states that
//!   merge exactly) or says why it cannot be kept;
//! - [`maintain`] recomputes the buckets writes touched (and backfills a new rollup) from
//!   raw rows, in the background; storage ([`quiver_storage::RollupState`]) marks them, keeps
//!   the rows and makes them durable;
//! - [`route`] answers aggregates over a base table from its best rollup, reading raw rows
//!   for what the rollup does not cover ([`partials`], on the mechanism the reuse of time
//!   parts shares: [`crate::partials`]), so answers never change.
//!
//! [`RollupRouter`] holds each rollup's shape ([`definition::RollupShape`], read from the
//! definition the catalog records; storage's [`quiver_storage::RollupStates`] holds the kept
//! rows and what is pending), routes the engine's aggregates to rollups, and is what the
//! engine's management calls (create, list, drop) reach.

pub(crate) mod definition;
mod maintain;
pub(crate) mod partials;
pub(crate) mod route;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::datasource::ViewTable;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::{SessionConfig, SessionContext};
use parking_lot::RwLock;
use quiver_model::VisibleDatabases;
use quiver_model::{Classify, ErrorKind};
use quiver_storage::{RollupDefinition, RollupState, RollupStats, StorageError, Store};
use serde::Serialize;

use crate::catalog_names::CATALOG_NAME;
use crate::sql_catalog::{DatabaseViews, QuiverCatalog};
pub(crate) use definition::RollupShape;
pub(crate) use maintain::Maintainer;
pub(crate) use route::RollupRouteRule;

thread_local! {
    static NOTES: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// What the router decided while one plan was analysed, for `EXPLAIN`: collected on the
/// planning thread (analysis is synchronous).
pub(crate) struct RoutingNotes;

impl RoutingNotes {
    /// Records a decision, if notes are being collected on this thread.
    pub(crate) fn note(text: String) {
        NOTES.with(|notes| {
            if let Some(notes) = notes.borrow_mut().as_mut() {
                notes.push(text);
            }
        });
    }

    /// Runs `f`, collecting the decisions it makes (none are collected outside it, even if
    /// `f` panics).
    pub(crate) fn collect<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
        /// Stops the collection when dropped.
        struct Collecting;
        impl Drop for Collecting {
            fn drop(&mut self) {
                NOTES.with(|notes| notes.borrow_mut().take());
            }
        }
        NOTES.with(|notes| *notes.borrow_mut() = Some(Vec::new()));
        let collecting = Collecting;
        let result = f();
        let notes = NOTES.with(|notes| notes.borrow_mut().take().unwrap_or_default());
        drop(collecting);
        (result, notes)
    }
}

/// Why a rollup could not be created or dropped.
#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    /// The statement is not one a rollup can keep exactly; the reason.
    #[error("{0}")]
    Invalid(String),
    /// Storage refused (no such table, a name taken, a disk failure).
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl Classify for RollupError {
    fn kind(&self) -> ErrorKind {
        match self {
            RollupError::Invalid(_) => ErrorKind::Invalid,
            RollupError::Storage(e) => e.kind(),
        }
    }
}

/// One rollup as `GET /api/v3/configure/rollup` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RollupInfo {
    /// Its database.
    pub db: String,
    /// Its name.
    pub name: String,
    /// Its base table.
    pub table: String,
    /// Its statement.
    pub sql: String,
    /// Bucket width in seconds.
    pub bucket_seconds: f64,
    /// The tags it groups by.
    pub tags: Vec<String>,
    /// The partial states it keeps per bucket and group.
    pub states: Vec<String>,
    /// Where it stands.
    #[serde(flatten)]
    pub stats: RollupStats,
    /// How its maintenance fails, while it does (it is retried every round).
    pub error: Option<String>,
}

/// The rollups' shapes, their routing and their maintenance (module docs).
pub struct RollupRouter {
    store: Arc<Store>,
    specs: RwLock<HashMap<(String, String), Arc<RollupShape>>>,
    /// Wakes the maintainer (a rollup was created).
    wake: Arc<tokio::sync::Notify>,
    /// How each rollup's maintenance last failed, while it keeps failing.
    failures: parking_lot::Mutex<HashMap<(String, String), String>>,
    /// Definitions read so far (each may change how a statement is planned).
    specs_read: std::sync::atomic::AtomicU64,
    /// What rollups are planned and computed with: the engine's settings and memory.
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
}

impl std::fmt::Debug for RollupRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RollupRouter")
    }
}

impl RollupRouter {
    pub(crate) fn new(store: Arc<Store>, config: SessionConfig, runtime: Arc<RuntimeEnv>) -> Self {
        RollupRouter {
            store,
            specs: RwLock::new(HashMap::new()),
            failures: parking_lot::Mutex::new(HashMap::new()),
            specs_read: std::sync::atomic::AtomicU64::new(0),
            wake: Arc::new(tokio::sync::Notify::new()),
            config,
            runtime,
        }
    }

    /// A session of `database` without routing, for defining and computing rollups.
    pub(crate) fn planning_context(&self, database: &str) -> SessionContext {
        let config = self
            .config
            .clone()
            .with_default_catalog_and_schema(CATALOG_NAME, database);
        let ctx = SessionContext::new_with_state(
            quiver_exec::session::state_builder(config, self.runtime.clone()).build(),
        );
        ctx.register_catalog(
            CATALOG_NAME,
            Arc::new(QuiverCatalog::new(
                self.store.clone(),
                VisibleDatabases::All,
            )),
        );
        ctx
    }

    fn keep_spec(&self, database: &str, name: &str, spec: RollupShape) -> Arc<RollupShape> {
        let spec = Arc::new(spec);
        self.specs
            .write()
            .insert((database.to_string(), name.to_string()), spec.clone());
        self.specs_read
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        spec
    }

    /// Forgets the definitions and failures of rollups storage no longer has (dropped, or
    /// dropped with their table), so that neither map outgrows the rollups there are.
    fn forget_dropped(&self) {
        let rollups = self.store.rollups();
        let exists = |(db, name): &(String, String)| rollups.get(db, name).is_some();
        self.specs.write().retain(|key, _| exists(key));
        self.failures.lock().retain(|key, _| exists(key));
    }

    /// Changes whenever routing may change: a rollup created, dropped, or its definition read
    /// after a restart. Kept plans are keyed by it.
    pub(crate) fn generation(&self) -> u64 {
        self.store.rollups().generation()
            + self.specs_read.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The rollups of `table` whose definitions are read, with their state.
    pub(crate) fn candidates(
        &self,
        database: &str,
        table: &str,
    ) -> Vec<(Arc<RollupShape>, Arc<RollupState>)> {
        let states = self.store.rollups().of_table(database, table);
        if states.is_empty() {
            return Vec::new();
        }
        let specs = self.specs.read();
        states
            .into_iter()
            .filter_map(|state| {
                let key = (database.to_string(), state.definition().name.clone());
                specs.get(&key).map(|spec| (spec.clone(), state))
            })
            .collect()
    }

    /// The definition of rollup `name` of `database`, if it is read.
    pub(crate) fn spec(&self, database: &str, name: &str) -> Option<Arc<RollupShape>> {
        // dropped with its table, the state is gone first
        self.store.rollups().get(database, name)?;
        self.specs
            .read()
            .get(&(database.to_string(), name.to_string()))
            .cloned()
    }

    /// The names of `database`'s rollups whose definitions are read.
    pub(crate) fn names(&self, database: &str) -> Vec<String> {
        let specs = self.specs.read();
        self.store
            .rollups()
            .list()
            .into_iter()
            .map(|state| state.definition().clone())
            .filter(|d| d.database == database)
            .filter(|d| specs.contains_key(&(d.database.clone(), d.name.clone())))
            .map(|d| d.name)
            .collect()
    }

    /// Creates the rollup `name` of `database` from its statement: it is backfilled in the
    /// background, and used by queries as it covers buckets.
    pub async fn create(
        &self,
        database: &str,
        name: &str,
        sql: &str,
    ) -> Result<RollupInfo, RollupError> {
        if self.store.database(database).is_none() {
            return Err(RollupError::Storage(StorageError::NotFound {
                what: format!("database {database:?}"),
            }));
        }
        let spec = self.read_spec(database, sql).await?;
        let definition = RollupDefinition {
            database: database.to_string(),
            name: name.to_string(),
            table: spec.table.clone(),
            sql: sql.to_string(),
            bucket_ns: spec.bucket.width,
            origin_ns: spec.bucket.origin,
        };
        let state = self.store.create_rollup(definition)?;
        let spec = self.keep_spec(database, name, spec);
        self.wake.notify_one();
        Ok(self.info(&state, Some(&spec)))
    }

    /// Drops rollup `name` of `database`.
    pub fn drop_rollup(&self, database: &str, name: &str) -> Result<(), RollupError> {
        self.store.drop_rollup(database, name)?;
        self.specs
            .write()
            .remove(&(database.to_string(), name.to_string()));
        Ok(())
    }

    /// Every rollup (of `database` only, if given) with its state (a rollup loaded at
    /// start-up lists no tags and states until its definition is read, moments later).
    pub fn list(&self, database: Option<&str>) -> Vec<RollupInfo> {
        self.store
            .rollups()
            .list()
            .into_iter()
            .filter(|state| database.is_none_or(|db| state.definition().database == db))
            .map(|state| {
                let d = state.definition();
                let spec = self.spec(&d.database, &d.name);
                self.info(&state, spec.as_deref())
            })
            .collect()
    }

    fn info(&self, state: &RollupState, spec: Option<&RollupShape>) -> RollupInfo {
        let d = state.definition();
        let data = self
            .store
            .database(&d.database)
            .and_then(|db| db.table(&d.table))
            .and_then(|table| table.snapshot().ok())
            .and_then(|s| Some((s.oldest_time()?, s.newest_time()?)));
        RollupInfo {
            db: d.database.clone(),
            name: d.name.clone(),
            table: d.table.clone(),
            sql: d.sql.clone(),
            bucket_seconds: d.bucket_ns as f64 / 1e9,
            tags: spec.map(|s| s.tags.clone()).unwrap_or_default(),
            states: spec
                .map(|s| s.states.iter().map(|s| s.name()).collect())
                .unwrap_or_default(),
            stats: state.stats(data),
            error: self
                .failures
                .lock()
                .get(&(d.database.clone(), d.name.clone()))
                .cloned(),
        }
    }
}

/// Each rollup is a read-only table of its database: reading it runs the rollup's statement
/// (which the router answers from the rollup, exactly).
impl DatabaseViews for RollupRouter {
    fn names(&self, database: &str) -> Vec<String> {
        RollupRouter::names(self, database)
    }

    fn view(&self, database: &str, name: &str) -> Option<Arc<dyn TableProvider>> {
        let spec = self.spec(database, name)?;
        Some(Arc::new(ViewTable::new(spec.plan.clone(), None)))
    }
}

//! A query node's view of the writer's data (`role = query`): it holds no WAL and writes
//! nothing; it loads the newest catalog version of the shared store, and a thread of its own
//! lists the store's `catalog/` every [`FOLLOW_INTERVAL`] and applies each newer version:
//! tables whose catalog entry changed get a new version (from this process's counter, so
//! the caches above never mistake the new files for the old), unchanged tables keep theirs
//! and their cached answers, dropped ones go. The catalog's last-value and distinct-value
//! caches and rollup definitions are applied with it: a rollup new to the node starts with
//! everything pending, and the time ranges of files a table gained or lost are pending again
//! in its rollups (the engine recomputes them from the shared files, as the writer does).
//!
//! The same loop takes over the documents the writer publishes beside the catalog (its token
//! file: [`crate::Store::publish`]) for whoever registered to apply them
//! ([`Follower::follow_document`]), reading each at most every [`DOCUMENT_INTERVAL`].
//!
//! A query node must not answer from a catalog it cannot know to be current: while the
//! newest version cannot be read (a garbage object) or the store has not answered for
//! [`STALE_AFTER`], [`Follower::check_current`] fails and queries fail with it.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::catalog::{self, CatalogState, DataDirLock, TableEntry};
use crate::chunk_cache::ChunkCache;
use crate::data_store::DataStore;
use crate::database::{Database, DatabaseMap};
use crate::limits::StoreLimits;
use crate::options::shared_document;
use crate::retention::RetentionPeriod;
use crate::rollup_states::RollupStates;
use crate::table::{next_version, ParquetFile, Table};
use crate::value_caches::ValueCaches;
use crate::StorageError;

/// How often a query node looks for a new catalog version.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(250);

/// How long a query node answers after the store last answered it; past it, queries fail.
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// How often a query node reads a document the writer publishes again.
pub const DOCUMENT_INTERVAL: Duration = Duration::from_secs(1);

/// Applies a document the writer published, on a query node (what
/// [`crate::Store::follow_published`] registers): called with its bytes whenever they change;
/// an error is logged and the document read again at the next interval.
pub type ApplyPublished = Box<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// A published document a follower applies as it changes.
struct FollowedDocument {
    name: String,
    apply: ApplyPublished,
    /// The bytes last applied.
    applied: Option<bytes::Bytes>,
    next_read: Instant,
}

/// What a query node knows about its following of the writer's catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// The catalog version it answers from.
    pub catalog_version: u64,
    /// Catalog versions applied since start (the first load included).
    pub catalogs_applied: u64,
    /// Milliseconds since the store last answered a check (listing or reading the catalog).
    pub last_check_ms_ago: u64,
    /// Why the newest catalog could not be followed, if it could not (cleared on success).
    pub error: Option<String>,
}

/// What a follower keeps current for the store it serves.
pub(crate) struct FollowedState {
    /// The databases and their tables.
    pub(crate) databases: Arc<RwLock<DatabaseMap>>,
    /// The chunk cache (told about files that are gone).
    pub(crate) chunk_cache: Arc<ChunkCache>,
    /// The configured last-value and distinct-value caches.
    pub(crate) value_caches: Arc<ValueCaches>,
    /// The rollups.
    pub(crate) rollups: Arc<RollupStates>,
}

/// The time ranges of the files in one of `before` and `after` (a table's entries in two
/// catalogs) but not the other.
fn changed_files<'a>(
    before: Option<&'a TableEntry>,
    after: Option<&'a TableEntry>,
) -> impl Iterator<Item = (i64, i64)> + 'a {
    let files = |entry: Option<&'a TableEntry>| entry.into_iter().flat_map(|t| t.files.iter());
    let in_before: HashSet<&str> = files(before).map(|f| f.path.as_str()).collect();
    let in_after: HashSet<&str> = files(after).map(|f| f.path.as_str()).collect();
    let gained = files(after).filter(move |f| !in_before.contains(f.path.as_str()));
    let lost = files(before).filter(move |f| !in_after.contains(f.path.as_str()));
    gained.chain(lost).map(|f| (f.min_time_ns, f.max_time_ns))
}

/// Follows the shared store's catalog for a query node (see the module documentation).
pub(crate) struct Follower {
    data: DataStore,
    limits: StoreLimits,
    default_retention: RetentionPeriod,
    databases: Arc<RwLock<DatabaseMap>>,
    chunk_cache: Arc<ChunkCache>,
    /// The catalog's last-value and distinct-value caches, as applied.
    value_caches: Arc<ValueCaches>,
    /// The catalog's rollups, kept in memory.
    rollups: Arc<RollupStates>,
    /// The catalog applied.
    applied: Mutex<CatalogState>,
    status: Mutex<Status>,
    /// The published documents followed.
    documents: Mutex<Vec<FollowedDocument>>,
    stop: (Mutex<bool>, Condvar),
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The node's data directory's lock, held while the node runs.
    _lock: DataDirLock,
}

struct Status {
    /// When the store last answered a check.
    last_answer: Instant,
    /// The store answered with a catalog that cannot be used (a garbage object).
    unusable: Option<String>,
    /// The store did not answer the last check.
    unreachable: Option<String>,
    applied: u64,
}

impl Follower {
    /// A follower that has loaded the newest catalog of `data` into `databases`.
    pub(crate) fn load(
        data: DataStore,
        (limits, default_retention, lock): (StoreLimits, RetentionPeriod, DataDirLock),
        shared: FollowedState,
    ) -> Result<Arc<Self>, StorageError> {
        let FollowedState {
            databases,
            chunk_cache,
            value_caches,
            rollups,
        } = shared;
        let state = catalog::load(&data)?;
        let (restored, _) =
            crate::database::restore_databases(&state, &limits, default_retention, None)?;
        *databases.write() = restored;
        value_caches.replace(state.value_caches.clone());
        rollups.follow(&state.rollups);
        Ok(Arc::new(Follower {
            data,
            limits,
            default_retention,
            databases,
            chunk_cache,
            value_caches,
            rollups,
            applied: Mutex::new(state),
            status: Mutex::new(Status {
                last_answer: Instant::now(),
                unusable: None,
                unreachable: None,
                applied: 1,
            }),
            documents: Mutex::new(Vec::new()),
            stop: (Mutex::new(false), Condvar::new()),
            thread: Mutex::new(None),
            _lock: lock,
        }))
    }

    /// Starts the thread that follows new catalog versions.
    pub(crate) fn start(self: &Arc<Self>) -> Result<(), StorageError> {
        let follower = Arc::downgrade(self);
        let handle = std::thread::Builder::new()
            .name("quiver-follow".into())
            .spawn(move || run_follower(follower))
            .map_err(|e| {
                StorageError::Catalog(format!(
                    "cannot start the thread that follows the writer's catalog: {e}"
                ))
            })?;
        *self.thread.lock() = Some(handle);
        Ok(())
    }

    /// Stops the following thread.
    pub(crate) fn close(&self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }

    /// Looks for a newer catalog version once and applies it.
    pub(crate) fn check_now(&self) -> Result<(), StorageError> {
        let outcome = self.follow_once();
        let mut status = self.status.lock();
        match &outcome {
            Ok(applied) => {
                status.last_answer = Instant::now();
                (status.unusable, status.unreachable) = (None, None);
                status.applied += u64::from(*applied);
            }
            Err(StorageError::Catalog(reason)) => {
                status.last_answer = Instant::now();
                status.unreachable = None;
                status.unusable = Some(reason.clone());
            }
            Err(e) => status.unreachable = Some(e.to_string()),
        }
        outcome.map(|_| ())
    }

    /// Applies the newest catalog version if it is newer than the one applied; says whether
    /// it did.
    fn follow_once(&self) -> Result<bool, StorageError> {
        let current = self.applied.lock().version;
        let newest = match catalog::newest_version(&self.data)? {
            Some(newest) if newest > current => newest,
            _ => return Ok(false),
        };
        // the version listed, read at once; one deleted meanwhile has newer ones, next time
        let Some(state) = catalog::load_listed(&self.data, newest)? else {
            return Ok(false);
        };
        self.apply(state)?;
        Ok(true)
    }

    /// Applies the writer's document `name` (under the store's shared documents) with `apply`
    /// now, then from the following loop whenever it changes.
    pub(crate) fn follow_document(
        &self,
        name: &str,
        apply: ApplyPublished,
    ) -> Result<(), StorageError> {
        let mut document = FollowedDocument {
            name: name.to_string(),
            apply,
            applied: None,
            next_read: Instant::now(),
        };
        self.read_document(&mut document)?;
        self.documents.lock().push(document);
        Ok(())
    }

    /// Reads `document` and applies it if it changed since it was last applied.
    fn read_document(&self, document: &mut FollowedDocument) -> Result<(), StorageError> {
        document.next_read = Instant::now() + DOCUMENT_INTERVAL;
        let Some(bytes) = self.data.get(&shared_document(&document.name))? else {
            return Ok(());
        };
        if document.applied.as_ref() != Some(&bytes) {
            (document.apply)(&bytes).map_err(|e| {
                StorageError::Catalog(format!("cannot apply the writer's {}: {e}", document.name))
            })?;
            document.applied = Some(bytes);
        }
        Ok(())
    }

    /// Reads the documents whose interval has passed by `now` (a failure is logged, and the
    /// document read again at the next interval).
    pub(crate) fn follow_documents(&self, now: Instant) {
        for document in self.documents.lock().iter_mut() {
            if document.next_read > now {
                continue;
            }
            if let Err(e) = self.read_document(document) {
                tracing::warn!(error = %e, document = %document.name, "could not follow a document the writer published");
            }
        }
    }

    /// Makes `state` the catalog queries read (see the module documentation).
    fn apply(&self, state: CatalogState) -> Result<(), StorageError> {
        // everything that can fail, before anything changes: a catalog is applied whole or
        // not at all
        for table in state.databases.values().flat_map(|db| db.tables.values()) {
            table.column_types()?;
        }
        let mut applied = self.applied.lock();
        let mut databases = self.databases.write();
        let mut next: DatabaseMap = BTreeMap::new();
        let mut kept_files: HashSet<&str> = HashSet::new();
        // (database, table, min, max) of every file a table gained or lost
        let mut changed_ranges = Vec::new();
        for (name, entry) in &state.databases {
            let db = databases.get(name).cloned().unwrap_or_else(|| {
                Arc::new(Database::new(
                    name.clone(),
                    self.limits.clone(),
                    (entry.retention_period, self.default_retention),
                ))
            });
            if db.retention_setting() != entry.retention_period {
                // moves every table's version: only when it changed
                db.set_retention(entry.retention_period, self.default_retention);
            }
            let before = applied.databases.get(name);
            let mut tables = BTreeMap::new();
            for (table_name, table) in &entry.tables {
                kept_files.extend(table.files.iter().map(|f| f.path.as_str()));
                let was = before.and_then(|b| b.tables.get(table_name));
                let unchanged = was == Some(table);
                if !unchanged {
                    changed_ranges.extend(
                        changed_files(was, Some(table))
                            .map(|(min, max)| (name.as_str(), table_name.as_str(), min, max)),
                    );
                }
                let live = db.table(table_name).filter(|_| unchanged);
                let live = match live {
                    Some(live) => live,
                    None => Arc::new(Table::restore(
                        (
                            name.clone(),
                            table_name.clone(),
                            db.retention.clone(),
                            table.id,
                        ),
                        table.column_types()?,
                        next_version(),
                        table
                            .files
                            .iter()
                            .map(|f| Arc::new(ParquetFile { entry: f.clone() }))
                            .collect(),
                    )),
                };
                tables.insert(table_name.clone(), live);
            }
            *db.tables.write() = tables;
            next.insert(name.clone(), db);
        }
        let gone = applied
            .databases
            .values()
            .flat_map(|db| db.tables.values())
            .flat_map(|t| t.files.iter().map(|f| f.path.as_str()))
            .filter(|path| !kept_files.contains(path));
        self.chunk_cache.forget_files(gone);
        *databases = next;
        drop(databases);
        self.value_caches.replace(state.value_caches.clone());
        self.rollups.follow(&state.rollups);
        for (database, table, min, max) in changed_ranges {
            self.rollups.mark_changed(database, table, min, max);
        }
        *applied = state;
        Ok(())
    }

    /// Fails if queries must not be answered now: the newest catalog could not be read, or
    /// the store has not answered for [`STALE_AFTER`].
    pub(crate) fn check_current(&self) -> Result<(), StorageError> {
        let status = self.status.lock();
        if let Some(reason) = &status.unusable {
            return Err(StorageError::Catalog(format!(
                "this query node cannot follow the writer's catalog in {}: {reason}",
                self.data.location()
            )));
        }
        // a check in flight may wait on retries for longer than this: silence is enough
        let silent = status.last_answer.elapsed();
        if silent < STALE_AFTER {
            return Ok(());
        }
        Err(StorageError::Stale {
            seconds: silent.as_secs(),
            reason: status
                .unreachable
                .clone()
                .unwrap_or_else(|| "the catalog check under way has not been answered".into()),
        })
    }

    /// The catalog applied.
    pub(crate) fn catalog(&self) -> CatalogState {
        self.applied.lock().clone()
    }

    /// What the follower knows now.
    pub(crate) fn stats(&self) -> FollowStats {
        let status = self.status.lock();
        FollowStats {
            catalog_version: self.applied.lock().version,
            catalogs_applied: status.applied,
            last_check_ms_ago: status.last_answer.elapsed().as_millis() as u64,
            error: status
                .unusable
                .clone()
                .or_else(|| status.unreachable.clone()),
        }
    }
}

/// The following thread: checks every [`FOLLOW_INTERVAL`] until stopped. Holds the follower
/// only while checking, so dropping the store ends it too.
fn run_follower(follower: Weak<Follower>) {
    loop {
        let Some(strong) = follower.upgrade() else {
            return;
        };
        {
            let mut stopped = strong.stop.0.lock();
            if !*stopped {
                strong.stop.1.wait_for(&mut stopped, FOLLOW_INTERVAL);
            }
            if *stopped {
                return;
            }
        }
        if let Err(e) = strong.check_now() {
            tracing::warn!(error = %e, "could not follow the writer's catalog");
        }
        strong.follow_documents(Instant::now());
    }
}

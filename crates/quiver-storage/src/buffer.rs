//! The write buffer's shared state: how many bytes are buffered, the gate under which durable
//! writes are applied and the buffer is frozen (so a freeze covers whole writes up to one WAL
//! sequence number), the signals between writers, the WAL's commit thread and the persister,
//! the listeners told about every applied write, and the drops applied but not yet in the
//! catalog. The rows themselves live in each [`Table`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};
use quiver_wal::Apply;

use crate::rollup_states::RollupStates;
use crate::table::{self, PreparedRows, Table};

/// State shared by writers, the WAL's commit thread (which applies durable writes) and the
/// persister.
pub(crate) struct Buffer {
    /// Held while a write is applied and while the buffer is frozen, so a freeze sees whole
    /// writes and knows the last sequence number it covers.
    pub(crate) gate: Mutex<Applied>,
    /// Bytes of Arrow data buffered (live and being persisted).
    pub(crate) bytes: AtomicUsize,
    /// Wakes the persister early (buffer over its threshold, or shutdown).
    pub(crate) signal: Mutex<PersisterSignal>,
    pub(crate) wake: Condvar,
    /// Wakes writers waiting for buffer space.
    pub(crate) space: tokio::sync::Notify,
    /// Persist once this many bytes are buffered (`usize::MAX` without persistence).
    pub(crate) persist_bytes: usize,
    /// Told about every applied write.
    pub(crate) listeners: RwLock<Vec<Arc<dyn TableChangeListener>>>,
    /// Drops applied to the buffer, with their WAL sequence numbers, that the catalog does
    /// not show yet: the next persist covering them takes them out of the catalog.
    pub(crate) pending_drops: Mutex<Vec<(u64, Dropped)>>,
    /// Tables a drop took out of their database whose drop is not applied yet (it may never
    /// be, if logging it fails): their rows are acknowledged writes, so persists still freeze
    /// them, by database name.
    pub(crate) dropping: Mutex<Vec<(String, Arc<Table>)>>,
    /// The rollups, told about every applied write and drop (before the listeners).
    pub(crate) rollups: Arc<RollupStates>,
}

/// What the WAL's commit thread makes visible once a record is durable.
#[derive(Debug)]
pub(crate) enum Change {
    /// A write's rows.
    Rows(PreparedRows),
    /// Tables a drop took out of their database.
    Drop(Dropped),
}

/// The drop of a table or of a whole database.
#[derive(Debug)]
pub(crate) struct Dropped {
    /// The database.
    pub(crate) database: String,
    /// The table; `None`: the whole database.
    pub(crate) table: Option<String>,
    /// The tables taken out (none if the table or database had none).
    pub(crate) tables: Vec<Arc<Table>>,
}

/// Something that wants to know when a table's rows change (a cache keyed by table versions).
pub trait TableChangeListener: Send + Sync {
    /// Called after a write was applied to `table` or the table was dropped (its
    /// [`Table::version`] already moved on) and before the write or drop is acknowledged, on the thread applying writes: must be quick and must
    /// not write to the store.
    fn table_changed(&self, table: &Table);

    /// Called after `table`'s rows moved without changing what a query sees (a persist
    /// turned buffered rows into files, a compaction replaced files, a failed persist put
    /// rows back in the buffer): its snapshot was replaced. Must be quick.
    fn rows_moved(&self, _table: &Table) {}
}

#[derive(Default)]
pub(crate) struct Applied {
    /// Last WAL sequence number applied (0 without a WAL).
    pub(crate) seq: u64,
    /// When the oldest write not yet frozen was applied.
    pub(crate) oldest: Option<Instant>,
}

/// Why the persister thread was woken.
#[derive(Default)]
pub(crate) struct PersisterSignal {
    pub(crate) wake: bool,
    pub(crate) shutdown: bool,
}

impl Buffer {
    pub(crate) fn new(persist_bytes: usize, rollups: Arc<RollupStates>) -> Self {
        Buffer {
            gate: Mutex::new(Applied::default()),
            bytes: AtomicUsize::new(0),
            signal: Mutex::new(PersisterSignal::default()),
            wake: Condvar::new(),
            space: tokio::sync::Notify::new(),
            persist_bytes,
            listeners: RwLock::new(Vec::new()),
            pending_drops: Mutex::new(Vec::new()),
            dropping: Mutex::new(Vec::new()),
            rollups,
        }
    }

    /// Applies a durable change (WAL sequence `seq`, 0 without a WAL).
    pub(crate) fn apply_change(&self, seq: u64, change: Change) {
        match change {
            Change::Rows(rows) => self.apply(seq, rows),
            Change::Drop(dropped) => self.apply_drop(seq, dropped),
        }
    }

    /// Discards the dropped tables' buffered rows (after every write logged before the drop,
    /// before every write logged after it), tells the change listeners, and leaves the drop
    /// for the persister to take out of the catalog.
    pub(crate) fn apply_drop(&self, seq: u64, dropped: Dropped) {
        let mut applied = self.gate.lock();
        let freed: usize = dropped.tables.iter().map(|t| t.discard()).sum();
        self.dropping
            .lock()
            .retain(|(_, t)| !dropped.tables.iter().any(|d| Arc::ptr_eq(d, t)));
        applied.seq = applied.seq.max(seq);
        // the catalog catches up with the next persist: the age threshold makes sure of one
        applied.oldest.get_or_insert_with(Instant::now);
        let tables = dropped.tables.clone();
        self.rollups.tables_dropped(seq, &dropped);
        self.pending_drops.lock().push((seq, dropped));
        drop(applied);
        self.notify_listeners(tables.iter());
        self.release(freed);
    }

    /// Gives back `bytes` of buffer space and wakes writers waiting for it.
    pub(crate) fn release(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.space.notify_waiters();
    }

    /// Tells the change listeners that `tables` changed (their versions moved on).
    pub(crate) fn notify_listeners<'a>(&self, tables: impl Iterator<Item = &'a Arc<Table>>) {
        let listeners = self.listeners.read();
        for table in tables {
            for listener in listeners.iter() {
                listener.table_changed(table);
            }
        }
    }

    /// Tells the change listeners that `tables`' rows moved (see
    /// [`TableChangeListener::rows_moved`]).
    pub(crate) fn notify_rows_moved<'a>(&self, tables: impl Iterator<Item = &'a Arc<Table>>) {
        let listeners = self.listeners.read();
        for table in tables {
            for listener in listeners.iter() {
                listener.rows_moved(table);
            }
        }
    }

    /// Applies durable rows (WAL sequence `seq`, 0 without a WAL), then tells the change
    /// listeners (before the write is acknowledged).
    pub(crate) fn apply(&self, seq: u64, rows: PreparedRows) {
        let mut applied = self.gate.lock();
        let added = table::apply_rows(&rows);
        applied.seq = applied.seq.max(seq);
        applied.oldest.get_or_insert_with(Instant::now);
        drop(applied);
        self.rollups.rows_applied(&rows);
        self.notify_listeners(rows.tables());
        let total = self.bytes.fetch_add(added, Ordering::AcqRel) + added;
        if total >= self.persist_bytes {
            self.wake_persister();
        }
    }

    /// Wakes the persister thread now.
    pub(crate) fn wake_persister(&self) {
        self.signal.lock().wake = true;
        self.wake.notify_one();
    }
}

/// The WAL's commit thread makes durable writes visible through this.
pub(crate) struct ApplyToTables(pub(crate) Arc<Buffer>);

impl Apply<Change> for ApplyToTables {
    fn apply(&mut self, seq: u64, change: Change) {
        self.0.apply_change(seq, change);
    }
}

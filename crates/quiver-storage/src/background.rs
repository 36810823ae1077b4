//! The persister's background threads, their start and their stop. `quiver-persist` wakes
//! every 100 ms or when signalled, and persists once the buffer is over its size or age
//! threshold; `quiver-maintain`, after each persist and every second, deletes files past
//! their retention period, runs the merges that are due and deletes replaced files no query
//! reads. Each holds the persister only while working, so dropping the store ends them too;
//! [`Persister::close`] stops both (letting a running persist or merge finish), then the WAL.
//! Both run at a lower priority than the request path (`background_niceness`, and so do the
//! threads they start to encode files on): when the cores are busy, acknowledging writes and
//! answering queries come first, and a buffer that fills up slows writes down (see
//! [`Persister::wait_for_buffer_space`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::buffer::Buffer;
use crate::compaction::{CompactionScope, Compactor};
use crate::error::StorageError;
use crate::persister::Persister;
use crate::retention;

impl Persister {
    /// Starts the background threads: the persister, and the maintainer (retention, file
    /// deletion, and merges unless compaction is turned off).
    pub(crate) fn start(self: &Arc<Self>) -> Result<(), StorageError> {
        let niceness = self.options.niceness;
        let persister = Arc::downgrade(self);
        let buffer = self.buffer.clone();
        let handle = std::thread::Builder::new()
            .name("quiver-persist".into())
            .spawn(move || {
                lower_this_threads_priority(niceness);
                run_persister(persister, buffer)
            })
            .map_err(|e| StorageError::io(&self.data_dir, e))?;
        *self.thread.lock() = Some(handle);
        let persister = Arc::downgrade(self);
        let compactor = self.compactor.clone();
        let handle = std::thread::Builder::new()
            .name("quiver-maintain".into())
            .spawn(move || {
                lower_this_threads_priority(niceness);
                run_maintainer(persister, compactor)
            })
            .map_err(|e| StorageError::io(&self.data_dir, e))?;
        *self.compactor_thread.lock() = Some(handle);
        Ok(())
    }

    /// One round of background upkeep: retention, then merges (if on), then deletions.
    fn maintain(&self) -> Result<(), StorageError> {
        let expired = self.expire(retention::now_ns())?;
        if expired > 0 {
            tracing::info!(files = expired, "deleted files past their retention period");
        }
        if self.compactor.options.enabled {
            self.compact(CompactionScope::default(), false)?;
        } else {
            self.compactor.delete_unread(&self.data, &self.chunk_cache);
        }
        Ok(())
    }

    /// Whether the buffer is over its size threshold or its oldest write over the age limit.
    fn should_persist(&self) -> bool {
        let options = &self.options;
        if self.buffer.bytes.load(Ordering::Acquire) >= options.persist_bytes {
            return true;
        }
        self.buffer
            .gate
            .lock()
            .oldest
            .is_some_and(|t| t.elapsed() >= options.max_age)
    }

    /// Stops the compactor (letting a running merge finish) and the persister thread (letting
    /// a running persist finish), then the WAL's commit thread after syncing what it holds,
    /// then releases the data directory's lock.
    pub(crate) fn close(&self) {
        self.compactor.shut_down();
        if let Some(thread) = self.compactor_thread.lock().take() {
            let _ = thread.join();
        }
        self.buffer.signal.lock().shutdown = true;
        self.buffer.wake.notify_one();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
        if let Some(wal) = self.wal() {
            wal.close();
        }
        self.running.lock().take();
    }
}

/// The persister thread: wakes every 100 ms or when signalled, persists when a threshold is
/// crossed, backs off for a second after a failure. Holds the persister only while working,
/// so dropping the store ends it too.
fn run_persister(persister: Weak<Persister>, buffer: Arc<Buffer>) {
    let mut wait = Duration::from_millis(100);
    loop {
        {
            let mut signal = buffer.signal.lock();
            if !signal.wake && !signal.shutdown {
                buffer.wake.wait_for(&mut signal, wait);
            }
            if signal.shutdown {
                return;
            }
            signal.wake = false;
        }
        wait = Duration::from_millis(100);
        let Some(persister) = persister.upgrade() else {
            return;
        };
        if !persister.should_persist() {
            continue;
        }
        let started = Instant::now();
        match persister.persist_now() {
            Ok(summary) => tracing::info!(
                tables = summary.tables,
                files = summary.files,
                rows = summary.rows,
                parquet_bytes = summary.bytes,
                buffer_bytes = summary.buffer_bytes,
                through_seq = summary.through_seq,
                wal_segments_removed = summary.wal_segments_removed,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "persisted the write buffer to Parquet"
            ),
            Err(e) => {
                tracing::error!(error = %e, "persisting the write buffer failed; retrying in 1 s");
                wait = Duration::from_secs(1);
            }
        }
    }
}

/// The maintainer thread: after each persist and every second, deletes files past their
/// retention period and runs the merges that are due (unless compaction is off), then
/// deletes replaced files no query reads; backs off for ten seconds after a failure. Holds
/// the persister only while working.
fn run_maintainer(persister: Weak<Persister>, compactor: Arc<Compactor>) {
    let mut wait = Duration::from_secs(1);
    while compactor.wait(wait) {
        let Some(persister) = persister.upgrade() else {
            return;
        };
        wait = match persister.maintain() {
            Ok(()) => Duration::from_secs(1),
            Err(StorageError::Closed) => return,
            Err(e) => {
                tracing::error!(error = %e, "storage maintenance failed; retrying in 10 s");
                Duration::from_secs(10)
            }
        };
    }
}

/// Sets the calling thread's niceness to `niceness` (Linux: the niceness is per thread, and
/// threads it starts inherit it). Under the scheduler's weights a thread at 10 gets about a
/// tenth of a core that a request thread at 0 also wants, and all of an idle one. Elsewhere,
/// or if the system refuses, the thread keeps its priority: only speed under load depends on
/// it.
fn lower_this_threads_priority(niceness: i32) {
    #[cfg(target_os = "linux")]
    if niceness > 0 {
        // SAFETY: setpriority only reads its integer arguments; `0` is the calling thread.
        let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, niceness) };
        if result != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "could not lower a background thread's priority"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = niceness;
}

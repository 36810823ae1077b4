//! The memory ceiling: a thread that reads the process's resident memory ten times a second
//! and, past `max_server_memory_bytes`, cancels the running query holding the most memory
//! (the oldest, when none holds any the pools see), one at a time: the next only once the
//! last has let go. Memory the pools do not see (function outputs, answers being encoded) is
//! caught here; what they do see is refused before it is allocated ([`super::pool`]).

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::{Governor, StopReason};

/// How often the resident memory is read.
const PERIOD: Duration = Duration::from_millis(100);

/// The longest the watchdog waits for a cancelled query to leave before choosing another.
const GRACE: Duration = Duration::from_secs(2);

/// Starts the watchdog of `governor`; it ends when the governor is dropped.
pub(super) fn start(governor: Weak<Governor>, limit: usize) {
    if quiver_model::machine::resident_bytes().is_none() {
        tracing::warn!(
            "the process's resident memory cannot be read here: max_server_memory_bytes only \
             bounds what queries reserve"
        );
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("quiver-memory-watch".into())
        .spawn(move || watch(governor, limit as u64));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the memory watchdog");
    }
}

fn watch(governor: Weak<Governor>, limit: u64) {
    // the last query cancelled and when; whether free memory was returned to the system since
    let mut last: Option<(u64, Instant)> = None;
    let mut trimmed = false;
    loop {
        std::thread::sleep(PERIOD);
        let Some(governor) = governor.upgrade() else {
            return;
        };
        let Some(resident) = quiver_model::machine::resident_bytes() else {
            continue;
        };
        if resident <= limit {
            last = None; // back under the ceiling
            continue;
        }
        let queries = governor
            .queries
            .lock()
            .values()
            .cloned()
            .collect::<Vec<_>>();
        if let Some((id, at)) = last {
            let still_there = queries.iter().any(|q| q.id == id);
            if still_there && at.elapsed() < GRACE {
                continue;
            }
            if !still_there && !trimmed {
                // what the victim freed may sit in the allocator: return it, then judge again
                release_free_memory();
                trimmed = true;
                continue;
            }
        }
        let running = queries.iter().filter(|q| {
            q.running.load(std::sync::atomic::Ordering::Relaxed) && !q.stop.is_cancelled()
        });
        // the most memory first; among equals, the oldest
        let Some(victim) = running.max_by_key(|q| (q.memory_bytes(), std::cmp::Reverse(q.arrived)))
        else {
            continue;
        };
        // still over with an earlier victim gone: only a query holding memory the pools see is
        // chosen now, never a newcomer for memory the process kept elsewhere
        if last.is_some() && victim.memory_bytes() == 0 {
            continue;
        }
        tracing::warn!(
            id = victim.id,
            resident,
            limit,
            memory_bytes = victim.memory_bytes(),
            sql = %victim.sql,
            "memory ceiling reached: cancelling the query holding the most memory"
        );
        victim.stop(StopReason::ServerMemory { resident, limit });
        last = Some((victim.id, Instant::now()));
        trimmed = false;
    }
}

/// Returns the allocator's free memory to the system: glibc keeps what is freed in its
/// arenas, which would keep the resident size over the ceiling after a query let go.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

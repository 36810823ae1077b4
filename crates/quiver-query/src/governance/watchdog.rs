//! The memory ceiling: a thread that reads the process's resident memory ten times a second
//! and, past `max_server_memory_bytes`, cancels the running query holding the most memory
//! (the oldest, when none holds any the pools see), one at a time: the next only once the
//! last has let go. Memory the pools do not see (function outputs, answers being encoded) is
//! caught here; what they do see is refused before it is allocated ([`super::pool`]).

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::{system, Governor, StopReason};

/// How often the resident memory is read.
const PERIOD: Duration = Duration::from_millis(100);

/// The longest the watchdog waits for a cancelled query to leave before choosing another.
const GRACE: Duration = Duration::from_secs(2);

/// Starts the watchdog of `governor`; it ends when the governor is dropped.
pub(super) fn start(governor: Weak<Governor>, limit: usize) {
    if system::resident_bytes().is_none() {
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
    let mut last: Option<(u64, Instant)> = None;
    loop {
        std::thread::sleep(PERIOD);
        let Some(governor) = governor.upgrade() else {
            return;
        };
        let Some(resident) = system::resident_bytes() else {
            continue;
        };
        if resident <= limit {
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
        }
        let running = queries
            .iter()
            .filter(|q| q.running.load(std::sync::atomic::Ordering::Relaxed));
        // the most memory first; among equals, the oldest
        let Some(victim) = running.max_by_key(|q| (q.memory_bytes(), std::cmp::Reverse(q.arrived)))
        else {
            continue;
        };
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
    }
}

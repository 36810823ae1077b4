//! What the machine gives the process: the memory budget the defaults are shares of (physical
//! memory, or the cgroup limit when that is smaller) and the process's resident memory, which
//! the ceiling watches. Linux reads `/proc` and `/sys/fs/cgroup`; elsewhere the budget falls
//! back to a fixed size and the resident memory is unknown (the ceiling then only bounds what
//! queries reserve).

/// The budget used when the machine's memory cannot be read.
const FALLBACK_BUDGET_BYTES: u64 = 8 << 30;

/// The memory this process may use: physical memory, or the cgroup's limit if smaller.
pub fn memory_budget_bytes() -> u64 {
    let physical = physical_memory_bytes().unwrap_or(FALLBACK_BUDGET_BYTES);
    match cgroup_limit_bytes() {
        Some(limit) => physical.min(limit),
        None => physical,
    }
}

/// The process's resident memory (`VmRSS`), if the platform says.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:")
}

fn physical_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    kib_field(&meminfo, "MemTotal:")
}

/// The value of a `Name:   1234 kB` line, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(name))?;
    let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The memory limit of the process's cgroup (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`); `None` when unlimited or unknown.
fn cgroup_limit_bytes() -> Option<u64> {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/memory.max");
    let v1 = || std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    let text = v2.or_else(|_| v1()).ok()?;
    // "max" (v2) or a huge number (v1) mean no limit
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|&limit| limit < (1 << 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields() {
        let text = "MemTotal:       24000000 kB\nVmRSS:\t  2048 kB\n";
        assert_eq!(kib_field(text, "MemTotal:"), Some(24_000_000 * 1024));
        assert_eq!(kib_field(text, "VmRSS:"), Some(2048 * 1024));
        assert_eq!(kib_field(text, "Missing:"), None);
    }

    #[test]
    fn the_budget_is_positive_and_the_process_is_resident() {
        assert!(memory_budget_bytes() > 0);
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().unwrap() > 0);
        }
    }
}

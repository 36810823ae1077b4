//! What the machine gives the process, read once for every layer: the memory it may use (the
//! budget the memory-sized defaults of caches, buffers and queries are shares of: physical
//! memory, or the cgroup's limit when that is smaller) and its resident memory, which the
//! query governor's ceiling watches. Linux reads `/proc` and `/sys/fs/cgroup` (v2, else v1);
//! elsewhere both are unknown.

/// The memory this process may use: physical memory, or the cgroup's limit (v2
/// `memory.max`, else v1 `memory.limit_in_bytes`) when that is smaller; `None` if neither can
/// be read.
pub fn available_memory_bytes() -> Option<u64> {
    match (physical_memory_bytes(), cgroup_limit_bytes()) {
        (Some(physical), Some(limit)) => Some(physical.min(limit)),
        (physical, limit) => physical.or(limit),
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
    parse_cgroup_limit(&text)
}

/// A cgroup memory limit file's value; `None` for "max" (v2) or a huge number (v1), which
/// mean no limit.
fn parse_cgroup_limit(text: &str) -> Option<u64> {
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
    fn cgroup_limits_of_both_versions_read_unlimited_as_none() {
        assert_eq!(parse_cgroup_limit("max\n"), None);
        assert_eq!(parse_cgroup_limit("9223372036854771712\n"), None);
        assert_eq!(parse_cgroup_limit("1073741824\n"), Some(1 << 30));
    }

    #[test]
    fn the_budget_is_positive_and_the_process_is_resident() {
        if cfg!(target_os = "linux") {
            assert!(available_memory_bytes().unwrap() > 0);
            assert!(resident_bytes().unwrap() > 0);
        }
    }
}

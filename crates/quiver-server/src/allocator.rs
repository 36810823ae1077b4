//! The process's memory allocator: jemalloc, chosen so that memory a finished query freed
//! goes back to the system.
//!
//! glibc's malloc keeps freed memory in its per-thread arenas: after a query that held
//! gigabytes (a large `array_agg`, a sort, a hash join) an idle server stayed hundreds of
//! megabytes above where it started, for good. jemalloc returns unused pages on a schedule
//! ("decay"); its background threads do so even when no thread allocates again, which is what
//! an idle server needs. The configuration below is read by jemalloc at its first allocation:
//!
//! - `background_thread:true`: purging runs on jemalloc's own threads, not only inside later
//!   allocations;
//! - `dirty_decay_ms:1000`: pages freed by the program are given back over about a second
//!   (jemalloc's default is ten), short enough that resident memory follows what queries hold,
//!   long enough that a busy server reuses its pages instead of faulting them in again;
//! - `muzzy_decay_ms:0`: given-back pages are released at once with `MADV_DONTNEED` rather
//!   than lazily with `MADV_FREE`, which the kernel keeps counting in the process's resident
//!   memory until it needs the pages; resident memory is what the memory watchdog and the
//!   operator's tools read.
//!
//! Building without the `jemalloc` feature keeps the system allocator (the baseline of the
//! allocator benchmark in BENCHMARKS.md).

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (see the module documentation), read at its first allocation. The
/// symbol carries the prefix `tikv-jemalloc-sys` gives jemalloc's API.
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 60] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// The allocator this binary was built with, as the start-up log names it.
pub const NAME: &str = if cfg!(feature = "jemalloc") {
    "jemalloc (background purging, dirty pages returned after 1 s)"
} else {
    "the system allocator"
};

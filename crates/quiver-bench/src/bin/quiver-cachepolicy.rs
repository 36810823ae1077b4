//! Chooses the result cache's admission policy with a measurement: replays one request trace
//! against moka with TinyLFU admission (what `quiver-service` uses) and with plain LRU, same
//! byte weights and capacities, and reports hit ratios.
//!
//! The trace mimics a dashboard server: most requests repeat a set of queries whose popularity
//! follows a Zipf law (s = 1), the rest are one-off ad-hoc queries that are never asked again
//! (the scans that flush an LRU). Answer sizes are log-uniform between 1 KiB and 4 MiB.
//!
//! ```sh
//! quiver-cachepolicy --requests 1000000
//! ```

use clap::Parser;
use moka::policy::EvictionPolicy;
use moka::sync::Cache;
use quiver_bench::Xorshift;

/// Admission-policy simulation.
#[derive(Debug, Parser)]
struct Args {
    /// Requests replayed per configuration.
    #[arg(long, default_value_t = 1_000_000)]
    requests: usize,
    /// Distinct repeated queries.
    #[arg(long, default_value_t = 20_000)]
    queries: usize,
    /// Share of requests that are one-off queries, in percent.
    #[arg(long, default_value_t = 30)]
    one_off_percent: u64,
}

/// A query's answer size: log-uniform in [1 KiB, 4 MiB], fixed per query id.
fn size_of(id: u64) -> u32 {
    let mut rng = Xorshift::new(id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let unit = (rng.next_u64() % 1_000_000) as f64 / 1_000_000.0;
    (1024.0 * 4096f64.powf(unit)) as u32
}

fn zipf_cdf(n: usize) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|rank| 1.0 / rank as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

/// The trace: query ids (one-off queries get ids above `args.queries`).
fn trace(args: &Args) -> Vec<u64> {
    let cdf = zipf_cdf(args.queries);
    let mut rng = Xorshift::new(42);
    let mut next_one_off = args.queries as u64;
    (0..args.requests)
        .map(|_| {
            if rng.next_u64() % 100 < args.one_off_percent {
                next_one_off += 1;
                next_one_off
            } else {
                let u = (rng.next_u64() % 1_000_000_000) as f64 / 1e9;
                cdf.partition_point(|p| *p < u) as u64
            }
        })
        .collect()
}

/// (hit ratio, byte hit ratio) of `policy` at `capacity` bytes.
fn replay(trace: &[u64], capacity: u64, policy: EvictionPolicy) -> (f64, f64) {
    let cache: Cache<u64, u32> = Cache::builder()
        .max_capacity(capacity)
        .weigher(|_, size: &u32| *size)
        .eviction_policy(policy)
        .build();
    let (mut hits, mut hit_bytes, mut bytes) = (0u64, 0u64, 0u64);
    for &id in trace {
        let size = size_of(id);
        bytes += u64::from(size);
        if cache.get(&id).is_some() {
            hits += 1;
            hit_bytes += u64::from(size);
        } else {
            cache.insert(id, size);
        }
    }
    (
        hits as f64 / trace.len() as f64,
        hit_bytes as f64 / bytes as f64,
    )
}

fn main() {
    let args = Args::parse();
    let trace = trace(&args);
    let distinct_bytes: u64 = (0..args.queries as u64)
        .map(|id| u64::from(size_of(id)))
        .sum();
    println!(
        "{} requests, {} repeated queries ({} MiB of answers), {}% one-off",
        args.requests,
        args.queries,
        distinct_bytes >> 20,
        args.one_off_percent
    );
    println!("| capacity | TinyLFU hit ratio | LRU hit ratio | TinyLFU byte hit ratio | LRU byte hit ratio |");
    println!("|---:|---:|---:|---:|---:|");
    for capacity_mib in [64u64, 256, 1024] {
        let capacity = capacity_mib << 20;
        let (tiny, tiny_bytes) = replay(&trace, capacity, EvictionPolicy::tiny_lfu());
        let (lru, lru_bytes) = replay(&trace, capacity, EvictionPolicy::lru());
        println!(
            "| {capacity_mib} MiB | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            tiny * 100.0,
            lru * 100.0,
            tiny_bytes * 100.0,
            lru_bytes * 100.0
        );
    }
}

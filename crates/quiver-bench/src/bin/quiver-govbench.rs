//! Query-governance benchmark against a running server.
//!
//! `responsive`: a writer sends 1,000-line batches back to back while a prober asks
//! `GET /health` and a cached query every 20 ms, first alone, then with `--heavy` clients
//! running CPU-bound queries without pause (every core busy). It reports write throughput and
//! p50/p99 latencies of each phase, and the throughput ratio busy / idle: how well the
//! server keeps ingest and health checks apart from queries.
//!
//! `latency`: the median latency of a few queries run cold (`Cache-Control: no-cache`) and
//! as result-cache hits; run it against two builds in the same session (with and without
//! governance) for the cost of governance.
//!
//! ```sh
//! quiver-govbench --url http://127.0.0.1:8086 responsive --seconds 10 --heavy 2
//! quiver-govbench --url http://127.0.0.1:8086 latency --runs 300
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

/// Query-governance benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    url: String,
    /// Database to write into and query.
    #[arg(long, default_value = "govbench")]
    db: String,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Ingest, health and cached-query latency with and without heavy queries running.
    Responsive {
        /// Seconds of each phase.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Clients running heavy queries in the busy phase.
        #[arg(long, default_value_t = 2)]
        heavy: usize,
    },
    /// Median latency of queries run cold and as cache hits.
    Latency {
        /// Timed requests per query (after 20 warm-ups).
        #[arg(long, default_value_t = 300)]
        runs: usize,
    },
}

/// One heavy query: all of a core for about a second per run.
const HEAVY: &str = "SELECT sum(v * v % 7) FROM generate_series(1, 100000000) t(v)";

/// The query the prober asks, answered from the result cache (`probe` is written once; the
/// writer writes `cpu`, which would invalidate answers about it).
const CACHED: &str = "SELECT host, avg(usage) AS usage FROM probe GROUP BY host ORDER BY host";

/// Queries whose latency `latency` reports.
const LATENCY_QUERIES: [&str; 3] = [
    "SELECT 1",
    "SELECT count(*) FROM probe WHERE host = 'h7'",
    CACHED,
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("an HTTP client");
    load(&client, &args).await;
    match args.mode {
        Mode::Responsive { seconds, heavy } => {
            let secs = Duration::from_secs(seconds);
            let idle = phase(&client, &args, secs, 0).await;
            let busy = phase(&client, &args, secs, heavy).await;
            println!("| phase | write rows/s | write p50 / p99 (ms) | /health p50 / p99 (ms) | cached query p50 / p99 (ms) | heavy queries done |");
            println!("|---|---:|---:|---:|---:|---:|");
            idle.print("no queries");
            busy.print(&format!("{heavy} heavy queries"));
            println!(
                "\nwrite throughput busy / idle: {:.2}",
                busy.rows_per_sec / idle.rows_per_sec
            );
        }
        Mode::Latency { runs } => {
            println!("| query | cold p50 (ms) | cached p50 (ms) |");
            println!("|---|---:|---:|");
            for sql in LATENCY_QUERIES {
                let cold = median_ms(&client, &args, sql, runs, true).await;
                let cached = median_ms(&client, &args, sql, runs, false).await;
                println!("| `{sql}` | {cold:.3} | {cached:.3} |");
            }
        }
    }
}

/// `probe`: 100 hosts × 1,000 points, written once.
async fn load(client: &reqwest::Client, args: &Args) {
    let body: String = (0..100_000)
        .map(|i| {
            format!(
                "probe,host=h{} usage={} {}\n",
                i % 100,
                i % 97,
                i as i64 * 1_000_000_000
            )
        })
        .collect();
    write(client, args, body).await;
}

async fn write(client: &reqwest::Client, args: &Args, body: String) {
    let response = client
        .post(format!("{}/api/v3/write_lp", args.url))
        .query(&[("db", args.db.as_str())])
        .body(body)
        .send()
        .await
        .expect("write sent");
    assert!(
        response.status().is_success(),
        "write failed: {}",
        response.status()
    );
}

async fn get(client: &reqwest::Client, url: &str, query: &[(&str, &str)], no_cache: bool) {
    let mut request = client.get(url).query(query);
    if no_cache {
        request = request.header("cache-control", "no-cache");
    }
    let response = request.send().await.expect("request sent");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.bytes().await.expect("answer read");
}

/// What one phase measured.
struct Phase {
    rows_per_sec: f64,
    writes: Vec<Duration>,
    health: Vec<Duration>,
    cached: Vec<Duration>,
    heavy_done: usize,
}

impl Phase {
    fn print(&self, name: &str) {
        println!(
            "| {name} | {:.0} | {} | {} | {} | {} |",
            self.rows_per_sec,
            p50_p99(&self.writes),
            p50_p99(&self.health),
            p50_p99(&self.cached),
            self.heavy_done
        );
    }
}

fn p50_p99(samples: &[Duration]) -> String {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    format!("{:.2} / {:.2}", at(0.5), at(0.99))
}

async fn phase(client: &reqwest::Client, args: &Args, length: Duration, heavy: usize) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let url = args.url.clone();
    let db = args.db.clone();
    let heavy_tasks: Vec<_> = (0..heavy)
        .map(|_| {
            let (client, stop, url, db) = (client.clone(), stop.clone(), url.clone(), db.clone());
            tokio::spawn(async move {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    let q = [("db", db.as_str()), ("q", HEAVY)];
                    get(&client, &format!("{url}/api/v3/query_sql"), &q, true).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    if heavy > 0 {
        tokio::time::sleep(Duration::from_millis(500)).await; // the cores are busy
    }
    let prober = {
        let (client, stop, url, db) = (client.clone(), stop.clone(), url.clone(), db.clone());
        tokio::spawn(async move {
            let (mut health, mut cached) = (Vec::new(), Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                get(&client, &format!("{url}/health"), &[], false).await;
                health.push(started.elapsed());
                let started = Instant::now();
                let q = [("db", db.as_str()), ("q", CACHED)];
                get(&client, &format!("{url}/api/v3/query_sql"), &q, false).await;
                cached.push(started.elapsed());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (health, cached)
        })
    };
    let started = Instant::now();
    let mut writes = Vec::new();
    let mut rows = 0usize;
    let mut batch = 0i64;
    while started.elapsed() < length {
        let body: String = (0..1000)
            .map(|i| {
                let t = 200_000 + batch * 1000 + i;
                format!(
                    "cpu,host=h{} usage={} {}\n",
                    i % 100,
                    i % 89,
                    t * 1_000_000_000
                )
            })
            .collect();
        let sent = Instant::now();
        write(client, args, body).await;
        writes.push(sent.elapsed());
        rows += 1000;
        batch += 1;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (health, cached) = prober.await.expect("prober");
    let mut heavy_done = 0;
    for task in heavy_tasks {
        heavy_done += task.await.expect("heavy client");
    }
    Phase {
        rows_per_sec: rows as f64 / elapsed.as_secs_f64(),
        writes,
        health,
        cached,
        heavy_done,
    }
}

async fn median_ms(
    client: &reqwest::Client,
    args: &Args,
    sql: &str,
    runs: usize,
    no_cache: bool,
) -> f64 {
    let url = format!("{}/api/v3/query_sql", args.url);
    let q = [("db", args.db.as_str()), ("q", sql)];
    for _ in 0..20 {
        get(client, &url, &q, no_cache).await;
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        get(client, &url, &q, no_cache).await;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

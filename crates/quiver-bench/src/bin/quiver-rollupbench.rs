//! Rollup benchmark: routed against raw answers, and what keeping rollups costs ingest.
//!
//! 1. **Routing.** Loads TSBS `cpu-only` rows (100 hosts, ten seconds apart) into a running
//!    Quiver, declares a 10-minute rollup by host, waits until it has caught up, then times
//!    dashboard queries (coarser buckets, fewer tags, tag filters and time ranges) answered
//!    from the rollup and from raw rows (`use_rollups=false`), alternating, the result cache
//!    bypassed. Both answers must have the same number of rows. Measured on the rows still in
//!    the write buffer, then after `POST /api/v3/persist` (Parquet, decoded by the chunk
//!    cache unless the server runs with `chunk_cache_bytes = 0`).
//! 2. **Ingest** (`--ingest-rows`): the same rows written to fresh databases with 0, 1 and 5
//!    rollups on their table, alternating, several rounds: the load's wall time, and the time
//!    until every rollup has caught up after it.
//!
//! With `--compare-url`, the routing benchmark loads the same rows and declares the same rollup
//! on a second server (another build) and asks both every question, request by request in
//! turn: each query's routed and raw answers on both, and second / first
//! (`scripts/ab-rollup.sh`).
//!
//! ```sh
//! quiver-rollupbench --quiver-url http://127.0.0.1:18286 --rows 1000000 --ingest-rows 500000
//! ```
//! `scripts/rollup-bench.sh` starts the server and runs this.

use std::time::{Duration, Instant};

use clap::Parser;
use quiver_bench::http::{post, quiver_rows, rfc3339, timed_alternating, TimedQuery};
use quiver_bench::metrics_payload;

/// Rollups: routed vs raw answers, and the ingest cost of maintaining them.
#[derive(Debug, Parser)]
struct Args {
    /// Quiver's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    quiver_url: String,
    /// A second Quiver (another build) to load alike and compare with, request by request
    /// (routing benchmark only).
    #[arg(long)]
    compare_url: Option<String>,
    /// Rows for the routing benchmark (100 hosts, ten seconds apart); 0 skips it.
    #[arg(long, default_value_t = 1_000_000)]
    rows: usize,
    /// Rows per database for the ingest benchmark; 0 skips it.
    #[arg(long, default_value_t = 0)]
    ingest_rows: usize,
    /// Rounds of the ingest benchmark (0, 1 and 5 rollups each round).
    #[arg(long, default_value_t = 3)]
    ingest_rounds: usize,
    /// Timed runs per query (the median is reported), after one warm-up run.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Skip loading and persisting: the data and the rollup are there (a restarted server).
    #[arg(long)]
    no_load: bool,
}

/// Hosts in the data set.
const HOSTS: usize = 100;
/// 2026-01-01T00:00:00Z in nanoseconds.
const START_NS: i64 = 1_767_225_600_000_000_000;
/// Seconds between two rows of one host.
const STEP_S: i64 = 10;
/// Lines per write request.
const BATCH_LINES: usize = 10_000;
/// The rollup the routing benchmark declares.
const ROLLUP: &str = "SELECT date_bin(INTERVAL '10 minutes', time) AS time, hostname, \
    max(usage_user) AS max_user, avg(usage_user) AS avg_user, count(*) AS n, \
    sum(usage_system) AS sum_system, min(usage_idle) AS min_idle FROM cpu GROUP BY 1, 2";
/// Four more rollups for the ingest benchmark's five.
const MORE_ROLLUPS: [&str; 4] = [
    "SELECT date_bin(INTERVAL '1 minute', time) AS time, hostname, max(usage_user) AS m FROM cpu GROUP BY 1, 2",
    "SELECT date_bin(INTERVAL '1 hour', time) AS time, region, avg(usage_system) AS a, count(*) AS n FROM cpu GROUP BY 1, 2",
    "SELECT date_bin(INTERVAL '10 minutes', time) AS time, datacenter, sum(usage_idle) AS s FROM cpu GROUP BY 1, 2",
    "SELECT date_bin(INTERVAL '1 day', time) AS time, hostname, region, min(usage_nice) AS m, max(usage_nice) AS x FROM cpu GROUP BY 1, 2, 3",
];

fn main() {
    let args = Args::parse();
    quiver_bench::http::block_on(run(args));
}

async fn run(args: Args) {
    let client = quiver_bench::http::client();
    if args.rows > 0 {
        routing(&client, &args).await;
    }
    if args.ingest_rows > 0 {
        ingest(&client, &args).await;
    }
}

async fn routing(client: &reqwest::Client, args: &Args) {
    let db = "rollups";
    let servers: Vec<&str> = std::iter::once(args.quiver_url.as_str())
        .chain(args.compare_url.as_deref())
        .collect();
    for url in &servers {
        if args.no_load {
            let caught_up = caught_up(client, url, db).await;
            eprintln!("{url}: the rollup caught up {caught_up:.1} s after the restart");
            continue;
        }
        let load_s = load(client, url, db, args.rows).await;
        eprintln!("{url}: loaded {} rows in {load_s:.1} s", args.rows);
        create_rollup(client, url, db, "cpu_10m", ROLLUP).await;
        let caught_up = caught_up(client, url, db).await;
        eprintln!("{url}: the rollup caught up {caught_up:.1} s after it was declared");
    }
    let rollup = rollups(client, &args.quiver_url, db).await;
    println!(
        "rollup cpu_10m: {} rows ({} bytes) for {} raw rows: {:.0}x fewer",
        rollup[0]["rows"],
        rollup[0]["bytes"],
        args.rows,
        args.rows as f64 / rollup[0]["rows"].as_f64().unwrap_or(1.0)
    );
    if args.no_load {
        println!("\n## as the server holds the rows");
        compare(client, args, &servers, db).await;
        return;
    }
    println!("\n## fresh: rows still in the write buffer");
    compare(client, args, &servers, db).await;
    for url in &servers {
        post(client, &format!("{url}/api/v3/persist"), "").await;
    }
    println!("\n## persisted: rows in Parquet");
    compare(client, args, &servers, db).await;
}

/// The dashboard queries: coarser buckets, fewer tags, tag filters, time ranges.
fn queries(args: &Args) -> Vec<(&'static str, String)> {
    let end_s = START_NS / 1_000_000_000 + (args.rows / HOSTS) as i64 * STEP_S;
    let (from, to) = (rfc3339(end_s - 13 * 3600), rfc3339(end_s - 3600));
    let hosts8: Vec<String> = (0..8)
        .map(|i| format!("'host_{}'", i * HOSTS / 8))
        .collect();
    vec![
        (
            "hourly max per host",
            "SELECT date_bin(INTERVAL '1 hour', time) AS hour, hostname, max(usage_user) \
             FROM cpu GROUP BY hour, hostname"
                .to_string(),
        ),
        (
            "avg per 10 min, all hosts",
            "SELECT date_bin(INTERVAL '10 minutes', time) AS t, avg(usage_user) FROM cpu GROUP BY t"
                .to_string(),
        ),
        (
            "8 hosts, 12 h, hourly",
            format!(
                "SELECT date_bin(INTERVAL '1 hour', time) AS hour, hostname, max(usage_user), \
                 count(*) FROM cpu WHERE hostname IN ({}) AND time >= '{from}' AND time < '{to}' \
                 GROUP BY hour, hostname",
                hosts8.join(", ")
            ),
        ),
        (
            "daily totals",
            "SELECT date_bin(INTERVAL '1 day', time) AS day, count(*), sum(usage_system), \
             min(usage_idle) FROM cpu GROUP BY day"
                .to_string(),
        ),
        (
            "per host, unaligned range",
            format!(
                "SELECT hostname, avg(usage_user) FROM cpu WHERE time > '{from}' GROUP BY hostname"
            ),
        ),
    ]
}

/// Times each query routed and raw on every server, the requests in turn; prints a table and
/// the geometric means (raw / routed on the first server; with a second, second / first).
async fn compare(client: &reqwest::Client, args: &Args, servers: &[&str], db: &str) {
    println!("median of {} runs, ms", args.runs);
    let compared = servers.len() > 1;
    if compared {
        println!(
            "| query | rows | raw | routed | raw / routed | B raw | B routed | B / A raw | B / A routed |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
    } else {
        println!("| query | rows | raw | routed | raw / routed |\n|---|---:|---:|---:|---:|");
    }
    let queries = queries(args);
    let mut log_sums = [0.0; 3];
    for (name, sql) in &queries {
        let mut asked: Vec<TimedQuery<'_>> = Vec::new();
        for &url in servers {
            asked.push(Box::new(move || {
                Box::pin(quiver_rows(
                    client,
                    url,
                    db,
                    sql,
                    &[("use_rollups", "false")],
                ))
            }));
            asked.push(Box::new(move || {
                Box::pin(quiver_rows(client, url, db, sql, &[]))
            }));
        }
        let timings = timed_alternating(args.runs, &asked).await;
        let rows = timings[1].1;
        for (i, (_, answered)) in timings.iter().enumerate() {
            assert_eq!(*answered, rows, "{name}: different answers ({i})");
        }
        let (raw_ms, routed_ms) = (timings[0].0, timings[1].0);
        log_sums[0] += (raw_ms / routed_ms).ln();
        print!(
            "| {name} | {rows} | {raw_ms:.2} | {routed_ms:.2} | {:.1}x |",
            raw_ms / routed_ms
        );
        if compared {
            let (b_raw_ms, b_routed_ms) = (timings[2].0, timings[3].0);
            log_sums[1] += (b_raw_ms / raw_ms).ln();
            log_sums[2] += (b_routed_ms / routed_ms).ln();
            print!(
                " {b_raw_ms:.2} | {b_routed_ms:.2} | {:.3} | {:.3} |",
                b_raw_ms / raw_ms,
                b_routed_ms / routed_ms
            );
        }
        println!();
    }
    let mean = |sum: f64| (sum / queries.len() as f64).exp();
    println!("geometric mean of raw / routed: {:.1}x", mean(log_sums[0]));
    if compared {
        println!(
            "geometric mean of B / A: raw {:.3}, routed {:.3}",
            mean(log_sums[1]),
            mean(log_sums[2])
        );
    }
}

/// Writes `rows` TSBS rows into `db`, in requests of [`BATCH_LINES`]; the wall time.
async fn load(client: &reqwest::Client, quiver_url: &str, db: &str, rows: usize) -> f64 {
    let rounds_per_batch = (BATCH_LINES / HOSTS) as i64;
    let started = Instant::now();
    for k in 0..rows.div_ceil(BATCH_LINES) {
        let lines = BATCH_LINES.min(rows - k * BATCH_LINES);
        let start = START_NS + k as i64 * rounds_per_batch * STEP_S * 1_000_000_000;
        let body = metrics_payload(HOSTS, lines, start, k as u64 + 1);
        let url = format!("{quiver_url}/api/v3/write_lp?db={db}&precision=ns");
        post(client, &url, &body).await;
    }
    started.elapsed().as_secs_f64()
}

async fn create_rollup(
    client: &reqwest::Client,
    quiver_url: &str,
    db: &str,
    name: &str,
    sql: &str,
) {
    let body = serde_json::json!({ "db": db, "name": name, "sql": sql }).to_string();
    post(
        client,
        &format!("{quiver_url}/api/v3/configure/rollup"),
        &body,
    )
    .await;
}

async fn rollups(client: &reqwest::Client, quiver_url: &str, db: &str) -> Vec<serde_json::Value> {
    let body = client
        .get(format!("{quiver_url}/api/v3/configure/rollup"))
        .query(&[("db", db)])
        .send()
        .await
        .expect("Quiver answers")
        .bytes()
        .await
        .expect("Quiver's body");
    serde_json::from_slice(&body).expect("a JSON list")
}

/// Seconds until every rollup of `db` is ready with nothing closed waiting.
async fn caught_up(client: &reqwest::Client, quiver_url: &str, db: &str) -> f64 {
    let started = Instant::now();
    loop {
        let list = rollups(client, quiver_url, db).await;
        let done = list
            .iter()
            .all(|r| r["state"] == "ready" && r["lag_seconds"].as_f64() == Some(0.0));
        if done {
            return started.elapsed().as_secs_f64();
        }
        assert!(started.elapsed() < Duration::from_secs(1800), "{list:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Loads the same rows into fresh databases with 0, 1 and 5 rollups, alternating.
async fn ingest(client: &reqwest::Client, args: &Args) {
    println!(
        "\n## ingest of {} rows with rollups kept (wall time, s)",
        args.ingest_rows
    );
    println!("| round | rollups | load | caught up after | rows/s | vs none |\n|---|---:|---:|---:|---:|---:|");
    for round in 1..=args.ingest_rounds {
        let mut baseline = None;
        for count in [0, 1, 5] {
            let db = format!("ingest_{round}_{count}");
            // the table exists before its rollups: one row far before the data
            let first = metrics_payload(HOSTS, 1, START_NS - 86_400_000_000_000, 0);
            let url = format!("{}/api/v3/write_lp?db={db}&precision=ns", args.quiver_url);
            post(client, &url, &first).await;
            for (i, sql) in std::iter::once(ROLLUP)
                .chain(MORE_ROLLUPS)
                .take(count)
                .enumerate()
            {
                create_rollup(client, &args.quiver_url, &db, &format!("r{i}"), sql).await;
            }
            caught_up(client, &args.quiver_url, &db).await;
            let load_s = load(client, &args.quiver_url, &db, args.ingest_rows).await;
            let after_s = caught_up(client, &args.quiver_url, &db).await;
            let rate = args.ingest_rows as f64 / load_s;
            let base = *baseline.get_or_insert(load_s);
            println!(
                "| {round} | {count} | {load_s:.2} | {after_s:.2} | {rate:.0} | {:+.1} % |",
                (load_s / base - 1.0) * 100.0
            );
        }
    }
}

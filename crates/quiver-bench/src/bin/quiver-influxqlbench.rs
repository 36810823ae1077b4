//! InfluxQL benchmark: dashboard statements in InfluxQL against the same questions in SQL on
//! one Quiver (what InfluxQL's parsing and planning add), and against InfluxDB 1.x answering
//! the same InfluxQL over the same points (both servers in the same run).
//!
//! Loads TSBS `cpu-only` rows (100 hosts, ten seconds apart) into both servers through the 1.x
//! write API, then times each statement alternately on Quiver (`/query`), on Quiver in SQL
//! (`/api/v3/query_sql`) and on InfluxDB (`/query`): the median of `--runs` runs after a
//! warm-up. Run Quiver with its result cache off, or every repeat is a hit. Each pair of
//! answers must have the same number of rows.
//!
//! ```sh
//! quiver-influxqlbench --quiver-url http://127.0.0.1:18386 --influxdb-url http://127.0.0.1:18387
//! ```
//! `scripts/influxql-bench.sh` starts both servers and runs this.

use std::time::Instant;

use clap::Parser;
use quiver_bench::http::{post, quiver_rows, rfc3339, timed};
use quiver_bench::metrics_payload;

/// InfluxQL vs SQL on Quiver, and Quiver vs InfluxDB 1.x on InfluxQL.
#[derive(Debug, Parser)]
struct Args {
    /// Quiver's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    quiver_url: String,
    /// InfluxDB 1.x's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:18087")]
    influxdb_url: String,
    /// Rows to load (100 hosts, ten seconds apart).
    #[arg(long, default_value_t = 500_000)]
    rows: usize,
    /// Timed runs per statement (the median is reported), after one warm-up run.
    #[arg(long, default_value_t = 9)]
    runs: usize,
}

const DB: &str = "influxql_bench";
const HOSTS: usize = 100;
/// 2026-01-01T00:00:00Z.
const START_S: i64 = 1_767_225_600;
const BATCH_LINES: usize = 10_000;

fn main() {
    let args = Args::parse();
    quiver_bench::http::block_on(run(args));
}

async fn run(args: Args) {
    let client = quiver_bench::http::client();
    let started = Instant::now();
    load(&client, &args).await;
    println!(
        "loaded {} rows into both in {:.1} s",
        args.rows,
        started.elapsed().as_secs_f64()
    );
    let span_s = (args.rows / HOSTS) as i64 * 10;
    let hour = |from: i64| (rfc3339(START_S + from), rfc3339(START_S + from + 3600));
    let (h1, h2) = hour(span_s / 2);
    let (d1, d2) = (rfc3339(START_S), rfc3339(START_S + span_s));
    let statements: Vec<(&str, String, String)> = vec![
        (
            "5-min mean per host, 1 h",
            format!("SELECT mean(usage_user) FROM cpu WHERE time >= '{h1}' AND time < '{h2}' GROUP BY time(5m), hostname fill(none)"),
            format!("SELECT date_bin(INTERVAL '5 minutes', time) AS time, hostname, avg(usage_user) AS mean FROM cpu WHERE time >= '{h1}' AND time < '{h2}' GROUP BY 1, 2 ORDER BY 2, 1"),
        ),
        (
            "1-min max of one host, all",
            format!("SELECT max(usage_user) FROM cpu WHERE hostname = 'host_7' AND time >= '{d1}' AND time < '{d2}' GROUP BY time(1m) fill(none)"),
            format!("SELECT date_bin(INTERVAL '1 minute', time) AS time, max(usage_user) AS max FROM cpu WHERE hostname = 'host_7' AND time >= '{d1}' AND time < '{d2}' GROUP BY 1 ORDER BY 1"),
        ),
        (
            "hourly mean, 3 fields, all hosts",
            format!("SELECT mean(usage_user), mean(usage_system), max(usage_idle) FROM cpu WHERE time >= '{d1}' AND time < '{d2}' GROUP BY time(1h) fill(none)"),
            format!("SELECT date_bin(INTERVAL '1 hour', time) AS time, avg(usage_user), avg(usage_system), max(usage_idle) FROM cpu WHERE time >= '{d1}' AND time < '{d2}' GROUP BY 1 ORDER BY 1"),
        ),
        (
            "raw points of one host, 1 h",
            format!("SELECT usage_user, usage_system FROM cpu WHERE hostname = 'host_3' AND time >= '{h1}' AND time < '{h2}'"),
            format!("SELECT time, usage_user, usage_system FROM cpu WHERE hostname = 'host_3' AND time >= '{h1}' AND time < '{h2}' ORDER BY time"),
        ),
        (
            "count, all",
            "SELECT count(usage_user) FROM cpu".to_string(),
            "SELECT count(usage_user) FROM cpu".to_string(),
        ),
        (
            "mean per region",
            "SELECT mean(usage_user) FROM cpu GROUP BY region".to_string(),
            "SELECT region, avg(usage_user) FROM cpu GROUP BY region ORDER BY region".to_string(),
        ),
        (
            "SHOW TAG VALUES hostname",
            "SHOW TAG VALUES FROM cpu WITH KEY = \"hostname\"".to_string(),
            "SELECT DISTINCT hostname FROM cpu ORDER BY hostname".to_string(),
        ),
    ];
    println!("| statement | Quiver InfluxQL ms | Quiver SQL ms | InfluxQL / SQL | InfluxDB 1.x ms | Quiver / InfluxDB | rows |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let (mut overhead, mut versus) = (Vec::new(), Vec::new());
    for (name, influxql, sql) in &statements {
        let (quiver_ms, quiver_n) = timed(args.runs, || {
            influxql_rows(&client, &args.quiver_url, influxql)
        })
        .await;
        let (sql_ms, sql_n) = timed(args.runs, || {
            quiver_rows(&client, &args.quiver_url, DB, sql, &[])
        })
        .await;
        let (influx_ms, influx_n) = timed(args.runs, || {
            influxql_rows(&client, &args.influxdb_url, influxql)
        })
        .await;
        assert_eq!(quiver_n, sql_n, "{name}: InfluxQL and SQL rows differ");
        assert_eq!(
            quiver_n, influx_n,
            "{name}: Quiver and InfluxDB rows differ"
        );
        overhead.push(quiver_ms / sql_ms);
        versus.push(quiver_ms / influx_ms);
        println!(
            "| {name} | {quiver_ms:.2} | {sql_ms:.2} | {:.2} | {influx_ms:.2} | {:.3} | {quiver_n} |",
            quiver_ms / sql_ms,
            quiver_ms / influx_ms
        );
    }
    println!(
        "geometric means: InfluxQL / SQL on Quiver {:.3}, Quiver / InfluxDB 1.x {:.3}",
        geomean(&overhead),
        geomean(&versus)
    );
}

fn geomean(values: &[f64]) -> f64 {
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}

/// Writes the rows to both servers through InfluxDB 1.x's write API.
async fn load(client: &reqwest::Client, args: &Args) {
    post(
        client,
        &format!("{}/query?q=CREATE+DATABASE+{DB}", args.influxdb_url),
        "",
    )
    .await;
    let rounds_per_batch = (BATCH_LINES / HOSTS) as i64;
    for k in 0..args.rows.div_ceil(BATCH_LINES) {
        let lines = BATCH_LINES.min(args.rows - k * BATCH_LINES);
        let start = (START_S + k as i64 * rounds_per_batch * 10) * 1_000_000_000;
        let body = metrics_payload(HOSTS, lines, start, k as u64 + 1);
        for base in [&args.quiver_url, &args.influxdb_url] {
            post(client, &format!("{base}/write?db={DB}&precision=ns"), &body).await;
        }
    }
}

/// Runs an InfluxQL statement on a server's `/query` and returns its rows (over all series).
async fn influxql_rows(client: &reqwest::Client, base: &str, q: &str) -> usize {
    let response = client
        .get(format!("{base}/query"))
        .query(&[("db", DB), ("q", q), ("epoch", "ns")])
        .send()
        .await
        .expect("the server answers");
    let status = response.status();
    let bytes = response.bytes().await.expect("the body");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert!(status.is_success(), "{q}: {status} {body}");
    let result = &body["results"][0];
    assert!(result.get("error").is_none(), "{q}: {result}");
    result["series"].as_array().map_or(0, |series| {
        series
            .iter()
            .map(|s| s["values"].as_array().map_or(0, Vec::len))
            .sum()
    })
}

//! TSBS-shaped query benchmark: Quiver against QuestDB in the same run.
//!
//! Loads the same TSBS `cpu-only` rows (100 hosts, ten tags, ten float fields, ten seconds
//! apart) into a running Quiver (line protocol over HTTP) and a running QuestDB (its InfluxDB
//! line-protocol endpoint over HTTP), then times the public TSBS query shapes over each
//! server's HTTP JSON endpoint, shape by shape, the two servers alternating so that both see
//! the same noise. Quiver runs with its result cache bypassed (`Cache-Control: no-cache`):
//! what is measured is the engine. Each shape's figure is the median of `--runs` runs after a
//! warm-up; the geometric mean of the per-shape ratios (Quiver / QuestDB) sums a round up, and
//! several rounds show the spread.
//!
//! Quiver is measured twice: on fresh data (still in the write buffer, right after the load)
//! and on persisted data (after `POST /api/v3/persist`). QuestDB's data is the same in both.
//! Every shape's answers must have the same number of rows on both servers, or the run fails.
//!
//! ```sh
//! quiver-tsbs --quiver-url http://127.0.0.1:18086 --questdb-url http://127.0.0.1:19000 --rows 1000000
//! ```
//! `scripts/tsbs-bench.sh` starts both servers and runs this.

use std::time::{Duration, Instant};

use clap::Parser;
use quiver_bench::http::{post, quiver_rows, rfc3339, timed};
use quiver_bench::{metrics_payload, FIELD_NAMES};

/// TSBS-shaped query benchmark, Quiver vs QuestDB.
#[derive(Debug, Parser)]
struct Args {
    /// Quiver's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    quiver_url: String,
    /// QuestDB's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    questdb_url: String,
    /// Quiver database to load into.
    #[arg(long, default_value = "tsbs")]
    db: String,
    /// Rows to load (100 hosts, ten seconds apart).
    #[arg(long, default_value_t = 1_000_000)]
    rows: usize,
    /// Hosts (series).
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// Timed runs per shape (the median is reported), after one warm-up run.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Rounds over all shapes (each round gives a geometric mean; the spread shows the noise).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Which servers to load first (`none`: the data is already in both).
    #[arg(long, value_enum, default_value_t = Load::Both)]
    load: Load,
    /// Only these shapes (by name), all if empty.
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Print each shape's statement in Quiver's SQL, one per line, and stop (after loading,
    /// if asked): statements for `scripts/query-latency.py`, no QuestDB needed.
    #[arg(long)]
    print_statements: bool,
}

/// Which servers `--load` writes the rows to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Load {
    Both,
    Quiver,
    None,
}

/// The first timestamp of the data set: 2026-01-01T00:00:00Z, in nanoseconds.
const START_NS: i64 = 1_767_225_600_000_000_000;
/// Seconds between two rows of one host.
const STEP_S: i64 = 10;
/// Lines per write request.
const BATCH_LINES: usize = 10_000;

/// One query shape, in each server's SQL.
struct Shape {
    name: &'static str,
    quiver: String,
    questdb: String,
}

fn main() {
    let args = Args::parse();
    quiver_bench::http::block_on(run(args));
}

async fn run(args: Args) {
    let client = quiver_bench::http::client();
    if args.load != Load::None {
        load(&client, &args).await;
    }
    let shapes: Vec<Shape> = shapes(&args)
        .into_iter()
        .filter(|s| args.shapes.is_empty() || args.shapes.iter().any(|n| n == s.name))
        .collect();
    if args.print_statements {
        for shape in &shapes {
            println!("{}", shape.quiver);
        }
        return;
    }
    println!("## fresh: Quiver's rows still in its write buffer");
    compare(&client, &args, &shapes).await;
    let started = Instant::now();
    post(&client, &format!("{}/api/v3/persist", args.quiver_url), "").await;
    println!(
        "\n## persisted: Quiver's rows in Parquet (persist took {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    compare(&client, &args, &shapes).await;
}

/// Writes the rows to both servers, then waits until QuestDB has applied them all.
async fn load(client: &reqwest::Client, args: &Args) {
    let rounds_per_batch = (BATCH_LINES / args.hosts) as i64;
    let batches = args.rows.div_ceil(BATCH_LINES);
    let started = Instant::now();
    let (mut quiver_s, mut questdb_s) = (0.0, 0.0);
    for k in 0..batches {
        let lines = BATCH_LINES.min(args.rows - k * BATCH_LINES);
        let start = START_NS + k as i64 * rounds_per_batch * STEP_S * 1_000_000_000;
        let body = metrics_payload(args.hosts, lines, start, k as u64 + 1);
        let t = Instant::now();
        let quiver = format!(
            "{}/api/v3/write_lp?db={}&precision=ns",
            args.quiver_url, args.db
        );
        post(client, &quiver, &body).await;
        quiver_s += t.elapsed().as_secs_f64();
        if args.load == Load::Both {
            let t = Instant::now();
            post(
                client,
                &format!("{}/write?precision=n", args.questdb_url),
                &body,
            )
            .await;
            questdb_s += t.elapsed().as_secs_f64();
        }
    }
    let expected = args.rows as u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    // QuestDB applies its writes later: wait for them, where it was written to
    if args.load == Load::Both {
        loop {
            let (_, rows) = questdb_query(client, args, "SELECT count(*) FROM cpu").await;
            let count = rows
                .first()
                .and_then(|row| row.first())
                .and_then(|v| v.as_u64());
            if count == Some(expected) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "QuestDB holds {count:?} rows, not {expected}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!(
        "loaded {} rows in {:.1} s (request time: Quiver {quiver_s:.1} s, QuestDB {questdb_s:.1} s; \
         QuestDB applied them all after {:.1} s)",
        args.rows,
        started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// The TSBS shapes over the loaded time range.
fn shapes(args: &Args) -> Vec<Shape> {
    let rounds = (args.rows / args.hosts) as i64;
    let end_s = START_NS / 1_000_000_000 + rounds * STEP_S;
    let at = rfc3339;
    // a 12-hour and an 8-hour window ending an hour before the data does
    let (from12, to12) = (at(end_s - 13 * 3600), at(end_s - 3600));
    let (from8, to8) = (at(end_s - 9 * 3600), at(end_s - 3600));
    let host = format!("host_{}", args.hosts / 2);
    let hosts8: Vec<String> = (0..8)
        .map(|i| format!("'host_{}'", i * args.hosts / 8))
        .collect();
    let hosts8 = hosts8.join(", ");
    let max_all: Vec<String> = FIELD_NAMES
        .iter()
        .map(|f| format!("max({f}) AS {f}"))
        .collect();
    let max_all = max_all.join(", ");
    vec![
        Shape {
            name: "select-1",
            quiver: "SELECT 1".into(),
            questdb: "SELECT 1".into(),
        },
        Shape {
            name: "count",
            quiver: "SELECT count(*) FROM cpu".into(),
            questdb: "SELECT count(*) FROM cpu".into(),
        },
        Shape {
            name: "high-cpu-count",
            quiver: "SELECT count(*) FROM cpu WHERE usage_user > 90".into(),
            questdb: "SELECT count(*) FROM cpu WHERE usage_user > 90".into(),
        },
        Shape {
            name: "avg-per-host",
            quiver: "SELECT hostname, avg(usage_user) AS u FROM cpu GROUP BY hostname ORDER BY hostname".into(),
            questdb: "SELECT hostname, avg(usage_user) AS u FROM cpu GROUP BY hostname ORDER BY hostname".into(),
        },
        Shape {
            name: "single-groupby-1-1-12",
            quiver: format!(
                "SELECT date_bin(INTERVAL '1 minute', time) AS minute, max(usage_user) AS u FROM cpu \
                 WHERE hostname = '{host}' AND time >= '{from12}' AND time < '{to12}' \
                 GROUP BY minute ORDER BY minute"
            ),
            questdb: format!(
                "SELECT timestamp AS minute, max(usage_user) AS u FROM cpu \
                 WHERE hostname = '{host}' AND timestamp >= '{from12}' AND timestamp < '{to12}' \
                 SAMPLE BY 1m ALIGN TO CALENDAR"
            ),
        },
        Shape {
            name: "cpu-max-all-8",
            quiver: format!(
                "SELECT date_bin(INTERVAL '1 hour', time) AS hour, {max_all} FROM cpu \
                 WHERE hostname IN ({hosts8}) AND time >= '{from8}' AND time < '{to8}' \
                 GROUP BY hour ORDER BY hour"
            ),
            questdb: format!(
                "SELECT timestamp AS hour, {max_all} FROM cpu \
                 WHERE hostname IN ({hosts8}) AND timestamp >= '{from8}' AND timestamp < '{to8}' \
                 SAMPLE BY 1h ALIGN TO CALENDAR"
            ),
        },
        Shape {
            name: "double-groupby-1",
            quiver: format!(
                "SELECT date_bin(INTERVAL '1 hour', time) AS hour, hostname, avg(usage_user) AS u FROM cpu \
                 WHERE time >= '{from12}' AND time < '{to12}' GROUP BY hour, hostname ORDER BY hour, hostname"
            ),
            questdb: format!(
                "SELECT timestamp AS hour, hostname, avg(usage_user) AS u FROM cpu \
                 WHERE timestamp >= '{from12}' AND timestamp < '{to12}' \
                 SAMPLE BY 1h ALIGN TO CALENDAR ORDER BY hour, hostname"
            ),
        },
        Shape {
            name: "high-cpu-1",
            quiver: format!(
                "SELECT * FROM cpu WHERE usage_user > 90.0 AND hostname = '{host}' \
                 AND time >= '{from12}' AND time < '{to12}'"
            ),
            questdb: format!(
                "SELECT * FROM cpu WHERE usage_user > 90.0 AND hostname = '{host}' \
                 AND timestamp >= '{from12}' AND timestamp < '{to12}'"
            ),
        },
        Shape {
            name: "groupby-orderby-limit",
            quiver: format!(
                "SELECT date_bin(INTERVAL '1 minute', time) AS minute, max(usage_user) AS u FROM cpu \
                 WHERE time < '{to12}' GROUP BY minute ORDER BY minute DESC LIMIT 5"
            ),
            questdb: format!(
                "SELECT timestamp AS minute, max(usage_user) AS u FROM cpu \
                 WHERE timestamp < '{to12}' SAMPLE BY 1m ALIGN TO CALENDAR ORDER BY minute DESC LIMIT 5"
            ),
        },
        Shape {
            name: "distinct-host",
            quiver: "SELECT DISTINCT hostname FROM cpu".into(),
            questdb: "SELECT DISTINCT hostname FROM cpu".into(),
        },
        Shape {
            name: "lastpoint",
            quiver: "SELECT DISTINCT ON (hostname) * FROM cpu ORDER BY hostname, time DESC".into(),
            questdb: "SELECT * FROM cpu LATEST ON timestamp PARTITION BY hostname".into(),
        },
    ]
}

/// Times every shape on both servers, alternating, `args.rounds` times; prints a table per
/// round and the spread of the geometric means.
async fn compare(client: &reqwest::Client, args: &Args, shapes: &[Shape]) {
    let mut geomeans = Vec::new();
    for round in 1..=args.rounds {
        println!("\nround {round}: median of {} runs, ms", args.runs);
        println!(
            "| shape | rows | Quiver | QuestDB | Quiver / QuestDB |\n|---|---:|---:|---:|---:|"
        );
        let mut log_sum = 0.0;
        let mut counted = 0;
        for shape in shapes {
            let (quiver_ms, quiver_rows) = timed(args.runs, || {
                quiver_rows(client, &args.quiver_url, &args.db, &shape.quiver, &[])
            })
            .await;
            let (questdb_ms, questdb_rows) =
                timed(args.runs, || questdb_rows(client, args, &shape.questdb)).await;
            assert_eq!(
                quiver_rows, questdb_rows,
                "{}: Quiver answered {quiver_rows} rows, QuestDB {questdb_rows}",
                shape.name
            );
            let ratio = quiver_ms / questdb_ms;
            println!(
                "| {} | {quiver_rows} | {quiver_ms:.2} | {questdb_ms:.2} | {ratio:.2}x |",
                shape.name
            );
            if shape.name != "select-1" {
                log_sum += ratio.ln();
                counted += 1;
            }
        }
        let geomean = (log_sum / counted as f64).exp();
        println!("geometric mean of the ratios (without select-1): {geomean:.2}x");
        geomeans.push(geomean);
    }
    geomeans.sort_by(f64::total_cmp);
    println!(
        "\ngeometric means over {} rounds: {}",
        geomeans.len(),
        geomeans
            .iter()
            .map(|g| format!("{g:.2}x"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Runs `sql` on QuestDB and returns the number of rows answered.
async fn questdb_rows(client: &reqwest::Client, args: &Args, sql: &str) -> usize {
    questdb_query(client, args, sql).await.0
}

/// Runs `sql` on QuestDB: its row count and its rows.
async fn questdb_query(
    client: &reqwest::Client,
    args: &Args,
    sql: &str,
) -> (usize, Vec<Vec<serde_json::Value>>) {
    let response = client
        .get(format!("{}/exec", args.questdb_url))
        .query(&[("query", sql)])
        .send()
        .await
        .expect("QuestDB answers");
    let status = response.status();
    let body = response.bytes().await.expect("QuestDB's body");
    let text = String::from_utf8_lossy(&body);
    assert!(status.is_success(), "QuestDB: {sql}: {status} {text}");
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("QuestDB's JSON");
    assert!(answer.get("error").is_none(), "QuestDB: {sql}: {text}");
    let rows: Vec<Vec<serde_json::Value>> =
        serde_json::from_value(answer["dataset"].clone()).unwrap_or_default();
    (rows.len(), rows)
}

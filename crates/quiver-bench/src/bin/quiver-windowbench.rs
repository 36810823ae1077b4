//! Rolling-window dashboard benchmark: answers from reused time parts against the same
//! answers computed whole (the result cache skipped), while a writer appends the newest
//! points.
//!
//! Loads `window + 1 h` of history (every host one point per ten seconds) ending at a
//! simulated clock one day behind the wall clock (so every point is in the past, as on a
//! live dashboard), then refreshes the dashboard `--refreshes` times. Each refresh first
//! appends the next ten seconds of points for every host (the writer), then asks the
//! dashboard's question, "each host's 1-minute average and maximum over the last
//! `--window-hours` hours" with the window's bounds written out as Grafana writes them, twice:
//! through the result cache (reused parts, `X-Quiver-Cache: PARTIAL`) and with
//! `Cache-Control: no-cache` (computed whole), in alternating order. The two bodies must be
//! identical (zero stale answers); both are timed. Reports p50 / p90 of each, their ratio, and
//! the share of partial-result rows served from cached parts (`GET /api/v3/cache`).
//!
//! With `--compare-url` (a second server, e.g. another build of Quiver) both servers get the
//! same points and the same questions, refresh by refresh, in alternating order, and the
//! report is one line comparing them (second / first): two builds measured in the same run
//! and under the same load, which sequential runs on a shared machine cannot give.
//!
//! ```sh
//! quiver-windowbench --quiver-url http://127.0.0.1:18386 --hosts 100 --refreshes 60
//! ```
//! `scripts/window-bench.sh` starts the server and runs this for 100 and 1,000 hosts;
//! `scripts/ab-window.sh` starts two builds and compares them.

use std::time::Instant;

use clap::Parser;
use quiver_bench::http::{block_on, client, post, rfc3339};
use quiver_bench::{percentile, Xorshift};
use serde_json::Value;

/// Rolling-window dashboard: reused time parts against answers computed whole.
#[derive(Debug, Parser)]
struct Args {
    /// Quiver's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    quiver_url: String,
    /// A second server's HTTP base URL, to compare with the first in the same run.
    #[arg(long)]
    compare_url: Option<String>,
    /// Hosts writing one point every ten seconds.
    #[arg(long, default_value_t = 100)]
    hosts: usize,
    /// Dashboard refreshes timed (each after ten more seconds of points).
    #[arg(long, default_value_t = 60)]
    refreshes: usize,
    /// The window the dashboard shows.
    #[arg(long, default_value_t = 6)]
    window_hours: i64,
    /// The answers' format.
    #[arg(long, default_value = "json")]
    format: String,
    /// The panel: `series` (every host's minutes, ordered: the answer is hosts x 360 rows),
    /// `top` (the five busiest host-minutes of the window), or, to see where the time goes,
    /// `unordered` (`series` without its ORDER BY) and `count` (only how many host-minutes).
    #[arg(long, default_value = "series")]
    panel: String,
    /// The database (dropped first if it exists).
    #[arg(long, default_value = "dashboard")]
    db: String,
}

/// Seconds between two points of one host, and between two refreshes.
const STEP_S: i64 = 10;
/// Lines per write request while loading.
const BATCH_LINES: usize = 20_000;

fn main() {
    let args = Args::parse();
    block_on(run(args));
}

/// One server under test and what its answers measured.
struct Server {
    url: String,
    /// Its cache counters before the timed refreshes.
    before: Value,
    reused_ms: Vec<f64>,
    whole_ms: Vec<f64>,
    partial: usize,
}

impl Server {
    async fn new(http: &reqwest::Client, url: &str, db: &str) -> Self {
        let url = url.trim_end_matches('/').to_string();
        let _ = http
            .delete(format!("{url}/api/v3/configure/database"))
            .query(&[("db", db)])
            .send()
            .await;
        Server {
            url,
            before: Value::Null,
            reused_ms: Vec::new(),
            whole_ms: Vec::new(),
            partial: 0,
        }
    }

    async fn write(&self, http: &reqwest::Client, db: &str, lines: &str) {
        let url = format!("{}/api/v3/write_lp?db={db}&precision=second", self.url);
        post(http, &url, lines).await;
    }

    /// The share of partial-result rows served from cached parts since `before`.
    async fn reused_share(&self, http: &reqwest::Client) -> f64 {
        let after = cache_stats(http, &self.url).await;
        let delta =
            |key: &str| after[key].as_u64().unwrap_or(0) - self.before[key].as_u64().unwrap_or(0);
        let (reused, computed) = (delta("part_rows_reused"), delta("part_rows_computed"));
        reused as f64 / (reused + computed).max(1) as f64
    }
}

async fn run(args: Args) {
    let http = client();
    let mut servers = vec![Server::new(&http, &args.quiver_url, &args.db).await];
    if let Some(url) = &args.compare_url {
        servers.push(Server::new(&http, url, &args.db).await);
    }
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64;
    // the simulated clock: a day behind, on a whole step
    let mut clock = (wall - 86_400) / STEP_S * STEP_S;
    let mut rng = Xorshift::new(42);
    let history_s = (args.window_hours + 1) * 3600;
    let started = Instant::now();
    let mut lines = String::new();
    let mut count = 0;
    for t in (clock - history_s..clock).step_by(STEP_S as usize) {
        for host in 0..args.hosts {
            push_point(&mut lines, host, t, &mut rng);
            count += 1;
            if count % BATCH_LINES == 0 {
                for server in &servers {
                    server.write(&http, &args.db, &lines).await;
                }
                lines.clear();
            }
        }
    }
    if !lines.is_empty() {
        for server in &servers {
            server.write(&http, &args.db, &lines).await;
        }
    }
    eprintln!(
        "loaded {count} points ({} hosts, {} h) in {:.1} s",
        args.hosts,
        history_s / 3600,
        started.elapsed().as_secs_f64()
    );
    for server in &mut servers {
        server.before = cache_stats(&http, &server.url).await;
    }
    let mut answer_rows = 0;
    // refresh 0 warms the parts (and is not timed)
    for refresh in 0..=args.refreshes {
        let mut lines = String::new();
        for host in 0..args.hosts {
            push_point(&mut lines, host, clock, &mut rng);
        }
        for server in &servers {
            server.write(&http, &args.db, &lines).await;
        }
        clock += STEP_S;
        let sql = dashboard_query(clock, args.window_hours, &args.panel);
        // the servers in alternating order, as each one's two questions
        let count = servers.len();
        for i in 0..count {
            let server = &mut servers[(i + refresh) % count];
            let ask = |no_cache: bool| query(&http, &server.url, &args, &sql, no_cache);
            let (cached, whole) = match refresh % 2 {
                0 => {
                    let cached = ask(false).await;
                    (cached, ask(true).await)
                }
                _ => {
                    let whole = ask(true).await;
                    (ask(false).await, whole)
                }
            };
            assert!(
                same_rows(&cached.body, &whole.body, &args.format),
                "refresh {refresh}: the {} answer of {} differs from the answer computed whole",
                cached.verdict,
                server.url
            );
            if refresh == 0 {
                continue;
            }
            server.partial += usize::from(cached.verdict == "PARTIAL");
            answer_rows = whole.rows;
            server.reused_ms.push(cached.ms);
            server.whole_ms.push(whole.ms);
        }
    }
    let dashboard = format!(
        "{} hosts, {} h window, {} panel, {} refreshes, {} ({})",
        args.hosts,
        args.window_hours,
        args.panel,
        args.refreshes,
        match answer_rows {
            0 => "rows not counted".to_string(),
            rows => format!("{rows} rows per answer"),
        },
        args.format,
    );
    match servers.as_mut_slice() {
        [one] => report(&http, &dashboard, one, args.refreshes).await,
        [first, second] => compare(&dashboard, first, second),
        _ => unreachable!("one or two servers"),
    }
}

/// One server's line: computed whole against reused parts.
async fn report(http: &reqwest::Client, dashboard: &str, server: &mut Server, refreshes: usize) {
    let share = server.reused_share(http).await;
    let (p50_reused, p90_reused) = percentiles(&mut server.reused_ms);
    let (p50_whole, p90_whole) = percentiles(&mut server.whole_ms);
    println!(
        "| {dashboard} | {p50_whole:.1} / {p90_whole:.1} | {p50_reused:.1} / {p90_reused:.1} | {:.1}x / {:.1}x | {:.1} % | {} of {refreshes} PARTIAL, 0 stale |",
        p50_whole / p50_reused,
        p90_whole / p90_reused,
        share * 100.0,
        server.partial,
    );
}

/// Two servers' line: each one's p50 computed whole and from reused parts, and second / first.
fn compare(dashboard: &str, first: &mut Server, second: &mut Server) {
    let (whole_a, _) = percentiles(&mut first.whole_ms);
    let (whole_b, _) = percentiles(&mut second.whole_ms);
    let (reused_a, _) = percentiles(&mut first.reused_ms);
    let (reused_b, _) = percentiles(&mut second.reused_ms);
    println!(
        "| {dashboard} | {whole_a:.1} | {whole_b:.1} | {:.3} | {reused_a:.1} | {reused_b:.1} | {:.3} | {} / {} PARTIAL |",
        whole_b / whole_a,
        reused_b / reused_a,
        first.partial,
        second.partial,
    );
}

/// A point of `host` at `t` (seconds): usage in halves, so sums are exact in any order.
fn push_point(lines: &mut String, host: usize, t: i64, rng: &mut Xorshift) {
    use std::fmt::Write;
    let usage = (rng.next_u64() % 200) as f64 / 2.0;
    let system = rng.next_u64() % 100;
    let _ = writeln!(
        lines,
        "cpu,hostname=host_{host},region=r{} usage_user={usage},usage_system={system}i {t}",
        host % 4
    );
}

/// The dashboard's question for the window ending at `clock` (seconds).
fn dashboard_query(clock: i64, window_hours: i64, panel: &str) -> String {
    let minutes = format!(
        "SELECT date_bin(INTERVAL '1 minute', time) AS t, hostname, avg(usage_user) AS avg_user, \
         max(usage_user) AS max_user FROM cpu WHERE time >= '{}' AND time < '{}' \
         GROUP BY 1, 2",
        rfc3339(clock - window_hours * 3600),
        rfc3339(clock)
    );
    match panel {
        "top" => format!("SELECT * FROM ({minutes}) ORDER BY avg_user DESC, t, hostname LIMIT 5"),
        "unordered" => minutes,
        "count" => format!("SELECT count(*) AS minutes FROM ({minutes})"),
        _ => format!("{minutes} ORDER BY 1, 2"),
    }
}

/// True if two answers in `format` hold the same rows: the same bytes for text formats; for
/// Arrow IPC (whose batches and dictionaries may be cut differently) the same values.
fn same_rows(a: &[u8], b: &[u8], format: &str) -> bool {
    if format != "arrow" {
        return a == b;
    }
    let rows = |bytes: &[u8]| -> Vec<Vec<arrow::array::ArrayRef>> {
        let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .expect("an Arrow IPC stream");
        let batches: Vec<_> = reader.map(|b| b.expect("an Arrow batch")).collect();
        let schema = batches.first().map(|b| b.schema());
        let Some(schema) = schema else {
            return Vec::new();
        };
        let whole = arrow::compute::concat_batches(&schema, &batches).expect("one batch");
        vec![whole
            .columns()
            .iter()
            .map(|column| match column.data_type() {
                arrow::datatypes::DataType::Dictionary(_, values) => {
                    arrow::compute::cast(column, values).expect("dictionary values")
                }
                _ => column.clone(),
            })
            .collect()]
    };
    let (a, b) = (rows(a), rows(b));
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.as_ref() == q.as_ref())
        })
}

/// One timed answer.
struct Answered {
    verdict: String,
    body: bytes::Bytes,
    rows: usize,
    ms: f64,
}

async fn query(
    http: &reqwest::Client,
    url: &str,
    args: &Args,
    sql: &str,
    no_cache: bool,
) -> Answered {
    let started = Instant::now();
    let mut request = http.get(format!("{url}/api/v3/query_sql")).query(&[
        ("db", args.db.as_str()),
        ("q", sql),
        ("format", &args.format),
    ]);
    if no_cache {
        request = request.header("Cache-Control", "no-cache");
    }
    let response = request.send().await.expect("Quiver answers");
    let status = response.status();
    let verdict = response
        .headers()
        .get("X-Quiver-Cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response.bytes().await.expect("Quiver's body");
    let ms = started.elapsed().as_secs_f64() * 1e3;
    assert!(
        status.is_success(),
        "{sql}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let rows = match args.format.as_str() {
        "json" => serde_json::from_slice::<Vec<Value>>(&body).map_or(0, |rows| rows.len()),
        _ => 0,
    };
    Answered {
        verdict,
        body,
        rows,
        ms,
    }
}

async fn cache_stats(http: &reqwest::Client, url: &str) -> Value {
    let body = http
        .get(format!("{url}/api/v3/cache"))
        .send()
        .await
        .expect("Quiver answers")
        .bytes()
        .await
        .expect("cache stats");
    serde_json::from_slice(&body).expect("cache stats are JSON")
}

/// The median and the 90th percentile of `samples`.
fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (percentile(samples, 0.5), percentile(samples, 0.9))
}

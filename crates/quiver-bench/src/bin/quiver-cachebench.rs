//! Result-cache benchmark over HTTP: miss vs hit latency for six query shapes in Arrow and
//! JSON, and hit throughput from concurrent clients, against a running Quiver server.
//!
//! It loads a generated metrics table (TSBS cpu-only: 200 hosts, 10 tags and 10 fields, every
//! 10 s for about 28 hours: 2 M rows, 21 columns) unless the database already holds it, then
//! for each shape measures the median latency of misses (the result cache is cleared before
//! each one, so every one really executes) and of hits (the same request repeated), both end
//! to end through
//! a keep-alive HTTP client that reads the whole body. As the floor a hit cannot beat, it also
//! measures, in the same run, a plain loopback TCP transfer of the same number of bytes.
//!
//! ```sh
//! quiver-cachebench --url http://127.0.0.1:8086 --runs 21 --seconds 5 [--token T]
//! ```
//!
//! Clearing the cache is an admin operation: without `--token`, the server must admit this
//! client as its local caller (the default `auth = loopback`); with one, it must be an admin
//! token.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use quiver_bench::metrics_payload;

/// Result-cache benchmark.
#[derive(Debug, Parser)]
struct Args {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    url: String,
    /// Database holding the metrics table.
    #[arg(long, default_value = "cachebench")]
    db: String,
    /// Requests per measurement (the median is reported).
    #[arg(long, default_value_t = 21)]
    runs: usize,
    /// Seconds of the concurrent hit-throughput measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Concurrent clients for the throughput measurement.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// An admin token to present (none: the server's local caller).
    #[arg(long)]
    token: Option<String>,
}

const HOSTS: usize = 200;
const ROUNDS: usize = 10_000;
const START_S: i64 = 1_700_000_000;

/// A query shape and the number of rows it must return.
struct Shape {
    name: &'static str,
    rows: usize,
    sql: String,
}

fn shapes() -> Vec<Shape> {
    let window = |rounds: i64| {
        format!(
            "SELECT * FROM cpu WHERE time >= to_timestamp_seconds({START_S}) \
             AND time < to_timestamp_seconds({})",
            START_S + rounds * 10
        )
    };
    vec![
        Shape {
            name: "per-host aggregate (3 cols)",
            rows: 200,
            sql: "SELECT hostname, avg(usage_user) AS avg_user, max(usage_system) AS max_system \
                  FROM cpu GROUP BY hostname ORDER BY hostname"
                .into(),
        },
        Shape {
            name: "200 s buckets, all hosts (3 cols)",
            rows: 500,
            sql:
                "SELECT date_bin(INTERVAL '200 seconds', time) AS t, avg(usage_user) AS avg_user, \
                  max(usage_idle) AS max_idle FROM cpu GROUP BY t ORDER BY t"
                    .into(),
        },
        Shape {
            name: "200 min buckets per host (3 cols)",
            rows: 1_800,
            sql: "SELECT hostname, date_bin(INTERVAL '200 minutes', time) AS t, \
                  avg(usage_user) AS avg_user FROM cpu GROUP BY hostname, t ORDER BY hostname, t"
                .into(),
        },
        Shape {
            name: "raw window (21 cols)",
            rows: 10_000,
            sql: window(50),
        },
        Shape {
            name: "raw window (21 cols)",
            rows: 30_000,
            sql: window(150),
        },
        Shape {
            name: "raw window (21 cols)",
            rows: 50_000,
            sql: window(250),
        },
    ]
}

/// Where queries go.
struct Target {
    client: reqwest::Client,
    url: String,
    db: String,
    token: Option<String>,
}

impl Target {
    /// A request to `path` with the token, if any.
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.url));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Empties the result cache, so that the next query is a miss.
    async fn clear_cache(&self) {
        let response = self
            .request(reqwest::Method::DELETE, "/api/v3/cache")
            .send()
            .await
            .expect("clearing the cache failed");
        assert!(
            response.status().is_success(),
            "clearing the cache: {}",
            response.status()
        );
    }
}

/// One request's outcome.
struct Reply {
    verdict: String,
    bytes: usize,
    elapsed: Duration,
}

async fn query(target: &Target, sql: &str, format: &str) -> Reply {
    let started = Instant::now();
    let response = target
        .request(reqwest::Method::GET, "/api/v3/query_sql")
        .query(&[("db", target.db.as_str()), ("q", sql), ("format", format)])
        .send()
        .await
        .expect("request failed");
    let status = response.status();
    let verdict = response
        .headers()
        .get("x-quiver-cache")
        .map(|v| v.to_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    let body = response.bytes().await.expect("body failed");
    let elapsed = started.elapsed();
    assert!(
        status.is_success(),
        "{sql}: {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Reply {
        verdict,
        bytes: body.len(),
        elapsed,
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn load(target: &Target) {
    let probe = target
        .request(reqwest::Method::GET, "/api/v3/query_sql")
        .query(&[
            ("db", target.db.as_str()),
            ("q", "SELECT count(*) AS n FROM cpu"),
            ("format", "csv"),
        ])
        .header("cache-control", "no-cache")
        .send()
        .await
        .expect("server not reachable");
    if probe.status().is_success() {
        let text = probe.text().await.unwrap_or_default();
        if text.trim().ends_with(&(HOSTS * ROUNDS).to_string()) {
            eprintln!("table already loaded");
            return;
        }
        panic!("database {} holds other data: {text}", target.db);
    }
    eprintln!("loading {} rows", HOSTS * ROUNDS);
    let per_request = 20_000;
    for start in (0..HOSTS * ROUNDS).step_by(per_request) {
        let rounds_done = (start / HOSTS) as i64;
        let payload = metrics_payload(
            HOSTS,
            per_request,
            (START_S + rounds_done * 10) * 1_000_000_000,
            start as u64 + 1,
        );
        let response = target
            .request(reqwest::Method::POST, "/api/v3/write_lp")
            .query(&[("db", target.db.as_str())])
            .body(payload)
            .send()
            .await
            .expect("write failed");
        assert_eq!(response.status().as_u16(), 204, "write rejected");
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let target = Arc::new(Target {
        client: reqwest::Client::new(),
        url: args.url.clone(),
        db: args.db.clone(),
        token: args.token.clone(),
    });
    load(&target).await;
    let floor = Loopback::start().await;
    println!(
        "| rows | shape | format | bytes | miss median | hit median | speedup | loopback copy | hit / copy |\n\
         |---:|---|---|---:|---:|---:|---:|---:|---:|"
    );
    let mut speedups = Vec::new();
    for shape in shapes().iter() {
        for format in ["arrow", "json"] {
            let mut misses = Vec::new();
            for _ in 0..args.runs {
                target.clear_cache().await;
                let reply = query(&target, &shape.sql, format).await;
                assert_eq!(reply.verdict, "MISS", "{}", shape.sql);
                misses.push(reply.elapsed);
            }
            let warm = query(&target, &shape.sql, format).await;
            let mut hits = Vec::new();
            for _ in 0..args.runs {
                let reply = query(&target, &shape.sql, format).await;
                assert_eq!(reply.verdict, "HIT", "{}", shape.sql);
                hits.push(reply.elapsed);
            }
            let copy = floor.median_copy(warm.bytes, args.runs).await;
            let rows = count_rows(&target, &shape.sql).await;
            assert_eq!(rows, shape.rows, "{}", shape.sql);
            let (miss, hit) = (median(misses), median(hits));
            let speedup = miss.as_secs_f64() / hit.as_secs_f64();
            speedups.push(speedup);
            println!(
                "| {} | {} | {format} | {} | {:.2} ms | {:.3} ms | {speedup:.0}x | {:.3} ms | {:.1} |",
                shape.rows,
                shape.name,
                warm.bytes,
                miss.as_secs_f64() * 1e3,
                hit.as_secs_f64() * 1e3,
                copy.as_secs_f64() * 1e3,
                hit.as_secs_f64() / copy.as_secs_f64(),
            );
        }
    }
    let average = speedups.iter().sum::<f64>() / speedups.len() as f64;
    println!(
        "\naverage speedup: {average:.0}x over {} measurements",
        speedups.len()
    );
    let all: Arc<Vec<Shape>> = Arc::new(shapes());
    for (label, picks) in [
        ("200-row JSON", vec![(0usize, "json")]),
        (
            "all six shapes, Arrow and JSON",
            (0..all.len())
                .flat_map(|i| [(i, "arrow"), (i, "json")])
                .collect(),
        ),
    ] {
        let rate = throughput(&target, &args, &all, picks).await;
        println!(
            "hit throughput, {} clients, {label}: {rate:.0} requests/s",
            args.clients
        );
    }
}

async fn count_rows(target: &Target, sql: &str) -> usize {
    let counted = format!("SELECT count(*) AS n FROM ({sql}) AS q");
    let reply = target
        .request(reqwest::Method::GET, "/api/v3/query_sql")
        .query(&[
            ("db", target.db.as_str()),
            ("q", counted.as_str()),
            ("format", "csv"),
        ])
        .send()
        .await
        .expect("count failed");
    let text = reply.text().await.unwrap();
    text.lines()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or(0)
}

/// Requests per second of hits from `args.clients` concurrent clients cycling through `picks`.
async fn throughput(
    target: &Arc<Target>,
    args: &Args,
    shapes: &Arc<Vec<Shape>>,
    picks: Vec<(usize, &'static str)>,
) -> f64 {
    // The cache was cleared for the misses measured before: cache these answers again first.
    for &(shape, format) in &picks {
        query(target, &shapes[shape].sql, format).await;
    }
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let picks = Arc::new(picks);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let (done, stop, target) = (done.clone(), stop.clone(), target.clone());
        let (shapes, picks) = (shapes.clone(), picks.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = c;
            while !stop.load(Ordering::Relaxed) {
                let (shape, format) = picks[n % picks.len()];
                let reply = query(&target, &shapes[shape].sql, format).await;
                assert_eq!(reply.verdict, "HIT");
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// A loopback TCP peer that sends N ready bytes on request: the cost of copying an answer
/// through the kernel with no HTTP, no cache and no query, measured on the same machine.
struct Loopback {
    stream: tokio::sync::Mutex<tokio::net::TcpStream>,
}

impl Loopback {
    async fn start() -> Loopback {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 8];
            let mut payload = bytes::Bytes::new();
            while socket.read_exact(&mut request).await.is_ok() {
                let len = u64::from_le_bytes(request) as usize;
                if payload.len() != len {
                    payload = bytes::Bytes::from(vec![b'x'; len]);
                }
                socket.write_all(&payload).await.unwrap();
            }
        });
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Loopback {
            stream: tokio::sync::Mutex::new(stream),
        }
    }

    /// Median time to request and receive `len` bytes (into a fresh buffer, as a client does).
    async fn median_copy(&self, len: usize, runs: usize) -> Duration {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut samples = Vec::with_capacity(runs);
        let mut stream = self.stream.lock().await;
        for _ in 0..runs + 1 {
            let started = Instant::now();
            stream.write_all(&(len as u64).to_le_bytes()).await.unwrap();
            let mut received = vec![0u8; len];
            stream.read_exact(&mut received).await.unwrap();
            samples.push(started.elapsed());
        }
        samples.remove(0); // the first transfer also fills the peer's payload
        median(samples)
    }
}

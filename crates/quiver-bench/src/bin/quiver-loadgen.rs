//! HTTP ingest load generator: several concurrent keep-alive connections POST pre-generated
//! batches of metrics rows to a running Quiver for a fixed time and report rows/s, MB/s and
//! request latency. The rows are the same in every `--format`: line protocol (InfluxDB v3
//! API), MessagePack columnar or row (Arc's API), or an Arrow IPC stream.
//!
//! As a baseline measured in the same run, it first decodes the same batches in-process on one
//! core with the decoder the server runs for that format, so the report can say what fraction
//! of single-core decode speed the whole HTTP path reaches.
//!
//! ```sh
//! quiver-loadgen --url http://127.0.0.1:8086 --format msgpack --connections 4 --batch-lines 5000 --seconds 20
//! quiver-loadgen --format arrow --single-request 200000   # one big request, then report its sizes
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use quiver_bench::formats::{decode_rows, encode, metrics_batch, WriteFormat};
use quiver_bench::percentile;

/// Load generator for HTTP line-protocol ingest.
#[derive(Debug, Parser)]
struct Args {
    /// Server base URL.
    #[arg(long, default_value = "http://127.0.0.1:8086")]
    url: String,
    /// Database to write into.
    #[arg(long, default_value = "loadgen")]
    db: String,
    /// Concurrent connections (each sends one request at a time).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Lines per request.
    #[arg(long, default_value_t = 5_000)]
    batch_lines: usize,
    /// Distinct batches generated up front (cycled through; later rounds overwrite points).
    #[arg(long, default_value_t = 64)]
    batches: usize,
    /// Hosts (series) in the data set.
    #[arg(long, default_value_t = 1_000)]
    hosts: usize,
    /// Measured duration in seconds (after a one-second warm-up).
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Rows per second to offer in all (0: as fast as the connections go). Requests are sent
    /// on a fixed schedule and each one's latency counts from its scheduled time, so a server
    /// that stalls is not measured kindly (no coordinated omission).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Ask for `no_sync=true` (acknowledged before the WAL fsync).
    #[arg(long)]
    no_sync: bool,
    /// Write format.
    #[arg(long, value_enum, default_value_t = WriteFormat::Lp)]
    format: WriteFormat,
    /// Instead of the load: send one request of this many rows and print its body size and
    /// the size of its rows as Arrow arrays (for peak-memory measurements).
    #[arg(long)]
    single_request: Option<usize>,
}

struct Totals {
    rows: AtomicUsize,
    bytes: AtomicUsize,
    requests: AtomicUsize,
    /// Writes the server refused with 503 + `Retry-After` (each was retried after the pause).
    refusals: AtomicUsize,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Some(rows) = args.single_request {
        runtime.block_on(single_request(&args, rows));
        return;
    }
    let batches = generate(&args);
    let baseline = decode_rows_per_second(&batches, args.format);
    println!(
        "baseline: in-process decode of {} on one core: {baseline:.0} rows/s",
        args.format
    );
    let (rows_per_s, mb_per_s, latencies, refusals) = runtime.block_on(run(&args, batches));
    let median = percentile(&latencies, 0.5);
    let p99 = percentile(&latencies, 0.99);
    println!(
        "http ingest of {} ({}): {} connections x {}-row batches: {rows_per_s:.0} rows/s, {mb_per_s:.1} MB/s, \
         latency p50 {median:.1} ms p99 {p99:.1} ms, {} requests, {refusals} refused with 503 and \
         retried; ratio to one-core decode {:.2}",
        args.format,
        if args.no_sync { "no_sync" } else { "fsync" },
        args.connections,
        args.batch_lines,
        latencies.len(),
        rows_per_s / baseline
    );
}

fn generate(args: &Args) -> Vec<bytes::Bytes> {
    let rounds_per_batch = args.batch_lines.div_ceil(args.hosts.max(1)) as i64;
    (0..args.batches)
        .map(|k| {
            let start = 1_700_000_000_000_000_000 + k as i64 * rounds_per_batch * 10_000_000_000;
            let seed = k as u64 + 1;
            let batch = metrics_batch(args.hosts, args.batch_lines, start, seed);
            bytes::Bytes::from(encode(&batch, args.format, args.hosts, seed))
        })
        .collect()
}

/// Rows per second one core decodes `batches` of `format` into data-model Arrow batches.
fn decode_rows_per_second(batches: &[bytes::Bytes], format: WriteFormat) -> f64 {
    let started = Instant::now();
    let mut rows = 0;
    while started.elapsed() < Duration::from_secs(2) {
        for batch in batches {
            rows += decode_rows(batch, format);
        }
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

/// The endpoint and content type for `format`.
fn endpoint(args: &Args) -> (String, &'static str) {
    let base = args.url.trim_end_matches('/');
    match args.format {
        WriteFormat::Lp => (
            format!(
                "{base}/api/v3/write_lp?db={}&precision=ns&no_sync={}",
                args.db, args.no_sync
            ),
            "text/plain; charset=utf-8",
        ),
        WriteFormat::Msgpack | WriteFormat::MsgpackRow => (
            format!("{base}/api/v1/write/msgpack?no_sync={}", args.no_sync),
            "application/msgpack",
        ),
        WriteFormat::Arrow => (
            format!(
                "{base}/api/v3/write_arrow?db={}&table=cpu&no_sync={}",
                args.db, args.no_sync
            ),
            "application/vnd.apache.arrow.stream",
        ),
    }
}

/// Sends one request of `rows` rows; prints the body size and the rows' Arrow size.
async fn single_request(args: &Args, rows: usize) {
    let batch = metrics_batch(args.hosts, rows, 1_600_000_000_000_000_000, 99);
    let body = encode(&batch, args.format, args.hosts, 99);
    let (url, content_type) = endpoint(args);
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .header("x-arc-database", &args.db)
        .body(body.clone())
        .send()
        .await
        .expect("request");
    let status = response.status();
    assert_eq!(
        status,
        204,
        "write failed: {}",
        response.text().await.unwrap_or_default()
    );
    println!(
        "single request of {} ({rows} rows): body {} bytes, rows as Arrow arrays {} bytes",
        args.format,
        body.len(),
        batch.get_array_memory_size()
    );
}

/// Sends the batches on `args.connections` connections for `args.seconds`; returns rows/s,
/// MB/s, each write's latency (from its first attempt to its acknowledgement) and the
/// refusals. A write refused with 503 + `Retry-After` is sent again after that pause, as a
/// client that honours back-pressure does; any other failure ends the run.
async fn run(args: &Args, batches: Vec<bytes::Bytes>) -> (f64, f64, Vec<f64>, usize) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections)
        .build()
        .expect("http client");
    let (url, content_type) = endpoint(args);
    let batches = Arc::new(batches);
    let next = Arc::new(AtomicUsize::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new(Totals {
        rows: AtomicUsize::new(0),
        bytes: AtomicUsize::new(0),
        requests: AtomicUsize::new(0),
        refusals: AtomicUsize::new(0),
    });
    let lines = args.batch_lines;
    let db = args.db.clone();
    // with a rate: request n is due at `n / requests_per_second` after the start
    let schedule = (args.rate > 0).then(|| {
        let per_second = args.rate as f64 / lines.max(1) as f64;
        (tokio::time::Instant::now(), per_second)
    });
    let due_requests = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..args.connections)
        .map(|_| {
            let (client, url, batches, next) =
                (client.clone(), url.clone(), batches.clone(), next.clone());
            let (measuring, stop, totals, db) =
                (measuring.clone(), stop.clone(), totals.clone(), db.clone());
            let due_requests = due_requests.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let body =
                        batches[next.fetch_add(1, Ordering::Relaxed) % batches.len()].clone();
                    let size = body.len();
                    let sent = match schedule {
                        Some((start, per_second)) => {
                            let n = due_requests.fetch_add(1, Ordering::Relaxed);
                            let due = start + Duration::from_secs_f64(n as f64 / per_second);
                            tokio::time::sleep_until(due).await;
                            due.into_std()
                        }
                        None => Instant::now(),
                    };
                    loop {
                        let response = client
                            .post(&url)
                            .header("content-type", content_type)
                            .header("x-arc-database", &db)
                            .body(body.clone())
                            .send()
                            .await
                            .expect("request");
                        let status = response.status();
                        let retry_after = retry_after(&response);
                        let text = response.text().await.unwrap_or_default();
                        match (status.as_u16(), retry_after) {
                            (204, _) => break,
                            (503, Some(pause)) if !stop.load(Ordering::Relaxed) => {
                                totals.refusals.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(pause).await;
                            }
                            // the run is over: a refused write is not retried (nor counted)
                            (503, Some(_)) => break,
                            _ => panic!("write failed: {status} {text}"),
                        }
                    }
                    if measuring.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                        latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                        totals.rows.fetch_add(lines, Ordering::Relaxed);
                        totals.bytes.fetch_add(size, Ordering::Relaxed);
                        totals.requests.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let mut latencies = Vec::new();
    for worker in futures::future::join_all(workers).await {
        latencies.extend(worker.expect("worker"));
    }
    latencies.sort_by(f64::total_cmp);
    let rows = totals.rows.load(Ordering::Relaxed) as f64 / elapsed;
    let mb = totals.bytes.load(Ordering::Relaxed) as f64 / elapsed / 1e6;
    (rows, mb, latencies, totals.refusals.load(Ordering::Relaxed))
}

/// The pause a response's `Retry-After` (whole seconds) asks for.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    let secs: u64 = value.to_str().ok()?.parse().ok()?;
    Some(Duration::from_secs(secs))
}

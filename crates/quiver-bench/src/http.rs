//! HTTP helpers the server benchmarks share: requests to Quiver, timing, timestamps.

use std::time::{Duration, Instant};

/// Runs a benchmark's `main` future on a single-threaded runtime (the server measured gets
/// the cores).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

/// An HTTP client for benchmark requests: ten minutes per request at most.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .expect("HTTP client")
}

/// `seconds` since the epoch as an RFC 3339 UTC timestamp both servers parse.
pub fn rfc3339(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000000Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The median milliseconds of `runs` runs of `query` after a warm-up, and its row count.
pub async fn timed<F, Fut>(runs: usize, query: F) -> (f64, usize)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let boxed: TimedQuery<'_> = Box::new(|| Box::pin(query()));
    timed_alternating(runs, &[boxed]).await[0]
}

/// One question [`timed_alternating`] asks: a request whose answer's row count it returns.
pub type TimedQuery<'a> =
    Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = usize> + 'a>> + 'a>;

/// Each query's median milliseconds over `runs` runs and its row count, the queries asked in
/// turn within every run (the first run starting from the first query, the next from the
/// second, ...) after one warm-up each: what the machine does meanwhile weighs on all alike.
pub async fn timed_alternating(runs: usize, queries: &[TimedQuery<'_>]) -> Vec<(f64, usize)> {
    let mut rows = Vec::with_capacity(queries.len());
    for query in queries {
        rows.push(query().await);
    }
    let mut samples = vec![Vec::with_capacity(runs); queries.len()];
    for run in 0..runs {
        for turn in 0..queries.len() {
            let which = (run + turn) % queries.len();
            let started = Instant::now();
            queries[which]().await;
            samples[which].push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    samples
        .into_iter()
        .zip(rows)
        .map(|(mut ms, rows)| {
            ms.sort_by(f64::total_cmp);
            (ms[ms.len() / 2], rows)
        })
        .collect()
}

/// Runs `sql` in `db` on the Quiver at `url` (result cache bypassed, `params` added) and
/// returns the number of rows answered.
pub async fn quiver_rows(
    client: &reqwest::Client,
    url: &str,
    db: &str,
    sql: &str,
    params: &[(&str, &str)],
) -> usize {
    let response = client
        .get(format!("{url}/api/v3/query_sql"))
        .query(&[("db", db), ("q", sql), ("format", "json")])
        .query(params)
        .header("Cache-Control", "no-cache")
        .send()
        .await
        .expect("Quiver answers");
    let status = response.status();
    let body = response.bytes().await.expect("Quiver's body");
    assert!(
        status.is_success(),
        "Quiver: {sql}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("a JSON array");
    rows.len()
}

/// POSTs `body`, which must be accepted.
pub async fn post(client: &reqwest::Client, url: &str, body: &str) {
    let response = client
        .post(url)
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    assert!(status.is_success(), "POST {url}: {status} {text}");
}

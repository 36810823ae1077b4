//! Zero stale answers. A random interleaving of writes (new series, overwrites, new columns,
//! a table that appears late), persists and repeated queries over several tables: every
//! answer the cache gives must equal an uncached execution at the same point. A concurrent
//! variant checks that no answer ever misses a write acknowledged before the query started.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{Fixture, Rng};
use datafusion::common::ScalarValue;
use quiver_query::QueryParams;
use quiver_service::{CacheConfig, QueryRequest, Verdict};

/// Acknowledged writes the run makes at least (the issue asks for 10,000)...
const MIN_WRITES: usize = 10_000;
/// ...and random steps (write bursts, persists, queries) it takes at least.
const MIN_STEPS: usize = 10_500;

const QUERIES: &[&str] = &[
    "SELECT host, count(*) AS n, sum(usage) AS s FROM cpu GROUP BY host",
    "SELECT * FROM cpu WHERE host = 'h1'",
    "SELECT * FROM cpu WHERE host = 'H1'",
    "SELECT count(*) AS n FROM mem",
    "SELECT c.host, c.usage, m.free FROM cpu c JOIN mem m ON c.host = m.host AND c.time = m.time",
    "SELECT region, max(usage) AS m FROM cpu GROUP BY region",
    "SELECT * FROM disk ORDER BY time, host LIMIT 5",
    "WITH t AS (SELECT host, avg(usage) AS a FROM cpu GROUP BY host) SELECT * FROM t WHERE a > 50",
    "SELECT count(DISTINCT host) AS hosts FROM disk",
    "SELECT host FROM cpu UNION SELECT host FROM mem",
    "SELECT * FROM mem WHERE free > $min",
    "SELECT host, min(time) AS first, max(time) AS last FROM cpu GROUP BY host",
];

/// The same query written differently (case of keywords, whitespace, comments).
fn variant(sql: &str, rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => sql.to_string(),
        1 => format!("\n  {sql}  -- again\n"),
        2 => sql.replacen("SELECT", "select", 1),
        _ => format!("/* dashboard */ {}", sql.replace(" FROM ", "\n\tFROM ")),
    }
}

fn random_write(rng: &mut Rng, step: usize) -> String {
    let mut lines = String::new();
    for _ in 0..1 + rng.below(4) {
        let host = rng.below(4);
        let time = rng.below(50);
        let line = match rng.below(6) {
            0..=2 => {
                let region = if step > 3000 && rng.below(2) == 0 {
                    format!(",region=r{}", rng.below(3))
                } else {
                    String::new()
                };
                format!("cpu,host=h{host}{region} usage={} {time}", rng.below(100))
            }
            3 | 4 => format!("mem,host=h{host} free={}i {time}", rng.below(1000)),
            _ if step > 5000 => format!("disk,host=h{host} used={} {time}", rng.below(10)),
            _ => format!("cpu,host=H{host} usage=1 {time}"),
        };
        lines.push_str(&line);
        lines.push('\n');
    }
    lines
}

#[tokio::test]
async fn every_cached_answer_equals_an_uncached_execution_at_the_same_point() {
    let mut rng = Rng(common::seed());
    let f = Fixture::new(CacheConfig {
        capacity_bytes: 8 << 20,
        max_entry_bytes: 1 << 20,
        ..CacheConfig::for_tests()
    });
    f.write("cpu,host=h0 usage=1 0\nmem,host=h0 free=1i 0\n")
        .await;
    let (mut writes, mut queries, mut persists) = (0, 0, 0);
    let mut step = 0;
    while writes < MIN_WRITES || step < MIN_STEPS {
        step += 1;
        // A dashboard's rhythm: bursts of writes (each acknowledged on its own) between
        // bursts of repeated queries.
        match rng.below(1000) {
            0..=99 => {
                for _ in 0..1 + rng.below(19) {
                    f.write(&random_write(&mut rng, step)).await;
                    writes += 1;
                }
            }
            100 | 101 => {
                f.store.persist_now().unwrap();
                persists += 1;
            }
            _ => {
                let sql = QUERIES[rng.below(QUERIES.len() as u64) as usize];
                let params = if sql.contains("$min") {
                    let min = ScalarValue::Int64(Some(rng.below(3) as i64 * 300));
                    QueryParams::Named(BTreeMap::from([("min".to_string(), min)]))
                } else {
                    QueryParams::None
                };
                let request = QueryRequest {
                    database: "db".into(),
                    sql: variant(sql, &mut rng),
                    params: params.clone(),
                    scope: quiver_model::AccessScope::grants(format!(
                        "db:user{}:read",
                        rng.below(2)
                    )),
                    no_cache: false,
                    control: Default::default(),
                };
                let cached = f.try_cached(request).await;
                let uncached = f.try_uncached(sql, &params).await;
                match (&cached, &uncached) {
                    (Ok((verdict, rows)), Ok(expected)) => assert_eq!(
                        rows, expected,
                        "step {step}: stale or wrong {verdict:?} answer for {sql}"
                    ),
                    (Err(_), Err(_)) => {}
                    _ => panic!("step {step}: {sql}: cached {cached:?} vs uncached {uncached:?}"),
                }
                queries += 1;
            }
        }
    }
    let stats = f.service.stats();
    eprintln!("writes {writes}, persists {persists}, queries {queries}: {stats:?}");
    assert!(
        stats.hits > 1_000,
        "too few hits to test anything: {stats:?}"
    );
    assert!(stats.misses > 1_000, "{stats:?}");
    // 0.2 % of the steps persist: about 21, with seed-to-seed spread.
    assert!(
        writes >= MIN_WRITES && queries > 8_000 && persists > 5,
        "{writes} writes, {queries} queries, {persists} persists"
    );
    assert!(stats.invalidations > 100, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_answer_misses_a_write_acknowledged_before_the_query() {
    let f = Arc::new(Fixture::new(CacheConfig::for_tests()));
    f.write("ticks,writer=w0 n=0i 0\n").await;
    let acknowledged = Arc::new(AtomicU64::new(1));
    let started = Arc::new(AtomicU64::new(1));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (f, acknowledged, started) = (f.clone(), acknowledged.clone(), started.clone());
            tokio::spawn(async move {
                for i in 1..=600u64 {
                    started.fetch_add(1, Ordering::SeqCst);
                    f.write(&format!("ticks,writer=w{w} n={i}i {}\n", i * 2 + w))
                        .await;
                    acknowledged.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (f, acknowledged, started) = (f.clone(), acknowledged.clone(), started.clone());
            tokio::spawn(async move {
                let mut hits = 0;
                while acknowledged.load(Ordering::SeqCst) < 1201 {
                    let before = acknowledged.load(Ordering::SeqCst);
                    let (verdict, rows) = f.cached("SELECT count(*) AS n FROM ticks", "").await;
                    let seen: u64 = rows[1].parse().unwrap();
                    let could_see = started.load(Ordering::SeqCst);
                    assert!(
                        seen >= before,
                        "stale: {seen} rows, {before} acknowledged before"
                    );
                    assert!(seen <= could_see, "{seen} rows but only {could_see} writes");
                    hits += u64::from(verdict == Verdict::Hit);
                    // A hit completes without ever waiting, so a reader that did not yield
                    // could keep every worker thread from the writers (a real server yields
                    // on its socket I/O).
                    tokio::task::yield_now().await;
                }
                hits
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut hits = 0;
    for reader in readers {
        hits += reader.await.unwrap();
    }
    eprintln!(
        "hits under concurrent writes: {hits}; {:?}",
        f.service.stats()
    );
    let (_, rows) = f.cached("SELECT count(*) AS n FROM ticks", "").await;
    assert_eq!(rows[1], "1201");
}

//! Zero stale answers from reused time parts. Sliding windows over a table that grows at its
//! newest end while late points land in old stretches, old points are rewritten, columns
//! appear, rows are persisted and compacted, the retention cutoff moves and the table is
//! dropped and written again: every answer the cache gives (HIT, PARTIAL or MISS) must equal
//! an uncached execution at the same point. A concurrent variant checks that a PARTIAL answer
//! never misses a write acknowledged before the query started.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Fixture, Rng};
use quiver_query::QueryParams;
use quiver_service::{CacheConfig, QueryRequest, Verdict};
use quiver_storage::{CompactionScope, RetentionPeriod};

const MINUTE: i64 = 60_000_000_000;
const HOUR: i64 = 60 * MINUTE;
/// 2024-01-01T00:00:00Z: every point is in the past, so every whole part is reusable.
const BASE: i64 = 1_704_067_200_000_000_000;
const HOSTS: u64 = 4;

/// RFC 3339 text of `ns` (whole seconds).
fn ts(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A query over `[start, end)` (end open for some shapes), one of several shapes that reuse
/// parts: time buckets and tags, tag and field filters, ORDER BY / LIMIT and HAVING above.
/// First and last values are asked per series (across series, points share times and which
/// one is "first" is not defined).
fn window_query(shape: u64, start: i64, end: i64) -> String {
    let (s, e) = (ts(start), ts(end));
    match shape {
        0 => format!(
            "SELECT date_bin(INTERVAL '1 minute', time) AS t, host, avg(usage) AS a, \
             max(usage) AS mx, min(usage) AS mn, count(*) AS c, sum(n) AS s \
             FROM cpu WHERE time >= '{s}' AND time < '{e}' GROUP BY 1, 2"
        ),
        1 => format!(
            "SELECT date_bin(INTERVAL '5 minutes', time) AS t, host, \
             first_value(usage ORDER BY time) AS f, last_value(usage ORDER BY time) AS l, \
             count(usage) AS c FROM cpu WHERE host IN ('h0', 'h2') AND time >= '{s}' \
             AND time <= '{e}' GROUP BY 1, 2"
        ),
        2 => format!(
            "SELECT host, count(usage) AS c, sum(usage) AS s FROM cpu \
             WHERE time BETWEEN '{s}' AND '{e}' GROUP BY host ORDER BY s DESC, host LIMIT 2"
        ),
        3 => format!(
            "SELECT date_bin(INTERVAL '1 hour', time) AS t, region, sum(usage) AS s, \
             count(*) AS c FROM cpu WHERE time > '{s}' AND usage > 10 \
             GROUP BY 1, 2 HAVING count(*) > 1"
        ),
        4 => format!(
            "SELECT count(*) AS c, count(extra) AS x, sum(n) AS s, max(usage) AS m FROM cpu \
             WHERE time >= '{s}' AND time < '{e}' AND host = 'h{}'",
            // h4 and h5 have no rows: no group, the counts are 0 and the rest null
            start.rem_euclid(6)
        ),
        5 => format!(
            // final rows per part: aggregates that do not merge are reusable too
            "SELECT date_bin(INTERVAL '1 hour', time) AS t, host, median(usage) AS med, \
             count(DISTINCT usage) AS d FROM cpu WHERE time >= '{s}' AND time < '{e}' \
             GROUP BY 1, 2"
        ),
        6 => format!(
            // buckets that straddle parts: partial states merged
            "SELECT date_bin(INTERVAL '7 minutes', time) AS t, region, sum(usage) AS s, \
             count(*) AS c, min(n) AS lo FROM cpu WHERE time >= '{s}' AND time < '{e}' \
             GROUP BY 1, 2"
        ),
        7 => format!(
            // IGNORE NULLS: final rows per part, or (without a bucket) computed whole
            "SELECT {} host, last_value(extra ORDER BY time) IGNORE NULLS AS lx, \
             first_value(extra ORDER BY time) IGNORE NULLS AS fx FROM cpu \
             WHERE time >= '{s}' AND time < '{e}' GROUP BY {}",
            ["", "date_bin(INTERVAL '10 minutes', time) AS t,"][(start % 2) as usize],
            ["host", "t, host"][(start % 2) as usize],
        ),
        ORDERED => format!(
            // the whole answer in the groups' order: compared row by row, in order
            "SELECT date_bin(INTERVAL '1 minute', time) AS t, host, max(usage) AS m FROM cpu \
             WHERE time >= '{s}' AND time < '{e}' GROUP BY 1, 2 ORDER BY 1, 2"
        ),
        8 => format!(
            // ordered by the groups: reused parts come in that order, merged with the rows
            // computed now (a LIMIT makes a wrong order a wrong answer)
            "SELECT date_bin(INTERVAL '1 minute', time) AS t, host, sum(n) AS s FROM cpu \
             WHERE time >= '{s}' AND time < '{e}' GROUP BY 1, 2 ORDER BY 1 {}, 2 LIMIT {}",
            ["ASC", "DESC"][(start % 2) as usize],
            37 + start.rem_euclid(400)
        ),
        _ => format!(
            "SELECT date_bin(INTERVAL '1 minute', time) AS t, max(extra) AS x, sum(n) AS s \
             FROM cpu WHERE time >= '{s}' AND time < '{e}' GROUP BY 1 ORDER BY t DESC LIMIT 30"
        ),
    }
}

/// The shape whose answers are compared in order ([`assert_same_order`]).
const ORDERED: u64 = 10;

/// The cached answer to `sql` has the uncached answer's rows in the same order; returns
/// whether it was PARTIAL.
async fn assert_same_order(f: &Fixture, sql: &str, step: usize) -> bool {
    let request = QueryRequest {
        database: "db".into(),
        sql: sql.into(),
        ..QueryRequest::default()
    };
    let cached = f.try_cached_batches(request).await;
    let uncached = f.try_uncached_batches(sql, &QueryParams::None).await;
    match (cached, uncached) {
        (Ok((verdict, schema, rows)), Ok((expected_schema, expected))) => {
            assert_eq!(
                common::rows_in_order(&schema, &rows),
                common::rows_in_order(&expected_schema, &expected),
                "step {step}: a {verdict:?} answer in another order for {sql}"
            );
            verdict == Verdict::Partial
        }
        (Err(_), Err(_)) => false,
        (cached, uncached) => panic!("step {step}: {sql}: {cached:?} vs {uncached:?}"),
    }
}

/// Points for every host at `time`, integer-valued (sums are exact in any order), the hosts
/// in a random order (so groups are not met in the order an `ORDER BY` puts them).
fn points_at(time: i64, rng: &mut Rng, extra: bool) -> String {
    let first = rng.below(HOSTS);
    (0..HOSTS)
        .map(|i| (first + HOSTS - i) % HOSTS)
        .map(|h| {
            let x = if extra {
                format!(",extra={}", rng.below(9))
            } else {
                String::new()
            };
            format!(
                "cpu,host=h{h},region=r{} usage={},n={}i{x} {time}\n",
                h % 2,
                rng.below(100),
                rng.below(1000)
            )
        })
        .collect()
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A retention period whose cutoff falls on the hour `hours` after [`BASE`] (cutoffs of
/// periods this long move in whole hours, so it stays put while the test runs unless the
/// wall clock crosses an hour).
fn retention_from(hours: i64) -> RetentionPeriod {
    let keep_ns = now_ns() - (BASE + hours * HOUR) + 30 * MINUTE;
    RetentionPeriod::of(Duration::from_secs((keep_ns / 1_000_000_000) as u64)).unwrap()
}

#[tokio::test]
async fn every_partial_answer_equals_an_uncached_execution_at_the_same_point() {
    let mut rng = Rng(common::seed());
    let f = Fixture::new(CacheConfig {
        capacity_bytes: 64 << 20,
        max_entry_bytes: 4 << 20,
        ..CacheConfig::for_tests()
    });
    // eight hours of history, a point per host every two minutes
    let mut head = BASE + 8 * HOUR;
    let mut history = String::new();
    let mut time = BASE;
    while time <= head {
        history.push_str(&points_at(time, &mut rng, false));
        time += 2 * MINUTE;
    }
    f.write(&history).await;
    let (mut partial, mut hits, mut queries, mut extra) = (0, 0, 0, false);
    for step in 0..1500 {
        match rng.below(100) {
            // the dashboard refreshes: a window ending at the head, sometimes unaligned
            0..=44 => {
                let length = [2 * HOUR, 6 * HOUR][rng.below(2) as usize];
                let end = head + MINUTE - rng.below(3) as i64 * 7_000_000_000;
                let shape = rng.below(11);
                let sql = window_query(shape, end - length, end);
                if shape == ORDERED {
                    partial += u64::from(assert_same_order(&f, &sql, step).await);
                    queries += 1;
                    continue;
                }
                let request = QueryRequest {
                    database: "db".into(),
                    sql: sql.clone(),
                    ..QueryRequest::default()
                };
                let cached = f.try_cached(request).await;
                let uncached = f.try_uncached(&sql, &QueryParams::None).await;
                match (&cached, &uncached) {
                    (Ok((verdict, rows)), Ok(expected)) => {
                        assert_eq!(
                            rows, expected,
                            "step {step}: stale or wrong {verdict:?} answer for {sql}"
                        );
                        partial += u64::from(*verdict == Verdict::Partial);
                        hits += u64::from(*verdict == Verdict::Hit);
                    }
                    (Err(_), Err(_)) => {}
                    _ => panic!("step {step}: {sql}: cached {cached:?} vs uncached {uncached:?}"),
                }
                queries += 1;
            }
            // new points at the newest end
            45..=69 => {
                head += MINUTE;
                f.write(&points_at(head, &mut rng, extra)).await;
            }
            // a late point in an old stretch (odd seconds: a new point)
            70..=77 => {
                let late = BASE + rng.below(8 * 60) as i64 * MINUTE + 31_000_000_000;
                let host = rng.below(HOSTS);
                f.write(&format!(
                    "cpu,host=h{host},region=r{} usage={},n=1i {late}\n",
                    host % 2,
                    rng.below(100)
                ))
                .await;
            }
            // an old point rewritten (same series and time: the later write wins)
            78..=85 => {
                let old = BASE + rng.below(4 * 60) as i64 * 2 * MINUTE;
                let host = rng.below(HOSTS);
                f.write(&format!(
                    "cpu,host=h{host},region=r{} usage={},n=7i {old}\n",
                    host % 2,
                    rng.below(100)
                ))
                .await;
            }
            86 | 87 => {
                extra = true;
                f.write(&points_at(head, &mut rng, true)).await;
            }
            88..=90 => {
                f.store.persist_now().unwrap();
            }
            91 => {
                f.store.persist_now().unwrap();
                let _ = f.store.compact_now(CompactionScope::default());
            }
            92..=94 => {
                let retention = match rng.below(3) {
                    0 => None,
                    _ => Some(retention_from(1 + rng.below(6) as i64)),
                };
                f.store.set_retention("db", retention).unwrap();
            }
            95 if step > 700 => {
                f.store.drop_table("db", "cpu").unwrap();
                // written again: the same stretches of time, new rows
                f.write(&points_at(head - 3 * HOUR, &mut rng, false)).await;
                f.write(&points_at(head, &mut rng, false)).await;
            }
            _ => {}
        }
    }
    let stats = f.service.stats();
    eprintln!("{queries} queries, {partial} partial, {hits} hits: {stats:?}");
    assert!(
        partial > 150,
        "too few partial answers to test anything: {stats:?}"
    );
    assert!(
        stats.part_rows_reused > 0 && stats.partial_hits == partial,
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_partial_answer_misses_a_write_acknowledged_before_the_query() {
    let f = Arc::new(Fixture::new(CacheConfig::for_tests()));
    // two hours of history, one point a minute
    let history: String = (0..120)
        .map(|m| format!("ticks,writer=w0 n=1i {}\n", BASE + m * MINUTE))
        .collect();
    f.write(&history).await;
    let acknowledged = Arc::new(AtomicU64::new(120));
    let started = Arc::new(AtomicU64::new(120));
    let writers: Vec<_> = (0..2i64)
        .map(|w| {
            let (f, acknowledged, started) = (f.clone(), acknowledged.clone(), started.clone());
            tokio::spawn(async move {
                for i in 0..300i64 {
                    started.fetch_add(1, Ordering::SeqCst);
                    // alternately the newest end and an old stretch: both must be seen
                    let time = match i % 2 {
                        0 => BASE + 2 * HOUR + i * 1_000_000 + w,
                        _ => BASE + (i % 120) * MINUTE + 7_000 + i * 10 + w,
                    };
                    f.write(&format!("ticks,writer=w{} n=1i {time}\n", w + 1))
                        .await;
                    acknowledged.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let sql = format!(
        "SELECT date_bin(INTERVAL '1 minute', time) AS t, count(*) AS c FROM ticks \
         WHERE time >= '{}' AND time < '{}' GROUP BY 1",
        ts(BASE),
        ts(BASE + 3 * HOUR)
    );
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (f, acknowledged, started, sql) = (
                f.clone(),
                acknowledged.clone(),
                started.clone(),
                sql.clone(),
            );
            tokio::spawn(async move {
                let mut partial = 0;
                while acknowledged.load(Ordering::SeqCst) < 720 {
                    let before = acknowledged.load(Ordering::SeqCst);
                    let (verdict, rows) = f.cached(&sql, "").await;
                    let seen: u64 = rows[1..]
                        .iter()
                        .map(|r| r.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
                        .sum();
                    let could_see = started.load(Ordering::SeqCst);
                    assert!(
                        seen >= before,
                        "stale {verdict:?}: {seen} rows, {before} acknowledged before"
                    );
                    assert!(seen <= could_see, "{seen} rows but only {could_see} writes");
                    partial += u64::from(verdict == Verdict::Partial);
                    tokio::task::yield_now().await;
                }
                partial
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut partial = 0;
    for reader in readers {
        partial += reader.await.unwrap();
    }
    eprintln!(
        "partial answers under concurrent writes: {partial}; {:?}",
        f.service.stats()
    );
    assert!(partial > 0, "no answer reused a part");
    let (_, rows) = f.cached(&sql, "").await;
    let total: u64 = rows[1..]
        .iter()
        .map(|r| r.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 720);
}

//! Differential test of rollups: random rollup definitions over random writes (late and
//! out-of-order points, rewrites of earlier points), persists, compactions and restarts;
//! after every step random queries are answered with routing on and off (`skip_rollups`), and
//! the answers must be equal, whatever the rollups have caught up with. Once they have caught
//! up, the queries made to fit a rollup must be routed to one (`EXPLAIN` says so and the plan
//! scans it). Also: hostile definitions are refused with their reason, retention and drops
//! keep rollups right, and a rollup reads as a table.
//!
//! Field values are multiples of 1/4: their sums are exact in any order, so routed and raw
//! answers compare as text.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{rows, rows_with, write, Rng};
use quiver_query::QueryControl;
use quiver_query::{ExecuteOptions, QueryEngine, QueryOptions, RollupError};
use quiver_storage::{CompactionScope, RetentionPeriod, Store, StoreLimits, StoreOptions};

const MINUTE: i64 = 60_000_000_000;
/// 2024-01-01T00:00:00Z: data lies in closed buckets, which rollups compute at once.
const START: i64 = 1_704_067_200_000_000_000;
/// Points are spread over this many minutes (three days).
const SPAN_MINUTES: u64 = 3 * 24 * 60;

fn options(dir: &Path) -> StoreOptions {
    let mut options = StoreOptions::for_tests(dir);
    options.persist.row_group_rows = 64;
    options.compaction.target_file_bytes = 8192;
    options
}

fn open(dir: &Path) -> (Arc<Store>, QueryEngine) {
    // the previous engine's maintenance task lets go of the store when it is next polled
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let store = loop {
        match Store::open(StoreLimits::default(), options(dir)) {
            Ok((store, _)) => break store,
            Err(e) if std::time::Instant::now() < deadline => {
                assert!(e.to_string().contains("in use"), "{e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let engine = QueryEngine::new(
        store.clone(),
        QueryOptions {
            target_partitions: 2,
            ..QueryOptions::default()
        },
    )
    .unwrap();
    (store, engine)
}

/// `n` random points of `cpu`, at `minutes` (a range of minutes from [`START`]). Each
/// series has its own nanosecond within a second, so no two series share a time (`first_value`
/// has no ties); points that land on an earlier point's second rewrite it.
fn points(rng: &mut Rng, n: usize, minutes: std::ops::Range<u64>) -> String {
    let mut lines = String::new();
    for _ in 0..n {
        let minute = minutes.start + rng.below(minutes.end - minutes.start);
        let second = rng.below(60);
        let host = rng.below(4);
        let region = rng.below(3);
        let series = (host * 3 + region) as i64;
        let time = START + minute as i64 * MINUTE + second as i64 * 1_000_000_000 + series;
        let mut line = format!("cpu,host=h{host}");
        if region < 2 {
            line.push_str(&format!(",region=r{region}"));
        }
        let usage = rng.below(400) as f64 / 4.0;
        let mut fields = vec![format!("usage={usage}")];
        if rng.below(3) != 0 {
            fields.push(format!("count={}i", rng.below(1000)));
        }
        lines.push_str(&format!("{line} {} {time}\n", fields.join(",")));
    }
    lines
}

/// A random rollup definition: bucket, tags, aggregates and maybe a tag filter.
struct Definition {
    name: String,
    bucket_minutes: i64,
    origin_minutes: i64,
    tags: Vec<&'static str>,
    aggregates: Vec<&'static str>,
    filter: Option<&'static str>,
}

const AGGREGATES: &[&str] = &[
    "sum(usage)",
    "count(usage)",
    "count(*)",
    "min(usage)",
    "max(usage)",
    "avg(usage)",
    "sum(count)",
    "max(count)",
    "first_value(usage ORDER BY time)",
    "last_value(count ORDER BY time)",
];

impl Definition {
    fn random(rng: &mut Rng, name: &str) -> Self {
        let bucket_minutes = [5, 10, 30, 60][rng.below(4) as usize];
        let origin_minutes = if rng.below(3) == 0 { 5 } else { 0 };
        let tags = match rng.below(4) {
            0 => vec![],
            1 => vec!["host"],
            2 => vec!["region"],
            _ => vec!["host", "region"],
        };
        let mut aggregates: Vec<&str> = AGGREGATES
            .iter()
            .copied()
            .filter(|_| rng.below(2) == 0)
            .collect();
        if aggregates.is_empty() {
            aggregates.push("count(*)");
        }
        let filter = match rng.below(4) {
            0 => Some("host <> 'h3'"),
            1 if tags.contains(&"region") => Some("region = 'r1'"),
            _ => None,
        };
        Definition {
            name: name.to_string(),
            bucket_minutes,
            origin_minutes,
            tags,
            aggregates,
            filter,
        }
    }

    fn sql(&self) -> String {
        let mut select = vec![format!(
            "date_bin(INTERVAL '{} minutes', time, TIMESTAMP '1970-01-01T00:{:02}:00Z') AS time",
            self.bucket_minutes, self.origin_minutes
        )];
        select.extend(self.tags.iter().map(|t| t.to_string()));
        select.extend(
            self.aggregates
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{a} AS a{i}")),
        );
        let filter = self
            .filter
            .map(|f| format!(" WHERE {f}"))
            .unwrap_or_default();
        let groups: Vec<String> = (1..=1 + self.tags.len()).map(|i| i.to_string()).collect();
        format!(
            "SELECT {} FROM cpu{filter} GROUP BY {}",
            select.join(", "),
            groups.join(", ")
        )
    }

    /// A query this rollup answers: coarser aligned buckets (or none), a subset of its tags
    /// and aggregates, its filter, maybe a tag filter and a time range.
    fn routable_query(&self, rng: &mut Rng) -> String {
        let multiple = [1, 2, 6][rng.below(3) as usize];
        let mut select = Vec::new();
        let mut groups = Vec::new();
        if rng.below(4) != 0 {
            select.push(format!(
                "date_bin(INTERVAL '{} minutes', time, TIMESTAMP '1970-01-01T00:{:02}:00Z') AS b",
                self.bucket_minutes * multiple,
                self.origin_minutes
            ));
            groups.push("b".to_string());
        }
        for tag in &self.tags {
            if rng.below(2) == 0 {
                select.push(tag.to_string());
                groups.push(tag.to_string());
            }
        }
        let chosen: Vec<&str> = self
            .aggregates
            .iter()
            .copied()
            .filter(|_| rng.below(2) == 0)
            .collect();
        select.extend(if chosen.is_empty() {
            vec![self.aggregates[0].to_string()]
        } else {
            chosen.iter().map(|a| a.to_string()).collect()
        });
        let mut conditions: Vec<String> = self.filter.iter().map(|f| f.to_string()).collect();
        if self.tags.contains(&"host") && rng.below(3) == 0 {
            conditions.push(format!("host = 'h{}'", rng.below(4)));
        }
        if rng.below(2) == 0 {
            let from = rng.below(SPAN_MINUTES);
            let to = from + 1 + rng.below(SPAN_MINUTES);
            conditions.push(format!(
                "time >= TIMESTAMP '2024-01-01T00:00:00Z' + INTERVAL '{from} minutes' \
                 AND time < TIMESTAMP '2024-01-01T00:00:00Z' + INTERVAL '{to} minutes'"
            ));
        }
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        };
        let group_by = match groups.is_empty() {
            true => String::new(),
            false => format!(" GROUP BY {}", groups.join(", ")),
        };
        format!("SELECT {} FROM cpu{filter}{group_by}", select.join(", "))
    }
}

/// Queries no rollup of [`Definition::random`] answers (a bucket of 7 minutes, a field
/// filter, a median): checked for equal answers all the same.
const OTHER_QUERIES: &[&str] = &[
    "SELECT date_bin(INTERVAL '7 minutes', time) AS b, max(usage) FROM cpu GROUP BY b",
    "SELECT host, sum(usage) FROM cpu WHERE usage > 50 GROUP BY host",
    "SELECT region, median(usage) FROM cpu GROUP BY region",
    "SELECT count(*) FROM cpu",
];

fn raw_only() -> ExecuteOptions {
    ExecuteOptions {
        control: QueryControl {
            skip_rollups: true,
            ..QueryControl::default()
        },
        ..ExecuteOptions::default()
    }
}

async fn assert_same_answers(engine: &QueryEngine, queries: &[String], when: &str) {
    for sql in queries {
        let routed = rows(engine, sql)
            .await
            .unwrap_or_else(|e| panic!("{when}: {sql}: {e}"));
        let raw = rows_with(engine, sql, &raw_only()).await.unwrap();
        if routed != raw {
            let only_routed: Vec<_> = routed.iter().filter(|r| !raw.contains(r)).collect();
            let only_raw: Vec<_> = raw.iter().filter(|r| !routed.contains(r)).collect();
            panic!(
                "{when}: {sql}\n{} routed rows, {} raw rows\nonly routed: {only_routed:#?}\nonly raw: {only_raw:#?}\n{}",
                routed.len(),
                raw.len(),
                explain(engine, sql).await
            );
        }
    }
}

/// Waits until every rollup has rolled up every closed bucket.
async fn caught_up(engine: &QueryEngine) {
    for _ in 0..600 {
        let list = engine.rollups().list(Some("db"));
        // lag is 0 once nothing closed waits to be rolled up
        if list
            .iter()
            .all(|r| r.stats.state == "ready" && r.stats.lag_seconds == 0.0)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "rollups did not catch up: {:?}",
        engine.rollups().list(Some("db"))
    );
}

async fn explain(engine: &QueryEngine, sql: &str) -> String {
    rows(engine, &format!("EXPLAIN {sql}"))
        .await
        .unwrap()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_answers_equal_raw_answers_through_writes_restarts_and_compaction() {
    for seed in [7u64, 1234, 99_991] {
        let mut rng = Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut engine) = open(dir.path());
        write(&store, &points(&mut rng, 3000, 0..SPAN_MINUTES)).await;
        let definitions: Vec<Definition> = (0..3)
            .map(|i| Definition::random(&mut rng, &format!("r{i}")))
            .collect();
        for d in &definitions {
            engine
                .rollups()
                .create("db", &d.name, &d.sql())
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", d.sql()));
        }
        let mut queries: Vec<String> = OTHER_QUERIES.iter().map(|q| q.to_string()).collect();
        for d in &definitions {
            queries.extend((0..4).map(|_| d.routable_query(&mut rng)));
        }
        assert_same_answers(&engine, &queries, &format!("seed {seed}, backfilling")).await;
        for step in 0..8 {
            match rng.below(6) {
                0 => {
                    // late points into old buckets; in a window this narrow most rewrite
                    // an earlier point (same series, same second)
                    let from = rng.below(SPAN_MINUTES - 2);
                    write(&store, &points(&mut rng, 200, from..from + 2)).await;
                }
                1 => {
                    store.persist_now().unwrap();
                }
                2 => {
                    store.persist_now().unwrap();
                    store.compact_now(CompactionScope::default()).unwrap();
                }
                3 => {
                    store.close();
                    drop(engine);
                    drop(store);
                    (store, engine) = open(dir.path());
                }
                _ => {
                    write(&store, &points(&mut rng, 300, 0..SPAN_MINUTES)).await;
                }
            }
            let when = format!("seed {seed}, step {step}");
            assert_same_answers(&engine, &queries, &format!("{when}, at once")).await;
            caught_up(&engine).await;
            assert_same_answers(&engine, &queries, &format!("{when}, caught up")).await;
        }
        for d in &definitions {
            for _ in 0..3 {
                let sql = d.routable_query(&mut rng);
                let plan = explain(&engine, &sql).await;
                assert!(
                    plan.contains(": used for cpu") && plan.contains("TableScan: rollup:"),
                    "seed {seed}: {sql} is not routed:\n{plan}"
                );
            }
        }
        store.close();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_a_rollup_cannot_keep_exactly_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path());
    write(
        &store,
        "cpu,host=a usage=1,note=\"x\" 1\nmem,host=a used=2 1\n",
    )
    .await;
    let refused = [
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, host, median(usage) FROM cpu GROUP BY 1, 2", "median cannot be maintained exactly"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, approx_percentile_cont(usage, 0.9) FROM cpu GROUP BY 1", "cannot be maintained exactly"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM cpu WHERE usage > 1 GROUP BY 1", "is a field"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM cpu WHERE time > now() - INTERVAL '1 day' GROUP BY 1", "now()"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM cpu WHERE time > '2024-01-01T00:00:00Z' GROUP BY 1", "covers all time"),
        ("SELECT date_bin(INTERVAL '1 hour', cpu.time) AS time, max(cpu.usage) FROM cpu JOIN mem ON cpu.host = mem.host GROUP BY 1", "joins"),
        ("SELECT date_bin(INTERVAL '1 month', time) AS time, max(usage) FROM cpu GROUP BY 1", "months vary"),
        ("SELECT host, max(usage) FROM cpu GROUP BY host", "date_bin"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, note, count(*) FROM cpu GROUP BY 1, 2", "is a field"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, count(DISTINCT host) FROM cpu GROUP BY 1", "DISTINCT"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM cpu GROUP BY 1 ORDER BY 1", "ORDER BY"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM cpu GROUP BY 1 HAVING max(usage) > 1", "HAVING"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM (SELECT time, usage * 2 AS usage FROM cpu) GROUP BY 1", "computed"),
        ("SELECT date_bin(INTERVAL '1 hour', time) AS time, max(usage) FROM nope GROUP BY 1", "nope"),
        ("DROP TABLE cpu", "rollup is SELECT"),
        ("SELEKT 1", "SELEKT"),
    ];
    for (sql, reason) in refused {
        match engine.rollups().create("db", "bad", sql).await {
            Err(RollupError::Invalid(message)) => {
                assert!(message.contains(reason), "{sql}: {message}")
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    let good =
        "SELECT date_bin(INTERVAL '1 hour', time) AS time, host, max(usage) FROM cpu GROUP BY 1, 2";
    let taken = engine
        .rollups()
        .create("db", "mem", good)
        .await
        .unwrap_err();
    assert!(taken.to_string().contains("already exists"), "{taken}");
    let missing = engine
        .rollups()
        .create("nodb", "x", good)
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("does not exist"), "{missing}");
    assert!(engine.rollups().list(None).is_empty());
    // a table's rollups are bounded: each is maintained from every write to it
    for i in 0..quiver_storage::MAX_ROLLUPS_PER_TABLE {
        engine
            .rollups()
            .create("db", &format!("r{i}"), good)
            .await
            .unwrap();
    }
    let over = engine
        .rollups()
        .create("db", "one_more", good)
        .await
        .unwrap_err();
    assert!(
        over.to_string().contains("exceed the limit of 16 rollups"),
        "{over}"
    );
    store.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_and_reading_a_rollup_as_a_table_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path());
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap();
    let mut lines = String::new();
    for i in 0..600i64 {
        // every minute of the last ten hours, two hosts
        let time = now - (i + 1) * MINUTE;
        lines.push_str(&format!("cpu,host=h{} usage={} {time}\n", i % 2, i % 40));
    }
    write(&store, &lines).await;
    let sql = "SELECT date_bin(INTERVAL '10 minutes', time) AS time, host, sum(usage) AS s, count(*) AS n FROM cpu GROUP BY 1, 2";
    engine.rollups().create("db", "cpu_10m", sql).await.unwrap();
    caught_up(&engine).await;
    let queries: Vec<String> = [
        "SELECT host, sum(usage), count(*) FROM cpu GROUP BY host",
        "SELECT date_bin(INTERVAL '1 hour', time) AS b, sum(usage) FROM cpu GROUP BY b",
        "SELECT sum(usage) FROM cpu WHERE time > now() - INTERVAL '3 hours'",
    ]
    .iter()
    .map(|q| q.to_string())
    .collect();
    assert_same_answers(&engine, &queries, "before retention").await;
    assert!(explain(&engine, &queries[0])
        .await
        .contains("rollup cpu_10m: used"));
    // the rollup reads as a table of the database, exactly as its statement
    assert_eq!(
        rows(&engine, "SELECT * FROM cpu_10m").await,
        rows_with(&engine, sql, &raw_only()).await
    );
    store
        .set_retention("db", Some(RetentionPeriod::parse("4h").unwrap()))
        .unwrap();
    assert_same_answers(&engine, &queries, "with a retention period").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_same_answers(&engine, &queries, "after expiry").await;
    // dropping the table drops its rollups; a new table of that name starts without any
    tokio::task::block_in_place(|| store.drop_table("db", "cpu")).unwrap();
    assert!(engine.rollups().list(Some("db")).is_empty());
    write(&store, "cpu,host=h9 usage=3 1000\n").await;
    assert_same_answers(&engine, &queries[..2], "after the drop").await;
    assert!(!explain(&engine, &queries[0]).await.contains("used for"));
    assert!(rows(&engine, "SELECT * FROM cpu_10m").await.is_err());
    store.close();
}

/// Writers land points in old, covered buckets while readers ask the same routed query again
/// and again (run from its kept physical plan while nothing changes): no answer misses a
/// point acknowledged before the query started, and none counts more than were written. A
/// kept plan whose rollup marked a bucket changed after the plan read its coverage is not run
/// again (the write's rows may already have been in the plan's snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_routed_answer_misses_a_write_acknowledged_before_the_query() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path());
    // one point a minute for a day, then a rollup of hourly counts
    let history: String = (0..1440)
        .map(|m| format!("ticks,writer=w0 n=1i {}\n", START + m * MINUTE))
        .collect();
    write(&store, &history).await;
    engine
        .rollups()
        .create(
            "db",
            "ticks_1h",
            "SELECT date_bin(INTERVAL '1 hour', time) AS time, writer, count(*) AS c \
             FROM ticks GROUP BY 1, 2",
        )
        .await
        .unwrap();
    caught_up(&engine).await;
    let sql = "SELECT date_bin(INTERVAL '1 day', time) AS d, count(*) AS c FROM ticks GROUP BY 1";
    assert!(explain(&engine, sql)
        .await
        .contains("rollup ticks_1h: used"));
    let engine = Arc::new(engine);
    let acknowledged = Arc::new(AtomicU64::new(1440));
    let started = Arc::new(AtomicU64::new(1440));
    let writers: Vec<_> = (0..2i64)
        .map(|w| {
            let (store, acknowledged, started) =
                (store.clone(), acknowledged.clone(), started.clone());
            tokio::spawn(async move {
                for i in 0..500i64 {
                    started.fetch_add(1, Ordering::SeqCst);
                    // a new point (odd nanoseconds) in an old, covered hour
                    let time = START + (i * 37 % 1440) * MINUTE + 2 * i + 1 + w * 1000;
                    write(&store, &format!("ticks,writer=w{} n=1i {time}\n", w + 1)).await;
                    acknowledged.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, acknowledged, started) =
                (engine.clone(), acknowledged.clone(), started.clone());
            tokio::spawn(async move {
                let mut answers = 0;
                while acknowledged.load(Ordering::SeqCst) < 1440 + 1000 {
                    let before = acknowledged.load(Ordering::SeqCst);
                    let answer = rows(&engine, sql).await.unwrap();
                    let seen: u64 = answer
                        .iter()
                        .map(|r| r.rsplit("c=").next().unwrap().parse::<u64>().unwrap())
                        .sum();
                    let could_see = started.load(Ordering::SeqCst);
                    assert!(
                        seen >= before,
                        "stale: {seen} points, {before} acknowledged before"
                    );
                    assert!(
                        seen <= could_see,
                        "{seen} points but only {could_see} writes"
                    );
                    answers += 1;
                }
                answers
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
    let answer = rows(&engine, sql).await.unwrap();
    let total: u64 = answer
        .iter()
        .map(|r| r.rsplit("c=").next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 1440 + 1000);
}

/// A routed query merges only the states it asks for, and the remainder read from raw rows
/// computes only those (the scan's projection reaches its aggregate): a rollup keeping four
/// states, asked for one over a range its buckets do not align with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remainder_computes_only_the_states_the_query_merges() {
    let dir = tempfile::tempdir().unwrap();
    let (store, engine) = open(dir.path());
    let history: String = (0..600)
        .map(|m| {
            let time = START + m * MINUTE;
            format!("gauge,writer=w{} a={m},b={m},c={m} {time}\n", m % 3)
        })
        .collect();
    write(&store, &history).await;
    engine
        .rollups()
        .create(
            "db",
            "gauge_1h",
            "SELECT date_bin(INTERVAL '1 hour', time) AS time, writer, max(a) AS top, \
             min(b) AS bottom, sum(c) AS total, count(*) AS n FROM gauge GROUP BY 1, 2",
        )
        .await
        .unwrap();
    caught_up(&engine).await;
    let sql = "SELECT writer, max(a) AS top FROM gauge \
               WHERE time > TIMESTAMP '2024-01-01T00:00:00Z' + INTERVAL '90 minutes' \
               GROUP BY writer ORDER BY writer";
    let plan = explain(&engine, sql).await;
    assert!(plan.contains("rollup gauge_1h: used"), "{plan}");
    let remainder: Vec<&str> = plan
        .lines()
        .filter(|line| line.contains("AggregateExec") && line.contains("date_bin"))
        .collect();
    assert!(!remainder.is_empty(), "no remainder aggregate in\n{plan}");
    for line in remainder {
        assert!(line.contains("max(gauge.a)"), "{line}");
        for unasked in ["min(gauge.b)", "sum(gauge.c)", "count(1)"] {
            assert!(!line.contains(unasked), "{unasked} computed in {line}");
        }
    }
    let routed = rows(&engine, sql).await.unwrap();
    let raw = rows_with(&engine, sql, &raw_only()).await.unwrap();
    assert_eq!(routed, raw);
    assert_eq!(routed.len(), 3);
}

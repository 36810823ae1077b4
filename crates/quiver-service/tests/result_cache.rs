//! The result cache against a real store and engine: verdicts, eager removal of old versions,
//! keys that keep literals, quoted identifiers, parameters and scopes apart, volatile
//! functions, the byte bound, the entry limit, expiry, single-flight, and a query that a write
//! overtakes.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::Fixture;
use datafusion::common::ScalarValue;
use quiver_query::QueryControl;
use quiver_query::QueryParams;
use quiver_service::{
    AnswerBody, CacheConfig, EncodingKey, QueryRequest, Verdict, MAX_ENCODINGS_PER_ENTRY,
};

fn config() -> CacheConfig {
    CacheConfig {
        capacity_bytes: 64 << 20,
        max_entry_bytes: 16 << 20,
        ..CacheConfig::for_tests()
    }
}

const COUNT: &str = "SELECT host, count(*) AS n FROM cpu GROUP BY host ORDER BY host";

#[tokio::test]
async fn a_repeat_hits_until_a_write_and_old_versions_are_removed_at_once() {
    let f = Fixture::new(config());
    f.write("cpu,host=a v=1 1\ncpu,host=b v=2 2\n").await;
    let (verdict, first) = f.cached(COUNT, "").await;
    assert_eq!(verdict, Verdict::Miss);
    let (verdict, again) = f.cached(COUNT, "").await;
    assert_eq!(verdict, Verdict::Hit);
    assert_eq!(first, again);
    assert_eq!(f.service.stats().entries, 1);

    f.write("cpu,host=a v=3 3\n").await;
    // The write is acknowledged: its entry of the old version is gone already.
    let stats = f.service.stats();
    assert_eq!(stats.entries, 0, "{stats:?}");
    assert_eq!(stats.invalidations, 1);
    let (verdict, after) = f.cached(COUNT, "").await;
    assert_eq!(verdict, Verdict::Miss);
    assert_ne!(after, first);
    assert_eq!(after, f.uncached(COUNT, &QueryParams::None).await);

    // A write to another table leaves this entry alone.
    f.write("mem,host=a free=1 1\n").await;
    assert_eq!(f.cached(COUNT, "").await.0, Verdict::Hit);
    let stats = f.service.stats();
    assert_eq!((stats.hits, stats.misses, stats.executions), (2, 2, 2));
}

#[tokio::test]
async fn formatting_does_not_matter_but_literals_and_quoted_identifiers_do() {
    let f = Fixture::new(config());
    f.write("people,name=Bob,Host=X,host=y v=1 1\npeople,name=bob,Host=Z,host=y v=2 2\n")
        .await;
    let upper = "SELECT v FROM people WHERE name = 'Bob'";
    let lower = "SELECT v FROM people WHERE name = 'bob'";
    let (v1, bob) = f.cached(upper, "").await;
    let (v2, lower_bob) = f.cached(lower, "").await;
    assert_eq!((v1, v2), (Verdict::Miss, Verdict::Miss));
    assert_ne!(bob, lower_bob);
    let reformatted = "select  V\n from PEOPLE -- same query\n where NAME='Bob';";
    let (v3, same) = f.cached(reformatted, "").await;
    assert_eq!(v3, Verdict::Hit);
    assert_eq!(same, bob);

    let (q1, quoted_upper) = f.cached("SELECT \"Host\" FROM people ORDER BY 1", "").await;
    let (q2, quoted_lower) = f.cached("SELECT \"host\" FROM people ORDER BY 1", "").await;
    assert_eq!((q1, q2), (Verdict::Miss, Verdict::Miss));
    assert_ne!(quoted_upper, quoted_lower);
    // Unquoted `HOST` folds to `host`: the same answer as `"host"`, computed under its own key.
    let (q3, folded) = f.cached("SELECT HOST FROM people ORDER BY 1", "").await;
    assert_eq!(q3, Verdict::Miss);
    assert_eq!(folded, quoted_lower);
}

#[tokio::test]
async fn scopes_and_parameters_never_share_an_entry() {
    let f = Fixture::new(config());
    f.write("cpu,host=a v=1 1\ncpu,host=b v=2 2\n").await;
    assert_eq!(f.cached(COUNT, "alice").await.0, Verdict::Miss);
    assert_eq!(f.cached(COUNT, "bob").await.0, Verdict::Miss);
    assert_eq!(f.cached(COUNT, "alice").await.0, Verdict::Hit);
    assert_eq!(f.cached(COUNT, "bob").await.0, Verdict::Hit);

    let sql = "SELECT v FROM cpu WHERE host = $host";
    let with = |host: &str| QueryRequest {
        database: "db".into(),
        sql: sql.into(),
        params: QueryParams::Named(BTreeMap::from([(
            "host".to_string(),
            ScalarValue::Utf8(Some(host.into())),
        )])),
        ..QueryRequest::default()
    };
    let (va, a) = f.cached_with(with("a")).await;
    let (vb, b) = f.cached_with(with("b")).await;
    assert_eq!((va, vb), (Verdict::Miss, Verdict::Miss));
    assert_ne!(a, b);
    assert_eq!(a, f.uncached(sql, &with("a").params).await);
    assert_eq!(f.cached_with(with("a")).await, (Verdict::Hit, a));
}

#[tokio::test]
async fn volatile_and_metadata_queries_bypass_and_no_cache_stores_nothing() {
    let f = Fixture::new(config());
    f.write("cpu,host=a v=1 1\n").await;
    for sql in [
        "SELECT random() AS r",
        "SELECT v, random() AS r FROM cpu",
        "SELECT now() AS t",
        "SELECT current_date AS d",
        "SELECT table_name FROM information_schema.tables",
        "SHOW TABLES",
        "EXPLAIN SELECT * FROM cpu",
    ] {
        for _ in 0..2 {
            assert_eq!(f.cached(sql, "").await.0, Verdict::Bypass, "{sql}");
        }
    }
    // a rolling window is not cached whole, but its time parts are (all empty here: the
    // only point is from 1970)
    let window = "SELECT count(*) FROM cpu WHERE time > now() - INTERVAL '1 hour'";
    let (first, counted) = f.cached(window, "").await;
    assert_eq!((first, counted[1].as_str()), (Verdict::Bypass, "0"));
    let (again, recounted) = f.cached(window, "").await;
    assert_eq!((again, recounted), (Verdict::Partial, counted));
    // `cache_reuse_parts = false`: computed whole every time
    let whole = Fixture::new(CacheConfig {
        reuse_parts: false,
        ..config()
    });
    whole.write("cpu,host=a v=1 1\n").await;
    for _ in 0..2 {
        let (verdict, rows) = whole.cached(window, "").await;
        assert_eq!((verdict, rows[1].as_str()), (Verdict::Bypass, "0"));
    }
    assert_eq!(whole.service.stats().parts, 0);
    let request = QueryRequest {
        database: "db".into(),
        sql: COUNT.into(),
        no_cache: true,
        control: Default::default(),
        ..QueryRequest::default()
    };
    assert_eq!(f.cached_with(request.clone()).await.0, Verdict::Bypass);
    assert_eq!(f.service.stats().entries, 0);
    assert_eq!(f.cached(COUNT, "").await.0, Verdict::Miss);
    assert_eq!(f.cached_with(request).await.0, Verdict::Bypass);
    assert_eq!(f.cached(COUNT, "").await.0, Verdict::Hit);

    let disabled = Fixture::new(CacheConfig {
        enabled: false,
        ..config()
    });
    disabled.write("cpu,host=a v=1 1\n").await;
    for _ in 0..2 {
        assert_eq!(disabled.cached(COUNT, "").await.0, Verdict::Bypass);
    }
}

#[tokio::test]
async fn table_functions_are_not_tables_and_their_answers_are_cached() {
    let f = Fixture::new(config());
    f.write("cpu,host=a v=1 1\n").await;
    let sql = "SELECT count(*) AS n FROM generate_series(1, 1000) AS s, cpu";
    let (first, rows) = f.cached(sql, "").await;
    assert_eq!(first, Verdict::Miss);
    assert_eq!(rows[1], "1000");
    assert_eq!(f.cached(sql, "").await.0, Verdict::Hit);
    // the table it joins still invalidates it
    f.write("cpu,host=b v=1 1\n").await;
    let (verdict, rows) = f.cached(sql, "").await;
    assert_eq!((verdict, rows[1].as_str()), (Verdict::Miss, "2000"));
}

#[tokio::test]
async fn clock_queries_are_cached_per_rounded_instant_when_asked() {
    let f = Fixture::new(CacheConfig {
        clock_granularity: Some(Duration::from_secs(3600)),
        ..config()
    });
    f.write("cpu,host=a v=1 1\n").await;
    let sql = "SELECT date_trunc('hour', now()) = now() AS rounded, count(*) AS n FROM cpu";
    let (first, rows) = f.cached(sql, "").await;
    // An hour boundary between the two requests would make the second a miss; retry once.
    let (second, again) = f.cached(sql, "").await;
    assert_eq!(first, Verdict::Miss);
    assert!(
        second == Verdict::Hit || f.cached(sql, "").await.0 == Verdict::Hit,
        "clock-dependent query not cached"
    );
    assert_eq!(rows, again);
    // The query ran with the clock rounded down to the hour.
    assert_eq!(rows[1], "true 1", "{rows:?}");
    assert_eq!(f.cached("SELECT random()", "").await.0, Verdict::Bypass);
}

#[tokio::test]
async fn results_over_the_entry_limit_stream_through_uncached() {
    let f = Fixture::new(CacheConfig {
        max_entry_bytes: 64 << 10,
        ..config()
    });
    let mut lp = String::new();
    for i in 0..5000 {
        lp.push_str(&format!("cpu,host=h{} v={i} {i}\n", i % 7));
    }
    f.write(&lp).await;
    let sql = "SELECT host, v, time FROM cpu";
    for _ in 0..2 {
        let answer = f
            .service
            .query(&QueryRequest {
                database: "db".into(),
                sql: sql.into(),
                ..QueryRequest::default()
            })
            .await
            .unwrap();
        assert_eq!(answer.verdict, Verdict::Miss);
        let AnswerBody::Streamed(output) = answer.body else {
            panic!("a result over the limit must stream");
        };
        let batches: Vec<_> = futures::TryStreamExt::try_collect(output.stream)
            .await
            .unwrap();
        let rows: usize = batches
            .iter()
            .map(|b: &arrow::array::RecordBatch| b.num_rows())
            .sum();
        assert_eq!(rows, 5000);
    }
    let stats = f.service.stats();
    assert_eq!((stats.entries, stats.too_large), (0, 2), "{stats:?}");
    assert_eq!(
        f.cached("SELECT count(*) FROM cpu", "").await.0,
        Verdict::Miss
    );
    assert_eq!(
        f.cached("SELECT count(*) FROM cpu", "").await.0,
        Verdict::Hit
    );
}

#[tokio::test]
async fn a_flood_of_distinct_queries_stays_within_the_byte_capacity() {
    let capacity = 256 << 10;
    let f = Fixture::new(CacheConfig {
        capacity_bytes: capacity,
        max_entry_bytes: 64 << 10,
        ..config()
    });
    let mut lp = String::new();
    for i in 0..2000 {
        lp.push_str(&format!("cpu,host=h{} v={i} {i}\n", i % 13));
    }
    f.write(&lp).await;
    let mut max_bytes = 0;
    for i in 0..600 {
        let sql = format!(
            "SELECT host, v FROM cpu WHERE v >= {} ORDER BY v",
            1500 + i % 500
        );
        let (verdict, _) = f.cached(&sql, "").await;
        assert_ne!(verdict, Verdict::Bypass);
        let stats = f.service.stats();
        max_bytes = max_bytes.max(stats.bytes);
        assert!(stats.bytes <= capacity, "{stats:?}");
    }
    let stats = f.service.stats();
    assert!(stats.evictions > 0, "{stats:?}");
    assert!(stats.inserts > stats.entries, "{stats:?}");
    assert!(
        max_bytes > capacity / 2,
        "the flood never filled the cache: {max_bytes}"
    );
}

#[tokio::test]
async fn entries_expire_after_their_ttl() {
    let f = Fixture::new(CacheConfig {
        ttl: Duration::from_millis(300),
        ..config()
    });
    f.write("cpu,host=a v=1 1\n").await;
    assert_eq!(f.cached(COUNT, "").await.0, Verdict::Miss);
    assert_eq!(f.cached(COUNT, "").await.0, Verdict::Hit);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(f.cached(COUNT, "").await.0, Verdict::Miss);
    // Expired entries are also dropped from memory (moka's timer wheel ticks about once a
    // second) and counted.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stats = f.service.stats();
    assert_eq!(stats.entries, 0, "{stats:?}");
    assert!(stats.expirations >= 1, "{stats:?}");
}

/// Output formats of an imagined protocol.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Body {
    Json,
    Csv,
}

impl EncodingKey for Body {}

/// Another protocol's formats, whose first value has the same representation as `Body::Json`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OtherProtocol(u8);

impl EncodingKey for OtherProtocol {}

#[tokio::test]
async fn encodings_are_kept_with_the_entry_and_counted_in_its_size() {
    let f = Fixture::new(config());
    f.write("cpu,host=a v=1 1\n").await;
    let request = QueryRequest {
        database: "db".into(),
        sql: COUNT.into(),
        ..QueryRequest::default()
    };
    let AnswerBody::Cached(first) = f.service.query(&request).await.unwrap().body else {
        panic!("small results are cached");
    };
    assert!(f.service.encoding(&first, &Body::Json).is_none());
    let before = f.service.stats().bytes;
    f.service
        .keep_encoding(&first, &Body::Json, bytes::Bytes::from(vec![b'x'; 10_000]));
    let AnswerBody::Cached(hit) = f.service.query(&request).await.unwrap().body else {
        panic!("hits are whole");
    };
    assert_eq!(f.service.encoding(&hit, &Body::Json).unwrap().len(), 10_000);
    assert!(f.service.encoding(&hit, &Body::Csv).is_none());
    assert!(
        f.service.encoding(&hit, &OtherProtocol(0)).is_none(),
        "a key of another type never matches"
    );
    assert!(f.service.stats().bytes >= before + 10_000);
    // a client asking for ever more encodings of one answer (even empty ones) gets a few kept
    let with_one = f.service.stats().bytes;
    for format in 0..20 {
        f.service
            .keep_encoding(&hit, &OtherProtocol(format), bytes::Bytes::new());
    }
    let kept = (0..20)
        .filter(|&format| f.service.encoding(&hit, &OtherProtocol(format)).is_some())
        .count();
    assert_eq!(
        kept,
        MAX_ENCODINGS_PER_ENTRY - 1,
        "one slot was taken by the JSON encoding"
    );
    assert!(
        f.service.stats().bytes > with_one,
        "empty encodings are charged too"
    );
    assert_eq!(f.service.clear(), 1);
    assert_eq!(f.service.stats().entries, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_identical_misses_execute_once() {
    let f = Arc::new(Fixture::new(config()));
    let mut lp = String::new();
    for i in 0..200_000 {
        lp.push_str(&format!("cpu,host=h{} v={i} {i}\n", i % 101));
    }
    f.write(&lp).await;
    let sql = "SELECT host, avg(v) AS a, max(v) AS m FROM cpu GROUP BY host ORDER BY host";
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (f, barrier) = (f.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                f.cached(sql, "").await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let stats = f.service.stats();
    assert_eq!(stats.executions, 1, "{stats:?}");
    assert_eq!(stats.hits + stats.misses, 64, "{stats:?}");
    assert_eq!(stats.misses, 1 + stats.coalesced, "{stats:?}");
    assert!(
        stats.coalesced > 0,
        "no request joined the running query: {stats:?}"
    );
    let expected = f.uncached(sql, &QueryParams::None).await;
    assert_eq!(expected.len(), 102);
    assert!(answers.iter().all(|(_, rows)| *rows == expected));
}

/// A caller never shares an execution run under a shorter time limit than its own: one that
/// set a short `statement_timeout` times out alone, the identical query asked meanwhile
/// without a limit runs on to its answer; the other way round, the limited caller shares the
/// unlimited execution and stops waiting at its own limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_misses_under_different_time_limits_run_apart() {
    let f = Arc::new(Fixture::new(config()));
    f.write("cpu,host=a v=1 1\n").await;
    let sql = "SELECT count(*) AS n FROM generate_series(1, 150000000) t(v) WHERE v % 7 = 0";
    let request = |timeout: Option<Duration>| QueryRequest {
        database: "db".into(),
        sql: sql.into(),
        control: QueryControl {
            timeout,
            timeout_setting: "statement_timeout",
            ..QueryControl::default()
        },
        ..QueryRequest::default()
    };
    let limited = tokio::spawn({
        let (f, request) = (f.clone(), request(Some(Duration::from_millis(200))));
        async move { f.try_cached(request).await }
    });
    // the limited caller's execution is under way when the other arrives
    tokio::time::sleep(Duration::from_millis(50)).await;
    let unlimited = f.try_cached(request(None)).await;
    let limited = limited.await.unwrap();
    assert!(
        limited
            .as_ref()
            .is_err_and(|e| e.contains("statement_timeout")),
        "{limited:?}"
    );
    let (_, rows) = unlimited.expect("the caller without a limit gets its answer");
    assert_eq!(rows, vec!["n:Int64".to_string(), "21428571".to_string()]);
    let stats = f.service.stats();
    assert_eq!((stats.executions, stats.coalesced), (2, 0), "{stats:?}");

    // the other way round, the caller with a limit joins the execution that has none (it
    // lasts long enough) and still stops waiting at its own limit; the execution goes on
    let f = Arc::new(Fixture::new(config()));
    f.write("cpu,host=a v=1 1\n").await;
    let unlimited = tokio::spawn({
        let (f, request) = (f.clone(), request(None));
        async move { f.try_cached(request).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let limited = f
        .try_cached(request(Some(Duration::from_millis(200))))
        .await;
    assert!(
        limited
            .as_ref()
            .is_err_and(|e| e.contains("200ms (statement_timeout)")),
        "{limited:?}"
    );
    let (_, rows) = unlimited.await.unwrap().expect("the execution went on");
    assert_eq!(rows, vec!["n:Int64".to_string(), "21428571".to_string()]);
    let stats = f.service.stats();
    assert_eq!((stats.executions, stats.coalesced), (1, 1), "{stats:?}");
}

#[tokio::test]
async fn a_small_answer_sliced_from_large_buffers_is_stored_compact() {
    let f = Fixture::new(config());
    let mut lp = String::new();
    for i in 0..50_000 {
        lp.push_str(&format!("cpu,host=h{} v={i},w={i}i {i}\n", i % 10));
    }
    f.write(&lp).await;
    let sql = "SELECT * FROM cpu LIMIT 5";
    assert_eq!(f.cached(sql, "").await.0, Verdict::Miss);
    assert_eq!(f.cached(sql, "").await.0, Verdict::Hit);
    let stats = f.service.stats();
    assert_eq!(stats.entries, 1);
    // 5 rows of 4 columns, not the 50,000-row buffer chunk they were sliced from (~1.6 MB)
    assert!(stats.bytes < 32 << 10, "{stats:?}");
}

/// `gate(x)`: returns `x`, but the first call waits until the test opens the gate, so a query
/// can be held in the middle of its execution (after its scan read the table).
#[derive(Debug, Default)]
struct Gate {
    entered: std::sync::atomic::AtomicBool,
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    fn pass(&self) {
        self.entered
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

#[derive(Debug)]
struct GateFunction(Arc<Gate>);

impl quiver_query::SessionSetup for GateFunction {
    fn setup(
        &self,
        ctx: &datafusion::prelude::SessionContext,
        _database: &str,
        _visible: &quiver_model::VisibleDatabases,
    ) -> Result<(), datafusion::error::DataFusionError> {
        use datafusion::arrow::datatypes::DataType;
        use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
        let gate = self.0.clone();
        // Immutable, so that the query stays cacheable.
        ctx.register_udf(create_udf(
            "gate",
            vec![DataType::Float64],
            DataType::Float64,
            Volatility::Immutable,
            Arc::new(move |args: &[ColumnarValue]| {
                gate.pass();
                Ok(args[0].clone())
            }),
        ));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_query_overtaken_by_a_write_is_answered_but_not_stored() {
    let gate = Arc::new(Gate::default());
    let f = Arc::new(Fixture::with_setup(
        config(),
        vec![Arc::new(GateFunction(gate.clone()))],
    ));
    f.write("cpu,host=a v=1 1\ncpu,host=b v=2 2\n").await;
    const HELD: &str = "SELECT sum(gate(v)) AS total FROM cpu";
    let running = tokio::spawn({
        let f = f.clone();
        async move { f.cached(HELD, "").await }
    });
    while !gate.entered.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The query has read the table and is computing: a write is acknowledged meanwhile.
    f.write("cpu,host=c v=4 3\n").await;
    gate.open();
    let (verdict, rows) = running.await.unwrap();
    assert_eq!(verdict, Verdict::Miss);
    assert_eq!(rows[1], "3.0", "the held query answers from what it read");
    let stats = f.service.stats();
    assert_eq!(stats.not_stored_changed, 1, "{stats:?}");
    assert_eq!(stats.entries, 0, "{stats:?}");
    // The next run sees the write, and is stored under the new version.
    let (verdict, rows) = f.cached(HELD, "").await;
    assert_eq!((verdict, rows[1].as_str()), (Verdict::Miss, "7.0"));
    assert_eq!(f.cached(HELD, "").await.0, Verdict::Hit);
}

//! Differential test of reads over buffer ∪ Parquet: the same random writes (overwrites of
//! earlier points, partial fields, a tag that appears later, several days) go to a memory-only
//! store and to a durable store that persists and compacts at random moments and restarts at
//! the end. Every query must return the same rows from both, at every point: before and after
//! each persist and compaction, and after the restart.

mod common;

use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use common::{rows, write, Rng};
use futures::TryStreamExt;
use quiver_query::{QueryEngine, QueryOptions};
use quiver_storage::{CompactionScope, Store, StoreLimits, StoreOptions};

const HOUR: i64 = 3_600_000_000_000;

fn durable_options(dir: &Path) -> StoreOptions {
    let mut options = StoreOptions::for_tests(dir);
    options.wal.segment_bytes = 16 << 10;
    options.persist.row_group_rows = 64;
    // tiny files, so that merges cut their output into several files by time
    options.compaction.target_file_bytes = 4096;
    options.compaction.fanout = 3;
    options.compaction.max_merge_bytes = 1 << 20;
    options
}

fn engine(store: &Arc<Store>) -> QueryEngine {
    QueryEngine::new(
        store.clone(),
        QueryOptions {
            target_partitions: 3,
            ..QueryOptions::default()
        },
    )
    .unwrap()
}

fn random_lines(rng: &mut Rng, step: usize) -> String {
    let mut lines = String::new();
    for _ in 0..1 + rng.below(12) {
        let table = if rng.below(4) == 0 { "mem" } else { "cpu" };
        let mut line = format!("{table},host=h{}", rng.below(5));
        if step > 40 && rng.below(2) == 0 {
            line.push_str(&format!(",region=r{}", rng.below(2)));
        }
        let mut fields = Vec::new();
        if rng.below(4) != 0 {
            fields.push(format!("usage={}", rng.below(100)));
        }
        if rng.below(3) == 0 {
            fields.push(format!("count={}i", rng.below(1000)));
        }
        if step > 80 && rng.below(5) == 0 {
            fields.push(format!("note=\"n{}\"", rng.below(10)));
        }
        if fields.is_empty() {
            fields.push("usage=0.5".into());
        }
        // 72 hours: three daily partitions, and many rewrites of the same points
        let time = rng.below(72) as i64 * HOUR;
        lines.push_str(&format!("{line} {} {time}\n", fields.join(",")));
    }
    lines
}

const QUERIES: &[&str] = &[
    "SELECT * FROM cpu",
    "SELECT count(*) FROM cpu",
    "SELECT count(*) FROM cpu WHERE host = 'h2'",
    "SELECT * FROM mem",
    "SELECT host, time, usage FROM cpu WHERE time >= '1970-01-02T00:00:00Z' AND time < '1970-01-02T12:00:00Z'",
    "SELECT count(*), sum(usage), max(count) FROM cpu WHERE usage > 50",
    "SELECT host, count(*) AS n, min(usage) FROM cpu GROUP BY host",
    "SELECT * FROM cpu WHERE host = 'h1' AND time > '1970-01-01T20:00:00Z'",
    "SELECT time, host, region, count FROM cpu WHERE count IS NOT NULL ORDER BY time DESC, host, region LIMIT 5",
    "SELECT date_bin(INTERVAL '6 hours', time) AS bucket, avg(usage) FROM mem GROUP BY bucket",
    "SELECT * FROM cpu WHERE time = '1970-01-03T05:00:00Z'",
    "SELECT host, region, time, usage FROM cpu WHERE region IS NULL AND host IN ('h1', 'h3')",
    "SELECT host, time, usage, count FROM cpu WHERE host <> 'h2' AND region = 'r1' AND usage > 20",
];

/// Last-point queries, which read only each series' newest rows (`quiver_query::latest`).
/// Each is also checked against the plain plan: the same query over `(SELECT * FROM cpu)`,
/// which the shortcut does not recognise (a projection between it and the scan).
const LAST_POINT_QUERIES: &[&str] = &[
    "SELECT DISTINCT ON (host, region) * FROM cpu ORDER BY host, region, time DESC",
    "SELECT host, max(time) AS newest, min(region) AS r, max(region) FROM cpu GROUP BY host",
    "SELECT host, region, first_value(usage ORDER BY time DESC) AS u, \
     last_value(count ORDER BY time) AS c, max(time) FROM cpu \
     WHERE time >= '1970-01-02T00:00:00Z' AND host <> 'h4' GROUP BY host, region",
    "SELECT DISTINCT ON (host, region) host, region, time, note FROM cpu \
     WHERE region IS NOT NULL ORDER BY host, region, time DESC",
    "SELECT max(time) FROM cpu WHERE '1970-01-03T00:00:00Z' < time",
    "SELECT host, region FROM cpu GROUP BY host, region",
    "SELECT DISTINCT host, region FROM cpu WHERE host <> 'h2'",
];

/// Time-ordered limits, which read only each series' newest or oldest rows
/// (`quiver_query::time_order_limit`; the last one has a field filter, which keeps the plain
/// scan). Ties are broken by the series, so the order is total. Each is also checked against
/// the plain plan: the same query ordered by `time + 0 s`, which the shortcut does not take.
const TIME_ORDER_QUERIES: &[&str] = &[
    "SELECT * FROM cpu ORDER BY time DESC, host, region LIMIT 7",
    "SELECT host, region, time, usage FROM cpu WHERE host IN ('h1', 'h3') \
     AND time < '1970-01-03T00:00:00Z' ORDER BY time DESC, host, region LIMIT 4",
    "SELECT time, host, region, count FROM cpu ORDER BY time, host, region LIMIT 3 OFFSET 2",
    "SELECT host, time FROM cpu WHERE region IS NULL ORDER BY time DESC, host LIMIT 5",
    "SELECT * FROM cpu WHERE usage > 50 ORDER BY time DESC, host, region LIMIT 5",
];

/// The plain plan's equivalent of a time-ordered limit.
fn unordered_by_time(sql: &str) -> String {
    sql.replace("ORDER BY time", "ORDER BY time + INTERVAL '0 seconds'")
}

/// The plain plan's equivalent of a last-point query.
fn without_shortcut(sql: &str) -> String {
    sql.replace("FROM cpu", "FROM (SELECT * FROM cpu) cpu")
}

async fn compare(reference: &QueryEngine, durable: &QueryEngine, when: &str) {
    for sql in QUERIES
        .iter()
        .chain(LAST_POINT_QUERIES)
        .chain(TIME_ORDER_QUERIES)
    {
        let expected = rows(reference, sql).await;
        let actual = rows(durable, sql).await;
        if actual != expected {
            let plan = rows(durable, &format!("EXPLAIN {sql}")).await;
            println!("{}", plan.unwrap().join("\n"));
        }
        assert_eq!(actual, expected, "{when}: {sql}");
    }
    for sql in TIME_ORDER_QUERIES {
        let plain = unordered_by_time(sql);
        assert_eq!(
            rows(durable, sql).await,
            rows(durable, &plain).await,
            "{when}: {sql} vs the plain plan {plain}"
        );
    }
    for sql in LAST_POINT_QUERIES {
        let plain = without_shortcut(sql);
        // (before `region` or `note` exist both fail, naming different relations)
        if let (Ok(shortcut), Ok(plain_rows)) =
            (rows(durable, sql).await, rows(durable, &plain).await)
        {
            assert_eq!(
                shortcut, plain_rows,
                "{when}: {sql} vs the plain plan {plain}"
            );
        }
    }
}

/// With the chunk cache: files' columns are kept decoded as they are written (and after a
/// restart, decoded after a first scan).
#[tokio::test]
async fn buffer_and_parquet_reads_equal_memory_only_reads() {
    reads_equal_memory_only_reads(64 << 20).await;
}

/// Without it: every read of a file is a Parquet scan.
#[tokio::test]
async fn parquet_scans_without_decoded_columns_equal_memory_only_reads() {
    reads_equal_memory_only_reads(0).await;
}

async fn reads_equal_memory_only_reads(chunk_cache_bytes: u64) {
    let options = |dir: &Path| StoreOptions {
        chunk_cache_bytes,
        ..durable_options(dir)
    };
    let seed = std::env::var("QUIVER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0001_u64);
    println!("seed {seed} (set QUIVER_TEST_SEED to reproduce)");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let reference_store = Arc::new(Store::default());
    let reference = engine(&reference_store);
    let (store, _) = Store::open(StoreLimits::default(), options(dir.path())).unwrap();
    let mut durable = engine(&store);
    let (mut persists, mut compactions) = (0, 0);
    for step in 0..160 {
        let lines = random_lines(&mut rng, step);
        write(&reference_store, &lines).await;
        write(&store, &lines).await;
        if rng.below(8) == 0 {
            compare(
                &reference,
                &durable,
                &format!("step {step}, before persist"),
            )
            .await;
            let summary = store.persist_now().unwrap();
            assert!(summary.files > 0, "{summary:?}");
            persists += 1;
            compare(&reference, &durable, &format!("step {step}, after persist")).await;
            if rng.below(2) == 0 {
                let merged = store.compact_now(CompactionScope::default()).unwrap();
                compactions += merged.compactions;
                compare(
                    &reference,
                    &durable,
                    &format!("step {step}, after compaction"),
                )
                .await;
            }
        } else if rng.below(4) == 0 {
            compare(&reference, &durable, &format!("step {step}")).await;
        }
    }
    assert!(persists >= 5, "only {persists} persists");
    assert!(compactions >= 2, "only {compactions} compactions");
    compare(&reference, &durable, "end").await;
    store.compact_now(CompactionScope::default()).unwrap();
    compare(&reference, &durable, "end, compacted").await;
    // every file's columns are decoded (kept as written, or decoded after a first scan):
    // once every scan reads them from memory, the answers are still the same
    let all_decoded = || async {
        let mut all = true;
        for sql in QUERIES.iter().chain(LAST_POINT_QUERIES) {
            all &= !plan(&durable, sql).await.contains("file_groups");
        }
        all
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while chunk_cache_bytes > 0 && !all_decoded().await {
        assert!(
            std::time::Instant::now() < deadline,
            "columns never decoded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    compare(&reference, &durable, "end, from decoded columns").await;
    assert_settled(&store);
    store.close();
    drop(durable);
    drop(store);
    let (store, summary) = Store::open(StoreLimits::default(), options(dir.path())).unwrap();
    assert!(summary.files > 0);
    durable = engine(&store);
    compare(&reference, &durable, "after restart").await;
    store.persist_now().unwrap();
    compare(&reference, &durable, "after restart and persist").await;
    store.close();
}

/// No two files of one table partition overlap in time, and the data directory holds exactly
/// the files the catalog names (replaced files were deleted once no query held them).
fn assert_settled(store: &Store) {
    let catalog = store.catalog().unwrap();
    let mut named = std::collections::BTreeSet::new();
    for (name, table) in catalog.databases.values().flat_map(|d| &d.tables) {
        for a in &table.files {
            named.insert(store.data_dir().unwrap().join(&a.path));
            for b in table.files.iter().filter(|b| b.id != a.id) {
                assert!(
                    a.partition_start_ns != b.partition_start_ns
                        || a.max_time_ns < b.min_time_ns
                        || b.max_time_ns < a.min_time_ns,
                    "{name}: files {a:?} and {b:?} overlap after compaction"
                );
            }
        }
    }
    let on_disk: std::collections::BTreeSet<_> = parquet_files(store.data_dir().unwrap());
    assert_eq!(on_disk, named, "files on disk vs files the catalog names");
}

fn parquet_files(dir: &Path) -> std::collections::BTreeSet<std::path::PathBuf> {
    let mut found = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                found.insert(path);
            }
        }
    }
    found
}

/// A kept plan never serves stale rows or an old schema: the same engine, reusing the plans of
/// repeated statements, answers every query as a new engine planning afresh does, after
/// writes, persists, compactions, new columns (a tag after step 40, a field after step 80) and
/// a table dropped and then created again by later writes.
#[tokio::test]
async fn kept_plans_answer_as_fresh_plans_do() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let kept = engine(&store);
    let mut rng = Rng(11);
    for step in 0..120 {
        write(&store, &random_lines(&mut rng, step)).await;
        match rng.below(6) {
            0 => drop(store.persist_now().unwrap()),
            1 => drop(store.compact_now(CompactionScope::default()).unwrap()),
            _ => {}
        }
        if step == 60 {
            store.drop_table("db", "mem").unwrap();
        }
        if step % 10 == 9 || step == 60 {
            let fresh = engine(&store);
            for sql in QUERIES.iter().chain(LAST_POINT_QUERIES) {
                let expected = rows(&fresh, sql).await;
                assert_eq!(rows(&kept, sql).await, expected, "{sql} at step {step}");
            }
        }
    }
    let stats = kept.plan_cache_stats();
    assert!(stats.hits > 100 && stats.misses > 10, "{stats:?}");
}

/// Until the chunk cache is done decoding what the queries so far read from Parquet (a plan
/// reading Parquet is not kept physically; a later one reads the decoded columns). The
/// decoding runs on a blocking thread that may not have started yet: idle twice, 5 ms apart.
async fn settle_decoding(store: &Store) {
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(5));
    loop {
        while !store.chunk_cache().decoding_idle() {
            pause().await;
        }
        pause().await;
        if store.chunk_cache().decoding_idle() {
            return;
        }
    }
}

/// A kept physical plan is run again only over the rows it was made over: the same engine,
/// running every statement twice in a row (the second run reuses the first's physical plan
/// when nothing changed between them), answers as a new engine does after writes, persists,
/// compactions, steps that change nothing, a new tag and a table dropped and written again.
#[tokio::test]
async fn kept_physical_plans_answer_as_fresh_plans_do() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let kept = engine(&store);
    let mut rng = Rng(29);
    for step in 0..50 {
        match rng.below(6) {
            0 | 1 => write(&store, &random_lines(&mut rng, step * 2)).await,
            2 => drop(store.persist_now().unwrap()),
            3 => drop(store.compact_now(CompactionScope::default()).unwrap()),
            _ => {}
        }
        if step == 30 {
            store.drop_table("db", "mem").unwrap();
        }
        let fresh = engine(&store);
        for sql in QUERIES
            .iter()
            .chain(LAST_POINT_QUERIES)
            .chain(TIME_ORDER_QUERIES)
        {
            let expected = rows(&fresh, sql).await;
            for run in 0..2 {
                let actual = rows(&kept, sql).await;
                assert_eq!(actual, expected, "{sql} at step {step}, run {run}");
            }
            settle_decoding(&store).await;
        }
    }
    let stats = kept.plan_cache_stats();
    assert!(
        stats.physical_hits > 300 && stats.physical_plans > 0,
        "{stats:?}"
    );
}

/// A write drops the physical plans of its table at once (they hold the rows they read);
/// a database with a retention period keeps none (which rows a scan sees depends on the
/// clock), nor does a plan still reading Parquet.
#[tokio::test]
async fn physical_plans_are_kept_only_while_their_rows_are_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    write(&store, "cpu,host=a usage=1 1\ncpu,host=b usage=2 2\n").await;
    let queries = engine(&store);
    let count = "SELECT count(*) FROM cpu";
    let physical = |engine: &QueryEngine| {
        let stats = engine.plan_cache_stats();
        (stats.physical_plans, stats.physical_hits)
    };
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=2"]);
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=2"]);
    assert_eq!(physical(&queries), (1, 1));
    write(&store, "cpu,host=c usage=3 3\n").await;
    assert_eq!(physical(&queries).0, 0, "a write drops its table's plans");
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=3"]);
    assert_eq!(physical(&queries), (1, 1));

    // persisted: the plan (holding the buffer's rows) goes with the persist; the file's
    // columns are kept decoded as it is written, so the next plan is kept at once
    store.persist_now().unwrap();
    assert_eq!(physical(&queries).0, 0, "a persist drops its table's plans");
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=3"]);
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=3"]);
    assert_eq!(physical(&queries), (1, 2));

    // after a restart nothing is decoded: the first plan reads Parquet (not kept), a later
    // one the decoded columns
    store.close();
    drop((queries, store));
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let queries = engine(&store);
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=3"]);
    assert_eq!(
        physical(&queries),
        (0, 0),
        "a plan reading Parquet is not kept"
    );
    for _ in 0..100 {
        settle_decoding(&store).await;
        assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=3"]);
        if physical(&queries).1 > 0 {
            break;
        }
    }
    assert_eq!(
        physical(&queries),
        (1, 1),
        "the decoded columns' plan is kept"
    );

    // a recursive query is planned every time
    let recursive = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) \
                     SELECT count(*) AS c FROM cpu, r";
    for _ in 0..2 {
        assert_eq!(rows(&queries, recursive).await.unwrap(), ["c=9"]);
    }
    assert_eq!(physical(&queries), (1, 1), "no recursive plan kept");

    // a retention period hides the rows of 1970 at once: no write, the same snapshot
    let retention = quiver_storage::RetentionPeriod::parse("30d").unwrap();
    store.set_retention("db", Some(retention)).unwrap();
    assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=0"]);
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap();
    write(&store, &format!("cpu,host=d usage=4 {now}\n")).await;
    for _ in 0..3 {
        // the rows of 1970 are past the retention period
        assert_eq!(rows(&queries, count).await.unwrap(), ["count(*)=1"]);
    }
    assert_eq!(
        physical(&queries),
        (0, 1),
        "a retention period keeps no plan"
    );
}

/// How many batches the plan's in-memory sources hold (`partition_sizes=[a, b]`).
fn source_batches(plan: &str) -> usize {
    plan.split("partition_sizes=[")
        .skip(1)
        .filter_map(|rest| rest.split(']').next())
        .flat_map(|sizes| sizes.split(", ").filter_map(|n| n.parse::<usize>().ok()))
        .sum()
}

/// A time-ordered limit over the buffer or decoded files is handed each series' end only
/// (a few rows copied into one batch, where the plain scan hands on eight batches), with the
/// same answer; a filter on a field keeps every row.
#[tokio::test]
async fn time_ordered_limits_read_only_each_series_end() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let queries = engine(&store);
    let lines: String = (0..60_000)
        .map(|i| format!("cpu,host=h{} usage={} {}\n", i % 3, i % 97, i / 3 * 1000))
        .collect();
    write(&store, &lines).await;
    let newest = "SELECT host, time, usage FROM cpu ORDER BY time DESC, host LIMIT 7";
    let oldest = "SELECT host, time FROM cpu WHERE host <> 'h1' ORDER BY time, host LIMIT 4";
    let by_field = "SELECT host, time FROM cpu WHERE usage > 5 ORDER BY time DESC, host LIMIT 3";
    for when in ["buffered", "persisted"] {
        for sql in [newest, oldest, by_field] {
            let plain = unordered_by_time(sql);
            let expected = rows(&queries, &plain).await.unwrap();
            assert_eq!(
                rows(&queries, sql).await.unwrap(),
                expected,
                "{when}: {sql}"
            );
            assert!(
                source_batches(&plan(&queries, &plain).await) >= 8,
                "{when}: {plain}"
            );
            let ends = source_batches(&plan(&queries, sql).await);
            if sql == by_field {
                assert!(ends >= 8, "{when}: {sql} must read every row");
            } else {
                assert_eq!(ends, 1, "{when}: {sql}");
            }
        }
        // the persisted file's columns are kept decoded as it is written
        store.persist_now().unwrap();
    }
    store.close();
}

/// Three persists of 200 rows of 4 hosts over the same times (values from `first_round` on):
/// three overlapping files, which a compaction merges.
async fn persist_three_overlapping_files(store: &Store, first_round: i64) {
    for round in first_round..first_round + 3 {
        let lines: String = (0..200)
            .map(|i| {
                format!(
                    "cpu,host=h{} usage={} {}\n",
                    i % 4,
                    round * 1000 + i,
                    i * 1000
                )
            })
            .collect();
        write(store, &lines).await;
        store.persist_now().unwrap();
    }
}

/// A persist keeps the columns of the files it writes decoded; a compaction keeps its merged
/// files' columns only where some input's were (a hot partition), not after a restart (the
/// cache empty: a cold one).
#[tokio::test]
async fn written_files_are_kept_decoded_unless_a_cold_partition_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let decoded = |store: &Store| -> Vec<bool> {
        let catalog = store.catalog().unwrap();
        catalog.databases["db"].tables["cpu"]
            .files
            .iter()
            .map(|f| store.chunk_cache().series_starts(&f.path).is_some())
            .collect()
    };
    let (store, _) = open();
    persist_three_overlapping_files(&store, 0).await;
    assert_eq!(decoded(&store), [true; 3]);
    let merged = store.compact_now(CompactionScope::default()).unwrap();
    assert!(merged.compactions > 0, "{merged:?}");
    assert!(
        decoded(&store).iter().all(|&d| d),
        "hot: {:?}",
        decoded(&store)
    );
    store.close();
    drop(store);

    let (store, _) = open();
    persist_three_overlapping_files(&store, 3).await;
    // the files of before the restart are cold: forget the new ones' columns too
    let catalog = store.catalog().unwrap();
    let paths: Vec<String> = catalog.databases["db"].tables["cpu"]
        .files
        .iter()
        .map(|f| f.path.clone())
        .collect();
    store
        .chunk_cache()
        .forget_files(paths.iter().map(String::as_str));
    let merged = store.compact_now(CompactionScope::default()).unwrap();
    assert!(merged.compactions > 0, "{merged:?}");
    assert!(
        decoded(&store).iter().all(|&d| !d),
        "cold: {:?}",
        decoded(&store)
    );
    store.close();
}

/// Only plans that made a physical plan, of statements of bounded length, are kept.
#[tokio::test]
async fn failing_and_overlong_statements_keep_no_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    write(&store, "cpu,host=a usage=1 1\n").await;
    let engine = engine(&store);
    // a placeholder never bound: planned logically, refused by the physical planner
    for _ in 0..2 {
        assert!(rows(&engine, "SELECT usage + $1 FROM cpu").await.is_err());
    }
    let stats = engine.plan_cache_stats();
    assert_eq!((stats.hits, stats.plans), (0, 0), "{stats:?}");
    // a long IN list (over 16 KiB of text) is planned each time
    let hosts: Vec<String> = (0..3000).map(|i| format!("'host-{i:05}'")).collect();
    let long = format!(
        "SELECT count(*) FROM cpu WHERE host IN ({})",
        hosts.join(", ")
    );
    for _ in 0..2 {
        assert_eq!(rows(&engine, &long).await.unwrap().len(), 1);
    }
    let stats = engine.plan_cache_stats();
    assert_eq!((stats.hits, stats.plans), (0, 0), "{stats:?}");
    // a short one is kept and reused
    for _ in 0..2 {
        assert_eq!(
            rows(&engine, "SELECT count(*) FROM cpu")
                .await
                .unwrap()
                .len(),
            1
        );
    }
    let stats = engine.plan_cache_stats();
    assert_eq!((stats.hits, stats.plans), (1, 1), "{stats:?}");
}

#[tokio::test]
async fn last_point_queries_read_only_the_newest_rows_and_others_read_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = durable_options(dir.path());
    // no decoded columns, so that a plan reading every row shows its Parquet scan
    options.chunk_cache_bytes = 0;
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let engine = engine(&store);
    let mut rng = Rng(7);
    for step in 0..20 {
        write(&store, &random_lines(&mut rng, step)).await;
    }
    store.persist_now().unwrap();
    write(&store, "cpu,host=h1,region=r0 usage=1,note=\"x\" 1000\n").await;
    let reads_files = |plan: &str| plan.contains("file_groups");
    for sql in LAST_POINT_QUERIES {
        let shortcut = plan(&engine, sql).await;
        assert!(!reads_files(&shortcut), "{sql} read the files:\n{shortcut}");
        let plain = plan(&engine, &without_shortcut(sql)).await;
        assert!(reads_files(&plain), "{sql} plain:\n{plain}");
        if sql.contains("DISTINCT ON") {
            // the first row of each group of the newest rows (a rank-one row_number window,
            // run as FirstRowsExec) rather than first_value aggregates
            assert!(shortcut.contains("FirstRowsExec"), "{sql}:\n{shortcut}");
            assert!(!shortcut.contains("first_value"), "{sql}:\n{shortcut}");
        }
    }
    // answers that need older rows than each series' newest: the plain plan
    for sql in [
        "SELECT DISTINCT ON (host) * FROM cpu WHERE usage > 50 ORDER BY host, time DESC",
        "SELECT DISTINCT ON (host) * FROM cpu WHERE time < '1970-01-02T00:00:00Z' ORDER BY host, time DESC",
        "SELECT DISTINCT ON (host) * FROM cpu ORDER BY host, time",
        "SELECT DISTINCT ON (host) * FROM cpu ORDER BY host, usage DESC",
        "SELECT DISTINCT ON (usage) * FROM cpu ORDER BY usage, time DESC",
        "SELECT host, min(time) FROM cpu GROUP BY host",
        "SELECT DISTINCT host, usage FROM cpu",
        "SELECT host, count(*) FROM cpu GROUP BY host",
        "SELECT host, first_value(usage ORDER BY time) FROM cpu GROUP BY host",
        "SELECT host, first_value(usage ORDER BY time DESC) IGNORE NULLS FROM cpu GROUP BY host",
        "SELECT host, max(time) FILTER (WHERE usage > 1) FROM cpu GROUP BY host",
        "SELECT usage, max(time) FROM cpu GROUP BY usage",
        "SELECT host, max(time) FROM cpu WHERE random() < 2 GROUP BY host",
    ] {
        let plain = plan(&engine, sql).await;
        assert!(reads_files(&plain), "{sql}:\n{plain}");
    }
    store.close();
}

#[tokio::test]
async fn filters_compare_tags_then_time_first_and_keep_the_rest_in_order() {
    let store = Arc::new(Store::default());
    let engine = engine(&store);
    write(
        &store,
        "cpu,host=a usage=95,count=2i 1000\ncpu,host=b usage=1,count=0i 2000\n",
    )
    .await;
    // where each part appears in the filter of `sql`'s plan
    let order = |sql: &'static str, parts: &'static [&'static str]| {
        let engine = &engine;
        async move {
            let plan = plan(engine, sql).await;
            let filter = plan
                .lines()
                .find(|line| line.contains("FilterExec"))
                .unwrap_or_else(|| panic!("no filter in {plan}"))
                .to_string();
            let at = parts
                .iter()
                .map(|part| {
                    filter
                        .find(part)
                        .unwrap_or_else(|| panic!("{part} not in {filter}"))
                })
                .collect::<Vec<_>>();
            (at, filter)
        }
    };
    let ascending = |at: &[usize]| at.windows(2).all(|w| w[0] < w[1]);
    let (at, reordered) = order(
        "SELECT * FROM cpu WHERE usage > 90 AND time > '1970-01-01T00:00:00Z' AND host = 'a'",
        &["host@", "time@", "usage@"],
    )
    .await;
    assert!(ascending(&at), "{reordered}");
    // a guard keeps its place before what it guards; a cast that can fail does not move
    let (at, guarded) = order(
        "SELECT * FROM cpu WHERE count > 0 AND 100 / count > 5 AND host IN ('a', 'b')",
        &["host@", "count@", "100 /"],
    )
    .await;
    assert!(ascending(&at), "{guarded}");
    let (at, unsafe_cast) = order(
        "SELECT * FROM cpu WHERE usage > 1 AND CAST(host AS BIGINT) = 5",
        &["usage@", "host@"],
    )
    .await;
    assert!(ascending(&at), "{unsafe_cast}");
    // a tag cast to a timestamp can fail too (a tag is any string): it stays in place
    let (at, tag_as_time) = order(
        "SELECT * FROM cpu WHERE usage > 1 AND CAST(host AS TIMESTAMP) > '2020-01-01T00:00:00Z'",
        &["usage@", "host@"],
    )
    .await;
    assert!(ascending(&at), "{tag_as_time}");
    // the same answer (here: the same error, as DataFusion does not short-circuit a guard
    // that keeps half the rows) as the order written, which a projection keeps
    for sql in [
        "SELECT host FROM cpu WHERE count > 0 AND 100 / count > 5 AND host IN ('a', 'b')",
        "SELECT host FROM cpu WHERE usage > 90 AND host = 'a'",
    ] {
        let written = sql.replace("FROM cpu", "FROM (SELECT * FROM cpu) cpu");
        assert_eq!(
            rows(&engine, sql).await,
            rows(&engine, &written).await,
            "{sql}"
        );
    }
}

#[tokio::test]
async fn one_host_of_many_is_scanned_alone_with_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let engine = engine(&store);
    let lines = |from: i64| -> String {
        (0..2000i64)
            .map(|i| {
                format!(
                    "cpu,host=h{} usage={} {}\n",
                    i % 40,
                    i % 97,
                    (from + i) * 1000
                )
            })
            .collect()
    };
    write(&store, &lines(0)).await;
    store.persist_now().unwrap();
    write(&store, &lines(10_000)).await;
    let queries = [
        "SELECT host, time, usage FROM cpu WHERE host = 'h7' AND usage > 10",
        "SELECT count(*), max(usage) FROM cpu WHERE host IN ('h3', 'h9') AND time > '1970-01-01T00:00:00.001Z'",
        "SELECT host, count(*), sum(usage) FROM cpu \
         WHERE time >= '1970-01-01T00:00:00.0005Z' AND time < '1970-01-01T00:00:00.0006Z' GROUP BY host",
    ];
    // `upper(host)` is not a plain tag comparison, nor `time + 0 s` a bound on time: those
    // scans keep every row
    let plain = |sql: &str| {
        sql.replace("host = 'h7'", "upper(host) = 'H7'")
            .replace("host IN ('h3', 'h9')", "upper(host) IN ('H3', 'H9')")
            .replace("time >= ", "time + INTERVAL '0 seconds' >= ")
            .replace("time < ", "time + INTERVAL '0 seconds' < ")
    };
    for round in 0..3 {
        for sql in queries {
            let plain = plain(sql);
            assert_ne!(plain, sql);
            let expected = rows(&engine, &plain).await.unwrap();
            assert!(!expected.is_empty(), "{plain}");
            assert_eq!(
                rows(&engine, sql).await.unwrap(),
                expected,
                "round {round}: {sql}"
            );
        }
        // later rounds read the file's decoded columns
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // once the file is decoded, every scan hands its filter only the chosen hosts' rows
    // (50 of 2,000 per host and source), while the plain comparison gets them all
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while plan(&engine, queries[0]).await.contains("file_groups") {
        assert!(
            std::time::Instant::now() < deadline,
            "the file was never decoded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let rows_filtered = |analyzed: Vec<String>| -> Vec<u64> {
        // `selectivity=2.5% (50/2000)`: what each filter was given
        analyzed
            .concat()
            .split("selectivity=")
            .skip(1)
            .filter_map(|s| {
                // counts are printed as `50`, `2.00 K` or `1.20 M`
                let count = s.split('/').nth(1)?.split(')').next()?.trim();
                let (number, scale) = match count.split_once(' ') {
                    Some((n, "K")) => (n, 1e3),
                    Some((n, "M")) => (n, 1e6),
                    _ => (count, 1.0),
                };
                Some((number.parse::<f64>().ok()? * scale) as u64)
            })
            .collect()
    };
    for (sql, most) in queries.iter().zip([50, 100, 100]) {
        let given = rows_filtered(
            rows(&engine, &format!("EXPLAIN ANALYZE {sql}"))
                .await
                .unwrap(),
        );
        assert!(
            !given.is_empty() && given.iter().all(|&n| n <= most),
            "{sql}: {given:?}"
        );
        let analyzed = rows(&engine, &format!("EXPLAIN ANALYZE {}", plain(sql)))
            .await
            .unwrap();
        let given = rows_filtered(analyzed.clone());
        assert!(
            given.iter().any(|&n| n > most),
            "{}: {given:?}\n{}",
            plain(sql),
            analyzed.join("\n")
        );
    }
    store.close();
}

/// The plan of `sql` as text.
async fn plan(engine: &QueryEngine, sql: &str) -> String {
    rows(engine, &format!("EXPLAIN {sql}"))
        .await
        .unwrap()
        .join("\n")
}

#[tokio::test]
async fn compaction_removes_the_deduplicating_merge_and_waits_for_running_scans() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = durable_options(dir.path());
    // every scan reads Parquet (no decoded columns), whose pruning this test checks
    options.chunk_cache_bytes = 0;
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let queries = engine(&store);
    // three persists of one day, each overwriting the last one's values: the files overlap
    for round in 0..3 {
        let lines: String = (0..2000i64)
            .map(|i| {
                format!(
                    "cpu,host=h{} usage={} {}\n",
                    i % 7,
                    round * 1000 + i,
                    i * 1_000_000_000
                )
            })
            .collect();
        write(&store, &lines).await;
        store.persist_now().unwrap();
    }
    let sql = "SELECT host, count(*) AS n, sum(usage) AS total FROM cpu GROUP BY host";
    let before = rows(&queries, sql).await.unwrap();
    assert!(
        plan(&queries, sql).await.contains("DeduplicateExec"),
        "overlapping files are merged and deduplicated:\n{}",
        plan(&queries, sql).await
    );
    // a filter on tags alone goes below the deduplication: pages of other hosts are pruned
    // and their rows never reach the merge
    let one_host = plan(&queries, "SELECT * FROM cpu WHERE host = 'h3'").await;
    let dedup_at = one_host.find("DeduplicateExec").expect("deduplicated");
    let filter_at = one_host.rfind("FilterExec: host@").expect("a tag filter");
    assert!(
        filter_at > dedup_at,
        "the tag filter is not below the merge:\n{one_host}"
    );
    // and EXPLAIN ANALYZE shows what it pruned: row groups of other hosts skipped by their
    // statistics in the files being merged
    let analyzed = rows(
        &queries,
        "EXPLAIN ANALYZE SELECT * FROM cpu WHERE host = 'h3'",
    )
    .await
    .unwrap()
    .join("\n");
    assert!(analyzed.contains("DeduplicateExec"), "{analyzed}");
    let pruned: Vec<(u64, u64)> = analyzed
        .match_indices("row_groups_pruned_statistics=")
        .filter_map(|(at, key)| {
            let rest = &analyzed[at + key.len()..];
            let (total, rest) = rest.split_once(" total → ")?;
            let matched = rest.split(' ').next()?;
            Some((total.parse().ok()?, matched.parse().ok()?))
        })
        .collect();
    assert!(
        pruned.len() >= 3 && pruned.iter().all(|(total, matched)| matched < total),
        "every merged file prunes row groups of other hosts: {pruned:?}\n{analyzed}"
    );
    // a query that started before the compaction holds its files until it ends: its answer
    // has more batches than a query computes ahead of its client, so it is still running
    let running = queries
        .execute(
            "db",
            "SELECT * FROM generate_series(1, 50) g(n) CROSS JOIN cpu",
        )
        .await
        .unwrap();
    let files_before = parquet_files(dir.path());
    let summary = store.compact_now(CompactionScope::default()).unwrap();
    assert!(
        summary.compactions >= 1 && summary.rows_in >= 6000,
        "{summary:?}"
    );
    let catalog = store.catalog().unwrap();
    let files = &catalog.databases["db"].tables["cpu"].files;
    assert!(
        files.len() >= 2,
        "the 4 KiB target cuts the output: {files:?}"
    );
    let stored: u64 = files.iter().map(|f| f.rows).sum();
    assert_eq!(stored, 2000, "duplicates merged: {files:?}");
    let stats = store.compaction_stats().unwrap();
    assert_eq!(stats.files_awaiting_deletion, 3, "{stats:?}");
    assert!(
        files_before.iter().all(|f| f.exists()),
        "a running scan's files were deleted"
    );
    let scanned: Vec<RecordBatch> = running.stream.try_collect().await.unwrap();
    assert_eq!(
        scanned.iter().map(RecordBatch::num_rows).sum::<usize>(),
        2000 * 50
    );
    // the next compaction run deletes what nothing holds any more
    store.compact_now(CompactionScope::default()).unwrap();
    assert!(
        files_before.iter().all(|f| !f.exists()),
        "replaced files stayed on disk"
    );
    assert!(store.compaction_stats().unwrap().files_deleted >= 3);
    assert_eq!(rows(&queries, sql).await.unwrap(), before);
    let compacted = plan(&queries, sql).await;
    assert!(!compacted.contains("DeduplicateExec"), "{compacted}");
    assert_settled(&store);
    // the latest values won
    let totals = rows(
        &queries,
        "SELECT min(usage) AS lo, max(usage) AS hi FROM cpu",
    )
    .await;
    assert_eq!(totals.unwrap(), vec!["lo=2000.0 hi=3999.0".to_string()]);
    // unknown names are errors, not silent no-ops
    let scope = CompactionScope {
        database: Some("nope"),
        table: None,
    };
    assert!(store
        .compact_now(scope)
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    let scope = CompactionScope {
        database: Some("db"),
        table: Some("nope"),
    };
    assert!(store
        .compact_now(scope)
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    store.close();
    drop(queries);
    drop(store);
    let (store, summary) =
        Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    assert_eq!(summary.orphans_removed, 0);
    assert_eq!(rows(&engine(&store), sql).await.unwrap(), before);
    store.close();
}

#[tokio::test]
async fn an_unreadable_file_is_quarantined_and_the_rest_is_compacted() {
    const DAY: i64 = 24 * HOUR;
    let dir = tempfile::tempdir().unwrap();
    let mut options = durable_options(dir.path());
    // queries read the files themselves (not the columns kept as they were written)
    options.chunk_cache_bytes = 0;
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let queries = engine(&store);
    // two days, three overlapping persists each
    for round in 0..3i64 {
        let lines: String = (0..500i64)
            .flat_map(|i| {
                [0, DAY].map(|day| {
                    format!(
                        "cpu,host=h{} usage={} {}\n",
                        i % 5,
                        round * 1000 + i,
                        day + i * 1_000_000_000
                    )
                })
            })
            .collect();
        write(&store, &lines).await;
        store.persist_now().unwrap();
    }
    let files =
        |catalog: &quiver_storage::CatalogState, day: i64| -> Vec<quiver_storage::FileEntry> {
            catalog.databases["db"].tables["cpu"]
                .files
                .iter()
                .filter(|f| f.partition_start_ns == day)
                .cloned()
                .collect()
        };
    let catalog = store.catalog().unwrap();
    let damaged = files(&catalog, 0)[0].clone();
    std::fs::write(dir.path().join(&damaged.path), b"not a parquet file at all").unwrap();

    let summary = store.compact_now(CompactionScope::default()).unwrap();
    assert_eq!(
        summary.compactions, 2,
        "both days' other files merged: {summary:?}"
    );
    let stats = store.compaction_stats().unwrap();
    assert_eq!(stats.quarantined_files.len(), 1, "{stats:?}");
    assert!(
        stats.quarantined_files[0].contains(&damaged.path),
        "{stats:?}"
    );
    assert_eq!(stats.failures, 1, "{stats:?}");
    let catalog = store.catalog().unwrap();
    let day0 = files(&catalog, 0);
    assert_eq!(
        day0[0].id, damaged.id,
        "the damaged file keeps its place: {day0:?}"
    );
    // the two files after it are merged (cut by the 4 KiB target), the other day's three too
    for merged in [&day0[1..], &files(&catalog, DAY)[..]] {
        assert!(merged.iter().all(|f| f.generation == 1), "{merged:?}");
        assert_eq!(
            merged.iter().map(|f| f.rows).sum::<u64>(),
            500,
            "{merged:?}"
        );
        for pair in merged.windows(2) {
            assert!(pair[0].max_time_ns < pair[1].min_time_ns, "{merged:?}");
        }
    }

    // the quarantined file is not tried again
    let again = store.compact_now(CompactionScope::default()).unwrap();
    assert_eq!(again.compactions, 0, "{again:?}");
    assert_eq!(store.compaction_stats().unwrap().failures, 1);
    // the other day answers; the damaged day is an error, not a wrong answer
    let day1 = rows(
        &queries,
        "SELECT count(*) AS n, max(usage) AS hi FROM cpu WHERE time >= '1970-01-02T00:00:00Z'",
    )
    .await;
    assert_eq!(day1.unwrap(), vec!["n=500 hi=2499.0".to_string()]);
    assert!(rows(&queries, "SELECT count(*) FROM cpu").await.is_err());
    store.close();
}

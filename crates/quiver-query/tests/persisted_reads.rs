//! Differential test of reads over buffer ∪ Parquet: the same random writes (overwrites of
//! earlier points, partial fields, a tag that appears later, several days) go to a memory-only
//! store and to a durable store that persists at random moments and restarts at the end. Every
//! query must return the same rows from both, at every point: before and after each persist,
//! and after the restart.

use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::TryStreamExt;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;
use quiver_query::{QueryEngine, QueryOptions};
use quiver_storage::{Durability, Store, StoreLimits, StoreOptions};

const HOUR: i64 = 3_600_000_000_000;

/// xorshift64*: deterministic, seedable, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn durable_options(dir: &Path) -> StoreOptions {
    let mut options = StoreOptions::for_tests(dir);
    options.wal.segment_bytes = 16 << 10;
    options.persist.row_group_rows = 64;
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

async fn write(store: &Store, lp: &str) {
    let options = DecodeOptions::for_tests();
    let decoded = match store.database("db") {
        Some(db) => decode_line_protocol(lp.as_bytes(), &options, db.as_ref()),
        None => decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables),
    };
    assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
    store
        .write("db", decoded.tables, Durability::Sync)
        .await
        .unwrap();
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

/// The query's rows as sorted strings (so partitioning cannot change the comparison),
/// or the error message.
async fn rows(engine: &QueryEngine, sql: &str) -> Result<Vec<String>, String> {
    let output = engine.execute("db", sql).await.map_err(|e| e.to_string())?;
    let batches: Vec<RecordBatch> = output
        .stream
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let options = FormatOptions::default().with_null("NULL");
    for batch in &batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .zip(batch.schema().fields())
                .map(|(f, field)| format!("{}={}", field.name(), f.value(row)))
                .collect();
            lines.push(cells.join(" "));
        }
    }
    lines.sort();
    Ok(lines)
}

const QUERIES: &[&str] = &[
    "SELECT * FROM cpu",
    "SELECT * FROM mem",
    "SELECT host, time, usage FROM cpu WHERE time >= '1970-01-02T00:00:00Z' AND time < '1970-01-02T12:00:00Z'",
    "SELECT count(*), sum(usage), max(count) FROM cpu WHERE usage > 50",
    "SELECT host, count(*) AS n, min(usage) FROM cpu GROUP BY host",
    "SELECT * FROM cpu WHERE host = 'h1' AND time > '1970-01-01T20:00:00Z'",
    "SELECT time, host, region, count FROM cpu WHERE count IS NOT NULL ORDER BY time DESC, host, region LIMIT 5",
    "SELECT date_bin(INTERVAL '6 hours', time) AS bucket, avg(usage) FROM mem GROUP BY bucket",
    "SELECT * FROM cpu WHERE time = '1970-01-03T05:00:00Z'",
];

async fn compare(reference: &QueryEngine, durable: &QueryEngine, when: &str) {
    for sql in QUERIES {
        let expected = rows(reference, sql).await;
        let actual = rows(durable, sql).await;
        if actual != expected {
            let plan = rows(durable, &format!("EXPLAIN {sql}")).await;
            println!("{}", plan.unwrap().join("\n"));
        }
        assert_eq!(actual, expected, "{when}: {sql}");
    }
}

#[tokio::test]
async fn buffer_and_parquet_reads_equal_memory_only_reads() {
    let seed = std::env::var("QUIVER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0001_u64);
    println!("seed {seed} (set QUIVER_TEST_SEED to reproduce)");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let reference_store = Arc::new(Store::default());
    let reference = engine(&reference_store);
    let (store, _) = Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    let mut durable = engine(&store);
    let mut persists = 0;
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
        } else if rng.below(4) == 0 {
            compare(&reference, &durable, &format!("step {step}")).await;
        }
    }
    assert!(persists >= 5, "only {persists} persists");
    compare(&reference, &durable, "end").await;
    store.close();
    drop(durable);
    drop(store);
    let (store, summary) =
        Store::open(StoreLimits::default(), durable_options(dir.path())).unwrap();
    assert!(summary.files > 0);
    durable = engine(&store);
    compare(&reference, &durable, "after restart").await;
    store.persist_now().unwrap();
    compare(&reference, &durable, "after restart and persist").await;
    store.close();
}

//! Bounded memory under sustained ingest: the real binary with a small write buffer takes
//! many times that buffer in line protocol from concurrent writers, and its peak resident
//! memory stays within the buffer bound, plus twice the bound on one compaction merge, plus the
//! chunk cache (which keeps the columns of files as they are written), plus a fixed baseline,
//! because the buffer is persisted to Parquet, writers wait when it is full,
//! and merges pick only files whose rows fit their bound. All the data is then queryable.

mod common;

use common::Server;
use serde_json::json;

const MAX_BUFFER_BYTES: u64 = 16 << 20;
/// The process without its buffer: binary, allocator arenas, runtime and DataFusion state,
/// request bodies in flight, and the transient copies a persist makes (merge and Parquet
/// encoding of up to `persist_buffer_bytes`). Peaks of the whole process measured 113 MiB
/// (2026-11-25), 116–118 MiB alone and 128–132 MiB beside the rest of the test suite
/// (2026-11-26, 45 MiB at start); see docs/storage.md ("Memory"). With the chunk cache and merge
/// allowance counted apart, peaks of 148–156 MiB alone and once 161 MiB in CI (a bound of
/// 160 MiB then) left this baseline 1 MiB short: it allows 128 MiB. The load is 353 MiB of
/// line protocol, so a buffer that did not bound memory ends far above the bound (checked:
/// with the buffer limits raised past the load, the peak is 302 MiB).
const BASELINE_BYTES: u64 = 128 << 20;
/// The most memory one compaction merge's rows may take (`compaction_max_merge_bytes`); a
/// merge holds them and at most one sorted copy, so compaction adds up to twice this.
const MAX_MERGE_BYTES: u64 = 8 << 20;
/// `chunk_cache_bytes`: files' columns kept decoded (written files' columns go in at once).
const CHUNK_CACHE_BYTES: u64 = 16 << 20;
const WRITERS: usize = 4;
const BATCHES_PER_WRITER: usize = 200;
const LINES_PER_BATCH: usize = 5_000;

fn batch(writer: usize, batch: usize) -> String {
    let mut lines = String::with_capacity(LINES_PER_BATCH * 120);
    for i in 0..LINES_PER_BATCH {
        let t = ((batch * LINES_PER_BATCH + i) as u64) * 1_000_000 + 1;
        lines.push_str(&format!(
            "load,writer=w{writer},host=host-{} usage_user={}.5,usage_system={},free={}i,note=\"n{}\" {t}\n",
            i % 50,
            i % 100,
            i % 7,
            i * 3,
            i % 10
        ));
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sustained_ingest_stays_within_the_buffer_bound() {
    let server = Server::start_with_env(&[
        ("QUIVER_PERSIST_BUFFER_BYTES", &(4u64 << 20).to_string()),
        ("QUIVER_MAX_BUFFER_BYTES", &MAX_BUFFER_BYTES.to_string()),
        (
            "QUIVER_COMPACTION_MAX_MERGE_BYTES",
            &MAX_MERGE_BYTES.to_string(),
        ),
        ("QUIVER_CHUNK_CACHE_BYTES", &CHUNK_CACHE_BYTES.to_string()),
    ])
    .await;
    let (baseline_rss, _) = server.rss();
    let url = format!("{}/api/v3/write_lp?db=mem&precision=ns", server.url);
    let mut bytes_sent = 0usize;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let url = url.clone();
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut sent = 0;
                for b in 0..BATCHES_PER_WRITER {
                    let body = batch(writer, b);
                    sent += body.len();
                    let response = client.post(&url).body(body).send().await.unwrap();
                    assert_eq!(response.status(), 204, "{}", response.text().await.unwrap());
                }
                sent
            })
        })
        .collect();
    for writer in writers {
        bytes_sent += writer.await.unwrap();
    }
    let (rss, peak) = server.rss();
    let log = server.log();
    let persists = log.matches("persisted the write buffer").count();
    eprintln!(
        "sent {} MiB of line protocol; RSS at start {} MiB, now {} MiB, peak {} MiB; {persists} persists",
        bytes_sent >> 20,
        baseline_rss >> 20,
        rss >> 20,
        peak >> 20
    );
    assert!(
        bytes_sent as u64 > 8 * MAX_BUFFER_BYTES,
        "the load must be well above the buffer"
    );
    assert!(persists >= 8, "{persists} persists");
    let compactions = log.matches("compacted files").count();
    eprintln!("{compactions} compactions");
    // a merge may hold its rows twice; without one, no allowance
    let merging = if compactions > 0 {
        2 * MAX_MERGE_BYTES
    } else {
        0
    };
    assert!(
        peak <= MAX_BUFFER_BYTES + merging + CHUNK_CACHE_BYTES + BASELINE_BYTES,
        "peak RSS {} MiB exceeds the buffer bound {} MiB + the merge allowance {} MiB + \
         the chunk cache {} MiB + baseline {} MiB",
        peak >> 20,
        MAX_BUFFER_BYTES >> 20,
        merging >> 20,
        CHUNK_CACHE_BYTES >> 20,
        BASELINE_BYTES >> 20
    );
    let rows = server
        .query_json(
            "mem",
            "SELECT count(*) AS n, count(DISTINCT writer) AS w FROM load",
        )
        .await;
    assert_eq!(
        rows,
        vec![json!({"n": WRITERS * BATCHES_PER_WRITER * LINES_PER_BATCH, "w": WRITERS})]
    );
}

//! Durability over the real binary: acknowledged writes survive `kill -9` at random moments
//! (including in the middle of persisting the buffer to Parquet)
//! under concurrent load, and a WAL torn at any byte recovers everything before the tear.
//!
//! `QUIVER_CRASH_ITERATIONS` (default 24) sets how many kill/restart rounds the crash test runs.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Server;
use serde_json::json;

const ROWS_PER_BATCH: usize = 40;

/// xorshift64*: reproducible randomness from a printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn seed() -> u64 {
    let seed = std::env::var("QUIVER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("QUIVER_TEST_SEED={seed}");
    seed
}

/// One batch of `ROWS_PER_BATCH` points of series `writer`, identified by `batch`.
fn batch_lines(writer: usize, batch: u64) -> String {
    (0..ROWS_PER_BATCH)
        .map(|j| {
            format!(
                "crash,writer=w{writer} batch={batch}i,j={j}i {}\n",
                batch * 1_000 + j as u64 + 1
            )
        })
        .collect()
}

/// `(writer, batch) -> rows` as stored.
async fn stored_batches(server: &Server) -> Vec<(String, i64, i64)> {
    let rows = server
        .query_json(
            "crash",
            "SELECT writer, batch, count(*) AS n FROM crash GROUP BY writer, batch ORDER BY writer, batch",
        )
        .await;
    rows.iter()
        .map(|r| {
            (
                r["writer"].as_str().unwrap().to_string(),
                r["batch"].as_i64().unwrap(),
                r["n"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Small WAL segments, a small persistence threshold and eager compaction (small target,
/// no idle wait: every persist's file overlaps the last ones), so that every round rotates
/// segments, persists and compacts several times, and some kills land in the middle of a
/// persist or a compaction.
const CRASH_ENV: &[(&str, &str)] = &[
    ("QUIVER_WAL_SEGMENT_BYTES", "65536"),
    ("QUIVER_PERSIST_BUFFER_BYTES", "262144"),
    ("QUIVER_MAX_BUFFER_BYTES", "4194304"),
    ("QUIVER_COMPACTION_TARGET_FILE_BYTES", "1048576"),
    ("QUIVER_COMPACTION_FANOUT", "4"),
    ("QUIVER_COMPACTION_IDLE_SECS", "0"),
];

/// Sum of the numbers following `key` in a log.
fn count_after(log: &str, key: &str) -> usize {
    log.match_indices(key)
        .filter_map(|(i, _)| {
            let digits: String = log[i + key.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<usize>().ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_repeated_kill_9() {
    let iterations: usize = std::env::var("QUIVER_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let mut rng = Rng(seed());
    let data = tempfile::tempdir().unwrap();
    let acknowledged: Arc<Mutex<BTreeSet<(usize, u64)>>> = Arc::default();
    let mut next_batch = 0u64;
    let (mut persists, mut compactions, mut orphans_removed) = (0, 0, 0);
    for round in 0..iterations {
        let mut server = Server::start_in(Some(data.path()), CRASH_ENV).await;
        let log = server.log();
        orphans_removed += count_after(&log, "orphaned_files_removed=");
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let url = format!("{}/api/v3/write_lp?db=crash&precision=ns", server.url);
                let acknowledged = acknowledged.clone();
                let first = next_batch + writer as u64 * 100_000;
                tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    for batch in first.. {
                        let sent = client
                            .post(&url)
                            .body(batch_lines(writer, batch))
                            .send()
                            .await;
                        match sent {
                            Ok(r) if r.status() == 204 => {
                                acknowledged.lock().unwrap().insert((writer, batch));
                            }
                            Ok(r) => panic!(
                                "write failed: {} {}",
                                r.status(),
                                r.text().await.unwrap_or_default()
                            ),
                            Err(_) => return, // the server was killed
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20 + rng.below(400))).await;
        server.kill9();
        persists += server.log().matches("persisted the write buffer").count();
        compactions += server.log().matches("compacted files").count();
        for writer in writers {
            writer.await.unwrap();
        }
        next_batch += 1_000_000;
        eprintln!(
            "round {round}: {} batches acknowledged so far, {persists} persists, \
             {compactions} compactions, {orphans_removed} files of interrupted persists or \
             compactions removed",
            acknowledged.lock().unwrap().len()
        );
    }
    assert!(
        compactions >= iterations / 2,
        "{compactions} compactions in {iterations} rounds: the test must kill around compactions"
    );
    assert!(
        persists >= iterations && orphans_removed > 0,
        "{persists} persists in {iterations} rounds, {orphans_removed} left by a killed \
         persist: the test must kill during persistence"
    );
    let server = Server::start_in(Some(data.path()), CRASH_ENV).await;
    let stored = stored_batches(&server).await;
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > iterations,
        "the load made too little progress to test anything"
    );
    let stored_set: BTreeSet<(usize, u64)> = stored
        .iter()
        .map(|(w, b, _)| (w[1..].parse().unwrap(), *b as u64))
        .collect();
    let lost: Vec<_> = acknowledged.difference(&stored_set).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged batches lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    // every stored batch is whole (a write is atomic), acknowledged or not
    let partial: Vec<_> = stored
        .iter()
        .filter(|(_, _, n)| *n != ROWS_PER_BATCH as i64)
        .collect();
    assert!(partial.is_empty(), "partially stored batches: {partial:?}");
    // and every point is there exactly once
    let total = server
        .query_json("crash", "SELECT count(*) AS n FROM crash")
        .await;
    assert_eq!(total, vec![json!({"n": stored.len() * ROWS_PER_BATCH})]);
}

fn wal_segments(data_dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(data_dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segments.sort();
    segments
}

/// Byte offsets where the records of a segment end (format: 8-byte header, then per record a
/// 16-byte header whose first 4 bytes are the payload length).
fn record_ends(segment: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 8;
    while at + 16 <= segment.len() {
        let len = u32::from_le_bytes(segment[at..at + 4].try_into().unwrap()) as usize;
        at += 16 + len;
        ends.push(at);
    }
    ends
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[tokio::test]
async fn a_torn_wal_tail_recovers_everything_before_the_tear() {
    let mut rng = Rng(seed());
    let original = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(Some(original.path()), &[]).await;
    const WRITES: u64 = 30;
    for i in 0..WRITES {
        let lp = format!(
            "torn,writer=w0 batch={i}i,payload=\"{}\" {}\n",
            "x".repeat(rng.below(200) as usize),
            i + 1
        );
        assert_eq!(
            server.write_lp("db=torn&precision=ns", lp).await.status(),
            204
        );
    }
    server.kill9();
    let segments = wal_segments(original.path());
    let last = segments.last().unwrap().clone();
    let bytes = std::fs::read(&last).unwrap();
    let ends = record_ends(&bytes);
    assert_eq!(
        ends.len() as u64,
        WRITES,
        "one record per write, all in the last segment"
    );
    assert_eq!(*ends.last().unwrap(), bytes.len());
    let mut cuts: Vec<usize> = (0..8)
        .map(|_| 8 + rng.below((bytes.len() - 8) as u64) as usize)
        .collect();
    cuts.extend([8, bytes.len() - 1, ends[10], ends[10] + 1]);
    for cut in cuts {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(original.path(), copy.path());
        let torn = copy.path().join("wal").join(last.file_name().unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&torn)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        let complete = ends.iter().filter(|&&end| end <= cut).count() as i64;
        let server = Server::start_in(Some(copy.path()), &[]).await;
        let expected: Vec<_> = (0..complete).map(|b| json!({ "batch": b })).collect();
        if complete == 0 {
            let response = server.query("torn", "SELECT batch FROM torn", "json").await;
            assert_eq!(
                response.status(),
                404,
                "cut at {cut}: nothing should be left"
            );
        } else {
            let rows = server
                .query_json("torn", "SELECT batch FROM torn ORDER BY batch")
                .await;
            assert_eq!(rows, expected, "cut at {cut} of {}", bytes.len());
        }
        if !ends.contains(&cut) && cut > 8 {
            assert!(
                server.log().contains("torn record"),
                "cut at {cut}: the tear is logged"
            );
        }
    }
}

#[tokio::test]
async fn corruption_in_the_middle_of_the_wal_stops_startup_with_a_clear_error() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(Some(data.path()), &[]).await;
    for i in 0..5 {
        assert_eq!(
            server
                .write_lp("db=c&precision=ns", format!("m v={i} {}", i + 1))
                .await
                .status(),
            204
        );
    }
    server.kill9();
    let segment = wal_segments(data.path()).pop().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let ends = record_ends(&bytes);
    bytes[ends[1] + 20] ^= 0x55; // inside the third record's payload
    std::fs::write(&segment, &bytes).unwrap();

    let mut refused = Server::spawn(Some(data.path()), &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while refused.is_running() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!refused.is_running(), "startup must fail");
    let log = refused.log();
    assert!(
        log.contains(&segment.file_name().unwrap().to_string_lossy().to_string()),
        "{log}"
    );
    assert!(log.contains(&format!("offset {}", ends[1])), "{log}");
    assert!(log.contains("wal_recovery"), "{log}");

    let recovered =
        Server::start_in(Some(data.path()), &[("QUIVER_WAL_RECOVERY", "truncate")]).await;
    let rows = recovered
        .query_json("c", "SELECT v FROM m ORDER BY v")
        .await;
    assert_eq!(rows, vec![json!({"v": 0.0}), json!({"v": 1.0})]);
}

#[tokio::test]
async fn no_sync_writes_are_acknowledged_and_visible() {
    let server = Server::start().await;
    let response = server.write_lp("db=n&no_sync=true", "m v=1 1").await;
    assert_eq!(response.status(), 204);
    assert_eq!(
        server.query_json("n", "SELECT v FROM m").await,
        vec![json!({"v": 1.0})]
    );
}

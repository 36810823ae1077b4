//! Tests of the store end to end: writes, persists, restarts, the catalog and the files on
//! disk, and reading rows back as a query would (helpers the other test modules share too).

use futures::executor::block_on;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;

use super::*;

fn decode(store: &Store, db: &str, lp: &str) -> Vec<DecodedTable> {
    let options = DecodeOptions::for_tests();
    let decoded = match store.database(db) {
        Some(db) => decode_line_protocol(lp.as_bytes(), &options, db.as_ref()),
        None => decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables),
    };
    assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
    decoded.tables
}

pub(super) fn try_write(store: &Store, db: &str, lp: &str) -> Result<WriteReceipt, StorageError> {
    block_on(store.write(db, decode(store, db, lp), Durability::Sync))
}

/// Writes line protocol (which must be accepted) to `db`, durably.
pub(super) fn write(store: &Store, db: &str, lp: &str) -> WriteReceipt {
    try_write(store, db, lp).unwrap()
}

fn rows(store: &Store, db: &str, table: &str) -> usize {
    store
        .database(db)
        .unwrap()
        .table(table)
        .unwrap()
        .snapshot()
        .unwrap()
        .num_rows()
}

#[test]
fn a_second_requested_compaction_is_refused_while_one_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    write(&store, "m", "cpu v=1 1");
    let running = store.requested_compaction.lock();
    let refused = store.compact_now(CompactionScope::default());
    assert!(
        matches!(refused, Err(StorageError::CompactionRunning)),
        "{refused:?}"
    );
    drop(running);
    store.compact_now(CompactionScope::default()).unwrap();
}

#[test]
fn a_kept_last_point_answer_is_for_its_snapshot_and_its_time_only() {
    let store = Store::default();
    write(
        &store,
        "m",
        "cpu,host=a v=1 10\ncpu,host=b v=2 20\ncpu,host=a v=3 30",
    );
    let table = store.database("m").unwrap().table("cpu").unwrap();
    let cache = ChunkCache::new(1 << 20);
    let hosts = |rows: &arrow::array::RecordBatch| rows.num_rows();
    let snapshot = table.snapshot().unwrap();
    assert_eq!(
        hosts(&latest_rows(store.data_store(), &snapshot, i64::MIN, &cache).unwrap()),
        2
    );
    // the same snapshot asked since another time: b's newest row (20) is older
    assert_eq!(
        hosts(&latest_rows(store.data_store(), &snapshot, 25, &cache).unwrap()),
        1
    );
    assert_eq!(
        hosts(&latest_rows(store.data_store(), &snapshot, i64::MIN, &cache).unwrap()),
        2
    );
    // a write makes another snapshot, which answers anew
    write(&store, "m", "cpu,host=c v=4 40");
    let snapshot = table.snapshot().unwrap();
    assert_eq!(
        hosts(&latest_rows(store.data_store(), &snapshot, i64::MIN, &cache).unwrap()),
        3
    );
    assert_eq!(
        hosts(&latest_rows(store.data_store(), &snapshot, 25, &cache).unwrap()),
        2
    );
}

#[test]
fn schema_evolves_and_old_rows_read_null() {
    let store = Store::default();
    write(&store, "metrics", "cpu,host=a usage=1 1");
    let table = store.database("metrics").unwrap().table("cpu").unwrap();
    let first = table.version();
    write(&store, "metrics", "cpu,host=b,dc=x usage=2,idle=5i 2");
    assert!(table.version() > first, "a write moves the version on");
    let snapshot = table.snapshot().unwrap();
    assert_eq!(snapshot.num_rows(), 2);
    let names: Vec<_> = snapshot
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["dc", "host", "idle", "time", "usage"]);
    let idle = snapshot.batches[0].column_by_name("idle").unwrap();
    assert_eq!(idle.null_count(), 1);
}

#[test]
fn snapshots_are_cached_per_version_and_dedup_across_writes() {
    let store = Store::default();
    write(&store, "m", "cpu,host=a a=1,b=1 10");
    let table = store.database("m").unwrap().table("cpu").unwrap();
    let s1 = table.snapshot().unwrap();
    assert!(Arc::ptr_eq(&s1, &table.snapshot().unwrap()));
    write(&store, "m", "cpu,host=a a=2 10");
    let s2 = table.snapshot().unwrap();
    assert!(s2.version > s1.version);
    assert_eq!(s2.num_rows(), 1, "same series and time is one point");
}

#[test]
fn racing_type_conflict_is_rejected_whole() {
    let store = Store::default();
    // Both decoded before either is written, as two concurrent requests would be.
    let first = decode(&store, "m", "cpu v=1 1");
    let second = decode(&store, "m", "cpu v=1i 1");
    block_on(store.write("m", first, Durability::Sync)).unwrap();
    let err = block_on(store.write("m", second, Durability::Sync)).unwrap_err();
    assert!(err.to_string().contains("\"v\""), "{err}");
    assert_eq!(rows(&store, "m", "cpu"), 1);
}

#[test]
fn limits_and_names() {
    assert!(validate_database_name("metrics_1-a").is_ok());
    assert!(validate_database_name("").is_err());
    assert!(validate_database_name("a/b").is_err());
    assert!(validate_database_name("_x").is_err());
    for reserved in RESERVED_DATABASE_NAMES {
        let error = validate_database_name(reserved).unwrap_err().to_string();
        assert!(error.contains("reserved"), "{error}");
    }
    let store = Store::new(StoreLimits {
        max_databases: 1,
        max_tables_per_database: 1,
        max_columns_per_table: 3,
    });
    write(&store, "a", "t1 v=1 1");
    assert!(matches!(
        try_write(&store, "b", "t1 v=1 1"),
        Err(StorageError::TooManyDatabases { .. })
    ));
    assert!(store.database("b").is_none());
    assert!(matches!(
        try_write(&store, "a", "t2 v=1 1"),
        Err(StorageError::TooManyTables { .. })
    ));
    assert!(matches!(
        try_write(&store, "a", "t1 v=1,w=2,x=3 1"),
        Err(StorageError::TooManyColumns { .. })
    ));
    assert!(matches!(
        try_write(&store, "bad name", "t v=1 1"),
        Err(StorageError::InvalidDatabaseName { .. })
    ));
}

#[test]
fn a_failed_multi_table_write_changes_nothing() {
    let store = Store::default();
    write(&store, "m", "b v=1 1");
    let version = store.database("m").unwrap().table("b").unwrap().version();
    // Decoded as if no table existed yet, as a writer racing another would have.
    let racing = decode(&Store::default(), "m", "a v=1 1\nb v=\"s\" 2");
    assert!(block_on(store.write("m", racing, Durability::Sync)).is_err());
    let db = store.database("m").unwrap();
    assert!(db.table("a").is_none(), "a failed write creates no table");
    assert_eq!(db.table("b").unwrap().version(), version, "nothing changed");
    assert!(block_on(store.write(
        "fresh",
        decode(&store, "fresh", "x v=1 1"),
        Durability::Sync
    ))
    .is_ok());
}

fn options(dir: &std::path::Path) -> StoreOptions {
    let mut options = StoreOptions::for_tests(dir);
    options.wal.segment_bytes = 4096;
    options.wal.fsync = true;
    options
}

pub(super) fn open(dir: &std::path::Path) -> (Arc<Store>, OpenSummary) {
    Store::open(StoreLimits::default(), options(dir)).unwrap()
}

#[test]
fn writes_survive_a_restart_through_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, summary) = open(dir.path());
        assert_eq!(summary.replay.records, 0);
        for i in 0..50 {
            let receipt = write(
                &store,
                "m",
                &format!("cpu,host=h{} v={i} {i}\nmem free={i}u {i}", i % 3),
            );
            assert_eq!(receipt.sequence, Some(i + 1));
        }
        write(&store, "other", "t s=\"text\",b=true 7");
        let conflicting = decode(&Store::default(), "m", "cpu v=\"conflict\" 1");
        assert!(block_on(store.write("m", conflicting, Durability::Sync)).is_err());
        store.close();
    }
    let (store, summary) = open(dir.path());
    assert_eq!(summary.replay.records, 51);
    assert_eq!(rows(&store, "m", "cpu"), 50);
    assert_eq!(rows(&store, "m", "mem"), 50);
    assert_eq!(rows(&store, "other", "t"), 1);
    // numbering continues after the replayed records
    assert_eq!(write(&store, "m", "cpu v=1 1000").sequence, Some(52));
}

/// Every row of a table, buffered and persisted, read back through Parquet and merged
/// with "later write wins": what a query would see.
pub(super) fn all_rows(store: &Store, db: &str, table: &str) -> arrow::array::RecordBatch {
    let snapshot = store
        .database(db)
        .unwrap()
        .table(table)
        .unwrap()
        .snapshot()
        .unwrap();
    let mut chunks = Vec::new();
    for file in snapshot.files.iter() {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            data_store::read_whole(store.data_store(), &file.entry).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        chunks.extend(reader.map(Result::unwrap));
    }
    chunks.extend(snapshot.batches.iter().cloned());
    crate::table_rows::merge_chunks(&snapshot.schema, chunks).unwrap()
}

#[test]
fn persisting_keeps_results_identical_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let day = 86_400_000_000_000i64;
    let before;
    {
        let (store, _) = open(dir.path());
        for i in 0..40i64 {
            // two days, several series, and rewrites of earlier points
            let t = (i % 10) * day / 4;
            write(
                &store,
                "m",
                &format!("cpu,host=h{} v={i},w={}i {t}", i % 3, i * 2),
            );
        }
        before = all_rows(&store, "m", "cpu");
        let summary = store.persist_now().unwrap();
        assert_eq!(summary.tables, 1);
        assert_eq!(summary.files, 3, "{summary:?}");
        assert_eq!(summary.rows as usize, before.num_rows());
        assert!(summary.wal_segments_removed > 0, "{summary:?}");
        let table = store.database("m").unwrap().table("cpu").unwrap();
        assert_eq!(table.buffered_bytes(), 0);
        assert_eq!(table.snapshot().unwrap().num_rows(), 0);
        assert_eq!(all_rows(&store, "m", "cpu"), before);
        // a later write overrides one persisted field of a persisted point
        let persisted_version = table.version();
        write(&store, "m", "cpu,host=h0 v=-1 0");
        assert!(table.version() > persisted_version);
        store.close();
    }
    let catalog = catalog::load(&DataStore::directory(dir.path()).unwrap()).unwrap();
    let persisted_version = catalog.databases["m"].tables["cpu"].version;
    let files = &catalog.databases["m"].tables["cpu"].files;
    assert_eq!(files.len(), 3);
    assert!(files.iter().all(|f| f.path.starts_with("tables/m/1/197")));
    let (store, summary) = open(dir.path());
    assert_eq!(summary.files, 3);
    assert_eq!(summary.replayed_records, 1, "{summary:?}");
    let table = store.database("m").unwrap().table("cpu").unwrap();
    assert!(table.version() > persisted_version, "the replayed write");
    let after = all_rows(&store, "m", "cpu");
    assert_eq!(after.num_rows(), before.num_rows());
    let v = after.column_by_name("v").unwrap();
    let v = v
        .as_any()
        .downcast_ref::<arrow::array::Float64Array>()
        .unwrap();
    assert_eq!(
        v.value(0),
        -1.0,
        "the later write wins over the persisted value"
    );
    assert_eq!(
        after.column_by_name("w").unwrap(),
        before.column_by_name("w").unwrap(),
        "fields the later write did not set keep their persisted values"
    );
    store.persist_now().unwrap();
    store.close();
    let (store, summary) = open(dir.path());
    assert_eq!(summary.replayed_records, 0);
    assert_eq!(all_rows(&store, "m", "cpu"), after);
}

#[test]
fn one_store_per_data_directory_until_it_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = open(dir.path());
    write(&first, "m", "cpu v=1 1");
    let alias = dir.path().join("./.");
    let err = Store::open(StoreLimits::default(), options(&alias))
        .err()
        .unwrap();
    assert!(matches!(err, StorageError::DataDirInUse { .. }), "{err}");
    assert!(err.to_string().contains("in use by another Quiver process"));
    first.close();
    assert!(matches!(first.persist_now(), Err(StorageError::Closed)));
    let (second, summary) = open(dir.path());
    assert_eq!(summary.replayed_records, 1);
    assert_eq!(
        second.data_dir(),
        Some(dir.path().canonicalize().unwrap().as_path())
    );
}

#[test]
fn orphaned_files_are_removed_and_missing_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = open(dir.path());
        write(&store, "m", "cpu v=1 1");
        store.persist_now().unwrap();
        store.close();
    }
    let orphan = dir
        .path()
        .join("tables/m/1/1970-01-01/0000000000000099.parquet");
    std::fs::write(&orphan, b"half-written").unwrap();
    let (store, summary) = open(dir.path());
    assert_eq!(summary.orphans_removed, 1);
    assert!(!orphan.exists());
    store.close();
    let catalog = catalog::load(&DataStore::directory(dir.path()).unwrap()).unwrap();
    let file = &catalog.databases["m"].tables["cpu"].files[0];
    std::fs::remove_file(dir.path().join(&file.path)).unwrap();
    let err = Store::open(StoreLimits::default(), options(dir.path()))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("is missing"), "{err}");
}

#[test]
fn background_persistence_bounds_the_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.persist.persist_bytes = 64 << 10;
    options.persist.max_buffer_bytes = 256 << 10;
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let mut expected = 0;
    for batch in 0..200 {
        let lines: String = (0..50)
            .map(|i| format!("cpu,host=h{} v={i} {}\n", i % 5, batch * 50 + i))
            .collect();
        write(&store, "m", &lines);
        expected += 50;
        let buffered = store.persist_stats().unwrap().buffered_bytes;
        assert!(buffered <= (256 + 64) << 10, "{buffered}");
    }
    let stats = store.persist_stats().unwrap();
    assert!(stats.persists > 0, "{stats:?}");
    assert_eq!(all_rows(&store, "m", "cpu").num_rows(), expected);
    store.close();
}

#[test]
fn the_persist_lag_and_the_writes_that_waited_for_space_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.persist.persist_bytes = 1 << 30;
    options.persist.max_age = std::time::Duration::from_secs(3600);
    let limit = options.persist.max_buffer_bytes;
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let stats = store.persist_stats().unwrap();
    assert_eq!(stats.unpersisted_for, None, "{stats:?}");
    assert_eq!(stats.persist_at_bytes, 1 << 30);
    assert_eq!(stats.buffer_limit_bytes, limit);
    write(&store, "m", "cpu,host=a v=1 1\n");
    std::thread::sleep(std::time::Duration::from_millis(30));
    write(&store, "m", "cpu,host=a v=2 2\n");
    // the lag counts from the oldest write not yet persisted, not the newest
    let lag = store.persist_stats().unwrap().unpersisted_for.unwrap();
    assert!(lag >= std::time::Duration::from_millis(30), "{lag:?}");
    store.persist_now().unwrap();
    let stats = store.persist_stats().unwrap();
    assert_eq!(stats.unpersisted_for, None, "{stats:?}");
    assert_eq!(stats.write_waits, 0);
    store.close();

    // a buffer smaller than one write: every write after the first waits for a persist
    let dir = tempfile::tempdir().unwrap();
    let mut options = self::options(dir.path());
    options.persist.persist_bytes = 1;
    options.persist.max_buffer_bytes = 1;
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    for batch in 0..5 {
        write(&store, "m", &format!("cpu,host=a v={batch} {batch}\n"));
    }
    let stats = store.persist_stats().unwrap();
    assert!(stats.write_waits >= 1, "{stats:?}");
    assert!(
        stats.write_wait_time > std::time::Duration::ZERO,
        "{stats:?}"
    );
    assert_eq!(all_rows(&store, "m", "cpu").num_rows(), 5);
    store.close();
}

#[test]
fn a_write_that_waits_past_max_buffer_wait_is_refused_and_none_of_it_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.persist.persist_bytes = 1;
    options.persist.max_buffer_bytes = 1;
    options.persist.max_buffer_wait = std::time::Duration::from_millis(200);
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let write_on_runtime =
        |lp: &str| runtime.block_on(store.write("m", decode(&store, "m", lp), Durability::Sync));
    // no persist can run while the test holds the persister's lock
    let persister = store.persister.clone().unwrap();
    let held = persister.running.lock();
    write_on_runtime("cpu,host=a v=1 1\n").unwrap();
    let started = std::time::Instant::now();
    let refused = write_on_runtime("cpu,host=a v=2 2\n").unwrap_err();
    assert!(started.elapsed() >= std::time::Duration::from_millis(200));
    assert!(
        matches!(refused, StorageError::BufferBusy { .. }),
        "{refused:?}"
    );
    use quiver_model::Classify;
    assert_eq!(refused.kind(), quiver_model::ErrorKind::Busy);
    let message = refused.to_string();
    assert!(
        message.contains("max_buffer_bytes") && message.contains("max_buffer_wait_secs (200ms)"),
        "{message}"
    );
    drop(held);
    store.persist_now().unwrap();
    // with room again, writes are taken; the refused one never was
    write_on_runtime("cpu,host=a v=3 3\n").unwrap();
    let rows = all_rows(&store, "m", "cpu");
    let times = crate::table_rows::time_column(&rows).unwrap();
    assert_eq!(times.values().to_vec(), [1, 3]);
    let stats = store.persist_stats().unwrap();
    assert_eq!(stats.write_refusals, 1, "{stats:?}");
    assert!(stats.times.encode_seconds > 0.0, "{stats:?}");
    store.close();
}

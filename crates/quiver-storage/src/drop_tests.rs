//! Tests of dropping tables and databases and of retention, end to end through a durable
//! store: the catalog, the files on disk, the WAL replay and the buffer's accounting.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;

use super::store_tests::{all_rows, write};
use super::*;
use crate::buffer::Dropped;

fn open(dir: &Path) -> Arc<Store> {
    Store::open(StoreLimits::default(), StoreOptions::for_tests(dir))
        .unwrap()
        .0
}

/// The rows a query of `table` sees (buffer and files, deduplicated).
fn rows(store: &Store, db: &str, table: &str) -> usize {
    all_rows(store, db, table).num_rows()
}

fn file_paths(store: &Store, db: &str, table: &str) -> Vec<std::path::PathBuf> {
    let table = store.database(db).unwrap().table(table).unwrap();
    let snapshot = table.snapshot().unwrap();
    let dir = store.data_dir().unwrap();
    snapshot
        .files
        .iter()
        .map(|f| dir.join(&f.entry.path))
        .collect()
}

/// The buffer's byte count is the sum of what its tables hold.
fn assert_buffer_accounted(store: &Store) {
    let tables: usize = store
        .database_names()
        .iter()
        .filter_map(|name| store.database(name))
        .flat_map(|db| db.tables())
        .map(|t| t.buffered_bytes())
        .sum();
    assert_eq!(store.persist_stats().unwrap().buffered_bytes, tables);
}

#[test]
fn a_dropped_table_is_gone_with_its_files_and_comes_back_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    write(&store, "m", "cpu,host=a v=1 1\nmem,host=a free=1 1");
    store.persist_now().unwrap();
    write(&store, "m", "cpu,host=a v=2 2\nmem,host=a free=2 2");
    let old = store.database("m").unwrap().table("cpu").unwrap();
    let old_version = old.version();
    let files = file_paths(&store, "m", "cpu");
    assert_eq!(files.len(), 1);

    store.drop_table("m", "cpu").unwrap();
    assert!(store.database("m").unwrap().table("cpu").is_none());
    assert!(old.is_dropped());
    assert!(!store.catalog().unwrap().databases["m"]
        .tables
        .contains_key("cpu"));
    assert!(files.iter().all(|f| !f.exists()), "the files are deleted");
    assert_eq!(rows(&store, "m", "mem"), 2, "the other table is untouched");
    assert_buffer_accounted(&store);

    write(&store, "m", "cpu,host=b v=3 3");
    let new = store.database("m").unwrap().table("cpu").unwrap();
    assert_eq!(rows(&store, "m", "cpu"), 1, "a new table starts empty");
    assert!(new.version() > old_version, "versions are never repeated");
    store.close();

    let store = open(dir.path());
    assert_eq!(rows(&store, "m", "cpu"), 1);
    assert_eq!(rows(&store, "m", "mem"), 2);
}

#[test]
fn unknown_names_are_not_found_and_bad_names_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    write(&store, "m", "cpu v=1 1");
    for result in [
        store.drop_table("m", "nope"),
        store.drop_table("nope", "cpu"),
        store.drop_database("nope"),
        store.set_retention("nope", None).map(drop),
    ] {
        assert!(
            matches!(result, Err(StorageError::NotFound { .. })),
            "{result:?}"
        );
    }
    for result in [
        store.drop_table("m", ""),
        store.drop_table("m", &"t".repeat(513)),
        store.drop_database("../etc"),
        store.create_database("", None).map(drop),
    ] {
        let error = result.unwrap_err();
        assert_eq!(
            quiver_model::Classify::kind(&error),
            quiver_model::ErrorKind::Invalid,
            "{error}"
        );
    }
    assert!(matches!(
        store.create_database("m", None),
        Err(StorageError::AlreadyExists { .. })
    ));
    assert_eq!(rows(&store, "m", "cpu"), 1, "nothing was lost");
}

#[test]
fn a_dropped_database_takes_its_tables_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let day = RetentionPeriod::parse("1d").unwrap();
    store.create_database("m", Some(day)).unwrap();
    write(&store, "m", "cpu v=1 1\nmem v=1 1");
    store.persist_now().unwrap();
    write(&store, "m", "cpu v=2 2");
    write(&store, "other", "cpu v=1 1");
    let files: Vec<_> = ["cpu", "mem"]
        .iter()
        .flat_map(|t| file_paths(&store, "m", t))
        .collect();

    store.drop_database("m").unwrap();
    assert!(store.database("m").is_none());
    assert!(!store.catalog().unwrap().databases.contains_key("m"));
    assert!(files.iter().all(|f| !f.exists()));
    assert_eq!(rows(&store, "other", "cpu"), 1);
    assert_buffer_accounted(&store);

    // created again: empty, with the server's retention, and it may be created explicitly
    write(&store, "m", "cpu v=9 9");
    assert_eq!(rows(&store, "m", "cpu"), 1);
    let db = store.database("m").unwrap();
    assert_eq!(db.retention_setting(), None);
    assert_eq!(db.retention_period(), RetentionPeriod::FOREVER);
    store.drop_database("m").unwrap();
    store.create_database("m", Some(day)).unwrap();
    store.close();

    let store = open(dir.path());
    let db = store.database("m").unwrap();
    assert_eq!(db.retention_setting(), Some(day), "the setting is durable");
    assert!(db.table_names().is_empty());
    assert_eq!(rows(&store, "other", "cpu"), 1);
}

#[test]
fn a_drop_logged_but_not_yet_in_the_catalog_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    write(&store, "m", "cpu v=1 1");
    store.persist_now().unwrap();
    write(&store, "m", "cpu v=2 2");
    // what drop_table does, up to the persist it ends with (as if the process died there)
    {
        let _order = store.sequencer.lock();
        let tables = store.take_out("m", Some("cpu")).unwrap();
        let payload = wal_record::encode_drop("m", Some("cpu")).unwrap();
        let dropped = Dropped {
            database: "m".into(),
            table: Some("cpu".into()),
            tables,
        };
        let logged = store
            .wal()
            .unwrap()
            .append(payload, Change::Drop(dropped), Durability::Sync);
        drop(_order);
        block_on(logged).unwrap();
    }
    write(&store, "m", "cpu v=3 3");
    assert!(store.catalog().unwrap().databases["m"]
        .tables
        .contains_key("cpu"));
    store.close();

    let store = open(dir.path());
    assert_eq!(rows(&store, "m", "cpu"), 1, "only the write after the drop");
    // the next persist takes the old table out of the catalog and frees its file
    let old_files: Vec<String> = store.catalog().unwrap().databases["m"].tables["cpu"]
        .files
        .iter()
        .map(|f| f.path.clone())
        .collect();
    assert_eq!(old_files.len(), 1);
    store.persist_now().unwrap();
    let catalog = store.catalog().unwrap();
    let cpu = &catalog.databases["m"].tables["cpu"];
    assert_eq!(cpu.files.iter().map(|f| f.rows).sum::<u64>(), 1);
    assert!(cpu.files.iter().all(|f| !old_files.contains(&f.path)));
    assert!(!dir.path().join(&old_files[0]).exists());
    store.close();
    let store = open(dir.path());
    assert_eq!(rows(&store, "m", "cpu"), 1);
}

#[test]
fn writes_racing_a_drop_land_before_it_or_in_the_new_table() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    write(&store, "m", "cpu v=0 0");
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    write(&store, "m", &format!("cpu,w=w{w} v={i} {}", i + 1));
                }
            })
        })
        .collect();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(5));
        match store.drop_table("m", "cpu") {
            Ok(()) | Err(StorageError::NotFound { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    for writer in writers {
        writer.join().unwrap();
    }
    assert_buffer_accounted(&store);
    let count = |store: &Store| match store.database("m").unwrap().table("cpu") {
        Some(_) => rows(store, "m", "cpu"),
        None => 0,
    };
    let after_race = count(&store);
    assert!(after_race <= 400);
    store.persist_now().unwrap();
    assert_buffer_accounted(&store);
    store.close();
    let store = open(dir.path());
    assert_eq!(count(&store), after_race, "the restart sees the same rows");
}

#[test]
fn retention_hides_nothing_in_storage_but_deletes_whole_expired_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let hour = RetentionPeriod::parse("1h").unwrap();
    store.create_database("m", None).unwrap();
    let now = retention::now_ns();
    let day = 86_400_000_000_000i64;
    // one row three days ago (its own partition), one now
    write(
        &store,
        "m",
        &format!("cpu v=1 {}\ncpu v=2 {}", now - 3 * day, now),
    );
    store.persist_now().unwrap();
    let table = store.database("m").unwrap().table("cpu").unwrap();
    assert_eq!(
        table.retention_cutoff_ns(now),
        None,
        "kept forever by default"
    );
    let snapshot = table.snapshot().unwrap();
    assert_eq!(snapshot.files.len(), 2);
    let old_file = snapshot
        .files
        .iter()
        .find(|f| f.entry.max_time_ns < now - day)
        .map(|f| store.data_dir().unwrap().join(&f.entry.path))
        .unwrap();
    drop(snapshot);

    let version = table.version();
    store.set_retention("m", Some(hour)).unwrap();
    let cutoff = table.retention_cutoff_ns(now).unwrap();
    // 1 h moves in 3 s steps
    assert!(cutoff <= now - 3_600_000_000_000 && cutoff > now - 3_603_000_000_000);
    // the background maintainer deletes the expired file within about a second
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.compaction_stats().unwrap().expired_files == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(store.compaction_stats().unwrap().expired_files, 1);
    assert!(
        table.version() > version,
        "deleting expired rows changes the table"
    );
    assert_eq!(table.snapshot().unwrap().files.len(), 1);
    assert_eq!(rows(&store, "m", "cpu"), 1);
    assert!(!old_file.exists());
    assert_eq!(
        store.persister.as_ref().unwrap().expire(now).unwrap(),
        0,
        "nothing more is past the period"
    );

    // forever keeps everything; the server default applies to databases without their own
    store
        .set_retention("m", Some(RetentionPeriod::FOREVER))
        .unwrap();
    assert_eq!(table.retention_cutoff_ns(now), None);
    store.set_retention("m", None).unwrap();
    assert_eq!(table.retention_cutoff_ns(now), None);
    store.close();
    let mut options = StoreOptions::for_tests(dir.path());
    options.retention_period = RetentionPeriod::parse("2h").unwrap();
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let table = store.database("m").unwrap().table("cpu").unwrap();
    let cutoff = table.retention_cutoff_ns(now).unwrap();
    // 2 h moves in 7 s steps
    assert!(cutoff <= now - 7_200_000_000_000 && cutoff > now - 7_207_000_000_000);
}

#[test]
fn a_table_taken_out_for_a_drop_not_yet_logged_is_still_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    write(&store, "m", "cpu v=1 1\nmem v=1 1");
    // the first half of a drop (as if logging it were slow, or failed): taken out, not applied
    let taken = {
        let _order = store.sequencer.lock();
        store.take_out("m", Some("cpu")).unwrap()
    };
    assert_eq!(taken.len(), 1);
    let summary = store.persist_now().unwrap();
    assert_eq!(summary.tables, 2, "{summary:?}");
    let catalog = store.catalog().unwrap();
    assert_eq!(catalog.databases["m"].tables["cpu"].files.len(), 1);
    assert_buffer_accounted(&store);
    store.close();
    // the drop never became durable: the acknowledged row is still there
    let store = open(dir.path());
    assert_eq!(rows(&store, "m", "cpu"), 1);
}

#[test]
fn replay_ignores_a_database_limit_lowered_since() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for db in ["a", "b", "c"] {
        write(&store, db, "cpu v=1 1");
    }
    store.close();
    let limits = StoreLimits {
        max_databases: 1,
        ..StoreLimits::default()
    };
    let (store, _) = Store::open(limits, StoreOptions::for_tests(dir.path())).unwrap();
    assert_eq!(store.database_names(), ["a", "b", "c"]);
    assert!(matches!(
        store.create_database("d", None),
        Err(StorageError::TooManyDatabases { .. })
    ));
}

//! Tests of a query node following a writer through a shared store (a `file://` directory):
//! what it sees after persists, drops and a garbage catalog, and which table versions move.

use std::path::Path;
use std::sync::Arc;

use super::store_tests::{all_rows, write};
use super::*;

fn options(dir: &Path, name: &str, shared: &Path, access: StoreAccess) -> StoreOptions {
    StoreOptions {
        object_store_url: format!("file://{}", shared.display()),
        access,
        ..StoreOptions::for_tests(&dir.join(name))
    }
}

fn open(options: StoreOptions) -> Arc<Store> {
    Store::open(StoreLimits::default(), options).unwrap().0
}

fn follow(node: &Store) {
    node.follower.as_ref().unwrap().check_now().unwrap();
}

fn version(store: &Store, db: &str, table: &str) -> Option<u64> {
    Some(store.database(db)?.table(table)?.version())
}

#[test]
fn a_query_node_follows_persists_and_moves_only_the_versions_of_changed_tables() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    write(&writer, "m", "cpu,host=a v=1 1\nmem,host=a free=2i 1");
    writer.persist_now().unwrap();
    let node = open(options(dir.path(), "node", &shared, StoreAccess::Follower));
    assert_eq!(all_rows(&node, "m", "cpu").num_rows(), 1);
    let (cpu, mem) = (version(&node, "m", "cpu"), version(&node, "m", "mem"));

    // buffered on the writer only: the node does not see it, nothing moves
    write(&writer, "m", "cpu,host=b v=3 2");
    follow(&node);
    assert_eq!(all_rows(&node, "m", "cpu").num_rows(), 1);
    assert_eq!(version(&node, "m", "cpu"), cpu);
    // persisted: cpu moves, mem keeps its version (and the answers cached under it)
    writer.persist_now().unwrap();
    follow(&node);
    assert_eq!(all_rows(&node, "m", "cpu").num_rows(), 2);
    assert!(version(&node, "m", "cpu") > cpu);
    assert_eq!(version(&node, "m", "mem"), mem);
    assert_eq!(
        node.follow_stats().unwrap().catalog_version,
        writer.catalog().unwrap().version
    );
    // a compaction changes files, not rows: the version moves all the same (new files)
    let before = version(&node, "m", "cpu");
    writer
        .compact_now(CompactionScope {
            database: Some("m"),
            table: Some("cpu"),
        })
        .unwrap();
    follow(&node);
    assert!(version(&node, "m", "cpu") > before);
    assert_eq!(all_rows(&node, "m", "cpu").num_rows(), 2);
    // a dropped table goes
    writer.drop_table("m", "mem").unwrap();
    writer.persist_now().unwrap();
    follow(&node);
    assert!(node.database("m").unwrap().table("mem").is_none());

    // the node changes nothing
    let err = super::store_tests::try_write(&node, "m", "cpu,host=c v=1 3").unwrap_err();
    assert!(err.to_string().contains("role = query"), "{err}");
    assert!(matches!(
        node.drop_table("m", "cpu"),
        Err(StorageError::QueryNode { .. })
    ));
    assert!(node.check_current().is_ok());
}

#[test]
fn a_garbage_catalog_version_stops_answers_until_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    write(&writer, "m", "cpu,host=a v=1 1");
    writer.persist_now().unwrap();
    let node = open(options(dir.path(), "node", &shared, StoreAccess::Follower));
    let newest = writer.catalog().unwrap().version;
    let garbage = shared.join(catalog::version_object(newest + 1));
    std::fs::write(&garbage, b"{\"format\": 1,").unwrap();
    assert!(node.follower.as_ref().unwrap().check_now().is_err());
    let err = node.check_current().unwrap_err().to_string();
    assert!(err.contains(&catalog::version_object(newest + 1)), "{err}");
    assert!(node.follow_stats().unwrap().error.is_some());
    std::fs::remove_file(&garbage).unwrap();
    follow(&node);
    assert!(node.check_current().is_ok());
    assert_eq!(all_rows(&node, "m", "cpu").num_rows(), 1);
}

#[test]
fn a_writer_of_a_shared_store_does_not_start_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    write(&writer, "m", "cpu,host=a v=1 1");
    writer.persist_now().unwrap();
    writer.close();
    drop(writer);
    let local = StoreOptions::for_tests(&dir.path().join("writer"));
    let err = Store::open(StoreLimits::default(), local).err().unwrap();
    assert!(
        err.to_string()
            .contains("was the writer of object_store_url"),
        "{err}"
    );
    // with it, every row is there (the WAL's and the store's)
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    assert_eq!(all_rows(&writer, "m", "cpu").num_rows(), 1);
}

#[test]
fn a_query_node_needs_the_writers_object_store() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        access: StoreAccess::Follower,
        ..StoreOptions::for_tests(dir.path())
    };
    let err = Store::open(StoreLimits::default(), options).err().unwrap();
    assert!(err.to_string().contains("set object_store_url"), "{err}");
}

/// The last-value cache of `m.cpu` keyed by its tags.
fn last_cache(store: &Store) -> ValueCache {
    let columns = store.database("m").unwrap().table("cpu").unwrap().columns();
    ValueCache {
        db: "m".into(),
        table: "cpu".into(),
        name: "cpu_last".into(),
        kind: ValueCacheKind::last(&columns, None, None, None, None),
    }
}

#[test]
fn a_query_node_serves_the_writers_value_caches_and_follows_their_changes() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    write(&writer, "m", "cpu,host=a v=1 1");
    writer.persist_now().unwrap();
    let cache = last_cache(&writer);
    writer.create_value_cache(cache.clone()).unwrap();
    // configured through the catalog's writer: a node started now has it
    let node = open(options(dir.path(), "node", &shared, StoreAccess::Follower));
    assert_eq!(node.value_caches().list(), vec![cache.clone()]);
    // dropped on the writer: gone on the node with the next catalog it follows
    writer
        .drop_value_cache("last", "m", "cpu", "cpu_last")
        .unwrap();
    follow(&node);
    assert!(node.value_caches().list().is_empty());
    // and configured again
    writer.create_value_cache(cache.clone()).unwrap();
    follow(&node);
    assert_eq!(node.value_caches().list(), vec![cache.clone()]);
    // the node configures none itself
    assert!(matches!(
        node.create_value_cache(cache),
        Err(StorageError::QueryNode { .. })
    ));
}

#[test]
fn value_caches_kept_in_the_old_file_move_into_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = super::store_tests::open(dir.path());
    write(&store, "m", "cpu,host=a v=1 1");
    let cache = last_cache(&store);
    store.close();
    drop(store);
    // a data directory of a build that kept the caches beside the catalog
    let legacy = dir.path().join(VALUE_CACHES_FILE);
    std::fs::write(&legacy, serde_json::to_vec(&vec![cache.clone()]).unwrap()).unwrap();
    let (store, _) = super::store_tests::open(dir.path());
    assert_eq!(store.value_caches().list(), vec![cache.clone()]);
    assert!(
        !legacy.exists(),
        "the old file is deleted once the catalog holds its caches"
    );
    assert_eq!(store.catalog().unwrap().value_caches, vec![cache.clone()]);
    store.close();
    drop(store);
    // from the catalog alone after a restart
    let (store, _) = super::store_tests::open(dir.path());
    assert_eq!(store.value_caches().list(), vec![cache]);
    // a garbage old file is refused with its name, not ignored
    store.close();
    drop(store);
    std::fs::write(&legacy, b"{not json").unwrap();
    let err = Store::open(StoreLimits::default(), StoreOptions::for_tests(dir.path()))
        .err()
        .unwrap();
    assert!(err.to_string().contains(VALUE_CACHES_FILE), "{err}");
}

use crate::rollup_states::tests::{covered, ten_minutes_of_cpu, MINUTE};

#[test]
fn a_query_node_keeps_the_writers_rollups_and_marks_what_new_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    write(&writer, "m", &format!("cpu,host=a v=1 {}", 5 * MINUTE));
    writer.persist_now().unwrap();
    writer.create_rollup(ten_minutes_of_cpu()).unwrap();
    let node = open(options(dir.path(), "node", &shared, StoreAccess::Follower));
    let rollup = node.rollups().get("m", "r").expect("the catalog's rollup");
    assert_eq!(rollup.definition(), &ten_minutes_of_cpu());
    assert!(rollup.dir().is_none(), "a node keeps its rollups in memory");
    assert!(
        covered(&node, 0, 40 * MINUTE).is_empty(),
        "everything pending at first"
    );
    // computed on the node (to no rows: storage does not look inside them)
    while let Some(range) = rollup.next_work(i64::MAX / 2, Some((5 * MINUTE, 5 * MINUTE))) {
        rollup.install(range, &[], 0).unwrap();
    }
    assert_eq!(covered(&node, 0, 40 * MINUTE), vec![(0, 40 * MINUTE)]);
    // buffered on the writer: nothing changes on the node; persisted: its bucket is pending
    write(&writer, "m", &format!("cpu,host=a v=2 {}", 25 * MINUTE));
    follow(&node);
    assert_eq!(covered(&node, 0, 40 * MINUTE), vec![(0, 40 * MINUTE)]);
    writer.persist_now().unwrap();
    follow(&node);
    assert_eq!(
        covered(&node, 0, 40 * MINUTE),
        vec![(0, 20 * MINUTE), (30 * MINUTE, 40 * MINUTE)]
    );
    // the node creates and drops none itself
    assert!(matches!(
        node.create_rollup(RollupDefinition {
            name: "other".into(),
            ..ten_minutes_of_cpu()
        }),
        Err(StorageError::QueryNode { .. })
    ));
    // dropped on the writer: gone on the node
    writer.drop_rollup("m", "r").unwrap();
    follow(&node);
    assert!(node.rollups().get("m", "r").is_none());
    assert!(rollup.is_dropped());
}

#[test]
fn the_catalog_names_the_rollups_and_a_lost_rollup_directory_is_computed_again() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = super::store_tests::open(dir.path());
    write(&store, "m", &format!("cpu,host=a v=1 {}", 5 * MINUTE));
    store.create_rollup(ten_minutes_of_cpu()).unwrap();
    assert_eq!(store.catalog().unwrap().rollups, vec![ten_minutes_of_cpu()]);
    store.close();
    drop(store);
    // the rollup's directory lost: the catalog still names it, everything pending again
    std::fs::remove_dir_all(dir.path().join(ROLLUPS_DIR)).unwrap();
    let (store, _) = super::store_tests::open(dir.path());
    assert_eq!(
        store.rollups().get("m", "r").unwrap().definition(),
        &ten_minutes_of_cpu()
    );
    assert!(covered(&store, 0, 40 * MINUTE).is_empty());
    // a dropped table takes its rollups out of the catalog
    store.drop_table("m", "cpu").unwrap();
    assert!(store.catalog().unwrap().rollups.is_empty());
    store.close();
    drop(store);
    let (store, _) = super::store_tests::open(dir.path());
    assert!(store.rollups().list().is_empty());
}

#[test]
fn a_query_node_applies_the_writers_published_documents_as_they_change() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let writer = open(options(dir.path(), "writer", &shared, StoreAccess::Writer));
    writer.publish("doc.json", "one".into()).unwrap();
    let node = open(options(dir.path(), "node", &shared, StoreAccess::Follower));
    let seen = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let into = seen.clone();
    let apply: ApplyPublished = Box::new(move |bytes: &[u8]| match bytes {
        b"refused" => Err("not applicable".to_string()),
        _ => {
            into.lock()
                .push(String::from_utf8_lossy(bytes).into_owned());
            Ok(())
        }
    });
    // applied at once when registered
    node.follow_published("doc.json", apply).unwrap();
    assert_eq!(*seen.lock(), ["one"]);
    let follower = node.follower.as_ref().unwrap();
    let read_all_now = || follower.follow_documents(std::time::Instant::now() + DOCUMENT_INTERVAL);
    // unchanged: not applied again; changed: applied once
    read_all_now();
    writer.publish("doc.json", "two".into()).unwrap();
    read_all_now();
    read_all_now();
    assert_eq!(*seen.lock(), ["one", "two"]);
    // a document the node cannot apply changes nothing and is tried again
    writer.publish("doc.json", "refused".into()).unwrap();
    read_all_now();
    writer.publish("doc.json", "three".into()).unwrap();
    read_all_now();
    assert_eq!(*seen.lock(), ["one", "two", "three"]);
    // the writer follows nothing (it publishes)
    let nothing: ApplyPublished = Box::new(|_: &[u8]| panic!("a writer applies nothing"));
    writer.follow_published("doc.json", nothing).unwrap();
}

//! Tests of a query node following a writer through a shared store (a `file://` directory):
//! what it sees after persists, drops and a garbage catalog, and which table versions move.

use std::path::Path;
use std::sync::Arc;

use super::store_tests::{all_rows, write};
use super::*;

fn options(dir: &Path, name: &str, shared: &Path, role: Role) -> StoreOptions {
    StoreOptions {
        object_store_url: format!("file://{}", shared.display()),
        role,
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
    let writer = open(options(dir.path(), "writer", &shared, Role::All));
    write(&writer, "m", "cpu,host=a v=1 1\nmem,host=a free=2i 1");
    writer.persist_now().unwrap();
    let node = open(options(dir.path(), "node", &shared, Role::Query));
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
    let writer = open(options(dir.path(), "writer", &shared, Role::All));
    write(&writer, "m", "cpu,host=a v=1 1");
    writer.persist_now().unwrap();
    let node = open(options(dir.path(), "node", &shared, Role::Query));
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
    let writer = open(options(dir.path(), "writer", &shared, Role::All));
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
    let writer = open(options(dir.path(), "writer", &shared, Role::All));
    assert_eq!(all_rows(&writer, "m", "cpu").num_rows(), 1);
}

#[test]
fn a_query_node_needs_the_writers_object_store() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        role: Role::Query,
        ..StoreOptions::for_tests(dir.path())
    };
    let err = Store::open(StoreLimits::default(), options).err().unwrap();
    assert!(err.to_string().contains("set object_store_url"), "{err}");
}

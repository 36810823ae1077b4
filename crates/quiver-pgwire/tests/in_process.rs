//! The PostgreSQL wire protocol served in-process on a real socket and driven by a real
//! PostgreSQL client (tokio-postgres): queries over persisted data, parameters, and SQLSTATEs
//! by kind, without the `quiver` binary. Every client logs in with SCRAM-SHA-256 as a token
//! (`auth = required`).

use std::sync::Arc;

use quiver_auth::{AuthMode, AuthSettings, Authenticator, TokenStore};
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;
use quiver_pgwire::PgServer;
use quiver_query::{QueryEngine, QueryOptions};
use quiver_service::{CacheConfig, QueryService};
use quiver_storage::{Durability, Store, StoreLimits, StoreOptions};

/// A server on a free port over a store in `dir` holding `lines` in database `m`, persisted;
/// a connected client.
async fn start(dir: &std::path::Path, lines: &str) -> tokio_postgres::Client {
    // no columns kept decoded: reads of persisted files go to the files, whose damage the
    // tests look for
    let options = StoreOptions {
        chunk_cache_bytes: 0,
        ..StoreOptions::for_tests(dir)
    };
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let options = DecodeOptions::for_tests();
    let decoded = decode_line_protocol(lines.as_bytes(), &options, &NoExistingTables);
    store
        .write("m", decoded.tables, Durability::NoSync)
        .await
        .unwrap();
    store.persist_now().unwrap();
    let engine = Arc::new(QueryEngine::new(store.clone(), QueryOptions::default()).unwrap());
    let tokens = Arc::new(TokenStore::open(dir).unwrap());
    let secret = tokens
        .create("test", false, &["db:m:read".parse().unwrap()])
        .unwrap()
        .secret;
    let settings = AuthSettings {
        auth: AuthMode::Required,
        ..AuthSettings::default()
    };
    let server = Arc::new(PgServer::new(
        store,
        QueryService::new(engine, CacheConfig::for_tests()),
        Arc::new(Authenticator::new(settings, tokens)),
        None,
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(server.serve(listener, std::future::pending()));
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=test password={secret} dbname=m"),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    client
}

#[tokio::test]
async fn persisted_rows_come_back_with_parameters_and_errors_carry_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let client = start(dir.path(), "cpu,host=a v=1.5 1\ncpu,host=b v=2.5 2\n").await;
    let rows = client
        .query(
            "SELECT host, v FROM cpu WHERE v > $1 ORDER BY host",
            &[&1.0f64],
        )
        .await
        .unwrap();
    let got: Vec<(String, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got, [("a".to_string(), 1.5), ("b".to_string(), 2.5)]);

    let missing = client
        .query("SELECT * FROM nothing", &[])
        .await
        .unwrap_err();
    assert_eq!(missing.code().unwrap().code(), "42P01", "{missing}");
    let syntax = client.query("SELEC 1", &[]).await.unwrap_err();
    assert_eq!(syntax.code().unwrap().code(), "42601", "{syntax}");
}

#[tokio::test]
async fn a_damaged_persisted_file_is_an_internal_error_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let client = start(dir.path(), "cpu,host=a v=1.5 1\n").await;
    let partition = dir.path().join("tables/m/1/1970-01-01");
    for file in std::fs::read_dir(partition).unwrap() {
        std::fs::write(file.unwrap().path(), b"not parquet").unwrap();
    }
    let error = client.query("SELECT v FROM cpu", &[]).await.unwrap_err();
    assert_eq!(error.code().unwrap().code(), "XX000", "{error}");
    let one: i64 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

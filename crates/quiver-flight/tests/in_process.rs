//! The Flight SQL service served in-process on a real socket and driven by arrow-flight's
//! Flight SQL client: statements over persisted data, and gRPC codes by kind, without the
//! `quiver` binary.

use std::sync::Arc;

use arrow::array::{Array, Float64Array, RecordBatch};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use quiver_auth::{AuthSettings, Authenticator, TokenStore};
use quiver_flight::QuiverFlightSql;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;
use quiver_query::{QueryEngine, QueryOptions};
use quiver_service::{CacheConfig, QueryService};
use quiver_storage::{Durability, Store, StoreLimits, StoreOptions};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Channel;
use tonic::Code;

/// A service on a free port over a store in `dir` holding `lines` in database `m`, persisted;
/// a client whose calls name that database.
async fn start(dir: &std::path::Path, lines: &str) -> FlightSqlServiceClient<Channel> {
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
    let queries = QueryService::new(engine, CacheConfig::for_tests());
    let tokens = Arc::new(TokenStore::open(dir).unwrap());
    let auth = Arc::new(Authenticator::new(AuthSettings::default(), tokens));
    let service = FlightServiceServer::new(QuiverFlightSql::new(store, queries, auth, 1 << 20));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    client.set_header("database", "m");
    client
}

/// Runs `sql`: its batches, or the gRPC code it failed with (planning or streaming).
async fn run(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> Result<Vec<RecordBatch>, (Code, String)> {
    let failed = |e: FlightError| match e {
        FlightError::Tonic(status) => (status.code(), status.message().to_string()),
        other => panic!("not a gRPC status: {other}"),
    };
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(failed)?;
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let stream = client.do_get(ticket).await.map_err(failed)?;
    stream.try_collect().await.map_err(failed)
}

#[tokio::test]
async fn persisted_rows_come_back_and_errors_carry_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = start(dir.path(), "cpu,host=a v=1.5 1\ncpu,host=b v=2.5 2\n").await;
    let batches = run(&mut client, "SELECT v FROM cpu ORDER BY v")
        .await
        .unwrap();
    let values: Vec<f64> = batches
        .iter()
        .flat_map(|b| {
            let column = b.column(0).as_any().downcast_ref::<Float64Array>().unwrap();
            (0..column.len())
                .map(|i| column.value(i))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(values, [1.5, 2.5]);

    let (code, message) = run(&mut client, "SELECT * FROM nothing").await.unwrap_err();
    assert_eq!(code, Code::NotFound, "{message}");
    let (code, message) = run(&mut client, "SELEC 1").await.unwrap_err();
    assert_eq!(code, Code::InvalidArgument, "{message}");
    let (code, message) = run(&mut client, "SELECT 1 / 0").await.unwrap_err();
    assert_eq!(code, Code::InvalidArgument, "{message}");
}

#[tokio::test]
async fn a_missing_persisted_file_is_internal_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut client = start(dir.path(), "cpu,host=a v=1.5 1\n").await;
    let partition = dir.path().join("tables/m/1/1970-01-01");
    let file = std::fs::read_dir(partition)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&file).unwrap();
    let (code, message) = run(&mut client, "SELECT v FROM cpu").await.unwrap_err();
    assert_eq!(code, Code::Internal, "{message}");
    assert!(
        message.contains(file.file_name().unwrap().to_str().unwrap()),
        "{message}"
    );
}

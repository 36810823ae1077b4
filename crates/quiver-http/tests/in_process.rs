//! The HTTP API served in-process on a real socket and driven by a real HTTP client: writes,
//! persistence, queries and errors by kind, without the `quiver` binary.

use std::net::SocketAddr;
use std::sync::Arc;

use quiver_auth::{AuthSettings, Authenticator, TokenStore};
use quiver_http::AppState;
use quiver_model::RequestLimits;
use quiver_query::{QueryEngine, QueryOptions};
use quiver_service::{CacheConfig, QueryService};
use quiver_storage::{Store, StoreLimits, StoreOptions};
use serde_json::Value;

const MAX_REQUEST_BYTES: usize = 64 << 10;

/// A server on a free port over a store in a temporary directory; its base URL.
async fn start(dir: &std::path::Path) -> String {
    // no columns kept decoded: reads of persisted files go to the files, whose damage the
    // tests look for
    let options = StoreOptions {
        chunk_cache_bytes: 0,
        ..StoreOptions::for_tests(dir)
    };
    let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
    let engine = Arc::new(QueryEngine::new(store.clone(), QueryOptions::default()).unwrap());
    let tokens = Arc::new(TokenStore::open(dir).unwrap());
    let state = Arc::new(AppState {
        auth: Arc::new(Authenticator::new(AuthSettings::default(), tokens)),
        store,
        queries: QueryService::new(engine, CacheConfig::for_tests()),
        limits: RequestLimits {
            max_request_bytes: MAX_REQUEST_BYTES,
            max_reported_line_errors: 10,
        },
        metrics: None,
        role: "all",
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = quiver_http::router(state).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn query(url: &str, sql: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{url}/api/v3/query_sql"))
        .query(&[("db", "m"), ("q", sql)])
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn writes_persists_and_answers_with_statuses_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let url = start(dir.path()).await;
    let client = reqwest::Client::new();
    let written = client
        .post(format!("{url}/api/v3/write_lp?db=m"))
        .body("cpu,host=a v=1.5 1\ncpu,host=b v=2.5 2\n")
        .send()
        .await
        .unwrap();
    assert_eq!(written.status().as_u16(), 204);
    let persisted = client
        .post(format!("{url}/api/v3/persist"))
        .send()
        .await
        .unwrap();
    assert_eq!(persisted.status().as_u16(), 200);

    let (status, rows) = query(&url, "SELECT host, v FROM cpu ORDER BY host").await;
    assert_eq!(status, 200, "{rows}");
    assert_eq!(
        rows,
        serde_json::json!([{"host": "a", "v": 1.5}, {"host": "b", "v": 2.5}])
    );

    let (status, body) = query(&url, "SELECT * FROM nothing").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = query(&url, "SELEC 1").await;
    assert_eq!(status, 400, "{body}");
    let conflict = client
        .post(format!("{url}/api/v3/write_lp?db=m&accept_partial=false"))
        .body("cpu,host=a v=\"text\" 3\n")
        .send()
        .await
        .unwrap();
    assert_eq!(conflict.status().as_u16(), 400);
    let oversized = client
        .post(format!("{url}/api/v3/write_lp?db=m"))
        .body(vec![b'x'; MAX_REQUEST_BYTES + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(oversized.status().as_u16(), 413);
}

#[tokio::test]
async fn a_persisted_file_gone_missing_is_a_server_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = start(dir.path()).await;
    let client = reqwest::Client::new();
    client
        .post(format!("{url}/api/v3/write_lp?db=m"))
        .body("gone v=1 1\n")
        .send()
        .await
        .unwrap();
    client
        .post(format!("{url}/api/v3/persist"))
        .send()
        .await
        .unwrap();
    let file = std::fs::read_dir(dir.path().join("tables/m/1/1970-01-01"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&file).unwrap();
    let (status, body) = query(&url, "SELECT v FROM gone").await;
    assert_eq!(status, 500, "{body}");
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(body["error"].as_str().unwrap().contains(name), "{body}");
}

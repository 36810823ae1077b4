//! The result cache over HTTP against the real binary: `X-Quiver-Cache` verdicts, ready bytes
//! per format, `Cache-Control: no-cache`, volatile queries, scopes, parameters, the
//! `/api/v3/cache` endpoint, configuration, and single-flight under 64 concurrent requests.

mod common;

use std::sync::Arc;

use common::{error_body, JsonValue, Server};
use serde_json::{json, Value};

async fn server_with_data() -> Server {
    let server = Server::start().await;
    let lp = "cpu,host=a,region=eu usage=1.5 1000000000\n\
              cpu,host=b,region=us usage=2.5 2000000000\n\
              people,name=Bob v=1i 1\n\
              people,name=bob v=2i 2\n";
    assert_eq!(server.write_lp("db=db", lp).await.status(), 204);
    server
}

/// GETs a query with extra headers; returns (status, verdict, body).
async fn get(
    server: &Server,
    sql: &str,
    format: &str,
    headers: &[(&str, &str)],
) -> (u16, String, bytes::Bytes) {
    let mut request = reqwest::Client::new()
        .get(format!("{}/api/v3/query_sql", server.url))
        .query(&[("db", "db"), ("q", sql), ("format", format)]);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let verdict = response
        .headers()
        .get("x-quiver-cache")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, verdict, response.bytes().await.unwrap())
}

async fn cache_stats(server: &Server) -> Value {
    reqwest::get(format!("{}/api/v3/cache", server.url))
        .await
        .unwrap()
        .json_value()
        .await
}

const SQL: &str = "SELECT host, usage FROM cpu ORDER BY host";

#[tokio::test]
async fn verdicts_ready_bytes_and_fresh_answers_after_writes() {
    let server = server_with_data().await;
    let (status, verdict, first) = get(&server, SQL, "json", &[]).await;
    assert_eq!((status, verdict.as_str()), (200, "MISS"));
    let (_, verdict, again) = get(&server, SQL, "json", &[]).await;
    assert_eq!(verdict, "HIT");
    assert_eq!(first, again);
    // Another format of a cached answer is encoded from the cached batches: still a hit.
    let (_, verdict, csv) = get(&server, SQL, "csv", &[]).await;
    assert_eq!(verdict, "HIT");
    assert_eq!(
        std::str::from_utf8(&csv).unwrap(),
        "host,usage\na,1.5\nb,2.5\n"
    );
    let (_, verdict, arrow_first) = get(&server, SQL, "arrow", &[]).await;
    let (_, _, arrow_again) = get(&server, SQL, "arrow", &[]).await;
    assert_eq!(verdict, "HIT");
    assert_eq!(arrow_first, arrow_again);
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(arrow_first), None).unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 2);

    let (_, verdict, _) = get(&server, SQL, "json", &[("cache-control", "no-cache")]).await;
    assert_eq!(verdict, "BYPASS");

    assert_eq!(
        server
            .write_lp("db=db", "cpu,host=c,region=eu usage=9 3000000000")
            .await
            .status(),
        204
    );
    let (_, verdict, after) = get(&server, SQL, "json", &[]).await;
    assert_eq!(verdict, "MISS");
    let rows: Vec<Value> = serde_json::from_slice(&after).unwrap();
    assert_eq!(
        rows.len(),
        3,
        "the acknowledged write is in the next answer"
    );

    for volatile in ["SELECT random() AS r", "SELECT now() AS t", "SHOW TABLES"] {
        for _ in 0..2 {
            let (status, verdict, body) = get(&server, volatile, "json", &[]).await;
            assert_eq!(
                (status, verdict.as_str()),
                (200, "BYPASS"),
                "{volatile}: {body:?}"
            );
        }
    }

    let stats = cache_stats(&server).await;
    assert_eq!(stats["hits"], 4, "{stats}");
    assert_eq!(stats["misses"], 2, "{stats}");
    assert_eq!(stats["bypasses"], 7, "{stats}");
    assert_eq!(stats["entries"], 1, "{stats}");
    assert_eq!(stats["invalidations"], 1, "{stats}");
    assert!(stats["bytes"].as_u64().unwrap() > 0, "{stats}");
    assert!((stats["hit_ratio"].as_f64().unwrap() - 4.0 / 6.0).abs() < 1e-9);
    assert_eq!(stats["enabled"], true);

    let cleared: Value = reqwest::Client::new()
        .delete(format!("{}/api/v3/cache", server.url))
        .send()
        .await
        .unwrap()
        .json_value()
        .await;
    assert_eq!(cleared, json!({ "cleared": 1 }));
    assert_eq!(cache_stats(&server).await["entries"], 0);
    assert_eq!(get(&server, SQL, "json", &[]).await.1, "MISS");
}

/// Creates a token through the admin API (the test is the server's local caller) and returns
/// its secret.
async fn create_token(server: &Server, name: &str, permissions: &[&str]) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/api/v3/configure/token", server.url))
        .header("content-type", "application/json")
        .body(json!({ "name": name, "permissions": permissions }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    response.json_value().await["token"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn literals_scopes_and_parameters_keep_entries_apart() {
    let server = server_with_data().await;
    let bob = "SELECT v FROM people WHERE name = 'Bob'";
    let (_, v1, upper) = get(&server, bob, "json", &[]).await;
    let (_, v2, lower) = get(
        &server,
        "SELECT v FROM people WHERE name = 'bob'",
        "json",
        &[],
    )
    .await;
    assert_eq!((v1.as_str(), v2.as_str()), ("MISS", "MISS"));
    assert_eq!(&upper[..], br#"[{"v":1}]"#);
    assert_eq!(&lower[..], br#"[{"v":2}]"#);
    let (_, v3, same) = get(
        &server,
        "select V from PEOPLE where NAME = 'Bob' -- reformatted",
        "json",
        &[],
    )
    .await;
    assert_eq!((v3.as_str(), &same[..]), ("HIT", &upper[..]));

    // two tokens with different grants: different scopes
    let alice = format!(
        "Bearer {}",
        create_token(&server, "alice", &["db:db:read"]).await
    );
    let carol = format!(
        "Bearer {}",
        create_token(&server, "carol", &["db:db:read", "db:other:read"]).await
    );
    let alice = [("authorization", alice.as_str())];
    let carol = [("authorization", carol.as_str())];
    assert_eq!(get(&server, bob, "json", &alice).await.1, "MISS");
    assert_eq!(get(&server, bob, "json", &carol).await.1, "MISS");
    assert_eq!(get(&server, bob, "json", &alice).await.1, "HIT");

    let client = reqwest::Client::new();
    let post = |body: Value| {
        client
            .post(format!("{}/api/v3/query_sql", server.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let named = "SELECT v FROM people WHERE name = $name";
    for (name, expected, verdict) in [("Bob", 1, "MISS"), ("bob", 2, "MISS"), ("Bob", 1, "HIT")] {
        let response = post(json!({"db": "db", "q": named, "params": {"name": name}}))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-quiver-cache"], verdict);
        assert_eq!(response.json_value().await, json!([{ "v": expected }]));
    }
    let positional =
        post(json!({"db": "db", "q": "SELECT v FROM people WHERE v > $1", "params": [1]}))
            .await
            .unwrap();
    assert_eq!(positional.json_value().await, json!([{ "v": 2 }]));
    let in_url = client
        .get(format!("{}/api/v3/query_sql", server.url))
        .query(&[("db", "db"), ("q", named), ("params", r#"{"name":"bob"}"#)])
        .send()
        .await
        .unwrap();
    assert_eq!(in_url.headers()["x-quiver-cache"], "HIT");
    assert_eq!(in_url.json_value().await, json!([{ "v": 2 }]));
}

#[tokio::test]
async fn malformed_parameters_are_clear_errors_and_change_nothing() {
    let server = server_with_data().await;
    let client = reqwest::Client::new();
    let named = "SELECT v FROM people WHERE name = $name";
    let cases: Vec<(Value, &str)> = vec![
        (json!("Bob"), "must be a JSON object"),
        (
            json!({"name": {"nested": 1}}),
            "parameter $name must be a string",
        ),
        (json!([[1]]), "parameter $1 must be a string"),
        (json!({"other": "x"}), "$name"),
    ];
    for (params, expected) in cases {
        let response = client
            .post(format!("{}/api/v3/query_sql", server.url))
            .body(json!({"db": "db", "q": named, "params": params}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{params}");
        let (message, _) = error_body(response).await;
        assert!(message.contains(expected), "{params}: {message}");
    }
    let bad_text = client
        .get(format!("{}/api/v3/query_sql", server.url))
        .query(&[("db", "db"), ("q", named), ("params", "{name: ")])
        .send()
        .await
        .unwrap();
    assert_eq!(bad_text.status(), 400);
    let (message, _) = error_body(bad_text).await;
    assert!(message.contains("\"params\" must be JSON"), "{message}");
    // Nothing was cached by the failures, and the server still answers.
    assert_eq!(cache_stats(&server).await["entries"], 0);
    assert_eq!(
        server
            .query_json("db", "SELECT count(*) AS n FROM people")
            .await,
        [json!({"n": 2})]
    );
}

#[tokio::test]
async fn sixty_four_concurrent_identical_queries_execute_once() {
    let server = Server::start().await;
    let mut lp = String::new();
    for i in 0..100_000 {
        lp.push_str(&format!("cpu,host=h{} v={i} {i}\n", i % 97));
    }
    assert_eq!(server.write_lp("db=db", lp).await.status(), 204);
    let sql = "SELECT host, avg(v) AS a, max(v) AS m FROM cpu GROUP BY host ORDER BY host";
    let server = Arc::new(server);
    let barrier = Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (server, barrier) = (server.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                get(&server, sql, "json", &[]).await
            })
        })
        .collect();
    let mut bodies = Vec::new();
    for task in tasks {
        let (status, verdict, body) = task.await.unwrap();
        assert_eq!(status, 200);
        assert!(verdict == "MISS" || verdict == "HIT", "{verdict}");
        bodies.push(body);
    }
    assert!(bodies.iter().all(|b| *b == bodies[0]));
    let rows: Vec<Value> = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(rows.len(), 97);
    let stats = cache_stats(&server).await;
    assert_eq!(stats["executions"], 1, "{stats}");
    assert_eq!(
        stats["hits"].as_u64().unwrap() + stats["misses"].as_u64().unwrap(),
        64,
        "{stats}"
    );
}

#[tokio::test]
async fn the_cache_is_configurable_and_can_be_disabled() {
    let server = Server::start_with_env(&[
        ("QUIVER_CACHE_ENABLED", "false"),
        ("QUIVER_CACHE_TTL_SECS", "5"),
    ])
    .await;
    assert_eq!(server.write_lp("db=db", "cpu v=1 1").await.status(), 204);
    for _ in 0..2 {
        assert_eq!(
            get(&server, "SELECT v FROM cpu", "json", &[]).await.1,
            "BYPASS"
        );
    }
    let stats = cache_stats(&server).await;
    assert_eq!(
        (stats["enabled"].clone(), stats["ttl_secs"].clone()),
        (json!(false), json!(5))
    );

    let printed = common::quiver_command()
        .args([
            "config",
            "--cache-enabled",
            "false",
            "--cache-capacity-bytes",
            "123456789",
            "--cache-max-entry-bytes",
            "20000000",
            "--cache-ttl-secs",
            "7",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(printed.stdout).unwrap();
    for line in [
        "cache_enabled = false",
        "cache_capacity_bytes = 123456789",
        "cache_max_entry_bytes = 20000000",
        "cache_ttl_secs = 7",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let refused = common::quiver_command()
        .args(["config", "--cache-capacity-bytes", "1000"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let message = String::from_utf8(refused.stderr).unwrap();
    assert!(message.contains("exceeds the cache capacity"), "{message}");
}

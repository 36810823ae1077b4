//! The write endpoints over real sockets: success, partial writes, atomic v1/v2 writes,
//! compression, limits, schema conflicts and hostile input.

mod common;

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{error_body, Server};
use serde_json::json;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn post(url: String, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
    reqwest::Client::new().post(url).body(body)
}

#[tokio::test]
async fn typed_fields_round_trip_and_database_is_created() {
    let server = Server::start().await;
    let lp = "weather,city=Oslo,station=a\\ b temp=-3.5,hum=81i,count=7u,ok=true,note=\"say \\\"hi\\\"\" 1700000000000000000\n";
    let response = server.write_lp("db=w", lp).await;
    assert_eq!(response.status(), 204);
    let rows = server.query_json("w", "SELECT * FROM weather").await;
    assert_eq!(
        rows,
        vec![json!({
            "city": "Oslo", "station": "a b", "temp": -3.5, "hum": 81, "count": 7, "ok": true,
            "note": "say \"hi\"", "time": "2023-11-14T22:13:20Z"
        })]
    );
    let types = server
        .query_json(
            "w",
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'weather' ORDER BY column_name",
        )
        .await;
    let types: Vec<(String, String)> = types
        .iter()
        .map(|r| {
            (
                r["column_name"].as_str().unwrap().into(),
                r["data_type"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expect = [
        ("city", "Dictionary(Int32, Utf8)"),
        ("count", "UInt64"),
        ("hum", "Int64"),
        ("note", "Utf8"),
        ("ok", "Boolean"),
        ("station", "Dictionary(Int32, Utf8)"),
        ("temp", "Float64"),
        ("time", "Timestamp(ns, \"UTC\")"),
    ];
    let expect: Vec<(String, String)> = expect
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(types, expect);
}

#[tokio::test]
async fn partial_write_reports_bad_lines_and_keeps_good_ones() {
    let server = Server::start().await;
    let lp = "m,t=a v=1 1\nm,t=b v= 2\n\n# comment\nm,t=c v=3 3\nm,t=d v=\"str\" 4\n";
    let response = server.write_lp("db=p&precision=ns", lp).await;
    assert_eq!(response.status(), 400);
    let (message, data) = error_body(response).await;
    assert_eq!(message, "partial write of line protocol occurred");
    let data = data.as_array().unwrap();
    assert_eq!(data.len(), 2, "{data:?}");
    assert_eq!(data[0]["line_number"], 2);
    assert_eq!(data[0]["original_line"], "m,t=b v= 2");
    assert_eq!(data[1]["line_number"], 6);
    let conflict = data[1]["error_message"].as_str().unwrap();
    assert!(
        conflict.contains("\"v\"") || conflict.contains(" v "),
        "{conflict}"
    );
    assert!(
        conflict.contains("float") && conflict.contains("string"),
        "{conflict}"
    );
    let rows = server
        .query_json("p", "SELECT t, v FROM m ORDER BY time")
        .await;
    assert_eq!(
        rows,
        vec![json!({"t": "a", "v": 1.0}), json!({"t": "c", "v": 3.0})]
    );
}

#[tokio::test]
async fn schema_conflict_with_existing_table_names_column_and_types() {
    let server = Server::start().await;
    assert_eq!(server.write_lp("db=c", "m f=1i 1").await.status(), 204);
    let response = server
        .write_lp("db=c&accept_partial=false", "m f=1.5 2\nm f=2i 3")
        .await;
    assert_eq!(response.status(), 400);
    let (message, data) = error_body(response).await;
    assert!(message.contains("no lines were written"), "{message}");
    let error = data[0]["error_message"].as_str().unwrap();
    assert!(
        error.contains('f') && error.contains("integer") && error.contains("float"),
        "{error}"
    );
    // accept_partial=false: the valid second line was not written either.
    let rows = server.query_json("c", "SELECT count(*) AS n FROM m").await;
    assert_eq!(rows, vec![json!({"n": 1})]);
}

#[tokio::test]
async fn v1_and_v2_writes_are_atomic_and_use_their_precision() {
    let server = Server::start().await;
    let v1 = format!("{}/write?db=legacy&precision=s", server.url);
    assert_eq!(
        post(v1.clone(), "m v=1 1700000000\n")
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    let rejected = post(v1, "m v=2 1700000001\nm v=oops 1700000002\n")
        .send()
        .await
        .unwrap();
    assert_eq!(rejected.status(), 400);
    let v2 = format!(
        "{}/api/v2/write?bucket=legacy&org=x&precision=ms",
        server.url
    );
    assert_eq!(
        post(v2, "m v=3 1700000003000\n")
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    let rows = server
        .query_json("legacy", "SELECT time, v FROM m ORDER BY time")
        .await;
    assert_eq!(
        rows,
        vec![
            json!({"time": "2023-11-14T22:13:20Z", "v": 1.0}),
            json!({"time": "2023-11-14T22:13:23Z", "v": 3.0}),
        ]
    );
    let missing = post(format!("{}/api/v2/write", server.url), "m v=1")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);
    assert!(error_body(missing).await.0.contains("bucket"));
}

#[tokio::test]
async fn later_write_wins_and_new_columns_read_null_for_old_rows() {
    let server = Server::start().await;
    assert_eq!(
        server
            .write_lp("db=d", "m,h=a x=1,y=1 10\nm,h=b x=5 10")
            .await
            .status(),
        204
    );
    assert_eq!(
        server
            .write_lp("db=d", "m,h=a x=2 10\nm,h=a,rack=r1 z=true 20")
            .await
            .status(),
        204
    );
    let rows = server
        .query_json("d", "SELECT h, rack, x, y, z FROM m ORDER BY h, time")
        .await;
    assert_eq!(
        rows,
        vec![
            // same series + same time: x replaced, y kept from the earlier write
            json!({"h": "a", "x": 2.0, "y": 1.0}),
            json!({"h": "a", "rack": "r1", "z": true}),
            json!({"h": "b", "x": 5.0}),
        ]
    );
    let nulls = server
        .query_json(
            "d",
            "SELECT count(*) AS n FROM m WHERE z IS NULL AND rack IS NULL",
        )
        .await;
    assert_eq!(nulls, vec![json!({"n": 2})]);
}

#[tokio::test]
async fn missing_timestamp_is_the_request_time() {
    let server = Server::start().await;
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    assert_eq!(server.write_lp("db=t", "m v=1\nm v=2").await.status(), 204);
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let rows = server
        .query_json("t", "SELECT CAST(time AS BIGINT) AS ns, v FROM m")
        .await;
    // one time per request: both lines are the same point, the later wins
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["v"], 2.0);
    let ns = rows[0]["ns"].as_i64().unwrap();
    assert!(before <= ns && ns <= after, "{before} <= {ns} <= {after}");
}

#[tokio::test]
async fn gzip_and_zstd_bodies() {
    let server = Server::start().await;
    let url = format!("{}/api/v3/write_lp?db=z", server.url);
    let gz = post(url.clone(), gzip(b"m v=1 1\n")).header("content-encoding", "gzip");
    assert_eq!(gz.send().await.unwrap().status(), 204);
    let zs = post(url.clone(), zstd::encode_all(&b"m v=2 2\n"[..], 1).unwrap())
        .header("content-encoding", "zstd");
    assert_eq!(zs.send().await.unwrap().status(), 204);
    let rows = server.query_json("z", "SELECT v FROM m ORDER BY v").await;
    assert_eq!(rows, vec![json!({"v": 1.0}), json!({"v": 2.0})]);

    let mut corrupt = gzip(b"m v=3 3\n");
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    corrupt.truncate(corrupt.len() - 3);
    for (encoding, body) in [("gzip", corrupt), ("zstd", b"definitely not zstd".to_vec())] {
        let response = post(url.clone(), body)
            .header("content-encoding", encoding)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{encoding}");
        assert!(error_body(response).await.0.contains(encoding));
    }
    let response = post(url, "m v=4 4")
        .header("content-encoding", "br")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let rows = server.query_json("z", "SELECT count(*) AS n FROM m").await;
    assert_eq!(rows, vec![json!({"n": 2})]);
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_compressed_or_not() {
    let server = Server::start_with_env(&[("QUIVER_MAX_REQUEST_BYTES", "4096")]).await;
    let url = format!("{}/api/v3/write_lp?db=big", server.url);
    let line = "m,host=h v=1 1\n";
    let big = line.repeat(4096 / line.len() + 1);
    assert_eq!(
        post(url.clone(), big.clone())
            .send()
            .await
            .unwrap()
            .status(),
        413
    );
    // a small gzip body that inflates beyond the limit (a decompression bomb)
    let bomb = gzip(&vec![b'#'; 1 << 20]);
    assert!(bomb.len() < 4096);
    let response = post(url.clone(), bomb)
        .header("content-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    // a streamed body without Content-Length is cut off at the limit too
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..64).map(|_| Ok(big.as_bytes().to_vec())).collect();
    let streamed = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    assert_eq!(
        post(url.clone(), streamed).send().await.unwrap().status(),
        413
    );
    assert_eq!(post(url, line).send().await.unwrap().status(), 204);
}

#[tokio::test]
async fn hostile_input_is_rejected_and_the_server_keeps_its_data() {
    let server = Server::start().await;
    assert_eq!(
        server.write_lp("db=h", "keep,t=x v=42 1").await.status(),
        204
    );
    let long_name = "m".repeat(70_000);
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("invalid utf-8", b"m,t=\xff\xfe v=1 1\n".to_vec()),
        ("nul bytes", b"m\0 v=1 1\n\0\0\0".to_vec()),
        ("only garbage", (0..=255u8).cycle().take(10_000).collect()),
        ("unterminated string", b"m s=\"never closed 1\n".to_vec()),
        (
            "huge timestamp",
            b"m v=1 99999999999999999999999999\n".to_vec(),
        ),
        ("huge integer", b"m v=99999999999999999999999i 1\n".to_vec()),
        ("overlong name", format!("{long_name} v=1 1\n").into_bytes()),
        ("only commas", b",,,,,,,,, ,,,,=== ===\n".to_vec()),
        ("time as field", b"m time=1 1\n".to_vec()),
    ];
    for (what, body) in hostile {
        let response = server.write_lp("db=h&accept_partial=false", body).await;
        assert_eq!(response.status(), 400, "{what}");
        let (message, _) = error_body(response).await;
        assert!(!message.is_empty(), "{what}");
    }
    for (query, what) in [
        ("db=", "empty db"),
        ("db=bad%20name", "invalid db name"),
        ("db=h&precision=fortnight", "bad precision"),
        ("db=h&accept_partial=maybe", "bad boolean"),
    ] {
        let response = server.write_lp(query, "m v=1 1").await;
        assert_eq!(response.status(), 400, "{what}");
    }
    assert_eq!(
        server
            .query_json("h", "SHOW TABLES")
            .await
            .iter()
            .filter(|r| r["table_schema"] == "h")
            .count(),
        1
    );
    let rows = server.query_json("h", "SELECT t, v FROM keep").await;
    assert_eq!(rows, vec![json!({"t": "x", "v": 42.0})]);
}

#[tokio::test]
async fn ping_health_and_unknown_paths() {
    let server = Server::start().await;
    let client = reqwest::Client::new();
    let ping = client
        .get(format!("{}/ping", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ping.status(), 204);
    assert!(ping.headers()["x-influxdb-version"]
        .to_str()
        .unwrap()
        .starts_with("quiver-"));
    let missing = client
        .get(format!("{}/api/v9/nothing", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(error_body(missing).await.0.contains("/api/v9/nothing"));
}

//! `POST /api/v3/write_arrow` against the real binary: Arrow IPC stream bodies are written as
//! they are (with lossless widening), and malformed, truncated, mistyped or hostile bodies are
//! 400s that write nothing and leave the server and earlier data intact.

mod common;

use std::sync::Arc;

use arrow::array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, ListArray, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow::datatypes::Int32Type;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow::ipc::CompressionType;
use common::{error_body, Server};
use serde_json::json;

fn stream(batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batches[0].schema()).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
    drop(writer);
    out
}

fn metrics(start_ms: i64, n: usize) -> RecordBatch {
    let hosts: DictionaryArray<Int32Type> = (0..n)
        .map(|i| format!("h{}", i % 2))
        .collect::<Vec<_>>()
        .iter()
        .map(String::as_str)
        .collect();
    RecordBatch::try_from_iter([
        (
            "time",
            Arc::new(
                TimestampMillisecondArray::from_iter_values((0..n as i64).map(|i| start_ms + i))
                    .with_timezone("UTC"),
            ) as ArrayRef,
        ),
        ("host", Arc::new(hosts)),
        (
            "usage",
            Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
        ),
        ("count", Arc::new(Int32Array::from_iter_values(0..n as i32))),
    ])
    .unwrap()
}

/// A zstd-compressed stream whose first compressed buffer claims 2^50 bytes uncompressed
/// (what Arrow's reader would allocate for it).
fn claims_a_petabyte() -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(Some(CompressionType::ZSTD))
        .unwrap();
    let batch = metrics(0, 1000);
    let mut out = Vec::new();
    let mut writer =
        StreamWriter::try_new_with_options(&mut out, &batch.schema(), options).unwrap();
    writer.write(&batch).unwrap();
    writer.finish().unwrap();
    drop(writer);
    // [schema message][0xffffffff, metadata length, metadata][body]: the body's first bytes
    // are the uncompressed-length prefix of its first non-empty buffer.
    let message_length = |at: usize| u32::from_le_bytes(out[at + 4..at + 8].try_into().unwrap());
    let batch_at = 8 + message_length(0) as usize;
    let body_at = batch_at + 8 + message_length(batch_at) as usize;
    out[body_at..body_at + 8].copy_from_slice(&(1i64 << 50).to_le_bytes());
    out
}

async fn post(server: &Server, query: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/api/v3/write_arrow?{query}", server.url))
        .header("content-type", "application/vnd.apache.arrow.stream")
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn arrow_streams_are_written_and_read_back() {
    let server = Server::start().await;
    let body = stream(&[metrics(0, 100), metrics(100, 50)]);
    assert_eq!(
        post(&server, "db=arrowdb&table=m", body).await.status(),
        204
    );
    let rows = server
        .query_json(
            "arrowdb",
            "SELECT count(*) AS n, sum(count) AS s, count(DISTINCT host) AS hosts FROM m",
        )
        .await;
    assert_eq!(rows, [json!({"n": 150, "s": 4950 + 1225, "hosts": 2})]);
    let types = server
        .query_json(
            "arrowdb",
            "SELECT arrow_typeof(count) AS c, arrow_typeof(host) AS h, arrow_typeof(time) AS t \
             FROM m LIMIT 1",
        )
        .await;
    assert_eq!(
        types,
        [json!({"c": "Int64", "h": "Dictionary(Int32, Utf8)", "t": "Timestamp(ns, \"UTC\")"})]
    );
}

#[tokio::test]
async fn bad_bodies_write_nothing_and_name_the_problem() {
    let server = Server::start().await;
    assert_eq!(
        post(&server, "db=arrowdb&table=m", stream(&[metrics(0, 10)]))
            .await
            .status(),
        204
    );
    let good = stream(&[metrics(1000, 10)]);
    let no_time =
        RecordBatch::try_from_iter([("v", Arc::new(Int32Array::from(vec![1])) as ArrayRef)])
            .unwrap();
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1)])]);
    let nested = RecordBatch::try_from_iter([
        ("time", metrics(0, 1).column(0).clone()),
        ("xs", Arc::new(list) as ArrayRef),
    ])
    .unwrap();
    let conflicting = RecordBatch::try_from_iter([
        ("time", metrics(5000, 1).column(0).clone()),
        (
            "usage",
            Arc::new(StringArray::from(vec!["high"])) as ArrayRef,
        ),
    ])
    .unwrap();
    // The first batch is good, the second bad: nothing of the request may be written.
    let mut second_bad = stream(&[metrics(2000, 10)]);
    second_bad.truncate(second_bad.len() - 8); // drop the end-of-stream marker
    second_bad.extend(stream(std::slice::from_ref(&no_time)));
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "db=arrowdb&table=m",
            claims_a_petabyte(),
            400,
            "uncompressed",
        ),
        ("db=arrowdb&table=m", stream(&[no_time]), 400, "\"time\""),
        ("db=arrowdb&table=m", stream(&[nested]), 400, "\"xs\""),
        ("db=arrowdb&table=m", stream(&[conflicting]), 400, "usage"),
        (
            "db=arrowdb&table=m",
            good[..good.len() / 2].to_vec(),
            400,
            "Arrow IPC",
        ),
        (
            "db=arrowdb&table=m",
            b"not arrow at all".to_vec(),
            400,
            "Arrow IPC",
        ),
        ("db=arrowdb&table=m", vec![0xff; 8], 400, "Arrow IPC"),
        ("db=arrowdb&table=m", second_bad, 400, "nothing was written"),
        ("db=arrowdb", good.clone(), 400, "table"),
        ("table=m", good.clone(), 400, "db"),
        ("db=bad%20name&table=m", good.clone(), 400, "database name"),
    ];
    for (query, body, status, needle) in cases {
        let response = post(&server, query, body).await;
        assert_eq!(response.status().as_u16(), status, "{query} {needle}");
        let (message, _) = error_body(response).await;
        assert!(
            message.contains(needle),
            "{query}: {message:?} lacks {needle:?}"
        );
    }
    let wrong_type = reqwest::Client::new()
        .post(format!(
            "{}/api/v3/write_arrow?db=arrowdb&table=m",
            server.url
        ))
        .header("content-type", "text/plain")
        .body(good)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_type.status(), 415);
    // Only the first good request's rows are there; the server is up.
    let rows = server
        .query_json("arrowdb", "SELECT count(*) AS n FROM m")
        .await;
    assert_eq!(rows, [json!({"n": 10})]);
}

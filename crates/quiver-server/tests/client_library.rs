//! `quiver-client` used as a program would use it, unchanged, against the real `quiver`
//! binary: line protocol and Arrow writes, SQL answers as JSON and as Arrow, the database list,
//! and the errors a caller gets for a rejected line, an unknown database and an unreachable
//! server.

mod common;

use std::sync::Arc;

use arrow::array::{
    Array, AsArray, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use common::Server;
use quiver_client::{Client, ClientError};

#[tokio::test]
async fn the_client_library_writes_and_reads_a_real_server() {
    let server = Server::start().await;
    let client = Client::new(server.url.clone());

    let written = client
        .write_lp(
            "metrics",
            "nanosecond",
            "cpu,host=a usage=1.5 10\ncpu,host=b usage=2.5 20\n",
        )
        .await
        .unwrap();
    assert_eq!((written.lines_written, written.lines_rejected), (2, 0));
    assert!(written.rejection.is_none());

    // a partial write: the good line is written, the bad one named with its line number
    let partial = client
        .write_lp(
            "metrics",
            "nanosecond",
            "cpu,host=c usage=3.5 30\ncpu,host=d usage=\n",
        )
        .await
        .unwrap();
    assert_eq!((partial.lines_written, partial.lines_rejected), (1, 1));
    let rejected = partial
        .rejection
        .expect("the rejected line is reported")
        .rejected_lines();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].line_number, 2, "{rejected:?}");

    let json = client
        .query_sql(
            "metrics",
            "SELECT host, usage FROM cpu ORDER BY host",
            "json",
        )
        .await
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&json).unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[2]["host"], "c");

    // an Arrow write of a new table, read back as Arrow
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            false,
        ),
        Field::new("room", DataType::Utf8, true),
        Field::new("celsius", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![1, 2]).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["kitchen", "hall"])),
            Arc::new(Float64Array::from(vec![21.5, 19.0])),
        ],
    )
    .unwrap();
    client
        .write_arrow("metrics", "climate", &batch)
        .await
        .unwrap();
    let answer = client
        .query_arrow(
            "metrics",
            "SELECT count(*) AS n, sum(celsius) AS total FROM climate",
        )
        .await
        .unwrap();
    let answer = &answer[0];
    assert_eq!(answer.column(0).as_primitive::<Int64Type>().value(0), 2);
    let total = answer
        .column(1)
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap();
    assert_eq!(total.value(0), 40.5);

    assert!(client
        .databases()
        .await
        .unwrap()
        .contains(&"metrics".to_string()));
}

#[tokio::test]
async fn the_client_library_says_what_the_server_refused_and_when_it_is_unreachable() {
    let server = Server::start().await;
    let client = Client::new(server.url.clone());
    match client.query_sql("nowhere", "SELECT 1", "json").await {
        Err(ClientError::Server(refused)) => {
            assert_eq!(refused.status().as_u16(), 404, "{refused}");
            let message = refused.message().unwrap_or_default();
            assert!(message.contains("nowhere"), "{message}");
        }
        other => panic!("an unknown database must be the server's refusal, got {other:?}"),
    }
    drop(server);

    let port = common::free_port();
    let absent = Client::new(format!("http://127.0.0.1:{port}"));
    let error = absent.databases().await.unwrap_err();
    assert!(matches!(error, ClientError::Unreachable(_)), "{error:?}");
    assert!(error.to_string().contains(&port.to_string()), "{error}");
}

//! The query endpoint over real sockets: every output format, errors and their statuses.

mod common;

use arrow::array::{Array, Float64Array, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit};
use bytes::Bytes;
use common::{error_body, Server};
use serde_json::json;

const DATA: &str = "cpu,host=a,region=eu usage=10.5,cores=4i 1700000000000000000
cpu,host=b,region=eu usage=20.25,cores=8i 1700000010000000000
cpu,host=c,region=us usage=30,cores=2i 1700000070000000000
";

async fn server_with_data() -> Server {
    let server = Server::start().await;
    assert_eq!(server.write_lp("db=q", DATA).await.status(), 204);
    server
}

#[tokio::test]
async fn json_jsonl_csv_and_pretty() {
    let server = server_with_data().await;
    let sql = "SELECT host, usage, time FROM cpu WHERE region = 'eu' ORDER BY host";
    let json_rows = server.query_json("q", sql).await;
    assert_eq!(
        json_rows,
        vec![
            json!({"host": "a", "usage": 10.5, "time": "2023-11-14T22:13:20Z"}),
            json!({"host": "b", "usage": 20.25, "time": "2023-11-14T22:13:30Z"}),
        ]
    );
    let jsonl = server.query("q", sql, "jsonl").await;
    assert_eq!(jsonl.headers()["content-type"], "application/jsonl");
    let lines: Vec<serde_json::Value> = jsonl
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, json_rows);
    let csv = server.query("q", sql, "csv").await;
    assert!(csv.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    assert_eq!(
        csv.text().await.unwrap(),
        "host,usage,time\na,10.5,2023-11-14T22:13:20Z\nb,20.25,2023-11-14T22:13:30Z\n"
    );
    let pretty = server.query("q", sql, "pretty").await.text().await.unwrap();
    assert!(pretty.contains("| host | usage | time"), "{pretty}");
    assert!(pretty.contains("| b    | 20.25 |"), "{pretty}");
}

#[tokio::test]
async fn empty_results_keep_their_shape() {
    let server = server_with_data().await;
    let sql = "SELECT host, usage FROM cpu WHERE usage > 1000";
    assert_eq!(
        server.query_json("q", sql).await,
        Vec::<serde_json::Value>::new()
    );
    assert_eq!(
        server.query("q", sql, "csv").await.text().await.unwrap(),
        "host,usage\n"
    );
    let arrow = arrow_batches(server.query("q", sql, "arrow").await.bytes().await.unwrap());
    assert_eq!(arrow.0.fields().len(), 2);
    assert_eq!(arrow.1.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
}

fn arrow_batches(bytes: Bytes) -> (arrow::datatypes::SchemaRef, Vec<RecordBatch>) {
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let schema = reader.schema();
    (schema, reader.collect::<Result<Vec<_>, _>>().unwrap())
}

#[tokio::test]
async fn arrow_stream_and_parquet_keep_types() {
    let server = Server::start().await;
    // enough rows for many record batches
    let lp: String = (0..50_000)
        .map(|i| format!("m,host=h{} v={i}.5 {}\n", i % 100, i + 1))
        .collect();
    assert_eq!(server.write_lp("db=a&precision=ns", lp).await.status(), 204);
    let sql = "SELECT host, v, time FROM m ORDER BY time";
    let response = server.query("q_missing_is_404", sql, "arrow").await;
    assert_eq!(response.status(), 404);
    let response = server.query("a", sql, "arrow").await;
    assert_eq!(
        response.headers()["content-type"],
        "application/vnd.apache.arrow.stream"
    );
    let (schema, batches) = arrow_batches(response.bytes().await.unwrap());
    assert_eq!(
        schema.field(0).data_type(),
        &DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
    );
    assert_eq!(
        schema.field(2).data_type(),
        &DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
    );
    assert!(batches.len() > 1);
    let values: Vec<f64> = batches
        .iter()
        .flat_map(|b| {
            b.column(1)
                .as_any()
                .downcast_ref::<Float64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(values.len(), 50_000);
    assert!(values.iter().enumerate().all(|(i, v)| *v == i as f64 + 0.5));

    let parquet = server
        .query("a", sql, "parquet")
        .await
        .bytes()
        .await
        .unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(parquet)
        .unwrap()
        .build()
        .unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 50_000);

    // the Accept header chooses the format when the query string does not
    let accept = reqwest::Client::new()
        .get(format!("{}/api/v3/query_sql", server.url))
        .query(&[("db", "a"), ("q", "SELECT count(*) AS n FROM m")])
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(accept.text().await.unwrap(), "n\n50000\n");
}

#[tokio::test]
async fn time_functions_and_aggregates() {
    let server = server_with_data().await;
    let rows = server
        .query_json(
            "q",
            "SELECT date_bin(INTERVAL '1 minute', time) AS minute, count(*) AS n, max(usage) AS top, sum(cores) AS cores \
             FROM cpu WHERE time <= now() GROUP BY 1 ORDER BY 1",
        )
        .await;
    assert_eq!(
        rows,
        vec![
            json!({"minute": "2023-11-14T22:13:00Z", "n": 2, "top": 20.25, "cores": 12}),
            json!({"minute": "2023-11-14T22:14:00Z", "n": 1, "top": 30.0, "cores": 2}),
        ]
    );
    let qualified = server
        .query_json("q", "SELECT count(*) AS n FROM q.cpu")
        .await;
    assert_eq!(qualified, vec![json!({"n": 3})]);
}

#[tokio::test]
async fn post_with_json_body() {
    let server = server_with_data().await;
    let response = reqwest::Client::new()
        .post(format!("{}/api/v3/query_sql", server.url))
        .header("content-type", "application/json")
        .body(
            json!({"db": "q", "q": "SELECT count(*) AS n FROM cpu", "format": "jsonl"}).to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "{\"n\":3}\n");
}

/// (what, query parameters, expected status, text the message must contain)
type ErrorCase = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    u16,
    &'static str,
);

#[tokio::test]
async fn errors_have_clear_statuses_and_messages() {
    let server = server_with_data().await;
    let client = reqwest::Client::new();
    let url = format!("{}/api/v3/query_sql", server.url);
    let cases: Vec<ErrorCase> = vec![
        (
            "syntax",
            vec![("db", "q"), ("q", "SELEC nonsense")],
            400,
            "SELEC",
        ),
        (
            "unknown column",
            vec![("db", "q"), ("q", "SELECT nope FROM cpu")],
            400,
            "nope",
        ),
        (
            "unknown table",
            vec![("db", "q"), ("q", "SELECT * FROM mem")],
            404,
            "mem",
        ),
        (
            "unknown database",
            vec![("db", "nodb"), ("q", "SELECT 1")],
            404,
            "nodb",
        ),
        (
            "unknown qualified db",
            vec![("db", "q"), ("q", "SELECT * FROM other.cpu")],
            404,
            "other",
        ),
        ("missing q", vec![("db", "q")], 400, "\"q\""),
        ("missing db", vec![("q", "SELECT 1")], 400, "\"db\""),
        (
            "bad format",
            vec![("db", "q"), ("q", "SELECT 1"), ("format", "xml")],
            400,
            "xml",
        ),
        (
            "ddl",
            vec![("db", "q"), ("q", "CREATE TABLE x (a INT)")],
            400,
            "",
        ),
        (
            "dml",
            vec![("db", "q"), ("q", "INSERT INTO cpu (usage) VALUES (1)")],
            400,
            "",
        ),
        (
            "set",
            vec![
                ("db", "q"),
                ("q", "SET datafusion.execution.batch_size = 1"),
            ],
            400,
            "",
        ),
        (
            "copy",
            vec![("db", "q"), ("q", "COPY cpu TO '/tmp/x.parquet'")],
            400,
            "",
        ),
    ];
    for (what, params, status, needle) in cases {
        let response = client.get(&url).query(&params).send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{what}");
        let (message, _) = error_body(response).await;
        assert!(
            message.contains(needle) && !message.is_empty(),
            "{what}: {message}"
        );
    }
    let bad_json = client.post(&url).body("{\"db\": ").send().await.unwrap();
    assert_eq!(bad_json.status(), 400);
    let unknown_key = client
        .post(&url)
        .body("{\"db\": \"q\", \"q\": \"SELECT 1\", \"x\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown_key.status(), 400);
    // a runtime error (division by zero) is a 400 too, and the server goes on
    let runtime = client
        .get(&url)
        .query(&[("db", "q"), ("q", "SELECT cores / 0 FROM cpu")])
        .send()
        .await
        .unwrap();
    assert_eq!(runtime.status(), 400);
    assert_eq!(
        server
            .query_json("q", "SELECT count(*) AS n FROM cpu")
            .await,
        vec![json!({"n": 3})]
    );
}

//! Runs every decode case of InfluxData's line-protocol corpus
//! (`tests/conformance/line-protocol/corpus.json` in this repository, an unmodified copy of the
//! upstream corpus) through Quiver's parser and measures the agreement rate: accepted/rejected
//! as the reference decoder says, and for accepted inputs the same measurement, tags, typed
//! field values and time.
//!
//! The rate may only go up: the test fails below [`MINIMUM_AGREEMENT`]. Deliberate deviations
//! are listed in docs/protocols.md ("Line protocol: deviations from the reference corpus").

use std::path::PathBuf;

use base64::Engine;
use quiver_ingest::line_protocol::{FieldValue, LineParser, ParsedLine, Precision};
use serde_json::Value;

/// The agreement rate reached when this test was last tightened; raise it, never lower it.
const MINIMUM_AGREEMENT: f64 = 0.9998;

fn corpus_path() -> PathBuf {
    if let Ok(dir) = std::env::var("QUIVER_CONFORMANCE_DIR") {
        return PathBuf::from(dir).join("line-protocol/corpus.json");
    }
    // The repository's own copy, `tests/conformance/` (vendored, unmodified). The crate's
    // directory is read when the test runs (cargo sets it then too): a binary compiled in
    // another checkout and reused from a shared target directory would otherwise look there.
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    PathBuf::from(crate_dir).join("../../tests/conformance/line-protocol/corpus.json")
}

/// A point in the corpus's own terms, so both sides compare with `==`.
#[derive(Debug, PartialEq)]
struct Point {
    name: Vec<u8>,
    tags: Vec<(Vec<u8>, Vec<u8>)>,
    fields: Vec<(Vec<u8>, Val)>,
    time: i64,
}

#[derive(Debug, PartialEq)]
enum Val {
    Int(i64),
    Uint(u64),
    Float(f64),
    Bool(bool),
    Str(Vec<u8>),
}

fn string_or_binary(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Object(o) => base64::engine::general_purpose::STANDARD
            .decode(o["binary"].as_str().expect("binary is a string"))
            .expect("valid base64 in corpus"),
        other => panic!("unexpected string-or-binary {other}"),
    }
}

fn expected_value(v: &Value) -> Val {
    let (kind, x) = v.as_object().unwrap().iter().next().unwrap();
    match kind.as_str() {
        "int" => Val::Int(x.as_i64().unwrap()),
        "uint" => Val::Uint(x.as_u64().unwrap()),
        "float" => Val::Float(x.as_f64().unwrap()),
        "bool" => Val::Bool(x.as_bool().unwrap()),
        "string" => Val::Str(x.as_str().unwrap().as_bytes().to_vec()),
        "binary" => Val::Str(string_or_binary(v)),
        other => panic!("unexpected value kind {other}"),
    }
}

fn expected_points(result: &Value) -> Vec<Point> {
    result
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Point {
            name: string_or_binary(&p["name"]),
            tags: p["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (string_or_binary(&t["key"]), string_or_binary(&t["value"])))
                .collect(),
            fields: p["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (string_or_binary(&f["key"]), expected_value(&f["value"])))
                .collect(),
            time: p["time"].as_i64().unwrap(),
        })
        .collect()
}

fn precision(corpus_precision: &str) -> Precision {
    match corpus_precision {
        "1ns" => Precision::Nanosecond,
        "1µs" => Precision::Microsecond,
        "1ms" => Precision::Millisecond,
        "1s" => Precision::Second,
        other => panic!("unexpected precision {other}"),
    }
}

/// Quiver's decoding of one input: all points, or the first error.
fn quiver_points(
    text: &[u8],
    precision: Precision,
    default_time: i64,
) -> Result<Vec<Point>, String> {
    let mut parser = LineParser::new(text);
    let mut line = ParsedLine::default();
    let mut points = Vec::new();
    while let Some(result) = parser.next_line(&mut line) {
        result.map_err(|e| e.to_string())?;
        let time = match line.timestamp {
            None => precision.truncate(default_time),
            Some(ts) => precision.to_nanos(ts).ok_or("timestamp out of range")?,
        };
        let mut tags: Vec<_> = line
            .tags
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        tags.sort();
        let fields = line
            .fields
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    FieldValue::Float(x) => Val::Float(*x),
                    FieldValue::Integer(x) => Val::Int(*x),
                    FieldValue::UInteger(x) => Val::Uint(*x),
                    FieldValue::Boolean(x) => Val::Bool(*x),
                    FieldValue::String(s) => Val::Str(s.as_bytes().to_vec()),
                };
                (k.as_bytes().to_vec(), value)
            })
            .collect();
        points.push(Point {
            name: line.measurement.as_bytes().to_vec(),
            tags,
            fields,
            time,
        });
    }
    Ok(points)
}

#[test]
fn line_protocol_corpus_agreement() {
    let path = corpus_path();
    let raw = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the conformance corpus at {}: {e} (set QUIVER_CONFORMANCE_DIR)",
            path.display()
        )
    });
    let corpus: Value = serde_json::from_slice(&raw).expect("corpus is JSON");
    let cases = corpus["decode"].as_object().expect("decode section");
    let mut agree = 0usize;
    let mut disagreements = Vec::new();
    for (key, case) in cases {
        let input = &case["input"];
        let text = string_or_binary(&input["text"]);
        let ours = quiver_points(
            &text,
            precision(input["precision"].as_str().unwrap()),
            input["defaultTime"].as_i64().unwrap(),
        );
        let output = &case["output"];
        let same = match (output.get("error"), &ours) {
            (Some(_), Err(_)) => true,
            (Some(_), Ok(_)) | (None, Err(_)) => false,
            (None, Ok(points)) => *points == expected_points(&output["result"]),
        };
        if same {
            agree += 1;
        } else {
            disagreements.push(format!(
                "{key}: input {:?}\n    reference: {}\n    quiver:    {:?}",
                String::from_utf8_lossy(&text),
                output,
                ours
            ));
        }
    }
    let rate = agree as f64 / cases.len() as f64;
    println!(
        "line-protocol conformance: {agree}/{} cases agree ({:.2}%)",
        cases.len(),
        rate * 100.0
    );
    for d in disagreements.iter().take(60) {
        println!("  {d}");
    }
    assert!(cases.len() >= 6000, "corpus looks truncated");
    assert!(
        rate >= MINIMUM_AGREEMENT,
        "agreement {rate:.4} fell below the recorded minimum {MINIMUM_AGREEMENT}"
    );
}

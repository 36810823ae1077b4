//! Property tests for the line-protocol parser and decoder:
//! - any point written with correct escaping parses back to exactly the same tokens;
//! - arbitrary bytes never panic the decoder, and its accounting is consistent.

use proptest::prelude::*;
use quiver_ingest::line_protocol::{
    decode_line_protocol, DecodeOptions, DecodedWrite, FieldValue, LineParser, ParsedLine,
    Precision,
};
use quiver_model::schema::NoExistingTables;

#[derive(Debug, Clone)]
enum Value {
    Float(f64),
    Int(i64),
    Uint(u64),
    Str(String),
    Bool(bool),
}

#[derive(Debug, Clone)]
struct Point {
    measurement: String,
    tags: Vec<(String, String)>,
    fields: Vec<(String, Value)>,
    timestamp: Option<i64>,
}

/// Names with the characters that need escaping, quotes, `#`, `=` and non-ASCII text.
fn name() -> impl Strategy<Value = String> {
    "[a-z0-9 ,=\"#é中_\\-]{1,12}".prop_filter("reserved or comment-like", |s| {
        s != "time" && !s.starts_with('#')
    })
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::Float),
        any::<i64>().prop_map(Value::Int),
        any::<u64>().prop_map(Value::Uint),
        "[a-z \"\\\\,=\n中]{0,16}".prop_map(Value::Str),
        any::<bool>().prop_map(Value::Bool),
    ]
}

fn point() -> impl Strategy<Value = Point> {
    (
        name(),
        prop::collection::btree_map(name(), name(), 0..4),
        prop::collection::btree_map(name(), value(), 1..5),
        prop::option::of(any::<i64>()),
    )
        .prop_map(|(measurement, tags, fields, timestamp)| Point {
            measurement,
            tags: tags.into_iter().collect(),
            fields: fields.into_iter().collect(),
            timestamp,
        })
}

fn escape(text: &str, special: &[char]) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if special.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn encode(point: &Point) -> String {
    let mut line = escape(&point.measurement, &[',', ' ']);
    for (k, v) in &point.tags {
        line += &format!(
            ",{}={}",
            escape(k, &[',', '=', ' ']),
            escape(v, &[',', '=', ' '])
        );
    }
    for (i, (k, v)) in point.fields.iter().enumerate() {
        line.push(if i == 0 { ' ' } else { ',' });
        line += &escape(k, &[',', '=', ' ']);
        line.push('=');
        line += &match v {
            Value::Float(f) => format!("{f:?}"),
            Value::Int(i) => format!("{i}i"),
            Value::Uint(u) => format!("{u}u"),
            Value::Str(s) => format!("\"{}\"", escape(s, &['"', '\\'])),
            Value::Bool(b) => b.to_string(),
        };
    }
    if let Some(t) = point.timestamp {
        line += &format!(" {t}");
    }
    line
}

fn same_value(parsed: &FieldValue<'_>, written: &Value) -> bool {
    match (parsed, written) {
        (FieldValue::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
        (FieldValue::Integer(a), Value::Int(b)) => a == b,
        (FieldValue::UInteger(a), Value::Uint(b)) => a == b,
        (FieldValue::String(a), Value::Str(b)) => a == b,
        (FieldValue::Boolean(a), Value::Bool(b)) => a == b,
        _ => false,
    }
}

/// Decodes `body` (reporting up to 1,000 errors) and checks that every accepted line is a row.
fn decode_checked(body: &[u8], precision: Precision) -> Result<DecodedWrite, TestCaseError> {
    let options = DecodeOptions {
        precision,
        default_time_ns: 1_700_000_000_000_000_000,
        max_reported_errors: 1_000,
    };
    let decoded = decode_line_protocol(body, &options, &NoExistingTables);
    let rows: usize = decoded.tables.iter().map(|t| t.batch.num_rows()).sum();
    prop_assert_eq!(rows, decoded.accepted_lines);
    Ok(decoded)
}

fn physical_lines(body: &[u8]) -> usize {
    body.iter().filter(|&&b| b == b'\n').count() + 1
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn escaped_points_parse_back_exactly(points in prop::collection::vec(point(), 1..8)) {
        let body = points.iter().map(encode).collect::<Vec<_>>().join("\n");
        let mut parser = LineParser::new(body.as_bytes());
        let mut line = ParsedLine::default();
        for point in &points {
            let parsed = parser.next_line(&mut line);
            prop_assert!(matches!(parsed, Some(Ok(_))), "{:?} for {:?}", parsed, encode(point));
            prop_assert_eq!(line.measurement.as_ref(), point.measurement.as_str());
            let tags: Vec<(String, String)> =
                line.tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            prop_assert_eq!(&tags, &point.tags);
            prop_assert_eq!(line.fields.len(), point.fields.len());
            for ((key, parsed), (want_key, want)) in line.fields.iter().zip(&point.fields) {
                prop_assert_eq!(key.as_ref(), want_key.as_str());
                prop_assert!(same_value(parsed, want), "{:?} != {:?}", parsed, want);
            }
            prop_assert_eq!(line.timestamp, point.timestamp);
        }
        prop_assert!(parser.next_line(&mut line).is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let decoded = decode_checked(&body, Precision::Auto)?;
        prop_assert_eq!(decoded.errors.len(), decoded.error_count);
        let physical_lines = physical_lines(&body);
        for error in &decoded.errors {
            prop_assert!(error.line_number >= 1 && error.line_number <= physical_lines);
            prop_assert!(!error.message.is_empty());
        }
    }

    #[test]
    fn mangled_valid_lines_never_panic(point in point(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut body = encode(&point).into_bytes();
        let at = cut.index(body.len());
        body.insert(at, byte);
        let decoded = decode_checked(&body, Precision::Nanosecond)?;
        // one inserted byte can split lines, unbalance a string's quotes, make a comment...
        // but never yield more entries than there are physical lines
        prop_assert!(decoded.accepted_lines + decoded.error_count <= physical_lines(&body));
    }
}

//! Property test of the MessagePack decoder: random columnar and row records (mixed in
//! batches, arrays or single records; random key order; nils; every timestamp unit; columnar
//! records with and without `tag_keys`; the `h` shorthand; missing times), encoded
//! with the `rmpv` MessagePack encoder, decode to exactly the tables a reference path builds
//! from `rmpv`'s own decoding of the same bytes into a value tree.

use std::collections::{BTreeMap, BTreeSet};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use proptest::prelude::*;
use quiver_ingest::msgpack::{decode_msgpack, MsgpackError, MsgpackOptions, MsgpackStream};
use quiver_model::schema::{ColumnType, DecodedTable, FieldType, NoExistingTables};
use rmpv::Value;

const NOW: i64 = 1_600_000_000_000_000_000;

/// Field names with a fixed kind each, so a data set never mixes types in one column.
const FIELDS: &[(&str, Kind)] = &[
    ("f_float", Kind::Float),
    ("i_int", Kind::Int),
    ("u_big", Kind::BigUInt),
    ("s_text", Kind::Text),
    ("b_flag", Kind::Bool),
];
const TAGS: &[&str] = &["host", "region"];
const TABLES: &[&str] = &["cpu", "mem"];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Float,
    Int,
    BigUInt,
    Text,
    Bool,
}

/// One random value of `kind` (nil one time in five).
fn value(kind: Kind) -> BoxedStrategy<Value> {
    let some = match kind {
        Kind::Float => (-1e6f64..1e6).prop_map(Value::from).boxed(),
        Kind::Int => any::<i64>().prop_map(Value::from).boxed(),
        Kind::BigUInt => prop_oneof![0u64..100, (i64::MAX as u64 + 1)..=u64::MAX]
            .prop_map(Value::from)
            .boxed(),
        Kind::Text => "[a-zé ]{0,6}".prop_map(Value::from).boxed(),
        Kind::Bool => any::<bool>().prop_map(Value::from).boxed(),
    };
    prop_oneof![1 => Just(Value::Nil), 4 => some].boxed()
}

/// A time in 2001..2100 written in one of the units the decoder infers (0 s, 1 ms, 2 µs,
/// 3 ns), and its value in nanoseconds.
fn time_in(unit: u32, seconds: i64) -> (Value, i64) {
    let ns = seconds * 1_000_000_000;
    let written = ns / 10i64.pow(9 - 3 * unit.min(3));
    (
        Value::from(written),
        written * 10i64.pow(9 - 3 * unit.min(3)),
    )
}

#[derive(Debug, Clone)]
struct Record {
    table: &'static str,
    columnar: bool,
    unit: u32,
    /// Rows: (seconds, tags, fields).
    rows: Vec<(i64, Vec<Option<String>>, Vec<Value>)>,
    key_order: Vec<usize>,
    /// Columnar: list the tags in `tag_keys` (else string columns are tags by the default rule).
    tag_keys: bool,
    /// Row: send the `host` tag as `h`.
    host_as_h: bool,
    /// Send no time: the request's time applies.
    omit_time: bool,
}

fn record() -> impl Strategy<Value = Record> {
    (
        prop::sample::select(TABLES.to_vec()),
        any::<bool>(),
        0u32..4,
        prop::collection::vec(
            (
                1_000_000_000i64..4_000_000_000,
                prop::collection::vec(prop::option::of("[a-c]{1,2}"), TAGS.len()),
                FIELDS.iter().map(|(_, k)| value(*k)).collect::<Vec<_>>(),
            ),
            1..6,
        ),
        Just((0..5).collect::<Vec<usize>>()).prop_shuffle(),
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.2)),
    )
        .prop_map(
            |(table, columnar, unit, mut rows, key_order, (tag_keys, host_as_h, omit_time))| {
                // A point needs a field value: if a record would have none that is not a
                // string (a string column can be a tag), the first row's float gets one.
                let used = if columnar { rows.len() } else { 1 };
                let numeric = |r: &(i64, Vec<Option<String>>, Vec<Value>)| {
                    r.2.iter().any(|v| !v.is_nil() && !v.is_str())
                };
                if !rows[..used].iter().any(numeric) {
                    rows[0].2[0] = Value::from(0.25);
                }
                Record {
                    table,
                    columnar,
                    unit,
                    rows,
                    key_order,
                    tag_keys,
                    host_as_h,
                    omit_time,
                }
            },
        )
}

fn encode_record(record: &Record) -> Value {
    let mut entries: Vec<(Value, Value)> = Vec::new();
    entries.push(("m".into(), record.table.into()));
    if record.columnar {
        let mut columns: Vec<(Value, Value)> = Vec::new();
        if !record.omit_time {
            let times = record.rows.iter().map(|r| time_in(record.unit, r.0).0);
            columns.push(("time".into(), Value::Array(times.collect())));
        }
        for (t, tag) in TAGS.iter().enumerate() {
            let values = record
                .rows
                .iter()
                .map(|r| r.1[t].clone().map_or(Value::Nil, Value::from));
            columns.push(((*tag).into(), Value::Array(values.collect())));
        }
        for (f, (field, _)) in FIELDS.iter().enumerate() {
            let values = record.rows.iter().map(|r| r.2[f].clone());
            columns.push(((*field).into(), Value::Array(values.collect())));
        }
        entries.push(("columns".into(), Value::Map(columns)));
        if record.tag_keys {
            entries.push((
                "tag_keys".into(),
                Value::Array(TAGS.iter().map(|t| Value::from(*t)).collect()),
            ));
        }
    } else {
        let row = &record.rows[0];
        if !record.omit_time {
            entries.push(("t".into(), time_in(record.unit, row.0).0));
        }
        let mut tags = Vec::new();
        for (tag, value) in TAGS.iter().zip(&row.1) {
            let Some(value) = value else { continue };
            if *tag == "host" && record.host_as_h {
                entries.push(("h".into(), value.as_str().into()));
            } else {
                tags.push((Value::from(*tag), Value::from(value.as_str())));
            }
        }
        entries.push(("tags".into(), Value::Map(tags)));
        let fields: Vec<(Value, Value)> = FIELDS
            .iter()
            .zip(&row.2)
            .map(|((f, _), v)| (Value::from(*f), v.clone()))
            .collect();
        entries.push(("fields".into(), Value::Map(fields)));
    }
    let order: Vec<usize> = record
        .key_order
        .iter()
        .copied()
        .filter(|&i| i < entries.len())
        .collect();
    Value::Map(order.into_iter().map(|i| entries[i].clone()).collect())
}

/// How the records are wrapped: one top-level value each, an array, or a batch.
fn payload(records: &[Record], envelope: u8) -> Vec<u8> {
    let values: Vec<Value> = records.iter().map(encode_record).collect();
    let mut bytes = Vec::new();
    match envelope % 3 {
        0 => {
            for v in &values {
                rmpv::encode::write_value(&mut bytes, v).unwrap();
            }
        }
        1 => rmpv::encode::write_value(&mut bytes, &Value::Array(values)).unwrap(),
        _ => rmpv::encode::write_value(
            &mut bytes,
            &Value::Map(vec![("batch".into(), Value::Array(values))]),
        )
        .unwrap(),
    }
    bytes
}

/// The reference: `rmpv` decodes the bytes into values; rows and types are derived from them
/// directly. Returns, per table, column types and the rows as text (sorted).
type Expected = BTreeMap<String, (BTreeMap<String, ColumnType>, Vec<Vec<String>>)>;

fn reference(bytes: &[u8]) -> Expected {
    let mut cursor = bytes;
    let mut records = Vec::new();
    while !cursor.is_empty() {
        match rmpv::decode::read_value(&mut cursor).unwrap() {
            Value::Array(items) => records.extend(items),
            Value::Map(entries) if entries.len() == 1 && entries[0].0.as_str() == Some("batch") => {
                records.extend(entries[0].1.as_array().unwrap().clone())
            }
            record => records.push(record),
        }
    }
    // table -> rows of column -> value
    let mut tables: BTreeMap<String, Vec<BTreeMap<String, Value>>> = BTreeMap::new();
    // Columns some record says are tags; string columns of columnar records without
    // `tag_keys` (tags unless some record sends them as string fields); string fields.
    // All three are sets of (table, column).
    let mut tags: BTreeSet<(String, String)> = BTreeSet::new();
    let mut string_columns: BTreeSet<(String, String)> = BTreeSet::new();
    let mut string_fields: BTreeSet<(String, String)> = BTreeSet::new();
    for record in records {
        let get = |key: &str| {
            record
                .as_map()
                .unwrap()
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v.clone())
        };
        let table = get("m").unwrap().as_str().unwrap().to_string();
        let rows = tables.entry(table.clone()).or_default();
        let key = |column: &str| (table.clone(), column.to_string());
        if let Some(columns) = get("columns") {
            let columns = columns.as_map().unwrap();
            let tag_keys: Option<Vec<String>> = get("tag_keys").map(|keys| {
                let keys = keys.as_array().unwrap().iter();
                keys.map(|k| k.as_str().unwrap().to_string()).collect()
            });
            let n = columns[0].1.as_array().unwrap().len();
            for i in 0..n {
                let mut row = BTreeMap::new();
                row.insert("time".to_string(), Value::from(NOW));
                for (name, values) in columns {
                    let value = values.as_array().unwrap()[i].clone();
                    let name = name.as_str().unwrap().to_string();
                    if name == "time" {
                        row.insert(name, Value::from(to_nanos(&value)));
                    } else if !value.is_nil() {
                        match (&tag_keys, value.is_str()) {
                            (Some(keys), _) if keys.contains(&name) => tags.insert(key(&name)),
                            (Some(_), true) => string_fields.insert(key(&name)),
                            (None, true) => string_columns.insert(key(&name)),
                            _ => false,
                        };
                        row.insert(name, value);
                    }
                }
                rows.push(row);
            }
        } else {
            let mut row = BTreeMap::new();
            let time = get("t").map_or(NOW, |t| to_nanos(&t));
            row.insert("time".to_string(), Value::from(time));
            if let Some(host) = get("h") {
                tags.insert(key("host"));
                row.insert("host".to_string(), host);
            }
            for (k, v) in get("tags").unwrap().as_map().unwrap() {
                tags.insert(key(k.as_str().unwrap()));
                row.insert(k.as_str().unwrap().to_string(), v.clone());
            }
            for (k, v) in get("fields").unwrap().as_map().unwrap() {
                if !v.is_nil() {
                    if v.is_str() {
                        string_fields.insert(key(k.as_str().unwrap()));
                    }
                    row.insert(k.as_str().unwrap().to_string(), v.clone());
                }
            }
            rows.push(row);
        }
    }
    tables
        .into_iter()
        .map(|(name, rows)| {
            let key = |column: &str| (name.clone(), column.to_string());
            let mut types: BTreeMap<String, ColumnType> = BTreeMap::new();
            for row in &rows {
                for (column, value) in row {
                    let t = if column == "time" {
                        ColumnType::Time
                    } else if tags.contains(&key(column))
                        || (string_columns.contains(&key(column))
                            && !string_fields.contains(&key(column)))
                    {
                        ColumnType::Tag
                    } else {
                        ColumnType::Field(match value {
                            Value::F64(_) | Value::F32(_) => FieldType::Float,
                            Value::Boolean(_) => FieldType::Boolean,
                            Value::String(_) => FieldType::String,
                            Value::Integer(i) if i.as_i64().is_none() => FieldType::UInteger,
                            Value::Integer(_) => FieldType::Integer,
                            other => panic!("unexpected {other:?}"),
                        })
                    };
                    let entry = types.entry(column.clone()).or_insert(t);
                    if *entry == ColumnType::Field(FieldType::Integer)
                        && t == ColumnType::Field(FieldType::UInteger)
                    {
                        *entry = t;
                    }
                }
            }
            let mut text: Vec<Vec<String>> = rows
                .iter()
                .map(|row| {
                    types
                        .keys()
                        .map(|c| row.get(c).map_or("null".to_string(), render))
                        .collect()
                })
                .collect();
            text.sort();
            (name, (types, text))
        })
        .collect()
}

fn to_nanos(value: &Value) -> i64 {
    let v = value.as_i64().unwrap();
    let unit = if v < 10_000_000_000 {
        1_000_000_000
    } else if v < 10_000_000_000_000 {
        1_000_000
    } else if v < 10_000_000_000_000_000 {
        1_000
    } else {
        1
    };
    v * unit
}

fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.as_str().unwrap().to_string(),
        Value::F64(f) => format!("{f:?}"),
        Value::Integer(i) => i.to_string(),
        Value::Boolean(b) => b.to_string(),
        other => panic!("unexpected {other:?}"),
    }
}

fn decoded(bytes: &[u8]) -> Expected {
    let tables = decode_msgpack(
        bytes,
        &MsgpackOptions {
            default_time_ns: NOW,
        },
        &NoExistingTables,
    )
    .unwrap();
    rendered(tables)
}

/// `bytes` decoded as a server streams a body: the pieces `cuts` splits it into arrive one by
/// one; after each, every whole record is decoded and the bytes left wait for the next.
fn decoded_in_pieces(
    bytes: &[u8],
    cuts: &[prop::sample::Index],
) -> Result<Vec<DecodedTable>, MsgpackError> {
    let mut ends: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    ends.sort();
    let mut stream = MsgpackStream::new(&MsgpackOptions {
        default_time_ns: NOW,
    });
    let mut pending: Vec<u8> = Vec::new();
    let mut start = 0;
    for end in ends {
        pending.extend_from_slice(&bytes[start..end]);
        start = end;
        let used = stream.decode(&pending, false)?;
        pending.drain(..used);
    }
    pending.extend_from_slice(&bytes[start..]);
    let used = stream.decode(&pending, true)?;
    assert_eq!(used, pending.len(), "a last call uses every byte");
    stream.finish(&NoExistingTables)
}

fn rendered(tables: Vec<DecodedTable>) -> Expected {
    tables
        .into_iter()
        .map(|table| {
            let batch: RecordBatch = table.batch;
            let schema = batch.schema();
            let types: BTreeMap<String, ColumnType> = schema
                .fields()
                .iter()
                .map(|f| {
                    (
                        f.name().clone(),
                        ColumnType::from_arrow(f.name(), f.data_type()).unwrap(),
                    )
                })
                .collect();
            let columns: Vec<ArrayRef> = types
                .keys()
                .map(|c| text_column(batch.column_by_name(c).unwrap()))
                .collect();
            let mut rows: Vec<Vec<String>> = (0..batch.num_rows())
                .map(|i| {
                    columns
                        .iter()
                        .map(|c| {
                            if c.is_null(i) {
                                return "null".to_string();
                            }
                            ArrayFormatter::try_new(c.as_ref(), &FormatOptions::default())
                                .unwrap()
                                .value(i)
                                .to_string()
                        })
                        .collect()
                })
                .collect();
            rows.sort();
            (table.name, (types, rows))
        })
        .collect()
}

/// Tags as plain strings, times as nanoseconds, floats in Rust's `{:?}` form, so both paths
/// render alike.
fn text_column(array: &ArrayRef) -> ArrayRef {
    match array.data_type() {
        DataType::Dictionary(_, _) => cast(array, &DataType::Utf8).unwrap(),
        DataType::Timestamp(_, _) => cast(array, &DataType::Int64).unwrap(),
        DataType::Float64 => {
            let floats = array.as_primitive::<arrow::datatypes::Float64Type>();
            std::sync::Arc::new(arrow::array::StringArray::from_iter(
                floats.iter().map(|v| v.map(|v| format!("{v:?}"))),
            ))
        }
        _ => array.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn decoder_matches_the_value_tree_reference(
        records in prop::collection::vec(record(), 1..8),
        envelope in any::<u8>(),
    ) {
        let bytes = payload(&records, envelope);
        prop_assert_eq!(decoded(&bytes), reference(&bytes));
    }

    #[test]
    fn bytes_split_anywhere_decode_as_the_whole_payload(
        records in prop::collection::vec(record(), 1..8),
        envelope in any::<u8>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        flip in prop::option::of((any::<prop::sample::Index>(), 1u8..=255)),
    ) {
        let mut bytes = payload(&records, envelope);
        // Sometimes a corrupt payload: the same error must come out, at the same place.
        if let Some((at, mask)) = flip {
            let at = at.index(bytes.len());
            bytes[at] ^= mask;
        }
        let options = MsgpackOptions { default_time_ns: NOW };
        let whole = decode_msgpack(&bytes, &options, &NoExistingTables);
        let pieces = decoded_in_pieces(&bytes, &cuts);
        match (whole, pieces) {
            (Ok(whole), Ok(pieces)) => prop_assert_eq!(rendered(whole), rendered(pieces)),
            (Err(whole), Err(pieces)) => prop_assert_eq!(whole, pieces),
            (whole, pieces) => prop_assert!(
                false,
                "whole: {:?}\npieces: {:?}",
                whole.map(|t| t.len()),
                pieces.map(|t| t.len())
            ),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_msgpack(&bytes, &MsgpackOptions { default_time_ns: NOW }, &NoExistingTables);
    }

    #[test]
    fn every_truncation_of_a_valid_payload_is_an_error_or_a_prefix(
        records in prop::collection::vec(record(), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = payload(&records, 1);
        let cut = cut.index(bytes.len());
        let options = MsgpackOptions { default_time_ns: NOW };
        let result = decode_msgpack(&bytes[..cut], &options, &NoExistingTables);
        prop_assert!(result.is_err(), "a payload cut at {} of {} bytes decoded", cut, bytes.len());
    }
}

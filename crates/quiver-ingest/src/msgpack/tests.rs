use arrow::array::{Array, AsArray, BooleanArray, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimestampNanosecondType, UInt64Type};
use rmpv::Value;

use super::*;
use quiver_model::schema::{ColumnType, FieldType, NoExistingTables};

const NOW: i64 = 1_700_000_000_123_456_789;

fn encode(value: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    rmpv::encode::write_value(&mut buf, value).unwrap();
    buf
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

fn decode_with(
    value: &Value,
    existing: &dyn SchemaLookup,
) -> Result<Vec<DecodedTable>, MsgpackError> {
    decode_msgpack(
        &encode(value),
        &MsgpackOptions {
            default_time_ns: NOW,
        },
        existing,
    )
}

fn decode(value: &Value) -> Result<Vec<DecodedTable>, MsgpackError> {
    decode_with(value, &NoExistingTables)
}

fn column<'b>(table: &'b DecodedTable, name: &str) -> &'b dyn Array {
    table
        .batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}: {:?}", table.batch.schema()))
        .as_ref()
}

fn strings(array: &dyn Array) -> Vec<Option<String>> {
    let text = cast(array, &DataType::Utf8).unwrap();
    text.as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

fn times(table: &DecodedTable) -> Vec<i64> {
    column(table, "time")
        .as_primitive::<TimestampNanosecondType>()
        .values()
        .to_vec()
}

struct Schema(Vec<(String, ColumnType)>);

impl SchemaLookup for Schema {
    fn existing_columns(&self, _table: &str) -> Vec<(String, ColumnType)> {
        self.0.clone()
    }
}

#[test]
fn columnar_records_type_columns_by_their_values() {
    let payload = map(vec![
        (
            "columns",
            map(vec![
                (
                    "time",
                    Value::Array(vec![
                        1_700_000_000_000i64.into(),
                        1_700_000_001_000i64.into(),
                        1_700_000_002_000i64.into(),
                    ]),
                ),
                (
                    "host",
                    Value::Array(vec!["a".into(), "b".into(), Value::Nil]),
                ),
                (
                    "usage",
                    Value::Array(vec![1.5.into(), Value::Nil, 3i64.into()]),
                ),
                (
                    "count",
                    Value::Array(vec![1i64.into(), (-2i64).into(), Value::Nil]),
                ),
                (
                    "ok",
                    Value::Array(vec![true.into(), false.into(), Value::Nil]),
                ),
                (
                    "empty",
                    Value::Array(vec![Value::Nil, Value::Nil, Value::Nil]),
                ),
            ]),
        ),
        ("m", "cpu".into()),
    ]);
    let tables = decode(&payload).unwrap();
    assert_eq!(tables.len(), 1);
    let cpu = &tables[0];
    assert_eq!(cpu.name, "cpu");
    let names: Vec<_> = cpu
        .batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        ["count", "host", "ok", "time", "usage"],
        "sorted, all-nil column dropped"
    );
    assert_eq!(
        times(cpu),
        [
            1_700_000_000_000_000_000,
            1_700_000_001_000_000_000,
            1_700_000_002_000_000_000
        ]
    );
    assert_eq!(
        column(cpu, "host").data_type(),
        &ColumnType::Tag.arrow_type()
    );
    assert_eq!(
        strings(column(cpu, "host")),
        [Some("a".into()), Some("b".into()), None]
    );
    let usage = column(cpu, "usage").as_primitive::<Float64Type>();
    assert_eq!(
        usage.iter().collect::<Vec<_>>(),
        [Some(1.5), None, Some(3.0)]
    );
    let count = column(cpu, "count").as_primitive::<Int64Type>();
    assert_eq!(count.iter().collect::<Vec<_>>(), [Some(1), Some(-2), None]);
    let ok = column(cpu, "ok")
        .as_any()
        .downcast_ref::<BooleanArray>()
        .unwrap();
    assert_eq!(
        ok.iter().collect::<Vec<_>>(),
        [Some(true), Some(false), None]
    );
}

#[test]
fn tag_keys_and_record_tags_decide_tags() {
    let payload = map(vec![
        ("m", "cpu".into()),
        ("tag_keys", Value::Array(vec!["rack".into()])),
        ("tags", map(vec![("dc", "eu-1".into())])),
        (
            "columns",
            map(vec![
                ("rack", Value::Array(vec![7i64.into(), 8i64.into()])),
                ("note", Value::Array(vec!["x".into(), "y".into()])),
            ]),
        ),
    ]);
    let cpu = &decode(&payload).unwrap()[0];
    assert_eq!(
        column(cpu, "rack").data_type(),
        &ColumnType::Tag.arrow_type()
    );
    assert_eq!(
        strings(column(cpu, "rack")),
        [Some("7".into()), Some("8".into())]
    );
    assert_eq!(
        column(cpu, "note").data_type(),
        &DataType::Utf8,
        "not in tag_keys: a field"
    );
    assert_eq!(
        strings(column(cpu, "dc")),
        [Some("eu-1".into()), Some("eu-1".into())]
    );
    assert_eq!(times(cpu), [NOW, NOW], "no time column: the request's time");
}

#[test]
fn row_records_with_host_shorthand_compact_fields_and_last_duplicate_winning() {
    let payload = Value::Array(vec![
        map(vec![
            ("m", "cpu".into()),
            ("t", 1_700_000_000i64.into()),
            ("h", "server-1".into()),
            (
                "tags",
                map(vec![("host", "ignored".into()), ("region", "eu".into())]),
            ),
            (
                "fields",
                map(vec![
                    ("usage", 1i64.into()),
                    ("usage", 2.5.into()),
                    ("state", "ok".into()),
                ]),
            ),
        ]),
        map(vec![
            ("m", 7i64.into()),
            (
                "f",
                Value::Array(vec![1i64.into(), Value::Nil, true.into()]),
            ),
        ]),
        map(vec![
            ("fields", map(vec![("usage", 4i64.into())])),
            ("m", "cpu".into()),
            (
                "tags",
                map(vec![("host", "server-2".into()), ("rack", 3i64.into())]),
            ),
        ]),
    ]);
    let tables = decode(&payload).unwrap();
    let cpu = tables.iter().find(|t| t.name == "cpu").unwrap();
    assert_eq!(times(cpu), [1_700_000_000_000_000_000, NOW]);
    assert_eq!(
        strings(column(cpu, "host")),
        [Some("server-1".into()), Some("server-2".into())]
    );
    assert_eq!(strings(column(cpu, "region")), [Some("eu".into()), None]);
    assert_eq!(strings(column(cpu, "rack")), [None, Some("3".into())]);
    let usage = column(cpu, "usage").as_primitive::<Float64Type>();
    assert_eq!(usage.values().as_ref(), &[2.5, 4.0]);
    assert_eq!(column(cpu, "state").data_type(), &DataType::Utf8);
    let numbered = tables.iter().find(|t| t.name == "measurement_7").unwrap();
    assert_eq!(
        column(numbered, "field_0")
            .as_primitive::<Int64Type>()
            .value(0),
        1
    );
    assert!(numbered.batch.column_by_name("field_1").is_none());
    assert!(column(numbered, "field_2")
        .as_any()
        .downcast_ref::<BooleanArray>()
        .unwrap()
        .value(0));
}

#[test]
fn batches_mix_row_and_columnar_records_of_one_table() {
    let payload = map(vec![(
        "batch",
        Value::Array(vec![
            map(vec![
                ("m", "cpu".into()),
                (
                    "columns",
                    map(vec![
                        ("time", Value::Array(vec![1i64.into(), 2i64.into()])),
                        ("host", Value::Array(vec!["a".into(), "b".into()])),
                        ("v", Value::Array(vec![1i64.into(), 2i64.into()])),
                    ]),
                ),
            ]),
            map(vec![
                ("m", "cpu".into()),
                ("t", 3i64.into()),
                ("tags", map(vec![("host", "c".into())])),
                ("fields", map(vec![("v", 0.5.into())])),
            ]),
            map(vec![
                ("m", "mem".into()),
                ("fields", map(vec![("free", u64::MAX.into())])),
            ]),
        ]),
    )]);
    let tables = decode(&payload).unwrap();
    assert_eq!(
        tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["cpu", "mem"]
    );
    let cpu = &tables[0];
    assert_eq!(times(cpu), [1_000_000_000, 2_000_000_000, 3_000_000_000]);
    let v = column(cpu, "v").as_primitive::<Float64Type>();
    assert_eq!(
        v.values().as_ref(),
        &[1.0, 2.0, 0.5],
        "integer and float records widen to float"
    );
    assert_eq!(
        strings(column(cpu, "host")),
        [Some("a".into()), Some("b".into()), Some("c".into())]
    );
    assert_eq!(
        column(&tables[1], "free")
            .as_primitive::<UInt64Type>()
            .value(0),
        u64::MAX
    );
}

#[test]
fn values_fit_the_existing_schema_where_nothing_is_lost() {
    let existing = Schema(vec![
        ("usage".into(), ColumnType::Field(FieldType::Float)),
        ("count".into(), ColumnType::Field(FieldType::UInteger)),
        ("note".into(), ColumnType::Field(FieldType::String)),
        ("host".into(), ColumnType::Tag),
    ]);
    let payload = map(vec![
        ("m", "cpu".into()),
        (
            "columns",
            map(vec![
                ("usage", Value::Array(vec![1i64.into(), 2i64.into()])),
                ("count", Value::Array(vec![1i64.into(), 2.0.into()])),
                ("note", Value::Array(vec!["a".into(), "b".into()])),
                ("host", Value::Array(vec!["h".into(), "i".into()])),
            ]),
        ),
    ]);
    let cpu = &decode_with(&payload, &existing).unwrap()[0];
    assert_eq!(column(cpu, "usage").data_type(), &DataType::Float64);
    assert_eq!(
        column(cpu, "count")
            .as_primitive::<UInt64Type>()
            .values()
            .as_ref(),
        &[1, 2]
    );
    assert_eq!(
        column(cpu, "note").data_type(),
        &DataType::Utf8,
        "an existing string field stays a field"
    );
    let lossy = map(vec![
        ("m", "cpu".into()),
        (
            "columns",
            map(vec![(
                "count",
                Value::Array(vec![1i64.into(), (-5i64).into()]),
            )]),
        ),
    ]);
    let e = decode_with(&lossy, &existing).unwrap_err();
    assert!(
        e.message.contains("count") && e.message.contains("-5"),
        "{e}"
    );
    let conflict = map(vec![
        ("m", "cpu".into()),
        ("fields", map(vec![("host", "x".into())])),
    ]);
    let e = decode_with(&conflict, &existing).unwrap_err();
    assert!(
        e.message.contains("host") && e.message.contains("tag"),
        "{e}"
    );
    assert_eq!(e.record, Some(0));
}

#[test]
fn timestamps_units_are_inferred_from_magnitude() {
    let cases: [(Value, i64); 6] = [
        (1_700_000_000i64.into(), 1_700_000_000_000_000_000),
        (1_700_000_000_123i64.into(), 1_700_000_000_123_000_000),
        (1_700_000_000_123_456i64.into(), 1_700_000_000_123_456_000),
        (
            1_700_000_000_123_456_789i64.into(),
            1_700_000_000_123_456_789,
        ),
        (1_700_000_000.5.into(), 1_700_000_000_500_000_000),
        (
            Value::Ext(-1, {
                let v: u64 = (9 << 34) | 1_700_000_000;
                v.to_be_bytes().to_vec()
            }),
            1_700_000_000_000_000_009,
        ),
    ];
    for (t, expected) in cases {
        let payload = map(vec![
            ("m", "x".into()),
            ("t", t.clone()),
            ("fields", map(vec![("v", 1i64.into())])),
        ]);
        assert_eq!(times(&decode(&payload).unwrap()[0]), [expected], "{t:?}");
    }
    let too_far = map(vec![
        ("m", "x".into()),
        ("t", (i64::MAX / 100).into()),
        ("fields", map(vec![("v", 1i64.into())])),
    ]);
    assert!(decode(&too_far).is_ok(), "nanoseconds in range");
    let ms_overflow = map(vec![
        ("m", "x".into()),
        ("t", 9_999_999_999_999i64.into()),
        ("fields", map(vec![("v", 1i64.into())])),
    ]);
    assert!(
        decode(&ms_overflow)
            .unwrap_err()
            .message
            .contains("out of range"),
        "milliseconds beyond 2262"
    );
    let seconds_overflow = map(vec![
        ("m", "x".into()),
        ("t", (-9_000_000_000_000i64).into()),
        ("fields", map(vec![("v", 1i64.into())])),
    ]);
    assert!(decode(&seconds_overflow)
        .unwrap_err()
        .message
        .contains("out of range"));
}

#[test]
fn bad_payloads_are_errors_naming_where() {
    let unequal = map(vec![
        ("m", "cpu".into()),
        (
            "columns",
            map(vec![
                ("a", Value::Array(vec![1i64.into(), 2i64.into()])),
                ("b", Value::Array(vec![1i64.into()])),
            ]),
        ),
    ]);
    let e = error(unequal);
    assert!(e.message.contains("equal lengths"), "{e}");
    assert_eq!(e.record, Some(0));
    assert!(e.offset.is_some());

    let second_bad = Value::Array(vec![
        map(vec![
            ("m", "cpu".into()),
            ("fields", map(vec![("v", 1i64.into())])),
        ]),
        map(vec![("fields", map(vec![("v", 1i64.into())]))]),
    ]);
    let e = error(second_bad);
    assert!(e.message.contains("no measurement"), "{e}");
    assert_eq!(e.record, Some(1));

    let nested = map(vec![
        ("m", "cpu".into()),
        ("fields", map(vec![("v", Value::Array(vec![]))])),
    ]);
    assert!(error(nested).message.contains("nested"));
    let mixed = map(vec![
        ("m", "cpu".into()),
        (
            "columns",
            map(vec![("v", Value::Array(vec![1i64.into(), "x".into()]))]),
        ),
    ]);
    assert!(error(mixed)
        .message
        .contains("string value among integer values"));
    let null_time = map(vec![
        ("m", "cpu".into()),
        (
            "columns",
            map(vec![("time", Value::Array(vec![Value::Nil]))]),
        ),
    ]);
    assert!(error(null_time).message.contains("nil"));
    let both = map(vec![
        ("m", "cpu".into()),
        ("fields", map(vec![("v", 1i64.into())])),
        ("columns", map(vec![])),
    ]);
    assert!(error(both).message.contains("both"));
    let neither = map(vec![("m", "cpu".into())]);
    assert!(error(neither).message.contains("neither"));
    let no_fields = map(vec![
        ("m", "cpu".into()),
        ("fields", map(vec![("v", Value::Nil)])),
    ]);
    assert!(error(no_fields).message.contains("no field values"));
    let inner_batch = map(vec![("m", "cpu".into()), ("batch", Value::Array(vec![]))]);
    assert!(error(inner_batch).message.contains("batch"));
    let tag_and_field = map(vec![
        ("m", "cpu".into()),
        ("tags", map(vec![("a", "x".into())])),
        ("fields", map(vec![("a", 1i64.into())])),
    ]);
    assert!(error(tag_and_field)
        .message
        .contains("both a tag and a field"));
    let time_field = map(vec![
        ("m", "cpu".into()),
        ("fields", map(vec![("time", 1i64.into())])),
    ]);
    assert!(error(time_field).message.contains("\"time\""));
    assert!(error(Value::from(5i64))
        .message
        .contains("payload is a record"));
    assert!(error(Value::Array(vec![5i64.into()]))
        .message
        .contains("records are maps"));
    assert!(error(map(vec![
        ("m", "".into()),
        ("fields", map(vec![("v", 1i64.into())]))
    ]))
    .message
    .contains("'m'"));
    assert!(decode_msgpack(
        &[],
        &MsgpackOptions { default_time_ns: 0 },
        &NoExistingTables
    )
    .is_err());
    let row_then_tag = Value::Array(vec![
        map(vec![
            ("m", "cpu".into()),
            ("fields", map(vec![("a", 1i64.into())])),
        ]),
        map(vec![
            ("m", "cpu".into()),
            ("tags", map(vec![("a", "x".into())])),
            ("fields", map(vec![("b", 1i64.into())])),
        ]),
    ]);
    let e = error(row_then_tag);
    assert!(e.message.contains("tag here but a field"), "{e}");
    assert_eq!(e.record, Some(1));
}

#[test]
fn truncated_payloads_fail_at_every_cut() {
    let payload = encode(&map(vec![
        ("m", "cpu".into()),
        (
            "columns",
            map(vec![
                ("time", Value::Array(vec![1i64.into(), 2i64.into()])),
                ("host", Value::Array(vec!["a".into(), "b".into()])),
                ("v", Value::Array(vec![1.5f64.into(), Value::Nil])),
            ]),
        ),
    ]));
    let options = MsgpackOptions { default_time_ns: 0 };
    assert!(decode_msgpack(&payload, &options, &NoExistingTables).is_ok());
    for cut in 1..payload.len() {
        let result = decode_msgpack(
            &payload[..cut],
            &MsgpackOptions { default_time_ns: 0 },
            &NoExistingTables,
        );
        assert!(
            result.is_err(),
            "a payload cut at {cut} of {} decoded",
            payload.len()
        );
    }
}

#[test]
fn several_top_level_values_are_one_payload() {
    let mut bytes = encode(&map(vec![
        ("m", "a".into()),
        ("fields", map(vec![("v", 1i64.into())])),
    ]));
    bytes.extend(encode(&map(vec![
        ("m", "b".into()),
        ("fields", map(vec![("v", 2i64.into())])),
    ])));
    let tables = decode_msgpack(
        &bytes,
        &MsgpackOptions { default_time_ns: 0 },
        &NoExistingTables,
    )
    .unwrap();
    assert_eq!(tables.len(), 2);
}

fn error(value: Value) -> MsgpackError {
    decode(&value).unwrap_err()
}

#[test]
fn a_forged_array_length_allocates_nothing_the_payload_cannot_fill() {
    // {"m": "cpu", "columns": {"v": <array32 claiming 2^32-1 values: one 1 MiB string>}}
    let mut payload = encode(&map(vec![("m", "cpu".into())]));
    payload[0] = 0x82; // a map of two entries: "m" and "columns"
    payload.extend(encode(&Value::from("columns")));
    payload.extend([0x81]);
    payload.extend(encode(&Value::from("v")));
    payload.extend([0xdd, 0xff, 0xff, 0xff, 0xff]);
    payload.extend(encode(&Value::from("x".repeat(1 << 20))));
    let e = decode_msgpack(
        &payload,
        &MsgpackOptions { default_time_ns: 0 },
        &NoExistingTables,
    )
    .unwrap_err();
    assert!(e.message.contains("truncated"), "{e}");
    assert_eq!(e.offset, Some(payload.len()));
}

#[test]
fn columnar_records_take_h_and_t_and_need_a_field() {
    let tables = decode(&map(vec![
        ("m", "cpu".into()),
        ("h", "server-1".into()),
        ("t", 1_700_000_000i64.into()),
        (
            "columns",
            map(vec![("v", Value::Array(vec![1i64.into(), 2i64.into()]))]),
        ),
    ]))
    .unwrap();
    assert_eq!(
        strings(column(&tables[0], "host")),
        vec![Some("server-1".into()); 2]
    );
    assert_eq!(times(&tables[0]), vec![1_700_000_000_000_000_000; 2]);

    let both_times = map(vec![
        ("m", "cpu".into()),
        ("t", 1i64.into()),
        (
            "columns",
            map(vec![
                ("time", Value::Array(vec![1i64.into()])),
                ("v", Value::Array(vec![1i64.into()])),
            ]),
        ),
    ]);
    assert!(error(both_times)
        .message
        .contains("both 't' and a 'time' column"));

    for columns in [
        map(vec![("host", Value::Array(vec!["a".into()]))]),
        map(vec![
            ("host", Value::Array(vec!["a".into()])),
            ("v", Value::Array(vec![Value::Nil])),
        ]),
        map(vec![("time", Value::Array(vec![1i64.into()]))]),
    ] {
        let e = error(map(vec![("m", "cpu".into()), ("columns", columns)]));
        assert!(e.message.contains("no field values"), "{e}");
        assert_eq!(e.record, Some(0));
    }
}

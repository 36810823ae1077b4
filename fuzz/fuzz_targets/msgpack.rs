//! Fuzzes the MessagePack decoder with arbitrary request bodies: it must never panic, hang or
//! allocate from a declared length, and whatever it accepts must be well-formed tables (every
//! column as long as the table, `time` never null). The first byte picks whether the tables
//! are new or already have a schema the values must be fitted to (a tag, fields of every
//! type), so the fitting path is fuzzed too.
//!
//! Run from `fuzz/`: `cargo +nightly fuzz run msgpack corpus/msgpack seeds/msgpack`
//! (new inputs go to `corpus/`, which is not committed; `seeds/` is the committed seed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_ingest::msgpack::{decode_msgpack, MsgpackOptions};
use quiver_ingest::schema::{ColumnType, FieldType, NoExistingTables, SchemaLookup};

/// Every table already has these columns.
struct Existing;

impl SchemaLookup for Existing {
    fn existing_columns(&self, _table: &str) -> Vec<(String, ColumnType)> {
        [
            ("host", ColumnType::Tag),
            ("usage", ColumnType::Field(FieldType::Float)),
            ("count", ColumnType::Field(FieldType::Integer)),
            ("big", ColumnType::Field(FieldType::UInteger)),
            ("note", ColumnType::Field(FieldType::String)),
            ("flag", ColumnType::Field(FieldType::Boolean)),
        ]
        .into_iter()
        .map(|(name, column_type)| (name.to_string(), column_type))
        .collect()
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else { return };
    let existing: &dyn SchemaLookup = if selector & 1 == 0 { &NoExistingTables } else { &Existing };
    let options = MsgpackOptions {
        default_time_ns: 1_700_000_000_000_000_000,
    };
    if let Ok(tables) = decode_msgpack(body, &options, existing) {
        for table in tables {
            let time = table.batch.column_by_name("time").expect("every table has time");
            assert_eq!(time.null_count(), 0);
            assert!(!table.name.is_empty());
        }
    }
});

//! Fuzzes the MessagePack decoder with arbitrary request bodies: it must never panic, hang or
//! allocate from a declared length, and whatever it accepts must be well-formed tables (every
//! column as long as the table, `time` never null). The first byte picks whether the tables
//! are new or already have a schema the values must be fitted to (a tag, fields of every
//! type), so the fitting path is fuzzed too. The same body is also decoded as the server
//! streams it, in pieces (their size picked by the selector's other bits): the outcome must be
//! the same tables (as many rows) or the same error.
//!
//! Run from `fuzz/`: `cargo +nightly fuzz run msgpack corpus/msgpack seeds/msgpack`
//! (new inputs go to `corpus/`, which is not committed; `seeds/` is the committed seed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_ingest::msgpack::{decode_msgpack, MsgpackError, MsgpackOptions, MsgpackStream};
use quiver_model::schema::{ColumnType, DecodedTable, FieldType, NoExistingTables, SchemaLookup};

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
    let whole = decode_msgpack(body, &options, existing);
    let piece = 1 + usize::from(selector >> 1);
    let pieces = decode_in_pieces(body, piece, &options, existing);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => {
            let shape = |t: &[DecodedTable]| -> Vec<(String, usize, usize)> {
                t.iter().map(|t| (t.name.clone(), t.batch.num_rows(), t.batch.num_columns())).collect()
            };
            assert_eq!(shape(a), shape(b));
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("whole {:?} but in pieces of {piece} {:?}", whole.as_ref().err(), pieces.as_ref().err()),
    }
    if let Ok(tables) = whole {
        for table in tables {
            let time = table.batch.column_by_name("time").expect("every table has time");
            assert_eq!(time.null_count(), 0);
            assert!(!table.name.is_empty());
        }
    }
});

/// `body` fed to a [`MsgpackStream`] `piece` bytes at a time, decoded as the server does
/// (once the bytes kept have doubled since a record was cut off).
fn decode_in_pieces(
    body: &[u8],
    piece: usize,
    options: &MsgpackOptions,
    existing: &dyn SchemaLookup,
) -> Result<Vec<DecodedTable>, MsgpackError> {
    let mut stream = MsgpackStream::new(options);
    let mut pending = Vec::new();
    let mut decode_at = 0;
    for chunk in body.chunks(piece) {
        pending.extend_from_slice(chunk);
        if pending.len() >= decode_at {
            let used = stream.decode(&pending, false)?;
            pending.drain(..used);
            decode_at = 2 * pending.len();
        }
    }
    stream.decode(&pending, true)?;
    stream.finish(existing)
}

//! Fuzzes the MessagePack decoder with arbitrary request bodies: it must never panic, hang or
//! allocate from a declared length, and whatever it accepts must be well-formed tables (every
//! column as long as the table, `time` never null).
//!
//! Run from `fuzz/`: `cargo +nightly fuzz run msgpack corpus/msgpack seeds/msgpack`
//! (new inputs go to `corpus/`, which is not committed; `seeds/` is the committed seed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_ingest::msgpack::{decode_msgpack, MsgpackOptions};
use quiver_ingest::schema::NoExistingTables;

fuzz_target!(|body: &[u8]| {
    let options = MsgpackOptions {
        default_time_ns: 1_700_000_000_000_000_000,
    };
    if let Ok(tables) = decode_msgpack(body, &options, &NoExistingTables) {
        for table in tables {
            let time = table.batch.column_by_name("time").expect("every table has time");
            assert_eq!(time.null_count(), 0);
            assert!(!table.name.is_empty());
        }
    }
});

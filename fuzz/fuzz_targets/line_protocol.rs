//! Fuzzes the line-protocol decoder with arbitrary request bodies: it must never panic, and
//! every accepted line must be exactly one row.
//!
//! Run from `fuzz/`: `cargo +nightly fuzz run line_protocol corpus/line_protocol seeds/line_protocol`
//! (new inputs go to `corpus/`, which is not committed; `seeds/` is the committed seed corpus).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions, Precision};
use quiver_model::schema::NoExistingTables;

fuzz_target!(|body: &[u8]| {
    let options = DecodeOptions {
        precision: Precision::Auto,
        default_time_ns: 1_700_000_000_000_000_000,
        max_reported_errors: 100,
    };
    let decoded = decode_line_protocol(body, &options, &NoExistingTables);
    let rows: usize = decoded.tables.iter().map(|t| t.batch.num_rows()).sum();
    assert_eq!(rows, decoded.accepted_lines);
    assert!(decoded.errors.len() <= decoded.error_count);
});

//! Fuzzes the Arrow IPC stream decoder (`POST /api/v3/write_arrow` bodies) with arbitrary
//! bytes: it must never panic, hang or allocate from a size the stream declares, and whatever
//! it accepts must be well-formed tables in the data model (`time` present and never null).
//!
//! Run from `fuzz/`: `cargo +nightly fuzz run arrow_ipc corpus/arrow_ipc seeds/arrow_ipc`
//! (new inputs go to `corpus/`, which is not committed; `seeds/` is the committed seed corpus).
#![no_main]

use arrow::buffer::Buffer;
use libfuzzer_sys::fuzz_target;
use quiver_ingest::arrow_ipc::decode_ipc_stream;

/// What a 64 MiB request may decompress to, as the server allows.
const MAX_UNCOMPRESSED: usize = 64 << 20;

fuzz_target!(|body: &[u8]| {
    if let Ok(tables) = decode_ipc_stream("t", Buffer::from(body.to_vec()), MAX_UNCOMPRESSED) {
        for table in tables {
            let time = table.batch.column_by_name("time").expect("every table has time");
            assert_eq!(time.null_count(), 0);
            assert!(table.batch.num_rows() > 0);
        }
    }
});

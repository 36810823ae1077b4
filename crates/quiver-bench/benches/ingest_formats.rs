//! Decoder throughput per write format on identical rows (Telegraf / TSBS `cpu`: 10 tags,
//! 10 float fields, 5,000 rows, 1,000 hosts), one core, each producing the data-model Arrow
//! batch the write path stores:
//!
//! - `decode/line_protocol`: `decode_line_protocol`;
//! - `decode/msgpack_columnar` and `decode/msgpack_row`: `decode_msgpack` (Arc's formats);
//! - `decode/arrow_ipc`: `decode_ipc_stream` (checking the framing, reading the IPC stream
//!   zero-copy, checking and widening to the data model).
//!
//! Run: `cargo bench -p quiver-bench --bench ingest_formats`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiver_bench::formats::{decode_rows, encode, metrics_batch, WriteFormat};

const ROWS: usize = 5_000;
const HOSTS: usize = 1_000;

fn bench(c: &mut Criterion) {
    let batch = metrics_batch(HOSTS, ROWS, 1_700_000_000_000_000_000, 42);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(ROWS as u64));
    for format in [
        WriteFormat::Lp,
        WriteFormat::Msgpack,
        WriteFormat::MsgpackRow,
        WriteFormat::Arrow,
    ] {
        let body = bytes::Bytes::from(encode(&batch, format, HOSTS, 42));
        eprintln!(
            "{format}: {} bytes ({:.1} bytes/row)",
            body.len(),
            body.len() as f64 / ROWS as f64
        );
        let name = match format {
            WriteFormat::Lp => "line_protocol",
            WriteFormat::Msgpack => "msgpack_columnar",
            WriteFormat::MsgpackRow => "msgpack_row",
            WriteFormat::Arrow => "arrow_ipc",
        };
        group.bench_function(name, |b| b.iter(|| black_box(decode_rows(&body, format))));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

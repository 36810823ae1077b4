//! Line-protocol throughput on a realistic metrics payload (Telegraf / TSBS `cpu`: 10 tags,
//! 10 float fields, 5,000 lines, 1,000 hosts), one core:
//!
//! - `parse/quiver`: Quiver's tokenizer alone (`LineParser`), every line fully parsed;
//! - `parse/influxdb-line-protocol`: the IOx / InfluxDB 3 parser on the same bytes (baseline);
//! - `decode_to_arrow/quiver`: tokenize, validate and append into Arrow builders, producing the
//!   record batch the write buffer stores.
//!
//! Run: `cargo bench -p quiver-bench --bench line_protocol`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quiver_bench::metrics_payload;
use quiver_ingest::line_protocol::{
    decode_line_protocol, DecodeOptions, LineParser, ParsedLine, Precision,
};
use quiver_model::schema::NoExistingTables;

const LINES: usize = 5_000;
const HOSTS: usize = 1_000;

fn payload() -> String {
    let payload = metrics_payload(HOSTS, LINES, 1_700_000_000_000_000_000, 42);
    eprintln!(
        "payload: {LINES} lines, {} bytes ({:.1} bytes/line)",
        payload.len(),
        payload.len() as f64 / LINES as f64
    );
    payload
}

fn quiver_parse(input: &[u8]) -> usize {
    let mut parser = LineParser::new(input);
    let mut line = ParsedLine::default();
    let mut fields = 0;
    while let Some(result) = parser.next_line(&mut line) {
        result.expect("valid payload");
        fields += line.fields.len();
    }
    fields
}

fn iox_parse(input: &str) -> usize {
    influxdb_line_protocol::parse_lines(input)
        .map(|line| line.expect("valid payload").field_set.len())
        .sum()
}

fn bench(c: &mut Criterion) {
    let payload = payload();
    assert_eq!(quiver_parse(payload.as_bytes()), iox_parse(&payload));

    let mut parse = c.benchmark_group("parse");
    parse.throughput(Throughput::Elements(LINES as u64));
    parse.bench_function("quiver", |b| {
        b.iter(|| quiver_parse(black_box(payload.as_bytes())))
    });
    parse.bench_function("influxdb-line-protocol", |b| {
        b.iter(|| iox_parse(black_box(&payload)))
    });
    parse.finish();

    let options = DecodeOptions {
        precision: Precision::Nanosecond,
        default_time_ns: 0,
        max_reported_errors: 100,
    };
    let mut decode = c.benchmark_group("decode_to_arrow");
    decode.throughput(Throughput::Elements(LINES as u64));
    decode.bench_function("quiver", |b| {
        b.iter(|| {
            let decoded =
                decode_line_protocol(black_box(payload.as_bytes()), &options, &NoExistingTables);
            assert_eq!(decoded.accepted_lines, LINES);
            decoded
        })
    });
    decode.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Deterministic benchmark data shared by the criterion benches and the load generator.
//!
//! The payload mimics what Telegraf's `cpu` input or TSBS's `cpu-only` use case sends: one
//! measurement, ten tags describing the host, ten float fields, nanosecond timestamps, hosts
//! reporting in rounds every ten seconds.

pub mod http;

use std::fmt::Write;

pub mod formats;

/// Tags per line in [`metrics_payload`].
pub const TAGS_PER_LINE: usize = 10;
/// Fields per line in [`metrics_payload`].
pub const FIELDS_PER_LINE: usize = 10;

/// The fields of every line, TSBS's `cpu` fields.
pub const FIELD_NAMES: [&str; FIELDS_PER_LINE] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];
const REGIONS: [&str; 4] = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-2"];
const OSES: [&str; 3] = ["Ubuntu16.10", "Ubuntu18.04LTS", "Debian12"];
const ENVIRONMENTS: [&str; 3] = ["production", "staging", "test"];

/// A small deterministic random generator (xorshift64*), so payloads are identical across runs.
#[derive(Debug, Clone)]
pub struct Xorshift(u64);

impl Xorshift {
    /// A generator from a non-zero seed (0 is replaced).
    pub fn new(seed: u64) -> Self {
        Xorshift(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A float in `[0, 100)` with two decimals, like a CPU percentage.
    pub fn percentage(&mut self) -> f64 {
        (self.next_u64() % 10_000) as f64 / 100.0
    }
}

/// `lines` lines of line protocol for `hosts` hosts, starting at `start_ns` and advancing ten
/// seconds per round of hosts. Every line is a distinct (series, time) point.
pub fn metrics_payload(hosts: usize, lines: usize, start_ns: i64, seed: u64) -> String {
    let mut rng = Xorshift::new(seed);
    let mut out = String::with_capacity(lines * 320);
    let hosts = hosts.max(1);
    for i in 0..lines {
        let host = i % hosts;
        let time = start_ns + (i / hosts) as i64 * 10_000_000_000;
        write_host_tags(&mut out, host);
        for (f, name) in FIELD_NAMES.iter().enumerate() {
            let sep = if f == 0 { ' ' } else { ',' };
            write!(out, "{sep}{name}={}", rng.percentage()).unwrap();
        }
        writeln!(out, " {time}").unwrap();
    }
    out
}

fn write_host_tags(out: &mut String, host: usize) {
    write!(
        out,
        "cpu,hostname=host_{host},region={},datacenter={}{},rack={},os={},arch={},team={},service={},service_version={},service_environment={}",
        REGIONS[host % REGIONS.len()],
        REGIONS[host % REGIONS.len()],
        ["a", "b", "c"][host % 3],
        host % 100,
        OSES[host % OSES.len()],
        ["x64", "x86"][host % 2],
        ["SF", "NYC", "LON", "CHI"][host % 4],
        host % 20,
        host % 2,
        ENVIRONMENTS[host % ENVIRONMENTS.len()],
    )
    .unwrap();
}

/// The `q` quantile (0–1) of `sorted` (ascending): the nearest sample; NaN if there is none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_decodes_into_distinct_points() {
        let payload = metrics_payload(7, 100, 1_700_000_000_000_000_000, 1);
        assert_eq!(payload.lines().count(), 100);
        let options = quiver_ingest::line_protocol::DecodeOptions {
            precision: quiver_ingest::line_protocol::Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        let decoded = quiver_ingest::line_protocol::decode_line_protocol(
            payload.as_bytes(),
            &options,
            &quiver_model::schema::NoExistingTables,
        );
        assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
        assert_eq!(decoded.tables.len(), 1);
        let batch = &decoded.tables[0].batch;
        assert_eq!(batch.num_rows(), 100);
        assert_eq!(batch.num_columns(), 1 + TAGS_PER_LINE + FIELDS_PER_LINE);
    }
}

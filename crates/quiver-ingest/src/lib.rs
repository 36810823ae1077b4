//! `quiver-ingest` turns the bytes clients send into Arrow record batches.
//!
//! It owns the write formats (InfluxDB line protocol, Arc-compatible MessagePack, Arrow batches
//! from clients) and Quiver's data model
//! ([`schema`]): every table has a `time` column (`Timestamp(Nanosecond, "UTC")`), tag columns
//! (`Dictionary(Int32, Utf8)`) and typed field columns. Everything here is a pure function of
//! its input (no I/O, no servers), so decoders can be property-tested and fuzzed in isolation.

pub mod arrow_ingest;
pub mod arrow_ipc;
pub mod line_protocol;
pub mod msgpack;
pub mod schema;

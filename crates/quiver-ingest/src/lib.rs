//! `quiver-ingest` turns the bytes clients send into Arrow record batches.
//!
//! It owns the write formats (InfluxDB line protocol, Arc-compatible MessagePack, Arrow batches
//! from clients) and decodes them into tables of Quiver's data model
//! ([`quiver_model::schema`]). Everything here is a pure function of its input (no I/O, no
//! servers), so decoders can be property-tested and fuzzed in isolation.

pub mod arrow_ingest;
pub mod arrow_ipc;
pub mod line_protocol;
pub mod msgpack;

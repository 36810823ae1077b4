//! `quiver-service` is the query front door every protocol calls ([`QueryService`]): it
//! takes a SQL or InfluxQL statement with its caller and settings, answers `SHOW DATABASES`
//! per caller, and runs the rest through the engine behind a result cache that answers
//! repeated queries from memory and is never stale.
//!
//! A cached answer is keyed by everything that determines it: the canonical query text (see
//! [`quiver_query::canonical_sql`]), the bound parameters, the database, the session's
//! semantic settings, the caller's access scope and the *version of every table the query
//! scans*. Storage bumps a table's version before it acknowledges a write, so a query that
//! arrives after the acknowledgement builds a key no earlier answer was stored under; the
//! entries of old versions are then removed eagerly (the store tells the cache about every
//! write). An answer is stored only if no table it read changed while it was computed.
//!
//! Entries hold the result as Arrow batches shared by reference and, once produced, the
//! encoded bytes of each output format, so a repeat in the same format costs a copy of ready
//! bytes. Capacity is counted in bytes; admission is TinyLFU (moka); entries expire after a
//! TTL and an idle time; results larger than the entry limit stream through uncached; N
//! concurrent identical misses run the query once (single-flight).
//!
//! The crate knows nothing of protocols: each names its output formats with a type of its own
//! ([`EncodingKey`]) and its callers with the shared [`quiver_model::AccessScope`].

mod cache;
mod config;
mod entry;
mod key;
mod parts;
mod service;
mod stats;

pub use config::CacheConfig;
pub use entry::{CachedResult, EncodingKey, MAX_ENCODINGS_PER_ENTRY};
pub use service::{
    Answer, AnswerBody, CachedAnswer, QueryInvocation, QueryRequest, QueryService, Verdict,
};
pub use stats::CacheStats;

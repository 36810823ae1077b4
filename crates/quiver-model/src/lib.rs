//! `quiver-model` holds what every layer of Quiver shares and no layer owns: the data model
//! ([`schema`]: every table has a `time` column (`Timestamp(Nanosecond, "UTC")`), tag columns
//! (`Dictionary(Int32, Utf8)`) and typed field columns; a decoded write is a [`DecodedTable`]
//! per table) and the kinds of failure ([`ErrorKind`]) that each layer's errors are sorted
//! into, so that each protocol maps a kind to its own status once (HTTP status, gRPC code,
//! SQLSTATE class) instead of matching every layer's error types. It also holds who a request
//! acts for ([`AccessScope`], one shape for every protocol) and what the layers' settings share
//! ([`settings`]: duration spellings and the per-request limits).
//!
//! [`DecodedTable`]: schema::DecodedTable

pub mod durable_fs;
mod error;
pub mod machine;
pub mod schema;
mod scope;
pub mod settings;
mod time_bucket;

pub use error::{Classify, ErrorKind};
pub use scope::{AccessScope, Denied, ReadGrants, VisibleDatabases};
pub use settings::RequestLimits;
pub use time_bucket::{TimeBucket, MAX_QUERY_BUCKETS};

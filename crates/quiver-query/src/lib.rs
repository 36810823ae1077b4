//! `quiver-query` answers SQL: a DataFusion session whose catalog is the store (a database is
//! a SQL schema, a line-protocol measurement a table) and whose tables read the write buffer and
//! the Parquet files it was persisted to, deduplicated across both.
//!
//! It knows nothing of HTTP, gRPC or the Postgres wire protocol: callers hand it a database
//! name and a statement and get back an Arrow schema and a stream of record batches.

mod analyze;
mod catalog;
mod chunk_reader;
mod column_compare;
mod dedup_exec;
mod dictionary_group;
mod engine;
mod filter_order;
mod first_rows;
mod float_compare;
pub mod governance;
mod latest;
mod panic_guard;
mod params;
mod plan_cache;
mod plan_nodes;
mod provider;
mod run_states;
mod series_filter;
pub mod statement_limits;
mod tag_filter;
mod time_bin;
mod time_order_limit;

pub use analyze::{canonical_sql, Cacheability, QueryAnalysis, ScannedTable};
pub use catalog::{is_system_schema, QuiverCatalog, CATALOG_NAME};
pub use dedup_exec::DeduplicateExec;
pub use engine::{
    ExecuteOptions, QueryEngine, QueryError, QueryOptions, QueryOutput, SessionSetup,
    StatementDescription,
};
pub use params::QueryParams;
pub use plan_cache::PlanCacheStats;
pub use provider::QuiverTable;

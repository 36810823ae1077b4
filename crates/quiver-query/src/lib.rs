//! `quiver-query` answers SQL: a DataFusion session whose catalog is the store (a database is
//! a SQL schema, a line-protocol measurement a table) and whose tables read the write buffer and
//! the Parquet files it was persisted to, deduplicated across both.
//!
//! It knows nothing of HTTP, gRPC or the Postgres wire protocol: callers hand it a database
//! name and a statement and get back an Arrow schema and a stream of record batches.

mod analyze;
mod chunk_reader;
mod column_compare;
mod dedup_exec;
mod dictionary_group;
pub mod distributed;
mod engine;
mod error;
mod filter_order;
mod first_rows;
mod float_compare;
mod gap_fill;
pub mod governance;
mod influxql;
mod latest;
mod options;
mod panic_guard;
mod params;
mod plan_cache;
mod plan_nodes;
mod provider;
pub mod reuse;
mod rollup;
mod run_states;
mod series_filter;
mod sql_catalog;
pub mod statement_limits;
mod tag_filter;
mod time_bin;
mod time_filter;
mod time_order_limit;
mod value_cache_functions;

pub use analyze::{canonical_sql, Cacheability, QueryAnalysis, ScannedTable};
pub use dedup_exec::DeduplicateExec;
pub use engine::{ExecuteOptions, QueryEngine, QueryOutput, StatementDescription};
pub use error::QueryError;
pub use options::{QueryOptions, SessionSetup};
pub use params::QueryParams;
pub use plan_cache::PlanCacheStats;
pub use provider::QuiverTable;
pub use rollup::{RollupError, RollupInfo, Rollups};
pub use sql_catalog::{is_system_schema, QuiverCatalog, CATALOG_NAME};

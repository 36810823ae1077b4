//! `quiver-query` answers SQL: a DataFusion session whose catalog is the store (a database is
//! a SQL schema, a line-protocol measurement a table) and whose tables read the write buffer and
//! the Parquet files it was persisted to, deduplicated across both.
//!
//! It knows nothing of HTTP, gRPC or the Postgres wire protocol: callers hand it a database
//! name and a statement and get back an Arrow schema and a stream of record batches.

mod analyze;
mod catalog_names;
mod engine;
mod error;
mod filter_order;
mod grants;
mod influxql;
mod latest;
mod options;
mod params;
mod partials;
mod plan_cache;
mod provider;
pub mod reuse;
mod rollup;
mod sql_catalog;
mod time_order_limit;
mod value_cache_functions;

pub use analyze::{canonical_sql, Cacheability, QueryAnalysis, ScannedTable};
pub use catalog_names::{is_system_schema, CATALOG_NAME};
pub use engine::{ExecuteOptions, QueryEngine, StatementDescription};
pub use error::QueryError;
pub use grants::GrantChecks;
pub use options::{QueryOptions, SessionSetup};
pub use params::QueryParams;
pub use plan_cache::PlanCacheStats;
pub use provider::QuiverTable;
pub use quiver_distributed::Distributed;
pub use quiver_exec::dedup_exec::DeduplicateExec;
pub use quiver_governance::context::{QueryControl, QueryOutput, QueryProtocol};
pub use quiver_governance::{self as governance, statement_limits};
pub use rollup::{RollupError, RollupInfo, RollupRouter};
pub use sql_catalog::QuiverCatalog;

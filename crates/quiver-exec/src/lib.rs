//! `quiver-exec` holds Quiver's own DataFusion operators and kernels, the pieces its query
//! engine puts into DataFusion's plans: deduplication of a table's overlapping rows
//! ([`dedup_exec`]), grouping by dictionary keys and time bins without hashing
//! ([`dictionary_group`], [`time_bin`], [`run_states`]), gap filling ([`gap_fill`]), the first
//! rows of each group ([`first_rows`]), float comparison as SQL orders floats
//! ([`float_compare`]), capped functions ([`value_limits`]), tag comparisons decided on
//! dictionary codes and scans narrowed series by series before DataFusion reads them
//! ([`tag_filter`], [`series_filter`]), and what they share ([`plan_nodes`], [`time_filter`],
//! [`bucket_expr`], [`column_compare`]); reading Parquet column chunks through
//! storage's chunk cache ([`chunk_reader`]); guarding a plan's futures and streams against
//! panics ([`panic_guard`]).
//!
//! It knows no engine, session, catalog or protocol: each operator and rule works on any
//! DataFusion session that registers it (the engine in `quiver-query`, an executor of a
//! distributed plan in `quiver-distributed`).

pub mod bucket_expr;
pub mod chunk_reader;
pub mod column_compare;
pub mod dedup_exec;
pub mod dictionary_group;
pub mod first_rows;
pub mod float_compare;
pub mod gap_fill;
pub mod panic_guard;
pub mod plan_nodes;
pub mod plan_settings;
pub mod run_states;
pub mod series_filter;
pub mod session;
pub mod table_files;
pub mod tag_filter;
pub mod time_bin;
pub mod time_filter;
pub mod value_limits;

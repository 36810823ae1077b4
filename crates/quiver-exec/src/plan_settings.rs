//! The per-query settings that change how Quiver plans a query (never its answer), carried in
//! the session's configuration as a DataFusion extension under the `quiver.` prefix, so that
//! every rule and table provider of one query reads the same ones.

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;

extensions_options! {
    /// Quiver's per-query settings that change how a query is planned (never its answer).
    pub struct PlanSettings {
        /// Answer aggregates from rollups where that is exact (`quiver.use_rollups`).
        pub use_rollups: bool, default = true
        /// Answer aggregates over time ranges from reused time parts where that is exact
        /// (set by the engine for queries the result cache lets reuse parts).
        pub reuse_parts: bool, default = false
        /// Plan scans for executors elsewhere (set by the engine for plans shipped to
        /// Ballista): every file is read from Parquet, none from this server's decoded
        /// columns.
        pub ship_scans: bool, default = false
    }
}

impl ConfigExtension for PlanSettings {
    const PREFIX: &'static str = "quiver";
}

//! What a request brings to the engine and takes back, below everything that acts on it: the
//! protocol it came by and what that protocol asks of the query ([`QueryControl`]: time limit,
//! grants, rollups, where it runs), and the answer ([`QueryOutput`]). Admission is this
//! crate's root; the engine checks grants on it.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use quiver_model::{ReadGrants, VisibleDatabases};
use serde::Serialize;

/// The result of a query: its schema (known before the first row) and its rows, streamed.
pub struct QueryOutput {
    /// Schema of the result.
    pub schema: SchemaRef,
    /// The rows.
    pub stream: SendableRecordBatchStream,
}

/// The protocol a query arrived by, as the list of running queries shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryProtocol {
    /// The HTTP API.
    Http,
    /// Arrow Flight SQL.
    Flight,
    /// The PostgreSQL wire protocol.
    Postgres,
    /// A caller inside the process (tests, tools).
    #[default]
    Embedded,
}

/// What a protocol tells the governor about one query.
#[derive(Debug, Clone, Default)]
pub struct QueryControl {
    /// Where the query came from.
    pub protocol: QueryProtocol,
    /// A time limit the caller asked for; the query gets the shorter of it and the server's.
    pub timeout: Option<Duration>,
    /// The name of the setting that set [`QueryControl::timeout`] (`statement_timeout`, ...),
    /// for the error message.
    pub timeout_setting: &'static str,
    /// What the caller may read (`None`: everything): checked before the query is answered,
    /// from the cache or not; it also decides which databases the catalog shows
    /// (`information_schema`, `SHOW TABLES`, `pg_catalog`) and names the caller in the list
    /// of running queries.
    pub grants: Option<Arc<dyn ReadGrants>>,
    /// Answer from raw rows only, never from a rollup (HTTP `use_rollups=false`, the
    /// session setting `quiver.use_rollups`): for comparing, never answered from the result
    /// cache either.
    pub skip_rollups: bool,
    /// Where this query runs (HTTP `distributed=`, the session setting `quiver.distributed`);
    /// `None`: the server's `distributed` setting.
    pub distributed: Option<quiver_model::settings::Distributed>,
}

impl QueryControl {
    /// The databases the catalog shows the caller.
    pub fn visible_databases(&self) -> VisibleDatabases {
        self.grants
            .as_ref()
            .map_or(VisibleDatabases::All, |grants| grants.visible_databases())
    }
}

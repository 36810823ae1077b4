//! Flight SQL's metadata answers: `GetSqlInfo` (what the server supports), `GetCatalogs`
//! (`quiver`), `GetDbSchemas` (the databases the caller may read), `GetTables` (their tables,
//! with Arrow schemas) and `GetTableTypes` (`TABLE`).

use std::sync::LazyLock;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, SqlInfo,
};
use quiver_model::VisibleDatabases;
use quiver_query::CATALOG_NAME;
use quiver_storage::Store;
use tonic::Status;

use crate::result_types::ResultTypes;

/// What `GetSqlInfo` answers.
pub(crate) static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
    let mut builder = SqlInfoDataBuilder::new();
    builder.append(SqlInfo::FlightSqlServerName, "Quiver");
    builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    builder.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
    // Queries are read-only, but bulk ingest writes.
    builder.append(SqlInfo::FlightSqlServerReadOnly, false);
    builder.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    builder.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    builder.append(SqlInfo::FlightSqlServerSql, true);
    builder.append(SqlInfo::FlightSqlServerSubstrait, false);
    builder.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    builder.append(SqlInfo::FlightSqlServerCancel, false);
    builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    builder.build().expect("static SQL info is valid")
});

/// A metadata answer: its schema and its one batch.
pub(crate) type Answer = (SchemaRef, Result<RecordBatch, Status>);

/// A built batch, or the server's failure to build it.
fn built<E: std::fmt::Display>(batch: Result<RecordBatch, E>) -> Result<RecordBatch, Status> {
    batch.map_err(|e| Status::internal(format!("cannot build metadata: {e}")))
}

/// The answer to `GetSqlInfo`.
pub(crate) fn sql_info(query: CommandGetSqlInfo) -> Answer {
    let builder = query.into_builder(&SQL_INFO);
    (builder.schema(), built(builder.build()))
}

/// The answer to `GetCatalogs`: Quiver's one catalog.
pub(crate) fn catalogs(query: CommandGetCatalogs) -> Answer {
    let mut builder = query.into_builder();
    builder.append(CATALOG_NAME);
    (builder.schema(), built(builder.build()))
}

/// The answer to `GetDbSchemas`: the databases the caller sees.
pub(crate) fn schemas(
    query: CommandGetDbSchemas,
    store: &Store,
    visible: &VisibleDatabases,
) -> Answer {
    let mut builder = query.into_builder();
    for database in store.database_names() {
        if visible.shows(&database) {
            builder.append(CATALOG_NAME, database);
        }
    }
    (builder.schema(), built(builder.build()))
}

/// The answer to `GetTables`: the tables of the databases the caller sees, with their schemas
/// in the types the caller receives.
pub(crate) fn tables(
    query: CommandGetTables,
    store: &Store,
    visible: &VisibleDatabases,
    types: ResultTypes,
) -> Answer {
    let mut builder = query.into_builder();
    let schema = builder.schema();
    for database in store.database_names() {
        let Some(db) = store
            .database(&database)
            .filter(|_| visible.shows(&database))
        else {
            continue;
        };
        for name in db.table_names() {
            let Some(table) = db.table(&name) else {
                continue;
            };
            let table_schema = types.schema(&table.schema());
            if let Err(e) = builder.append(CATALOG_NAME, &database, &name, "TABLE", &table_schema) {
                return (schema, Err(Status::from(e)));
            }
        }
    }
    (schema, built(builder.build()))
}

/// The answer to `GetTableTypes`: `TABLE`.
pub(crate) fn table_types(query: CommandGetTableTypes) -> Answer {
    let mut builder = query.into_builder();
    builder.append("TABLE");
    (builder.schema(), built(builder.build()))
}

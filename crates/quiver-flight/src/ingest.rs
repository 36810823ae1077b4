//! Flight SQL bulk ingest (`CommandStatementIngest`, what ADBC's `adbc_ingest` sends): every
//! message is checked before Arrow's decoder sees it, then each batch is converted to the data
//! model and written through the same WAL path as line protocol.

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{CommandStatementIngest, TableExistsOption, TableNotExistOption};
use arrow_flight::FlightData;
use futures::{StreamExt, TryStreamExt};
use quiver_auth::Caller;
use quiver_ingest::arrow_ingest::table_from_arrow;
use quiver_ingest::arrow_ipc::MessageChecker;
use quiver_query::CATALOG_NAME;
use quiver_storage::{Durability, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Status};

use crate::{classified_status, database_of, QuiverFlightSql};

impl QuiverFlightSql {
    /// Writes the batches of `request` into `command.table`, one by one (after an error the
    /// earlier batches stay written, and the error says how many rows were); the rows written.
    pub(crate) async fn ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = self.caller(&request)?;
        let database = match &command.schema {
            Some(schema) if !schema.is_empty() => schema.clone(),
            _ => database_of(request.metadata())?,
        };
        caller
            .require(quiver_auth::Action::Write, &database)
            .map_err(|e| classified_status(&e))?;
        // Every message is checked before Arrow's decoder sees it (it trusts the sizes a
        // message declares); a compressed message may claim what an HTTP request body may.
        // Once the upload is refused, the rest is read and discarded unchecked.
        let draining = Arc::new(AtomicBool::new(false));
        let mut drained: usize = 0;
        let mut checker = MessageChecker::new();
        let max_uncompressed = self.max_message_bytes;
        let skip_rest = Arc::clone(&draining);
        let data = request
            .into_inner()
            .into_peekable()
            .map_err(FlightError::from)
            .enumerate()
            .filter_map(move |(index, data)| {
                let checked = match data {
                    Ok(data) if skip_rest.load(Ordering::Relaxed) => {
                        drained += data.data_header.len() + data.data_body.len();
                        (drained > max_uncompressed).then(|| {
                            Err(FlightError::DecodeError("refused upload too long".into()))
                        })
                    }
                    data => Some(data.and_then(|data| {
                        check_message(&mut checker, index, data, max_uncompressed)
                    })),
                };
                std::future::ready(checked)
            });
        let mut batches = FlightRecordBatchStream::new_from_flight_data(data);
        let written = match check_ingest_target(&self.store, &database, &command) {
            Ok(()) => {
                self.write_batches(&caller, &database, &command.table, &mut batches)
                    .await
            }
            Err(refused) => Err(refused),
        };
        if written.is_err() {
            // A client still sending when the stream ends sees only "EOF" (ADBC's Go driver
            // reports that instead of the status): read what it sends, bounded, first.
            draining.store(true, Ordering::Relaxed);
            let _ = tokio::time::timeout(DRAIN_TIME_LIMIT, batches.next()).await;
        }
        let rows = written?;
        tracing::debug!(
            database,
            table = command.table,
            rows,
            "Flight SQL bulk ingest"
        );
        Ok(rows)
    }

    /// Writes each decoded batch of `batches` into `table`.
    async fn write_batches(
        &self,
        caller: &Caller,
        database: &str,
        table: &str,
        batches: &mut FlightRecordBatchStream,
    ) -> Result<i64, Status> {
        let mut rows: i64 = 0;
        while let Some(batch) = batches.next().await {
            let batch = batch.map_err(|e| {
                Status::invalid_argument(format!(
                    "cannot decode the Arrow data after {rows} rows were written: {e}"
                ))
            })?;
            if batch.num_rows() == 0 {
                continue;
            }
            caller
                .require_active()
                .and_then(|()| {
                    self.auth
                        .admit_write(caller, batch.get_array_memory_size() as u64)
                })
                .map_err(|e| classified_status(&e))?;
            let converted = table_from_arrow(table, &batch).map_err(|e| {
                Status::invalid_argument(format!(
                    "{e} ({rows} rows of earlier batches were written)"
                ))
            })?;
            self.store
                .write(database, vec![converted], Durability::Sync)
                .await
                .map_err(|e| classified_status(&e))?;
            rows += batch.num_rows() as i64;
        }
        Ok(rows)
    }
}

/// How long a refused upload is read on before the error is sent regardless.
const DRAIN_TIME_LIMIT: Duration = Duration::from_secs(5);

/// Checks message `index` of an upload before Arrow's decoder sees it.
fn check_message(
    checker: &mut MessageChecker,
    index: usize,
    data: FlightData,
    max_uncompressed: usize,
) -> Result<FlightData, FlightError> {
    let refused =
        |what: String| FlightError::DecodeError(format!("Arrow IPC message {index}: {what}"));
    let claimed = checker
        .check(&data.data_header, &data.data_body)
        .map_err(|e| refused(e.message))?;
    if claimed > max_uncompressed {
        return Err(refused(format!(
            "its compressed buffers claim {claimed} bytes uncompressed; at most \
             {max_uncompressed} are accepted"
        )));
    }
    Ok(data)
}

/// Refuses ingest options Quiver cannot honour, before any data is read.
fn check_ingest_target(
    store: &Store,
    database: &str,
    command: &CommandStatementIngest,
) -> Result<(), Status> {
    if command.temporary {
        return Err(Status::unimplemented("temporary tables are not supported"));
    }
    if command.transaction_id.is_some() {
        return Err(Status::unimplemented("transactions are not supported"));
    }
    if command
        .catalog
        .as_deref()
        .is_some_and(|c| !c.is_empty() && c != CATALOG_NAME)
    {
        return Err(Status::not_found(format!(
            "catalog {:?} does not exist (the only catalog is {CATALOG_NAME:?})",
            command.catalog.as_deref().unwrap_or_default()
        )));
    }
    let options = command.table_definition_options.unwrap_or_default();
    let exists = store
        .database(database)
        .is_some_and(|db| db.table(&command.table).is_some());
    match (exists, options.if_exists(), options.if_not_exist()) {
        (true, TableExistsOption::Fail, _) => Err(Status::already_exists(format!(
            "table {database}.{} exists (ingest with mode append to add rows)",
            command.table
        ))),
        (true, TableExistsOption::Replace, _) => Err(Status::unimplemented(
            "replacing a table is not supported; ingest with mode append",
        )),
        (false, _, TableNotExistOption::Fail) => Err(Status::not_found(format!(
            "table {database}.{} does not exist (ingest with mode create to create it)",
            command.table
        ))),
        _ => Ok(()),
    }
}

//! `quiver-flight` is Quiver's Arrow Flight SQL service (gRPC, `flight_addr`, 127.0.0.1:8815 by
//! default): what ADBC's Flight SQL driver, `pyarrow.flight` and the Flight SQL JDBC driver
//! speak. It knows nothing of the other protocols; errors become gRPC codes by their kind
//! (`classified_status`). One file of ~1,000 lines because it is one `FlightSqlService`
//! implementation whose trait methods share its private state.
//!
//! - Authentication (see `quiver_auth`): every call presents `authorization: Bearer <token>`
//!   (a Quiver token, or the session handle a Handshake returned), `Basic` credentials with
//!   the token as password, or nothing where the `auth` mode admits token-less calls (loopback
//!   clients by default). Handshake takes Basic credentials (padded or unpadded base64; the
//!   token is the password), a bearer token or nothing, and returns
//!   `authorization: Bearer <handle>`. Statements check that the caller may read
//!   every table they read (before the cache is consulted, and before a schema is
//!   described); metadata lists only the databases it may read; bulk ingest needs write
//!   permission. A revoked token stops working at once, also through its handles and
//!   prepared statements.
//! - The database comes from the `database` gRPC header (InfluxDB 3's convention) or
//!   `bucket-name`.
//! - Statements: `GetFlightInfo` takes the schema from the cached answer, or else plans the
//!   statement (so the schema is right even for empty results), and returns a ticket that
//!   carries the statement, not its result: nothing is held for tickets that are never
//!   fetched, and `DoGet` answers through the result cache (so the answer reflects every write
//!   acknowledged before the fetch; if the table's columns changed meanwhile so that the
//!   answer no longer has the announced schema, `DoGet` fails with `FAILED_PRECONDITION`).
//!   A cached answer keeps its encoded Flight data: a repeat sends ready bytes.
//! - Prepared statements (what ADBC and JDBC use for parameters): created with their dataset
//!   and parameter schemas, parameters bound by `DoPut` (one row), dropped on close or after an
//!   hour unused; a handle works only for the caller that created it.
//! - Bulk ingest (`CommandStatementIngest`, what ADBC's `adbc_ingest` sends): every message is
//!   checked before Arrow's decoder sees it (`quiver_ingest::arrow_ipc::MessageChecker`: the
//!   schema's types, buffer bounds and sizes; LZ4-compressed batches refused, ZSTD ones
//!   bounded; an error names the message, 0 being the schema, and the column), then each Arrow
//!   batch is converted to the data model (see `quiver_ingest::arrow_ingest`) and written through
//!   the same WAL path as line protocol, acknowledged once durable. Batches are applied one by
//!   one: after an error the earlier batches stay written, and the error says how many rows.
//!   Modes create, append and create_append; replace and temporary tables are refused.
//! - Metadata: `GetSqlInfo`, `GetCatalogs` (`quiver`), `GetDbSchemas` (databases), `GetTables`
//!   (with Arrow schemas), `GetTableTypes` (`TABLE`).
//! - Result types: the data model's own (tags dictionary-encoded, unsigned integers), or for
//!   Arrow Java's client and the Flight SQL JDBC driver on it, which misread those, portable
//!   ones (see [`ResultTypes`]); the `quiver-result-types` header chooses explicitly.

mod observe;

pub use observe::GrpcMetricsLayer;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementIngest, CommandStatementQuery, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TableExistsOption, TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest,
    HandshakeResponse, IpcMessage, SchemaAsIpc, Ticket,
};
use datafusion::common::ScalarValue;
use futures::{Stream, StreamExt, TryStreamExt};
use moka::policy::EvictionPolicy;
use prost::Message;
use quiver_auth::{Authenticator, Caller, Presented};
use quiver_cache::{AnswerBody, EncodingKey, QueryRequest, QueryService};
use quiver_ingest::arrow_ingest::table_from_arrow;
use quiver_ingest::arrow_ipc::MessageChecker;
use quiver_model::{Classify, ErrorKind};
use quiver_query::governance::{Protocol, QueryControl};
use quiver_query::{QueryError, QueryParams, CATALOG_NAME};
use quiver_storage::{Durability, Store};
use serde::{Deserialize, Serialize};

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};

/// Prepared statements unused this long are dropped.
const PREPARED_IDLE: Duration = Duration::from_secs(3600);

static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
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

/// A statement carried by a ticket: enough to run it again at fetch time, and the schema
/// its `FlightInfo` announced (a fingerprint), which the fetched answer must still have.
#[derive(Debug, Serialize, Deserialize)]
struct StatementTicket {
    database: String,
    sql: String,
    schema: u64,
}

/// A prepared statement: its text, database, the caller it belongs to and the parameters
/// bound so far.
struct Prepared {
    database: String,
    sql: String,
    caller: Caller,
    params: parking_lot::Mutex<QueryParams>,
}

/// Which Arrow types a caller receives; also the key a cached answer keeps its Flight data
/// under (see [`frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResultTypes {
    /// The data model's types as they are: tags dictionary-encoded, unsigned integers
    /// unsigned (ADBC, pyarrow and Arrow C++/Go/Rust read them).
    Native,
    /// Types every JDBC-style client reads correctly, as the PostgreSQL protocol maps them:
    /// dictionary-encoded columns as plain columns of their values (the Flight SQL JDBC
    /// driver reads a dictionary column's keys as its values), `UInt8`/`UInt16`/`UInt32` as
    /// the next wider signed integer and `UInt64` as `Decimal128(20, 0)` (the driver reads
    /// unsigned values as signed: 2^64 - 1 would arrive as -1).
    Portable,
}

impl ResultTypes {
    /// The header that chooses explicitly: `native` or `portable`.
    const HEADER: &'static str = "quiver-result-types";

    /// What the caller of a request with `metadata` gets: the `quiver-result-types` header's
    /// choice, or else `Portable` for Arrow Java's Flight client (user agent `grpc-java…`,
    /// which the JDBC driver uses) and `Native` for everyone else.
    fn of(metadata: &MetadataMap) -> Result<Self, Status> {
        if let Some(choice) = metadata.get(Self::HEADER) {
            return match choice.to_str().map(str::trim) {
                Ok(v) if v.eq_ignore_ascii_case("native") => Ok(ResultTypes::Native),
                Ok(v) if v.eq_ignore_ascii_case("portable") => Ok(ResultTypes::Portable),
                _ => Err(Status::invalid_argument(format!(
                    "{}: expected `native` or `portable`",
                    Self::HEADER
                ))),
            };
        }
        let java = metadata
            .get("user-agent")
            .and_then(|agent| agent.to_str().ok())
            .is_some_and(|agent| agent.starts_with("grpc-java"));
        Ok(if java {
            ResultTypes::Portable
        } else {
            ResultTypes::Native
        })
    }

    /// The type this caller receives a column of `data_type` as.
    fn data_type(self, data_type: &DataType) -> DataType {
        match (self, data_type) {
            (ResultTypes::Native, _) => data_type.clone(),
            (ResultTypes::Portable, DataType::Dictionary(_, value)) => self.data_type(value),
            (ResultTypes::Portable, DataType::UInt8) => DataType::Int16,
            (ResultTypes::Portable, DataType::UInt16) => DataType::Int32,
            (ResultTypes::Portable, DataType::UInt32) => DataType::Int64,
            (ResultTypes::Portable, DataType::UInt64) => DataType::Decimal128(20, 0),
            (ResultTypes::Portable, other) => other.clone(),
        }
    }

    /// `schema` as this caller receives it.
    fn schema(self, schema: &SchemaRef) -> SchemaRef {
        if schema
            .fields()
            .iter()
            .all(|f| &self.data_type(f.data_type()) == f.data_type())
        {
            return schema.clone();
        }
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_data_type(self.data_type(f.data_type()))
            })
            .collect();
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }

    /// `batch` in the types of [`ResultTypes::schema`] (every conversion is lossless).
    fn batch(self, batch: RecordBatch) -> Result<RecordBatch, FlightError> {
        let schema = self.schema(&batch.schema());
        if Arc::ptr_eq(&schema, &batch.schema()) {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(column, field)| arrow::compute::cast(column, field.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

impl EncodingKey for ResultTypes {}

/// The Flight SQL service.
pub struct QuiverFlightSql {
    store: Arc<Store>,
    queries: Arc<QueryService>,
    /// Bearer token → user name.
    /// Who requests act for.
    auth: Arc<Authenticator>,
    /// Handshake handles and the callers they stand for.
    sessions: moka::sync::Cache<String, Caller>,
    prepared: moka::sync::Cache<String, Arc<Prepared>>,
    /// Largest gRPC message, and most bytes one message's compressed buffers may claim.
    max_message_bytes: usize,
}

impl QuiverFlightSql {
    /// A Flight SQL service answering from `queries` (which reads `store`); one gRPC message
    /// (and what its compressed buffers claim) is at most `max_message_bytes`.
    pub fn new(
        store: Arc<Store>,
        queries: Arc<QueryService>,
        auth: Arc<Authenticator>,
        max_message_bytes: usize,
    ) -> Self {
        QuiverFlightSql {
            store,
            auth,
            queries,
            max_message_bytes,
            // LRU, not TinyLFU: a new token or handle must always be admitted (the least
            // recently used one makes room).
            sessions: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .eviction_policy(EvictionPolicy::lru())
                .time_to_idle(Duration::from_secs(24 * 3600))
                .build(),
            prepared: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .eviction_policy(EvictionPolicy::lru())
                .time_to_idle(PREPARED_IDLE)
                .build(),
        }
    }

    /// An unguessable 128-bit handle from the operating system's random source: handles and
    /// tokens are capabilities, so nothing about one may predict another.
    fn new_handle(&self) -> Result<String, Status> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Status::internal(format!("no randomness for a handle: {e}")))?;
        Ok(format!("{:032x}", u128::from_be_bytes(bytes)))
    }

    /// Who `request` acts for (see the module documentation), counted against its rate
    /// limit.
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let peer = request
            .remote_addr()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
        let caller = match request.metadata().get("authorization") {
            None => self.auth.authenticate(Presented::Nothing, peer),
            Some(value) => {
                let bearer = value
                    .to_str()
                    .ok()
                    .and_then(|v| strip_prefix_ignore_case(v, "bearer "))
                    .map(str::trim);
                match bearer.and_then(|bearer| self.sessions.get(bearer)) {
                    Some(caller) => self.auth.admit_handle(&caller, peer).map(|()| caller),
                    // a handle that expired or predates a restart (128 random bits: not worth
                    // guessing) is not a failed login counted against the client's address
                    None if bearer.is_some_and(is_handle) => {
                        return Err(Status::unauthenticated(
                            "unknown or expired Flight SQL handle: do the Handshake again",
                        ))
                    }
                    None => self.auth.authenticate_header(Some(value.as_bytes()), peer),
                }
            }
        }
        .map_err(|e| classified_status(&e))?;
        self.auth
            .admit_request(&caller)
            .map_err(|e| classified_status(&e))?;
        Ok(caller)
    }

    /// The schema `request`'s answer will have: the cached answer's, or else the plan's.
    async fn result_schema(&self, request: &QueryRequest) -> Result<SchemaRef, Status> {
        match self.queries.peek(request) {
            Some(cached) => Ok(cached.result().schema().clone()),
            None => Ok(self
                .describe(&request.database, &request.sql, &request.control)
                .await?
                .0),
        }
    }

    /// The result and parameter schemas of `sql`, from its plan, if the caller of `control`
    /// may read what it reads.
    async fn describe(
        &self,
        database: &str,
        sql: &str,
        control: &QueryControl,
    ) -> Result<(SchemaRef, SchemaRef), Status> {
        let engine = self.queries.engine();
        let analysis = engine
            .analyze(database, sql)
            .map_err(|e| classified_status(&control.hide_unreadable(e)))?;
        control
            .check_analysis(&analysis)
            .map_err(|e| classified_status(&e))?;
        let description = engine
            .describe(&analysis)
            .await
            .map_err(|e| classified_status(&e))?;
        let parameters = Schema::new(
            description
                .parameters
                .iter()
                .map(|(name, data_type)| {
                    Field::new(name, data_type.clone().unwrap_or(DataType::Null), true)
                })
                .collect::<Vec<_>>(),
        );
        Ok((description.schema, Arc::new(parameters)))
    }

    /// Runs a statement through the result cache and streams the answer as Flight data. A
    /// whole (cached) answer is encoded once and its Flight data kept with it, so a hit
    /// sends ready bytes. `announced` is the schema fingerprint a `FlightInfo` promised.
    async fn answer(
        &self,
        request: QueryRequest,
        announced: Option<u64>,
        types: ResultTypes,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let answer = self
            .queries
            .query(&request)
            .await
            .map_err(|e| classified_status(e.as_ref()))?;
        let schema = match &answer.body {
            AnswerBody::Cached(cached) => cached.result().schema().clone(),
            AnswerBody::Streamed(output) => output.schema.clone(),
        };
        if announced.is_some_and(|announced| announced != schema_fingerprint(&schema)) {
            return Err(Status::failed_precondition(
                "the result's columns changed since GetFlightInfo (the table's schema changed): \
                 execute the statement again",
            ));
        }
        match answer.body {
            AnswerBody::Cached(cached) => {
                if let Some(ready) = self.queries.encoding(&cached, &types) {
                    return Ok(Response::new(frames(ready)?));
                }
                let batches: Vec<Result<RecordBatch, FlightError>> =
                    cached.result().batches().iter().cloned().map(Ok).collect();
                let encoded: Vec<FlightData> =
                    encode(schema, futures::stream::iter(batches).boxed(), types)
                        .try_collect()
                        .await?;
                self.queries
                    .keep_encoding(&cached, &types, framed(&encoded));
                Ok(Response::new(
                    futures::stream::iter(encoded.into_iter().map(Ok)).boxed(),
                ))
            }
            AnswerBody::Streamed(output) => Ok(Response::new(encode(
                schema,
                output
                    .stream
                    .map_err(|e| {
                        FlightError::Tonic(Box::new(classified_status(&QueryError::from(e))))
                    })
                    .boxed(),
                types,
            ))),
        }
    }
}

/// Flight data messages as one buffer: each length-delimited protobuf.
fn framed(messages: &[FlightData]) -> bytes::Bytes {
    let size: usize = messages.iter().map(|m| m.encoded_len() + 10).sum();
    let mut buffer = bytes::BytesMut::with_capacity(size);
    for message in messages {
        message
            .encode_length_delimited(&mut buffer)
            .expect("the buffer grows as needed");
    }
    buffer.freeze()
}

/// The messages [`framed`] wrote, as a `DoGet` stream sharing `buffer` (no copy of the data).
fn frames(
    mut buffer: bytes::Bytes,
) -> Result<<QuiverFlightSql as FlightService>::DoGetStream, Status> {
    let mut messages = Vec::new();
    while !buffer.is_empty() {
        let message = FlightData::decode_length_delimited(&mut buffer)
            .map_err(|e| Status::internal(format!("cached Flight data is corrupt: {e}")))?;
        messages.push(Ok(message));
    }
    Ok(futures::stream::iter(messages).boxed())
}

/// A fingerprint of `schema`'s column names and types (stable within one server process).
fn schema_fingerprint(schema: &Schema) -> u64 {
    static KEYS: LazyLock<RandomState> = LazyLock::new(RandomState::new);
    let columns: Vec<(&str, String)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type().to_string()))
        .collect();
    KEYS.hash_one(columns)
}

type BatchStream = futures::stream::BoxStream<'static, Result<RecordBatch, FlightError>>;

/// `batches` as Flight data in the caller's `types` (as the `FlightInfo` schema said, see
/// [`ResultTypes::schema`]); dictionary-encoded columns the types keep are sent as such.
fn encode(
    schema: SchemaRef,
    batches: BatchStream,
    types: ResultTypes,
) -> <QuiverFlightSql as FlightService>::DoGetStream {
    FlightDataEncoderBuilder::new()
        .with_dictionary_handling(DictionaryHandling::Resend)
        .with_schema(types.schema(&schema))
        .build(batches.and_then(move |batch| futures::future::ready(types.batch(batch))))
        .map_err(Status::from)
        .boxed()
}

/// One metadata batch as a `DoGet` stream.
fn single_batch<E: std::fmt::Display>(
    schema: SchemaRef,
    batch: Result<RecordBatch, E>,
) -> Result<Response<<QuiverFlightSql as FlightService>::DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(format!("cannot build metadata: {e}")))?;
    Ok(Response::new(encode(
        schema,
        futures::stream::once(async move { Ok(batch) }).boxed(),
        ResultTypes::Native,
    )))
}

/// True if `authorization` is `Bearer <handle>` with a handle's shape (32 hex digits, see
/// `QuiverFlightSql::new_handle`), not a token's (`qv_...`).
/// True if a bearer value has the shape of a handle the Handshake gives (32 hex digits).
fn is_handle(bearer: &str) -> bool {
    bearer.len() == 32 && bearer.bytes().all(|b| b.is_ascii_hexdigit())
}

fn strip_prefix_ignore_case<'a>(value: &'a str, prefix: &str) -> Option<&'a str> {
    (value.len() >= prefix.len() && value[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &value[prefix.len()..])
}

/// The database a request names (`database` or `bucket-name` header).
fn database_of(metadata: &MetadataMap) -> Result<String, Status> {
    ["database", "bucket-name"]
        .iter()
        .find_map(|name| metadata.get(*name)?.to_str().ok().map(str::to_string))
        .filter(|db| !db.trim().is_empty())
        .ok_or_else(|| {
            Status::invalid_argument(
                "no database: send the gRPC header `database` (or `bucket-name`)",
            )
        })
}

/// An error of a lower layer as the gRPC status of its kind: the one place Flight SQL decides
/// it. The server's own failures (`INTERNAL`, `UNAVAILABLE`) are logged.
fn classified_status(e: &(impl Classify + ?Sized)) -> Status {
    let kind = e.kind();
    let message = e.to_string();
    if kind.is_server_fault() {
        tracing::error!(error = %message, ?kind, "Flight SQL request failed");
    }
    match kind {
        ErrorKind::Invalid | ErrorKind::TooLarge | ErrorKind::LimitExceeded => {
            Status::invalid_argument(message)
        }
        ErrorKind::NotFound => Status::not_found(message),
        ErrorKind::Conflict => Status::already_exists(message),
        ErrorKind::Unauthenticated => Status::unauthenticated(message),
        ErrorKind::PermissionDenied => Status::permission_denied(message),
        ErrorKind::RateLimited => Status::resource_exhausted(message),
        ErrorKind::ResourcesExhausted => Status::resource_exhausted(message),
        ErrorKind::TimedOut => Status::deadline_exceeded(message),
        ErrorKind::Cancelled => Status::cancelled(message),
        ErrorKind::Busy | ErrorKind::Unavailable => Status::unavailable(message),
        ErrorKind::Internal => Status::internal(message),
    }
}

/// What the governor is told of a Flight query of `caller`: its protocol, the caller's grants
/// and the client's deadline (`grpc-timeout`: digits and a unit, `H`, `M`, `S`, `m`, `u` or
/// `n`).
fn control_for(caller: &Caller, metadata: &MetadataMap) -> Result<QueryControl, Status> {
    let timeout = match metadata.get("grpc-timeout") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(grpc_timeout)
                .ok_or_else(|| Status::invalid_argument("malformed grpc-timeout header"))?,
        ),
    };
    Ok(QueryControl {
        protocol: Protocol::Flight,
        timeout,
        timeout_setting: "the gRPC deadline",
        grants: caller.read_grants(),
    })
}

/// A `grpc-timeout` value: at most 8 digits and a unit.
fn grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A `FlightInfo` for `schema` whose one endpoint's ticket is `command`.
fn flight_info(
    schema: &Schema,
    command: &impl ProstMessageExt,
    request: Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let endpoint = FlightEndpoint::new().with_ticket(ticket);
    let descriptor = request.into_inner();
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("cannot encode the schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: arrow::error::ArrowError| {
            Status::internal(format!("cannot encode the schema: {e}"))
        })?;
    Ok(bytes)
}

/// Placeholder values from the one-row batch a client binds: columns named `$1`, `$2`, ...
/// (or unnamed/numbered) bind positionally, columns named otherwise bind `$name`.
fn params_from_batch(batch: &RecordBatch) -> Result<QueryParams, Status> {
    if batch.num_rows() != 1 {
        return Err(Status::invalid_argument(format!(
            "bind exactly one row of parameters (got {}); batch execution is not supported",
            batch.num_rows()
        )));
    }
    let schema = batch.schema();
    let mut values = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let value = ScalarValue::try_from_array(column, 0)
            .map_err(|e| Status::invalid_argument(format!("parameter {}: {e}", field.name())))?;
        values.push((field.name().trim_start_matches('$').to_string(), value));
    }
    let positional = values
        .iter()
        .all(|(name, _)| name.is_empty() || name.parse::<usize>().is_ok());
    Ok(if positional {
        QueryParams::Positional(values.into_iter().map(|(_, v)| v).collect())
    } else {
        QueryParams::Named(values.into_iter().collect())
    })
}

#[tonic::async_trait]
impl FlightSqlService for QuiverFlightSql {
    type FlightService = QuiverFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let peer = request
            .remote_addr()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
        // Basic (the token is the password; an empty one: the local caller, where admitted),
        // `Bearer <token>` (the Flight SQL JDBC driver's `token` property) or nothing
        let authorization = request.metadata().get("authorization");
        let caller = self
            .auth
            .authenticate_header(authorization.map(|value| value.as_bytes()), peer)
            .map_err(|e| classified_status(&e))?;
        self.auth
            .admit_request(&caller)
            .map_err(|e| classified_status(&e))?;
        let token = self.new_handle()?;
        tracing::debug!(caller = caller.name(), "Flight SQL handshake");
        self.sessions.insert(token.clone(), caller);
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(futures::stream::iter([Ok(reply)])));
        let bearer = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::internal("token is not a valid header"))?;
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(&request)?;
        let statement = QueryRequest {
            database: database_of(request.metadata())?,
            sql: query.query,
            scope: caller.scope().clone(),
            control: control_for(&caller, request.metadata())?,
            ..QueryRequest::default()
        };
        let types = ResultTypes::of(request.metadata())?;
        let schema = self.result_schema(&statement).await?;
        let ticket = StatementTicket {
            schema: schema_fingerprint(&schema),
            database: statement.database,
            sql: statement.sql,
        };
        let handle = serde_json::to_vec(&ticket).expect("ticket serializes");
        let ticket = TicketStatementQuery {
            statement_handle: handle.into(),
        };
        flight_info(&types.schema(&schema), &ticket, request)
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let caller = self.caller(&request)?;
        let types = ResultTypes::of(request.metadata())?;
        let statement: StatementTicket = serde_json::from_slice(&ticket.statement_handle)
            .map_err(|_| Status::invalid_argument("not a ticket this server issued"))?;
        let request = QueryRequest {
            database: statement.database,
            sql: statement.sql,
            scope: caller.scope().clone(),
            control: control_for(&caller, request.metadata())?,
            ..QueryRequest::default()
        };
        self.answer(request, Some(statement.schema), types).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let caller = self.caller(&request)?;
        let database = database_of(request.metadata())?;
        let types = ResultTypes::of(request.metadata())?;
        let control = control_for(&caller, request.metadata())?;
        let (schema, parameters) = self.describe(&database, &query.query, &control).await?;
        let handle = self.new_handle()?;
        self.prepared.insert(
            handle.clone(),
            Arc::new(Prepared {
                database,
                sql: query.query,
                caller,
                params: parking_lot::Mutex::new(QueryParams::None),
            }),
        );
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into(),
            dataset_schema: schema_bytes(&types.schema(&schema))?,
            parameter_schema: schema_bytes(&parameters)?,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let caller = self.caller(&request)?;
        self.prepared_statement(&query.prepared_statement_handle, &caller)?;
        let handle = String::from_utf8_lossy(&query.prepared_statement_handle);
        self.prepared.invalidate(handle.as_ref());
        Ok(())
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let caller = self.caller(&request)?;
        let prepared = self.prepared_statement(&query.prepared_statement_handle, &caller)?;
        let data = request
            .into_inner()
            .into_peekable()
            .map_err(FlightError::from);
        let batches: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(data)
            .try_collect()
            .await
            .map_err(|e| Status::invalid_argument(format!("cannot decode parameters: {e}")))?;
        let params = match batches.iter().find(|b| b.num_rows() > 0) {
            Some(batch) => params_from_batch(batch)?,
            None => QueryParams::None,
        };
        *prepared.params.lock() = params;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = self.caller(&request)?;
        let prepared = self.prepared_statement(&query.prepared_statement_handle, &caller)?;
        let types = ResultTypes::of(request.metadata())?;
        let schema = self.result_schema(&prepared.request()).await?;
        flight_info(&types.schema(&schema), &query, request)
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let caller = self.caller(&request)?;
        let prepared = self.prepared_statement(&query.prepared_statement_handle, &caller)?;
        let types = ResultTypes::of(request.metadata())?;
        let mut statement = prepared.request();
        statement.control = control_for(&caller, request.metadata())?;
        self.answer(statement, None, types).await
    }

    async fn do_put_statement_ingest(
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
        check_ingest_target(&self.store, &database, &command)?;
        // Every message is checked before Arrow's decoder sees it (it trusts the sizes a
        // message declares); a compressed message may claim what an HTTP request body may.
        let mut checker = MessageChecker::new();
        let max_uncompressed = self.max_message_bytes;
        let data = request
            .into_inner()
            .into_peekable()
            .map_err(FlightError::from)
            .enumerate()
            .map(move |(index, data)| {
                let data = data?;
                let refused = |what: String| {
                    FlightError::DecodeError(format!("Arrow IPC message {index}: {what}"))
                };
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
            });
        let mut batches = FlightRecordBatchStream::new_from_flight_data(data);
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
                        .admit_write(&caller, batch.get_array_memory_size() as u64)
                })
                .map_err(|e| classified_status(&e))?;
            let table = table_from_arrow(&command.table, &batch).map_err(|e| {
                Status::invalid_argument(format!(
                    "{e} ({rows} rows of earlier batches were written)"
                ))
            })?;
            self.store
                .write(&database, vec![table], Durability::Sync)
                .await
                .map_err(|e| classified_status(&e))?;
            rows += batch.num_rows() as i64;
        }
        tracing::debug!(
            database,
            table = command.table,
            rows,
            "Flight SQL bulk ingest"
        );
        Ok(rows)
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder(&SQL_INFO).schema();
        flight_info(&schema, &query, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let builder = query.into_builder(&SQL_INFO);
        single_batch(builder.schema(), builder.build())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        flight_info(&schema, &query, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let mut builder = query.into_builder();
        builder.append(CATALOG_NAME);
        single_batch(builder.schema(), builder.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        flight_info(&schema, &query, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let visible = self.caller(&request)?.visible_databases();
        let mut builder = query.into_builder();
        for database in self.store.database_names() {
            if visible.shows(&database) {
                builder.append(CATALOG_NAME, database);
            }
        }
        single_batch(builder.schema(), builder.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        flight_info(&schema, &query, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let visible = self.caller(&request)?.visible_databases();
        let types = ResultTypes::of(request.metadata())?;
        let mut builder = query.into_builder();
        for database in self.store.database_names() {
            let Some(db) = self
                .store
                .database(&database)
                .filter(|_| visible.shows(&database))
            else {
                continue;
            };
            for name in db.table_names() {
                let Some(table) = db.table(&name) else {
                    continue;
                };
                let schema = types.schema(&table.schema());
                builder
                    .append(CATALOG_NAME, &database, &name, "TABLE", &schema)
                    .map_err(Status::from)?;
            }
        }
        single_batch(builder.schema(), builder.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        flight_info(&schema, &query, request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        let mut builder = query.into_builder();
        builder.append("TABLE");
        single_batch(builder.schema(), builder.build())
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Err(Status::unimplemented(format!(
            "ticket type {} is not supported",
            message.type_url
        )))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
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

impl QuiverFlightSql {
    /// The prepared statement `handle` names, if `caller` created it.
    fn prepared_statement(&self, handle: &[u8], caller: &Caller) -> Result<Arc<Prepared>, Status> {
        let handle = std::str::from_utf8(handle)
            .map_err(|_| Status::invalid_argument("not a prepared statement handle"))?;
        self.prepared
            .get(handle)
            .filter(|prepared| Arc::ptr_eq(&prepared.caller, caller))
            .ok_or_else(|| {
                Status::not_found("unknown prepared statement (closed, or unused for an hour)")
            })
    }
}

impl Prepared {
    /// The statement with the parameters bound now, as its creator's request.
    fn request(&self) -> QueryRequest {
        QueryRequest {
            database: self.database.clone(),
            sql: self.sql.clone(),
            params: self.params.lock().clone(),
            scope: self.caller.scope().clone(),
            no_cache: false,
            control: QueryControl {
                protocol: Protocol::Flight,
                grants: self.caller.read_grants(),
                ..QueryControl::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_deadlines_are_read() {
        assert_eq!(grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout("S"), None);
        assert_eq!(grpc_timeout("12x"), None);
        assert_eq!(grpc_timeout("123456789S"), None);
    }
}

//! `quiver-flight` is Quiver's Arrow Flight SQL service (gRPC, `flight_addr`, 127.0.0.1:8815 by
//! default): what ADBC's Flight SQL driver, `pyarrow.flight` and the Flight SQL JDBC driver
//! speak. It knows nothing of the other protocols; errors become gRPC codes by their kind
//! (`classified_status`). The `FlightSqlService` implementation is here; what its methods
//! delegate to lives beside it: `metadata` (the catalog answers), `ingest` (bulk ingest),
//! `result_types` (which Arrow types a caller receives) and `session` (the session actions).
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
//! - Sessions: `CloseSession` (which ADBC sends as a connection closes) forgets the Handshake
//!   handle presented; `GetSessionOptions` answers none, `SetSessionOptions` refuses each
//!   option by name (Quiver has no session options over Flight yet).
//! - Result types: the data model's own (tags dictionary-encoded, unsigned integers), or for
//!   Arrow Java's client and the Flight SQL JDBC driver on it, which misread those, portable
//!   ones (see [`ResultTypes`]); the `quiver-result-types` header chooses explicitly.

mod ingest;
mod metadata;
mod observe;
mod result_types;
mod service;
mod session;

pub use observe::GrpcMetricsLayer;
use result_types::ResultTypes;
pub use service::QuiverFlightService;

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
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementIngest, CommandStatementQuery, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest,
    HandshakeResponse, IpcMessage, SchemaAsIpc, Ticket,
};
use datafusion::common::ScalarValue;
use futures::{Stream, StreamExt, TryStreamExt};
use moka::policy::EvictionPolicy;
use prost::Message;
use quiver_auth::{Authenticator, Caller, Presented};
use quiver_model::{Classify, ErrorKind};
use quiver_query::{GrantChecks, QueryControl, QueryProtocol};
use quiver_query::{QueryError, QueryParams};
use quiver_service::{Answer, AnswerBody, QueryInvocation, QueryRequest, QueryService};
use quiver_storage::Store;
use serde::{Deserialize, Serialize};

use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};

/// Prepared statements unused this long are dropped.
const PREPARED_IDLE: Duration = Duration::from_secs(3600);

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
                let bearer = bearer_of(value);
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

    /// Runs an InfluxQL statement (from a JSON ticket) and streams its answer.
    async fn answer_influxql(
        &self,
        request: QueryRequest,
        types: ResultTypes,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        let mut statements = self
            .queries
            .parse_influxql(&request.sql)
            .map_err(|e| Status::invalid_argument(format!("error parsing query: {e}")))?;
        if statements.len() != 1 {
            return Err(Status::invalid_argument(format!(
                "one InfluxQL statement per query, not {}",
                statements.len()
            )));
        }
        let how = QueryInvocation {
            scope: &request.scope,
            no_cache: request.no_cache,
            control: &request.control,
        };
        let answer = self
            .queries
            .query_influxql(&request.database, statements.remove(0), how)
            .await
            .map_err(|e| classified_status(e.as_ref()))?;
        self.send(answer, None, types).await
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
        self.send(answer, announced, types).await
    }

    /// Streams `answer` as Flight data (see [`QuiverFlightSql::answer`]).
    async fn send(
        &self,
        answer: Answer,
        announced: Option<u64>,
        types: ResultTypes,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
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
fn single_batch(
    (schema, batch): metadata::Answer,
) -> Result<Response<<QuiverFlightSql as FlightService>::DoGetStream>, Status> {
    let batch = batch?;
    Ok(Response::new(encode(
        schema,
        futures::stream::once(async move { Ok(batch) }).boxed(),
        ResultTypes::Native,
    )))
}

/// True if a bearer value has the shape of a handle the Handshake gives (32 hex digits, see
/// `QuiverFlightSql::new_handle`), not a token's (`qv_...`).
fn is_handle(bearer: &str) -> bool {
    bearer.len() == 32 && bearer.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What an `authorization: Bearer <value>` header presents (a token or a handle).
fn bearer_of(authorization: &MetadataValue<Ascii>) -> Option<&str> {
    authorization
        .to_str()
        .ok()
        .and_then(|v| strip_prefix_ignore_case(v, "bearer "))
        .map(str::trim)
}

/// The Handshake handle a call presents (`authorization: Bearer <handle>`), if it presents one.
fn presented_handle(metadata: &MetadataMap) -> Option<&str> {
    bearer_of(metadata.get("authorization")?).filter(|bearer| is_handle(bearer))
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
/// it. Every failure is logged at the level its kind deserves ([`ErrorKind::log_failure`]).
fn classified_status(e: &(impl Classify + ?Sized)) -> Status {
    let kind = e.kind();
    let message = e.to_string();
    kind.log_failure("flight", &message);
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
    let skip_rollups = match metadata.get(USE_ROLLUPS_HEADER) {
        None => false,
        Some(value) => {
            let text = value.to_str().unwrap_or_default();
            let on = quiver_model::settings::parse_switch(text).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "{USE_ROLLUPS_HEADER} must be true or false, not {text:?}"
                ))
            })?;
            !on
        }
    };
    let distributed =
        match metadata.get(DISTRIBUTED_HEADER) {
            None => None,
            Some(value) => Some(value.to_str().unwrap_or_default().parse().map_err(
                |e: String| Status::invalid_argument(format!("{DISTRIBUTED_HEADER}: {e}")),
            )?),
        };
    Ok(QueryControl {
        protocol: QueryProtocol::Flight,
        timeout,
        timeout_setting: "the gRPC deadline",
        grants: caller.read_grants(),
        skip_rollups,
        distributed,
    })
}

/// The request header that says where one call's query runs (`off`, `auto`, `on`; the
/// server's `distributed` setting without it): ADBC sets it for a whole connection with
/// `adbc.flight.sql.rpc.call_header.x-quiver-distributed`.
pub const DISTRIBUTED_HEADER: &str = "x-quiver-distributed";

/// The request header that turns routing to rollups off for one call (`false`).
pub const USE_ROLLUPS_HEADER: &str = "x-quiver-use-rollups";

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
        self.ingest(command, request).await
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder(&metadata::SQL_INFO).schema();
        flight_info(&schema, &query, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.caller(&request)?;
        single_batch(metadata::sql_info(query))
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
        single_batch(metadata::catalogs(query))
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
        single_batch(metadata::schemas(query, &self.store, &visible))
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
        single_batch(metadata::tables(query, &self.store, &visible, types))
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
        single_batch(metadata::table_types(query))
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

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        match self.session_action(&request) {
            Some(body) => {
                let result = arrow_flight::Result { body: body? };
                Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
            }
            None => Err(Status::unimplemented(format!(
                "action {:?} is not supported (ListActions lists those that are)",
                request.get_ref().r#type
            ))),
        }
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(session::action_types().into_iter().map(Ok).collect())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
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
                protocol: QueryProtocol::Flight,
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

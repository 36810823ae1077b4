//! Statements from PostgreSQL clients: the simple query protocol (one string, any number of
//! statements) and the extended protocol (parse / bind / describe / execute, named statements
//! and portals, text and binary parameters and results).
//!
//! SQL is parsed with `datafusion-pg-catalog`'s PostgreSQL compatibility parser (which rewrites
//! the catalog queries of psql, JDBC, DBeaver and Grafana into ones DataFusion can run), then
//! classified: session commands are answered here, queries go through the result cache exactly
//! as HTTP and Flight SQL queries do (same keys; the scope is the session token's grants). Results are Arrow
//! batches encoded row by row by `arrow-pg`, with the Postgres types of the data model
//! (`UInt64` as `numeric`, tags as `text`, `time` as `timestamptz`).
//!
//! Over 700 lines: one `pgwire` handler implementing the simple and extended query protocols,
//! whose trait methods share the portal and statement plumbing; about 80 lines are tests.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, TimestampNanosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit, TimestampNanosecondType};
use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type};
use async_trait::async_trait;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use futures::stream::BoxStream;
use futures::{Sink, StreamExt, TryStreamExt};
use parking_lot::Mutex;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::PgWireBackendMessage;
use quiver_auth::{Authenticator, Caller};
use quiver_query::statement_limits::parse_bounded;
use quiver_query::{GrantChecks, QueryControl, QueryProtocol};
use quiver_query::{QueryAnalysis, QueryError, QueryParams};
use quiver_service::{AnswerBody, CachedAnswer, QueryInvocation, QueryService};
use rust_decimal::Decimal;

use super::cancel::{CancelSignal, Registration};
use super::errors::{auth_error, error, fatal, query_error, sqlstate};
use super::kept_rows::{kept_rows, RowEncoding, RowRecorder};
use super::settings::{database_of, SessionSettings};
use super::statement::{classify, Command};
use super::table_visibility::TableVisibility;

/// A statement as Parse stores it (extended protocol).
#[derive(Debug)]
pub(super) enum Prepared {
    /// A query: analysed and described once, run at each Execute.
    Query(PreparedQuery),
    /// A session command.
    Command(Command),
}

/// A query prepared for repeated execution.
#[derive(Debug)]
pub(super) struct PreparedQuery {
    analysis: Arc<QueryAnalysis>,
    /// The result's schema when it was prepared (Execute checks it did not change).
    schema: SchemaRef,
    /// `$1`, `$2`, ... in order: the type the plan determines, if any.
    parameters: Vec<Option<DataType>>,
}

/// Parses statements (shared by both protocols; it is the extended protocol's `QueryParser`).
pub(super) struct StatementParser {
    queries: Arc<QueryService>,
    sql: PostgresCompatibilityParser,
    visibility: TableVisibility,
}

impl StatementParser {
    pub(super) fn new(queries: Arc<QueryService>) -> Self {
        StatementParser {
            queries,
            sql: PostgresCompatibilityParser::new(),
            visibility: TableVisibility::new(),
        }
    }

    /// The statements of `sql` (none for an empty or comment-only string), parsed and
    /// rewritten for compatibility (and for [`TableVisibility`]) within the engine's bounds on
    /// a statement's length and nesting: `42601` if it is not valid SQL, `54000` / `54001` past
    /// a bound.
    fn parse(&self, sql: &str) -> PgWireResult<Vec<SqlStatement>> {
        let limits = self.queries.engine().statement_limits();
        let parse = |sql: &str| -> Result<Vec<SqlStatement>, ParserError> {
            let statements = self.sql.parse(sql)?;
            Ok(statements
                .into_iter()
                .map(|statement| self.visibility.rewrite(statement))
                .collect())
        };
        parse_bounded(sql, limits, parse)
            .map_err(|refused| query_error(&QueryError::StatementLimit(refused)))?
            .map_err(|e| error(sqlstate::SYNTAX_ERROR, format!("syntax error: {e}")))
    }

    /// Analyses a query of `caller` for `database` (checks it is read-only and its tables
    /// exist; what does not exist where the caller may not read is a refusal to read it).
    fn analyze(
        &self,
        database: &str,
        statement: SqlStatement,
        caller: &Caller,
    ) -> PgWireResult<QueryAnalysis> {
        let control = QueryControl {
            grants: caller.read_grants(),
            ..QueryControl::default()
        };
        let analysis = self
            .queries
            .engine()
            .analyze_postgres(database, statement)
            .map_err(|e| query_error(&control.hide_unreadable(e)))?;
        // describing a statement shows its tables' columns: only to who may read them
        control
            .check_analysis(&analysis)
            .map_err(|e| query_error(&e))?;
        Ok(analysis)
    }
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Arc<Prepared>;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Arc<Prepared>>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.parse(sql)?;
        if statements.len() > 1 {
            return Err(error(
                sqlstate::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(statement) = statements.pop() else {
            return Ok(None);
        };
        let prepared = match classify(statement)? {
            Command::Query(statement) => {
                let caller = session_caller(client)?;
                let analysis = self.analyze(&database_of(client), *statement, &caller)?;
                let description = self
                    .queries
                    .engine()
                    .describe(&analysis)
                    .await
                    .map_err(|e| query_error(&e))?;
                Prepared::Query(PreparedQuery {
                    analysis: Arc::new(analysis),
                    schema: description.schema,
                    parameters: positional_parameters(&description.parameters)?,
                })
            }
            command => Prepared::Command(command),
        };
        Ok(Some(Arc::new(prepared)))
    }

    fn get_parameter_types(&self, statement: &Arc<Prepared>) -> PgWireResult<Vec<Type>> {
        match statement.as_ref() {
            Prepared::Query(query) => query.parameter_types(),
            Prepared::Command(_) => Ok(Vec::new()),
        }
    }

    fn get_result_schema(
        &self,
        statement: &Arc<Prepared>,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let format = format.cloned().unwrap_or_default();
        match statement.as_ref() {
            Prepared::Query(query) => {
                check_format_count(&format, query.schema.fields().len(), "result columns")?;
                arrow_schema_to_pg_fields(&query.schema, &format, None)
            }
            Prepared::Command(command) => {
                check_format_count(&format, command.columns(), "result columns")?;
                Ok(show_fields(command, &format))
            }
        }
    }
}

impl PreparedQuery {
    /// The Postgres type of each parameter; `text` where the plan does not determine one (as
    /// PostgreSQL infers for an unknown-typed parameter).
    fn parameter_types(&self) -> PgWireResult<Vec<Type>> {
        self.parameters
            .iter()
            .map(|t| t.as_ref().map_or(Ok(Type::TEXT), into_pg_type))
            .collect()
    }
}

/// `$1 .. $n` by number from the plan's placeholders (a gap is an untyped parameter).
fn positional_parameters(
    placeholders: &[(String, Option<DataType>)],
) -> PgWireResult<Vec<Option<DataType>>> {
    let mut parameters: Vec<Option<DataType>> = Vec::new();
    for (name, data_type) in placeholders {
        let index = name
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=u16::MAX as usize).contains(n))
            .ok_or_else(|| {
                error(
                    sqlstate::SYNTAX_ERROR,
                    format!("parameter {name}: PostgreSQL parameters are $1, $2, ..."),
                )
            })?;
        if parameters.len() < index {
            parameters.resize(index, None);
        }
        parameters[index - 1] = data_type.clone();
    }
    Ok(parameters)
}

/// Everything a statement needs from its connection.
struct Session {
    database: String,
    caller: Caller,
    cancel: Option<Arc<Registration>>,
    settings: Arc<SessionSettings>,
}

impl Session {
    /// The session of `client`, if its token is still valid.
    fn of<C: ClientInfo + ?Sized>(client: &C) -> PgWireResult<Session> {
        let extensions = client.session_extensions();
        let caller = session_caller(client)?;
        Ok(Session {
            database: database_of(client),
            caller,
            cancel: extensions.get::<Registration>(),
            settings: extensions.get_or_insert_with(SessionSettings::default),
        })
    }

    /// The cancel signal for a statement starting now.
    fn cancel_signal(&self) -> Option<CancelSignal> {
        self.cancel.as_ref().map(|r| r.cancel.signal())
    }
}

/// The caller `client` authenticated as at startup, if its token is still valid.
fn session_caller<C: ClientInfo + ?Sized>(client: &C) -> PgWireResult<Caller> {
    let caller = client.session_extensions().get::<Caller>().ok_or_else(|| {
        fatal(
            sqlstate::INVALID_AUTHORIZATION,
            "the session is not authenticated",
        )
    })?;
    caller.require_active().map_err(|e| auth_error(&e))?;
    Ok(caller.as_ref().clone())
}

/// Answers both protocols.
pub(super) struct PgHandler {
    queries: Arc<QueryService>,
    auth: Arc<Authenticator>,
    parser: Arc<StatementParser>,
}

impl PgHandler {
    pub(super) fn new(queries: Arc<QueryService>, auth: Arc<Authenticator>) -> Self {
        PgHandler {
            parser: Arc::new(StatementParser::new(queries.clone())),
            queries,
            auth,
        }
    }

    /// Runs one classified statement.
    async fn execute<C>(
        &self,
        client: &mut C,
        command: Command,
        status: TransactionStatus,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Send + Sync,
        C::PortalStore: PortalStore,
    {
        if status == TransactionStatus::Error
            && !matches!(command, Command::Rollback | Command::Commit)
        {
            return Err(error(
                sqlstate::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let session = Session::of(client)?;
        self.auth
            .admit_request(&session.caller)
            .map_err(|e| auth_error(&e))?;
        Ok(match command {
            Command::Query(statement) => {
                let analysis = Arc::new(self.parser.analyze(
                    &session.database,
                    *statement,
                    &session.caller,
                )?);
                let params = QueryParams::None;
                self.run_query(&session, analysis, &params, format, None)
                    .await?
            }
            Command::Set { name, value } => {
                session.settings.set(&name, value)?;
                Response::Execution(Tag::new("SET"))
            }
            Command::Reset(name) => {
                session.settings.reset(name.as_deref());
                Response::Execution(Tag::new("RESET"))
            }
            Command::Show(name) => {
                let (name, value) = session.settings.show(client, &name)?;
                show_response(vec![name], vec![vec![value]], format)?
            }
            Command::ShowAll => {
                let rows = session
                    .settings
                    .all(client)
                    .into_iter()
                    .map(|(name, value)| vec![name, value])
                    .collect();
                show_response(vec!["name".into(), "setting".into()], rows, format)?
            }
            Command::Begin => Response::TransactionStart(Tag::new("BEGIN")),
            // COMMIT of a failed transaction rolls it back, as in PostgreSQL.
            Command::Commit if status == TransactionStatus::Error => {
                Response::TransactionEnd(Tag::new("ROLLBACK"))
            }
            Command::Commit => Response::TransactionEnd(Tag::new("COMMIT")),
            Command::Rollback => Response::TransactionEnd(Tag::new("ROLLBACK")),
            Command::Deallocate(name) => {
                // DEALLOCATE ALL cannot enumerate pgwire's statements; they are freed with the
                // connection.
                if let Some(name) = name {
                    client.portal_store().rm_statement(&name);
                }
                Response::Execution(Tag::new("DEALLOCATE"))
            }
            Command::Discard => {
                session.settings.reset(None);
                Response::Execution(Tag::new("DISCARD ALL"))
            }
            Command::Acknowledge(tag) => Response::Execution(Tag::new(tag)),
        })
    }

    /// Answers an analysed query through the result cache. `described` is the schema the
    /// client was told (extended protocol); the answer must still have it.
    async fn run_query(
        &self,
        session: &Session,
        analysis: Arc<QueryAnalysis>,
        params: &QueryParams,
        format: &Format,
        described: Option<&SchemaRef>,
    ) -> PgWireResult<Response> {
        let signal = session.cancel_signal();
        let control = QueryControl {
            protocol: QueryProtocol::Postgres,
            timeout: session.settings.statement_timeout(),
            timeout_setting: "statement_timeout",
            grants: session.caller.read_grants(),
            skip_rollups: !session.settings.use_rollups(),
            distributed: session.settings.distributed(),
        };
        let how = QueryInvocation {
            scope: session.caller.scope(),
            no_cache: false,
            control: &control,
        };
        let answer = async {
            self.queries
                .query_analyzed(analysis, params, how)
                .await
                .map_err(|e| query_error(&e))
        };
        let answer = match &signal {
            Some(signal) => signal.run(answer).await?,
            None => answer.await?,
        };
        let schema = match &answer.body {
            AnswerBody::Cached(cached) => cached.result().schema().clone(),
            AnswerBody::Streamed(output) => output.schema.clone(),
        };
        if let Some(described) = described {
            if !same_columns(described, &schema) {
                return Err(error(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "cached plan must not change result type (the table's columns changed \
                     since the statement was prepared: prepare it again)",
                ));
            }
        }
        check_format_count(format, schema.fields().len(), "result columns")?;
        let fields = Arc::new(arrow_schema_to_pg_fields(&schema, format, None)?);
        let rows = match answer.body {
            AnswerBody::Cached(cached) => self.cached_rows(cached, format, fields.clone()),
            AnswerBody::Streamed(output) => encode_rows(
                output
                    .stream
                    .map_err(|e| query_error(&QueryError::from(e)))
                    .boxed(),
                fields.clone(),
            ),
        };
        let rows = match signal {
            Some(signal) => signal.guard(rows).boxed(),
            None => rows.boxed(),
        };
        Ok(Response::Query(QueryResponse::new(fields, rows)))
    }

    /// The rows of a cached answer: the encoding kept from an earlier execution in the same
    /// formats, or encoded now and kept once every row has gone out.
    fn cached_rows(
        &self,
        cached: CachedAnswer,
        format: &Format,
        fields: Arc<Vec<FieldInfo>>,
    ) -> BoxStream<'static, PgWireResult<DataRow>> {
        let encoding = RowEncoding::of(format, fields.len());
        let field_count = fields.len() as i16;
        if let Some(encoded) = self.queries.encoding(&cached, &encoding) {
            let rows = kept_rows(&encoded, field_count).map(|row| {
                row.ok_or_else(|| error(sqlstate::INTERNAL_ERROR, "a kept row encoding is cut"))
            });
            return futures::stream::iter(rows).boxed();
        }
        let max_bytes =
            usize::try_from(self.queries.config().max_entry_bytes).unwrap_or(usize::MAX);
        let recorder = Arc::new(Mutex::new(RowRecorder::new(max_bytes)));
        let batches = cached.result().batches().to_vec();
        let recording = recorder.clone();
        let rows = encode_rows(
            futures::stream::iter(batches.into_iter().map(Ok)).boxed(),
            fields,
        )
        .inspect(move |row| match row {
            Ok(row) => recording.lock().record(row),
            Err(_) => recording.lock().abandon(),
        });
        let queries = self.queries.clone();
        let keep = futures::stream::once(async move {
            if let Some(encoded) = recorder.lock().finish() {
                queries.keep_encoding(&cached, &encoding, encoded);
            }
            None
        })
        .filter_map(futures::future::ready);
        rows.chain(keep).boxed()
    }
}

/// `batches` encoded row by row for `fields` (an error ends the rows).
fn encode_rows(
    batches: BoxStream<'static, PgWireResult<RecordBatch>>,
    fields: Arc<Vec<FieldInfo>>,
) -> BoxStream<'static, PgWireResult<DataRow>> {
    batches
        .flat_map(move |batch| match batch.map(pg_representable) {
            Ok(batch) => futures::stream::iter(encode_recordbatch(fields.clone(), batch)).boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .boxed()
}

/// `batch` in values PostgreSQL represents as the field types announced for it
/// (`arrow_schema_to_pg_fields`): nanosecond timestamps rounded down to whole microseconds,
/// PostgreSQL's precision (text and binary results then send the same instant: the binary
/// encoder truncates toward 2000-01-01, which rounds earlier times up); `Int8` as `int2`
/// values and `Float16` as `float4` values (the encoder would send one byte for an `int2`).
fn pg_representable(batch: RecordBatch) -> RecordBatch {
    let needs = |c: &ArrayRef| {
        matches!(
            c.data_type(),
            DataType::Timestamp(TimeUnit::Nanosecond, _) | DataType::Int8 | DataType::Float16
        )
    };
    if !batch.columns().iter().any(needs) {
        return batch;
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|column| match column.data_type() {
            DataType::Timestamp(TimeUnit::Nanosecond, zone) => {
                let nanos = column.as_primitive::<TimestampNanosecondType>();
                let floored: TimestampNanosecondArray = nanos.unary(|v| v - v.rem_euclid(1_000));
                Arc::new(floored.with_timezone_opt(zone.clone())) as ArrayRef
            }
            DataType::Int8 => cast(column, &DataType::Int16).expect("Int8 fits Int16"),
            DataType::Float16 => cast(column, &DataType::Float32).expect("Float16 fits Float32"),
            _ => column.clone(),
        })
        .collect();
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(field, column)| {
            field
                .as_ref()
                .clone()
                .with_data_type(column.data_type().clone())
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .expect("same columns, same lengths")
}

/// True if `actual` has the columns (names and types) `described` announced.
fn same_columns(described: &SchemaRef, actual: &SchemaRef) -> bool {
    described.fields().len() == actual.fields().len()
        && described
            .fields()
            .iter()
            .zip(actual.fields())
            .all(|(d, a)| d.name() == a.name() && d.data_type() == a.data_type())
}

/// Fails with `08P01` if the client sent a number of format codes (other than 0 or 1) that
/// does not match `count`.
fn check_format_count(format: &Format, count: usize, what: &str) -> PgWireResult<()> {
    match format {
        Format::Individual(codes) if codes.len() != count => Err(error(
            sqlstate::PROTOCOL_VIOLATION,
            format!(
                "bind message has {} format codes but {count} {what}",
                codes.len()
            ),
        )),
        _ => Ok(()),
    }
}

/// The text columns of a `SHOW` answer.
fn show_fields(command: &Command, format: &Format) -> Vec<FieldInfo> {
    let names: Vec<String> = match command {
        Command::Show(name) => vec![name.clone()],
        Command::ShowAll => vec!["name".into(), "setting".into()],
        _ => Vec::new(),
    };
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| FieldInfo::new(name, None, None, Type::TEXT, format.format_for(i)))
        .collect()
}

/// A `SHOW` answer: text `rows` under `names`.
fn show_response(
    names: Vec<String>,
    rows: Vec<Vec<String>>,
    format: &Format,
) -> PgWireResult<Response> {
    check_format_count(format, names.len(), "result columns")?;
    let fields: Arc<Vec<FieldInfo>> = Arc::new(
        names
            .into_iter()
            .enumerate()
            .map(|(i, name)| FieldInfo::new(name, None, None, Type::TEXT, format.format_for(i)))
            .collect(),
    );
    let encoder_fields = fields.clone();
    let rows = rows.into_iter().map(move |row| {
        let mut encoder = pgwire::api::results::DataRowEncoder::new(encoder_fields.clone());
        for value in &row {
            encoder.encode_field(value)?;
        }
        Ok(encoder.take_row())
    });
    Ok(Response::Query(QueryResponse::new(
        fields,
        futures::stream::iter(rows.collect::<Vec<_>>()),
    )))
}

/// The parameter values a portal binds, decoded by the types the statement was described with
/// (or the client named in Parse), as DataFusion scalars.
fn bind_parameters(
    portal: &Portal<Arc<Prepared>>,
    query: &PreparedQuery,
) -> PgWireResult<QueryParams> {
    if portal.parameter_len() != query.parameters.len() {
        return Err(error(
            sqlstate::PROTOCOL_VIOLATION,
            format!(
                "bind message supplies {} parameters, but prepared statement requires {}",
                portal.parameter_len(),
                query.parameters.len()
            ),
        ));
    }
    check_format_count(
        &portal.parameter_format,
        portal.parameter_len(),
        "parameters",
    )?;
    if query.parameters.is_empty() {
        return Ok(QueryParams::None);
    }
    let inferred: Vec<Option<&DataType>> = query.parameters.iter().map(Option::as_ref).collect();
    let server_types = query.parameter_types()?;
    let server_types: Vec<Option<&Type>> = server_types.iter().map(Some).collect();
    let values = deserialize_parameters_with_server_types(portal, &inferred, &server_types)
        .map_err(|e| match e {
            PgWireError::UserError(info) => PgWireError::UserError(info),
            other => error(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("invalid parameter value: {other}"),
            ),
        })?;
    let ParamValues::List(values) = values else {
        return Err(error(
            sqlstate::INTERNAL_ERROR,
            "parameters decoded by name, not position",
        ));
    };
    let values = values
        .into_iter()
        .zip(&server_types)
        .enumerate()
        .map(|(i, (value, server_type))| {
            let value = exact_numeric(portal, i, *server_type, value.value)?;
            exact_text(portal, i, value)
        })
        .collect::<PgWireResult<Vec<_>>>()?;
    Ok(QueryParams::Positional(values))
}

/// A `numeric` parameter for an integer placeholder, if it holds the number sent: arrow-pg
/// turns a number that does not fit (`2^64` for a `UInt64` column, `-1`, `1.5`) into NULL or
/// truncates it, which would silently change the query. Fails with `22003` instead.
fn exact_numeric(
    portal: &Portal<Arc<Prepared>>,
    index: usize,
    server_type: Option<&Type>,
    value: ScalarValue,
) -> PgWireResult<ScalarValue> {
    if server_type != Some(&Type::NUMERIC) || !matches!(portal.parameters.get(index), Some(Some(_)))
    {
        return Ok(value);
    }
    let Some(sent) = portal.parameter::<Decimal>(index, &Type::NUMERIC)? else {
        return Ok(value);
    };
    let held = match &value {
        ScalarValue::UInt64(v) => v.map(Decimal::from),
        ScalarValue::UInt32(v) => v.map(Decimal::from),
        ScalarValue::Int64(v) => v.map(Decimal::from),
        ScalarValue::Int32(v) => v.map(Decimal::from),
        _ => return Ok(value),
    };
    if held == Some(sent.normalize()) {
        return Ok(value);
    }
    Err(error(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!(
            "parameter ${}: {sent} is out of range for type {}",
            index + 1,
            value.data_type()
        ),
    ))
}

/// A text-format string parameter exactly as sent: pgwire's text decoding turns `''` into
/// `'` (a literal's escape, not a parameter's), which would change the value.
fn exact_text(
    portal: &Portal<Arc<Prepared>>,
    index: usize,
    value: ScalarValue,
) -> PgWireResult<ScalarValue> {
    if portal.parameter_format.is_binary(index) {
        return Ok(value);
    }
    let raw = || -> PgWireResult<Option<String>> {
        let Some(Some(bytes)) = portal.parameters.get(index) else {
            return Ok(None);
        };
        String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| {
            error(
                "22021",
                format!("parameter ${} is not valid UTF-8", index + 1),
            )
        })
    };
    Ok(match value {
        ScalarValue::Utf8(Some(_)) => ScalarValue::Utf8(raw()?),
        ScalarValue::LargeUtf8(Some(_)) => ScalarValue::LargeUtf8(raw()?),
        other => other,
    })
}

#[async_trait]
impl SimpleQueryHandler for PgHandler {
    async fn do_query<C>(&self, client: &mut C, sql: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let started = Instant::now();
        let answered = self.simple_query(client, sql).await;
        observe("simple", started, answered.is_ok());
        answered
    }
}

impl PgHandler {
    /// The simple query protocol: every statement of `sql` in turn.
    async fn simple_query<C>(&self, client: &mut C, sql: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.parser.parse(sql)?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut status = client.transaction_status();
        let mut responses = Vec::with_capacity(statements.len());
        for statement in statements {
            let outcome = match classify(statement) {
                Ok(command) => {
                    self.execute(client, command, status, &Format::UnifiedText)
                        .await
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(response) => {
                    status = match &response {
                        Response::TransactionStart(_) => TransactionStatus::Transaction,
                        Response::TransactionEnd(_) => TransactionStatus::Idle,
                        _ => status,
                    };
                    responses.push(response);
                }
                // The first failure ends the string, as in PostgreSQL: earlier results stand.
                Err(e) if responses.is_empty() => return Err(e),
                Err(e) => {
                    responses.push(Response::Error(Box::new(ErrorInfo::from(e))));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for PgHandler {
    type Statement = Arc<Prepared>;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<StatementParser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Arc<Prepared>>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let status = client.transaction_status();
        match portal.statement.statement.as_ref() {
            Prepared::Command(command) => {
                self.execute(
                    client,
                    command.clone(),
                    status,
                    &portal.result_column_format,
                )
                .await
            }
            Prepared::Query(query) => {
                if status == TransactionStatus::Error {
                    return Err(error(
                        sqlstate::IN_FAILED_SQL_TRANSACTION,
                        "current transaction is aborted, commands ignored until end of \
                         transaction block",
                    ));
                }
                let started = Instant::now();
                let answered = async {
                    let params = bind_parameters(portal, query)?;
                    let session = Session::of(client)?;
                    self.auth
                        .admit_request(&session.caller)
                        .map_err(|e| auth_error(&e))?;
                    self.run_query(
                        &session,
                        query.analysis.clone(),
                        &params,
                        &portal.result_column_format,
                        Some(&query.schema),
                    )
                    .await
                }
                .await;
                observe("extended", started, answered.is_ok());
                answered
            }
        }
    }
}

/// Counts a statement of the `endpoint` protocol and its time to an answer.
fn observe(endpoint: &'static str, started: Instant, ok: bool) {
    let status = if ok { "ok" } else { "error" };
    metrics::counter!("quiver_requests_total", "protocol" => "postgres", "endpoint" => endpoint, "status" => status)
        .increment(1);
    metrics::histogram!("quiver_request_duration_seconds", "protocol" => "postgres", "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_numbered_with_gaps_untyped() {
        let placeholders = vec![
            ("$1".to_string(), Some(DataType::Int64)),
            ("$3".to_string(), Some(DataType::Utf8)),
        ];
        assert_eq!(
            positional_parameters(&placeholders).unwrap(),
            vec![Some(DataType::Int64), None, Some(DataType::Utf8)]
        );
        assert!(positional_parameters(&[("$name".to_string(), None)]).is_err());
        assert!(positional_parameters(&[("$0".to_string(), None)]).is_err());
    }

    #[test]
    fn timestamps_are_floored_to_microseconds() {
        let times = TimestampNanosecondArray::from(vec![2_000_000_123, -1_000_000_123, 999])
            .with_timezone("UTC");
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("time", times.data_type().clone(), false),
        ]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(times)]).unwrap();
        let floored = pg_representable(batch);
        let column = floored
            .column(0)
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .unwrap();
        assert_eq!(
            column.values().as_ref(),
            &[2_000_000_000, -1_000_001_000, 0]
        );
        assert_eq!(column.timezone(), Some("UTC"));
    }

    #[test]
    fn narrow_types_become_what_their_pg_types_hold() {
        let batch = RecordBatch::try_from_iter([
            (
                "tiny",
                Arc::new(arrow::array::Int8Array::from(vec![-128, 127])) as ArrayRef,
            ),
            (
                "half",
                cast(
                    &arrow::array::Float32Array::from(vec![1.5, -2.0]),
                    &DataType::Float16,
                )
                .unwrap(),
            ),
        ])
        .unwrap();
        let converted = pg_representable(batch);
        let tiny = converted
            .column(0)
            .as_primitive::<arrow::datatypes::Int16Type>();
        assert_eq!(tiny.values().as_ref(), &[-128, 127]);
        let half = converted
            .column(1)
            .as_primitive::<arrow::datatypes::Float32Type>();
        assert_eq!(half.values().as_ref(), &[1.5, -2.0]);
    }

    #[test]
    fn format_counts_must_match_columns() {
        assert!(check_format_count(&Format::UnifiedBinary, 3, "columns").is_ok());
        assert!(check_format_count(&Format::Individual(vec![0, 1]), 2, "columns").is_ok());
        assert!(check_format_count(&Format::Individual(vec![0, 1]), 3, "columns").is_err());
        assert_eq!(
            Format::Individual(vec![0, 1]).format_for(1),
            pgwire::api::results::FieldFormat::Binary
        );
    }
}

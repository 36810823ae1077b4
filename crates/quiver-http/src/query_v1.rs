//! InfluxQL over HTTP: InfluxDB 1.x's `GET|POST /query` (what Grafana's InfluxDB data source,
//! `influx` and the 1.x client libraries send), answered in 1.x's shapes, and InfluxDB 3's
//! `/api/v3/query_influxql` (in `query.rs`, with the SQL endpoint's formats).
//!
//! `/query` takes `q` (several statements separated by `;`), `db`, `epoch` (`ns`, `u`, `µ`,
//! `ms`, `s`, `m`, `h`: times as integers in that unit; otherwise RFC 3339), `chunked` and
//! `chunk_size`, `pretty`, and the 1.x credentials `u`/`p` (the token is `p`; see `auth.rs`),
//! from the query string or a form body. The answer is `{"results": [...]}` with one result per
//! statement: its series (rows grouped by measurement and `GROUP BY` tags, `tags` only when
//! grouped by tags), or its error. A parse error anywhere is a 400 for the whole request, as in
//! 1.x; a statement that fails stops the request there (later statements answer "not
//! executed"). With `Accept: application/csv` (or `text/csv`) the answer is 1.x's CSV:
//! `name,tags,time,<columns>` with integer times. Chunked answers are JSON documents, one per
//! line, of at most `chunk_size` rows, with 1.x's `partial` flags.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit, TimestampNanosecondType};
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures::TryStreamExt;
use quiver_auth::Caller;
use quiver_influxql::ast::Statement;
use quiver_influxql::plan::{MEASUREMENT_COLUMN, ROLE_METADATA_KEY, TAG_ROLE};
use quiver_query::{QueryControl, QueryProtocol};
use quiver_service::{AnswerBody, QueryInvocation, Verdict};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::query::CACHE_HEADER;
use crate::AppState;

/// Most Arrow bytes of one statement's answer `/query` holds while it builds 1.x's series
/// (they are grouped and encoded whole); past it the statement answers an error.
const MAX_STATEMENT_ANSWER_BYTES: usize = 256 << 20;

/// `chunk_size` when a chunked request names none (1.x's default).
const DEFAULT_CHUNK_SIZE: usize = 10_000;

/// How times are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Epoch {
    /// RFC 3339 strings (JSON), nanoseconds (CSV).
    Rfc3339,
    /// Integers in units of this many nanoseconds.
    Units(i64),
}

impl Epoch {
    fn parse(value: Option<&str>) -> Self {
        match value {
            None | Some("") => Epoch::Rfc3339,
            Some("u") | Some("µ") => Epoch::Units(1_000),
            Some("ms") => Epoch::Units(1_000_000),
            Some("s") => Epoch::Units(1_000_000_000),
            Some("m") => Epoch::Units(60_000_000_000),
            Some("h") => Epoch::Units(3_600_000_000_000),
            // `ns` and anything 1.x does not know: nanoseconds
            Some(_) => Epoch::Units(1),
        }
    }
}

/// The parameters of a `/query` request, from its query string and form body.
struct V1Request {
    db: String,
    q: Option<String>,
    epoch: Epoch,
    chunked: Option<usize>,
    pretty: bool,
    csv: bool,
}

impl V1Request {
    fn from_params(params: &HashMap<String, String>, headers: &HeaderMap) -> Self {
        let flag = |name: &str| params.get(name).is_some_and(|v| v == "true");
        let chunk_size = params
            .get("chunk_size")
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_CHUNK_SIZE);
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        V1Request {
            db: params.get("db").cloned().unwrap_or_default(),
            q: params.get("q").cloned().filter(|q| !q.trim().is_empty()),
            epoch: Epoch::parse(params.get("epoch").map(String::as_str)),
            chunked: flag("chunked").then_some(chunk_size),
            pretty: flag("pretty"),
            csv: accept.contains("application/csv") || accept.contains("text/csv"),
        }
    }
}

/// `GET|POST /query`: InfluxQL in InfluxDB 1.x's shapes.
pub async fn query_v1(
    State(app): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    method: Method,
    Query(mut params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if method == Method::POST {
        match form_params(&app, &headers, body).await {
            Ok(form) => params.extend(form),
            Err(e) => return e.into_response(),
        }
    }
    let request = V1Request::from_params(&params, &headers);
    let Some(text) = request.q.as_deref() else {
        return v1_error(&request, "missing required parameter \"q\"");
    };
    let statements = match app.queries.parse_influxql(text) {
        Ok(statements) => statements,
        Err(e) => return v1_error(&request, &format!("error parsing query: {e}")),
    };
    let control = QueryControl {
        protocol: QueryProtocol::Http,
        timeout: None,
        timeout_setting: "query_timeout_secs",
        grants: caller.read_grants(),
        skip_rollups: false,
        distributed: None,
    };
    let mut verdicts = Vec::new();
    let mut results = Vec::new();
    let mut failed = false;
    for (id, statement) in statements.into_iter().enumerate() {
        if failed {
            results.push(StatementResult::error(id, "not executed".into()));
            continue;
        }
        let chunked = matches!(statement, Statement::Select(_));
        let how = (&control, crate::query::asks_no_cache(&headers));
        match run_statement(&app, &caller, how, &request.db, statement).await {
            Ok((verdict, rows)) => {
                verdicts.push(verdict.as_str());
                results.push(StatementResult {
                    id,
                    rows: Ok(rows),
                    chunked,
                });
            }
            Err(message) => {
                failed = true;
                results.push(StatementResult::error(id, message));
            }
        }
    }
    let (content_type, body) = match (request.csv, request.chunked) {
        (true, _) => ("text/csv", csv_body(&results, request.epoch)),
        (false, Some(chunk_size)) => (
            "application/json",
            chunked_body(&results, &request, chunk_size),
        ),
        (false, None) => ("application/json", json_body(&results, &request)),
    };
    let mut response =
        (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response();
    if let Ok(value) = HeaderValue::from_str(&verdicts.join(", ")) {
        if !verdicts.is_empty() {
            response.headers_mut().insert(CACHE_HEADER, value);
        }
    }
    response
}

/// The parameters of a form body (`application/x-www-form-urlencoded`), as 1.x clients send
/// `q` in a POST.
async fn form_params(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<(String, String)>, ApiError> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let bytes = crate::body::read_body(headers, body, app.limits.max_request_bytes).await?;
    if !is_form || bytes.is_empty() {
        return Ok(Vec::new());
    }
    serde_urlencoded::from_bytes(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the form body is not URL-encoded: {e}")))
}

/// A 400 for the whole request, in 1.x's shape (JSON or CSV) with `X-Influxdb-Error`.
fn v1_error(request: &V1Request, message: &str) -> Response {
    let (content_type, body) = match request.csv {
        true => ("text/csv", format!("error\n{}\n", csv_field(message))),
        false => (
            "application/json",
            format!("{}\n", serde_json::json!({ "error": message })),
        ),
    };
    let mut response = (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, content_type)],
        body,
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(message) {
        response.headers_mut().insert("x-influxdb-error", value);
    }
    response
}

/// Runs one statement to completion: its verdict and rows, or the error message 1.x would
/// give (`database name required`, `database not found: x`, ...).
async fn run_statement(
    app: &AppState,
    caller: &Caller,
    (control, no_cache): (&QueryControl, bool),
    database: &str,
    statement: Statement,
) -> Result<(Verdict, Rows), String> {
    let how = QueryInvocation {
        scope: caller.scope(),
        no_cache,
        control,
    };
    let answer = app
        .queries
        .query_influxql(database, statement, how)
        .await
        .map_err(statement_error)?;
    let (schema, batches) = match answer.body {
        AnswerBody::Cached(cached) => (
            cached.result().schema().clone(),
            cached.result().batches().to_vec(),
        ),
        AnswerBody::Streamed(mut output) => {
            let mut batches: Vec<RecordBatch> = Vec::new();
            let mut bytes = 0;
            while let Some(batch) = output
                .stream
                .try_next()
                .await
                .map_err(|e| statement_error(Arc::new(quiver_query::QueryError::from(e))))?
            {
                bytes += batch.get_array_memory_size();
                if bytes > MAX_STATEMENT_ANSWER_BYTES {
                    return Err(format!(
                        "the answer is larger than {} MiB, the most /query holds for one \
                         statement: narrow the time range, add LIMIT, or use \
                         /api/v3/query_influxql, which streams",
                        MAX_STATEMENT_ANSWER_BYTES >> 20
                    ));
                }
                batches.push(batch);
            }
            (output.schema, batches)
        }
    };
    Ok((
        answer.verdict,
        Rows::new(schema, batches).map_err(|e| e.to_string())?,
    ))
}

/// A query error as 1.x words the common ones.
fn statement_error(error: Arc<quiver_query::QueryError>) -> String {
    use quiver_query::QueryError;
    match error.as_ref() {
        QueryError::DatabaseNotFound(db) => format!("database not found: {db}"),
        QueryError::Invalid(e) => e.message().to_string(),
        _ => ApiError::from(error).message(),
    }
}

/// One statement's outcome.
struct StatementResult {
    id: usize,
    rows: Result<Rows, String>,
    /// Whether a chunked answer splits it (a `SELECT`; 1.x sends `SHOW` answers whole).
    chunked: bool,
}

impl StatementResult {
    fn error(id: usize, message: String) -> Self {
        StatementResult {
            id,
            rows: Err(message),
            chunked: false,
        }
    }
}

/// A statement's answer, read as series: which columns name the series, which are values.
struct Rows {
    batches: Vec<RecordBatch>,
    measurement: Option<usize>,
    tags: Vec<(String, usize)>,
    values: Vec<(String, usize)>,
}

impl Rows {
    fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<Self, arrow::error::ArrowError> {
        let mut measurement = None;
        let mut tags = Vec::new();
        let mut values = Vec::new();
        for (i, field) in schema.fields().iter().enumerate() {
            if field.name() == MEASUREMENT_COLUMN {
                measurement = Some(i);
            } else if field.metadata().get(ROLE_METADATA_KEY).map(String::as_str) == Some(TAG_ROLE)
            {
                tags.push((field.name().clone(), i));
            } else {
                values.push((field.name().clone(), i));
            }
        }
        let batches = batches
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| plain_columns(&b))
            .collect::<Result<_, _>>()?;
        Ok(Rows {
            batches,
            measurement,
            tags,
            values,
        })
    }

    fn column_names(&self) -> Vec<String> {
        self.values.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The rows as series, in order.
    fn series(&self, epoch: Epoch, csv: bool) -> Vec<Series> {
        let mut all: Vec<Series> = Vec::new();
        for batch in &self.batches {
            for row in 0..batch.num_rows() {
                let name = self
                    .measurement
                    .map(|i| text(batch.column(i), row))
                    .unwrap_or_default();
                let tags: Vec<(String, String)> = self
                    .tags
                    .iter()
                    .map(|(n, i)| (n.clone(), text(batch.column(*i), row)))
                    .collect();
                let values: Vec<Value> = self
                    .values
                    .iter()
                    .map(|(_, i)| json_value(batch.column(*i), row, epoch, csv))
                    .collect();
                match all.last_mut() {
                    Some(last) if last.name == name && last.tags == tags => {
                        last.values.push(values)
                    }
                    _ => all.push(Series {
                        name,
                        grouped: !self.tags.is_empty(),
                        tags,
                        values: vec![values],
                    }),
                }
            }
        }
        all
    }
}

/// Dictionary columns as plain strings (what the JSON and CSV writers read).
fn plain_columns(batch: &RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Dictionary(_, _) | DataType::LargeUtf8 | DataType::Utf8View => {
                arrow::compute::cast(c, &DataType::Utf8)
            }
            _ => Ok(c.clone()),
        })
        .collect::<Result<_, _>>()?;
    let fields: Vec<arrow::datatypes::FieldRef> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| Arc::new(f.as_ref().clone().with_data_type(c.data_type().clone())))
        .collect();
    RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns)
}

fn text(column: &ArrayRef, row: usize) -> String {
    if column.is_null(row) {
        return String::new();
    }
    match column.data_type() {
        DataType::Utf8 => column.as_string::<i32>().value(row).to_string(),
        _ => arrow::util::display::array_value_to_string(column, row).unwrap_or_default(),
    }
}

/// One cell as 1.x writes it: times as RFC 3339 or integers, whole floats without a
/// fraction (as Go prints them), NaN and infinities as null.
fn json_value(column: &ArrayRef, row: usize, epoch: Epoch, csv: bool) -> Value {
    if column.is_null(row) {
        return Value::Null;
    }
    match column.data_type() {
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            let ns = column.as_primitive::<TimestampNanosecondType>().value(row);
            match (epoch, csv) {
                (Epoch::Units(unit), _) => Value::from(ns / unit),
                (Epoch::Rfc3339, true) => Value::from(ns),
                (Epoch::Rfc3339, false) => Value::String(rfc3339(ns)),
            }
        }
        DataType::Float64 => float(
            column
                .as_primitive::<arrow::datatypes::Float64Type>()
                .value(row),
        ),
        DataType::Int64 => Value::from(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt64 => Value::from(
            column
                .as_primitive::<arrow::datatypes::UInt64Type>()
                .value(row),
        ),
        DataType::Boolean => Value::Bool(column.as_boolean().value(row)),
        DataType::Utf8 => Value::String(column.as_string::<i32>().value(row).to_string()),
        DataType::Null => Value::Null,
        _ => Value::String(
            arrow::util::display::array_value_to_string(column, row).unwrap_or_default(),
        ),
    }
}

fn float(f: f64) -> Value {
    if !f.is_finite() {
        return Value::Null;
    }
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        return Value::from(f as i64);
    }
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Go's RFC 3339 with nanoseconds: UTC, `Z`, the fraction without trailing zeros.
fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000) as u32;
    let Some(time) = chrono::DateTime::from_timestamp(secs, nanos) else {
        return ns.to_string();
    };
    let mut out = time.format("%Y-%m-%dT%H:%M:%S").to_string();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// A series of a result: its name, tags (when grouped by tags) and rows.
struct Series {
    name: String,
    grouped: bool,
    tags: Vec<(String, String)>,
    values: Vec<Vec<Value>>,
}

impl Series {
    fn to_json(&self, columns: &[String], rows: std::ops::Range<usize>, partial: bool) -> Value {
        let mut series = Map::new();
        if !self.name.is_empty() {
            series.insert("name".into(), Value::String(self.name.clone()));
        }
        if self.grouped {
            let tags: Map<String, Value> = self
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            series.insert("tags".into(), Value::Object(tags));
        }
        series.insert(
            "columns".into(),
            Value::Array(columns.iter().cloned().map(Value::String).collect()),
        );
        series.insert(
            "values".into(),
            Value::Array(
                self.values[rows]
                    .iter()
                    .map(|r| Value::Array(r.clone()))
                    .collect(),
            ),
        );
        if partial {
            series.insert("partial".into(), Value::Bool(true));
        }
        Value::Object(series)
    }
}

/// A result in 1.x's key order: `statement_id`, `series`, `error`, `partial` (the
/// `preserve_order` feature of `serde_json` keeps insertion order).
fn result_json(id: usize, series: Vec<Value>, error: Option<&str>, partial: bool) -> Value {
    let mut result = Map::new();
    result.insert("statement_id".into(), Value::from(id));
    if !series.is_empty() {
        result.insert("series".into(), Value::Array(series));
    }
    if let Some(error) = error {
        result.insert("error".into(), Value::String(error.to_string()));
    }
    if partial {
        result.insert("partial".into(), Value::Bool(true));
    }
    Value::Object(result)
}

fn document(results: Vec<Value>, pretty: bool) -> String {
    let document = serde_json::json!({ "results": results });
    let mut out = match pretty {
        true => {
            let mut buffer = Vec::new();
            let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut serializer = serde_json::Serializer::with_formatter(&mut buffer, formatter);
            let _ = serde::Serialize::serialize(&document, &mut serializer);
            String::from_utf8(buffer).unwrap_or_default()
        }
        false => document.to_string(),
    };
    out.push('\n');
    out
}

/// A statement's whole result: its series, or its error.
fn whole_result(result: &StatementResult, epoch: Epoch) -> Value {
    match &result.rows {
        Err(message) => result_json(result.id, vec![], Some(message), false),
        Ok(rows) => {
            let columns = rows.column_names();
            let series = rows
                .series(epoch, false)
                .iter()
                .map(|s| s.to_json(&columns, 0..s.values.len(), false))
                .collect();
            result_json(result.id, series, None, false)
        }
    }
}

fn json_body(results: &[StatementResult], request: &V1Request) -> String {
    let results = results
        .iter()
        .map(|result| whole_result(result, request.epoch))
        .collect();
    document(results, request.pretty)
}

/// One JSON document per chunk: at most `chunk_size` rows of one series (a series longer
/// than that spans several, `partial` on all but its last); `partial` on the result while
/// more chunks of the statement follow.
fn chunked_body(results: &[StatementResult], request: &V1Request, chunk_size: usize) -> String {
    let mut out = String::new();
    for result in results {
        let rows = match &result.rows {
            Ok(rows) if result.chunked => rows,
            _ => {
                let whole = whole_result(result, request.epoch);
                out.push_str(&document(vec![whole], request.pretty));
                continue;
            }
        };
        let columns = rows.column_names();
        let series = rows.series(request.epoch, false);
        let mut pieces: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        for (i, s) in series.iter().enumerate() {
            let mut start = 0;
            while start < s.values.len() {
                let end = start.saturating_add(chunk_size).min(s.values.len());
                pieces.push((i, start..end));
                start = end;
            }
        }
        if pieces.is_empty() {
            out.push_str(&document(
                vec![result_json(result.id, vec![], None, false)],
                request.pretty,
            ));
        }
        let last = pieces.len().saturating_sub(1);
        for (n, (i, rows)) in pieces.into_iter().enumerate() {
            let s = &series[i];
            let series_partial = rows.end < s.values.len();
            let piece = s.to_json(&columns, rows, series_partial);
            out.push_str(&document(
                vec![result_json(result.id, vec![piece], None, n < last)],
                request.pretty,
            ));
        }
    }
    out
}

/// 1.x's CSV: `name,tags,time,<columns>` per statement (a blank line between statements),
/// times as integers; an error or an empty result writes nothing.
fn csv_body(results: &[StatementResult], epoch: Epoch) -> String {
    let mut out = String::new();
    for result in results {
        let Ok(rows) = &result.rows else { continue };
        let series = rows.series(epoch, true);
        if series.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        let header: Vec<String> = ["name".to_string(), "tags".to_string()]
            .into_iter()
            .chain(rows.column_names())
            .map(|c| csv_field(&c))
            .collect();
        out.push_str(&header.join(","));
        out.push('\n');
        for s in &series {
            let tags: Vec<String> = s.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            for row in &s.values {
                let mut cells = vec![csv_field(&s.name), csv_field(&tags.join(","))];
                cells.extend(row.iter().map(|v| match v {
                    Value::Null => String::new(),
                    Value::String(s) => csv_field(s),
                    other => other.to_string(),
                }));
                out.push_str(&cells.join(","));
                out.push('\n');
            }
        }
    }
    out
}

fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_string()
    }
}

/// Parses `/api/v3/query_influxql`'s statement: exactly one.
pub(crate) fn single_statement(app: &AppState, text: &str) -> Result<Statement, ApiError> {
    let mut statements = app
        .queries
        .parse_influxql(text)
        .map_err(|e| ApiError::bad_request(format!("error parsing query: {e}")))?;
    match statements.len() {
        1 => Ok(statements.remove(0)),
        n => Err(ApiError::bad_request(format!(
            "one InfluxQL statement per request, not {n} (InfluxDB 1.x's /query takes several)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_go_prints_them() {
        assert_eq!(rfc3339(1_600_000_000_000_000_000), "2020-09-13T12:26:40Z");
        assert_eq!(rfc3339(1_600_000_000_500_000_000), "2020-09-13T12:26:40.5Z");
        assert_eq!(rfc3339(1), "1970-01-01T00:00:00.000000001Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn whole_floats_print_without_a_fraction() {
        assert_eq!(float(3.0).to_string(), "3");
        assert_eq!(float(26.666666666666668).to_string(), "26.666666666666668");
        assert_eq!(float(f64::NAN), Value::Null);
        assert_eq!(Epoch::parse(Some("ms")), Epoch::Units(1_000_000));
        assert_eq!(Epoch::parse(Some("bogus")), Epoch::Units(1));
        assert_eq!(Epoch::parse(None), Epoch::Rfc3339);
    }

    #[test]
    fn csv_fields_are_quoted_when_they_must_be() {
        assert_eq!(csv_field("a"), "a");
        assert_eq!(csv_field("host=a,region=eu"), "\"host=a,region=eu\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}

//! Runs the sqllogictest corpus in `tests/slt/*.slt` (repository root) against Quiver's SQL
//! surface: a durable store in a temporary directory, the engine, and the result cache in
//! front of it, as every protocol uses them.
//!
//! Besides SQL, a `statement` record may hold one of these commands (see `tests/slt/README.md`):
//! - `write_lp <database>` and line protocol on the following lines (nanosecond timestamps):
//!   written and acknowledged; a rejected line or refused write is the statement's error, and
//!   then none of its lines is written (as `accept_partial=false` over HTTP; the HTTP API's
//!   own rules are tested in `tests/python/test_http_api.py`);
//! - `persist`: the write buffer persisted to Parquet now;
//! - `restart`: the store closed and opened again on the same directory (WAL replay);
//! - `use <database>`: later SQL runs in that database (`db` at first).
//!
//! Every query runs twice through the result cache and once afresh: a cacheable query must
//! miss and then hit, and the cache's answer must equal the fresh one, so the corpus checks
//! the cache as well as the engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use futures::TryStreamExt;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;
use quiver_model::AccessScope;
use quiver_query::{QueryEngine, QueryOptions};
use quiver_service::{AnswerBody, CacheConfig, QueryRequest, QueryService, Verdict};
use quiver_storage::{Durability, Store, StoreLimits, StoreOptions};
use sqllogictest::{DBOutput, DefaultColumnType};

/// Why a record failed: the message a `statement error` / `query error` pattern matches.
#[derive(Debug)]
struct SltError(String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SltError {}

fn failed(e: impl std::fmt::Display) -> SltError {
    SltError(e.to_string())
}

/// The store, engine and cache one `.slt` file runs against.
struct Quiver {
    dir: tempfile::TempDir,
    store: Arc<Store>,
    queries: Arc<QueryService>,
    database: String,
}

impl Quiver {
    fn new() -> Result<Quiver, SltError> {
        let dir = tempfile::tempdir().map_err(failed)?;
        let (store, queries) = open(dir.path())?;
        Ok(Quiver {
            dir,
            store,
            queries,
            database: "db".into(),
        })
    }

    async fn write_lp(&self, database: &str, lines: &str) -> Result<(), SltError> {
        let options = DecodeOptions::for_tests();
        let decoded = match self.store.database(database) {
            Some(db) => decode_line_protocol(lines.as_bytes(), &options, db.as_ref()),
            None => decode_line_protocol(lines.as_bytes(), &options, &NoExistingTables),
        };
        if let Some(error) = decoded.errors.first() {
            return Err(SltError(format!(
                "line {}: {}",
                error.line_number, error.message
            )));
        }
        self.store
            .write(database, decoded.tables, Durability::NoSync)
            .await
            .map_err(failed)?;
        Ok(())
    }

    fn restart(&mut self) -> Result<(), SltError> {
        self.store.close();
        let (store, queries) = open(self.dir.path())?;
        self.store = store;
        self.queries = queries;
        Ok(())
    }

    /// Runs `sql` through the cache twice, then afresh (`no_cache`): a cacheable query must
    /// miss and then hit, and what the cache answered must equal the fresh execution's rows,
    /// which are the rows the record is checked against.
    async fn query(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let request = QueryRequest {
            database: self.database.clone(),
            sql: sql.to_string(),
            scope: AccessScope::Everything,
            ..QueryRequest::default()
        };
        let (_, first_verdict) = self.answer(&request).await?;
        let (cached, second_verdict) = self.answer(&request).await?;
        if first_verdict == Verdict::Miss && second_verdict != Verdict::Hit {
            return Err(SltError(format!(
                "a cacheable query was not served from the cache the second time: {second_verdict:?}"
            )));
        }
        let fresh_request = QueryRequest {
            no_cache: true,
            control: Default::default(),
            ..request
        };
        let (fresh, _) = self.answer(&fresh_request).await?;
        if cached.1 != fresh.1 {
            return Err(SltError(format!(
                "the answer through the cache ({second_verdict:?}) differs from a fresh execution: {:?} vs {:?}",
                cached.1, fresh.1
            )));
        }
        Ok(DBOutput::Rows {
            types: fresh.0,
            rows: fresh.1,
        })
    }

    /// The answer's column types and rows, and how it was answered.
    async fn answer(&self, request: &QueryRequest) -> Result<(TypedRows, Verdict), SltError> {
        let answer = self.queries.query(request).await.map_err(failed)?;
        let verdict = answer.verdict;
        let (schema, batches) = match answer.body {
            AnswerBody::Cached(cached) => (
                cached.result().schema().clone(),
                cached.result().batches().to_vec(),
            ),
            AnswerBody::Streamed(output) => {
                let batches: Vec<RecordBatch> =
                    output.stream.try_collect().await.map_err(failed)?;
                (output.schema, batches)
            }
        };
        Ok(((column_types(&schema), rows(&batches)?), verdict))
    }
}

/// Column types and rows as text, as sqllogictest compares them.
type TypedRows = (Vec<DefaultColumnType>, Vec<Vec<String>>);

#[async_trait]
impl sqllogictest::AsyncDB for Quiver {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let (first_line, rest) = sql.split_once('\n').unwrap_or((sql, ""));
        let words: Vec<&str> = first_line.split_whitespace().collect();
        match words.as_slice() {
            ["write_lp", database] => {
                self.write_lp(database, rest).await?;
                Ok(DBOutput::StatementComplete(0))
            }
            ["persist"] => {
                self.store.persist_now().map_err(failed)?;
                Ok(DBOutput::StatementComplete(0))
            }
            ["restart"] => {
                self.restart()?;
                Ok(DBOutput::StatementComplete(0))
            }
            ["use", database] => {
                self.database = database.to_string();
                Ok(DBOutput::StatementComplete(0))
            }
            _ => self.query(sql).await,
        }
    }

    async fn shutdown(&mut self) {
        self.store.close();
    }

    fn engine_name(&self) -> &str {
        "quiver"
    }

    async fn sleep(duration: std::time::Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// A store on `dir` (persisting only when told), an engine and a cache over it.
fn open(dir: &Path) -> Result<(Arc<Store>, Arc<QueryService>), SltError> {
    let (store, _) =
        Store::open(StoreLimits::default(), StoreOptions::for_tests(dir)).map_err(failed)?;
    let options = QueryOptions {
        target_partitions: 2,
        ..QueryOptions::default()
    };
    let engine = Arc::new(QueryEngine::new(store.clone(), options).map_err(failed)?);
    Ok((store, QueryService::new(engine, CacheConfig::for_tests())))
}

/// `I` for integers, `R` for floating point and decimals, `T` for everything else.
fn column_types(schema: &SchemaRef) -> Vec<DefaultColumnType> {
    schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            t if t.is_integer() => DefaultColumnType::Integer,
            t if t.is_floating() => DefaultColumnType::FloatingPoint,
            DataType::Decimal128(..) | DataType::Decimal256(..) => DefaultColumnType::FloatingPoint,
            _ => DefaultColumnType::Text,
        })
        .collect()
}

/// Every row as text: `NULL` for nulls, `(empty)` for empty strings (a blank would vanish
/// in the file's whitespace-separated rows).
fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, SltError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| match f.value(row).to_string() {
                        empty if empty.is_empty() => "(empty)".to_string(),
                        value => value,
                    })
                    .collect(),
            );
        }
    }
    Ok(rows)
}

/// The corpus files, in name order (only those whose name contains `$QUIVER_SLT`, if set).
fn corpus() -> Vec<PathBuf> {
    let only = std::env::var("QUIVER_SLT").unwrap_or_default();
    // read when the test runs (cargo sets it then too): a binary compiled in another
    // checkout and reused from a shared target directory would otherwise look there
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let dir = Path::new(&crate_dir).join("../../tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "slt"))
        .filter(|path| path.to_string_lossy().contains(&only))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_corpus_passes() {
    let files = corpus();
    assert!(!files.is_empty(), "no corpus files matched");
    let mut failures = Vec::new();
    for file in &files {
        let mut runner = sqllogictest::Runner::new(|| async { Quiver::new() });
        runner.with_column_validator(sqllogictest::strict_column_validator);
        if let Err(e) = runner.run_file_async(file).await {
            failures.push(format!("{}:\n{}", file.display(), e.display(false)));
        }
        eprintln!("ran {}", file.display());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

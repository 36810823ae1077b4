//! A durable store in a temporary directory, an engine and a result cache over it, and helpers
//! to write line protocol and read answers as comparable text.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::TryStreamExt;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;
use quiver_model::AccessScope;
use quiver_query::{QueryEngine, QueryOptions, QueryParams, SessionSetup};
use quiver_service::{AnswerBody, CacheConfig, QueryRequest, QueryService, Verdict};
use quiver_storage::{Durability, Store, StoreLimits, StoreOptions};

/// xorshift64*: deterministic, seedable, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed from `QUIVER_TEST_SEED`, or a fresh one (printed, so a failure can be replayed).
pub fn seed() -> u64 {
    let seed = std::env::var("QUIVER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("QUIVER_TEST_SEED={seed}");
    seed
}

/// A store, its engine and the cache in front of it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub store: Arc<Store>,
    pub engine: Arc<QueryEngine>,
    pub service: Arc<QueryService>,
}

impl Fixture {
    pub fn new(config: CacheConfig) -> Fixture {
        Fixture::with_setup(config, Vec::new())
    }

    /// A fixture whose SQL sessions are extended by `session_setup` (extra functions).
    pub fn with_setup(config: CacheConfig, session_setup: Vec<Arc<dyn SessionSetup>>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut options = StoreOptions::for_tests(dir.path());
        options.wal.segment_bytes = 1 << 20;
        let (store, _) = Store::open(StoreLimits::default(), options).unwrap();
        let engine = Arc::new(
            QueryEngine::new(
                store.clone(),
                QueryOptions {
                    target_partitions: 2,
                    session_setup,
                    ..QueryOptions::default()
                },
            )
            .unwrap(),
        );
        let service = QueryService::new(engine.clone(), config);
        Fixture {
            dir,
            store,
            engine,
            service,
        }
    }

    /// Writes line protocol (nanosecond timestamps) to database `db`; returns once acknowledged.
    pub async fn write(&self, lp: &str) {
        let options = DecodeOptions::for_tests();
        let decoded = match self.store.database("db") {
            Some(db) => decode_line_protocol(lp.as_bytes(), &options, db.as_ref()),
            None => decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables),
        };
        assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
        self.store
            .write("db", decoded.tables, Durability::NoSync)
            .await
            .unwrap();
    }

    /// Runs `sql` through the cache as `scope`; returns the verdict and the rows as text.
    pub async fn cached(&self, sql: &str, scope: &str) -> (Verdict, Vec<String>) {
        self.cached_with(QueryRequest {
            database: "db".into(),
            sql: sql.into(),
            scope: AccessScope::grants(scope),
            ..QueryRequest::default()
        })
        .await
    }

    /// Runs `request` through the cache; returns the verdict and the rows as text.
    pub async fn cached_with(&self, request: QueryRequest) -> (Verdict, Vec<String>) {
        let sql = request.sql.clone();
        self.try_cached(request)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `request` through the cache; the verdict and rows, or the error message.
    pub async fn try_cached(
        &self,
        request: QueryRequest,
    ) -> Result<(Verdict, Vec<String>), String> {
        let (verdict, schema, batches) = self.try_cached_batches(request).await?;
        Ok((verdict, rows_text(&schema, &batches)))
    }

    /// Runs `request` through the cache; the verdict and the answer's batches in order, or the
    /// error message.
    pub async fn try_cached_batches(
        &self,
        request: QueryRequest,
    ) -> Result<(Verdict, SchemaRef, Vec<RecordBatch>), String> {
        let answer = self
            .service
            .query(&request)
            .await
            .map_err(|e| e.to_string())?;
        let (schema, batches) = match answer.body {
            AnswerBody::Cached(cached) => (
                cached.result().schema().clone(),
                cached.result().batches().to_vec(),
            ),
            AnswerBody::Streamed(output) => {
                let batches: Vec<RecordBatch> = output
                    .stream
                    .try_collect()
                    .await
                    .map_err(|e| e.to_string())?;
                (output.schema, batches)
            }
        };
        Ok((answer.verdict, schema, batches))
    }

    /// Runs `sql` on the engine directly, without the cache.
    pub async fn uncached(&self, sql: &str, params: &QueryParams) -> Vec<String> {
        self.try_uncached(sql, params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs `sql` on the engine directly; the rows, or the error message.
    pub async fn try_uncached(
        &self,
        sql: &str,
        params: &QueryParams,
    ) -> Result<Vec<String>, String> {
        let (schema, batches) = self.try_uncached_batches(sql, params).await?;
        Ok(rows_text(&schema, &batches))
    }

    /// Runs `sql` on the engine directly; the answer's batches in order, or the error message.
    pub async fn try_uncached_batches(
        &self,
        sql: &str,
        params: &QueryParams,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), String> {
        let analysis = self.engine.analyze("db", sql).map_err(|e| e.to_string())?;
        let options = quiver_query::ExecuteOptions {
            params: params.clone(),
            ..Default::default()
        };
        let output = self
            .engine
            .execute_analyzed(&analysis, &options)
            .await
            .map_err(|e| e.to_string())?;
        let batches: Vec<RecordBatch> = output
            .stream
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok((output.schema, batches))
    }
}

/// A header line naming the columns and their types (so a schema difference is a difference
/// too), then every row as text, sorted (so partitioning cannot change the comparison).
pub fn rows_text(schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<String> {
    let mut lines = rows_in_order(schema, batches);
    lines[1..].sort();
    lines
}

/// The header line, then every row as text, in the answer's order.
pub fn rows_in_order(schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<String> {
    let mut lines = Vec::new();
    let options = FormatOptions::default().with_null("NULL");
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            lines.push(cells.join(" "));
        }
    }
    let header: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    lines.insert(0, header.join(","));
    lines
}

#![allow(dead_code)] // each test binary uses a part of it
//! What the query crate's integration tests share: a seedable random number generator and
//! answers as sorted text rows.

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::TryStreamExt;
use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
use quiver_model::schema::NoExistingTables;
use quiver_query::{ExecuteOptions, QueryEngine};
use quiver_storage::{Durability, Store};

/// Writes line protocol (which must be accepted) to database `db`, durably.
pub async fn write(store: &Store, lp: &str) {
    let options = DecodeOptions::for_tests();
    let decoded = match store.database("db") {
        Some(db) => decode_line_protocol(lp.as_bytes(), &options, db.as_ref()),
        None => decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables),
    };
    assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
    store
        .write("db", decoded.tables, Durability::Sync)
        .await
        .unwrap();
}

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

/// The query's rows as sorted strings (so partitioning cannot change the comparison),
/// or the error message.
pub async fn rows(engine: &QueryEngine, sql: &str) -> Result<Vec<String>, String> {
    rows_with(engine, sql, &ExecuteOptions::default()).await
}

/// The rows of `sql` in database `db` run with `options`, as [`rows`] gives them.
pub async fn rows_with(
    engine: &QueryEngine,
    sql: &str,
    options: &ExecuteOptions,
) -> Result<Vec<String>, String> {
    let analysis = engine.analyze("db", sql).map_err(|e| e.to_string())?;
    let output = engine
        .execute_analyzed(&analysis, options)
        .await
        .map_err(|e| e.to_string())?;
    let batches: Vec<RecordBatch> = output
        .stream
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let options = FormatOptions::default().with_null("NULL");
    for batch in &batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .zip(batch.schema().fields())
                .map(|(f, field)| format!("{}={}", field.name(), f.value(row)))
                .collect();
            lines.push(cells.join(" "));
        }
    }
    lines.sort();
    Ok(lines)
}

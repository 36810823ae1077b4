//! InfluxDB 3's cache functions in SQL: `last_cache('table'[, 'name'])` and
//! `distinct_cache('table'[, 'name'])`, in the `FROM` clause.
//!
//! Quiver keeps no second copy of the values: each function is a view over the table that
//! its shortcuts answer from what storage keeps anyway. `last_cache` is `DISTINCT ON` the key
//! columns ordered by time (each series' newest row, [`crate::latest`]) for a count of one,
//! and the newest `count` rows per key by `row_number()` otherwise; `distinct_cache` is
//! `SELECT DISTINCT` of its columns (each series' newest row again, for tags), at most
//! `max_cardinality` combinations. Both see only rows newer than the cache's age limit. A
//! table without a configured cache gets InfluxDB 3's defaults: its tags as keys (or
//! columns), every other column as values, a count of one, four hours (last) or a day
//! (distinct), 100,000 combinations. Statements calling them are never result-cached (their
//! rows change with every write and with the clock).

use std::sync::Arc;

use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::datasource::{provider_as_source, ViewTable};
use datafusion::error::{DataFusionError, Result};
use datafusion::functions::datetime::expr_fn::now;
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::{col, lit, Expr, ExprFunctionExt, LogicalPlanBuilder};
use quiver_model::schema::{ColumnType, TIME_COLUMN};
use quiver_storage::{Store, ValueCache, ValueCacheKind};

use crate::provider::QuiverTable;

/// The SQL names of the cache functions.
pub(crate) const VALUE_CACHE_FUNCTIONS: [&str; 2] = ["last_cache", "distinct_cache"];

/// `last_cache(...)` or `distinct_cache(...)` over the tables of one database.
pub(crate) struct ValueCacheFunction {
    store: Arc<Store>,
    database: String,
    /// `last` or `distinct`.
    kind: &'static str,
}

impl ValueCacheFunction {
    /// Both functions for `database`, with their SQL names.
    pub(crate) fn both(store: &Arc<Store>, database: &str) -> [(&'static str, Arc<Self>); 2] {
        let function = |kind| {
            Arc::new(ValueCacheFunction {
                store: store.clone(),
                database: database.to_string(),
                kind,
            })
        };
        [
            (VALUE_CACHE_FUNCTIONS[0], function("last")),
            (VALUE_CACHE_FUNCTIONS[1], function("distinct")),
        ]
    }

    /// The configured cache, or InfluxDB 3's defaults for the table.
    fn settings(
        &self,
        table: &str,
        name: Option<&str>,
        columns: &[(String, ColumnType)],
    ) -> Result<ValueCacheKind> {
        let found = self
            .store
            .value_caches()
            .find(self.kind, &self.database, table, name)
            .map_err(|e| DataFusionError::Plan(e.to_string()))?;
        if let Some(ValueCache { kind, .. }) = found {
            return Ok(kind);
        }
        if let Some(name) = name {
            return plan_err!("table {table:?} has no {} cache named {name:?}", self.kind);
        }
        Ok(match self.kind {
            "last" => ValueCacheKind::last(columns, None, None, None, None),
            _ => ValueCacheKind::distinct(columns, None, None, None),
        })
    }
}

/// A string literal argument.
fn text(arg: &Expr) -> Option<&str> {
    match arg {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s),
        _ => None,
    }
}

impl std::fmt::Debug for ValueCacheFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_cache({})", self.kind, self.database)
    }
}

/// `now() - <seconds>`.
fn newer_than(seconds: u64) -> Expr {
    let nanos = i64::try_from(seconds)
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .unwrap_or(i64::MAX);
    col(TIME_COLUMN).gt_eq(now() - lit(ScalarValue::new_interval_mdn(0, 0, nanos)))
}

impl TableFunctionImpl for ValueCacheFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{}_cache takes a table name and, optionally, a cache name: {}_cache('cpu'[, 'name'])",
                self.kind, self.kind
            ))
        };
        let (table_name, name) = match args {
            [table] => (text(table).ok_or_else(usage)?, None),
            [table, name] => (
                text(table).ok_or_else(usage)?,
                Some(text(name).ok_or_else(usage)?),
            ),
            _ => return Err(usage()),
        };
        let table = self
            .store
            .database(&self.database)
            .and_then(|db| db.table(table_name))
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "table {table_name:?} not found in database {:?}",
                    self.database
                ))
            })?;
        let columns = table.columns();
        let settings = self.settings(table_name, name, &columns)?;
        let provider = QuiverTable::new(table, self.store.chunk_cache().clone());
        let scan =
            LogicalPlanBuilder::scan(table_name, provider_as_source(Arc::new(provider)), None)?;
        let plan = match settings {
            ValueCacheKind::Last {
                key_columns,
                value_columns,
                count,
                ttl,
            } => {
                let keys: Vec<Expr> = key_columns.iter().map(col).collect();
                let mut select = keys.clone();
                select.extend(value_columns.iter().map(col));
                select.push(col(TIME_COLUMN));
                let mut order: Vec<_> = keys.iter().map(|k| k.clone().sort(true, true)).collect();
                order.push(col(TIME_COLUMN).sort(false, true));
                let recent = scan.filter(newer_than(ttl))?;
                if count == 1 {
                    recent.distinct_on(keys, select, Some(order))?.build()?
                } else {
                    let rank = row_number()
                        .partition_by(keys)
                        .order_by(vec![col(TIME_COLUMN).sort(false, true)])
                        .build()?
                        .alias("__quiver_rank");
                    recent
                        .window(vec![rank])?
                        .filter(col("__quiver_rank").lt_eq(lit(count as u64)))?
                        .sort(order)?
                        .project(select)?
                        .build()?
                }
            }
            ValueCacheKind::Distinct {
                columns,
                max_cardinality,
                max_age,
            } => {
                let columns: Vec<Expr> = columns.iter().map(col).collect();
                let order: Vec<_> = columns.iter().map(|c| c.clone().sort(true, true)).collect();
                scan.filter(newer_than(max_age))?
                    .project(columns)?
                    .distinct()?
                    .sort(order)?
                    .limit(0, Some(max_cardinality))?
                    .build()?
            }
        };
        Ok(Arc::new(ViewTable::new(plan, None)))
    }
}

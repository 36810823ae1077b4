//! `quiver-storage` owns where rows live: the catalog of databases and tables, each table's
//! schema (fixed column types, growing column set) and version, and the in-memory write buffer
//! of Arrow batches that queries read through [`TableSnapshot`]s.
//!
//! It knows nothing of SQL or protocols. Writes arrive as decoded Arrow batches
//! ([`quiver_ingest::line_protocol::DecodedTable`]); every acknowledged write bumps the version
//! of each table it touched, which is what caches above key on.

mod dedup;
mod error;
mod table;
mod wal_record;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use quiver_ingest::line_protocol::{DecodedTable, SchemaLookup};
use quiver_ingest::schema::ColumnType;
use quiver_wal::{Apply, Wal};

pub use dedup::sort_and_deduplicate;
pub use error::StorageError;
pub use quiver_wal::{Durability, Recovery, ReplaySummary, WalError, WalOptions, WalStats};
pub use table::{PreparedRows, Table, TableSnapshot};

/// Bounds that keep hostile or runaway writes from exhausting memory.
#[derive(Debug, Clone)]
pub struct StoreLimits {
    /// Most databases a server holds.
    pub max_databases: usize,
    /// Most tables one database holds.
    pub max_tables_per_database: usize,
    /// Most columns (time, tags and fields) one table holds.
    pub max_columns_per_table: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_databases: 1_000,
            max_tables_per_database: 10_000,
            max_columns_per_table: 1_000,
        }
    }
}

/// All databases of one server, and the write-ahead log that makes their writes durable.
#[derive(Default)]
pub struct Store {
    databases: RwLock<BTreeMap<String, Arc<Database>>>,
    limits: StoreLimits,
    /// Held while a write is checked, its columns reserved and its place in the log taken, so
    /// the log's order is the order in which writes were checked against the schema.
    sequencer: Mutex<()>,
    /// `None` for a memory-only store.
    wal: OnceLock<Wal<PreparedRows>>,
}

/// The WAL's commit thread makes durable writes visible through this.
struct ApplyToTables;

impl Apply<PreparedRows> for ApplyToTables {
    fn apply(&mut self, _seq: u64, rows: PreparedRows) {
        table::apply_rows(rows);
    }
}

impl Store {
    /// An empty store that keeps everything in memory only (no WAL): for tests and tools.
    pub fn new(limits: StoreLimits) -> Self {
        Store {
            limits,
            ..Store::default()
        }
    }

    /// A store whose writes go through the write-ahead log in `wal.dir`: replays the log into
    /// memory first, then accepts writes, each acknowledged as durable as it asks.
    pub fn open(
        limits: StoreLimits,
        wal: WalOptions,
    ) -> Result<(Arc<Store>, ReplaySummary), StorageError> {
        let store = Arc::new(Store::new(limits));
        let (log, summary) = Wal::open(
            wal,
            |_seq, payload| store.replay_record(payload).map_err(|e| e.to_string()),
            ApplyToTables,
        )?;
        if store.wal.set(log).is_err() {
            unreachable!("the WAL of a new store is set once");
        }
        Ok((store, summary))
    }

    fn replay_record(&self, payload: &[u8]) -> Result<(), StorageError> {
        let (database, tables) = wal_record::decode(payload)?;
        let _order = self.sequencer.lock();
        let prepared = self.prepare(&database, tables)?;
        table::apply_rows(prepared);
        Ok(())
    }

    /// The database called `name`, if it exists.
    pub fn database(&self, name: &str) -> Option<Arc<Database>> {
        self.databases.read().get(name).cloned()
    }

    /// Names of all databases, sorted.
    pub fn database_names(&self) -> Vec<String> {
        self.databases.read().keys().cloned().collect()
    }

    /// WAL counters (`None` for a memory-only store).
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.wal.get().map(Wal::stats)
    }

    /// Writes decoded rows into `database` (created by its first write), atomically: every
    /// table gets its rows or none does, and a failed write creates no database or table.
    ///
    /// With a WAL, the write is logged and acknowledged (this future resolves) only once it is
    /// as durable as `durability` asks; it becomes visible to queries at that moment, never
    /// earlier, in log order. Without a WAL it is visible when this returns.
    pub async fn write(
        &self,
        database: &str,
        tables: Vec<DecodedTable>,
        durability: Durability,
    ) -> Result<WriteReceipt, StorageError> {
        let rows = tables.iter().map(|t| t.batch.num_rows()).sum();
        validate_database_name(database)?;
        for table in &tables {
            validate_table_name(&table.name)?;
        }
        let wal = self.wal.get();
        let payload = match wal {
            Some(_) => Some(wal_record::encode(database, &tables)?),
            None => None,
        };
        let logged = {
            let _order = self.sequencer.lock();
            let prepared = self.prepare(database, tables)?;
            match (wal, payload) {
                (Some(wal), Some(payload)) => Some(wal.append(payload, prepared, durability)),
                _ => {
                    table::apply_rows(prepared);
                    None
                }
            }
        };
        let sequence = match logged {
            Some(pending) => Some(pending.await?),
            None => None,
        };
        Ok(WriteReceipt { rows, sequence })
    }

    /// Checks a write and reserves its tables and columns (must hold the sequencer).
    fn prepare(&self, name: &str, tables: Vec<DecodedTable>) -> Result<PreparedRows, StorageError> {
        if let Some(db) = self.database(name) {
            return db.prepare(tables);
        }
        validate_database_name(name)?;
        if self.databases.read().len() >= self.limits.max_databases {
            return Err(StorageError::TooManyDatabases {
                limit: self.limits.max_databases,
            });
        }
        let db = Arc::new(Database {
            name: name.to_string(),
            tables: RwLock::new(BTreeMap::new()),
            limits: self.limits.clone(),
        });
        let prepared = db.prepare(tables)?;
        self.databases.write().insert(name.to_string(), db);
        Ok(prepared)
    }

    /// Stops the WAL's commit thread after syncing what it holds; later writes fail.
    pub fn close(&self) {
        if let Some(wal) = self.wal.get() {
            wal.close();
        }
    }
}

/// Database names: 1–64 characters of ASCII letters, digits, `_` and `-`, starting with a
/// letter or digit (so they are usable unquoted as SQL schema names in most cases and safe as
/// directory names).
pub fn validate_database_name(name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > 64 {
        Some("it is longer than 64 characters")
    } else if !name.as_bytes()[0].is_ascii_alphanumeric() {
        Some("it must start with a letter or digit")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some("only ASCII letters, digits, '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StorageError::InvalidDatabaseName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// What one write did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WriteReceipt {
    /// Rows appended.
    pub rows: usize,
    /// The write's WAL sequence number (`None` for a memory-only store).
    pub sequence: Option<u64>,
}

/// A database: a named set of tables.
pub struct Database {
    name: String,
    tables: RwLock<BTreeMap<String, Arc<Table>>>,
    limits: StoreLimits,
}

impl Database {
    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table called `name`, if it exists.
    pub fn table(&self, name: &str) -> Option<Arc<Table>> {
        self.tables.read().get(name).cloned()
    }

    /// Names of all tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.read().keys().cloned().collect()
    }

    /// Checks decoded batches against their tables (creating tables on first write) and
    /// reserves new columns; all or nothing, and a failed write creates no table. The caller
    /// holds the store's sequencer.
    fn prepare(&self, tables: Vec<DecodedTable>) -> Result<PreparedRows, StorageError> {
        let mut created: Vec<Arc<Table>> = Vec::new();
        let mut items = Vec::with_capacity(tables.len());
        {
            let existing = self.tables.read();
            for decoded in tables {
                let known = existing
                    .get(&decoded.name)
                    .or_else(|| created.iter().find(|t| t.name() == decoded.name));
                let table = match known {
                    Some(table) => table.clone(),
                    None => {
                        validate_table_name(&decoded.name)?;
                        let table = Arc::new(Table::new(decoded.name.clone()));
                        created.push(table.clone());
                        table
                    }
                };
                items.push((table, decoded.batch));
            }
            if !created.is_empty()
                && existing.len() + created.len() > self.limits.max_tables_per_database
            {
                return Err(StorageError::TooManyTables {
                    database: self.name.clone(),
                    limit: self.limits.max_tables_per_database,
                });
            }
        }
        let prepared = table::prepare_rows(items, &self.limits)?;
        if !created.is_empty() {
            let mut existing = self.tables.write();
            for table in created {
                existing.insert(table.name().to_string(), table);
            }
        }
        Ok(prepared)
    }
}

fn validate_table_name(name: &str) -> Result<(), StorageError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > 512 {
        "it is longer than 512 bytes"
    } else {
        return Ok(());
    };
    Err(StorageError::InvalidTableName {
        name: name.to_string(),
        reason,
    })
}

impl SchemaLookup for Database {
    fn existing_columns(&self, table: &str) -> Vec<(String, ColumnType)> {
        self.table(table).map(|t| t.columns()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use quiver_ingest::line_protocol::{
        decode_line_protocol, DecodeOptions, NoExistingTables, Precision,
    };

    fn decode(store: &Store, db: &str, lp: &str) -> Vec<DecodedTable> {
        let options = DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        let decoded = match store.database(db) {
            Some(db) => decode_line_protocol(lp.as_bytes(), &options, db.as_ref()),
            None => decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables),
        };
        assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
        decoded.tables
    }

    fn try_write(store: &Store, db: &str, lp: &str) -> Result<WriteReceipt, StorageError> {
        block_on(store.write(db, decode(store, db, lp), Durability::Sync))
    }

    fn write(store: &Store, db: &str, lp: &str) -> WriteReceipt {
        try_write(store, db, lp).unwrap()
    }

    fn rows(store: &Store, db: &str, table: &str) -> usize {
        store
            .database(db)
            .unwrap()
            .table(table)
            .unwrap()
            .snapshot()
            .unwrap()
            .num_rows()
    }

    #[test]
    fn schema_evolves_and_old_rows_read_null() {
        let store = Store::default();
        write(&store, "metrics", "cpu,host=a usage=1 1");
        write(&store, "metrics", "cpu,host=b,dc=x usage=2,idle=5i 2");
        let table = store.database("metrics").unwrap().table("cpu").unwrap();
        assert_eq!(table.version(), 2);
        let snapshot = table.snapshot().unwrap();
        assert_eq!(snapshot.num_rows(), 2);
        let names: Vec<_> = snapshot
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["dc", "host", "idle", "time", "usage"]);
        let idle = snapshot.batches[0].column_by_name("idle").unwrap();
        assert_eq!(idle.null_count(), 1);
    }

    #[test]
    fn snapshots_are_cached_per_version_and_dedup_across_writes() {
        let store = Store::default();
        write(&store, "m", "cpu,host=a a=1,b=1 10");
        let table = store.database("m").unwrap().table("cpu").unwrap();
        let s1 = table.snapshot().unwrap();
        assert!(Arc::ptr_eq(&s1, &table.snapshot().unwrap()));
        write(&store, "m", "cpu,host=a a=2 10");
        let s2 = table.snapshot().unwrap();
        assert_eq!(s2.version, 2);
        assert_eq!(s2.num_rows(), 1, "same series and time is one point");
    }

    #[test]
    fn racing_type_conflict_is_rejected_whole() {
        let store = Store::default();
        // Both decoded before either is written, as two concurrent requests would be.
        let first = decode(&store, "m", "cpu v=1 1");
        let second = decode(&store, "m", "cpu v=1i 1");
        block_on(store.write("m", first, Durability::Sync)).unwrap();
        let err = block_on(store.write("m", second, Durability::Sync)).unwrap_err();
        assert!(err.to_string().contains("\"v\""), "{err}");
        assert_eq!(rows(&store, "m", "cpu"), 1);
    }

    #[test]
    fn limits_and_names() {
        assert!(validate_database_name("metrics_1-a").is_ok());
        assert!(validate_database_name("").is_err());
        assert!(validate_database_name("a/b").is_err());
        assert!(validate_database_name("_x").is_err());
        let store = Store::new(StoreLimits {
            max_databases: 1,
            max_tables_per_database: 1,
            max_columns_per_table: 3,
        });
        write(&store, "a", "t1 v=1 1");
        assert!(matches!(
            try_write(&store, "b", "t1 v=1 1"),
            Err(StorageError::TooManyDatabases { .. })
        ));
        assert!(store.database("b").is_none());
        assert!(matches!(
            try_write(&store, "a", "t2 v=1 1"),
            Err(StorageError::TooManyTables { .. })
        ));
        assert!(matches!(
            try_write(&store, "a", "t1 v=1,w=2,x=3 1"),
            Err(StorageError::TooManyColumns { .. })
        ));
        assert!(matches!(
            try_write(&store, "bad name", "t v=1 1"),
            Err(StorageError::InvalidDatabaseName { .. })
        ));
    }

    #[test]
    fn a_failed_multi_table_write_changes_nothing() {
        let store = Store::default();
        write(&store, "m", "b v=1 1");
        // Decoded as if no table existed yet, as a writer racing another would have.
        let racing = decode(&Store::default(), "m", "a v=1 1\nb v=\"s\" 2");
        assert!(block_on(store.write("m", racing, Durability::Sync)).is_err());
        let db = store.database("m").unwrap();
        assert!(db.table("a").is_none(), "a failed write creates no table");
        assert_eq!(db.table("b").unwrap().version(), 1);
        assert!(block_on(store.write(
            "fresh",
            decode(&store, "fresh", "x v=1 1"),
            Durability::Sync
        ))
        .is_ok());
    }

    fn wal_options(dir: &std::path::Path) -> WalOptions {
        WalOptions {
            dir: dir.join("wal"),
            segment_bytes: 4096,
            max_record_bytes: 1 << 30,
            fsync: true,
            recovery: Recovery::Strict,
        }
    }

    #[test]
    fn writes_survive_a_restart_through_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, summary) =
                Store::open(StoreLimits::default(), wal_options(dir.path())).unwrap();
            assert_eq!(summary.records, 0);
            for i in 0..50 {
                let receipt = write(
                    &store,
                    "m",
                    &format!("cpu,host=h{} v={i} {i}\nmem free={i}u {i}", i % 3),
                );
                assert_eq!(receipt.sequence, Some(i + 1));
            }
            write(&store, "other", "t s=\"text\",b=true 7");
            let conflicting = decode(&Store::default(), "m", "cpu v=\"conflict\" 1");
            assert!(block_on(store.write("m", conflicting, Durability::Sync)).is_err());
            store.close();
        }
        let (store, summary) =
            Store::open(StoreLimits::default(), wal_options(dir.path())).unwrap();
        assert_eq!(summary.records, 51);
        assert_eq!(rows(&store, "m", "cpu"), 50);
        assert_eq!(rows(&store, "m", "mem"), 50);
        assert_eq!(rows(&store, "other", "t"), 1);
        // numbering continues after the replayed records
        assert_eq!(write(&store, "m", "cpu v=1 1000").sequence, Some(52));
    }
}

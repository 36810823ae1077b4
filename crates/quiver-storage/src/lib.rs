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

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use quiver_ingest::line_protocol::{DecodedTable, SchemaLookup};
use quiver_ingest::schema::ColumnType;

pub use dedup::sort_and_deduplicate;
pub use error::StorageError;
pub use table::{Table, TableSnapshot};

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

/// All databases of one server.
#[derive(Default)]
pub struct Store {
    databases: RwLock<BTreeMap<String, Arc<Database>>>,
    limits: StoreLimits,
}

impl Store {
    /// An empty store with the given limits.
    pub fn new(limits: StoreLimits) -> Self {
        Store {
            databases: RwLock::new(BTreeMap::new()),
            limits,
        }
    }

    /// The database called `name`, if it exists.
    pub fn database(&self, name: &str) -> Option<Arc<Database>> {
        self.databases.read().get(name).cloned()
    }

    /// Names of all databases, sorted.
    pub fn database_names(&self) -> Vec<String> {
        self.databases.read().keys().cloned().collect()
    }

    /// The database called `name`, created if it does not exist (databases are created by
    /// their first write).
    pub fn database_or_create(&self, name: &str) -> Result<Arc<Database>, StorageError> {
        if let Some(db) = self.database(name) {
            return Ok(db);
        }
        validate_database_name(name)?;
        let mut databases = self.databases.write();
        if let Some(db) = databases.get(name) {
            return Ok(db.clone());
        }
        if databases.len() >= self.limits.max_databases {
            return Err(StorageError::TooManyDatabases {
                limit: self.limits.max_databases,
            });
        }
        let db = Arc::new(Database {
            name: name.to_string(),
            tables: RwLock::new(BTreeMap::new()),
            limits: self.limits.clone(),
        });
        databases.insert(name.to_string(), db.clone());
        Ok(db)
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
    /// `(table, new version)` for every table written.
    pub versions: Vec<(String, u64)>,
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

    /// Appends decoded batches, creating tables on first write. All tables are appended to or
    /// none is (see [`StorageError`] for why a write can fail), and a failed write creates no
    /// table. The versions of the tables written are bumped before this returns, so a query
    /// that starts after it sees the rows.
    pub fn write(&self, tables: Vec<DecodedTable>) -> Result<WriteReceipt, StorageError> {
        let rows = tables.iter().map(|t| t.batch.num_rows()).sum();
        let all_exist = {
            let existing = self.tables.read();
            tables.iter().all(|t| existing.contains_key(&t.name))
        };
        let (names, versions) = if all_exist {
            // The common case: only table locks are taken, so writers to different tables and
            // readers of the table list never wait for each other.
            let existing = self.tables.read();
            let items: Vec<_> = tables
                .into_iter()
                .map(|t| (existing[&t.name].clone(), t.batch))
                .collect();
            drop(existing);
            let names = sorted_unique_names(&items);
            (names, table::append_atomically(items, &self.limits)?)
        } else {
            // First write to some table: hold the table list so the new tables are registered
            // only once, and only if the append succeeds.
            let mut existing = self.tables.write();
            let mut created = Vec::new();
            let mut items = Vec::with_capacity(tables.len());
            for decoded in tables {
                let table = match existing.get(&decoded.name) {
                    Some(table) => table.clone(),
                    None => match created
                        .iter()
                        .find(|t: &&Arc<Table>| t.name() == decoded.name)
                    {
                        Some(table) => table.clone(),
                        None => {
                            validate_table_name(&decoded.name)?;
                            let table = Arc::new(Table::new(decoded.name.clone()));
                            created.push(table.clone());
                            table
                        }
                    },
                };
                items.push((table, decoded.batch));
            }
            if existing.len() + created.len() > self.limits.max_tables_per_database {
                return Err(StorageError::TooManyTables {
                    database: self.name.clone(),
                    limit: self.limits.max_tables_per_database,
                });
            }
            let names = sorted_unique_names(&items);
            let versions = table::append_atomically(items, &self.limits)?;
            for table in created {
                existing.insert(table.name().to_string(), table);
            }
            (names, versions)
        };
        Ok(WriteReceipt {
            rows,
            versions: names.into_iter().zip(versions).collect(),
        })
    }
}

fn sorted_unique_names(items: &[(Arc<Table>, arrow::array::RecordBatch)]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|(t, _)| t.name().to_string()).collect();
    names.sort();
    names.dedup();
    names
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
    use quiver_ingest::line_protocol::{
        decode_line_protocol, DecodeOptions, NoExistingTables, Precision,
    };

    fn write(db: &Database, lp: &str) -> WriteReceipt {
        let decoded = decode_line_protocol(
            lp.as_bytes(),
            &DecodeOptions {
                precision: Precision::Nanosecond,
                default_time_ns: 0,
                max_reported_errors: 10,
            },
            db,
        );
        assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
        db.write(decoded.tables).unwrap()
    }

    #[test]
    fn schema_evolves_and_old_rows_read_null() {
        let store = Store::default();
        let db = store.database_or_create("metrics").unwrap();
        write(&db, "cpu,host=a usage=1 1");
        let receipt = write(&db, "cpu,host=b,dc=x usage=2,idle=5i 2");
        assert_eq!(receipt.versions, vec![("cpu".to_string(), 2)]);
        let snapshot = db.table("cpu").unwrap().snapshot().unwrap();
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
        let db = store.database_or_create("m").unwrap();
        write(&db, "cpu,host=a a=1,b=1 10");
        let table = db.table("cpu").unwrap();
        let s1 = table.snapshot().unwrap();
        assert!(Arc::ptr_eq(&s1, &table.snapshot().unwrap()));
        write(&db, "cpu,host=a a=2 10");
        let s2 = table.snapshot().unwrap();
        assert_eq!(s2.version, 2);
        assert_eq!(s2.num_rows(), 1, "same series and time is one point");
    }

    #[test]
    fn racing_type_conflict_is_rejected_whole() {
        let store = Store::default();
        let db = store.database_or_create("m").unwrap();
        let opts = DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        // Both decoded before either is written, as two concurrent requests would be.
        let first = decode_line_protocol(b"cpu v=1 1", &opts, db.as_ref());
        let second = decode_line_protocol(b"cpu v=1i 1", &opts, db.as_ref());
        db.write(first.tables).unwrap();
        let err = db.write(second.tables).unwrap_err();
        assert!(err.to_string().contains("\"v\""), "{err}");
        assert_eq!(db.table("cpu").unwrap().snapshot().unwrap().num_rows(), 1);
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
        let db = store.database_or_create("a").unwrap();
        assert!(store.database_or_create("b").is_err());
        write(&db, "t1 v=1 1");
        let opts = DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        let more = decode_line_protocol(b"t2 v=1 1", &opts, db.as_ref());
        assert!(matches!(
            db.write(more.tables),
            Err(StorageError::TooManyTables { .. })
        ));
        let wide = decode_line_protocol(b"t1 v=1,w=2,x=3 1", &opts, db.as_ref());
        assert!(matches!(
            db.write(wide.tables),
            Err(StorageError::TooManyColumns { .. })
        ));
    }

    #[test]
    fn a_failed_multi_table_write_changes_nothing() {
        let store = Store::default();
        let db = store.database_or_create("m").unwrap();
        write(&db, "b v=1 1");
        let opts = DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        // Decoded as if no table existed yet, as a writer racing another would have.
        let racing = decode_line_protocol(b"a v=1 1\nb v=\"s\" 2", &opts, &NoExistingTables);
        assert!(db.write(racing.tables).is_err());
        assert!(db.table("a").is_none(), "a failed write creates no table");
        assert_eq!(db.table("b").unwrap().version(), 1);
    }
}

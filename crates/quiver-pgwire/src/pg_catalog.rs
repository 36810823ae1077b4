//! The PostgreSQL catalog that clients read to discover tables and types (`pg_catalog`: what
//! `psql`'s `\dt` and `\d`, DBeaver, Grafana and JDBC's metadata calls query), and the
//! PostgreSQL functions they call (`version()`, `current_schema()`, `format_type`, ...), from
//! `datafusion-pg-catalog`, installed in every database's SQL session.
//!
//! Quiver's databases are the namespaces (`nspname`), and a session's database is its
//! `current_schema()` and `search_path`. A token sees only the databases it may read: one
//! `pg_catalog` is shared by all sessions that see the same databases, so object ids (`oid`)
//! agree between their queries, and the static tables (`pg_type`, `pg_proc`, ...) are held
//! once for all.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Int32Array, ListBuilder, RecordBatch, StringArray, StringBuilder,
};
use arrow::datatypes::{DataType, Field, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{
    CatalogProviderList, MemoryCatalogProviderList, SchemaProvider, Session, TableProvider,
};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{create_udf, ColumnarValue, Expr, ScalarUDF, Volatility};
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{
    create_current_database_udf, setup_pg_catalog, PgCatalogSchemaProvider, PgCatalogStaticTables,
};
use quiver_model::VisibleDatabases;
use quiver_query::{QuiverCatalog, SessionSetup, CATALOG_NAME};
use quiver_storage::Store;

use super::settings::{SERVER_VERSION, SERVER_VERSION_NUM};

/// Installs `pg_catalog` and the PostgreSQL functions into each database's session.
pub struct PostgresCatalog {
    store: Arc<Store>,
    static_tables: Arc<PgCatalogStaticTables>,
    /// One `pg_catalog` per set of visible databases, as many as the engine keeps sessions
    /// (each session holds its own; this only shares them between a visibility set's
    /// databases), idle ones dropped after an hour.
    pg_catalogs: moka::sync::Cache<VisibleDatabases, Arc<dyn SchemaProvider>>,
}

impl std::fmt::Debug for PostgresCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresCatalog")
    }
}

impl PostgresCatalog {
    /// The catalog over `store`'s databases and tables (read live).
    pub fn new(store: Arc<Store>) -> Result<Self> {
        Ok(PostgresCatalog {
            store,
            static_tables: Arc::new(PgCatalogStaticTables::try_new()?),
            pg_catalogs: moka::sync::Cache::builder()
                .max_capacity(256)
                .time_to_idle(std::time::Duration::from_secs(3600))
                .build(),
        })
    }

    /// The `pg_catalog` of callers who see the `visible` databases.
    fn pg_catalog(&self, visible: &VisibleDatabases) -> Result<Arc<dyn SchemaProvider>> {
        if let Some(pg_catalog) = self.pg_catalogs.get(visible) {
            return Ok(pg_catalog);
        }
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        catalogs.register_catalog(
            CATALOG_NAME.to_string(),
            Arc::new(QuiverCatalog::new(self.store.clone(), visible.clone())),
        );
        let catalogs: Arc<dyn CatalogProviderList> = catalogs;
        let pg_catalog = PgCatalogSchemaProvider::try_new(
            catalogs,
            self.static_tables.clone(),
            EmptyContextProvider,
        )?;
        let pg_catalog: Arc<dyn SchemaProvider> =
            Arc::new(WithSystemNamespaces(Arc::new(pg_catalog)));
        // a concurrent first use may have built one too: every session shares the first
        Ok(self
            .pg_catalogs
            .entry(visible.clone())
            .or_insert(pg_catalog)
            .into_value())
    }
}

impl SessionSetup for PostgresCatalog {
    fn setup(
        &self,
        ctx: &SessionContext,
        database: &str,
        visible: &VisibleDatabases,
    ) -> Result<()> {
        // The crate's functions, type names (`regclass`, ...) and table functions ...
        setup_pg_catalog(ctx, CATALOG_NAME, EmptyContextProvider).map_err(|e| *e)?;
        // ... with the shared catalog instead of the per-session one it builds,
        let catalog = ctx.catalog(CATALOG_NAME).ok_or_else(|| {
            DataFusionError::Internal(format!("session has no {CATALOG_NAME} catalog"))
        })?;
        catalog.register_schema("pg_catalog", self.pg_catalog(visible)?)?;
        // ... and the functions whose answer depends on the database, or on Quiver.
        for udf in database_functions(database) {
            ctx.register_udf(udf);
        }
        Ok(())
    }
}

/// `current_database()`, `current_schema()`, `current_schemas(bool)`, `version()` and
/// `current_setting(name)` for a session in `database`.
fn database_functions(database: &str) -> Vec<ScalarUDF> {
    let schema = database.to_string();
    let current_schema = constant_text("current_schema", database.to_string());
    let current_schemas = create_udf(
        "current_schemas",
        vec![DataType::Boolean],
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| {
            let rows = ColumnarValue::values_to_arrays(args)?;
            let include_implicit = rows[0]
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| DataFusionError::Plan("current_schemas takes a boolean".into()))?;
            let mut lists = ListBuilder::new(StringBuilder::new());
            for row in 0..include_implicit.len() {
                lists.values().append_value(&schema);
                if include_implicit.is_valid(row) && include_implicit.value(row) {
                    lists.values().append_value("pg_catalog");
                    lists.values().append_value("information_schema");
                }
                lists.append(true);
            }
            let array = lists.finish();
            Ok(ColumnarValue::Array(Arc::new(array)))
        }),
    );
    let version = constant_text(
        "version",
        format!(
            "PostgreSQL {SERVER_VERSION} on {}-{}, Apache DataFusion",
            std::env::consts::ARCH,
            std::env::consts::OS
        ),
    );
    let database_name = database.to_string();
    let current_setting = create_udf(
        "current_setting",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let rows = ColumnarValue::values_to_arrays(args)?;
            let names = rows[0]
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| DataFusionError::Plan("current_setting takes text".into()))?;
            let values = names
                .iter()
                .map(|name| name.map(|n| setting(&database_name, n)).transpose())
                .collect::<Result<StringArray>>()?;
            Ok(ColumnarValue::Array(Arc::new(values) as ArrayRef))
        }),
    );
    vec![
        create_current_database_udf(database),
        current_schema,
        current_schemas,
        version,
        current_setting,
    ]
}

/// The value `current_setting(name)` returns in `database` (the session-independent settings).
fn setting(database: &str, name: &str) -> Result<String> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "server_version" => SERVER_VERSION.to_string(),
        "server_version_num" => SERVER_VERSION_NUM.to_string(),
        "search_path" => database.to_string(),
        "server_encoding" | "client_encoding" => "UTF8".to_string(),
        "datestyle" => "ISO, YMD".to_string(),
        "timezone" => "UTC".to_string(),
        "standard_conforming_strings" | "integer_datetimes" => "on".to_string(),
        "transaction_read_only" | "default_transaction_read_only" => "on".to_string(),
        "max_identifier_length" => "63".to_string(),
        "max_index_keys" => "32".to_string(),
        _ => {
            return Err(DataFusionError::Plan(format!(
                "unrecognized configuration parameter \"{name}\""
            )))
        }
    })
}

/// A function of no arguments that returns `value`.
fn constant_text(name: &str, value: String) -> ScalarUDF {
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Utf8(Some(value.clone())),
            ))
        }),
    )
}

/// `pg_catalog` whose `pg_namespace` also lists the system namespaces with PostgreSQL's own
/// object ids (`pg_catalog` is 11): the static tables (`pg_type`, `pg_proc`, ...) refer to
/// them, and drivers join on them (pgjdbc's type lookup, DBeaver's type list). The databases
/// keep the ids the crate assigns, which `pg_class` uses.
#[derive(Debug)]
struct WithSystemNamespaces(Arc<dyn SchemaProvider>);

/// The system namespaces and their ids in PostgreSQL 15.
const SYSTEM_NAMESPACES: &[(i32, &str)] = &[(11, "pg_catalog"), (13_183, "information_schema")];

#[async_trait]
impl SchemaProvider for WithSystemNamespaces {
    fn table_names(&self) -> Vec<String> {
        self.0.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.0.table(name).await?;
        if !name.eq_ignore_ascii_case("pg_namespace") {
            return Ok(table);
        }
        let Some(table) = table else {
            return Ok(None);
        };
        let fixed = system_namespace_rows(table.schema())?;
        Ok(Some(Arc::new(NamespaceTable { table, fixed })))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.0.table_exist(name)
    }
}

/// The system namespaces as rows of `pg_namespace`'s schema (owner 10, no ACL or options).
fn system_namespace_rows(schema: SchemaRef) -> Result<RecordBatch> {
    let count = SYSTEM_NAMESPACES.len();
    let columns = schema
        .fields()
        .iter()
        .map(|field| -> Result<ArrayRef> {
            Ok(match field.name().as_str() {
                "oid" => Arc::new(Int32Array::from_iter_values(
                    SYSTEM_NAMESPACES.iter().map(|(oid, _)| *oid),
                )),
                "nspname" => Arc::new(StringArray::from_iter_values(
                    SYSTEM_NAMESPACES.iter().map(|(_, name)| *name),
                )),
                "nspowner" => Arc::new(Int32Array::from(vec![10; count])),
                _ => arrow::array::new_null_array(field.data_type(), count),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `pg_namespace`: the crate's rows (the databases) followed by [`SYSTEM_NAMESPACES`].
#[derive(Debug)]
struct NamespaceTable {
    table: Arc<dyn TableProvider>,
    fixed: RecordBatch,
}

#[async_trait]
impl TableProvider for NamespaceTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        self.table.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let databases = self.table.scan(state, projection, &[], None).await?;
        let fixed = MemorySourceConfig::try_new_exec(
            &[vec![self.fixed.clone()]],
            self.schema(),
            projection.cloned(),
        )?;
        UnionExec::try_new(vec![databases, fixed])
    }
}

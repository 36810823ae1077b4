//! The PostgreSQL catalog that clients read to discover tables and types (`pg_catalog`: what
//! `psql`'s `\dt` and `\d`, DBeaver, Grafana and JDBC's metadata calls query), and the
//! PostgreSQL functions they call (`version()`, `current_schema()`, `format_type`, ...), from
//! `datafusion-pg-catalog`, installed in every database's SQL session.
//!
//! Quiver's databases are the namespaces (`nspname`), and a session's database is its
//! `current_schema()` and `search_path`. One `pg_catalog` is shared by all sessions, so object
//! ids (`oid`) agree between queries and the static tables (`pg_type`, `pg_proc`, ...) are
//! held once.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, ListBuilder, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::catalog::{CatalogProviderList, MemoryCatalogProviderList, SchemaProvider};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{
    create_current_database_udf, setup_pg_catalog, PgCatalogSchemaProvider, PgCatalogStaticTables,
};
use quiver_query::{QuiverCatalog, SessionSetup, CATALOG_NAME};
use quiver_storage::Store;

use super::settings::{SERVER_VERSION, SERVER_VERSION_NUM};

/// Installs `pg_catalog` and the PostgreSQL functions into each database's session.
pub struct PostgresCatalog {
    pg_catalog: Arc<dyn SchemaProvider>,
}

impl std::fmt::Debug for PostgresCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresCatalog")
    }
}

impl PostgresCatalog {
    /// The catalog over `store`'s databases and tables (read live).
    pub fn new(store: Arc<Store>) -> Result<Self> {
        let catalogs = Arc::new(MemoryCatalogProviderList::new());
        catalogs.register_catalog(
            CATALOG_NAME.to_string(),
            Arc::new(QuiverCatalog::new(store)),
        );
        let catalogs: Arc<dyn CatalogProviderList> = catalogs;
        let static_tables = Arc::new(PgCatalogStaticTables::try_new()?);
        let pg_catalog =
            PgCatalogSchemaProvider::try_new(catalogs, static_tables, EmptyContextProvider)?;
        Ok(PostgresCatalog {
            pg_catalog: Arc::new(pg_catalog),
        })
    }
}

impl SessionSetup for PostgresCatalog {
    fn setup(&self, ctx: &SessionContext, database: &str) -> Result<()> {
        // The crate's functions, type names (`regclass`, ...) and table functions ...
        setup_pg_catalog(ctx, CATALOG_NAME, EmptyContextProvider).map_err(|e| *e)?;
        // ... with the shared catalog instead of the per-session one it builds,
        let catalog = ctx.catalog(CATALOG_NAME).ok_or_else(|| {
            DataFusionError::Internal(format!("session has no {CATALOG_NAME} catalog"))
        })?;
        catalog.register_schema("pg_catalog", self.pg_catalog.clone())?;
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

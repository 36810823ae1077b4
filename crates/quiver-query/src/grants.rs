//! Grant checks of a request ([`QueryControl`]): what its caller may read, checked before a
//! query is answered (from the cache or not), and errors that would tell a caller what exists
//! where it may not read, hidden. A trait, since the request context lives below the engine
//! (in `quiver-governance`) and these checks speak the engine's errors.

use quiver_governance::context::QueryControl;

use crate::analyze::QueryAnalysis;
use crate::error::QueryError;

/// The engine's grant checks of a request.
pub trait GrantChecks {
    /// Fails unless the caller may read `database` and every database of `tables`.
    fn check_read<'a>(
        &self,
        database: &str,
        tables: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), QueryError>;

    /// Fails unless the caller may read everything `analysis` reads: its database and the
    /// database of every table.
    fn check_analysis(&self, analysis: &QueryAnalysis) -> Result<(), QueryError>;

    /// `error`, unless it says that something does not exist in a database the caller may
    /// not read: then the refusal to read that database, so that a caller cannot learn which
    /// databases and tables exist where it has no grant.
    fn hide_unreadable(&self, error: QueryError) -> QueryError;
}

impl GrantChecks for QueryControl {
    fn check_read<'a>(
        &self,
        database: &str,
        tables: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), QueryError> {
        let Some(grants) = &self.grants else {
            return Ok(());
        };
        grants.check_read(database).map_err(QueryError::Denied)?;
        for table_database in tables {
            if table_database != database {
                grants
                    .check_read(table_database)
                    .map_err(QueryError::Denied)?;
            }
        }
        Ok(())
    }

    fn check_analysis(&self, analysis: &QueryAnalysis) -> Result<(), QueryError> {
        self.check_read(
            &analysis.database,
            analysis.tables.iter().map(|table| table.database.as_str()),
        )
    }

    fn hide_unreadable(&self, error: QueryError) -> QueryError {
        let database = match &error {
            QueryError::DatabaseNotFound(database) => database,
            QueryError::TableNotFound { database, .. } => database,
            _ => return error,
        };
        match self.check_read(database, []) {
            Ok(()) => error,
            Err(denied) => denied,
        }
    }
}

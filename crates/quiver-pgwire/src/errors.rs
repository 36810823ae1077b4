//! Errors as PostgreSQL reports them: an `ErrorResponse` with the SQLSTATE code a Postgres
//! client branches on (`42P01` for a missing table, `42601` for a syntax error, ...) and the
//! message saying what was wrong.

use arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use pgwire::error::{ErrorInfo, PgWireError};
use quiver_model::{Classify, ErrorKind};
use quiver_query::governance::{GovernanceError, StopReason};
use quiver_query::statement_limits::StatementLimit;
use quiver_query::QueryError;

/// SQLSTATE codes used here (PostgreSQL's Appendix A).
pub(super) mod sqlstate {
    /// The statement is not valid SQL.
    pub const SYNTAX_ERROR: &str = "42601";
    /// A statement that needs something Quiver does not do.
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    /// A write over SQL: Quiver's SQL is read-only.
    pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
    /// A statement inside a transaction that already failed.
    pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
    /// The connection's database does not exist.
    pub const INVALID_CATALOG_NAME: &str = "3D000";
    /// A table the statement names does not exist.
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// A column the statement names does not exist.
    pub const UNDEFINED_COLUMN: &str = "42703";
    /// A column name that matches more than one column.
    pub const AMBIGUOUS_COLUMN: &str = "42702";
    /// `SHOW`/`SET` of a parameter Quiver does not know.
    pub const UNDEFINED_OBJECT: &str = "42704";
    /// A statement that parses but cannot be planned (types, functions, ...).
    pub const SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION: &str = "42000";
    /// A value that cannot be converted or computed.
    pub const DATA_EXCEPTION: &str = "22000";
    /// Division by zero.
    pub const DIVISION_BY_ZERO: &str = "22012";
    /// A value in the wrong format for its type.
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    /// A value out of its type's range.
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    /// A parameter value that does not match what the statement needs.
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    /// A malformed protocol message.
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    /// The query needed more memory than allowed.
    pub const OUT_OF_MEMORY: &str = "53200";
    /// A value larger than one value may be, or a statement longer than one may be.
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    /// A statement nested more deeply than the server parses.
    pub const STATEMENT_TOO_COMPLEX: &str = "54001";
    /// The query was cancelled or ran past its time limit.
    pub const QUERY_CANCELED: &str = "57014";
    /// As many queries run and wait as the server takes.
    pub const INSUFFICIENT_RESOURCES: &str = "53000";
    /// A failure that is not the client's fault.
    pub const INTERNAL_ERROR: &str = "XX000";
    /// The server cannot serve now (a query node that lost sight of the writer's data).
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    /// No valid credentials (a revoked token, none where one is needed).
    pub const INVALID_AUTHORIZATION: &str = "28000";
    /// A wrong password (token secret).
    pub const INVALID_PASSWORD: &str = "28P01";
    /// The token does not grant what the statement does.
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    /// Over a rate limit (requests per second, failed logins).
    pub const CONFIGURATION_LIMIT_EXCEEDED: &str = "53400";
}

/// The SQLSTATE of an access failure of `kind`.
fn access_code(kind: quiver_model::ErrorKind) -> &'static str {
    match kind {
        quiver_model::ErrorKind::PermissionDenied => sqlstate::INSUFFICIENT_PRIVILEGE,
        quiver_model::ErrorKind::RateLimited => sqlstate::CONFIGURATION_LIMIT_EXCEEDED,
        _ => sqlstate::INVALID_AUTHORIZATION,
    }
}

/// An access failure of a statement: `ERROR` for a missing permission or a rate limit, `FATAL`
/// (the session ends) when the session's token is no longer valid.
pub(super) fn auth_error(e: &quiver_auth::AuthError) -> PgWireError {
    let code = access_code(e.kind());
    if code == sqlstate::INVALID_AUTHORIZATION {
        return fatal(code, e.to_string());
    }
    error(code, e.to_string())
}

/// An access failure at login: always `FATAL`.
pub(super) fn auth_fatal(e: &quiver_auth::AuthError) -> PgWireError {
    fatal(access_code(e.kind()), e.to_string())
}

/// An `ERROR`-severity response with `code` and `message`.
pub(super) fn error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_string(),
        code.to_string(),
        message.into(),
    )))
}

/// A `FATAL` response: the server closes the connection after sending it.
pub(super) fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_string(),
        code.to_string(),
        message.into(),
    )))
}

/// A query failure with the SQLSTATE that best describes it.
pub(super) fn query_error(e: &QueryError) -> PgWireError {
    let code = match e {
        QueryError::DatabaseNotFound(_) => sqlstate::INVALID_CATALOG_NAME,
        QueryError::TableNotFound { .. } => sqlstate::UNDEFINED_TABLE,
        QueryError::Invalid(e) => datafusion_code(e),
        QueryError::ResourcesExhausted(_) | QueryError::MemoryBusy(_) => sqlstate::OUT_OF_MEMORY,
        QueryError::ValueTooLarge(_) => sqlstate::PROGRAM_LIMIT_EXCEEDED,
        QueryError::StatementLimit(StatementLimit::TooLong { .. }) => {
            sqlstate::PROGRAM_LIMIT_EXCEEDED
        }
        QueryError::StatementLimit(StatementLimit::TooDeep { .. }) => {
            sqlstate::STATEMENT_TOO_COMPLEX
        }
        QueryError::Governance(GovernanceError::Stopped(StopReason::ServerMemory { .. })) => {
            sqlstate::OUT_OF_MEMORY
        }
        QueryError::Governance(GovernanceError::Stopped(_)) => sqlstate::QUERY_CANCELED,
        QueryError::Governance(GovernanceError::Busy { .. }) => sqlstate::INSUFFICIENT_RESOURCES,
        QueryError::Governance(GovernanceError::Runtime(_)) => sqlstate::INTERNAL_ERROR,
        QueryError::Denied(denied) => access_code(denied.kind),
        QueryError::Storage(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Busy) => {
            sqlstate::CANNOT_CONNECT_NOW
        }
        QueryError::Storage(_) | QueryError::Internal(_) => sqlstate::INTERNAL_ERROR,
        QueryError::Distributed(e) if e.unavailable => sqlstate::CANNOT_CONNECT_NOW,
        QueryError::Distributed(_) => sqlstate::FEATURE_NOT_SUPPORTED,
    };
    e.kind().log_failure("postgres", &e.to_string());
    error(code, e.to_string())
}

/// The SQLSTATE of a DataFusion error a user caused.
fn datafusion_code(e: &DataFusionError) -> &'static str {
    match e.find_root() {
        DataFusionError::SQL(..) => sqlstate::SYNTAX_ERROR,
        DataFusionError::SchemaError(schema, _) => match schema.as_ref() {
            SchemaError::FieldNotFound { .. } => sqlstate::UNDEFINED_COLUMN,
            SchemaError::AmbiguousReference { .. } => sqlstate::AMBIGUOUS_COLUMN,
            _ => sqlstate::SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION,
        },
        DataFusionError::NotImplemented(_) => sqlstate::FEATURE_NOT_SUPPORTED,
        DataFusionError::ArrowError(arrow, _) => match arrow.as_ref() {
            ArrowError::DivideByZero => sqlstate::DIVISION_BY_ZERO,
            ArrowError::CastError(_) | ArrowError::ParseError(_) => {
                sqlstate::INVALID_TEXT_REPRESENTATION
            }
            ArrowError::ArithmeticOverflow(_) => sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            _ => sqlstate::DATA_EXCEPTION,
        },
        DataFusionError::Execution(_) => sqlstate::DATA_EXCEPTION,
        _ => sqlstate::SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: QueryError) -> String {
        match query_error(&e) {
            PgWireError::UserError(info) => info.code,
            other => panic!("not a user error: {other:?}"),
        }
    }

    #[test]
    fn query_errors_get_their_sqlstate() {
        assert_eq!(code(QueryError::DatabaseNotFound("x".into())), "3D000");
        let missing = QueryError::TableNotFound {
            database: "d".into(),
            table: "t".into(),
        };
        assert_eq!(code(missing), "42P01");
        let parse = DataFusionError::SQL(
            Box::new(datafusion::sql::sqlparser::parser::ParserError::ParserError("x".into())),
            None,
        );
        assert_eq!(code(QueryError::Invalid(parse)), "42601");
        let divide = DataFusionError::ArrowError(Box::new(ArrowError::DivideByZero), None);
        let wrapped = DataFusionError::Context("running".into(), Box::new(divide));
        assert_eq!(code(QueryError::Invalid(wrapped)), "22012");
        let memory = DataFusionError::ResourcesExhausted("no".into());
        assert_eq!(code(QueryError::ResourcesExhausted(memory)), "53200");
    }
}

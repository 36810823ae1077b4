//! What a PostgreSQL client's statement asks for: a query for the engine, or a session command
//! answered here (`SET`, `SHOW`, `BEGIN`, `DEALLOCATE`, ...). Writes over SQL are refused with
//! `25006`: Quiver's SQL is read-only and data arrives through its ingest APIs.

use datafusion::sql::sqlparser::ast::{
    Expr, ObjectName, Reset, Set, Statement as SqlStatement, Value,
};
use pgwire::error::PgWireResult;

use super::errors::{error, sqlstate};

/// A statement, classified.
#[derive(Debug, Clone)]
pub(super) enum Command {
    /// A query (or `SHOW TABLES`, `EXPLAIN`, ...) for the engine.
    Query(Box<SqlStatement>),
    /// `SET name = value`; `None` for `DEFAULT`.
    Set { name: String, value: Option<String> },
    /// `RESET name`, or `RESET ALL` for `None`.
    Reset(Option<String>),
    /// `SHOW name`.
    Show(String),
    /// `SHOW ALL`.
    ShowAll,
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `DEALLOCATE name`, or `DEALLOCATE ALL` for `None`.
    Deallocate(Option<String>),
    /// `DISCARD ...`.
    Discard,
    /// A statement acknowledged with its command tag and nothing else (`SET ROLE`,
    /// `SET SESSION CHARACTERISTICS`, ...: nothing to change on a read-only engine with one
    /// isolation level).
    Acknowledge(&'static str),
}

impl Command {
    /// How many result columns the command returns.
    pub(super) fn columns(&self) -> usize {
        match self {
            Command::Show(_) => 1,
            Command::ShowAll => 2,
            _ => 0,
        }
    }
}

/// Classifies a parsed statement.
pub(super) fn classify(statement: SqlStatement) -> PgWireResult<Command> {
    Ok(match statement {
        SqlStatement::Set(set) => classify_set(set)?,
        SqlStatement::Reset(reset) => Command::Reset(match reset.reset {
            Reset::ALL => None,
            Reset::ConfigurationParameter(name) => Some(object_name(&name)),
        }),
        SqlStatement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|ident| ident.value.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            if name.eq_ignore_ascii_case("all") {
                Command::ShowAll
            } else {
                Command::Show(name)
            }
        }
        SqlStatement::StartTransaction { .. } => Command::Begin,
        SqlStatement::Commit { .. } => Command::Commit,
        SqlStatement::Rollback { .. } => Command::Rollback,
        SqlStatement::Deallocate { name, .. } => {
            Command::Deallocate((!name.value.eq_ignore_ascii_case("all")).then_some(name.value))
        }
        SqlStatement::Discard { .. } => Command::Discard,
        SqlStatement::Prepare { .. } | SqlStatement::Execute { .. } => {
            return Err(error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "PREPARE and EXECUTE statements are not supported: use the extended query \
                 protocol (every driver's prepared statements)",
            ))
        }
        statement if is_write(&statement) => {
            return Err(error(
                sqlstate::READ_ONLY_SQL_TRANSACTION,
                format!(
                    "Quiver is read-only over SQL, cannot run: {}. Write with line protocol \
                     (/api/v3/write_lp), MessagePack, Arrow (/api/v3/write_arrow) or Flight \
                     SQL bulk ingest",
                    first_words(&statement.to_string())
                ),
            ))
        }
        statement => Command::Query(Box::new(statement)),
    })
}

fn classify_set(set: Set) -> PgWireResult<Command> {
    Ok(match set {
        Set::SingleAssignment {
            variable, values, ..
        } => Command::Set {
            name: object_name(&variable),
            value: set_value(&values),
        },
        Set::SetTimeZone { value, .. } => Command::Set {
            name: "TimeZone".into(),
            value: set_value(std::slice::from_ref(&value)),
        },
        Set::SetNames { charset_name, .. } => Command::Set {
            name: "client_encoding".into(),
            value: Some(charset_name.value),
        },
        _ => Command::Acknowledge("SET"),
    })
}

/// A SET value as text: string literals unquoted, several values joined with `, `; `None`
/// for `DEFAULT`.
fn set_value(values: &[Expr]) -> Option<String> {
    let parts: Vec<String> = values
        .iter()
        .map(|value| match value {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            Expr::Identifier(ident) => ident.value.clone(),
            other => other.to_string(),
        })
        .collect();
    if parts.len() == 1 && parts[0].eq_ignore_ascii_case("default") {
        return None;
    }
    Some(parts.join(", "))
}

fn object_name(name: &ObjectName) -> String {
    name.0
        .iter()
        .map(|part| part.to_string().trim_matches('"').to_string())
        .collect::<Vec<_>>()
        .join(".")
}

/// Statements that would change data or schema.
fn is_write(statement: &SqlStatement) -> bool {
    matches!(
        statement,
        SqlStatement::Insert(_)
            | SqlStatement::Update(_)
            | SqlStatement::Delete(_)
            | SqlStatement::Merge(_)
            | SqlStatement::Truncate(_)
            | SqlStatement::Copy { .. }
            | SqlStatement::CreateTable(_)
            | SqlStatement::CreateView(_)
            | SqlStatement::CreateIndex(_)
            | SqlStatement::CreateSchema { .. }
            | SqlStatement::CreateDatabase { .. }
            | SqlStatement::AlterTable(_)
            | SqlStatement::Drop { .. }
    )
}

/// The statement's first few words, for messages.
fn first_words(sql: &str) -> String {
    let words: Vec<&str> = sql.split_whitespace().take(3).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn command(sql: &str) -> PgWireResult<Command> {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        assert_eq!(statements.len(), 1, "{sql}");
        classify(statements.remove(0))
    }

    fn code(sql: &str) -> String {
        match command(sql) {
            Err(pgwire::error::PgWireError::UserError(info)) => info.code,
            other => panic!("{sql}: expected an error, got {other:?}"),
        }
    }

    #[test]
    fn session_commands_are_recognised() {
        assert!(matches!(
            command("SET application_name = 'psql'").unwrap(),
            Command::Set { name, value: Some(v) } if name == "application_name" && v == "psql"
        ));
        assert!(matches!(
            command("SET extra_float_digits TO 3").unwrap(),
            Command::Set { name, value: Some(v) } if name == "extra_float_digits" && v == "3"
        ));
        assert!(matches!(
            command("SET TIME ZONE 'UTC'").unwrap(),
            Command::Set { name, value: Some(v) } if name == "TimeZone" && v == "UTC"
        ));
        assert!(matches!(
            command("SET search_path TO DEFAULT").unwrap(),
            Command::Set { value: None, .. }
        ));
        assert!(
            matches!(command("SHOW search_path").unwrap(), Command::Show(n) if n == "search_path")
        );
        assert!(matches!(command("SHOW ALL").unwrap(), Command::ShowAll));
        assert!(matches!(
            command("RESET ALL").unwrap(),
            Command::Reset(None)
        ));
        assert!(matches!(command("BEGIN").unwrap(), Command::Begin));
        assert!(matches!(
            command("START TRANSACTION READ ONLY").unwrap(),
            Command::Begin
        ));
        assert!(matches!(command("COMMIT").unwrap(), Command::Commit));
        assert!(matches!(command("ROLLBACK").unwrap(), Command::Rollback));
        assert!(matches!(
            command("DEALLOCATE ALL").unwrap(),
            Command::Deallocate(None)
        ));
        assert!(
            matches!(command("DEALLOCATE PREPARE s1").unwrap(), Command::Deallocate(Some(n)) if n == "s1")
        );
        assert!(matches!(command("DISCARD ALL").unwrap(), Command::Discard));
        assert!(matches!(command("SELECT 1").unwrap(), Command::Query(_)));
        assert!(matches!(command("SHOW TABLES").unwrap(), Command::Query(_)));
    }

    #[test]
    fn writes_are_refused_as_read_only() {
        for sql in [
            "INSERT INTO cpu VALUES (1)",
            "UPDATE cpu SET v = 1",
            "DELETE FROM cpu",
            "CREATE TABLE t (x INT)",
            "DROP TABLE cpu",
            "TRUNCATE cpu",
        ] {
            assert_eq!(code(sql), "25006", "{sql}");
        }
        assert_eq!(code("PREPARE p AS SELECT 1"), "0A000");
    }
}

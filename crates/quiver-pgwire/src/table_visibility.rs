//! `pg_table_is_visible(oid)` as PostgreSQL means it: true for the tables of the session's
//! database (its `search_path`) and of `pg_catalog`, false for other databases' tables. psql's
//! `\dt`, `\d name` and `\d` and other clients' table lists filter `pg_class` with it, so a
//! session connected to one database lists that database's tables, as PostgreSQL does; other
//! databases' tables stay reachable by qualified name (`\dt beta.*`, `beta.cpu`) where the
//! token may read them.
//!
//! `datafusion-pg-catalog`'s function answers true for every table, and a scalar function
//! cannot look up the namespace of an object id (`pg_class` assigns them as it is read). So a
//! call is rewritten, in the parsed statement, into the membership test it stands for:
//! `oid IN (SELECT oid FROM pg_class of the session's schemas)`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Query, Statement, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// The object ids `pg_table_is_visible` is true for: the relations of the session's database
/// and of `pg_catalog` (aliases no client query uses, so none is shadowed).
const VISIBLE_RELATIONS: &str = "SELECT quiver_visible_class.oid \
     FROM pg_catalog.pg_class quiver_visible_class \
     JOIN pg_catalog.pg_namespace quiver_visible_namespace \
     ON quiver_visible_class.relnamespace = quiver_visible_namespace.oid \
     WHERE quiver_visible_namespace.nspname IN (current_schema(), 'pg_catalog')";

/// Rewrites every `pg_table_is_visible(x)` (qualified or not) in parsed statements.
#[derive(Debug)]
pub(crate) struct TableVisibility {
    visible_relations: Box<Query>,
}

impl TableVisibility {
    /// The rewrite, with its subquery parsed once.
    pub(crate) fn new() -> Self {
        let parsed = Parser::parse_sql(&PostgreSqlDialect {}, VISIBLE_RELATIONS)
            .expect("the visible relations query parses")
            .pop();
        let Some(Statement::Query(visible_relations)) = parsed else {
            unreachable!("VISIBLE_RELATIONS is one query")
        };
        TableVisibility { visible_relations }
    }

    /// `statement` with each `pg_table_is_visible(x)` replaced by `x IN (visible relations)`.
    pub(crate) fn rewrite(&self, mut statement: Statement) -> Statement {
        let _ = statement.visit(&mut Rewriter(self));
        statement
    }
}

struct Rewriter<'a>(&'a TableVisibility);

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(argument) = visibility_argument(expr) {
            *expr = Expr::Nested(Box::new(Expr::InSubquery {
                expr: Box::new(argument),
                subquery: self.0.visible_relations.clone(),
                negated: false,
            }));
        }
        ControlFlow::Continue(())
    }
}

/// The argument of `expr` if it is a call of `pg_table_is_visible` with one plain argument.
fn visibility_argument(expr: &Expr) -> Option<Expr> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let name = function.name.0.last()?.as_ident()?;
    if !name.value.eq_ignore_ascii_case("pg_table_is_visible") {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(argument))] => Some(argument.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap();
        TableVisibility::new().rewrite(statement).to_string()
    }

    #[test]
    fn calls_become_membership_in_the_session_schemas_relations() {
        let sql = rewritten(
            "SELECT c.relname FROM pg_catalog.pg_class c \
             WHERE c.relkind = 'r' AND pg_catalog.pg_table_is_visible(c.oid)",
        );
        assert!(
            sql.ends_with(&format!("AND (c.oid IN ({VISIBLE_RELATIONS}))")),
            "{sql}"
        );
        let sql = rewritten("SELECT PG_TABLE_IS_VISIBLE(oid) FROM pg_class");
        assert!(sql.starts_with("SELECT (oid IN (SELECT"), "{sql}");
    }

    #[test]
    fn other_calls_are_left_alone() {
        for sql in [
            "SELECT pg_table_is_visible(1, 2)",
            "SELECT pg_table_is_visible()",
            "SELECT pg_type_is_visible(oid) FROM pg_type",
            "SELECT relname FROM pg_class",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}

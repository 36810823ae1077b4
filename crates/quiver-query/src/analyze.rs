//! SQL canonicalisation and the facts a result cache needs about a statement before running it:
//! its canonical text, the tables it scans, and whether its answer depends on anything other
//! than those tables' data (the clock, randomness, the catalog itself).
//!
//! The canonical text is the statement's token stream with whitespace and comments dropped,
//! keywords and unquoted identifiers folded to lower case (as DataFusion folds unquoted
//! identifiers), and string literals, quoted identifiers and parameter names kept exactly. Two
//! statements with one canonical text are the same query; `'Bob'` and `'bob'`, or `"Host"` and
//! `host`, never are.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::common::TableReference;
use datafusion::execution::SessionState;
use datafusion::logical_expr::Volatility;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, Expr, ObjectNamePart, Statement as SqlStatement,
    Value,
};
use datafusion::sql::sqlparser::dialect::Dialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::catalog_names::{is_system_schema, CATALOG_NAME};

/// A table a statement reads, fully resolved against the request's database.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScannedTable {
    /// The database (SQL schema).
    pub database: String,
    /// The table.
    pub table: String,
}

/// Whether a statement's answer is a function of the data of the tables it scans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cacheability {
    /// Same tables at the same versions, same answer.
    Deterministic,
    /// The answer also depends on the time the query runs (`now()`, `current_date`, ...):
    /// cacheable only if the query's clock is rounded to a granularity.
    ClockDependent,
    /// Never cacheable; the reason says why (a volatile function, a metadata query, ...).
    Never(String),
}

/// A parsed statement and what the cache needs to know about it.
#[derive(Debug, Clone)]
pub struct QueryAnalysis {
    /// The database the statement runs in (its default schema).
    pub database: String,
    /// The canonical text (see the module documentation).
    pub canonical: String,
    /// The statement as received (what the list of running queries shows).
    pub text: String,
    /// Every Quiver table the statement reads, sorted, without duplicates.
    pub tables: Vec<ScannedTable>,
    /// Whether the answer can be cached.
    pub cacheability: Cacheability,
    /// The parsed statement, so that running it does not parse it again.
    pub(crate) statement: AnalyzedStatement,
    /// The SQL dialect it was parsed in (part of its plan's key, with the canonical text).
    pub(crate) dialect: std::any::TypeId,
}

/// A statement as analysed: SQL, or InfluxQL (planned by `quiver-influxql`).
#[derive(Debug, Clone)]
pub(crate) enum AnalyzedStatement {
    /// SQL, parsed by DataFusion.
    Sql(DFStatement),
    /// InfluxQL, parsed by `quiver-influxql`.
    Influxql(Arc<quiver_influxql::ast::Statement>),
}

/// The canonical text of `sql` under `dialect`: tokens separated by single spaces, comments
/// and whitespace dropped, keywords and unquoted identifiers lower-cased (ASCII, as DataFusion
/// folds them), trailing `;` removed; every other token in its unambiguous debug form.
pub fn canonical_sql(dialect: &dyn Dialect, sql: &str) -> Result<String, String> {
    let tokens = Tokenizer::new(dialect, sql)
        .tokenize()
        .map_err(|e| e.to_string())?;
    let mut significant: Vec<&Token> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    while significant.last() == Some(&&Token::SemiColon) {
        significant.pop();
    }
    let mut out = String::with_capacity(sql.len());
    for (i, token) in significant.into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match token {
            // DataFusion folds unquoted identifiers to ASCII lower case only: `Ä` and `ä`
            // are different columns.
            Token::Word(word) if word.quote_style.is_none() => {
                out.push_str(&word.value.to_ascii_lowercase());
            }
            // Debug, not Display: Display does not re-escape quotes inside literals and quoted
            // identifiers, so `'a'' or x = ''b'` (one literal) would print as
            // `'a' or x = 'b'`. Debug quotes and escapes every payload: unambiguous.
            other => {
                let _ = write!(out, "{other:?}");
            }
        }
    }
    Ok(out)
}

/// Numbers JDBC/ODBC-style `?` placeholders as `$1`, `$2`, ... in the order they appear in the
/// text (the Flight SQL JDBC driver sends statements as the application wrote them), so they
/// bind like PostgreSQL-style parameters. A statement mixing `?` with `$n` is refused: which
/// value each would take is ambiguous.
pub(crate) fn number_question_placeholders(statement: &mut DFStatement) -> Result<(), String> {
    match statement {
        DFStatement::Statement(statement) => number_in(statement),
        DFStatement::Explain(explain) => number_question_placeholders(&mut explain.statement),
        _ => Ok(()),
    }
}

fn number_in(statement: &mut SqlStatement) -> Result<(), String> {
    let (mut questions, mut numbered) = (0usize, false);
    // Placeholders are leaves: the visitor meets them in the order of the text.
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Value(value) = expr {
            if let Value::Placeholder(name) = &mut value.value {
                if name == "?" {
                    questions += 1;
                    *name = format!("${questions}");
                } else if name.starts_with('$') {
                    numbered = true;
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    if questions > 0 && numbered {
        return Err("a statement uses either `?` or `$1, $2, ...` placeholders, not both".into());
    }
    Ok(())
}

/// Analyses a parsed read-only `statement` of `sql` in `database`, given the tables its
/// references resolve to (`None` for references outside Quiver's catalog, see [`resolve`]).
pub(crate) fn analyze(
    state: &SessionState,
    dialect: &dyn Dialect,
    database: &str,
    sql: &str,
    statement: DFStatement,
    references: Vec<Option<ScannedTable>>,
) -> datafusion::error::Result<QueryAnalysis> {
    let canonical = canonical_sql(dialect, sql)
        .map_err(|e| datafusion::error::DataFusionError::Plan(format!("cannot tokenize: {e}")))?;
    let reads_catalog = references.iter().any(Option::is_none);
    let tables: BTreeSet<ScannedTable> = references.into_iter().flatten().collect();
    let cacheability = match &statement {
        DFStatement::Statement(s) if matches!(s.as_ref(), SqlStatement::Query(_)) => {
            if reads_catalog {
                Cacheability::Never("reads the catalog (a system schema)".into())
            } else {
                function_cacheability(state, s)
            }
        }
        _ => Cacheability::Never("not a query (SHOW, EXPLAIN or DESCRIBE)".into()),
    };
    Ok(QueryAnalysis {
        database: database.to_string(),
        canonical,
        text: sql.to_string(),
        tables: tables.into_iter().collect(),
        cacheability,
        statement: AnalyzedStatement::Sql(statement),
        dialect: dialect.dialect(),
    })
}

/// The Quiver table `reference` names, or `None` for anything else (system schemas such as
/// `information_schema` and `pg_catalog`, other catalogs).
pub(crate) fn resolve(reference: &TableReference, database: &str) -> Option<ScannedTable> {
    let resolved = reference.clone().resolve(CATALOG_NAME, database);
    (resolved.catalog.as_ref() == CATALOG_NAME && !is_system_schema(resolved.schema.as_ref())).then(
        || ScannedTable {
            database: resolved.schema.to_string(),
            table: resolved.table.to_string(),
        },
    )
}

/// The least cacheable of the functions `statement` calls: a volatile or unknown function
/// makes it [`Cacheability::Never`], a stable one (the clock) [`Cacheability::ClockDependent`].
fn function_cacheability(state: &SessionState, statement: &SqlStatement) -> Cacheability {
    let mut result = Cacheability::Deterministic;
    let _ = visit_expressions(statement, |expr| {
        let Expr::Function(function) = expr else {
            return ControlFlow::Continue(());
        };
        let name = match function.name.0.last() {
            Some(ObjectNamePart::Identifier(ident)) if ident.quote_style.is_some() => {
                ident.value.clone()
            }
            Some(ObjectNamePart::Identifier(ident)) => ident.value.to_lowercase(),
            _ => function.name.to_string(),
        };
        match function_volatility(state, &name) {
            Some(Volatility::Immutable) => ControlFlow::Continue(()),
            Some(Volatility::Stable) => {
                result = Cacheability::ClockDependent;
                ControlFlow::Continue(())
            }
            Some(Volatility::Volatile) => {
                result = Cacheability::Never(format!("calls the volatile function {name}()"));
                ControlFlow::Break(())
            }
            None => {
                result = Cacheability::Never(format!("calls the unknown function {name}()"));
                ControlFlow::Break(())
            }
        }
    });
    result
}

fn function_volatility(state: &SessionState, name: &str) -> Option<Volatility> {
    if let Some(f) = state.scalar_functions().get(name) {
        return Some(f.signature().volatility);
    }
    if let Some(f) = state.aggregate_functions().get(name) {
        return Some(f.signature().volatility);
    }
    state
        .window_functions()
        .get(name)
        .map(|f| f.signature().volatility)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::GenericDialect;

    fn canonical(sql: &str) -> String {
        canonical_sql(&GenericDialect {}, sql).unwrap()
    }

    fn numbered(sql: &str) -> Result<String, String> {
        let mut statement = datafusion::sql::parser::DFParser::parse_sql(sql)
            .unwrap()
            .pop_front()
            .unwrap();
        number_question_placeholders(&mut statement)?;
        Ok(statement.to_string())
    }

    #[test]
    fn question_placeholders_are_numbered_in_text_order() {
        assert_eq!(
            numbered(
                "SELECT a, ? FROM t JOIN u ON t.k = u.k AND u.x > ? \
                 WHERE b = '?' AND c IN (SELECT c FROM v WHERE d = ?) ORDER BY a LIMIT ?"
            )
            .unwrap(),
            "SELECT a, $1 FROM t JOIN u ON t.k = u.k AND u.x > $2 \
             WHERE b = '?' AND c IN (SELECT c FROM v WHERE d = $3) ORDER BY a LIMIT $4"
        );
        assert_eq!(
            numbered("EXPLAIN SELECT * FROM t WHERE a = ?").unwrap(),
            "EXPLAIN SELECT * FROM t WHERE a = $1"
        );
        assert_eq!(
            numbered("SELECT * FROM t WHERE a = $2 AND b = $1").unwrap(),
            "SELECT * FROM t WHERE a = $2 AND b = $1",
            "numbered placeholders are left alone"
        );
        assert!(numbered("SELECT * FROM t WHERE a = ? AND b = $1")
            .unwrap_err()
            .contains("not both"));
    }

    #[test]
    fn whitespace_comments_keyword_and_identifier_case_do_not_matter() {
        let a = canonical("SELECT Host, avg(Usage) FROM cpu WHERE region = 'EU' GROUP BY host");
        let b = canonical(
            "select   host ,AVG(usage)\n -- a comment\n from CPU /* another */ where REGION='EU' group by HOST;",
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            "select host Comma avg LParen usage RParen from cpu where region Eq \
             SingleQuotedString(\"EU\") group by host"
        );
    }

    #[test]
    fn literals_quoted_identifiers_and_parameters_keep_their_case() {
        assert_ne!(
            canonical("SELECT * FROM t WHERE name = 'Bob'"),
            canonical("SELECT * FROM t WHERE name = 'bob'")
        );
        assert_ne!(
            canonical("SELECT \"Host\" FROM t"),
            canonical("SELECT \"host\" FROM t")
        );
        assert_ne!(
            canonical("SELECT \"Host\" FROM t"),
            canonical("SELECT Host FROM t")
        );
        assert_ne!(
            canonical("SELECT * FROM t WHERE a = $Name"),
            canonical("SELECT * FROM t WHERE a = $name")
        );
        assert_ne!(canonical("SELECT 'a''b'"), canonical("SELECT 'a' 'b'"));
    }

    #[test]
    fn quotes_inside_literals_and_identifiers_cannot_forge_other_tokens() {
        assert_ne!(
            canonical("SELECT * FROM t WHERE name = 'a'' or name = ''b'"),
            canonical("SELECT * FROM t WHERE name = 'a' or name = 'b'")
        );
        assert_ne!(
            canonical("SELECT \"x\"\" , \"\"y\" FROM t"),
            canonical("SELECT \"x\" , \"y\" FROM t")
        );
        assert_ne!(
            canonical("SELECT $$a$$ || 'b'"),
            canonical("SELECT 'a' || 'b'")
        );
    }

    #[test]
    fn only_ascii_letters_fold_as_in_datafusion() {
        assert_ne!(canonical("SELECT Ä FROM t"), canonical("SELECT ä FROM t"));
        assert_eq!(
            canonical("SELECT Host FROM t"),
            canonical("select HOST from T")
        );
    }

    /// A query built from parts: (text, is it case-insensitive).
    fn query_parts(literal: &str) -> Vec<(String, bool)> {
        [
            ("SELECT", true),
            ("host", true),
            (",", true),
            ("\"Usage\"", false),
            ("FROM", true),
            ("cpu", true),
            ("WHERE", true),
            ("region", true),
            ("=", true),
        ]
        .into_iter()
        .map(|(s, folds)| (s.to_string(), folds))
        .chain([(format!("'{literal}'"), false)])
        .collect()
    }

    fn render(parts: &[(String, bool)], upper: &[bool], gaps: &[&str]) -> String {
        let mut sql = String::new();
        for (i, (text, folds)) in parts.iter().enumerate() {
            sql.push_str(gaps[i % gaps.len()]);
            if *folds && upper[i % upper.len()] {
                sql.push_str(&text.to_uppercase());
            } else {
                sql.push_str(text);
            }
        }
        sql
    }

    proptest::proptest! {
        #[test]
        fn folding_is_exactly_sql_identifier_folding(
            literal in "[a-zA-Z ]{1,8}",
            upper in proptest::collection::vec(proptest::bool::ANY, 1..12),
            gaps in proptest::collection::vec(
                proptest::sample::select(vec![" ", "  ", "\n", "\t", " /* c */ ", " -- c\n"]), 1..6),
        ) {
            let parts = query_parts(&literal);
            let gaps: Vec<&str> = gaps.into_iter().collect();
            let plain = render(&parts, &[false], &[" "]);
            let varied = render(&parts, &upper, &gaps);
            proptest::prop_assert_eq!(canonical(&plain), canonical(&varied));
            // Any change of case inside the literal is a different query.
            let flipped: String = literal
                .chars()
                .map(|c| if c.is_lowercase() { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() })
                .collect();
            if flipped != literal {
                let other = render(&query_parts(&flipped), &upper, &gaps);
                proptest::prop_assert_ne!(canonical(&plain), canonical(&other));
            }
        }
    }
}

//! Bounds on a statement's text and nesting, enforced as it is parsed, before anything else
//! walks it.
//!
//! The parser reads a chain of operators (`1 + 1 + …`, `… OR …`, `… UNION ALL …`) in a loop,
//! but the tree it builds is as deep as the chain is long, and everything that walks a tree
//! recursively afterwards (cloning, printing, planning, evaluating, even dropping it) needs
//! stack for every level: a 25 KB statement of a thousand `UNION ALL`s overflowed a thread's
//! stack and aborted the whole server. So a statement longer than `max_sql_bytes` is refused
//! unread, and one nested deeper than `max_sql_depth` is refused as soon as it is parsed. A
//! statement long enough to be nested that deep is parsed, measured and, if refused, dropped
//! on a stack of its own sized by its length (each level of nesting takes at least two bytes
//! of text), so that measuring and freeing it cannot overflow either; one too short to be
//! that deep is parsed where it is, at no extra cost. (Nesting through parentheses and
//! subqueries is bounded earlier, by the parser's own recursion limit.)

use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, Statement, Visit, Visitor};

/// The deepest nesting `max_sql_depth` may allow: what every recursive walk of a statement
/// and its plans (planning, optimizing, evaluating, dropping) was tested to take within
/// [`THREAD_STACK_BYTES`].
pub const MAX_SQL_DEPTH: usize = 1000;

/// The stack of each thread that parses, plans or runs queries (the server's runtimes); only
/// what a thread touches is backed by memory.
pub const THREAD_STACK_BYTES: usize = 32 << 20;

/// How long and how deeply nested a statement may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementLimits {
    /// Bytes of text (`max_sql_bytes`).
    pub max_bytes: usize,
    /// Levels of nesting (`max_sql_depth`): each operator of a chain, each set operation,
    /// each nested expression or subquery is one.
    pub max_depth: usize,
}

/// A statement refused before it was planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementLimit {
    /// Its text is longer than `max_sql_bytes`.
    #[error("the statement is {bytes} bytes long, over max_sql_bytes = {limit}")]
    TooLong {
        /// Its length.
        bytes: usize,
        /// `max_sql_bytes`.
        limit: usize,
    },
    /// It nests deeper than `max_sql_depth`.
    #[error(
        "the statement is nested more than max_sql_depth = {limit} levels deep (each operator \
         of a chain such as `a + b + c`, `x = 1 OR x = 2 OR …` or `… UNION ALL …`, and each \
         nested expression or subquery, is a level): write long lists as `x IN (1, 2, …)` or \
         split the statement, or raise max_sql_depth"
    )]
    TooDeep {
        /// `max_sql_depth`.
        limit: usize,
    },
}

/// What a parse produced, measured for nesting.
pub trait Nested {
    /// Whether some part of it is nested more than `limit` levels deep; stops looking (and
    /// recursing) once it is.
    fn deeper_than(&self, limit: usize) -> bool;
}

/// Bytes of stack to parse, measure and drop a statement of `len` bytes on: room for a level
/// of nesting per two bytes at a generous 1 KiB a level (unoptimized builds take several
/// hundred bytes for some), and 1 MiB besides. Only what is touched is ever backed by memory.
fn stack_for(len: usize) -> usize {
    (len / 2).saturating_mul(1024).saturating_add(1 << 20)
}

/// Parses `sql` with `parse` within `limits`: refused unread if too long; refused (and
/// dropped on its own stack) if what `parse` made is too deeply nested; else what `parse`
/// made (a parse error included: the caller reports it).
pub fn parse_bounded<T: Nested>(
    sql: &str,
    limits: StatementLimits,
    parse: impl FnOnce(&str) -> T,
) -> Result<T, StatementLimit> {
    if sql.len() > limits.max_bytes {
        return Err(StatementLimit::TooLong {
            bytes: sql.len(),
            limit: limits.max_bytes,
        });
    }
    // a level of nesting takes at least two bytes: this text cannot be too deep
    if sql.len() / 2 + 2 <= limits.max_depth {
        return Ok(parse(sql));
    }
    stacker::grow(stack_for(sql.len()), || {
        let parsed = parse(sql);
        if parsed.deeper_than(limits.max_depth) {
            // freed here, on this stack: dropping a deep tree recurses as deep
            drop(parsed);
            return Err(StatementLimit::TooDeep {
                limit: limits.max_depth,
            });
        }
        Ok(parsed)
    })
}

impl Nested for Statement {
    fn deeper_than(&self, limit: usize) -> bool {
        let mut depth = Depth::new(limit);
        self.visit(&mut depth).is_break()
    }
}

impl Nested for DFStatement {
    fn deeper_than(&self, limit: usize) -> bool {
        let mut depth = Depth::new(limit);
        let visited = match self {
            DFStatement::Statement(statement) => statement.visit(&mut depth),
            DFStatement::Explain(explain) => return explain.statement.deeper_than(limit),
            DFStatement::CopyTo(copy) => match &copy.source {
                CopyToSource::Query(query) => query.visit(&mut depth),
                CopyToSource::Relation(_) => ControlFlow::Continue(()),
            },
            DFStatement::CreateExternalTable(create) => {
                if create.columns.visit(&mut depth).is_break() {
                    return true;
                }
                create.order_exprs.visit(&mut depth)
            }
            DFStatement::Reset(_) => ControlFlow::Continue(()),
        };
        visited.is_break()
    }
}

impl<T: Nested> Nested for Vec<T> {
    fn deeper_than(&self, limit: usize) -> bool {
        self.iter().any(|item| item.deeper_than(limit))
    }
}

impl<T: Nested, E> Nested for Result<T, E> {
    /// A parse error holds no tree (the parser dropped what it had built, on the stack it
    /// ran on).
    fn deeper_than(&self, limit: usize) -> bool {
        self.as_ref().is_ok_and(|parsed| parsed.deeper_than(limit))
    }
}

/// Counts the levels of nesting on the way down a statement and breaks off once past the
/// limit, so that its own recursion never goes deeper than the limit.
struct Depth {
    current: usize,
    limit: usize,
    /// The levels each query being visited added (itself and its set operations).
    queries: Vec<usize>,
}

impl Depth {
    fn new(limit: usize) -> Self {
        Depth {
            current: 0,
            limit,
            queries: Vec::new(),
        }
    }

    fn enter(&mut self, levels: usize) -> ControlFlow<()> {
        self.current += levels;
        if self.current > self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl Visitor for Depth {
    type Break = ();

    /// A query, and its chain of set operations (`UNION`, `EXCEPT`, `INTERSECT`): the visit
    /// would descend that chain before any expression in it, so its depth is measured here,
    /// without recursion, first.
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let levels = 1 + set_operation_depth(&query.body);
        self.queries.push(levels);
        self.enter(levels)
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
        self.current -= self.queries.pop().unwrap_or(0);
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.enter(1)
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.current -= 1;
        ControlFlow::Continue(())
    }
}

/// How deeply set operations nest in `body` (0 for a plain `SELECT`), found with a stack of
/// its own rather than recursion.
fn set_operation_depth(body: &SetExpr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(body, 0)];
    while let Some((expr, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        if let SetExpr::SetOperation { left, right, .. } = expr {
            pending.push((left, depth + 1));
            pending.push((right, depth + 1));
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    const LIMITS: StatementLimits = StatementLimits {
        max_bytes: 4 << 20,
        max_depth: 1000,
    };

    fn datafusion(sql: &str) -> Result<DFStatement, String> {
        parse_bounded(sql, LIMITS, |sql| {
            DFParser::parse_sql(sql).map(|mut statements| statements.pop_front().unwrap())
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    fn postgres(sql: &str) -> Result<Vec<Statement>, String> {
        parse_bounded(sql, LIMITS, |sql| {
            Parser::parse_sql(&PostgreSqlDialect {}, sql)
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    fn chain(operator: &str, terms: usize) -> String {
        (0..terms)
            .map(|i| format!("x = {i}"))
            .collect::<Vec<_>>()
            .join(operator)
    }

    /// Statements nested `levels` deep, of each kind of chain.
    fn deep(levels: usize) -> Vec<String> {
        vec![
            format!("SELECT {}", vec!["1"; levels].join("+")),
            format!("SELECT 1 WHERE {}", chain(" OR ", levels)),
            vec!["SELECT 1"; levels].join(" UNION ALL "),
            format!(
                "SELECT 1 INTERSECT {}",
                vec!["SELECT 1"; levels].join(" INTERSECT ")
            ),
            format!(
                "SELECT x FROM t WHERE x IN (SELECT {})",
                vec!["x"; levels].join("||")
            ),
            format!("EXPLAIN SELECT {}", vec!["1"; levels].join("*")),
            format!("SELECT 1{}", "::INT".repeat(levels)),
        ]
    }

    #[test]
    fn statements_within_the_depth_are_parsed_and_deeper_ones_refused() {
        for sql in deep(LIMITS.max_depth - 10) {
            assert!(datafusion(&sql).is_ok(), "{}", &sql[..60]);
            assert!(postgres(&sql).is_ok(), "{}", &sql[..60]);
        }
        for sql in deep(LIMITS.max_depth + 1) {
            let refused = datafusion(&sql).unwrap_err();
            assert!(refused.contains("max_sql_depth = 1000"), "{refused}");
            let refused = postgres(&sql).unwrap_err();
            assert!(refused.contains("max_sql_depth = 1000"), "{refused}");
        }
    }

    #[test]
    fn long_flat_statements_are_not_deep() {
        let in_list = format!(
            "SELECT count(*) FROM t WHERE x IN ({})",
            (0..50_000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let columns = format!(
            "SELECT {} FROM t",
            (0..5_000)
                .map(|i| format!("x + {i} AS c{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for sql in [in_list, columns] {
            assert!(datafusion(&sql).is_ok());
            assert!(postgres(&sql).is_ok());
        }
    }

    /// Far deeper than any thread's stack could walk (this test's thread has the default
    /// 2 MiB): measured, refused and freed without overflowing, and so is a parse error
    /// found after a deep chain was built.
    #[test]
    fn very_deep_statements_are_refused_without_exhausting_the_stack() {
        for sql in deep(100_000) {
            assert!(datafusion(&sql).unwrap_err().contains("max_sql_depth"));
            assert!(postgres(&sql).unwrap_err().contains("max_sql_depth"));
        }
        let broken = format!("SELECT {} +", vec!["1"; 100_000].join("+"));
        assert!(datafusion(&broken).unwrap_err().contains("Expected"));
        assert!(postgres(&broken).unwrap_err().contains("Expected"));
    }

    #[test]
    fn long_statements_are_refused_unread() {
        let limits = StatementLimits {
            max_bytes: 100,
            max_depth: 1000,
        };
        let sql = format!("SELECT '{}'", "x".repeat(100));
        let refused = parse_bounded(&sql, limits, |_| -> Result<Statement, ()> {
            panic!("not parsed")
        })
        .unwrap_err();
        assert_eq!(
            refused,
            StatementLimit::TooLong {
                bytes: 109,
                limit: 100
            }
        );
        assert!(refused.to_string().contains("max_sql_bytes = 100"));
    }

    #[test]
    fn set_operations_nest_as_deep_as_their_longest_branch() {
        let parse = |sql: &str| match Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
        {
            Statement::Query(query) => set_operation_depth(&query.body),
            other => panic!("{other}"),
        };
        assert_eq!(parse("SELECT 1"), 0);
        assert_eq!(parse("SELECT 1 UNION SELECT 2"), 1);
        assert_eq!(parse("SELECT 1 UNION SELECT 2 UNION SELECT 3"), 2);
        assert_eq!(
            parse("SELECT 1 UNION SELECT 2 INTERSECT SELECT 3 INTERSECT SELECT 4"),
            3
        );
    }
}

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
//!
//! The levels counted are those of expressions (with the types they cast to), queries and
//! their set operations, the tables and joins of each `FROM`, and `MATCH_RECOGNIZE`
//! patterns. Anything else the parser can nest (a type in a column definition or a table
//! alias, a form not foreseen here) is caught by a second, generic measure on long text: the
//! stack that a walk over every node of the tree takes ([`WALK_STACK_LIMIT`]).

use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, DataType, Expr, MatchRecognizePattern, Query, SetExpr, Statement,
    TableFactor, Visit, Visitor,
};

/// The deepest nesting `max_sql_depth` may allow: what every recursive walk of a statement
/// and its plans (planning, optimizing, evaluating, dropping) was tested to take within
/// [`THREAD_STACK_BYTES`].
pub const MAX_SQL_DEPTH: usize = 1000;

/// The longest statement `max_sql_bytes` may allow: one this long is parsed on a stack of
/// about a GiB of address space (see `stack_for`; only what is touched is backed).
pub const MAX_SQL_BYTES: usize = 4 << 20;

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

    /// The most stack a walk over every node of a tree it holds takes, in bytes (see
    /// [`walk_stack_bytes`]).
    fn walk_stack_bytes(&self) -> usize;
}

/// Stack a walk over every node of a statement (its derived `Hash`, the leanest recursive
/// walk it has) may take on long text before the statement is refused as too deep. A chain
/// at `max_sql_depth` takes well under a tenth of it even unoptimized; a nesting the level
/// count does not see would have to be tens of thousands deep to pass it, which the other
/// walks (cloning, printing, planning, freeing) still do within [`THREAD_STACK_BYTES`].
pub const WALK_STACK_LIMIT: usize = 2 << 20;

/// The stack a walk over every node of `tree` (its derived `Hash`) takes, in bytes: a
/// hasher that hashes nothing notes how deep the stack is at every node it is fed (0 where
/// the stack cannot be measured).
fn walk_stack_bytes(tree: &impl Hash) -> usize {
    let Some(start) = stacker::remaining_stack() else {
        return 0;
    };
    let mut probe = StackProbe { start, deepest: 0 };
    tree.hash(&mut probe);
    probe.deepest
}

/// The hasher of [`walk_stack_bytes`].
struct StackProbe {
    start: usize,
    deepest: usize,
}

impl Hasher for StackProbe {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, _bytes: &[u8]) {
        if let Some(remaining) = stacker::remaining_stack() {
            self.deepest = self.deepest.max(self.start.saturating_sub(remaining));
        }
    }
}

/// Whether `parsed` is too deep for `limit`: by its count of levels, or by the stack a walk
/// over all of it takes.
fn too_deep<T: Nested>(parsed: &T, limit: usize) -> bool {
    parsed.deeper_than(limit) || parsed.walk_stack_bytes() > WALK_STACK_LIMIT
}

/// Bytes of stack to parse, measure and drop a statement of `len` bytes on: room for a level
/// of nesting per byte at 256 bytes a level (freeing a level takes far less even
/// unoptimized), and 4 MiB besides (the measures stop at their limits). Only what is touched
/// is ever backed by memory.
fn stack_for(len: usize) -> usize {
    len.saturating_mul(256).saturating_add(4 << 20)
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
        if too_deep(&parsed, limits.max_depth) {
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

    fn walk_stack_bytes(&self) -> usize {
        walk_stack_bytes(self)
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

    fn walk_stack_bytes(&self) -> usize {
        match self {
            DFStatement::Statement(statement) => walk_stack_bytes(statement),
            DFStatement::Explain(explain) => explain.statement.walk_stack_bytes(),
            DFStatement::CopyTo(copy) => match &copy.source {
                CopyToSource::Query(query) => walk_stack_bytes(query),
                CopyToSource::Relation(name) => walk_stack_bytes(name),
            },
            DFStatement::CreateExternalTable(create) => {
                walk_stack_bytes(&create.columns).max(walk_stack_bytes(&create.order_exprs))
            }
            DFStatement::Reset(_) => 0,
        }
    }
}

impl<T: Nested> Nested for Vec<T> {
    fn deeper_than(&self, limit: usize) -> bool {
        self.iter().any(|item| item.deeper_than(limit))
    }

    fn walk_stack_bytes(&self) -> usize {
        self.iter().map(Nested::walk_stack_bytes).max().unwrap_or(0)
    }
}

impl<T: Nested, E> Nested for Result<T, E> {
    /// A parse error holds no tree (the parser dropped what it had built, on the stack it
    /// ran on).
    fn deeper_than(&self, limit: usize) -> bool {
        self.as_ref().is_ok_and(|parsed| parsed.deeper_than(limit))
    }

    fn walk_stack_bytes(&self) -> usize {
        self.as_ref().map_or(0, Nested::walk_stack_bytes)
    }
}

/// Counts the levels of nesting on the way down a statement and breaks off once past the
/// limit, so that its own recursion never goes deeper than the limit.
struct Depth {
    current: usize,
    limit: usize,
    /// The levels each node being visited added, innermost last (popped on the way back).
    entered: Vec<usize>,
}

impl Depth {
    fn new(limit: usize) -> Self {
        Depth {
            current: 0,
            limit,
            entered: Vec::new(),
        }
    }

    fn enter(&mut self, levels: usize) -> ControlFlow<()> {
        self.entered.push(levels);
        self.current += levels;
        if self.current > self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn leave(&mut self) -> ControlFlow<()> {
        self.current -= self.entered.pop().unwrap_or(0);
        ControlFlow::Continue(())
    }
}

impl Visitor for Depth {
    type Break = ();

    /// A query, its chain of set operations (`UNION`, `EXCEPT`, `INTERSECT`) and the tables
    /// and joins of its `FROM`s: the visit would descend that chain before any expression in
    /// it, so its depth is measured here, without recursion, first.
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        self.enter(1 + body_depth(&query.body))
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
        self.leave()
    }

    /// An expression, and the type it casts to (`1::INT[][]…` nests in the type).
    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        self.enter(1 + expr_type_depth(expr))
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.leave()
    }

    /// A table, and a `MATCH_RECOGNIZE` pattern (`PATTERN (a*****…)` nests in the pattern).
    fn pre_visit_table_factor(&mut self, table: &TableFactor) -> ControlFlow<()> {
        let pattern = match table {
            TableFactor::MatchRecognize { pattern, .. } => pattern_depth(pattern),
            _ => 0,
        };
        self.enter(pattern)
    }

    fn post_visit_table_factor(&mut self, _table: &TableFactor) -> ControlFlow<()> {
        self.leave()
    }
}

/// How deeply set operations nest in `body`, with the tables and joins of each `FROM` (a
/// planner joins them one after the other: a plan as deep as they are many), found with a
/// stack of its own rather than recursion. 0 for `SELECT 1`.
fn body_depth(body: &SetExpr) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(body, 0)];
    while let Some((expr, depth)) = pending.pop() {
        match expr {
            SetExpr::SetOperation { left, right, .. } => {
                pending.push((left, depth + 1));
                pending.push((right, depth + 1));
            }
            SetExpr::Select(select) => {
                let joined: usize = select.from.iter().map(|t| t.joins.len()).sum();
                let tables = (select.from.len() + joined).saturating_sub(1);
                deepest = deepest.max(depth + tables);
            }
            _ => deepest = deepest.max(depth),
        }
    }
    deepest
}

/// How deeply the type an expression casts to (or declares) nests.
fn expr_type_depth(expr: &Expr) -> usize {
    match expr {
        Expr::Cast { data_type, .. } => type_depth(data_type),
        Expr::Convert {
            data_type: Some(data_type),
            ..
        } => type_depth(data_type),
        Expr::TypedString(typed) => type_depth(&typed.data_type),
        Expr::Struct { fields, .. } => fields
            .iter()
            .map(|field| 1 + type_depth(&field.field_type))
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

/// How deeply `data_type` nests (0 for `INT`, 1 for `INT[]`), found without recursion.
fn type_depth(data_type: &DataType) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(data_type, 0)];
    while let Some((data_type, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        let depth = depth + 1;
        match data_type {
            DataType::Array(
                ArrayElemTypeDef::AngleBracket(inner)
                | ArrayElemTypeDef::SquareBracket(inner, _)
                | ArrayElemTypeDef::Parenthesis(inner),
            )
            | DataType::Nullable(inner)
            | DataType::LowCardinality(inner) => pending.push((inner, depth)),
            DataType::Map(key, value) => {
                pending.push((key, depth));
                pending.push((value, depth));
            }
            DataType::Struct(fields, _) | DataType::Tuple(fields) => {
                pending.extend(fields.iter().map(|f| (&f.field_type, depth)));
            }
            DataType::Union(fields) => {
                pending.extend(fields.iter().map(|f| (&f.field_type, depth)));
            }
            DataType::Nested(columns) | DataType::Table(Some(columns)) => {
                pending.extend(columns.iter().map(|c| (&c.data_type, depth)));
            }
            _ => {}
        }
    }
    deepest
}

/// How deeply a `MATCH_RECOGNIZE` pattern nests, found without recursion.
fn pattern_depth(pattern: &MatchRecognizePattern) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(pattern, 0)];
    while let Some((pattern, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        match pattern {
            MatchRecognizePattern::Group(inner) | MatchRecognizePattern::Repetition(inner, _) => {
                pending.push((inner, depth + 1))
            }
            MatchRecognizePattern::Concat(inner) | MatchRecognizePattern::Alternation(inner) => {
                pending.extend(inner.iter().map(|p| (p, depth + 1)))
            }
            _ => {}
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

    /// Statements nested `levels` deep, of each kind of chain (each long enough to be
    /// measured, not let through by its length).
    fn deep(levels: usize) -> Vec<String> {
        vec![
            format!("SELECT {}", vec!["10"; levels].join("+")),
            format!("SELECT 1 WHERE {}", chain(" OR ", levels)),
            vec!["SELECT 1"; levels].join(" UNION ALL "),
            format!(
                "SELECT 1 INTERSECT {}",
                vec!["SELECT 1"; levels].join(" INTERSECT ")
            ),
            format!(
                "SELECT x FROM t WHERE x IN (SELECT {})",
                vec!["xy"; levels].join("||")
            ),
            format!("EXPLAIN SELECT {}", vec!["10"; levels].join("*")),
            format!("SELECT 1{}", "::INT".repeat(levels)),
            format!("SELECT CAST(1 AS INT{})", "[ ]".repeat(levels)),
            format!("SELECT 1::INT{}", "[ ]".repeat(levels)),
            format!(
                "SELECT 1 FROM {}",
                (0..levels)
                    .map(|i| format!("t{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("SELECT 1 FROM t{}", " CROSS JOIN t".repeat(levels)),
        ]
    }

    /// Nestings the level count does not look into (a type in a column definition or a
    /// table alias) are caught by the stack their walk takes.
    #[test]
    fn nestings_outside_expressions_are_caught_by_their_walk() {
        let column = format!("CREATE TABLE t (a INT{})", "[ ]".repeat(200_000));
        assert!(postgres(&column).unwrap_err().contains("max_sql_depth"));
        assert!(datafusion(&column).unwrap_err().contains("max_sql_depth"));
        let alias = format!(
            "SELECT 1 FROM generate_series(1, 2) AS g(v INT{})",
            "[ ]".repeat(200_000)
        );
        assert!(datafusion(&alias).unwrap_err().contains("max_sql_depth"));
        let pattern = format!(
            "SELECT * FROM t MATCH_RECOGNIZE (PATTERN (a{}) DEFINE a AS true)",
            "*".repeat(3_000)
        );
        assert!(datafusion(&pattern).unwrap_err().contains("max_sql_depth"));
        let shallow = format!("CREATE TABLE t (a INT{})", "[ ]".repeat(900));
        assert!(postgres(&shallow).is_ok());
    }

    #[test]
    fn statements_within_the_depth_are_parsed_and_deeper_ones_refused() {
        for sql in deep(LIMITS.max_depth - 10) {
            assert!(
                sql.len() / 2 + 2 > LIMITS.max_depth,
                "measured: {}",
                &sql[..60]
            );
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
            let short = &sql[..60];
            assert!(
                datafusion(&sql).unwrap_err().contains("max_sql_depth"),
                "{short}"
            );
            assert!(
                postgres(&sql).unwrap_err().contains("max_sql_depth"),
                "{short}"
            );
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
    fn set_operations_and_joins_nest_as_deep_as_their_longest_branch() {
        let parse = |sql: &str| match Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
        {
            Statement::Query(query) => body_depth(&query.body),
            other => panic!("{other}"),
        };
        assert_eq!(parse("SELECT 1"), 0);
        assert_eq!(parse("SELECT 1 UNION SELECT 2"), 1);
        assert_eq!(parse("SELECT 1 UNION SELECT 2 UNION SELECT 3"), 2);
        assert_eq!(
            parse("SELECT 1 UNION SELECT 2 INTERSECT SELECT 3 INTERSECT SELECT 4"),
            3
        );
        assert_eq!(parse("SELECT 1 FROM a, b JOIN c ON true JOIN d ON true"), 3);
        assert_eq!(parse("SELECT 1 FROM a UNION SELECT 2 FROM b, c, d"), 3);
    }
}

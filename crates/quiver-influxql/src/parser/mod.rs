//! The InfluxQL parser: text to [`Statement`]s.
//!
//! Recursive descent over the tokens of the (private) lexer, following the grammar of
//! InfluxDB 1.x's parser (github.com/influxdata/influxql) and its error wording
//! ("found FROM, expected identifier, string, number, bool at line 1, char 8"). Statements
//! Quiver does not run (writes, administration, `SELECT ... INTO`, cardinality estimates)
//! are errors that say so, rather than statements the caller has to refuse.
//!
//! Nesting is bounded ([`ParseLimits`]), so hostile input yields an error, never a stack
//! overflow: the parser's own recursion is counted, and so is the depth of the operator
//! trees it builds (which every consumer of the tree walks recursively).
//!
//! This module has the entry point ([`parse`]), the token cursor with its errors and
//! limits, and what several statements share (`WHERE`, `LIMIT`/`OFFSET`, measurement
//! names); `select` parses `SELECT` and its clauses, `show` the `SHOW` statements, and
//! `expr` expressions (operators and precedence, literals, calls, regexes, durations).

use std::fmt;

use crate::ast::{Expr, MeasurementName, NameOrRegex, Statement};
use crate::lexer::{line_char, LexError, Lexer, Token, TokenKind};

mod expr;
mod select;
mod show;
#[cfg(test)]
mod tests;

/// Bounds on what [`parse`] accepts; past them it returns a [`ParseError`] naming the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// How deeply parentheses, function calls and subqueries may nest (default 64). The
    /// operator tree of one expression may be `16 ×` this deep (1,024 by default: a `WHERE`
    /// clause of about a thousand `OR`ed conditions). The parser recurses per level, so a
    /// much larger value needs a correspondingly larger stack.
    pub max_depth: usize,
    /// The longest text accepted, in bytes (default 1 MiB).
    pub max_bytes: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_depth: 64,
            max_bytes: 1 << 20,
        }
    }
}

/// Why a text is not InfluxQL Quiver runs, and where.
///
/// Displays exactly like InfluxDB 1.x: `"{message} at line {line}, char {char}"`, e.g.
/// `found FROM, expected identifier, string, number, bool at line 1, char 8`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What is wrong (`found X, expected Y`, `unterminated string`, ...).
    pub message: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based character within the line (counted in characters, not bytes). For an
    /// unexpected end of text this is where InfluxDB 1.x reports it, which is sometimes one
    /// past the last character.
    pub char: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {}, char {}",
            self.message, self.line, self.char
        )
    }
}

impl std::error::Error for ParseError {}

/// Parses `text`: one or more statements separated by `;` (a trailing `;` is allowed).
///
/// An empty text (or one with only `;`, whitespace and comments) is an error, like
/// InfluxDB's "found EOF, expected SELECT, DELETE, SHOW, ...".
///
/// ```
/// use quiver_influxql::{parse, ParseLimits};
/// let statements = parse("SELECT mean(usage) FROM cpu GROUP BY time(1m)", ParseLimits::default())?;
/// assert_eq!(
///     statements[0].to_string(),
///     r#"SELECT mean("usage") FROM "cpu" GROUP BY time(1m)"#
/// );
/// # Ok::<(), quiver_influxql::ParseError>(())
/// ```
pub fn parse(text: &str, limits: ParseLimits) -> Result<Vec<Statement>, ParseError> {
    if text.len() > limits.max_bytes {
        return Err(ParseError {
            message: format!(
                "query is {} bytes, more than the limit of {} bytes (max_bytes)",
                text.len(),
                limits.max_bytes
            ),
            line: 1,
            char: 1,
        });
    }
    let mut parser = Parser::new(text, limits);
    let mut statements = Vec::new();
    let mut separated = true;
    loop {
        let tok = parser.next()?;
        match tok.kind {
            TokenKind::Eof => {
                if statements.is_empty() {
                    return Err(parser.expected(&tok, STATEMENT_STARTS));
                }
                return Ok(statements);
            }
            TokenKind::Semicolon => separated = true,
            _ => {
                if !separated {
                    return Err(parser.expected(&tok, &[";"]));
                }
                parser.peeked = Some(tok);
                statements.push(parser.parse_statement()?);
                separated = false;
            }
        }
    }
}

/// The first words of InfluxDB 1.x statements, in the order its errors list them.
const STATEMENT_STARTS: &[&str] = &[
    "SELECT", "DELETE", "SHOW", "CREATE", "DROP", "EXPLAIN", "GRANT", "REVOKE", "ALTER", "SET",
    "KILL",
];

/// How the operator tree of one expression may be, relative to `max_depth`.
const TREE_DEPTH_FACTOR: usize = 16;

fn to_parse_error(text: &str, e: LexError) -> ParseError {
    let (line, char) = line_char(text, e.offset);
    ParseError {
        message: e.message,
        line,
        char,
    }
}

/// `Some(s)` unless `s` is empty (`db..cpu` has an empty retention policy).
fn non_empty(s: String) -> Option<String> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

struct Parser<'a> {
    text: &'a str,
    lexer: Lexer<'a>,
    /// One token of lookahead.
    peeked: Option<Token>,
    limits: ParseLimits,
    /// Current nesting of parentheses, calls and subqueries.
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, limits: ParseLimits) -> Self {
        Parser {
            text,
            lexer: Lexer::new(text),
            peeked: None,
            limits,
            depth: 0,
        }
    }

    // ---- tokens ----

    fn peek(&mut self) -> Result<&Token, ParseError> {
        let tok = match self.peeked.take() {
            Some(tok) => tok,
            None => self
                .lexer
                .next_token()
                .map_err(|e| to_parse_error(self.text, e))?,
        };
        Ok(self.peeked.insert(tok))
    }

    fn next(&mut self) -> Result<Token, ParseError> {
        match self.peeked.take() {
            Some(tok) => Ok(tok),
            None => self
                .lexer
                .next_token()
                .map_err(|e| to_parse_error(self.text, e)),
        }
    }

    fn peek_is(&mut self, kind: &TokenKind) -> Result<bool, ParseError> {
        Ok(&self.peek()?.kind == kind)
    }

    fn peek_is_keyword(&mut self, kw: &str) -> Result<bool, ParseError> {
        Ok(self.peek()?.kind.is_keyword(kw))
    }

    /// Consumes the next token if it is `kind`.
    fn eat(&mut self, kind: &TokenKind) -> Result<bool, ParseError> {
        if self.peek_is(kind)? {
            self.next()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Consumes the next token if it is the keyword `kw`.
    fn eat_keyword(&mut self, kw: &str) -> Result<bool, ParseError> {
        if self.peek_is_keyword(kw)? {
            self.next()?;
            return Ok(true);
        }
        Ok(false)
    }

    fn expect(&mut self, kind: &TokenKind) -> Result<Token, ParseError> {
        let tok = self.next()?;
        if &tok.kind == kind {
            return Ok(tok);
        }
        Err(self.expected(&tok, &[&kind.found()]))
    }

    fn expect_keyword(&mut self, kw: &str) -> Result<Token, ParseError> {
        let tok = self.next()?;
        if tok.kind.is_keyword(kw) {
            return Ok(tok);
        }
        Err(self.expected(&tok, &[kw]))
    }

    /// The next token, which must be an identifier.
    fn parse_ident(&mut self) -> Result<String, ParseError> {
        let tok = self.next()?;
        match tok.kind {
            TokenKind::Ident(name) => Ok(name),
            _ => Err(self.expected(&tok, &["identifier"])),
        }
    }

    // ---- errors and limits ----

    fn error_at(&self, offset: usize, message: impl Into<String>) -> ParseError {
        let (line, char) = line_char(self.text, offset);
        ParseError {
            message: message.into(),
            line,
            char,
        }
    }

    /// "found X, expected A, B".
    fn expected(&self, found: &Token, expected: &[&str]) -> ParseError {
        // 1.x positions a single-quoted string at the character before its quote
        // ("KILL QUERY 4 ON 'host'" → "found host, expected identifier at line 1, char 16")
        let offset = match found.kind {
            TokenKind::Str(_) => self.text[..found.start]
                .char_indices()
                .next_back()
                .map_or(0, |(i, _)| i),
            _ => found.start,
        };
        self.error_at(
            offset,
            format!(
                "found {}, expected {}",
                found.kind.found(),
                expected.join(", ")
            ),
        )
    }

    fn unsupported(&self, offset: usize, what: &str) -> ParseError {
        self.error_at(
            offset,
            format!("{what} is not supported: Quiver runs InfluxQL SELECT and SHOW queries"),
        )
    }

    /// Enters a parenthesis, call or subquery opened at `offset`.
    fn enter(&mut self, offset: usize) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(self.error_at(
                offset,
                format!(
                    "statement nests parentheses, calls and subqueries more than {} deep (max_depth)",
                    self.limits.max_depth
                ),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Checks the depth of an operator tree being built at `offset`.
    fn check_tree(&self, depth: usize, offset: usize) -> Result<(), ParseError> {
        let max = self.limits.max_depth.saturating_mul(TREE_DEPTH_FACTOR);
        if depth > max {
            return Err(self.error_at(
                offset,
                format!("expression nests operators more than {max} deep (16 × max_depth)"),
            ));
        }
        Ok(())
    }

    // ---- statements ----

    fn parse_statement(&mut self) -> Result<Statement, ParseError> {
        let tok = self.next()?;
        let keyword = match tok.kind {
            TokenKind::Keyword(k) => k,
            _ => return Err(self.expected(&tok, STATEMENT_STARTS)),
        };
        match keyword {
            "SELECT" => Ok(Statement::Select(Box::new(self.parse_select(tok.start)?))),
            "SHOW" => self.parse_show(tok.start),
            "CREATE" | "DROP" | "ALTER" | "KILL" | "GRANT" | "REVOKE" | "SET" => {
                // name the statement ("DROP MEASUREMENT") when the next word is a keyword
                let what = match self.peek().map(|t| t.kind.clone()) {
                    Ok(TokenKind::Keyword(next)) => format!("{keyword} {next}"),
                    _ => keyword.to_string(),
                };
                Err(self.unsupported(tok.start, &what))
            }
            "DELETE" | "EXPLAIN" => Err(self.unsupported(tok.start, keyword)),
            _ => Err(self.expected(&tok, STATEMENT_STARTS)),
        }
    }

    // ---- clauses several statements share ----

    /// `<keyword> <integer>`, if present (`LIMIT 10`).
    fn parse_optional_uint(&mut self, keyword: &str) -> Result<Option<u64>, ParseError> {
        if !self.eat_keyword(keyword)? {
            return Ok(None);
        }
        let tok = self.next()?;
        match &tok.kind {
            TokenKind::Integer(digits) => digits.parse::<u64>().map(Some).map_err(|_| {
                self.error_at(tok.start, format!("{keyword} {digits} is out of range"))
            }),
            _ => Err(self.expected(&tok, &["integer"])),
        }
    }

    /// `WHERE expr`, if present.
    fn parse_where(&mut self) -> Result<Option<Expr>, ParseError> {
        if self.eat_keyword("WHERE")? {
            return Ok(Some(self.parse_expr()?.0));
        }
        Ok(None)
    }

    /// `cpu`, `rp.cpu`, `db.rp.cpu`, `db..cpu`, `/re/`, `rp./re/`, `db.rp./re/`, `db../re/`.
    fn parse_measurement(&mut self) -> Result<MeasurementName, ParseError> {
        if let Some(pattern) = self.try_regex()? {
            return Ok(MeasurementName {
                database: None,
                retention_policy: None,
                name: NameOrRegex::Regex(pattern),
            });
        }
        let start = self.peek()?.start;
        let mut segments = vec![self.parse_ident()?];
        let mut regex = None;
        while segments.len() < 3 && self.eat(&TokenKind::Dot)? {
            match self.peek()?.kind {
                // `db..cpu`: leave the second dot for the next turn
                TokenKind::Dot => segments.push(String::new()),
                TokenKind::Div => {
                    regex = Some(self.expect_regex()?);
                    break;
                }
                _ => segments.push(self.parse_ident()?),
            }
        }
        if regex.is_none() && segments.len() == 3 && self.peek_is(&TokenKind::Dot)? {
            return Err(self.error_at(
                start,
                "too many segments in measurement name (at most database.retention_policy.measurement)",
            ));
        }
        let count = segments.len();
        let mut parts = segments.into_iter();
        let mut take = || parts.next().unwrap_or_default();
        let (first, second, third) = (take(), take(), take());
        let (database, retention_policy, name) = match (count, regex) {
            (1, Some(re)) => (None, non_empty(first), NameOrRegex::Regex(re)),
            (_, Some(re)) => (non_empty(first), non_empty(second), NameOrRegex::Regex(re)),
            (1, None) => (None, None, NameOrRegex::Name(first)),
            (2, None) => (None, non_empty(first), NameOrRegex::Name(second)),
            (_, None) => (
                non_empty(first),
                non_empty(second),
                NameOrRegex::Name(third),
            ),
        };
        Ok(MeasurementName {
            database,
            retention_policy,
            name,
        })
    }
}

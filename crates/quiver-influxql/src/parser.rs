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

use std::fmt;

use crate::ast::{
    BinaryOp, Dimension, Expr, Field, Fill, Literal, MeasurementMatch, MeasurementName,
    NameOrRegex, SelectStatement, Source, Statement, TagKeyMatch, VarType, WildcardKind,
};
use crate::lexer::{line_char, LexError, Lexer, Token, TokenKind};

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

/// The words after `SHOW` in InfluxDB 1.x, in the order its errors list them.
const SHOW_WORDS: &[&str] = &[
    "CONTINUOUS",
    "DATABASES",
    "DIAGNOSTICS",
    "FIELD",
    "GRANTS",
    "MEASUREMENT",
    "MEASUREMENTS",
    "QUERIES",
    "RETENTION",
    "SERIES",
    "SHARD",
    "SHARDS",
    "STATS",
    "SUBSCRIPTIONS",
    "TAG",
    "USERS",
];

const EXPR_START: &[&str] = &["identifier", "string", "number", "bool"];

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

/// The last line of the regex crate's (multi-line) syntax error: "unclosed group".
fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or(text)
}

/// The first operator in `expr` that yields a boolean (not allowed in a `SELECT` field).
fn boolean_operator(expr: &Expr) -> Option<BinaryOp> {
    match expr {
        Expr::Binary { op, lhs, rhs } => {
            if op.is_boolean() {
                Some(*op)
            } else {
                boolean_operator(lhs).or_else(|| boolean_operator(rhs))
            }
        }
        Expr::Call { args, .. } => args.iter().find_map(boolean_operator),
        Expr::Paren(inner) => boolean_operator(inner),
        _ => None,
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

/// An InfluxQL duration (`10s`, `1h30m`, `5u`, `5µ`, `100ns`, `2w`) in nanoseconds.
pub(crate) fn parse_duration(text: &str) -> Result<i64, String> {
    const NS: i64 = 1;
    const US: i64 = 1_000;
    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    const D: i64 = 24 * H;
    const W: i64 = 7 * D;
    let invalid = || format!("invalid duration {text}");
    let overflow = || format!("overflowed duration {text}: choose a smaller duration");
    let mut rest = text;
    let mut total: i64 = 0;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let (number, tail) = rest.split_at(digits);
        let n: i64 = number.parse().map_err(|_| overflow())?;
        let (unit, tail) = if let Some(t) = tail.strip_prefix("ns") {
            (NS, t)
        } else if let Some(t) = tail.strip_prefix("ms") {
            (MS, t)
        } else if let Some(t) = tail.strip_prefix('u') {
            (US, t)
        } else if let Some(t) = tail.strip_prefix('µ') {
            (US, t)
        } else if let Some(t) = tail.strip_prefix('μ') {
            (US, t)
        } else if let Some(t) = tail.strip_prefix('s') {
            (S, t)
        } else if let Some(t) = tail.strip_prefix('m') {
            (M, t)
        } else if let Some(t) = tail.strip_prefix('h') {
            (H, t)
        } else if let Some(t) = tail.strip_prefix('d') {
            (D, t)
        } else if let Some(t) = tail.strip_prefix('w') {
            (W, t)
        } else {
            return Err(invalid());
        };
        total = n
            .checked_mul(unit)
            .and_then(|part| total.checked_add(part))
            .ok_or_else(overflow)?;
        rest = tail;
    }
    Ok(total)
}

/// An expression and the depth of its tree (a leaf is 1).
type Sized = (Expr, usize);

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

    /// A regex if the next token is `/`; nothing is consumed otherwise.
    fn try_regex(&mut self) -> Result<Option<String>, ParseError> {
        let tok = self.peek()?;
        if tok.kind != TokenKind::Div {
            return Ok(None);
        }
        let start = tok.start;
        self.peeked = None;
        let pattern = self
            .lexer
            .scan_regex(start)
            .map_err(|e| to_parse_error(self.text, e))?;
        if let Err(e) = regex::Regex::new(&pattern) {
            return Err(self.error_at(start, format!("invalid regex: {}", regex_reason(&e))));
        }
        Ok(Some(pattern))
    }

    /// A regex, which must come next.
    fn expect_regex(&mut self) -> Result<String, ParseError> {
        match self.try_regex()? {
            Some(pattern) => Ok(pattern),
            None => {
                let tok = self.next()?;
                Err(self.expected(&tok, &["regex"]))
            }
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

    /// `ON db`, if present.
    fn parse_on(&mut self) -> Result<Option<String>, ParseError> {
        if self.eat_keyword("ON")? {
            return Ok(Some(self.parse_ident()?));
        }
        Ok(None)
    }

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

    /// `FROM m, ...` of a `SHOW` statement, if present.
    fn parse_show_from(&mut self) -> Result<Vec<MeasurementName>, ParseError> {
        let mut from = Vec::new();
        if self.eat_keyword("FROM")? {
            loop {
                from.push(self.parse_measurement()?);
                if !self.eat(&TokenKind::Comma)? {
                    break;
                }
            }
        }
        Ok(from)
    }

    /// Refuses the cardinality forms (`SHOW SERIES [EXACT] CARDINALITY`).
    fn refuse_cardinality(&mut self, start: usize, what: &str) -> Result<(), ParseError> {
        if self.peek_is_keyword("EXACT")? || self.peek_is_keyword("CARDINALITY")? {
            return Err(self.unsupported(start, &format!("{what} CARDINALITY")));
        }
        Ok(())
    }

    fn parse_show(&mut self, start: usize) -> Result<Statement, ParseError> {
        let tok = self.next()?;
        let word = match tok.kind {
            TokenKind::Keyword(k) => k,
            _ => "",
        };
        match word {
            "DATABASES" => Ok(Statement::ShowDatabases),
            "RETENTION" => {
                self.expect_keyword("POLICIES")?;
                let database = self.parse_on()?;
                Ok(Statement::ShowRetentionPolicies { database })
            }
            "MEASUREMENTS" => self.parse_show_measurements(start),
            "MEASUREMENT" => {
                let next = self.next()?;
                if next.kind.is_keyword("EXACT") || next.kind.is_keyword("CARDINALITY") {
                    return Err(self.unsupported(start, "SHOW MEASUREMENT CARDINALITY"));
                }
                Err(self.expected(&next, &["EXACT", "CARDINALITY"]))
            }
            "SERIES" => {
                self.refuse_cardinality(start, "SHOW SERIES")?;
                let database = self.parse_on()?;
                let from = self.parse_show_from()?;
                let condition = self.parse_where()?;
                let limit = self.parse_optional_uint("LIMIT")?;
                let offset = self.parse_optional_uint("OFFSET")?;
                Ok(Statement::ShowSeries {
                    database,
                    from,
                    condition,
                    limit,
                    offset,
                })
            }
            "TAG" => {
                let next = self.next()?;
                if next.kind.is_keyword("KEYS") {
                    self.parse_show_tag_keys(start)
                } else if next.kind.is_keyword("VALUES") {
                    self.refuse_cardinality(start, "SHOW TAG VALUES")?;
                    self.parse_show_tag_values()
                } else if next.kind.is_keyword("KEY") {
                    Err(self.unsupported(start, "SHOW TAG KEY CARDINALITY"))
                } else {
                    Err(self.expected(&next, &["KEY", "KEYS", "VALUES"]))
                }
            }
            "FIELD" => {
                let next = self.next()?;
                if next.kind.is_keyword("KEYS") {
                    let database = self.parse_on()?;
                    let from = self.parse_show_from()?;
                    let limit = self.parse_optional_uint("LIMIT")?;
                    let offset = self.parse_optional_uint("OFFSET")?;
                    Ok(Statement::ShowFieldKeys {
                        database,
                        from,
                        limit,
                        offset,
                    })
                } else if next.kind.is_keyword("KEY") {
                    Err(self.unsupported(start, "SHOW FIELD KEY CARDINALITY"))
                } else {
                    Err(self.expected(&next, &["KEY", "KEYS"]))
                }
            }
            "CONTINUOUS" => Err(self.unsupported(start, "SHOW CONTINUOUS QUERIES")),
            "SHARD" => Err(self.unsupported(start, "SHOW SHARD GROUPS")),
            "DIAGNOSTICS" | "GRANTS" | "QUERIES" | "SHARDS" | "STATS" | "SUBSCRIPTIONS"
            | "USERS" => Err(self.unsupported(start, &format!("SHOW {word}"))),
            _ => Err(self.expected(&tok, SHOW_WORDS)),
        }
    }

    fn parse_show_measurements(&mut self, start: usize) -> Result<Statement, ParseError> {
        let mut database = None;
        if self.eat_keyword("ON")? {
            let tok = self.next()?;
            match tok.kind {
                TokenKind::Ident(name) => database = Some(name),
                TokenKind::Mul => {
                    return Err(self.unsupported(start, "SHOW MEASUREMENTS ON *"));
                }
                _ => return Err(self.expected(&tok, &["identifier or *"])),
            }
            if self.peek_is(&TokenKind::Dot)? {
                return Err(
                    self.unsupported(start, "SHOW MEASUREMENTS ON <database>.<retention policy>")
                );
            }
        }
        let mut with_measurement = None;
        if self.eat_keyword("WITH")? {
            self.expect_keyword("MEASUREMENT")?;
            let op = self.next()?;
            if !matches!(op.kind, TokenKind::Eq | TokenKind::EqRegex) {
                return Err(self.expected(&op, &["=", "=~"]));
            }
            let at = self.peek()?.start;
            let m = self.parse_measurement()?;
            if m.database.is_some() || m.retention_policy.is_some() {
                return Err(self.error_at(
                    at,
                    "WITH MEASUREMENT takes a measurement name or regex, without database or retention policy",
                ));
            }
            with_measurement = Some(match m.name {
                NameOrRegex::Name(name) => MeasurementMatch::Eq(name),
                NameOrRegex::Regex(re) => MeasurementMatch::Regex(re),
            });
        }
        let condition = self.parse_where()?;
        let limit = self.parse_optional_uint("LIMIT")?;
        let offset = self.parse_optional_uint("OFFSET")?;
        Ok(Statement::ShowMeasurements {
            database,
            with_measurement,
            condition,
            limit,
            offset,
        })
    }

    fn parse_show_tag_keys(&mut self, start: usize) -> Result<Statement, ParseError> {
        let database = self.parse_on()?;
        let from = self.parse_show_from()?;
        if self.peek_is_keyword("WITH")? {
            return Err(self.unsupported(start, "SHOW TAG KEYS ... WITH KEY"));
        }
        let condition = self.parse_where()?;
        let limit = self.parse_optional_uint("LIMIT")?;
        let offset = self.parse_optional_uint("OFFSET")?;
        Ok(Statement::ShowTagKeys {
            database,
            from,
            condition,
            limit,
            offset,
        })
    }

    fn parse_show_tag_values(&mut self) -> Result<Statement, ParseError> {
        let database = self.parse_on()?;
        let from = self.parse_show_from()?;
        self.expect_keyword("WITH")?;
        self.expect_keyword("KEY")?;
        let op = self.next()?;
        let key = match op.kind {
            TokenKind::Keyword("IN") => {
                self.expect(&TokenKind::LParen)?;
                let mut keys = vec![self.parse_ident()?];
                while self.eat(&TokenKind::Comma)? {
                    keys.push(self.parse_ident()?);
                }
                self.expect(&TokenKind::RParen)?;
                TagKeyMatch::In(keys)
            }
            TokenKind::Eq => TagKeyMatch::Eq(self.parse_ident()?),
            TokenKind::NotEq => TagKeyMatch::NotEq(self.parse_ident()?),
            TokenKind::EqRegex => TagKeyMatch::Regex(self.expect_regex()?),
            TokenKind::NotEqRegex => TagKeyMatch::NotRegex(self.expect_regex()?),
            _ => return Err(self.expected(&op, &["IN", "=", "=~"])),
        };
        let condition = self.parse_where()?;
        let limit = self.parse_optional_uint("LIMIT")?;
        let offset = self.parse_optional_uint("OFFSET")?;
        Ok(Statement::ShowTagValues {
            database,
            from,
            key,
            condition,
            limit,
            offset,
        })
    }

    // ---- SELECT ----

    /// The rest of a `SELECT` whose keyword (at `start`) is consumed.
    fn parse_select(&mut self, start: usize) -> Result<SelectStatement, ParseError> {
        let mut fields = Vec::new();
        loop {
            fields.push(self.parse_field()?);
            if !self.eat(&TokenKind::Comma)? {
                break;
            }
        }
        if self.peek_is_keyword("INTO")? {
            return Err(self.unsupported(start, "SELECT ... INTO"));
        }
        self.expect_keyword("FROM")?;
        let mut from = Vec::new();
        loop {
            from.push(self.parse_source()?);
            if !self.eat(&TokenKind::Comma)? {
                break;
            }
        }
        let condition = self.parse_where()?;
        let group_by = self.parse_group_by()?;
        let fill = self.parse_fill()?;
        let order_desc = self.parse_order_by()?;
        let limit = self.parse_optional_uint("LIMIT")?;
        let offset = self.parse_optional_uint("OFFSET")?;
        let slimit = self.parse_optional_uint("SLIMIT")?;
        let soffset = self.parse_optional_uint("SOFFSET")?;
        let timezone = self.parse_tz()?;
        Ok(SelectStatement {
            fields,
            from,
            condition,
            group_by,
            fill,
            order_desc,
            limit,
            offset,
            slimit,
            soffset,
            timezone,
        })
    }

    fn parse_field(&mut self) -> Result<Field, ParseError> {
        let start = self.peek()?.start;
        let expr = match self.try_regex()? {
            Some(pattern) => Expr::Regex(pattern),
            None => {
                let (expr, _) = self.parse_expr()?;
                if let Some(op) = boolean_operator(&expr) {
                    return Err(self.error_at(
                        start,
                        format!(
                            "invalid operator {op} in SELECT clause; operator is intended for WHERE clause"
                        ),
                    ));
                }
                expr
            }
        };
        let alias = if self.eat_keyword("AS")? {
            Some(self.parse_ident()?)
        } else {
            None
        };
        Ok(Field { expr, alias })
    }

    fn parse_source(&mut self) -> Result<Source, ParseError> {
        if !self.peek_is(&TokenKind::LParen)? {
            return Ok(Source::Measurement(self.parse_measurement()?));
        }
        let open = self.next()?;
        let select = self.expect_keyword("SELECT")?;
        self.enter(open.start)?;
        let subquery = self.parse_select(select.start)?;
        self.leave();
        self.expect(&TokenKind::RParen)?;
        Ok(Source::Subquery(Box::new(subquery)))
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

    /// `GROUP BY dim, ...`, if present.
    fn parse_group_by(&mut self) -> Result<Vec<Dimension>, ParseError> {
        if !self.eat_keyword("GROUP")? {
            return Ok(Vec::new());
        }
        self.expect_keyword("BY")?;
        let mut dimensions = Vec::new();
        let mut has_time = false;
        loop {
            let start = self.peek()?.start;
            let dimension = match self.try_regex()? {
                Some(pattern) => Dimension::Regex(pattern),
                None => {
                    let (expr, _) = self.parse_expr()?;
                    self.dimension(expr, start)?
                }
            };
            if matches!(dimension, Dimension::Time { .. }) {
                if has_time {
                    return Err(self.error_at(start, "multiple time dimensions not allowed"));
                }
                has_time = true;
            }
            dimensions.push(dimension);
            if !self.eat(&TokenKind::Comma)? {
                return Ok(dimensions);
            }
        }
    }

    /// The dimension an expression of `GROUP BY` (at `start`) denotes; InfluxDB 1.x checks
    /// these when it compiles the query, with the same messages.
    fn dimension(&self, expr: Expr, start: usize) -> Result<Dimension, ParseError> {
        let mut expr = expr;
        while let Expr::Paren(inner) = expr {
            expr = *inner;
        }
        let err = |message: &str| Err(self.error_at(start, message));
        match expr {
            Expr::VarRef { name, .. } => {
                if name.eq_ignore_ascii_case("time") {
                    return err("time() is a function and expects at least one argument");
                }
                Ok(Dimension::Tag(name))
            }
            Expr::Wildcard { .. } => Ok(Dimension::Wildcard),
            Expr::Call { name, args } if name == "time" => {
                if args.is_empty() || args.len() > 2 {
                    return err("time dimension expected 1 or 2 arguments");
                }
                let interval = match args.first() {
                    Some(Expr::Literal(Literal::Duration(d))) => *d,
                    _ => return err("time dimension must have duration argument"),
                };
                if interval <= 0 {
                    return err("time dimension must have positive duration");
                }
                let offset = match args.get(1) {
                    None => None,
                    Some(Expr::Literal(Literal::Duration(d))) => Some(*d),
                    Some(Expr::Call { name, .. }) if name == "now" => {
                        return err(
                            "time dimension offset now() is not supported; write the offset as a duration",
                        )
                    }
                    Some(Expr::Literal(Literal::String(_))) => {
                        return err(
                            "time dimension offset as a time literal is not supported; write the offset as a duration",
                        )
                    }
                    Some(_) => return err("time dimension offset must be duration or now()"),
                };
                Ok(Dimension::Time { interval, offset })
            }
            Expr::Call { .. } => err("only time() calls allowed in dimensions"),
            _ => err("only time and tag dimensions allowed"),
        }
    }

    /// `fill(...)`, if present.
    fn parse_fill(&mut self) -> Result<Option<Fill>, ParseError> {
        let tok = self.peek()?;
        if !matches!(&tok.kind, TokenKind::Ident(word) if word.eq_ignore_ascii_case("fill")) {
            return Ok(None);
        }
        let start = tok.start;
        let (expr, _) = self.parse_expr()?;
        let err = |message: &str| Err(self.error_at(start, message));
        let args = match expr {
            Expr::Call { name, args } if name == "fill" => args,
            _ => return err("fill must be a function call"),
        };
        let [arg] = args.as_slice() else {
            return err("fill requires an argument, e.g.: 0, null, none, previous, linear");
        };
        match arg {
            Expr::VarRef {
                name,
                data_type: None,
            } => match name.to_ascii_lowercase().as_str() {
                "null" => Ok(Some(Fill::Null)),
                "none" => Ok(Some(Fill::None)),
                "previous" => Ok(Some(Fill::Previous)),
                "linear" => Ok(Some(Fill::Linear)),
                _ => err("expected number argument in fill()"),
            },
            Expr::Literal(lit @ (Literal::Integer(_) | Literal::Float(_))) => {
                Ok(Some(Fill::Value(lit.clone())))
            }
            _ => err("expected number argument in fill()"),
        }
    }

    /// `ORDER BY time [ASC|DESC]` or `ORDER BY ASC|DESC`, if present: whether it is `DESC`.
    fn parse_order_by(&mut self) -> Result<bool, ParseError> {
        if !self.eat_keyword("ORDER")? {
            return Ok(false);
        }
        self.expect_keyword("BY")?;
        let tok = self.next()?;
        let desc = match &tok.kind {
            TokenKind::Keyword("ASC") => false,
            TokenKind::Keyword("DESC") => true,
            TokenKind::Ident(name) => {
                if !name.eq_ignore_ascii_case("time") {
                    return Err(
                        self.error_at(tok.start, "only ORDER BY time supported at this time")
                    );
                }
                if self.eat_keyword("DESC")? {
                    true
                } else {
                    self.eat_keyword("ASC")?;
                    false
                }
            }
            _ => return Err(self.expected(&tok, &["identifier", "ASC", "DESC"])),
        };
        if self.peek_is(&TokenKind::Comma)? {
            let comma = self.next()?;
            self.parse_ident()?; // 1.x reports a missing name first
            return Err(self.error_at(comma.start, "only ORDER BY time supported at this time"));
        }
        Ok(desc)
    }

    /// `tz('Area/City')`, if present.
    fn parse_tz(&mut self) -> Result<Option<String>, ParseError> {
        let tok = self.peek()?;
        if !matches!(&tok.kind, TokenKind::Ident(word) if word.eq_ignore_ascii_case("tz")) {
            return Ok(None);
        }
        let start = tok.start;
        let (expr, _) = self.parse_expr()?;
        let err = |message: &str| Err(self.error_at(start, message));
        match expr {
            Expr::Call { name, args } if name == "tz" => match args.as_slice() {
                [Expr::Literal(Literal::String(zone))] => Ok(Some(zone.clone())),
                [_] => err("expected string argument in tz()"),
                _ => err("tz requires exactly one argument"),
            },
            _ => err("tz must be a function call"),
        }
    }

    // ---- expressions ----

    fn parse_expr(&mut self) -> Result<Sized, ParseError> {
        self.parse_binary(1)
    }

    fn peek_binary_op(&mut self) -> Result<Option<BinaryOp>, ParseError> {
        Ok(match self.peek()?.kind {
            TokenKind::Add => Some(BinaryOp::Add),
            TokenKind::Sub => Some(BinaryOp::Sub),
            TokenKind::Mul => Some(BinaryOp::Mul),
            TokenKind::Div => Some(BinaryOp::Div),
            TokenKind::Mod => Some(BinaryOp::Mod),
            TokenKind::BitAnd => Some(BinaryOp::BitAnd),
            TokenKind::BitOr => Some(BinaryOp::BitOr),
            TokenKind::BitXor => Some(BinaryOp::BitXor),
            TokenKind::Eq => Some(BinaryOp::Eq),
            TokenKind::NotEq => Some(BinaryOp::NotEq),
            TokenKind::Lt => Some(BinaryOp::Lt),
            TokenKind::LtEq => Some(BinaryOp::LtEq),
            TokenKind::Gt => Some(BinaryOp::Gt),
            TokenKind::GtEq => Some(BinaryOp::GtEq),
            TokenKind::EqRegex => Some(BinaryOp::EqRegex),
            TokenKind::NotEqRegex => Some(BinaryOp::NotEqRegex),
            TokenKind::Keyword("AND") => Some(BinaryOp::And),
            TokenKind::Keyword("OR") => Some(BinaryOp::Or),
            _ => None,
        })
    }

    /// Precedence climbing: operands joined by operators of at least `min_precedence`,
    /// left-associative. Recursion here is bounded by the number of precedence levels.
    fn parse_binary(&mut self, min_precedence: u8) -> Result<Sized, ParseError> {
        let (mut lhs, mut depth) = self.parse_unary()?;
        while let Some(op) = self.peek_binary_op()? {
            if op.precedence() < min_precedence {
                break;
            }
            let op_tok = self.next()?;
            let (rhs, rhs_depth) = if matches!(op, BinaryOp::EqRegex | BinaryOp::NotEqRegex) {
                (Expr::Regex(self.expect_regex()?), 1)
            } else {
                self.parse_binary(op.precedence() + 1)?
            };
            depth = 1 + depth.max(rhs_depth);
            self.check_tree(depth, op_tok.start)?;
            lhs = Expr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        Ok((lhs, depth))
    }

    fn parse_unary(&mut self) -> Result<Sized, ParseError> {
        let tok = self.next()?;
        let leaf = |expr| Ok((expr, 1));
        match tok.kind {
            TokenKind::LParen => {
                self.enter(tok.start)?;
                let (inner, depth) = self.parse_expr()?;
                self.expect(&TokenKind::RParen)?;
                self.leave();
                self.check_tree(depth + 1, tok.start)?;
                Ok((Expr::Paren(Box::new(inner)), depth + 1))
            }
            TokenKind::Ident(name) => {
                if self.eat(&TokenKind::LParen)? {
                    return self.parse_call(name.to_lowercase(), tok.start);
                }
                leaf(self.parse_var_ref(name, tok.start)?)
            }
            TokenKind::Keyword("DISTINCT") => {
                // `DISTINCT(x)` is the call; `DISTINCT x` means the same
                let next = self.next()?;
                match next.kind {
                    TokenKind::LParen => self.parse_call("distinct".to_string(), tok.start),
                    TokenKind::Ident(name) => Ok((
                        Expr::Call {
                            name: "distinct".to_string(),
                            args: vec![Expr::VarRef {
                                name,
                                data_type: None,
                            }],
                        },
                        2,
                    )),
                    _ if next.start > tok.start + "DISTINCT".len() => {
                        Err(self.expected(&next, &["identifier"]))
                    }
                    _ => Err(self.expected(&next, &["(", "identifier"])),
                }
            }
            TokenKind::Str(s) => leaf(Expr::Literal(Literal::String(s))),
            TokenKind::Bool(b) => leaf(Expr::Literal(Literal::Boolean(b))),
            TokenKind::Number(text) => match text.parse::<f64>() {
                Ok(x) if x.is_finite() => leaf(Expr::Literal(Literal::Float(x))),
                _ => Err(self.error_at(tok.start, "unable to parse number")),
            },
            TokenKind::Integer(text) => {
                if let Ok(n) = text.parse::<i64>() {
                    leaf(Expr::Literal(Literal::Integer(n)))
                } else if let Ok(n) = text.parse::<u64>() {
                    leaf(Expr::Literal(Literal::Unsigned(n)))
                } else {
                    Err(self.error_at(tok.start, "unable to parse integer"))
                }
            }
            TokenKind::Duration(text) => match parse_duration(&text) {
                Ok(ns) => leaf(Expr::Literal(Literal::Duration(ns))),
                Err(message) => Err(self.error_at(tok.start, message)),
            },
            TokenKind::Mul => {
                let kind = if self.eat(&TokenKind::DoubleColon)? {
                    let t = self.next()?;
                    match t.kind {
                        TokenKind::Keyword("FIELD") => Some(WildcardKind::Field),
                        TokenKind::Keyword("TAG") => Some(WildcardKind::Tag),
                        _ => return Err(self.expected(&t, &["field", "tag"])),
                    }
                } else {
                    None
                };
                leaf(Expr::Wildcard { kind })
            }
            TokenKind::Add | TokenKind::Sub => self.parse_signed(tok),
            _ => Err(self.expected(&tok, EXPR_START)),
        }
    }

    /// The operand of unary `+` / `-` (the sign token is `sign`): folded into a number or
    /// duration literal, or `±1 * operand` for a reference, call or parenthesis (as 1.x does).
    fn parse_signed(&mut self, sign: Token) -> Result<Sized, ParseError> {
        let negative = sign.kind == TokenKind::Sub;
        let next = self.peek()?;
        if !matches!(
            next.kind,
            TokenKind::Number(_)
                | TokenKind::Integer(_)
                | TokenKind::Duration(_)
                | TokenKind::LParen
                | TokenKind::Ident(_)
        ) {
            let next = self.next()?;
            return Err(self.expected(&next, &["identifier", "number", "duration", "("]));
        }
        let at = next.start;
        let (operand, depth) = self.parse_unary()?;
        let literal = match operand {
            Expr::Literal(Literal::Float(x)) => Literal::Float(if negative { -x } else { x }),
            Expr::Literal(Literal::Integer(n)) => Literal::Integer(if negative { -n } else { n }),
            Expr::Literal(Literal::Duration(ns)) => {
                Literal::Duration(if negative { -ns } else { ns })
            }
            Expr::Literal(Literal::Unsigned(n)) if !negative => Literal::Unsigned(n),
            Expr::Literal(Literal::Unsigned(n)) => {
                // -9223372036854775808 overflows i64 as a magnitude, not as a value
                if n == i64::MIN.unsigned_abs() {
                    Literal::Integer(i64::MIN)
                } else {
                    return Err(self.error_at(at, format!("constant -{n} underflows int64")));
                }
            }
            operand @ (Expr::VarRef { .. } | Expr::Call { .. } | Expr::Paren(_)) => {
                self.check_tree(depth + 1, sign.start)?;
                let factor = Expr::Literal(Literal::Integer(if negative { -1 } else { 1 }));
                return Ok((
                    Expr::Binary {
                        op: BinaryOp::Mul,
                        lhs: Box::new(factor),
                        rhs: Box::new(operand),
                    },
                    depth + 1,
                ));
            }
            _ => return Err(self.error_at(at, "expected identifier, number, duration or (")),
        };
        Ok((Expr::Literal(literal), 1))
    }

    /// The arguments of a call whose name and `(` are consumed (the name starts at `start`).
    fn parse_call(&mut self, name: String, start: usize) -> Result<Sized, ParseError> {
        self.enter(start)?;
        let mut args = Vec::new();
        let mut depth = 0;
        if !self.eat(&TokenKind::RParen)? {
            loop {
                match self.try_regex()? {
                    Some(pattern) => {
                        args.push(Expr::Regex(pattern));
                        depth = depth.max(1);
                    }
                    None => {
                        let (arg, arg_depth) = self.parse_expr()?;
                        args.push(arg);
                        depth = depth.max(arg_depth);
                    }
                }
                if !self.eat(&TokenKind::Comma)? {
                    break;
                }
            }
            self.expect(&TokenKind::RParen)?;
        }
        self.leave();
        self.check_tree(depth + 1, start)?;
        Ok((Expr::Call { name, args }, depth + 1))
    }

    /// A reference whose first segment `name` is consumed: more `.segments` (at most three
    /// in all, `a..b` has an empty one) and an optional `::type`.
    fn parse_var_ref(&mut self, name: String, start: usize) -> Result<Expr, ParseError> {
        let mut segments = vec![name];
        while self.eat(&TokenKind::Dot)? {
            if self.peek_is(&TokenKind::Dot)? {
                segments.push(String::new());
            } else {
                segments.push(self.parse_ident()?);
            }
            if segments.len() > 3 {
                return Err(self.error_at(start, "too many segments in identifier (at most 3)"));
            }
        }
        let data_type = if self.eat(&TokenKind::DoubleColon)? {
            let tok = self.next()?;
            let ty = match &tok.kind {
                TokenKind::Ident(t) => match t.to_ascii_lowercase().as_str() {
                    "float" => Some(VarType::Float),
                    "integer" => Some(VarType::Integer),
                    "unsigned" => Some(VarType::Unsigned),
                    "string" => Some(VarType::String),
                    "boolean" => Some(VarType::Boolean),
                    _ => None,
                },
                TokenKind::Keyword("FIELD") => Some(VarType::Field),
                TokenKind::Keyword("TAG") => Some(VarType::Tag),
                _ => None,
            };
            match ty {
                Some(ty) => Some(ty),
                None => {
                    return Err(self.expected(
                        &tok,
                        &[
                            "float", "integer", "unsigned", "string", "boolean", "field", "tag",
                        ],
                    ))
                }
            }
        } else {
            None
        };
        Ok(Expr::VarRef {
            name: segments.join("."),
            data_type,
        })
    }
}

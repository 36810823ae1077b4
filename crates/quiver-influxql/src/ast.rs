//! The InfluxQL syntax tree.
//!
//! Every type renders (`Display`) as canonical InfluxQL: identifiers always double-quoted,
//! keywords upper-case, strings single-quoted, durations in the largest exact unit. The
//! rendering parses back to the same tree (`parse(&stmt.to_string()) == [stmt]`), which is
//! what lets the text serve as a cache key.
//!
//! The canonical form writes no parentheses of its own: an [`Expr::Paren`] node is the only
//! source of them. A tree the parser built always satisfies the precedence rules that make
//! this work; a tree built by hand should wrap an operand in `Paren` where InfluxQL's
//! precedence would otherwise regroup it (see [`BinaryOp::precedence`]).

use std::fmt::{self, Display, Formatter, Write as _};

/// One InfluxQL statement: the subset Quiver runs (queries and schema exploration).
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `SELECT ...`.
    Select(Box<SelectStatement>),
    /// `SHOW DATABASES`.
    ShowDatabases,
    /// `SHOW RETENTION POLICIES [ON db]`.
    ShowRetentionPolicies {
        /// The `ON` database; `None` means the request's database.
        database: Option<String>,
    },
    /// `SHOW MEASUREMENTS [ON db] [WITH MEASUREMENT = name | =~ /re/] [WHERE ...] [LIMIT n] [OFFSET n]`.
    ShowMeasurements {
        /// The `ON` database; `None` means the request's database.
        database: Option<String>,
        /// The `WITH MEASUREMENT` filter.
        with_measurement: Option<MeasurementMatch>,
        /// The `WHERE` condition (on tags).
        condition: Option<Expr>,
        /// `LIMIT n`.
        limit: Option<u64>,
        /// `OFFSET n`.
        offset: Option<u64>,
    },
    /// `SHOW TAG KEYS [ON db] [FROM m, ...] [WHERE ...] [LIMIT n] [OFFSET n]`.
    ShowTagKeys {
        /// The `ON` database; `None` means the request's database.
        database: Option<String>,
        /// The `FROM` measurements; empty means all.
        from: Vec<MeasurementName>,
        /// The `WHERE` condition.
        condition: Option<Expr>,
        /// `LIMIT n`.
        limit: Option<u64>,
        /// `OFFSET n`.
        offset: Option<u64>,
    },
    /// `SHOW TAG VALUES [ON db] [FROM m, ...] WITH KEY ... [WHERE ...] [LIMIT n] [OFFSET n]`.
    ShowTagValues {
        /// The `ON` database; `None` means the request's database.
        database: Option<String>,
        /// The `FROM` measurements; empty means all.
        from: Vec<MeasurementName>,
        /// The `WITH KEY` clause (required).
        key: TagKeyMatch,
        /// The `WHERE` condition.
        condition: Option<Expr>,
        /// `LIMIT n`.
        limit: Option<u64>,
        /// `OFFSET n`.
        offset: Option<u64>,
    },
    /// `SHOW FIELD KEYS [ON db] [FROM m, ...] [LIMIT n] [OFFSET n]`.
    ShowFieldKeys {
        /// The `ON` database; `None` means the request's database.
        database: Option<String>,
        /// The `FROM` measurements; empty means all.
        from: Vec<MeasurementName>,
        /// `LIMIT n`.
        limit: Option<u64>,
        /// `OFFSET n`.
        offset: Option<u64>,
    },
    /// `SHOW SERIES [ON db] [FROM m, ...] [WHERE ...] [LIMIT n] [OFFSET n]`.
    ShowSeries {
        /// The `ON` database; `None` means the request's database.
        database: Option<String>,
        /// The `FROM` measurements; empty means all.
        from: Vec<MeasurementName>,
        /// The `WHERE` condition.
        condition: Option<Expr>,
        /// `LIMIT n`.
        limit: Option<u64>,
        /// `OFFSET n`.
        offset: Option<u64>,
    },
}

/// The `WITH MEASUREMENT` filter of `SHOW MEASUREMENTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MeasurementMatch {
    /// `WITH MEASUREMENT = name`.
    Eq(String),
    /// `WITH MEASUREMENT =~ /re/` (the pattern, unanchored as written).
    Regex(String),
}

/// The `WITH KEY` clause of `SHOW TAG VALUES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagKeyMatch {
    /// `WITH KEY = key`.
    Eq(String),
    /// `WITH KEY != key`.
    NotEq(String),
    /// `WITH KEY IN (a, b, ...)`.
    In(Vec<String>),
    /// `WITH KEY =~ /re/`.
    Regex(String),
    /// `WITH KEY !~ /re/`.
    NotRegex(String),
}

/// A measurement reference: `cpu`, `rp.cpu`, `db.rp.cpu`, `db..cpu`, `/cp.*/`, `db.rp./re/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasurementName {
    /// The database, when written (`db.rp.cpu`, `db..cpu`); never `Some("")`.
    pub database: Option<String>,
    /// The retention policy, when written (`rp.cpu`, `db.rp.cpu`); never `Some("")`.
    pub retention_policy: Option<String>,
    /// The measurement: a name or a pattern matching names.
    pub name: NameOrRegex,
}

/// A measurement name or a regular expression over measurement names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameOrRegex {
    /// An exact name.
    Name(String),
    /// A pattern (`/cp.*/`, stored without the slashes, `\/` unescaped).
    Regex(String),
}

/// `SELECT fields FROM sources [WHERE ...] [GROUP BY ...] [fill(...)] [ORDER BY time DESC]
/// [LIMIT n] [OFFSET n] [SLIMIT n] [SOFFSET n] [tz('...')]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectStatement {
    /// The projection (at least one).
    pub fields: Vec<Field>,
    /// The `FROM` sources (at least one).
    pub from: Vec<Source>,
    /// The `WHERE` condition.
    pub condition: Option<Expr>,
    /// The `GROUP BY` dimensions (at most one of them is [`Dimension::Time`]).
    pub group_by: Vec<Dimension>,
    /// The `fill(...)` option; `None` when absent (InfluxQL's default is `fill(null)`).
    pub fill: Option<Fill>,
    /// `ORDER BY time DESC` (InfluxQL orders by time only; ascending is the default).
    pub order_desc: bool,
    /// `LIMIT n` (points per series).
    pub limit: Option<u64>,
    /// `OFFSET n` (points per series).
    pub offset: Option<u64>,
    /// `SLIMIT n` (series).
    pub slimit: Option<u64>,
    /// `SOFFSET n` (series).
    pub soffset: Option<u64>,
    /// `tz('America/Chicago')`: the IANA time zone name, not validated by the parser.
    pub timezone: Option<String>,
}

/// One projection of a `SELECT`: an expression and its optional `AS` alias.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The expression (never contains a comparison or logical operator).
    pub expr: Expr,
    /// `AS alias`.
    pub alias: Option<String>,
}

/// A `FROM` source of a `SELECT`.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A measurement (or a pattern over measurements).
    Measurement(MeasurementName),
    /// `(SELECT ...)`.
    Subquery(Box<SelectStatement>),
}

/// One `GROUP BY` dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dimension {
    /// `time(interval[, offset])`.
    Time {
        /// The bucket width in nanoseconds (> 0).
        interval: i64,
        /// The bucket offset in nanoseconds as written (may be negative or exceed the interval).
        offset: Option<i64>,
    },
    /// A tag key: `host`, `"region"`.
    Tag(String),
    /// A pattern over tag keys: `/re/`.
    Regex(String),
    /// `*`: every tag.
    Wildcard,
}

/// The `fill(...)` option.
#[derive(Debug, Clone, PartialEq)]
pub enum Fill {
    /// `fill(null)`.
    Null,
    /// `fill(none)`.
    None,
    /// `fill(previous)`.
    Previous,
    /// `fill(linear)`.
    Linear,
    /// `fill(<number>)`: always [`Literal::Integer`] or [`Literal::Float`].
    Value(Literal),
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A field or tag reference (`usage`, `"my field"`, `usage::float`, `host::tag`); `time`
    /// is an ordinary reference named `time`. Dotted references (`a.b`) keep the dots.
    VarRef {
        /// The name as written (unquoted).
        name: String,
        /// The `::type` cast.
        data_type: Option<VarType>,
    },
    /// A function call (`mean(usage)`, `now()`, `distinct(host)` also for `DISTINCT host`).
    Call {
        /// The function name, lower-case.
        name: String,
        /// The arguments.
        args: Vec<Expr>,
    },
    /// A literal.
    Literal(Literal),
    /// `*`, `*::field`, `*::tag`.
    Wildcard {
        /// The `::field` / `::tag` restriction.
        kind: Option<WildcardKind>,
    },
    /// A regular expression (pattern without the slashes): a `SELECT` field, a call
    /// argument, or the right operand of `=~` / `!~`.
    Regex(String),
    /// A binary operation. Unary minus on a reference, call or parenthesis is
    /// `Binary { Mul, Integer(-1), operand }` (unary plus uses `Integer(1)`), as in InfluxDB 1.x.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// The left operand.
        lhs: Box<Expr>,
        /// The right operand.
        rhs: Box<Expr>,
    },
    /// A parenthesised expression.
    Paren(Box<Expr>),
}

/// The `::type` of a [`Expr::VarRef`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarType {
    /// `::float`.
    Float,
    /// `::integer`.
    Integer,
    /// `::unsigned`.
    Unsigned,
    /// `::string`.
    String,
    /// `::boolean`.
    Boolean,
    /// `::field`: any field.
    Field,
    /// `::tag`.
    Tag,
}

/// The restriction of a wildcard: `*::field` or `*::tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WildcardKind {
    /// `*::field`.
    Field,
    /// `*::tag`.
    Tag,
}

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// An integer (`1`, `-5`; unary minus folds into it).
    Integer(i64),
    /// An integer too large for `i64` (`9223372036854775808` up to `u64::MAX`).
    Unsigned(u64),
    /// A float (`1.0`, `.5`, `100.`); always finite.
    Float(f64),
    /// A single-quoted string (time literals such as `'2024-01-01T00:00:00Z'` are strings).
    String(String),
    /// `true` / `false`.
    Boolean(bool),
    /// A duration in nanoseconds (`10s`, `1h30m`, `-5m`).
    Duration(i64),
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `&`
    BitAnd,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
    /// `=`
    Eq,
    /// `!=` (also written `<>`)
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// `=~`
    EqRegex,
    /// `!~`
    NotEqRegex,
    /// `AND`
    And,
    /// `OR`
    Or,
}

impl BinaryOp {
    /// InfluxQL's binding strength: `OR` 1 < `AND` 2 < comparisons 3 < `+ - | ^` 4 <
    /// `* / % &` 5. Operators of equal precedence associate to the left.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::NotEq
            | BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Gt
            | BinaryOp::GtEq
            | BinaryOp::EqRegex
            | BinaryOp::NotEqRegex => 3,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::BitOr | BinaryOp::BitXor => 4,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod | BinaryOp::BitAnd => 5,
        }
    }

    /// True for the operators whose value is a boolean (comparisons, regex matches, `AND`,
    /// `OR`): InfluxQL allows them in `WHERE`, not in `SELECT` fields.
    pub fn is_boolean(self) -> bool {
        self.precedence() <= 3
    }

    /// The operator as InfluxQL writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
            BinaryOp::Eq => "=",
            BinaryOp::NotEq => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::EqRegex => "=~",
            BinaryOp::NotEqRegex => "!~",
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
        }
    }
}

impl VarType {
    /// The cast as written after `::`.
    pub fn as_str(self) -> &'static str {
        match self {
            VarType::Float => "float",
            VarType::Integer => "integer",
            VarType::Unsigned => "unsigned",
            VarType::String => "string",
            VarType::Boolean => "boolean",
            VarType::Field => "field",
            VarType::Tag => "tag",
        }
    }
}

/// The keywords of InfluxQL 1.x (upper-case); a bare word spelled like one of them
/// (case-insensitively) is the keyword, not an identifier. `TRUE` and `FALSE` are included.
pub const KEYWORDS: &[&str] = &[
    "ALL",
    "ALTER",
    "ANALYZE",
    "AND",
    "ANY",
    "AS",
    "ASC",
    "BEGIN",
    "BY",
    "CARDINALITY",
    "CONTINUOUS",
    "CREATE",
    "DATABASE",
    "DATABASES",
    "DEFAULT",
    "DELETE",
    "DESC",
    "DESTINATIONS",
    "DIAGNOSTICS",
    "DISTINCT",
    "DROP",
    "DURATION",
    "END",
    "EVERY",
    "EXACT",
    "EXPLAIN",
    "FALSE",
    "FIELD",
    "FOR",
    "FROM",
    "FUTURE",
    "GRANT",
    "GRANTS",
    "GROUP",
    "GROUPS",
    "IN",
    "INF",
    "INSERT",
    "INTO",
    "KEY",
    "KEYS",
    "KILL",
    "LIMIT",
    "MEASUREMENT",
    "MEASUREMENTS",
    "NAME",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "PASSWORD",
    "PAST",
    "POLICIES",
    "POLICY",
    "PRIVILEGES",
    "QUERIES",
    "QUERY",
    "READ",
    "REPLICATION",
    "RESAMPLE",
    "RETENTION",
    "REVOKE",
    "SELECT",
    "SERIES",
    "SET",
    "SHARD",
    "SHARDS",
    "SHOW",
    "SLIMIT",
    "SOFFSET",
    "STATS",
    "SUBSCRIPTION",
    "SUBSCRIPTIONS",
    "TAG",
    "TO",
    "TRUE",
    "USER",
    "USERS",
    "VALUES",
    "VERBOSE",
    "WHERE",
    "WITH",
    "WRITE",
];

/// The keyword `word` spells (case-insensitively), upper-case.
pub fn keyword(word: &str) -> Option<&'static str> {
    KEYWORDS
        .iter()
        .copied()
        .find(|k| k.eq_ignore_ascii_case(word))
}

/// `"ident"`, with `\`, `"` and newline escaped.
pub fn quote_ident(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    push_quoted(&mut out, name, '"');
    out
}

/// `'string'`, with `\`, `'` and newline escaped.
pub fn quote_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    push_quoted(&mut out, value, '\'');
    out
}

fn push_quoted(out: &mut String, text: &str, quote: char) {
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// `/pattern/` with `/` escaped as `\/` (other backslashes pass through, as InfluxQL reads them).
pub fn quote_regex(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 2);
    out.push('/');
    for c in pattern.chars() {
        if c == '/' {
            out.push_str("\\/");
        } else {
            out.push(c);
        }
    }
    out.push('/');
    out
}

/// A duration in nanoseconds in the largest unit that is exact: `1w`, `2d`, `90m`, `1500ms`,
/// `5u`, `7ns`, `0s`; negative values get a leading `-`.
pub fn format_duration(ns: i64) -> String {
    const UNITS: [(i128, &str); 8] = [
        (7 * 86_400_000_000_000, "w"),
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "u"),
        (1, "ns"),
    ];
    if ns == 0 {
        return "0s".to_string();
    }
    // i128 so that i64::MIN has a magnitude
    let value = i128::from(ns);
    let magnitude = value.abs();
    let sign = if value < 0 { "-" } else { "" };
    for (size, unit) in UNITS {
        if magnitude % size == 0 {
            return format!("{sign}{}{unit}", magnitude / size);
        }
    }
    format!("{sign}{magnitude}ns")
}

/// A finite float that reads back as the same float (and as a float, not an integer): the
/// shortest exact decimal, never in exponent notation (InfluxQL has none), with a `.0` when
/// it would otherwise look like an integer.
pub fn format_float(value: f64) -> String {
    let mut text = format!("{value}");
    if !text.contains('.') && !text.contains("inf") && !text.contains("NaN") {
        text.push_str(".0");
    }
    text
}

/// Whether a function name can be written bare (`mean(...)`) rather than quoted.
fn call_name_is_bare(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_');
    first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && (keyword(name).is_none() || name == "distinct")
}

fn write_list<T: Display>(f: &mut Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

fn write_on(f: &mut Formatter<'_>, database: &Option<String>) -> fmt::Result {
    match database {
        Some(db) => write!(f, " ON {}", quote_ident(db)),
        None => Ok(()),
    }
}

fn write_from(f: &mut Formatter<'_>, from: &[MeasurementName]) -> fmt::Result {
    if from.is_empty() {
        return Ok(());
    }
    f.write_str(" FROM ")?;
    write_list(f, from)
}

fn write_where(f: &mut Formatter<'_>, condition: &Option<Expr>) -> fmt::Result {
    match condition {
        Some(cond) => write!(f, " WHERE {cond}"),
        None => Ok(()),
    }
}

fn write_limit_offset(
    f: &mut Formatter<'_>,
    limit: Option<u64>,
    offset: Option<u64>,
) -> fmt::Result {
    if let Some(n) = limit {
        write!(f, " LIMIT {n}")?;
    }
    if let Some(n) = offset {
        write!(f, " OFFSET {n}")?;
    }
    Ok(())
}

impl Display for Statement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Select(select) => write!(f, "{select}"),
            Statement::ShowDatabases => f.write_str("SHOW DATABASES"),
            Statement::ShowRetentionPolicies { database } => {
                f.write_str("SHOW RETENTION POLICIES")?;
                write_on(f, database)
            }
            Statement::ShowMeasurements {
                database,
                with_measurement,
                condition,
                limit,
                offset,
            } => {
                f.write_str("SHOW MEASUREMENTS")?;
                write_on(f, database)?;
                match with_measurement {
                    Some(MeasurementMatch::Eq(name)) => {
                        write!(f, " WITH MEASUREMENT = {}", quote_ident(name))?
                    }
                    Some(MeasurementMatch::Regex(re)) => {
                        write!(f, " WITH MEASUREMENT =~ {}", quote_regex(re))?
                    }
                    None => {}
                }
                write_where(f, condition)?;
                write_limit_offset(f, *limit, *offset)
            }
            Statement::ShowTagKeys {
                database,
                from,
                condition,
                limit,
                offset,
            } => {
                f.write_str("SHOW TAG KEYS")?;
                write_on(f, database)?;
                write_from(f, from)?;
                write_where(f, condition)?;
                write_limit_offset(f, *limit, *offset)
            }
            Statement::ShowTagValues {
                database,
                from,
                key,
                condition,
                limit,
                offset,
            } => {
                f.write_str("SHOW TAG VALUES")?;
                write_on(f, database)?;
                write_from(f, from)?;
                write!(f, " WITH KEY {key}")?;
                write_where(f, condition)?;
                write_limit_offset(f, *limit, *offset)
            }
            Statement::ShowFieldKeys {
                database,
                from,
                limit,
                offset,
            } => {
                f.write_str("SHOW FIELD KEYS")?;
                write_on(f, database)?;
                write_from(f, from)?;
                write_limit_offset(f, *limit, *offset)
            }
            Statement::ShowSeries {
                database,
                from,
                condition,
                limit,
                offset,
            } => {
                f.write_str("SHOW SERIES")?;
                write_on(f, database)?;
                write_from(f, from)?;
                write_where(f, condition)?;
                write_limit_offset(f, *limit, *offset)
            }
        }
    }
}

impl Display for TagKeyMatch {
    /// The part after `WITH KEY `: `= "host"`, `IN ("a", "b")`, `=~ /re/`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            TagKeyMatch::Eq(key) => write!(f, "= {}", quote_ident(key)),
            TagKeyMatch::NotEq(key) => write!(f, "!= {}", quote_ident(key)),
            TagKeyMatch::In(keys) => {
                f.write_str("IN (")?;
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&quote_ident(key))?;
                }
                f.write_str(")")
            }
            TagKeyMatch::Regex(re) => write!(f, "=~ {}", quote_regex(re)),
            TagKeyMatch::NotRegex(re) => write!(f, "!~ {}", quote_regex(re)),
        }
    }
}

impl Display for MeasurementName {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match (&self.database, &self.retention_policy) {
            (Some(db), Some(rp)) => write!(f, "{}.{}.", quote_ident(db), quote_ident(rp))?,
            (Some(db), None) => write!(f, "{}..", quote_ident(db))?,
            (None, Some(rp)) => write!(f, "{}.", quote_ident(rp))?,
            (None, None) => {}
        }
        match &self.name {
            NameOrRegex::Name(name) => f.write_str(&quote_ident(name)),
            NameOrRegex::Regex(re) => f.write_str(&quote_regex(re)),
        }
    }
}

impl Display for SelectStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SELECT ")?;
        write_list(f, &self.fields)?;
        f.write_str(" FROM ")?;
        write_list(f, &self.from)?;
        write_where(f, &self.condition)?;
        if !self.group_by.is_empty() {
            f.write_str(" GROUP BY ")?;
            write_list(f, &self.group_by)?;
        }
        if let Some(fill) = &self.fill {
            write!(f, " {fill}")?;
        }
        if self.order_desc {
            f.write_str(" ORDER BY time DESC")?;
        }
        write_limit_offset(f, self.limit, self.offset)?;
        if let Some(n) = self.slimit {
            write!(f, " SLIMIT {n}")?;
        }
        if let Some(n) = self.soffset {
            write!(f, " SOFFSET {n}")?;
        }
        if let Some(tz) = &self.timezone {
            write!(f, " tz({})", quote_string(tz))?;
        }
        Ok(())
    }
}

impl Display for Field {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.expr)?;
        if let Some(alias) = &self.alias {
            write!(f, " AS {}", quote_ident(alias))?;
        }
        Ok(())
    }
}

impl Display for Source {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Source::Measurement(m) => write!(f, "{m}"),
            Source::Subquery(select) => write!(f, "({select})"),
        }
    }
}

impl Display for Dimension {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Dimension::Time { interval, offset } => {
                write!(f, "time({}", format_duration(*interval))?;
                if let Some(offset) = offset {
                    write!(f, ", {}", format_duration(*offset))?;
                }
                f.write_str(")")
            }
            Dimension::Tag(name) => f.write_str(&quote_ident(name)),
            Dimension::Regex(re) => f.write_str(&quote_regex(re)),
            Dimension::Wildcard => f.write_str("*"),
        }
    }
}

impl Display for Fill {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Fill::Null => f.write_str("fill(null)"),
            Fill::None => f.write_str("fill(none)"),
            Fill::Previous => f.write_str("fill(previous)"),
            Fill::Linear => f.write_str("fill(linear)"),
            Fill::Value(value) => write!(f, "fill({value})"),
        }
    }
}

impl Display for Literal {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Integer(n) => write!(f, "{n}"),
            Literal::Unsigned(n) => write!(f, "{n}"),
            Literal::Float(x) => f.write_str(&format_float(*x)),
            Literal::String(s) => f.write_str(&quote_string(s)),
            Literal::Boolean(b) => f.write_str(if *b { "true" } else { "false" }),
            Literal::Duration(ns) => f.write_str(&format_duration(*ns)),
        }
    }
}

impl Display for BinaryOp {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Display for VarType {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Expr {
    /// `Some(sign)` when this node is how the parser represents unary minus (or plus) on a
    /// reference, call or parenthesis (`-x` is `-1 * x`), and the operand: such a node is
    /// written back as `-x`, which binds tighter than any binary operator.
    pub fn as_unary_sign(&self) -> Option<(i64, &Expr)> {
        if let Expr::Binary {
            op: BinaryOp::Mul,
            lhs,
            rhs,
        } = self
        {
            if let Expr::Literal(Literal::Integer(sign @ (1 | -1))) = **lhs {
                if matches!(
                    **rhs,
                    Expr::VarRef { .. } | Expr::Call { .. } | Expr::Paren(_)
                ) {
                    return Some((sign, rhs));
                }
            }
        }
        None
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Expr::VarRef { name, data_type } => {
                f.write_str(&quote_ident(name))?;
                if let Some(t) = data_type {
                    write!(f, "::{t}")?;
                }
                Ok(())
            }
            Expr::Call { name, args } => {
                if call_name_is_bare(name) {
                    f.write_str(name)?;
                } else {
                    f.write_str(&quote_ident(name))?;
                }
                f.write_char('(')?;
                write_list(f, args)?;
                f.write_char(')')
            }
            Expr::Literal(lit) => write!(f, "{lit}"),
            Expr::Wildcard { kind } => match kind {
                None => f.write_str("*"),
                Some(WildcardKind::Field) => f.write_str("*::field"),
                Some(WildcardKind::Tag) => f.write_str("*::tag"),
            },
            Expr::Regex(re) => f.write_str(&quote_regex(re)),
            Expr::Binary { op, lhs, rhs } => match self.as_unary_sign() {
                Some((sign, operand)) => {
                    write!(f, "{}{operand}", if sign < 0 { '-' } else { '+' })
                }
                None => write!(f, "{lhs} {op} {rhs}"),
            },
            Expr::Paren(inner) => write!(f, "({inner})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_use_the_largest_exact_unit() {
        assert_eq!(format_duration(0), "0s");
        assert_eq!(format_duration(3_600_000_000_000), "1h");
        assert_eq!(format_duration(5_400_000_000_000), "90m");
        assert_eq!(format_duration(604_800_000_000_000), "1w");
        assert_eq!(format_duration(86_400_000_000_000), "1d");
        assert_eq!(format_duration(1_500_000_000), "1500ms");
        assert_eq!(format_duration(5_000), "5u");
        assert_eq!(format_duration(7), "7ns");
        assert_eq!(format_duration(-300_000_000_000), "-5m");
        assert_eq!(format_duration(i64::MIN), "-9223372036854775808ns");
    }

    #[test]
    fn floats_always_read_back_as_floats() {
        assert_eq!(format_float(1.0), "1.0");
        assert_eq!(format_float(0.5), "0.5");
        assert_eq!(format_float(-2.25), "-2.25");
        assert_eq!(format_float(1e20), "100000000000000000000.0");
        assert!(!format_float(1e-7).contains('e'));
    }

    #[test]
    fn quoting_escapes() {
        assert_eq!(quote_ident(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quote_ident("a\nb"), r#""a\nb""#);
        assert_eq!(quote_string("it's"), r"'it\'s'");
        assert_eq!(quote_regex("a/b"), r"/a\/b/");
    }

    #[test]
    fn keywords_are_case_insensitive() {
        assert_eq!(keyword("select"), Some("SELECT"));
        assert_eq!(keyword("Where"), Some("WHERE"));
        assert_eq!(keyword("time"), None);
        assert_eq!(keyword("true"), Some("TRUE"));
    }

    #[test]
    fn unary_minus_renders_as_a_prefix() {
        let neg = Expr::Binary {
            op: BinaryOp::Mul,
            lhs: Box::new(Expr::Literal(Literal::Integer(-1))),
            rhs: Box::new(Expr::VarRef {
                name: "x".into(),
                data_type: None,
            }),
        };
        assert_eq!(neg.to_string(), r#"-"x""#);
        let mul = Expr::Binary {
            op: BinaryOp::Mul,
            lhs: Box::new(Expr::Literal(Literal::Integer(2))),
            rhs: Box::new(neg),
        };
        assert_eq!(mul.to_string(), r#"2 * -"x""#);
    }

    #[test]
    fn call_names_are_quoted_only_when_needed() {
        let call = |name: &str| Expr::Call {
            name: name.into(),
            args: vec![],
        };
        assert_eq!(call("now").to_string(), "now()");
        assert_eq!(call("distinct").to_string(), "distinct()");
        assert_eq!(call("from").to_string(), r#""from"()"#);
        assert_eq!(call("my fn").to_string(), r#""my fn"()"#);
    }

    #[test]
    fn measurement_names_render_their_qualifiers() {
        let m = |db: Option<&str>, rp: Option<&str>| MeasurementName {
            database: db.map(String::from),
            retention_policy: rp.map(String::from),
            name: NameOrRegex::Name("cpu".into()),
        };
        assert_eq!(m(None, None).to_string(), r#""cpu""#);
        assert_eq!(m(Some("db"), None).to_string(), r#""db".."cpu""#);
        assert_eq!(m(None, Some("rp")).to_string(), r#""rp"."cpu""#);
        assert_eq!(m(Some("db"), Some("rp")).to_string(), r#""db"."rp"."cpu""#);
    }
}

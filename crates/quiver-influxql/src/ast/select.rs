//! [`SelectStatement`] and its clauses: the fields, the `FROM` sources (measurement
//! references, which `SHOW` statements use too, and subqueries), the `GROUP BY` dimensions
//! and the `fill(...)` option, with their canonical text.

use std::fmt::{self, Display, Formatter};

use super::{
    format_duration, quote_ident, quote_regex, quote_string, write_limit_offset, write_list,
    write_where, Expr, Literal,
};

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

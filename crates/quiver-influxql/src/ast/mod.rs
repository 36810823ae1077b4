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
//!
//! This module has what all of the tree shares: InfluxQL's keywords, quoting, the canonical
//! text of durations and floats, and the clause writers several statements use; `statement`
//! has [`Statement`] (with the `SHOW` statements' own clauses), `select` the `SELECT`
//! statement and its clauses, and `expr` expressions, literals and operators. Each type's
//! `Display` is beside it.

use std::fmt::{self, Display, Formatter};

mod expr;
mod select;
mod statement;

pub use expr::{BinaryOp, Expr, Literal, VarType, WildcardKind};
pub use select::{Dimension, Field, Fill, MeasurementName, NameOrRegex, SelectStatement, Source};
pub use statement::{MeasurementMatch, Statement, TagKeyMatch};

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

fn write_list<T: Display>(f: &mut Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
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

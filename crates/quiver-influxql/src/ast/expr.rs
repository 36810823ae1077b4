//! Expressions ([`Expr`]): references with their `::type`, calls, literals, wildcards,
//! regular expressions and binary operators with InfluxQL's precedence, and their canonical
//! text (which writes no parentheses of its own: see the `ast` module).

use std::fmt::{self, Display, Formatter, Write as _};

use super::{
    format_duration, format_float, keyword, quote_ident, quote_regex, quote_string, write_list,
};

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

/// Whether a function name can be written bare (`mean(...)`) rather than quoted.
fn call_name_is_bare(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_');
    first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && (keyword(name).is_none() || name == "distinct")
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

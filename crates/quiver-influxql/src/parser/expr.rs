//! Expressions: binary operators by precedence climbing (with the depth of the tree they
//! build bounded), unary signs, literals (numbers, strings, booleans, durations), calls,
//! variable references with their `::type`, wildcards, and regular expressions.

use super::{to_parse_error, ParseError, Parser};
use crate::ast::{BinaryOp, Expr, Literal, VarType, WildcardKind};
use crate::lexer::{Token, TokenKind};

const EXPR_START: &[&str] = &["identifier", "string", "number", "bool"];

/// The last line of the regex crate's (multi-line) syntax error: "unclosed group".
fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or(text)
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

impl Parser<'_> {
    /// A regex if the next token is `/`; nothing is consumed otherwise.
    pub(super) fn try_regex(&mut self) -> Result<Option<String>, ParseError> {
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
    pub(super) fn expect_regex(&mut self) -> Result<String, ParseError> {
        match self.try_regex()? {
            Some(pattern) => Ok(pattern),
            None => {
                let tok = self.next()?;
                Err(self.expected(&tok, &["regex"]))
            }
        }
    }

    pub(super) fn parse_expr(&mut self) -> Result<Sized, ParseError> {
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

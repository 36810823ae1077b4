//! `SELECT` and its clauses: the fields (no boolean operators there), `FROM` sources
//! (measurements and subqueries), `GROUP BY` dimensions, `fill(...)`, `ORDER BY`, the
//! `LIMIT`/`OFFSET` family and `tz(...)`.

use super::{ParseError, Parser};
use crate::ast::{BinaryOp, Dimension, Expr, Field, Fill, Literal, SelectStatement, Source};
use crate::lexer::TokenKind;

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

impl Parser<'_> {
    /// The rest of a `SELECT` whose keyword (at `start`) is consumed.
    pub(super) fn parse_select(&mut self, start: usize) -> Result<SelectStatement, ParseError> {
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
}

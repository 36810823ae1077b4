//! The `SHOW` statements Quiver runs (`DATABASES`, `RETENTION POLICIES`, `MEASUREMENTS`,
//! `SERIES`, `TAG KEYS`, `TAG VALUES`, `FIELD KEYS`) and their clauses (`ON`, `FROM`,
//! `WITH MEASUREMENT`, `WITH KEY`); the other `SHOW` statements and the cardinality forms
//! are errors that say they are not supported.

use super::{ParseError, Parser};
use crate::ast::{MeasurementMatch, MeasurementName, NameOrRegex, Statement, TagKeyMatch};
use crate::lexer::TokenKind;

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

impl Parser<'_> {
    /// `ON db`, if present.
    fn parse_on(&mut self) -> Result<Option<String>, ParseError> {
        if self.eat_keyword("ON")? {
            return Ok(Some(self.parse_ident()?));
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

    pub(super) fn parse_show(&mut self, start: usize) -> Result<Statement, ParseError> {
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
}

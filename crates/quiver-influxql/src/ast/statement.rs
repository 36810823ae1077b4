//! [`Statement`], the root of the tree: `SELECT` or one of the `SHOW` statements, with the
//! clauses only `SHOW` statements have (`ON db`, `WITH MEASUREMENT`, `WITH KEY`), and its
//! canonical text.

use std::fmt::{self, Display, Formatter};

use super::{
    quote_ident, quote_regex, write_limit_offset, write_list, write_where, Expr, MeasurementName,
    SelectStatement,
};

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

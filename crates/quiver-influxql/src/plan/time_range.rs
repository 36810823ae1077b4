//! The time range of a `WHERE` clause: its comparisons of `time` (ANDed at the top level, as
//! InfluxDB 1.x requires) folded into one half-open range, the rest of the condition kept.
//!
//! A time is an RFC 3339 string (`'2020-09-13T12:26:40Z'`, also `'2020-09-13 12:26:40'` and
//! `'2020-09-13'`), an integer of nanoseconds or a duration literal since the epoch
//! (`1600000000s`), `now()`, or a sum or difference of those with durations.

use chrono::{DateTime, NaiveDate, NaiveDateTime};

use super::PlanError;
use crate::ast::{BinaryOp, Expr, Literal};

/// A half-open range of nanoseconds: `lower <= time < upper`; `None`: unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TimeRange {
    pub lower: Option<i64>,
    pub upper: Option<i64>,
}

impl TimeRange {
    /// This range narrowed to the part within `outer`.
    pub(crate) fn within(mut self, outer: TimeRange) -> TimeRange {
        if let Some(lower) = outer.lower {
            self.narrow_lower(lower);
        }
        if let Some(upper) = outer.upper {
            self.narrow_upper(upper);
        }
        self
    }

    fn narrow_lower(&mut self, lower: i64) {
        self.lower = Some(self.lower.map_or(lower, |l| l.max(lower)));
    }

    fn narrow_upper(&mut self, upper: i64) {
        self.upper = Some(self.upper.map_or(upper, |u| u.min(upper)));
    }
}

/// `condition` split into its time range and the rest (`None`: nothing else).
pub(crate) fn split(
    condition: Option<&Expr>,
    now_ns: i64,
) -> Result<(TimeRange, Option<Expr>), PlanError> {
    let mut range = TimeRange::default();
    let Some(condition) = condition else {
        return Ok((range, None));
    };
    let mut rest = Vec::new();
    for conjunct in conjuncts(condition) {
        match time_comparison(conjunct) {
            Some((op, value, time_on_left)) => {
                let at = eval_time(value, now_ns)?;
                let op = if time_on_left { op } else { flip(op) };
                apply(&mut range, op, at)?;
            }
            None if mentions_time(conjunct) => {
                return Err(PlanError::new(format!(
                    "invalid time condition: {conjunct} (compare time with <, <=, =, >=, > and \
                     combine such comparisons with AND)"
                )))
            }
            None => rest.push(conjunct.clone()),
        }
    }
    let rest = rest.into_iter().reduce(|lhs, rhs| Expr::Binary {
        op: BinaryOp::And,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    });
    Ok((range, rest))
}

/// Whether `condition` compares time with an upper bound (`<`, `<=` or `=`).
pub(crate) fn has_upper_bound(condition: Option<&Expr>) -> bool {
    condition.is_some_and(|condition| {
        conjuncts(condition).into_iter().any(|c| {
            time_comparison(c).is_some_and(|(op, _, on_left)| {
                let op = if on_left { op } else { flip(op) };
                matches!(op, BinaryOp::Lt | BinaryOp::LtEq | BinaryOp::Eq)
            })
        })
    })
}

/// Whether `expr` calls `now()` anywhere.
pub(crate) fn mentions_now(expr: &Expr) -> bool {
    match expr {
        Expr::Call { name, args } => name == "now" || args.iter().any(mentions_now),
        Expr::Binary { lhs, rhs, .. } => mentions_now(lhs) || mentions_now(rhs),
        Expr::Paren(inner) => mentions_now(inner),
        _ => false,
    }
}

fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::Binary {
            op: BinaryOp::And,
            lhs,
            rhs,
        } => {
            let mut all = conjuncts(lhs);
            all.extend(conjuncts(rhs));
            all
        }
        Expr::Paren(inner) => conjuncts(inner),
        other => vec![other],
    }
}

fn is_time(expr: &Expr) -> bool {
    matches!(expr, Expr::VarRef { name, .. } if name.eq_ignore_ascii_case("time"))
}

fn mentions_time(expr: &Expr) -> bool {
    match expr {
        Expr::Binary { lhs, rhs, .. } => mentions_time(lhs) || mentions_time(rhs),
        Expr::Paren(inner) => mentions_time(inner),
        other => is_time(other),
    }
}

/// `(op, value, time is on the left)` if `expr` compares `time` with something.
fn time_comparison(expr: &Expr) -> Option<(BinaryOp, &Expr, bool)> {
    let Expr::Binary { op, lhs, rhs } = expr else {
        return None;
    };
    if !matches!(
        op,
        BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Eq
            | BinaryOp::GtEq
            | BinaryOp::Gt
            | BinaryOp::NotEq
    ) {
        return None;
    }
    match (is_time(lhs), is_time(rhs)) {
        (true, false) => Some((*op, rhs, true)),
        (false, true) => Some((*op, lhs, false)),
        _ => None,
    }
}

fn flip(op: BinaryOp) -> BinaryOp {
    match op {
        BinaryOp::Lt => BinaryOp::Gt,
        BinaryOp::LtEq => BinaryOp::GtEq,
        BinaryOp::Gt => BinaryOp::Lt,
        BinaryOp::GtEq => BinaryOp::LtEq,
        other => other,
    }
}

fn apply(range: &mut TimeRange, op: BinaryOp, at: i64) -> Result<(), PlanError> {
    match op {
        BinaryOp::Gt => range.narrow_lower(at.saturating_add(1)),
        BinaryOp::GtEq => range.narrow_lower(at),
        BinaryOp::Lt => range.narrow_upper(at),
        BinaryOp::LtEq => range.narrow_upper(at.saturating_add(1)),
        BinaryOp::Eq => {
            range.narrow_lower(at);
            range.narrow_upper(at.saturating_add(1));
        }
        _ => {
            return Err(PlanError::new(
                "invalid time comparison operator: != (use <, <=, =, >= or >)",
            ))
        }
    }
    Ok(())
}

/// The instant `expr` names, in nanoseconds since the epoch.
pub(crate) fn eval_time(expr: &Expr, now_ns: i64) -> Result<i64, PlanError> {
    let overflow = || PlanError::new(format!("time {expr} is out of range"));
    match expr {
        Expr::Literal(Literal::Integer(ns)) => Ok(*ns),
        Expr::Literal(Literal::Duration(ns)) => Ok(*ns),
        Expr::Literal(Literal::Float(f)) if f.is_finite() && f.abs() < 9.2e18 => Ok(*f as i64),
        Expr::Literal(Literal::String(text)) => parse_time(text),
        Expr::Call { name, args } if name == "now" && args.is_empty() => Ok(now_ns),
        Expr::Paren(inner) => eval_time(inner, now_ns),
        Expr::Binary { op, lhs, rhs } => {
            let lhs = eval_time(lhs, now_ns)?;
            let rhs = eval_time(rhs, now_ns)?;
            match op {
                BinaryOp::Add => lhs.checked_add(rhs).ok_or_else(overflow),
                BinaryOp::Sub => lhs.checked_sub(rhs).ok_or_else(overflow),
                _ => Err(PlanError::new(format!("invalid time expression: {expr}"))),
            }
        }
        other => Err(PlanError::new(format!("invalid time expression: {other}"))),
    }
}

/// A time as InfluxDB 1.x reads it in a string: RFC 3339, or `YYYY-MM-DD[ HH:MM:SS[.f]]` in
/// UTC.
fn parse_time(text: &str) -> Result<i64, PlanError> {
    let parsed = DateTime::parse_from_rfc3339(text)
        .map(|t| t.naive_utc())
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f"))
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default())
        })
        .map_err(|_| PlanError::new(format!("invalid time literal: '{text}' (use RFC 3339)")))?;
    parsed
        .and_utc()
        .timestamp_nanos_opt()
        .ok_or_else(|| PlanError::new(format!("time '{text}' is out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::Statement;
    use crate::parser::{parse, ParseLimits};

    fn condition(text: &str) -> Expr {
        let statement = parse(
            &format!("SELECT a FROM m WHERE {text}"),
            ParseLimits::default(),
        )
        .unwrap()
        .remove(0);
        match statement {
            Statement::Select(select) => select.condition.unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn comparisons_fold_into_one_half_open_range() {
        let c = condition("time >= 10 AND time < 20 AND host = 'a' AND time > 12");
        let (range, rest) = split(Some(&c), 0).unwrap();
        assert_eq!(
            range,
            TimeRange {
                lower: Some(13),
                upper: Some(20)
            }
        );
        assert_eq!(
            rest.unwrap().to_string(),
            condition("host = 'a'").to_string()
        );
        let c = condition("time <= '2020-09-13T12:26:40Z' AND time = 5s");
        let (range, rest) = split(Some(&c), 0).unwrap();
        assert_eq!(range.lower, Some(5_000_000_000));
        assert_eq!(range.upper, Some(5_000_000_001));
        assert!(rest.is_none());
    }

    #[test]
    fn now_and_durations_and_reversed_sides() {
        let c = condition("now() - 1h < time");
        let now = 10_000_000_000_000;
        let (range, _) = split(Some(&c), now).unwrap();
        assert_eq!(range.lower, Some(now - 3_600_000_000_000 + 1));
        assert!(mentions_now(&c));
        assert!(!has_upper_bound(Some(&c)));
        assert!(has_upper_bound(Some(&condition("time <= now()"))));
    }

    #[test]
    fn time_under_or_is_refused() {
        let c = condition("time > 10 OR host = 'a'");
        assert!(split(Some(&c), 0)
            .unwrap_err()
            .0
            .contains("invalid time condition"));
        let c = condition("time != 10");
        assert!(split(Some(&c), 0).is_err());
        let c = condition("time > 'yesterday'");
        assert!(split(Some(&c), 0)
            .unwrap_err()
            .0
            .contains("invalid time literal"));
    }

    #[test]
    fn strings_in_every_spelling() {
        assert_eq!(parse_time("1970-01-01T00:00:01Z").unwrap(), 1_000_000_000);
        assert_eq!(
            parse_time("1970-01-01T01:00:01+01:00").unwrap(),
            1_000_000_000
        );
        assert_eq!(parse_time("1970-01-01 00:00:01.5").unwrap(), 1_500_000_000);
        assert_eq!(parse_time("1970-01-02").unwrap(), 86_400_000_000_000);
    }
}

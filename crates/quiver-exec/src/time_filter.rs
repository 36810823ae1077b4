//! What a query's filters say about `time`: the range they allow ([`time_bounds`]), read from
//! conjuncts comparing the `time` column with timestamp literals, and the disjoint stretches
//! within it that a disjunction of ranges allows ([`time_pieces`]: the rows a routed or
//! reused-parts query still computes, often a window's two ends). Scans prune files and
//! buffered rows with them; the rollup router splits a query's range with the first.

use datafusion::common::tree_node::TreeNode;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::utils::{split_binary, split_conjunction};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use quiver_model::schema::TIME_COLUMN;

/// The range of `time` values the query's filters allow (inclusive), from conjuncts of the
/// form `time <op> <timestamp literal>` and `time BETWEEN a AND b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBounds {
    /// The oldest time allowed.
    pub min: i64,
    /// The newest time allowed.
    pub max: i64,
}

impl TimeBounds {
    /// No bound at all.
    pub const ALL: TimeBounds = TimeBounds {
        min: i64::MIN,
        max: i64::MAX,
    };

    pub fn overlaps(&self, lo: i64, hi: i64) -> bool {
        lo <= self.max && hi >= self.min
    }

    fn restrict(&mut self, op: Operator, value: i64) {
        match op {
            Operator::Gt => self.min = self.min.max(value.saturating_add(1)),
            Operator::GtEq => self.min = self.min.max(value),
            Operator::Lt => self.max = self.max.min(value.saturating_sub(1)),
            Operator::LtEq => self.max = self.max.min(value),
            Operator::Eq => {
                self.min = self.min.max(value);
                self.max = self.max.min(value);
            }
            _ => {}
        }
    }
}

/// What a scan's filters let through of `time`: their bounds, and the pieces within them
/// where the filters name any ([`time_pieces`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeStretches {
    /// The range the filters allow.
    pub bounds: TimeBounds,
    /// The disjoint stretches of `bounds` they allow, ascending, if they say.
    pieces: Option<Vec<TimeBounds>>,
}

impl TimeStretches {
    /// What `filters` let through.
    pub fn of(filters: &[Expr]) -> Self {
        let bounds = time_bounds(filters);
        let pieces = time_pieces(filters, bounds);
        TimeStretches { bounds, pieces }
    }

    /// True if a row in `[lo, hi]` may pass.
    pub fn overlaps(&self, lo: i64, hi: i64) -> bool {
        self.ranges().iter().any(|range| range.overlaps(lo, hi))
    }

    /// The ranges rows may be in, ascending and disjoint.
    pub fn ranges(&self) -> &[TimeBounds] {
        self.pieces
            .as_deref()
            .unwrap_or(std::slice::from_ref(&self.bounds))
    }

    /// True if every time passes.
    pub fn is_all(&self) -> bool {
        self.ranges() == [TimeBounds::ALL]
    }
}

pub fn time_bounds(filters: &[Expr]) -> TimeBounds {
    let mut bounds = TimeBounds::ALL;
    for filter in filters {
        collect_bounds(filter, &mut bounds);
    }
    bounds
}

fn collect_bounds(expr: &Expr, bounds: &mut TimeBounds) {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            collect_bounds(left, bounds);
            collect_bounds(right, bounds);
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if let Some((op, value)) = time_comparison(left, *op, right) {
                bounds.restrict(op, value);
            }
        }
        Expr::Between(between) => {
            if let Some((low, high)) = time_between(between) {
                bounds.restrict(Operator::GtEq, low);
                bounds.restrict(Operator::LtEq, high);
            }
        }
        _ => {}
    }
}

/// `time <op> <timestamp literal>` with `time` on either side, as the operator seen from
/// `time` and the literal in nanoseconds.
fn time_comparison(left: &Expr, op: Operator, right: &Expr) -> Option<(Operator, i64)> {
    let (op, other) = compared_with_time(left, op, right)?;
    Some((op, timestamp_ns(other)?))
}

/// `time <op> <expr>` with `time` on either side: the operator seen from `time`, and the
/// other side.
pub fn compared_with_time<'a>(
    left: &'a Expr,
    op: Operator,
    right: &'a Expr,
) -> Option<(Operator, &'a Expr)> {
    if is_time_column(left) {
        Some((op, right))
    } else if is_time_column(right) {
        Some((op.swap()?, left))
    } else {
        None
    }
}

/// `time BETWEEN <timestamp> AND <timestamp>` (not negated), in nanoseconds.
fn time_between(between: &Between) -> Option<(i64, i64)> {
    if between.negated || !is_time_column(&between.expr) {
        return None;
    }
    Some((timestamp_ns(&between.low)?, timestamp_ns(&between.high)?))
}

/// True if `expr` can be evaluated on its own: no subquery, no reference to an outer query and
/// no placeholder anywhere in it (functions of the clock are allowed: see the callers).
pub fn stands_alone(expr: &Expr) -> bool {
    !expr
        .exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::OuterReferenceColumn(..)
                    | Expr::Placeholder(_)
            ))
        })
        .unwrap_or(true)
}

/// The table's `time` column, as is.
pub fn is_time_column(expr: &Expr) -> bool {
    matches!(expr, Expr::Column(c) if c.name == TIME_COLUMN)
}

/// A timestamp literal in nanoseconds; `None` (no bound, so nothing is pruned) if it is not
/// one or does not fit in `i64` nanoseconds.
pub fn timestamp_ns(expr: &Expr) -> Option<i64> {
    let Expr::Literal(value, _) = expr else {
        return None;
    };
    match value {
        ScalarValue::TimestampNanosecond(Some(v), _) => Some(*v),
        ScalarValue::TimestampMicrosecond(Some(v), _) => v.checked_mul(1_000),
        ScalarValue::TimestampMillisecond(Some(v), _) => v.checked_mul(1_000_000),
        ScalarValue::TimestampSecond(Some(v), _) => v.checked_mul(1_000_000_000),
        _ => None,
    }
}

/// At most this many stretches are kept apart ([`time_pieces`]): a scan slices every series
/// once per stretch, so a statement of thousands of `OR`-ed ranges reads their hull instead.
const MAX_PIECES: usize = 64;

/// The stretches of `time` within `bounds` that a conjunct of `filters` made of ranges joined
/// by `OR` allows (each range a conjunction of [`is_time_bound`]s, or `true` / `false`),
/// ascending and disjoint; `None` if no conjunct is one (then `bounds` is all there is), or if
/// there are more than [`MAX_PIECES`]. An empty list allows no row.
pub fn time_pieces(filters: &[Expr], bounds: TimeBounds) -> Option<Vec<TimeBounds>> {
    let alternatives = filters
        .iter()
        .flat_map(|f| split_conjunction(f))
        .find_map(|conjunct| match conjunct {
            Expr::BinaryExpr(BinaryExpr {
                op: Operator::Or, ..
            }) => split_binary(conjunct, Operator::Or)
                .into_iter()
                .map(range_of)
                .collect::<Option<Vec<_>>>(),
            _ => None,
        })?;
    let mut pieces: Vec<TimeBounds> = alternatives
        .into_iter()
        .flatten()
        .map(|piece| TimeBounds {
            min: piece.min.max(bounds.min),
            max: piece.max.min(bounds.max),
        })
        .filter(|piece| piece.min <= piece.max)
        .collect();
    pieces.sort_by_key(|piece| piece.min);
    let mut joined: Vec<TimeBounds> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match joined.last_mut() {
            Some(last) if piece.min <= last.max.saturating_add(1) => {
                last.max = last.max.max(piece.max)
            }
            _ => joined.push(piece),
        }
    }
    (joined.len() <= MAX_PIECES).then_some(joined)
}

/// The range one alternative of a disjunction allows: `Some(None)` for `false` (nothing),
/// `None` if it is not made of time bounds alone.
fn range_of(alternative: &Expr) -> Option<Option<TimeBounds>> {
    let mut bounds = TimeBounds::ALL;
    for conjunct in split_conjunction(alternative) {
        match conjunct {
            Expr::Literal(ScalarValue::Boolean(Some(true)), _) => {}
            Expr::Literal(ScalarValue::Boolean(Some(false)), _) => return Some(None),
            bound if is_time_bound(bound) => collect_bounds(bound, &mut bounds),
            _ => return None,
        }
    }
    Some(Some(bounds))
}

/// `time < | <= | > | >= <timestamp>` (either side) or `time BETWEEN a AND b`.
pub fn is_time_range(expr: &Expr) -> bool {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => time_comparison(left, *op, right)
            .is_some_and(|(op, _)| {
                matches!(
                    op,
                    Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
                )
            }),
        Expr::Between(between) => time_between(between).is_some(),
        _ => false,
    }
}

/// A conjunct [`time_bounds`] reads whole: a time range ([`is_time_range`]) or `time = <timestamp>`.
pub fn is_time_bound(expr: &Expr) -> bool {
    is_time_range(expr)
        || matches!(expr, Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right })
            if time_comparison(left, Operator::Eq, right).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    fn ts(v: i64) -> Expr {
        lit(ScalarValue::TimestampNanosecond(
            Some(v),
            Some("UTC".into()),
        ))
    }

    #[test]
    fn time_bounds_from_filters() {
        let b = time_bounds(&[col("time").gt_eq(ts(10)), col("time").lt(ts(20))]);
        assert_eq!(b, TimeBounds { min: 10, max: 19 });
        assert!(b.overlaps(19, 25) && b.overlaps(0, 10) && !b.overlaps(20, 30));
        let b = time_bounds(&[ts(5).lt(col("time")).and(col("host").eq(lit("a")))]);
        assert_eq!(
            b,
            TimeBounds {
                min: 6,
                max: i64::MAX
            }
        );
        let b = time_bounds(&[col("time").between(ts(1), ts(3))]);
        assert_eq!(b, TimeBounds { min: 1, max: 3 });
        let b = time_bounds(&[col("time").gt(ts(1)).or(col("time").lt(ts(0)))]);
        assert_eq!(
            b,
            TimeBounds {
                min: i64::MIN,
                max: i64::MAX
            },
            "OR is not a bound"
        );
    }

    #[test]
    fn time_pieces_from_disjunctions_of_ranges() {
        let range = |lo: i64, hi: i64| col("time").gt_eq(ts(lo)).and(col("time").lt(ts(hi)));
        let window = [
            col("time").gt(ts(0)),
            range(1, 10)
                .or(range(50, 60))
                .or(col("time").gt_eq(ts(100))),
        ];
        let bounds = time_bounds(&window);
        let pieces = time_pieces(&window, bounds).unwrap();
        assert_eq!(
            pieces,
            vec![
                TimeBounds { min: 1, max: 9 },
                TimeBounds { min: 50, max: 59 },
                TimeBounds {
                    min: 100,
                    max: i64::MAX
                }
            ]
        );
        // pieces are cut to the bounds, joined where they touch; `false` allows nothing
        let cut = [
            col("time").lt(ts(55)),
            range(1, 10)
                .or(range(10, 20))
                .or(range(50, 60))
                .or(lit(false)),
        ];
        assert_eq!(
            time_pieces(&cut, time_bounds(&cut)).unwrap(),
            vec![
                TimeBounds { min: 1, max: 19 },
                TimeBounds { min: 50, max: 54 }
            ]
        );
        assert_eq!(
            time_pieces(&[lit(false).or(lit(false))], TimeBounds::ALL),
            Some(vec![])
        );
        // an alternative that is not a time range: no pieces
        let mixed = [range(1, 10).or(col("host").eq(lit("a")))];
        assert_eq!(time_pieces(&mixed, TimeBounds::ALL), None);
        assert_eq!(time_pieces(&[range(1, 10)], TimeBounds::ALL), None);
        // too many stretches to slice every series by: the hull
        let many = |n: i64| {
            (0..n)
                .map(|i| range(10 * i, 10 * i + 5))
                .reduce(Expr::or)
                .unwrap()
        };
        let most = time_pieces(&[many(MAX_PIECES as i64)], TimeBounds::ALL).unwrap();
        assert_eq!(most.len(), MAX_PIECES);
        assert_eq!(
            time_pieces(&[many(MAX_PIECES as i64 + 1)], TimeBounds::ALL),
            None
        );
    }
}

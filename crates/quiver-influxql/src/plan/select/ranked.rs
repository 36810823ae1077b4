//! `top()` and `bottom()`: the points of a bucket with the largest (smallest) values, each
//! answered with its own time and the columns selected beside it.

use std::sync::Arc;

use datafusion::logical_expr::{lit, Expr as DfExpr, ExprFunctionExt, LogicalPlan, TableSource};
use datafusion::prelude::ident;

use super::functions::field_value;
use super::{
    bucket, dedupe_names, field_names, is_var_ref, key_columns, scan, tag_key, Grouping,
    OutputColumn,
};
use crate::ast::{Expr, SelectStatement};
use crate::plan::expr::{self, Columns};
use crate::plan::time_range::TimeRange;
use crate::plan::PlanError;

/// `top(field, [tag, ...,] n)` / `bottom(...)`: the `n` points of a bucket with the largest
/// (smallest) values, earlier points first among equal values, each with its own time and
/// the other columns selected beside it; with tags, first the best point of each
/// combination of their values, then the best `n` of those.
pub(super) struct Ranked {
    /// Which output column it is.
    column: usize,
    field: Expr,
    tags: Vec<String>,
    n: i64,
    largest: bool,
}

impl Ranked {
    /// The statement's `top()` / `bottom()`, if it has one; refused where 1.x refuses it.
    pub(super) fn find(
        columns: &[OutputColumn],
        select: &SelectStatement,
    ) -> Result<Option<Ranked>, PlanError> {
        let Some((column, name, args)) =
            columns.iter().enumerate().find_map(|(i, c)| match &c.expr {
                Expr::Call { name, args } if name == "top" || name == "bottom" => {
                    Some((i, name, args))
                }
                _ => None,
            })
        else {
            return Ok(None);
        };
        if columns
            .iter()
            .enumerate()
            .any(|(i, c)| i != column && !is_var_ref(&c.expr))
        {
            return Err(PlanError::new(format!(
                "selector function {name}() cannot be combined with other functions"
            )));
        }
        let (field, rest) = match args.as_slice() {
            [field @ Expr::VarRef { .. }, rest @ .., _] => (field.clone(), rest),
            _ => {
                return Err(PlanError::new(format!(
                    "invalid number of arguments for {name}, expected at least 2, got {}",
                    args.len()
                )))
            }
        };
        let n = match args.last() {
            Some(Expr::Literal(crate::ast::Literal::Integer(n))) if *n > 0 => *n,
            Some(other) => {
                return Err(PlanError::new(format!(
                    "expected integer as last argument in {name}(), found {other}"
                )))
            }
            None => 0,
        };
        let mut tags = Vec::new();
        for arg in rest {
            match arg {
                Expr::VarRef { name, .. } => tags.push(name.clone()),
                other => {
                    return Err(PlanError::new(format!(
                        "only fields or tags are allowed in {name}(), found {other}"
                    )))
                }
            }
        }
        // (LIMIT 0 is no limit)
        if let Some(limit) = select
            .limit
            .filter(|&limit| limit > 0 && (limit as i128) < n as i128)
        {
            return Err(PlanError::new(format!(
                "limit ({n}) in {name} function can not be larger than the LIMIT ({limit}) in \
                 the select statement"
            )));
        }
        Ok(Some(Ranked {
            column,
            field,
            tags,
            n,
            largest: name == "top",
        }))
    }

    /// Shows the tags of `top(field, tag, ..., n)` right after it, as 1.x does (renamed
    /// `<tag>_1` if the statement groups by it too: the series' key shows it).
    pub(super) fn add_tag_columns(&self, columns: &mut Vec<OutputColumn>, grouped: &[String]) {
        let tags = self.tags.iter().map(|tag| OutputColumn {
            name: match grouped.contains(tag) {
                true => format!("{tag}_1"),
                false => tag.clone(),
            },
            expr: Expr::VarRef {
                name: tag.clone(),
                data_type: None,
            },
        });
        columns.splice(self.column + 1..self.column + 1, tags);
        dedupe_names(columns);
    }

    /// One measurement's chosen points; `None` if the field is not one of its fields.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn part(
        &self,
        measurement: &str,
        table: &Arc<dyn TableSource>,
        cols: &Columns,
        columns: &[OutputColumn],
        grouping: &Grouping,
        range: TimeRange,
        rest: Option<&Expr>,
    ) -> Result<Option<LogicalPlan>, PlanError> {
        use datafusion::functions_window::expr_fn::row_number;
        if field_names(&self.field, cols).is_empty() {
            return Ok(None);
        }
        let value = field_value(&self.field, cols)?;
        let order = vec![
            value.clone().sort(!self.largest, false),
            ident("time").sort(true, false),
        ];
        let mut partition: Vec<DfExpr> = grouping
            .interval
            .map(|(interval, offset)| bucket(interval, offset))
            .into_iter()
            .collect();
        partition.extend(grouping.tags.iter().map(|tag| tag_key(cols, tag)));
        let mut builder =
            scan(measurement, table, cols, range, rest)?.filter(value.clone().is_not_null())?;
        if !self.tags.is_empty() {
            // the best point of each combination of the tags' values first
            let mut by_tags = partition.clone();
            by_tags.extend(
                self.tags
                    .iter()
                    .map(|t| {
                        expr::scalar(
                            &Expr::VarRef {
                                name: t.clone(),
                                data_type: None,
                            },
                            cols,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            );
            let best = row_number()
                .partition_by(by_tags)
                .order_by(order.clone())
                .build()?;
            builder = builder
                .window(vec![best.alias("__best")])?
                .filter(ident("__best").eq(lit(1u64)))?;
        }
        let rank = row_number()
            .partition_by(partition)
            .order_by(order)
            .build()?;
        let mut projection = key_columns(measurement, ident("time"), grouping, cols);
        for (i, column) in columns.iter().enumerate() {
            let value = match i == self.column {
                true => value.clone(),
                false => expr::scalar(&column.expr, cols)?,
            };
            projection.push(value.alias(&column.name));
        }
        let plan = builder
            .window(vec![rank.alias("__rank")])?
            .filter(ident("__rank").lt_eq(lit(self.n as u64)))?
            .project(projection)?
            .build()?;
        Ok(Some(plan))
    }
}

//! A rollup's definition read from its statement ([`RollupShape::read`]): the base table, the
//! time bucket, the tags kept, the tag filter, and the aggregates, each kept as partial
//! states that merge exactly ([`State`]): sums, counts, minima, maxima, and first / last
//! values with the time they were seen at. What cannot be kept that way is refused with the
//! reason.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::error::Result;
use datafusion::functions::datetime::expr_fn::date_bin;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{col, lit, Expr, LogicalPlan, LogicalPlanBuilder, TableSource};
use quiver_model::schema::TIME_COLUMN;
use quiver_model::TimeBucket;

use crate::partials::states::{strip_alias, Derivable, State};
use crate::provider::QuiverTable;

/// What a rollup keeps (see the module docs).
#[derive(Debug)]
pub(crate) struct RollupShape {
    /// The base table.
    pub(crate) table: String,
    /// Its buckets.
    pub(crate) bucket: TimeBucket,
    /// The tags it groups by, in the order given.
    pub(crate) tags: Vec<String>,
    /// Its filter's conjuncts (over tags; columns unqualified).
    pub(crate) filter: Vec<Expr>,
    /// Its states, sorted.
    pub(crate) states: Vec<State>,
    /// The defining statement's plan (analysed), which reading the rollup as a table runs.
    pub(crate) plan: LogicalPlan,
}

/// The shape every rollup has, for error messages.
const SHAPE: &str = "a rollup is SELECT date_bin(<interval>, time) AS time, <tag columns>, <aggregates> FROM <table> [WHERE <tag predicates>] GROUP BY <the bucket and the tags>";

impl RollupShape {
    /// Reads an analysed plan of a rollup's statement; the reason if it is not one a rollup
    /// can keep exactly.
    pub(crate) fn read(plan: &LogicalPlan) -> Result<Self, String> {
        let aggregate = match plan {
            LogicalPlan::Projection(p) => match p.input.as_ref() {
                LogicalPlan::Aggregate(a) => a,
                other => return Err(refuse(other)),
            },
            LogicalPlan::Aggregate(a) => a,
            other => return Err(refuse(other)),
        };
        let (filter, source) = filter_and_scan(&aggregate.input)?;
        let table = source
            .downcast_ref::<QuiverTable>()
            .ok_or_else(|| format!("{SHAPE}: the table must be a table of the database"))?;
        let tag_set = table.tag_columns();
        let mut bucket = None;
        let mut tags = Vec::new();
        for group in aggregate.group_expr.iter() {
            let group = strip_alias(group);
            if let Some(found) = quiver_exec::bucket_expr::read_bucket(group)? {
                if bucket.replace(found).is_some() {
                    return Err(format!("{SHAPE}: group by one time bucket only"));
                }
            } else {
                match group {
                    Expr::Column(c) if tag_set.contains(&c.name) => tags.push(c.name.clone()),
                    Expr::Column(c) if c.name == TIME_COLUMN => {
                        return Err(format!(
                            "{SHAPE}: group by date_bin(<interval>, time), not by time itself"
                        ))
                    }
                    Expr::Column(c) => {
                        return Err(format!(
                            "{SHAPE}: {:?} is a field; a rollup groups by tags only",
                            c.name
                        ))
                    }
                    other => return Err(format!("{SHAPE}: cannot group by {other}")),
                }
            }
        }
        let bucket = bucket.ok_or_else(|| format!("{SHAPE}: group by a date_bin of time"))?;
        let mut states = BTreeSet::new();
        for expr in &aggregate.aggr_expr {
            states.extend(Derivable::read(strip_alias(expr))?.states());
        }
        if states.is_empty() {
            return Err(format!("{SHAPE}: name at least one aggregate"));
        }
        let filter = read_filter(filter, &tag_set)?;
        Ok(RollupShape {
            table: table.table().name().to_string(),
            bucket,
            tags,
            filter,
            states: states.into_iter().collect(),
            plan: plan.clone(),
        })
    }

    /// True if the rollup keeps `state`.
    pub(crate) fn keeps(&self, state: &State) -> bool {
        self.states.binary_search(state).is_ok()
    }

    /// The partial states of the raw rows of `source` that pass `filter`, per bucket of the
    /// rollup and group of its tags: what the rollup keeps, and what a routed query reads
    /// for the buckets the rollup does not cover.
    pub(crate) fn partial_plan(
        &self,
        source: Arc<dyn TableSource>,
        table: &str,
        filter: Option<Expr>,
    ) -> Result<LogicalPlan> {
        let mut builder = LogicalPlanBuilder::scan(table, source, None)?;
        if let Some(filter) = filter {
            builder = builder.filter(filter)?;
        }
        let mut group = vec![date_bin(
            lit(ScalarValue::new_interval_mdn(0, 0, self.bucket.width)),
            col(TIME_COLUMN),
            lit(ScalarValue::TimestampNanosecond(
                Some(self.bucket.origin),
                Some("UTC".into()),
            )),
        )
        .alias(TIME_COLUMN)];
        group.extend(
            self.tags
                .iter()
                .map(|t| Expr::Column(Column::new_unqualified(t))),
        );
        let aggregates: Vec<Expr> = self.states.iter().map(State::partial).collect();
        builder.aggregate(group, aggregates)?.build()
    }
}

/// The rollup's Filter (if any) and the provider of the table scan below it.
fn filter_and_scan(
    input: &LogicalPlan,
) -> Result<(Option<&Expr>, Arc<dyn datafusion::catalog::TableProvider>), String> {
    let (filter, scan) = match input {
        LogicalPlan::Filter(f) => (Some(&f.predicate), f.input.as_ref()),
        other => (None, other),
    };
    let LogicalPlan::TableScan(scan) = scan else {
        return Err(refuse(scan));
    };
    let provider = source_as_provider(&scan.source).map_err(|e| e.to_string())?;
    Ok((filter, provider))
}

/// The conjuncts of a rollup's filter, each over tags only; the reason otherwise.
fn read_filter(filter: Option<&Expr>, tags: &HashSet<String>) -> Result<Vec<Expr>, String> {
    let Some(filter) = filter else {
        return Ok(Vec::new());
    };
    let mut conjuncts = Vec::new();
    for conjunct in split_conjunction(filter) {
        if conjunct.is_volatile() {
            return Err(format!(
                "{conjunct}: a rollup's filter cannot use now() or other volatile functions (it would change over time)"
            ));
        }
        for column in conjunct.column_refs() {
            if column.name == TIME_COLUMN {
                return Err(format!(
                    "{conjunct}: a rollup covers all time; filter on time in the queries instead"
                ));
            }
            if !tags.contains(&column.name) {
                return Err(format!(
                    "{conjunct}: {:?} is a field; a rollup's filter may test tags only (a field predicate cannot be maintained exactly)",
                    column.name
                ));
            }
        }
        conjuncts.push(datafusion::logical_expr::expr_rewriter::unnormalize_col(
            conjunct.clone(),
        ));
    }
    Ok(conjuncts)
}

/// Why a plan node below a rollup's aggregate is refused.
fn refuse(plan: &LogicalPlan) -> String {
    let what = match plan {
        LogicalPlan::Join(_) => "joins cannot be maintained exactly",
        LogicalPlan::Sort(_) => "ORDER BY has no meaning in a rollup",
        LogicalPlan::Limit(_) => "LIMIT has no meaning in a rollup",
        LogicalPlan::Filter(_) => "HAVING is not kept (filter the queries instead)",
        LogicalPlan::Window(_) => "window functions are not kept",
        LogicalPlan::Union(_) => "a rollup reads one table",
        LogicalPlan::Distinct(_) => "DISTINCT is not kept",
        LogicalPlan::Subquery(_) | LogicalPlan::SubqueryAlias(_) => "subqueries are not kept",
        LogicalPlan::Projection(_) => "computed columns below the aggregate are not kept",
        _ => "this statement is not one",
    };
    format!("{SHAPE}: {what}")
}

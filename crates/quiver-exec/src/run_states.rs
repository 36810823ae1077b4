//! Partial aggregate states of runs of rows that share a group, for [`crate::dictionary_group`].
//!
//! Quiver's files and write buffer are sorted by series, so a batch grouped by a tag is a few
//! long runs of one group each. DataFusion's accumulators take rows one at a time, each row
//! updating its group's state at random (a quarter to a half of a `GROUP BY hostname` query
//! over a million rows). For the common aggregates the state of a run is computed here over
//! the run's contiguous values (a count, a sum, a minimum), and the accumulator merges one
//! state per run, as its final stage merges partial states: the same accumulator, the same
//! answer. A float sum is added up run by run instead of row by row, which can change its
//! last digits, as a different partitioning of the same rows does.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, UInt64Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Float64Type, Int64Type, Schema};
use datafusion::error::Result;
use datafusion::logical_expr::GroupsAccumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

/// A run of rows of one group: `start..end` in the batch, and the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The run's first row in the batch.
    pub start: usize,
    /// One past the run's last row.
    pub end: usize,
    /// The group (its index among the accumulator's groups) every row of the run is in.
    pub group: usize,
}

/// An aggregate whose state over a run is computed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAggregate {
    /// `count(x)` / `count(*)`: state `[Int64]`.
    Count,
    /// `sum` of a `Float64`: state `[Float64]`.
    SumFloat,
    /// `sum` of an `Int64` (wrapping, as DataFusion's): state `[Int64]`.
    SumInt,
    /// `avg` of a `Float64`: state `[count UInt64, sum Float64]`.
    AvgFloat,
    /// `min` of an `Int64`: state `[Int64]`.
    MinInt,
    /// `max` of an `Int64`: state `[Int64]`.
    MaxInt,
}

impl RunAggregate {
    /// The kind of `aggregate` over rows of `input`, if its state is one computed here (its
    /// name, argument type and state types must all match).
    pub fn of(aggregate: &AggregateFunctionExpr, input: &Schema) -> Option<Self> {
        let [argument] = aggregate.expressions().try_into().ok()?;
        let argument = argument.data_type(input).ok()?;
        let states: Vec<DataType> = aggregate
            .state_fields()
            .ok()?
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        use DataType::{Float64, Int64, UInt64};
        Some(
            match (aggregate.fun().name(), &argument, states.as_slice()) {
                ("count", _, [Int64]) => RunAggregate::Count,
                ("sum", Float64, [Float64]) => RunAggregate::SumFloat,
                ("sum", Int64, [Int64]) => RunAggregate::SumInt,
                ("avg", Float64, [UInt64, Float64]) => RunAggregate::AvgFloat,
                ("min", Int64, [Int64]) => RunAggregate::MinInt,
                ("max", Int64, [Int64]) => RunAggregate::MaxInt,
                _ => return None,
            },
        )
    }

    /// Merges the state of `values` over each of `runs` into `accumulator` (a run without a
    /// value counts zero and its other states are null, as its rows would leave them).
    pub fn merge_runs(
        self,
        accumulator: &mut dyn GroupsAccumulator,
        values: &ArrayRef,
        runs: &[Run],
        total_groups: usize,
    ) -> Result<()> {
        let (states, groups): (Vec<ArrayRef>, Vec<usize>) = match self {
            RunAggregate::Count => {
                // a dictionary's logical nulls are built anew at each call: once per batch
                let nulls = values.logical_nulls();
                let counts: Int64Array = runs
                    .iter()
                    .map(|r| Some(valid_rows(nulls.as_ref(), r) as i64))
                    .collect();
                let groups = runs.iter().map(|r| r.group).collect();
                (vec![Arc::new(counts)], groups)
            }
            RunAggregate::SumFloat => {
                let values = values.as_primitive::<Float64Type>();
                let (sums, groups) =
                    fold_runs(values, runs, |run| run.iter().fold(0.0, |s, v| s + v));
                (vec![Arc::new(Float64Array::from(sums))], groups)
            }
            RunAggregate::SumInt => {
                let values = values.as_primitive::<Int64Type>();
                let (sums, groups) = fold_runs(values, runs, |run| {
                    run.iter().fold(0, |s: i64, v| s.wrapping_add(*v))
                });
                (vec![Arc::new(Int64Array::from(sums))], groups)
            }
            RunAggregate::AvgFloat => {
                let values = values.as_primitive::<Float64Type>();
                let (states, groups) = fold_runs(values, runs, |run| {
                    (run.len() as u64, run.iter().fold(0.0, |s, v| s + v))
                });
                // a run without a value: both null, as DataFusion's own state of such a group
                let (counts, sums): (Vec<Option<u64>>, Vec<Option<f64>>) =
                    states.into_iter().map(|state| state.unzip()).unzip();
                let states: Vec<ArrayRef> = vec![
                    Arc::new(UInt64Array::from(counts)),
                    Arc::new(Float64Array::from(sums)),
                ];
                (states, groups)
            }
            RunAggregate::MinInt | RunAggregate::MaxInt => {
                let values = values.as_primitive::<Int64Type>();
                // two closures, not one through a function pointer: each loop vectorizes
                let (extremes, groups) = if self == RunAggregate::MinInt {
                    fold_runs(values, runs, |run| {
                        run.iter().copied().min().unwrap_or_default()
                    })
                } else {
                    fold_runs(values, runs, |run| {
                        run.iter().copied().max().unwrap_or_default()
                    })
                };
                (vec![Arc::new(Int64Array::from(extremes))], groups)
            }
        };
        accumulator.merge_batch(&states, &groups, total_groups)
    }
}

/// Rows of `run` that are not null under `nulls` (none: every row).
fn valid_rows(nulls: Option<&NullBuffer>, run: &Run) -> usize {
    let len = run.end - run.start;
    match nulls {
        None => len,
        Some(nulls) => nulls.inner().slice(run.start, len).count_set_bits(),
    }
}

/// `fold` over the valid values of each run (never an empty slice; `None` for a run without
/// one), with the run's group. Every run gets a state, null or not: an accumulator that is
/// given states without nulls takes every group it has been told of as seen (DataFusion's
/// `NullState` assumes so), which a group whose only rows are null is not.
fn fold_runs<T, S>(
    values: &arrow::array::PrimitiveArray<T>,
    runs: &[Run],
    fold: impl Fn(&[T::Native]) -> S,
) -> (Vec<Option<S>>, Vec<usize>)
where
    T: arrow::datatypes::ArrowPrimitiveType,
{
    let mut states = Vec::with_capacity(runs.len());
    let mut groups = Vec::with_capacity(runs.len());
    let raw = values.values();
    let mut valid = Vec::new();
    for run in runs {
        let state = match values.nulls() {
            None => Some(fold(&raw[run.start..run.end])),
            Some(nulls) => {
                valid.clear();
                valid.extend(
                    (run.start..run.end)
                        .filter(|&i| nulls.is_valid(i))
                        .map(|i| raw[i]),
                );
                (!valid.is_empty()).then(|| fold(&valid))
            }
        };
        states.push(state);
        groups.push(run.group);
    }
    (states, groups)
}

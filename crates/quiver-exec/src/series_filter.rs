//! Scans of sorted rows narrowed series by series, before DataFusion reads them.
//!
//! The write buffer's snapshot and a file's decoded columns are sorted by series then time,
//! and where each series begins is known (quiver-storage keeps it per snapshot and per
//! decoded file). So a query's tag comparisons (`host = 'a'`, `host IN ('a', 'b')`, see
//! [`crate::tag_filter`]) are decided once per series, on the dictionary code of its first
//! row, and its time bounds (`time >= a AND time < b`) are found in each kept series by binary
//! search: the scan gets zero-copy slices of the rows that can pass, in O(series × log rows)
//! instead of a pass over every row. For one host of a hundred over eight hours of a day,
//! the filter above the scan sees a three-hundredth of the rows.
//!
//! The query's filters still run on top of the slices (this only drops rows they reject),
//! so a tag comparison or bound it cannot judge is simply left to them. Where the kept
//! series are many and short, their rows are copied into one batch instead: thousands of
//! tiny batches cost more downstream than one copy.

use crate::time_filter::TimeStretches;
use arrow::array::{Array, AsArray, BooleanArray, BooleanBufferBuilder, Int32Array, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, TimeUnit, TimestampNanosecondType};
use datafusion::error::Result;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::Expr;
use quiver_model::schema::TIME_COLUMN;

use crate::tag_filter::{matching_codes, tag_comparison};

/// Fewest rows a kept range should average for slices to be handed on as they are; below
/// that, the kept rows are copied into one batch.
const MIN_AVERAGE_SLICE: usize = 256;

/// The end of each series a scan needs, when a query wants only the newest (or oldest) `n`
/// rows by time ([`crate::time_order_limit`]): a series' rows are in time order, so no row
/// past its `n` newest can be among the `n` newest of all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesEnd {
    /// The newest `n` rows of each series.
    Newest(usize),
    /// The oldest `n` rows of each series.
    Oldest(usize),
}

impl SeriesEnd {
    /// The part of the rows `from..to` of one series (in time order) this end keeps.
    fn keep(self, from: usize, to: usize) -> (usize, usize) {
        match self {
            SeriesEnd::Newest(n) => (to.saturating_sub(n).max(from), to),
            SeriesEnd::Oldest(n) => (from, from.saturating_add(n).min(to)),
        }
    }
}

/// Whether `filters` hold anything a series-by-series scan narrows on: a tag comparison or
/// a bound on `time`.
pub fn narrows(filters: &[Expr], times: &TimeStretches) -> bool {
    !times.is_all()
        || filters
            .iter()
            .flat_map(|f| split_conjunction(f))
            .any(|conjunct| tag_comparison(conjunct).is_some())
}

/// The rows of `batch` (sorted by series then time, each series' run beginning at a row of
/// `starts`) that `filters`' tag comparisons and `bounds` can keep, and of those only each
/// series' `end_of_series` if given, as zero-copy slices (or one copied batch, module docs). `batch` as
/// is if nothing narrows it, or if `starts` does not describe it (then the filters above do
/// all the work).
pub fn rows_in_matching_series(
    batch: &RecordBatch,
    starts: &[usize],
    (filters, stretches): (&[Expr], &TimeStretches),
    end_of_series: Option<SeriesEnd>,
) -> Result<Vec<RecordBatch>> {
    let rows = batch.num_rows();
    if !describes(starts, rows) {
        // storage's series starts are wrong for these rows: a bug, which the filters above
        // make harmless (they see every row)
        tracing::warn!(
            rows,
            runs = starts.len(),
            first = ?starts.first(),
            last = ?starts.last(),
            "series starts do not describe the rows they were kept for; scanning every row"
        );
        return Ok(vec![batch.clone()]);
    }
    let tags: Vec<_> = filters
        .iter()
        .flat_map(|f| split_conjunction(f))
        .filter_map(tag_comparison)
        .filter_map(|(column, wanted)| matching_codes(batch, column, &wanted))
        .collect();
    let times = (!stretches.is_all())
        .then(|| nanosecond_times(batch))
        .flatten();
    // a series' end is only its end among the rows the bounds keep: unless they can be
    // applied here (as one range), every row goes on
    let end_of_series = end_of_series
        .filter(|_| stretches.is_all() || (times.is_some() && stretches.ranges().len() == 1));
    if tags.is_empty() && times.is_none() && end_of_series.is_none() {
        return Ok(vec![batch.clone()]);
    }
    let mut kept: Vec<(usize, usize)> = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(rows);
        let matches = |(keys, matching): &(&Int32Array, Vec<bool>)| {
            keys.is_valid(start)
                && usize::try_from(keys.value(start)).is_ok_and(|c| matching.get(c) == Some(&true))
        };
        if !tags.iter().all(matches) {
            continue;
        }
        let slices: Vec<(usize, usize)> = match times {
            Some(times) => {
                let series = &times[start..end];
                stretches
                    .ranges()
                    .iter()
                    .map(|range| {
                        (
                            start + series.partition_point(|&t| t < range.min),
                            start + series.partition_point(|&t| t <= range.max),
                        )
                    })
                    .collect()
            }
            None => vec![(start, end)],
        };
        for (from, to) in slices {
            // (a run that splits a series keeps its own end: a superset of the series'; an
            // end is only asked for with one slice per series)
            let (from, to) = match end_of_series {
                Some(end) => end.keep(from, to),
                None => (from, to),
            };
            match kept.last_mut() {
                _ if from >= to => {}
                Some((_, last_end)) if *last_end == from => *last_end = to,
                _ => kept.push((from, to)),
            }
        }
    }
    Ok(match kept.as_slice() {
        [(0, end)] if *end == rows => vec![batch.clone()],
        [] => Vec::new(),
        _ => {
            let kept_rows: usize = kept.iter().map(|(from, to)| to - from).sum();
            if kept.len() > 1 && kept_rows / kept.len() < MIN_AVERAGE_SLICE {
                vec![copied(batch, &kept)?]
            } else {
                kept.iter()
                    .map(|&(from, to)| batch.slice(from, to - from))
                    .collect()
            }
        }
    })
}

/// Whether `starts` can be where the runs of `rows` rows begin: ascending from 0, all below
/// `rows` (none for no rows).
fn describes(starts: &[usize], rows: usize) -> bool {
    match starts.first() {
        None => rows == 0,
        Some(&first) => {
            first == 0
                && starts.windows(2).all(|pair| pair[0] < pair[1])
                && starts.last().is_some_and(|&last| last < rows)
        }
    }
}

/// The values of `batch`'s `time` column, if it has one of nanoseconds.
fn nanosecond_times(batch: &RecordBatch) -> Option<&[i64]> {
    let column = batch.column_by_name(TIME_COLUMN)?;
    match column.data_type() {
        DataType::Timestamp(TimeUnit::Nanosecond, _) if column.null_count() == 0 => Some(
            column
                .as_primitive::<TimestampNanosecondType>()
                .values()
                .as_ref(),
        ),
        _ => None,
    }
}

/// The rows of `batch` in the `kept` ranges, copied into one batch.
fn copied(batch: &RecordBatch, kept: &[(usize, usize)]) -> Result<RecordBatch> {
    let mut mask = BooleanBufferBuilder::new(batch.num_rows());
    let mut at = 0;
    for &(from, to) in kept {
        mask.append_n(from - at, false);
        mask.append_n(to - from, true);
        at = to;
    }
    mask.append_n(batch.num_rows() - at, false);
    Ok(filter_record_batch(
        batch,
        &BooleanArray::new(mask.finish(), None),
    )?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, DictionaryArray, Int64Array, StringArray, TimestampNanosecondArray,
    };
    use arrow::datatypes::{Field, Int32Type, Int64Type, Schema};
    use datafusion::common::ScalarValue;
    use datafusion::prelude::{col, lit};
    use proptest::prelude::*;

    use super::*;
    use crate::time_filter::TimeStretches;

    /// Rows sorted by host then time: `series` of (host, number of rows), times 0, 10, 20...
    /// within each; `v` numbers the rows.
    fn sorted(series: &[(&str, usize)]) -> (RecordBatch, Vec<usize>) {
        let mut keys = Vec::new();
        let mut times = Vec::new();
        let mut starts = Vec::new();
        let mut values: Vec<&str> = Vec::new();
        for (host, rows) in series {
            starts.push(keys.len());
            values.push(host);
            for i in 0..*rows {
                keys.push(values.len() as i32 - 1);
                times.push(i as i64 * 10);
            }
        }
        let n = keys.len();
        let host =
            DictionaryArray::<Int32Type>::try_new(keys.into(), Arc::new(StringArray::from(values)))
                .unwrap();
        let time = TimestampNanosecondArray::from(times).with_timezone("UTC");
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", host.data_type().clone(), true),
            Field::new(TIME_COLUMN, time.data_type().clone(), false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(host) as ArrayRef,
                Arc::new(time),
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
            ],
        )
        .unwrap();
        starts.retain(|&s| s < n);
        starts.dedup();
        (batch, starts)
    }

    fn at(ns: i64) -> Expr {
        lit(ScalarValue::TimestampNanosecond(
            Some(ns),
            Some("UTC".into()),
        ))
    }

    /// The `v` of the rows kept, and how many batches hold them.
    fn kept(batch: &RecordBatch, starts: &[usize], filters: &[Expr]) -> (Vec<i64>, usize) {
        kept_ends(batch, starts, filters, None)
    }

    /// [`kept`], of each series only `end` if given.
    fn kept_ends(
        batch: &RecordBatch,
        starts: &[usize],
        filters: &[Expr],
        end: Option<SeriesEnd>,
    ) -> (Vec<i64>, usize) {
        let parts =
            rows_in_matching_series(batch, starts, (filters, &TimeStretches::of(filters)), end)
                .unwrap();
        let rows = parts
            .iter()
            .flat_map(|b| {
                b.column_by_name("v")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        (rows, parts.len())
    }

    #[test]
    fn kept_series_are_sliced_to_their_time_range() {
        let (batch, starts) = sorted(&[("a", 3000), ("b", 3000), ("c", 3000)]);
        let filters = [
            col("host").in_list(vec![lit("a"), lit("c")], false),
            col(TIME_COLUMN)
                .gt_eq(at(100))
                .and(col(TIME_COLUMN).lt(at(20000))),
        ];
        let (rows, batches) = kept(&batch, &starts, &filters);
        let expected: Vec<i64> = (10..2000).chain(6010..8000).collect();
        assert_eq!(rows, expected);
        assert_eq!(batches, 2, "zero-copy slices, one per series");
        let (rows, _) = kept(&batch, &starts, &[col("host").eq(lit("b"))]);
        assert_eq!(rows, (3000..6000).collect::<Vec<_>>());
        let (rows, batches) = kept(&batch, &starts, &[col("host").eq(lit("z"))]);
        assert_eq!((rows.len(), batches), (0, 0));
    }

    #[test]
    fn neighbouring_kept_series_are_one_slice_and_everything_is_the_batch() {
        let (batch, starts) = sorted(&[("a", 300), ("b", 300), ("c", 300)]);
        let (rows, batches) = kept(&batch, &starts, &[col("host").not_eq(lit("z"))]);
        assert_eq!((rows.len(), batches), (900, 1), "nothing to narrow on");
        let (rows, batches) = kept(
            &batch,
            &starts,
            &[col("host").in_list(vec![lit("a"), lit("b")], false)],
        );
        assert_eq!((rows, batches), ((0..600).collect(), 1));
        let (rows, batches) = kept(&batch, &starts, &[col(TIME_COLUMN).gt_eq(at(0))]);
        assert_eq!((rows.len(), batches), (900, 1));
    }

    #[test]
    fn short_kept_ranges_are_copied_into_one_batch() {
        let series: Vec<(String, usize)> = (0..50).map(|i| (format!("h{i}"), 20)).collect();
        let series: Vec<(&str, usize)> = series.iter().map(|(h, n)| (h.as_str(), *n)).collect();
        let (batch, starts) = sorted(&series);
        let (rows, batches) = kept(&batch, &starts, &[col(TIME_COLUMN).lt(at(50))]);
        let expected: Vec<i64> = (0..50).flat_map(|s| s * 20..s * 20 + 5).collect();
        assert_eq!((rows, batches), (expected, 1));
    }

    #[test]
    fn a_series_end_is_not_taken_where_time_bounds_cannot_be_applied() {
        let (batch, starts) = sorted(&[("a", 10), ("b", 10)]);
        // bounds on `time`, but the rows lack it: the newest row of each series (20 and 10
        // rows in) could be past the bound, so every row goes on for the filter above
        let without_time = batch.project(&[0, 2]).unwrap();
        let filters = [col(TIME_COLUMN).lt(at(50))];
        let (rows, _) = kept_ends(&without_time, &starts, &filters, Some(SeriesEnd::Newest(1)));
        assert_eq!(rows.len(), 20);
        // with them, each series' newest row below the bound
        let (rows, _) = kept_ends(&batch, &starts, &filters, Some(SeriesEnd::Newest(1)));
        assert_eq!(rows, [4, 14]);
    }

    #[test]
    fn starts_that_do_not_describe_the_batch_keep_it_whole() {
        let (batch, _) = sorted(&[("a", 10), ("b", 10)]);
        let filters = [col("host").eq(lit("a"))];
        for wrong in [vec![], vec![1, 5], vec![0, 5, 5], vec![0, 20]] {
            assert_eq!(kept(&batch, &wrong, &filters).0.len(), 20, "{wrong:?}");
        }
    }

    proptest! {
        /// Whatever the series, tags and bounds, the rows kept are exactly those the filters
        /// pass by row (the slices drop no row a filter would keep, and, for what they judge,
        /// keep none it would drop).
        #[test]
        fn kept_rows_are_the_rows_that_pass(
            series in proptest::collection::vec((0..4usize, 0..40usize), 1..12),
            wanted in proptest::collection::vec(0..4usize, 0..3),
            low in proptest::option::of(-10i64..400),
            high in proptest::option::of(-10i64..400),
        ) {
            let names = ["a", "b", "c", "d"];
            let series: Vec<(&str, usize)> = series.iter().map(|&(h, n)| (names[h], n)).collect();
            let (batch, starts) = sorted(&series);
            let mut filters = Vec::new();
            if !wanted.is_empty() {
                filters.push(col("host").in_list(wanted.iter().map(|&h| lit(names[h])).collect(), false));
            }
            if let Some(low) = low {
                filters.push(col(TIME_COLUMN).gt(at(low)));
            }
            if let Some(high) = high {
                filters.push(col(TIME_COLUMN).lt_eq(at(high)));
            }
            let hosts = batch.column(0).as_dictionary::<Int32Type>();
            let host_names = hosts.values().as_string::<i32>();
            let times = batch.column(1).as_primitive::<TimestampNanosecondType>();
            let expected: Vec<i64> = (0..batch.num_rows())
                .filter(|&i| {
                    let host = host_names.value(hosts.keys().value(i) as usize);
                    let t = times.value(i);
                    (wanted.is_empty() || wanted.iter().any(|&h| names[h] == host))
                        && low.is_none_or(|low| t > low)
                        && high.is_none_or(|high| t <= high)
                })
                .map(|i| i as i64)
                .collect();
            prop_assert_eq!(&kept(&batch, &starts, &filters).0, &expected);
            // and of each series' rows that pass, only its newest or oldest few
            for end in [SeriesEnd::Newest(3), SeriesEnd::Oldest(2), SeriesEnd::Newest(0)] {
                let mut ended = Vec::new();
                for (i, &start) in starts.iter().enumerate() {
                    let stop = starts.get(i + 1).copied().unwrap_or(batch.num_rows()) as i64;
                    let run: Vec<i64> = expected
                        .iter()
                        .copied()
                        .filter(|&row| row >= start as i64 && row < stop)
                        .collect();
                    ended.extend(match end {
                        SeriesEnd::Newest(n) => run[run.len().saturating_sub(n)..].to_vec(),
                        SeriesEnd::Oldest(n) => run[..n.min(run.len())].to_vec(),
                    });
                }
                prop_assert_eq!(kept_ends(&batch, &starts, &filters, Some(end)).0, ended);
            }
        }

        /// With stretches of time joined by `OR` (as routed and reused-parts scans compute a
        /// window's ends), the rows kept are exactly those in one of them and in the bounds.
        #[test]
        fn kept_rows_are_the_rows_in_one_of_the_stretches(
            series in proptest::collection::vec((0..4usize, 0..40usize), 1..12),
            stretches in proptest::collection::vec((-10i64..400, 0i64..120), 1..5),
            low in proptest::option::of(-10i64..400),
        ) {
            let names = ["a", "b", "c", "d"];
            let series: Vec<(&str, usize)> = series.iter().map(|&(h, n)| (names[h], n)).collect();
            let (batch, starts) = sorted(&series);
            let alternatives = stretches.iter().map(|&(from, width)| {
                col(TIME_COLUMN).gt_eq(at(from)).and(col(TIME_COLUMN).lt(at(from + width)))
            });
            let mut filters: Vec<Expr> = alternatives.reduce(Expr::or).into_iter().collect();
            if let Some(low) = low {
                filters.push(col(TIME_COLUMN).gt(at(low)));
            }
            let times = batch.column(1).as_primitive::<TimestampNanosecondType>();
            let expected: Vec<i64> = (0..batch.num_rows())
                .filter(|&i| {
                    let t = times.value(i);
                    low.is_none_or(|low| t > low)
                        && stretches.iter().any(|&(from, width)| t >= from && t < from + width)
                })
                .map(|i| i as i64)
                .collect();
            prop_assert_eq!(&kept(&batch, &starts, &filters).0, &expected);
        }
    }
}

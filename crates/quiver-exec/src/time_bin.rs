//! `date_bin(<interval>, time)` as a group key, computed without DataFusion's function call
//! and mapped to groups without hashing, for [`crate::dictionary_group`].
//!
//! With the default origin (the Unix epoch) and a fixed interval (days and nanoseconds, no
//! months), `date_bin` is `t - t.rem_euclid(stride)`: one integer operation per row, which
//! the compiler vectorizes, where DataFusion's function checks each row for overflow through
//! a closure. Bins of one query are multiples of one stride over a bounded span, so a bin's
//! group is found by indexing a table by `(bin - first) / stride`, not by hashing it.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch};
use arrow::datatypes::{DataType, Schema, TimeUnit, TimestampNanosecondType};
use datafusion::error::{DataFusionError, Result};
use datafusion::functions::datetime::date_bin::DateBinFunc;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};

/// A group key `date_bin(<fixed interval>, <column>)`: the column a non-nullable nanosecond
/// timestamp of the input, the origin the default one.
#[derive(Debug, Clone)]
pub struct TimeBin {
    /// The timestamp column's index in the input.
    column: usize,
    /// The interval in nanoseconds (positive).
    stride: i64,
    /// The key's type: the column's (`Timestamp(Nanosecond, its zone)`).
    data_type: DataType,
}

impl TimeBin {
    /// `expr` as a time bin over rows of `input`, if it is one (module docs).
    pub fn of(expr: &Arc<dyn PhysicalExpr>, input: &Schema) -> Option<TimeBin> {
        let function = expr.downcast_ref::<ScalarFunctionExpr>()?;
        let [interval, time] = function.args() else {
            return None;
        };
        // DataFusion's own date_bin, not any function registered under its name
        if !function.fun().inner().is::<DateBinFunc>() {
            return None;
        }
        let stride =
            crate::bucket_expr::fixed_interval_ns(interval.downcast_ref::<Literal>()?.value())?;
        let column = time.downcast_ref::<Column>()?;
        let field = input.fields().get(column.index())?;
        let nanosecond_time = matches!(
            field.data_type(),
            DataType::Timestamp(TimeUnit::Nanosecond, _)
        );
        let same_type = expr.data_type(input).ok()? == *field.data_type();
        (nanosecond_time && same_type && !field.is_nullable() && stride > 0).then(|| TimeBin {
            column: column.index(),
            stride,
            data_type: field.data_type().clone(),
        })
    }

    /// The bin of every row of `batch`.
    pub fn bins(&self, batch: &RecordBatch) -> Result<Bins> {
        let column = batch.column(self.column);
        let times = column
            .as_primitive_opt::<TimestampNanosecondType>()
            .filter(|times| times.null_count() == 0)
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "DictionaryGroupExec: the time bin's column {} ({}) was planned as a \
                     non-null nanosecond timestamp, but a batch holds {} with {} nulls",
                    self.column,
                    batch.schema().field(self.column).name(),
                    column.data_type(),
                    column.null_count()
                ))
            })?;
        let stride = self.stride;
        let times = times.values();
        // the bin of a time within a stride of the smallest i64 may not be an i64: DataFusion's
        // date_bin answers NULL for it
        if times.iter().any(|&t| t < i64::MIN + stride) {
            let bins = times
                .iter()
                .map(|&t| t.checked_sub(t.rem_euclid(stride)))
                .collect();
            return Ok(Bins::Partial(bins));
        }
        Ok(Bins::Every(
            times.iter().map(|&t| t - t.rem_euclid(stride)).collect(),
        ))
    }

    /// `bins` (`None`: no bin) as the key's column.
    pub fn column(&self, bins: Vec<Option<i64>>) -> Result<ArrayRef> {
        let DataType::Timestamp(_, zone) = &self.data_type else {
            unreachable!("a time bin is over a timestamp column");
        };
        let array =
            PrimitiveArray::<TimestampNanosecondType>::from(bins).with_timezone_opt(zone.clone());
        Ok(Arc::new(array))
    }

    /// The interval, in nanoseconds.
    pub fn stride(&self) -> i64 {
        self.stride
    }

    /// What `EXPLAIN` shows of the key.
    pub fn describe(&self, input: &Schema) -> String {
        format!(
            "date_bin({}ns, {})",
            self.stride,
            input.field(self.column).name()
        )
    }
}

/// The bins of a batch's rows.
pub enum Bins {
    /// Every row's bin.
    Every(Vec<i64>),
    /// Each row's bin, `None` where it is not an i64 (see [`TimeBin::bins`]).
    Partial(Vec<Option<i64>>),
}

/// Most slots a [`BinGroups`] table holds; bins beyond it are hashed.
const MOST_SLOTS: usize = 1 << 20;

/// Slots a table may hold beyond [`SLOTS_PER_GROUP`] per group: sparse bins (a few groups
/// far apart) are hashed rather than given a table mostly empty.
const FREE_SLOTS: usize = 1024;

/// Slots a table may hold per group it has (beyond [`FREE_SLOTS`]).
const SLOTS_PER_GROUP: usize = 16;

/// Not a group yet.
const NO_GROUP: usize = usize::MAX;

/// The group of each bin of one stride: a table indexed by the bin's distance from the first
/// bin seen, in strides (grown either way as bins arrive, to at most [`SLOTS_PER_GROUP`]
/// slots per group beyond [`FREE_SLOTS`]), and a map for bins too far out.
#[derive(Debug, Default)]
pub struct BinGroups {
    /// The bin of `slots[0]`.
    first: i64,
    slots: Vec<usize>,
    far: HashMap<i64, usize>,
    /// The group of rows without a bin.
    no_bin: Option<usize>,
    /// Groups in `slots`, `far` and `no_bin`.
    groups: usize,
}

impl BinGroups {
    /// The group of `bin` (a multiple of `stride`, or none), made by `new_group` if it has
    /// none.
    pub fn group(
        &mut self,
        bin: Option<i64>,
        stride: i64,
        new_group: impl FnOnce() -> usize,
    ) -> usize {
        let Some(bin) = bin else {
            let groups = &mut self.groups;
            return *self.no_bin.get_or_insert_with(|| {
                *groups += 1;
                new_group()
            });
        };
        // a bin once sent far stays there (the table may have grown to reach it since); an
        // empty map is not asked (hashing a key costs more than the table lookup)
        if let Some(&group) = (!self.far.is_empty()).then(|| self.far.get(&bin)).flatten() {
            return group;
        }
        if self.slots.is_empty() {
            self.first = bin;
        }
        let Some(slot) = self.slot(bin, stride) else {
            self.groups += 1;
            let group = new_group();
            self.far.insert(bin, group);
            return group;
        };
        if self.slots[slot] == NO_GROUP {
            self.groups += 1;
            self.slots[slot] = new_group();
        }
        self.slots[slot]
    }

    /// `bin`'s slot, growing the table to hold it, or `None` if it would grow too large.
    fn slot(&mut self, bin: i64, stride: i64) -> Option<usize> {
        // (i64 arithmetic: an i128 division is a call, and this runs once per run of rows)
        let offset = bin.checked_sub(self.first)? / stride;
        let most = MOST_SLOTS.min(FREE_SLOTS + SLOTS_PER_GROUP * self.groups);
        if offset >= 0 {
            let slot = usize::try_from(offset).ok().filter(|&s| s < most)?;
            if slot >= self.slots.len() {
                self.slots.resize(slot + 1, NO_GROUP);
            }
            return Some(slot);
        }
        let before = usize::try_from(offset.unsigned_abs()).ok()?;
        if self.slots.len() + before > most {
            return None;
        }
        // room for as many again before it, so that bins arriving in falling order do not
        // move the table at every step
        let room = before.max(self.slots.len()).min(most - self.slots.len());
        let spare = room - before;
        let first = i64::try_from(spare)
            .ok()
            .and_then(|spare| spare.checked_mul(stride))
            .and_then(|span| bin.checked_sub(span));
        let (room, first) = match first {
            Some(first) => (room, first),
            None => (before, bin),
        };
        self.slots.splice(0..0, std::iter::repeat_n(NO_GROUP, room));
        self.first = first;
        Some(room - before)
    }

    /// Heap bytes held.
    pub fn size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<usize>()
            + self.far.capacity() * (std::mem::size_of::<(i64, usize)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{IntervalDayTimeType, IntervalMonthDayNanoType};
    use datafusion::common::ScalarValue;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Every bin gets one group, the same each time it comes back, wherever it lies
        /// (near, before the first, or far out).
        #[test]
        fn each_bin_has_one_group(
            bins in proptest::collection::vec(
                proptest::prop_oneof![
                    -50i64..50,
                    1000i64..1200,
                    Just(i64::MIN / 7),
                    Just(i64::MAX / 7),
                ],
                1..80,
            ),
        ) {
            let stride = 7;
            let mut groups = BinGroups::default();
            let mut expected: HashMap<i64, usize> = HashMap::new();
            for bin in bins {
                let bin = bin * stride;
                let next = expected.len();
                let group = groups.group(Some(bin), stride, || next);
                let known = *expected.entry(bin).or_insert(next);
                prop_assert_eq!(group, known);
            }
        }
    }

    #[test]
    fn a_bin_sent_far_keeps_its_group_once_the_table_could_reach_it() {
        let stride = 10;
        let mut groups = BinGroups::default();
        let mut next = 0;
        let mut group = |groups: &mut BinGroups, bin: Option<i64>| {
            groups.group(bin, stride, || {
                next += 1;
                next - 1
            })
        };
        assert_eq!(group(&mut groups, Some(0)), 0);
        // beyond what one group may span: hashed
        assert_eq!(group(&mut groups, Some(1100 * stride)), 1);
        // more groups let the table reach 1100 strides
        for bin in 1..=8 {
            assert_eq!(group(&mut groups, Some(bin * stride)), 1 + bin as usize);
        }
        assert_eq!(group(&mut groups, Some(1100 * stride)), 1, "the same group");
        // falling bins, and no bin
        assert_eq!(group(&mut groups, Some(-5 * stride)), 10);
        assert_eq!(group(&mut groups, Some(-6 * stride)), 11);
        assert_eq!(group(&mut groups, Some(-5 * stride)), 10);
        assert_eq!(group(&mut groups, None), 12);
        assert_eq!(group(&mut groups, None), 12);
        assert_eq!(group(&mut groups, Some(0)), 0);
    }

    #[test]
    fn fixed_intervals_are_nanoseconds_and_months_are_not() {
        let month_day_nano = |months, days, nanos| {
            ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNanoType::make_value(
                months, days, nanos,
            )))
        };
        assert_eq!(
            crate::bucket_expr::fixed_interval_ns(&month_day_nano(0, 0, 60_000_000_000)),
            Some(60_000_000_000)
        );
        assert_eq!(
            crate::bucket_expr::fixed_interval_ns(&month_day_nano(0, 2, 5)),
            Some(2 * 86_400_000_000_000 + 5)
        );
        assert_eq!(
            crate::bucket_expr::fixed_interval_ns(&month_day_nano(1, 0, 0)),
            None
        );
        assert_eq!(
            crate::bucket_expr::fixed_interval_ns(&month_day_nano(0, i32::MAX, 0)),
            None
        );
        let day_time = ScalarValue::IntervalDayTime(Some(IntervalDayTimeType::make_value(1, 500)));
        assert_eq!(
            crate::bucket_expr::fixed_interval_ns(&day_time),
            Some(86_400_000_000_000 + 500_000_000)
        );
    }
}

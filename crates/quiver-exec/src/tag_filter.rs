//! Tag comparisons answered on dictionary codes before an in-memory scan: the rows of the
//! write buffer or of a file's decoded columns that can pass a query's `tag = 'x'` or
//! `tag IN ('x', 'y')` filters, taken out before DataFusion scans them.
//!
//! A tag is a string dictionary, so whether a row matches is whether its key is one of the
//! few keys whose value matches: one pass over 32-bit keys, no string compared per row. When
//! the tags keep few rows, only those rows are copied out and scanned;
//! the filters still run on top of them as for any scan (this only removes rows they reject).
//! Only when they keep a twentieth of the rows or fewer: copying more costs more than it saves.
//! Series are stored contiguously, so for one host of a hundred the scan shrinks a
//! hundredfold.

use std::collections::HashSet;

use arrow::array::BooleanBufferBuilder;
use arrow::array::{Array, AsArray, BooleanArray, Int32Array, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::compute::filter_record_batch;
use arrow::datatypes::Int32Type;
use datafusion::error::Result;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use crate::column_compare::{column_name, is_string, literal};

/// Most of the rows a prefilter may keep (as a fraction) for copying them out to pay off:
/// measured over 10M buffered rows, keeping 8 % (8 hosts of 100) made a query twice as slow
/// as filtering in place, keeping 1 % made it several times faster.
const MOST_KEPT: f64 = 0.05;

/// `batch` without rows that `filters`' tag comparisons reject, when they reject most of it;
/// else `batch` as is.
pub fn keep_matching_tags(batch: &RecordBatch, filters: &[Expr]) -> Result<RecordBatch> {
    let Some(mask) = tag_mask(batch, filters) else {
        return Ok(batch.clone());
    };
    let kept = mask.true_count();
    if kept as f64 > batch.num_rows() as f64 * MOST_KEPT {
        return Ok(batch.clone());
    }
    Ok(filter_record_batch(batch, &mask)?)
}

/// The rows that pass every `tag = literal` / `tag IN (literals)` conjunct of `filters` on a
/// string dictionary column of `batch`; `None` if there is no such conjunct.
fn tag_mask(batch: &RecordBatch, filters: &[Expr]) -> Option<BooleanArray> {
    let mut mask: Option<BooleanBuffer> = None;
    for conjunct in filters.iter().flat_map(|f| split_conjunction(f)) {
        let Some((column, wanted)) = tag_comparison(conjunct) else {
            continue;
        };
        let Some(rows) = matching_rows(batch, column, &wanted) else {
            continue;
        };
        mask = Some(match mask {
            Some(before) => &before & &rows,
            None => rows,
        });
    }
    mask.map(|rows| BooleanArray::new(rows, None))
}

/// The rows of `batch` whose string dictionary column `name` holds one of `wanted`.
fn matching_rows(
    batch: &RecordBatch,
    name: &str,
    wanted: &HashSet<String>,
) -> Option<BooleanBuffer> {
    let (keys, matching) = matching_codes(batch, name, wanted)?;
    let hits = rows_with_codes(keys.values(), &matching);
    Some(match keys.nulls() {
        Some(valid) => &hits & valid.inner(),
        None => hits,
    })
}

/// The keys of `batch`'s string dictionary column `name` and, for each dictionary value,
/// whether it is one of `wanted` (a null value is not).
pub fn matching_codes<'a>(
    batch: &'a RecordBatch,
    name: &str,
    wanted: &HashSet<String>,
) -> Option<(&'a Int32Array, Vec<bool>)> {
    let dictionary = batch
        .column_by_name(name)?
        .as_dictionary_opt::<Int32Type>()?;
    let values = dictionary.values().as_string_opt::<i32>()?;
    let matching: Vec<bool> = (0..values.len())
        .map(|i| values.is_valid(i) && wanted.contains(values.value(i)))
        .collect();
    Some((dictionary.keys(), matching))
}

/// Whether each row's code is one of the `matching` ones (a code out of range is not).
/// Series are stored contiguously, so codes come in long runs: a run is decided once and its
/// bits set together, rather than one lookup per row (a million rows took a millisecond,
/// which every query filtering one host of a table paid while planning). Rows in no
/// particular order (runs shorter than four rows at the start) are looked up one
/// by one.
fn rows_with_codes(codes: &[i32], matching: &[bool]) -> BooleanBuffer {
    let matches = |code: i32| usize::try_from(code).is_ok_and(|c| matching.get(c) == Some(&true));
    let sample = &codes[..codes.len().min(1024)];
    let sample_runs = 1 + sample.windows(2).filter(|w| w[0] != w[1]).count();
    if sample_runs * 4 > sample.len() {
        return BooleanBuffer::collect_bool(codes.len(), |row| matches(codes[row]));
    }
    let mut rows = BooleanBufferBuilder::new(codes.len());
    let mut start = 0;
    while start < codes.len() {
        let code = codes[start];
        let len = codes[start..]
            .iter()
            .position(|&c| c != code)
            .unwrap_or(codes.len() - start);
        rows.append_n(len, matches(code));
        start += len;
    }
    rows.finish()
}

/// `column = 'x'`, `'x' = column`, `column IN ('x', ...)` (not negated), or an `OR` of those
/// on one column (what DataFusion makes of a short `IN` list): the column and the strings it
/// must hold.
pub fn tag_comparison(expr: &Expr) -> Option<(&str, HashSet<String>)> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let (column, mut strings) = tag_comparison(left)?;
            let (other, more) = tag_comparison(right)?;
            if column != other {
                return None;
            }
            strings.extend(more);
            Some((column, strings))
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => {
            let (column, literal) = match (tag_column(left), tag_column(right)) {
                (Some(column), None) => (column, right),
                (None, Some(column)) => (column, left),
                _ => return None,
            };
            Some((column, HashSet::from([string_literal(literal)?])))
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let strings = list
                .iter()
                .map(string_literal)
                .collect::<Option<HashSet<String>>>()?;
            Some((tag_column(expr)?, strings))
        }
        _ => None,
    }
}

/// The column an expression reads, as is or cast to a string type.
fn tag_column(expr: &Expr) -> Option<&str> {
    column_name(expr, is_string)
}

/// The string a literal (possibly a dictionary, or cast to a string type) holds; `None` for
/// anything else, including NULL (which matches no row, but is left to the filter itself).
fn string_literal(expr: &Expr) -> Option<String> {
    let value = literal(expr, is_string)?.try_as_str()??;
    Some(value.to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::{cast, col, lit, try_cast};

    use super::*;

    fn batch(hosts: Vec<Option<&str>>) -> RecordBatch {
        let n = hosts.len();
        // a dictionary that repeats a value under two keys, as concatenated chunks do
        let keys: Vec<Option<i32>> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| match h {
                None => None,
                Some("a") => Some(if i % 2 == 0 { 0 } else { 2 }),
                Some("b") => Some(1),
                Some(_) => Some(3),
            })
            .collect();
        let values = StringArray::from(vec![Some("a"), Some("b"), Some("a"), None]);
        let host = DictionaryArray::<Int32Type>::try_new(keys.into(), Arc::new(values)).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", host.data_type().clone(), true),
            Field::new("v", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(host) as ArrayRef,
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
            ],
        )
        .unwrap()
    }

    fn kept(batch: &RecordBatch, filter: Expr) -> Vec<i64> {
        keep_matching_tags(batch, &[filter])
            .unwrap()
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn rows_whose_tag_matches_are_kept_whatever_key_holds_the_value() {
        let mut hosts = vec![Some("c"); 100];
        hosts[3] = Some("a");
        hosts[4] = Some("a");
        hosts[7] = Some("b");
        hosts[9] = None;
        let batch = batch(hosts);
        assert_eq!(kept(&batch, col("host").eq(lit("a"))), vec![3, 4]);
        assert_eq!(kept(&batch, lit("b").eq(col("host"))), vec![7]);
        assert_eq!(
            kept(&batch, col("host").in_list(vec![lit("a"), lit("b")], false)),
            vec![3, 4, 7]
        );
        assert_eq!(
            kept(&batch, col("host").eq(lit("a")).and(col("v").gt(lit(1)))),
            vec![3, 4],
            "other conjuncts are left to the filter"
        );
        assert!(kept(&batch, col("host").eq(lit("z"))).is_empty());
        assert_eq!(
            kept(
                &batch,
                col("host").eq(lit("a")).or(lit("b").eq(col("host")))
            ),
            vec![3, 4, 7],
            "an OR of one tag's comparisons (a short IN list, simplified)"
        );
    }

    proptest::proptest! {
        #[test]
        fn runs_of_codes_match_as_each_row_does(
            codes in proptest::collection::vec(
                // runs of a few codes, some out of the dictionary's range; short runs take
                // the row-by-row path
                (-1i32..6, proptest::prop_oneof![1usize..3, 1usize..40]),
                0..60,
            ),
            matching in proptest::collection::vec(proptest::bool::ANY, 0..5),
        ) {
            let codes: Vec<i32> = codes
                .into_iter()
                .flat_map(|(code, len)| std::iter::repeat_n(code, len))
                .collect();
            let rows = rows_with_codes(&codes, &matching);
            let expected: Vec<bool> = codes
                .iter()
                .map(|&c| c >= 0 && matching.get(c as usize).copied().unwrap_or(false))
                .collect();
            proptest::prop_assert_eq!(rows.iter().collect::<Vec<bool>>(), expected);
        }
    }

    #[test]
    fn anything_else_or_a_large_share_keeps_the_batch() {
        let batch = batch(vec![Some("a"), Some("a"), Some("b"), Some("c")]);
        let all = vec![0, 1, 2, 3];
        // half the rows match: not worth copying
        assert_eq!(kept(&batch, col("host").eq(lit("a"))), all);
        assert_eq!(kept(&batch, col("host").not_eq(lit("a"))), all);
        assert_eq!(kept(&batch, col("host").in_list(vec![lit("a")], true)), all);
        assert_eq!(kept(&batch, col("v").eq(lit(1))), all);
        assert_eq!(
            kept(&batch, col("host").eq(lit("a")).or(col("v").eq(lit(1)))),
            all,
            "an OR reaching another column keeps every row"
        );
        assert_eq!(kept(&batch, col("missing").eq(lit("a"))), all);
    }

    #[test]
    fn a_cast_through_another_type_is_not_a_tag_comparison() {
        // '05' and '5' differ as tags but not once cast through a number: the prefilter must
        // not judge such a comparison on the tag's own values
        let mut hosts = vec![Some("c"); 100];
        hosts[3] = Some("a");
        let batch = batch(hosts);
        let all: Vec<i64> = (0..100).collect();
        let through_number = |e: Expr| cast(try_cast(e, DataType::Int64), DataType::Utf8);
        assert_eq!(kept(&batch, through_number(col("host")).eq(lit("a"))), all);
        assert_eq!(
            kept(&batch, try_cast(col("host"), DataType::Utf8).eq(lit("a"))),
            vec![3],
            "a TRY_CAST to a string keeps the tag's values"
        );
    }
}

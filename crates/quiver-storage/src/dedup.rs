//! Series ordering and "same series + same time: later write wins per field".
//!
//! Rows are ordered by their series key (every tag column, nulls meaning "tag absent") and then
//! time. Rows that share series and time are merged into one: tags and time from the group,
//! and for each field the value of the latest row (in write order) that set it. A field that
//! none of them set stays null.

use std::hash::BuildHasher;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, RecordBatch, StringArray, UInt32Array,
};
use arrow::compute::take;
use arrow::datatypes::{Int32Type, Schema, TimestampNanosecondType};
use arrow::row::{RowConverter, Rows, SortField};
use quiver_model::schema::ColumnType;

use crate::error::StorageError;

/// Sorts `batch` by series then time and merges duplicate (series, time) rows.
///
/// Input rows must be in write order (earlier writes first): that order breaks ties.
///
/// Rows are ordered by a rank per series (its tags' values compared as the row format
/// compares them) and time, as integers: no per-row key bytes are built or compared, which
/// is what made persisting slow. Batches whose tags or time are not of the data model's
/// types are sorted by their row-format keys instead (the same order).
pub fn sort_and_deduplicate(batch: &RecordBatch) -> Result<RecordBatch, StorageError> {
    Ok(sort_and_deduplicate_with_starts(batch)?.0)
}

/// [`sort_and_deduplicate`], with where each series begins among the rows it returns
/// ([`crate::series`]; exact: one run per series) when its sort ranked the series (every tag
/// a string dictionary), else `None`.
pub(crate) fn sort_and_deduplicate_with_starts(
    batch: &RecordBatch,
) -> Result<(RecordBatch, Option<Vec<usize>>), StorageError> {
    if batch.num_rows() == 0 {
        return Ok((batch.clone(), Some(Vec::new())));
    }
    let (key_columns, field_columns) = series_key_and_fields(&batch.schema())?;
    let (time_column, tag_columns) = key_columns.split_last().expect("time is a key column");
    let times = batch
        .column(*time_column)
        .as_primitive_opt::<TimestampNanosecondType>()
        .filter(|t| t.null_count() == 0);
    match (series_ranks(batch, tag_columns), times) {
        (Some(series), Some(times)) => {
            let mut keyed: Vec<(u32, i64, u32)> = series
                .iter()
                .zip(times.values())
                .zip(0u32..)
                .map(|((&s, &t), row)| (s, t, row))
                .collect();
            // The row index as last key: rows with equal keys keep write order. A stable
            // sort finds the runs already in order (a merge's files, the buffer's sorted
            // runs) and merges them instead of sorting them again.
            keyed.sort();
            let order: Vec<u32> = keyed.iter().map(|k| k.2).collect();
            let groups: Vec<usize> = (0..keyed.len())
                .filter(|&i| i == 0 || keyed[i - 1].0 != keyed[i].0 || keyed[i - 1].1 != keyed[i].1)
                .collect();
            // output row j is group j: a series begins where the group's series rank changes
            let starts = (0..groups.len())
                .filter(|&j| j == 0 || keyed[groups[j - 1]].0 != keyed[groups[j]].0)
                .collect();
            let merged = merge_groups(batch, &order, groups, &field_columns)?;
            Ok((merged, Some(starts)))
        }
        _ => Ok((
            sort_and_deduplicate_by_rows(batch, &key_columns, &field_columns)?,
            None,
        )),
    }
}

/// [`sort_and_deduplicate`] by comparing row-format keys (any column types).
fn sort_and_deduplicate_by_rows(
    batch: &RecordBatch,
    key_columns: &[usize],
    field_columns: &[usize],
) -> Result<RecordBatch, StorageError> {
    let keys = row_keys(batch, key_columns)?;
    let mut order: Vec<u32> = (0..batch.num_rows() as u32).collect();
    // Stable: rows with equal keys keep write order.
    order.sort_by(|&a, &b| keys.row(a as usize).cmp(&keys.row(b as usize)));
    let groups = group_starts(&keys, &order);
    merge_groups(batch, &order, groups, field_columns)
}

/// Each row's series as a rank: rows of one series share it, and ranks order series as their
/// row-format keys do (tag by tag in schema order, by value, nulls first). `None` unless every
/// tag column is a string dictionary.
fn series_ranks(batch: &RecordBatch, tag_columns: &[usize]) -> Option<Vec<u32>> {
    let rows = batch.num_rows();
    // Per tag column: its keys and each dictionary value's rank (0 is "no value").
    let mut tags = Vec::with_capacity(tag_columns.len());
    for &c in tag_columns {
        let dictionary = batch.column(c).as_dictionary_opt::<Int32Type>()?;
        let values = dictionary.values().as_string_opt::<i32>()?;
        tags.push((dictionary.keys(), value_ranks(values)));
    }
    let width = tags.len();
    let hasher = hashbrown::DefaultHashBuilder::default();
    let mut series: hashbrown::HashTable<u32> = hashbrown::HashTable::new();
    let mut tuples: Vec<u32> = Vec::new(); // the distinct series' rank tuples, `width` apart
    let mut series_of_row = Vec::with_capacity(rows);
    let mut tuple = vec![0u32; width];
    for row in 0..rows {
        for (slot, (keys, ranks)) in tuple.iter_mut().zip(&tags) {
            *slot = if keys.is_valid(row) {
                ranks.get(keys.value(row) as usize).copied().unwrap_or(0)
            } else {
                0
            };
        }
        let hash = hasher.hash_one(&tuple);
        let stored = |&id: &u32| &tuples[id as usize * width..(id as usize + 1) * width];
        let id = match series.find(hash, |id| stored(id) == tuple.as_slice()) {
            Some(&id) => id,
            None => {
                let id = (tuples.len() / width.max(1)) as u32;
                tuples.extend_from_slice(&tuple);
                series.insert_unique(hash, id, |&id| {
                    hasher.hash_one(&tuples[id as usize * width..(id as usize + 1) * width])
                });
                id
            }
        };
        series_of_row.push(id);
    }
    // Without tags every row is one series.
    let distinct = tuples.len().checked_div(width).unwrap_or(1);
    let mut by_key: Vec<u32> = (0..distinct as u32).collect();
    by_key.sort_unstable_by(|&a, &b| {
        tuples[a as usize * width..(a as usize + 1) * width]
            .cmp(&tuples[b as usize * width..(b as usize + 1) * width])
    });
    let mut rank_of = vec![0u32; distinct];
    for (rank, &id) in by_key.iter().enumerate() {
        rank_of[id as usize] = rank as u32;
    }
    Some(
        series_of_row
            .into_iter()
            .map(|id| rank_of[id as usize])
            .collect(),
    )
}

/// For each value of a dictionary, 1 + its rank among the distinct values (equal strings
/// share a rank; a null value is 0, like a null key).
fn value_ranks(values: &StringArray) -> Vec<u32> {
    let mut by_value: Vec<u32> = (0..values.len() as u32)
        .filter(|&i| values.is_valid(i as usize))
        .collect();
    by_value.sort_unstable_by(|&a, &b| values.value(a as usize).cmp(values.value(b as usize)));
    let mut ranks = vec![0u32; values.len()];
    let mut rank = 0;
    for (position, &i) in by_value.iter().enumerate() {
        if position == 0
            || values.value(by_value[position - 1] as usize) != values.value(i as usize)
        {
            rank += 1;
        }
        ranks[i as usize] = rank;
    }
    ranks
}

/// Merges duplicate (series, time) rows of a batch that is already sorted by the columns
/// `key_columns` (every tag, then time) and, among equal keys, by write order. For each
/// column in `field_columns` the latest non-null value wins; every other column takes the
/// group's first row.
pub fn deduplicate_sorted(
    batch: &RecordBatch,
    key_columns: &[usize],
    field_columns: &[usize],
) -> Result<RecordBatch, StorageError> {
    if batch.num_rows() == 0 {
        return Ok(batch.clone());
    }
    let keys = row_keys(batch, key_columns)?;
    let order: Vec<u32> = (0..batch.num_rows() as u32).collect();
    let groups = group_starts(&keys, &order);
    merge_groups(batch, &order, groups, field_columns)
}

/// [`deduplicate_sorted`] for one batch of a sorted stream: merges every key run except the
/// last, which the next batch may continue. Returns the merged rows (`None` if the batch is
/// one run) and the index where the last run starts.
pub fn deduplicate_complete_runs(
    batch: &RecordBatch,
    key_columns: &[usize],
    field_columns: &[usize],
) -> Result<(Option<RecordBatch>, usize), StorageError> {
    let rows = batch.num_rows();
    if rows == 0 {
        return Ok((None, 0));
    }
    let keys = row_keys(batch, key_columns)?;
    let last = keys.row(rows - 1);
    let mut start = rows - 1;
    while start > 0 && keys.row(start - 1) == last {
        start -= 1;
    }
    if start == 0 {
        return Ok((None, 0));
    }
    let complete: Vec<u32> = (0..start as u32).collect();
    let groups = group_starts(&keys, &complete);
    let merged = merge_groups(batch, &complete, groups, field_columns)?;
    Ok((Some(merged), start))
}

/// `batch` with every string dictionary column whose values repeat re-encoded over its
/// distinct values. Concatenating chunks keeps each chunk's dictionary (arrow merges them only
/// when their values outnumber the rows), so a buffer merged from a thousand writes of a
/// hundred hosts holds a hundred thousand dictionary values: every comparison with a tag and
/// every grouping by one then works through all of them, for every batch it reads.
pub fn compact_dictionaries(batch: RecordBatch) -> Result<RecordBatch, StorageError> {
    let columns = batch
        .columns()
        .iter()
        .map(compact_dictionary)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// One column as [`compact_dictionaries`] leaves it.
fn compact_dictionary(column: &ArrayRef) -> Result<ArrayRef, StorageError> {
    let Some(dictionary) = column.as_dictionary_opt::<Int32Type>() else {
        return Ok(column.clone());
    };
    let Some(values) = dictionary.values().as_string_opt::<i32>() else {
        return Ok(column.clone());
    };
    let mut positions: hashbrown::HashMap<&str, i32> = hashbrown::HashMap::new();
    let mut distinct = arrow::array::StringBuilder::new();
    // each old key's new key (`None` for a null value)
    let remap: Vec<Option<i32>> = values
        .iter()
        .map(|value| {
            value.map(|value| {
                let next = positions.len() as i32;
                *positions.entry(value).or_insert_with(|| {
                    distinct.append_value(value);
                    next
                })
            })
        })
        .collect();
    if positions.len() == values.len() {
        return Ok(column.clone());
    }
    let keys: arrow::array::Int32Array = dictionary
        .keys()
        .iter()
        .map(|key| key.and_then(|key| remap.get(key as usize).copied().flatten()))
        .collect();
    let compacted = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(distinct.finish()))?;
    Ok(Arc::new(compacted))
}

/// Indices of a table schema's series key columns (every tag in schema order, then `time`)
/// and of its field columns; other columns are in neither list. This is the order rows are
/// sorted in, in the buffer and in Parquet files.
pub fn series_key_and_fields(schema: &Schema) -> Result<(Vec<usize>, Vec<usize>), StorageError> {
    let mut keys = Vec::new();
    let mut fields = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        match ColumnType::from_arrow(field.name(), field.data_type()) {
            Some(ColumnType::Tag) => keys.push(i),
            Some(ColumnType::Field(_)) => fields.push(i),
            _ => {}
        }
    }
    // Time is the last key column: series first, then time.
    keys.push(schema.index_of(quiver_model::schema::TIME_COLUMN)?);
    Ok((keys, fields))
}

fn row_keys(batch: &RecordBatch, key_columns: &[usize]) -> Result<Rows, StorageError> {
    let columns: Vec<ArrayRef> = key_columns
        .iter()
        .map(|&i| batch.column(i).clone())
        .collect();
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )?;
    Ok(converter.convert_columns(&columns)?)
}

/// The positions in `order` where a run of equal keys starts.
fn group_starts(keys: &Rows, order: &[u32]) -> Vec<usize> {
    (0..order.len())
        .filter(|&p| p == 0 || keys.row(order[p - 1] as usize) != keys.row(order[p] as usize))
        .collect()
}

/// Takes the rows `order` lists (all of the batch or a prefix of it), merging each group
/// (`order[group_starts[g]..group_starts[g + 1]]`, rows of one series and time).
fn merge_groups(
    batch: &RecordBatch,
    order: &[u32],
    group_starts: Vec<usize>,
    field_columns: &[usize],
) -> Result<RecordBatch, StorageError> {
    let rows = order.len();
    let schema = batch.schema();
    let whole_batch_in_order =
        rows == batch.num_rows() && order.iter().enumerate().all(|(i, &row)| i as u32 == row);
    if group_starts.len() == rows {
        if whole_batch_in_order {
            return Ok(batch.clone());
        }
        let sorted = UInt32Array::from(order.to_vec());
        let columns = batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &sorted, None))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(RecordBatch::try_new(schema, columns)?);
    }

    let first_of_group: UInt32Array = group_starts.iter().map(|&s| order[s]).collect();
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, column) in batch.columns().iter().enumerate() {
        let indices = if field_columns.contains(&i) {
            Arc::new(latest_non_null_per_group(column, order, &group_starts))
        } else {
            Arc::new(first_of_group.clone())
        };
        columns.push(take(column.as_ref(), indices.as_ref(), None)?);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// For each group of `order[start..next_start]`, the last row (in write order) whose value in
/// `column` is not null, or the group's last row if all are null.
fn latest_non_null_per_group(
    column: &ArrayRef,
    order: &[u32],
    group_starts: &[usize],
) -> UInt32Array {
    let mut picks = Vec::with_capacity(group_starts.len());
    for (g, &start) in group_starts.iter().enumerate() {
        let end = group_starts.get(g + 1).copied().unwrap_or(order.len());
        let group = &order[start..end];
        let pick = group
            .iter()
            .rev()
            .find(|&&row| column.is_valid(row as usize))
            .unwrap_or(&group[group.len() - 1]);
        picks.push(*pick);
    }
    UInt32Array::from(picks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        Array, AsArray, Float64Array, StringDictionaryBuilder, TimestampNanosecondArray,
    };
    use arrow::datatypes::{Float64Type, Int32Type, Schema};

    fn batch(
        hosts: &[Option<&str>],
        times: &[i64],
        a: &[Option<f64>],
        b: &[Option<f64>],
    ) -> RecordBatch {
        let mut host = StringDictionaryBuilder::<Int32Type>::new();
        for h in hosts {
            match h {
                Some(h) => host.append_value(h),
                None => host.append_null(),
            }
        }
        let schema = Arc::new(Schema::new(vec![
            ColumnType::Field(quiver_model::schema::FieldType::Float).arrow_field("a"),
            ColumnType::Field(quiver_model::schema::FieldType::Float).arrow_field("b"),
            ColumnType::Tag.arrow_field("host"),
            ColumnType::Time.arrow_field("time"),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Float64Array::from(a.to_vec())),
                Arc::new(Float64Array::from(b.to_vec())),
                Arc::new(host.finish()),
                Arc::new(TimestampNanosecondArray::from(times.to_vec()).with_timezone("UTC")),
            ],
        )
        .unwrap()
    }

    #[test]
    fn concatenated_dictionaries_are_compacted_to_their_distinct_values() {
        let chunk = |values: &[Option<&str>]| -> ArrayRef {
            Arc::new(
                values
                    .iter()
                    .copied()
                    .collect::<DictionaryArray<Int32Type>>(),
            )
        };
        let a = chunk(&[Some("h1"), Some("h2"), None]);
        let b = chunk(&[Some("h2"), Some("h1"), Some("h3")]);
        let joined = arrow::compute::concat(&[a.as_ref(), b.as_ref()]).unwrap();
        let before = joined.as_dictionary::<Int32Type>().values().len();
        assert_eq!(before, 5, "concat keeps both dictionaries");
        let schema = Arc::new(Schema::new(vec![arrow::datatypes::Field::new(
            "host",
            joined.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![joined.clone()]).unwrap();
        let compacted = compact_dictionaries(batch).unwrap();
        let column = compacted.column(0);
        assert_eq!(column.as_dictionary::<Int32Type>().values().len(), 3);
        let as_text = |array: &ArrayRef| {
            arrow::compute::cast(array, &arrow::datatypes::DataType::Utf8)
                .unwrap()
                .as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect::<Vec<_>>()
        };
        assert_eq!(as_text(column), as_text(&joined));
    }

    #[test]
    fn later_write_wins_per_field() {
        let input = batch(
            &[Some("x"), Some("y"), Some("x"), Some("x")],
            &[1, 1, 1, 2],
            &[Some(1.0), Some(10.0), Some(2.0), None],
            &[Some(5.0), None, None, Some(7.0)],
        );
        let out = sort_and_deduplicate(&input).unwrap();
        assert_eq!(out.num_rows(), 3);
        let a = out.column(0).as_primitive::<Float64Type>();
        let b = out.column(1).as_primitive::<Float64Type>();
        // x@1: a from the later write (2.0), b kept from the earlier one (5.0).
        assert_eq!((a.value(0), b.value(0)), (2.0, 5.0));
        // x@2: a never set stays null.
        assert!(a.is_null(1));
        assert_eq!(b.value(1), 7.0);
        // y@1
        assert_eq!(a.value(2), 10.0);
        assert!(b.is_null(2));
    }

    #[test]
    fn absent_tag_is_its_own_series() {
        let input = batch(
            &[None, Some("x")],
            &[1, 1],
            &[Some(1.0), Some(2.0)],
            &[None, None],
        );
        assert_eq!(sort_and_deduplicate(&input).unwrap().num_rows(), 2);
    }

    #[test]
    fn no_duplicates_only_sorts() {
        let input = batch(
            &[Some("b"), Some("a")],
            &[2, 1],
            &[Some(1.0), Some(2.0)],
            &[None, None],
        );
        let out = sort_and_deduplicate(&input).unwrap();
        let a = out.column(0).as_primitive::<Float64Type>();
        assert_eq!(a.values(), &[2.0, 1.0]);
    }

    #[test]
    fn a_stream_split_anywhere_merges_like_the_whole_batch() {
        // sorted by host, time, then write order
        let input = batch(
            &[
                Some("a"),
                Some("b"),
                Some("b"),
                Some("b"),
                Some("c"),
                Some("d"),
                Some("d"),
            ],
            &[1, 1, 1, 2, 1, 1, 1],
            &[
                Some(1.0),
                Some(2.0),
                None,
                Some(3.0),
                Some(4.0),
                None,
                Some(5.0),
            ],
            &[None, Some(6.0), Some(7.0), None, None, Some(8.0), None],
        );
        let (keys, fields) = series_key_and_fields(&input.schema()).unwrap();
        let whole = deduplicate_sorted(&input, &keys, &fields).unwrap();
        assert_eq!(whole.num_rows(), 5);
        for split in 1..input.num_rows() {
            let mut merged = Vec::new();
            let mut carry: Option<RecordBatch> = None;
            for part in [
                input.slice(0, split),
                input.slice(split, input.num_rows() - split),
            ] {
                let part = match carry.take() {
                    Some(c) => {
                        arrow::compute::concat_batches(&input.schema(), [&c, &part]).unwrap()
                    }
                    None => part,
                };
                let (complete, start) = deduplicate_complete_runs(&part, &keys, &fields).unwrap();
                merged.extend(complete);
                carry = Some(part.slice(start, part.num_rows() - start));
            }
            merged.push(deduplicate_sorted(&carry.unwrap(), &keys, &fields).unwrap());
            let streamed = arrow::compute::concat_batches(&input.schema(), &merged).unwrap();
            assert_eq!(streamed, whole, "split at {split}");
        }
    }

    /// A row of [`messy_batch`]: `dc` and `host` dictionary keys (5 is null), time, `v`.
    type MessyRow = (u8, u8, i64, Option<i32>);

    /// A batch with two tag columns whose dictionaries repeat values and hold a null, null
    /// keys, times with collisions and a sparse field.
    fn messy_batch(rows: &[MessyRow]) -> RecordBatch {
        use arrow::array::{DictionaryArray, Int32Array, Int64Array};
        let values = Arc::new(StringArray::from(vec![
            Some("b"),
            Some("a"),
            None,
            Some("b"),
            Some("c"),
        ]));
        let tag = |pick: &dyn Fn(&MessyRow) -> u8| -> ArrayRef {
            let keys: Int32Array = rows
                .iter()
                .map(|r| match pick(r) % 6 {
                    5 => None,
                    k => Some(i32::from(k)),
                })
                .collect();
            Arc::new(DictionaryArray::<Int32Type>::try_new(keys, values.clone()).unwrap())
        };
        let schema = Arc::new(Schema::new(vec![
            ColumnType::Tag.arrow_field("dc"),
            ColumnType::Tag.arrow_field("host"),
            ColumnType::Time.arrow_field("time"),
            ColumnType::Field(quiver_model::schema::FieldType::Integer).arrow_field("v"),
        ]));
        let time: Vec<i64> = rows.iter().map(|r| r.2).collect();
        let v: Int64Array = rows.iter().map(|r| r.3.map(i64::from)).collect();
        RecordBatch::try_new(
            schema,
            vec![
                tag(&|r| r.0),
                tag(&|r| r.1),
                Arc::new(TimestampNanosecondArray::from(time).with_timezone("UTC")),
                Arc::new(v),
            ],
        )
        .unwrap()
    }

    proptest::proptest! {
        #[test]
        fn series_ranks_sort_exactly_as_row_keys_do(
            rows in proptest::collection::vec(
                (0u8..6, 0u8..6, -3i64..4, proptest::option::of(any_i32())),
                1..200,
            ),
        ) {
            let batch = messy_batch(&rows);
            let (keys, fields) = series_key_and_fields(&batch.schema()).unwrap();
            let (fast, starts) = sort_and_deduplicate_with_starts(&batch).unwrap();
            let reference = sort_and_deduplicate_by_rows(&batch, &keys, &fields).unwrap();
            proptest::prop_assert_eq!(&fast, &reference);
            // where each series begins, as the sort knew it: exactly where the tags' values
            // change between neighbouring rows
            let tags: Vec<&ArrayRef> = keys[..keys.len() - 1]
                .iter()
                .map(|&c| fast.column(c))
                .collect();
            let changes = crate::series::run_changes(&tags, fast.num_rows(), crate::series::Boundaries::ByValue)
                .unwrap();
            let expected: Vec<usize> = std::iter::once(0)
                .chain((1..fast.num_rows()).filter(|&i| changes[i - 1]))
                .collect();
            proptest::prop_assert_eq!(starts, Some(expected));
        }
    }

    fn any_i32() -> impl proptest::strategy::Strategy<Value = i32> {
        proptest::prelude::any::<i32>()
    }
}

//! Rows of a small table (tag `host`, `time`, field `v`) for the storage layer's tests.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Float64Array, RecordBatch, StringArray,
    TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, Int32Type};
use quiver_model::schema::DecodedTable;

use crate::table_rows::time_column;

/// A row: host tag, time, field `v`.
pub(crate) type Row<'a> = (Option<&'a str>, i64, Option<f64>);
/// A row as read back.
pub(crate) type OwnedRow = (Option<String>, i64, Option<f64>);

/// A batch of `rows`, in the data model's types.
pub(crate) fn batch(rows: &[Row]) -> RecordBatch {
    let host: DictionaryArray<Int32Type> = rows.iter().map(|r| r.0).collect();
    let time = TimestampNanosecondArray::from(rows.iter().map(|r| r.1).collect::<Vec<_>>())
        .with_timezone("UTC");
    let v = Float64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
    let columns: Vec<(String, ArrayRef)> = vec![
        ("host".into(), Arc::new(host)),
        ("time".into(), Arc::new(time)),
        ("v".into(), Arc::new(v)),
    ];
    DecodedTable::from_columns("t".into(), columns)
        .unwrap()
        .batch
}

/// The rows of a batch of [`batch`]'s schema.
pub(crate) fn rows(batch: &RecordBatch) -> Vec<OwnedRow> {
    let host = arrow::compute::cast(batch.column(0), &DataType::Utf8).unwrap();
    let host = host.as_any().downcast_ref::<StringArray>().unwrap();
    let time = time_column(batch).unwrap();
    let v = batch
        .column(2)
        .as_primitive::<arrow::datatypes::Float64Type>();
    (0..batch.num_rows())
        .map(|i| {
            (
                host.is_valid(i).then(|| host.value(i).to_string()),
                time.value(i),
                v.is_valid(i).then(|| v.value(i)),
            )
        })
        .collect()
}

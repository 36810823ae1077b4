//! Arrow record batches sent by clients (Flight SQL bulk ingest, Arrow IPC upload), checked
//! against the data model and converted to it where that loses nothing.
//!
//! - `time` is required, a timestamp of any unit and time zone (an instant; naive timestamps
//!   are taken as UTC), without nulls; it becomes `Timestamp(Nanosecond, "UTC")` (a value
//!   outside the nanosecond range is an error, never a wrap).
//! - Dictionary-encoded string columns are tags (`Dictionary(Int32, Utf8)`).
//! - Every other column is a field of its own type: `Float64`, `Int64`, `UInt64`, `Utf8`,
//!   `Boolean`, or a narrower type of the same kind widened to it (`Float32`, `Int8..Int32`,
//!   `UInt8..UInt32`, `LargeUtf8`, `Utf8View`).
//! - Anything else is an error naming the column and its type.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, TimestampNanosecondArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::error::ArrowError;

use quiver_model::schema::DecodedTable;
use quiver_model::schema::{tag_data_type, time_data_type, ColumnType, TIME_COLUMN};

/// Why a batch does not fit the data model; names the column when one is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ArrowIngestError {
    /// The offending column, if one is.
    pub column: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl ArrowIngestError {
    /// An error of `column`, named in the message too.
    pub(crate) fn column(column: &str, message: impl Into<String>) -> Self {
        ArrowIngestError {
            column: Some(column.to_string()),
            message: format!("column {column:?}: {}", message.into()),
        }
    }
}

/// The data-model type a column of `data_type` becomes, or `None` if it has none.
fn target_type(name: &str, data_type: &DataType) -> Option<DataType> {
    if name == TIME_COLUMN {
        return matches!(data_type, DataType::Timestamp(_, _)).then(time_data_type);
    }
    Some(match data_type {
        DataType::Dictionary(_, values)
            if matches!(
                values.as_ref(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            ) =>
        {
            tag_data_type()
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => DataType::Float64,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => DataType::Int64,
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            DataType::UInt64
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Boolean => DataType::Boolean,
        _ => return None,
    })
}

/// `column` as `target`, failing rather than losing a value.
fn convert(column: &ArrayRef, target: &DataType) -> Result<ArrayRef, ArrowError> {
    if column.data_type() == target {
        return Ok(column.clone());
    }
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    if let DataType::Timestamp(_, zone) = column.data_type() {
        // A timestamp is an instant whatever its zone: change the unit, keep the values, and
        // label them UTC (naive timestamps are taken as UTC).
        let unit_only = DataType::Timestamp(TimeUnit::Nanosecond, zone.clone());
        let nanos = cast_with_options(column, &unit_only, &options)?;
        let nanos = nanos
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .expect("cast to nanoseconds")
            .clone()
            .with_timezone("UTC");
        return Ok(Arc::new(nanos));
    }
    cast_with_options(column, target, &options)
}

/// Checks that batches of `schema` fit the data model (see the module documentation), before
/// any of their data is read: the error names the first column that does not.
pub fn check_schema(schema: &Schema) -> Result<(), ArrowIngestError> {
    if schema.column_with_name(TIME_COLUMN).is_none() {
        let present: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(ArrowIngestError {
            column: None,
            message: format!(
                "a {TIME_COLUMN:?} timestamp column is required (columns: {})",
                present.join(", ")
            ),
        });
    }
    for (index, field) in schema.fields().iter().enumerate() {
        let name = field.name();
        if name.is_empty() {
            return Err(ArrowIngestError::column(
                name,
                "column names must not be empty",
            ));
        }
        if schema.fields()[..index].iter().any(|f| f.name() == name) {
            return Err(ArrowIngestError::column(name, "appears twice"));
        }
        if target_type(name, field.data_type()).is_none() {
            let expected = if name == TIME_COLUMN {
                "the time column must be a timestamp"
            } else {
                "supported: dictionary-encoded strings (tags), float, integer, unsigned \
                 integer, string, boolean (fields)"
            };
            return Err(ArrowIngestError::column(
                name,
                format!("type {} is not supported; {expected}", field.data_type()),
            ));
        }
    }
    Ok(())
}

/// `batch` as rows of table `table`: columns converted to the data model and sorted by name.
pub fn table_from_arrow(
    table: &str,
    batch: &RecordBatch,
) -> Result<DecodedTable, ArrowIngestError> {
    let schema = batch.schema();
    check_schema(&schema)?;
    let mut columns: Vec<(Field, ArrayRef)> = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let name = field.name();
        let target = target_type(name, field.data_type()).expect("check_schema checked it");
        let converted = convert(column, &target)
            .map_err(|e| ArrowIngestError::column(name, format!("cannot convert: {e}")))?;
        if name == TIME_COLUMN && converted.null_count() > 0 {
            let row = (0..converted.len())
                .find(|i| converted.is_null(*i))
                .unwrap_or(0);
            return Err(ArrowIngestError::column(
                name,
                format!("must not be null (row {row} is)"),
            ));
        }
        let column_type =
            ColumnType::from_arrow(name, &target).expect("target types are in the data model");
        columns.push((column_type.arrow_field(name), converted));
    }
    columns.sort_by(|a, b| a.0.name().cmp(b.0.name()));
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| {
        ArrowIngestError {
            column: None,
            message: format!("invalid batch: {e}"),
        }
    })?;
    Ok(DecodedTable {
        name: table.to_string(),
        batch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        DictionaryArray, Float32Array, Int32Array, Int8Array, LargeStringArray, StringArray,
        TimestampMicrosecondArray, TimestampSecondArray, UInt16Array,
    };
    use arrow::datatypes::Int16Type;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn widens_losslessly_and_sorts_columns() {
        let tags: DictionaryArray<Int16Type> = vec!["a", "b"].into_iter().collect();
        let input = batch(vec![
            (
                "usage",
                Arc::new(Float32Array::from(vec![1.5, 2.5])) as ArrayRef,
            ),
            ("host", Arc::new(tags)),
            (
                "time",
                Arc::new(TimestampMicrosecondArray::from(vec![1, 2]).with_timezone("+02:00")),
            ),
            ("count", Arc::new(Int8Array::from(vec![3, 4]))),
            ("free", Arc::new(UInt16Array::from(vec![5, 6]))),
            ("note", Arc::new(LargeStringArray::from(vec!["x", "y"]))),
        ]);
        let table = table_from_arrow("cpu", &input).unwrap();
        let schema = table.batch.schema();
        let described: Vec<(String, DataType)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect();
        assert_eq!(
            described,
            vec![
                ("count".into(), DataType::Int64),
                ("free".into(), DataType::UInt64),
                ("host".into(), tag_data_type()),
                ("note".into(), DataType::Utf8),
                ("time".into(), time_data_type()),
                ("usage".into(), DataType::Float64),
            ]
        );
        let time = table.batch.column_by_name("time").unwrap();
        let time = time
            .as_any()
            .downcast_ref::<arrow::array::TimestampNanosecondArray>()
            .unwrap();
        assert_eq!(time.values(), &[1000, 2000]);
    }

    #[test]
    fn errors_name_the_column() {
        let time = || Arc::new(TimestampSecondArray::from(vec![Some(1), Some(2)])) as ArrayRef;
        let no_time = batch(vec![(
            "v",
            Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef,
        )]);
        let err = table_from_arrow("t", &no_time).unwrap_err();
        assert!(
            err.message
                .contains("\"time\" timestamp column is required"),
            "{err}"
        );

        let int_time = batch(vec![(
            "time",
            Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef,
        )]);
        let err = table_from_arrow("t", &int_time).unwrap_err();
        assert_eq!(err.column.as_deref(), Some("time"));

        let list = arrow::array::ListArray::from_iter_primitive::<arrow::datatypes::Int32Type, _, _>(
            vec![Some(vec![Some(1)]), None],
        );
        let nested = batch(vec![("time", time()), ("xs", Arc::new(list) as ArrayRef)]);
        let err = table_from_arrow("t", &nested).unwrap_err();
        assert_eq!(err.column.as_deref(), Some("xs"), "{err}");
        assert!(err.message.contains("not supported"), "{err}");

        let null_time = batch(vec![(
            "time",
            Arc::new(TimestampSecondArray::from(vec![Some(1), None])) as ArrayRef,
        )]);
        let err = table_from_arrow("t", &null_time).unwrap_err();
        assert!(err.message.contains("row 1"), "{err}");

        // Seconds far beyond the nanosecond range are an error, not a wrapped value.
        let huge = batch(vec![(
            "time",
            Arc::new(TimestampSecondArray::from(vec![i64::MAX / 2])) as ArrayRef,
        )]);
        assert_eq!(
            table_from_arrow("t", &huge).unwrap_err().column.as_deref(),
            Some("time")
        );
        let plain_strings = batch(vec![
            ("time", time()),
            ("s", Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef),
        ]);
        let table = table_from_arrow("t", &plain_strings).unwrap();
        assert_eq!(
            table
                .batch
                .schema()
                .field_with_name("s")
                .unwrap()
                .data_type(),
            &DataType::Utf8,
            "plain strings are fields"
        );
    }
}

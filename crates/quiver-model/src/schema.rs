//! Quiver's data model, shared by every layer: a table has a `time` column, tag columns and
//! typed field columns, and this module says how each maps to Arrow.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

/// The name of every table's timestamp column.
pub const TIME_COLUMN: &str = "time";

/// The type of a field column; fixed by the first write of that field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// 64-bit float (`1.5`).
    Float,
    /// Signed 64-bit integer (`1i`).
    Integer,
    /// Unsigned 64-bit integer (`1u`).
    UInteger,
    /// UTF-8 string (`"x"`).
    String,
    /// Boolean (`true`).
    Boolean,
}

impl FieldType {
    /// The Arrow type that stores this field.
    pub fn arrow_type(self) -> DataType {
        match self {
            FieldType::Float => DataType::Float64,
            FieldType::Integer => DataType::Int64,
            FieldType::UInteger => DataType::UInt64,
            FieldType::String => DataType::Utf8,
            FieldType::Boolean => DataType::Boolean,
        }
    }

    /// The name used in error messages (`float`, `integer`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Float => "float",
            FieldType::Integer => "integer",
            FieldType::UInteger => "unsigned integer",
            FieldType::String => "string",
            FieldType::Boolean => "boolean",
        }
    }
}

/// The role and type of one column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// The `time` column: `Timestamp(Nanosecond, "UTC")`, never null.
    Time,
    /// A tag: part of the series key, `Dictionary(Int32, Utf8)`.
    Tag,
    /// A field of the given type.
    Field(FieldType),
}

impl ColumnType {
    /// The Arrow type that stores this column.
    pub fn arrow_type(self) -> DataType {
        match self {
            ColumnType::Time => time_data_type(),
            ColumnType::Tag => tag_data_type(),
            ColumnType::Field(f) => f.arrow_type(),
        }
    }

    /// The Arrow field for a column of this type named `name`.
    pub fn arrow_field(self, name: &str) -> Field {
        Field::new(name, self.arrow_type(), self != ColumnType::Time)
    }

    /// Recognises a column type from its Arrow type (the inverse of [`ColumnType::arrow_type`]).
    pub fn from_arrow(name: &str, data_type: &DataType) -> Option<ColumnType> {
        if name == TIME_COLUMN {
            return (*data_type == time_data_type()).then_some(ColumnType::Time);
        }
        Some(match data_type {
            DataType::Dictionary(k, v) if **k == DataType::Int32 && **v == DataType::Utf8 => {
                ColumnType::Tag
            }
            DataType::Float64 => ColumnType::Field(FieldType::Float),
            DataType::Int64 => ColumnType::Field(FieldType::Integer),
            DataType::UInt64 => ColumnType::Field(FieldType::UInteger),
            DataType::Utf8 => ColumnType::Field(FieldType::String),
            DataType::Boolean => ColumnType::Field(FieldType::Boolean),
            _ => return None,
        })
    }

    /// A description for error messages, with its article (`a tag`, `an integer field`, ...).
    pub fn describe(self) -> String {
        match self {
            ColumnType::Time => "the time column".into(),
            ColumnType::Tag => "a tag".into(),
            ColumnType::Field(f) => {
                let name = f.name();
                let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                format!("{article} {name} field")
            }
        }
    }
}

/// `Timestamp(Nanosecond, "UTC")`.
pub fn time_data_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some(Arc::from("UTC")))
}

/// `Dictionary(Int32, Utf8)`.
pub fn tag_data_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// Tells a decoder which columns a table already has, so that a write whose types conflict
/// with the stored schema is rejected (and values are typed to fit it where that is lossless).
pub trait SchemaLookup {
    /// The existing columns of `table` (empty for a table that does not exist yet).
    fn existing_columns(&self, table: &str) -> Vec<(String, ColumnType)>;
}

/// A lookup for a database that has no tables yet.
pub struct NoExistingTables;

impl SchemaLookup for NoExistingTables {
    fn existing_columns(&self, _table: &str) -> Vec<(String, ColumnType)> {
        Vec::new()
    }
}

/// The rows of one table decoded from a request, in the data model's types.
#[derive(Debug, Clone)]
pub struct DecodedTable {
    /// The table (measurement) name.
    pub name: String,
    /// The rows; columns sorted by name, tags as `Dictionary(Int32, Utf8)`.
    pub batch: RecordBatch,
}

impl DecodedTable {
    /// A table of `columns` (any order; sorted here), each an array of a data-model type
    /// (`time` included); fails for another type or columns of unequal length.
    pub fn from_columns(
        name: String,
        mut columns: Vec<(String, ArrayRef)>,
    ) -> Result<DecodedTable, ArrowError> {
        columns.sort_by(|a, b| a.0.cmp(&b.0));
        let fields = columns
            .iter()
            .map(|(column, array)| {
                ColumnType::from_arrow(column, array.data_type())
                    .map(|t| t.arrow_field(column))
                    .ok_or_else(|| {
                        ArrowError::SchemaError(format!(
                            "column {column:?} has type {}, not a data-model type",
                            array.data_type()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let arrays = columns.into_iter().map(|(_, a)| a).collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
        Ok(DecodedTable { name, batch })
    }
}

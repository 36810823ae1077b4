//! The rows decoded for each table, in pieces (one per columnar record, one for all row
//! records), and turning them into one [`DecodedTable`] per table.
//!
//! Each piece holds arrays of the types the values had (see [`super::column`]). At the end the
//! pieces of a table are given one type per column: the table's existing type when it has the
//! column, otherwise the widest type the pieces need (integer + float → float, integer +
//! unsigned → unsigned; a string column of a columnar record is a tag unless its record lists
//! `tag_keys`). Values are then converted only where nothing is lost; a value that does not fit
//! is an error naming the table, column and record.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayBuilder, ArrayRef, AsArray, StringDictionaryBuilder,
    TimestampNanosecondArray,
};
use arrow::compute::{cast, concat};
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type, UInt64Type};

use super::column::{Column, MAX_EXACT_FLOAT_INT};
use super::reader::Scalar;
use quiver_model::schema::{ColumnType, DecodedTable, FieldType, SchemaLookup, TIME_COLUMN};

/// What a record said a column is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A tag: a row's `tags`, a column named in `tag_keys`, a record's constant `tags`.
    Tag,
    /// A field: a row's `fields`; a column of a columnar record that is not a tag.
    Field,
    /// A string column of a columnar record without `tag_keys`: a tag, unless the table
    /// already has it as a string field.
    StringColumn,
}

/// Which record each row of a piece came from (for error messages).
#[derive(Debug, Clone)]
enum Records {
    /// Every row comes from this record (a columnar record).
    One(usize),
    /// Row `i` comes from record `records[i]` (row records).
    PerRow(Vec<usize>),
}

impl Records {
    fn of_row(&self, row: usize) -> usize {
        match self {
            Records::One(record) => *record,
            Records::PerRow(records) => records[row],
        }
    }
}

/// Some rows of one table, with the columns' values as decoded.
pub(crate) struct Piece {
    rows: usize,
    time: Vec<i64>,
    columns: Vec<(String, Role, ArrayRef)>,
    records: Records,
}

impl Piece {
    /// The rows of columnar record `record`: `time` (nanoseconds), its columns with their
    /// roles, and `constant_tags` added to every row.
    pub(crate) fn columnar(
        record: usize,
        time: Vec<i64>,
        columns: Vec<(String, Role, ArrayRef)>,
        constant_tags: &[(&str, Cow<'_, str>)],
    ) -> Result<Piece, String> {
        let rows = time.len();
        let mut columns = columns;
        for (name, value) in constant_tags {
            if columns.iter().any(|(c, _, _)| c == name) {
                return Err(format!(
                    "tag {name:?} is both in the record's 'tags' and one of its columns"
                ));
            }
            let mut tag = StringDictionaryBuilder::<Int32Type>::new();
            for _ in 0..rows {
                tag.append_value(value.as_ref());
            }
            columns.push((name.to_string(), Role::Tag, Arc::new(tag.finish())));
        }
        Ok(Piece {
            rows,
            time,
            columns,
            records: Records::One(record),
        })
    }
}

/// A column of row records.
enum RowColumn {
    Tag(StringDictionaryBuilder<Int32Type>),
    Field(Column),
}

impl RowColumn {
    fn len(&self) -> usize {
        match self {
            RowColumn::Tag(b) => b.len(),
            RowColumn::Field(c) => c.len(),
        }
    }
}

/// The row records of one table, appended row by row (no map per row: the record's tags and
/// fields come in as slices and go straight into the columns).
#[derive(Default)]
struct Rows {
    time: Vec<i64>,
    records: Vec<usize>,
    columns: Vec<(String, RowColumn)>,
    index: hashbrown::HashMap<String, usize>,
    /// The column of each tag and field position of the previous row: rows of one series
    /// usually name the same columns in the same order, so a name is checked against the
    /// column found at its position last time before it is looked up.
    previous: Vec<usize>,
}

impl Rows {
    /// The column named `name` (created if new), the `position`-th tag or field of its row.
    fn column(
        &mut self,
        position: usize,
        name: &str,
        role: Role,
    ) -> Result<&mut RowColumn, String> {
        let rows = self.time.len();
        let guess = self.previous.get(position).copied();
        let known = guess.filter(|&i| self.columns[i].0 == name);
        let index = match known.or_else(|| self.index.get(name).copied()) {
            Some(i) => i,
            None => {
                let column = match role {
                    Role::Tag => {
                        let mut tag = StringDictionaryBuilder::new();
                        tag.append_nulls(rows);
                        RowColumn::Tag(tag)
                    }
                    _ => RowColumn::Field(Column::nulls(rows)),
                };
                self.columns.push((name.to_string(), column));
                self.index.insert(name.to_string(), self.columns.len() - 1);
                self.columns.len() - 1
            }
        };
        match self.previous.get_mut(position) {
            Some(slot) => *slot = index,
            None => self.previous.push(index),
        }
        let column = &mut self.columns[index].1;
        match (column, role) {
            (column @ RowColumn::Tag(_), Role::Tag) => Ok(column),
            (column @ RowColumn::Field(_), Role::Field) => Ok(column),
            (RowColumn::Tag(_), _) => Err(format!(
                "{name:?} is a field here but a tag in an earlier record"
            )),
            (RowColumn::Field(_), _) => Err(format!(
                "{name:?} is a tag here but a field in an earlier record"
            )),
        }
    }

    fn append(
        &mut self,
        record: usize,
        time: i64,
        tags: &[(&str, Cow<'_, str>)],
        fields: &[(&str, Scalar<'_>)],
    ) -> Result<(), String> {
        for (position, (name, value)) in tags.iter().enumerate() {
            match self.column(position, name, Role::Tag)? {
                RowColumn::Tag(tag) => tag.append_value(value.as_ref()),
                RowColumn::Field(_) => unreachable!("column() checked the role"),
            }
        }
        for (position, (name, value)) in fields.iter().enumerate() {
            match self.column(tags.len() + position, name, Role::Field)? {
                RowColumn::Field(column) => column
                    .push(*value)
                    .map_err(|e| format!("field {name:?}: {e}"))?,
                RowColumn::Tag(_) => unreachable!("column() checked the role"),
            }
        }
        self.time.push(time);
        self.records.push(record);
        let rows = self.time.len();
        for (_, column) in &mut self.columns {
            if column.len() < rows {
                match column {
                    RowColumn::Tag(tag) => tag.append_null(),
                    RowColumn::Field(field) => field.push_null(),
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Option<Piece> {
        if self.time.is_empty() {
            return None;
        }
        let columns = self
            .columns
            .into_iter()
            .filter_map(|(name, column)| match column {
                RowColumn::Tag(mut tag) => {
                    Some((name, Role::Tag, Arc::new(tag.finish()) as ArrayRef))
                }
                RowColumn::Field(field) => field.finish().map(|a| (name, Role::Field, a)),
            })
            .collect();
        Some(Piece {
            rows: self.time.len(),
            time: self.time,
            columns,
            records: Records::PerRow(self.records),
        })
    }
}

/// A table's pieces.
struct Parts {
    name: String,
    pieces: Vec<Piece>,
    rows: Rows,
}

/// Where decoding a table went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableError {
    /// The record at fault, if one is.
    pub record: Option<usize>,
    /// What is wrong (names the table and column).
    pub message: String,
}

/// Every table of a request, in order of first appearance.
#[derive(Default)]
pub(crate) struct Tables {
    parts: Vec<Parts>,
    index: hashbrown::HashMap<String, usize>,
}

impl Tables {
    fn parts(&mut self, table: &str) -> &mut Parts {
        let index = match self.index.get(table) {
            Some(&i) => i,
            None => {
                self.parts.push(Parts {
                    name: table.to_string(),
                    pieces: Vec::new(),
                    rows: Rows::default(),
                });
                self.index.insert(table.to_string(), self.parts.len() - 1);
                self.parts.len() - 1
            }
        };
        &mut self.parts[index]
    }

    /// Appends one row of record `record` to `table`.
    pub(crate) fn add_row(
        &mut self,
        table: &str,
        record: usize,
        time: i64,
        tags: &[(&str, Cow<'_, str>)],
        fields: &[(&str, Scalar<'_>)],
    ) -> Result<(), String> {
        self.parts(table).rows.append(record, time, tags, fields)
    }

    /// Adds the rows of a columnar record to `table`.
    pub(crate) fn add_piece(&mut self, table: &str, piece: Piece) {
        if piece.rows > 0 {
            self.parts(table).pieces.push(piece);
        }
    }

    /// One table per name, typed to fit `existing` schemas.
    pub(crate) fn finish(
        self,
        existing: &dyn SchemaLookup,
    ) -> Result<Vec<DecodedTable>, TableError> {
        self.parts
            .into_iter()
            .filter_map(|mut parts| {
                if let Some(rows) = std::mem::take(&mut parts.rows).finish() {
                    parts.pieces.push(rows);
                }
                (!parts.pieces.is_empty()).then_some(parts)
            })
            .map(|parts| {
                let columns = existing.existing_columns(&parts.name);
                finish_table(parts, &columns)
            })
            .collect()
    }
}

/// The type a piece's column asks for, before the table's schema is consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Tag,
    StringColumn,
    Field(FieldType),
}

fn wanted(role: Role, data_type: &DataType) -> Wanted {
    match (role, data_type) {
        (Role::Tag, _) => Wanted::Tag,
        (Role::StringColumn, _) => Wanted::StringColumn,
        (Role::Field, DataType::Int64) => Wanted::Field(FieldType::Integer),
        (Role::Field, DataType::UInt64) => Wanted::Field(FieldType::UInteger),
        (Role::Field, DataType::Float64) => Wanted::Field(FieldType::Float),
        (Role::Field, DataType::Boolean) => Wanted::Field(FieldType::Boolean),
        (Role::Field, _) => Wanted::Field(FieldType::String),
    }
}

fn describe(wanted: Wanted) -> String {
    match wanted {
        Wanted::Tag => ColumnType::Tag.describe(),
        Wanted::StringColumn => "a string".into(),
        Wanted::Field(f) => ColumnType::Field(f).describe(),
    }
}

/// The type two pieces' columns agree on, if any.
fn merge(a: Wanted, b: Wanted) -> Option<Wanted> {
    use FieldType::{Float, Integer, String as Str, UInteger};
    Some(match (a, b) {
        _ if a == b => a,
        (Wanted::Tag, Wanted::StringColumn) | (Wanted::StringColumn, Wanted::Tag) => Wanted::Tag,
        (Wanted::StringColumn, Wanted::Field(Str)) | (Wanted::Field(Str), Wanted::StringColumn) => {
            Wanted::Field(Str)
        }
        (Wanted::Field(x), Wanted::Field(y)) => Wanted::Field(match (x, y) {
            (Integer, Float) | (Float, Integer) | (UInteger, Float) | (Float, UInteger) => Float,
            (Integer, UInteger) | (UInteger, Integer) => UInteger,
            _ => return None,
        }),
        _ => return None,
    })
}

fn finish_table(
    parts: Parts,
    existing: &[(String, ColumnType)],
) -> Result<DecodedTable, TableError> {
    let table = parts.name;
    let fail = |record: Option<usize>, message: String| TableError {
        record,
        message: format!("table {table:?}: {message}"),
    };
    // One type per column: the table's, or what the pieces agree on.
    let mut targets: BTreeMap<&str, ColumnType> = BTreeMap::new();
    let mut wanted_so_far: BTreeMap<&str, (Wanted, usize)> = BTreeMap::new();
    for piece in &parts.pieces {
        for (name, role, array) in &piece.columns {
            if name == TIME_COLUMN {
                return Err(fail(
                    Some(piece.records.of_row(0)),
                    "\"time\" is reserved for the timestamp; it cannot be a tag or field".into(),
                ));
            }
            if let Some((_, column_type)) = existing.iter().find(|(n, _)| n == name) {
                targets.insert(name, *column_type);
                continue;
            }
            let want = wanted(*role, array.data_type());
            let record = piece.records.of_row(0);
            let merged = match wanted_so_far.get(name.as_str()) {
                None => want,
                Some(&(earlier, earlier_record)) => merge(earlier, want).ok_or_else(|| {
                    fail(
                        Some(record),
                        format!(
                            "column {name:?} is {} in record {earlier_record} but {} here",
                            describe(earlier),
                            describe(want)
                        ),
                    )
                })?,
            };
            wanted_so_far.insert(name, (merged, record));
        }
    }
    for (name, (want, _)) in wanted_so_far {
        targets.insert(
            name,
            match want {
                Wanted::Tag | Wanted::StringColumn => ColumnType::Tag,
                Wanted::Field(f) => ColumnType::Field(f),
            },
        );
    }
    // Each piece's columns converted to those types, missing ones as nulls, then concatenated.
    let mut columns: Vec<(String, Vec<ArrayRef>)> = targets
        .keys()
        .map(|name| (name.to_string(), Vec::with_capacity(parts.pieces.len())))
        .collect();
    let mut times: Vec<ArrayRef> = Vec::with_capacity(parts.pieces.len());
    for piece in &parts.pieces {
        times.push(Arc::new(
            TimestampNanosecondArray::from(piece.time.clone()).with_timezone("UTC"),
        ));
        for ((name, pieces), target) in columns.iter_mut().zip(targets.values()) {
            let array = match piece.columns.iter().find(|(n, _, _)| n == name) {
                Some((_, role, array)) => convert(array, *role, *target).map_err(|(row, e)| {
                    fail(
                        Some(piece.records.of_row(row)),
                        format!("column {name:?}: {e}"),
                    )
                })?,
                None => new_null_array(&target.arrow_type(), piece.rows),
            };
            pieces.push(array);
        }
    }
    // A columnar record whose columns are all tags (or nil) adds no point (row records are
    // checked row by row as they are read).
    for piece in &parts.pieces {
        let is_field =
            |name: &String| matches!(targets.get(name.as_str()), Some(ColumnType::Field(_)));
        if !piece.columns.iter().any(|(name, _, _)| is_field(name)) {
            return Err(fail(
                Some(piece.records.of_row(0)),
                "the record has no field values: every column is the time, a tag or all nil \
                 (a point needs at least one field, as a line of line protocol does)"
                    .into(),
            ));
        }
    }
    let join = |arrays: Vec<ArrayRef>| -> Result<ArrayRef, TableError> {
        if arrays.len() == 1 {
            return Ok(arrays.into_iter().next().expect("one array"));
        }
        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        concat(&refs).map_err(|e| fail(None, format!("cannot combine records: {e}")))
    };
    let mut result = vec![(TIME_COLUMN.to_string(), join(times)?)];
    for (name, arrays) in columns {
        result.push((name, join(arrays)?));
    }
    DecodedTable::from_columns(table.clone(), result)
        .map_err(|e| fail(None, format!("internal error building the batch: {e}")))
}

/// `array` (decoded with `role`) as a column of `target`, losing nothing; the error gives
/// the first row that does not fit.
fn convert(array: &ArrayRef, role: Role, target: ColumnType) -> Result<ArrayRef, (usize, String)> {
    let source = array.data_type();
    let mismatch = || {
        (
            0,
            format!(
                "the table has it as {}, this record sends {} values",
                target.describe(),
                kind(role, source)
            ),
        )
    };
    let to = target.arrow_type();
    // A field's strings are dictionary-encoded like a tag's, but a field is no tag.
    if source == &to && !(target == ColumnType::Tag && role == Role::Field) {
        return Ok(array.clone());
    }
    let converted = match (target, source) {
        // Strings arrive dictionary-encoded (see `column`): a tag as it is (handled above).
        (ColumnType::Tag, _) if role == Role::Tag => {
            cast(array, &DataType::Utf8).and_then(|strings| cast(&strings, &to))
        }
        (ColumnType::Field(FieldType::String), DataType::Dictionary(_, _)) if role != Role::Tag => {
            cast(array, &DataType::Utf8)
        }
        (ColumnType::Field(FieldType::Float), DataType::Int64) => {
            check(
                array.as_primitive::<Int64Type>().iter(),
                |v| v.unsigned_abs() <= MAX_EXACT_FLOAT_INT,
                "beyond 2^53: not exact as a float",
            )?;
            cast(array, &to)
        }
        (ColumnType::Field(FieldType::Float), DataType::UInt64) => {
            check(
                array.as_primitive::<UInt64Type>().iter(),
                |v| v <= MAX_EXACT_FLOAT_INT,
                "beyond 2^53: not exact as a float",
            )?;
            cast(array, &to)
        }
        (ColumnType::Field(FieldType::Integer), DataType::UInt64) => {
            check(
                array.as_primitive::<UInt64Type>().iter(),
                |v| v <= i64::MAX as u64,
                "above 2^63-1: not an integer field value",
            )?;
            cast(array, &to)
        }
        (ColumnType::Field(FieldType::Integer), DataType::Float64) => {
            check(
                array.as_primitive::<Float64Type>().iter(),
                |v| v.fract() == 0.0 && v >= -(2f64.powi(63)) && v < 2f64.powi(63),
                "not a whole number in range: the field is an integer",
            )?;
            cast(array, &to)
        }
        (ColumnType::Field(FieldType::UInteger), DataType::Int64) => {
            check(
                array.as_primitive::<Int64Type>().iter(),
                |v| v >= 0,
                "negative: the field is an unsigned integer",
            )?;
            cast(array, &to)
        }
        (ColumnType::Field(FieldType::UInteger), DataType::Float64) => {
            check(
                array.as_primitive::<Float64Type>().iter(),
                |v| v.fract() == 0.0 && v >= 0.0 && v < 2f64.powi(64),
                "not a whole non-negative number in range: the field is an unsigned integer",
            )?;
            cast(array, &to)
        }
        _ => return Err(mismatch()),
    };
    converted.map_err(|e| (0, format!("cannot convert to {}: {e}", target.describe())))
}

/// Ok if every non-null value passes `fits`; otherwise the first row that fails, with `why`.
fn check<T: std::fmt::Display + Copy>(
    values: impl Iterator<Item = Option<T>>,
    fits: impl Fn(T) -> bool,
    why: &str,
) -> Result<(), (usize, String)> {
    for (row, value) in values.enumerate() {
        if let Some(v) = value {
            if !fits(v) {
                return Err((row, format!("value {v} is {why}")));
            }
        }
    }
    Ok(())
}

fn kind(role: Role, data_type: &DataType) -> &'static str {
    match (role, data_type) {
        (Role::Tag, _) => "tag",
        (_, DataType::Int64 | DataType::UInt64) => "integer",
        (_, DataType::Float64) => "float",
        (_, DataType::Boolean) => "boolean",
        _ => "string",
    }
}

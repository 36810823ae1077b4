//! Decoding a line-protocol request straight into Arrow column builders, one per table.
//!
//! Each line is parsed into borrowed slices ([`super::parser`]), checked against the table's
//! schema (the columns the table already has, plus those earlier lines of this request added),
//! and only then appended, so a rejected line leaves no trace in any column. Column lookups use
//! borrowed `&str` keys; nothing is allocated per row except dictionary growth for new tag
//! values and the bytes of string fields.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, StringDictionaryBuilder,
    TimestampNanosecondBuilder, UInt64Builder,
};
use arrow::datatypes::Int32Type;
use hashbrown::HashMap;

use super::parser::{FieldValue, LineParser, ParsedLine};
use super::precision::Precision;
use quiver_model::schema::{ColumnType, FieldType, TIME_COLUMN};
use quiver_model::schema::{DecodedTable, SchemaLookup};

/// How to interpret a request body.
#[derive(Debug, Clone)]
pub struct DecodeOptions {
    /// Unit of the timestamps written in the body.
    pub precision: Precision,
    /// Server time (ns) given to lines that carry no timestamp, before truncation to the
    /// precision: one value per request, so such lines of one series collapse into one point.
    pub default_time_ns: i64,
    /// At most this many errors are kept with their text; the rest are only counted.
    pub max_reported_errors: usize,
}

impl DecodeOptions {
    /// Options for tests and tools: nanosecond timestamps, time 0 for lines without one, and
    /// the first 10 errors reported in full.
    pub fn for_tests() -> Self {
        DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        }
    }
}

/// A rejected line, in the shape InfluxDB 3 reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number in the request body.
    pub line_number: usize,
    /// What was wrong (starting with `column C:` for syntax errors; the line is
    /// `line_number`, not repeated here).
    pub message: String,
    /// The line as it was sent (lossily decoded if it was not UTF-8).
    pub original_line: String,
}

/// Everything decoded from one request body.
#[derive(Debug, Default)]
pub struct DecodedWrite {
    /// One batch per table written to, in order of first appearance.
    pub tables: Vec<DecodedTable>,
    /// The first `max_reported_errors` rejected lines.
    pub errors: Vec<LineError>,
    /// How many lines were rejected in all.
    pub error_count: usize,
    /// How many lines were accepted.
    pub accepted_lines: usize,
}

impl DecodedWrite {
    /// Total rows accepted across tables.
    pub fn row_count(&self) -> usize {
        self.tables.iter().map(|t| t.batch.num_rows()).sum()
    }
}

/// Decodes a whole line-protocol body; good lines become rows, bad lines become [`LineError`]s.
pub fn decode_line_protocol(
    body: &[u8],
    options: &DecodeOptions,
    existing: &dyn SchemaLookup,
) -> DecodedWrite {
    let mut out = DecodedWrite::default();
    let mut builders: Vec<TableBuilder> = Vec::new();
    let mut table_index: HashMap<String, usize> = HashMap::new();
    let default_time = options.precision.truncate(options.default_time_ns);
    let mut parser = LineParser::new(body);
    let mut line = ParsedLine::default();
    let mut scratch = LineScratch::default();
    while let Some(result) = parser.next_line(&mut line) {
        // the line is the report's `line_number`: the message says only where in it
        let outcome = result
            .map_err(|e| format!("column {}: {}", e.column, e.message))
            .and_then(|span| {
                let time = match line.timestamp {
                    None => default_time,
                    Some(ts) => options.precision.to_nanos(ts).ok_or_else(|| {
                        format!(
                            "timestamp {ts} is out of range for precision {:?}",
                            options.precision
                        )
                    })?,
                };
                let index = match table_index.get(line.measurement.as_ref()) {
                    Some(&i) => i,
                    None => {
                        let name = line.measurement.to_string();
                        let columns = existing.existing_columns(&name);
                        builders.push(TableBuilder::new(name.clone(), columns));
                        table_index.insert(name, builders.len() - 1);
                        builders.len() - 1
                    }
                };
                builders[index]
                    .append(&line, time, &mut scratch)
                    .map(|()| span)
            });
        match outcome {
            Ok(_) => out.accepted_lines += 1,
            Err(message) => {
                out.error_count += 1;
                if out.errors.len() < options.max_reported_errors {
                    out.errors.push(LineError {
                        line_number: parser.current_entry_line_number(),
                        message,
                        original_line: parser.entry_text(parser.current_entry_start()).into_owned(),
                    });
                }
            }
        }
    }
    out.tables = builders
        .into_iter()
        .filter(|b| b.rows > 0)
        .map(TableBuilder::finish)
        .collect();
    out
}

/// Per-line working memory, reused across lines.
#[derive(Default)]
struct LineScratch {
    /// For each tag of the line: its column, or `None` if it is new.
    tag_columns: Vec<Option<usize>>,
    /// Indices into `line.fields` that take effect (a repeated key: the last one wins).
    effective_fields: Vec<usize>,
    /// For each effective field: its column, or `None` if it is new.
    field_columns: Vec<Option<usize>>,
}

/// What the decoder knows about one column name of a table.
#[derive(Debug, Clone, Copy)]
struct Slot {
    column_type: ColumnType,
    /// Index into `TableBuilder::columns` once this request has written the column.
    builder: Option<usize>,
}

/// The typed Arrow builder behind one column.
enum ColumnData {
    Tag(StringDictionaryBuilder<Int32Type>),
    Float(Float64Builder),
    Integer(Int64Builder),
    UInteger(UInt64Builder),
    String(StringBuilder),
    Boolean(BooleanBuilder),
}

struct ColumnBuilder {
    name: String,
    data: ColumnData,
    /// Rows filled so far; rows before this column first appeared are back-filled with nulls.
    len: usize,
}

impl ColumnBuilder {
    fn new(name: &str, column_type: ColumnType) -> Self {
        let data = match column_type {
            ColumnType::Tag => ColumnData::Tag(StringDictionaryBuilder::new()),
            ColumnType::Field(FieldType::Float) => ColumnData::Float(Float64Builder::new()),
            ColumnType::Field(FieldType::Integer) => ColumnData::Integer(Int64Builder::new()),
            ColumnType::Field(FieldType::UInteger) => ColumnData::UInteger(UInt64Builder::new()),
            ColumnType::Field(FieldType::String) => ColumnData::String(StringBuilder::new()),
            ColumnType::Field(FieldType::Boolean) => ColumnData::Boolean(BooleanBuilder::new()),
            ColumnType::Time => unreachable!("time is not a tag or field column"),
        };
        ColumnBuilder {
            name: name.to_string(),
            data,
            len: 0,
        }
    }

    fn pad_to(&mut self, rows: usize) {
        let missing = rows - self.len;
        if missing == 0 {
            return;
        }
        match &mut self.data {
            ColumnData::Tag(b) => b.append_nulls(missing),
            ColumnData::Float(b) => b.append_nulls(missing),
            ColumnData::Integer(b) => b.append_nulls(missing),
            ColumnData::UInteger(b) => b.append_nulls(missing),
            ColumnData::String(b) => b.append_nulls(missing),
            ColumnData::Boolean(b) => b.append_nulls(missing),
        }
        self.len = rows;
    }

    fn append_tag(&mut self, row: usize, value: &str) {
        self.pad_to(row);
        match &mut self.data {
            ColumnData::Tag(b) => b.append_value(value),
            _ => unreachable!("validated as a tag column"),
        }
        self.len += 1;
    }

    fn append_field(&mut self, row: usize, value: &FieldValue<'_>) {
        self.pad_to(row);
        match (&mut self.data, value) {
            (ColumnData::Float(b), FieldValue::Float(v)) => b.append_value(*v),
            (ColumnData::Integer(b), FieldValue::Integer(v)) => b.append_value(*v),
            (ColumnData::UInteger(b), FieldValue::UInteger(v)) => b.append_value(*v),
            (ColumnData::String(b), FieldValue::String(v)) => b.append_value(v),
            (ColumnData::Boolean(b), FieldValue::Boolean(v)) => b.append_value(*v),
            _ => unreachable!("validated field type"),
        }
        self.len += 1;
    }

    fn finish(mut self, rows: usize) -> (String, ArrayRef) {
        self.pad_to(rows);
        let array: ArrayRef = match &mut self.data {
            ColumnData::Tag(b) => Arc::new(b.finish()),
            ColumnData::Float(b) => Arc::new(b.finish()),
            ColumnData::Integer(b) => Arc::new(b.finish()),
            ColumnData::UInteger(b) => Arc::new(b.finish()),
            ColumnData::String(b) => Arc::new(b.finish()),
            ColumnData::Boolean(b) => Arc::new(b.finish()),
        };
        (self.name, array)
    }
}

fn field_type(value: &FieldValue<'_>) -> FieldType {
    match value {
        FieldValue::Float(_) => FieldType::Float,
        FieldValue::Integer(_) => FieldType::Integer,
        FieldValue::UInteger(_) => FieldType::UInteger,
        FieldValue::String(_) => FieldType::String,
        FieldValue::Boolean(_) => FieldType::Boolean,
    }
}

/// Accumulates the rows of one table.
struct TableBuilder {
    name: String,
    times: TimestampNanosecondBuilder,
    columns: Vec<ColumnBuilder>,
    slots: HashMap<String, Slot>,
    rows: usize,
}

impl TableBuilder {
    fn new(name: String, existing: Vec<(String, ColumnType)>) -> Self {
        let slots = existing
            .into_iter()
            .map(|(column, column_type)| {
                (
                    column,
                    Slot {
                        column_type,
                        builder: None,
                    },
                )
            })
            .collect();
        TableBuilder {
            name,
            times: TimestampNanosecondBuilder::new(),
            columns: Vec::new(),
            slots,
            rows: 0,
        }
    }

    /// The slot of column `key`, if the table or this request has it; `time` is refused.
    fn lookup(&self, key: &str, wanted: ColumnType) -> Result<Option<Slot>, String> {
        if key == TIME_COLUMN {
            return Err(format!(
                "{} key \"time\" is reserved for the timestamp column",
                if wanted == ColumnType::Tag {
                    "tag"
                } else {
                    "field"
                }
            ));
        }
        Ok(self.slots.get(key).copied())
    }

    /// Checks that an existing column has the type the line writes.
    fn check_type(
        &self,
        key: &str,
        slot: Slot,
        wanted: ColumnType,
    ) -> Result<Option<usize>, String> {
        if slot.column_type == wanted {
            return Ok(slot.builder);
        }
        Err(format!(
            "column \"{key}\" of table \"{}\" is {}; this line writes it as {}",
            self.name,
            slot.column_type.describe(),
            wanted.describe()
        ))
    }

    /// Validates the whole line first, then appends it: a rejected line changes nothing.
    fn append(
        &mut self,
        line: &ParsedLine<'_>,
        time: i64,
        scratch: &mut LineScratch,
    ) -> Result<(), String> {
        scratch.tag_columns.clear();
        scratch.effective_fields.clear();
        scratch.field_columns.clear();
        for (key, _) in &line.tags {
            let column = match self.lookup(key, ColumnType::Tag)? {
                Some(slot) => self.check_type(key, slot, ColumnType::Tag)?,
                None => None,
            };
            scratch.tag_columns.push(column);
        }
        // Last to first, so that of a repeated key the last value is the one kept.
        for (i, (key, value)) in line.fields.iter().enumerate().rev() {
            let wanted = ColumnType::Field(field_type(value));
            let slot = self.lookup(key, wanted)?;
            // Columns this request already built are told apart by index, others by name.
            let repeated = match slot.and_then(|s| s.builder) {
                Some(index) => scratch.field_columns.contains(&Some(index)),
                None => scratch
                    .effective_fields
                    .iter()
                    .any(|&j| line.fields[j].0 == *key),
            };
            if repeated {
                continue;
            }
            let column = match slot {
                Some(slot) => self.check_type(key, slot, wanted)?,
                None if line.tags.iter().any(|(k, _)| k == key) => {
                    return Err(format!(
                        "\"{key}\" is written as both a tag and a field in the same line"
                    ));
                }
                None => None,
            };
            scratch.field_columns.push(column);
            scratch.effective_fields.push(i);
        }
        let row = self.rows;
        for ((key, value), column) in line.tags.iter().zip(&scratch.tag_columns) {
            let index = column.unwrap_or_else(|| self.add_column(key, ColumnType::Tag));
            self.columns[index].append_tag(row, value);
        }
        for (&i, column) in scratch.effective_fields.iter().zip(&scratch.field_columns) {
            let (key, value) = &line.fields[i];
            let index = column
                .unwrap_or_else(|| self.add_column(key, ColumnType::Field(field_type(value))));
            self.columns[index].append_field(row, value);
        }
        self.times.append_value(time);
        self.rows += 1;
        Ok(())
    }

    fn add_column(&mut self, key: &str, column_type: ColumnType) -> usize {
        let index = self.columns.len();
        self.columns.push(ColumnBuilder::new(key, column_type));
        self.slots.insert(
            key.to_string(),
            Slot {
                column_type,
                builder: Some(index),
            },
        );
        index
    }

    fn finish(mut self) -> DecodedTable {
        let rows = self.rows;
        let times: ArrayRef = Arc::new(self.times.finish().with_timezone("UTC"));
        let mut columns: Vec<(String, ArrayRef)> =
            self.columns.into_iter().map(|c| c.finish(rows)).collect();
        columns.push((TIME_COLUMN.to_string(), times));
        DecodedTable::from_columns(self.name, columns)
            .expect("builders only produce data-model columns of equal length")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, TimestampNanosecondType};
    use quiver_model::schema::NoExistingTables;

    fn options() -> DecodeOptions {
        DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 42,
            max_reported_errors: 100,
        }
    }

    struct Existing(Vec<(String, ColumnType)>);
    impl SchemaLookup for Existing {
        fn existing_columns(&self, _table: &str) -> Vec<(String, ColumnType)> {
            self.0.clone()
        }
    }

    #[test]
    fn builds_one_batch_per_table_with_nulls_for_missing_columns() {
        let body = b"cpu,host=a usage=1 10\nmem used=5i 11\ncpu,host=b,dc=x usage=2,idle=3 12\n";
        let out = decode_line_protocol(body, &options(), &NoExistingTables);
        assert_eq!(out.error_count, 0);
        assert_eq!(out.accepted_lines, 3);
        assert_eq!(out.tables.len(), 2);
        let cpu = &out.tables[0].batch;
        let names: Vec<_> = cpu
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["dc", "host", "idle", "time", "usage"]);
        let dc = cpu.column_by_name("dc").unwrap();
        assert!(dc.is_null(0) && !dc.is_null(1));
        let idle = cpu.column_by_name("idle").unwrap();
        assert!(idle.is_null(0), "a missing field is null, never 0");
        let usage = cpu
            .column_by_name("usage")
            .unwrap()
            .as_primitive::<Float64Type>();
        assert_eq!(usage.values(), &[1.0, 2.0]);
    }

    #[test]
    fn missing_timestamp_uses_one_server_time() {
        let out = decode_line_protocol(b"cpu v=1\ncpu v=2", &options(), &NoExistingTables);
        let times = out.tables[0]
            .batch
            .column_by_name("time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>()
            .clone();
        assert_eq!(times.values(), &[42, 42]);
    }

    #[test]
    fn type_conflicts_are_per_line_and_leave_no_trace() {
        let body = b"cpu v=1 1\ncpu v=2i 2\ncpu,v=x w=1 3\ncpu v=3,w=\"s\" 4\n";
        let out = decode_line_protocol(body, &options(), &NoExistingTables);
        assert_eq!(out.accepted_lines, 2);
        assert_eq!(out.error_count, 2);
        assert_eq!(out.errors[0].line_number, 2);
        assert!(
            out.errors[0].message.contains("float field"),
            "{}",
            out.errors[0].message
        );
        assert!(out.errors[0].message.contains("integer field"));
        assert_eq!(out.errors[0].original_line, "cpu v=2i 2");
        assert!(out.errors[1]
            .message
            .contains("is a float field; this line writes it as a tag"));
        let batch = &out.tables[0].batch;
        assert_eq!(batch.num_rows(), 2);
        assert!(batch.column_by_name("v").unwrap().data_type().is_floating());
    }

    #[test]
    fn conflicts_with_existing_schema() {
        let existing = Existing(vec![("host".into(), ColumnType::Tag)]);
        let out = decode_line_protocol(b"cpu host=1 1\ncpu,host=a v=1 2", &options(), &existing);
        assert_eq!(out.error_count, 1);
        assert!(out.errors[0].message.contains("\"host\""));
        assert!(out.errors[0].message.contains("is a tag"));
    }

    #[test]
    fn reserved_and_duplicate_keys() {
        let out = decode_line_protocol(
            b"cpu,time=x v=1\ncpu time=1\ncpu,a=x a=1\ncpu v=1,v=2 5\ncpu v=\"s\",v=3 6\ncpu v=4,w=1,v=5 7",
            &options(),
            &NoExistingTables,
        );
        assert_eq!(out.error_count, 3, "{:?}", out.errors);
        let v = out.tables[0].batch.column_by_name("v").unwrap();
        let v = v.as_primitive::<Float64Type>();
        // the last value wins, also over an earlier value of another type
        assert_eq!((v.value(0), v.value(1), v.value(2)), (2.0, 3.0, 5.0));
    }

    #[test]
    fn errors_are_capped_but_counted() {
        let body = "bad\n".repeat(50);
        let mut opts = options();
        opts.max_reported_errors = 3;
        let out = decode_line_protocol(body.as_bytes(), &opts, &NoExistingTables);
        assert_eq!(out.error_count, 50);
        assert_eq!(out.errors.len(), 3);
        assert_eq!(out.errors[2].line_number, 3);
        // a syntax error says where in its line; the line is `line_number`, said once
        assert!(
            out.errors[2].message.starts_with("column 4: "),
            "{}",
            out.errors[2].message
        );
        assert!(
            !out.errors[2].message.contains("line 3"),
            "{}",
            out.errors[2].message
        );
    }

    #[test]
    fn timestamp_overflow_is_a_line_error() {
        let mut opts = options();
        opts.precision = Precision::Second;
        let out = decode_line_protocol(b"cpu v=1 9223372036854775807", &opts, &NoExistingTables);
        assert_eq!(out.error_count, 1);
        assert!(out.errors[0].message.contains("out of range"));
    }
}

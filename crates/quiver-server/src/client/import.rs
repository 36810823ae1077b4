//! `quiver import FILE.parquet | FILE.csv`: loads a file through the Arrow path. The file is
//! read in batches (Parquet's own reader, or Arrow's CSV reader with types inferred from the
//! whole file); each batch gets Quiver's data model (its time column as a timestamp named
//! `time`, tag columns dictionary-encoded) and is sent as an Arrow IPC stream to
//! `POST /api/v3/write_arrow`, with a progress bar. A batch the server refuses stops the
//! import, which says how many rows were written before it; nothing is retried behind the
//! user's back.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, TimestampNanosecondArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::writer::StreamWriter;
use clap::Args;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_model::schema::{tag_data_type, time_data_type, TIME_COLUMN};

use super::progress::Progress;
use super::{describe_error, exchange, ServerAddress};

/// The largest request body an import sends (half the server's default `max_request_bytes`);
/// a bigger batch is split.
const MAX_REQUEST_BYTES: usize = 32 << 20;

/// The time zone every imported time is in.
const UTC: &str = "UTC";

/// Arguments of `quiver import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    server: ServerAddress,
    /// Database to write into (created on first write).
    #[arg(long, default_value = super::DEFAULT_DATABASE)]
    db: String,
    /// Table to write into (default: the file's name without its extension).
    #[arg(long)]
    table: Option<String>,
    /// The column holding each row's time: a timestamp, a date, RFC 3339 text, or an integer
    /// in `--epoch-unit`.
    #[arg(long, default_value = "time")]
    time_column: String,
    /// Unit of an integer time column: s, ms, us or ns.
    #[arg(long, default_value = "ns")]
    epoch_unit: String,
    /// Tag columns, comma-separated (default: a CSV file's text columns, a Parquet file's
    /// dictionary-encoded text columns; `--tags ''` for none).
    #[arg(long)]
    tags: Option<String>,
    /// Rows per request.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(1..))]
    batch_rows: u64,
    /// The file's format: parquet or csv (default: from its name).
    #[arg(long)]
    format: Option<String>,
    /// A Parquet or CSV file.
    file: PathBuf,
}

/// The formats `quiver import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileFormat {
    Parquet,
    Csv,
}

/// The batches of an input file, and how far through it the reading is.
struct Input {
    batches: Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>>>,
    schema: SchemaRef,
    /// The file's size in bytes.
    size: u64,
    /// Bytes of the file consumed so far.
    position: Box<dyn Fn() -> u64>,
}

/// How each batch of the file becomes a batch of Quiver's data model.
struct Shape {
    time_index: usize,
    epoch_factor: i64,
    tags: Vec<String>,
    /// Columns with no value in the whole file (CSV), not written.
    skipped: Vec<String>,
}

/// Runs `quiver import`: reads the file in batches and writes each through the Arrow path.
pub fn import(args: ImportArgs) -> Result<(), String> {
    let format = file_format(&args)?;
    let table = match &args.table {
        Some(table) => table.clone(),
        None => args
            .file
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "name the table with --table ({} has no usable name)",
                    args.file.display()
                )
            })?,
    };
    let input = open(&args.file, format, args.batch_rows as usize)?;
    let shape = shape(&args, format, &input.schema)?;
    for column in &shape.skipped {
        eprintln!("column {column:?} has no value in the whole file: not written");
    }
    let mut progress = Progress::new(Some(input.size));
    let mut written = 0u64;
    let mut consumed = 0u64;
    for batch in input.batches {
        let batch =
            batch.map_err(|e| stopped(&args, written, &format!("cannot read the file: {e}")))?;
        send(&args, &table, &batch, &shape, &mut written)
            .map_err(|e| stopped(&args, written, &e))?;
        let position = (input.position)();
        progress.advance(position.saturating_sub(consumed), batch.num_rows() as u64);
        consumed = position;
    }
    progress.finish();
    let tags = if shape.tags.is_empty() {
        "none".to_string()
    } else {
        shape.tags.join(", ")
    };
    println!(
        "imported {written} row{} from {} into database {:?}, table {table:?} (tags: {tags})",
        super::plural(written as usize),
        args.file.display(),
        args.db
    );
    Ok(())
}

fn file_format(args: &ImportArgs) -> Result<FileFormat, String> {
    let named = args.format.clone().or_else(|| {
        args.file
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
    });
    match named.as_deref() {
        Some("parquet") | Some("pq") => Ok(FileFormat::Parquet),
        Some("csv") => Ok(FileFormat::Csv),
        other => Err(format!(
            "quiver import reads Parquet and CSV files; {} is {}: name its format with --format parquet|csv",
            args.file.display(),
            other.map_or("of no known kind".to_string(), |o| format!("{o:?}"))
        )),
    }
}

fn open(file: &Path, format: FileFormat, batch_rows: usize) -> Result<Input, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", file.display());
    let opened = File::open(file).map_err(|e| cannot(&e))?;
    let size = opened.metadata().map_err(|e| cannot(&e))?.len();
    match format {
        FileFormat::Parquet => {
            let builder =
                ParquetRecordBatchReaderBuilder::try_new(opened).map_err(|e| cannot(&e))?;
            let total_rows = builder.metadata().file_metadata().num_rows().max(1) as u64;
            let schema = builder.schema().clone();
            let reader = builder
                .with_batch_size(batch_rows)
                .build()
                .map_err(|e| cannot(&e))?;
            // Parquet is read by row group: progress is the share of rows read, in bytes
            let rows_read = Arc::new(AtomicU64::new(0));
            let counted = rows_read.clone();
            let batches = reader.inspect(move |batch| {
                if let Ok(batch) = batch {
                    counted.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                }
            });
            Ok(Input {
                batches: Box::new(batches),
                schema,
                size,
                position: Box::new(move || {
                    let read = rows_read.load(Ordering::Relaxed).min(total_rows);
                    (u128::from(size) * u128::from(read) / u128::from(total_rows)) as u64
                }),
            })
        }
        FileFormat::Csv => {
            let csv = arrow::csv::reader::Format::default().with_header(true);
            let (schema, _) = csv
                .infer_schema(File::open(file).map_err(|e| cannot(&e))?, None)
                .map_err(|e| cannot(&e))?;
            let schema = Arc::new(schema);
            let position = Arc::new(AtomicU64::new(0));
            let counting = CountingReader {
                inner: opened,
                position: position.clone(),
            };
            let reader = arrow::csv::ReaderBuilder::new(schema.clone())
                .with_format(csv)
                .with_batch_size(batch_rows)
                .build(counting)
                .map_err(|e| cannot(&e))?;
            Ok(Input {
                batches: Box::new(reader),
                schema,
                size,
                position: Box::new(move || position.load(Ordering::Relaxed)),
            })
        }
    }
}

/// A reader that counts the bytes read through it.
struct CountingReader<R> {
    inner: R,
    position: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.position.fetch_add(read as u64, Ordering::Relaxed);
        Ok(read)
    }
}

/// Which column is the time, in which unit, and which columns are tags.
fn shape(args: &ImportArgs, format: FileFormat, schema: &Schema) -> Result<Shape, String> {
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let time_index = schema.index_of(&args.time_column).map_err(|_| {
        format!(
            "the file has no column {:?} (its columns: {}): name the time column with --time-column",
            args.time_column,
            columns.join(", ")
        )
    })?;
    if args.time_column != TIME_COLUMN && columns.contains(&TIME_COLUMN) {
        return Err(format!(
            "the file has a column \"time\" besides the time column {:?}: every table's time \
             column is named time",
            args.time_column
        ));
    }
    let epoch_factor = match args.epoch_unit.as_str() {
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "ns" => 1,
        other => {
            return Err(format!(
                "--epoch-unit must be s, ms, us or ns, not {other:?}"
            ))
        }
    };
    let is_text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    let tags: Vec<String> = match &args.tags {
        Some(listed) => listed
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        None => schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                *i != time_index
                    && match (format, f.data_type()) {
                        (FileFormat::Csv, t) => is_text(t),
                        (FileFormat::Parquet, DataType::Dictionary(_, value)) => is_text(value),
                        _ => false,
                    }
            })
            .map(|(_, f)| f.name().clone())
            .collect(),
    };
    for tag in &tags {
        if tag == &args.time_column {
            return Err(format!("the time column {tag:?} cannot also be a tag"));
        }
        let field = schema.field_with_name(tag).map_err(|_| {
            format!(
                "the tag column {tag:?} is not in the file (its columns: {})",
                columns.join(", ")
            )
        })?;
        let text = match field.data_type() {
            DataType::Dictionary(_, value) => is_text(value),
            other => is_text(other),
        };
        if !text {
            return Err(format!(
                "the tag column {tag:?} holds {}: tags are text",
                field.data_type()
            ));
        }
    }
    let skipped = schema
        .fields()
        .iter()
        .filter(|f| f.data_type() == &DataType::Null)
        .map(|f| f.name().clone())
        .collect();
    Ok(Shape {
        time_index,
        epoch_factor,
        tags,
        skipped,
    })
}

/// `batch` in Quiver's data model: the time column a UTC timestamp named `time`, tags
/// dictionary-encoded, columns with no values left out. `first_row` numbers its rows in errors.
fn shaped(batch: &RecordBatch, shape: &Shape, first_row: u64) -> Result<RecordBatch, String> {
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (index, field) in batch.schema().fields().iter().enumerate() {
        let column = batch.column(index);
        if shape.skipped.contains(field.name()) {
            continue;
        }
        if index == shape.time_index {
            let time = time_column(column, shape.epoch_factor, field.name(), first_row)?;
            fields.push(Field::new(TIME_COLUMN, time.data_type().clone(), false));
            columns.push(time);
        } else if shape.tags.contains(field.name()) {
            // through plain text, so that the dictionary holds only this batch's values (a
            // Parquet dictionary may hold the whole file's, sent again with every request)
            let tag_type = tag_data_type();
            let tag = arrow::compute::cast(column, &DataType::Utf8)
                .and_then(|text| arrow::compute::cast(&text, &tag_type))
                .map_err(|e| format!("the tag column {:?}: {e}", field.name()))?;
            fields.push(Field::new(field.name(), tag_type, true));
            columns.push(tag);
        } else {
            fields.push(field.as_ref().clone().with_nullable(true));
            columns.push(column.clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}

/// The time column as nanoseconds in UTC: timestamps and dates cast, RFC 3339 text parsed,
/// integers multiplied from their epoch unit (overflow and missing times are errors naming the
/// row).
fn time_column(
    column: &ArrayRef,
    epoch_factor: i64,
    name: &str,
    first_row: u64,
) -> Result<ArrayRef, String> {
    let nanos_utc = time_data_type();
    let row = |i: usize| first_row + i as u64 + 1;
    if let Some(missing) = (0..column.len()).find(|&i| column.is_null(i)) {
        return Err(format!(
            "data row {}: the time column {name:?} is empty",
            row(missing)
        ));
    }
    let time: ArrayRef = match column.data_type() {
        t if t.is_integer() => {
            let exact = CastOptions {
                safe: false,
                ..Default::default()
            };
            let integers = cast_with_options(column, &DataType::Int64, &exact)
                .map_err(|e| format!("the time column {name:?} (rows from {}): {e}", row(0)))?;
            let integers = integers.as_primitive::<Int64Type>();
            let mut nanos = Vec::with_capacity(integers.len());
            for (i, value) in integers.values().iter().enumerate() {
                nanos.push(value.checked_mul(epoch_factor).ok_or_else(|| {
                    format!("data row {}: the time {value} overflows nanoseconds since 1970", row(i))
                })?);
            }
            Arc::new(TimestampNanosecondArray::from(nanos).with_timezone(UTC))
        }
        DataType::Timestamp(_, _)
        | DataType::Date32
        | DataType::Date64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View => {
            let options = CastOptions {
                safe: false,
                ..Default::default()
            };
            cast_with_options(column, &nanos_utc, &options)
                .map_err(|e| format!("the time column {name:?} (rows from {}): {e}", row(0)))?
        }
        other => {
            return Err(format!(
                "the time column {name:?} holds {other}: it must be a timestamp, a date, RFC 3339 text or an integer"
            ))
        }
    };
    Ok(time)
}

/// Writes `batch` (as the file holds it) in Quiver's data model as one Arrow IPC request, or in
/// halves while one is too big; `written` counts the rows each request wrote.
fn send(
    args: &ImportArgs,
    table: &str,
    batch: &RecordBatch,
    shape: &Shape,
    written: &mut u64,
) -> Result<(), String> {
    let body = ipc_stream(&shaped(batch, shape, *written)?)?;
    // halves are shaped anew, each with the dictionaries of its own rows, so they shrink
    if body.len() > MAX_REQUEST_BYTES && batch.num_rows() > 1 {
        let half = batch.num_rows() / 2;
        send(args, table, &batch.slice(0, half), shape, written)?;
        return send(
            args,
            table,
            &batch.slice(half, batch.num_rows() - half),
            shape,
            written,
        );
    }
    let request = args
        .server
        .post("/api/v3/write_arrow")?
        .query(&[("db", args.db.as_str()), ("table", table)])
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/vnd.apache.arrow.stream",
        )
        .body(body);
    let reply = exchange(request)?;
    if !reply.status.is_success() {
        return Err(describe_error(reply.status, &reply.body));
    }
    *written += batch.num_rows() as u64;
    Ok(())
}

fn ipc_stream(batch: &RecordBatch) -> Result<Vec<u8>, String> {
    let mut writer =
        StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(|e| e.to_string())?;
    writer.write(batch).map_err(|e| e.to_string())?;
    writer.into_inner().map_err(|e| e.to_string())
}

/// The message of an import stopped after `written` rows.
fn stopped(args: &ImportArgs, written: u64, why: &str) -> String {
    format!(
        "{why}\nstopped after {written} row{} of {} written to database {:?}; the rest was not \
         written (importing the whole file again rewrites the same points: a point written \
         twice keeps its last value)",
        super::plural(written as usize),
        args.file.display(),
        args.db
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn shape_of(tags: Vec<&str>) -> Shape {
        Shape {
            time_index: 0,
            epoch_factor: 1_000,
            tags: tags.into_iter().map(str::to_string).collect(),
            skipped: vec![],
        }
    }

    #[test]
    fn integer_times_scale_to_nanoseconds_and_tags_become_dictionaries() {
        let batch = RecordBatch::try_from_iter([
            ("at", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            (
                "host",
                Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
            ),
            (
                "note",
                Arc::new(StringArray::from(vec![Some("x"), None])) as ArrayRef,
            ),
        ])
        .unwrap();
        let shaped = shaped(&batch, &shape_of(vec!["host"]), 0).unwrap();
        let time = shaped.column_by_name("time").unwrap();
        assert_eq!(time.data_type(), &time_data_type());
        assert_eq!(
            time.as_primitive::<arrow::datatypes::TimestampNanosecondType>()
                .values(),
            &[1_000, 2_000]
        );
        assert!(matches!(
            shaped.column_by_name("host").unwrap().data_type(),
            DataType::Dictionary(_, _)
        ));
        assert_eq!(
            shaped.column_by_name("note").unwrap().data_type(),
            &DataType::Utf8
        );
    }

    #[test]
    fn bad_times_name_their_row() {
        let text =
            Arc::new(StringArray::from(vec!["2024-01-01T00:00:00Z", "yesterday"])) as ArrayRef;
        let err = time_column(&text, 1, "t", 10).unwrap_err();
        assert!(err.contains("yesterday"), "{err}");
        let empty =
            Arc::new(StringArray::from(vec![Some("2024-01-01T00:00:00Z"), None])) as ArrayRef;
        assert!(time_column(&empty, 1, "t", 10)
            .unwrap_err()
            .starts_with("data row 12:"));
        let unsigned = Arc::new(arrow::array::UInt64Array::from(vec![u64::MAX])) as ArrayRef;
        assert!(time_column(&unsigned, 1, "t", 0).is_err());
        let huge = Arc::new(Int64Array::from(vec![i64::MAX / 10])) as ArrayRef;
        assert!(time_column(&huge, 1_000_000_000, "t", 0)
            .unwrap_err()
            .contains("overflows"));
        let parsed = time_column(&text.slice(0, 1), 1, "t", 0).unwrap();
        assert_eq!(
            parsed
                .as_primitive::<arrow::datatypes::TimestampNanosecondType>()
                .value(0),
            1_704_067_200_000_000_000
        );
    }
}

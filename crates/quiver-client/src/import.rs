//! Imports of Parquet and CSV files through the Arrow path (what `quiver import` runs). The
//! file is read in batches (Parquet's own reader, or Arrow's CSV reader with types inferred
//! from the whole file); each batch gets Quiver's data model (its time column as a timestamp
//! named `time`, tag columns dictionary-encoded) and is sent as an Arrow IPC stream to
//! `POST /api/v3/write_arrow`. A batch the server refuses stops the import, which says how
//! many rows were written before it; nothing is retried behind the caller's back.
//!
//! [`Import::open`] reads the file's schema and checks the options (nothing is sent if they do
//! not fit the file); [`Import::run`] sends it. The messages of [`ImportError`] name the
//! options as `quiver import`'s flags (`--time-column`, `--tags`, ...).

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, TimestampNanosecondArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::error::ArrowError;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_model::schema::{tag_data_type, time_data_type, TIME_COLUMN};

use crate::client::ipc_stream;
use crate::{Client, ClientError, DEFAULT_DATABASE};

/// The largest request body an import sends (half the server's default `max_request_bytes`);
/// a bigger batch is split.
const MAX_REQUEST_BYTES: usize = 32 << 20;

/// The time zone every imported time is in.
const UTC: &str = "UTC";

/// How to import a file: where to, and how its columns map onto Quiver's data model.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Database to write into (created on first write).
    pub db: String,
    /// Table to write into (`None`: the file's name without its extension).
    pub table: Option<String>,
    /// The column holding each row's time: a timestamp, a date, RFC 3339 text, or an integer
    /// in [`ImportOptions::epoch_unit`].
    pub time_column: String,
    /// Unit of an integer time column: `s`, `ms`, `us` or `ns`.
    pub epoch_unit: String,
    /// Tag columns (`None`: a CSV file's text columns, a Parquet file's dictionary-encoded
    /// text columns; an empty list for none).
    pub tags: Option<Vec<String>>,
    /// Rows per request (at most: a request bigger than 32 MiB is split).
    pub batch_rows: usize,
    /// The file's format (`None`: from its name, see [`FileFormat::detect`]).
    pub format: Option<FileFormat>,
}

impl Default for ImportOptions {
    /// `quiver import`'s defaults: database `default`, the table named after the file, time
    /// column `time` in nanoseconds if integer, tags inferred, 65,536 rows per request.
    fn default() -> Self {
        Self {
            db: DEFAULT_DATABASE.to_string(),
            table: None,
            time_column: TIME_COLUMN.to_string(),
            epoch_unit: "ns".to_string(),
            tags: None,
            batch_rows: 65_536,
            format: None,
        }
    }
}

/// The formats an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Apache Parquet.
    Parquet,
    /// CSV with a header line.
    Csv,
}

impl FileFormat {
    /// The format `named` (`parquet`, `pq` or `csv`), else the one `file`'s extension names
    /// (in any case); an error naming `--format` if neither is one of those.
    pub fn detect(file: &Path, named: Option<&str>) -> Result<FileFormat, ImportError> {
        let named = named.map(str::to_string).or_else(|| {
            file.extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase)
        });
        match named.as_deref() {
            Some("parquet") | Some("pq") => Ok(FileFormat::Parquet),
            Some("csv") => Ok(FileFormat::Csv),
            other => Err(ImportError::Refused(format!(
                "quiver import reads Parquet and CSV files; {} is {}: name its format with --format parquet|csv",
                file.display(),
                other.map_or("of no known kind".to_string(), |o| format!("{o:?}"))
            ))),
        }
    }
}

/// Why an import failed.
#[derive(Debug)]
pub enum ImportError {
    /// The file cannot be imported as the options say (unreadable, an unknown format, a
    /// missing or unfit time or tag column ...): nothing was sent.
    Refused(String),
    /// The import stopped after `written` rows were written; the rest was not.
    Stopped {
        /// Rows written before the import stopped.
        written: u64,
        /// What stopped it.
        cause: StopCause,
    },
}

/// What stopped an import part-way.
#[derive(Debug)]
pub enum StopCause {
    /// The file could not be read further.
    Read(ArrowError),
    /// A batch could not be put in Quiver's data model (a missing or bad time, a tag that
    /// cannot be text ...).
    Shape(String),
    /// The server could not be reached or refused a batch.
    Client(ClientError),
}

impl std::fmt::Display for StopCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read(e) => write!(f, "cannot read the file: {e}"),
            Self::Shape(why) => f.write_str(why),
            Self::Client(e) => e.fmt(f),
        }
    }
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(why) => f.write_str(why),
            Self::Stopped { written, cause } => write!(
                f,
                "{cause} (stopped after {written} row{} written)",
                plural(*written)
            ),
        }
    }
}

impl std::error::Error for ImportError {}

/// A file opened for import: its batches, and how each becomes a batch of Quiver's data model.
pub struct Import {
    table: String,
    db: String,
    input: Input,
    shape: Shape,
}

/// What an import wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// Rows written.
    pub rows: u64,
}

/// The batches of an input file, and how far through it the reading is.
struct Input {
    batches: Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>,
    schema: SchemaRef,
    /// The file's size in bytes.
    size: u64,
    /// Bytes of the file consumed so far.
    position: Box<dyn Fn() -> u64 + Send>,
}

/// How each batch of the file becomes a batch of Quiver's data model.
struct Shape {
    time_index: usize,
    epoch_factor: i64,
    tags: Vec<String>,
    /// Columns with no value in the whole file (CSV), not written.
    skipped: Vec<String>,
}

impl Import {
    /// Opens `file` for import: its format (unless [`ImportOptions::format`] names it), its
    /// schema, the table's name, and which columns are the time and the tags. Nothing is sent:
    /// options that do not fit the file are [`ImportError::Refused`].
    pub fn open(file: &Path, options: &ImportOptions) -> Result<Import, ImportError> {
        let format = match options.format {
            Some(format) => format,
            None => FileFormat::detect(file, None)?,
        };
        let table = match &options.table {
            Some(table) => table.clone(),
            None => file
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string)
                .ok_or_else(|| {
                    ImportError::Refused(format!(
                        "name the table with --table ({} has no usable name)",
                        file.display()
                    ))
                })?,
        };
        let input = open(file, format, options.batch_rows.max(1)).map_err(ImportError::Refused)?;
        let shape = shape(options, format, &input.schema).map_err(ImportError::Refused)?;
        Ok(Import {
            table,
            db: options.db.clone(),
            input,
            shape,
        })
    }

    /// The table the rows go into.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The tag columns.
    pub fn tags(&self) -> &[String] {
        &self.shape.tags
    }

    /// Columns with no value in the whole file (a CSV file's), which are not written.
    pub fn skipped_columns(&self) -> &[String] {
        &self.shape.skipped
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.input.size
    }

    /// Reads the file in batches and writes each through `client`; after each batch,
    /// `progress(bytes, rows)` is told how many more bytes of the file were consumed and rows
    /// written. The file is read with blocking I/O between requests.
    pub async fn run(
        self,
        client: &Client,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Imported, ImportError> {
        let Import {
            table,
            db,
            input,
            shape,
        } = self;
        let mut written = 0u64;
        let mut consumed = 0u64;
        for batch in input.batches {
            let batch = batch.map_err(|e| ImportError::Stopped {
                written,
                cause: StopCause::Read(e),
            })?;
            let sent = send(client, &db, &table, &batch, &shape, &mut written).await;
            sent.map_err(|cause| ImportError::Stopped { written, cause })?;
            let position = (input.position)();
            progress(position.saturating_sub(consumed), batch.num_rows() as u64);
            consumed = position;
        }
        Ok(Imported { rows: written })
    }
}

/// "s" unless `count` is one.
fn plural(count: u64) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
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
fn shape(options: &ImportOptions, format: FileFormat, schema: &Schema) -> Result<Shape, String> {
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let time_index = schema.index_of(&options.time_column).map_err(|_| {
        format!(
            "the file has no column {:?} (its columns: {}): name the time column with --time-column",
            options.time_column,
            columns.join(", ")
        )
    })?;
    if options.time_column != TIME_COLUMN && columns.contains(&TIME_COLUMN) {
        return Err(format!(
            "the file has a column \"time\" besides the time column {:?}: every table's time \
             column is named time",
            options.time_column
        ));
    }
    let epoch_factor = match options.epoch_unit.as_str() {
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
    let tags: Vec<String> = match &options.tags {
        Some(listed) => listed.clone(),
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
        if tag == &options.time_column {
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
async fn send(
    client: &Client,
    db: &str,
    table: &str,
    batch: &RecordBatch,
    shape: &Shape,
    written: &mut u64,
) -> Result<(), StopCause> {
    let body = ipc_stream(&shaped(batch, shape, *written).map_err(StopCause::Shape)?)
        .map_err(|e| StopCause::Client(ClientError::Arrow(e)))?;
    // halves are shaped anew, each with the dictionaries of its own rows, so they shrink
    if body.len() > MAX_REQUEST_BYTES && batch.num_rows() > 1 {
        let half = batch.num_rows() / 2;
        Box::pin(send(
            client,
            db,
            table,
            &batch.slice(0, half),
            shape,
            written,
        ))
        .await?;
        let rest = batch.slice(half, batch.num_rows() - half);
        return Box::pin(send(client, db, table, &rest, shape, written)).await;
    }
    client
        .write_arrow_stream(db, table, body)
        .await
        .map_err(StopCause::Client)?;
    *written += batch.num_rows() as u64;
    Ok(())
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
    fn formats_come_from_the_flag_else_the_extension() {
        let detect = |file: &str, named| FileFormat::detect(Path::new(file), named);
        assert_eq!(detect("a.PQ", None).unwrap(), FileFormat::Parquet);
        assert_eq!(detect("a.parquet", Some("csv")).unwrap(), FileFormat::Csv);
        assert_eq!(
            detect("data.xlsx", None).unwrap_err().to_string(),
            "quiver import reads Parquet and CSV files; data.xlsx is \"xlsx\": name its format \
             with --format parquet|csv"
        );
        assert!(detect("noext", None)
            .unwrap_err()
            .to_string()
            .contains("is of no known kind"));
    }

    #[test]
    fn opening_a_csv_file_infers_tags_and_skips_empty_columns() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("readings.csv");
        std::fs::write(&file, "ts,site,value,none\n1704067200,oslo,1.5,\n").unwrap();
        let options = ImportOptions {
            time_column: "ts".to_string(),
            epoch_unit: "s".to_string(),
            ..ImportOptions::default()
        };
        let import = Import::open(&file, &options).unwrap();
        assert_eq!(import.table(), "readings");
        assert_eq!(import.tags(), ["site"]);
        assert_eq!(import.skipped_columns(), ["none"]);
        assert_eq!(import.size(), std::fs::metadata(&file).unwrap().len());
        let refused = Import::open(
            &file,
            &ImportOptions {
                tags: Some(vec!["value".to_string()]),
                ..options
            },
        );
        let Err(ImportError::Refused(why)) = refused else {
            panic!("accepted a numeric tag")
        };
        assert!(why.contains("tags are text"), "{why}");
    }

    #[tokio::test]
    async fn a_file_is_written_in_batches_of_the_data_model() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("readings.csv");
        std::fs::write(&file, "time,site,value\n2024-01-01T00:00:00Z,oslo,1.5\n").unwrap();
        let import = Import::open(
            &file,
            &ImportOptions {
                db: "imp".to_string(),
                ..ImportOptions::default()
            },
        )
        .unwrap();
        let (url, served) = crate::test_server::answer_once("204 No Content", &[], Vec::new());
        let mut progress = Vec::new();
        let imported = import
            .run(&Client::new(url), |bytes, rows| {
                progress.push((bytes, rows))
            })
            .await
            .unwrap();
        assert_eq!(imported, Imported { rows: 1 });
        let size = std::fs::metadata(&file).unwrap().len();
        assert_eq!(progress, [(size, 1)]);
        let (head, body) = served.join().unwrap();
        assert!(
            head.starts_with("POST /api/v3/write_arrow?db=imp&table=readings HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("content-type: application/vnd.apache.arrow.stream\r\n"));
        let sent = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let schema = sent[0].schema();
        assert_eq!(schema.field(0).name(), "time");
        assert_eq!(schema.field(0).data_type(), &time_data_type());
        assert_eq!(schema.field(1).data_type(), &tag_data_type());
        assert_eq!(schema.field(2).data_type(), &DataType::Float64);
    }

    #[tokio::test]
    async fn a_refused_batch_stops_the_import_saying_how_far_it_got() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.csv");
        std::fs::write(&file, "time,v\n1,2\n").unwrap();
        let import = Import::open(&file, &ImportOptions::default()).unwrap();
        let (url, served) = crate::test_server::answer_once(
            "403 Forbidden",
            &[],
            br#"{"error":"no write access"}"#.to_vec(),
        );
        let stopped = import.run(&Client::new(url), |_, _| {}).await.unwrap_err();
        let ImportError::Stopped { written: 0, cause } = &stopped else {
            panic!("{stopped:?}")
        };
        assert_eq!(
            cause.to_string(),
            "server answered 403 Forbidden: no write access"
        );
        served.join().unwrap();
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

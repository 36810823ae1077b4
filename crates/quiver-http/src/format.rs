//! Result formats of the query API and how each is encoded from Arrow record batches.
//!
//! Every format but `pretty` is encoded batch by batch ([`StreamEncoder`]), so an answer is
//! sent as it is computed and a response never holds the whole of it; `pretty` sizes its
//! columns from the whole answer. JSON (array of objects keyed by column name, as InfluxDB 3
//! returns it) and JSON Lines render timestamps as RFC 3339 and omit null values; CSV has a
//! header row; `pretty` is the bordered table `quiver query` prints.

use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::writer::StreamWriter;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use quiver_service::EncodingKey;

/// A result format; also the key a cached answer keeps its encoded body under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON array of objects.
    Json,
    /// One JSON object per line.
    JsonLines,
    /// Comma-separated values with a header.
    Csv,
    /// Arrow IPC stream.
    Arrow,
    /// A Parquet file.
    Parquet,
    /// A human-readable table.
    Pretty,
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "json" => Format::Json,
            "jsonl" => Format::JsonLines,
            "csv" => Format::Csv,
            "arrow" => Format::Arrow,
            "parquet" => Format::Parquet,
            "pretty" => Format::Pretty,
            other => {
                return Err(format!(
                    "unknown format {other:?}: expected json, jsonl, csv, arrow, parquet or pretty"
                ))
            }
        })
    }
}

impl EncodingKey for Format {}

impl Format {
    /// The format an `Accept` header asks for, if it names one we serve.
    pub fn from_accept(accept: &str) -> Option<Format> {
        accept.split(',').find_map(|part| {
            let media = part.split(';').next().unwrap_or("").trim();
            Some(match media {
                "application/json" => Format::Json,
                "application/jsonl" | "application/x-ndjson" | "application/jsonlines" => {
                    Format::JsonLines
                }
                "text/csv" => Format::Csv,
                "application/vnd.apache.arrow.stream" => Format::Arrow,
                "application/vnd.apache.parquet" | "application/x-parquet" => Format::Parquet,
                "text/plain" => Format::Pretty,
                _ => return None,
            })
        })
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::JsonLines => "application/jsonl",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Arrow => "application/vnd.apache.arrow.stream",
            Format::Parquet => "application/vnd.apache.parquet",
            Format::Pretty => "text/plain; charset=utf-8",
        }
    }

    /// Encodes a whole result (what the result cache keeps): the same bytes a streamed
    /// answer is made of.
    pub fn encode(
        self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Vec<u8>, ArrowError> {
        let Some(mut encoder) = StreamEncoder::new(self, schema)? else {
            return encode_pretty(schema, batches);
        };
        let mut out = Vec::new();
        for batch in batches {
            out.extend(encoder.encode(batch)?);
        }
        out.extend(encoder.finish()?);
        Ok(out)
    }
}

fn encode_pretty(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let text = arrow::util::pretty::pretty_format_batches(batches)?.to_string();
    Ok(if batches.iter().all(|b| b.num_rows() == 0) {
        format!("{}\n(0 rows)\n", header_only(schema)?)
    } else {
        text + "\n"
    }
    .into_bytes())
}

fn header_only(schema: &SchemaRef) -> Result<String, ArrowError> {
    let empty = RecordBatch::new_empty(schema.clone());
    Ok(arrow::util::pretty::pretty_format_batches(&[empty])?.to_string())
}

/// Dictionary columns (tags) become plain strings for the text encoders.
fn without_dictionaries(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Dictionary(_, _)))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        match field.data_type() {
            DataType::Dictionary(_, value) => {
                columns.push(arrow::compute::cast(column, value)?);
                fields.push(Field::new(
                    field.name(),
                    value.as_ref().clone(),
                    field.is_nullable(),
                ));
            }
            _ => {
                columns.push(column.clone());
                fields.push(field.as_ref().clone());
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// Rows per row group of a Parquet answer (what the encoder holds before it sends)...
const PARQUET_ANSWER_ROW_GROUP_ROWS: usize = 65_536;

/// ... and bytes: a row group ends at whichever comes first, so wide rows cannot make the
/// encoder hold gigabytes before the first byte goes out.
const PARQUET_ANSWER_ROW_GROUP_BYTES: usize = 8 << 20;

/// Where a streaming encoder writes: a buffer the bytes of each batch are taken from.
#[derive(Clone, Default)]
struct Sink(Arc<parking_lot::Mutex<Vec<u8>>>);

impl Sink {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock())
    }
}

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One format's writer.
enum Writer {
    JsonArray(arrow::json::ArrayWriter<Sink>),
    JsonLines(arrow::json::LineDelimitedWriter<Sink>),
    Csv(arrow::csv::Writer<Sink>),
    Arrow(StreamWriter<Sink>),
    Parquet(ArrowWriter<Sink>),
}

/// Encodes an answer batch by batch, so that a response never holds the whole of it: each
/// call returns the bytes that batch adds (Parquet's come a row group at a time).
pub struct StreamEncoder {
    writer: Writer,
    sink: Sink,
    schema: SchemaRef,
    /// Bytes were returned already (an empty JSON array still needs its brackets).
    emitted: bool,
    /// A batch was written (an empty CSV answer still needs its header).
    wrote_batch: bool,
}

impl StreamEncoder {
    /// An encoder for `format`; `None` for `pretty`, which needs the whole answer to size its
    /// columns.
    pub fn new(format: Format, schema: &SchemaRef) -> Result<Option<Self>, ArrowError> {
        let sink = Sink::default();
        let writer = match format {
            Format::Json => Writer::JsonArray(arrow::json::ArrayWriter::new(sink.clone())),
            Format::JsonLines => {
                Writer::JsonLines(arrow::json::LineDelimitedWriter::new(sink.clone()))
            }
            Format::Csv => Writer::Csv(
                arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(sink.clone()),
            ),
            Format::Arrow => Writer::Arrow(StreamWriter::try_new(sink.clone(), schema)?),
            Format::Parquet => {
                // a row group is held until it is written: keep it small, so the answer
                // goes out as it is computed
                let properties = WriterProperties::builder()
                    .set_compression(Compression::ZSTD(ZstdLevel::default()))
                    .set_max_row_group_row_count(Some(PARQUET_ANSWER_ROW_GROUP_ROWS))
                    .set_max_row_group_bytes(Some(PARQUET_ANSWER_ROW_GROUP_BYTES))
                    .build();
                Writer::Parquet(
                    ArrowWriter::try_new(sink.clone(), schema.clone(), Some(properties))
                        .map_err(parquet_error)?,
                )
            }
            Format::Pretty => return Ok(None),
        };
        Ok(Some(StreamEncoder {
            writer,
            sink,
            schema: schema.clone(),
            emitted: false,
            wrote_batch: false,
        }))
    }

    /// Encodes one batch; returns the bytes produced so far and not yet returned.
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
        match &mut self.writer {
            Writer::JsonArray(w) => w.write(&without_dictionaries(batch)?)?,
            Writer::JsonLines(w) => w.write(&without_dictionaries(batch)?)?,
            Writer::Csv(w) => w.write(&without_dictionaries(batch)?)?,
            Writer::Arrow(w) => w.write(batch)?,
            Writer::Parquet(w) => w.write(batch).map_err(parquet_error)?,
        }
        self.wrote_batch = true;
        Ok(self.take())
    }

    /// Ends the answer; returns its last bytes.
    pub fn finish(self) -> Result<Vec<u8>, ArrowError> {
        match self.writer {
            Writer::JsonArray(mut w) => {
                w.finish()?;
                if !self.emitted && self.sink.0.lock().is_empty() {
                    return Ok(b"[]".to_vec());
                }
            }
            Writer::JsonLines(mut w) => w.finish()?,
            Writer::Csv(mut w) if !self.wrote_batch => {
                let empty = RecordBatch::new_empty(self.schema.clone());
                w.write(&without_dictionaries(&empty)?)?;
            }
            Writer::Csv(_) => {}
            Writer::Arrow(mut w) => w.finish()?,
            Writer::Parquet(w) => {
                w.close().map_err(parquet_error)?;
            }
        }
        Ok(self.sink.take())
    }

    /// The bytes the schema alone produces (Arrow's schema message), without waiting for a
    /// batch.
    pub fn head(&mut self) -> Vec<u8> {
        self.take()
    }

    /// A last record saying the answer failed, for the formats that can carry one (JSON
    /// Lines: `{"error": "..."}`); the response is then cut short all the same.
    pub fn error_record(&self, message: &str) -> Option<Vec<u8>> {
        match self.writer {
            Writer::JsonLines(_) => {
                let mut line = serde_json::to_vec(&serde_json::json!({ "error": message }))
                    .expect("a JSON object serializes");
                line.push(b'\n');
                Some(line)
            }
            _ => None,
        }
    }

    fn take(&mut self) -> Vec<u8> {
        let bytes = self.sink.take();
        self.emitted |= !bytes.is_empty();
        bytes
    }
}

fn parquet_error(e: parquet::errors::ParquetError) -> ArrowError {
    ArrowError::ExternalError(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, StringDictionaryBuilder, TimestampNanosecondArray};
    use arrow::datatypes::{Int32Type, TimeUnit};

    fn sample() -> (SchemaRef, RecordBatch) {
        let mut host = StringDictionaryBuilder::<Int32Type>::new();
        host.append_value("a");
        host.append_null();
        let schema = Arc::new(Schema::new(vec![
            Field::new(
                "host",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
            Field::new("v", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(host.finish()),
                Arc::new(
                    TimestampNanosecondArray::from(vec![0, 1_500_000_000]).with_timezone("UTC"),
                ),
                Arc::new(Float64Array::from(vec![Some(1.5), None])),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    #[test]
    fn json_is_an_array_of_objects_with_rfc3339_times() {
        let (schema, batch) = sample();
        let out = String::from_utf8(Format::Json.encode(&schema, &[batch]).unwrap()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value[0]["host"], "a");
        assert_eq!(value[0]["v"], 1.5);
        let t = value[1]["time"].as_str().unwrap();
        assert!(t.starts_with("1970-01-01T00:00:01.5"), "{t}");
        assert!(value[1].get("v").is_none(), "nulls are omitted");
        let empty = Format::Json.encode(&schema, &[]).unwrap();
        assert_eq!(empty, b"[]");
    }

    #[test]
    fn arrow_stream_round_trips() {
        let (schema, batch) = sample();
        let bytes = Format::Arrow
            .encode(&schema, &[batch.clone(), batch.clone()])
            .unwrap();
        let reader = arrow::ipc::reader::StreamReader::try_new(&bytes[..], None).unwrap();
        let read: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1], batch);
    }

    #[test]
    fn text_formats() {
        let (schema, batch) = sample();
        let csv = String::from_utf8(
            Format::Csv
                .encode(&schema, std::slice::from_ref(&batch))
                .unwrap(),
        )
        .unwrap();
        assert!(csv.starts_with("host,time,v\n"), "{csv}");
        let pretty = String::from_utf8(
            Format::Pretty
                .encode(&schema, std::slice::from_ref(&batch))
                .unwrap(),
        )
        .unwrap();
        assert!(pretty.contains("| host |"), "{pretty}");
        let empty = String::from_utf8(Format::Pretty.encode(&schema, &[]).unwrap()).unwrap();
        assert!(empty.contains("(0 rows)"));
        let jsonl =
            String::from_utf8(Format::JsonLines.encode(&schema, &[batch]).unwrap()).unwrap();
        assert_eq!(jsonl.lines().count(), 2);
    }

    #[test]
    fn accept_header_negotiation() {
        assert_eq!(
            Format::from_accept("application/vnd.apache.arrow.stream"),
            Some(Format::Arrow)
        );
        assert_eq!(
            Format::from_accept("text/html, text/csv;q=0.9"),
            Some(Format::Csv)
        );
        assert_eq!(Format::from_accept("*/*"), None);
        assert!("xml".parse::<Format>().is_err());
    }
}

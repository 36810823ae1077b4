//! Result formats of the query API and how each is encoded from Arrow record batches.
//!
//! `arrow` is streamed batch by batch as an Arrow IPC stream; the text formats and Parquet are
//! encoded from the collected result. JSON (array of objects keyed by column name, as InfluxDB 3
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
use quiver_cache::EncodingKey;

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

    /// Encodes a whole result in one of the collected formats (everything but `arrow`, which
    /// [`ArrowStreamEncoder`] streams; this also handles it, for completeness).
    pub fn encode(
        self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<Vec<u8>, ArrowError> {
        match self {
            Format::Json => encode_json(batches, true),
            Format::JsonLines => encode_json(batches, false),
            Format::Csv => encode_csv(schema, batches),
            Format::Pretty => {
                let text = arrow::util::pretty::pretty_format_batches(batches)?.to_string();
                Ok(if batches.iter().all(|b| b.num_rows() == 0) {
                    format!("{}\n(0 rows)\n", header_only(schema)?)
                } else {
                    text + "\n"
                }
                .into_bytes())
            }
            Format::Parquet => encode_parquet(schema, batches),
            Format::Arrow => {
                let mut encoder = ArrowStreamEncoder::new(schema)?;
                let mut out = encoder.take_bytes();
                for batch in batches {
                    out.extend(encoder.encode(batch)?);
                }
                out.extend(encoder.finish()?);
                Ok(out)
            }
        }
    }
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

fn encode_json(batches: &[RecordBatch], array: bool) -> Result<Vec<u8>, ArrowError> {
    let plain = batches
        .iter()
        .map(without_dictionaries)
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&RecordBatch> = plain.iter().collect();
    if array {
        let mut writer = arrow::json::ArrayWriter::new(Vec::new());
        writer.write_batches(&refs)?;
        writer.finish()?;
        let mut out = writer.into_inner();
        if out.is_empty() {
            out.extend_from_slice(b"[]");
        }
        Ok(out)
    } else {
        let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
        writer.write_batches(&refs)?;
        writer.finish()?;
        Ok(writer.into_inner())
    }
}

fn encode_csv(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let mut writer = arrow::csv::WriterBuilder::new()
        .with_header(true)
        .build(Vec::new());
    if batches.is_empty() {
        writer.write(&without_dictionaries(&RecordBatch::new_empty(
            schema.clone(),
        ))?)?;
    }
    for batch in batches {
        writer.write(&without_dictionaries(batch)?)?;
    }
    Ok(writer.into_inner())
}

fn encode_parquet(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let to_arrow = |e: parquet::errors::ParquetError| ArrowError::ExternalError(Box::new(e));
    let mut writer =
        ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties)).map_err(to_arrow)?;
    for batch in batches {
        writer.write(batch).map_err(to_arrow)?;
    }
    writer.into_inner().map_err(to_arrow)
}

/// Encodes an Arrow IPC stream incrementally: the schema message first, then one chunk of bytes
/// per batch, then the end-of-stream marker, so a response never holds the whole result.
pub struct ArrowStreamEncoder {
    writer: StreamWriter<Vec<u8>>,
}

impl ArrowStreamEncoder {
    /// Starts a stream; the schema message is available from [`Self::take_bytes`].
    pub fn new(schema: &SchemaRef) -> Result<Self, ArrowError> {
        Ok(ArrowStreamEncoder {
            writer: StreamWriter::try_new(Vec::new(), schema)?,
        })
    }

    /// Bytes produced so far and not yet taken.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(self.writer.get_mut())
    }

    /// Encodes one batch and returns its bytes.
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
        self.writer.write(batch)?;
        Ok(self.take_bytes())
    }

    /// Ends the stream and returns the final bytes.
    pub fn finish(&mut self) -> Result<Vec<u8>, ArrowError> {
        self.writer.finish()?;
        Ok(self.take_bytes())
    }
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

//! Which Arrow types a Flight SQL caller receives: the data model's own, or portable ones for
//! the Java clients that misread dictionaries and unsigned integers.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::error::FlightError;
use quiver_service::EncodingKey;
use tonic::metadata::MetadataMap;
use tonic::Status;

/// Which Arrow types a caller receives; also the key a cached answer keeps its Flight data
/// under (see `frames` in the crate root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResultTypes {
    /// The data model's types as they are: tags dictionary-encoded, unsigned integers
    /// unsigned (ADBC, pyarrow and Arrow C++/Go/Rust read them).
    Native,
    /// Types every JDBC-style client reads correctly, as the PostgreSQL protocol maps them:
    /// dictionary-encoded columns as plain columns of their values (the Flight SQL JDBC
    /// driver reads a dictionary column's keys as its values), `UInt8`/`UInt16`/`UInt32` as
    /// the next wider signed integer and `UInt64` as `Decimal128(20, 0)` (the driver reads
    /// unsigned values as signed: 2^64 - 1 would arrive as -1).
    Portable,
    /// What InfluxDB 3 sends its client libraries (whose Go client refuses dictionaries):
    /// dictionary-encoded columns as plain columns of their values, everything else as it is.
    Hydrated,
}

impl ResultTypes {
    /// The header that chooses explicitly: `native`, `portable` or `hydrated`.
    const HEADER: &'static str = "quiver-result-types";

    /// What the caller of a request with `metadata` gets: the `quiver-result-types` header's
    /// choice, or else `Portable` for Arrow Java's Flight client (user agent `grpc-java…`,
    /// which the JDBC driver uses) and `Native` for everyone else.
    pub(crate) fn of(metadata: &MetadataMap) -> Result<Self, Status> {
        Ok(Self::chosen(metadata)?.unwrap_or_else(|| Self::by_agent(metadata)))
    }

    /// What a caller of InfluxDB 3's JSON tickets gets: the header's choice, or else
    /// `Portable` for Java (see [`ResultTypes::of`]) and `Hydrated` for the others, as
    /// InfluxDB 3 answers them.
    pub(crate) fn of_influxdb3_client(metadata: &MetadataMap) -> Result<Self, Status> {
        Ok(match Self::chosen(metadata)? {
            Some(chosen) => chosen,
            None => match Self::by_agent(metadata) {
                ResultTypes::Native => ResultTypes::Hydrated,
                other => other,
            },
        })
    }

    /// The `quiver-result-types` header's choice, if it makes one.
    fn chosen(metadata: &MetadataMap) -> Result<Option<Self>, Status> {
        let Some(choice) = metadata.get(Self::HEADER) else {
            return Ok(None);
        };
        match choice.to_str().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("native") => Ok(Some(ResultTypes::Native)),
            Ok(v) if v.eq_ignore_ascii_case("portable") => Ok(Some(ResultTypes::Portable)),
            Ok(v) if v.eq_ignore_ascii_case("hydrated") => Ok(Some(ResultTypes::Hydrated)),
            _ => Err(Status::invalid_argument(format!(
                "{}: expected `native`, `portable` or `hydrated`",
                Self::HEADER
            ))),
        }
    }

    /// `Portable` for Arrow Java's Flight client, `Native` for everyone else.
    fn by_agent(metadata: &MetadataMap) -> Self {
        let java = metadata
            .get("user-agent")
            .and_then(|agent| agent.to_str().ok())
            .is_some_and(|agent| agent.starts_with("grpc-java"));
        if java {
            ResultTypes::Portable
        } else {
            ResultTypes::Native
        }
    }

    /// The type this caller receives a column of `data_type` as.
    fn data_type(self, data_type: &DataType) -> DataType {
        match (self, data_type) {
            (ResultTypes::Native, _) => data_type.clone(),
            (ResultTypes::Portable, DataType::Dictionary(_, value)) => self.data_type(value),
            (ResultTypes::Portable, DataType::UInt8) => DataType::Int16,
            (ResultTypes::Portable, DataType::UInt16) => DataType::Int32,
            (ResultTypes::Portable, DataType::UInt32) => DataType::Int64,
            (ResultTypes::Portable, DataType::UInt64) => DataType::Decimal128(20, 0),
            (ResultTypes::Portable, other) => other.clone(),
            (ResultTypes::Hydrated, DataType::Dictionary(_, value)) => self.data_type(value),
            (ResultTypes::Hydrated, other) => other.clone(),
        }
    }

    /// `schema` as this caller receives it.
    pub(crate) fn schema(self, schema: &SchemaRef) -> SchemaRef {
        if schema
            .fields()
            .iter()
            .all(|f| &self.data_type(f.data_type()) == f.data_type())
        {
            return schema.clone();
        }
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_data_type(self.data_type(f.data_type()))
            })
            .collect();
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }

    /// `batch` in the types of [`ResultTypes::schema`] (every conversion is lossless).
    pub(crate) fn batch(self, batch: RecordBatch) -> Result<RecordBatch, FlightError> {
        let schema = self.schema(&batch.schema());
        if Arc::ptr_eq(&schema, &batch.schema()) {
            return Ok(batch);
        }
        let columns = batch
            .columns()
            .iter()
            .zip(schema.fields())
            .map(|(column, field)| arrow::compute::cast(column, field.data_type()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

impl EncodingKey for ResultTypes {}

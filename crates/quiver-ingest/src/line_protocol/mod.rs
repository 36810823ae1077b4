//! InfluxDB line protocol: the tokenizer ([`LineParser`]), timestamp precision, and the decoder
//! that turns a request body into one Arrow [`RecordBatch`](arrow::record_batch::RecordBatch)
//! per table ([`decode_line_protocol`]).

mod batch;
mod parser;
mod precision;

pub use batch::{decode_line_protocol, DecodeOptions, DecodedWrite, LineError};
pub use parser::{EntrySpan, FieldValue, LineParser, ParsedLine, SyntaxError};
pub use precision::{InvalidPrecision, Precision};

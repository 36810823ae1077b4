//! Arc-compatible MessagePack writes, decoded in one pass over the bytes straight into Arrow
//! arrays: no value tree, no map per row, numbers read in place and strings borrowed until
//! they are copied into an Arrow buffer.
//!
//! A payload is a record, `{"batch": [records]}`, an array of records, or several of these one
//! after another. A record is either
//! - **columnar**: `{"m": "cpu", "columns": {"time": [...], "host": [...], "usage": [...]}}` with
//!   arrays of equal length (`nil` for a missing value). String columns are tags and every
//!   other column is a field, unless the record lists its tags in `"tag_keys": [...]` (Arc's
//!   newer form: then exactly those columns are tags); a record-level `"tags": {...}` map adds
//!   the same tags to every row (`"h"` adds the `host` tag). Without a `time` column every row
//!   gets the record's `"t"`, or else the request's time. A record needs at least one field
//!   column with a value, as a line of line protocol needs a field.
//! - **row**: `{"m": "cpu", "t": 1700000000000, "tags": {...}, "fields": {...}}`, with `"h"`
//!   as shorthand for the `host` tag and `"f": [...]` for fields named `field_0`, `field_1`, ...
//!   A missing `t` is the request's time.
//!
//! `m` may be an integer (Arc's numeric measurement ids: `measurement_<n>`). Timestamps are
//! integers or floats whose unit is inferred from their magnitude as Arc does (below 1e10
//! seconds, below 1e13 milliseconds, below 1e16 microseconds, otherwise nanoseconds; a
//! columnar `time` column by its first value), or MessagePack timestamps (extension -1),
//! exact to the nanosecond. Unknown keys are ignored.
//!
//! Values are typed as [`column`] says and then fitted to the table's existing schema as
//! [`table`] says. Unlike Arc, a bad record fails the whole request (nothing of it is
//! written) with an error naming the byte offset or the record (0-based, in payload order),
//! and a record without `h` keeps the `host` tag it sends.
//!
//! Over 700 lines: the streaming decoder's state machine and the record shapes it accepts,
//! kept together; its tests live in `tests.rs`.

mod column;
mod reader;
mod table;

use std::borrow::Cow;

use self::column::Column;
use self::reader::{Item, ReadError, Reader, Scalar};
use self::table::{Piece, Role, TableError, Tables};
use quiver_model::schema::{DecodedTable, SchemaLookup, TIME_COLUMN};

/// How to decode a request.
#[derive(Debug, Clone)]
pub struct MsgpackOptions {
    /// The request's time (ns since the epoch), for records without one.
    pub default_time_ns: i64,
}

/// Why a payload was rejected, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}{}", location(*.offset, *.record))]
pub struct MsgpackError {
    /// Byte offset in the (decompressed) payload, when the fault is at one.
    pub offset: Option<usize>,
    /// The record at fault (0-based, in payload order), when one is.
    pub record: Option<usize>,
    /// What is wrong.
    pub message: String,
}

fn location(offset: Option<usize>, record: Option<usize>) -> String {
    match (record, offset) {
        (Some(r), Some(o)) => format!(" (record {r}, at byte {o})"),
        (Some(r), None) => format!(" (record {r})"),
        (None, Some(o)) => format!(" (at byte {o})"),
        (None, None) => String::new(),
    }
}

/// Decodes a MessagePack write into one table per measurement, typed to fit the tables
/// `existing` knows. All or nothing: the first problem fails the whole payload.
pub fn decode_msgpack(
    body: &[u8],
    options: &MsgpackOptions,
    existing: &dyn SchemaLookup,
) -> Result<Vec<DecodedTable>, MsgpackError> {
    let mut stream = MsgpackStream::new(options);
    stream.decode(body, true)?;
    stream.finish(existing)
}

/// A MessagePack write decoded as its bytes arrive, so a request body need not be held whole:
/// each call to [`MsgpackStream::decode`] decodes the records that are complete in the bytes
/// given and says how many bytes it used; the caller keeps the rest, appends what arrives and
/// calls again. The records of one payload give the same tables and the same errors however
/// its bytes are split ([`decode_msgpack`] is one call with every byte).
///
/// A record is the unit: the header of an array of records (or of `{"batch": [...]}`) is
/// consumed on its own, then each record once it is complete. A single columnar record holds
/// all its rows, so it is decoded only once all its bytes are there.
pub struct MsgpackStream {
    tables: Tables,
    default_time: i64,
    /// Records decoded so far (the next record's index).
    records: usize,
    /// Payload bytes consumed so far: the offset of the first byte the next call gets.
    consumed: usize,
    /// Records still to come in the array (top-level or `batch`) being read.
    array_left: Option<u32>,
}

impl MsgpackStream {
    /// A decoder at the start of a payload.
    pub fn new(options: &MsgpackOptions) -> Self {
        MsgpackStream {
            tables: Tables::default(),
            default_time: options.default_time_ns,
            records: 0,
            consumed: 0,
            array_left: None,
        }
    }

    /// Payload bytes consumed so far.
    pub fn consumed(&self) -> usize {
        self.consumed
    }

    /// Decodes every whole record at the start of `available`, the payload's bytes from
    /// [`MsgpackStream::consumed`] on, and returns how many of its bytes were used. A record
    /// cut off by the end of `available` waits for the next call, unless `last` says no
    /// bytes follow: then it is an error, as is an empty payload.
    pub fn decode(&mut self, available: &[u8], last: bool) -> Result<usize, MsgpackError> {
        if last && self.consumed == 0 && available.is_empty() {
            return Err(MsgpackError {
                offset: Some(0),
                record: None,
                message: "empty payload".into(),
            });
        }
        let mut decoder = Decoder {
            reader: Reader::new(available, self.consumed),
            default_time: self.default_time,
            tables: std::mem::take(&mut self.tables),
            records: self.records,
            tags: Vec::new(),
            fields: Vec::new(),
            truncated: false,
        };
        let mut used = 0;
        let outcome = loop {
            if self.array_left.is_none() && decoder.reader.at_end() {
                break Ok(());
            }
            match decoder.unit(self.array_left) {
                Ok(array_left) => {
                    self.array_left = array_left;
                    used = decoder.reader.position();
                    self.records = decoder.records;
                }
                // A unit cut off by the end of the bytes so far: the next call retries it.
                Err(_) if decoder.truncated && !last => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.tables = decoder.tables;
        self.consumed += used;
        outcome.map(|()| used)
    }

    /// The decoded tables, typed to fit the tables `existing` knows.
    pub fn finish(self, existing: &dyn SchemaLookup) -> Result<Vec<DecodedTable>, MsgpackError> {
        self.tables
            .finish(existing)
            .map_err(|TableError { record, message }| MsgpackError {
                offset: None,
                record,
                message,
            })
    }
}

struct Decoder<'a> {
    reader: Reader<'a>,
    default_time: i64,
    tables: Tables,
    /// Records seen so far (the next record's index).
    records: usize,
    /// The current row record's tags (reused: no allocation per row).
    tags: Vec<(&'a str, Cow<'a, str>)>,
    /// The current row record's fields (reused).
    fields: Vec<(&'a str, Scalar<'a>)>,
    /// The last error was the bytes running out (more bytes may complete the value).
    truncated: bool,
}

/// The `columns` of a columnar record, decoded.
struct Columns<'a> {
    /// The `time` column in nanoseconds (empty if the record has none).
    time: Vec<i64>,
    /// Every other column.
    values: Vec<(&'a str, Column)>,
    /// The number of rows (every array's length).
    rows: usize,
}

/// What a record's keys said, as they were read (they may come in any order).
#[derive(Default)]
struct RecordKeys<'a> {
    measurement: Option<Cow<'a, str>>,
    time: Option<i64>,
    host: Option<Cow<'a, str>>,
    has_fields: bool,
    columns: Option<Columns<'a>>,
    tag_keys: Option<Vec<&'a str>>,
}

/// What a top-level map turned out to be.
enum TopLevelMap {
    /// A record (decoded).
    Record,
    /// `{"batch": [...]}` with this many records to come.
    Batch(u32),
}

impl<'a> Decoder<'a> {
    fn error(&mut self, e: ReadError, record: Option<usize>) -> MsgpackError {
        self.truncated = e.truncated;
        MsgpackError {
            offset: Some(e.offset),
            record,
            message: e.message,
        }
    }

    /// One unit: a record of the array being read (`array_left` records to go), or at the
    /// top level a record or an array's header. Returns the records left in the array.
    /// Nothing is added to the tables unless the whole unit was read.
    fn unit(&mut self, array_left: Option<u32>) -> Result<Option<u32>, MsgpackError> {
        self.truncated = false;
        let start = self.reader.offset();
        let item = match self.reader.next() {
            Ok(item) => item,
            Err(e) => return Err(self.error(e, None)),
        };
        match (array_left, item) {
            (Some(0), _) => unreachable!("an array with no records left is closed"),
            (Some(left), Item::Map(entries)) => {
                let records = self.records;
                match self.record(entries, start, false) {
                    Ok(TopLevelMap::Record) => Ok((left > 1).then(|| left - 1)),
                    Ok(TopLevelMap::Batch(_)) => unreachable!("'batch' is refused in arrays"),
                    Err(e) => {
                        self.records = records;
                        Err(e)
                    }
                }
            }
            (Some(_), other) => Err(self.error(
                Reader::error_at(start, format!("records are maps, not {}", other.kind())),
                Some(self.records),
            )),
            (None, Item::Map(entries)) => {
                let records = self.records;
                match self.record(entries, start, true) {
                    Ok(TopLevelMap::Record) => Ok(None),
                    Ok(TopLevelMap::Batch(n)) => Ok((n > 0).then_some(n)),
                    Err(e) => {
                        self.records = records;
                        Err(e)
                    }
                }
            }
            (None, Item::Array(n)) => Ok((n > 0).then_some(n)),
            (None, other) => Err(self.error(
                Reader::error_at(
                    start,
                    format!(
                        "a payload is a record (a map), {{\"batch\": [...]}} or an array of records, not {}",
                        other.kind()
                    ),
                ),
                None,
            )),
        }
    }

    /// A record (or, at the top level, a `{"batch": [...]}` envelope, whose array header is
    /// read) of `entries` keys.
    fn record(
        &mut self,
        entries: u32,
        start: usize,
        top_level: bool,
    ) -> Result<TopLevelMap, MsgpackError> {
        let record = self.records;
        self.records += 1;
        self.tags.clear();
        self.fields.clear();
        let mut keys = RecordKeys::default();
        for entry in 0..entries {
            let key_start = self.reader.offset();
            let key = match self.reader.string(|| "a record's key".into()) {
                Ok(key) => key,
                Err(e) => return Err(self.error(e, Some(record))),
            };
            if key == "batch" {
                if !(top_level && entries == 1 && entry == 0) {
                    return Err(self.error(
                        Reader::error_at(
                            key_start,
                            "'batch' must be the only key of a top-level map",
                        ),
                        Some(record),
                    ));
                }
                self.records -= 1; // the envelope is not a record
                return self.batch_header().map(TopLevelMap::Batch);
            }
            if let Err(e) = self.record_key(key, &mut keys) {
                return Err(self.error(e, Some(record)));
            }
        }
        self.finish_record(record, start, keys)?;
        Ok(TopLevelMap::Record)
    }

    /// The array header of `{"batch": [...]}`: how many records follow.
    fn batch_header(&mut self) -> Result<u32, MsgpackError> {
        let start = self.reader.offset();
        match self.reader.next() {
            Ok(Item::Array(n)) => Ok(n),
            Ok(other) => Err(self.error(
                Reader::error_at(
                    start,
                    format!("'batch' must be an array of records, not {}", other.kind()),
                ),
                None,
            )),
            Err(e) => Err(self.error(e, None)),
        }
    }

    fn record_key(&mut self, key: &'a str, keys: &mut RecordKeys<'a>) -> Result<(), ReadError> {
        match key {
            "m" => keys.measurement = Some(self.measurement()?),
            "t" => keys.time = self.time()?,
            "h" => keys.host = self.host()?,
            "tags" => self.tag_map()?,
            "fields" => {
                self.field_map()?;
                keys.has_fields = true;
            }
            "f" => {
                self.field_array()?;
                keys.has_fields = true;
            }
            "columns" => keys.columns = Some(self.columns()?),
            "tag_keys" => keys.tag_keys = Some(self.tag_keys()?),
            _ => self.reader.skip()?,
        }
        Ok(())
    }

    fn finish_record(
        &mut self,
        record: usize,
        start: usize,
        keys: RecordKeys<'a>,
    ) -> Result<(), MsgpackError> {
        let fail = |message: String| MsgpackError {
            offset: Some(start),
            record: Some(record),
            message,
        };
        let measurement = keys
            .measurement
            .ok_or_else(|| fail("the record has no measurement ('m')".into()))?;
        match (keys.columns, keys.has_fields) {
            (Some(Columns { time, values, rows }), false) => {
                let time = match (time.is_empty(), keys.time) {
                    (true, record_time) => vec![record_time.unwrap_or(self.default_time); rows],
                    (false, None) => time,
                    (false, Some(_)) => {
                        return Err(fail("the record has both 't' and a 'time' column".into()))
                    }
                };
                if let Some(host) = keys.host {
                    set(&mut self.tags, "host", host);
                }
                let columns = with_roles(values, keys.tag_keys.as_deref()).map_err(fail)?;
                let piece = Piece::columnar(record, time, columns, &self.tags).map_err(fail)?;
                self.tables.add_piece(&measurement, piece);
                Ok(())
            }
            (None, true) => {
                if let Some(host) = keys.host {
                    set(&mut self.tags, "host", host);
                }
                if self.fields.is_empty() {
                    return Err(fail("the record has no field values".into()));
                }
                for (name, _) in &self.fields {
                    if self.tags.iter().any(|(tag, _)| tag == name) {
                        return Err(fail(format!("{name:?} is both a tag and a field")));
                    }
                }
                let time = keys.time.unwrap_or(self.default_time);
                self.tables
                    .add_row(&measurement, record, time, &self.tags, &self.fields)
                    .map_err(fail)
            }
            (Some(_), true) => Err(fail(
                "the record has both 'columns' (columnar) and 'fields' (row)".into(),
            )),
            (None, false) => Err(fail(
                "the record has neither 'fields' (row) nor 'columns' (columnar)".into(),
            )),
        }
    }

    /// The next value, which must be a scalar; `what` names it in the error (built only then).
    fn scalar(&mut self, what: impl FnOnce() -> String) -> Result<Scalar<'a>, ReadError> {
        let start = self.reader.offset();
        match self.reader.next()? {
            Item::Scalar(s) => Ok(s),
            other => Err(Reader::error_at(
                start,
                format!(
                    "{} is {}: nested values are not supported",
                    what(),
                    other.kind()
                ),
            )),
        }
    }

    fn map_len(&mut self, what: impl FnOnce() -> String) -> Result<u32, ReadError> {
        let start = self.reader.offset();
        match self.reader.next()? {
            Item::Map(n) => Ok(n),
            other => Err(Reader::error_at(
                start,
                format!("{} must be a map, not {}", what(), other.kind()),
            )),
        }
    }

    fn array_len(&mut self, what: impl FnOnce() -> String) -> Result<u32, ReadError> {
        let start = self.reader.offset();
        match self.reader.next()? {
            Item::Array(n) => Ok(n),
            other => Err(Reader::error_at(
                start,
                format!("{} must be an array, not {}", what(), other.kind()),
            )),
        }
    }

    /// `m`: a non-empty string, or an integer id (`measurement_<n>`).
    fn measurement(&mut self) -> Result<Cow<'a, str>, ReadError> {
        let start = self.reader.offset();
        match self.scalar(|| "'m'".into())? {
            Scalar::Str(s) if !s.is_empty() => Ok(Cow::Borrowed(s)),
            Scalar::Int(n) => Ok(Cow::Owned(format!("measurement_{n}"))),
            Scalar::UInt(n) => Ok(Cow::Owned(format!("measurement_{n}"))),
            other => Err(Reader::error_at(
                start,
                format!(
                    "'m' must be a non-empty string or an integer, not {}",
                    describe(&other)
                ),
            )),
        }
    }

    /// `t`: nanoseconds, or `None` for nil.
    fn time(&mut self) -> Result<Option<i64>, ReadError> {
        let start = self.reader.offset();
        let value = self.scalar(|| "'t'".into())?;
        if value == Scalar::Nil {
            return Ok(None);
        }
        let unit =
            inferred_unit(&value).map_err(|e| Reader::error_at(start, format!("'t': {e}")))?;
        to_nanos(value, unit)
            .map(Some)
            .map_err(|e| Reader::error_at(start, format!("'t': {e}")))
    }

    /// `h`: the `host` tag (an integer `n` is `host_<n>`, as in Arc).
    fn host(&mut self) -> Result<Option<Cow<'a, str>>, ReadError> {
        let start = self.reader.offset();
        match self.scalar(|| "'h'".into())? {
            Scalar::Nil => Ok(None),
            Scalar::Str(s) => Ok(Some(Cow::Borrowed(s))),
            Scalar::Int(n) => Ok(Some(Cow::Owned(format!("host_{n}")))),
            Scalar::UInt(n) => Ok(Some(Cow::Owned(format!("host_{n}")))),
            other => Err(Reader::error_at(
                start,
                format!("'h' must be a string, not {}", describe(&other)),
            )),
        }
    }

    fn tag_map(&mut self) -> Result<(), ReadError> {
        let n = self.map_len(|| "'tags'".into())?;
        for _ in 0..n {
            let name = self.name("a tag")?;
            let start = self.reader.offset();
            let value: Cow<'a, str> = match self.scalar(|| format!("tag {name:?}"))? {
                Scalar::Nil => continue,
                Scalar::Str(s) => Cow::Borrowed(s),
                Scalar::Int(v) => Cow::Owned(v.to_string()),
                Scalar::UInt(v) => Cow::Owned(v.to_string()),
                Scalar::Float(v) => Cow::Owned(v.to_string()),
                Scalar::Bool(v) => Cow::Owned(v.to_string()),
                Scalar::Timestamp(_) => {
                    return Err(Reader::error_at(
                        start,
                        format!("tag {name:?}: a timestamp is not a tag value"),
                    ))
                }
            };
            set(&mut self.tags, name, value);
        }
        Ok(())
    }

    fn field_map(&mut self) -> Result<(), ReadError> {
        let n = self.map_len(|| "'fields'".into())?;
        for _ in 0..n {
            let name = self.name("a field")?;
            let value = self.scalar(|| format!("field {name:?}"))?;
            set(&mut self.fields, name, value);
        }
        self.fields.retain(|(_, v)| *v != Scalar::Nil);
        Ok(())
    }

    fn field_array(&mut self) -> Result<(), ReadError> {
        const NAMES: [&str; 16] = [
            "field_0", "field_1", "field_2", "field_3", "field_4", "field_5", "field_6", "field_7",
            "field_8", "field_9", "field_10", "field_11", "field_12", "field_13", "field_14",
            "field_15",
        ];
        let start = self.reader.offset();
        let n = self.array_len(|| "'f'".into())?;
        if n as usize > NAMES.len() {
            return Err(Reader::error_at(
                start,
                format!("'f' has {n} values; at most {} (use 'fields')", NAMES.len()),
            ));
        }
        for name in NAMES.iter().take(n as usize) {
            let value = self.scalar(|| format!("field {name}"))?;
            if value != Scalar::Nil {
                set(&mut self.fields, name, value);
            }
        }
        Ok(())
    }

    /// A tag or field name: a non-empty string other than `time`.
    fn name(&mut self, what: &str) -> Result<&'a str, ReadError> {
        let start = self.reader.offset();
        let name = self.reader.string(|| format!("{what}'s name"))?;
        if name.is_empty() || name == TIME_COLUMN {
            return Err(Reader::error_at(
                start,
                format!("{what} cannot be named {name:?}"),
            ));
        }
        Ok(name)
    }

    /// A columnar record's `columns`.
    fn columns(&mut self) -> Result<Columns<'a>, ReadError> {
        let n = self.map_len(|| "'columns'".into())?;
        let mut time = Vec::new();
        let mut columns: Vec<(&'a str, Column)> = Vec::new();
        let mut rows: Option<(usize, &'a str)> = None;
        for _ in 0..n {
            let start = self.reader.offset();
            let name = self.reader.string(|| "a column's name".into())?;
            if name.is_empty() {
                return Err(Reader::error_at(start, "a column cannot be named \"\""));
            }
            let len = self.array_len(|| format!("column {name:?}"))? as usize;
            match rows {
                Some((expected, first)) if expected != len => {
                    return Err(Reader::error_at(
                        start,
                        format!(
                            "column {name:?} has {len} values but column {first:?} has {expected}: columns must have equal lengths"
                        ),
                    ))
                }
                None => rows = Some((len, name)),
                _ => {}
            }
            if name == TIME_COLUMN {
                time = self.time_column(len)?;
                continue;
            }
            let left = self.reader.remaining();
            let mut column = Column::with_capacity(len.min(left), left);
            let mut index = 0;
            while index < len {
                if let Some(floats) = column.floats() {
                    index += self.reader.float64_run(floats, len - index);
                    if index == len {
                        break;
                    }
                }
                let at = self.reader.offset();
                let value = self.scalar(|| format!("column {name:?} value {index}"))?;
                column.push(value).map_err(|e| {
                    Reader::error_at(at, format!("column {name:?} value {index}: {e}"))
                })?;
                index += 1;
            }
            match columns.iter_mut().find(|(n, _)| *n == name) {
                Some(existing) => existing.1 = column,
                None => columns.push((name, column)),
            }
        }
        Ok(Columns {
            time,
            values: columns,
            rows: rows.map_or(0, |(n, _)| n),
        })
    }

    /// A columnar `time` column of `len` values, in nanoseconds: the unit is inferred from
    /// the first value and applies to all.
    fn time_column(&mut self, len: usize) -> Result<Vec<i64>, ReadError> {
        let mut out = Vec::with_capacity(len.min(self.reader.remaining()));
        let mut unit = None;
        for index in 0..len {
            let start = self.reader.offset();
            let value = self.scalar(|| format!("time value {index}"))?;
            let bad = |e: String| Reader::error_at(start, format!("time value {index}: {e}"));
            if value == Scalar::Nil {
                return Err(bad("the time column cannot have nil values".into()));
            }
            let unit = match unit {
                Some(u) => u,
                None => *unit.insert(inferred_unit(&value).map_err(bad)?),
            };
            out.push(to_nanos(value, unit).map_err(bad)?);
        }
        Ok(out)
    }

    fn tag_keys(&mut self) -> Result<Vec<&'a str>, ReadError> {
        let n = self.array_len(|| "'tag_keys'".into())?;
        let mut keys = Vec::new();
        for _ in 0..n {
            keys.push(self.reader.string(|| "a 'tag_keys' entry".into())?);
        }
        Ok(keys)
    }
}

/// Sets `name` to `value` in a record's scratch list (a repeated key keeps the last value).
fn set<'a, V>(list: &mut Vec<(&'a str, V)>, name: &'a str, value: V) {
    match list.iter_mut().find(|(n, _)| *n == name) {
        Some(entry) => entry.1 = value,
        None => list.push((name, value)),
    }
}

/// The roles of a columnar record's columns (see the module docs), dropping all-nil columns.
fn with_roles(
    columns: Vec<(&str, Column)>,
    tag_keys: Option<&[&str]>,
) -> Result<Vec<(String, Role, arrow::array::ArrayRef)>, String> {
    if let Some(tag_keys) = tag_keys {
        if let Some(missing) = tag_keys
            .iter()
            .find(|k| !columns.iter().any(|(name, _)| name == *k))
        {
            return Err(format!(
                "'tag_keys' names {missing:?}, which is not a column"
            ));
        }
    }
    Ok(columns
        .into_iter()
        .filter_map(|(name, column)| {
            let array = column.finish()?;
            let role = match tag_keys {
                Some(keys) if keys.contains(&name) => Role::Tag,
                Some(_) => Role::Field,
                None if matches!(
                    array.data_type(),
                    arrow::datatypes::DataType::Dictionary(..)
                ) =>
                {
                    Role::StringColumn
                }
                None => Role::Field,
            };
            Some((name.to_string(), role, array))
        })
        .collect())
}

fn describe(value: &Scalar<'_>) -> String {
    match value {
        Scalar::Str("") => "an empty string".into(),
        other => other.kind().into(),
    }
}

/// Nanoseconds per unit of a timestamp, inferred from its magnitude as Arc does: below 1e10
/// seconds, below 1e13 milliseconds, below 1e16 microseconds, otherwise nanoseconds.
fn inferred_unit(value: &Scalar<'_>) -> Result<i64, String> {
    let magnitude = match *value {
        Scalar::Int(v) => v as f64,
        Scalar::UInt(v) => v as f64,
        Scalar::Float(v) if v.is_finite() => v,
        Scalar::Timestamp(_) => return Ok(1),
        _ => return Err(format!("a timestamp is a number, not {}", describe(value))),
    };
    Ok(if magnitude < 1e10 {
        1_000_000_000
    } else if magnitude < 1e13 {
        1_000_000
    } else if magnitude < 1e16 {
        1_000
    } else {
        1
    })
}

/// `value` (in units of `unit` nanoseconds) in nanoseconds; out of range is an error.
fn to_nanos(value: Scalar<'_>, unit: i64) -> Result<i64, String> {
    let out_of_range =
        || "timestamp out of range (Quiver stores 1677-09-21 to 2262-04-11)".to_string();
    match value {
        Scalar::Int(v) => v.checked_mul(unit).ok_or_else(out_of_range),
        Scalar::UInt(v) => i64::try_from(v)
            .ok()
            .and_then(|v| v.checked_mul(unit))
            .ok_or_else(out_of_range),
        Scalar::Float(v) => {
            let nanos = (v * unit as f64).round();
            if nanos.is_finite() && nanos >= i64::MIN as f64 && nanos < i64::MAX as f64 {
                Ok(nanos as i64)
            } else {
                Err(out_of_range())
            }
        }
        Scalar::Timestamp(ns) => Ok(ns),
        other => Err(format!("a timestamp is a number, not {}", describe(&other))),
    }
}

#[cfg(test)]
mod tests;

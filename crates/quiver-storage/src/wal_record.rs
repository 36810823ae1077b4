//! The WAL payloads: a write (the database name and, per table, its rows as an Arrow IPC
//! stream; replay decodes it back into the same [`DecodedTable`]s), or the drop of a table or
//! a whole database (replayed in log order, so rows written before a drop stay dropped and
//! rows written after it land in a new, empty table).
//!
//! ```text
//! write: u8 format (1) | u16 LE name length | database name | u32 LE table count |
//!          per table: u16 LE name length | table name | u32 LE IPC length | Arrow IPC stream
//! drop:  u8 format (2) | u16 LE name length | database name |
//!          u8 0 (the database) or 1 (one table, then: u16 LE name length | table name)
//! ```

use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamEncoder;
use quiver_model::schema::DecodedTable;
use quiver_wal::Payload;

use crate::StorageError;

const FORMAT: u8 = 1;
const DROP_FORMAT: u8 = 2;

/// What one WAL record says.
#[derive(Debug)]
pub(crate) enum Record {
    /// Rows written to tables of a database.
    Write {
        /// The database.
        database: String,
        /// The rows, per table.
        tables: Vec<DecodedTable>,
    },
    /// A table, or a whole database, dropped.
    Drop {
        /// The database.
        database: String,
        /// The table; `None`: the database with all its tables.
        table: Option<String>,
    },
}

/// Encodes the drop of `table` in `database`, or of the whole database.
pub(crate) fn encode_drop(database: &str, table: Option<&str>) -> Result<Vec<u8>, StorageError> {
    let mut out = vec![DROP_FORMAT];
    put_name(&mut out, database)?;
    match table {
        None => out.push(0),
        Some(table) => {
            out.push(1);
            put_name(&mut out, table)?;
        }
    }
    Ok(out)
}

/// Encodes one write. The rows' Arrow buffers become parts of the payload as they are (the
/// IPC stream encoder shares them), so logging a write copies no row data: the commit thread
/// writes them straight to the file.
pub(crate) fn encode(database: &str, tables: &[DecodedTable]) -> Result<Payload, StorageError> {
    let mut payload = Payload::new();
    let mut head = Vec::with_capacity(64);
    head.push(FORMAT);
    put_name(&mut head, database)?;
    head.extend_from_slice(&(tables.len() as u32).to_le_bytes());
    for table in tables {
        let mut encoder = StreamEncoder::try_new(&table.batch.schema())?;
        let mut stream = encoder.encode(&table.batch)?;
        stream.extend(encoder.finish()?);
        let length: usize = stream.iter().map(Buffer::len).sum();
        let length = u32::try_from(length).map_err(|_| {
            StorageError::CorruptRecord(format!(
                "rows of table {:?} exceed 4 GiB in one write",
                table.name
            ))
        })?;
        put_name(&mut head, &table.name)?;
        head.extend_from_slice(&length.to_le_bytes());
        payload.push(std::mem::take(&mut head));
        for buffer in stream {
            payload.push(Part(buffer));
        }
    }
    if !head.is_empty() {
        payload.push(head);
    }
    Ok(payload)
}

/// An Arrow buffer as a payload part.
struct Part(Buffer);

impl AsRef<[u8]> for Part {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

fn put_name(out: &mut Vec<u8>, name: &str) -> Result<(), StorageError> {
    let length = u16::try_from(name.len()).map_err(|_| {
        StorageError::CorruptRecord(format!("name of {} bytes is too long", name.len()))
    })?;
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    Ok(())
}

/// Decodes one record; any inconsistency is a [`StorageError::CorruptRecord`].
pub(crate) fn decode(payload: &[u8]) -> Result<Record, StorageError> {
    let mut reader = Reader {
        buf: payload,
        at: 0,
    };
    let format = reader.take(1)?[0];
    let database = match format {
        FORMAT | DROP_FORMAT => reader.name()?,
        _ => {
            return Err(StorageError::CorruptRecord(format!(
                "unknown WAL record format {format}"
            )))
        }
    };
    let record = match format {
        DROP_FORMAT => decode_drop(&mut reader, database)?,
        _ => decode_write(&mut reader, database)?,
    };
    if reader.at != payload.len() {
        return Err(StorageError::CorruptRecord(
            "trailing bytes after the end of the record".into(),
        ));
    }
    Ok(record)
}

fn decode_drop(reader: &mut Reader<'_>, database: String) -> Result<Record, StorageError> {
    let table = match reader.take(1)?[0] {
        0 => None,
        1 => Some(reader.name()?),
        other => {
            return Err(StorageError::CorruptRecord(format!(
                "unknown drop target {other}"
            )))
        }
    };
    Ok(Record::Drop { database, table })
}

fn decode_write(reader: &mut Reader<'_>, database: String) -> Result<Record, StorageError> {
    let count = reader.u32()? as usize;
    let mut tables = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let name = reader.name()?;
        let length = reader.u32()? as usize;
        let ipc = reader.take(length)?;
        let mut stream = StreamReader::try_new(ipc, None)?;
        let batch = stream
            .next()
            .ok_or_else(|| StorageError::CorruptRecord(format!("no rows for table {name:?}")))??;
        tables.push(DecodedTable { name, batch });
    }
    Ok(Record::Write { database, tables })
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StorageError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                StorageError::CorruptRecord(format!(
                    "record ends early at byte {} (needs {n} more)",
                    self.at
                ))
            })?;
        let slice = &self.buf[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, StorageError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn name(&mut self) -> Result<String, StorageError> {
        let length = u16::from_le_bytes(self.take(2)?.try_into().unwrap()) as usize;
        String::from_utf8(self.take(length)?.to_vec())
            .map_err(|_| StorageError::CorruptRecord("a name is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_ingest::line_protocol::{decode_line_protocol, DecodeOptions};
    use quiver_model::schema::NoExistingTables;

    /// The bytes the previous encoder (`StreamWriter` into one buffer) wrote for the same
    /// rows: logs written before the payload came in parts replay unchanged.
    fn as_one_buffer(database: &str, tables: &[DecodedTable]) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_name(&mut out, database).unwrap();
        out.extend_from_slice(&(tables.len() as u32).to_le_bytes());
        for table in tables {
            put_name(&mut out, &table.name).unwrap();
            let mut ipc = Vec::new();
            let mut writer =
                arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &table.batch.schema()).unwrap();
            writer.write(&table.batch).unwrap();
            writer.finish().unwrap();
            drop(writer);
            out.extend_from_slice(&(ipc.len() as u32).to_le_bytes());
            out.extend_from_slice(&ipc);
        }
        out
    }

    /// The tables of `lp` (nanosecond times, new tables).
    fn decoded(lp: &str) -> Vec<DecodedTable> {
        let options = DecodeOptions::for_tests();
        let decoded = decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables);
        assert_eq!(decoded.error_count, 0, "{:?}", decoded.errors);
        decoded.tables
    }

    /// The record of one write, as the log holds it (its parts back to back).
    fn logged(database: &str, tables: &[DecodedTable]) -> Vec<u8> {
        encode(database, tables)
            .unwrap()
            .parts()
            .flatten()
            .copied()
            .collect()
    }

    #[test]
    fn parts_hold_the_same_bytes_as_one_stream_writer_buffer() {
        let tables = decoded("cpu,host=a,dc=x usage=1.5,n=2i 1\ncpu,host=b usage=2.5 2\nm v=1 3\n");
        assert_eq!(logged("db", &tables), as_one_buffer("db", &tables));
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let written =
            decoded("cpu,host=a usage=1.5,n=2i 1\nmem,host=b free=3u,ok=true,s=\"x\" 2\n");
        let payload = logged("metrics", &written);
        let Record::Write { database, tables } = decode(&payload).unwrap() else {
            panic!("a write decodes as a write");
        };
        assert_eq!(database, "metrics");
        assert_eq!(tables.len(), 2);
        for (a, b) in tables.iter().zip(&written) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.batch, b.batch);
        }
        for cut in 0..payload.len() {
            assert!(decode(&payload[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = payload.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }
}

#[cfg(test)]
mod drop_tests {
    use super::*;

    #[test]
    fn drops_round_trip_and_reject_damage() {
        for table in [None, Some("cpu")] {
            let payload = encode_drop("metrics", table).unwrap();
            match decode(&payload).unwrap() {
                Record::Drop { database, table: t } => {
                    assert_eq!(database, "metrics");
                    assert_eq!(t.as_deref(), table);
                }
                other => panic!("decoded {other:?}"),
            }
            for cut in 0..payload.len() {
                assert!(decode(&payload[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = payload.clone();
            longer.push(0);
            assert!(decode(&longer).is_err());
        }
        let mut bad_target = encode_drop("metrics", None).unwrap();
        *bad_target.last_mut().unwrap() = 7;
        assert!(decode(&bad_target).is_err());
    }
}

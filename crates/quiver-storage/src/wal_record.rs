//! The WAL payload of one write: the database name and, per table, its rows as an Arrow IPC
//! stream. Replay decodes it back into the same [`DecodedTable`]s.
//!
//! ```text
//! u8 format (1) | u16 LE name length | database name | u32 LE table count |
//!   per table: u16 LE name length | table name | u32 LE IPC length | Arrow IPC stream
//! ```

use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamEncoder;
use quiver_model::schema::DecodedTable;
use quiver_wal::Payload;

use crate::StorageError;

const FORMAT: u8 = 1;

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

/// Decodes one write; any inconsistency is a [`StorageError::CorruptRecord`].
pub(crate) fn decode(payload: &[u8]) -> Result<(String, Vec<DecodedTable>), StorageError> {
    let mut reader = Reader {
        buf: payload,
        at: 0,
    };
    let format = reader.take(1)?[0];
    if format != FORMAT {
        return Err(StorageError::CorruptRecord(format!(
            "unknown WAL record format {format}"
        )));
    }
    let database = reader.name()?;
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
    if reader.at != payload.len() {
        return Err(StorageError::CorruptRecord(
            "trailing bytes after the last table".into(),
        ));
    }
    Ok((database, tables))
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
        let (database, tables) = decode(&payload).unwrap();
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

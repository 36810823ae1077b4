//! The WAL payload of one write: the database name and, per table, its rows as an Arrow IPC
//! stream. Replay decodes it back into the same [`DecodedTable`]s.
//!
//! ```text
//! u8 format (1) | u16 LE name length | database name | u32 LE table count |
//!   per table: u16 LE name length | table name | u32 LE IPC length | Arrow IPC stream
//! ```

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use quiver_ingest::line_protocol::DecodedTable;

use crate::StorageError;

const FORMAT: u8 = 1;

/// Encodes one write.
pub(crate) fn encode(database: &str, tables: &[DecodedTable]) -> Result<Vec<u8>, StorageError> {
    let capacity: usize = tables
        .iter()
        .map(|t| crate::memory::data_bytes(&t.batch) + 512)
        .sum();
    let mut out = Vec::with_capacity(capacity + 64);
    out.push(FORMAT);
    put_name(&mut out, database)?;
    out.extend_from_slice(&(tables.len() as u32).to_le_bytes());
    for table in tables {
        put_name(&mut out, &table.name)?;
        let length_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut writer = StreamWriter::try_new(&mut out, &table.batch.schema())?;
        writer.write(&table.batch)?;
        writer.finish()?;
        drop(writer);
        let length = u32::try_from(out.len() - length_at - 4).map_err(|_| {
            StorageError::CorruptRecord(format!(
                "rows of table {:?} exceed 4 GiB in one write",
                table.name
            ))
        })?;
        out[length_at..length_at + 4].copy_from_slice(&length.to_le_bytes());
    }
    Ok(out)
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
    use quiver_ingest::line_protocol::{
        decode_line_protocol, DecodeOptions, NoExistingTables, Precision,
    };

    #[test]
    fn round_trips_and_rejects_damage() {
        let options = DecodeOptions {
            precision: Precision::Nanosecond,
            default_time_ns: 0,
            max_reported_errors: 10,
        };
        let lp = "cpu,host=a usage=1.5,n=2i 1\nmem,host=b free=3u,ok=true,s=\"x\" 2\n";
        let decoded = decode_line_protocol(lp.as_bytes(), &options, &NoExistingTables);
        let payload = encode("metrics", &decoded.tables).unwrap();
        let (database, tables) = decode(&payload).unwrap();
        assert_eq!(database, "metrics");
        assert_eq!(tables.len(), 2);
        for (a, b) in tables.iter().zip(&decoded.tables) {
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

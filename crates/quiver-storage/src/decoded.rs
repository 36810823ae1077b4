//! Files' columns decoded once and kept, as Arrow arrays, in the [`ChunkCache`]: a repeated
//! scan of a hot file then reads memory, as a scan of the write buffer does, instead of
//! decompressing and decoding the same pages again (which is most of what scanning a cached
//! Parquet file costs).
//!
//! The query layer asks for the columns it needs; where some are missing it scans the file as
//! usual and has [`decode_columns`] fill them in, off the query's path. Whole columns are
//! kept (every row of the file), so any filter or projection of a later query is served from
//! them; a column the file does not have (added to the table later) is kept as nulls, as a
//! scan would read it. Files never change, so an entry is never stale, and the cache forgets
//! a file's columns with the rest of it when the file leaves the catalog. The same decoding
//! reads the file's tags once to keep where each series begins ([`crate::series`]), which
//! lets a scan of the decoded columns skip to the series and times it wants.

use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::FieldRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::chunk_cache::ChunkCache;
use crate::dedup::series_key_and_fields;
use crate::error::StorageError;
use crate::series::{batch_series_starts, series_starts};
use crate::table::ParquetFile;

/// The decoded `columns` of `file`, all from the cache, or `None` if any is not cached.
pub fn cached_columns(
    file: &ParquetFile,
    columns: &[FieldRef],
    cache: &ChunkCache,
) -> Option<Vec<ArrayRef>> {
    if !cache.enabled() {
        return None;
    }
    columns
        .iter()
        .map(|field| cache.column(&file.entry.path, field.name()))
        .collect()
}

/// Decodes the `columns` of `file` that the cache lacks and keeps them there (blocking
/// I/O), with where each series begins among the file's rows ([`crate::series`]) if the
/// cache lacks that. Does nothing if the cache is off or another decoding runs (one at a
/// time); a column whose stored type differs from the field's is left out (its scans keep
/// reading the file).
pub fn decode_columns(
    files: &Arc<dyn object_store::ObjectStore>,
    file: &ParquetFile,
    columns: &[FieldRef],
    cache: &ChunkCache,
) -> Result<(), StorageError> {
    if !cache.enabled() {
        return Ok(());
    }
    let Some(_claim) = cache.claim_decoding(&file.entry.path) else {
        return Ok(());
    };
    let path = &file.entry.path;
    let missing: Vec<&FieldRef> = columns
        .iter()
        .filter(|field| cache.column(path, field.name()).is_none())
        .collect();
    let needs_starts = cache.series_starts(path).is_none();
    if missing.is_empty() && !needs_starts {
        return Ok(());
    }
    let reader = crate::data_store::read_whole(files, &file.entry)?;
    let unreadable = |e| StorageError::parquet(&file.entry.path, e);
    let builder = ParquetRecordBatchReaderBuilder::try_new(reader).map_err(unreadable)?;
    let stored = builder.schema().clone();
    let readable: Vec<&str> = missing
        .iter()
        .filter(|field| {
            stored
                .field_with_name(field.name())
                .is_ok_and(|s| s.data_type() == field.data_type())
        })
        .map(|field| field.name().as_str())
        .collect();
    // a file without a series key (no `time`) is no table's: its columns are still kept
    let series_key = series_key_and_fields(&stored).ok().map(|(keys, _)| keys);
    let needs_starts = needs_starts && series_key.is_some();
    let tags: Vec<&str> = match &series_key {
        Some(keys) if needs_starts => keys[..keys.len() - 1]
            .iter()
            .map(|&i| stored.field(i).name().as_str())
            .collect(),
        _ => Vec::new(),
    };
    let read: Vec<&str> = readable.iter().chain(&tags).copied().collect();
    let batches = if read.is_empty() {
        // only absent columns (nulls) or ones stored as another type (never kept), and no
        // tags: no pages to read
        Vec::new()
    } else {
        let mask = ProjectionMask::columns(builder.parquet_schema(), read.iter().copied());
        builder
            .with_projection(mask)
            .with_batch_size(64 * 1024)
            .build()
            .map_err(unreadable)?
            .collect::<Result<Vec<RecordBatch>, _>>()
            .map_err(|e| StorageError::parquet(&file.entry.path, e.into()))?
    };
    let rows = usize::try_from(file.entry.rows).unwrap_or(usize::MAX);
    for field in missing {
        let column = if readable.contains(&field.name().as_str()) {
            whole_column(&batches, field.name())?
        } else if stored.field_with_name(field.name()).is_err() {
            new_null_array(field.data_type(), rows)
        } else {
            continue;
        };
        if column.len() == rows {
            cache.keep_column(path, field.name(), column);
        }
    }
    if needs_starts && rows > 0 {
        let tags = tags
            .iter()
            .map(|tag| whole_column(&batches, tag))
            .collect::<Result<Vec<_>, _>>()?;
        if tags.iter().all(|tag| tag.len() == rows) {
            let tags: Vec<&ArrayRef> = tags.iter().collect();
            let starts = series_starts(&tags, rows)?;
            cache.keep_series_starts(path, starts.into());
        }
    }
    Ok(())
}

/// Keeps the columns of a file just written from `rows` (its rows, as written) as its decoded
/// columns, with where each series begins: the newest data, about to be queried, is read
/// from memory at once instead of after a first scan of the file had it decoded. Nothing if
/// the cache is off or the file would take more than a quarter of it (as a first scan would
/// leave it).
pub(crate) fn keep_written_columns(file: &ParquetFile, rows: &RecordBatch, cache: &ChunkCache) {
    if !cache.enabled() || file.entry.memory_bytes() > cache.capacity_bytes() / 4 {
        return;
    }
    let path = &file.entry.path;
    let schema = rows.schema();
    for (field, column) in schema.fields().iter().zip(rows.columns()) {
        cache.keep_column(path, field.name(), column.clone());
    }
    if let Ok(starts) = batch_series_starts(rows) {
        cache.keep_series_starts(path, starts.into());
    }
}

/// Column `name` of every one of `batches`, concatenated.
fn whole_column(batches: &[RecordBatch], name: &str) -> Result<ArrayRef, StorageError> {
    let parts: Vec<&dyn arrow::array::Array> = batches
        .iter()
        .filter_map(|b| b.column_by_name(name))
        .map(|c| c.as_ref())
        .collect();
    Ok(arrow::compute::concat(&parts)?)
}

#[cfg(test)]
mod tests {

    use arrow::array::{Array, Float64Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::file_entry::FileEntry;

    fn file(dir: &std::path::Path, rows: usize) -> ParquetFile {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows as i64)),
                Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64))),
            ],
        )
        .unwrap();
        written(dir, &batch)
    }

    /// `batch` written as a file of row groups of 100 rows.
    fn written(dir: &std::path::Path, batch: &RecordBatch) -> ParquetFile {
        let rows = batch.num_rows();
        let path = dir.join("tables/f.parquet");
        std::fs::create_dir_all(dir.join("tables")).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            batch.schema(),
            Some(
                parquet::file::properties::WriterProperties::builder()
                    .set_max_row_group_row_count(Some(100))
                    .build(),
            ),
        )
        .unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        ParquetFile {
            entry: FileEntry {
                id: 1,
                path: "tables/f.parquet".into(),
                partition_start_ns: 0,
                min_time_ns: 0,
                max_time_ns: 0,
                rows: rows as u64,
                bytes: std::fs::metadata(&path).unwrap().len(),
                generation: 0,
                arrow_bytes: 0,
            },
        }
    }

    /// The data store over `dir`, where [`written`] puts its file.
    fn files(dir: &tempfile::TempDir) -> Arc<dyn object_store::ObjectStore> {
        crate::data_store::DataStore::directory(dir.path())
            .unwrap()
            .objects()
            .clone()
    }

    fn field(name: &str, data_type: DataType) -> FieldRef {
        Arc::new(Field::new(name, data_type, true))
    }

    #[test]
    fn columns_are_decoded_whole_and_a_missing_one_is_nulls() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path(), 250);
        let cache = ChunkCache::new(1 << 20);
        let wanted = [
            field("b", DataType::Float64),
            field("later", DataType::Utf8),
        ];
        assert!(cached_columns(&file, &wanted, &cache).is_none());
        decode_columns(&files(&dir), &file, &wanted, &cache).unwrap();
        let columns = cached_columns(&file, &wanted, &cache).unwrap();
        assert_eq!(columns[0].len(), 250, "every row group, concatenated");
        let b = columns[0].as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!(b.value(249), 249.0);
        assert_eq!(columns[1].null_count(), 250);
        // `a` was never asked for
        assert!(cached_columns(&file, &[field("a", DataType::Int64)], &cache).is_none());
    }

    #[test]
    fn a_column_stored_as_another_type_is_not_kept_and_an_absent_one_is_nulls() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path(), 10);
        let cache = ChunkCache::new(1 << 20);
        let wanted = [field("a", DataType::Utf8)];
        decode_columns(&files(&dir), &file, &wanted, &cache).unwrap();
        assert!(cached_columns(&file, &wanted, &cache).is_none());
        // only a column the file lacks: nulls, without reading any page
        let absent = [field("later", DataType::Int64)];
        decode_columns(&files(&dir), &file, &absent, &cache).unwrap();
        let columns = cached_columns(&file, &absent, &cache).unwrap();
        assert_eq!((columns[0].len(), columns[0].null_count()), (10, 10));
    }

    #[test]
    fn nothing_is_decoded_while_another_decoding_runs_or_when_the_cache_is_off() {
        let dir = tempfile::tempdir().unwrap();
        let file = file(dir.path(), 10);
        let wanted = [field("b", DataType::Float64)];
        let cache = ChunkCache::new(1 << 20);
        // another file's decoding is running: one at a time
        let claim = cache.claim_decoding("tables/other.parquet").unwrap();
        assert!(cache.claim_decoding(&file.entry.path).is_none());
        assert!(!cache.decoding_idle());
        decode_columns(&files(&dir), &file, &wanted, &cache).unwrap();
        assert!(cached_columns(&file, &wanted, &cache).is_none());
        drop(claim);
        assert!(cache.decoding_idle());
        decode_columns(&files(&dir), &file, &wanted, &cache).unwrap();
        assert!(cached_columns(&file, &wanted, &cache).is_some());
        let off = ChunkCache::new(0);
        decode_columns(&files(&dir), &file, &wanted, &off).unwrap();
        assert!(cached_columns(&file, &wanted, &off).is_none());
    }

    #[test]
    fn where_each_series_begins_is_kept_with_the_columns() {
        // a table's file: sorted by host, then time; series cross row groups (100 rows)
        let hosts: Vec<&str> = (0..250).map(|i| if i < 130 { "a" } else { "b" }).collect();
        let host: arrow::array::DictionaryArray<arrow::datatypes::Int32Type> =
            hosts.into_iter().collect();
        let time =
            arrow::array::TimestampNanosecondArray::from_iter_values((0..250).map(|i| i % 130))
                .with_timezone("UTC");
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", host.data_type().clone(), true),
            Field::new("time", time.data_type().clone(), false),
            Field::new("v", DataType::Float64, true),
        ]));
        let values = Float64Array::from_iter_values((0..250).map(f64::from));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(host), Arc::new(time), Arc::new(values)],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = written(dir.path(), &batch);
        let cache = ChunkCache::new(1 << 20);
        // only `v` is asked for: the tags are read for the starts, not kept
        decode_columns(
            &files(&dir),
            &file,
            &[field("v", DataType::Float64)],
            &cache,
        )
        .unwrap();
        let starts = cache.series_starts(&file.entry.path).expect("kept");
        assert!(cache.column(&file.entry.path, "host").is_none());
        assert!(starts.contains(&0) && starts.contains(&130), "{starts:?}");
        assert!(
            starts.iter().all(|&s| s == 0 || s % 100 == 0 || s == 130),
            "a series is split only where a row group's dictionary begins: {starts:?}"
        );
    }

    #[test]
    fn a_written_files_columns_are_kept_as_decoding_it_would_keep_them() {
        use crate::test_rows::{batch, rows, Row};
        let sorted: Vec<Row> = (0..250)
            .map(|i| {
                (
                    Some(["a", "b", "c"][i / 100]),
                    i as i64 % 100,
                    Some(i as f64),
                )
            })
            .collect();
        let sorted = batch(&sorted);
        let dir = tempfile::tempdir().unwrap();
        let mut file = written(dir.path(), &sorted);
        file.entry.arrow_bytes = crate::memory::data_bytes(&sorted) as u64;
        let fields: Vec<FieldRef> = sorted.schema().fields().iter().cloned().collect();
        let (kept, decoded) = (ChunkCache::new(1 << 20), ChunkCache::new(1 << 20));
        keep_written_columns(&file, &sorted, &kept);
        decode_columns(&files(&dir), &file, &fields, &decoded).unwrap();
        let path = &file.entry.path;
        let columns = |cache: &ChunkCache| {
            let columns = cached_columns(&file, &fields, cache).expect("every column kept");
            rows(&RecordBatch::try_new(sorted.schema(), columns).unwrap())
        };
        assert_eq!(columns(&kept), columns(&decoded));
        assert_eq!(columns(&kept), rows(&sorted));
        assert_eq!(kept.series_starts(path).unwrap()[..], [0, 100, 200]);
        // a file over a quarter of the cache is left to be read (as a first scan leaves it)
        let small = ChunkCache::new(file.entry.arrow_bytes * 3);
        keep_written_columns(&file, &sorted, &small);
        assert!(cached_columns(&file, &fields, &small).is_none());
        assert!(small.series_starts(path).is_none());
    }
}

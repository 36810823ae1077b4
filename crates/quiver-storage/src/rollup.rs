//! One rollup's kept state: its rows (partial aggregate states per time bucket, in segments
//! of about a day, one Parquet file each), which buckets are stale, and its manifest.
//!
//! Storage does not know what the rows mean (the query layer defines them): it knows that
//! they have a `time` column holding bucket starts, and which buckets they are exact for.
//! Every applied write to the base table marks the buckets its rows touch as *pending*
//! (before the write is acknowledged, after its rows are visible); the query layer takes
//! pending buckets ([`RollupState::next_work`]), recomputes them from raw rows, and installs
//! the result ([`RollupState::install`]). A bucket is *covered* (answerable from the rollup)
//! when it is neither pending nor being recomputed. Because a bucket is taken out of pending
//! before its raw rows are read, a write that lands meanwhile marks it pending again: a
//! covered bucket never misses an acknowledged write.
//!
//! Crash safety: the manifest (`manifest.json`, replaced atomically after segment files are
//! durable) records the pending buckets and the newest base-table file id it is exact for.
//! On start-up, files with a newer id (persisted after the manifest, their WAL records gone)
//! mark their time range pending, and the WAL's replay marks what it replays.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use arrow::array::{AsArray, BooleanArray, RecordBatch};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::TimestampNanosecondType;
use arrow::record_batch::RecordBatchReader;
use parking_lot::Mutex;
use quiver_model::durable_fs::{create_dir_durably, replace_durably, Access};
use serde::{Deserialize, Serialize};

use crate::rollup_ranges::{BucketGrid, Ranges};
use crate::StorageError;

/// The manifest format this build writes and reads.
const MANIFEST_FORMAT: u32 = 1;

/// The manifest's file name in a rollup's directory.
pub(crate) const MANIFEST_FILE: &str = "manifest.json";

/// What a rollup is: the query layer's definition and the grid of its buckets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollupDefinition {
    /// The database of the rollup and its base table.
    pub database: String,
    /// The rollup's name (unique in its database, never a table's name).
    pub name: String,
    /// The base table.
    pub table: String,
    /// The defining statement, as the user gave it.
    pub sql: String,
    /// Bucket width in nanoseconds.
    pub bucket_ns: i64,
    /// A bucket boundary (the `date_bin` origin) in nanoseconds since the epoch.
    pub origin_ns: i64,
}

impl RollupDefinition {
    /// Whether `other` has this one's database and name (its identity).
    pub(crate) fn is_named(&self, other: &RollupDefinition) -> bool {
        self.database == other.database && self.name == other.name
    }
}

/// Where a rollup stands, for `GET /api/v3/configure/rollup`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RollupStats {
    /// `backfilling` until the first pass over the existing rows is done, then `ready`.
    pub state: &'static str,
    /// Rows kept (partial states, one per bucket and group).
    pub rows: u64,
    /// Bytes of the kept rows' files.
    pub bytes: u64,
    /// Pending or recomputing ranges of buckets (read from raw rows meanwhile).
    pub pending_ranges: usize,
    /// Share of the base table's time range (bucket-aligned) that the rollup covers: the
    /// backfill's progress, then how much of the data it answers from kept rows (the newest
    /// bucket, still receiving writes, is read raw).
    pub covered_fraction: f64,
    /// Seconds the oldest change to a closed bucket has waited to be rolled up (changes to
    /// the open bucket wait for it to close, read raw meanwhile); 0 when none waits.
    pub lag_seconds: f64,
    /// Seconds since the backfill started (while backfilling) or it took (once ready).
    pub backfill_seconds: f64,
    /// When the rollup last installed recomputed buckets (RFC 3339), if ever.
    pub last_refresh: Option<String>,
}

/// The covered part of a query's range and the rows that hold it.
#[derive(Debug, Clone, Default)]
pub struct Coverage {
    /// Covered bucket ranges (bucket-aligned, ascending).
    pub covered: Ranges,
    /// The kept rows of every segment that overlaps `covered` (rows outside it included: the
    /// reader filters).
    pub rows: Vec<RecordBatch>,
}

/// One segment: the kept rows of its buckets and the file holding them.
#[derive(Debug, Clone)]
struct Segment {
    rows: RecordBatch,
    file: String,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Inner {
    segments: BTreeMap<i64, Segment>,
    pending: Ranges,
    recomputing: Ranges,
    backfilled: bool,
    dropped: bool,
    /// When the oldest pending change still pending was marked.
    pending_since: Option<Instant>,
    last_refresh: Option<SystemTime>,
    backfill: Option<(Instant, Option<Instant>)>,
    generation: u64,
    /// The `files_through_id` of the manifest last written.
    saved_through_id: u64,
    /// How many times writes marked buckets changed.
    marks: u64,
}

/// A rollup's state (see the module docs).
#[derive(Debug)]
pub struct RollupState {
    definition: RollupDefinition,
    grid: BucketGrid,
    /// The WAL sequence number applied when the rollup was created: replayed drops logged
    /// before it are older than the rollup.
    created_seq: u64,
    /// `<data_dir>/rollups/<id>`; `None` in a memory-only store.
    dir: Option<PathBuf>,
    inner: Mutex<Inner>,
    /// Held while a manifest is written, so they reach the disk in order.
    saving: Mutex<()>,
}

/// The manifest as written.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    format: u32,
    pub(crate) definition: RollupDefinition,
    pub(crate) created_seq: u64,
    backfilled: bool,
    /// The newest base-table file id whose rows the state reflects (see module docs).
    pub(crate) files_through_id: u64,
    pending: Vec<(i64, i64)>,
    segments: Vec<SegmentEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SegmentEntry {
    start: i64,
    file: String,
    rows: u64,
    bytes: u64,
}

impl RollupState {
    /// A new rollup with everything pending (nothing computed yet).
    pub(crate) fn new(
        definition: RollupDefinition,
        created_seq: u64,
        dir: Option<PathBuf>,
    ) -> Self {
        let grid = BucketGrid::new(definition.bucket_ns, definition.origin_ns);
        let inner = Inner {
            pending: Ranges::of(i64::MIN, i64::MAX),
            pending_since: Some(Instant::now()),
            backfill: Some((Instant::now(), None)),
            ..Inner::default()
        };
        RollupState {
            definition,
            grid,
            created_seq,
            dir,
            inner: Mutex::new(inner),
            saving: Mutex::new(()),
        }
    }

    /// The definition.
    pub fn definition(&self) -> &RollupDefinition {
        &self.definition
    }

    pub(crate) fn created_seq(&self) -> u64 {
        self.created_seq
    }

    /// True once the rollup (or its table) was dropped: its maintenance stops.
    pub fn is_dropped(&self) -> bool {
        self.inner.lock().dropped
    }

    pub(crate) fn mark_dropped(&self) {
        self.inner.lock().dropped = true;
    }

    /// Marks the buckets that rows with times in `[min, max]` touch as pending.
    pub(crate) fn mark_changed(&self, min: i64, max: i64) {
        let (start, end) = self.grid.covering(min, max);
        let mut inner = self.inner.lock();
        inner.pending.insert(start, end);
        inner.pending_since.get_or_insert_with(Instant::now);
        inner.marks += 1;
    }

    /// How many times writes have marked buckets changed ([`RollupState::coverage`] read
    /// before a mark may cover a bucket that the marking write changed).
    pub fn marks(&self) -> u64 {
        self.inner.lock().marks
    }

    /// Takes the next pending chunk to recompute, and marks it as being recomputed: the
    /// oldest pending range, cut at the end of its segment where the base table has rows
    /// (`data`: its smallest and largest time), taken whole where it has none. Buckets not
    /// yet over at `now_ns` (still receiving live writes) are left pending: queries read them
    /// raw. `None` when nothing closed is pending.
    pub fn next_work(&self, now_ns: i64, data: Option<(i64, i64)>) -> Option<(i64, i64)> {
        let open_from = self.grid.floor(now_ns);
        let mut inner = self.inner.lock();
        let (start, end) = inner.pending.iter().next()?;
        if start >= open_from {
            // what waits now is the open bucket, which queries read raw: no lag
            inner.pending_since = None;
            if !inner.backfilled {
                inner.backfilled = true;
                if let Some((_, done)) = &mut inner.backfill {
                    done.get_or_insert_with(Instant::now);
                }
            }
            return None;
        }
        let end = end.min(open_from);
        let chunk_end = match data {
            Some((lo, hi)) if end > self.grid.segment_floor(lo) && start <= hi => {
                if start < self.grid.segment_floor(lo) {
                    self.grid.segment_floor(lo)
                } else {
                    end.min(self.grid.segment_end(start))
                }
            }
            _ => end,
        };
        inner.pending.remove(start, chunk_end);
        inner.recomputing.insert(start, chunk_end);
        Some((start, chunk_end))
    }

    /// Puts a chunk taken by [`RollupState::next_work`] back as pending (its recomputation
    /// failed).
    pub fn abandon(&self, range: (i64, i64)) {
        let mut inner = self.inner.lock();
        inner.recomputing.remove(range.0, range.1);
        inner.pending.insert(range.0, range.1);
        inner.pending_since.get_or_insert_with(Instant::now);
    }

    /// Replaces the kept rows of `range` (a chunk taken by [`RollupState::next_work`]) with
    /// `rows`, durably, and marks it covered unless a write marked it pending since.
    /// `files_through_id` is the newest base-table file id as read before the recomputation
    /// began.
    pub fn install(
        &self,
        range: (i64, i64),
        rows: &[RecordBatch],
        files_through_id: u64,
    ) -> Result<(), StorageError> {
        let touched = self.segments_touched(range, rows)?;
        let before: Vec<(i64, Option<Segment>)> = {
            let inner = self.inner.lock();
            touched
                .into_iter()
                .map(|start| (start, inner.segments.get(&start).cloned()))
                .collect()
        };
        let generation = {
            let mut inner = self.inner.lock();
            inner.generation += 1;
            inner.generation
        };
        let mut replaced = Vec::new();
        for (start, old) in before {
            let segment = self.rebuild_segment(start, old.as_ref(), range, rows, generation)?;
            replaced.push((start, segment, old));
        }
        let manifest = {
            let mut inner = self.inner.lock();
            for (start, segment, _) in &replaced {
                match segment {
                    Some(segment) => inner.segments.insert(*start, segment.clone()),
                    None => inner.segments.remove(start),
                };
            }
            inner.recomputing.remove(range.0, range.1);
            if inner.pending.is_empty() && inner.recomputing.is_empty() {
                inner.pending_since = None;
            }
            inner.last_refresh = Some(SystemTime::now());
            self.manifest(&mut inner, files_through_id)
        };
        self.save(&manifest)?;
        for (_, segment, old) in replaced {
            let new_file = segment.as_ref().map(|s| s.file.as_str());
            if let Some(old) = old.filter(|old| Some(old.file.as_str()) != new_file) {
                self.remove_file(&old.file);
            }
        }
        Ok(())
    }

    /// Drops the segments that end at or before `cutoff` (rows a retention period removed
    /// from the base table).
    pub fn expire_before(&self, cutoff: i64, files_through_id: u64) -> Result<(), StorageError> {
        let (gone, manifest) = {
            let mut inner = self.inner.lock();
            let expired: Vec<i64> = inner
                .segments
                .keys()
                .copied()
                .filter(|&start| self.grid.segment_end(start) <= cutoff)
                .collect();
            if expired.is_empty() {
                return Ok(());
            }
            let gone: Vec<Segment> = expired
                .iter()
                .filter_map(|start| inner.segments.remove(start))
                .collect();
            (gone, self.manifest(&mut inner, files_through_id))
        };
        self.save(&manifest)?;
        for segment in &gone {
            self.remove_file(&segment.file);
        }
        Ok(())
    }

    /// The covered buckets within `[lo, hi)` (times; `None`: unbounded) at or after `cutoff`
    /// (a retention period's start), and the kept rows for them, read together.
    pub fn coverage(&self, lo: Option<i64>, hi: Option<i64>, cutoff: Option<i64>) -> Coverage {
        let start = self
            .grid
            .ceil(lo.unwrap_or(i64::MIN).max(cutoff.unwrap_or(i64::MIN)));
        let end = self.grid.floor(hi.unwrap_or(i64::MAX));
        let inner = self.inner.lock();
        let mut covered = inner.pending.gaps_within(start, end);
        for (s, e) in inner.recomputing.iter() {
            covered.remove(s, e);
        }
        let rows = inner
            .segments
            .iter()
            .filter(|(&seg, _)| covered.overlaps(seg, self.grid.segment_end(seg)))
            .map(|(_, segment)| segment.rows.clone())
            .collect();
        Coverage { covered, rows }
    }

    /// Where the rollup stands; `data` is the base table's smallest and largest time.
    pub fn stats(&self, data: Option<(i64, i64)>) -> RollupStats {
        let inner = self.inner.lock();
        let mut outstanding = inner.pending.clone();
        outstanding.extend(&inner.recomputing);
        let progress = match data {
            Some((lo, hi)) => {
                let (lo, hi) = (
                    self.grid.floor(lo),
                    self.grid.floor(hi).saturating_add(self.grid.width),
                );
                let mut left_over = Ranges::new();
                for (s, e) in outstanding.iter() {
                    left_over.insert(s.max(lo), e.min(hi));
                }
                1.0 - left_over.width() as f64 / (hi.saturating_sub(lo)).max(1) as f64
            }
            None => 1.0,
        };
        let backfill_seconds = inner.backfill.map_or(0.0, |(start, done)| {
            done.unwrap_or_else(Instant::now)
                .duration_since(start)
                .as_secs_f64()
        });
        RollupStats {
            state: if inner.backfilled {
                "ready"
            } else {
                "backfilling"
            },
            rows: inner
                .segments
                .values()
                .map(|s| s.rows.num_rows() as u64)
                .sum(),
            bytes: inner.segments.values().map(|s| s.bytes).sum(),
            pending_ranges: outstanding.len(),
            covered_fraction: progress.clamp(0.0, 1.0),
            lag_seconds: inner
                .pending_since
                .map_or(0.0, |since| since.elapsed().as_secs_f64()),
            backfill_seconds,
            last_refresh: inner
                .last_refresh
                .map(|t| chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339()),
        }
    }

    /// Rows kept in total (what choosing between rollups weighs).
    pub fn kept_rows(&self) -> u64 {
        let inner = self.inner.lock();
        inner
            .segments
            .values()
            .map(|s| s.rows.num_rows() as u64)
            .sum()
    }

    /// The segments `range` and `rows` touch, in order.
    fn segments_touched(
        &self,
        range: (i64, i64),
        rows: &[RecordBatch],
    ) -> Result<Vec<i64>, StorageError> {
        let mut starts: std::collections::BTreeSet<i64> = {
            let inner = self.inner.lock();
            inner
                .segments
                .keys()
                .copied()
                .filter(|&seg| seg < range.1 && self.grid.segment_end(seg) > range.0)
                .collect()
        };
        for batch in rows {
            let times = bucket_times(batch)?;
            if let (Some(min), Some(max)) = (arrow::compute::min(times), arrow::compute::max(times))
            {
                // a chunk lies within one segment, or is empty outside the data
                let mut segment = self.grid.segment_floor(min);
                while segment <= max {
                    starts.insert(segment);
                    segment = self.grid.segment_end(segment);
                }
            }
        }
        Ok(starts.into_iter().collect())
    }

    /// The segment at `start` after replacing `range`'s rows of `old` with `rows`, written
    /// to a new file (`None` if it is left empty).
    fn rebuild_segment(
        &self,
        start: i64,
        old: Option<&Segment>,
        range: (i64, i64),
        rows: &[RecordBatch],
        generation: u64,
    ) -> Result<Option<Segment>, StorageError> {
        let end = self.grid.segment_end(start);
        let mut parts = Vec::new();
        if let Some(old) = old {
            parts.push(select_times(&old.rows, |t| t < range.0 || t >= range.1)?);
        }
        for batch in rows {
            parts.push(select_times(batch, |t| t >= start && t < end)?);
        }
        parts.retain(|p| p.num_rows() > 0);
        let Some(first) = parts.first() else {
            return Ok(None);
        };
        let merged = concat_batches(&first.schema(), &parts)?;
        let file = format!("{start}-{generation}.parquet");
        let bytes = match &self.dir {
            Some(dir) => write_segment(&dir.join(&file), &merged)?,
            None => 0,
        };
        Ok(Some(Segment {
            rows: merged,
            file,
            bytes,
        }))
    }

    fn manifest(&self, inner: &mut Inner, files_through_id: u64) -> Manifest {
        inner.saved_through_id = inner.saved_through_id.max(files_through_id);
        let mut pending = inner.pending.clone();
        pending.extend(&inner.recomputing);
        Manifest {
            format: MANIFEST_FORMAT,
            definition: self.definition.clone(),
            created_seq: self.created_seq,
            backfilled: inner.backfilled,
            files_through_id,
            pending: pending.iter().collect(),
            segments: inner
                .segments
                .iter()
                .map(|(&start, s)| SegmentEntry {
                    start,
                    file: s.file.clone(),
                    rows: s.rows.num_rows() as u64,
                    bytes: s.bytes,
                })
                .collect(),
        }
    }

    /// Writes the manifest of a new rollup (everything pending).
    pub(crate) fn save_new(&self) -> Result<(), StorageError> {
        let manifest = self.manifest(&mut self.inner.lock(), 0);
        self.save(&manifest)
    }

    /// Records that the state reflects every base-table file up to `files_through_id` (read
    /// before this call), if that is newer than the manifest says: a persist or compaction
    /// gives rows new files without changing them, and a restart would otherwise recompute
    /// their buckets. Pending buckets are recorded as they are now, so writes in those files
    /// that the state does not reflect stay pending.
    pub fn checkpoint(&self, files_through_id: u64) -> Result<(), StorageError> {
        let manifest = {
            let mut inner = self.inner.lock();
            if files_through_id <= inner.saved_through_id || inner.dropped {
                return Ok(());
            }
            self.manifest(&mut inner, files_through_id)
        };
        self.save(&manifest)
    }

    fn save(&self, manifest: &Manifest) -> Result<(), StorageError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let _order = self.saving.lock();
        create_dir_durably(dir)?;
        let bytes = serde_json::to_vec_pretty(manifest)
            .map_err(|e| StorageError::Catalog(format!("cannot encode a rollup manifest: {e}")))?;
        Ok(replace_durably(
            dir,
            MANIFEST_FILE,
            &bytes,
            Access::Default,
        )?)
    }

    fn remove_file(&self, file: &str) {
        if let Some(dir) = &self.dir {
            let path = dir.join(file);
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove a replaced rollup segment");
            }
        }
    }

    /// The state a manifest and its segment files describe; files in `dir` it does not name
    /// are deleted (left by an installation that died before its manifest was written).
    pub(crate) fn load(dir: &Path, manifest: Manifest) -> Result<Self, StorageError> {
        if manifest.format != MANIFEST_FORMAT {
            return Err(StorageError::Catalog(format!(
                "{} has format {}, this build reads format {MANIFEST_FORMAT}",
                dir.join(MANIFEST_FILE).display(),
                manifest.format
            )));
        }
        let mut segments = BTreeMap::new();
        for entry in &manifest.segments {
            let rows = read_segment(&dir.join(&entry.file))?;
            segments.insert(
                entry.start,
                Segment {
                    rows,
                    file: entry.file.clone(),
                    bytes: entry.bytes,
                },
            );
        }
        remove_unnamed_files(dir, &segments)?;
        let mut pending = Ranges::new();
        for &(s, e) in &manifest.pending {
            pending.insert(s, e);
        }
        let generation = segments
            .values()
            .filter_map(|s| {
                s.file
                    .rsplit_once('-')?
                    .1
                    .strip_suffix(".parquet")?
                    .parse()
                    .ok()
            })
            .max()
            .unwrap_or(0);
        let grid = BucketGrid::new(manifest.definition.bucket_ns, manifest.definition.origin_ns);
        let inner = Inner {
            segments,
            saved_through_id: manifest.files_through_id,
            pending_since: (!pending.is_empty()).then(Instant::now),
            pending,
            backfilled: manifest.backfilled,
            backfill: (!manifest.backfilled).then(|| (Instant::now(), None)),
            generation,
            ..Inner::default()
        };
        Ok(RollupState {
            definition: manifest.definition,
            grid,
            created_seq: manifest.created_seq,
            dir: Some(dir.to_path_buf()),
            inner: Mutex::new(inner),
            saving: Mutex::new(()),
        })
    }

    /// The directory of the rollup's files, if it has one.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

/// Reads a rollup directory's manifest.
pub(crate) fn read_manifest(dir: &Path) -> Result<Manifest, StorageError> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|e| StorageError::io(&path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        StorageError::Catalog(format!(
            "{} is not a valid rollup manifest: {e}",
            path.display()
        ))
    })
}

/// The `time` column (bucket starts) of a rollup batch.
fn bucket_times(
    batch: &RecordBatch,
) -> Result<&arrow::array::TimestampNanosecondArray, StorageError> {
    batch
        .column_by_name(quiver_model::schema::TIME_COLUMN)
        .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
        .ok_or_else(|| {
            StorageError::Catalog("rollup rows need a nanosecond `time` column".to_string())
        })
}

/// The rows of `batch` whose bucket time passes `keep`.
fn select_times(
    batch: &RecordBatch,
    keep: impl Fn(i64) -> bool,
) -> Result<RecordBatch, StorageError> {
    let times = bucket_times(batch)?;
    let mask: BooleanArray = times.iter().map(|t| Some(t.is_some_and(&keep))).collect();
    if mask.true_count() == batch.num_rows() {
        return Ok(batch.clone());
    }
    Ok(filter_record_batch(batch, &mask)?)
}

fn write_segment(path: &Path, rows: &RecordBatch) -> Result<u64, StorageError> {
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    crate::parquet_write::write_parquet_durably(path, rows, properties)
}

fn read_segment(path: &Path) -> Result<RecordBatch, StorageError> {
    let file = std::fs::File::open(path).map_err(|e| StorageError::io(path, e))?;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?.build()?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    Ok(concat_batches(&schema, &batches)?)
}

fn remove_unnamed_files(dir: &Path, segments: &BTreeMap<i64, Segment>) -> Result<(), StorageError> {
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| StorageError::io(dir, e))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let named = name == MANIFEST_FILE || segments.values().any(|s| s.file == name);
        if !named {
            std::fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
        }
    }
    Ok(())
}

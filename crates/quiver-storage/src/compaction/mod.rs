//! Compaction: keeps the number of Parquet files per table and time partition bounded and
//! the files of a quiet partition free of overlaps, whatever the write pattern.
//!
//! Every persist adds one file per table and partition it touched. Files are merged in two
//! ways, always a run of files that are consecutive in the partition's write order (so "later
//! write wins" still holds between the merged file and every file around it):
//! - **tiers**: once `compaction_fanout` consecutive small files of one generation exist,
//!   they become one file of the next generation, so a steady stream of persists costs each
//!   row about log_fanout(target / persist size) rewrites, not one per persist;
//! - **settling**: once a partition has received no new file for `compaction_idle_secs` (or
//!   when [`crate::Store::compact_now`] asks), every small file and every file that overlaps another
//!   is merged, leaving files of about `compaction_target_file_bytes` whose time ranges do
//!   not overlap: queries then scan them with no deduplicating merge.
//!
//! A merge reads its inputs, sorts and deduplicates them exactly as a persist does, cuts the
//! result by time into files of about the target size, writes them durably, and swaps them
//! for the inputs in one atomic catalog replacement. Inputs leave the disk (and the chunk
//! cache) only once no query still holds them ([`Compactor::delete_unread`]); a process that
//! dies at any moment leaves either the old files or the new ones named by the catalog, and
//! the unnamed ones are orphans deleted at the next start. A file that cannot be read is
//! quarantined: left as it is, never picked again, and reported.
//!
//! This file is the planner and its bookkeeping; [`merge`] runs a merge (reading, cutting and
//! writing the files, and swapping them into the catalog); the planner's tests are in
//! `tests.rs`.

mod merge;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::catalog::TableEntry;
use crate::chunk_cache::ChunkCache;
use crate::data_store::DataStore;
use crate::error::StorageError;
use crate::file_entry::FileEntry;
use crate::table::ParquetFile;
use crate::table_rows::schema_of;

/// When and how files are compacted. The serde names are the server's configuration keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionOptions {
    /// Whether the background compactor runs ([`crate::Store::compact_now`] works either
    /// way).
    #[serde(rename = "compaction_enabled")]
    pub enabled: bool,
    /// Size compacted files aim at. A file of at least half of it is *full*: rewritten only
    /// when another file overlaps it.
    #[serde(rename = "compaction_target_file_bytes")]
    pub target_file_bytes: u64,
    /// How many consecutive small files of one generation become one of the next.
    #[serde(rename = "compaction_fanout")]
    pub fanout: usize,
    /// A partition that received no new file for this long (whole seconds) is settled.
    #[serde(rename = "compaction_idle_secs", with = "quiver_model::settings::secs")]
    pub idle: Duration,
    /// A partition with more small files than this merges some of them even before a tier
    /// is complete or the partition is idle: the bound on files per partition while it is
    /// written to (full files aside).
    #[serde(rename = "compaction_max_small_files")]
    pub max_small_files: usize,
    /// The most memory one merge's rows may take as Arrow arrays (a merge holds them, and at
    /// most one sorted copy, in memory): the files of one merge are chosen to fit.
    #[serde(rename = "compaction_max_merge_bytes")]
    pub max_merge_bytes: u64,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        CompactionOptions {
            enabled: true,
            target_file_bytes: 64 << 20,
            fanout: 8,
            idle: Duration::from_secs(120),
            max_small_files: 10,
            max_merge_bytes: quiver_model::settings::share_of_memory(
                32,
                64 << 20,
                1 << 30,
                256 << 20,
            ),
        }
    }
}

impl CompactionOptions {
    /// Checks the options make sense, naming the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.fanout < 2 {
            return Err(format!(
                "compaction_fanout must be at least 2, got {}",
                self.fanout
            ));
        }
        if self.target_file_bytes < 4096 {
            return Err(format!(
                "compaction_target_file_bytes must be at least 4096, got {}",
                self.target_file_bytes
            ));
        }
        if self.max_small_files < 2 {
            return Err(format!(
                "compaction_max_small_files must be at least 2, got {}",
                self.max_small_files
            ));
        }
        if self.max_merge_bytes < 1 << 20 {
            return Err(format!(
                "compaction_max_merge_bytes must be at least 1 MiB, got {}",
                self.max_merge_bytes
            ));
        }
        Ok(())
    }

    fn is_full(&self, file: &FileEntry) -> bool {
        file.bytes >= self.target_file_bytes / 2
    }
}

/// What one or more merges did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompactionSummary {
    /// Merges completed.
    pub compactions: u64,
    /// Files merged away.
    pub files_in: u64,
    /// Files written.
    pub files_out: u64,
    /// Rows read.
    pub rows_in: u64,
    /// Rows written (fewer when duplicates were merged).
    pub rows_out: u64,
    /// Parquet bytes read.
    pub bytes_in: u64,
    /// Parquet bytes written.
    pub bytes_out: u64,
}

impl CompactionSummary {
    pub(crate) fn add(&mut self, other: &CompactionSummary) {
        self.compactions += other.compactions;
        self.files_in += other.files_in;
        self.files_out += other.files_out;
        self.rows_in += other.rows_in;
        self.rows_out += other.rows_out;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
    }
}

/// Compaction counters since start, and the file layout now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CompactionStats {
    /// What the merges since start did.
    #[serde(flatten)]
    pub done: CompactionSummary,
    /// Merges that failed (retried later).
    pub failures: u64,
    /// The last failure, if the last attempt failed.
    pub last_error: Option<String>,
    /// Replaced files deleted from disk (after compaction, retention or a drop).
    pub files_deleted: u64,
    /// Files taken out of the catalog because every row in them was past their database's
    /// retention period.
    pub expired_files: u64,
    /// Replaced files still read by a running query (deleted once it finishes).
    pub files_awaiting_deletion: usize,
    /// Files that could not be read: never merged, reported here and in the log.
    pub quarantined_files: Vec<String>,
    /// Files the catalog names now.
    pub files: usize,
    /// Table time partitions with at least one file.
    pub partitions: usize,
    /// The most files any one partition has.
    pub max_files_per_partition: usize,
    /// The files of each table now (tables with none are not listed).
    pub tables: Vec<TableFiles>,
    /// The time merges spent reading, merging, encoding and storing, summed.
    pub times: crate::parquet_write::WriteTimes,
    /// The most memory one merge's rows may take (`compaction_max_merge_bytes`, as resolved).
    pub max_merge_bytes: u64,
}

/// The Parquet files one table has now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableFiles {
    /// Its database.
    pub db: String,
    /// The table.
    pub table: String,
    /// Files the catalog names.
    pub files: usize,
    /// Time partitions with at least one file.
    pub partitions: usize,
    /// Rows in those files (a row rewritten in a later file counts in both until compacted).
    pub rows: u64,
    /// Bytes of those files on disk.
    pub bytes: u64,
}

/// Whether the table of a database, name and catalog id still exists (a dropped table's
/// files wait in the catalog until a persist takes them out, and are never merged).
pub(crate) type TableExists<'a> = dyn Fn(&str, &str, u64) -> bool + 'a;

/// Which tables a compaction request covers.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompactionScope<'a> {
    /// Only this database (all when `None`).
    pub database: Option<&'a str>,
    /// Only this table of it (all when `None`).
    pub table: Option<&'a str>,
}

impl CompactionScope<'_> {
    fn covers(&self, database: &str, table: &str) -> bool {
        self.database.is_none_or(|d| d == database) && self.table.is_none_or(|t| t == table)
    }
}

/// One merge: consecutive files of one table partition, in write order.
#[derive(Debug, Clone)]
pub(crate) struct Merge {
    pub database: String,
    pub table: String,
    pub table_id: u64,
    pub partition_start_ns: i64,
    pub inputs: Vec<FileEntry>,
    /// The table's columns as the catalog records them: every input is widened to them.
    pub schema: SchemaRef,
}

impl Merge {
    /// The generation of the merged files.
    pub(crate) fn generation(&self) -> u32 {
        self.inputs.iter().map(|f| f.generation).max().unwrap_or(0) + 1
    }
}

/// The compactor's bookkeeping: options, counters, when each partition last got a file,
/// replaced files waiting for their last reader, quarantined files, and the background
/// thread's wake-up signal. Merges themselves are run by the persister, which owns the
/// catalog.
pub(crate) struct Compactor {
    pub(crate) options: CompactionOptions,
    stats: Mutex<CompactionStats>,
    /// When a persist last added a file to `(table id, partition start)`, for the partitions
    /// that got one within the last `idle`: older entries are dropped (a partition without
    /// an entry is idle once the store has run for `idle`, the same answer), so the map holds
    /// only the partitions written to lately.
    last_change: Mutex<HashMap<(u64, i64), Instant>>,
    started: Instant,
    /// Replaced files, deleted once nothing else holds them.
    retired: Mutex<Vec<(Instant, Arc<ParquetFile>)>>,
    /// Files that failed to read, by id, with the error.
    quarantined: Mutex<HashMap<u64, String>>,
    /// `true` once the store is closing.
    signal: Mutex<bool>,
    wake: Condvar,
}

impl Compactor {
    pub(crate) fn new(options: CompactionOptions) -> Self {
        Compactor {
            options,
            stats: Mutex::new(CompactionStats::default()),
            last_change: Mutex::new(HashMap::new()),
            started: Instant::now(),
            retired: Mutex::new(Vec::new()),
            quarantined: Mutex::new(HashMap::new()),
            signal: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// Notes that persists added files to these `(table id, partition start)` pairs.
    pub(crate) fn files_added(&self, partitions: impl IntoIterator<Item = (u64, i64)>) {
        let now = Instant::now();
        let mut last_change = self.last_change.lock();
        let idle = self.options.idle;
        last_change.retain(|_, changed| changed.elapsed() < idle);
        last_change.extend(partitions.into_iter().map(|p| (p, now)));
        drop(last_change);
        self.wake.notify_one();
    }

    /// Waits up to `timeout` for a wake-up; `false` once the store is closing.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let mut closing = self.signal.lock();
        if !*closing {
            self.wake.wait_for(&mut closing, timeout);
        }
        !*closing
    }

    /// Whether the store is closing (merges stop).
    pub(crate) fn is_closing(&self) -> bool {
        *self.signal.lock()
    }

    /// Tells the background thread to stop.
    pub(crate) fn shut_down(&self) {
        *self.signal.lock() = true;
        self.wake.notify_all();
    }

    /// The next merge in `tables` (the catalog's tables of `database`), settling partitions
    /// that are idle, or all of them when `settle_all`.
    pub(crate) fn next_merge(
        &self,
        database: &str,
        tables: &std::collections::BTreeMap<String, TableEntry>,
        scope: CompactionScope<'_>,
        (settle_all, exists): (bool, &TableExists<'_>),
    ) -> Option<Merge> {
        let quarantined = self.quarantined.lock();
        let last_change = self.last_change.lock();
        for (name, table) in tables {
            if !scope.covers(database, name) || !exists(database, name, table.id) {
                continue;
            }
            for (start, files) in partitions(&table.files) {
                let settle = settle_all || {
                    let changed = last_change
                        .get(&(table.id, start))
                        .copied()
                        .unwrap_or(self.started);
                    changed.elapsed() >= self.options.idle
                };
                // a quarantined file splits the partition: no merge may move rows across it
                for segment in files.split(|f| quarantined.contains_key(&f.id)) {
                    let Some(range) = plan_partition(segment, &self.options, settle) else {
                        continue;
                    };
                    // opening the store checked every column type
                    let Ok(columns) = table.column_types() else {
                        continue;
                    };
                    return Some(Merge {
                        database: database.to_string(),
                        table: name.clone(),
                        table_id: table.id,
                        partition_start_ns: start,
                        inputs: segment[range].iter().map(|f| (*f).clone()).collect(),
                        schema: schema_of(&columns.into_iter().collect()),
                    });
                }
            }
        }
        None
    }

    /// Counts a completed merge.
    pub(crate) fn record_success(&self, done: &CompactionSummary) {
        let mut stats = self.stats.lock();
        stats.done.add(done);
        stats.last_error = None;
    }

    /// Counts files deleted by retention.
    pub(crate) fn record_expired(&self, files: usize) {
        self.stats.lock().expired_files += files as u64;
    }

    /// Counts a failed merge; quarantines `unreadable` (a file that failed to read).
    pub(crate) fn record_failure(&self, error: &StorageError, unreadable: Option<&FileEntry>) {
        let mut stats = self.stats.lock();
        stats.failures += 1;
        stats.last_error = Some(error.to_string());
        if let Some(file) = unreadable {
            tracing::error!(file = %file.path, error = %error, "quarantined an unreadable Parquet file: compaction leaves it alone");
            self.quarantined
                .lock()
                .insert(file.id, format!("{}: {error}", file.path));
        }
    }

    /// Hands over files a merge replaced, to be deleted once no query reads them.
    pub(crate) fn retire(&self, files: Vec<Arc<ParquetFile>>) {
        // a quarantined file leaves the catalog only this way (a drop or retention): its
        // report goes with it
        let mut quarantined = self.quarantined.lock();
        for file in &files {
            quarantined.remove(&file.entry.id);
        }
        drop(quarantined);
        let now = Instant::now();
        self.retired
            .lock()
            .extend(files.into_iter().map(|f| (now, f)));
    }

    /// Deletes the replaced files no query holds any more (a running scan holds its files
    /// until it finishes) and drops them from the chunk cache; in a shared store only those
    /// replaced [`crate::SHARED_DELETE_DELAY`] ago or longer (a query node may read one through
    /// a catalog it still holds). Returns how many went.
    pub(crate) fn delete_unread(&self, data: &DataStore, chunk_cache: &ChunkCache) -> usize {
        let delay = data.delete_delay();
        let unread: Vec<Arc<ParquetFile>> = {
            let mut retired = self.retired.lock();
            let (unread, held): (Vec<_>, Vec<_>) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|(at, f)| Arc::strong_count(f) == 1 && at.elapsed() >= delay);
            *retired = held;
            unread.into_iter().map(|(_, f)| f).collect()
        };
        for file in &unread {
            if let Err(e) = data.delete(&file.entry.path) {
                // left for the orphan sweep at the next start
                tracing::warn!(error = %e, "could not delete a compacted file");
            }
        }
        chunk_cache.forget_files(unread.iter().map(|f| f.entry.path.as_str()));
        self.stats.lock().files_deleted += unread.len() as u64;
        unread.len()
    }

    /// Counters since start, with the layout of `catalog`'s files now.
    pub(crate) fn stats(&self, catalog: &crate::catalog::CatalogState) -> CompactionStats {
        let mut stats = self.stats.lock().clone();
        stats.max_merge_bytes = self.options.max_merge_bytes;
        stats.files_awaiting_deletion = self.retired.lock().len();
        stats.quarantined_files = self.quarantined.lock().values().cloned().collect();
        stats.quarantined_files.sort();
        for (db, database) in &catalog.databases {
            for (name, table) in &database.tables {
                if table.files.is_empty() {
                    continue;
                }
                let layout = partitions(&table.files);
                stats.files += table.files.len();
                stats.partitions += layout.len();
                for (_, files) in &layout {
                    stats.max_files_per_partition = stats.max_files_per_partition.max(files.len());
                }
                stats.tables.push(TableFiles {
                    db: db.clone(),
                    table: name.clone(),
                    files: table.files.len(),
                    partitions: layout.len(),
                    rows: table.files.iter().map(|f| f.rows).sum(),
                    bytes: table.files.iter().map(|f| f.bytes).sum(),
                });
            }
        }
        stats
    }
}

/// A table's files grouped by time partition, each group in write order.
fn partitions(files: &[FileEntry]) -> Vec<(i64, Vec<&FileEntry>)> {
    let mut groups: std::collections::BTreeMap<i64, Vec<&FileEntry>> = Default::default();
    for file in files {
        groups
            .entry(file.partition_start_ns)
            .or_default()
            .push(file);
    }
    groups.into_iter().collect()
}

/// Which consecutive files of one partition (in write order) to merge now, if any: a tier of
/// `fanout` small files of the lowest generation that has one; else, when the partition has
/// more than `max_small_files` small files, a shorter run of them; else, when `settle`, every
/// small or overlapping file.
pub(crate) fn plan_partition(
    files: &[&FileEntry],
    options: &CompactionOptions,
    settle: bool,
) -> Option<Range<usize>> {
    tier(files, options)
        .or_else(|| crowded(files, options))
        .or_else(|| settle.then(|| settling(files, options)).flatten())
}

/// When there are more small files than `max_small_files`: the lowest generation's first run
/// of two or more consecutive small files of that generation, else the first run of small
/// files of any generations.
fn crowded(files: &[&FileEntry], options: &CompactionOptions) -> Option<Range<usize>> {
    let small = files.iter().filter(|f| !options.is_full(f)).count();
    if small <= options.max_small_files {
        return None;
    }
    let mut runs: Vec<(u32, Range<usize>)> = Vec::new();
    for (i, file) in files.iter().enumerate() {
        if options.is_full(file) {
            continue;
        }
        match runs.last_mut() {
            Some((generation, run)) if run.end == i && *generation == file.generation => {
                run.end = i + 1;
            }
            _ => runs.push((file.generation, i..i + 1)),
        }
    }
    runs.into_iter()
        .filter(|(_, run)| run.len() >= 2)
        .min_by_key(|(generation, run)| (*generation, run.start))
        .and_then(|(_, run)| affordable(files, run, options))
        .or_else(|| small_run(files, options))
}

/// The first run of `fanout` consecutive small files of one generation, lowest generation
/// first.
fn tier(files: &[&FileEntry], options: &CompactionOptions) -> Option<Range<usize>> {
    let mut best: Option<(u32, usize)> = None;
    let mut run = 0;
    for (i, file) in files.iter().enumerate() {
        run = match i.checked_sub(1).map(|p| files[p]) {
            _ if options.is_full(file) => 0,
            Some(prev) if !options.is_full(prev) && prev.generation == file.generation => run + 1,
            _ => 1,
        };
        if run >= options.fanout && best.is_none_or(|(g, _)| file.generation < g) {
            best = Some((file.generation, i + 1 - options.fanout));
        }
    }
    let (_, start) = best?;
    affordable(files, start..start + options.fanout, options)
}

/// The longest prefix of `range` whose rows fit one merge's memory, if it has two files or
/// more (fewer would merge nothing).
fn affordable(
    files: &[&FileEntry],
    range: Range<usize>,
    options: &CompactionOptions,
) -> Option<Range<usize>> {
    let mut end = range.start;
    let mut memory = 0u64;
    while end < range.end && memory + files[end].memory_bytes() <= options.max_merge_bytes {
        memory += files[end].memory_bytes();
        end += 1;
    }
    (end - range.start >= 2).then_some(range.start..end)
}

/// The files a quiet partition still needs merged: from the first to the last file that is
/// small or overlaps another (so the result overlaps nothing); when that reads too much for
/// one merge (or would not leave fewer files), the first affordable run of small files.
fn settling(files: &[&FileEntry], options: &CompactionOptions) -> Option<Range<usize>> {
    let overlaps = |i: usize| {
        files.iter().enumerate().any(|(j, other)| {
            j != i
                && other.min_time_ns <= files[i].max_time_ns
                && files[i].min_time_ns <= other.max_time_ns
        })
    };
    let needed: Vec<usize> = (0..files.len())
        .filter(|&i| !options.is_full(files[i]) || overlaps(i))
        .collect();
    let (&first, &last) = (needed.first()?, needed.last()?);
    if first == last {
        return None;
    }
    let whole = first..last + 1;
    let bytes: u64 = files[whole.clone()].iter().map(|f| f.bytes).sum();
    let memory: u64 = files[whole.clone()].iter().map(|f| f.memory_bytes()).sum();
    // a merge either removes overlaps or leaves fewer files (it writes one file per target
    // size): otherwise settling could rewrite the same files forever
    let fewer = bytes.div_ceil(options.target_file_bytes) < whole.len() as u64;
    if (fewer || needed.iter().any(|&i| overlaps(i))) && memory <= options.max_merge_bytes {
        return Some(whole);
    }
    // too much at once: merge runs of small files only (overlaps with full files stay, and
    // queries deduplicate them)
    small_run(files, options)
}

/// The first affordable run of two or more consecutive small files.
fn small_run(files: &[&FileEntry], options: &CompactionOptions) -> Option<Range<usize>> {
    (0..files.len()).find_map(|start| {
        let end = (start..files.len())
            .find(|&i| options.is_full(files[i]))
            .unwrap_or(files.len());
        affordable(files, start..end, options)
    })
}

#[cfg(test)]
mod tests;

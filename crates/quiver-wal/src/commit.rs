//! Group commit: writers queue records; one thread writes every queued record with one
//! `write`, covers them with one `fdatasync`, applies them in order, then completes the writers.

use std::fs::File;
use std::future::Future;
use std::io::{IoSlice, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::segment::{self, create_segment, list_segments, Recovery, ReplaySummary, HEADER};
use crate::{Payload, WalError};

/// How a writer wants its record acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After an `fdatasync` that covers the record (the default for every write API).
    Sync,
    /// Once the record is written to the segment file (the operating system may still lose it
    /// on a power cut); for clients that ask for `no_sync=true`.
    NoSync,
}

/// Settings of the log. The serde names are the server's configuration keys; `dir` and
/// `max_record_bytes` are chosen by the program, not configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WalOptions {
    /// Directory of the segment files (empty: the embedding program's default place).
    #[serde(skip)]
    pub dir: PathBuf,
    /// A new segment file is started once the current one reaches this size.
    #[serde(rename = "wal_segment_bytes")]
    pub segment_bytes: u64,
    /// Largest payload of one record (one write request's rows); also the bound replay trusts
    /// a length field up to.
    #[serde(skip)]
    pub max_record_bytes: usize,
    /// Fsync the WAL before acknowledging a write (group commit). `false` acknowledges writes
    /// the operating system may still lose on a power cut or kernel crash: for throwaway data,
    /// tests and benchmarks only.
    #[serde(rename = "wal_fsync")]
    pub fsync: bool,
    /// Corruption in the middle of the WAL at startup: `strict` refuses to start (naming the
    /// file and offset), `truncate` drops the corrupt record and everything after it.
    #[serde(rename = "wal_recovery")]
    pub recovery: Recovery,
    /// The lowest sequence number a new record may get: one past what the catalog says is
    /// persisted, so a log directory lost or replaced never hands out numbers replay would
    /// skip as persisted. Set by the store, not a setting.
    #[serde(skip)]
    pub first_seq: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            dir: PathBuf::new(),
            segment_bytes: 64 << 20,
            max_record_bytes: 1 << 30,
            fsync: true,
            recovery: Recovery::Strict,
            first_seq: 1,
        }
    }
}

/// Receives records in sequence order once they are durable (or written, for `NoSync`).
pub trait Apply<T>: Send + 'static {
    /// Makes record `seq` visible.
    fn apply(&mut self, seq: u64, item: T);
}

/// Counters of the log since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records written.
    pub records: u64,
    /// Bytes written (headers included).
    pub bytes: u64,
    /// `fdatasync` calls on segment files.
    pub syncs: u64,
    /// Group commits (one `write` each).
    pub groups: u64,
}

struct Pending<T> {
    payload: Payload,
    item: T,
    durability: Durability,
    done: oneshot::Sender<Result<u64, WalError>>,
}

struct Queue<T> {
    pending: Vec<Pending<T>>,
    /// Set when the commit thread failed: every later append fails with this message.
    failed: Option<String>,
    shutdown: bool,
}

struct Shared<T> {
    queue: Mutex<Queue<T>>,
    wake: Condvar,
    records: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    groups: AtomicU64,
    /// Sequence number of the first record of every closed segment, and the segment's path.
    closed_segments: Mutex<Vec<(u64, PathBuf)>>,
    /// First sequence number of the open segment (changed under `closed_segments`' lock).
    open_first_seq: AtomicU64,
}

/// The write-ahead log: an append handle shared by all writers.
pub struct Wal<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    max_record_bytes: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
    dir: PathBuf,
}

impl<T: Send + 'static> Wal<T> {
    /// Opens the log in `options.dir` (created if missing): replays every record into `replay`,
    /// then starts a fresh segment and the commit thread, which applies new records to `sink`.
    pub fn open(
        options: WalOptions,
        replay: impl FnMut(u64, &[u8]) -> Result<(), String>,
        sink: impl Apply<T>,
    ) -> Result<(Wal<T>, ReplaySummary), WalError> {
        std::fs::create_dir_all(&options.dir).map_err(WalError::io(&options.dir))?;
        // Sequence numbers never go back, even when every record was persisted and its segment
        // removed: the newest segment's name (possibly an empty one replay removes) is a floor.
        let floor = list_segments(&options.dir)?
            .last()
            .map_or(1, |(first, _)| *first);
        let summary = segment::replay(
            &options.dir,
            options.recovery,
            options.max_record_bytes,
            replay,
        )?;
        let next_seq = (summary.last_seq + 1).max(floor).max(options.first_seq);
        let closed = list_segments(&options.dir)?;
        let (file, path) = create_segment(&options.dir, next_seq)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                failed: None,
                shutdown: false,
            }),
            wake: Condvar::new(),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            groups: AtomicU64::new(0),
            closed_segments: Mutex::new(closed),
            open_first_seq: AtomicU64::new(next_seq),
        });
        let committer = Committer {
            shared: shared.clone(),
            options: options.clone(),
            file,
            path,
            first_seq: next_seq,
            size: HEADER.len() as u64,
            next_seq,
            sink,
            headers: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("quiver-wal".into())
            .spawn(move || committer.run())
            .map_err(WalError::io(&options.dir))?;
        Ok((
            Wal {
                shared,
                max_record_bytes: options.max_record_bytes,
                thread: Mutex::new(Some(thread)),
                dir: options.dir,
            },
            summary,
        ))
    }

    /// Queues a record. Its place in the log is fixed when this returns (so callers that
    /// serialise their calls serialise the log); the future resolves with its sequence number
    /// once it is applied and as durable as `durability` asks.
    pub fn append(
        &self,
        payload: impl Into<Payload>,
        item: T,
        durability: Durability,
    ) -> impl Future<Output = Result<u64, WalError>> + Send + 'static {
        let payload = payload.into();
        let (done, receiver) = oneshot::channel();
        let rejected = if payload.len() > self.max_record_bytes {
            Some(WalError::RecordTooLarge {
                size: payload.len(),
                limit: self.max_record_bytes,
            })
        } else {
            let mut queue = self.shared.queue.lock();
            match (&queue.failed, queue.shutdown) {
                (Some(message), _) => Some(WalError::Closed(message.clone())),
                (None, true) => Some(WalError::Closed("the server is shutting down".into())),
                (None, false) => {
                    queue.pending.push(Pending {
                        payload,
                        item,
                        durability,
                        done,
                    });
                    self.shared.wake.notify_one();
                    None
                }
            }
        };
        async move {
            if let Some(error) = rejected {
                return Err(error);
            }
            receiver
                .await
                .unwrap_or_else(|_| Err(WalError::Closed("the commit thread stopped".into())))
        }
    }

    /// Counters since start.
    pub fn stats(&self) -> WalStats {
        WalStats {
            records: self.shared.records.load(Ordering::Relaxed),
            bytes: self.shared.bytes.load(Ordering::Relaxed),
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            groups: self.shared.groups.load(Ordering::Relaxed),
        }
    }

    /// Deletes closed segments all of whose records have sequence numbers `<= seq` (their
    /// contents are durable elsewhere). Returns how many were deleted.
    pub fn remove_segments_through(&self, seq: u64) -> Result<usize, WalError> {
        let mut closed = self.shared.closed_segments.lock();
        let open_first = self.shared.open_first_seq.load(Ordering::Acquire);
        // segment i holds [first_i, first_{i+1}); the last closed one ends where the open one starts
        let removable = (0..closed.len())
            .take_while(|&i| {
                let next_first = closed.get(i + 1).map_or(open_first, |(first, _)| *first);
                next_first - 1 <= seq
            })
            .count();
        for (_, path) in closed.drain(..removable) {
            std::fs::remove_file(&path).map_err(WalError::io(&path))?;
        }
        if removable > 0 {
            segment::sync_dir(&self.dir)?;
        }
        Ok(removable)
    }

    /// Writes and syncs everything queued, then stops the commit thread. Later appends fail.
    pub fn close(&self) {
        {
            let mut queue = self.shared.queue.lock();
            queue.shutdown = true;
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl<T: Send + 'static> Drop for Wal<T> {
    fn drop(&mut self) {
        self.close();
    }
}

/// The commit thread's state.
struct Committer<T, S> {
    shared: Arc<Shared<T>>,
    options: WalOptions,
    file: File,
    path: PathBuf,
    first_seq: u64,
    size: u64,
    next_seq: u64,
    sink: S,
    /// The record headers of the group being written (reused).
    headers: Vec<[u8; segment::RECORD_HEADER]>,
}

impl<T: Send + 'static, S: Apply<T>> Committer<T, S> {
    fn run(mut self) {
        loop {
            let batch = {
                let mut queue = self.shared.queue.lock();
                while queue.pending.is_empty() && !queue.shutdown {
                    self.shared.wake.wait(&mut queue);
                }
                if queue.pending.is_empty() {
                    break;
                }
                std::mem::take(&mut queue.pending)
            };
            if let Err(error) = self.commit(batch) {
                let message = error.to_string();
                tracing::error!(error = %message, "WAL write failed; refusing further writes");
                let mut queue = self.shared.queue.lock();
                queue.failed = Some(message.clone());
                for pending in queue.pending.drain(..) {
                    let _ = pending.done.send(Err(WalError::Closed(message.clone())));
                }
                return;
            }
        }
        if let Err(e) = self.file.sync_data() {
            tracing::error!(file = %self.path.display(), error = %e, "final WAL sync failed");
        }
    }

    /// Writes, syncs and applies one group; on failure every writer of the group gets the error.
    fn commit(&mut self, batch: Vec<Pending<T>>) -> Result<(), WalError> {
        if self.size >= self.options.segment_bytes {
            self.rotate()?;
        }
        self.headers.clear();
        let first = self.next_seq;
        for pending in &batch {
            self.headers
                .push(segment::record_header(self.next_seq, &pending.payload));
            self.next_seq += 1;
        }
        let written_bytes: usize = batch
            .iter()
            .map(|p| segment::RECORD_HEADER + p.payload.len())
            .sum();
        let needs_sync =
            self.options.fsync && batch.iter().any(|p| p.durability == Durability::Sync);
        // Headers and payload parts go to the file as they are (no copy into one buffer).
        let mut slices: Vec<IoSlice<'_>> = Vec::new();
        for (header, pending) in self.headers.iter().zip(&batch) {
            slices.push(IoSlice::new(header));
            slices.extend(pending.payload.parts().map(IoSlice::new));
        }
        let written = write_all_vectored(&mut self.file, &mut slices).and_then(|()| {
            if needs_sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(source) = written {
            let message = format!("WAL I/O error on {}: {source}", self.path.display());
            for pending in batch {
                let _ = pending.done.send(Err(WalError::Closed(message.clone())));
            }
            return Err(WalError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.size += written_bytes as u64;
        self.shared
            .records
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.shared
            .bytes
            .fetch_add(written_bytes as u64, Ordering::Relaxed);
        self.shared.groups.fetch_add(1, Ordering::Relaxed);
        if needs_sync {
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        }
        for (seq, pending) in (first..).zip(batch) {
            self.sink.apply(seq, pending.item);
            let _ = pending.done.send(Ok(seq));
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), WalError> {
        self.file.sync_data().map_err(WalError::io(&self.path))?;
        let (file, path) = create_segment(&self.options.dir, self.next_seq)?;
        let old_path = std::mem::replace(&mut self.path, path);
        let mut closed = self.shared.closed_segments.lock();
        closed.push((self.first_seq, old_path));
        self.shared
            .open_first_seq
            .store(self.next_seq, Ordering::Release);
        drop(closed);
        self.file = file;
        self.first_seq = self.next_seq;
        self.size = HEADER.len() as u64;
        Ok(())
    }
}

/// Writes every byte of `slices` (the file takes at most `IOV_MAX` slices per call).
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    const IOV_MAX: usize = 1024;
    while !slices.is_empty() {
        let take = slices.len().min(IOV_MAX);
        match file.write_vectored(&slices[..take]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "the WAL file accepted no bytes",
                ))
            }
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Records what was applied, in order.
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<(u64, u32)>>>);

    impl Apply<u32> for Log {
        fn apply(&mut self, seq: u64, item: u32) {
            self.0.lock().push((seq, item));
        }
    }

    fn options(dir: &Path) -> WalOptions {
        WalOptions {
            dir: dir.to_path_buf(),
            segment_bytes: 256,
            max_record_bytes: 1 << 20,
            fsync: true,
            recovery: Recovery::Strict,
            first_seq: 1,
        }
    }

    fn replay_payloads(dir: &Path) -> Vec<Vec<u8>> {
        let mut seen = Vec::new();
        let (wal, _) = Wal::<u32>::open(
            options(dir),
            |_, p| {
                seen.push(p.to_vec());
                Ok(())
            },
            Log::default(),
        )
        .unwrap();
        wal.close();
        seen
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_are_applied_in_log_order_and_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::default();
        let (wal, summary) = Wal::open(options(dir.path()), |_, _| Ok(()), log.clone()).unwrap();
        assert_eq!(summary.records, 0);
        let wal = Arc::new(wal);
        let tasks: Vec<_> = (0..200u32)
            .map(|i| {
                let wal = wal.clone();
                tokio::spawn(async move {
                    wal.append(i.to_le_bytes().to_vec(), i, Durability::Sync)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut seqs = Vec::new();
        for task in tasks {
            seqs.push(task.await.unwrap());
        }
        // one at a time: one group each, so the small segments rotate
        for i in 200..230u32 {
            seqs.push(
                wal.append(i.to_le_bytes().to_vec(), i, Durability::Sync)
                    .await
                    .unwrap(),
            );
        }
        seqs.sort();
        assert_eq!(seqs, (1..=230).collect::<Vec<_>>());
        let applied = log.0.lock().clone();
        assert_eq!(applied.iter().map(|(s, _)| *s).collect::<Vec<_>>(), seqs);
        let stats = wal.stats();
        assert_eq!(stats.records, 230);
        assert!(stats.syncs >= 31 && stats.syncs <= stats.groups && stats.groups <= 230);
        wal.close();
        // small segments: the log rotated, and replay sees every record in the applied order
        assert!(list_segments(dir.path()).unwrap().len() > 2);
        let replayed = replay_payloads(dir.path());
        let items: Vec<u32> = applied.iter().map(|(_, i)| *i).collect();
        let replayed: Vec<u32> = replayed
            .iter()
            .map(|p| u32::from_le_bytes(p[..4].try_into().unwrap()))
            .collect();
        assert_eq!(replayed, items);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn payloads_in_parts_are_written_and_replayed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = options(dir.path());
        opts.segment_bytes = 1 << 20;
        let (wal, _) = Wal::open(opts, |_, _| Ok(()), Log::default()).unwrap();
        let wal = Arc::new(wal);
        // Many parts (more than one vectored write takes) from concurrent writers, so groups
        // hold several multi-part records.
        let tasks: Vec<_> = (0..8u8)
            .map(|w| {
                let wal = wal.clone();
                tokio::spawn(async move {
                    let mut payload = Payload::new();
                    payload.push(vec![w; 3]);
                    for i in 0..1500u32 {
                        payload.push(i.to_le_bytes());
                    }
                    payload.push(Vec::<u8>::new());
                    payload.push(vec![w]);
                    wal.append(payload, u32::from(w), Durability::Sync)
                        .await
                        .unwrap()
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        wal.close();
        let replayed = replay_payloads(dir.path());
        assert_eq!(replayed.len(), 8);
        for payload in replayed {
            let w = payload[0];
            let mut expected = vec![w; 3];
            for i in 0..1500u32 {
                expected.extend_from_slice(&i.to_le_bytes());
            }
            expected.push(w);
            assert_eq!(payload, expected);
        }
    }

    #[tokio::test]
    async fn oversized_records_and_appends_after_close_fail() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = options(dir.path());
        opts.max_record_bytes = 8;
        let (wal, _) = Wal::open(opts, |_, _| Ok(()), Log::default()).unwrap();
        assert!(matches!(
            wal.append(vec![0; 9], 1, Durability::Sync).await,
            Err(WalError::RecordTooLarge { size: 9, limit: 8 })
        ));
        assert_eq!(
            wal.append(vec![0; 8], 2, Durability::NoSync).await.unwrap(),
            1
        );
        wal.close();
        assert!(matches!(
            wal.append(vec![1], 3, Durability::Sync).await,
            Err(WalError::Closed(_))
        ));
    }

    #[tokio::test]
    async fn segments_covered_by_a_persisted_sequence_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(options(dir.path()), |_, _| Ok(()), Log::default()).unwrap();
        for i in 0..40u32 {
            wal.append(vec![7; 60], i, Durability::Sync).await.unwrap();
        }
        let before = list_segments(dir.path()).unwrap();
        assert!(before.len() >= 4, "{before:?}");
        assert_eq!(wal.remove_segments_through(0).unwrap(), 0);
        let removed = wal.remove_segments_through(20).unwrap();
        assert!(removed >= 1);
        wal.close();
        let replayed = replay_payloads(dir.path());
        // everything after sequence 20 is still there
        assert!(
            replayed.len() >= 20 && replayed.len() < 40,
            "{}",
            replayed.len()
        );
    }
}

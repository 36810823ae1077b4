//! Segment files: the record format, creating and syncing segments, and replay with torn-tail
//! detection.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Payload, WalError};

/// First bytes of every segment file.
pub(crate) const HEADER: &[u8; 8] = b"QVRWAL01";
/// Bytes before a record's payload: length, CRC, sequence number.
pub(crate) const RECORD_HEADER: usize = 4 + 4 + 8;
const EXTENSION: &str = "wal";

/// What to do when a record in the middle of the log is corrupt (configured as `strict` or
/// `truncate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// Refuse to start, naming the file and offset (the default: never silently lose data).
    #[default]
    Strict,
    /// Drop the corrupt record and everything after it, log what was dropped, and start.
    Truncate,
}

/// What replay found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Segment files read.
    pub segments: usize,
    /// Records handed to the replay function.
    pub records: u64,
    /// Payload bytes replayed.
    pub bytes: u64,
    /// Sequence number of the last good record (0 if none).
    pub last_seq: u64,
    /// Where a torn or corrupt tail was cut off, if anywhere: (file, byte offset).
    pub truncated_at: Option<(PathBuf, u64)>,
}

/// The header of record `seq` holding `payload` (which follows it in the file). The caller
/// ensures the payload's length fits a `u32` (see `WalOptions::max_record_bytes`).
pub(crate) fn record_header(seq: u64, payload: &Payload) -> [u8; RECORD_HEADER] {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    for part in payload.parts() {
        crc.update(part);
    }
    let mut header = [0; RECORD_HEADER];
    header[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    header[8..16].copy_from_slice(&seq.to_le_bytes());
    header
}

/// One record found in a segment.
struct RecordAt<'a> {
    seq: u64,
    payload: &'a [u8],
    end: usize,
}

/// Decodes the record starting at `offset`, or says why it is not a valid record.
fn decode_record(
    buf: &[u8],
    offset: usize,
    max_record_bytes: usize,
) -> Result<RecordAt<'_>, String> {
    let rest = &buf[offset..];
    if rest.len() < RECORD_HEADER {
        return Err(format!(
            "{} bytes remain, a record header needs {RECORD_HEADER}",
            rest.len()
        ));
    }
    let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap());
    let seq = u64::from_le_bytes(rest[8..16].try_into().unwrap());
    if len > max_record_bytes {
        return Err(format!(
            "declared length {len} exceeds the maximum record size {max_record_bytes}"
        ));
    }
    if rest.len() - RECORD_HEADER < len {
        return Err(format!(
            "declared length {len} but only {} bytes remain",
            rest.len() - RECORD_HEADER
        ));
    }
    let payload = &rest[RECORD_HEADER..RECORD_HEADER + len];
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(payload);
    if hasher.finalize() != crc {
        return Err("CRC mismatch".into());
    }
    Ok(RecordAt {
        seq,
        payload,
        end: offset + RECORD_HEADER + len,
    })
}

/// The file name of the segment whose first record is `first_seq`.
pub(crate) fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.{EXTENSION}"))
}

/// Segment files in `dir`, ordered by their first sequence number.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(WalError::io(dir))? {
        let path = entry.map_err(WalError::io(dir))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
            continue;
        }
        let first = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        if let Some(first) = first {
            segments.push((first, path));
        }
    }
    segments.sort();
    Ok(segments)
}

/// Creates a new, empty segment (header only), durable including its directory entry.
pub(crate) fn create_segment(dir: &Path, first_seq: u64) -> Result<(File, PathBuf), WalError> {
    let path = segment_path(dir, first_seq);
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)
        .map_err(WalError::io(&path))?;
    file.write_all(HEADER).map_err(WalError::io(&path))?;
    file.sync_all().map_err(WalError::io(&path))?;
    sync_dir(dir)?;
    Ok((file, path))
}

/// Makes the directory's entries (created, renamed, removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(WalError::io(dir))
}

/// Cuts `path` to `len` bytes, durably.
fn truncate_file(path: &Path, len: u64) -> Result<(), WalError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(WalError::io(path))?;
    file.set_len(len).map_err(WalError::io(path))?;
    file.sync_all().map_err(WalError::io(path))
}

/// Reads every segment in `dir` in order and hands each good record to `apply`.
///
/// A bad record at the tail of the last segment (a torn write) is cut off and logged. A bad
/// record followed by valid ones, or in an earlier segment, is corruption: an error under
/// [`Recovery::Strict`], cut off together with everything after it under
/// [`Recovery::Truncate`]. Segments holding no record are removed.
pub(crate) fn replay(
    dir: &Path,
    recovery: Recovery,
    max_record_bytes: usize,
    mut apply: impl FnMut(u64, &[u8]) -> Result<(), String>,
) -> Result<ReplaySummary, WalError> {
    let segments = list_segments(dir)?;
    let mut summary = ReplaySummary::default();
    for (index, (_, path)) in segments.iter().enumerate() {
        let is_last = index + 1 == segments.len();
        let buf = std::fs::read(path).map_err(WalError::io(path))?;
        summary.segments += 1;
        if buf.len() < HEADER.len() && HEADER.starts_with(&buf) {
            // a segment torn while its header was written holds nothing
            remove_file(path)?;
            continue;
        }
        if &buf[..HEADER.len()] != HEADER {
            return Err(WalError::BadHeader { path: path.clone() });
        }
        let mut offset = HEADER.len();
        let mut records_here = 0;
        while offset < buf.len() {
            let record = decode_record(&buf, offset, max_record_bytes).and_then(|r| {
                if r.seq <= summary.last_seq {
                    Err(format!(
                        "sequence {} does not follow {}",
                        r.seq, summary.last_seq
                    ))
                } else {
                    Ok(r)
                }
            });
            let record = match record {
                Ok(record) => record,
                Err(reason) => {
                    let torn_tail =
                        is_last && !valid_record_follows(&buf, offset, max_record_bytes);
                    if !torn_tail && recovery == Recovery::Strict {
                        return Err(WalError::Corrupt {
                            path: path.clone(),
                            offset: offset as u64,
                            reason,
                        });
                    }
                    cut_off(
                        path,
                        offset as u64,
                        &reason,
                        torn_tail,
                        &segments[index + 1..],
                    )?;
                    summary.truncated_at = Some((path.clone(), offset as u64));
                    if records_here == 0 {
                        remove_file(path)?;
                    }
                    return Ok(summary);
                }
            };
            apply(record.seq, record.payload).map_err(|message| WalError::Replay {
                seq: record.seq,
                path: path.clone(),
                message,
            })?;
            summary.records += 1;
            summary.bytes += record.payload.len() as u64;
            summary.last_seq = record.seq;
            records_here += 1;
            offset = record.end;
        }
        if records_here == 0 {
            remove_file(path)?;
        }
    }
    Ok(summary)
}

/// True if a bad record at `offset` has a plausible length and a valid record right after it
/// (so the damage is in the middle of the log, not a torn tail).
fn valid_record_follows(buf: &[u8], offset: usize, max_record_bytes: usize) -> bool {
    let Some(len_bytes) = buf.get(offset..offset + 4) else {
        return false;
    };
    let len = u32::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
    let next = offset + RECORD_HEADER + len;
    len <= max_record_bytes
        && next < buf.len()
        && decode_record(buf, next, max_record_bytes).is_ok()
}

fn cut_off(
    path: &Path,
    offset: u64,
    reason: &str,
    torn_tail: bool,
    later: &[(u64, PathBuf)],
) -> Result<(), WalError> {
    if torn_tail {
        tracing::warn!(file = %path.display(), offset, reason, "dropping a torn record at the end of the WAL");
    } else {
        tracing::error!(
            file = %path.display(),
            offset,
            reason,
            later_segments = later.len(),
            "wal_recovery=truncate: dropping a corrupt WAL record and everything after it"
        );
    }
    truncate_file(path, offset)?;
    for (_, later_path) in later {
        remove_file(later_path)?;
    }
    Ok(())
}

fn remove_file(path: &Path) -> Result<(), WalError> {
    std::fs::remove_file(path).map_err(WalError::io(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_segment(dir: &Path, first: u64, payloads: &[&[u8]]) -> PathBuf {
        let mut buf = HEADER.to_vec();
        for (i, p) in payloads.iter().enumerate() {
            buf.extend_from_slice(&record_header(first + i as u64, &p.to_vec().into()));
            buf.extend_from_slice(p);
        }
        let path = segment_path(dir, first);
        std::fs::write(&path, buf).unwrap();
        path
    }

    /// A replayed record: sequence number and payload.
    type Replayed = (u64, Vec<u8>);

    fn replay_all(
        dir: &Path,
        recovery: Recovery,
    ) -> Result<(Vec<Replayed>, ReplaySummary), WalError> {
        let mut seen = Vec::new();
        let summary = replay(dir, recovery, 1 << 20, |seq, p| {
            seen.push((seq, p.to_vec()));
            Ok(())
        })?;
        Ok((seen, summary))
    }

    #[test]
    fn replays_segments_in_order() {
        let dir = tempfile::tempdir().unwrap();
        write_segment(dir.path(), 3, &[b"c", b"d"]);
        write_segment(dir.path(), 1, &[b"a", b"b"]);
        let (seen, summary) = replay_all(dir.path(), Recovery::Strict).unwrap();
        assert_eq!(
            seen.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(seen[3].1, b"d");
        assert_eq!(summary.last_seq, 4);
        assert_eq!(summary.truncated_at, None);
    }

    #[test]
    fn every_torn_tail_is_cut_and_the_prefix_kept() {
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10 + i as usize]).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let template = tempfile::tempdir().unwrap();
        let full = std::fs::read(write_segment(template.path(), 1, &refs)).unwrap();
        let boundaries: Vec<usize> = {
            let mut at = HEADER.len();
            let mut b = vec![at];
            for p in &payloads {
                at += RECORD_HEADER + p.len();
                b.push(at);
            }
            b
        };
        for cut in HEADER.len()..full.len() {
            let dir = tempfile::tempdir().unwrap();
            let path = segment_path(dir.path(), 1);
            std::fs::write(&path, &full[..cut]).unwrap();
            let (seen, summary) = replay_all(dir.path(), Recovery::Strict).unwrap();
            let complete = boundaries.iter().filter(|&&b| b <= cut).count() - 1;
            assert_eq!(seen.len(), complete, "cut at {cut}");
            assert_eq!(
                summary.truncated_at.is_some(),
                !boundaries.contains(&cut),
                "cut at {cut}"
            );
            if complete > 0 {
                assert_eq!(
                    std::fs::metadata(&path).unwrap().len() as usize,
                    boundaries[complete]
                );
            }
        }
    }

    #[test]
    fn corruption_in_the_middle_is_an_error_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_segment(dir.path(), 1, &[b"first", b"second", b"third"]);
        let mut bytes = std::fs::read(&path).unwrap();
        let second = HEADER.len() + RECORD_HEADER + 5;
        bytes[second + RECORD_HEADER] ^= 0xff; // flip a payload byte of record 2
        std::fs::write(&path, &bytes).unwrap();
        let err = replay_all(dir.path(), Recovery::Strict).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains(&format!("offset {second}")), "{message}");
        assert!(message.contains("wal_recovery"), "{message}");

        let (seen, summary) = replay_all(dir.path(), Recovery::Truncate).unwrap();
        assert_eq!(seen, vec![(1, b"first".to_vec())]);
        assert_eq!(summary.truncated_at, Some((path.clone(), second as u64)));
        assert_eq!(replay_all(dir.path(), Recovery::Strict).unwrap().0.len(), 1);
    }

    #[test]
    fn corruption_in_an_earlier_segment_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_segment(dir.path(), 1, &[b"a", b"b"]);
        let second = write_segment(dir.path(), 3, &[b"c"]);
        let len = std::fs::metadata(&first).unwrap().len();
        truncate_file(&first, len - 1).unwrap();
        assert!(matches!(
            replay_all(dir.path(), Recovery::Strict),
            Err(WalError::Corrupt { .. })
        ));
        let (seen, _) = replay_all(dir.path(), Recovery::Truncate).unwrap();
        assert_eq!(seen.len(), 1);
        assert!(!second.exists());
    }

    #[test]
    fn foreign_files_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(segment_path(dir.path(), 1), b"NOTAWAL!and more").unwrap();
        assert!(matches!(
            replay_all(dir.path(), Recovery::Strict),
            Err(WalError::BadHeader { .. })
        ));
    }
}

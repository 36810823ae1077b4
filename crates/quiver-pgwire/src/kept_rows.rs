//! DataRow encodings kept with cached answers. The first time a cached answer is sent over the
//! PostgreSQL protocol in a given result format, its encoded rows are recorded as they go out
//! and kept with the answer (`QueryService::keep_encoding`); a later hit in the same format
//! sends those bytes instead of encoding every value again.
//!
//! A kept encoding is the rows' `DataRow` bodies, each preceded by its length (u32, little
//! endian). It is a function of the answer's batches and the per-column formats only: text
//! and binary encodings of the data model's types do not depend on session settings.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use pgwire::api::portal::Format;
use pgwire::api::results::FieldFormat;
use pgwire::messages::data::DataRow;
use quiver_service::EncodingKey;

/// The key a cached answer keeps its rows under: whether each column is sent in binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RowEncoding {
    binary: Vec<bool>,
}

impl EncodingKey for RowEncoding {}

impl RowEncoding {
    /// The encoding of `columns` columns in `format`.
    pub(super) fn of(format: &Format, columns: usize) -> Self {
        let binary = (0..columns)
            .map(|column| format.format_for(column) == FieldFormat::Binary)
            .collect();
        RowEncoding { binary }
    }
}

/// Records the rows of one answer as they are sent, up to `max_bytes` (an encoding larger
/// than that would not be kept anyway).
#[derive(Debug)]
pub(super) struct RowRecorder {
    encoded: BytesMut,
    max_bytes: usize,
    complete: bool,
}

impl RowRecorder {
    /// A recorder that gives up beyond `max_bytes`.
    pub(super) fn new(max_bytes: usize) -> Self {
        RowRecorder {
            encoded: BytesMut::new(),
            max_bytes,
            complete: true,
        }
    }

    /// Appends `row` (unless the recording is already over its limit).
    pub(super) fn record(&mut self, row: &DataRow) {
        if !self.complete {
            return;
        }
        let Ok(length) = u32::try_from(row.data.len()) else {
            self.abandon();
            return;
        };
        if self.encoded.len() + 4 + row.data.len() > self.max_bytes {
            self.abandon();
            return;
        }
        self.encoded.put_u32_le(length);
        self.encoded.extend_from_slice(&row.data);
    }

    /// Gives the recording up (a row failed to encode: the rows sent are not the answer).
    pub(super) fn abandon(&mut self) {
        self.complete = false;
        self.encoded = BytesMut::new();
    }

    /// Every row recorded, or `None` if the recording went over its limit or was abandoned.
    /// The recording is taken out: the recorder is left abandoned.
    pub(super) fn finish(&mut self) -> Option<Bytes> {
        let complete = std::mem::replace(&mut self.complete, false);
        let encoded = std::mem::take(&mut self.encoded);
        complete.then(|| encoded.freeze())
    }
}

/// The rows of a kept encoding, in order, as `DataRow` messages of `field_count` fields.
/// `None` for a row whose length runs past the end (never produced by [`RowRecorder`]).
/// The encoding is copied once; the rows are views into that copy (no allocation per row).
pub(super) fn kept_rows(
    encoded: &Bytes,
    field_count: i16,
) -> impl Iterator<Item = Option<DataRow>> + Send {
    let mut encoded = BytesMut::from(&encoded[..]);
    std::iter::from_fn(move || {
        if encoded.is_empty() {
            return None;
        }
        if encoded.len() < 4 {
            encoded.clear();
            return Some(None);
        }
        let length = encoded.get_u32_le() as usize;
        if length > encoded.len() {
            encoded.clear();
            return Some(None);
        }
        Some(Some(DataRow::new(encoded.split_to(length), field_count)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(data: &[u8]) -> DataRow {
        DataRow::new(BytesMut::from(data), 2)
    }

    #[test]
    fn recorded_rows_come_back_in_order() {
        let mut recorder = RowRecorder::new(1 << 20);
        let rows = [
            &b"\x00\x00\x00\x01a\xff\xff\xff\xff"[..],
            b"",
            b"\x00\x00\x00\x00xyz",
        ];
        for data in rows {
            recorder.record(&row(data));
        }
        let back: Vec<_> = kept_rows(&recorder.finish().unwrap(), 2)
            .map(|r| r.expect("whole row"))
            .collect();
        assert_eq!(back.len(), 3);
        for (kept, data) in back.iter().zip(rows) {
            assert_eq!(&kept.data[..], data);
            assert_eq!(kept.field_count, 2);
        }
    }

    #[test]
    fn a_recording_over_its_limit_is_not_kept() {
        let mut recorder = RowRecorder::new(10);
        recorder.record(&row(b"12345"));
        assert!(recorder.encoded.len() == 9);
        recorder.record(&row(b"12345"));
        recorder.record(&row(b""));
        assert_eq!(recorder.finish(), None);
    }

    #[test]
    fn a_cut_encoding_ends_in_an_error_row() {
        let mut recorder = RowRecorder::new(1 << 20);
        recorder.record(&row(b"abcdef"));
        let encoded = recorder.finish().unwrap();
        let cut = encoded.slice(..encoded.len() - 1);
        let back: Vec<_> = kept_rows(&cut, 2).collect();
        assert_eq!(back.len(), 1);
        assert!(back[0].is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_rows_within_the_limit_come_back_as_sent(
            rows in proptest::collection::vec(proptest::collection::vec(0u8.., 0..64), 0..50),
            max_bytes in 0usize..4096,
        ) {
            let mut recorder = RowRecorder::new(max_bytes);
            for data in &rows {
                recorder.record(&row(data));
            }
            let needed: usize = rows.iter().map(|r| 4 + r.len()).sum();
            match recorder.finish() {
                Some(encoded) => {
                    proptest::prop_assert!(needed <= max_bytes);
                    let back: Vec<Vec<u8>> = kept_rows(&encoded, 2)
                        .map(|r| r.expect("whole row").data.to_vec())
                        .collect();
                    proptest::prop_assert_eq!(back, rows);
                }
                None => proptest::prop_assert!(needed > max_bytes),
            }
        }
    }

    #[test]
    fn keys_tell_each_columns_format() {
        let binary = |format: &Format, columns| RowEncoding::of(format, columns).binary;
        assert_eq!(binary(&Format::UnifiedText, 3), [false; 3]);
        assert_eq!(binary(&Format::UnifiedBinary, 2), [true; 2]);
        assert_eq!(
            binary(&Format::Individual(vec![0, 1, 1]), 3),
            [false, true, true]
        );
        assert_ne!(
            RowEncoding::of(&Format::UnifiedText, 2),
            RowEncoding::of(&Format::UnifiedText, 3)
        );
    }
}

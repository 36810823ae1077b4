//! A cursor over MessagePack bytes: one value's marker (decoded by `rmp`), scalars borrowed from
//! the input (strings are `&str` into it, numbers are read in place), the headers of arrays and
//! maps, and skipping a whole value. Every error names the byte offset of the value at fault.
//!
//! Nothing is allocated from a length the input declares: a declared length is only ever a
//! loop bound, and every element consumes at least one byte, so a forged length ends in a
//! "truncated" error after at most as many steps as there are bytes.

use arrow::array::Float64Builder;
use rmp::Marker;

/// The deepest nesting [`Reader::skip`] walks through (a "nesting bomb" is an error, not a
/// stack overflow or a hang).
pub(crate) const MAX_DEPTH: usize = 64;

/// What is wrong with the input, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadError {
    /// Byte offset in the (decompressed) payload.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
    /// The value runs past the end of the bytes read so far (more bytes may complete it).
    pub truncated: bool,
}

/// A scalar value, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar<'a> {
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits `i64` (whatever its encoding).
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// `float 32` (widened) or `float 64`.
    Float(f64),
    /// A UTF-8 string.
    Str(&'a str),
    /// A MessagePack timestamp (extension type -1), in nanoseconds since the Unix epoch.
    Timestamp(i64),
}

impl Scalar<'_> {
    /// The kind's name for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Scalar::Nil => "nil",
            Scalar::Bool(_) => "boolean",
            Scalar::Int(_) | Scalar::UInt(_) => "integer",
            Scalar::Float(_) => "float",
            Scalar::Str(_) => "string",
            Scalar::Timestamp(_) => "timestamp",
        }
    }
}

/// One value's head: a whole scalar, or the number of elements (entries) of an array (map).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Item<'a> {
    /// A scalar.
    Scalar(Scalar<'a>),
    /// An array of this many values follows.
    Array(u32),
    /// A map of this many key-value pairs follows.
    Map(u32),
}

impl Item<'_> {
    /// The kind's name for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Item::Scalar(s) => s.kind(),
            Item::Array(_) => "array",
            Item::Map(_) => "map",
        }
    }
}

/// The cursor.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// The payload offset of `data[0]` (offsets are the payload's, not the slice's).
    base: usize,
}

impl<'a> Reader<'a> {
    /// A cursor over `data`, the payload's bytes from offset `base` on.
    pub(crate) fn new(data: &'a [u8], base: usize) -> Self {
        Reader { data, pos: 0, base }
    }

    /// Payload offset of the next byte to read.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes of `data` read so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to read (an upper bound on the number of values left).
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Reads up to `max` consecutive float64 values (marker 0xcb) into `out`, stopping at
    /// the first value of any other kind or at the end of the bytes; returns how many it read.
    /// The fast path of a float column (MessagePack encoders write Python and Go floats so).
    #[inline]
    pub(crate) fn float64_run(&mut self, out: &mut Float64Builder, max: usize) -> usize {
        let mut read = 0;
        while read < max {
            let Some(&[0xcb, b0, b1, b2, b3, b4, b5, b6, b7]) =
                self.data.get(self.pos..self.pos + 9)
            else {
                break;
            };
            out.append_value(f64::from_be_bytes([b0, b1, b2, b3, b4, b5, b6, b7]));
            self.pos += 9;
            read += 1;
        }
        read
    }

    /// True once every byte was read.
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// An error at `offset`.
    pub(crate) fn error_at(offset: usize, message: impl Into<String>) -> ReadError {
        ReadError {
            offset,
            message: message.into(),
            truncated: false,
        }
    }

    #[inline]
    fn take(&mut self, n: usize, start: usize) -> Result<&'a [u8], ReadError> {
        let left = self.data.len() - self.pos;
        if n > left {
            return Err(ReadError {
                truncated: true,
                ..Self::error_at(
                    start,
                    format!("truncated: the value needs {n} more bytes, only {left} are left"),
                )
            });
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    #[inline]
    fn array<const N: usize>(&mut self, start: usize) -> Result<[u8; N], ReadError> {
        Ok(self
            .take(N, start)?
            .try_into()
            .expect("take returns exactly N bytes"))
    }

    #[inline]
    fn u8(&mut self, start: usize) -> Result<u8, ReadError> {
        Ok(self.array::<1>(start)?[0])
    }

    #[inline]
    fn u16(&mut self, start: usize) -> Result<u16, ReadError> {
        Ok(u16::from_be_bytes(self.array(start)?))
    }

    #[inline]
    fn u32(&mut self, start: usize) -> Result<u32, ReadError> {
        Ok(u32::from_be_bytes(self.array(start)?))
    }

    #[inline]
    fn u64(&mut self, start: usize) -> Result<u64, ReadError> {
        Ok(u64::from_be_bytes(self.array(start)?))
    }

    /// Reads the next value's head: a whole scalar, or an array's / map's length.
    #[inline]
    pub(crate) fn next(&mut self) -> Result<Item<'a>, ReadError> {
        let start = self.offset();
        let marker = Marker::from_u8(self.u8(start)?);
        let scalar = match marker {
            Marker::FixPos(n) => Scalar::Int(i64::from(n)),
            Marker::FixNeg(n) => Scalar::Int(i64::from(n)),
            Marker::Null => Scalar::Nil,
            Marker::True => Scalar::Bool(true),
            Marker::False => Scalar::Bool(false),
            Marker::U8 => Scalar::Int(i64::from(self.u8(start)?)),
            Marker::U16 => Scalar::Int(i64::from(self.u16(start)?)),
            Marker::U32 => Scalar::Int(i64::from(self.u32(start)?)),
            Marker::U64 => {
                let v = self.u64(start)?;
                i64::try_from(v).map_or(Scalar::UInt(v), Scalar::Int)
            }
            Marker::I8 => Scalar::Int(i64::from(self.u8(start)? as i8)),
            Marker::I16 => Scalar::Int(i64::from(self.u16(start)? as i16)),
            Marker::I32 => Scalar::Int(i64::from(self.u32(start)? as i32)),
            Marker::I64 => Scalar::Int(self.u64(start)? as i64),
            Marker::F32 => Scalar::Float(f64::from(f32::from_bits(self.u32(start)?))),
            Marker::F64 => Scalar::Float(f64::from_bits(self.u64(start)?)),
            Marker::FixStr(n) => self.str_body(usize::from(n), start)?,
            Marker::Str8 => {
                let n = self.u8(start)?;
                self.str_body(usize::from(n), start)?
            }
            Marker::Str16 => {
                let n = self.u16(start)?;
                self.str_body(usize::from(n), start)?
            }
            Marker::Str32 => {
                let n = self.u32(start)?;
                self.str_body(n as usize, start)?
            }
            Marker::FixArray(n) => return Ok(Item::Array(u32::from(n))),
            Marker::Array16 => return Ok(Item::Array(u32::from(self.u16(start)?))),
            Marker::Array32 => return Ok(Item::Array(self.u32(start)?)),
            Marker::FixMap(n) => return Ok(Item::Map(u32::from(n))),
            Marker::Map16 => return Ok(Item::Map(u32::from(self.u16(start)?))),
            Marker::Map32 => return Ok(Item::Map(self.u32(start)?)),
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                return Err(Self::error_at(
                    start,
                    "binary values are not supported (send text as a string)",
                ))
            }
            Marker::FixExt1
            | Marker::FixExt2
            | Marker::FixExt4
            | Marker::FixExt8
            | Marker::FixExt16
            | Marker::Ext8
            | Marker::Ext16
            | Marker::Ext32 => self.extension(marker, start)?,
            Marker::Reserved => {
                return Err(Self::error_at(
                    start,
                    "invalid byte 0xc1 (never used in MessagePack)",
                ))
            }
        };
        Ok(Item::Scalar(scalar))
    }

    #[inline]
    fn str_body(&mut self, n: usize, start: usize) -> Result<Scalar<'a>, ReadError> {
        let bytes = self.take(n, start)?;
        // Names and tag values are short and nearly always ASCII: a word-at-a-time check
        // inline instead of a call to the full validator.
        if bytes.is_ascii() {
            // SAFETY: ASCII bytes are valid UTF-8.
            return Ok(Scalar::Str(unsafe { std::str::from_utf8_unchecked(bytes) }));
        }
        std::str::from_utf8(bytes).map(Scalar::Str).map_err(|e| {
            Self::error_at(
                start,
                format!(
                    "string is not valid UTF-8 (at byte {} of it)",
                    e.valid_up_to()
                ),
            )
        })
    }

    /// An extension value: only the timestamp extension (type -1) is a value Quiver stores.
    fn extension(&mut self, marker: Marker, start: usize) -> Result<Scalar<'a>, ReadError> {
        let len = match marker {
            Marker::FixExt1 => 1,
            Marker::FixExt2 => 2,
            Marker::FixExt4 => 4,
            Marker::FixExt8 => 8,
            Marker::FixExt16 => 16,
            Marker::Ext8 => usize::from(self.u8(start)?),
            Marker::Ext16 => usize::from(self.u16(start)?),
            _ => self.u32(start)? as usize,
        };
        let kind = self.u8(start)? as i8;
        let data = self.take(len, start)?;
        if kind != -1 {
            return Err(Self::error_at(
                start,
                format!("extension type {kind} is not supported (only timestamps, type -1)"),
            ));
        }
        timestamp_extension(data).map(Scalar::Timestamp).ok_or_else(|| {
            Self::error_at(
                start,
                "invalid or out-of-range timestamp extension (Quiver stores 1677-09-21 to 2262-04-11)",
            )
        })
    }

    /// Reads a string (a map key, a name); `what` names it in the error (built only then).
    pub(crate) fn string(&mut self, what: impl FnOnce() -> String) -> Result<&'a str, ReadError> {
        let start = self.offset();
        match self.next()? {
            Item::Scalar(Scalar::Str(s)) => Ok(s),
            other => Err(Self::error_at(
                start,
                format!("{} must be a string, not {}", what(), other.kind()),
            )),
        }
    }

    /// Skips one whole value (of any depth up to [`MAX_DEPTH`]).
    pub(crate) fn skip(&mut self) -> Result<(), ReadError> {
        // Values still to skip at each open level.
        let mut pending: Vec<u64> = vec![1];
        while let Some(left) = pending.last_mut() {
            if *left == 0 {
                pending.pop();
                continue;
            }
            *left -= 1;
            let start = self.offset();
            let children = match self.next()? {
                Item::Scalar(_) => continue,
                Item::Array(n) => u64::from(n),
                Item::Map(n) => 2 * u64::from(n),
            };
            if pending.len() >= MAX_DEPTH {
                return Err(Self::error_at(
                    start,
                    format!("values nested deeper than {MAX_DEPTH} levels"),
                ));
            }
            pending.push(children);
        }
        Ok(())
    }
}

/// Nanoseconds since the epoch of a timestamp extension's data (32-, 64- or 96-bit form).
fn timestamp_extension(data: &[u8]) -> Option<i64> {
    let (seconds, nanos): (i64, u32) = match data.len() {
        4 => (i64::from(u32::from_be_bytes(data.try_into().ok()?)), 0),
        8 => {
            let v = u64::from_be_bytes(data.try_into().ok()?);
            ((v & 0x3_ffff_ffff) as i64, (v >> 34) as u32)
        }
        12 => (
            i64::from_be_bytes(data[4..].try_into().ok()?),
            u32::from_be_bytes(data[..4].try_into().ok()?),
        ),
        _ => return None,
    };
    if nanos >= 1_000_000_000 {
        return None;
    }
    seconds
        .checked_mul(1_000_000_000)?
        .checked_add(i64::from(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(bytes: &[u8]) -> Vec<Item<'_>> {
        let mut reader = Reader::new(bytes, 0);
        let mut out = Vec::new();
        while !reader.at_end() {
            out.push(reader.next().unwrap());
        }
        out
    }

    #[test]
    fn scalars_decode_in_place() {
        let mut buf = Vec::new();
        rmp::encode::write_uint(&mut buf, 7).unwrap();
        rmp::encode::write_sint(&mut buf, -300).unwrap();
        rmp::encode::write_uint(&mut buf, u64::MAX).unwrap();
        rmp::encode::write_f32(&mut buf, 1.5).unwrap();
        rmp::encode::write_f64(&mut buf, -2.25).unwrap();
        rmp::encode::write_str(&mut buf, "état").unwrap();
        rmp::encode::write_bool(&mut buf, true).unwrap();
        rmp::encode::write_nil(&mut buf).unwrap();
        rmp::encode::write_array_len(&mut buf, 70_000).unwrap();
        rmp::encode::write_map_len(&mut buf, 3).unwrap();
        assert_eq!(
            items(&buf),
            vec![
                Item::Scalar(Scalar::Int(7)),
                Item::Scalar(Scalar::Int(-300)),
                Item::Scalar(Scalar::UInt(u64::MAX)),
                Item::Scalar(Scalar::Float(1.5)),
                Item::Scalar(Scalar::Float(-2.25)),
                Item::Scalar(Scalar::Str("état")),
                Item::Scalar(Scalar::Bool(true)),
                Item::Scalar(Scalar::Nil),
                Item::Array(70_000),
                Item::Map(3),
            ]
        );
    }

    #[test]
    fn timestamps_extension_forms() {
        // 64-bit form: 1 s + 5 ns
        let v: u64 = (5 << 34) | 1;
        let mut buf = vec![0xd7, 0xff];
        buf.extend_from_slice(&v.to_be_bytes());
        assert_eq!(
            items(&buf),
            vec![Item::Scalar(Scalar::Timestamp(1_000_000_005))]
        );
        // 96-bit form, negative seconds
        let mut buf = vec![0xc7, 12, 0xff];
        buf.extend_from_slice(&7u32.to_be_bytes());
        buf.extend_from_slice(&(-2i64).to_be_bytes());
        assert_eq!(
            items(&buf),
            vec![Item::Scalar(Scalar::Timestamp(-1_999_999_993))]
        );
        let mut reader = Reader::new(&[0xd4, 0x01, 0x00], 0);
        assert!(reader
            .next()
            .unwrap_err()
            .message
            .contains("extension type 1"));
    }

    #[test]
    fn bad_input_is_an_error_at_its_offset() {
        // truncated string: declares 10 bytes, has 2
        let mut reader = Reader::new(&[0x91, 0xaa, b'a', b'b'], 0);
        assert_eq!(reader.next().unwrap(), Item::Array(1));
        let e = reader.next().unwrap_err();
        assert_eq!(e.offset, 1);
        assert!(e.message.contains("truncated"), "{e:?}");
        // invalid UTF-8
        let e = Reader::new(&[0xa2, 0xff, 0xfe], 0).next().unwrap_err();
        assert!(e.message.contains("UTF-8"), "{e:?}");
        // reserved marker, binary
        assert!(Reader::new(&[0xc1], 0).next().is_err());
        assert!(Reader::new(&[0xc4, 1, 0], 0)
            .next()
            .unwrap_err()
            .message
            .contains("binary"));
        // a forged array length: an error, no allocation, no hang
        let e = Reader::new(&[0xdd, 0xff, 0xff, 0xff, 0xff], 0)
            .skip()
            .unwrap_err();
        assert!(e.message.contains("truncated"), "{e:?}");
    }

    #[test]
    fn skipping_walks_nested_values_and_refuses_bombs() {
        let mut buf = Vec::new();
        rmp::encode::write_map_len(&mut buf, 2).unwrap();
        rmp::encode::write_str(&mut buf, "a").unwrap();
        rmp::encode::write_array_len(&mut buf, 2).unwrap();
        rmp::encode::write_uint(&mut buf, 1).unwrap();
        rmp::encode::write_str(&mut buf, "x").unwrap();
        rmp::encode::write_str(&mut buf, "b").unwrap();
        rmp::encode::write_nil(&mut buf).unwrap();
        buf.push(0x07);
        let mut reader = Reader::new(&buf, 0);
        reader.skip().unwrap();
        assert_eq!(reader.next().unwrap(), Item::Scalar(Scalar::Int(7)));
        let bomb = vec![0x91; 100_000];
        let e = Reader::new(&bomb, 0).skip().unwrap_err();
        assert!(e.message.contains("nested deeper"), "{e:?}");
    }
}

//! The line-protocol tokenizer: bytes in, one borrowed [`ParsedLine`] at a time out.
//!
//! The grammar follows InfluxData's reference decoder (`line-protocol/v2`), which the
//! conformance corpus in `tests/conformance/line-protocol/` (an unmodified copy of InfluxData's
//! corpus) was produced with:
//!
//! ```text
//! measurement[,tag_key=tag_value...] field_key=field_value[,field_key=field_value...] [timestamp]
//! ```
//!
//! * Leading spaces, blank lines and `#` comment lines are skipped; lines end in `\n` or `\r\n`.
//! * Escapes: `\,` and `\ ` in measurements; `\,` `\=` `\ ` in tag keys, tag values and field
//!   keys; `\"` and `\\` in string field values. A backslash before any other byte is kept
//!   literally (so `"a\nb"` is the four characters `a`, `\`, `n`, `b`, as InfluxDB stores it).
//! * Field values: floats (`1`, `-1.5e3`), integers (`1i`), unsigned integers (`1u`), booleans
//!   (`t T true True TRUE f F false False FALSE`) and double-quoted strings, which may span lines.
//! * Tokens must be valid UTF-8; tag keys must be unique within a line.
//!
//! Nothing is copied unless a token contains an escape: names and strings are `Cow::Borrowed`
//! slices of the input. The parser recovers from a bad line by skipping to the next newline, so
//! one request can report every bad line and still accept the good ones.
//!
//! Over 700 lines: one hand-written tokenizer (measurement, tags, fields, timestamp and their
//! escapes) that reads better whole; about 130 lines are tests.

use std::borrow::Cow;

/// A field value as written in line protocol, before it is converted into an Arrow column.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue<'a> {
    /// A float field (`1.5`, `2`, `-3e4`).
    Float(f64),
    /// A signed integer field (`3i`).
    Integer(i64),
    /// An unsigned integer field (`3u`).
    UInteger(u64),
    /// A string field (`"text"`), unescaped.
    String(Cow<'a, str>),
    /// A boolean field (`true`, `f`, ...).
    Boolean(bool),
}

/// One parsed entry. The vectors are reused between lines by [`LineParser::next_line`] so that
/// parsing does not allocate per line.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ParsedLine<'a> {
    /// The measurement (table) name.
    pub measurement: Cow<'a, str>,
    /// Tag key/value pairs in the order they were written; keys are unique.
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// Field key/value pairs in the order they were written (a key may repeat; the last wins).
    pub fields: Vec<(Cow<'a, str>, FieldValue<'a>)>,
    /// The timestamp as written, in the request's precision; `None` means "server time".
    pub timestamp: Option<i64>,
}

/// A syntax error in one line of line protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// 1-based line number (of the physical line where the entry starts).
    pub line_number: usize,
    /// 1-based byte column within that line where the problem was found.
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line_number, self.column, self.message
        )
    }
}

impl std::error::Error for SyntaxError {}

/// The span of input one entry occupied, for error reports that quote the original line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntrySpan {
    /// 1-based line number where the entry starts.
    pub line_number: usize,
    /// Byte offset of the entry's first byte.
    pub start: usize,
    /// Byte offset one past the entry's last byte (excluding the line terminator).
    pub end: usize,
}

/// A 256-entry membership table for bytes.
struct ByteSet([bool; 256]);

impl ByteSet {
    /// All bytes except `excluded`, and except control characters when `printable_only`.
    const fn all_except(excluded: &[u8], printable_only: bool) -> ByteSet {
        let mut table = [true; 256];
        let mut i = 0;
        while i < 256 {
            if printable_only && (i < 32 || i == 127) {
                table[i] = false;
            }
            i += 1;
        }
        let mut j = 0;
        while j < excluded.len() {
            table[excluded[j] as usize] = false;
            j += 1;
        }
        ByteSet(table)
    }

    #[inline(always)]
    fn contains(&self, b: u8) -> bool {
        self.0[b as usize]
    }
}

/// Maps the byte after a backslash to the byte it stands for (0: not an escape).
struct Escapes([u8; 256]);

impl Escapes {
    const fn new(pairs: &[(u8, u8)]) -> Escapes {
        let mut table = [0u8; 256];
        let mut i = 0;
        while i < pairs.len() {
            table[pairs[i].0 as usize] = pairs[i].1;
            i += 1;
        }
        Escapes(table)
    }
}

static MEASUREMENT_CHARS: ByteSet = ByteSet::all_except(b", ", true);
static KEY_CHARS: ByteSet = ByteSet::all_except(b",= \r\n", true);
/// Tag values, unlike keys, may hold control characters other than line terminators.
static TAG_VALUE_CHARS: ByteSet = ByteSet::all_except(b",= \r\n", false);
static STRING_CHARS: ByteSet = ByteSet::all_except(b"\"", false);
static VALUE_CHARS: ByteSet = ByteSet::all_except(b", \r\n", false);
static COMMENT_CHARS: ByteSet = ByteSet::all_except(b"", true);

static MEASUREMENT_ESCAPES: Escapes = Escapes::new(&[(b' ', b' '), (b',', b',')]);
static KEY_ESCAPES: Escapes = Escapes::new(&[(b' ', b' '), (b',', b','), (b'=', b'=')]);
static STRING_ESCAPES: Escapes = Escapes::new(&[(b'\\', b'\\'), (b'"', b'"')]);

/// Splits a line-protocol body into entries.
///
/// ```
/// use quiver_ingest::line_protocol::{LineParser, ParsedLine, FieldValue};
/// let mut parser = LineParser::new(b"cpu,host=a usage=0.5,count=3i 1700000000000000000\n");
/// let mut line = ParsedLine::default();
/// let span = parser.next_line(&mut line).unwrap().unwrap();
/// assert_eq!(span.line_number, 1);
/// assert_eq!(line.measurement, "cpu");
/// assert_eq!(line.fields[1].1, FieldValue::Integer(3));
/// assert!(parser.next_line(&mut line).is_none());
/// ```
pub struct LineParser<'a> {
    input: &'a [u8],
    pos: usize,
    /// Offset of the first byte of the physical line containing `pos`.
    line_start: usize,
    /// 1-based number of the physical line containing `pos`.
    line_number: usize,
    /// Where the current entry started (offset, line number).
    entry_start: usize,
    entry_line_start: usize,
    entry_line_number: usize,
}

type ParseResult<T> = Result<T, SyntaxError>;

impl<'a> LineParser<'a> {
    /// Creates a parser over a whole request body.
    pub fn new(input: &'a [u8]) -> Self {
        LineParser {
            input,
            pos: 0,
            line_start: 0,
            line_number: 1,
            entry_start: 0,
            entry_line_start: 0,
            entry_line_number: 1,
        }
    }

    /// Parses the next entry into `line` (reusing its vectors).
    ///
    /// Returns `None` at the end of input, `Some(Ok(span))` for a good entry and
    /// `Some(Err(e))` for a bad one; after an error the rest of that line is skipped, so the
    /// next call continues with the following line.
    pub fn next_line(&mut self, line: &mut ParsedLine<'a>) -> Option<ParseResult<EntrySpan>> {
        self.skip_empty_lines();
        if self.pos >= self.input.len() {
            return None;
        }
        self.entry_start = self.pos;
        self.entry_line_start = self.line_start;
        self.entry_line_number = self.line_number;
        line.tags.clear();
        line.fields.clear();
        line.timestamp = None;
        match self.parse_entry(line) {
            Ok(end) => Some(Ok(EntrySpan {
                line_number: self.entry_line_number,
                start: self.entry_start,
                end,
            })),
            Err(e) => {
                self.skip_rest_of_line();
                Some(Err(e))
            }
        }
    }

    /// The original text of an entry, for error reports (lossy if it is not UTF-8).
    pub fn entry_text(&self, start: usize) -> Cow<'a, str> {
        let rest = &self.input[start..];
        let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let text = &rest[..end];
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        String::from_utf8_lossy(text)
    }

    /// Byte offset where the entry most recently returned by `next_line` started.
    pub fn current_entry_start(&self) -> usize {
        self.entry_start
    }

    /// 1-based line number where the entry most recently returned by `next_line` started.
    pub fn current_entry_line_number(&self) -> usize {
        self.entry_line_number
    }

    fn parse_entry(&mut self, line: &mut ParsedLine<'a>) -> ParseResult<usize> {
        self.parse_measurement(line)?;
        self.parse_tags(line)?;
        self.parse_fields(line)
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn error<T>(&self, at: usize, message: String) -> ParseResult<T> {
        // Columns are counted from the start of the physical line holding `at`.
        let before = &self.input[self.entry_line_start..at];
        let (line_number, column) = match before.iter().rposition(|&b| b == b'\n') {
            Some(nl) => (
                self.entry_line_number + before.iter().filter(|&&b| b == b'\n').count(),
                at - (self.entry_line_start + nl + 1) + 1,
            ),
            None => (self.entry_line_number, at - self.entry_line_start + 1),
        };
        Err(SyntaxError {
            line_number,
            column,
            message,
        })
    }

    fn skip_empty_lines(&mut self) {
        loop {
            let line_begin = self.pos;
            self.skip_spaces();
            match self.peek() {
                Some(b'#') => {
                    self.take(&COMMENT_CHARS);
                    if !self.take_eol() {
                        // The comment holds a control character: rewind so that the
                        // measurement parser reports the line as bad.
                        self.pos = line_begin;
                        return;
                    }
                }
                Some(b'\n') | Some(b'\r') => {
                    if !self.take_eol() {
                        return; // a lone carriage return: reported by the measurement parser
                    }
                }
                _ => return,
            }
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.pos += 1;
        }
    }

    /// Consumes `\n`, `\r\n`, or a `\r` at the end of input. Reports whether it did.
    fn take_eol(&mut self) -> bool {
        match self.peek() {
            None => true,
            Some(b'\n') => {
                self.pos += 1;
                self.new_line();
                true
            }
            Some(b'\r') => match self.input.get(self.pos + 1) {
                None => {
                    self.pos += 1;
                    true
                }
                Some(b'\n') => {
                    self.pos += 2;
                    self.new_line();
                    true
                }
                Some(_) => false,
            },
            Some(_) => false,
        }
    }

    fn new_line(&mut self) {
        self.line_number += 1;
        self.line_start = self.pos;
    }

    fn skip_rest_of_line(&mut self) {
        match memchr_newline(&self.input[self.pos..]) {
            Some(i) => {
                self.pos += i + 1;
                self.new_line();
            }
            None => self.pos = self.input.len(),
        }
    }

    fn take(&mut self, set: &ByteSet) -> &'a [u8] {
        let start = self.pos;
        let input = self.input;
        let mut i = start;
        while i < input.len() && set.contains(input[i]) {
            i += 1;
        }
        self.pos = i;
        &input[start..i]
    }

    /// Takes a run of bytes in `set` (or escaped by a backslash), unescaping as it goes.
    fn take_escaped(&mut self, set: &ByteSet, escapes: &Escapes) -> ParseResult<Cow<'a, str>> {
        let input = self.input;
        let start = self.pos;
        let mut segment_start = start;
        let mut unescaped: Option<Vec<u8>> = None;
        let mut high_bit = 0u8;
        let mut i = start;
        while i < input.len() {
            let c = input[i];
            if c != b'\\' {
                if !set.contains(c) {
                    break;
                }
                high_bit |= c;
                i += 1;
                continue;
            }
            let Some(&next) = input.get(i + 1) else {
                i = input.len(); // a trailing backslash stays as it is
                break;
            };
            let replacement = escapes.0[next as usize];
            if replacement == 0 {
                i += 1; // not an escape: the backslash is literal
                continue;
            }
            let buf = unescaped.get_or_insert_with(Vec::new);
            buf.extend_from_slice(&input[segment_start..i]);
            buf.push(replacement);
            high_bit |= next;
            i += 2;
            segment_start = i;
        }
        self.pos = i;
        let taken = &input[start..i];
        if set.contains(b'\n') {
            // Only string values may contain newlines; keep line numbers right.
            for (k, &b) in taken.iter().enumerate() {
                if b == b'\n' {
                    self.line_number += 1;
                    self.line_start = start + k + 1;
                }
            }
        }
        let cow: Cow<'a, [u8]> = match unescaped {
            None => Cow::Borrowed(taken),
            Some(mut buf) => {
                buf.extend_from_slice(&input[segment_start..i]);
                Cow::Owned(buf)
            }
        };
        if high_bit & 0x80 == 0 {
            // Pure ASCII is always valid UTF-8.
            // SAFETY: every byte is below 0x80 (their OR is), and ASCII is valid UTF-8; this
            // skips a second pass over every token on the hot path.
            return Ok(match cow {
                Cow::Borrowed(b) => Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(b) }),
                Cow::Owned(b) => Cow::Owned(unsafe { String::from_utf8_unchecked(b) }),
            });
        }
        match cow {
            Cow::Borrowed(b) => match std::str::from_utf8(b) {
                Ok(s) => Ok(Cow::Borrowed(s)),
                Err(_) => self.error(start, format!("invalid UTF-8 in {:?}", lossy(b))),
            },
            Cow::Owned(b) => match String::from_utf8(b) {
                Ok(s) => Ok(Cow::Owned(s)),
                Err(e) => self.error(start, format!("invalid UTF-8 in {:?}", lossy(e.as_bytes()))),
            },
        }
    }

    fn parse_measurement(&mut self, line: &mut ParsedLine<'a>) -> ParseResult<()> {
        let start = self.pos;
        let name = self.take_escaped(&MEASUREMENT_CHARS, &MEASUREMENT_ESCAPES)?;
        match (name.as_bytes().first(), self.peek()) {
            (None, None) => return self.error(start, "no measurement name found".into()),
            (None, Some(c)) => {
                return self.error(
                    start,
                    format!("invalid character {} at start of measurement name", show(c)),
                )
            }
            (Some(b'#'), _) => {
                return self.error(start, "invalid character found in comment line".into())
            }
            _ => {}
        }
        line.measurement = name;
        self.take_tag_comma()
    }

    /// After a measurement or tag value: a comma must be followed by a tag key.
    fn take_tag_comma(&mut self) -> ParseResult<()> {
        if self.peek() != Some(b',') {
            return Ok(());
        }
        self.pos += 1;
        match self.peek() {
            None => self.error(
                self.pos,
                "expected tag key after comma, found end of input".into(),
            ),
            Some(b' ' | b'\r' | b'\n') => self.error(
                self.pos,
                "expected tag key after comma, found white space".into(),
            ),
            Some(_) => Ok(()),
        }
    }

    fn parse_tags(&mut self, line: &mut ParsedLine<'a>) -> ParseResult<()> {
        loop {
            if self.peek() == Some(b' ') {
                self.skip_spaces();
                return Ok(());
            }
            let key_start = self.pos;
            let key = self.take_escaped(&KEY_CHARS, &KEY_ESCAPES)?;
            match self.peek() {
                Some(b'=') if !key.is_empty() => self.pos += 1,
                None if key.is_empty() => {
                    return self.error(
                        key_start,
                        "expected a tag or field, found end of input".into(),
                    )
                }
                None => {
                    return self.error(
                        key_start,
                        format!("expected '=' after tag key {key:?}, found end of input"),
                    )
                }
                Some(c) if key.is_empty() => {
                    return self.error(
                        key_start,
                        format!("expected tag key or field, found {}", show(c)),
                    )
                }
                Some(c) => {
                    return self.error(
                        key_start,
                        format!("expected '=' after tag key {key:?}, found {}", show(c)),
                    )
                }
            }
            let value_start = self.pos;
            let value = self.take_escaped(&TAG_VALUE_CHARS, &KEY_ESCAPES)?;
            if value.is_empty() {
                return self.error(
                    value_start,
                    format!("expected tag value after tag key {key:?}, found none"),
                );
            }
            if line.tags.iter().any(|(k, _)| *k == key) {
                return self.error(key_start, format!("duplicate tag key {key:?}"));
            }
            line.tags.push((key, value));
            if self.peek().is_none() {
                return self.error(self.pos, "expected fields, found end of input".into());
            }
            self.take_tag_comma()?;
        }
    }

    /// Parses the field set and the optional timestamp; returns the entry's end offset.
    fn parse_fields(&mut self, line: &mut ParsedLine<'a>) -> ParseResult<usize> {
        loop {
            let key_start = self.pos;
            let key = self.take_escaped(&KEY_CHARS, &KEY_ESCAPES)?;
            if key.is_empty() {
                return match self.peek() {
                    None => self.error(key_start, "expected field key, found end of input".into()),
                    Some(c) => self.error(
                        key_start,
                        format!("invalid character {} at start of field key", show(c)),
                    ),
                };
            }
            match self.peek() {
                Some(b'=') => self.pos += 1,
                None => {
                    return self.error(
                        self.pos,
                        format!("expected '=' after field key {key:?}, found end of input"),
                    )
                }
                Some(c) => {
                    return self.error(
                        self.pos,
                        format!("expected '=' after field key {key:?}, found {}", show(c)),
                    )
                }
            }
            let value = self.parse_field_value(&key)?;
            line.fields.push((key, value));
            match self.peek() {
                None => return Ok(self.pos),
                Some(b',') => self.pos += 1,
                Some(b' ' | b'\r' | b'\n') => {
                    let end = self.pos;
                    self.skip_spaces();
                    if self.take_eol() {
                        return Ok(end);
                    }
                    return self.parse_timestamp(line);
                }
                Some(c) => {
                    let key = &line.fields[line.fields.len() - 1].0;
                    return self.error(
                        self.pos,
                        format!("unexpected character {} after field {key:?}", show(c)),
                    );
                }
            }
        }
    }

    fn parse_field_value(&mut self, key: &str) -> ParseResult<FieldValue<'a>> {
        let start = self.pos;
        match self.peek() {
            None => self.error(
                start,
                format!("expected value for field {key:?}, found end of input"),
            ),
            Some(b'"') => {
                self.pos += 1;
                let value = self.take_escaped(&STRING_CHARS, &STRING_ESCAPES)?;
                if self.peek() != Some(b'"') {
                    return self.error(
                        start,
                        format!("string value of field {key:?} has no closing quote"),
                    );
                }
                self.pos += 1;
                Ok(FieldValue::String(value))
            }
            Some(b't' | b'T' | b'f' | b'F') => {
                let text = self.take(&VALUE_CHARS);
                match text {
                    b"t" | b"T" | b"true" | b"True" | b"TRUE" => Ok(FieldValue::Boolean(true)),
                    b"f" | b"F" | b"false" | b"False" | b"FALSE" => Ok(FieldValue::Boolean(false)),
                    _ => self.error(
                        start,
                        format!("invalid boolean {:?} for field {key:?}", lossy(text)),
                    ),
                }
            }
            Some(b'-' | b'0'..=b'9' | b'.') => {
                let text = self.take(&VALUE_CHARS);
                self.parse_number(start, key, text)
            }
            Some(c) => self.error(
                start,
                format!(
                    "value of field {key:?} has an unrecognised type (starts with {})",
                    show(c)
                ),
            ),
        }
    }

    fn parse_number(&self, start: usize, key: &str, text: &[u8]) -> ParseResult<FieldValue<'a>> {
        // Numbers are ASCII or invalid, so the str conversion only fails for invalid input.
        let as_str = std::str::from_utf8(text).unwrap_or("");
        let (digits, kind) = match text.last() {
            Some(b'i') => (&as_str[..as_str.len().saturating_sub(1)], 'i'),
            Some(b'u') => (&as_str[..as_str.len().saturating_sub(1)], 'u'),
            _ => (as_str, 'f'),
        };
        let bad = |what: &str| {
            self.error(
                start,
                format!("invalid {what} {:?} for field {key:?}", lossy(text)),
            )
        };
        match kind {
            'i' => match parse_decimal_i64(digits) {
                Some(v) => Ok(FieldValue::Integer(v)),
                None if is_decimal_integer(digits, true) => bad("integer (out of range)"),
                None => bad("integer"),
            },
            'u' => match parse_decimal_u64(digits) {
                Some(v) => Ok(FieldValue::UInteger(v)),
                None if is_decimal_integer(digits, false) => bad("unsigned integer (out of range)"),
                None => bad("unsigned integer"),
            },
            _ => match parse_float(digits) {
                Some(v) if v.is_finite() => Ok(FieldValue::Float(v)),
                Some(_) => bad("float (out of range)"),
                None => bad("float"),
            },
        }
    }

    fn parse_timestamp(&mut self, line: &mut ParsedLine<'a>) -> ParseResult<usize> {
        let start = self.pos;
        let digits = self.take(&TIME_CHARS);
        let end = self.pos;
        match self.peek() {
            None => {}
            Some(b' ' | b'\r' | b'\n') => {
                self.skip_spaces();
                if !self.take_eol() {
                    let extra_start = self.pos;
                    let extra = self.take(&NOT_EOL);
                    return self.error(
                        extra_start,
                        format!("unexpected text after timestamp: {:?}", lossy(extra)),
                    );
                }
            }
            Some(_) => {
                let rest = self.take(&NOT_EOL);
                return self.error(
                    start,
                    format!(
                        "invalid timestamp {:?}",
                        lossy(&self.input[start..start + digits.len() + rest.len()])
                    ),
                );
            }
        }
        if digits.is_empty() {
            return Ok(end);
        }
        let text = std::str::from_utf8(digits).unwrap_or("");
        match parse_decimal_i64(text) {
            Some(ts) => {
                line.timestamp = Some(ts);
                Ok(end)
            }
            None if is_decimal_integer(text, true) => {
                self.error(start, format!("timestamp {text:?} is out of range"))
            }
            None => self.error(start, format!("invalid timestamp {text:?}")),
        }
    }
}

static TIME_CHARS: ByteSet = {
    let mut table = [false; 256];
    let mut c = b'0';
    while c <= b'9' {
        table[c as usize] = true;
        c += 1;
    }
    table[b'-' as usize] = true;
    ByteSet(table)
};
static NOT_EOL: ByteSet = ByteSet::all_except(b"\r\n", false);

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

fn show(c: u8) -> String {
    match c {
        b' ' => "a space".into(),
        b'\t' => "a tab".into(),
        b'\r' => "a carriage return".into(),
        b'\n' => "a newline".into(),
        0x21..=0x7e => format!("'{}'", c as char),
        _ => format!("byte 0x{c:02x}"),
    }
}

/// `[-]digits` → i64 (no `+`, no underscores), as Go's `strconv.ParseInt(s, 10, 64)` for the
/// characters line protocol admits.
fn parse_decimal_i64(s: &str) -> Option<i64> {
    if !is_decimal_integer(s, true) {
        return None;
    }
    s.parse().ok()
}

fn parse_decimal_u64(s: &str) -> Option<u64> {
    if !is_decimal_integer(s, false) {
        return None;
    }
    s.parse().ok()
}

fn is_decimal_integer(s: &str, signed: bool) -> bool {
    let digits = match s.strip_prefix('-') {
        Some(rest) if signed => rest,
        _ => s,
    };
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Parses a float the way Go's `strconv.ParseFloat` does for inputs that start like a number:
/// decimal with optional fraction and exponent, and `inf`/`infinity`/`nan` after a sign (which
/// the caller then rejects as non-finite).
fn parse_float(s: &str) -> Option<f64> {
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    let special = unsigned.to_ascii_lowercase();
    if matches!(special.as_str(), "inf" | "infinity" | "nan") {
        return Some(f64::NAN);
    }
    if !is_decimal_float(unsigned) {
        return None;
    }
    s.parse().ok()
}

/// `digits[.digits][(e|E)[+|-]digits]` with at least one mantissa digit.
fn is_decimal_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let mut mantissa_digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        mantissa_digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            mantissa_digits += 1;
        }
    }
    if mantissa_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let exp_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &str) -> Vec<Result<ParsedLine<'_>, SyntaxError>> {
        let mut parser = LineParser::new(input.as_bytes());
        let mut out = Vec::new();
        let mut line = ParsedLine::default();
        while let Some(r) = parser.next_line(&mut line) {
            out.push(r.map(|_| line.clone()));
        }
        out
    }

    fn one(input: &str) -> ParsedLine<'_> {
        let mut all = parse_all(input);
        assert_eq!(all.len(), 1, "{input:?}");
        all.remove(0).unwrap_or_else(|e| panic!("{input:?}: {e}"))
    }

    fn err(input: &str) -> SyntaxError {
        let all = parse_all(input);
        all.into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("{input:?} parsed without error"))
    }

    #[test]
    fn full_line() {
        let l = one("cpu,host=a,region=us\\ west usage=1.5,n=3i,u=4u,s=\"x\\\"y\",b=t 123");
        assert_eq!(l.measurement, "cpu");
        assert_eq!(l.tags[1].1, "us west");
        assert_eq!(
            l.fields.iter().map(|f| f.1.clone()).collect::<Vec<_>>(),
            vec![
                FieldValue::Float(1.5),
                FieldValue::Integer(3),
                FieldValue::UInteger(4),
                FieldValue::String("x\"y".into()),
                FieldValue::Boolean(true)
            ]
        );
        assert_eq!(l.timestamp, Some(123));
    }

    #[test]
    fn escapes_borrow_only_when_needed() {
        let l = one("m\\,x,k\\=y=v\\ w f\\ g=\"a\\\\b\\nc\"");
        assert_eq!(l.measurement, "m,x");
        assert_eq!(l.tags[0], ("k=y".into(), "v w".into()));
        assert_eq!(l.fields[0].0, "f g");
        assert_eq!(l.fields[0].1, FieldValue::String("a\\b\\nc".into()));
        let plain = one("cpu,host=a v=1");
        assert!(matches!(plain.measurement, Cow::Borrowed(_)));
        assert!(matches!(plain.tags[0].1, Cow::Borrowed(_)));
    }

    #[test]
    fn comments_blank_lines_and_crlf() {
        let all = parse_all("# comment\n\n  cpu v=1 1\r\n\r\n# x\nmem v=2i\n");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].as_ref().unwrap().measurement, "mem");
    }

    #[test]
    fn line_numbers_and_recovery() {
        let input = "cpu v=1\ncpu v=\ncpu v=2\ncpu,host v=1\nok v=\"multi\nline\"\nbad";
        let mut parser = LineParser::new(input.as_bytes());
        let mut line = ParsedLine::default();
        let mut results = Vec::new();
        while let Some(r) = parser.next_line(&mut line) {
            results.push(r.map(|s| s.line_number).map_err(|e| e.line_number));
        }
        assert_eq!(results, vec![Ok(1), Err(2), Ok(3), Err(4), Ok(5), Err(7)]);
    }

    #[test]
    fn rejects_bad_input_with_positions() {
        let e = err("cpu,host=serverA,region value=1i");
        assert_eq!(e.column, 18);
        assert!(e.message.contains("expected '=' after tag key \"region\""));
        assert!(err("cpu").message.contains("end of input"));
        assert!(err("cpu v=1i2").message.contains("invalid float"));
        assert!(err("cpu v=1.5i").message.contains("invalid integer"));
        assert!(err("cpu v=99999999999999999999i")
            .message
            .contains("out of range"));
        assert!(err("cpu v=1 12a").message.contains("invalid timestamp"));
        assert!(err("cpu v=1 1 x").message.contains("unexpected text"));
        assert!(err("cpu,a=1,a=2 v=1").message.contains("duplicate tag key"));
        assert!(err("cpu v=\"open").message.contains("closing quote"));
        assert!(err("cpu v=tru").message.contains("invalid boolean"));
        assert!(err("cpu v=1e999").message.contains("out of range"));
        assert!(err("cpu v=-inf").message.contains("out of range"));
        assert!(err("cpu v=x").message.contains("unrecognised type"));
        assert!(err("cpu, v=1").message.contains("white space"));
        assert!(err("cpu v=1,").message.contains("field key"));
        assert!(err("\u{7f}cpu v=1").message.contains("measurement"));
    }

    #[test]
    fn invalid_utf8_is_rejected() {
        let mut parser = LineParser::new(b"cp\xffu v=1\nok v=1");
        let mut line = ParsedLine::default();
        assert!(parser.next_line(&mut line).unwrap().is_err());
        assert!(parser.next_line(&mut line).unwrap().is_ok());
        assert_eq!(line.measurement, "ok");
    }

    #[test]
    fn numbers() {
        for (text, want) in [
            ("1", 1.0),
            ("-1.5", -1.5),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1E-2", 0.01),
        ] {
            let input = format!("m v={text}");
            assert_eq!(one(&input).fields[0].1, FieldValue::Float(want), "{text}");
        }
        assert_eq!(
            one("m v=-9223372036854775808i").fields[0].1,
            FieldValue::Integer(i64::MIN)
        );
        assert_eq!(
            one("m v=18446744073709551615u").fields[0].1,
            FieldValue::UInteger(u64::MAX)
        );
        assert!(err("m v=-1u").message.contains("unsigned"));
    }
}

//! `quiver write`: line protocol from a file or standard input, read as it is sent in requests
//! of about [`CHUNK_BYTES`] cut at line ends (so any size of input works, and a progress bar
//! can follow it). Rejected lines are reported with their line numbers in the input. A request
//! that fails outright stops the command, which says exactly which lines were written and where
//! to go on from; nothing is retried or resumed behind the user's back.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use clap::Args;

use super::progress::Progress;
use super::{block_on, plural, ServerAddress};
use crate::{Client, ClientError, LpWritten, DEFAULT_DATABASE};

/// Bytes of line protocol per request (a line longer than this goes whole in its own).
const CHUNK_BYTES: usize = 4 << 20;

/// The UTF-8 byte-order mark some editors put at the start of a text file.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Arguments of `quiver write`.
#[derive(Debug, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    server: ServerAddress,
    /// Database to write into (created on first write).
    #[arg(long, default_value = DEFAULT_DATABASE)]
    db: String,
    /// Timestamp precision: auto, ns, us, ms or s.
    #[arg(long, default_value = "auto")]
    precision: String,
    /// Line-protocol file, or `-` for standard input.
    file: PathBuf,
}

/// What the requests so far did.
#[derive(Default)]
struct Tally {
    /// Lines the server wrote.
    written: u64,
    /// Lines it rejected.
    rejected: u64,
    /// Input bytes sent.
    bytes: u64,
    /// Input lines sent (the next request starts at line `lines + 1`).
    lines: u64,
}

/// Runs `quiver write`: sends the input in requests at line ends and reports what was written
/// (and every line the server rejected, with its number in the input).
pub fn write(args: WriteArgs) -> Result<(), String> {
    let (mut input, size) = open(&args.file)?;
    let client = args.server.client();
    let mut progress = Progress::new(size);
    let mut tally = Tally::default();
    let mut requests = 0;
    loop {
        let (mut chunk, lines) = read_chunk(&mut input)
            .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
        if requests == 0 && chunk.starts_with(UTF8_BOM) {
            // a byte-order mark is not part of the first measurement's name
            chunk.drain(..UTF8_BOM.len());
        }
        // an empty input is still one request: the server says what it makes of it
        if chunk.is_empty() && requests > 0 {
            break;
        }
        let sent = chunk.len() as u64;
        let written = send(&client, &args, chunk, tally.lines + 1, &tally, &progress)?;
        requests += 1;
        tally.written += written.lines;
        tally.rejected += written.rejected;
        tally.bytes += sent;
        tally.lines += lines;
        progress.advance(sent, written.lines);
        if sent == 0 {
            break;
        }
    }
    progress.finish();
    let summary = format!(
        "wrote {} line{} ({} bytes sent) to database {:?}",
        tally.written,
        plural(tally.written as usize),
        tally.bytes,
        args.db
    );
    if tally.rejected > 0 {
        return Err(format!(
            "{summary}; {} line{} rejected (listed above)",
            tally.rejected,
            plural(tally.rejected as usize)
        ));
    }
    println!("{summary}");
    Ok(())
}

/// The input and its size (unknown for standard input).
fn open(file: &PathBuf) -> Result<(Box<dyn BufRead>, Option<u64>), String> {
    if file.as_os_str() == "-" {
        return Ok((Box::new(BufReader::new(std::io::stdin())), None));
    }
    let opened =
        std::fs::File::open(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let size = opened.metadata().ok().map(|m| m.len());
    Ok((Box::new(BufReader::new(opened)), size))
}

/// The next whole entries of the input, about [`CHUNK_BYTES`] of them, and how many lines
/// they span. A chunk ends at a line end outside a quoted string field value (a string field
/// may hold line breaks: its entry is never cut in two).
fn read_chunk(input: &mut dyn BufRead) -> std::io::Result<(Vec<u8>, u64)> {
    let mut chunk = Vec::with_capacity(CHUNK_BYTES);
    let mut lines = 0;
    let mut entry = EntryScan::default();
    loop {
        let start = chunk.len();
        let read = input.read_until(b'\n', &mut chunk)?;
        if read == 0 {
            break;
        }
        lines += 1;
        if entry.goes_on_after(&chunk[start..]) || chunk.len() < CHUNK_BYTES {
            continue;
        }
        break;
    }
    Ok((chunk, lines))
}

/// Where a line-protocol entry is, read line by line: in its measurement and tags, its fields
/// (and inside a quoted string value or not), or its timestamp.
#[derive(Default)]
struct EntryScan {
    /// Spaces outside quotes so far: 0 in the measurement and tags, 1 in the fields.
    section: u8,
    quoted: bool,
}

impl EntryScan {
    /// Reads one line (with its `\n`) of the entry; true if the entry goes on on the next
    /// line (a string field value is still open), else the scan is ready for the next entry.
    fn goes_on_after(&mut self, line: &[u8]) -> bool {
        let mut escaped = false;
        for &byte in line {
            if escaped {
                escaped = false;
                continue;
            }
            match byte {
                b'\\' => escaped = true,
                b'"' if self.section == 1 => self.quoted = !self.quoted,
                b' ' if !self.quoted => self.section = self.section.saturating_add(1),
                _ => {}
            }
        }
        if self.quoted {
            return true;
        }
        *self = Self::default();
        false
    }
}

/// What one request wrote.
struct Written {
    lines: u64,
    rejected: u64,
}

/// Sends one chunk starting at input line `first_line`: its written and rejected lines
/// (rejected ones printed now), or the error that stops the command.
fn send(
    client: &Client,
    args: &WriteArgs,
    chunk: Vec<u8>,
    first_line: u64,
    before: &Tally,
    progress: &Progress,
) -> Result<Written, String> {
    let stopped = |why: String| stopped_at(args, first_line, before, &why);
    let unconfirmed = |e: &dyn std::fmt::Display| {
        stopped(format!("{e} (its lines may or may not have been written)"))
    };
    let sent =
        block_on(client.write_lp(&args.db, &args.precision, chunk)).map_err(|e| unconfirmed(&e))?;
    match sent {
        Ok(LpWritten {
            lines_written,
            lines_rejected,
            rejection,
        }) => {
            // some lines rejected, the others of this request written: go on, as the server did
            if let Some(rejection) = rejection {
                progress.println(&rejection.describe_from_line(first_line));
            }
            Ok(Written {
                lines: lines_written,
                rejected: lines_rejected,
            })
        }
        Err(ClientError::Server(refused)) => Err(stopped(refused.to_string())),
        // nothing was sent
        Err(e @ ClientError::PlainHttpOnly { .. }) => Err(e.to_string()),
        Err(e) => Err(unconfirmed(&e)),
    }
}

/// The message of a request that failed outright: what was written before it, and how to go
/// on from its first line.
fn stopped_at(args: &WriteArgs, first_line: u64, before: &Tally, why: &str) -> String {
    let mut message = why.to_string();
    if first_line > 1 {
        let source = if args.file.as_os_str() == "-" {
            "the input".to_string()
        } else {
            args.file.display().to_string()
        };
        message.push_str(&format!(
            "\nstopped at line {first_line}: lines 1 to {} of {source} were sent and {} of them \
             written (to database {:?}); nothing from line {first_line} on was confirmed. To go \
             on from there (with the same --host and --token): tail -n +{first_line} FILE | \
             quiver write --db {} --precision {} - (a point written twice keeps its last value)",
            first_line - 1,
            before.written,
            args.db,
            args.db,
            args.precision
        ));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_at_line_ends_and_count_lines() {
        let line = "cpu,host=a usage=1 1\n";
        let text = line.repeat(CHUNK_BYTES / line.len() + 10) + "last 1";
        let mut input = std::io::Cursor::new(text.clone().into_bytes());
        let (first, first_lines) = read_chunk(&mut input).unwrap();
        assert!(first.len() >= CHUNK_BYTES && first.ends_with(b"\n"));
        assert_eq!(first_lines as usize, first.len() / line.len());
        let (second, second_lines) = read_chunk(&mut input).unwrap();
        assert!(second.ends_with(b"last 1"));
        assert_eq!((first_lines + second_lines) as usize, text.lines().count());
        assert_eq!(read_chunk(&mut input).unwrap(), (Vec::new(), 0));
    }

    #[test]
    fn an_entry_with_a_line_break_in_a_string_field_is_never_cut() {
        let filler = "cpu,host=a usage=1 1\n".repeat(CHUNK_BYTES / 21);
        let text = format!("{filler}log,host=\"a msg=\"one\ntwo \\\" three\" 5\nafter v=1 6\n");
        let mut input = std::io::Cursor::new(text.into_bytes());
        let (first, lines) = read_chunk(&mut input).unwrap();
        assert!(
            first.ends_with(b"three\" 5\n"),
            "{:?}",
            String::from_utf8_lossy(&first[first.len() - 40..])
        );
        assert_eq!(lines as usize, CHUNK_BYTES / 21 + 2);
        assert_eq!(
            read_chunk(&mut input).unwrap(),
            (b"after v=1 6\n".to_vec(), 1)
        );
    }

    #[test]
    fn a_line_longer_than_a_chunk_goes_whole() {
        let long = format!("cpu v=\"{}\" 1\nnext v=1 2\n", "x".repeat(CHUNK_BYTES + 5));
        let mut input = std::io::Cursor::new(long.into_bytes());
        let (chunk, lines) = read_chunk(&mut input).unwrap();
        assert_eq!(lines, 1);
        assert!(chunk.ends_with(b"1\n") && chunk.len() > CHUNK_BYTES);
    }
}

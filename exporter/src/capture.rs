//! The one capture reader: a `dcgmi dmon` capture, dcgm-exporter scrapes or a JSONL trace,
//! its format detected from the first lines (or given), streamed a line at a time through
//! the core's parser. Used by `analyze`, `explain`, `top` and the replay source.
//!
//! A bad line is a per-line error naming `file:line` and the reader goes on: malformed
//! text, a line that is not UTF-8, or a line longer than `MAX_LINE` (its bytes are skipped
//! without being held). Only a failing read ends the capture.

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use truthscale_core::model::{Sample, Timestamp};
use truthscale_core::parse::{Format, LineParser, ParseError};

/// Lines read to detect the format.
pub(crate) const DETECT_LINES: usize = 64;
/// The longest line read; a longer one is an error for that line, and memory stays bounded.
pub(crate) const MAX_LINE: usize = 1 << 20;

/// Bytes of whole lines checked as UTF-8 at a time.
const BLOCK: usize = 4096;

/// The most bytes of one over-long line skipped before the input is refused as not text.
pub(crate) const MAX_SKIP: u64 = 64 << 20;

/// Why a capture cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A read failed.
    #[error("cannot read {name}: {error}")]
    Read {
        /// The capture's name.
        name: String,
        /// The error (in the message, not chained after it).
        error: std::io::Error,
    },
    /// The first lines match no format.
    #[error(
        "{name}: cannot tell the format from the first {lines} lines; pass --format dcgmi-dmon, dcgm-exporter or jsonl"
    )]
    Unknown {
        /// The capture's name.
        name: String,
        /// Lines looked at.
        lines: usize,
    },
}

/// A capture being read.
#[derive(Debug)]
pub struct Capture<R> {
    reader: R,
    name: String,
    format: Format,
    parser: LineParser,
    /// Lines read for detection, not yet parsed.
    head: VecDeque<(usize, Result<String, String>)>,
    line_no: usize,
    bytes: u64,
    buf: Vec<u8>,
    done: bool,
}

impl<R: BufRead> Capture<R> {
    /// Start reading `reader` (named `name` in messages), in `format` or the one its first
    /// lines show, with `interval_secs` between samples for formats without timestamps.
    ///
    /// # Errors
    /// A failing read, or no format recognised.
    pub fn open(
        reader: R,
        name: &str,
        format: Option<Format>,
        interval_secs: f64,
    ) -> Result<Capture<R>, CaptureError> {
        let mut c = Capture {
            reader,
            name: name.to_string(),
            format: format.unwrap_or(Format::Jsonl),
            parser: LineParser::new(Format::Jsonl, name, interval_secs, Timestamp(0)),
            head: VecDeque::new(),
            line_no: 0,
            bytes: 0,
            buf: Vec::new(),
            done: false,
        };
        // The first lines tell the format, and whether a dcgm-exporter scrape carries its
        // own timestamps.
        if matches!(format, None | Some(Format::DcgmExporter)) {
            while c.head.len() < DETECT_LINES {
                match c.read_line()? {
                    Some(l) => c.head.push_back(l),
                    None => break,
                }
            }
        }
        let format = match format {
            Some(f) => f,
            None => {
                let text: Vec<&str> = c
                    .head
                    .iter()
                    .filter_map(|(_, l)| l.as_deref().ok())
                    .collect();
                Format::detect(&text.join("\n")).ok_or_else(|| CaptureError::Unknown {
                    name: name.to_string(),
                    lines: c.head.len(),
                })?
            }
        };
        c.format = format;
        c.parser = LineParser::new(format, name, interval_secs, Timestamp(0));
        Ok(c)
    }

    /// The format being read.
    #[must_use]
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the samples carry their own timestamps (JSONL's `taken`; a dcgm-exporter
    /// scrape whose first sample line has an exposition timestamp), rather than being
    /// stamped `interval_secs` apart: then the time between samples is the capture's own,
    /// and no update interval can be declared for it.
    #[must_use]
    pub fn has_own_timestamps(&self) -> bool {
        match self.format {
            Format::Jsonl => true,
            Format::DcgmiDmon => false,
            Format::DcgmExporter => self
                .head
                .iter()
                .filter_map(|(_, l)| l.as_deref().ok())
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .and_then(|l| truthscale_core::parse::prom_text::parse_sample(l).ok())
                .is_some_and(|s| s.timestamp_ms.is_some()),
        }
    }

    /// The update interval to declare for this capture: `interval_secs` for a format
    /// stamped that far apart, none for one with its own timestamps.
    #[must_use]
    pub fn declared_interval(&self, interval_secs: f64) -> Option<f64> {
        (!self.has_own_timestamps()).then_some(interval_secs)
    }

    /// Bytes read so far (for progress).
    #[must_use]
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Lines the parser skipped (comments, headers, blank lines).
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.parser.skipped_lines()
    }

    /// One line as text (`Err` with the reason for a line that is not usable text).
    #[expect(
        clippy::type_complexity,
        reason = "a line number and the text or why not"
    )]
    fn read_line(&mut self) -> Result<Option<(usize, Result<String, String>)>, CaptureError> {
        Ok(self.read_slow()?.map(|(line_no, text)| {
            let text = text.map(|()| String::from_utf8_lossy(&self.buf).into_owned());
            (line_no, text)
        }))
    }

    /// The next line into `buf` (without its line end and, on the first line, a
    /// byte-order mark), checked to be UTF-8; `Err` with the reason for a line that is not
    /// usable text.
    #[expect(
        clippy::type_complexity,
        reason = "a line number and whether its text is usable"
    )]
    fn read_slow(&mut self) -> Result<Option<(usize, Result<(), String>)>, CaptureError> {
        self.buf.clear();
        let read = |r: &mut R, buf: &mut Vec<u8>, limit: usize| {
            r.by_ref().take(limit as u64).read_until(b'\n', buf)
        };
        let n = read(&mut self.reader, &mut self.buf, MAX_LINE + 1).map_err(|source| {
            CaptureError::Read {
                name: self.name.clone(),
                error: source,
            }
        })?;
        if n == 0 {
            return Ok(None);
        }
        self.bytes += n as u64;
        self.line_no += 1;
        let too_long = self.buf.len() > MAX_LINE && self.buf.last() != Some(&b'\n');
        // Over the limit: skip the rest of the line without holding it, up to a point: input
        // with no line end in MAX_SKIP bytes is not a text capture (`analyze - < /dev/zero`).
        let mut skipped = self.buf.len() as u64;
        while too_long && self.buf.last() != Some(&b'\n') {
            if skipped > MAX_SKIP {
                return Err(CaptureError::Read {
                    name: format!("{}:{}", self.name, self.line_no),
                    error: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "no line end in {} MiB: not a text capture; reading stopped",
                            MAX_SKIP >> 20
                        ),
                    ),
                });
            }
            self.buf.clear();
            let n = read(&mut self.reader, &mut self.buf, 1 << 16).map_err(|source| {
                CaptureError::Read {
                    name: self.name.clone(),
                    error: source,
                }
            })?;
            self.bytes += n as u64;
            skipped += n as u64;
            if n == 0 {
                break;
            }
        }
        if too_long {
            return Ok(Some((
                self.line_no,
                Err(format!("line longer than {MAX_LINE} bytes, skipped")),
            )));
        }
        let text = text_range(&self.buf, self.line_no);
        self.buf.truncate(text.end);
        self.buf.drain(..text.start);
        let ok = std::str::from_utf8(&self.buf).is_ok();
        Ok(Some((
            self.line_no,
            if ok {
                Ok(())
            } else {
                Err("not UTF-8 text, skipped".to_string())
            },
        )))
    }

    /// The next line that [`Capture::lines_while`] does not find in the reader's buffer: a
    /// line read for detection, a line across the buffer's end, one too long, or the last
    /// one without a line end. Handed to `f` as `lines_while` hands lines; `None` at the
    /// end of the input.
    ///
    /// # Errors
    /// A failing read (the capture ends).
    fn next_line_slow<T>(
        &mut self,
        f: impl FnOnce(&mut LineParser, &str, usize, Result<&str, String>) -> T,
    ) -> Result<Option<T>, CaptureError> {
        if let Some((line_no, text)) = self.head.pop_front() {
            let text = text.as_deref().map_err(Clone::clone);
            return Ok(Some(f(&mut self.parser, &self.name, line_no, text)));
        }
        let Some((line_no, ok)) = self.read_slow()? else {
            return Ok(None);
        };
        let text = match ok {
            // Checked in read_slow.
            Ok(()) => Ok(std::str::from_utf8(&self.buf).unwrap_or_default()),
            Err(message) => Err(message),
        };
        Ok(Some(f(&mut self.parser, &self.name, line_no, text)))
    }

    /// The lines to come, handed to `f` one by one (with the parser and the capture's name,
    /// the line's number, and its text or why it is not usable), until `f` returns `false`
    /// (then `Ok(true)`) or the input ends (`Ok(false)`). The lines in the reader's buffer
    /// are found where they lie and checked as UTF-8 a few kilobytes at a time.
    ///
    /// # Errors
    /// A failing read (the capture ends).
    pub(crate) fn lines_while(
        &mut self,
        mut f: impl FnMut(&mut LineParser, &str, usize, Result<&str, String>) -> bool,
    ) -> Result<bool, CaptureError> {
        loop {
            if self.head.is_empty() {
                let chunk = self.reader.fill_buf().map_err(|error| CaptureError::Read {
                    name: self.name.clone(),
                    error,
                })?;
                // The whole lines in the first BLOCK bytes (or the first line, when longer),
                // checked as UTF-8 at once: a caller that stops early wastes little.
                let limit = chunk.len().min(BLOCK);
                let end = match memchr::memrchr(b'\n', &chunk[..limit]) {
                    Some(n) => n + 1,
                    None => memchr::memchr(b'\n', &chunk[limit..]).map_or(0, |n| limit + n + 1),
                };
                let whole = &chunk[..end];
                let text = std::str::from_utf8(whole).ok();
                let (mut used, mut more) = (0, true);
                for end in memchr::memchr_iter(b'\n', whole) {
                    if end - used > MAX_LINE {
                        break;
                    }
                    self.line_no += 1;
                    let range = text_range(&whole[used..end], self.line_no);
                    let range = used + range.start..used + range.end;
                    // The range ends at ASCII bytes, so at character boundaries.
                    let line = match text {
                        Some(text) => Ok(text.get(range).unwrap_or_default()),
                        None => std::str::from_utf8(&whole[range])
                            .map_err(|_| "not UTF-8 text, skipped".to_string()),
                    };
                    more = f(&mut self.parser, &self.name, self.line_no, line);
                    used = end + 1;
                    if !more {
                        break;
                    }
                }
                self.bytes += used as u64;
                self.reader.consume(used);
                if !more {
                    return Ok(true);
                }
                if used > 0 {
                    continue;
                }
            }
            match self.next_line_slow(&mut f)? {
                None => return Ok(false),
                Some(true) => {}
                Some(false) => return Ok(true),
            }
        }
    }

    /// The samples to come, and an error for each malformed line, in order, handed to `f`
    /// until it returns `false` (then `Ok(true)`) or the input ends (`Ok(false)`, after
    /// the last sample).
    fn samples_while(
        &mut self,
        mut f: impl FnMut(Result<Sample, ParseError>) -> bool,
    ) -> Result<bool, CaptureError> {
        if self.done {
            return Ok(false);
        }
        let more = self.lines_while(|parser, name, line_no, text| {
            push(parser, name, line_no, text).is_none_or(&mut f)
        })?;
        if !more {
            self.done = true;
            if let Some(s) = self.parser.finish() {
                f(Ok(s));
            }
        }
        Ok(more)
    }

    /// The next sample, or a per-line error; `None` at the end.
    ///
    /// # Errors
    /// The outer `Err` is a failing read (the capture ends); the inner one a bad line.
    pub fn next_sample(&mut self) -> Result<Option<Result<Sample, ParseError>>, CaptureError> {
        let mut got = None;
        while got.is_none()
            && self.samples_while(|r| {
                got = Some(r);
                false
            })?
        {}
        Ok(got)
    }
}

/// Where the text of a line read with its line end lies: without the line end (and any
/// carriage returns before it) and, on the first line, without a byte-order mark.
fn text_range(line: &[u8], line_no: usize) -> std::ops::Range<usize> {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let start = if line_no == 1 && line[..end].starts_with(&[0xef, 0xbb, 0xbf]) {
        3
    } else {
        0
    };
    start..end
}

/// Feed one line (or why it is not text) to the parser: a sample when one is complete, an
/// error for a bad line.
fn push(
    parser: &mut LineParser,
    name: &str,
    line_no: usize,
    text: Result<&str, String>,
) -> Option<Result<Sample, ParseError>> {
    match text {
        Ok(t) => parser.push_line(t).transpose(),
        Err(message) => {
            // The parser counts lines: give it a blank one in its place, so the next lines
            // keep their numbers.
            let _ = parser.push_line("");
            Some(Err(ParseError {
                file: name.to_string(),
                line: line_no,
                message,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &[u8]) -> (Format, Vec<Sample>, Vec<String>) {
        let mut c = Capture::open(text, "c.txt", None, 1.0).unwrap();
        let (mut samples, mut errors) = (Vec::new(), Vec::new());
        while let Some(r) = c.next_sample().unwrap() {
            match r {
                Ok(s) => samples.push(s),
                Err(e) => errors.push(e.to_string()),
            }
        }
        (c.format(), samples, errors)
    }

    #[test]
    fn detects_streams_and_reports_bad_lines_without_stopping() {
        let mut text = b"\xef\xbb\xbf# source: test\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 50\n".to_vec();
        text.extend_from_slice(b"DCGM_FI_DEV_GPU_UTIL{gpu=\"1\" 7\n");
        text.extend_from_slice(b"\xff\xfe\n");
        text.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        text.extend_from_slice(b"\nDCGM_FI_DEV_GPU_UTIL{gpu=\"2\"} 70\n");
        let (format, samples, errors) = all(&text);
        assert_eq!(format, Format::DcgmExporter);
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].entities.len(), 2, "gpu 0 and gpu 2");
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("c.txt:3:"), "{errors:?}");
        assert_eq!(errors[1], "c.txt:4: not UTF-8 text, skipped");
        assert!(
            errors[2].starts_with("c.txt:5: line longer than"),
            "{errors:?}"
        );
    }

    /// Lines read from a buffer of any size are the same: across its end, with CR LF and a
    /// byte-order mark, a line that is not UTF-8 among good ones, the last without an end.
    #[test]
    fn lines_are_the_same_whatever_the_buffer() {
        let mut text = b"\xef\xbb\xbfone\r\ntwo\n\nthr\xffee\nfour\r\r\n".to_vec();
        for k in 0..3000 {
            text.extend_from_slice(format!("line {k} {}\n", "x".repeat(k % 97)).as_bytes());
        }
        text.extend_from_slice(b"last");
        let lines = |capacity: usize| {
            let reader = std::io::BufReader::with_capacity(capacity, &text[..]);
            let mut c = Capture::open(reader, "c.txt", Some(Format::Jsonl), 1.0).unwrap();
            let mut got = Vec::new();
            let mut stops = 0;
            while c
                .lines_while(|_, _, n, t| {
                    got.push((n, t.map(str::to_string)));
                    // Stop now and then, as a caller with a full batch does.
                    n % 7 != 0
                })
                .unwrap()
            {
                stops += 1;
            }
            assert!(stops > 0);
            got
        };
        let whole = lines(1 << 20);
        assert_eq!(whole.len(), 3006);
        assert_eq!(whole[0], (1, Ok("one".to_string())));
        assert_eq!(whole[3], (4, Err("not UTF-8 text, skipped".to_string())));
        assert_eq!(whole[4], (5, Ok("four".to_string())));
        assert_eq!(whole[3005], (3006, Ok("last".to_string())));
        for capacity in [1, 2, 7, 64, 4095, 4096, 4097, 65_536] {
            assert!(lines(capacity) == whole, "capacity {capacity}");
        }
    }

    /// A line many times the limit is one error at its own line number, and the line after
    /// it is read (the skip used to stop after one chunk and count the rest as more lines).
    #[test]
    fn a_very_long_line_is_one_error() {
        let mut text = b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 50\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 5 * MAX_LINE + 3));
        text.extend_from_slice(b"\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 70\n");
        let (_, samples, errors) = all(&text);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("c.txt:2: line longer than"),
            "{errors:?}"
        );
        assert_eq!(samples[0].entities.len(), 2, "gpu 0 and gpu 1");
        // No line end at all in more than MAX_SKIP bytes: the input is refused.
        let zeros = std::io::Read::take(std::io::repeat(0), MAX_SKIP + (2 << 20));
        let mut c = Capture::open(
            std::io::BufReader::new(zeros),
            "-",
            Some(Format::Jsonl),
            1.0,
        )
        .unwrap();
        let err = loop {
            match c.next_sample() {
                Err(e) => break e.to_string(),
                Ok(None) => panic!("read to the end"),
                Ok(Some(_)) => {}
            }
        };
        assert!(
            err.contains("-:1") && err.contains("no line end in 64 MiB"),
            "{err}"
        );
    }

    #[test]
    fn unknown_format_is_named() {
        let err = Capture::open(&b"hello\nworld\n"[..], "x", None, 1.0).unwrap_err();
        assert!(
            err.to_string()
                .contains("x: cannot tell the format from the first 2 lines")
        );
    }
}

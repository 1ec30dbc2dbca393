//! The one capture reader: a `dcgmi dmon` capture, dcgm-exporter scrapes, `nvidia-smi
//! --query-gpu … --format=csv` output or a JSONL trace, its format detected from the first
//! lines (or given), streamed a line at a time through the core's parser. Used by
//! `analyze`, `explain`, `top` and the replay source.
//!
//! A gzip- or zstd-compressed capture is read as it is decompressed, told by its first
//! bytes (the magic numbers `1f 8b` and `28 b5 2f fd`, or a zstd skippable frame), never by
//! the file's name: the decompressed text goes through the same line reader, a buffer at a
//! time, so memory stays bounded (a zstd frame's window is at most 128 MiB, the decoder's
//! default; a frame that declares more is refused). Concatenated gzip members and zstd
//! frames are read one after another.
//!
//! A bad line is a per-line error naming `file:line` and the reader goes on: malformed
//! text, a line that is not UTF-8, or a line longer than `MAX_LINE` (its bytes are skipped
//! without being held). Only a failing read ends the capture.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Chain, Cursor, Read};
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
    #[error("{name}: {}", unknown_format(*lines))]
    Unknown {
        /// The capture's name.
        name: String,
        /// Lines looked at.
        lines: usize,
    },
}

/// Why a capture whose first `lines` lines match no format is refused, and how to read or
/// capture one: [`CaptureError::Unknown`]'s message after the capture's name.
#[must_use]
pub(crate) fn unknown_format(lines: usize) -> String {
    if lines == 0 {
        return "is empty (no line to read); a capture holds `dcgmi dmon`, dcgm-exporter, \
                nvidia-smi-csv or jsonl lines (plain, gzip or zstd)"
            .to_owned();
    }
    format!(
        "cannot tell the format from the first {lines} lines; if it is dcgmi-dmon, \
         dcgm-exporter, nvidia-smi-csv or jsonl (plain, gzip or zstd), `truthscale analyze \
         --format` names it, or capture one: `dcgmi dmon -e 203,1001,1002,1004,1005,100,155 -d 1000 > capture.txt`, \
         `nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,\
         memory.total,power.draw,clocks.sm --format=csv -lms 1000 > capture.csv` (no \
         profiling counters: effective compute is only bounded), or a dcgm-exporter scrape \
         (`curl -s HOST:9400/metrics > scrape.txt`)"
    )
}

/// The capture at `path` to read (`-`: standard input), and its length where it is a file.
///
/// # Errors
/// The file cannot be opened, naming it.
pub(crate) fn open_path(
    path: &std::path::Path,
) -> anyhow::Result<(Box<dyn Read + Send>, Option<u64>)> {
    use anyhow::Context as _;
    if path == std::path::Path::new("-") {
        return Ok((Box::new(std::io::stdin()), None));
    }
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata().ok().map(|m| m.len());
    Ok((Box::new(f), len))
}

/// A capture being read.
#[derive(Debug)]
pub struct Capture<R> {
    reader: Input<R>,
    name: String,
    format: Format,
    parser: LineParser,
    /// Lines read for detection, not yet parsed.
    head: VecDeque<(usize, Result<String, String>)>,
    line_no: usize,
    bytes: u64,
    buf: Vec<u8>,
    done: bool,
    /// Lines handed on as not usable text (each a malformed line, and a blank one to the
    /// parser, which counts lines): not among the lines it skipped as not data.
    unreadable: u64,
    /// The line the input ended in without a line end, where it did.
    unterminated: Option<usize>,
    /// The latest time a sample can be stamped: this machine's clock when the capture was
    /// opened, and [`CLOCK_SKEW_MS`] for a clock that runs ahead of it.
    not_after: Timestamp,
}

/// How far a capture's clock may run ahead of this machine's: a sample stamped later is from
/// no clock that could have written it ([`from_the_past`]).
const CLOCK_SKEW_MS: i64 = 86_400_000;

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
        let reader = Input::new(reader).map_err(|error| CaptureError::Read {
            name: name.to_string(),
            error,
        })?;
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
            unreadable: 0,
            unterminated: None,
            not_after: Timestamp(
                crate::times::unix_ms(std::time::SystemTime::now()).saturating_add(CLOCK_SKEW_MS),
            ),
        };
        // The first lines tell the format, and whether a dcgm-exporter scrape or an
        // nvidia-smi CSV capture carries its own timestamps.
        if matches!(
            format,
            None | Some(Format::DcgmExporter | Format::NvidiaSmiCsv)
        ) {
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
    /// scrape whose first sample line has an exposition timestamp; an nvidia-smi CSV
    /// capture whose header has a `timestamp` column), rather than being
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
            Format::NvidiaSmiCsv => truthscale_core::parse::smi_csv::header_has_timestamp(
                self.head.iter().filter_map(|(_, l)| l.as_deref().ok()),
            ),
        }
    }

    /// The update interval to declare for this capture: `interval_secs` for a format
    /// stamped that far apart, none for one with its own timestamps.
    #[must_use]
    pub fn declared_interval(&self, interval_secs: f64) -> Option<f64> {
        (!self.has_own_timestamps()).then_some(interval_secs)
    }

    /// Bytes of the input read so far (for progress): of the file as stored, so of the
    /// compressed bytes for a compressed capture.
    #[must_use]
    pub fn bytes_read(&self) -> u64 {
        match &self.reader {
            Input::Plain(_) => self.bytes,
            Input::Gzip(r) => r.get_ref().get_ref().count,
            Input::Zstd(r) => r.get_ref().source.count,
        }
    }

    /// Lines read so far (the number of the last one).
    #[must_use]
    pub(crate) fn lines_read(&self) -> usize {
        self.line_no
    }

    /// Lines the parser skipped (comments, headers, blank lines), but those that were no
    /// text, which are malformed lines and counted as such.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.parser.skipped_lines().saturating_sub(self.unreadable)
    }

    /// What the capture held that is not read (DCGM families or `dmon` columns, readings
    /// refused for an ambiguous unit), for the formats that name DCGM fields.
    #[must_use]
    pub(crate) fn unread(&self) -> Option<&truthscale_core::parse::Unread> {
        self.parser.unread()
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
        let read = |r: &mut Input<R>, buf: &mut Vec<u8>, limit: usize| {
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
        if self.buf.last() != Some(&b'\n') {
            self.unterminated = Some(self.line_no);
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
            let text = self.cut_short(line_no, text.as_deref().map_err(Clone::clone));
            self.unreadable += u64::from(text.is_err());
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
        let text = self.cut_short(line_no, text);
        self.unreadable += u64::from(text.is_err());
        Ok(Some(f(&mut self.parser, &self.name, line_no, text)))
    }

    /// `text`, or why it is not read where it is the input's last line, ended without a
    /// line end, in a format whose lines each end in one: the capture was cut while the line
    /// was written, so its last value may be cut short (`60` read as `6`). A JSONL line is
    /// its own proof: an object cut short does not parse; a comment holds no value.
    fn cut_short<'a>(
        &self,
        line_no: usize,
        text: Result<&'a str, String>,
    ) -> Result<&'a str, String> {
        match text {
            Ok(t) if self.unterminated == Some(line_no)
                && self.format != Format::Jsonl
                && !t.trim().is_empty()
                && !t.trim_start().starts_with('#') =>
            {
                Err("the input ends in this line without a line end: it was cut while the line was written, so its last value may be cut short; not read".to_string())
            }
            other => other,
        }
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
                    self.unreadable += u64::from(line.is_err());
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
        let not_after = self.not_after;
        let more = self.lines_while(|parser, name, line_no, text| {
            push(parser, name, line_no, text)
                .map(|r| r.and_then(|s| from_the_past(s, not_after, name, line_no)))
                .is_none_or(&mut f)
        })?;
        if !more {
            self.done = true;
            if let Some(s) = self.parser.finish() {
                f(from_the_past(s, not_after, &self.name, self.line_no));
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

/// When a malformed line's loss is told to the deriver (`Deriver::line_lost`), so that its
/// time is never the next sample's: at once, or, for a `dcgmi dmon` row, once the sweep
/// gathered before it is handed (the first row of a sweep is lost while the sweep before it
/// still waits to be handed).
#[derive(Debug, Default)]
pub(crate) struct LostLines {
    /// Whether a loss waits for the next sample handed (`dcgmi dmon`).
    deferred: bool,
    /// A loss that waits.
    waiting: bool,
}

impl LostLines {
    /// The rule for a capture in `format`.
    pub(crate) fn of(format: Format) -> LostLines {
        LostLines {
            deferred: format == Format::DcgmiDmon,
            waiting: false,
        }
    }

    /// A line was malformed: whether its loss is told now, before the next sample.
    pub(crate) fn malformed(&mut self) -> bool {
        self.waiting |= self.deferred;
        !self.deferred
    }

    /// A sample was handed: whether a loss that waited on it is told now, after it.
    pub(crate) fn handed(&mut self) -> bool {
        std::mem::take(&mut self.waiting)
    }
}

/// The input's first bytes, put back in front of the rest.
type Source<R> = Chain<Cursor<Vec<u8>>, R>;

/// Bytes the decompressors read through their buffers at a time.
const DECOMPRESSED_BUFFER: usize = 1 << 16;

/// A capture's bytes as the line reader sees them: as they are, or decompressed on the way
/// (the decompressors, a kilobyte of state or so, boxed).
enum Input<R> {
    /// Plain text.
    Plain(Source<R>),
    /// gzip (one or more members).
    Gzip(Box<BufReader<flate2::bufread::MultiGzDecoder<Counted<Source<R>>>>>),
    /// zstd (one or more frames).
    Zstd(Box<BufReader<ZstdFrames<Counted<Source<R>>>>>),
}

impl<R> std::fmt::Debug for Input<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Input::Plain(_) => "Plain",
            Input::Gzip(_) => "Gzip",
            Input::Zstd(_) => "Zstd",
        })
    }
}

impl<R: BufRead> Input<R> {
    /// `reader`, decompressed when its first bytes are gzip's or zstd's magic number.
    ///
    /// # Errors
    /// A failing read of the first bytes.
    fn new(mut reader: R) -> std::io::Result<Input<R>> {
        let mut magic = Vec::with_capacity(4);
        while magic.len() < 4 {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let n = buf.len().min(4 - magic.len());
            magic.extend_from_slice(&buf[..n]);
            reader.consume(n);
        }
        let gzip = magic.starts_with(&[0x1f, 0x8b]);
        // A zstd frame, or a skippable frame (magic 0x184D2A50..=0x184D2A5F, little-endian).
        let zstd = magic == [0x28, 0xb5, 0x2f, 0xfd]
            || (magic.len() == 4 && magic[0] & 0xf0 == 0x50 && magic[1..] == [0x2a, 0x4d, 0x18]);
        let source = Cursor::new(magic).chain(reader);
        Ok(if gzip {
            let decoder = flate2::bufread::MultiGzDecoder::new(Counted::new(source));
            Input::Gzip(Box::new(BufReader::with_capacity(
                DECOMPRESSED_BUFFER,
                decoder,
            )))
        } else if zstd {
            let decoder = ZstdFrames::new(Counted::new(source));
            Input::Zstd(Box::new(BufReader::with_capacity(
                DECOMPRESSED_BUFFER,
                decoder,
            )))
        } else {
            Input::Plain(source)
        })
    }
}

impl<R: BufRead> Read for Input<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::Plain(r) => r.read(buf),
            Input::Gzip(r) => r.read(buf).map_err(gzip_error),
            Input::Zstd(r) => r.read(buf),
        }
    }
}

impl<R: BufRead> BufRead for Input<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            Input::Plain(r) => r.fill_buf(),
            Input::Gzip(r) => r.fill_buf().map_err(gzip_error),
            Input::Zstd(r) => r.fill_buf(),
        }
    }

    fn consume(&mut self, amount: usize) {
        match self {
            Input::Plain(r) => r.consume(amount),
            Input::Gzip(r) => r.consume(amount),
            Input::Zstd(r) => r.consume(amount),
        }
    }
}

/// A reader that counts the bytes taken from it (the compressed bytes, for progress).
#[derive(Debug)]
struct Counted<S> {
    inner: S,
    count: u64,
}

impl<S> Counted<S> {
    fn new(inner: S) -> Counted<S> {
        Counted { inner, count: 0 }
    }
}

impl<S: Read> Read for Counted<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

impl<S: BufRead> BufRead for Counted<S> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.count += amount as u64;
        self.inner.consume(amount);
    }
}

/// zstd frames one after another (`ruzstd`'s streaming decoder reads one), skippable frames
/// skipped, each frame's checksum checked where it has one.
struct ZstdFrames<S> {
    source: S,
    decoder: ruzstd::decoding::FrameDecoder,
    /// Whether a frame is being decoded (its header read, its content not all handed out).
    in_frame: bool,
}

impl<S: BufRead> ZstdFrames<S> {
    fn new(source: S) -> ZstdFrames<S> {
        ZstdFrames {
            source,
            decoder: ruzstd::decoding::FrameDecoder::new(),
            in_frame: false,
        }
    }

    /// Read the next frame's header; a skippable frame is skipped whole.
    fn start_frame(&mut self) -> std::io::Result<()> {
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        match self.decoder.reset(&mut self.source) {
            Ok(()) => self.in_frame = true,
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                let want = u64::from(length);
                let skipped =
                    std::io::copy(&mut (&mut self.source).take(want), &mut std::io::sink())?;
                if skipped < want {
                    return Err(zstd_error("the input ends inside a skippable frame"));
                }
            }
            Err(e) => return Err(zstd_error(e)),
        }
        Ok(())
    }

    /// The end of a frame: its checksum, where it has one, must match its content.
    fn end_frame(&mut self) -> std::io::Result<()> {
        self.in_frame = false;
        match (
            self.decoder.get_checksum_from_data(),
            self.decoder.get_calculated_checksum(),
        ) {
            (Some(stored), Some(computed)) if stored != computed => Err(zstd_error(format!(
                "checksum mismatch: the frame says {stored:08x}, its content {computed:08x}"
            ))),
            _ => Ok(()),
        }
    }
}

impl<S: BufRead> Read for ZstdFrames<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if self.source.fill_buf()?.is_empty() {
                    return Ok(0);
                }
                self.start_frame()?;
                continue;
            }
            let n = self.decoder.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.decoder.is_finished() {
                self.end_frame()?;
                continue;
            }
            self.decoder
                .decode_blocks(
                    &mut self.source,
                    ruzstd::decoding::BlockDecodingStrategy::UptoBlocks(1),
                )
                .map_err(zstd_decode_error)?;
        }
    }
}

/// An error decoding a zstd block: the input ending inside one said as such (the decoder's
/// own text is a debug dump of its I/O error), anything else as the decoder says it.
fn zstd_decode_error(e: impl std::fmt::Display) -> std::io::Error {
    let text = e.to_string();
    if text.contains("UnexpectedEof") {
        return zstd_error("incomplete stream: the input ends inside a frame (cut short?)");
    }
    zstd_error(text)
}

/// An error reading gzip-compressed input, saying so.
fn gzip_error(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("gzip: {e}"))
}

/// An error in zstd-compressed input, as an I/O error (the capture ends).
fn zstd_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("zstd: {e}"))
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

/// What the fields a capture of `format` names are, in a line that says which were not
/// read, and the page that lists what is read: `nvidia-smi`'s query fields are no DCGM
/// fields, nor a trace's keys.
pub(crate) fn fields_heading(format: Format) -> (&'static str, &'static str) {
    match format {
        Format::NvidiaSmiCsv => ("nvidia-smi fields", "docs/dcgm-compatibility.md"),
        Format::DcgmiDmon | Format::DcgmExporter => ("DCGM fields", "docs/dcgm-compatibility.md"),
        Format::Jsonl => ("trace keys", "docs/trace-format.md"),
    }
}

/// `s`, or why it is not read: stamped after `not_after` (this machine's clock when the
/// capture was opened, and a day's skew), a time no capture's sample can have. Read, it
/// stood for a gap of centuries, and every later sample came before it.
fn from_the_past(
    s: Sample,
    not_after: Timestamp,
    name: &str,
    line: usize,
) -> Result<Sample, ParseError> {
    if s.taken <= not_after {
        return Ok(s);
    }
    Err(ParseError {
        file: name.to_string(),
        line,
        message: format!(
            "stamped {}, more than a day after this machine's clock ({}): no capture holds a sample from the future; not read",
            crate::times::rfc3339(s.taken.0),
            crate::times::rfc3339(not_after.0.saturating_sub(CLOCK_SKEW_MS))
        ),
    })
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
        let (samples, errors) = drain(&mut c).unwrap();
        (c.format(), samples, errors)
    }

    /// Every sample and per-line error to come; `Err` when a read fails.
    fn drain<R: BufRead>(c: &mut Capture<R>) -> Result<(Vec<Sample>, Vec<String>), CaptureError> {
        let (mut samples, mut errors) = (Vec::new(), Vec::new());
        while let Some(r) = c.next_sample()? {
            match r {
                Ok(s) => samples.push(s),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Ok((samples, errors))
    }

    /// A sample stamped more than a day after this machine's clock is no sample: one in
    /// year 9999 among a trace's seconds had read as a gap of 251 603 539 201 s, and every
    /// sample after it as going back in time and skipped. It is a malformed line, named
    /// with its line; a sample within the day's skew is read.
    #[test]
    fn a_sample_from_the_future_is_a_malformed_line() {
        let line = |at: &str| format!("{{\"taken\":\"{at}\",\"gpu\":0,\"gpu_util\":0.5}}\n");
        let now = crate::times::unix_ms(std::time::SystemTime::now());
        let soon = crate::times::rfc3339(now + 3_600_000);
        let text = [
            line("2026-01-01T00:00:01Z"),
            line("9999-01-01T00:00:02Z"),
            line("2026-01-01T00:00:03Z"),
            line(&soon),
        ]
        .concat();
        let (format, samples, errors) = all(text.as_bytes());
        assert_eq!(format, Format::Jsonl);
        let taken: Vec<i64> = samples.iter().map(|s| s.taken.0).collect();
        assert_eq!(
            taken[..2],
            [1_767_225_601_000, 1_767_225_603_000],
            "{errors:?}"
        );
        assert_eq!(samples.len(), 3);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "c.txt:2: stamped 9999-01-01T00:00:02Z, more than a day after this machine's clock ("
            ),
            "{errors:?}"
        );
        assert!(errors[0].ends_with("no capture holds a sample from the future; not read"));
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

    /// A capture cut while its last line was written (no line end after it) has that line
    /// refused, never read with its last value cut short: `60` cut to `6` in a dcgm-exporter
    /// scrape and a dmon capture, each a malformed line at its number; the lines before it
    /// are read. A JSONL trace's last object without a line end is whole (a cut one does
    /// not parse), and a trailing blank without one is nothing.
    #[test]
    fn a_last_line_without_a_line_end_is_not_read() {
        let scrape = b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 20 1000\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 6";
        let (_, samples, errors) = all(scrape);
        let util: Vec<_> = samples
            .iter()
            .map(|s| {
                s.entities[0]
                    .readings
                    .get(truthscale_core::model::Field::ReportedUtil)
            })
            .collect();
        assert_eq!(util, [truthscale_core::model::Reading::Value(0.2)]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("c.txt:2: the input ends in this line without a line end"),
            "{errors:?}"
        );
        let dmon = b"#Entity   GPUTL   SMACT\nID\nGPU 0     20      0.200\nGPU 0     80      0.800\nGPU 0     6";
        let (format, samples, errors) = all(dmon);
        assert_eq!(format, Format::DcgmiDmon);
        let util: Vec<_> = samples
            .iter()
            .flat_map(|s| {
                s.entities.iter().map(|e| {
                    e.readings
                        .value(truthscale_core::model::Field::ReportedUtil)
                })
            })
            .collect();
        assert_eq!(util, [Some(0.2), Some(0.8)]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("c.txt:5: the input ends"),
            "{errors:?}"
        );
        let jsonl = b"{\"taken\":\"2024-01-01T00:00:00Z\",\"gpu\":0,\"gpu_util\":0.6}";
        let (_, samples, errors) = all(jsonl);
        assert_eq!((samples.len(), errors.len()), (1, 0), "{errors:?}");
        let (_, _, errors) = all(b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 20\n  ");
        assert!(errors.is_empty(), "{errors:?}");
        let (_, samples, errors) = all(b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 20\n# EOF");
        assert_eq!((samples.len(), errors.len()), (1, 0), "{errors:?}");
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

    /// An empty capture says so, not "the first 0 lines".
    #[test]
    fn an_empty_capture_says_it_is_empty() {
        let err = Capture::open(&b""[..], "x", None, 1.0).unwrap_err();
        assert!(
            err.to_string().starts_with("x: is empty (no line to read)"),
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

    /// The compression a capture is read through (`None`: plain text).
    fn compression<R>(c: &Capture<R>) -> Option<&'static str> {
        match &c.reader {
            Input::Plain(_) => None,
            Input::Gzip(_) => Some("gzip"),
            Input::Zstd(_) => Some("zstd"),
        }
    }

    /// The error that ends reading `bytes` as a capture, at its opening or later.
    fn failure(bytes: &[u8]) -> String {
        let reader = std::io::BufReader::with_capacity(7, bytes);
        match Capture::open(reader, "c", None, 1.0) {
            Err(e) => e.to_string(),
            Ok(mut c) => drain(&mut c).map(|_| ()).unwrap_err().to_string(),
        }
    }

    #[test]
    fn unknown_format_says_what_to_capture() {
        let err = Capture::open(&b"hello\n"[..], "x", None, 1.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "x: cannot tell the format from the first 1 lines; if it is dcgmi-dmon, \
             dcgm-exporter, nvidia-smi-csv or jsonl (plain, gzip or zstd), `truthscale analyze \
             --format` names it, or capture one: `dcgmi dmon -e 203,1001,1002,1004,1005,100,155 -d 1000 > \
             capture.txt`, `nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,\
             memory.used,memory.total,power.draw,clocks.sm --format=csv -lms 1000 > capture.csv` \
             (no profiling counters: effective compute is only bounded), or a dcgm-exporter \
             scrape (`curl -s HOST:9400/metrics > scrape.txt`)"
        );
    }

    const SMI: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../truthscale-core/tests/fixtures/nvidia-smi/nvidia-smi-constructed-h100-units.csv"
    );

    /// The gzip and zstd copies of a capture read as its text does, told by their first
    /// bytes whatever the reader's buffer; progress counts the bytes as stored.
    #[test]
    fn compressed_captures_read_as_their_text() {
        let text = std::fs::read(SMI).unwrap();
        let mut c = Capture::open(&text[..], "c", None, 1.0).unwrap();
        assert_eq!((c.format(), compression(&c)), (Format::NvidiaSmiCsv, None));
        assert!(c.has_own_timestamps());
        let (plain, errors) = drain(&mut c).unwrap();
        assert_eq!((plain.len(), errors.len()), (12, 0));
        assert_eq!(c.bytes_read(), text.len() as u64);
        for (ext, kind) in [("gz", "gzip"), ("zst", "zstd")] {
            let bytes = std::fs::read(format!("{SMI}.{ext}")).unwrap();
            for capacity in [1, 3, 4096, 1 << 18] {
                let reader = std::io::BufReader::with_capacity(capacity, &bytes[..]);
                let mut c = Capture::open(reader, "c", None, 1.0).unwrap();
                assert_eq!(c.format(), Format::NvidiaSmiCsv, "{ext} {capacity}");
                assert_eq!(compression(&c), Some(kind));
                assert_eq!(c.declared_interval(1.0), None);
                let (samples, errors) = drain(&mut c).unwrap();
                assert!(samples == plain, "{ext} {capacity}");
                assert_eq!(errors, Vec::<String>::new());
                assert_eq!(c.bytes_read(), bytes.len() as u64, "{ext} {capacity}");
            }
        }
    }

    /// gzip members and zstd frames one after another (a skippable frame skipped) are one
    /// capture.
    #[test]
    fn concatenated_members_and_frames_are_read_in_turn() {
        use ruzstd::encoding::{CompressionLevel, compress_to_vec};
        use std::io::Write as _;
        let one = b"timestamp, index, utilization.gpu [%]\n2026/12/03 16:23:40, 0, 10 %\n";
        let two = b"2026/12/03 16:23:41, 0, 20 %\n";
        let gzip = |b: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(b).unwrap();
            e.finish().unwrap()
        };
        let mut gzipped = gzip(one);
        gzipped.extend(gzip(two));
        let mut zstd = vec![0x5e, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, b'a', b'b', b'c'];
        zstd.extend(compress_to_vec(&one[..], CompressionLevel::Fastest));
        zstd.extend(compress_to_vec(&two[..], CompressionLevel::Uncompressed));
        for bytes in [gzipped, zstd] {
            let (format, samples, errors) = all(&bytes);
            assert_eq!(format, Format::NvidiaSmiCsv);
            assert_eq!(errors, Vec::<String>::new());
            let got: Vec<_> = samples
                .iter()
                .map(|s| {
                    let r = &s.entities[0].readings;
                    (
                        s.taken.0,
                        r.value(truthscale_core::model::Field::ReportedUtil),
                    )
                })
                .collect();
            assert_eq!(
                got,
                [
                    (1_796_315_020_000, Some(0.1)),
                    (1_796_315_021_000, Some(0.2))
                ]
            );
        }
    }

    /// A damaged compressed capture ends with an error naming it and the compression.
    #[test]
    fn damaged_compressed_captures_end_with_an_error() {
        let zst = std::fs::read(format!("{SMI}.zst")).unwrap();
        // The last four bytes are the frame's checksum.
        let mut bad = zst.clone();
        if let Some(b) = bad.last_mut() {
            *b ^= 0xff;
        }
        let err = failure(&bad);
        assert!(
            err.starts_with("cannot read c: zstd: checksum mismatch: the frame says "),
            "{err}"
        );
        let err = failure(&zst[..zst.len() - 100]);
        assert_eq!(
            err,
            "cannot read c: zstd: incomplete stream: the input ends inside a frame (cut short?)"
        );
        let gz = std::fs::read(format!("{SMI}.gz")).unwrap();
        let err = failure(&gz[..gz.len() / 2]);
        assert_eq!(err, "cannot read c: gzip: incomplete deflate stream");
        let err = failure(b"\x1f\x8bnot gzip at all\n");
        assert!(err.starts_with("cannot read c: gzip: "), "{err}");
        // Trailing bytes after the last zstd frame that are no frame.
        let mut trailing = zst;
        trailing.extend_from_slice(b"tail");
        let err = failure(&trailing);
        assert!(err.starts_with("cannot read c: zstd: "), "{err}");
    }

    /// With `--format nvidia-smi-csv` given, the header still says whether the rows carry
    /// their own times.
    #[test]
    fn a_given_nvidia_smi_format_reads_its_header_for_timestamps() {
        let stamped = b"timestamp, index, utilization.gpu [%]\n2026/12/03 16:23:40, 0, 10 %\n";
        let c = Capture::open(&stamped[..], "c", Some(Format::NvidiaSmiCsv), 2.0).unwrap();
        assert_eq!(c.declared_interval(2.0), None);
        let bare = b"index, utilization.gpu [%]\n0, 10 %\n";
        let c = Capture::open(&bare[..], "c", Some(Format::NvidiaSmiCsv), 2.0).unwrap();
        assert_eq!(c.declared_interval(2.0), Some(2.0));
        // One byte, or none: plain text too short to be compressed.
        for short in [&b"\x1f"[..], b""] {
            let c = Capture::open(short, "c", Some(Format::Jsonl), 1.0).unwrap();
            assert_eq!(compression(&c), None);
        }
    }
}

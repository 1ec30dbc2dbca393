//! Parsers: pure, line-at-a-time functions from text to [`Sample`]s.
//!
//! Each parser is fed one line at a time so that memory does not grow with the input, and
//! reports errors as `file:line: what is wrong`.

use crate::model::{Sample, Timestamp};

pub mod dcgm_text;
pub mod dmon;
pub mod jsonl;
pub mod names;
pub mod prom_text;
pub mod smi_csv;

pub use dcgm_text::DcgmTextParser;
pub use dmon::{DmonParser, dcgm_value};
pub use jsonl::JsonlParser;
pub use names::Unread;
pub use smi_csv::SmiCsvParser;

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct ParseError {
    /// The input's name (a path, or `-` for standard input).
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, in lowercase without a trailing period.
    pub message: String,
}

/// The capture formats truthscale reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `dcgmi dmon` text output.
    DcgmiDmon,
    /// dcgm-exporter `/metrics` text (Prometheus exposition).
    DcgmExporter,
    /// truthscale's JSONL trace format.
    Jsonl,
    /// `nvidia-smi --query-gpu=… --format=csv` output (with its header).
    NvidiaSmiCsv,
}

impl Format {
    /// The name used on the command line.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Format::DcgmiDmon => "dcgmi-dmon",
            Format::DcgmExporter => "dcgm-exporter",
            Format::Jsonl => "jsonl",
            Format::NvidiaSmiCsv => "nvidia-smi-csv",
        }
    }

    /// Guess the format from the first lines of an input.
    ///
    /// ```
    /// use truthscale_core::parse::Format;
    /// assert_eq!(Format::detect("#Entity   GRACT\nID\n"), Some(Format::DcgmiDmon));
    /// assert_eq!(Format::detect("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 5\n"), Some(Format::DcgmExporter));
    /// assert_eq!(Format::detect("{\"taken\":\"2024-01-01T00:00:00Z\",\"gpu\":0}\n"), Some(Format::Jsonl));
    /// assert_eq!(Format::detect("timestamp, index, utilization.gpu [%]\n"), Some(Format::NvidiaSmiCsv));
    /// ```
    #[must_use]
    pub fn detect(head: &str) -> Option<Format> {
        for line in head.lines() {
            let t = line.trim_start_matches("> ").trim();
            if t.starts_with("#Entity") || t.starts_with("# Entity") {
                return Some(Format::DcgmiDmon);
            }
            if t.starts_with('{') {
                return Some(Format::Jsonl);
            }
            let lower = t.to_ascii_lowercase();
            if lower.starts_with("dcgm_")
                || lower.starts_with("# help dcgm_")
                || lower.starts_with("# type dcgm_")
            {
                return Some(Format::DcgmExporter);
            }
            if smi_csv::detects(t) {
                return Some(Format::NvidiaSmiCsv);
            }
        }
        None
    }
}

/// Any of the parsers, behind one interface.
#[derive(Debug)]
pub enum LineParser {
    /// `dcgmi dmon`.
    Dmon(DmonParser),
    /// dcgm-exporter text.
    DcgmText(DcgmTextParser),
    /// JSONL trace.
    Jsonl(JsonlParser),
    /// nvidia-smi CSV.
    SmiCsv(SmiCsvParser),
}

impl LineParser {
    /// A parser for `format`. `interval_secs` spaces the samples of formats that carry no
    /// timestamps; `start` is the time given to their first sample.
    #[must_use]
    pub fn new(format: Format, file: &str, interval_secs: f64, start: Timestamp) -> LineParser {
        match format {
            Format::DcgmiDmon => LineParser::Dmon(DmonParser::new(file, interval_secs, start)),
            Format::DcgmExporter => {
                LineParser::DcgmText(DcgmTextParser::new(file, interval_secs, start))
            }
            Format::Jsonl => LineParser::Jsonl(JsonlParser::new(file)),
            Format::NvidiaSmiCsv => {
                LineParser::SmiCsv(SmiCsvParser::new(file, interval_secs, start))
            }
        }
    }

    /// Feed the next line (without its newline). Returns a sample when one is complete.
    ///
    /// # Errors
    /// A [`ParseError`] naming the file and line when the line is malformed. The parser
    /// stays usable: the caller may count the error and go on with the next line.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Sample>, ParseError> {
        match self {
            LineParser::Dmon(p) => p.push_line(line),
            LineParser::DcgmText(p) => p.push_line(line),
            LineParser::Jsonl(p) => p.push_line(line),
            LineParser::SmiCsv(p) => p.push_line(line),
        }
    }

    /// End of input: the last, possibly partial, sample.
    pub fn finish(&mut self) -> Option<Sample> {
        match self {
            LineParser::Dmon(p) => p.finish(),
            LineParser::DcgmText(p) => p.finish(),
            LineParser::Jsonl(p) => p.finish(),
            LineParser::SmiCsv(p) => p.finish(),
        }
    }

    /// What the input held that is not read: DCGM families, `dmon` or nvidia-smi columns,
    /// trace keys; readings refused for an ambiguous unit; blanks (sentinels, NaN). Every
    /// format has one.
    #[must_use]
    pub fn unread(&self) -> Option<&Unread> {
        match self {
            LineParser::Dmon(p) => Some(p.unread()),
            LineParser::DcgmText(p) => Some(p.unread()),
            LineParser::SmiCsv(p) => Some(p.unread()),
            LineParser::Jsonl(p) => Some(p.unread()),
        }
    }

    /// Lines that were skipped as not data (comments, blank lines, shell prompts before the
    /// first header), for reporting.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        match self {
            LineParser::Dmon(p) => p.skipped_lines(),
            LineParser::DcgmText(p) => p.skipped_lines(),
            LineParser::Jsonl(p) => p.skipped_lines(),
            LineParser::SmiCsv(p) => p.skipped_lines(),
        }
    }
}

/// Parse a whole string; stops at the first malformed line.
///
/// # Errors
/// The first [`ParseError`].
pub fn parse_str(
    format: Format,
    file: &str,
    text: &str,
    interval_secs: f64,
) -> Result<Vec<Sample>, ParseError> {
    let mut p = LineParser::new(format, file, interval_secs, Timestamp(0));
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(s) = p.push_line(line)? {
            out.push(s);
        }
    }
    out.extend(p.finish());
    Ok(out)
}

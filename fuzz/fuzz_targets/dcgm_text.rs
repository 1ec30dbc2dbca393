//! dcgm-exporter `/metrics` text (one or more scrapes), a line at a time: no panic; every
//! value finite; scrapes stamped in order (where the text has no timestamps of its own); a bad line names its line. The format detector
//! sees the same text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::{DcgmTextParser, Format};
use truthscale_fuzz::check_line_parser;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Format::detect(text);
    }
    let mut p = DcgmTextParser::new("fuzz", 1.0, Timestamp(0));
    check_line_parser(
        data,
        "scrape",
        &mut p,
        DcgmTextParser::push_line,
        DcgmTextParser::finish,
        DcgmTextParser::timestamped,
    );
});

//! dcgm-exporter `/metrics` text (one or more scrapes), a line at a time: no panic; every
//! value finite; scrapes stamped in order; a bad line names its line. The format detector
//! sees the same text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::{DcgmTextParser, Format};
use truthscale_fuzz::{check_parsed, lines};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Format::detect(text);
    }
    let mut p = DcgmTextParser::new("fuzz", 1.0, Timestamp(0));
    let mut last = None;
    let mut check = |s: &truthscale_core::model::Sample| {
        check_parsed(s);
        if let Some(prev) = last {
            assert!(s.taken > prev, "scrape at {:?} after {prev:?}", s.taken);
        }
        last = Some(s.taken);
    };
    for (i, line) in lines(data).enumerate() {
        match p.push_line(line.unwrap_or("")) {
            Ok(Some(s)) => check(&s),
            Ok(None) => {}
            Err(e) => assert_eq!(e.line, i + 1, "{e}"),
        }
    }
    if let Some(s) = p.finish() {
        check(&s);
    }
});

//! truthscale JSONL traces, a line at a time: no panic; every value finite; one sample per
//! data line; and every sample read, written back with `to_line`, reads back the same
//! (time clamped to the years 0 to 9999, as `to_line` documents).

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::model::Timestamp;
use truthscale_core::parse::JsonlParser;
use truthscale_core::parse::jsonl::to_line;
use truthscale_fuzz::{check_parsed, lines};

/// The times RFC 3339 can write: 0000-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z.
const MIN_MS: i64 = -62_167_219_200_000;
const MAX_MS: i64 = 253_402_300_799_999;

fuzz_target!(|data: &[u8]| {
    let mut p = JsonlParser::new("fuzz");
    for (i, line) in lines(data).enumerate() {
        match p.push_line(line.unwrap_or("")) {
            Ok(Some(s)) => {
                check_parsed(&s);
                assert_eq!(s.entities.len(), 1, "one entity per line");
                let e = &s.entities[0];
                let written = to_line(s.taken, e);
                let mut again = JsonlParser::new("again");
                let back = again
                    .push_line(&written)
                    .unwrap_or_else(|err| panic!("{written}: {err}"))
                    .expect("a data line");
                assert_eq!(
                    back.taken,
                    Timestamp(s.taken.0.clamp(MIN_MS, MAX_MS)),
                    "{written}"
                );
                assert_eq!(back.entities, s.entities, "{written}");
            }
            Ok(None) => {}
            Err(e) => assert_eq!(e.line, i + 1, "{e}"),
        }
    }
    assert!(p.finish().is_none());
});

//! Any bytes as a capture file, through the one capture reader (`Capture`: gzip and zstd
//! decompression, format detection, line limits, UTF-8, every parser) into the deriver and
//! the analyzer, every window checked as in the `derive` target.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::derive::DeriveConfig;
use truthscale_exporter::capture::Capture;
use truthscale_fuzz::{Checked, check_parsed};

/// Whether the capture reader reads `data` as gzip or zstd (its magic bytes, as
/// `Capture::open` tells them, a skippable zstd frame included).
fn compressed(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
        || data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        || (data.len() >= 4 && data[0] & 0xf0 == 0x50 && data[1..4] == [0x2a, 0x4d, 0x18])
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut c) = Capture::open(data, "fuzz", None, 1.0) else {
        return;
    };
    let mut checked = Checked::new(DeriveConfig::default(), Some(1.0), true);
    let mut last_line = 0;
    loop {
        match c.next_sample() {
            Ok(Some(Ok(s))) => {
                check_parsed(&s);
                checked.observe(&s);
            }
            Ok(Some(Err(e))) => {
                assert!(e.line > last_line, "error lines go forward: {e}");
                last_line = e.line;
            }
            Ok(None) => break,
            // A damaged gzip or zstd stream ends the capture with an error naming it; any
            // other read from memory cannot fail.
            Err(e) if compressed(data) => {
                let said = e.to_string();
                assert!(said.contains("gzip:") || said.contains("zstd:"), "{said}");
                break;
            }
            Err(e) => panic!("a read from memory failed: {e}"),
        }
    }
    assert!(c.bytes_read() <= data.len() as u64);
    checked.finish();
});

//! Any bytes as a capture file, through the one capture reader (`Capture`: gzip and zstd
//! decompression, format detection, line limits, UTF-8, every parser) into the deriver and
//! the analyzer, every window checked as in the `derive` target.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::derive::DeriveConfig;
use truthscale_exporter::capture::Capture;
use truthscale_fuzz::{Checked, check_parsed};

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
            Err(e) => panic!("a read from memory failed: {e}"),
        }
    }
    assert!(c.bytes_read() <= data.len() as u64);
    checked.finish();
});

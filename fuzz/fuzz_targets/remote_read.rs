//! A streamed remote-read answer, from the HTTP body on (`evaluate_remote_read_answer`): its
//! frames (length, CRC-32C, protobuf), the XOR chunks of each series and the evaluation at
//! each step. No panic; a series' values at increasing steps on the grid, never empty.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_exporter::history::evaluate_remote_read_answer;

fuzz_target!(|data: &[u8]| {
    let _ = evaluate_remote_read_answer(data);
});

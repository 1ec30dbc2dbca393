//! A streamed remote-read answer, from the HTTP body on (`evaluate_remote_read_answer`): its
//! frames (length, CRC-32C, protobuf), the XOR chunks of each series and the evaluation at
//! each step. No panic; a series' values at increasing steps on the grid, never empty. An
//! input whose first byte is odd is the rest framed with its true length and CRC, so that
//! inputs reach the protobuf and the chunks; an even one is the body as it is.

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_exporter::history::{evaluate_remote_read_answer, remote_read_frame};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let body = if first % 2 == 1 {
        remote_read_frame(rest)
    } else {
        rest.to_vec()
    };
    let _ = evaluate_remote_read_answer(&body);
});

//! The API server's pod list, from the JSON body on (`PodLabels::from_json`): no panic; the
//! reader's caps hold (at most 10 000 pods, label values of at most 1 024 bytes, no empty
//! value kept).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = std::str::from_utf8(data) {
        let _ = truthscale_exporter::fuzzing::pod_list(body);
    }
});

//! The kubelet's PodResources `List` answer, from the protobuf bytes on, as the client
//! decodes it under the caps (`kubelet_codec::decode_answer`): no panic; the reader's caps
//! hold whatever the answer holds (at most 1 024 devices, 256 holders a device, names of at
//! most 1 024 bytes); an answer prost decodes gives the same allocations as from prost's
//! structs (`Allocations::from_response`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = truthscale_exporter::fuzzing::kubelet_answer(data);
});

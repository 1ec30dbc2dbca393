//! A pod's cgroup v2 files (`cpu.stat`, `cpu.max`, `cpu.pressure`, `io.pressure`,
//! `memory.pressure`), as node mode's holder pressure reads them: the same bytes through
//! the three parsers. No panic; a parse holds only what the text says.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = truthscale_exporter::fuzzing::cgroup_files(data);
});

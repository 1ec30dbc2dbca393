//! A process's `/proc/<pid>/cgroup` and `environ`, as the per-process attribution reads them:
//! the first byte says where the cgroup file ends, the rest is split there. No panic; a pod
//! UID is never empty, a hostname only comes with a pod and never holds a NUL.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let (cgroup, environ) = rest.split_at(usize::from(first) * rest.len() / 256);
    let _ = truthscale_exporter::fuzzing::proc_files(cgroup, environ);
});

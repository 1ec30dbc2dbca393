//! A Prometheus `query_range` answer, from the HTTP body on (`decode_range_answer`): the
//! first byte picks the series asked for (truthscale's own gauges, DCGM fields, or a name
//! neither knows), the rest is the body. No panic; samples come one per timestamp, in
//! time order, never empty; every value finite (NaN and ±Inf become blanks).

#![no_main]

use libfuzzer_sys::fuzz_target;
use truthscale_core::catalog;
use truthscale_core::model::Reading;
use truthscale_exporter::history::decode_range_answer;

const METRICS: &[&str] = &[
    catalog::GPU_REPORTED_UTILIZATION.name,
    catalog::GPU_TENSOR_ACTIVE.name,
    catalog::GPU_DRAM_ACTIVE.name,
    catalog::GPU_SM_ACTIVE.name,
    catalog::GPU_SM_CLOCK.name,
    catalog::GPU_POWER.name,
    catalog::GPU_MEMORY_USED.name,
    catalog::GPU_EFFECTIVE_COMPUTE.name,
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "dcgm_gpu_utilization",
    "up",
];

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let metric = METRICS[usize::from(first) % METRICS.len()];
    let mut last = None;
    let _ = decode_range_answer(metric, body, |s| {
        if let Some(prev) = last {
            assert!(s.taken > prev, "sample at {:?} after {prev:?}", s.taken);
        }
        last = Some(s.taken);
        assert!(!s.entities.is_empty(), "an empty sample");
        for e in &s.entities {
            for (f, r) in e.readings.iter() {
                if let Reading::Value(v) = r {
                    assert!(v.is_finite(), "{metric}: {} = {v}", f.name());
                }
            }
        }
    });
});

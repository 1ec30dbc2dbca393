//! Tracks and inputs shared by the fleet's tests.

use crate::derive::DeriveConfig;
use crate::diag::Diagnostic;
use crate::fleet::FleetInput;
use crate::fleet::track::{BANDS, Point, Track};
use crate::gpus;
use crate::gpus::GpuSpec;
use crate::model::{EntitySample, Field};

pub(super) const GIB: f64 = 1_073_741_824.0;

pub(super) fn h100() -> &'static GpuSpec {
    gpus::by_key("h100-sxm").unwrap()
}

/// A pod on its own H100 of 80 GiB, with `f(step)` = (saturation, busy, memory GiB).
pub(super) fn pod(
    name: &str,
    gpu: &str,
    steps: std::ops::Range<usize>,
    f: impl Fn(usize) -> (Option<f64>, Option<f64>, Option<f64>),
) -> Track {
    let mut t = Track::new(Some(name.to_owned()), gpu.to_owned());
    t.spec = Some(h100());
    t.model = Some("NVIDIA H100 80GB HBM3".to_owned());
    t.memory_total_mib = Some(80 * 1024);
    for s in steps {
        let (sat, busy, mem) = f(s);
        t.record(
            s,
            Point::new(sat, busy, sat, mem.map(|g| g * GIB)).with_pipes(sat, sat.map(|x| x / 2.0)),
        );
    }
    t
}

/// A sample of one H100 at `ms`: tensor activity `tensor`, DRAM a quarter of it, busy.
pub(super) fn tensor_sample(ms: i64, tensor: f64) -> crate::model::Sample {
    crate::tracker::tests::sample(
        ms,
        &[
            (Field::TensorActive, tensor),
            (Field::DramActive, tensor / 4.0),
            (Field::SmClockMhz, h100().f_ref_mhz),
            (Field::ReportedUtil, 1.0),
        ],
    )
}

/// The same quantile sample as each band of a step, as a step whose raw samples were
/// all alike reads; `true` where it was impossible.
pub(super) fn every_band(
    t: &mut Track,
    step: usize,
    e: &EntitySample,
    cfg: &DeriveConfig,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    (0..BANDS).any(|j| t.observe_peak_sample(step, j, e, cfg, diags))
}

pub(super) fn steady(i: usize, steps: usize) -> Track {
    pod(
        &format!("steady/p{i}"),
        &format!("node-a/gpu {i}"),
        0..steps,
        |_| (Some(0.2), Some(0.9), Some(30.0)),
    )
}

pub(super) fn input(tracks: Vec<Track>, steps: usize) -> FleetInput {
    FleetInput {
        step_seconds: 60.0,
        steps,
        tracks,
        held: Default::default(),
        step_bands: None,
    }
}

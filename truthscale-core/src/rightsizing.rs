//! Memory right-sizing and MIG fit.
//!
//! MIG fit assumes work re-packs linearly onto fewer SMs and memory slices (an assumption
//! to check per workload). A profile fits when its memory holds the demand with headroom,
//! its share of SMs covers the compute demand, and its share of memory slices covers the
//! bandwidth demand against the practical DRAM ceiling. A demand that was not measured is
//! never taken as zero: the fit then rests on the measured constraints only, and says which
//! constraints it could not check.

use crate::gpus::{GpuSpec, MigProfile};

/// What a workload needs, measured over a horizon, as shares of the whole GPU.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Demand {
    /// Memory needed in bytes (peak allocated, or a better estimate when one exists).
    pub memory_bytes: f64,
    /// Compute demand as a fraction of the whole GPU (e.g. p95 of the busiest pipe);
    /// `None` when no compute counter was read.
    pub compute: Option<f64>,
    /// Bandwidth demand as DRAM activity of the whole GPU (e.g. p95 of `d`); `None` when
    /// the DRAM counter was not read.
    pub bandwidth: Option<f64>,
}

impl Demand {
    /// Turn a demand measured on MIG instance `instance` (its counters are fractions of the
    /// instance) into shares of the whole GPU: compute by the instance's SM share, bandwidth
    /// by its memory-slice share.
    #[must_use]
    pub fn of_instance(self, spec: &GpuSpec, instance: &MigProfile) -> Demand {
        let sm_share = f64::from(instance.sms) / f64::from(spec.sms.max(1));
        let slice_share =
            f64::from(instance.memory_slices) / f64::from(instance.memory_slices_total.max(1));
        Demand {
            memory_bytes: self.memory_bytes,
            compute: self.compute.map(|c| c * sm_share),
            bandwidth: self.bandwidth.map(|b| b * slice_share),
        }
    }
}

/// The constraint that decides the smallest fitting profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    /// Memory capacity.
    Memory,
    /// SM share.
    Compute,
    /// Memory-slice (bandwidth) share.
    Bandwidth,
}

/// The recommended MIG profile and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigFit {
    /// The smallest profile that fits the measured constraints.
    pub profile: &'static MigProfile,
    /// The constraint that ruled out every smaller profile (the binding one).
    pub binding: Constraint,
    /// Whether compute demand was measured and checked.
    pub compute_checked: bool,
    /// Whether bandwidth demand was measured and checked.
    pub bandwidth_checked: bool,
}

impl MigFit {
    /// The constraints that could not be checked because their demand was not measured.
    #[must_use]
    pub fn unmeasured(&self) -> Vec<Constraint> {
        let mut v = Vec::new();
        if !self.compute_checked {
            v.push(Constraint::Compute);
        }
        if !self.bandwidth_checked {
            v.push(Constraint::Bandwidth);
        }
        v
    }
}

/// The smallest MIG profile of `spec` that fits `demand`, or `None` when none does
/// (or the model has no MIG). Unmeasured demands are not checked ([`MigFit::unmeasured`]).
///
/// ```
/// use truthscale_core::gpus::by_key;
/// use truthscale_core::rightsizing::{mig_fit, Demand, Constraint};
/// let h100 = by_key("h100-sxm").unwrap();
/// // Decode at d = 0.3 with 8 GB of weights: memory fits 1g, bandwidth needs 4/8 slices.
/// let d = Demand { memory_bytes: 8e9, compute: Some(0.02), bandwidth: Some(0.3) };
/// let fit = mig_fit(h100, &d, 0.15, 0.8).unwrap();
/// assert_eq!(fit.profile.name, "3g.40gb");
/// assert_eq!(fit.binding, Constraint::Bandwidth);
/// assert!(fit.unmeasured().is_empty());
/// ```
#[must_use]
pub fn mig_fit(spec: &GpuSpec, demand: &Demand, headroom: f64, d_max: f64) -> Option<MigFit> {
    let h = sane_headroom(headroom);
    let mem = demand.memory_bytes.max(0.0) * (1.0 + h);
    let cmp = demand.compute.map(|c| c.max(0.0) / (1.0 - h));
    let bw = demand
        .bandwidth
        .map(|b| b.max(0.0) / (d_max.max(0.01) * (1.0 - h)));
    let mut order: Vec<&'static MigProfile> = spec.mig.iter().collect();
    order.sort_by_key(|p| {
        (
            p.compute_slices.max(p.memory_slices),
            p.compute_slices,
            p.memory_slices,
        )
    });
    let fails = |p: &MigProfile| -> Option<Constraint> {
        if (p.memory_bytes as f64) < mem {
            Some(Constraint::Memory)
        } else if cmp.is_some_and(|c| f64::from(p.sms) / f64::from(spec.sms) < c) {
            Some(Constraint::Compute)
        } else if bw
            .is_some_and(|b| f64::from(p.memory_slices) / f64::from(p.memory_slices_total) < b)
        {
            Some(Constraint::Bandwidth)
        } else {
            None
        }
    };
    let mut binding = Constraint::Memory;
    for p in order {
        match fails(p) {
            Some(c) => binding = c,
            None => {
                return Some(MigFit {
                    profile: p,
                    binding,
                    compute_checked: cmp.is_some(),
                    bandwidth_checked: bw.is_some(),
                });
            }
        }
    }
    None
}

/// Headroom in [0, 0.9]; a NaN one (which validation refuses) counts as 0, never NaN.
fn sane_headroom(h: f64) -> f64 {
    if h.is_nan() { 0.0 } else { h.clamp(0.0, 0.9) }
}

/// Memory right-sizing for a non-MIG view: the allocated fraction and headroom-adjusted need.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MemorySizing {
    /// Peak allocated bytes over the horizon.
    pub peak_used_bytes: f64,
    /// Total device (or instance) memory.
    pub total_bytes: f64,
    /// `peak_used / total`.
    pub peak_used_fraction: f64,
    /// Peak with headroom: what a right-sized device needs.
    pub needed_bytes: f64,
}

/// Size memory from the peak allocation. NVML sees allocation, not need: inference engines
/// pre-allocate their KV cache, so this is an upper bound on need.
#[must_use]
pub fn memory_sizing(
    peak_used_bytes: f64,
    total_bytes: f64,
    headroom: f64,
) -> Option<MemorySizing> {
    if total_bytes.is_nan()
        || total_bytes <= 0.0
        || !peak_used_bytes.is_finite()
        || peak_used_bytes < 0.0
    {
        return None;
    }
    Some(MemorySizing {
        peak_used_bytes,
        total_bytes,
        peak_used_fraction: (peak_used_bytes / total_bytes).clamp(0.0, 1.0),
        needed_bytes: peak_used_bytes * (1.0 + sane_headroom(headroom)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::by_key;

    #[test]
    fn memory_binds_for_big_models() {
        let h100 = by_key("h100-sxm").unwrap();
        let d = Demand {
            memory_bytes: 30e9,
            compute: Some(0.05),
            bandwidth: Some(0.05),
        };
        let fit = mig_fit(h100, &d, 0.15, 0.8).unwrap();
        assert_eq!(fit.profile.name, "3g.40gb");
        assert_eq!(fit.binding, Constraint::Memory);
    }

    #[test]
    fn compute_binds_for_prefill_heavy_work() {
        let h100 = by_key("h100-sxm").unwrap();
        let d = Demand {
            memory_bytes: 5e9,
            compute: Some(0.4),
            bandwidth: Some(0.1),
        };
        let fit = mig_fit(h100, &d, 0.15, 0.8).unwrap();
        // 0.4/0.85 = 0.47 of SMs: 3g has 60/132 = 0.45, 4g has 64/132 = 0.48.
        assert_eq!(fit.profile.name, "4g.40gb");
        assert_eq!(fit.binding, Constraint::Compute);
    }

    #[test]
    fn small_work_fits_the_smallest_slice_and_nothing_fits_a_full_gpu_demand() {
        let h100 = by_key("h100-sxm").unwrap();
        let tiny = Demand {
            memory_bytes: 1e9,
            compute: Some(0.01),
            bandwidth: Some(0.01),
        };
        assert_eq!(
            mig_fit(h100, &tiny, 0.15, 0.8).unwrap().profile.name,
            "1g.10gb"
        );
        let full = Demand {
            memory_bytes: 1e9,
            compute: Some(0.95),
            bandwidth: Some(0.1),
        };
        assert_eq!(mig_fit(h100, &full, 0.15, 0.8), None);
        assert_eq!(mig_fit(by_key("l4").unwrap(), &tiny, 0.15, 0.8), None);
    }

    #[test]
    fn memory_sizing_values() {
        let m = memory_sizing(20e9, 80e9, 0.15).unwrap();
        assert_eq!(m.peak_used_fraction, 0.25);
        assert!((m.needed_bytes - 23e9).abs() < 1.0);
        assert_eq!(memory_sizing(1.0, 0.0, 0.1), None);
        assert_eq!(memory_sizing(f64::NAN, 1.0, 0.1), None);
    }

    #[test]
    fn unmeasured_demand_is_not_a_zero() {
        let h100 = by_key("h100-sxm").unwrap();
        // Busy compute (0.4 of the GPU) needs 4g; without the compute counter only memory
        // and bandwidth are checked, and the fit says compute was not.
        let measured = Demand {
            memory_bytes: 5e9,
            compute: Some(0.4),
            bandwidth: Some(0.1),
        };
        assert_eq!(
            mig_fit(h100, &measured, 0.15, 0.8).unwrap().profile.name,
            "4g.40gb"
        );
        let blind = Demand {
            compute: None,
            ..measured
        };
        let fit = mig_fit(h100, &blind, 0.15, 0.8).unwrap();
        // Bandwidth 0.1 / (0.8 · 0.85) = 0.147 of the slices: 2 of 8.
        assert_eq!(fit.profile.name, "1g.20gb");
        assert_eq!(fit.binding, Constraint::Bandwidth);
        assert_eq!(fit.unmeasured(), vec![Constraint::Compute]);
    }

    #[test]
    fn a_mig_instance_demand_is_relative_to_its_instance() {
        let h100 = by_key("h100-sxm").unwrap();
        let three_g = h100.mig.iter().find(|p| p.name == "3g.40gb").unwrap();
        // Busy pipe at 0.9 of a 3g instance (60 SMs) is 0.409 of the GPU; DRAM 0.5 of its
        // 4/8 slices is 0.25 of the GPU's bandwidth.
        let d = Demand {
            memory_bytes: 20e9,
            compute: Some(0.9),
            bandwidth: Some(0.5),
        }
        .of_instance(h100, three_g);
        assert!((d.compute.unwrap() - 0.9 * 60.0 / 132.0).abs() < 1e-12);
        assert!((d.bandwidth.unwrap() - 0.25).abs() < 1e-12);
        // 0.409 / 0.85 = 0.481 of the SMs: 4g (64/132 = 0.485) is the smallest that fits.
        let fit = mig_fit(h100, &d, 0.15, 0.8).unwrap();
        assert_eq!(fit.profile.name, "4g.40gb");
        assert_eq!(fit.binding, Constraint::Compute);
    }
}

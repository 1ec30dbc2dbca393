//! Memory right-sizing, MIG fit, and the MIG roll-up.
//!
//! MIG fit assumes work re-packs linearly onto fewer SMs and memory slices (an assumption
//! to check per workload). A profile fits when its memory holds the demand with headroom,
//! its share of SMs covers the compute demand, and its share of memory slices covers the
//! bandwidth demand against the practical DRAM ceiling.

use crate::gpus::{GpuSpec, MigProfile};

/// What a workload needs, measured over a horizon.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Demand {
    /// Memory needed in bytes (peak allocated, or a better estimate when one exists).
    pub memory_bytes: f64,
    /// Compute demand as a fraction of the whole GPU (e.g. p95 of the busiest pipe).
    pub compute: f64,
    /// Bandwidth demand as DRAM activity of the whole GPU (e.g. p95 of `d`).
    pub bandwidth: f64,
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
    /// The smallest profile that fits.
    pub profile: &'static MigProfile,
    /// The constraint that ruled out every smaller profile (the binding one).
    pub binding: Constraint,
}

/// Required share of each resource, with headroom.
fn requirements(demand: &Demand, headroom: f64, d_max: f64) -> [f64; 3] {
    let h = headroom.clamp(0.0, 0.9);
    let mem = demand.memory_bytes.max(0.0) * (1.0 + h);
    let cmp = demand.compute.max(0.0) / (1.0 - h);
    let bw = demand.bandwidth.max(0.0) / (d_max.max(0.01) * (1.0 - h));
    [mem, cmp, bw]
}

/// The smallest MIG profile of `spec` that fits `demand`, or `None` when none does
/// (or the model has no MIG).
///
/// ```
/// use truthscale_core::gpus::by_key;
/// use truthscale_core::rightsizing::{mig_fit, Demand, Constraint};
/// let h100 = by_key("h100-sxm").unwrap();
/// // Decode at d = 0.3 with 8 GB of weights: memory fits 1g, bandwidth needs 4/8 slices.
/// let fit = mig_fit(h100, &Demand { memory_bytes: 8e9, compute: 0.02, bandwidth: 0.3 }, 0.15, 0.8).unwrap();
/// assert_eq!(fit.profile.name, "3g.40gb");
/// assert_eq!(fit.binding, Constraint::Bandwidth);
/// ```
#[must_use]
pub fn mig_fit(spec: &GpuSpec, demand: &Demand, headroom: f64, d_max: f64) -> Option<MigFit> {
    let [mem, cmp, bw] = requirements(demand, headroom, d_max);
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
        } else if f64::from(p.sms) / f64::from(spec.sms) < cmp {
            Some(Constraint::Compute)
        } else if f64::from(p.memory_slices) / f64::from(p.memory_slices_total) < bw {
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
                });
            }
        }
    }
    None
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
        needed_bytes: peak_used_bytes * (1.0 + headroom.clamp(0.0, 0.9)),
    })
}

/// Roll MIG instance values up to the parent GPU, weighting each by its SM share.
///
/// `instances` holds `(sms, value)` pairs; `total_sms` is the parent's SM count.
/// ```
/// use truthscale_core::rightsizing::mig_rollup;
/// // 3g (60 SMs) at 0.5 and 4g (64 SMs) at 0.25 on a 132-SM H100.
/// let v = mig_rollup(&[(60, 0.5), (64, 0.25)], 132);
/// assert!((v - (30.0 + 16.0) / 132.0).abs() < 1e-12);
/// ```
#[must_use]
pub fn mig_rollup(instances: &[(u32, f64)], total_sms: u32) -> f64 {
    if total_sms == 0 {
        return 0.0;
    }
    let sum: f64 = instances
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|&(sms, v)| f64::from(sms) * v.clamp(0.0, 1.0))
        .sum();
    (sum / f64::from(total_sms)).clamp(0.0, 1.0)
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
            compute: 0.05,
            bandwidth: 0.05,
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
            compute: 0.4,
            bandwidth: 0.1,
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
            compute: 0.01,
            bandwidth: 0.01,
        };
        assert_eq!(
            mig_fit(h100, &tiny, 0.15, 0.8).unwrap().profile.name,
            "1g.10gb"
        );
        let full = Demand {
            memory_bytes: 1e9,
            compute: 0.95,
            bandwidth: 0.1,
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
}

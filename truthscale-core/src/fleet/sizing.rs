//! Right-sizing one workload: a MIG profile, a smaller model, and what either costs its peak.

use super::demand::{sizing_quantile, track_quantile};
use super::track::{Grid, MIB, Track, units_to_ratio};
use super::{D_MAX, MigChoice, PeakCost, RightSizing, SmallerGpu, sane};
use crate::gpus;
use crate::gpus::{GpuSpec, MigProfile};
use crate::rightsizing;
use crate::rightsizing::Demand;

/// How far a workload's peak may exceed a smaller model's capacity, and how long a point
/// of its track lasts.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeakLimit {
    /// [`FleetConfig::max_peak_over_capacity`](super::FleetConfig::max_peak_over_capacity).
    pub(super) max_over: f64,
    /// Seconds per point of the track.
    pub(super) seconds_per_point: f64,
    /// How a point's time is shared between its bands.
    pub(super) grid: Grid,
}

/// What model `c` costs the peak of track `t`, which ran on `spec`: the peak, and the
/// longest burst above `c`'s capacity (consecutive points, each counting the share of its
/// time its bands were above: a three-minute burst in an hour's point counts the bands it
/// filled, not the hour; a point with nothing measured between two above neither ends the
/// burst nor counts in it).
///
/// The capacity is the smaller of the two roofline ratios, dense tensor peak and DRAM
/// bandwidth: a peak of saturation may be either term's, and the target must carry it
/// whichever it was.
fn peak_cost(t: &Track, spec: &GpuSpec, c: &GpuSpec, limit: &PeakLimit) -> Option<PeakCost> {
    let compute = c.bf16_dense_tflops / spec.bf16_dense_tflops;
    let bandwidth = c.bandwidth_bytes_per_sec / spec.bandwidth_bytes_per_sec;
    peak_cost_at(t, compute.min(bandwidth), limit)
}

/// [`peak_cost`] on a target of capacity `ratio` in the track's own terms (a fraction of a
/// whole GPU of its model).
fn peak_cost_at(t: &Track, ratio: f64, limit: &PeakLimit) -> Option<PeakCost> {
    let peak = t.points.iter().filter_map(|p| p.sat_peak()).max()?;
    let peak = units_to_ratio(u64::from(peak));
    if !(ratio.is_finite() && ratio > 0.0) {
        return None;
    }
    let g = limit.grid;
    let whole: u64 = g.weights[..g.m].iter().sum();
    let (mut longest, mut run) = (0u64, 0u64);
    for &p in &t.points {
        // A point with nothing measured neither ends a burst nor adds to it: whether the
        // workload stayed above is unknown, and a burst is never cut short by a gap.
        if (0..g.m).all(|j| g.value(p, j).is_none()) {
            continue;
        }
        let above: u64 = (0..g.m)
            .filter(|&j| {
                g.value(p, j)
                    .is_some_and(|x| units_to_ratio(u64::from(x)) > ratio)
            })
            .map(|j| g.weights[j])
            .sum();
        run = if above > 0 { run + above } else { 0 };
        longest = longest.max(run);
    }
    let on_target = peak / ratio;
    let burst =
        (longest > 0).then(|| longest as f64 / whole.max(1) as f64 * limit.seconds_per_point);
    Some(PeakCost {
        peak_saturation: peak,
        capacity_ratio: ratio,
        peak_on_target: on_target,
        burst_seconds: burst,
        burst_on_target_seconds: burst.map(|b| b * on_target),
    })
}

/// The smallest catalog model with less memory and bandwidth than the workload's own that
/// holds its peak memory (`mem_peak`), covers its p99 bandwidth and compute, and whose
/// capacity its peak saturation exceeds by at most `limit.max_over`;
/// else why there is none (naming the cheapest model its peak alone ruled out, and the cost).
pub(super) fn smaller_gpu(
    t: &Track,
    mem_peak: Option<u64>,
    dram_p99: Option<f64>,
    pipe_p99: Option<f64>,
    h: f64,
    limit: PeakLimit,
) -> (Option<SmallerGpu>, Option<String>) {
    let (spec, m, d) = match (t.spec, mem_peak, dram_p99) {
        _ if t.is_mig => return (None, Some("runs on a MIG instance".to_owned())),
        (None, _, _) => return (None, Some("model not in the catalog".to_owned())),
        (_, None, _) => return (None, Some("memory was not measured".to_owned())),
        (_, _, None) => {
            return (
                None,
                Some("bandwidth was not measured (no DRAM counter)".to_owned()),
            );
        }
        (Some(spec), Some(m), Some(d)) => (spec, m, d),
    };
    let need_mem = f64::from(m as u32) * MIB * (1.0 + h);
    let need_bw = d * spec.bandwidth_bytes_per_sec;
    let need_flops = pipe_p99.map(|c| c * spec.bf16_dense_tflops);
    let mut fits: Vec<&'static GpuSpec> = gpus::CATALOG
        .iter()
        .filter(|c| {
            c.memory_bytes < spec.memory_bytes
                && c.bandwidth_bytes_per_sec < spec.bandwidth_bytes_per_sec
                && c.memory_bytes as f64 >= need_mem
                && c.bandwidth_bytes_per_sec * D_MAX * (1.0 - h) >= need_bw
                && need_flops.is_none_or(|f| c.bf16_dense_tflops * (1.0 - h) >= f)
        })
        .collect();
    fits.sort_by(|a, b| {
        a.bandwidth_bytes_per_sec
            .total_cmp(&b.bandwidth_bytes_per_sec)
            .then(a.memory_bytes.cmp(&b.memory_bytes))
            .then(a.key.cmp(b.key))
    });
    let costed = fits.iter().map(|c| (c, peak_cost(t, spec, c, &limit)));
    let mut withheld = None;
    for (c, cost) in costed {
        if let Some(k) = cost
            && k.peak_on_target > limit.max_over
        {
            withheld.get_or_insert((c, k));
            continue;
        }
        let proposal = SmallerGpu {
            key: c.key,
            name: c.name,
            compute_checked: need_flops.is_some(),
            peak: cost,
        };
        return (Some(proposal), None);
    }
    let note = match withheld {
        Some((c, k)) => withheld_note(
            &format!("the {}", c.name),
            c.name,
            "its own GPU",
            &k,
            limit.max_over,
        ),
        None => {
            "no smaller catalog model holds its peak memory and covers its p99 demand".to_owned()
        }
    };
    (None, Some(note))
}

/// The smallest MIG profile of `spec` that covers `demand` and whose share of the SMs the
/// workload's observed peak exceeds by at most `limit.max_over`, with what it costs the
/// peak; else why there is none (naming the profile its peak alone ruled out).
fn mig_choice(
    t: &Track,
    spec: &GpuSpec,
    demand: Demand,
    h: f64,
    limit: &PeakLimit,
) -> (Option<MigChoice>, Option<String>) {
    // The instance's capacity: the smaller of its SM share and its memory-slice share, as a
    // smaller model's is ([`peak_cost`]): a peak of saturation may be either term's.
    let share = |p: &MigProfile| {
        let sms = f64::from(p.sms) / f64::from(spec.sms.max(1));
        sms.min(f64::from(p.memory_slices) / f64::from(p.memory_slices_total.max(1)))
    };
    let choice = |f: rightsizing::MigFit| MigChoice {
        profile: f.profile.name,
        binding: f.binding,
        unmeasured: f.unmeasured(),
        peak: peak_cost_at(t, share(f.profile), limit),
    };
    let Some(first) = rightsizing::mig_fit(spec, &demand, h, D_MAX).map(choice) else {
        return (
            None,
            Some("no MIG profile fits: it needs the whole GPU".to_owned()),
        );
    };
    let Some(k) = first.peak.filter(|k| k.peak_on_target > limit.max_over) else {
        return (Some(first), None);
    };
    // The peak needs a share of at least peak / max_over: ask for it as compute, and as
    // bandwidth where that was measured (at the DRAM activity reachable, `D_MAX`).
    let need = k.peak_saturation / limit.max_over * (1.0 - sane(h));
    let bumped = Demand {
        compute: Some(demand.compute.map_or(need, |c| c.max(need))),
        bandwidth: demand.bandwidth.map(|b| b.max(need * D_MAX)),
        ..demand
    };
    let why = withheld_note(
        &format!("MIG {}", first.profile),
        first.profile,
        "the GPU",
        &k,
        limit.max_over,
    );
    match rightsizing::mig_fit(spec, &bumped, h, D_MAX).map(choice) {
        Some(c) if c.profile != first.profile => (Some(c), Some(why)),
        _ => (None, Some(format!("{why}; no larger profile fits"))),
    }
}

/// Why a model that covers the p99 demand is not proposed: its peak would exceed it.
/// `proposal` (a model or a MIG profile, named `target`) covers the p99 demand, but the
/// peak `k` exceeds its capacity (a share of `relative_to`) by more than `max_over`.
fn withheld_note(
    proposal: &str,
    target: &str,
    relative_to: &str,
    k: &PeakCost,
    max_over: f64,
) -> String {
    let burst = match (k.burst_seconds, k.burst_on_target_seconds) {
        (Some(b), Some(on)) => format!(": its longest burst, {b:.0} s, would run {on:.0} s there"),
        _ => String::new(),
    };
    format!(
        "{proposal} covers its p99 demand, but its peak saturation {:.2} is {:.2}× the {target}'s capacity ({:.3} of {relative_to}), above the {max_over:.2}× allowed{burst}",
        k.peak_saturation, k.peak_on_target, k.capacity_ratio
    )
}

/// Right-size one workload.
pub(super) fn right_size(t: &Track, name: &str, h: f64, limit: PeakLimit) -> RightSizing {
    let mem_peak = t.points.iter().filter_map(|p| p.mem()).max();
    let mem_p99 = track_quantile(t, 0.99, |p| p.mem().map(u64::from));
    let sat_p99 = sizing_quantile(t, 0.99, limit.grid);
    let pipe_p95 = track_quantile(t, 0.95, |p| p.pipe().map(u64::from)).map(units_to_ratio);
    let dram_p95 = track_quantile(t, 0.95, |p| p.dram().map(u64::from)).map(units_to_ratio);
    let pipe_p99 = track_quantile(t, 0.99, |p| p.pipe().map(u64::from)).map(units_to_ratio);
    let dram_p99 = track_quantile(t, 0.99, |p| p.dram().map(u64::from)).map(units_to_ratio);
    let sat_known = t.points.iter().filter(|p| p.sat().is_some()).count();
    let total = t.memory_total_mib.map(|m| f64::from(m) * MIB);
    let peak_b = mem_peak.map(|m| f64::from(m) * MIB);
    let (mig_fit, mig_fit_note) = match (t.spec, peak_b) {
        (None, _) => (None, Some("model not in the catalog".to_owned())),
        (_, None) => (None, Some("memory was not measured".to_owned())),
        (Some(spec), Some(peak)) if !spec.mig.is_empty() => {
            let demand = Demand {
                memory_bytes: peak,
                compute: pipe_p95,
                bandwidth: dram_p95,
            };
            let demand = match (t.is_mig, t.mig) {
                (true, Some(p)) => Some(demand.of_instance(spec, p)),
                (true, None) => None,
                (false, _) => Some(demand),
            };
            match demand {
                None => (None, Some("MIG instance of an unknown profile".to_owned())),
                Some(d) => mig_choice(t, spec, d, h, &limit),
            }
        }
        (Some(spec), _) => (None, Some(format!("the {} has no MIG", spec.name))),
    };
    // Memory is a hard limit: the smaller model must hold the peak, as the MIG fit and the
    // packing do (a p99 that fits can still run out of memory).
    let (smaller_gpu, smaller_gpu_note) =
        smaller_gpu(t, mem_peak.map(u64::from), dram_p99, pipe_p99, h, limit);
    RightSizing {
        workload: name.to_owned(),
        gpu: t.gpu.clone(),
        model: t.model.clone(),
        mig_profile: t.mig.map(|p| p.name),
        simulated: t.simulated,
        memory_peak_bytes: peak_b,
        memory_p99_bytes: mem_p99.map(|m| m as f64 * MIB),
        memory_total_bytes: total,
        memory_peak_fraction: match (peak_b, total) {
            (Some(p), Some(t)) if t > 0.0 => Some(p / t),
            _ => None,
        },
        saturation_p99: sat_p99.map(units_to_ratio),
        saturation_measured_share: (!t.points.is_empty())
            .then(|| sat_known as f64 / t.points.len() as f64),
        saturation_steps: sat_known,
        mig_fit,
        mig_fit_note,
        smaller_gpu,
        smaller_gpu_note,
    }
}

/// The right-sizing of each workload of `work` (named by `names`) at headroom `h`, each
/// peak limited by `limit`.
pub(super) fn right_size_each(
    work: &[&Track],
    names: &[String],
    h: f64,
    limit: PeakLimit,
) -> Vec<RightSizing> {
    work.iter()
        .zip(names)
        .map(|(t, n)| right_size(t, n, h, limit))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::test_support::{GIB, h100, input, pod, steady};
    use crate::fleet::{FleetConfig, Point, analyze};
    use crate::rightsizing::Constraint;

    /// The share of steps with saturation measured: 3 of 4 steps gives 0.75; a workload
    /// with no step in the window has no share (0 of 0 is unknown, not 0).
    #[test]
    fn the_measured_share_of_no_steps_is_unknown() {
        let t = pod("ml/gappy", "n/gpu 0", 0..4, |s| {
            (if s == 2 { None } else { Some(0.3) }, Some(1.0), Some(10.0))
        });
        let empty = pod("ml/none", "n/gpu 1", 0..0, |_| (None, None, None));
        let r = analyze(&input(vec![t, empty], 4), &FleetConfig::default()).rightsizing;
        let share = |w: &str| {
            let x = r.iter().find(|x| x.workload == w).expect(w);
            (x.saturation_measured_share, x.saturation_p99)
        };
        assert_eq!(share("ml/gappy").0, Some(0.75));
        assert_eq!(share("ml/none"), (None, None));
    }

    /// A workload measured at few steps is named: 3 steps of saturation (a pod of the
    /// window's last 3 minutes) is below 30, so its p99 is its largest reading and a note
    /// says so; one measured at 40 steps is not named; one never measured has nothing to
    /// rest on and is left to its own notes.
    #[test]
    fn a_workload_measured_at_few_steps_is_named() {
        let brief = pod("ml/brief", "n/gpu 0", 37..40, |_| {
            (Some(0.3), Some(1.0), Some(10.0))
        });
        let long = pod("ml/long", "n/gpu 1", 0..40, |_| {
            (Some(0.3), Some(1.0), Some(10.0))
        });
        let none = pod("ml/none", "n/gpu 2", 0..40, |_| {
            (None, Some(1.0), Some(10.0))
        });
        let f = analyze(&input(vec![brief, long, none], 40), &FleetConfig::default());
        let steps = |w: &str| {
            f.rightsizing
                .iter()
                .find(|x| x.workload == w)
                .expect(w)
                .saturation_steps
        };
        assert_eq!(
            (steps("ml/brief"), steps("ml/long"), steps("ml/none")),
            (3, 40, 0)
        );
        let notes: Vec<&String> = f
            .notes
            .iter()
            .filter(|n| n.contains("fewer than 30"))
            .collect();
        assert_eq!(notes.len(), 1, "{:?}", f.notes);
        assert!(notes[0].starts_with("1 workload(s)"), "{}", notes[0]);
        assert!(
            notes[0].ends_with("few samples: ml/brief (3 steps)"),
            "{}",
            notes[0]
        );
    }

    /// Memory is a hard limit: a pod whose p99 memory (18 GiB) fits an L4's 24 GB but whose
    /// peak (30 GiB, 5 steps of 1440) does not is offered no L4. 30 GiB × 1.2 = 36 GiB needs
    /// the 48 GB L40S, the least bandwidth of the models that hold it.
    #[test]
    fn a_smaller_model_holds_the_peak_memory() {
        let t = pod("ml/spiky", "n/gpu 0", 0..1440, |s| {
            (Some(0.05), Some(1.0), Some(if s < 5 { 30.0 } else { 18.0 }))
        });
        let r = analyze(&input(vec![t], 1440), &FleetConfig::default()).rightsizing;
        assert_eq!(r[0].memory_p99_bytes, Some(18.0 * GIB));
        let fit = r[0].smaller_gpu.as_ref().expect("a smaller model");
        assert_eq!(fit.key, "l40s");
    }

    /// The same 3-minute burst with its middle minute unmeasured: the gap neither ends the
    /// burst nor counts in it, so the burst is its two measured minutes (120 s), not the
    /// single minute on either side of the gap (60 s).
    #[test]
    fn an_unmeasured_step_does_not_cut_a_burst_short() {
        let steps = 1440;
        let t = pod("ml/burst", "n/gpu 0", 0..steps, |s| match s {
            601 => (None, None, None),
            600 | 602 => (Some(0.95), Some(1.0), Some(10.0)),
            _ => (Some(0.05), Some(1.0), Some(10.0)),
        });
        let r = analyze(&input(vec![t], steps), &FleetConfig::default()).rightsizing;
        let note = r[0].smaller_gpu_note.as_deref().unwrap();
        assert!(note.contains("its longest burst, 120 s"), "{note}");
    }

    /// A pod at 0.05 of an H100 all day but for a 3-minute burst to 0.95 (its p99 is 0.05),
    /// and a pod at a steady 0.05, each with 10 GiB, at 60 s steps. The L4 covers both p99
    /// demands; its capacity is the smaller of its dense peak's share of the H100's
    /// (121/989) and its bandwidth's (300/3350 = 0.090), so the burst's peak is 0.95 ÷ 0.090
    /// = 10.61× it and would run that many times longer: withheld at the default factor,
    /// proposed with its cost at a permissive one; the steady pod's peak fits.
    #[test]
    fn a_smaller_model_states_what_it_costs_the_peak() {
        let steps = 1440;
        let burst = 600..603;
        let bursting = pod("ml/burst", "n/gpu 0", 0..steps, |s| {
            let sat = if burst.contains(&s) { 0.95 } else { 0.05 };
            (Some(sat), Some(1.0), Some(10.0))
        });
        let steady = pod("ml/steady", "n/gpu 1", 0..steps, |_| {
            (Some(0.05), Some(1.0), Some(10.0))
        });
        // The datasheets' dense BF16 peaks and bandwidths, typed in: L4 121 TFLOP/s and
        // 300 GB/s, H100 SXM 989 TFLOP/s and 3.35 TB/s.
        let l4 = gpus::by_key("l4").unwrap();
        assert_eq!(
            (l4.bf16_dense_tflops, h100().bf16_dense_tflops),
            (121.0, 989.0)
        );
        assert_eq!(
            (l4.bandwidth_bytes_per_sec, h100().bandwidth_bytes_per_sec),
            (300e9, 3.35e12)
        );
        let ratio = 300e9 / 3.35e12;
        let tracks = vec![bursting, steady];
        let run = |max_over| {
            let cfg = FleetConfig {
                max_peak_over_capacity: max_over,
                ..FleetConfig::default()
            };
            analyze(&input(tracks.clone(), steps), &cfg).rightsizing
        };

        let r = run(1.0);
        let (b, s) = (&r[0], &r[1]);
        assert_eq!(b.saturation_p99, Some(0.05));
        assert_eq!(b.smaller_gpu, None, "0.95 of an H100 is above an L4");
        let note = b.smaller_gpu_note.as_deref().unwrap();
        assert!(note.starts_with("the L4 covers its p99 demand"), "{note}");
        assert!(note.contains("10.61×"), "0.95 × 3350 / 300: {note}");
        assert!(note.contains("180 s"), "{note}");
        let fit = s.smaller_gpu.as_ref().unwrap();
        assert_eq!(fit.key, "l4");
        let cost = fit.peak.unwrap();
        assert_eq!(cost.peak_saturation, 0.05);
        assert_eq!(cost.capacity_ratio, ratio);
        assert_eq!(cost.peak_on_target, 0.05 / ratio);
        assert!(cost.peak_on_target < 1.0);
        assert_eq!(
            (cost.burst_seconds, cost.burst_on_target_seconds),
            (None, None)
        );

        // A MIG profile too: the smallest that holds 10 GiB with headroom (12 GiB) is
        // 1g.20gb, 26 of the H100's 132 SMs (NVIDIA's MIG table, typed in); the steady pod's
        // peak fits it, the burst's is 0.95 ÷ (26/132) = 4.82× it, so the burst is offered
        // the profile its peak fits.
        let one = h100().mig.iter().find(|p| p.name == "1g.20gb").unwrap();
        assert_eq!((one.sms, h100().sms), (26, 132));
        let share = 26.0 / 132.0;
        let m = s.mig_fit.as_ref().unwrap();
        assert_eq!(m.profile, "1g.20gb");
        let k = m.peak.unwrap();
        assert_eq!((k.capacity_ratio, k.peak_on_target), (share, 0.05 / share));
        let m = b.mig_fit.as_ref().unwrap();
        assert_eq!(
            m.profile, "7g.80gb",
            "the only profile with the SMs for 0.95"
        );
        assert_eq!(m.peak.unwrap().burst_seconds, None);
        let note = b.mig_fit_note.as_deref().unwrap();
        assert!(
            note.starts_with("MIG 1g.20gb covers its p99 demand"),
            "{note}"
        );
        assert!(note.contains("4.82×"), "0.95 × 132 / 26: {note}");
        assert!(note.contains("180 s"), "{note}");

        let r = run(11.0);
        let m = r[0].mig_fit.as_ref().unwrap();
        assert_eq!(m.profile, "1g.20gb", "4.82× is within 11×");
        let k = m.peak.unwrap();
        assert_eq!(k.burst_seconds, Some(180.0));
        let on = k.burst_on_target_seconds.unwrap();
        assert!((on - 180.0 * 0.95 / share).abs() < 1e-9, "{on}");
        let fit = r[0].smaller_gpu.as_ref().unwrap();
        assert_eq!(fit.key, "l4");
        let cost = fit.peak.unwrap();
        assert_eq!(cost.peak_saturation, 0.95);
        assert!((cost.peak_on_target - 0.95 / ratio).abs() < 1e-12);
        assert_eq!(cost.burst_seconds, Some(180.0));
        let on_l4 = cost.burst_on_target_seconds.unwrap();
        // 180 s × 10.61 = 1 909.5 s.
        assert!((on_l4 - 1909.5).abs() < 1e-6, "{on_l4} s");

        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let cfg = FleetConfig {
                max_peak_over_capacity: bad,
                ..FleetConfig::default()
            };
            assert!(cfg.check().is_err(), "{bad}");
        }
        assert_eq!(FleetConfig::default().check(), Ok(()));
    }

    /// A MIG instance's capacity for a peak is the smaller of its SM share and its
    /// memory-slice share: an A100 80GB's 1g.10gb has 14 of 108 SMs (0.130) but 1 of 8
    /// memory slices (0.125; NVIDIA's MIG table, typed in). A pod at DRAM activity 0.05 all
    /// day but for a 3-minute burst to 0.128 (saturation 0.128, its DRAM term) fits 1g.10gb
    /// at p95, but its peak is 0.128 ÷ 0.125 = 1.024× the instance's bandwidth: withheld,
    /// and 1g.20gb (2 of 8 slices) proposed. Counted by SMs alone it read 0.988×, and passed.
    #[test]
    fn a_mig_instance_carries_a_peak_by_the_smaller_of_its_shares() {
        let spec = gpus::by_key("a100-80-sxm").unwrap();
        let one = spec.mig.iter().find(|p| p.name == "1g.10gb").unwrap();
        assert_eq!(
            (
                one.sms,
                spec.sms,
                one.memory_slices,
                one.memory_slices_total
            ),
            (14, 108, 1, 8)
        );
        let mut t = Track::new(Some("ml/dram".into()), "n/gpu 0".into());
        t.spec = Some(spec);
        t.model = Some("NVIDIA A100-SXM4-80GB".into());
        t.memory_total_mib = Some(80 * 1024);
        for s in 0..1440 {
            let d = if (600..603).contains(&s) { 0.128 } else { 0.05 };
            let p = Point::new(Some(d), Some(1.0), Some(d / 2.0), Some(5.0 * GIB));
            t.record(s, p.with_pipes(Some(d / 2.0), Some(d)));
        }
        let r = analyze(&input(vec![t], 1440), &FleetConfig::default()).rightsizing;
        let m = r[0].mig_fit.as_ref().expect("a MIG profile");
        assert_eq!(m.profile, "1g.20gb");
        let note = r[0].mig_fit_note.as_deref().unwrap();
        assert!(
            note.starts_with("MIG 1g.10gb covers its p99 demand"),
            "{note}"
        );
        assert!(note.contains("1.02×"), "0.128 × 8: {note}");
    }

    #[test]
    fn right_sizing_names_a_mig_profile_and_a_smaller_model() {
        let steps = 20;
        let notebook = pod("dev/notebook", "n/gpu 1", 0..steps, |_| {
            (Some(0.0), Some(0.0), Some(2.0))
        });
        let r = analyze(
            &input(vec![steady(0, steps), notebook], steps),
            &FleetConfig::default(),
        );
        let s = &r.rightsizing[0];
        assert_eq!(s.workload, "steady/p0");
        assert_eq!(s.memory_peak_bytes, Some(30.0 * GIB));
        assert_eq!(s.memory_peak_fraction, Some(0.375));
        // 30 GiB × 1.2 = 36 GiB needs 3g.40gb (39.5 GiB); SMs 0.2 / 0.8 and DRAM fit it.
        let mig = s.mig_fit.as_ref().unwrap();
        assert_eq!((mig.profile, mig.binding), ("3g.40gb", Constraint::Memory));
        assert!(mig.unmeasured.is_empty());
        // 36 GiB: an L40S (48 GB, 0.864 TB/s ≥ 0.1 × 3.35 / 0.64, 362 TFLOPS ≥ 0.2 × 989 / 0.8).
        assert_eq!(s.smaller_gpu.as_ref().unwrap().key, "l40s");
        let n = &r.rightsizing[1];
        assert_eq!(n.mig_fit.as_ref().unwrap().profile, "1g.10gb");
        assert_eq!(n.smaller_gpu.as_ref().unwrap().name, "L4");
        // The notebook never worked: idle all the time it held its GPU.
        assert_eq!(r.idle.workloads.len(), 1);
        assert_eq!(r.idle.workloads[0].workload, "dev/notebook");
        assert_eq!(r.idle.workloads[0].idle_share, 1.0);
        assert_eq!(r.idle.workloads[0].idle_gpu_hours, 20.0 / 60.0);
    }
}

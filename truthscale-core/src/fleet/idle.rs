//! Idle capacity (GPUs held while idle) and the savings of the packing.

use super::track::{Track, ratio_units};
use super::{FleetConfig, Idle, IdleWorkload, NotListed, Packing, Savings, Summary};

/// The workloads idle more than `cfg.idle_share` of their measured steps (a step is idle
/// when the busy flag and effective compute, each where measured, are under their
/// thresholds; a step on an unavailable GPU is neither idle nor measured), most idle hours
/// first; and those whose idleness was never measured.
pub(super) fn idle_capacity(
    work: &[&Track],
    names: &[String],
    cfg: &FleetConfig,
    hours_per_step: f64,
) -> Idle {
    let busy_max = ratio_units(Some(cfg.idle_busy_below)).unwrap_or(0);
    let ecf_max = ratio_units(Some(cfg.idle_compute_below)).unwrap_or(0);
    let mut idle_list = Vec::new();
    let mut idle_unmeasured = Vec::new();
    let (mut total, mut measured_any, mut not_listed) = (
        0.0,
        false,
        NotListed {
            workloads: 0,
            gpu_hours: 0.0,
            hours_of_unknown_share: None,
        },
    );
    for (t, n) in work.iter().zip(names) {
        let (held, measured, idle) = steps_of(t, busy_max, ecf_max);
        // A MIG instance holds its share of the GPU's hours; one of an unknown profile holds
        // an unknown share, so its idle GPU-hours are not known.
        let (true, Some(gpu)) = (measured > 0, t.gpu_share()) else {
            idle_unmeasured.push(n.clone());
            continue;
        };
        // A placeholder (KAI's reservation pod, granted nothing) holds no idle capacity:
        // its GPU's hours are unallocated, as the showback charges them.
        if gpu == 0.0 {
            continue;
        }
        measured_any = true;
        let idle_gpu_hours = idle as f64 * hours_per_step * gpu;
        let share = idle as f64 / measured as f64;
        total += idle_gpu_hours;
        if share <= cfg.idle_share && idle > 0 {
            not_listed.workloads += 1;
            not_listed.gpu_hours += idle_gpu_hours;
        }
        if share > cfg.idle_share {
            let (trailing, memory_mib) = trailing_idle(t, busy_max, ecf_max);
            idle_list.push(IdleWorkload {
                workload: n.clone(),
                model: t.model.clone(),
                idle_share: share,
                held_hours: held as f64 * hours_per_step,
                measured_hours: measured as f64 * hours_per_step,
                idle_gpu_hours,
                idle_cost: cfg
                    .cost_per_gpu_hour
                    .filter(|p| p.is_finite() && *p >= 0.0)
                    .map(|p| p * idle_gpu_hours),
                idle_for_hours: trailing.map(|n| n as f64 * hours_per_step),
                memory_held_bytes: memory_mib.map(|m| f64::from(m) * super::MIB),
                owner: None,
                command: None,
            });
        }
    }
    idle_list.sort_by(|a, b| {
        b.idle_gpu_hours
            .total_cmp(&a.idle_gpu_hours)
            .then_with(|| a.workload.cmp(&b.workload))
    });
    Idle {
        idle_share_above: cfg.idle_share,
        busy_below: cfg.idle_busy_below,
        effective_compute_below: cfg.idle_compute_below,
        idle_gpu_hours: measured_any.then_some(total),
        // Summed from 0: an empty `sum` of floats is -0, printed "-0.0".
        listed_idle_gpu_hours: idle_list.iter().fold(0.0, |h, w| h + w.idle_gpu_hours),
        not_listed,
        workloads: idle_list,
        unmeasured: idle_unmeasured,
    }
}

/// A track's steps held (with any reading), measured (busy flag or effective compute read,
/// the GPU available: a GPU that could take no work is not idle, its hours are unavailable)
/// and idle (each measured one under its threshold).
fn steps_of(t: &Track, busy_max: u16, ecf_max: u16) -> (usize, usize, usize) {
    let (mut held, mut measured, mut idle) = (0usize, 0usize, 0usize);
    for p in &t.points {
        if p.any() {
            held += 1;
        }
        let (b, e) = (p.busy(), p.ecf());
        if p.unavailable() || (b.is_none() && e.is_none()) {
            continue;
        }
        measured += 1;
        if b.is_none_or(|b| b < busy_max) && e.is_none_or(|e| e < ecf_max) {
            idle += 1;
        }
    }
    (held, measured, idle)
}

/// The trailing idle points of a track (measured and idle, counted back from its last point
/// to the first that is not), and the most memory held over them, MiB. `None` where its last
/// point with data measured no use (no busy flag or effective compute, the GPU available):
/// how long it had been idle then is unknown, never 0.
fn trailing_idle(t: &Track, busy_max: u16, ecf_max: u16) -> (Option<usize>, Option<u32>) {
    let mut points = t.points.iter().rev().skip_while(|p| !p.any()).peekable();
    if points
        .peek()
        .is_some_and(|p| !p.unavailable() && p.busy().is_none() && p.ecf().is_none())
    {
        return (None, None);
    }
    let mut n = 0;
    let mut memory: Option<u32> = None;
    for p in points {
        let (b, e) = (p.busy(), p.ecf());
        let idle = !p.unavailable()
            && (b.is_some() || e.is_some())
            && b.is_none_or(|b| b < busy_max)
            && e.is_none_or(|e| e < ecf_max);
        if !idle {
            break;
        }
        n += 1;
        if let Some(m) = p.mem() {
            memory = Some(memory.map_or(m, |x| x.max(m)));
        }
    }
    (Some(n), memory)
}

/// The savings of packing `p` against `baseline` (allocated GPUs for pods, GPUs reporting
/// otherwise; its per-step series and their summary) over `hours` with data, each step
/// `hours_per_step`; `None` without a baseline. The GPUs freed are the peak's; the GPU-hours
/// are each step's GPUs beyond the packing, so a peak held for minutes saves for minutes. A
/// price counts only when finite and not negative.
pub(super) fn savings(
    p: &Packing,
    unit: &str,
    (baseline, per_step): (Option<Summary>, &[Option<u32>]),
    (hours, hours_per_step): (f64, f64),
    cost_per_gpu_hour: Option<f64>,
) -> Option<Savings> {
    let baseline = baseline.map(|s| s.max as u64)?;
    let freed = baseline.saturating_sub(p.gpus);
    let step_gpus: u64 = per_step
        .iter()
        .flatten()
        .map(|&n| u64::from(n).saturating_sub(p.gpus))
        .sum();
    let gpu_hours = step_gpus as f64 * hours_per_step;
    let cost = cost_per_gpu_hour.filter(|c| c.is_finite() && *c >= 0.0);
    let mut assumptions = vec![
        if unit == "pod" {
            format!("the fleet is re-packed as proposed for the whole window ({hours:.2} h with GPUs allocated)")
        } else {
            format!("the fleet is re-packed as proposed for the whole window ({hours:.2} h with data)")
        },
        format!("baseline: the {} at each step (GPUs freed: at the peak; GPU-hours: each step's beyond the packing)", if unit == "pod" { "allocated GPUs" } else { "GPUs reporting (allocation unknown)" }),
        "each workload keeps its peak memory and its measured saturation; work adds linearly on a shared GPU".to_owned(),
        "workloads with unmeasured demand keep the GPUs they held".to_owned(),
    ];
    if cost.is_none() {
        assumptions.push("no --cost-per-gpu-hour: GPU-hours only".to_owned());
    }
    Some(Savings {
        estimate: true,
        baseline_gpus: baseline,
        needed_gpus: p.gpus,
        gpus_freed: freed,
        hours,
        gpu_hours,
        cost_per_gpu_hour: cost,
        cost: cost.map(|c| c * gpu_hours),
        assumptions,
    })
}

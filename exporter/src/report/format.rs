//! The one place a figure of the report is formatted for the text and the HTML page:
//! shares as percentages, bytes as GiB, GPU-equivalents, GPU-hours, costs, counts, the
//! words of a binding resource and what a proposal costs a workload's peak. The renderers
//! lay these strings out; they format no figure of their own.

use serde::Serialize;
use truthscale_core::fleet::{Binding, PeakCost, Savings, SmallerGpu};

/// What stands for a figure that was not measured.
pub(crate) const UNKNOWN: &str = "unknown";
/// What stands for a figure that does not apply (a showback column a group lacks).
pub(crate) const NONE: &str = "—";

/// A ratio as a percentage with one decimal, or `unknown`.
pub(crate) fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| UNKNOWN.to_owned(), |v| format!("{:.1}%", 100.0 * v))
}

/// Bytes as GiB with one decimal, or `unknown`.
pub(crate) fn gib(x: Option<f64>) -> String {
    x.map_or_else(
        || UNKNOWN.to_owned(),
        |v| format!("{:.1} GiB", v / 1_073_741_824.0),
    )
}

/// What the report covers, counted once for the text and the page: `2 pods on 3 GPUs
/// (H100 SXM)`, or `3 GPUs (H100 SXM)` when no GPU carried pod labels. Pods and GPUs are
/// each counted distinct (a pod on two GPUs is one pod, a GPU time-shared by two pods one
/// GPU).
pub(crate) fn scope(f: &truthscale_core::fleet::FleetReport) -> String {
    let model = f.gpu_model.as_deref().unwrap_or("an unknown model");
    let gpus: std::collections::BTreeSet<&str> =
        f.rightsizing.iter().map(|r| r.gpu.as_str()).collect();
    let n = |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
    if f.workload_unit == "pod" {
        let pods: std::collections::BTreeSet<&str> =
            f.rightsizing.iter().map(|r| r.workload.as_str()).collect();
        format!(
            "{} on {} ({model})",
            n(pods.len(), "pod", "pods"),
            n(gpus.len(), "GPU", "GPUs")
        )
    } else {
        format!("{} ({model})", n(f.workloads, "GPU", "GPUs"))
    }
}

/// A GPU-equivalent count with two decimals, or `unknown`.
pub(crate) fn gpus(x: Option<f64>) -> String {
    x.map_or_else(|| UNKNOWN.to_owned(), |v| format!("{v:.2}"))
}

/// GPU-hours (or hours) with `digits` decimals: 1 on the terminal, 2 on the page.
pub(crate) fn hours(x: f64, digits: usize) -> String {
    format!("{x:.digits$}")
}

/// GPU-hours with `digits` decimals, or `unknown`.
pub(crate) fn hours_or_unknown(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| UNKNOWN.to_owned(), |v| hours(v, digits))
}

/// GPU-hours with `digits` decimals, or `—` where the figure does not apply.
pub(crate) fn hours_or_none(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| NONE.to_owned(), |v| hours(v, digits))
}

/// Energy in kWh, at three decimals.
pub(crate) fn kwh(x: f64) -> String {
    format!("{x:.3}")
}

/// Energy in kWh, [`NONE`] where no power was read.
pub(crate) fn kwh_or_none(x: Option<f64>) -> String {
    x.map_or_else(|| NONE.to_owned(), kwh)
}

/// A cost with two decimals.
pub(crate) fn cost(x: f64) -> String {
    format!("{x:.2}")
}

/// A cost with two decimals, or `—` where no price applies.
pub(crate) fn cost_or_none(x: Option<f64>) -> String {
    x.map_or_else(|| NONE.to_owned(), cost)
}

/// A cost where prices were given (`priced`): two decimals, or [`UNKNOWN`] where its GPUs'
/// model has none; without prices, [`NONE`].
pub(crate) fn cost_priced(x: Option<f64>, priced: bool) -> String {
    match (x, priced) {
        (Some(c), _) => cost(c),
        (None, true) => UNKNOWN.to_owned(),
        (None, false) => NONE.to_owned(),
    }
}

/// A count (GPUs, a summary's figure), or `unknown`.
pub(crate) fn count<T: std::fmt::Display>(x: Option<T>) -> String {
    x.map_or_else(|| UNKNOWN.to_owned(), |v| v.to_string())
}

/// The resource that binds a pooled lower bound, in words.
pub(crate) fn binding(b: Binding) -> &'static str {
    match b {
        Binding::Compute => "compute",
        Binding::Memory => "memory",
    }
}

/// A unit variant's name as the JSON writes it (a MIG fit's binding, a dimension left
/// unchecked); empty for anything else.
pub(crate) fn json_name<T: Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// What a proposed smaller model costs the workload's peak, after its name: the peak in
/// its own GPU's terms and in the model's, and how long its burst above the model's
/// capacity would run there; nothing where saturation was not measured.
pub(crate) fn smaller_cost(g: &SmallerGpu) -> String {
    peak_cost(g.peak, g.name)
}

/// What a proposal (`name`: a model or a MIG profile) costs the workload's peak, in words.
pub(crate) fn peak_cost(k: Option<PeakCost>, name: &str) -> String {
    let Some(k) = k else {
        return String::new();
    };
    let burst = match (k.burst_seconds, k.burst_on_target_seconds) {
        (Some(b), Some(on)) => format!(", its {b:.0} s burst would run {on:.0} s"),
        _ => String::new(),
    };
    format!(
        " (peak {:.2} of its GPU, {:.2} of the {}{burst})",
        k.peak_saturation, k.peak_on_target, name
    )
}

/// The savings sentence both renderers write: GPUs freed at the peak, today's peak and
/// needed, the GPU-hours over the hours (each step's GPUs beyond those needed), and where
/// priced the price and the cost (`bold` wraps the cost): `times` is the renderer's
/// multiplication sign, `digits` its hours' decimals.
pub(crate) fn savings_sentence(
    sv: &Savings,
    times: &str,
    bold: (&str, &str),
    digits: usize,
) -> String {
    format!(
        "{} GPUs freed at the peak ({} today, {} needed); over {} h, {} GPU-hours (each step's GPUs beyond the {} needed){}",
        sv.gpus_freed,
        sv.baseline_gpus,
        sv.needed_gpus,
        hours(sv.hours, digits),
        hours(sv.gpu_hours, digits),
        sv.needed_gpus,
        sv.cost
            .zip(sv.cost_per_gpu_hour)
            .map(|(c, p)| format!(
                " {times} {p} per GPU-hour = {}{}{}",
                bold.0,
                cost(c),
                bold.1
            ))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        assert_eq!(pct(None), "unknown");
        assert_eq!(pct(Some(0.25)), "25.0%");
        assert_eq!(gib(Some(32_212_254_720.0)), "30.0 GiB");
        assert_eq!(gpus(Some(1.0 / 3.0)), "0.33");
        assert_eq!(hours(2.25, 1), format!("{:.1}", 2.25));
        assert_eq!(hours(2.125, 2), format!("{:.2}", 2.125));
        assert_eq!(hours_or_unknown(None, 1), "unknown");
        assert_eq!(hours_or_none(None, 2), "—");
        assert_eq!(cost_or_none(Some(4.1)), "4.10");
        assert_eq!(count(Some(3_u64)), "3");
        assert_eq!(count::<u64>(None), "unknown");
        assert_eq!(binding(Binding::Memory), "memory");
    }
}

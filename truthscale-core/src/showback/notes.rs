//! The showback's notes: what its steps met that the figures alone do not say.

use super::Tally;

/// The notes on what the steps met: time-sliced GPUs, per-process estimates, MIG instances
/// of unknown profiles, models without a price, held GPU-hours without power.
pub(super) fn notes(tally: Tally, hours_per_step: f64) -> Vec<String> {
    let mut notes = Vec::new();
    let shared_gpus = tally.shared_gpus;
    if shared_gpus > 0 {
        notes.push(format!(
            "{shared_gpus} GPU(s) were time-sliced between pods: each holder is charged its share of the GPU and the same share of the device's measured effective compute (time-sliced effective compute); its own use is unknown (the counters are the device's)"
        ));
    }
    if !tally.split_by_processes.is_empty() {
        notes.push(format!(
            "per-process attribution estimated each holder's part of shared GPUs' effective compute (method {}): an estimate, shown apart (effective compute estimate) and never billed as measured",
            tally.split_by_processes.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if !tally.fractional.is_empty() {
        notes.push(format!(
            "{} pod(s) were charged the fraction of their GPU their scheduler granted (HAMi nvidia.com/gpucores or gpumem, KAI gpu-fraction or gpu-memory); the rest of the GPU is unallocated",
            tally.fractional.len()
        ));
    }
    if !tally.placeholders.is_empty() {
        notes.push(format!(
            "{} reservation pod(s) ({}) hold GPUs for fractional tenants: placeholders, never charged; a tenant is charged only where its own pod is seen on the GPU",
            tally.placeholders.len(),
            tally.placeholders.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if tally.unknown_profile {
        notes.push("a MIG instance of an unknown profile took an equal part with its GPU's other instances: an assumed share, its GPU-hours (and what its GPU had left) counted apart as assumed-share GPU-hours; an instance's `mig_profile` label naming a profile of its model makes them exact".into());
    }
    if !tally.unpriced.is_empty() {
        notes.push(format!(
            "no price for {}: those GPU-hours have no cost",
            tally.unpriced.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if let (read @ 1.., unread @ 1..) = tally.energy_steps {
        let h = |steps: u64| steps as f64 * hours_per_step;
        notes.push(format!(
            "{:.2} of the {:.2} GPU-hours held by pods had no power reading: the groups' energy (kWh, and its cost) covers the other {:.2} only, a lower bound",
            h(unread),
            h(read + unread),
            h(read)
        ));
    }
    // Where any power was read (else there is no energy to bound).
    if let (read, unread @ 1..) = tally.unheld_energy_steps
        && read + tally.energy_steps.0 > 0
    {
        let h = |steps: u64| steps as f64 * hours_per_step;
        notes.push(format!(
            "{:.2} of the {:.2} GPU-hours no pod held had no power reading: the unallocated energy (kWh, and its cost), and the fleet's with it, covers the other {:.2} only, a lower bound",
            h(unread),
            h(read + unread),
            h(read)
        ));
    }
    if let (gpus @ 1.., steps) = tally.allocation_unknown {
        notes.push(format!(
            "{:.2} GPU-hours on {gpus} GPU(s) had nothing of the GPU read and no holder named (between two holders' series, or a gap in the device's own): whether a pod held them is unknown, so they are allocation unknown, neither unallocated nor any group's; what no pod held lies between the unallocated GPU-hours and that plus these. A sidecar deployment has no series of a GPU no pod holds; node mode's or dcgm-exporter's device series make it exact",
            steps as f64 * hours_per_step
        ));
    }
    notes
}

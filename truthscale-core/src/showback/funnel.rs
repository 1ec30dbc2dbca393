//! The funnel: the fleet's GPU-hours from all it had to the effective compute it did,
//! stage by stage, each stage's loss named — total → healthy (less unavailable) → allocated
//! (less unallocated) → active (less idle held and use not measured) → effective (less
//! busy but not computing).
//!
//! Counted on the same GPU-steps and shares as the showback ([`super::shares`]): a GPU-step
//! is [`SHARE_UNITS`], so the stages and their losses add up to the fleet exactly. A step
//! is *unavailable* when any entity of its GPU was judged unavailable then
//! ([`crate::health`]); *active* when a holder's share was measured and not idle by the
//! report's idle thresholds, the device's readings deciding on a time-sliced GPU (the
//! device is active or not, whoever of its holders made it so); *effective* is effective
//! compute × the active shares.

use super::shares::Charge;
use super::{SHARE_UNITS, ShowbackConfig};
use serde::Serialize;

/// The funnel over a period, in GPU-hours.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Funnel {
    /// Every GPU from its first reading to its last.
    pub total_gpu_hours: f64,
    /// Of them, not judged unavailable (a GPU whose health was not read counts here; see
    /// `health_unread_gpu_hours`).
    pub healthy_gpu_hours: f64,
    /// Of the healthy, held by a pod.
    pub allocated_gpu_hours: f64,
    /// Of the allocated, measured and not idle.
    pub active_gpu_hours: f64,
    /// Effective compute × the active hours where it was read: what the fleet's GPUs
    /// computed there. `None` where it was read in none of the active hours (a busy flag
    /// alone): unknown, never 0.
    pub effective_gpu_hours: Option<f64>,
    /// Lost to health: the GPU could take no work (total − healthy). `None` where no health
    /// field was read in any of the hours (unknown, never 0: they are all counted healthy).
    pub unavailable_gpu_hours: Option<f64>,
    /// Healthy, but no pod held it.
    pub unallocated_gpu_hours: f64,
    /// Nothing of the GPU read and no holder named: whether a pod held it is unknown,
    /// never counted as unallocated (healthy − allocated − unallocated). Counted healthy,
    /// its health unread.
    pub allocation_unknown_gpu_hours: f64,
    /// Held, and idle by the report's thresholds.
    pub idle_held_gpu_hours: f64,
    /// Held, with no reading of use: neither idle nor active (allocated − active − idle).
    pub use_unmeasured_gpu_hours: f64,
    /// Active, but not computing (active − effective − `effective_unmeasured_gpu_hours`):
    /// the busy flag's inflation, where effective compute was read.
    pub busy_not_computing_gpu_hours: Option<f64>,
    /// Of the active, hours whose effective compute was not measured (no tensor activity
    /// read, or no SM clock or catalog model to correct it): what they computed is unknown,
    /// so `effective_gpu_hours` is a lower bound (the most is this much more), and they are
    /// not counted as busy but not computing. The tensor activity and the SM clock of a
    /// catalog model make it exact.
    pub effective_unmeasured_gpu_hours: f64,
    /// Of the total, hours at which no health field was read (counted healthy).
    pub health_unread_gpu_hours: f64,
    /// Whether the losses and the active hours add up to the total exactly (in share
    /// units): false only where holders' shares exceed a whole GPU.
    pub adds_up: bool,
    /// The check, in words.
    pub check: String,
}

/// A period's funnel in share units (effective compute in GPU-hours).
#[derive(Debug, Default, Clone)]
pub(super) struct FunnelAcc {
    total: u64,
    unavailable: u64,
    unallocated: u64,
    allocation_unknown: u64,
    idle: u64,
    unmeasured: u64,
    active: u64,
    overallocated: u64,
    health_unread: u64,
    effective: f64,
    /// Active share units whose effective compute was not read.
    effective_unread: u64,
}

/// What a holder's share of a step was, for the funnel.
enum Stage {
    Unmeasured,
    Idle,
    Active,
}

impl Stage {
    /// By the idle thresholds of `cfg`, on the readings of use (the device's on a
    /// time-sliced GPU).
    fn of(busy: Option<f64>, ecf: Option<f64>, cfg: &ShowbackConfig) -> Stage {
        if busy.is_none() && ecf.is_none() {
            Stage::Unmeasured
        } else if busy.is_none_or(|b| b < cfg.idle_busy_below)
            && ecf.is_none_or(|e| e < cfg.idle_compute_below)
        {
            Stage::Idle
        } else {
            Stage::Active
        }
    }
}

impl FunnelAcc {
    /// One GPU-step: `down` when the GPU was unavailable, `health_read` when any health
    /// field of it was read, `seen` when anything of it was read or a holder named,
    /// `charges` its holders' shares.
    pub(super) fn add_step(
        &mut self,
        ((down, health_read), seen): ((bool, bool), bool),
        charges: &[Charge<'_>],
        cfg: &ShowbackConfig,
        hours_per_step: f64,
    ) {
        self.total += SHARE_UNITS;
        self.health_unread += if health_read { 0 } else { SHARE_UNITS };
        if down {
            self.unavailable += SHARE_UNITS;
            return;
        }
        let held: u64 = charges.iter().map(|c| c.units).sum();
        let free = SHARE_UNITS.saturating_sub(held);
        if seen {
            self.unallocated += free;
        } else {
            self.allocation_unknown += free;
        }
        self.overallocated += held.saturating_sub(SHARE_UNITS);
        for c in charges {
            let (busy, ecf) = c.device_use;
            *match Stage::of(busy, ecf, cfg) {
                Stage::Unmeasured => &mut self.unmeasured,
                Stage::Idle => &mut self.idle,
                Stage::Active => {
                    let share = c.units as f64 / SHARE_UNITS as f64;
                    match ecf {
                        Some(e) => {
                            // A holder alone on its share (a whole GPU, a MIG instance, a
                            // granted fraction) did all the device did, up to its share:
                            // its own effective compute. Time-sliced holders split the
                            // device's.
                            let e = if c.unknown { e } else { c.ecf.unwrap_or(e) };
                            self.effective += e.clamp(0.0, 1.0) * share * hours_per_step;
                        }
                        // Never counted as computing nothing: unknown.
                        None => self.effective_unread += c.units,
                    }
                    &mut self.active
                }
            } += c.units;
        }
    }

    /// The funnel in GPU-hours, `hours_per_step` a whole GPU-step's.
    pub(super) fn funnel(&self, hours_per_step: f64) -> Funnel {
        let hours = |u: u64| u as f64 / SHARE_UNITS as f64 * hours_per_step;
        let healthy = self.total - self.unavailable;
        let allocated = healthy - self.unallocated - self.allocation_unknown;
        let parts = self.unavailable
            + self.unallocated
            + self.allocation_unknown
            + self.idle
            + self.unmeasured
            + self.active;
        let adds_up = parts == self.total && self.overallocated == 0;
        let active = hours(self.active);
        let unread = hours(self.effective_unread);
        let effective = self.effective.min(active - unread);
        // Nothing read in any active hour: what they computed is unknown, not 0.
        let read = self.active == 0 || self.effective_unread < self.active;
        let unknown = if self.allocation_unknown > 0 {
            format!(
                " + allocation unknown {:.3}",
                hours(self.allocation_unknown)
            )
        } else {
            String::new()
        };
        // Health read at some step: the hours judged unavailable, 0 a count; else unknown.
        let judged = self.health_unread < self.total;
        let unavailable = if judged {
            format!("{:.3}", hours(self.unavailable))
        } else {
            "not read".to_owned()
        };
        let check = format!(
            "unavailable {unavailable} + unallocated {:.3}{unknown} + idle held {:.3} + use not measured {:.3} + active {:.3} {} total {:.3} GPU-hours",
            hours(self.unallocated),
            hours(self.idle),
            hours(self.unmeasured),
            active,
            if adds_up { "=" } else { "!=" },
            hours(self.total),
        );
        Funnel {
            total_gpu_hours: hours(self.total),
            healthy_gpu_hours: hours(healthy),
            allocated_gpu_hours: hours(allocated),
            active_gpu_hours: active,
            effective_gpu_hours: read.then_some(effective),
            unavailable_gpu_hours: judged.then(|| hours(self.unavailable)),
            unallocated_gpu_hours: hours(self.unallocated),
            allocation_unknown_gpu_hours: hours(self.allocation_unknown),
            idle_held_gpu_hours: hours(self.idle),
            use_unmeasured_gpu_hours: hours(self.unmeasured),
            busy_not_computing_gpu_hours: read.then_some(active - unread - effective),
            effective_unmeasured_gpu_hours: unread,
            health_unread_gpu_hours: hours(self.health_unread),
            adds_up,
            check,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Holders, ShowbackConfig, showback};
    use crate::fleet::{FleetConfig, FleetInput, Point, Track, analyze};
    use crate::health::Health;
    use std::collections::BTreeMap;

    /// One step: `(busy, effective compute, health)`; `None` is a step with nothing read.
    type Step = Option<(f64, Option<f64>, Option<Health>)>;

    /// A track on an H100 with `steps`.
    fn track(pod: Option<&str>, gpu: &str, steps: &[Step]) -> Track {
        let mut t = Track::new(pod.map(str::to_string), gpu.into());
        t.model = Some("NVIDIA H100 80GB HBM3".into());
        t.spec = crate::gpus::lookup("NVIDIA H100 80GB HBM3");
        for (s, p) in steps.iter().enumerate() {
            let p = p.map_or(Point::NONE, |(busy, ecf, health)| {
                Point::new(ecf, Some(busy), ecf, Some(8e9)).with_health(health)
            });
            t.record(s, p);
        }
        t
    }

    /// Four GPUs over ten 60 s steps, every figure counted by hand:
    /// - g1 (ml/a, health ok): 6 active steps (busy 0.9, effective 0.3), 3 idle, 1 unread;
    /// - g2 (ml/b): 4 active steps (busy 1, effective 0.5), then 6 with a pending row remap
    ///   and XID 79 (unavailable; busy 0, profiling not trusted);
    /// - g3: no pod, busy 0, no health field read;
    /// - g4: time-sliced by web/p and web/q, busy 0.8 and effective 0.4 (the device's).
    fn fleet() -> FleetInput {
        let ok = Some(Health::Ok);
        let active = Some((0.9, Some(0.3), ok));
        let idle = Some((0.0, Some(0.0), ok));
        let mut g1 = vec![active; 6];
        g1.extend([idle, idle, idle, None]);
        let mut g2 = vec![Some((1.0, Some(0.5), ok)); 4];
        g2.extend([Some((0.0, None, Some(Health::Unavailable))); 6]);
        let shared = [Some((0.8, Some(0.4), None)); 10];
        FleetInput {
            step_seconds: 60.0,
            steps: 10,
            tracks: vec![
                track(Some("ml/a"), "n/g1", &g1),
                track(Some("ml/b"), "n/g2", &g2),
                track(None, "n/g3", &[Some((0.0, Some(0.0), None)); 10]),
                track(Some("web/p"), "n/g4", &shared),
                track(Some("web/q"), "n/g4", &shared),
            ],
            held: BTreeMap::default(),
            step_bands: None,
        }
    }

    fn cfg() -> ShowbackConfig {
        ShowbackConfig {
            by: "namespace".into(),
            idle_busy_below: 0.05,
            idle_compute_below: 0.01,
            period_steps: None,
            period_offset: 0,
            default_price: Some(2.0),
            prices: Vec::new(),
            energy_price_per_kwh: None,
        }
    }

    fn near(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    /// The showback of `input` by namespace (the funnel is the same whatever the groups).
    fn by_namespace(input: &FleetInput) -> super::super::Showback {
        let groups = super::super::tests::namespaces(input);
        showback(input, &groups, &Holders::new(), &BTreeMap::new(), &cfg())
    }

    #[test]
    fn the_funnels_stages_and_losses_add_up_to_the_fleet() {
        let input = fleet();
        let s = by_namespace(&input);
        let f = &s.total.funnel;
        let h = |steps: f64| steps / 60.0;
        near(f.total_gpu_hours, h(40.0));
        near(f.unavailable_gpu_hours.unwrap(), h(6.0));
        near(f.healthy_gpu_hours, h(34.0));
        near(f.unallocated_gpu_hours, h(10.0));
        near(f.allocated_gpu_hours, h(24.0));
        near(f.idle_held_gpu_hours, h(3.0));
        near(f.use_unmeasured_gpu_hours, h(1.0));
        near(f.active_gpu_hours, h(20.0));
        // 6 × 0.3 + 4 × 0.5 + 10 × 0.4 (the time-sliced device's, shared 1/2 each).
        near(f.effective_gpu_hours.unwrap(), h(7.8));
        near(f.busy_not_computing_gpu_hours.unwrap(), h(20.0 - 7.8));
        near(f.effective_unmeasured_gpu_hours, 0.0);
        // g3 and g4 (10 each) and g1's step with nothing read.
        near(f.health_unread_gpu_hours, h(21.0));
        assert!(f.adds_up, "{}", f.check);
        // The unavailable hours are held, charged and priced apart: never idle.
        let ml = s.total.groups.iter().find(|g| g.group == "ml").unwrap();
        near(ml.unavailable_gpu_hours.unwrap(), h(6.0));
        near(ml.idle_gpu_hours, h(3.0));
        near(ml.used_gpu_hours, h(10.0));
        near(ml.unmeasured_gpu_hours, h(1.0));
        near(ml.cost.as_ref().unwrap().unavailable.unwrap(), 2.0 * h(6.0));
        // Judged over ml's 19 steps with health read (g1's last step read nothing).
        near(ml.health_measured_gpu_hours, h(19.0));
        // web's GPU never had a health field read: its unavailable hours are unknown, never
        // 0, and so is their cost.
        let web = s.total.groups.iter().find(|g| g.group == "web").unwrap();
        assert_eq!(web.unavailable_gpu_hours, None);
        near(web.health_measured_gpu_hours, 0.0);
        assert_eq!(web.cost.as_ref().unwrap().unavailable, None);
        // No pod held g3, which read no health: its unavailable hours are unknown, never 0
        // (health read on other GPUs tells nothing of it).
        assert_eq!(s.total.unallocated_unavailable_gpu_hours, None);
        near(s.total.unallocated_health_measured_gpu_hours, 0.0);
        assert!(s.total.reconciled);
    }

    /// A GPU no pod holds, its health read at 8 of 10 steps, unavailable at 3 of them: 3
    /// unavailable GPU-hours-in-steps no pod held, judged over those 8.
    #[test]
    fn unavailable_hours_no_pod_held_are_judged_over_their_own_health_reads() {
        let ok = Some((0.0, Some(0.0), Some(Health::Ok)));
        let down = Some((0.0, None, Some(Health::Unavailable)));
        let unread = Some((0.0, Some(0.0), None));
        let mut steps = vec![ok; 5];
        steps.extend([down; 3]);
        steps.extend([unread; 2]);
        let input = FleetInput {
            step_seconds: 60.0,
            steps: 10,
            tracks: vec![track(None, "n/g0", &steps)],
            held: BTreeMap::default(),
            step_bands: None,
        };
        let t = by_namespace(&input).total;
        near(t.unallocated_health_measured_gpu_hours, 8.0 / 60.0);
        near(t.unallocated_unavailable_gpu_hours.unwrap(), 3.0 / 60.0);
    }

    /// A GPU read by its busy flag alone: its active hours are active, their effective
    /// compute unknown, never counted as computing nothing.
    #[test]
    fn active_hours_without_effective_compute_are_unknown_not_zero() {
        let busy_only = Some((0.9, None, Some(Health::Ok)));
        let mut input = fleet();
        input
            .tracks
            .push(track(Some("ml/c"), "g5", &[busy_only; 10]));
        let f = &by_namespace(&input).total.funnel;
        let h = |steps: f64| steps / 60.0;
        near(f.active_gpu_hours, h(30.0));
        near(f.effective_gpu_hours.unwrap(), h(7.8));
        near(f.effective_unmeasured_gpu_hours, h(10.0));
        // Only the 20 active hours with effective compute read: 20 − 7.8.
        near(f.busy_not_computing_gpu_hours.unwrap(), h(20.0 - 7.8));
        assert!(f.adds_up, "{}", f.check);
    }

    /// A fleet read by its busy flag alone: its active hours' effective compute and the
    /// busy-but-not-computing loss are unknown, never 0; a fleet with nothing active
    /// computed nothing, 0.
    #[test]
    fn a_fleet_without_effective_compute_has_no_effective_stage() {
        let busy_only = Some((0.9, None, Some(Health::Ok)));
        let input = FleetInput {
            tracks: vec![track(Some("ml/c"), "g5", &[busy_only; 10])],
            ..fleet()
        };
        let f = &by_namespace(&input).total.funnel;
        near(f.active_gpu_hours, 10.0 / 60.0);
        near(f.effective_unmeasured_gpu_hours, 10.0 / 60.0);
        assert_eq!(f.effective_gpu_hours, None);
        assert_eq!(f.busy_not_computing_gpu_hours, None);
        let idle = Some((0.0, Some(0.0), Some(Health::Ok)));
        let input = FleetInput {
            tracks: vec![track(None, "g6", &[idle; 10])],
            ..fleet()
        };
        let f = &by_namespace(&input).total.funnel;
        near(f.active_gpu_hours, 0.0);
        assert_eq!(f.effective_gpu_hours, Some(0.0));
    }

    #[test]
    fn an_unavailable_gpu_is_not_idle_capacity() {
        let input = fleet();
        let r = analyze(&input, &FleetConfig::default());
        let idle: Vec<&str> = r
            .idle
            .workloads
            .iter()
            .map(|w| w.workload.as_str())
            .collect();
        assert!(!idle.iter().any(|w| w.contains("ml/b")), "{idle:?}");
        // ml/a: 3 idle of its 9 measured steps; ml/b: none of its 4 (6 unavailable).
        near(r.idle.idle_gpu_hours.unwrap(), 3.0 / 60.0);
    }
}

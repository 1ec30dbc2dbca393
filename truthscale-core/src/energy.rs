//! Where a GPU's measured energy goes: its idle floor (the power it draws at busy 0, times
//! time) apart from its active energy (the rest), and the active energy to the pods that
//! hold the GPU, by the allocation policy showback uses.
//!
//! - The floor is the entity's own: the lowest power of its windows whose busy flag read 0
//!   (a running minimum, so one low reading lowers it for good; a floor too low counts
//!   more energy as active, never less). Until such a window, the catalog's idle power for
//!   the model ([`crate::gpus::GpuSpec::idle_power_watts`]). [`FloorSource`] says which.
//! - Of each energy increment `j` over `s` seconds, `min(j, floor × s)` is idle floor and
//!   the rest active: never below 0, and the two sum to the measured energy. While no floor
//!   is known (a model the catalog lacks, before its first window at busy 0) an increment is
//!   neither: it is unsplit, its own part, never counted as active.
//! - A GPU one container holds alone (node mode, its series labelled with that holder): all
//!   of it is that holder's, measured. A GPU several pods hold (time-sliced): the active
//!   energy is split by the pods' processes' share of SM busy time, Kepler's rule (an
//!   ESTIMATE; the parts sum to the device's active energy); where no share is known it
//!   stays unsplit, never a made-up split. A GPU no pod holds: all of it is unallocated.
//!   Outside node mode (no allocation known) nothing is attributed.

use crate::model::{EntityId, Holder, PodRef, ProcessReading};

/// Where the idle floor comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorSource {
    /// Learned from the entity's own windows at busy 0.
    Measured,
    /// The catalog's idle power for the model.
    Catalog,
}

impl FloorSource {
    /// The label value (`floor="measured|catalog"`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FloorSource::Measured => "measured",
            FloorSource::Catalog => "catalog",
        }
    }
}

/// The idle floor in force: watts, and where they come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleFloor {
    /// Power at busy 0, watts.
    pub watts: f64,
    /// Where it comes from.
    pub source: FloorSource,
}

impl IdleFloor {
    /// The floor: the `measured` one when there is one, else the catalog's `catalog_watts`.
    #[must_use]
    pub fn decide(measured: Option<f64>, catalog_watts: Option<f64>) -> Option<IdleFloor> {
        let ok = |w: &f64| w.is_finite() && *w >= 0.0;
        match (measured.filter(ok), catalog_watts.filter(ok)) {
            (Some(watts), _) => Some(IdleFloor {
                watts,
                source: FloorSource::Measured,
            }),
            (None, Some(watts)) => Some(IdleFloor {
                watts,
                source: FloorSource::Catalog,
            }),
            (None, None) => None,
        }
    }

    /// `joules` over `seconds` split at `floor` into (idle floor, active): the floor's part
    /// is at most the energy, so active is never below 0; the two sum to `joules`. Without a
    /// floor the energy is unsplit, not active.
    #[must_use]
    pub fn split(floor: Option<IdleFloor>, joules: f64, seconds: f64) -> Joules {
        match floor {
            Some(f) => {
                let idle = (f.watts * seconds).clamp(0.0, joules.max(0.0));
                Joules::Split(idle, joules - idle)
            }
            None => Joules::Unsplit(joules),
        }
    }
}

/// An energy increment ([`IdleFloor::split`]): split at the floor in force (idle floor,
/// active), or unsplit where no floor is known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Joules {
    /// (idle floor, active).
    Split(f64, f64),
    /// No floor known: neither.
    Unsplit(f64),
}

/// The running minimum of power at busy 0: the measured floor after a window with busy
/// flag `busy` and power `watts`.
#[must_use]
pub fn learn_floor(floor: Option<f64>, busy: Option<f64>, watts: Option<f64>) -> Option<f64> {
    match (busy, watts) {
        (Some(b), Some(w)) if b == 0.0 && w.is_finite() && w >= 0.0 => {
            Some(floor.map_or(w, |f| f.min(w)))
        }
        _ => floor,
    }
}

/// How a pod's energy on a GPU was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEnergyMethod {
    /// It held the GPU alone: the device's energy is its own (measured).
    SoleHolder,
    /// Its processes' share of SM busy time on a shared GPU (an estimate).
    SmBusyShare,
}

impl PodEnergyMethod {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PodEnergyMethod::SoleHolder => "sole_holder",
            PodEnergyMethod::SmBusyShare => "sm_busy_share",
        }
    }
}

/// One pod's energy on one GPU while it held it (counters: they only grow).
#[derive(Debug, Clone, PartialEq)]
pub struct PodEnergy {
    /// The pod (`None`: processes whose pod was not found).
    pub pod: Option<PodRef>,
    /// How its part was decided.
    pub method: PodEnergyMethod,
    /// Active joules.
    pub active_joules: f64,
    /// Idle-floor joules (a sole holder's only: a shared GPU's floor is not split).
    pub idle_floor_joules: f64,
    /// Joules while no floor was known (a sole holder's only): neither idle floor nor
    /// active.
    pub unsplit_joules: f64,
    /// The attribution it last grew at (for eviction).
    last_seen: u64,
}

/// At most this many pods per GPU keep a counter; past it, the one not seen longest goes.
pub const MAX_PODS_PER_GPU: usize = 64;

/// A GPU's energy by holder: the pods' counters, and what no pod holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnergyHolders {
    /// Per pod (and method), in first-seen order; bounded by [`MAX_PODS_PER_GPU`].
    pub pods: Vec<PodEnergy>,
    /// Joules of the windows no pod held the GPU: (idle floor, active).
    pub unallocated: (f64, f64),
    /// Joules of the windows no pod held the GPU while no floor was known.
    pub unallocated_unsplit: f64,
    /// Active joules of a shared GPU whose split was not known (no SM busy share), or of
    /// pods past [`MAX_PODS_PER_GPU`] while every counter kept is a current holder's.
    pub unsplit_active_joules: f64,
    /// Whether any energy was attributed in node mode (the allocation was known).
    pub node_mode: bool,
    ticks: u64,
}

impl EnergyHolders {
    /// Attribute `joules` of the entity `id` (split into idle floor and active where a floor
    /// is known, else unsplit), held by `allocation` (node mode; `None`: not known, nothing
    /// is attributed), with its `processes`. Unsplit joules go to a sole holder or to what
    /// no pod held; a shared GPU's are not estimated (its active energy is not known).
    pub fn attribute(
        &mut self,
        id: &EntityId,
        allocation: Option<&[Holder]>,
        processes: &[ProcessReading],
        joules: Joules,
    ) {
        let Some(holders) = allocation else { return };
        self.node_mode = true;
        self.ticks += 1;
        let attributed = id.pod.as_ref().filter(|p| !p.pod.is_empty());
        if holders.is_empty() {
            match joules {
                Joules::Split(idle, active) => {
                    self.unallocated.0 += idle;
                    self.unallocated.1 += active;
                }
                Joules::Unsplit(j) => self.unallocated_unsplit += j,
            }
            return;
        }
        if let (Some(pod), 1) = (attributed, holders.len()) {
            match (self.entry(Some(pod), PodEnergyMethod::SoleHolder), joules) {
                (Some(e), Joules::Split(idle, active)) => {
                    e.active_joules += active;
                    e.idle_floor_joules += idle;
                }
                (Some(e), Joules::Unsplit(j)) => e.unsplit_joules += j,
                (None, Joules::Split(_, active)) => self.unsplit_active_joules += active,
                (None, Joules::Unsplit(_)) => {}
            }
            return;
        }
        let Joules::Split(_, active) = joules else {
            return;
        };
        // A holder keeps its counter while it holds the GPU, its processes running or not:
        // its series is exported as long, and an evicted one would come back at 0.
        for e in &mut self.pods {
            if e.method == PodEnergyMethod::SmBusyShare
                && let Some(p) = &e.pod
                && holders.iter().any(|h| h.pod.same_pod(p))
            {
                e.last_seen = self.ticks;
            }
        }
        let parts = crate::share::by_pod(processes).unwrap_or_default();
        let weights: Vec<f64> = parts.iter().map(|p| p.sm_busy).collect();
        let Some(values) = crate::share::apportion(active, &weights) else {
            self.unsplit_active_joules += active;
            return;
        };
        for (part, v) in parts.iter().zip(values) {
            match self.entry(part.pod, PodEnergyMethod::SmBusyShare) {
                Some(e) => e.active_joules += v,
                None => self.unsplit_active_joules += v,
            }
        }
    }

    /// The counter of `pod` by `method`, made where there is none. Past
    /// [`MAX_PODS_PER_GPU`], the one seen longest ago makes room, unless every one was seen
    /// this tick (a holder's counter is never evicted while it holds the GPU: it would come
    /// back at 0): then `None`, and the joules stay unsplit.
    fn entry(&mut self, pod: Option<&PodRef>, method: PodEnergyMethod) -> Option<&mut PodEnergy> {
        let ticks = self.ticks;
        let at = match self
            .pods
            .iter()
            .position(|e| e.method == method && e.pod.as_ref() == pod)
        {
            Some(i) => i,
            None => {
                if self.pods.len() >= MAX_PODS_PER_GPU {
                    let oldest = (0..self.pods.len())
                        .min_by_key(|i| self.pods[*i].last_seen)
                        .filter(|i| self.pods[*i].last_seen < ticks)?;
                    self.pods.remove(oldest);
                }
                self.pods.push(PodEnergy {
                    pod: pod.cloned(),
                    method,
                    active_joules: 0.0,
                    idle_floor_joules: 0.0,
                    unsplit_joules: 0.0,
                    last_seen: ticks,
                });
                self.pods.len() - 1
            }
        };
        let e = &mut self.pods[at];
        e.last_seen = ticks;
        Some(e)
    }
}

/// Joules per output token over a window: mean power over the output token rate; only
/// when tokens were produced, and absent where the quotient passes the largest double (a
/// rate of 1e-307 tokens a second), never an infinity.
#[must_use]
pub fn joules_per_output_token(
    watts: Option<f64>,
    output_tokens_per_sec: Option<f64>,
) -> Option<f64> {
    match (watts, output_tokens_per_sec) {
        (Some(w), Some(t)) if t > 0.0 && w.is_finite() && w >= 0.0 => {
            Some(w / t).filter(|v| v.is_finite())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            pod: name.into(),
            namespace: Some("ns".into()),
            container: None,
        }
    }

    fn holder(name: &str) -> Holder {
        Holder {
            pod: pod(name),
            resource: "nvidia.com/gpu".into(),
            replica: None,
            labels: Vec::new(),
            owner: None,
        }
    }

    fn process(name: &str, sm: f64) -> ProcessReading {
        ProcessReading {
            pid: "1".into(),
            sm_busy: Some(sm),
            pod: Some(pod(name)),
            ..ProcessReading::default()
        }
    }

    #[test]
    fn the_floor_is_learned_at_busy_zero_else_the_catalogs() {
        assert_eq!(learn_floor(None, Some(0.3), Some(50.0)), None, "busy");
        let f = learn_floor(None, Some(0.0), Some(62.0));
        assert_eq!(f, Some(62.0));
        assert_eq!(
            learn_floor(f, Some(0.0), Some(64.0)),
            Some(62.0),
            "a minimum"
        );
        assert_eq!(learn_floor(f, Some(0.0), Some(58.5)), Some(58.5));
        assert_eq!(learn_floor(f, None, Some(1.0)), Some(62.0), "no busy flag");
        let catalog = IdleFloor::decide(None, Some(75.0)).unwrap();
        assert_eq!(catalog.source.as_str(), "catalog");
        let measured = IdleFloor::decide(Some(60.0), Some(75.0)).unwrap();
        assert_eq!(
            (measured.watts, measured.source.as_str()),
            (60.0, "measured")
        );
        assert_eq!(IdleFloor::decide(None, None), None);
    }

    #[test]
    fn active_energy_is_what_the_floor_leaves_never_below_zero() {
        let f = IdleFloor::decide(Some(60.0), None);
        // 300 W for 10 s: 3000 J, of which 600 J floor.
        assert_eq!(
            IdleFloor::split(f, 3000.0, 10.0),
            Joules::Split(600.0, 2400.0)
        );
        // Below the floor (a reading under it): all floor, active 0.
        assert_eq!(IdleFloor::split(f, 500.0, 10.0), Joules::Split(500.0, 0.0));
        // No floor known: unsplit, never active.
        assert_eq!(IdleFloor::split(None, 500.0, 10.0), Joules::Unsplit(500.0));
    }

    #[test]
    fn two_pods_at_two_to_one_sm_busy_get_active_energy_two_to_one() {
        let id = EntityId::default();
        let alloc = [holder("a"), holder("b")];
        let procs = [process("a", 0.4), process("b", 0.2)];
        let mut h = EnergyHolders::default();
        // 10 windows of 1 s at 250 W over a 50 W floor: 200 J active each.
        for _ in 0..10 {
            h.attribute(&id, Some(&alloc), &procs, Joules::Split(50.0, 200.0));
        }
        let a = h.pods[0].active_joules;
        let b = h.pods[1].active_joules;
        // By hand: 2000 J active, two thirds and one third.
        assert!((a - 2000.0 * 2.0 / 3.0).abs() < 1e-9, "{a}");
        assert!((b - 2000.0 / 3.0).abs() < 1e-9, "{b}");
        assert!((a / b - 2.0).abs() < 0.02);
        assert!(
            h.pods
                .iter()
                .all(|p| p.method == PodEnergyMethod::SmBusyShare)
        );
        assert_eq!(h.unallocated, (0.0, 0.0));
    }

    #[test]
    fn a_gpu_no_pod_holds_is_unallocated_and_a_sole_holder_gets_all() {
        let mut id = EntityId::default();
        let mut h = EnergyHolders::default();
        h.attribute(&id, Some(&[]), &[], Joules::Split(400.0, 10.0));
        assert_eq!(h.unallocated, (400.0, 10.0));
        assert!(h.pods.is_empty());
        id.pod = Some(pod("solo"));
        h.attribute(
            &id,
            Some(&[holder("solo")]),
            &[],
            Joules::Split(40.0, 960.0),
        );
        assert_eq!(h.pods.len(), 1);
        assert_eq!(h.pods[0].method, PodEnergyMethod::SoleHolder);
        assert_eq!(
            (h.pods[0].idle_floor_joules, h.pods[0].active_joules),
            (40.0, 960.0)
        );
        // Not node mode: nothing attributed.
        let mut none = EnergyHolders::default();
        none.attribute(&id, None, &[], Joules::Split(1.0, 1.0));
        assert_eq!(none, EnergyHolders::default());
    }

    #[test]
    fn a_shared_gpu_without_shares_stays_unsplit_and_counters_are_bounded() {
        let id = EntityId::default();
        let alloc = [holder("a"), holder("b")];
        let mut h = EnergyHolders::default();
        h.attribute(
            &id,
            Some(&alloc),
            &[process("a", 0.0)],
            Joules::Split(1.0, 7.0),
        );
        assert_eq!(h.unsplit_active_joules, 7.0);
        assert!(h.pods.is_empty(), "never a made-up split");
        for i in 0..(MAX_PODS_PER_GPU + 5) {
            let name = format!("p{i}");
            h.attribute(
                &id,
                Some(&alloc),
                &[process(&name, 0.5)],
                Joules::Split(0.0, 1.0),
            );
        }
        assert_eq!(h.pods.len(), MAX_PODS_PER_GPU);
        assert_eq!(h.pods[0].pod.as_ref().unwrap().pod, "p5", "the oldest went");
    }

    /// More holders running at once than the cap: no holder's counter is evicted while it
    /// holds (it would come back at 0, a counter reset); the joules of the pods past the cap
    /// stay unsplit, so the GPU's energy still adds up.
    #[test]
    fn holders_past_the_cap_never_evict_each_other() {
        let id = EntityId::default();
        let names: Vec<String> = (0..MAX_PODS_PER_GPU + 6).map(|i| format!("p{i}")).collect();
        let alloc: Vec<Holder> = names.iter().map(|n| holder(n)).collect();
        let procs: Vec<ProcessReading> = names.iter().map(|n| process(n, 0.5)).collect();
        let mut h = EnergyHolders::default();
        let n = names.len() as f64;
        let mut before: Vec<(String, f64)> = Vec::new();
        for tick in 1..=3 {
            h.attribute(&id, Some(&alloc), &procs, Joules::Split(0.0, n));
            assert_eq!(h.pods.len(), MAX_PODS_PER_GPU);
            let now: Vec<(String, f64)> = h
                .pods
                .iter()
                .map(|e| (e.pod.as_ref().unwrap().pod.clone(), e.active_joules))
                .collect();
            for (pod, j) in &before {
                let kept = now.iter().find(|(p, _)| p == pod).map(|(_, j)| *j);
                assert!(kept.is_some_and(|k| k >= *j), "{pod}: {j} then {kept:?}");
            }
            // 1 J to each pod a tick; the 6 past the cap unsplit.
            let split: f64 = h.pods.iter().map(|e| e.active_joules).sum();
            assert!((split + h.unsplit_active_joules - n * f64::from(tick)).abs() < 1e-9);
            assert!((h.unsplit_active_joules - 6.0 * f64::from(tick)).abs() < 1e-9);
            before = now;
        }
    }

    /// A holder whose processes stopped (a notebook between jobs) keeps its counter while
    /// short-lived pods come and go past the cap: the ones no longer holding go first.
    #[test]
    fn a_holder_without_processes_keeps_its_counter_past_the_cap() {
        let id = EntityId::default();
        let mut h = EnergyHolders::default();
        h.attribute(
            &id,
            Some(&[holder("keep"), holder("p0")]),
            &[process("keep", 0.5), process("p0", 0.5)],
            Joules::Split(0.0, 2.0),
        );
        for i in 1..(2 * MAX_PODS_PER_GPU) {
            let name = format!("p{i}");
            h.attribute(
                &id,
                Some(&[holder("keep"), holder(&name)]),
                &[process(&name, 0.5)],
                Joules::Split(0.0, 1.0),
            );
        }
        assert_eq!(h.pods.len(), MAX_PODS_PER_GPU);
        let keep = h
            .pods
            .iter()
            .find(|e| e.pod.as_ref().unwrap().pod == "keep");
        assert_eq!(
            keep.map(|e| e.active_joules),
            Some(1.0),
            "its share of 2 J, kept"
        );
    }

    /// A node's GPU through the deriver, its energy counter read every second: 5 s no pod
    /// holds it at busy 0 and 60 W, then 10 s two pods time-share it at 300 W with SM busy
    /// 0.6 and 0.3 (2:1), then 5 s unheld again at 60 W. Expected values by hand.
    #[test]
    fn the_floor_is_not_learned_from_a_counters_power_over_busy_windows() {
        use crate::derive::DeriveConfig;
        use crate::model::{Field, Sample};
        use crate::tracker::{Deriver, tests::sample};
        // A held counter (as dcgm-exporter repeats it): nine 1 s windows at 700 W busy, the
        // counter unmoved, then a window at busy 0 in which it moves by 9 × 700 + 70 J: its
        // power, 637 W over the 10 s, is not the idle floor. No gauge.
        let held = |t: i64, joules: f64, busy: f64| -> Sample {
            let mut s = sample(
                t * 1000,
                &[(Field::EnergyJoules, joules), (Field::ReportedUtil, busy)],
            );
            s.entities[0].counters_held = true;
            s
        };
        let run = |d: &mut Deriver, from: i64, base: f64| {
            for t in from..from + 9 {
                d.observe(&held(t, base, 1.0));
            }
            let w = d.observe(&held(from + 9, base + 9.0 * 700.0 + 70.0, 0.0));
            w.windows.into_iter().next()
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        // The counter's first move has no time; the second is the one measured.
        d.observe(&held(0, 1000.0, 1.0));
        d.observe(&held(1, 2000.0, 1.0));
        // Moved at 1 s, held over 2-10 s, moved at 11 s: 10 s.
        let w = run(&mut d, 2, 2000.0);
        let w = w.expect("a window");
        let power = w.metrics.power_watts.map(|p| p.value);
        assert_eq!(power, Some(637.0), "the counter's power over the span");
        let floor = w.idle_floor.expect("the catalog's");
        assert_eq!(floor.source, FloorSource::Catalog, "{floor:?}");
        // Idle throughout the span (busy 0 in every window): the floor is learned, 770 J
        // over the 11 s from the move at 1 s to the one at 12 s.
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        d.observe(&held(0, 1000.0, 0.0));
        d.observe(&held(1, 1070.0, 0.0));
        for t in 2..12 {
            d.observe(&held(t, 1070.0, 0.0));
        }
        let w = d
            .observe(&held(12, 1070.0 + 770.0, 0.0))
            .windows
            .pop()
            .unwrap();
        let floor = w.idle_floor.unwrap();
        assert_eq!((floor.watts, floor.source), (70.0, FloorSource::Measured));
    }

    #[test]
    fn a_node_gpus_energy_goes_to_its_holders_and_the_rest_is_unallocated() {
        use crate::derive::DeriveConfig;
        use crate::model::Field;
        use crate::tracker::{Deriver, tests::sample};
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut counter = 0.0;
        let mut last = None;
        for t in 1..=20_i64 {
            let shared = (6..=15).contains(&t);
            let watts = if shared { 300.0 } else { 60.0 };
            if t > 1 {
                counter += watts;
            }
            let busy = if shared { 0.9 } else { 0.0 };
            let mut s = sample(
                t * 1000,
                &[
                    (Field::EnergyJoules, counter),
                    (Field::PowerWatts, watts),
                    (Field::ReportedUtil, busy),
                ],
            );
            let e = &mut s.entities[0];
            if shared {
                e.allocation = Some(vec![holder("a"), holder("b")]);
                e.processes = vec![process("a", 0.6), process("b", 0.3)];
            } else {
                e.allocation = Some(Vec::new());
            }
            last = d.observe(&s).windows.pop();
        }
        let w = last.unwrap();
        let t = &w.totals;
        // 10 s at 60 W (the first window from the gauge), 10 s at 300 W.
        assert_eq!(t.energy_joules, 600.0 + 3000.0);
        // The floor, learned at busy 0 from the first window on: 60 W, for all 20 s.
        let floor = w.idle_floor.unwrap();
        assert_eq!((floor.watts, floor.source), (60.0, FloorSource::Measured));
        assert_eq!(t.idle_floor_joules, 20.0 * 60.0);
        assert_eq!(t.active_energy_joules, 10.0 * 240.0);
        assert_eq!(
            t.idle_floor_joules + t.active_energy_joules,
            t.energy_joules
        );
        let h = &w.energy_holders;
        // Unheld: 10 s of floor, nothing active.
        assert_eq!(h.unallocated, (600.0, 0.0));
        let a = h.pods[0].active_joules;
        let b = h.pods[1].active_joules;
        assert!(
            (a - 1600.0).abs() < 1e-9 && (b - 800.0).abs() < 1e-9,
            "{a} {b}"
        );
        assert!((a / b - 2.0).abs() / 2.0 < 0.01, "2:1 within 1 %");
        // Everything accounted: pods, the shared GPU's floor (not split), unallocated.
        let held_floor = 10.0 * 60.0;
        let sum = a + b + held_floor + h.unallocated.0 + h.unallocated.1;
        assert!((sum - t.energy_joules).abs() < 1e-9);
    }

    #[test]
    fn joules_per_token_only_with_tokens() {
        assert_eq!(
            joules_per_output_token(Some(300.0), Some(1500.0)),
            Some(0.2)
        );
        assert_eq!(joules_per_output_token(Some(300.0), Some(0.0)), None);
        assert_eq!(joules_per_output_token(None, Some(10.0)), None);
    }

    /// A model the catalog lacks, sole-held in node mode: 5 s at 300 W and busy 0.9 before
    /// any window at busy 0 (no floor: unsplit, never active), then 5 s at 60 W and busy 0
    /// (the floor learned, 60 W: all idle floor). By hand, with every window 1 s (the first
    /// at the deriver's nominal 1 s, as in the test above): 5 windows of 300 J unsplit, 5 of
    /// 60 J idle floor, nothing active; the three parts sum to the 1 800 J.
    #[test]
    fn energy_before_any_floor_is_unsplit_not_active() {
        use crate::derive::DeriveConfig;
        use crate::model::Field;
        use crate::tracker::{Deriver, tests::sample};
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut last = None;
        for t in 1..=10_i64 {
            let (watts, busy) = if t <= 5 { (300.0, 0.9) } else { (60.0, 0.0) };
            let mut s = sample(
                t * 1000,
                &[(Field::PowerWatts, watts), (Field::ReportedUtil, busy)],
            );
            let e = &mut s.entities[0];
            e.id.model = Some("NVIDIA Made-Up GPU".into());
            e.id.pod = Some(pod("solo"));
            e.allocation = Some(vec![holder("solo")]);
            last = d.observe(&s).windows.pop();
        }
        let w = last.unwrap();
        let t = &w.totals;
        let floor = w.idle_floor.expect("learned at busy 0");
        assert_eq!((floor.watts, floor.source), (60.0, FloorSource::Measured));
        assert_eq!(t.energy_joules, 1800.0);
        assert_eq!(t.unsplit_energy_joules, 5.0 * 300.0);
        assert_eq!(t.idle_floor_joules, 5.0 * 60.0);
        assert_eq!(t.active_energy_joules, 0.0);
        assert_eq!(
            t.unsplit_energy_joules + t.idle_floor_joules + t.active_energy_joules,
            t.energy_joules
        );
        let p = &w.energy_holders.pods[0];
        assert_eq!(
            (p.unsplit_joules, p.idle_floor_joules, p.active_joules),
            (1500.0, 300.0, 0.0)
        );
    }
}

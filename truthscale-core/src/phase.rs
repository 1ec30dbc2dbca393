//! The regime classifier: idle, compute-bound, memory-bound, mixed, stalled, underloaded.
//!
//! Each state has an enter rule and an exit rule (Schmitt-trigger thresholds): the
//! classifier stays in its state until that state's exit rule holds, and then needs the
//! windows to agree on a new state for `switch_after − 1` seconds (`switch_after`
//! consecutive windows at the default 1 s interval) before it switches. The dwell is
//! counted in seconds, so it does not depend on how often the GPU is sampled.
//!
//! As the spec asks (counter-science §6.4), idle and stalled are evaluated first in every
//! window: a window that enters idle is idle whatever state came before, and a stalled
//! state ends as soon as its busy flag drops, so a stall that ends is never held.
//! A missing counter is never read as a quiet one: stalled needs a DRAM reading that is low.

use crate::derive::RHO_FLOOR;
use crate::model::Phase;

/// Thresholds and hysteresis. Defaults follow the counter-science spec (§6.4).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PhaseConfig {
    /// Idle: enter when `u` is below this (and `s` below `idle_enter_sm`).
    pub idle_enter_util: f64,
    /// Idle: SM-active ceiling to enter.
    pub idle_enter_sm: f64,
    /// Idle: exit when `u` reaches this.
    pub idle_exit_util: f64,
    /// Stalled: enter when `u` is at least this …
    pub stalled_enter_util: f64,
    /// … and tensor activity is below this …
    pub stalled_enter_tensor: f64,
    /// … and DRAM activity is below this …
    pub stalled_enter_dram: f64,
    /// … and the busiest pipe is below this.
    pub stalled_enter_pipe: f64,
    /// Stalled: exit when `u` falls below this (the stall ended) …
    pub stalled_exit_util: f64,
    /// … or tensor activity reaches this …
    pub stalled_exit_tensor: f64,
    /// … or DRAM activity reaches this.
    pub stalled_exit_dram: f64,
    /// Compute-bound (prefill): enter when ρ is at least this …
    #[serde(alias = "prefill_enter_rho")]
    pub compute_bound_enter_rho: f64,
    /// … and tensor activity at least this.
    #[serde(alias = "prefill_enter_tensor")]
    pub compute_bound_enter_tensor: f64,
    /// Compute-bound: exit when ρ falls below this …
    #[serde(alias = "prefill_exit_rho")]
    pub compute_bound_exit_rho: f64,
    /// … or tensor activity below this.
    #[serde(alias = "prefill_exit_tensor")]
    pub compute_bound_exit_tensor: f64,
    /// Memory-bound (decode): enter when ρ is at most this …
    #[serde(alias = "decode_enter_rho")]
    pub memory_bound_enter_rho: f64,
    /// … and DRAM activity at least this.
    #[serde(alias = "decode_enter_dram")]
    pub memory_bound_enter_dram: f64,
    /// Memory-bound: exit when ρ rises above this …
    #[serde(alias = "decode_exit_rho")]
    pub memory_bound_exit_rho: f64,
    /// … or DRAM activity falls below this.
    #[serde(alias = "decode_exit_dram")]
    pub memory_bound_exit_dram: f64,
    /// Mixed: tensor activity that counts as meaningful work.
    pub mixed_tensor: f64,
    /// Mixed: DRAM activity that counts as meaningful work.
    pub mixed_dram: f64,
    /// Power-heuristic tier: compute-bound when the power proxy is at least this.
    #[serde(alias = "power_prefill")]
    pub power_compute_bound: f64,
    /// Power-heuristic tier: memory-bound when the power proxy is at least this (and `u` high).
    #[serde(alias = "power_decode")]
    pub power_memory_bound: f64,
    /// Power-heuristic tier: stalled when the power proxy is below this (and `u` high).
    pub power_stalled: f64,
    /// Power-heuristic tier: what counts as a high busy flag.
    pub power_busy_util: f64,
    /// Comm-bound: NVLink traffic (both directions) over the model's peak at or above this…
    pub comm_bound_enter_nvlink: f64,
    /// … with tensor activity below this (collectives barely use the tensor pipes).
    pub comm_bound_enter_tensor: f64,
    /// Comm-bound ends when NVLink traffic falls below this…
    pub comm_bound_exit_nvlink: f64,
    /// … or tensor activity rises to this.
    pub comm_bound_exit_tensor: f64,
    /// The dwell before a switch, in windows of the default 1 s interval (1 = no delay):
    /// the classifier takes a new regime once every window for `switch_after − 1` seconds
    /// after the first window that pointed to it has pointed to it too
    /// ([`PhaseConfig::dwell_seconds`]). At 1 s windows that is `switch_after` consecutive
    /// windows; the dwell is counted in seconds, so at 100 ms windows it lasts as long
    /// (ten times as many windows), not a tenth of it.
    pub switch_after: u32,
}

impl Default for PhaseConfig {
    fn default() -> Self {
        PhaseConfig {
            idle_enter_util: 0.05,
            idle_enter_sm: 0.02,
            idle_exit_util: 0.10,
            stalled_enter_util: 0.5,
            stalled_enter_tensor: 0.05,
            stalled_enter_dram: 0.10,
            stalled_enter_pipe: 0.10,
            stalled_exit_util: 0.4,
            stalled_exit_tensor: 0.08,
            stalled_exit_dram: 0.15,
            compute_bound_enter_rho: 1.5,
            compute_bound_enter_tensor: 0.20,
            compute_bound_exit_rho: 1.0,
            compute_bound_exit_tensor: 0.12,
            memory_bound_enter_rho: 0.5,
            memory_bound_enter_dram: 0.25,
            memory_bound_exit_rho: 0.7,
            memory_bound_exit_dram: 0.15,
            mixed_tensor: 0.10,
            mixed_dram: 0.15,
            power_compute_bound: 0.75,
            power_memory_bound: 0.30,
            power_stalled: 0.20,
            power_busy_util: 0.8,
            comm_bound_enter_nvlink: 0.5,
            comm_bound_enter_tensor: 0.10,
            comm_bound_exit_nvlink: 0.4,
            comm_bound_exit_tensor: 0.15,
            switch_after: 1,
        }
    }
}

/// One configuration value that cannot be used, with the key that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSetting {
    /// The key, relative to the section that was checked (e.g. `phase.idle_enter_util`).
    pub key: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl std::fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Collects the problems of one configuration section.
#[derive(Debug, Default)]
pub struct Checker {
    prefix: String,
    problems: Vec<InvalidSetting>,
}

impl Checker {
    /// A checker whose keys start with `prefix` (e.g. `derive.`).
    #[must_use]
    pub fn new(prefix: &str) -> Checker {
        Checker {
            prefix: prefix.to_string(),
            problems: Vec::new(),
        }
    }

    /// Record a problem with `key`.
    pub fn push(&mut self, key: &str, message: String) {
        self.problems.push(InvalidSetting {
            key: format!("{}{key}", self.prefix),
            message,
        });
    }

    /// `value` must be a finite number in `[lo, hi]`.
    pub fn range(&mut self, key: &str, value: f64, lo: f64, hi: f64) {
        if !value.is_finite() {
            self.push(
                key,
                format!("{value} is not a number; use a value in [{lo}, {hi}]"),
            );
        } else if value < lo || value > hi {
            self.push(key, format!("{value} is outside [{lo}, {hi}]"));
        }
    }

    /// `lower` (at `lower_key`) must be strictly below `upper` (at `upper_key`).
    pub fn below(&mut self, lower_key: &str, lower: f64, upper_key: &str, upper: f64, why: &str) {
        if lower.is_finite() && upper.is_finite() && lower >= upper {
            self.push(
                lower_key,
                format!(
                    "{lower} must be below {}{upper_key} ({upper}): {why}",
                    self.prefix
                ),
            );
        }
    }

    /// The problems found, or `Ok` when there are none.
    ///
    /// # Errors
    /// Every problem found, in the order checked.
    pub fn finish(self) -> Result<(), Vec<InvalidSetting>> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(self.problems)
        }
    }

    /// Take over the problems of a nested section's checker.
    pub fn absorb(&mut self, nested: Result<(), Vec<InvalidSetting>>) {
        if let Err(p) = nested {
            self.problems.extend(p);
        }
    }
}

impl PhaseConfig {
    /// How long every window must keep pointing to a new regime, after the first window
    /// that pointed to it, before the classifier switches: `switch_after − 1` seconds.
    #[must_use]
    pub fn dwell_seconds(&self) -> f64 {
        f64::from(self.switch_after.max(1) - 1) * NOMINAL_WINDOW_SECONDS
    }

    /// Every threshold in range, and every hysteresis band pointing the right way.
    ///
    /// # Errors
    /// Each problem, keyed `<prefix>name`.
    pub fn validate(&self, prefix: &str) -> Result<(), Vec<InvalidSetting>> {
        let mut c = Checker::new(prefix);
        self.check_ranges(&mut c);
        let band = "the exit threshold must lie inside the state, or the state flickers";
        self.check_bands(&mut c, band);
        self.check_power_and_comm_bound(&mut c, band);
        c.finish()
    }

    /// Every threshold in its range, and the windows to switch after.
    fn check_ranges(&self, c: &mut Checker) {
        for (k, v) in [
            ("idle_enter_util", self.idle_enter_util),
            ("idle_enter_sm", self.idle_enter_sm),
            ("idle_exit_util", self.idle_exit_util),
            ("stalled_enter_util", self.stalled_enter_util),
            ("stalled_enter_tensor", self.stalled_enter_tensor),
            ("stalled_enter_dram", self.stalled_enter_dram),
            ("stalled_enter_pipe", self.stalled_enter_pipe),
            ("stalled_exit_util", self.stalled_exit_util),
            ("stalled_exit_tensor", self.stalled_exit_tensor),
            ("stalled_exit_dram", self.stalled_exit_dram),
            (
                "compute_bound_enter_tensor",
                self.compute_bound_enter_tensor,
            ),
            ("compute_bound_exit_tensor", self.compute_bound_exit_tensor),
            ("memory_bound_enter_dram", self.memory_bound_enter_dram),
            ("memory_bound_exit_dram", self.memory_bound_exit_dram),
            ("mixed_tensor", self.mixed_tensor),
            ("mixed_dram", self.mixed_dram),
            ("power_compute_bound", self.power_compute_bound),
            ("power_memory_bound", self.power_memory_bound),
            ("power_stalled", self.power_stalled),
            ("power_busy_util", self.power_busy_util),
        ] {
            c.range(k, v, 0.0, 1.0);
        }
        for (k, v) in [
            ("compute_bound_enter_rho", self.compute_bound_enter_rho),
            ("compute_bound_exit_rho", self.compute_bound_exit_rho),
            ("memory_bound_enter_rho", self.memory_bound_enter_rho),
            ("memory_bound_exit_rho", self.memory_bound_exit_rho),
        ] {
            c.range(k, v, 0.0, 1000.0);
        }
        if self.switch_after == 0 || self.switch_after > 100 {
            c.push(
                "switch_after",
                format!(
                    "{} is outside [1, 100] (windows of the default 1 s interval)",
                    self.switch_after
                ),
            );
        }
    }

    /// Each hysteresis band pointing the right way (the first threshold below the second),
    /// and the regimes' bands in order.
    fn check_bands(&self, c: &mut Checker, band: &str) {
        for (low_key, low, high_key, high, why) in [
            (
                "idle_enter_util",
                self.idle_enter_util,
                "idle_exit_util",
                self.idle_exit_util,
                band,
            ),
            (
                "stalled_exit_util",
                self.stalled_exit_util,
                "stalled_enter_util",
                self.stalled_enter_util,
                band,
            ),
            (
                "stalled_enter_tensor",
                self.stalled_enter_tensor,
                "stalled_exit_tensor",
                self.stalled_exit_tensor,
                band,
            ),
            (
                "stalled_enter_dram",
                self.stalled_enter_dram,
                "stalled_exit_dram",
                self.stalled_exit_dram,
                band,
            ),
            (
                "compute_bound_exit_rho",
                self.compute_bound_exit_rho,
                "compute_bound_enter_rho",
                self.compute_bound_enter_rho,
                band,
            ),
            (
                "compute_bound_exit_tensor",
                self.compute_bound_exit_tensor,
                "compute_bound_enter_tensor",
                self.compute_bound_enter_tensor,
                band,
            ),
            (
                "memory_bound_enter_rho",
                self.memory_bound_enter_rho,
                "memory_bound_exit_rho",
                self.memory_bound_exit_rho,
                band,
            ),
            (
                "memory_bound_exit_dram",
                self.memory_bound_exit_dram,
                "memory_bound_enter_dram",
                self.memory_bound_enter_dram,
                band,
            ),
            (
                "memory_bound_exit_rho",
                self.memory_bound_exit_rho,
                "compute_bound_exit_rho",
                self.compute_bound_exit_rho,
                "memory-bound must end before compute-bound can begin",
            ),
            (
                "idle_enter_util",
                self.idle_enter_util,
                "stalled_enter_util",
                self.stalled_enter_util,
                "a busy flag cannot be idle and stalled at once",
            ),
        ] {
            c.below(low_key, low, high_key, high, why);
        }
    }

    /// The power heuristic's bands in order, and the comm-bound thresholds in range with
    /// their hysteresis pointing the right way.
    fn check_power_and_comm_bound(&self, c: &mut Checker, band: &str) {
        let power =
            "the power-heuristic bands must be ordered stalled < memory-bound < compute-bound";
        c.below(
            "power_stalled",
            self.power_stalled,
            "power_memory_bound",
            self.power_memory_bound,
            power,
        );
        c.below(
            "power_memory_bound",
            self.power_memory_bound,
            "power_compute_bound",
            self.power_compute_bound,
            power,
        );
        for (k, v) in [
            ("comm_bound_enter_nvlink", self.comm_bound_enter_nvlink),
            ("comm_bound_enter_tensor", self.comm_bound_enter_tensor),
            ("comm_bound_exit_nvlink", self.comm_bound_exit_nvlink),
            ("comm_bound_exit_tensor", self.comm_bound_exit_tensor),
        ] {
            c.range(k, v, 0.0, 1.0);
        }
        c.below(
            "comm_bound_exit_nvlink",
            self.comm_bound_exit_nvlink,
            "comm_bound_enter_nvlink",
            self.comm_bound_enter_nvlink,
            band,
        );
        c.below(
            "comm_bound_enter_tensor",
            self.comm_bound_enter_tensor,
            "comm_bound_exit_tensor",
            self.comm_bound_exit_tensor,
            band,
        );
    }
}

/// What the classifier looks at in one window. Missing inputs are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseInputs {
    /// Busy fraction (or GR-engine active when the busy flag is missing).
    pub util: Option<f64>,
    /// SM active.
    pub sm_active: Option<f64>,
    /// Compute term `C` (tensor plus weighted pipes).
    pub compute: Option<f64>,
    /// DRAM activity.
    pub dram: Option<f64>,
    /// Busiest pipe.
    pub pipe: Option<f64>,
    /// Power proxy (used only without compute counters).
    pub power_proxy: Option<f64>,
    /// Software power cap asserted.
    pub power_capped: bool,
    /// Tensor activity (the comm-bound rule's "tensor pipes idle").
    pub tensor: Option<f64>,
    /// NVLink traffic, both directions, over the model's bidirectional peak.
    pub nvlink_share: Option<f64>,
    /// Whether the NVLink transmit wait rose over the window (the links could not send).
    pub link_waiting: bool,
    /// Whether a straggler of the entity's job holds it back ([`crate::stragglers`]): then
    /// it is comm-bound while its tensor pipes idle, as it is with NVLink near its peak.
    pub waiting_on_straggler: bool,
}

/// How the regime of a window was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseMethod {
    /// From tensor and DRAM counters.
    Counters,
    /// From the busy flag and the power proxy (an estimate).
    PowerHeuristic,
}

impl PhaseMethod {
    /// Both methods, in label order.
    pub const ALL: [PhaseMethod; 2] = [PhaseMethod::Counters, PhaseMethod::PowerHeuristic];

    /// The label value (`method="…"`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseMethod::Counters => "counters",
            PhaseMethod::PowerHeuristic => "power_heuristic",
        }
    }

    /// Index into [`PhaseMethod::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        self as usize
    }
}

impl PhaseInputs {
    fn rho(&self) -> Option<f64> {
        Some(self.compute? / self.dram?.max(RHO_FLOOR))
    }

    fn enters(&self, p: Phase, c: &PhaseConfig) -> bool {
        let u = self.util;
        let (tau, d, rho) = (self.compute, self.dram, self.rho());
        match p {
            Phase::Idle => {
                u.is_some_and(|u| u < c.idle_enter_util)
                    && self.sm_active.is_none_or(|s| s < c.idle_enter_sm)
            }
            // Every input must be read and quiet: a missing counter is not a quiet one.
            Phase::Stalled => {
                u.is_some_and(|u| u >= c.stalled_enter_util)
                    && tau.is_some_and(|t| t < c.stalled_enter_tensor)
                    && d.is_some_and(|d| d < c.stalled_enter_dram)
                    && self.pipe.is_none_or(|p| p < c.stalled_enter_pipe)
            }
            Phase::ComputeBound => {
                rho.is_some_and(|r| r >= c.compute_bound_enter_rho)
                    && tau.is_some_and(|t| t >= c.compute_bound_enter_tensor)
            }
            Phase::MemoryBound => {
                rho.is_some_and(|r| r <= c.memory_bound_enter_rho)
                    && d.is_some_and(|d| d >= c.memory_bound_enter_dram)
            }
            Phase::Mixed => {
                tau.is_some_and(|t| t >= c.mixed_tensor) || d.is_some_and(|d| d >= c.mixed_dram)
            }
            // Neither pipe nor DRAM meaningfully busy: a DRAM counter not read could be a
            // busy one (a decode step waits on memory), so it must be read.
            Phase::Underloaded => d.is_some() && u.is_some_and(|u| u >= c.idle_enter_util),
            Phase::CommBound => {
                (self.waiting_on_straggler
                    || self.link_waiting
                    || self
                        .nvlink_share
                        .is_some_and(|n| n >= c.comm_bound_enter_nvlink))
                    && self.tensor.is_some_and(|t| t < c.comm_bound_enter_tensor)
            }
        }
    }

    fn exits(&self, p: Phase, c: &PhaseConfig) -> bool {
        let (tau, d, rho) = (self.compute, self.dram, self.rho());
        match p {
            Phase::Idle => self.util.is_none_or(|u| u >= c.idle_exit_util),
            Phase::Stalled => {
                self.util.is_none_or(|u| u < c.stalled_exit_util)
                    || tau.is_none_or(|t| t >= c.stalled_exit_tensor)
                    || d.is_none_or(|d| d >= c.stalled_exit_dram)
            }
            Phase::ComputeBound => {
                rho.is_none_or(|r| r < c.compute_bound_exit_rho)
                    || tau.is_none_or(|t| t < c.compute_bound_exit_tensor)
            }
            Phase::MemoryBound => {
                rho.is_none_or(|r| r > c.memory_bound_exit_rho)
                    || d.is_none_or(|d| d < c.memory_bound_exit_dram)
            }
            Phase::CommBound => {
                self.tensor.is_none_or(|t| t >= c.comm_bound_exit_tensor)
                    || (!self.waiting_on_straggler
                        && !self.link_waiting
                        && self
                            .nvlink_share
                            .is_none_or(|n| n < c.comm_bound_exit_nvlink))
            }
            // Mixed and underloaded have no exit rule of their own: any other enter rule wins.
            Phase::Mixed | Phase::Underloaded => true,
        }
    }

    /// The state the counters point to, given the current state (no dwell counting).
    /// `None` when the compute counter is missing, or the DRAM counter where no rule that
    /// does without it decides.
    #[must_use]
    #[inline(always)]
    pub fn counter_candidate(&self, current: Option<Phase>, c: &PhaseConfig) -> Option<Phase> {
        self.compute?;
        // Idle, comm-bound and stalled first, in every window (spec §6.4): a GPU waiting on
        // its links is neither idle (its busy flag is high) nor stalled on its own.
        const FIRST: [Phase; 3] = [Phase::Idle, Phase::CommBound, Phase::Stalled];
        for p in FIRST {
            // Comm-bound, the more specific, wins over staying stalled.
            let stays = current == Some(p) && !self.exits(p, c);
            if stays || (p == Phase::CommBound && self.enters(p, c)) {
                return Some(p);
            }
        }
        for p in FIRST {
            if self.enters(p, c) {
                return Some(p);
            }
        }
        if let Some(cur) = current
            && !FIRST.contains(&cur)
            && !self.exits(cur, c)
        {
            return Some(cur);
        }
        let order = [
            Phase::ComputeBound,
            Phase::MemoryBound,
            Phase::Mixed,
            Phase::Underloaded,
        ];
        // None entered: a quiet window without a busy flag (or GR-engine activity) to say a
        // kernel ran, or one below the idle threshold whose SMs are not quiet (spec §6.4:
        // underloaded needs u ≥ 0.05, idle s < 0.02), is neither: unclassified.
        order.into_iter().find(|&p| self.enters(p, c))
    }

    /// The state the busy flag and power proxy point to (an estimate, no hysteresis).
    #[must_use]
    pub fn power_candidate(&self, c: &PhaseConfig) -> Option<Phase> {
        let u = self.util?;
        if u < c.idle_enter_util {
            return Some(Phase::Idle);
        }
        if self.waiting_on_straggler {
            return Some(Phase::CommBound);
        }
        let pi = self.power_proxy?;
        Some(
            if pi >= c.power_compute_bound || (self.power_capped && u >= 0.9) {
                Phase::ComputeBound
            } else if u >= c.power_busy_util && pi < c.power_stalled {
                Phase::Stalled
            } else if u >= c.power_busy_util && pi >= c.power_memory_bound {
                Phase::MemoryBound
            } else {
                Phase::Underloaded
            },
        )
    }

    /// The state these inputs point to with `method`, given the current state.
    #[must_use]
    pub fn candidate_by(
        &self,
        method: PhaseMethod,
        current: Option<Phase>,
        c: &PhaseConfig,
    ) -> Option<Phase> {
        match method {
            PhaseMethod::Counters => self.counter_candidate(current, c),
            PhaseMethod::PowerHeuristic => self.power_candidate(c),
        }
    }

    /// The state these inputs point to, given the current state: from the counters when
    /// the compute counter was read, else from the power heuristic.
    #[must_use]
    pub fn candidate(
        &self,
        current: Option<Phase>,
        c: &PhaseConfig,
    ) -> Option<(Phase, PhaseMethod)> {
        match self.counter_candidate(current, c) {
            Some(p) => Some((p, PhaseMethod::Counters)),
            None if self.compute.is_none() => self
                .power_candidate(c)
                .map(|p| (p, PhaseMethod::PowerHeuristic)),
            None => None,
        }
    }
}

/// Stateful classifier for one entity.
#[derive(Debug, Clone, Default)]
pub struct PhaseClassifier {
    current: Option<Phase>,
    /// A regime other than the current one that the latest windows point to, and the
    /// seconds they have pointed to it since the end of the first of them.
    pending: Option<(Phase, f64)>,
}

/// The window length [`PhaseClassifier::observe`] and [`PhaseClassifier::observe_by`] take
/// each window to have: the default export interval.
pub const NOMINAL_WINDOW_SECONDS: f64 = 1.0;

/// Slack on the dwell: window lengths come from millisecond timestamps, and ten 100 ms
/// windows sum to a hair under a second.
const DWELL_SLACK_SECONDS: f64 = 1e-6;

impl PhaseClassifier {
    /// The current phase, if any window has been classified.
    #[must_use]
    pub fn current(&self) -> Option<Phase> {
        self.current
    }

    /// Feed one window; returns the phase after hysteresis, and how it was decided.
    /// The method follows the inputs: counters when the compute counter was read.
    pub fn observe(
        &mut self,
        inputs: &PhaseInputs,
        c: &PhaseConfig,
    ) -> Option<(Phase, PhaseMethod)> {
        let method = if inputs.compute.is_some() {
            PhaseMethod::Counters
        } else {
            PhaseMethod::PowerHeuristic
        };
        self.observe_by(inputs, method, c).map(|p| (p, method))
    }

    /// Feed one window of [`NOMINAL_WINDOW_SECONDS`], classified by `method` only: a window
    /// that method cannot classify (for example the tensor counter blank under DCGM
    /// multiplexing) returns `None` and leaves the state as it was, so the two methods never
    /// mix in one entity's history.
    pub fn observe_by(
        &mut self,
        inputs: &PhaseInputs,
        method: PhaseMethod,
        c: &PhaseConfig,
    ) -> Option<Phase> {
        self.observe_window(inputs, method, NOMINAL_WINDOW_SECONDS, c)
    }

    /// [`PhaseClassifier::observe_by`] for a window of `dt_seconds`: the dwell
    /// ([`PhaseConfig::dwell_seconds`]) is counted in seconds, so the classifier switches
    /// as late after a change at 100 ms windows as at 1 s windows. A length that is not a
    /// positive number counts as 0.
    #[inline(always)]
    pub fn observe_window(
        &mut self,
        inputs: &PhaseInputs,
        method: PhaseMethod,
        dt_seconds: f64,
        c: &PhaseConfig,
    ) -> Option<Phase> {
        let cand = inputs.candidate_by(method, self.current, c)?;
        let dt = if dt_seconds.is_finite() && dt_seconds > 0.0 {
            dt_seconds
        } else {
            0.0
        };
        match self.current {
            None => {
                self.current = Some(cand);
                self.pending = None;
            }
            Some(cur) if cur == cand => self.pending = None,
            Some(_) => {
                // Seconds since the end of the first window that pointed to `cand`.
                let held = match self.pending {
                    Some((p, held)) if p == cand => held + dt,
                    _ => 0.0,
                };
                if held + DWELL_SLACK_SECONDS >= c.dwell_seconds() {
                    self.current = Some(cand);
                    self.pending = None;
                } else {
                    self.pending = Some((cand, held));
                }
            }
        }
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(u: f64, s: f64, tau: f64, d: f64) -> PhaseInputs {
        PhaseInputs {
            util: Some(u),
            sm_active: Some(s),
            compute: Some(tau),
            dram: Some(d),
            pipe: Some(tau),
            ..Default::default()
        }
    }

    fn classify(inputs: &PhaseInputs) -> Phase {
        inputs.candidate(None, &PhaseConfig::default()).unwrap().0
    }

    /// The compute-bound and mixed rules read the compute term `C`, the stalled rule the
    /// busiest pipe: a helper that sets both to τ cannot tell them apart. On an H100 SXM
    /// (FP32 67 of 989 TFLOP/s):
    /// - τ 0.05, φ32 0.9, d 0.05: C = 0.05 + 0.9 × 67/989 = 0.111, busiest pipe 0.9. C is
    ///   below the compute-bound rule's 0.20 (the pipe, 0.9, is not), and at least the mixed
    ///   rule's 0.10: mixed.
    /// - τ 0, φ32 0.5, d 0.05: C = 0.034, busiest pipe 0.5. The stalled rule needs the pipe
    ///   below 0.10 (C is): not stalled; C below 0.10 and d below 0.15: not mixed;
    ///   underloaded.
    #[test]
    fn the_rules_read_the_compute_term_or_the_busiest_pipe_as_written() {
        let fp32 = |tau: f64, phi32: f64, d: f64| PhaseInputs {
            util: Some(1.0),
            sm_active: Some(0.5),
            compute: Some(tau + phi32 * 67.0 / 989.0),
            tensor: Some(tau),
            dram: Some(d),
            pipe: Some(phi32.max(tau)),
            ..Default::default()
        };
        assert_eq!(classify(&fp32(0.05, 0.9, 0.05)), Phase::Mixed);
        assert_eq!(classify(&fp32(0.0, 0.5, 0.05)), Phase::Underloaded);
    }

    #[test]
    fn enter_rules() {
        assert_eq!(classify(&counters(0.0, 0.0, 0.0, 0.0)), Phase::Idle);
        assert_eq!(
            classify(&counters(1.0, 1.0 / 132.0, 0.0, 0.0)),
            Phase::Stalled
        );
        assert_eq!(
            classify(&counters(1.0, 0.95, 0.6, 0.2)),
            Phase::ComputeBound
        );
        assert_eq!(classify(&counters(1.0, 0.9, 0.02, 0.6)), Phase::MemoryBound);
        assert_eq!(classify(&counters(1.0, 0.9, 0.3, 0.3)), Phase::Mixed);
        assert_eq!(
            classify(&counters(0.3, 0.1, 0.04, 0.08)),
            Phase::Underloaded
        );
    }

    /// Each enter rule at its edge, the spec's thresholds typed in (counter-science.md §6.4,
    /// not the defaults): on the threshold it holds, just past it it does not.
    #[test]
    fn enter_rules_at_their_edges() {
        // PREFILL: ρ ≥ 1.5 ∧ τ ≥ 0.20 (ρ = τ / max(d, 0.02)).
        // (0.375 / 0.25 is 1.5 exactly in binary; 0.30 / 0.20 is not.)
        assert_eq!(
            classify(&counters(1.0, 0.9, 0.375, 0.25)),
            Phase::ComputeBound
        );
        assert_eq!(classify(&counters(1.0, 0.9, 0.375, 0.2502)), Phase::Mixed);
        assert_eq!(
            classify(&counters(1.0, 0.9, 0.20, 0.10)),
            Phase::ComputeBound
        );
        assert_eq!(classify(&counters(1.0, 0.9, 0.199, 0.10)), Phase::Mixed);
        // DECODE: ρ ≤ 0.5 ∧ d ≥ 0.25.
        assert_eq!(
            classify(&counters(1.0, 0.9, 0.125, 0.25)),
            Phase::MemoryBound
        );
        assert_eq!(classify(&counters(1.0, 0.9, 0.126, 0.25)), Phase::Mixed);
        assert_eq!(classify(&counters(1.0, 0.9, 0.10, 0.249)), Phase::Mixed);
        // STALLED: u ≥ 0.5 ∧ τ < 0.05 ∧ d < 0.10 (busiest pipe < 0.10).
        assert_eq!(classify(&counters(0.5, 0.3, 0.049, 0.099)), Phase::Stalled);
        assert_eq!(
            classify(&counters(0.499, 0.3, 0.049, 0.099)),
            Phase::Underloaded
        );
        assert_eq!(
            classify(&counters(0.5, 0.3, 0.05, 0.099)),
            Phase::Underloaded
        );
        assert_eq!(
            classify(&counters(0.5, 0.3, 0.049, 0.10)),
            Phase::Underloaded
        );
        // IDLE: u < 0.05 ∧ s < 0.02.
        assert_eq!(classify(&counters(0.049, 0.019, 0.0, 0.0)), Phase::Idle);
        assert_eq!(
            classify(&counters(0.05, 0.019, 0.0, 0.0)),
            Phase::Underloaded
        );
        // Neither idle (SMs not quiet) nor underloaded (u < 0.05): no state of the spec's,
        // so unclassified, never the underloaded a fallback used to give.
        let unclassified = |i: &PhaseInputs| i.candidate(None, &PhaseConfig::default());
        assert_eq!(unclassified(&counters(0.049, 0.02, 0.0, 0.0)), None);
        // Quiet counters without a busy flag or GR-engine activity (a `dmon -e 1002,1004,1005`
        // capture): nothing says a kernel ran, and nothing says none did.
        let no_util = PhaseInputs {
            util: None,
            ..counters(0.0, 0.0, 0.0, 0.0)
        };
        assert_eq!(unclassified(&no_util), None);
        let no_util_busy_dram = PhaseInputs {
            util: None,
            ..counters(0.0, 0.5, 0.02, 0.6)
        };
        assert_eq!(
            unclassified(&no_util_busy_dram),
            Some((Phase::MemoryBound, PhaseMethod::Counters))
        );
        // MIXED: τ ≥ 0.10 ∨ d ≥ 0.15, none of the above.
        assert_eq!(classify(&counters(1.0, 0.9, 0.10, 0.14)), Phase::Mixed);
        assert_eq!(
            classify(&counters(1.0, 0.9, 0.099, 0.149)),
            Phase::Underloaded
        );
    }

    /// The power tier's edges (Tier B, §6.4): compute-bound at π ≥ 0.75; memory-bound at
    /// 0.30 ≤ π < 0.75 with u ≥ 0.8; stalled at π < 0.20 with u ≥ 0.8; idle at u < 0.05.
    #[test]
    fn power_rules_at_their_edges() {
        let c = PhaseConfig::default();
        let x = |u, pi| {
            PhaseInputs {
                util: Some(u),
                power_proxy: Some(pi),
                ..Default::default()
            }
            .candidate(None, &c)
            .map(|(p, _)| p)
        };
        assert_eq!(x(1.0, 0.75), Some(Phase::ComputeBound));
        assert_eq!(x(1.0, 0.7499), Some(Phase::MemoryBound));
        assert_eq!(x(0.8, 0.30), Some(Phase::MemoryBound));
        assert_eq!(x(0.799, 0.30).filter(|p| *p == Phase::MemoryBound), None);
        assert_eq!(x(0.8, 0.2999).filter(|p| *p == Phase::MemoryBound), None);
        assert_eq!(x(0.8, 0.1999), Some(Phase::Stalled));
        assert_eq!(x(0.8, 0.20).filter(|p| *p == Phase::Stalled), None);
        assert_eq!(x(0.049, 0.0), Some(Phase::Idle));
    }

    #[test]
    fn schmitt_thresholds_hold_a_state() {
        let c = PhaseConfig::default();
        // ρ = 1.2: below prefill's enter (1.5) but above its exit (1.0).
        let x = counters(1.0, 0.9, 0.36, 0.3);
        assert_eq!(x.candidate(None, &c).unwrap().0, Phase::Mixed);
        assert_eq!(
            x.candidate(Some(Phase::ComputeBound), &c).unwrap().0,
            Phase::ComputeBound
        );
    }

    /// Every other state's Schmitt band (spec §6.4 thresholds): inside it a held state stays
    /// where a fresh window would be classified otherwise, and just past the exit it leaves
    /// for what a fresh window gets. `counters(u, s, τ, d)`, ρ = τ / max(d, 0.02).
    #[test]
    fn schmitt_thresholds_hold_every_state() {
        use Phase::{ComputeBound, Idle, MemoryBound, Mixed, Stalled, Underloaded};
        let c = PhaseConfig::default();
        // (held, inside the band, fresh there, past the exit, fresh there)
        let cases = [
            // ρ 0.18 / 0.3 = 0.6: above decode's enter (0.5), not above its exit (0.7);
            // τ 0.18 ≥ 0.10: mixed. Past: ρ 0.24 / 0.3 = 0.8 > 0.7.
            (
                MemoryBound,
                (1.0, 0.9, 0.18, 0.3),
                Mixed,
                (1.0, 0.9, 0.24, 0.3),
                Mixed,
            ),
            // d 0.2: below decode's enter (0.25), not below its exit (0.15); ρ 0.1;
            // d ≥ 0.15: mixed. Past: d 0.14 < 0.15, τ 0.02 < 0.10: underloaded.
            (
                MemoryBound,
                (1.0, 0.9, 0.02, 0.2),
                Mixed,
                (1.0, 0.9, 0.02, 0.14),
                Underloaded,
            ),
            // τ 0.15: below prefill's enter (0.20), not below its exit (0.12); ρ = 3;
            // τ ≥ 0.10: mixed. Past: τ 0.11 < 0.12 (ρ 2.2), still ≥ 0.10: mixed.
            (
                ComputeBound,
                (1.0, 0.9, 0.15, 0.05),
                Mixed,
                (1.0, 0.9, 0.11, 0.05),
                Mixed,
            ),
            // τ 0.06 within [0.05, 0.08) and d 0.12 within [0.10, 0.15): not stalled's enter,
            // not its exit; ρ 0.5 but d < 0.25, τ < 0.10, d < 0.15: underloaded.
            // Past: d 0.16 ≥ 0.15: mixed.
            (
                Stalled,
                (1.0, 0.3, 0.06, 0.12),
                Underloaded,
                (1.0, 0.3, 0.06, 0.16),
                Mixed,
            ),
            // τ 0.06 alone in its band (d 0.05 < 0.10). Past: τ 0.09 ≥ 0.08.
            (
                Stalled,
                (1.0, 0.3, 0.06, 0.05),
                Underloaded,
                (1.0, 0.3, 0.09, 0.05),
                Underloaded,
            ),
            // u 0.45: below stalled's enter (0.5), not below its exit (0.4). Past: u 0.35.
            (
                Stalled,
                (0.45, 0.3, 0.0, 0.0),
                Underloaded,
                (0.35, 0.3, 0.0, 0.0),
                Underloaded,
            ),
            // u 0.07: not below idle's enter (0.05), below its exit (0.10); s 0.01 < 0.02.
            // Past: u 0.12 ≥ 0.10.
            (
                Idle,
                (0.07, 0.01, 0.0, 0.0),
                Underloaded,
                (0.12, 0.01, 0.0, 0.0),
                Underloaded,
            ),
        ];
        for (held, inside, fresh, past, left_for) in cases {
            let x = |(u, s, t, d)| counters(u, s, t, d);
            let at = |i: PhaseInputs, cur| i.candidate(cur, &c).unwrap().0;
            assert_eq!(at(x(inside), None), fresh, "{held} {inside:?} fresh");
            assert_eq!(at(x(inside), Some(held)), held, "{held} {inside:?} held");
            assert_eq!(at(x(past), None), left_for, "{held} {past:?} fresh");
            assert_eq!(at(x(past), Some(held)), left_for, "{held} {past:?} held");
        }
    }

    #[test]
    fn switching_needs_n_consecutive_windows() {
        let c = PhaseConfig {
            switch_after: 3,
            ..PhaseConfig::default()
        };
        let mut k = PhaseClassifier::default();
        let decode = counters(1.0, 0.9, 0.02, 0.6);
        let prefill = counters(1.0, 0.9, 0.6, 0.2);
        assert_eq!(k.observe(&decode, &c).unwrap().0, Phase::MemoryBound);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::MemoryBound);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::MemoryBound);
        // an interruption resets the count
        assert_eq!(k.observe(&decode, &c).unwrap().0, Phase::MemoryBound);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::MemoryBound);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::MemoryBound);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::ComputeBound);
    }

    /// The dwell is time: `switch_after` 2 waits one second after the first window that
    /// points to the new regime, whether the windows are 1 s (one more window) or 100 ms
    /// (ten more); `switch_after` 1 switches at once at any cadence.
    #[test]
    fn the_dwell_is_counted_in_seconds_not_windows() {
        let decode = counters(1.0, 0.9, 0.02, 0.6);
        let prefill = counters(1.0, 0.9, 0.6, 0.2);
        let m = PhaseMethod::Counters;
        for (n, dt, windows) in [
            (1, 0.1, 1),
            (1, 1.0, 1),
            (2, 1.0, 2),
            (2, 0.1, 11),
            (3, 0.25, 9),
        ] {
            let c = PhaseConfig {
                switch_after: n,
                ..PhaseConfig::default()
            };
            let mut k = PhaseClassifier::default();
            assert_eq!(
                k.observe_window(&decode, m, dt, &c),
                Some(Phase::MemoryBound)
            );
            for i in 1..=windows {
                let want = if i < windows {
                    Phase::MemoryBound
                } else {
                    Phase::ComputeBound
                };
                let got = k.observe_window(&prefill, m, dt, &c);
                assert_eq!(
                    got,
                    Some(want),
                    "switch_after {n}, {dt} s windows, window {i}"
                );
            }
            // An interruption restarts the dwell.
            let mut k = PhaseClassifier::default();
            k.observe_window(&decode, m, dt, &c);
            for _ in 1..windows {
                k.observe_window(&prefill, m, dt, &c);
            }
            k.observe_window(&decode, m, dt, &c);
            if windows > 1 {
                assert_eq!(
                    k.observe_window(&prefill, m, dt, &c),
                    Some(Phase::MemoryBound)
                );
            }
        }
        // At the nominal 1 s, observe_by is observe_window with 1 s windows.
        let c = PhaseConfig {
            switch_after: 3,
            ..PhaseConfig::default()
        };
        let (mut a, mut b) = (PhaseClassifier::default(), PhaseClassifier::default());
        for x in [
            decode, prefill, prefill, decode, prefill, prefill, prefill, decode,
        ] {
            assert_eq!(a.observe_by(&x, m, &c), b.observe_window(&x, m, 1.0, &c));
        }
        assert_eq!(c.dwell_seconds(), 2.0);
        assert_eq!(PhaseConfig::default().dwell_seconds(), 0.0);
    }

    #[test]
    fn power_heuristic_without_counters() {
        let c = PhaseConfig::default();
        let x = |u, pi| PhaseInputs {
            util: Some(u),
            power_proxy: Some(pi),
            ..Default::default()
        };
        assert_eq!(
            x(1.0, 0.95).candidate(None, &c),
            Some((Phase::ComputeBound, PhaseMethod::PowerHeuristic))
        );
        assert_eq!(
            x(1.0, 0.49).candidate(None, &c).unwrap().0,
            Phase::MemoryBound
        );
        assert_eq!(x(1.0, 0.05).candidate(None, &c).unwrap().0, Phase::Stalled);
        assert_eq!(x(0.01, 0.0).candidate(None, &c).unwrap().0, Phase::Idle);
        let busy_only = PhaseInputs {
            util: Some(0.9),
            ..Default::default()
        };
        assert_eq!(busy_only.candidate(None, &c), None);
    }
    #[test]
    fn a_stall_that_ends_goes_idle_within_the_dwell() {
        for n in [1, 3] {
            let c = PhaseConfig {
                switch_after: n,
                ..PhaseConfig::default()
            };
            let mut k = PhaseClassifier::default();
            let stalled = counters(1.0, 1.0 / 132.0, 0.0, 0.0);
            let off = counters(0.0, 0.0, 0.0, 0.0);
            let half = counters(0.3, 0.005, 0.0, 0.0);
            assert_eq!(k.observe(&stalled, &c).unwrap().0, Phase::Stalled);
            // The busy flag drops to 0: idle after exactly `n` windows, not when tensor or
            // DRAM activity rises (they never do here).
            for i in 1..=n {
                let got = k.observe(&off, &c).unwrap().0;
                let want = if i < n { Phase::Stalled } else { Phase::Idle };
                assert_eq!(got, want, "switch_after {n}, window {i}");
            }
            // Back to stalled, then the busy flag drops to 0.3 (below the stall's exit, above
            // idle's enter): underloaded, not stalled.
            let mut k = PhaseClassifier::default();
            k.observe(&stalled, &c);
            for _ in 0..n {
                k.observe(&half, &c);
            }
            assert_eq!(k.current(), Some(Phase::Underloaded), "switch_after {n}");
        }
    }

    /// Neither stalled nor underloaded: a DRAM counter not read could be a busy one (a
    /// decode step at u 1, SM 0.9, tensor 0.02 may wait on memory the whole time), so the
    /// window is not classified.
    #[test]
    fn a_missing_dram_counter_is_not_a_quiet_one() {
        let c = PhaseConfig::default();
        for (s, tau) in [(0.01, 0.0), (0.9, 0.02)] {
            let mut x = counters(1.0, s, tau, 0.0);
            x.dram = None;
            assert_eq!(x.candidate(None, &c), None);
            // and a stalled state ends when the DRAM counter goes missing
            assert_eq!(x.candidate(Some(Phase::Stalled), &c), None);
        }
    }

    #[test]
    fn idle_wins_over_a_held_state() {
        let c = PhaseConfig::default();
        let off = counters(0.0, 0.0, 0.0, 0.0);
        for held in [
            Phase::ComputeBound,
            Phase::MemoryBound,
            Phase::Stalled,
            Phase::Mixed,
        ] {
            assert_eq!(
                off.candidate(Some(held), &c).unwrap().0,
                Phase::Idle,
                "{held}"
            );
        }
    }

    #[test]
    fn observe_by_one_method_never_mixes_methods() {
        let c = PhaseConfig::default();
        let mut k = PhaseClassifier::default();
        let decode = counters(1.0, 0.9, 0.02, 0.6);
        assert_eq!(
            k.observe_by(&decode, PhaseMethod::Counters, &c),
            Some(Phase::MemoryBound)
        );
        // Tensor blank this window (multiplexing): not classified, state kept.
        let blank = PhaseInputs {
            compute: None,
            power_proxy: Some(0.95),
            ..decode
        };
        assert_eq!(k.observe_by(&blank, PhaseMethod::Counters, &c), None);
        assert_eq!(k.current(), Some(Phase::MemoryBound));
    }

    #[test]
    fn defaults_validate_and_bad_values_name_their_key() {
        assert_eq!(PhaseConfig::default().validate("derive.phase."), Ok(()));
        let bad = PhaseConfig {
            idle_enter_util: f64::NAN,
            stalled_exit_util: 0.6,
            memory_bound_enter_rho: 0.8,
            switch_after: 0,
            ..PhaseConfig::default()
        };
        let keys: Vec<String> = bad
            .validate("derive.phase.")
            .unwrap_err()
            .into_iter()
            .map(|p| p.key)
            .collect();
        assert_eq!(
            keys,
            [
                "derive.phase.idle_enter_util",
                "derive.phase.switch_after",
                "derive.phase.stalled_exit_util",
                "derive.phase.memory_bound_enter_rho",
            ]
        );
    }
}

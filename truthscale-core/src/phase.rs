//! The phase classifier: idle, prefill, decode, mixed, stalled, underloaded.
//!
//! Each state has an enter rule and an exit rule (Schmitt-trigger thresholds): the
//! classifier stays in its state until that state's exit rule holds, and then needs
//! `switch_after` consecutive windows agreeing on a new state before it switches.

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
    /// Stalled: exit when tensor activity reaches this …
    pub stalled_exit_tensor: f64,
    /// … or DRAM activity reaches this.
    pub stalled_exit_dram: f64,
    /// Prefill: enter when ρ is at least this …
    pub prefill_enter_rho: f64,
    /// … and tensor activity at least this.
    pub prefill_enter_tensor: f64,
    /// Prefill: exit when ρ falls below this …
    pub prefill_exit_rho: f64,
    /// … or tensor activity below this.
    pub prefill_exit_tensor: f64,
    /// Decode: enter when ρ is at most this …
    pub decode_enter_rho: f64,
    /// … and DRAM activity at least this.
    pub decode_enter_dram: f64,
    /// Decode: exit when ρ rises above this …
    pub decode_exit_rho: f64,
    /// … or DRAM activity falls below this.
    pub decode_exit_dram: f64,
    /// Mixed: tensor activity that counts as meaningful work.
    pub mixed_tensor: f64,
    /// Mixed: DRAM activity that counts as meaningful work.
    pub mixed_dram: f64,
    /// Power-heuristic tier: prefill when the power proxy is at least this.
    pub power_prefill: f64,
    /// Power-heuristic tier: decode when the power proxy is at least this (and `u` high).
    pub power_decode: f64,
    /// Power-heuristic tier: stalled when the power proxy is below this (and `u` high).
    pub power_stalled: f64,
    /// Power-heuristic tier: what counts as a high busy flag.
    pub power_busy_util: f64,
    /// Consecutive windows that must agree before the phase switches (1 = no delay).
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
            stalled_exit_tensor: 0.08,
            stalled_exit_dram: 0.15,
            prefill_enter_rho: 1.5,
            prefill_enter_tensor: 0.20,
            prefill_exit_rho: 1.0,
            prefill_exit_tensor: 0.12,
            decode_enter_rho: 0.5,
            decode_enter_dram: 0.25,
            decode_exit_rho: 0.7,
            decode_exit_dram: 0.15,
            mixed_tensor: 0.10,
            mixed_dram: 0.15,
            power_prefill: 0.75,
            power_decode: 0.30,
            power_stalled: 0.20,
            power_busy_util: 0.8,
            switch_after: 1,
        }
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
}

/// How the phase of a window was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseMethod {
    /// From tensor and DRAM counters.
    Counters,
    /// From the busy flag and the power proxy (an estimate).
    PowerHeuristic,
}

const RHO_FLOOR: f64 = 0.02;

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
            Phase::Stalled => {
                u.is_some_and(|u| u >= c.stalled_enter_util)
                    && tau.is_some_and(|t| t < c.stalled_enter_tensor)
                    && d.is_none_or(|d| d < c.stalled_enter_dram)
                    && self.pipe.is_none_or(|p| p < c.stalled_enter_pipe)
            }
            Phase::Prefill => {
                rho.is_some_and(|r| r >= c.prefill_enter_rho)
                    && tau.is_some_and(|t| t >= c.prefill_enter_tensor)
            }
            Phase::Decode => {
                rho.is_some_and(|r| r <= c.decode_enter_rho)
                    && d.is_some_and(|d| d >= c.decode_enter_dram)
            }
            Phase::Mixed => {
                tau.is_some_and(|t| t >= c.mixed_tensor) || d.is_some_and(|d| d >= c.mixed_dram)
            }
            Phase::Underloaded => u.is_some_and(|u| u >= c.idle_enter_util),
        }
    }

    fn exits(&self, p: Phase, c: &PhaseConfig) -> bool {
        let (tau, d, rho) = (self.compute, self.dram, self.rho());
        match p {
            Phase::Idle => self.util.is_none_or(|u| u >= c.idle_exit_util),
            Phase::Stalled => {
                tau.is_none_or(|t| t >= c.stalled_exit_tensor)
                    || d.is_some_and(|d| d >= c.stalled_exit_dram)
            }
            Phase::Prefill => {
                rho.is_none_or(|r| r < c.prefill_exit_rho)
                    || tau.is_none_or(|t| t < c.prefill_exit_tensor)
            }
            Phase::Decode => {
                rho.is_none_or(|r| r > c.decode_exit_rho)
                    || d.is_none_or(|d| d < c.decode_exit_dram)
            }
            // Mixed and underloaded have no exit rule of their own: any other enter rule wins.
            Phase::Mixed | Phase::Underloaded => true,
        }
    }

    /// The state these inputs point to, given the current state (no dwell counting).
    #[must_use]
    pub fn candidate(
        &self,
        current: Option<Phase>,
        c: &PhaseConfig,
    ) -> Option<(Phase, PhaseMethod)> {
        if self.compute.is_some() {
            if let Some(cur) = current
                && !self.exits(cur, c)
            {
                return Some((cur, PhaseMethod::Counters));
            }
            let order = [
                Phase::Idle,
                Phase::Stalled,
                Phase::Prefill,
                Phase::Decode,
                Phase::Mixed,
                Phase::Underloaded,
            ];
            let found = order.into_iter().find(|&p| self.enters(p, c));
            let found = found.or(match (self.util, self.dram) {
                (None, None) => None,
                _ => Some(Phase::Underloaded),
            });
            return found.map(|p| (p, PhaseMethod::Counters));
        }
        let u = self.util?;
        if u < c.idle_enter_util {
            return Some((Phase::Idle, PhaseMethod::PowerHeuristic));
        }
        let pi = self.power_proxy?;
        let p = if pi >= c.power_prefill || (self.power_capped && u >= 0.9) {
            Phase::Prefill
        } else if u >= c.power_busy_util && pi < c.power_stalled {
            Phase::Stalled
        } else if u >= c.power_busy_util && pi >= c.power_decode {
            Phase::Decode
        } else {
            Phase::Underloaded
        };
        Some((p, PhaseMethod::PowerHeuristic))
    }
}

/// Stateful classifier for one entity.
#[derive(Debug, Clone, Default)]
pub struct PhaseClassifier {
    current: Option<Phase>,
    pending: Option<(Phase, u32)>,
}

impl PhaseClassifier {
    /// The current phase, if any window has been classified.
    #[must_use]
    pub fn current(&self) -> Option<Phase> {
        self.current
    }

    /// Feed one window; returns the phase after hysteresis, and how it was decided.
    pub fn observe(
        &mut self,
        inputs: &PhaseInputs,
        c: &PhaseConfig,
    ) -> Option<(Phase, PhaseMethod)> {
        let (cand, method) = inputs.candidate(self.current, c)?;
        match self.current {
            None => {
                self.current = Some(cand);
                self.pending = None;
            }
            Some(cur) if cur == cand => self.pending = None,
            Some(_) => {
                let n = match self.pending {
                    Some((p, n)) if p == cand => n + 1,
                    _ => 1,
                };
                if n >= c.switch_after.max(1) {
                    self.current = Some(cand);
                    self.pending = None;
                } else {
                    self.pending = Some((cand, n));
                }
            }
        }
        self.current.map(|p| (p, method))
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

    #[test]
    fn enter_rules() {
        assert_eq!(classify(&counters(0.0, 0.0, 0.0, 0.0)), Phase::Idle);
        assert_eq!(
            classify(&counters(1.0, 1.0 / 132.0, 0.0, 0.0)),
            Phase::Stalled
        );
        assert_eq!(classify(&counters(1.0, 0.95, 0.6, 0.2)), Phase::Prefill);
        assert_eq!(classify(&counters(1.0, 0.9, 0.02, 0.6)), Phase::Decode);
        assert_eq!(classify(&counters(1.0, 0.9, 0.3, 0.3)), Phase::Mixed);
        assert_eq!(
            classify(&counters(0.3, 0.1, 0.04, 0.08)),
            Phase::Underloaded
        );
    }

    #[test]
    fn schmitt_thresholds_hold_a_state() {
        let c = PhaseConfig::default();
        // ρ = 1.2: below prefill's enter (1.5) but above its exit (1.0).
        let x = counters(1.0, 0.9, 0.36, 0.3);
        assert_eq!(x.candidate(None, &c).unwrap().0, Phase::Mixed);
        assert_eq!(
            x.candidate(Some(Phase::Prefill), &c).unwrap().0,
            Phase::Prefill
        );
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
        assert_eq!(k.observe(&decode, &c).unwrap().0, Phase::Decode);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::Decode);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::Decode);
        // an interruption resets the count
        assert_eq!(k.observe(&decode, &c).unwrap().0, Phase::Decode);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::Decode);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::Decode);
        assert_eq!(k.observe(&prefill, &c).unwrap().0, Phase::Prefill);
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
            Some((Phase::Prefill, PhaseMethod::PowerHeuristic))
        );
        assert_eq!(x(1.0, 0.49).candidate(None, &c).unwrap().0, Phase::Decode);
        assert_eq!(x(1.0, 0.05).candidate(None, &c).unwrap().0, Phase::Stalled);
        assert_eq!(x(0.01, 0.0).candidate(None, &c).unwrap().0, Phase::Idle);
        let busy_only = PhaseInputs {
            util: Some(0.9),
            ..Default::default()
        };
        assert_eq!(busy_only.candidate(None, &c), None);
    }
}

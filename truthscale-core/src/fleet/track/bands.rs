//! The bands a coarse step's time is read in for the sizing: quantiles of its raw samples,
//! each held for its share of the step.

use serde::Serialize;

/// The bands a coarse step's raw samples are read in for the sizing ([`STEP_QUANTILES`]).
pub const BANDS: usize = 4;
/// The quantiles of a coarse step's raw samples the sizing reads: each is the upper edge of
/// a band of the step's time (the lowest half, the next 40 %, the next 9 %, the top 1 %),
/// held for that band's share of the step ([`StepBands`]).
pub const STEP_QUANTILES: [f64; BANDS] = [0.5, 0.9, 0.99, 1.0];
/// The units of a step's weight in [`StepBands`]: 10⁻⁴ of a step.
pub const STEP_WEIGHT_UNITS: u32 = 10_000;
/// The band of [`STEP_QUANTILES`] that is the step's p99.
pub const P99_BAND: usize = 2;

/// How a coarse step's time is shared between its [`STEP_QUANTILES`]: band `j` holds the
/// quantile `STEP_QUANTILES[j]` of the step's raw samples for `weights[j]` of the step, in
/// [`STEP_WEIGHT_UNITS`]. Every raw sample is at most its band's upper edge, so the time a
/// workload spends above any level is never counted short by more than one raw sample a
/// step, and a burst shorter than a step weighs about its real duration, not the whole
/// step's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StepBands {
    /// Each band's share of the step, in [`STEP_WEIGHT_UNITS`] (they add up to one step).
    pub weights: [u32; BANDS],
}

impl StepBands {
    /// The bands of a step holding about `samples` raw samples (the step over the scrape
    /// interval): each band's share is the quantiles' difference, and the top band's at
    /// least one raw sample's (taken from the bands below it, from the top down), since the
    /// highest sample holds that much of the step whatever the quantile says.
    #[must_use]
    pub fn for_samples(samples: f64) -> StepBands {
        let mut weights = [0u32; BANDS];
        let mut below = 0u32;
        for (w, q) in weights.iter_mut().zip(STEP_QUANTILES) {
            let upper = (q * f64::from(STEP_WEIGHT_UNITS)).round() as u32;
            *w = upper - below;
            below = upper;
        }
        let one = if samples.is_finite() && samples >= 1.0 {
            (f64::from(STEP_WEIGHT_UNITS) / samples).ceil() as u32
        } else {
            STEP_WEIGHT_UNITS
        };
        let mut need = one
            .min(STEP_WEIGHT_UNITS)
            .saturating_sub(weights[BANDS - 1]);
        weights[BANDS - 1] += need;
        for w in weights[..BANDS - 1].iter_mut().rev() {
            let take = need.min(*w);
            *w -= take;
            need -= take;
        }
        StepBands { weights }
    }
}

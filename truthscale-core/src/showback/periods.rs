//! Where a showback's periods fall: every `per` steps, or cut on the calendar's boundaries
//! (`ShowbackConfig::period_offset`), the first and last then partial.

use super::Window;

impl Window<'_> {
    /// The period step `s` falls in.
    pub(super) fn period_of(&self, s: usize) -> usize {
        match self.offset {
            0 => s / self.per,
            o if s < o => 0,
            o => 1 + (s - o) / self.per,
        }
    }

    /// Period `k`'s first step.
    pub(super) fn period_start(&self, k: usize) -> usize {
        match (self.offset, k) {
            (0, k) => k * self.per,
            (_, 0) => 0,
            (o, k) => o + (k - 1) * self.per,
        }
    }

    /// The periods of `steps` steps: one more than the whole ones where the first is cut.
    pub(super) fn periods(&self, steps: usize) -> usize {
        match self.offset {
            0 => steps.div_ceil(self.per).max(1),
            o => 1 + steps.saturating_sub(o).div_ceil(self.per),
        }
    }
}

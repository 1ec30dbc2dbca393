//! The critical XID events of a GPU's last five minutes, counted as dcgm-exporter counts
//! them in its own window (`--xid-count-window-size`, 5 minutes by default): every XID of a
//! poll, not only its last, so a fatal XID followed in the same tick by the cleanup XID it
//! causes still makes the GPU unavailable for the window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};
use truthscale_core::health::fatal_xid;

/// How long an XID is counted: dcgm-exporter's default window.
pub(super) const XID_WINDOW: Duration = Duration::from_secs(300);

/// The XIDs polled within [`XID_WINDOW`]: one entry per poll and XID code, with how many
/// times the code came in that poll (at most 64 events a poll).
#[derive(Debug, Default)]
pub(super) struct XidWindow {
    seen: VecDeque<(Instant, u64, u32)>,
}

impl XidWindow {
    /// The XIDs one poll at `now` gave, oldest first.
    pub(super) fn add(&mut self, now: Instant, xids: &[u64]) {
        for &x in xids {
            match self
                .seen
                .iter_mut()
                .rev()
                .take_while(|(at, ..)| *at == now)
                .find(|(_, code, _)| *code == x)
            {
                Some((.., n)) => *n += 1,
                None => self.seen.push_back((now, x, 1)),
            }
        }
    }

    /// The XIDs counted within the window ending at `now` (older ones forgotten), and the
    /// fatal one counted most (the lowest code on a tie), 0 for none: what
    /// `XidWindowErrors` and `XidWindowFatal` read.
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
    pub(super) fn counts(&mut self, now: Instant) -> (f64, f64) {
        while self
            .seen
            .front()
            .is_some_and(|(at, ..)| now.duration_since(*at) >= XID_WINDOW)
        {
            self.seen.pop_front();
        }
        let mut total = 0u64;
        let mut fatal: Vec<(u64, u64)> = Vec::new();
        for &(_, code, n) in &self.seen {
            total += u64::from(n);
            if fatal_xid(code as f64).is_some() {
                match fatal.iter_mut().find(|(c, _)| *c == code) {
                    Some((_, count)) => *count += u64::from(n),
                    None => fatal.push((code, u64::from(n))),
                }
            }
        }
        let most = fatal
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .map_or(0.0, |(code, _)| code as f64);
        (total as f64, most)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fatal XID (95) followed in the same poll by the cleanup XID it causes (45): both
    /// counted, 95 the window's fatal one while the last XID reads 45. Of 48 and 94 counted
    /// twice each, the lower; five minutes on, all forgotten: 0 and 0, measured.
    #[test]
    fn every_xid_of_a_poll_counts_for_five_minutes() {
        let t0 = Instant::now();
        let mut w = XidWindow::default();
        w.add(t0, &[95, 45]);
        assert_eq!(w.counts(t0), (2.0, 95.0));
        let t1 = t0 + Duration::from_secs(10);
        w.add(t1, &[48, 94, 13, 94]);
        w.add(t1 + Duration::from_secs(1), &[48]);
        assert_eq!(w.counts(t1 + Duration::from_secs(1)), (7.0, 48.0));
        // 95 leaves the window at five minutes after it came.
        assert_eq!(w.counts(t0 + XID_WINDOW), (5.0, 48.0));
        assert_eq!(w.counts(t1 + Duration::from_secs(301)), (0.0, 0.0));
        assert!(w.seen.is_empty());
    }
}

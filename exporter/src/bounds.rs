//! The caps on what a reader keeps of one answer from a peer it does not trust (a
//! dcgm-exporter, the kubelet, the API server, a GPU's process list), so that memory is
//! bounded by these and by `max_series`, not by the size of the answer. What is over a cap
//! is left out whole (never truncated into a value nobody wrote) and counted as the
//! reader's `over_limit` error (`SourceError::OverLimit`), once per answer, with a message
//! saying how much by cap.
//!
//! | cap | value | why this size |
//! |---|---|---|
//! | entities per dcgm-exporter answer | 1 024 | a node has at most 8–16 GPUs, 7 MIG instances each |
//! | bytes of a label value | 1 024 | Kubernetes names are at most 253 bytes, label values 63 |
//! | labels of one series or pod | 256 | far above what a pod or a dcgm-exporter series carries |
//! | pods in the API server's list | 10 000 | the list is of this node's pods (110 by default) |
//! | holders of one device | 256 | time-slicing replicas are tens per GPU |
//! | processes of one GPU | 1 024 | more than a GPU's memory can hold contexts for |

use truthscale_core::parse::dcgm_text::{Limits, Refused};

/// Entities kept of one dcgm-exporter answer.
pub(crate) const MAX_ENTITIES: usize = 1024;
/// Bytes of a label value (pod, namespace and container names, pod labels, dcgm-exporter
/// labels).
pub(crate) const MAX_LABEL_BYTES: usize = 1024;
/// Labels of one series (dcgm-exporter) or one pod (the API server's list).
pub(crate) const MAX_LABELS: usize = 256;
/// Pods kept of the API server's list.
pub(crate) const MAX_PODS: usize = 10_000;
/// Holders (containers, time-slicing replicas) kept of one device.
pub(crate) const MAX_HOLDERS: usize = 256;
/// Processes kept of one GPU.
pub(crate) const MAX_PROCESSES: usize = 1024;

/// The caps of a dcgm-exporter answer.
pub(crate) const DCGM_EXPORTER: Limits = Limits {
    max_entities: MAX_ENTITIES,
    max_label_bytes: MAX_LABEL_BYTES,
    max_labels: MAX_LABELS,
};

/// Whether a name or label value fits [`MAX_LABEL_BYTES`].
#[must_use]
pub(crate) fn fits(value: &str) -> bool {
    value.len() <= MAX_LABEL_BYTES
}

/// What one reader left out of one answer, by cap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeftOut(Vec<(String, u64)>);

impl LeftOut {
    /// Count `n` things left out by the cap described as `what` (a plural noun phrase:
    /// "pods past 10000").
    pub(crate) fn add(&mut self, what: impl Into<String>, n: u64) {
        if n == 0 {
            return;
        }
        let what = what.into();
        match self.0.iter_mut().find(|(w, _)| *w == what) {
            Some((_, c)) => *c += n,
            None => self.0.push((what, n)),
        }
    }

    /// What a dcgm-exporter parser's caps left out.
    #[must_use]
    pub(crate) fn of_scrape(r: Refused) -> LeftOut {
        let mut l = LeftOut::default();
        l.add(
            format!("lines of entities past the cap of {MAX_ENTITIES} entities"),
            r.entities,
        );
        l.add(
            format!("lines with a label value over {MAX_LABEL_BYTES} bytes"),
            r.long_values,
        );
        l.add(
            format!("lines with more than {MAX_LABELS} labels"),
            r.label_sets,
        );
        l
    }

    /// What was left out of this answer from `peer`, when anything was: the message of
    /// its one `over_limit` error.
    #[must_use]
    pub(crate) fn message(&self, peer: &str) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let parts: Vec<String> = self.0.iter().map(|(w, n)| format!("{n} {w}")).collect();
        Some(format!(
            "{peer}: left out {} (the reader's caps bound its memory; see docs/reliability.md)",
            parts.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_out_is_one_counted_error_per_answer() {
        let mut l = LeftOut::default();
        assert!(l.message("x").is_none());
        l.add("pods past 10000", 3);
        l.add("labels over 1024 bytes", 0);
        l.add("pods past 10000", 2);
        assert_eq!(
            l.message("the API server").expect("a message"),
            "the API server: left out 5 pods past 10000 (the reader's caps bound its memory; see docs/reliability.md)"
        );
    }
}

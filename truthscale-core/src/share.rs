//! Shares of a shared GPU: a device value apportioned to the pods whose processes ran on it,
//! by each pod's share of the processes' SM busy time. An estimate (the counters are the
//! device's); the per-pod values sum to the device value exactly.

use crate::model::{PodRef, ProcessReading};

/// One pod's part of a device's processes: its SM busy (summed over its processes) and the
/// memory they use (`None` when any of them did not report it). `pod` is `None` for
/// processes whose pod was not found.
#[derive(Debug, Clone, PartialEq)]
pub struct PodPart<'a> {
    /// The pod, when found.
    pub pod: Option<&'a PodRef>,
    /// Summed SM busy fraction of its processes.
    pub sm_busy: f64,
    /// Summed GPU memory of its processes, in bytes.
    pub memory_bytes: Option<f64>,
}

/// The processes grouped by pod, in the order pods first appear; `None` when any process
/// did not report its SM busy (then no share can be computed honestly).
#[must_use]
pub fn by_pod(processes: &[ProcessReading]) -> Option<Vec<PodPart<'_>>> {
    let mut parts: Vec<PodPart<'_>> = Vec::new();
    for p in processes {
        let sm = p.sm_busy.filter(|v| v.is_finite() && *v >= 0.0)?;
        let pod = p.pod.as_ref();
        let memory = p.used_memory_bytes.filter(|v| v.is_finite() && *v >= 0.0);
        match parts.iter_mut().find(|x| x.pod == pod) {
            Some(x) => {
                x.sm_busy += sm;
                x.memory_bytes = x.memory_bytes.zip(memory).map(|(a, b)| a + b);
            }
            None => parts.push(PodPart {
                pod,
                sm_busy: sm,
                memory_bytes: memory,
            }),
        }
    }
    Some(parts)
}

/// `total` split in proportion to `weights`; the last part of a weight above 0 takes the
/// remainder, so the parts sum to `total` (a part of weight 0 is 0 exactly: given the
/// remainder, rounding made it a hair below 0, a counter's fall). `None` when the weights
/// sum to nothing (no share is known).
#[must_use]
pub fn apportion(total: f64, weights: &[f64]) -> Option<Vec<f64>> {
    let sum: f64 = weights.iter().sum();
    if !(sum > 0.0 && sum.is_finite() && total.is_finite()) {
        return None;
    }
    let mut out: Vec<f64> = weights.iter().map(|w| total * (w / sum)).collect();
    if let Some(r) = weights.iter().rposition(|w| *w > 0.0) {
        let rest: f64 = out[..r].iter().chain(&out[r + 1..]).sum();
        // Never below 0 for a total of 0 or more, whatever the rounding.
        out[r] = if total >= 0.0 {
            (total - rest).max(0.0)
        } else {
            total - rest
        };
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pod: Option<&str>, sm: Option<f64>, mem: Option<f64>) -> ProcessReading {
        ProcessReading {
            pid: "1".into(),
            sm_busy: sm,
            used_memory_bytes: mem,
            pod: pod.map(|p| PodRef {
                pod: p.into(),
                namespace: Some("ns".into()),
                container: None,
            }),
            ..ProcessReading::default()
        }
    }

    #[test]
    fn shares_sum_to_the_device_value() {
        let parts = apportion(0.37, &[0.6, 0.3, 0.1]).unwrap();
        assert_eq!(parts.iter().sum::<f64>(), 0.37);
        assert!((parts[0] - 0.222).abs() < 1e-15);
        assert!((parts[1] - 0.111).abs() < 1e-15);
        assert_eq!(apportion(0.5, &[0.0, 0.0]), None, "no share known");
        // A weight of 0 listed last: its part is 0, never a hair below (a pod's counter
        // would fall), and the others sum to the total.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..20_000 {
            let (a, b, total) = (next(), next(), next() * 1000.0);
            let parts = apportion(total, &[a, b, 0.0]).unwrap();
            assert_eq!(parts[2], 0.0, "{a} {b} {total}");
            assert!(parts.iter().all(|p| *p >= 0.0), "{parts:?}");
            assert!((parts.iter().sum::<f64>() - total).abs() <= total * 1e-15);
        }
        assert_eq!(apportion(0.5, &[]), None);
        assert_eq!(apportion(f64::NAN, &[1.0]), None);
    }

    #[test]
    fn processes_group_by_pod_and_unknowns_stay_unknown() {
        let ps = [
            proc(Some("a"), Some(0.4), Some(10.0)),
            proc(Some("b"), Some(0.3), Some(5.0)),
            proc(Some("a"), Some(0.2), Some(1.0)),
            proc(None, Some(0.1), None),
        ];
        let parts = by_pod(&ps).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].pod.map(|p| p.pod.as_str()), Some("a"));
        assert!((parts[0].sm_busy - 0.6).abs() < 1e-15);
        assert_eq!(parts[0].memory_bytes, Some(11.0));
        assert_eq!(parts[2].pod, None);
        assert_eq!(parts[2].memory_bytes, None, "not reported is not zero");
        // One process without SM busy: no share can be computed.
        assert_eq!(by_pod(&[proc(Some("a"), None, Some(1.0))]), None);
    }
}

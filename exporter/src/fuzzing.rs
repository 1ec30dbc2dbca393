//! The fuzz targets' way into readers that are not part of the embedding API (`fuzz/`):
//! compiled only with the `fuzzing` feature, and not a stable interface. Each entry point
//! reads what a hostile peer could send and checks the reader's caps held.

use crate::attribution::allocations::{Allocations, seen_parts};
use crate::attribution::apiserver::{PodLabels, label_keys};
use crate::attribution::kubelet::proto;
use crate::attribution::kubelet_codec::decode_answer;
use crate::bounds::{MAX_ENTITIES, MAX_HOLDERS, MAX_LABEL_BYTES, MAX_PODS};
use crate::pipeline::Answer as _;
use prost::Message as _;

/// A kubelet `List` answer as protobuf bytes, read as the client reads it (decoded under
/// the caps, `kubelet_codec::decode_answer`): `None` when it does not decode; else the
/// number of devices with holders. Panics when a cap does not hold, or when the answer
/// decodes into the generated structs and gives other allocations from them.
#[must_use]
pub fn kubelet_answer(bytes: &[u8]) -> Option<usize> {
    let patterns = [
        "nvidia.com/gpu*".to_string(),
        "nvidia.com/mig-*".to_string(),
    ];
    let decoded = decode_answer(bytes, &patterns);
    if let Ok(r) = proto::ListPodResourcesResponse::decode(bytes) {
        let reference = Allocations::from_response(&r, &patterns);
        assert_eq!(
            decoded.as_ref().ok(),
            Some(&reference),
            "not as prost reads it"
        );
    }
    let a = decoded.ok()?;
    let devices = a.devices();
    assert!(devices.len() <= MAX_ENTITIES, "{} devices", devices.len());
    for holders in devices.values() {
        assert!(holders.len() <= MAX_HOLDERS, "{} holders", holders.len());
        for h in holders {
            for n in [
                Some(&h.pod.pod),
                h.pod.namespace.as_ref(),
                h.pod.container.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                assert!(n.len() <= MAX_LABEL_BYTES, "a name of {} bytes", n.len());
            }
        }
    }
    let _ = a.left_out();
    Some(devices.len())
}

/// An API server pod list body, keeping the labels `team` and `app.kubernetes.io/name`:
/// `Err` when it is not a pod list; else the pods kept. Panics when a cap does not hold.
///
/// # Errors
/// The body is not a pod list.
pub fn pod_list(body: &str) -> Result<usize, String> {
    let keys = label_keys(&["team".to_string(), "app.kubernetes.io/name".to_string()])
        .map_err(|e| e.message)?;
    let l = PodLabels::from_json(body, &keys)?;
    assert!(l.pods() <= MAX_PODS, "{} pods", l.pods());
    for labels in l.all_labels() {
        for (_, v) in labels {
            assert!(v.len() <= MAX_LABEL_BYTES, "a value of {} bytes", v.len());
            assert!(!v.is_empty(), "an empty value kept");
        }
    }
    let _ = l.left_out();
    Ok(l.pods())
}

/// What a process's `/proc/<pid>/cgroup` and `environ` say of it: (pod UID, container id,
/// hostname). Panics when a pod UID is empty or a hostname holds a NUL.
#[must_use]
pub fn proc_files(
    cgroup: &[u8],
    environ: &[u8],
) -> (Option<String>, Option<String>, Option<String>) {
    let (uid, container, hostname) = seen_parts(cgroup, environ);
    if let Some(u) = &uid {
        assert!(!u.is_empty(), "an empty pod UID");
    }
    assert!(
        uid.is_some() || hostname.is_none(),
        "a hostname without a pod"
    );
    if let Some(h) = &hostname {
        assert!(!h.contains('\0'), "a NUL in {h:?}");
    }
    (uid, container, hostname)
}

/// A pod's cgroup v2 files as node mode's holder pressure reads them: the same bytes read as
/// `cpu.stat`, `cpu.max` and a PSI file (`cpu.pressure`, `io.pressure`,
/// `memory.pressure`). Panics when a parse holds what the text does not say: throttled
/// periods without periods written, a CPU limit that is not finite and positive, or a PSI
/// file with neither line.
#[must_use]
pub fn cgroup_files(bytes: &[u8]) -> (bool, bool, bool) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return (false, false, false);
    };
    let stat = crate::cgroup::parse_cpu_stat(text);
    if stat.is_ok() {
        assert!(
            text.contains("nr_periods") && text.contains("nr_throttled"),
            "{text:?}"
        );
    }
    let max = crate::cgroup::parse_cpu_max(text);
    if let Ok(crate::cgroup::CpuMax::Cores(c)) = max {
        assert!(c.is_finite() && c > 0.0, "{c} CPUs from {text:?}");
    }
    let psi = crate::cgroup::parse_pressure(text);
    if let Ok(p) = psi {
        assert!(p.some_usec.is_some() || p.full_usec.is_some(), "{text:?}");
    }
    (stat.is_ok(), max.is_ok(), psi.is_ok())
}

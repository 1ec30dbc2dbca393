//! Which Kubernetes pod and container a process belongs to, from `/proc/<pid>/cgroup`.
//!
//! The kubelet puts each pod in a cgroup named after its UID and each container in a child
//! named after its container id:
//!
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID
//!   with _ for ->.slice/cri-containerd-<id>.scope` (also `docker-`, `crio-`);
//! - cgroupfs driver: `/kubepods/burstable/pod<UID>/<id>` (`/kubepods/pod<UID>/<id>` for
//!   Guaranteed pods).
//!
//! NVML reports host PIDs; inside a container with its own PID namespace they are not
//! visible in `/proc`, and nothing is attributed.

/// A process's pod UID and container id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attribution {
    /// Pod UID (`1b4e28ba-2fa1-11d2-883f-0016d3cca427`).
    pub pod_uid: String,
    /// Container id (64 hex digits), when the path names one.
    pub container_id: Option<String>,
}

/// Read and parse `/proc/<pid>/cgroup`; `None` when the process is not visible or not in a
/// Kubernetes pod.
#[must_use]
pub(crate) fn of_pid(pid: u32) -> Option<Attribution> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse(&text)
}

/// Parse the text of a `/proc/<pid>/cgroup` file (`ID:CONTROLLERS:PATH` lines, v1 or v2).
#[must_use]
pub(crate) fn parse(text: &str) -> Option<Attribution> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(parse_path)
}

fn is_uid(s: &str) -> bool {
    s.len() == 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn parse_path(path: &str) -> Option<Attribution> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let kube = segs.iter().position(|s| s.starts_with("kubepods"))?;
    for (i, seg) in segs.iter().enumerate().skip(kube) {
        let raw = if let Some(rest) = seg.strip_prefix("pod") {
            rest
        } else if let Some(stem) = seg.strip_suffix(".slice")
            && let Some(pos) = stem.rfind("-pod")
        {
            &stem[pos + 4..]
        } else {
            continue;
        };
        let uid = raw.replace('_', "-");
        if !is_uid(&uid) {
            continue;
        }
        let container_id = segs.get(i + 1).and_then(|c| container_id(c));
        return Some(Attribution {
            pod_uid: uid,
            container_id,
        });
    }
    None
}

fn container_id(seg: &str) -> Option<String> {
    let s = seg.strip_suffix(".scope").unwrap_or(seg);
    let s = ["cri-containerd-", "docker-", "crio-", "containerd-"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
        .unwrap_or(s);
    (s.len() >= 12 && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn systemd_driver_cgroup_v2() {
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(
            parse(&text),
            Some(Attribution {
                pod_uid: UID.into(),
                container_id: Some(CID.into())
            })
        );
    }

    #[test]
    fn cgroupfs_driver_v1_and_guaranteed_pods() {
        let text = format!(
            "12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        );
        let a = parse(&text).unwrap();
        assert_eq!(a.pod_uid, UID);
        assert_eq!(a.container_id.as_deref(), Some(CID));
        let a = parse(&format!("0::/kubepods/pod{UID}/docker-{CID}.scope")).unwrap();
        assert_eq!(a.container_id.as_deref(), Some(CID));
        let a = parse(&format!(
            "0::/kubepods.slice/kubepods-pod{}.slice",
            UID.replace('-', "_")
        ))
        .unwrap();
        assert_eq!((a.pod_uid.as_str(), a.container_id), (UID, None));
    }

    #[test]
    fn cri_o_and_cgroupfs_v2() {
        // cri-o under the systemd driver (v2 unified hierarchy).
        let a = parse(&format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/crio-{CID}.scope\n",
            UID.replace('-', "_")
        ))
        .unwrap();
        assert_eq!(a.pod_uid, UID);
        assert_eq!(a.container_id.as_deref(), Some(CID));
        // containerd under the cgroupfs driver, v2.
        let a = parse(&format!("0::/kubepods/besteffort/pod{UID}/{CID}\n")).unwrap();
        assert_eq!(
            (a.pod_uid.as_str(), a.container_id.as_deref()),
            (UID, Some(CID))
        );
    }

    #[test]
    fn not_a_pod() {
        assert_eq!(
            parse("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(parse("0::/system.slice/podman.service\n"), None);
        assert_eq!(parse("0::/kubepods/burstable/podnot-a-uid/abc\n"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("garbage"), None);
    }
}

//! The kubelet's settings: node mode's `[node]` and the sidecar's `sidecar.pod_resources`,
//! each checked into its settings.

use super::apiserver::PodLabelSettings;
use crate::setting::Invalid;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kubelet's default PodResources socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Where the host's cgroup v2 hierarchy is mounted, by default.
pub(crate) const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// `[node]`: node mode's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The kubelet's PodResources socket.
    pub socket: PathBuf,
    /// Resource names that are GPUs: exact names, or a prefix ending in `*`.
    pub resource_names: Vec<String>,
    /// Timeout of one call: the kubelet's `List`, and the API server's pod list.
    pub timeout: String,
    /// Where the host's processes are seen (`/proc` with `hostPID: true`, or a mount of the
    /// host's `/proc`): per-process attribution reads `<proc_root>/<pid>/cgroup` and
    /// `<proc_root>/<pid>/environ` there.
    pub proc_root: PathBuf,
    /// The host's cgroup v2 hierarchy (`/sys/fs/cgroup`, or a read-only mount of it): the
    /// pressure of the pods holding each GPU is read from their cgroup directories there.
    pub cgroup_root: PathBuf,
    /// Pod labels to add to `truthscale_gpu_allocation_info` as `label_<key>`, read from the
    /// API server (Kubernetes label keys). Empty: none, and no request to the API server.
    pub pod_labels: Vec<String>,
    /// How often the API server's list of this node's pods is read (1s..=1h).
    pub pod_labels_refresh: String,
    /// The API server (`https://…`). Empty: in-cluster, from `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT`.
    pub api_server: String,
    /// The bearer token, re-read at every refresh (projected tokens rotate).
    pub token_file: PathBuf,
    /// The CA certificates (PEM) the API server is checked against.
    pub ca_file: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            socket: DEFAULT_SOCKET.into(),
            resource_names: default_resource_names(),
            timeout: "2s".into(),
            proc_root: "/proc".into(),
            cgroup_root: DEFAULT_CGROUP_ROOT.into(),
            pod_labels: Vec::new(),
            pod_labels_refresh: "30s".into(),
            api_server: String::new(),
            token_file: super::apiserver::DEFAULT_TOKEN_FILE.into(),
            ca_file: super::apiserver::DEFAULT_CA_FILE.into(),
        }
    }
}

/// The kubelet client's settings, checked: node mode's (`node.*`) and the sidecar's
/// (`sidecar.*`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KubeletSettings {
    /// The socket.
    pub socket: PathBuf,
    /// GPU resource names (exact, or a prefix ending in `*`).
    pub resource_names: Vec<String>,
    /// Timeout of one call.
    pub timeout: Duration,
}

/// The dotted keys of a section's socket, resource names and timeout, for its errors.
struct KubeletKeys {
    socket: &'static str,
    resource_names: &'static str,
    timeout: &'static str,
}

/// Check a section's socket, resource names and timeout.
fn kubelet_settings(
    keys: &KubeletKeys,
    socket: &Path,
    resource_names: &[String],
    timeout: &str,
) -> Result<KubeletSettings, Invalid> {
    if socket.as_os_str().is_empty() {
        return Err(Invalid::new(
            keys.socket,
            format!("must name the kubelet socket (default {DEFAULT_SOCKET})"),
        ));
    }
    if resource_names.iter().any(|r| r.trim().is_empty()) {
        return Err(Invalid::new(keys.resource_names, "an empty resource name"));
    }
    let timeout = crate::setting::duration(
        keys.timeout,
        timeout,
        Duration::from_millis(10),
        Duration::from_secs(60),
    )?;
    Ok(KubeletSettings {
        socket: socket.to_path_buf(),
        resource_names: resource_names.to_vec(),
        timeout,
    })
}

fn default_resource_names() -> Vec<String> {
    vec![
        "nvidia.com/gpu".into(),
        "nvidia.com/gpu.shared".into(),
        "nvidia.com/mig-*".into(),
    ]
}

/// `[sidecar]`: sidecar mode's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SidecarConfig {
    /// Ask the kubelet (PodResources `Get`, one pod) which GPUs are this pod's, and label only
    /// those with it; the other GPUs the container sees are exported without pod labels.
    /// Needs the pod's name and namespace (`POD_NAME`, `POD_NAMESPACE`) and the kubelet's
    /// socket mounted.
    pub pod_resources: bool,
    /// The kubelet's PodResources socket.
    pub socket: PathBuf,
    /// Resource names that are GPUs: exact names, or a prefix ending in `*`.
    pub resource_names: Vec<String>,
    /// Timeout of one `Get`.
    pub timeout: String,
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            pod_resources: false,
            socket: DEFAULT_SOCKET.into(),
            resource_names: default_resource_names(),
            timeout: "2s".into(),
        }
    }
}

/// Sidecar mode's `Get`, checked: whose resources to ask for, and how.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SidecarSettings {
    /// This pod's name.
    pub pod: String,
    /// This pod's namespace.
    pub namespace: String,
    /// The kubelet client.
    pub kubelet: KubeletSettings,
}

impl SidecarConfig {
    /// Check the section (every value, whether `pod_resources` is on or not); `pod` and
    /// `namespace` are this pod's (`identity.*`, else the Downward API variables). `None`
    /// when `pod_resources` is off.
    ///
    /// # Errors
    /// An [`Invalid`] naming the key, for a bad value, or `pod_resources` without the pod's name or
    /// namespace.
    pub(crate) fn validate(
        &self,
        pod: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Option<SidecarSettings>, Invalid> {
        // Checked whether the kubelet is asked or not, so that `config check` refuses a bad
        // value before anyone turns `pod_resources` on.
        let kubelet = kubelet_settings(
            &KubeletKeys {
                socket: "sidecar.socket",
                resource_names: "sidecar.resource_names",
                timeout: "sidecar.timeout",
            },
            &self.socket,
            &self.resource_names,
            &self.timeout,
        )?;
        if !self.pod_resources {
            return Ok(None);
        }
        let known = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        match (known(pod), known(namespace)) {
            (Some(pod), Some(namespace)) => Ok(Some(SidecarSettings {
                pod,
                namespace,
                kubelet,
            })),
            (pod, namespace) => {
                let missing: Vec<&str> = [
                    ("POD_NAME (identity.pod)", pod.is_none()),
                    ("POD_NAMESPACE (identity.namespace)", namespace.is_none()),
                ]
                .into_iter()
                .filter(|(_, m)| *m)
                .map(|(v, _)| v)
                .collect();
                Err(Invalid::new(
                    "sidecar.pod_resources",
                    format!(
                        "asks the kubelet for this pod's GPUs by the pod's name and namespace, and {} not set: set POD_NAME and POD_NAMESPACE from the Downward API (fieldRef metadata.name and metadata.namespace), or identity.pod and identity.namespace",
                        if missing.len() == 1 {
                            format!("{} is", missing[0])
                        } else {
                            format!("{} are", missing.join(" and "))
                        }
                    ),
                ))
            }
        }
    }
}

/// Node mode's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeSettings {
    /// The socket.
    pub socket: PathBuf,
    /// GPU resource names (exact, or a prefix ending in `*`).
    pub resource_names: Vec<String>,
    /// Timeout of one call.
    pub timeout: Duration,
    /// Where the host's processes are seen.
    pub proc_root: PathBuf,
    /// Where the host's cgroup v2 hierarchy is seen.
    pub cgroup_root: PathBuf,
    /// The pod-label reader, when `pod_labels` is not empty.
    pub pod_labels: Option<PodLabelSettings>,
}

impl NodeConfig {
    /// Check the section; `node` is the node's name (`NODE_NAME`, `identity.node`), and
    /// `getenv` reads the environment (the in-cluster API server's address).
    ///
    /// # Errors
    /// An [`Invalid`] naming the key, for a bad value, or pod labels asked for without a node name or an
    /// API server.
    pub(crate) fn validate(
        &self,
        node: Option<&str>,
        getenv: &dyn Fn(&str) -> Option<String>,
    ) -> Result<NodeSettings, Invalid> {
        let KubeletSettings {
            socket,
            resource_names,
            timeout,
        } = kubelet_settings(
            &KubeletKeys {
                socket: "node.socket",
                resource_names: "node.resource_names",
                timeout: "node.timeout",
            },
            &self.socket,
            &self.resource_names,
            &self.timeout,
        )?;
        let keys = super::apiserver::label_keys(&self.pod_labels)?;
        let refresh = crate::setting::duration(
            "node.pod_labels_refresh",
            &self.pod_labels_refresh,
            Duration::from_secs(1),
            Duration::from_secs(3600),
        )?;
        let pod_labels = if keys.is_empty() {
            None
        } else {
            let node = node.filter(|n| !n.trim().is_empty()).ok_or(Invalid::new(
                "node.pod_labels",
                "pod labels are read for this node's pods, and the node's name is not known: set NODE_NAME (Downward API fieldRef spec.nodeName, as the node DaemonSet does) or identity.node".to_string(),
            ))?;
            for (key, path) in [
                ("node.token_file", &self.token_file),
                ("node.ca_file", &self.ca_file),
            ] {
                if path.as_os_str().is_empty() {
                    return Err(Invalid::new(key, "must name a file to read pod labels"));
                }
            }
            Some(PodLabelSettings {
                keys,
                refresh,
                api_server: super::apiserver::api_server_url(&self.api_server, getenv)?,
                node: node.trim().to_string(),
                token_file: self.token_file.clone(),
                ca_file: self.ca_file.clone(),
                timeout,
            })
        };
        Ok(NodeSettings {
            socket,
            resource_names,
            timeout,
            proc_root: absolute(
                "node.proc_root",
                &self.proc_root,
                "the host's /proc (default /proc)",
            )?,
            cgroup_root: absolute(
                "node.cgroup_root",
                &self.cgroup_root,
                &format!("the host's cgroup v2 hierarchy (default {DEFAULT_CGROUP_ROOT})"),
            )?,
            pod_labels,
        })
    }
}

/// `node.cgroup_root` or `node.proc_root` (`key`), checked: an absolute path to `what` (it is
/// read, never written; a root that is missing at the start only leaves what is read there
/// blank, counted). An empty one had turned attribution by process off without a word.
///
/// # Errors
/// An [`Invalid`] naming `key`.
fn absolute(key: &'static str, path: &Path, what: &str) -> Result<PathBuf, Invalid> {
    if path.as_os_str().is_empty() || !path.is_absolute() {
        return Err(Invalid::new(
            key,
            format!(
                "must be an absolute path to {what}, not {:?}",
                path.display().to_string()
            ),
        ));
    }
    Ok(path.to_path_buf())
}

impl NodeSettings {
    /// The kubelet client's part.
    #[must_use]
    pub(crate) fn kubelet(&self) -> KubeletSettings {
        KubeletSettings {
            socket: self.socket.clone(),
            resource_names: self.resource_names.clone(),
            timeout: self.timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    /// `[node] cgroup_root`: `/sys/fs/cgroup` by default, from the environment
    /// (`TRUTHSCALE_NODE__CGROUP_ROOT`), and refused unless it is an absolute path.
    #[test]
    fn cgroup_root_defaults_overrides_and_is_checked() {
        let node = |pairs: &[(&str, &str)]| {
            let mut all = vec![("TRUTHSCALE_MODE", "node")];
            all.extend_from_slice(pairs);
            let v = vars(&all);
            Config::load(None, &v, &[])
                .unwrap()
                .validate(&v)
                .map(|s| s.node.unwrap().cgroup_root)
                .map_err(|e| e.to_string())
        };
        assert_eq!(node(&[]).unwrap(), std::path::Path::new("/sys/fs/cgroup"));
        assert_eq!(
            node(&[("TRUTHSCALE_NODE__CGROUP_ROOT", "/host/sys/fs/cgroup")]).unwrap(),
            std::path::Path::new("/host/sys/fs/cgroup")
        );
        for bad in ["", "sys/fs/cgroup"] {
            let err = node(&[("TRUTHSCALE_NODE__CGROUP_ROOT", bad)]).unwrap_err();
            assert!(
                err.starts_with("node.cgroup_root: must be an absolute path"),
                "{err}"
            );
            // `node.proc_root` likewise: an empty one turned attribution by process off.
            let err = node(&[("TRUTHSCALE_NODE__PROC_ROOT", bad)]).unwrap_err();
            assert!(
                err.starts_with("node.proc_root: must be an absolute path to the host's /proc"),
                "{err}"
            );
        }
    }
}

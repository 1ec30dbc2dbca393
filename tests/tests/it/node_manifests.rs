//! The node-mode manifests under `docker/kubernetes/node/` and the node dashboard
//! (`dashboards/truthscale-node.json`).
//!
//! - What the manifests promise, read from the files: the kubelet's pod-resources folder is
//!   mounted read-only where the agent looks for the socket; hostPID, the per-process
//!   variable and the added capabilities are in the per-process overlay only (and the Helm
//!   chart's DaemonSet template); the PodMonitor selects the DaemonSet's pods and port,
//!   honours their labels and drops the agent pod's target labels; no RBAC object exists
//!   outside the pod-labels overlay (and the chart's template), whose ClusterRole
//!   is exactly `list` on pods, bound to the agent's ServiceAccount, with a token
//!   mounted in the DaemonSet's pods only.
//! - What they run, on the host: the DaemonSet's `args` and environment against the fake NVML
//!   library (three GPUs) and a fake kubelet (a tonic server on a unix socket) serve every GPU
//!   with its attribution and answer the probe paths. The per-process overlay's, scraped by a
//!   real Prometheus the way the PodMonitor says, answers every query of the node dashboard
//!   with data, and a GPU without a pod keeps no pod label in Prometheus. The pod-labels
//!   overlay's, against a fake API server too, puts its allowlisted labels on allocation info.
//!
//! Stand-ins, each for what the cluster provides: `TRUTHSCALE_NODE__SOCKET` for the hostPath
//! mount (the test asserts the mount puts the socket at the default path), `--nvml-library`
//! and `FAKE_NVML_SCENARIO` for the driver the NVIDIA runtime mounts,
//! `TRUTHSCALE_NODE__PROC_ROOT` (a fake `/proc`) for hostPID, `TRUTHSCALE_NODE__API_SERVER`,
//! `TRUTHSCALE_NODE__TOKEN_FILE` and `TRUTHSCALE_NODE__CA_FILE` for the API server and the
//! mounted ServiceAccount token, and static target labels for the Prometheus Operator's
//! discovery. `docker/check.sh` renders the layouts with kustomize
//! and validates them; this module needs no kustomize.

use serde_json::Value as Json;
use serde_yaml_ng::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use truthscale_e2e::{
    Prometheus, Sample, Sidecar, TempDir, clean_command, fake_nvml, http_get,
    require_tool_or_return, run, url_encode, workspace,
};
use truthscale_e2e::{api_data, value};
use truthscale_exporter::attribution::config::DEFAULT_SOCKET;
use truthscale_exporter::attribution::kubelet::proto::{ListPodResourcesResponse, PodResources};

const NODE_DIR: &str = "docker/kubernetes/node";
const DAEMONSET: &str = "docker/kubernetes/node/base/daemonset.yaml";
const SERVICE_ACCOUNT: &str = "docker/kubernetes/node/base/serviceaccount.yaml";
const PODMONITOR: &str = "docker/kubernetes/node/base/podmonitor.yaml";
const BASE: &str = "docker/kubernetes/node/base/kustomization.yaml";
const PER_PROCESS: &str = "docker/kubernetes/node/per-process/kustomization.yaml";
const PER_PROCESS_PATCH: &str = "docker/kubernetes/node/per-process/per-process-patch.yaml";
const POD_LABELS: &str = "docker/kubernetes/node/pod-labels/kustomization.yaml";
const POD_LABELS_PATCH: &str = "docker/kubernetes/node/pod-labels/pod-labels-patch.yaml";
const CLUSTER_ROLE: &str = "docker/kubernetes/node/pod-labels/clusterrole.yaml";
const CLUSTER_ROLE_BINDING: &str = "docker/kubernetes/node/pod-labels/clusterrolebinding.yaml";
/// The Helm chart's node-mode templates: hostPID only with `node.perProcess`, the ClusterRole
/// and its binding only with `node.podLabels` (docker/chart-lint.py lints both ways).
const CHART_DAEMONSET: &str = "docker/chart/truthscale/templates/daemonset.yaml";
const CHART_RBAC: &str = "docker/chart/truthscale/templates/serviceaccount-rbac.yaml";
const POD_LABELS_VAR: &str = "TRUTHSCALE_NODE__POD_LABELS";
/// Pod label keys the chart's values.schema.json must accept and refuse (docker/chart-lint.py
/// checks that with Helm's lint), as the agent does.
const LABEL_KEY_CASES: &str = "docker/chart-lint-pod-label-keys.json";
const CHART_SCHEMA: &str = "docker/chart/truthscale/values.schema.json";
const RBAC_KINDS: [&str; 4] = ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];
const SIDECAR: &str = "docker/kubernetes/sidecar-deployment.yaml";
const SIDECAR_PODMONITOR: &str = "docker/kubernetes/podmonitor.yaml";
const DASHBOARD: &str = "dashboards/truthscale-node.json";
const DOC: &str = "docs/node-mode.md";
const PER_PROCESS_VAR: &str = "TRUTHSCALE_SOURCE__PER_PROCESS_SERIES";
const POD_RESOURCES: &str = "/var/lib/kubelet/pod-resources";
const WAIT: Duration = Duration::from_secs(30);

use crate::manifests::{
    container, container_env, downward_api, read, seq_of, str_of, strings, yaml,
};
use crate::node::{ApiServer, ApiState, api_pods};
use crate::prometheus_rules;
use truthscale_e2e::kubelet::{Kubelet, State};

/// The agent container of the DaemonSet.
fn agent(ds: &Value) -> &Value {
    container(ds, "truthscale", DAEMONSET)
}

/// The DaemonSet's arguments, checked to be `serve …`, without the `serve`.
fn serve_args(c: &Value) -> Vec<String> {
    let args = strings(&c["args"], "args");
    assert_eq!(
        args.first().map(String::as_str),
        Some("serve"),
        "{DAEMONSET}: {args:?}"
    );
    args[1..].to_vec()
}

/// The environment of the per-process overlay: the base's, with the patch's entries merged
/// by name (kustomize's strategic merge of `env`).
fn per_process_env() -> BTreeMap<String, String> {
    let ds = yaml(DAEMONSET);
    let patch = yaml(PER_PROCESS_PATCH);
    let mut env = container_env(agent(&ds), DAEMONSET);
    env.extend(container_env(
        container(&patch, "truthscale", PER_PROCESS_PATCH),
        PER_PROCESS_PATCH,
    ));
    env
}

fn labels_of(v: &Value, what: &str) -> BTreeMap<String, String> {
    v.as_mapping()
        .unwrap_or_else(|| panic!("{what}: expected a mapping, got {v:?}"))
        .iter()
        .map(|(k, v)| (str_of(k, what).to_owned(), str_of(v, what).to_owned()))
        .collect()
}

/// Whether a `matchLabels` selector selects pods with `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The `listen_address` port of `truthscale config defaults`.
fn default_port() -> u16 {
    let out = run(&["config", "defaults"]);
    assert!(out.status.success(), "truthscale config defaults failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("listen_address = "))
        .and_then(|v| v.trim_matches('"').rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no listen_address in:\n{text}"))
}

#[test]
fn pod_resources_folder_is_mounted_read_only_where_the_agent_looks() {
    let ds = yaml(DAEMONSET);
    let pod = &ds["spec"]["template"]["spec"];
    let c = agent(&ds);
    let volumes = seq_of(&pod["volumes"], "volumes");
    let host_paths: Vec<&Value> = volumes
        .iter()
        .filter(|v| v.get("hostPath").is_some())
        .collect();
    assert_eq!(
        host_paths.len(),
        1,
        "{DAEMONSET}: one hostPath volume: {host_paths:?}"
    );
    let volume = host_paths[0];
    assert_eq!(volume["hostPath"]["path"].as_str(), Some(POD_RESOURCES));
    assert_eq!(volume["hostPath"]["type"].as_str(), Some("Directory"));
    let name = str_of(&volume["name"], "volume name");
    let mounts: Vec<&Value> = seq_of(&c["volumeMounts"], "volumeMounts")
        .iter()
        .filter(|m| m["name"].as_str() == Some(name))
        .collect();
    assert_eq!(mounts.len(), 1, "{DAEMONSET}: {mounts:?}");
    assert_eq!(
        mounts[0]["readOnly"].as_bool(),
        Some(true),
        "{DAEMONSET}: the pod-resources folder must be mounted read-only"
    );
    // The folder (not the socket file, which the kubelet recreates), mounted where the
    // agent's default socket lies: no socket setting is needed.
    let mount_path = str_of(&mounts[0]["mountPath"], "mountPath");
    assert_eq!(
        Path::new(mount_path).join("kubelet.sock"),
        Path::new(DEFAULT_SOCKET),
        "{DAEMONSET}: the mount must hold the default [node] socket"
    );
    let env = container_env(c, DAEMONSET);
    assert!(
        !env.contains_key("TRUTHSCALE_NODE__SOCKET"),
        "{DAEMONSET}: the default socket is the mount"
    );
    // Root without any capability, nothing writable, no escalation (the comment says why root).
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsUser"].as_u64(), Some(0), "{sc:?}");
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{sc:?}");
    assert_eq!(
        sc["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{sc:?}"
    );
    assert_ne!(sc["privileged"].as_bool(), Some(true), "{sc:?}");
    assert_eq!(strings(&sc["capabilities"]["drop"], "drop"), ["ALL"]);
    assert!(sc["capabilities"].get("add").is_none(), "{sc:?}");
    assert!(
        read(DAEMONSET).contains("Root, because the kubelet's socket is owned by root"),
        "{DAEMONSET}: say why the agent runs as root"
    );
    // GPU nodes only, the usual taint tolerated, no GPU requested, no token.
    assert_eq!(
        pod["nodeSelector"]["nvidia.com/gpu.present"].as_str(),
        Some("true")
    );
    assert!(
        seq_of(&pod["tolerations"], "tolerations").iter().any(|t| {
            t["key"].as_str() == Some("nvidia.com/gpu")
                && t["operator"].as_str() == Some("Exists")
                && t["effect"].as_str() == Some("NoSchedule")
        }),
        "{DAEMONSET}: tolerate the nvidia.com/gpu NoSchedule taint"
    );
    for side in ["requests", "limits"] {
        let r = &c["resources"][side];
        assert!(
            r["cpu"].is_string() && r["memory"].is_string(),
            "{side}: {r:?}"
        );
        assert!(
            r.get("nvidia.com/gpu").is_none(),
            "{side}: the agent must not take a GPU"
        );
    }
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));
    // The port the agent listens on by default, named as the PodMonitor and probes say.
    let port = seq_of(&c["ports"], "ports")
        .iter()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .expect("a container port named metrics");
    assert_eq!(
        port["containerPort"].as_u64(),
        Some(u64::from(default_port()))
    );
    // The same image as the sidecar, so both move together.
    let sidecar = yaml(SIDECAR);
    assert_eq!(
        c["image"],
        container(&sidecar, "truthscale", SIDECAR)["image"],
        "{DAEMONSET} and {SIDECAR} must run the same image"
    );
}

#[test]
fn host_pid_and_added_capabilities_only_in_the_per_process_overlay() {
    let ds = yaml(DAEMONSET);
    let pod = &ds["spec"]["template"]["spec"];
    assert_ne!(
        pod["hostPID"].as_bool(),
        Some(true),
        "{DAEMONSET}: no hostPID in the base"
    );
    assert!(!container_env(agent(&ds), DAEMONSET).contains_key(PER_PROCESS_VAR));

    let overlay = yaml(PER_PROCESS);
    assert_eq!(strings(&overlay["resources"], "resources"), ["../base"]);
    let patches: Vec<&str> = seq_of(&overlay["patches"], "patches")
        .iter()
        .map(|p| str_of(&p["path"], "patch path"))
        .collect();
    assert_eq!(patches, ["per-process-patch.yaml"]);

    let patch = yaml(PER_PROCESS_PATCH);
    assert_eq!(patch["kind"], ds["kind"]);
    assert_eq!(
        patch["metadata"]["name"], ds["metadata"]["name"],
        "{PER_PROCESS_PATCH} must name the DaemonSet it patches"
    );
    assert_eq!(
        patch["spec"]["template"]["spec"]["hostPID"].as_bool(),
        Some(true)
    );
    let c = container(&patch, "truthscale", PER_PROCESS_PATCH);
    assert_eq!(
        container_env(c, PER_PROCESS_PATCH)
            .get(PER_PROCESS_VAR)
            .map(String::as_str),
        Some("true")
    );
    let mut added = strings(&c["securityContext"]["capabilities"]["add"], "add");
    added.sort();
    assert_eq!(added, ["DAC_READ_SEARCH", "SYS_PTRACE"]);

    // No other manifest under docker/ turns hostPID on (the chart's DaemonSet, only when
    // its values ask for per-process attribution).
    let mut with_host_pid: Vec<String> = docker_manifests()
        .into_iter()
        .filter(|(_, text)| {
            text.lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains("hostPID"))
        })
        .map(|(rel, _)| rel)
        .collect();
    with_host_pid.sort();
    assert_eq!(with_host_pid, [CHART_DAEMONSET, PER_PROCESS_PATCH]);
}

#[test]
fn podmonitor_selects_the_agents_and_keeps_their_attribution() {
    let ds = yaml(DAEMONSET);
    let pm = yaml(PODMONITOR);
    assert_eq!(pm["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    assert_eq!(pm["kind"].as_str(), Some("PodMonitor"));
    assert!(
        str_of(&pm["metadata"]["name"], "name").contains("truthscale"),
        "the job label <namespace>/<name> must match job=~\".*truthscale.*\""
    );
    let pod_labels = labels_of(&ds["spec"]["template"]["metadata"]["labels"], "pod labels");
    let selector = labels_of(&pm["spec"]["selector"]["matchLabels"], "selector");
    assert!(
        selects(&selector, &pod_labels),
        "{selector:?} vs {pod_labels:?}"
    );
    assert_eq!(
        labels_of(&ds["spec"]["selector"]["matchLabels"], "DaemonSet selector"),
        selector
    );
    let ports: BTreeSet<&str> = seq_of(&agent(&ds)["ports"], "ports")
        .iter()
        .map(|p| str_of(&p["name"], "port name"))
        .collect();
    let endpoints = seq_of(&pm["spec"]["podMetricsEndpoints"], "podMetricsEndpoints");
    assert_eq!(endpoints.len(), 1);
    for ep in endpoints {
        assert!(
            ports.contains(str_of(&ep["port"], "port")),
            "{ep:?} vs {ports:?}"
        );
        assert_eq!(ep["honorLabels"].as_bool(), Some(true), "{ep:?}");
        // A series without a pod label must not receive the agent's.
        assert!(
            seq_of(&ep["relabelings"], "relabelings").iter().any(|r| {
                r["action"].as_str() == Some("labeldrop")
                    && r["regex"].as_str() == Some("pod|namespace|container")
            }),
            "{PODMONITOR}: drop the agent pod's target labels"
        );
    }
    // The sidecar layout's PodMonitor and this one never select each other's pods.
    let sidecar = yaml(SIDECAR);
    let sidecar_pods = labels_of(&sidecar["spec"]["template"]["metadata"]["labels"], "labels");
    let sidecar_selector = labels_of(
        &yaml(SIDECAR_PODMONITOR)["spec"]["selector"]["matchLabels"],
        "selector",
    );
    assert!(!selects(&selector, &sidecar_pods));
    assert!(!selects(&sidecar_selector, &pod_labels));
}

#[test]
fn node_layouts_are_complete_and_documented() {
    let base = yaml(BASE);
    let mut listed = strings(&base["resources"], "resources");
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(workspace().join(NODE_DIR).join("base"))
        .expect("list the base")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "kustomization.yaml")
        .collect();
    files.sort();
    assert_eq!(listed, files, "{BASE} must list every file beside it");
    // No RBAC in the base: the kubelet's socket is enough for attribution (only the
    // pod-labels overlay adds any).
    for f in &files {
        let kind = yaml(&format!("{NODE_DIR}/base/{f}"))["kind"].clone();
        assert!(
            !matches!(
                kind.as_str(),
                Some("Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding")
            ),
            "{f}: the node agent needs no RBAC"
        );
    }
    let sa = yaml(SERVICE_ACCOUNT);
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(false));
    assert_eq!(
        yaml(DAEMONSET)["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
    // The documentation names every file and the dashboard.
    let doc = read(DOC);
    for rel in [
        DAEMONSET,
        SERVICE_ACCOUNT,
        PODMONITOR,
        BASE,
        PER_PROCESS,
        PER_PROCESS_PATCH,
        POD_LABELS,
        POD_LABELS_PATCH,
        CLUSTER_ROLE,
        CLUSTER_ROLE_BINDING,
        DASHBOARD,
    ] {
        let short = rel.trim_start_matches("docker/kubernetes/node/");
        assert!(
            doc.contains(rel) || doc.contains(short),
            "{DOC} does not mention {rel}"
        );
    }
}

/// The Helm chart's `node.podLabels` keys are the agent's: the keys the chart's schema must
/// accept and refuse (docker/chart-lint.py gives each to Helm's lint) are the keys the agent
/// accepts and refuses in `TRUTHSCALE_NODE__POD_LABELS`, so a key the schema lets through
/// never stops the agent at start ("is not a Kubernetes label key").
#[test]
fn the_charts_pod_label_keys_are_the_agents() {
    let cases: Json = serde_json::from_str(&read(LABEL_KEY_CASES))
        .unwrap_or_else(|e| panic!("{LABEL_KEY_CASES}: not JSON: {e}"));
    let keys = |list: &str| -> Vec<String> {
        cases[list]
            .as_array()
            .unwrap_or_else(|| panic!("{LABEL_KEY_CASES}: no {list} list"))
            .iter()
            .map(|k| k.as_str().expect("a key as a string").to_owned())
            .collect()
    };
    let (accepted, refused) = (keys("accepted"), keys("refused"));
    for must in ["team", "example.com/team"] {
        assert!(
            accepted.iter().any(|k| k == must),
            "{LABEL_KEY_CASES}: accepted lacks {must}"
        );
    }
    for must in ["team-", "a/b/c", "Example.com/app"] {
        assert!(
            refused.iter().any(|k| k == must),
            "{LABEL_KEY_CASES}: refused lacks {must}"
        );
    }
    // The schema's length bound is the longest key: a 253-character prefix, `/`, 63 characters.
    let schema: Json = serde_json::from_str(&read(CHART_SCHEMA)).expect("values.schema.json");
    let item = &schema["properties"]["node"]["properties"]["podLabels"]["items"];
    assert_eq!(
        item["maxLength"].as_u64(),
        Some(253 + 1 + 63),
        "{CHART_SCHEMA}: {item}"
    );
    let longest = accepted.iter().map(String::len).max().unwrap_or_default();
    assert_eq!(
        longest, 317,
        "{LABEL_KEY_CASES}: accepted should reach the longest key"
    );

    let dir = TempDir::new("pod-label-keys");
    let config = dir.path().join("empty.toml");
    std::fs::write(&config, "").expect("write an empty configuration file");
    let verdict = |key: &str| -> Result<(), String> {
        let out = clean_command()
            .args(["config", "check"])
            .arg(&config)
            .envs([
                ("TRUTHSCALE_MODE", "node"),
                ("TRUTHSCALE_SOURCE__KIND", "sim"),
                ("NODE_NAME", "gpu-node-7"),
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("KUBERNETES_SERVICE_PORT", "443"),
                (POD_LABELS_VAR, key),
            ])
            .output()
            .expect("run truthscale config check");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            Ok(())
        } else {
            Err(stderr)
        }
    };
    for key in &accepted {
        if let Err(e) = verdict(key) {
            panic!("the agent refuses {key:?}, which the chart's schema must accept: {e}");
        }
    }
    for key in &refused {
        match verdict(key) {
            Err(e) if e.contains("is not a Kubernetes label key") => {}
            other => panic!(
                "the agent does not refuse {key:?} as a label key ({other:?}); the chart's \
                 schema refuses it"
            ),
        }
    }
}

/// Every YAML manifest under `docker/`: its path from the workspace, and its text.
fn docker_manifests() -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut stack = vec![workspace().join("docker")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("list docker/") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                let text = std::fs::read_to_string(&path).expect("read manifest");
                let rel = path.strip_prefix(workspace()).unwrap_or(&path);
                found.push((rel.display().to_string(), text));
            }
        }
    }
    found
}

/// Every manifest under `docker/` with an RBAC kind.
fn rbac_manifests() -> Vec<String> {
    let mut found: Vec<String> = docker_manifests()
        .into_iter()
        .filter(|(_, text)| {
            text.lines().any(|l| {
                l.strip_prefix("kind: ")
                    .is_some_and(|k| RBAC_KINDS.contains(&k.trim()))
            })
        })
        .map(|(rel, _)| rel)
        .collect();
    found.sort();
    found
}

/// The environment of the pod-labels overlay: the base's, with the patch's entries.
fn pod_labels_env() -> BTreeMap<String, String> {
    let ds = yaml(DAEMONSET);
    let patch = yaml(POD_LABELS_PATCH);
    let mut env = container_env(agent(&ds), DAEMONSET);
    env.extend(container_env(
        container(&patch, "truthscale", POD_LABELS_PATCH),
        POD_LABELS_PATCH,
    ));
    env
}

/// The pod-labels overlay: the base plus exactly a ClusterRole of `list` on pods,
/// its binding to the agent's ServiceAccount, and a patch that mounts the token in the
/// DaemonSet's pods and sets a valid allowlist. No other manifest has RBAC.
#[test]
fn pod_labels_overlay_grants_only_get_and_list_on_pods() {
    let overlay = yaml(POD_LABELS);
    assert_eq!(
        strings(&overlay["resources"], "resources"),
        ["../base", "clusterrole.yaml", "clusterrolebinding.yaml"]
    );
    let patches: Vec<&str> = seq_of(&overlay["patches"], "patches")
        .iter()
        .map(|p| str_of(&p["path"], "patch path"))
        .collect();
    assert_eq!(patches, ["pod-labels-patch.yaml"]);
    let mut files: Vec<String> = std::fs::read_dir(workspace().join(NODE_DIR).join("pod-labels"))
        .expect("list the overlay")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "clusterrole.yaml",
            "clusterrolebinding.yaml",
            "kustomization.yaml",
            "pod-labels-patch.yaml"
        ]
    );

    let role = yaml(CLUSTER_ROLE);
    assert_eq!(
        role["apiVersion"].as_str(),
        Some("rbac.authorization.k8s.io/v1")
    );
    assert_eq!(role["kind"].as_str(), Some("ClusterRole"));
    let rules = seq_of(&role["rules"], "rules");
    assert_eq!(rules.len(), 1, "{CLUSTER_ROLE}: one rule: {rules:?}");
    let rule = rules[0].as_mapping().expect("a rule mapping");
    let mut keys: Vec<&str> = rule.keys().map(|k| str_of(k, "rule key")).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["apiGroups", "resources", "verbs"], "{CLUSTER_ROLE}");
    assert_eq!(strings(&rules[0]["apiGroups"], "apiGroups"), [""]);
    assert_eq!(strings(&rules[0]["resources"], "resources"), ["pods"]);
    let mut verbs = strings(&rules[0]["verbs"], "verbs");
    verbs.sort();
    assert_eq!(verbs, ["list"], "{CLUSTER_ROLE}: only list");

    let binding = yaml(CLUSTER_ROLE_BINDING);
    assert_eq!(binding["kind"].as_str(), Some("ClusterRoleBinding"));
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some("ClusterRole"));
    assert_eq!(
        binding["roleRef"]["apiGroup"].as_str(),
        Some("rbac.authorization.k8s.io")
    );
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = seq_of(&binding["subjects"], "subjects");
    assert_eq!(subjects.len(), 1, "{CLUSTER_ROLE_BINDING}: {subjects:?}");
    let sa = yaml(SERVICE_ACCOUNT);
    assert_eq!(subjects[0]["kind"].as_str(), Some("ServiceAccount"));
    assert_eq!(subjects[0]["name"], sa["metadata"]["name"]);

    // The token in the DaemonSet's pods only: the ServiceAccount keeps it off for others.
    let ds = yaml(DAEMONSET);
    let patch = yaml(POD_LABELS_PATCH);
    assert_eq!(patch["kind"], ds["kind"]);
    assert_eq!(patch["metadata"]["name"], ds["metadata"]["name"]);
    assert_eq!(
        patch["spec"]["template"]["spec"]["automountServiceAccountToken"].as_bool(),
        Some(true)
    );
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(false));
    assert!(!container_env(agent(&ds), DAEMONSET).contains_key(POD_LABELS_VAR));
    let env = pod_labels_env();
    let list: Vec<String> = env[POD_LABELS_VAR].split(',').map(str::to_owned).collect();
    assert!(!list.is_empty());
    // The keys are ones the agent accepts: node mode with them validates.
    let mut config = truthscale_exporter::config::Config::default();
    config.mode = truthscale_exporter::config::Mode::Node;
    config.node.pod_labels = list;
    let in_cluster = [
        ("NODE_NAME", "node-1"),
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    if let Err(e) = config.validate(&in_cluster) {
        panic!("{POD_LABELS_PATCH}: {e}");
    }
    // The node name that selects the node's pods comes from the base.
    assert_eq!(env["NODE_NAME"], downward_api("spec.nodeName"));

    assert_eq!(
        rbac_manifests(),
        [CHART_RBAC, CLUSTER_ROLE, CLUSTER_ROLE_BINDING]
    );
}

// ---------------------------------------------------------------------------------------
// On the host: a fake kubelet, a fake NVML with three GPUs, a fake /proc.

/// A pod holding `ids` of `nvidia.com/gpu`.
fn pod(name: &str, ns: &str, container: &str, ids: &[&str]) -> PodResources {
    truthscale_e2e::kubelet::pod(name, ns, container, "nvidia.com/gpu", ids)
}

fn uuid(i: usize) -> String {
    format!("GPU-5f0c6a3e-8d3b-4c1e-9a7f-0000000000b{i}")
}

/// Processes: pid, pod UID, hostname (the pod name), SM busy percent, GPU.
const PROCESSES: [(u32, &str, &str, u32, usize); 4] = [
    (
        6001,
        "4e7a5bed-5ad4-44a5-bb6a-3349a6ffd75a",
        "train-0",
        80,
        0,
    ),
    (
        5001,
        "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "chat-a",
        60,
        1,
    ),
    (
        5002,
        "2c5f39cb-3fb2-22e3-994f-1127e4ddb538",
        "chat-b",
        30,
        1,
    ),
    // In a pod that does not hold the GPU: its share is counted under no pod.
    (
        5003,
        "3d6f4adc-4fc3-33f4-aa5f-2238f5eec649",
        "batch-x",
        10,
        1,
    ),
];

/// One node: GPU 0 held by `ml/train-0`, GPU 1 time-sliced between `web/chat-a` and
/// `web/chat-b`, GPU 2 held by nobody. A fake kubelet says so, a fake NVML scenario holds
/// the three GPUs and their processes, a fake `/proc` their cgroups and hostnames.
struct FakeNode {
    socket: PathBuf,
    scenario: PathBuf,
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    _kubelet: Kubelet,
}

impl FakeNode {
    fn start(dir: &Path) -> FakeNode {
        let socket = dir.join("kubelet.sock");
        let state = State::default();
        *state.answer.lock().expect("answer") = ListPodResourcesResponse {
            pod_resources: vec![
                pod("train-0", "ml", "cuda", &[&uuid(0)]),
                pod("chat-a", "web", "vllm", &[&format!("{}::0", uuid(1))]),
                pod("chat-b", "web", "vllm", &[&format!("{}::1", uuid(1))]),
            ],
        };
        let kubelet = Kubelet::start(&socket, state);

        // Three H100s from the shared-GPU scenario's device; the idle one does nothing.
        let template: Json =
            serde_json::from_str(&read("tests/fake-nvml/scenarios/h100-shared.json"))
                .expect("scenario JSON");
        let device = &template["devices"][0];
        let mut devices = Vec::new();
        for i in 0..3 {
            let mut d = device.clone();
            d["uuid"] = Json::from(uuid(i));
            d["pci_bus_id"] = Json::from(format!("00000000:1{}:00.0", ["A", "B", "C"][i]));
            d["processes"] = PROCESSES
                .iter()
                .filter(|p| p.4 == i)
                .map(|(pid, _, _, sm, _)| {
                    serde_json::json!({"pid": pid, "used_memory_bytes": 10_000_000_000_u64 * u64::from(*sm) / 10, "sm_util": sm})
                })
                .collect();
            if i == 2 {
                d["util_percent"] = Json::from(0);
                d["memory_used_bytes"] = Json::from(0);
                d["power_watts"] = Json::from(70);
                if let Some(m) = d["gpm"]["metrics"].as_object_mut() {
                    for v in m.values_mut() {
                        *v = Json::from(0);
                    }
                }
            }
            devices.push(d);
        }
        let scenario = dir.join("node-scenario.json");
        let body = serde_json::json!({
            "_comment": "One node in node mode: GPU 0 held by one pod, GPU 1 time-sliced between two, GPU 2 idle.",
            "devices": devices,
        });
        std::fs::write(&scenario, body.to_string()).expect("write the scenario");

        let proc_root = dir.join("proc");
        let procs: Vec<(u32, &str, &str)> = PROCESSES
            .iter()
            .map(|&(pid, uid, host, _, _)| (pid, uid, host))
            .collect();
        truthscale_e2e::fake_proc(&proc_root, &procs);
        // The host's cgroup v2 tree (per-process overlay): each pod's cgroup, quiet (no CPU
        // period, no pressure), so its shares are measured zeros.
        let cgroup_root = dir.join("cgroup");
        for (_, uid, _, _, _) in PROCESSES {
            let d = cgroup_root.join(format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
                uid.replace('-', "_")
            ));
            std::fs::create_dir_all(&d).expect("fake cgroup");
            let psi = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                       full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
            for (file, text) in [
                (
                    "cpu.stat",
                    "usage_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
                ),
                ("cpu.max", "max 100000\n"),
                ("cpu.pressure", psi),
                ("io.pressure", psi),
                ("memory.pressure", psi),
            ] {
                std::fs::write(d.join(file), text).expect("cgroup file");
            }
        }
        FakeNode {
            socket,
            scenario,
            proc_root,
            cgroup_root,
            _kubelet: kubelet,
        }
    }

    /// The manifest's `serve` arguments and environment on this node: plus the stand-ins for
    /// the socket mount, the driver and (`host_pid`) the host's PID namespace.
    fn agent(
        &self,
        args: &[String],
        env: &BTreeMap<String, String>,
        host_pid: bool,
        dir: &Path,
    ) -> Sidecar {
        let mut args = args.to_vec();
        args.extend(["--nvml-library".into(), fake_nvml().display().to_string()]);
        let mut env = env.clone();
        env.insert(
            "TRUTHSCALE_NODE__SOCKET".into(),
            self.socket.display().to_string(),
        );
        env.insert(
            "FAKE_NVML_SCENARIO".into(),
            self.scenario.display().to_string(),
        );
        if host_pid {
            env.insert(
                "TRUTHSCALE_NODE__PROC_ROOT".into(),
                self.proc_root.display().to_string(),
            );
            env.insert(
                "TRUTHSCALE_NODE__CGROUP_ROOT".into(),
                self.cgroup_root.display().to_string(),
            );
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Sidecar::start(&args, &env, dir)
    }
}

fn named<'a>(m: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    m.iter().filter(|s| s.name == name).collect()
}

/// The probe paths of the agent container, on its `metrics` port.
fn probe_path(c: &Value, probe: &str) -> String {
    let get = &c[probe]["httpGet"];
    assert_eq!(get["port"].as_str(), Some("metrics"), "{probe} port");
    str_of(&get["path"], probe).to_owned()
}

/// The base DaemonSet's arguments and environment on a fake node: every GPU with its
/// attribution, the probe paths answering, no per-process series.
#[test]
fn the_daemonset_serves_every_gpu_as_the_manifest_says() {
    let ds = yaml(DAEMONSET);
    let c = agent(&ds);
    let args = serve_args(c);
    let env = container_env(c, DAEMONSET);
    // The agent's own pod must never label GPUs: the manifest does not even say it.
    for key in ["POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME"] {
        assert!(!env.contains_key(key), "{DAEMONSET}: {key} is set");
    }
    // Sidecar::start waits for /readyz: the readiness path must be that one.
    assert_eq!(probe_path(c, "readinessProbe"), "/readyz");
    let liveness = probe_path(c, "livenessProbe");

    let dir = TempDir::new("node-manifest");
    let node = FakeNode::start(dir.path());
    let running = node.agent(&args, &env, false, dir.path());
    let live = running.get(&liveness, &[]);
    assert_eq!(live.status, 200, "{liveness}: {}", live.text());
    let m = running.wait_for(WAIT, "three attributed GPUs", |m| {
        named(m, "truthscale_gpu_pods").len() == 3
    });
    let infos = named(&m, "truthscale_gpu_info");
    assert_eq!(infos.len(), 3, "{infos:#?}");
    for info in &infos {
        assert_eq!(
            info.label("node"),
            Some(downward_api("spec.nodeName")),
            "{info:?}"
        );
        assert_eq!(info.label("source"), Some("nvml"), "{info:?}");
    }
    let gpu = |i: &str| {
        infos
            .iter()
            .find(|s| s.label("gpu") == Some(i))
            .unwrap_or_else(|| panic!("no GPU {i}"))
    };
    assert_eq!(gpu("0").label("pod"), Some("train-0"));
    assert_eq!(gpu("0").label("namespace"), Some("ml"));
    assert_eq!(gpu("0").label("container"), Some("cuda"));
    assert_eq!(gpu("1").label("pod"), None);
    assert_eq!(gpu("2").label("pod"), None);
    for (i, holders) in [("0", 1.0), ("1", 2.0), ("2", 0.0)] {
        assert_eq!(
            value(&m, "truthscale_gpu_pods", &[("gpu", i)]),
            Some(holders),
            "GPU {i}"
        );
    }
    let mut shared: Vec<(&str, &str)> = named(&m, "truthscale_gpu_allocation_info")
        .iter()
        .filter(|s| s.label("gpu") == Some("1"))
        .map(|s| {
            (
                s.label("pod").unwrap_or(""),
                s.label("replica").unwrap_or(""),
            )
        })
        .collect();
    shared.sort_unstable();
    assert_eq!(shared, [("chat-a", "0"), ("chat-b", "1")]);
    for source in ["nvml", "kubelet"] {
        assert_eq!(
            value(&m, "truthscale_source_up", &[("source", source)]),
            Some(1.0),
            "{source}"
        );
    }
    // Per-process series and per-pod shares are the per-process overlay's.
    for name in [
        "truthscale_process_sm_busy_ratio",
        "truthscale_process_memory_used_bytes",
        "truthscale_pod_effective_compute_estimate_ratio",
    ] {
        assert!(
            named(&m, name).is_empty(),
            "{name} without the per-process overlay"
        );
    }
    assert!(!running.process.stderr().contains("panicked"));
}

/// The pod-labels overlay's arguments and environment on a fake node, with a fake API server
/// standing in for the cluster's: the allowlisted labels of each pod on its allocation
/// series, none for a label a pod lacks.
#[test]
fn the_pod_labels_overlay_labels_allocation_info() {
    let c_args = serve_args(agent(&yaml(DAEMONSET)));
    let mut env = pod_labels_env();
    let dir = TempDir::new("node-manifest-pod-labels");
    let node = FakeNode::start(dir.path());
    let api_state = ApiState::new("sa-token", downward_api("spec.nodeName"));
    api_pods(&api_state);
    let api = ApiServer::start(dir.path(), api_state.clone());
    let token = dir.path().join("token");
    std::fs::write(&token, "sa-token").expect("token");
    for (k, v) in [
        ("TRUTHSCALE_NODE__API_SERVER", api.url.clone()),
        ("TRUTHSCALE_NODE__TOKEN_FILE", token.display().to_string()),
        ("TRUTHSCALE_NODE__CA_FILE", api.ca.display().to_string()),
    ] {
        env.insert(k.into(), v);
    }
    let running = node.agent(&c_args, &env, false, dir.path());
    let m = running.wait_for(WAIT, "pod labels on allocation info", |m| {
        value(m, "truthscale_source_up", &[("source", "apiserver")]) == Some(1.0)
            && named(m, "truthscale_gpu_allocation_info").len() == 3
    });
    let labels = |pod: &str| -> Vec<(String, String)> {
        let s = named(&m, "truthscale_gpu_allocation_info")
            .into_iter()
            .find(|s| s.label("pod") == Some(pod))
            .unwrap_or_else(|| panic!("no allocation of {pod}"));
        s.labels
            .iter()
            .filter(|(k, _)| k.starts_with("label_"))
            .cloned()
            .collect()
    };
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(
        labels("train-0"),
        [
            pair("label_app_kubernetes_io_name", "trainer"),
            pair("label_team", "research")
        ]
    );
    assert_eq!(
        labels("chat-a"),
        [pair("label_app_kubernetes_io_name", "chat")]
    );
    assert_eq!(labels("chat-b"), [pair("label_team", "web")]);
    assert!(!running.process.stderr().contains("panicked"));
}

// ---------------------------------------------------------------------------------------
// The node dashboard on a real Prometheus.

/// The one expression of the node dashboard that returns nothing with a node agent: no series
/// has a `cluster` label here. The form counts the series its selector matches.
const CLUSTER_VARIABLE: (&str, &str, &str) = (
    "truthscale-node.json / variable cluster",
    "label_values(truthscale_gpu_info, cluster)",
    "count by (cluster) (truthscale_gpu_info)",
);

/// The showback dashboard and the rules it reads.
const SHOWBACK_DASHBOARD: &str = "dashboards/truthscale-showback.json";
const SHOWBACK_RULES: &str = "alerts/showback.rules.yml";

#[test]
fn showback_prometheus_rule_spec_is_the_rules_file() {
    let rule = yaml("docker/kubernetes/node/base/showback-prometheusrule.yaml");
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        rule["metadata"]["name"].as_str(),
        Some("truthscale-showback")
    );
    let rules = yaml(SHOWBACK_RULES);
    assert!(
        !seq_of(&rules["groups"], "groups").is_empty(),
        "{SHOWBACK_RULES} has no groups"
    );
    assert!(
        rule["spec"] == rules,
        "the PrometheusRule is stale: run python3 docker/generate.py"
    );
}

/// Every expression of the showback dashboard, as [`dashboard_exprs`].
fn showback_exprs() -> Vec<(String, String)> {
    let d: Json = serde_json::from_str(&read(SHOWBACK_DASHBOARD)).expect("dashboard JSON");
    let file = "truthscale-showback.json";
    let mut out = Vec::new();
    prometheus_rules::dashboard_exprs(file, &d, &mut out);
    prometheus_rules::variable_queries(file, &d, &mut out);
    out.into_iter().map(|e| (e.at, e.text)).collect()
}

/// Every expression of the dashboard, `<file> / <panel title> / <refId>` or
/// `<file> / variable <name>`, variables substituted, as the dashboards-on-Prometheus test
/// reads every dashboard.
fn dashboard_exprs() -> Vec<(String, String)> {
    let d: Json = serde_json::from_str(&read(DASHBOARD)).expect("dashboard JSON");
    let file = "truthscale-node.json";
    let mut out = Vec::new();
    prometheus_rules::dashboard_exprs(file, &d, &mut out);
    prometheus_rules::variable_queries(file, &d, &mut out);
    out.into_iter().map(|e| (e.at, e.text)).collect()
}

/// `label_values(selector, label)`: `(selector, label)`.
fn label_values(q: &str) -> Option<(&str, &str)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (mut depth, mut quoted, mut split) = (0_i32, false, None);
    for (i, c) in inner.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '{' | '[' if !quoted => depth += 1,
            ')' | '}' | ']' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => split = Some(i),
            _ => {}
        }
    }
    let i = split?;
    Some((inner[..i].trim(), inner[i + 1..].trim()))
}

/// How many results an expression or a variable query has now.
fn evaluate(prom: &Prometheus, text: &str) -> Result<usize, String> {
    if let Some((selector, label)) = label_values(text) {
        let path = format!(
            "/api/v1/label/{}/values?match%5B%5D={}",
            url_encode(label),
            url_encode(selector)
        );
        let data = api_data(text, &prom.get(&path))?;
        return data
            .as_array()
            .map(Vec::len)
            .ok_or_else(|| format!("label values not a list: {data}"));
    }
    let data = api_data(text, &prom.query(text))?;
    Ok(data["result"].as_array().map_or(0, Vec::len))
}

/// A Prometheus scrape job for `target` as the Prometheus Operator builds it from the
/// PodMonitor's endpoint: the discovered pod's target labels (static here: the agent's pod),
/// then the endpoint's relabelings, in Prometheus's spelling.
fn scrape_job(target: &str) -> Json {
    let pm = yaml(PODMONITOR);
    let ep = &seq_of(&pm["spec"]["podMetricsEndpoints"], "endpoints")[0];
    let snake = |k: &str| {
        k.chars().fold(String::new(), |mut s, c| {
            if c.is_ascii_uppercase() {
                s.push('_');
                s.push(c.to_ascii_lowercase());
            } else {
                s.push(c);
            }
            s
        })
    };
    let relabel: Vec<Json> = seq_of(&ep["relabelings"], "relabelings")
        .iter()
        .map(|r| {
            let m = r.as_mapping().expect("relabeling");
            Json::Object(
                m.iter()
                    .map(|(k, v)| {
                        let v: Json = serde_json::to_value(v).expect("relabeling value");
                        (snake(str_of(k, "key")), v)
                    })
                    .collect(),
            )
        })
        .collect();
    serde_json::json!({
        "job_name": format!("monitoring/{}", str_of(&pm["metadata"]["name"], "name")),
        "honor_labels": ep["honorLabels"].as_bool().expect("honorLabels"),
        "metrics_path": ep["path"].as_str().unwrap_or("/metrics"),
        "scrape_interval": "2s",
        "scrape_timeout": "1s",
        "static_configs": [{
            "targets": [target],
            "labels": {
                "namespace": "monitoring",
                "pod": "truthscale-node-x7k2p",
                "container": "truthscale",
                "endpoint": str_of(&ep["port"], "port"),
            },
        }],
        "relabel_configs": relabel,
    })
}

/// The per-process overlay's agent on a fake node, scraped the way the PodMonitor says:
/// every query of the node dashboard returns data, the allocation counts and per-pod shares
/// are the node's, and a GPU without a pod carries no pod label in Prometheus.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn node_dashboard_on_real_prometheus() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let exprs = dashboard_exprs();
    assert!(exprs.len() > 10, "{exprs:?}");

    let ds = yaml(DAEMONSET);
    let args = serve_args(agent(&ds));
    let mut env = per_process_env();
    // The node's three GPUs as one job (a bare-metal training box): the idle one runs far
    // behind the other two, a straggler for the Stragglers panel, once sustained 1 s.
    for (k, v) in [
        ("TRUTHSCALE_VERDICT__STRAGGLERS__GROUP_BY", "node"),
        ("TRUTHSCALE_VERDICT__STRAGGLERS__SUSTAIN_SECONDS", "1"),
    ] {
        env.insert(k.to_owned(), v.to_owned());
    }
    let patch = yaml(PER_PROCESS_PATCH);
    assert_eq!(
        patch["spec"]["template"]["spec"]["hostPID"].as_bool(),
        Some(true),
        "the fake /proc stands in for hostPID"
    );
    let dir = TempDir::new("node-dashboard");
    let node = FakeNode::start(dir.path());
    let running = node.agent(&args, &env, true, dir.path());
    running.wait_for(WAIT, "per-pod shares", |m| {
        named(m, "truthscale_pod_effective_compute_estimate_ratio").len() == 3
    });

    let config = serde_json::json!({
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [workspace().join(SHOWBACK_RULES)],
        "scrape_configs": [scrape_job(&running.addr)],
    });
    let mut prom = Prometheus::start(&config.to_string(), dir.path());
    // Two minute boundaries and a loaded machine's start fit in it.
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let ready = prom
            .series("rate(truthscale_gpu_effective_compute_seconds_total[1m])")
            .len()
            == 3
            && prom.series("truthscale_pod_effective_compute_estimate_ratio").len() == 3
            // The rules' series over one-minute subqueries: once a minute boundary has passed
            // since each rule first had data. The pods' effective compute comes later than the
            // fleet (it waits for the kubelet's pods and two scrapes of their counters), and a
            // boundary between the two would leave it out.
            && [
                "cluster:truthscale_gpu_fleet:gpu_hours_per_hour",
                "pod:truthscale_gpu_allocated:gpu_hours_per_hour",
                "pod:truthscale_gpu_effective_compute:gpu_hours_per_hour",
                "cluster:truthscale_gpu_funnel:gpu_hours_per_hour{stage=\"effective\"}",
            ]
            .iter()
            .all(|r| !prom.series(&format!("sum_over_time({r}[1m:1m])")).is_empty());
        if ready {
            break;
        }
        assert!(
            prom.process.try_wait().is_none(),
            "prometheus exited:\n{}",
            prom.process.stderr()
        );
        assert!(
            Instant::now() < deadline,
            "no rates or showback rules in 150 s; agent:\n{}\nprometheus:\n{}",
            running.process.stderr(),
            prom.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Every query of the dashboard returns data (the cluster variable: its form).
    let mut failures = Vec::new();
    for (at, text) in &exprs {
        let text = if at == CLUSTER_VARIABLE.0 {
            assert_eq!(text, CLUSTER_VARIABLE.1, "{at}");
            CLUSTER_VARIABLE.2.to_owned()
        } else {
            text.clone()
        };
        match evaluate(&prom, &text) {
            Ok(0) => failures.push(format!("{at}: no data: {text}")),
            Ok(_) => {}
            Err(e) => failures.push(format!("{at}: {e}: {text}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} node dashboard queries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // The allocation counts: one GPU each held by one pod, shared, idle; none unknown.
    let (_, by_state) = exprs
        .iter()
        .find(|(at, _)| at == "truthscale-node.json / GPUs by allocation / A")
        .expect("the GPUs by allocation panel");
    let states: BTreeMap<String, f64> = prom
        .series(by_state)
        .into_iter()
        .map(|(l, v)| (l.get("state").cloned().unwrap_or_default(), v))
        .collect();
    let want: BTreeMap<String, f64> = [
        ("idle", 1.0),
        ("one pod", 1.0),
        ("shared", 1.0),
        ("unknown", 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(states, want);
    let (_, down) = exprs
        .iter()
        .find(|(at, _)| at == "truthscale-node.json / Kubelet readers down / A")
        .expect("the kubelet readers panel");
    assert_eq!(
        prom.series(down)
            .iter()
            .map(|(_, v)| *v)
            .collect::<Vec<_>>(),
        [0.0]
    );

    // Showback: every query of its dashboard returns data but the team panel's (this node's
    // pods carry no pod labels: the pod-labels overlay is not applied here); GPU-hours per
    // hour held are the kubelet's allocation (ml: train-0's GPU; web: half of the shared
    // GPU to each of its two holders), the idle GPU is unallocated, and held plus
    // unallocated is the fleet.
    let mut failures = Vec::new();
    for (at, text) in showback_exprs() {
        let team = at.contains("by team");
        // The cluster variable, as the node dashboard's: no series has the label here.
        let text = if at.ends_with("/ variable cluster") {
            assert_eq!(text, CLUSTER_VARIABLE.1, "{at}");
            CLUSTER_VARIABLE.2.to_owned()
        } else {
            text
        };
        match (evaluate(&prom, &text), team) {
            (Ok(0), false) => failures.push(format!("{at}: no data: {text}")),
            (Ok(n), true) if n > 0 => {
                failures.push(format!("{at}: data without pod labels: {text}"))
            }
            (Err(e), _) => failures.push(format!("{at}: {e}: {text}")),
            _ => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} showback dashboard queries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let held: BTreeMap<String, f64> = prom
        .series("namespace:truthscale_gpu_allocated:gpu_hours_per_hour")
        .into_iter()
        .map(|(l, v)| (l.get("namespace").cloned().unwrap_or_default(), v))
        .collect();
    assert_eq!(
        held,
        [("ml".to_string(), 1.0), ("web".to_string(), 1.0)]
            .into_iter()
            .collect()
    );
    let one = |q: &str| -> f64 {
        let s = prom.series(q);
        assert_eq!(s.len(), 1, "{q}: {s:?}");
        s[0].1
    };
    assert_eq!(
        one("cluster:truthscale_gpu_unallocated:gpu_hours_per_hour"),
        1.0
    );
    assert_eq!(one("cluster:truthscale_gpu_fleet:gpu_hours_per_hour"), 3.0);
    // The funnel: three healthy GPUs (health read from NVML), two held; the losses and the
    // active stage add up to the total.
    let stage = |s: &str| {
        one(&format!(
            "cluster:truthscale_gpu_funnel:gpu_hours_per_hour{{stage=\"{s}\"}}"
        ))
    };
    let loss = |l: &str| {
        one(&format!(
            "cluster:truthscale_gpu_funnel_loss:gpu_hours_per_hour{{loss=\"{l}\"}}"
        ))
    };
    assert_eq!(stage("total"), 3.0);
    assert_eq!(stage("healthy"), 3.0);
    assert_eq!(loss("unavailable"), 0.0);
    assert_eq!(stage("allocated"), 2.0);
    assert_eq!(loss("unallocated"), 1.0);
    // The kubelet was read: every device's holders are known.
    assert_eq!(loss("allocation_unknown"), 0.0);
    assert_eq!(
        one("cluster:truthscale_gpu_allocation_unknown:gpu_hours_per_hour"),
        0.0
    );
    let parts = [
        "unavailable",
        "unallocated",
        "allocation_unknown",
        "idle_held",
        "use_unmeasured",
    ]
    .map(loss);
    assert_eq!(
        parts.iter().sum::<f64>() + stage("active"),
        3.0,
        "{parts:?}"
    );
    // A shared GPU's holders: no measured effective compute of their own; the device's
    // measured total billed by share (1/2 each of a whole GPU); the SM-busy split apart.
    let web_effective = prom
        .series("namespace:truthscale_gpu_effective_compute:gpu_hours_per_hour{namespace=\"web\"}");
    assert!(web_effective.is_empty(), "{web_effective:?}");
    // The device's mean from its counters over the seconds it was measured.
    let shared_device = one(
        "rate(truthscale_gpu_effective_compute_seconds_total{gpu=\"1\"}[5m]) / rate(truthscale_gpu_effective_compute_observed_seconds_total{gpu=\"1\"}[5m])",
    );
    let web_sliced = one(
        "namespace:truthscale_gpu_time_sliced_effective_compute:gpu_hours_per_hour{namespace=\"web\"}",
    );
    assert!(
        (web_sliced - shared_device).abs() < 1e-9,
        "the shared device's measured total, half to each of its two web holders: {web_sliced} vs {shared_device}"
    );
    let web_parts = one("sum(truthscale_pod_effective_compute_estimate_ratio{namespace=\"web\"})");
    let web_estimate = one(
        "sum(namespace:truthscale_gpu_effective_compute_estimate:gpu_hours_per_hour{namespace=\"web\"})",
    );
    assert!(
        (web_estimate - web_parts).abs() < 1e-9,
        "the estimate, apart: {web_estimate} vs {web_parts}"
    );
    // The measured per-pod family: the sole holder only.
    let measured = prom.series("truthscale_pod_effective_compute_ratio");
    assert_eq!(measured.len(), 1, "{measured:?}");
    assert_eq!(
        measured[0].0.get("pod").map(String::as_str),
        Some("train-0")
    );
    assert_eq!(
        measured[0].0.get("method").map(String::as_str),
        Some("sole_holder")
    );

    // Attribution survives the scrape: the workload's labels where the agent gave them, and
    // none (not the agent's pod) where it gave none.
    for (l, _) in prom.series("truthscale_gpu_info") {
        let gpu = l.get("gpu").map(String::as_str);
        let pod = l.get("pod").map(String::as_str);
        match gpu {
            Some("0") => {
                assert_eq!(pod, Some("train-0"), "{l:?}");
                assert_eq!(l.get("namespace").map(String::as_str), Some("ml"), "{l:?}");
            }
            Some("1" | "2") => {
                for k in ["pod", "namespace", "container"] {
                    assert!(!l.contains_key(k), "GPU {gpu:?} got {k}: {l:?}");
                }
            }
            other => panic!("unexpected GPU {other:?}: {l:?}"),
        }
        assert_eq!(
            l.get("node").map(String::as_str),
            Some(downward_api("spec.nodeName"))
        );
    }
    for (l, _) in prom.series("truthscale_source_up") {
        assert!(
            !l.contains_key("pod"),
            "the agent's own series got its pod: {l:?}"
        );
    }
    assert!(
        prom.series("truthscale_gpu_allocation_info")
            .iter()
            .all(|(l, _)| l.get("namespace").map(String::as_str) != Some("monitoring")),
        "a holder was replaced by the agent's namespace"
    );

    // The shares of the time-sliced GPU, from one scrape: 60 %, 30 % and 10 % (no pod found).
    let device = prom.series("truthscale_gpu_effective_compute_ratio{gpu=\"1\"}");
    assert_eq!(device.len(), 1, "{device:?}");
    let device = device[0].1;
    assert!(device > 0.0);
    let parts: BTreeMap<String, f64> = prom
        .series("truthscale_pod_effective_compute_estimate_ratio")
        .into_iter()
        .map(|(l, v)| (l.get("pod").cloned().unwrap_or_default(), v / device))
        .collect();
    for (pod, share) in [("chat-a", 0.6), ("chat-b", 0.3), ("", 0.1)] {
        let got = parts.get(pod).copied().unwrap_or(f64::NAN);
        assert!(
            (got - share).abs() < 1e-6,
            "{pod:?}: {got} of the device, want {share}"
        );
    }
    assert_eq!(prom.series("truthscale_process_sm_busy_ratio").len(), 4);
    let up = prom.series("up");
    assert!(
        up.len() == 1 && up[0].1 == 1.0 && up[0].0["job"].contains("truthscale"),
        "{up:?}"
    );
    let healthz = http_get(&running.addr, &probe_path(agent(&ds), "livenessProbe"), &[])
        .expect("GET liveness");
    assert_eq!(healthz.status, 200);
    assert!(
        prom.process.try_wait().is_none(),
        "prometheus exited:\n{}",
        prom.process.stderr()
    );
    let problems = prom.process.stderr();
    assert!(
        !truthscale_e2e::logs_an_error(&problems),
        "prometheus logged errors:\n{problems}"
    );
}

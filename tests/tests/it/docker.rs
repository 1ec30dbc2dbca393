//! The container image definition and the deployment manifests under `docker/`.
//!
//! No container engine is needed: the generated manifests are compared with their sources,
//! and what the manifests would run in the container (the image's entrypoint with the
//! manifests' arguments and Downward API environment) is run on the host, with the probe paths
//! the manifests name. The static checks (hadolint, yamllint, kubernetes-validate) are
//! `docker/check.sh`, run by CI on its own.

use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use truthscale_e2e::{
    Response, Spawned, TempDir, clean_command, http_get, parse_exposition, run, workspace,
};

use crate::manifests::{
    container, container_env, containers_of, downward_api, kubernetes_manifests, read, seq_of,
    str_of, strings, yaml,
};

const REGENERATE: &str = "stale generated manifest: run `python3 docker/generate.py`";

/// Kubernetes' `$(VAR)` expansion of container arguments.
fn expand(args: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    args.iter()
        .map(|a| {
            env.iter()
                .fold(a.clone(), |a, (k, v)| a.replace(&format!("$({k})"), v))
        })
        .collect()
}

/// The JSON-array form of a Dockerfile instruction, e.g. `ENTRYPOINT ["/usr/local/bin/x"]`.
fn dockerfile_exec(dockerfile: &str, instruction: &str) -> Vec<String> {
    let line = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{instruction} ")))
        .unwrap_or_else(|| panic!("docker/Dockerfile: no {instruction}"));
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("docker/Dockerfile: {instruction} is not a JSON array: {e}"))
}

/// `truthscale ARGS --listen 127.0.0.1:<free port>` with only `env` (and `PATH`), as the
/// image's entrypoint would run it; killed (with its process group) when dropped.
struct OnHost {
    addr: String,
    process: Spawned,
}

impl std::fmt::Debug for OnHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnHost").field("addr", &self.addr).finish()
    }
}

impl OnHost {
    fn start(args: &[String], env: &BTreeMap<String, String>, dir: &Path, name: &str) -> Self {
        let mut cmd = clean_command();
        cmd.args(args).args(["--listen", "127.0.0.1:0"]).envs(env);
        let process = Spawned::start(cmd, dir, name);
        // Known once its log says where it listens (`wait_for_200`).
        let addr = String::new();
        Self { addr, process }
    }

    /// Read where it listens from its log, then poll `path` until it answers 200; `Err`
    /// with the reason when the process exits or `limit` passes first.
    fn wait_for_200(&mut self, path: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        if self.addr.is_empty() {
            self.addr = self.process.serve_addr(limit)?;
        }
        loop {
            if let Some(status) = self.process.try_wait() {
                return Err(format!("exited ({status})"));
            }
            if http_get(&self.addr, path, &[]).is_ok_and(|r| r.status == 200) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("{path} not 200 after {limit:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn get(&self, path: &str) -> Response {
        http_get(&self.addr, path, &[]).unwrap_or_else(|e| {
            panic!(
                "GET {}{path}: {e}; stderr:\n{}",
                self.addr,
                self.process.stderr()
            )
        })
    }
}

/// Start `args` like the container would, on a port of its own (port 0), and wait until
/// `ready_path` answers 200.
fn start_ready(
    args: &[String],
    env: &BTreeMap<String, String>,
    ready_path: &str,
    dir: &Path,
) -> OnHost {
    let mut host = OnHost::start(args, env, dir, "on-host");
    if let Err(why) = host.wait_for_200(ready_path, Duration::from_secs(30)) {
        panic!(
            "truthscale {args:?} with {env:?}: {why}; stderr:\n{}",
            host.process.stderr()
        );
    }
    host
}

/// Check the identity labels and the source of every `truthscale_gpu_info` series, and return
/// how many there are.
fn check_gpu_info(host: &OnHost, pod: &str, namespace: &str, container: &str, node: &str) -> usize {
    let r = host.get("/metrics");
    assert_eq!(r.status, 200, "/metrics: {}", r.text());
    let samples = parse_exposition(&r.text());
    let infos: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "truthscale_gpu_info")
        .collect();
    assert!(
        !infos.is_empty(),
        "no truthscale_gpu_info in:\n{}",
        r.text()
    );
    for info in &infos {
        assert_eq!(info.label("pod"), Some(pod), "{info:?}");
        assert_eq!(info.label("namespace"), Some(namespace), "{info:?}");
        assert_eq!(info.label("container"), Some(container), "{info:?}");
        assert_eq!(info.label("node"), Some(node), "{info:?}");
        assert_eq!(info.label("source"), Some("sim"), "{info:?}");
    }
    infos.len()
}

/// The value of `--flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// A container's environment after a strategic-merge patch of that container: an entry of
/// the patch's `env` sets its variable (a literal `value`), one with `$patch: delete` removes
/// it, as kustomize merges them (by `name`).
fn patched_env(
    base: &BTreeMap<String, String>,
    patch: &Value,
    file: &str,
) -> BTreeMap<String, String> {
    let mut env = base.clone();
    let Some(entries) = patch.get("env") else {
        return env;
    };
    for e in seq_of(entries, &format!("{file}: env")) {
        let name = str_of(&e["name"], &format!("{file}: env name")).to_owned();
        if e["$patch"].as_str() == Some("delete") {
            env.remove(&name);
        } else {
            let value = str_of(&e["value"], &format!("{file}: env {name}: a literal value"));
            env.insert(name, value.to_owned());
        }
    }
    env
}

/// An empty configuration file, for `truthscale config check` with settings from the
/// environment only.
fn empty_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("empty.toml");
    std::fs::write(&path, "").expect("write an empty configuration file");
    path
}

#[test]
fn prometheus_rule_spec_is_the_rules_file() {
    let rule = yaml("docker/kubernetes/prometheusrule.yaml");
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    let rules = yaml("alerts/truthscale.rules.yml");
    assert!(
        !seq_of(&rules["groups"], "rules groups").is_empty(),
        "alerts/truthscale.rules.yml has no groups"
    );
    assert!(rule["spec"] == rules, "{REGENERATE}");
}

/// The cause signals' recording rules (cAdvisor's pressure joined with dcgm-exporter's GPUs),
/// for clusters that read GPUs through dcgm-exporter: not in a kustomization (node mode
/// exports the same signals itself), applied beside one.
#[test]
fn causes_prometheus_rule_spec_is_the_rules_file() {
    let rule = yaml("docker/kubernetes/causes-prometheusrule.yaml");
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(rule["metadata"]["name"].as_str(), Some("truthscale-causes"));
    let rules = yaml("alerts/causes.rules.yml");
    assert!(
        !seq_of(&rules["groups"], "rules groups").is_empty(),
        "alerts/causes.rules.yml has no groups"
    );
    assert!(rule["spec"] == rules, "{REGENERATE}");
}

#[test]
fn dashboards_configmap_holds_every_dashboard_byte_for_byte() {
    let cm = yaml("docker/kubernetes/dashboards-configmap.yaml");
    assert_eq!(cm["kind"].as_str(), Some("ConfigMap"));
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"],
        Value::String("1".into()),
        "the Grafana sidecar selects grafana_dashboard: \"1\" (a string)"
    );
    let data = cm["data"]
        .as_mapping()
        .expect("dashboards-configmap.yaml: data");
    let mut files: Vec<String> = std::fs::read_dir(workspace().join("dashboards"))
        .expect("read dashboards/")
        .map(|e| {
            e.expect("dashboards/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no dashboards/*.json");
    let keys: Vec<&str> = data.keys().map(|k| str_of(k, "data key")).collect();
    assert_eq!(keys, files, "{REGENERATE}");
    for name in &files {
        let text = read(&format!("dashboards/{name}"));
        let embedded = str_of(&data[name.as_str()], name);
        let parsed: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("dashboards/{name}: not JSON: {e}"));
        let parsed_embedded: serde_json::Value = serde_json::from_str(embedded)
            .unwrap_or_else(|e| panic!("ConfigMap key {name}: not JSON: {e}"));
        assert!(parsed_embedded == parsed, "{name}: {REGENERATE}");
        assert!(embedded == text, "{name}: not byte for byte; {REGENERATE}");
    }
}

#[test]
fn dockerfile_labels_the_binarys_version() {
    let dockerfile = read("docker/Dockerfile");
    let version = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG VERSION="))
        .expect("docker/Dockerfile: ARG VERSION=<default>");
    assert_eq!(
        version,
        env!("CARGO_PKG_VERSION"),
        "docker/Dockerfile's ARG VERSION must follow the workspace version"
    );
    let out = run(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("truthscale {version}"),
        "the image build compares `truthscale --version` with ARG VERSION"
    );
    let entrypoint = dockerfile_exec(&dockerfile, "ENTRYPOINT");
    assert_eq!(entrypoint, ["/usr/local/bin/truthscale"]);
    // No source flag: it would override TRUTHSCALE_SOURCE__KIND from the environment, and
    // the simulator runs only when asked for (`docker run … serve --source sim`).
    assert_eq!(dockerfile_exec(&dockerfile, "CMD"), ["serve"]);
    assert!(dockerfile.lines().any(|l| l == "EXPOSE 9488"));
    assert!(dockerfile.lines().any(|l| l == "USER 65532:65532"));
}

/// The sidecar of `sidecar-deployment.yaml` with the demo patch's arguments and environment,
/// run on the host: it serves `/metrics` with the pod identity from the manifest's Downward
/// API environment and answers the manifest's liveness path. The patch takes the NVML
/// sidecar's GPU access away: a demo cluster may have neither GPUs nor the NVIDIA runtime.
#[test]
fn demo_sidecar_runs_as_the_manifests_say() {
    let file = "docker/kubernetes/sidecar-deployment.yaml";
    let deployment = yaml(file);
    let sidecar = container(&deployment, "truthscale", file);
    let env = container_env(sidecar, file);

    let port = seq_of(&sidecar["ports"], "ports")
        .iter()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .expect("a container port named metrics");
    assert_eq!(port["containerPort"].as_u64(), Some(9488));
    let get = &sidecar["livenessProbe"]["httpGet"];
    assert_eq!(get["port"].as_str(), Some("metrics"), "livenessProbe port");
    let liveness = str_of(&get["path"], "livenessProbe").to_owned();

    let patch_file = "docker/kubernetes-demo/sidecar-demo-patch.yaml";
    let patch = yaml(patch_file);
    let patched = container(&patch, "truthscale", patch_file);
    let args = strings(&patched["args"], "args");
    let overlay = yaml("docker/kubernetes-demo/kustomization.yaml");
    assert!(
        seq_of(&overlay["patches"], "patches")
            .iter()
            .any(|p| p["path"].as_str() == Some("sidecar-demo-patch.yaml")),
        "the demo overlay applies sidecar-demo-patch.yaml"
    );
    assert_eq!(flag(&args, "--source"), Some("sim"), "{args:?}");
    // A RuntimeClass the cluster lacks keeps the pod from being admitted, and the NVIDIA
    // runtime (where it is the default) refuses a GPU UUID it does not know: the demo drops
    // both (`runtimeClassName: null`, `$patch: delete`).
    if deployment["spec"]["template"]["spec"]
        .get("runtimeClassName")
        .is_some()
    {
        assert!(
            patch["spec"]["template"]["spec"]
                .get("runtimeClassName")
                .is_some_and(Value::is_null),
            "{patch_file}: `runtimeClassName: null` must remove {file}'s runtime class"
        );
    }
    let env = patched_env(&env, patched, patch_file);
    let nvidia: Vec<&String> = env.keys().filter(|k| k.starts_with("NVIDIA_")).collect();
    assert!(
        nvidia.is_empty(),
        "{patch_file}: the simulated sidecar keeps {nvidia:?}; delete them (`$patch: delete`)"
    );
    let args = expand(&args, &env);

    let dir = TempDir::new("docker-demo");
    // No readiness probe on a sidecar (only_the_node_agent_has_a_readiness_probe); /readyz
    // still says when the first sample is in.
    let host = start_ready(&args, &env, "/readyz", dir.path());
    let live = host.get(&liveness);
    assert_eq!(live.status, 200, "{liveness}: {}", live.text());
    let gpus = check_gpu_info(
        &host,
        downward_api("metadata.name"),
        downward_api("metadata.namespace"),
        &env["CONTAINER_NAME"],
        downward_api("spec.nodeName"),
    );
    if let Some(n) = flag(&args, "--sim-gpus") {
        assert_eq!(
            gpus.to_string(),
            n,
            "one truthscale_gpu_info per simulated GPU"
        );
    }
}

/// NVML needs the driver library and the GPU's device nodes in the container. The NVIDIA
/// device plugin gives them only to a container that requests `nvidia.com/gpu`; any other
/// container (the sidecar beside the inference container, the node agent) gets them from the
/// NVIDIA container runtime, the pod's `runtimeClassName`, acting on the container's own
/// `NVIDIA_VISIBLE_DEVICES`. Without either, `serve --source nvml` stops at start ("cannot
/// load the NVML library"). A sidecar names its pod's GPU, never `all` (it would label every
/// GPU of the node with its pod), as the Helm chart's sidecar.visibleDevices does.
#[test]
fn every_nvml_truthscale_container_can_see_a_gpu() {
    let mut nvml = Vec::new();
    for (file, doc) in kubernetes_manifests() {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if !matches!(kind, "Deployment" | "DaemonSet") || file.ends_with("-patch.yaml") {
            continue;
        }
        let pod = &doc["spec"]["template"]["spec"];
        for c in containers_of(&doc)
            .iter()
            .filter(|c| c["name"].as_str() == Some("truthscale"))
        {
            let env = container_env(c, &file);
            let args = strings(&c["args"], &format!("{file}: args"));
            // No source anywhere: the image's `serve` reads NVML where a driver is present.
            let source = flag(&args, "--source")
                .or(env.get("TRUTHSCALE_SOURCE__KIND").map(String::as_str))
                .unwrap_or("auto");
            if !matches!(source, "nvml" | "auto") {
                continue;
            }
            nvml.push(file.clone());
            if c["resources"]["limits"]["nvidia.com/gpu"]
                .as_u64()
                .is_some_and(|n| n > 0)
            {
                continue; // the device plugin's
            }
            let devices = env.get("NVIDIA_VISIBLE_DEVICES").map_or("", String::as_str);
            assert!(
                !matches!(devices, "" | "void" | "none"),
                "{file}: the truthscale container reads NVML (source {source}) but has no GPU: \
                 no nvidia.com/gpu request and NVIDIA_VISIBLE_DEVICES {devices:?}; it would stop \
                 at start, unable to load the NVML library"
            );
            assert!(
                pod["runtimeClassName"]
                    .as_str()
                    .is_some_and(|r| !r.is_empty()),
                "{file}: NVIDIA_VISIBLE_DEVICES={devices} needs the NVIDIA container runtime to \
                 act on it: set the pod's runtimeClassName (nvidia, the GPU Operator's)"
            );
            if let Some(caps) = env.get("NVIDIA_DRIVER_CAPABILITIES") {
                assert!(
                    caps.split(',')
                        .any(|c| matches!(c.trim(), "utility" | "all")),
                    "{file}: NVIDIA_DRIVER_CAPABILITIES={caps}: NVML needs utility"
                );
            }
            if kind == "Deployment" {
                assert_ne!(
                    devices, "all",
                    "{file}: a sidecar that sees every GPU of its node labels them all with \
                     its pod: name the inference container's GPU"
                );
            }
        }
    }
    for want in [
        "docker/kubernetes/sidecar-deployment.yaml",
        "docker/kubernetes/node/base/daemonset.yaml",
    ] {
        assert!(
            nvml.iter().any(|f| f == want),
            "{want} was not checked as an NVML reader: {nvml:?}"
        );
    }
}

/// A pod is Ready only when every container is. The sidecar's `/readyz` answers 503 before
/// the first sample and while a read hangs, so a readiness probe on it would take the
/// inference pod out of its Service whenever monitoring has trouble: a sidecar (in a
/// Deployment, patches included) has liveness on `/healthz` only. The node agent, a pod of its
/// own, keeps readiness on `/readyz`.
#[test]
fn only_the_node_agent_has_a_readiness_probe() {
    let (mut sidecars, mut agents) = (Vec::new(), Vec::new());
    for (file, doc) in kubernetes_manifests() {
        let patch = file.ends_with("-patch.yaml");
        for c in containers_of(&doc)
            .iter()
            .filter(|c| c["name"].as_str() == Some("truthscale"))
        {
            let path = |probe: &str| c[probe]["httpGet"]["path"].as_str().map(str::to_owned);
            match doc["kind"].as_str() {
                Some("Deployment") => {
                    assert!(
                        c.get("readinessProbe").is_none(),
                        "{file}: the sidecar has a readinessProbe: while it is not ready, \
                         neither is the inference pod, and its Service stops sending it requests"
                    );
                    if !patch {
                        assert_eq!(path("livenessProbe").as_deref(), Some("/healthz"), "{file}");
                    }
                    sidecars.push(file.clone());
                }
                Some("DaemonSet") if !patch => {
                    assert_eq!(path("readinessProbe").as_deref(), Some("/readyz"), "{file}");
                    assert_eq!(path("livenessProbe").as_deref(), Some("/healthz"), "{file}");
                    agents.push(file.clone());
                }
                _ => {}
            }
        }
    }
    for want in [
        "docker/kubernetes/sidecar-deployment.yaml",
        "docker/kubernetes/sidecar-dcgm-exporter.yaml",
        "docker/kubernetes/web-config-patch.yaml",
    ] {
        assert!(sidecars.iter().any(|f| f == want), "{want}: {sidecars:?}");
    }
    assert_eq!(agents, ["docker/kubernetes/node/base/daemonset.yaml"]);
}

/// The Helm chart's `--listen` host, values.yaml's `listenAddress` (docker/chart-lint.py
/// checks how it is rendered, an IPv6 address in brackets), with the port: the default
/// 0.0.0.0 and `[::]`, the value the file names for IPv6 single-stack clusters, are addresses
/// the binary listens on.
#[test]
fn the_charts_listen_addresses_are_the_binarys() {
    let rel = "docker/chart/truthscale/values.yaml";
    let values = yaml(rel);
    let default = str_of(&values["listenAddress"], &format!("{rel}: listenAddress"));
    let port = values["port"].as_u64().expect("values.yaml: port");
    assert!(
        read(rel).contains("[::] for IPv6 single-stack clusters"),
        "{rel} should say to use [::] for IPv6 single-stack clusters"
    );
    let dir = TempDir::new("chart-listen");
    let config = empty_config(dir.path());
    for host in [default, "[::]"] {
        let addr = format!("{host}:{port}");
        let out = clean_command()
            .args(["config", "check"])
            .arg(&config)
            .env("TRUTHSCALE_LISTEN_ADDRESS", &addr)
            .env("TRUTHSCALE_SOURCE__KIND", "sim")
            .output()
            .expect("run truthscale config check");
        assert!(
            out.status.success(),
            "--listen {addr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The compose demo's truthscale service (`command` and `environment`), run on the host.
#[test]
fn compose_demo_sidecar_runs_as_compose_says() {
    let compose = yaml("docker/compose.yaml");
    let service = &compose["services"]["truthscale"];
    let args = strings(&service["command"], "command");
    let env: BTreeMap<String, String> = service["environment"]
        .as_mapping()
        .expect("environment as a mapping")
        .iter()
        .map(|(k, v)| (str_of(k, "key").to_owned(), str_of(v, "value").to_owned()))
        .collect();
    let dir = TempDir::new("docker-compose");
    let host = start_ready(&args, &env, "/readyz", dir.path());
    let gpus = check_gpu_info(
        &host,
        &env["POD_NAME"],
        &env["POD_NAMESPACE"],
        &env["CONTAINER_NAME"],
        &env["NODE_NAME"],
    );
    let n = flag(&args, "--sim-gpus").expect("--sim-gpus in the compose command");
    assert_eq!(gpus.to_string(), n);
}

/// The production manifests say their source is "not built yet" exactly while the binary
/// says so, so the comments cannot outlive the NVML and dcgm-exporter sources' arrival.
#[test]
fn production_manifests_say_whether_their_source_is_built() {
    let readme = read("docker/README.md");
    for file in [
        "docker/kubernetes/sidecar-deployment.yaml",
        "docker/kubernetes/sidecar-dcgm-exporter.yaml",
    ] {
        let text = read(file);
        let deployment = yaml(file);
        let sidecar = container(&deployment, "truthscale", file);
        let env = container_env(sidecar, file);
        let args = expand(&strings(&sidecar["args"], "args"), &env);
        let source = flag(&args, "--source").expect("--source").to_owned();
        let dir = TempDir::new("docker-prod");
        let mut host = OnHost::start(&args, &env, dir.path(), "production");
        // Not built: it exits at once. Built: it may run (killed on drop) or fail otherwise.
        let _ = host.process.wait_timeout(Duration::from_secs(10));
        let stderr = host.process.stderr();
        let not_built = stderr.contains("source is not built yet");
        let documented = text.contains("not built yet");
        assert_eq!(
            not_built, documented,
            "{file}: the binary says {stderr:?} for --source {source}; update the file's \
             \"not built yet\" comment (and docker/README.md)"
        );
        if not_built {
            let kind = source.split(':').next().unwrap_or(&source);
            assert!(
                readme.contains(&format!("the {kind} source is not built yet")),
                "docker/README.md should say that the {kind} source is not built yet"
            );
        }
    }
}

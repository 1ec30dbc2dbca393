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
    Response, Spawned, TempDir, clean_command, free_port, http_get, parse_exposition, run,
    workspace,
};

use crate::manifests::{
    container, container_env, downward_api, read, seq_of, str_of, strings, yaml,
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
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = clean_command();
        cmd.args(args).args(["--listen", &addr]).envs(env);
        let process = Spawned::start(cmd, dir, name);
        Self { addr, process }
    }

    /// Poll `path` until it answers 200; `Err` with the reason when the process exits or
    /// `limit` passes first.
    fn wait_for_200(&mut self, path: &str, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
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

/// Start `args` like the container would and wait until `ready_path` answers 200, retrying
/// with another port when the chosen one was taken in between.
fn start_ready(
    args: &[String],
    env: &BTreeMap<String, String>,
    ready_path: &str,
    dir: &Path,
) -> OnHost {
    for attempt in 0..3 {
        let mut host = OnHost::start(args, env, dir, &format!("on-host-{attempt}"));
        match host.wait_for_200(ready_path, Duration::from_secs(30)) {
            Ok(()) => return host,
            Err(_) if host.process.stderr().contains("in use") && attempt < 2 => {}
            Err(why) => panic!(
                "truthscale {args:?} with {env:?}: {why}; stderr:\n{}",
                host.process.stderr()
            ),
        }
    }
    unreachable!("the last attempt panics")
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

/// The sidecar of `sidecar-deployment.yaml` with the demo patch's arguments, run on the host:
/// it serves `/metrics` with the pod identity from the manifest's Downward API environment
/// and answers the manifest's probe paths.
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
    let probe_path = |probe: &str| {
        let get = &sidecar[probe]["httpGet"];
        assert_eq!(get["port"].as_str(), Some("metrics"), "{probe} port");
        str_of(&get["path"], probe).to_owned()
    };
    let liveness = probe_path("livenessProbe");
    let readiness = probe_path("readinessProbe");

    let patch_file = "docker/kubernetes-demo/sidecar-demo-patch.yaml";
    let patch = yaml(patch_file);
    let args = strings(&container(&patch, "truthscale", patch_file)["args"], "args");
    let overlay = yaml("docker/kubernetes-demo/kustomization.yaml");
    assert!(
        seq_of(&overlay["patches"], "patches")
            .iter()
            .any(|p| p["path"].as_str() == Some("sidecar-demo-patch.yaml")),
        "the demo overlay applies sidecar-demo-patch.yaml"
    );
    assert_eq!(flag(&args, "--source"), Some("sim"), "{args:?}");
    let args = expand(&args, &env);

    let dir = TempDir::new("docker-demo");
    let host = start_ready(&args, &env, &readiness, dir.path());
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

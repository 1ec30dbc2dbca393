//! `alerts/dcgm-exporter.rules.yml`: truthscale's series joined with dcgm-exporter's.
//!
//! Two stand-ins for dcgm-exporter, one with 4.8's names (`DCGM_FI_DEV_GPU_UTIL` in percent,
//! `UUID`, `Hostname`, `DCGM_FI_DRIVER_VERSION`) on `node-48`, one with 4.9's
//! (`DCGM_FI_DEV_GPU_UTIL_RATIO` and the other `_RATIO` fields, `UUID`, `hostname`,
//! `DCGM_FI_SYSTEM_DRIVER_VERSION`, and a MIG instance) on `node-49`, each read by a
//! truthscale sidecar (`--source dcgm-exporter:URL`); a real Prometheus scrapes all four and
//! loads the rules. The recording rules must join each GPU, and the MIG instance, with exact
//! values, and carry truthscale_gpu_info's labels (the driver version from either label name).
//! The generated PrometheusRule must be the rules file.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use truthscale_e2e::{
    Prometheus, Sidecar, StandIn, TempDir, ok, require_tool_or_return, workspace,
};

use crate::manifests::{seq_of, yaml};

const RULES: &str = "alerts/dcgm-exporter.rules.yml";

/// dcgm-exporter 4.8 on node-48: GPU-48 held by serving/llm-a, busy 75 %, graphics engine
/// 0.875, tensor 0.25 at the H100's reference clock (so effective compute 0.25).
const DCGM_48: &str = "\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-48\",pci_bus_id=\"00000000:3B:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-48\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",container=\"vllm\",namespace=\"serving\",pod=\"llm-a\"} 75
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-48\",pci_bus_id=\"00000000:3B:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-48\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",container=\"vllm\",namespace=\"serving\",pod=\"llm-a\"} 1830
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-48\",pci_bus_id=\"00000000:3B:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-48\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",container=\"vllm\",namespace=\"serving\",pod=\"llm-a\"} 0.875
# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\",UUID=\"GPU-48\",pci_bus_id=\"00000000:3B:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-48\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",container=\"vllm\",namespace=\"serving\",pod=\"llm-a\"} 0.25
";

/// dcgm-exporter 4.9 on node-49: GPU-49 busy 0.5, graphics engine 0.5, tensor 0.125; GPU-49M
/// in MIG, instance 2 (3g.40gb), graphics engine 0.25, tensor 0.0625; clocks in Hz.
const DCGM_49: &str = "\
# HELP DCGM_FI_DEV_GPU_UTIL_RATIO GPU utilization (ratio, 0-1).
# TYPE DCGM_FI_DEV_GPU_UTIL_RATIO gauge
DCGM_FI_DEV_GPU_UTIL_RATIO{gpu=\"0\",UUID=\"GPU-49\",pci_bus_id=\"00000000:3C:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 0.5
# HELP DCGM_FI_DEV_SM_CLOCK_HERTZ SM clock frequency (in Hz).
# TYPE DCGM_FI_DEV_SM_CLOCK_HERTZ gauge
DCGM_FI_DEV_SM_CLOCK_HERTZ{gpu=\"0\",UUID=\"GPU-49\",pci_bus_id=\"00000000:3C:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 1830000000
DCGM_FI_DEV_SM_CLOCK_HERTZ{gpu=\"1\",UUID=\"GPU-49M\",pci_bus_id=\"00000000:3D:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 1830000000
# HELP DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO gauge
DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO{gpu=\"0\",UUID=\"GPU-49\",pci_bus_id=\"00000000:3C:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 0.5
DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO{gpu=\"1\",UUID=\"GPU-49M\",pci_bus_id=\"00000000:3D:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 0.25
# HELP DCGM_FI_PROF_TENSOR_UTIL_RATIO Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_TENSOR_UTIL_RATIO gauge
DCGM_FI_PROF_TENSOR_UTIL_RATIO{gpu=\"0\",UUID=\"GPU-49\",pci_bus_id=\"00000000:3C:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 0.125
DCGM_FI_PROF_TENSOR_UTIL_RATIO{gpu=\"1\",UUID=\"GPU-49M\",pci_bus_id=\"00000000:3D:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",hostname=\"node-49\",DCGM_FI_SYSTEM_DRIVER_VERSION=\"570.124.06\"} 0.0625
";

/// Labels and value of each series.
type Series = Vec<(BTreeMap<String, String>, f64)>;

/// `got` has exactly the label sets of `want`, each with its value (to 1e-12: effective
/// compute is a product of floats).
fn assert_series(what: &str, got: Series, mut want: Series) {
    let mut got = got;
    got.sort_by(|a, b| a.0.cmp(&b.0));
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let keys = |s: &Series| s.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&got), keys(&want), "{what}: {got:?}");
    for ((l, g), (_, w)) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{what} {l:?}: {g}, want {w}");
    }
}

/// `l` with `__name__`, as a query answers it.
fn named(name: &str, l: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l = l.clone();
    l.insert("__name__".into(), name.into());
    l
}

/// `(label, value)` pairs as a map.
fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The labels a recording rule keeps from `truthscale_gpu_info` (all of them) for a GPU.
fn info_labels(sidecar: &Sidecar, gpu: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut l = labels(gpu);
    for (k, v) in [
        ("job", "truthscale"),
        ("instance", sidecar.addr.as_str()),
        ("model", "NVIDIA H100 80GB HBM3"),
        ("source", "dcgm_exporter"),
        ("fidelity", "profiling"),
        ("catalog_model", "h100-sxm"),
    ] {
        l.insert(k.to_owned(), v.to_owned());
    }
    l
}

#[test]
fn dcgm_exporter_prometheus_rule_spec_is_the_rules_file() {
    let rule = yaml("docker/kubernetes/dcgm-exporter-prometheusrule.yaml");
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        rule["metadata"]["name"].as_str(),
        Some("truthscale-dcgm-exporter")
    );
    let rules = yaml(RULES);
    assert!(
        !seq_of(&rules["groups"], "groups").is_empty(),
        "{RULES} has no groups"
    );
    assert!(
        rule["spec"] == rules,
        "the PrometheusRule is stale: run python3 docker/generate.py"
    );
}

/// The running scenario: the two exporters, a sidecar reading each, and the Prometheus.
struct Joined {
    _dcgm: (StandIn, StandIn),
    ts48: Sidecar,
    ts49: Sidecar,
    prom: Prometheus,
    _tmp: TempDir,
}

/// Start the exporters and sidecars, and a Prometheus that scrapes them and loads the rules;
/// wait (up to 60 s) until every joined series is there.
fn start() -> Joined {
    let tmp = TempDir::new("dcgm-joins");
    let dcgm = (StandIn::start(ok(DCGM_48)), StandIn::start(ok(DCGM_49)));
    let sidecar = |url: String, name: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("sidecar dir");
        let source = format!("dcgm-exporter:{url}");
        Sidecar::start(&["--source", &source, "--interval", "1s"], &[], &dir)
    };
    let (ts48, ts49) = (sidecar(dcgm.0.url(), "ts48"), sidecar(dcgm.1.url(), "ts49"));
    let host = |url: String| {
        url.trim_start_matches("http://")
            .trim_end_matches("/metrics")
            .to_owned()
    };
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
         rule_files:\n  - '{}'\n\
         scrape_configs:\n\
         \x20 - job_name: dcgm-exporter\n    static_configs:\n      - targets: ['{}', '{}']\n\
         \x20 - job_name: truthscale\n    honor_labels: true\n    \
         static_configs:\n      - targets: ['{}', '{}']\n",
        workspace().join(RULES).display(),
        host(dcgm.0.url()),
        host(dcgm.1.url()),
        ts48.addr,
        ts49.addr
    );
    let prom = Prometheus::start(&config, tmp.path());
    let started = Instant::now();
    // Effective compute from each entity's second window on.
    while prom.series(OVER).len() < 2 || prom.series(GPU_GR).len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not every joined series in 60 s: {:?}, {:?}\nprometheus:\n{}\nsidecars:\n{}\n{}",
            prom.series(OVER),
            prom.series(GPU_GR),
            prom.process.stderr(),
            ts48.process.stderr(),
            ts49.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    Joined {
        _dcgm: dcgm,
        ts48,
        ts49,
        prom,
        _tmp: tmp,
    }
}

const DEV_UTIL: &str = "device:truthscale_dcgm_exporter_gpu_utilization:ratio";
const DEV_GR: &str = "device:truthscale_dcgm_exporter_gr_engine_active:ratio";
const GPU_UTIL: &str = "gpu:truthscale_dcgm_exporter_gpu_utilization:ratio";
const GPU_GR: &str = "gpu:truthscale_dcgm_exporter_gr_engine_active:ratio";
const OVER: &str = "gpu:truthscale_dcgm_exporter_utilization_over_effective_compute:ratio";

/// The five rules on a real Prometheus: a 4.8 and a 4.9 dcgm-exporter, each read by a
/// truthscale sidecar, all scraped. dcgm-exporter's readings under truthscale's labels from
/// either naming; on truthscale's GPUs with every label of `truthscale_gpu_info` (the pod
/// the 4.8 exporter attributed, the PCI id, the driver version under either label name);
/// the busy flag minus effective compute with the effective compute's labels. Exact values.
#[test]
fn dcgm_exporter_4_8_and_4_9_join_truthscale_on_real_prometheus() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let j = start();
    let dev48 = labels(&[("node", "node-48"), ("uuid", "GPU-48")]);
    let dev49 = labels(&[("node", "node-49"), ("uuid", "GPU-49")]);
    let mig49 = labels(&[
        ("node", "node-49"),
        ("uuid", "GPU-49M"),
        ("mig_instance", "2"),
    ]);
    let got = |q: &str| j.prom.series(q);
    assert_series(
        DEV_UTIL,
        got(DEV_UTIL),
        vec![
            (named(DEV_UTIL, &dev48), 0.75),
            (named(DEV_UTIL, &dev49), 0.5),
        ],
    );
    assert_series(
        DEV_GR,
        got(DEV_GR),
        vec![
            (named(DEV_GR, &dev48), 0.875),
            (named(DEV_GR, &dev49), 0.5),
            (named(DEV_GR, &mig49), 0.25),
        ],
    );
    let (gpu48, gpu49, mig) = truthscale_gpus(&j);
    let info = "truthscale_gpu_info";
    assert_series(
        info,
        got(info),
        [&gpu48, &gpu49, &mig]
            .map(|l| (named(info, l), 1.0))
            .to_vec(),
    );
    assert_series(
        GPU_UTIL,
        got(GPU_UTIL),
        vec![
            (named(GPU_UTIL, &gpu48), 0.75),
            (named(GPU_UTIL, &gpu49), 0.5),
        ],
    );
    assert_series(
        GPU_GR,
        got(GPU_GR),
        vec![
            (named(GPU_GR, &gpu48), 0.875),
            (named(GPU_GR, &gpu49), 0.5),
            (named(GPU_GR, &mig), 0.25),
        ],
    );
    // 0.75 − 0.25 and 0.5 − 0.125; the MIG instance has no busy flag, so no value.
    let ecf_labels = |info: &BTreeMap<String, String>| {
        let mut l = named(OVER, info);
        for k in [
            "source",
            "fidelity",
            "catalog_model",
            "pci_bus_id",
            "driver_version",
        ] {
            l.remove(k);
        }
        l
    };
    assert_series(
        OVER,
        got(OVER),
        vec![(ecf_labels(&gpu48), 0.5), (ecf_labels(&gpu49), 0.375)],
    );
    let problems = j.prom.process.stderr();
    assert!(
        !truthscale_e2e::logs_an_error(&problems),
        "prometheus logged errors:\n{problems}"
    );
}

/// The labels of `truthscale_gpu_info` for GPU-48, GPU-49 and the MIG instance.
fn truthscale_gpus(
    j: &Joined,
) -> (
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
) {
    let gpu48 = info_labels(
        &j.ts48,
        &[
            ("gpu", "0"),
            ("uuid", "GPU-48"),
            ("node", "node-48"),
            ("pod", "llm-a"),
            ("namespace", "serving"),
            ("container", "vllm"),
            ("pci_bus_id", "00000000:3B:00.0"),
            ("driver_version", "550.54.15"),
        ],
    );
    let on49 = |extra: &[(&'static str, &'static str)]| {
        let mut l = vec![("node", "node-49"), ("driver_version", "570.124.06")];
        l.extend_from_slice(extra);
        info_labels(&j.ts49, &l)
    };
    let gpu49 = on49(&[
        ("gpu", "0"),
        ("uuid", "GPU-49"),
        ("pci_bus_id", "00000000:3C:00.0"),
    ]);
    let mig = on49(&[
        ("gpu", "1"),
        ("uuid", "GPU-49M"),
        ("mig_instance", "2"),
        ("mig_profile", "3g.40gb"),
        ("pci_bus_id", "00000000:3D:00.0"),
    ]);
    (gpu48, gpu49, mig)
}

//! The dashboards and the rules against a real Prometheus.
//!
//! Three sidecars (three pods on one node, four simulated GPUs) are scraped by a real
//! Prometheus that loads `alerts/truthscale.rules.yml`:
//!
//! | pod | scenario per GPU |
//! |---|---|
//! | `serving/llm-a` | GPU 0 llm-serving, GPU 1 decode-only |
//! | `batch/phantom-b` | GPU 0 tiny-kernel (busy flag on, nothing computed or moved) |
//! | `batch/idle-c` | GPU 0 idle-allocated |
//!
//! After a minute of scraping, every PromQL expression of `dashboards/*.json` (every `expr`,
//! nested panels included, and the template-variable queries) and every `expr` of the rules
//! must evaluate without error and return data. An expression that cannot return data in a
//! one-minute run of these scenarios is not skipped: it is named in [`DOCUMENTED`] with the
//! reason and a data-returning form (the expression rewritten, e.g. without its threshold),
//! and that form must return data. Then `TruthscalePhantomUtilization` must be active
//! (pending or firing) for the tiny-kernel GPU only, and `TruthscaleGPUAllocatedIdle` for the
//! idle-allocated GPU only.
//!
//! Every process lives in a guard that kills its process group on drop. The tests on a real
//! Prometheus belong to the external-tool tier (`require_tool_or_return!`): without
//! `TRUTHSCALE_FULL_TESTS` or `CI` they say so and are not run; with either, a missing
//! `/usr/bin/prometheus` fails them: run `scripts/test`, which installs it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use truthscale_e2e::api_data;
use truthscale_e2e::{Prometheus, Sidecar, TempDir, require_tool_or_return, url_encode, workspace};

const RULES: &str = "alerts/truthscale.rules.yml";
const NODE: &str = "node-1";
/// Scraping time after all targets are up: enough for every `rate()` and recording rule.
const SCRAPE_FOR: Duration = Duration::from_secs(60);

/// One sidecar: a pod with its GPUs.
struct Pod {
    name: &'static str,
    namespace: &'static str,
    container: &'static str,
    source: &'static str,
    gpus: &'static str,
    /// Simulator seed: each process its own, so the simulated UUIDs differ across pods.
    seed: &'static str,
}

const PODS: [Pod; 3] = [
    Pod {
        name: "llm-a",
        namespace: "serving",
        container: "server",
        source: "sim",
        gpus: "2",
        seed: "101",
    },
    Pod {
        name: "phantom-b",
        namespace: "batch",
        container: "worker",
        source: "sim:tiny-kernel",
        gpus: "1",
        seed: "202",
    },
    Pod {
        name: "idle-c",
        namespace: "batch",
        container: "notebook",
        source: "sim:idle-allocated",
        gpus: "1",
        seed: "303",
    },
];

/// Values for the dashboards' template variables, as Grafana would interpolate them for
/// *All* (`.*`, which also matches series without the label, e.g. `cluster` here) and a
/// one-minute time range at a 15 s interval.
const VARIABLES: [(&str, &str); 13] = [
    ("datasource", "prometheus"),
    ("cluster", ".*"),
    ("namespace", ".*"),
    ("pod", ".*"),
    ("node", ".*"),
    ("gpu", ".*"),
    ("instance", ".*"),
    ("__rate_interval", "1m"),
    ("__interval", "15s"),
    ("__interval_ms", "15000"),
    ("__range", "1m"),
    ("__range_s", "60"),
    ("__range_ms", "60000"),
];

/// An expression that legitimately returns nothing in a one-minute run of these scenarios,
/// why, and how to turn it into the form that must return data instead.
struct Documented {
    /// Where: a location as [`collect`] names it, exactly, or with one `*` for any text.
    at: &'static str,
    /// Why the expression itself returns nothing here.
    reason: &'static str,
    /// Replacements applied in order to the expression (variables substituted, whitespace
    /// collapsed); each `from` must occur in it, or the entry is stale.
    rewrites: &'static [(&'static str, &'static str)],
}

/// The allow-list. The test fails when an entry names no expression or a rewrite no longer
/// applies, so it cannot silently outlive the expression it documents.
const DOCUMENTED: &[Documented] = &[
    Documented {
        at: "* / variable cluster",
        reason: "single-cluster Prometheus: no series has a `cluster` label, so \
                 label_values(…, cluster) is empty and the variable offers only All (= .*, \
                 which matches the absent label); the form counts the series the variable's \
                 selector matches, grouped by the (absent) label",
        rewrites: &[(
            "label_values(truthscale_gpu_info, cluster)",
            "count by (cluster) (truthscale_gpu_info)",
        )],
    },
    Documented {
        at: "truthscale-exporter.json / Source errors by kind / A",
        reason: "truthscale_source_errors_total{source,kind} has no series until a source \
                 fails (each kind appears at its first error) and the simulator never fails; \
                 the form aggregates the same exporters' per-source truthscale_source_up * 0, \
                 the panel's value with no errors",
        rewrites: &[(
            "rate(truthscale_source_errors_total{cluster=~\".*\", instance=~\".*\"}[5m])",
            "truthscale_source_up{cluster=~\".*\", instance=~\".*\"} * 0",
        )],
    },
    Documented {
        at: "truthscale-exporter.json / Derivation diagnostics by kind / A",
        reason: "truthscale_derivation_diagnostics_total{kind} has no series until a reading \
                 is dropped, clamped or skipped (each kind appears at its first diagnostic), \
                 and these scenarios' simulated readings raise none; the form aggregates the \
                 same exporters' truthscale_source_up * 0, the panel's value with no \
                 diagnostics",
        rewrites: &[(
            "rate(truthscale_derivation_diagnostics_total{cluster=~\".*\", instance=~\".*\"}[5m])",
            "truthscale_source_up{cluster=~\".*\", instance=~\".*\"} * 0",
        )],
    },
    Documented {
        at: "truthscale-pod.json / Effective compute vs reported utilization / C",
        reason: "the effective-compute upper bound is exported only below the profiling \
                 tier, where effective compute itself is not measured; every simulated GPU is \
                 at the profiling tier; the form reads the measured effective compute it \
                 stands in for",
        rewrites: &[(
            "truthscale_gpu_effective_compute_upper_bound_ratio{",
            "truthscale_gpu_effective_compute_ratio{",
        )],
    },
    Documented {
        at: "truthscale-pod.json / Clock correction and throttling / B",
        reason: "shows only active clock events (== 1); the simulator raises one only in the \
                 training scenario (sw_power_cap), which none of these GPUs runs; the form is \
                 every clock-event series, active or not",
        rewrites: &[("} == 1", "}")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleDecodeBoundWithoutBatching",
        reason: "the decode-only GPU batches 8 to 64 requests, so its tensor activity stays \
                 near 0.1, above the 2 % of unbatched decoding; the form keeps the \
                 memory-bound condition (DRAM > 0.5) and drops the tensor threshold",
        rewrites: &[(
            "avg_over_time(truthscale_gpu_tensor_active_ratio[10m]) < 0.02",
            "avg_over_time(truthscale_gpu_tensor_active_ratio[10m])",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleMemoryOverprovisioned",
        reason: "the `offset 23h` term requires a day of history before a pod is judged; the \
                 form is the alert without that age gate (the tiny-kernel GPU uses 2 % of its \
                 memory)",
        rewrites: &[(
            " and max_over_time(truthscale_gpu_memory_used_bytes{pod!=\"\"}[1h] offset 23h)",
            "",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleExporterDown",
        reason: "all three targets are up and scraped; the form is the `up` vector the \
                 condition filters",
        rewrites: &[(
            "up{job=~\".*truthscale.*\"} == 0 or absent(up{job=~\".*truthscale.*\"})",
            "up{job=~\".*truthscale.*\"}",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleSourceStale",
        reason: "every simulated source produces samples; the form is the source_up vector \
                 the condition filters",
        rewrites: &[(
            "truthscale_source_up{source!~\"kubelet|apiserver|engine|pressure\"} == 0",
            "truthscale_source_up{source!~\"kubelet|apiserver|engine|pressure\"}",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleEnrichmentStale",
        reason: "the simulated sidecars read no serving engine and no cgroup pressure; the form \
                 is the GPU source's up vector, which the condition filters the same way",
        rewrites: &[(
            "truthscale_source_up{source=~\"engine|pressure\"} == 0",
            "truthscale_source_up{source=\"sim\"}",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleKubeletUnreadable",
        reason: "node mode, or a sidecar with pod_resources, only: these have no kubelet source; the form is the GPU \
                 source's up vector, which the condition filters the same way",
        rewrites: &[(
            "truthscale_source_up{source=\"kubelet\"} == 0",
            "truthscale_source_up{source=\"sim\"}",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscalePodLabelsUnreadable",
        reason: "node mode with pod labels only: a sidecar has no API server source; the form \
                 is the GPU source's up vector, which the condition filters the same way",
        rewrites: &[(
            "truthscale_source_up{source=\"apiserver\"} == 0",
            "truthscale_source_up{source=\"sim\"}",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStarvedByCPUThrottling",
        reason: "the simulated GPUs have no holder pods' cgroups and no PCIe or NVLink traffic \
                 near a link's capacity, so none is starved with this cause half the time; the \
                 form is the same rate without the threshold (a judged GPU has every cause's \
                 counter)",
        rewrites: &[(" > 0.5", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStarvedByCPUContention",
        reason: "the simulated GPUs have no holder pods' cgroups and no PCIe or NVLink traffic \
                 near a link's capacity, so none is starved with this cause half the time; the \
                 form is the same rate without the threshold (a judged GPU has every cause's \
                 counter)",
        rewrites: &[(" > 0.5", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStarvedByIO",
        reason: "the simulated GPUs have no holder pods' cgroups and no PCIe or NVLink traffic \
                 near a link's capacity, so none is starved with this cause half the time; the \
                 form is the same rate without the threshold (a judged GPU has every cause's \
                 counter)",
        rewrites: &[(" > 0.5", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStarvedByHostToDevice",
        reason: "the simulated GPUs have no holder pods' cgroups and no PCIe or NVLink traffic \
                 near a link's capacity, so none is starved with this cause half the time; the \
                 form is the same rate without the threshold (a judged GPU has every cause's \
                 counter)",
        rewrites: &[(" > 0.5", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStarvedByKernelLaunches",
        reason: "the simulated GPUs have no holder pods' cgroups and no PCIe or NVLink traffic \
                 near a link's capacity, so none is starved with this cause half the time; the \
                 form is the same rate without the threshold (a judged GPU has every cause's \
                 counter)",
        rewrites: &[(" > 0.5", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStarvedByCommunication",
        reason: "the simulated GPUs have no holder pods' cgroups and no PCIe or NVLink traffic \
                 near a link's capacity, so none is starved with this cause half the time; the \
                 form is the same rate without the threshold (a judged GPU has every cause's \
                 counter)",
        rewrites: &[(" > 0.5", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleGPUHeldIdle",
        reason: "a one-minute run never reaches 20 idle minutes, and no holder here has an \
                 owner (no pod reader) nor, on the simulated GPUs, a pod label; the form drops \
                 the threshold and the pod filter (every GPU's idle seconds, 0 while it works) \
                 and the owner filter",
        rewrites: &[
            (
                "truthscale_gpu_idle_seconds{pod!=\"\"} > 1200",
                "truthscale_gpu_idle_seconds >= 0",
            ),
            ("{owner_kind!=\"\"}", ""),
            (
                "truthscale_gpu_idle_seconds{pod!=\"\"} > 1200",
                "truthscale_gpu_idle_seconds >= 0",
            ),
        ],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleStraggler",
        reason: "the simulated GPUs belong to no job (no pod holds several of them), so none \
                 is a straggler and the gap family has no series; \
                 causes_gpu::an_eight_gpu_job_with_one_clock_capped_has_one_straggler_and_seven_waiting \
                 shows it on eight GPUs of one job; the form checks the expression's shape on \
                 a gauge every GPU here has",
        rewrites: &[(
            "truthscale_gpu_straggler_gap_ratio",
            "truthscale_gpu_sm_active_ratio",
        )],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleGPUStopped",
        reason: "the simulated GPUs never stop, so no GPU is up 0; \
                 nvml::a_gpu_lost_mid_run_goes_stale_and_the_other_carries_on shows a lost \
                 GPU at truthscale_gpu_up 0 while its source carries on, and the rule's \
                 unit test the alert; the form checks the expression's shape on the GPUs \
                 that are up (no device up twice)",
        rewrites: &[
            ("(truthscale_gpu_up == 1)", "(truthscale_gpu_up == 2)"),
            ("truthscale_gpu_up == 0", "truthscale_gpu_up == 1"),
        ],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleGPUUnavailable",
        reason: "the simulated GPUs report no health field (no XID, ECC, row remapper), so \
                 the health family has no series; health::nvml_a_pending_row_remap_is_unavailable_and_a_healthy_gpu_ok \
                 and health::dcgm_health_fields_under_legacy_and_canonical_names_read_the_same \
                 show it on a GPU with a pending row remap; the form checks the expression's \
                 shape on the verdict family every judged GPU has",
        rewrites: &[(
            "truthscale_gpu_health{state=\"unavailable\"} == 1",
            "truthscale_gpu_verdict{verdict=\"unavailable\"} == 0",
        )],
    },
    Documented {
        at: "truthscale-node.json / Stragglers: how far each GPU holds its job back / A",
        reason: "the simulated GPUs belong to no job, so neither straggler family has a series \
                 (see the alert's entry); the form checks the expression's shape on a gauge \
                 every GPU here has",
        rewrites: &[
            (
                "truthscale_gpu_straggler_gap_ratio",
                "truthscale_gpu_sm_active_ratio",
            ),
            (
                "truthscale_gpu_waiting_on_straggler_gap_ratio",
                "truthscale_gpu_sm_active_ratio",
            ),
        ],
    },
    Documented {
        at: "truthscale-node.json / Cause signals: the holder pods' CPU and I/O pressure / A",
        reason: "node mode only: the holder pods' cgroups are read by the node agent, and this \
                 panel returns data in node_manifests::node_dashboard_on_real_prometheus; these \
                 sidecars run no node agent, so the form checks the same expression's shape on \
                 a gauge every GPU here has",
        rewrites: &[
            (
                "truthscale_gpu_holder_cpu_throttled_ratio",
                "truthscale_gpu_sm_active_ratio",
            ),
            (
                "truthscale_gpu_holder_cpu_pressure_waiting_ratio",
                "truthscale_gpu_sm_active_ratio",
            ),
            (
                "truthscale_gpu_holder_io_pressure_waiting_ratio",
                "truthscale_gpu_sm_active_ratio",
            ),
        ],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleFidelityDropped",
        reason: "every simulated GPU stays at the profiling tier with effective compute \
                 measured in every window (coverage 1, above the 0.25 threshold), keeps its \
                 effective-compute-observed counter, and no exporter restarts; the form drops \
                 the coverage threshold: the coverage of every profiling-tier GPU",
        rewrites: &[(" < 0.25", "")],
    },
    Documented {
        at: "truthscale.rules.yml / alert TruthscaleClockThrottling",
        reason: "the simulator's only clock event, sw_power_cap in the training scenario, \
                 holds the clock at 97 % of the rated one (above the 90 % threshold), and none \
                 of these GPUs runs training; the form is the same product of the 5-minute \
                 clock-correction and clock-event vectors without the two thresholds",
        rewrites: &[
            (
                "avg_over_time(truthscale_gpu_clock_correction_ratio[5m]) < 0.9)",
                "avg_over_time(truthscale_gpu_clock_correction_ratio[5m]))",
            ),
            ("[5m]) == 1)", "[5m]))"),
        ],
    },
    // The node view (dashboards/truthscale-node.json) reads what only a node-mode agent
    // exports: the kubelet's allocation (truthscale_gpu_pods, truthscale_gpu_allocation_info),
    // the kubelet reader's health (truthscale_source_up{source="kubelet"}) and the per-pod
    // shares of time-sliced GPUs (truthscale_pod_*). These sidecars run in sidecar mode, so
    // each form reads the series a sidecar does export in the same shape;
    // node_manifests::node_dashboard_on_real_prometheus runs every one of these expressions
    // itself against a node-mode agent and requires data from each.
    Documented {
        at: "truthscale-node.json / GPUs by allocation*",
        reason: "node mode only: a sidecar does not read the kubelet, so it exports no \
                 truthscale_gpu_pods and no kubelet source; the form counts the same GPUs \
                 from truthscale_gpu_info (value 1, so idle and one-pod read 0) against the \
                 GPU source's up series",
        rewrites: &[
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("source=\"kubelet\"", "source=\"sim\""),
        ],
    },
    Documented {
        at: "truthscale-node.json / Kubelet readers down / A",
        reason: "node mode only: a sidecar has no kubelet source; the form reads the GPU \
                 source's up series the same way (0 when none is down)",
        rewrites: &[("source=\"kubelet\"", "source=\"sim\"")],
    },
    Documented {
        at: "truthscale-node.json / Kubelet source up / A",
        reason: "node mode only: a sidecar has no kubelet source; the form reads the GPU \
                 source's up series, joined to its node the same way",
        rewrites: &[
            ("source=\"kubelet\"", "source=\"sim\""),
            ("source=\"kubelet\"", "source=\"sim\""),
        ],
    },
    Documented {
        at: "truthscale-node.json / GPUs of the selected nodes / A",
        reason: "node mode only: a sidecar exports no truthscale_gpu_pods; the form lists \
                 the same GPUs from truthscale_gpu_info",
        rewrites: &[("truthscale_gpu_pods{", "truthscale_gpu_info{")],
    },
    Documented {
        at: "truthscale-node.json / Effective compute per pod / B",
        reason: "node mode only, on time-sliced GPUs with per-process attribution: a sidecar \
                 exports no per-pod share; the form reads the device's effective compute of \
                 the same pods",
        rewrites: &[(
            "truthscale_pod_effective_compute_estimate_ratio{",
            "truthscale_gpu_effective_compute_ratio{",
        )],
    },
    Documented {
        at: "truthscale-node.json / Effective compute per pod / C",
        reason: "node mode only: the share of a time-sliced GPU's processes whose pod was not \
                 found; a sidecar exports no per-pod share and labels every GPU with its pod; \
                 the form reads the same devices' effective compute",
        rewrites: &[
            (
                "truthscale_pod_effective_compute_estimate_ratio{",
                "truthscale_gpu_effective_compute_ratio{",
            ),
            (", pod=\"\"}", "}"),
        ],
    },
    Documented {
        at: "truthscale-node.json / Holders of shared GPUs / A",
        reason: "node mode only: a sidecar exports neither the kubelet's holders nor \
                 truthscale_gpu_pods, and no GPU is shared; the form joins the GPUs' info to \
                 itself the same way",
        rewrites: &[
            ("truthscale_gpu_allocation_info{", "truthscale_gpu_info{"),
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("} > 1)", "} == 1)"),
        ],
    },
    Documented {
        at: "truthscale-node.json / Effective compute of shared GPUs (whole device) / A",
        reason: "node mode only: a sidecar exports no truthscale_gpu_pods and no GPU is \
                 shared; the form keeps the effective-compute means of every GPU that has \
                 an info series",
        rewrites: &[
            ("truthscale_gpu_pods{", "truthscale_gpu_info{"),
            ("} > 1)", "} == 1)"),
        ],
    },
    Documented {
        at: "truthscale-node.json / GPU memory per pod on shared GPUs / A",
        reason: "node mode only, on time-sliced GPUs with per-process attribution: a sidecar \
                 exports no per-pod memory; the form reads the same pods' device memory",
        rewrites: &[(
            "truthscale_pod_memory_used_bytes{",
            "truthscale_gpu_memory_used_bytes{",
        )],
    },
    Documented {
        at: "truthscale-node.json / GPU memory per pod on shared GPUs / B",
        reason: "node mode only: the memory of a time-sliced GPU's processes whose pod was not \
                 found; a sidecar exports no per-pod memory and labels every GPU with its pod; \
                 the form reads the same devices' memory",
        rewrites: &[
            (
                "truthscale_pod_memory_used_bytes{",
                "truthscale_gpu_memory_used_bytes{",
            ),
            (", pod=\"\"}", "}"),
        ],
    },
    // The showback dashboard (dashboards/truthscale-showback.json) reads the recording rules
    // of alerts/showback.rules.yml over node mode's allocation info, which these sidecars do
    // not export and this Prometheus does not load (it loads truthscale.rules.yml only); each
    // form reads the series the rule is made of, for the same GPUs;
    // node_manifests::node_dashboard_on_real_prometheus loads the rules against a node-mode
    // agent and requires data from every one of these expressions (the team panel's aside).
    Documented {
        at: "truthscale-showback.json / Fleet GPU-hours over the range / A",
        reason: "showback rules not loaded here: the form sums the devices' shares of their GPUs, \
                 the rule's input",
        rewrites: &[(
            "cluster:truthscale_gpu_fleet:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / Fleet GPU-hours over the range / B",
        reason: "node mode only (allocation info): a sidecar's GPUs are its pod's; the form sums \
                 their shares",
        rewrites: &[(
            "namespace:truthscale_gpu_allocated:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / Fleet GPU-hours over the range / C",
        reason: "node mode only: without allocation info nothing is known to be unallocated; \
                 the form sums the same devices' shares",
        rewrites: &[(
            "cluster:truthscale_gpu_unallocated:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / *, by namespace / A",
        reason: "node mode only (allocation info): the form sums the shares of the same \
                 namespaces' GPUs",
        rewrites: &[(
            "namespace:truthscale_gpu_allocated:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / *, by namespace / B",
        reason: "showback rules not loaded here: the form sums the same namespaces' effective \
                 compute, the rule's input for GPUs one pod holds",
        rewrites: &[(
            "namespace:truthscale_gpu_effective_compute:gpu_hours_per_hour{",
            "truthscale_gpu_effective_compute_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / GPU-hours held, by team / A",
        reason: "node mode with node.pod_labels only (label_team on allocation info): the form \
                 sums the same GPUs' shares, under no team",
        rewrites: &[(
            "team:truthscale_gpu_allocated:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / GPU-hours per pod / A",
        reason: "node mode only (allocation info): the form sums the shares of the same pods' \
                 GPUs",
        rewrites: &[(
            "pod:truthscale_gpu_allocated:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / GPU-hours per pod / B",
        reason: "showback rules not loaded here: the form sums the same pods' effective \
                 compute",
        rewrites: &[(
            "pod:truthscale_gpu_effective_compute:gpu_hours_per_hour{",
            "truthscale_gpu_effective_compute_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / Where the GPU-hours went: total → healthy → allocated → active → effective / *",
        reason: "showback rules not loaded here (node_manifests::node_dashboard_on_real_prometheus \
                 requires data from each stage against a node-mode agent): the form sums the \
                 devices' shares of their GPUs, the funnel's input, for any stage",
        rewrites: &[
            (
                "cluster:truthscale_gpu_funnel:gpu_hours_per_hour{",
                "truthscale_gpu_share_ratio{",
            ),
            ("stage=\"", "stage!=\""),
        ],
    },
    Documented {
        at: "truthscale-showback.json / Where the GPU-hours were lost / A",
        reason: "showback rules not loaded here: the form sums the devices' shares of their \
                 GPUs, the losses' input",
        rewrites: &[(
            "cluster:truthscale_gpu_funnel_loss:gpu_hours_per_hour{",
            "truthscale_gpu_share_ratio{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / Energy by namespace (kWh) / A",
        reason: "node mode only (the kubelet's allocation): a sidecar's GPUs are its pod's, \
                 and their energy in its parts is the device's; the form sums the same \
                 namespaces' device energy parts",
        rewrites: &[(
            "truthscale_pod_energy_joules_total{",
            "truthscale_gpu_energy_part_joules_total{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / Energy by namespace (kWh) / B",
        reason: "node mode only, on time-sliced GPUs with per-process attribution: no GPU is \
                 shared here; the form sums the same namespaces' device energy parts",
        rewrites: &[(
            "truthscale_pod_energy_estimate_joules_total{",
            "truthscale_gpu_energy_part_joules_total{",
        )],
    },
    Documented {
        at: "truthscale-showback.json / Fleet energy over the range (kWh) / B",
        reason: "node mode only: without the kubelet's allocation nothing is known to be \
                 unallocated; the form sums the same devices' energy parts",
        rewrites: &[(
            "truthscale_gpu_unallocated_energy_joules_total{",
            "truthscale_gpu_energy_part_joules_total{",
        )],
    },
];

/// One expression to check.
#[derive(Debug)]
pub(crate) struct Expr {
    /// Where it comes from: `<dashboard file> / <panel title> / <refId>`,
    /// `<dashboard file> / variable <name>`, `truthscale.rules.yml / record <name>` or
    /// `truthscale.rules.yml / alert <name>`.
    pub(crate) at: String,
    /// Template variables substituted, whitespace collapsed.
    pub(crate) text: String,
}

pub(crate) fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Interpolate Grafana template variables: `$name`, `${name}` and `${name:format}`.
///
/// # Panics
/// On a variable not in [`VARIABLES`] or the deprecated `[[name]]` syntax.
fn substitute(expr: &str, at: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, used) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .unwrap_or_else(|| panic!("{at}: unterminated ${{ in {expr}"));
            // `${name:format}`: for the values used here (`.*`, durations) every format is
            // the value itself.
            (braced[..end].split(':').next().unwrap_or_default(), end + 2)
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..len], len)
        };
        if name.is_empty() {
            // A literal `$` (a regex anchor, say).
            out.push('$');
            rest = after;
            continue;
        }
        let value = VARIABLES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| {
                panic!("{at}: template variable ${name} has no value in VARIABLES: {expr}")
            });
        out.push_str(value);
        rest = &after[used..];
    }
    out.push_str(rest);
    assert!(
        !out.contains("[["),
        "{at}: deprecated [[variable]] syntax in {expr}"
    );
    collapse(&out)
}

fn read(rel: &str) -> String {
    let p = workspace().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Every `expr` in a dashboard, wherever it is (panels, panels nested in rows, annotations),
/// named by the nearest title and the target's `refId`.
pub(crate) fn dashboard_exprs(file: &str, d: &Json, out: &mut Vec<Expr>) {
    fn walk(v: &Json, title: &str, file: &str, out: &mut Vec<Expr>) {
        match v {
            Json::Object(m) => {
                let title = m.get("title").and_then(Json::as_str).unwrap_or(title);
                if let Some(e) = m.get("expr").and_then(Json::as_str) {
                    let leaf = m
                        .get("refId")
                        .or_else(|| m.get("name"))
                        .and_then(Json::as_str)
                        .unwrap_or("expr");
                    let at = format!("{file} / {title} / {leaf}");
                    out.push(Expr {
                        text: substitute(e, &at),
                        at,
                    });
                }
                for (k, v) in m {
                    if k != "templating" {
                        walk(v, title, file, out);
                    }
                }
            }
            Json::Array(a) => a.iter().for_each(|v| walk(v, title, file, out)),
            _ => {}
        }
    }
    walk(d, "(dashboard)", file, out);
}

/// The template variables' queries (type `query`; a `datasource` variable names a plugin,
/// not a query). Returns how many variables were not queries.
pub(crate) fn variable_queries(file: &str, d: &Json, out: &mut Vec<Expr>) -> usize {
    let mut other = 0;
    for v in d
        .pointer("/templating/list")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let name = v.get("name").and_then(Json::as_str).unwrap_or("?");
        assert!(
            VARIABLES.iter().any(|(n, _)| *n == name),
            "{file}: variable {name} has no value in VARIABLES"
        );
        if v.get("type").and_then(Json::as_str) != Some("query") {
            other += 1;
            continue;
        }
        let q = match v.get("query") {
            Some(Json::String(s)) => s.as_str(),
            Some(o @ Json::Object(_)) => o.get("query").and_then(Json::as_str).unwrap_or(""),
            _ => "",
        };
        let at = format!("{file} / variable {name}");
        assert!(!q.trim().is_empty(), "{at}: no query");
        out.push(Expr {
            text: substitute(q, &at),
            at,
        });
    }
    other
}

/// Every `expr` of the rules (recording rules and alerts).
fn rule_exprs(out: &mut Vec<Expr>) {
    let file = Path::new(RULES)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(RULES);
    let doc: Yaml = serde_yaml_ng::from_str(&read(RULES)).expect("rules are YAML");
    for g in doc
        .get("groups")
        .and_then(Yaml::as_sequence)
        .into_iter()
        .flatten()
    {
        for r in g
            .get("rules")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
        {
            let name = match (r.get("record"), r.get("alert")) {
                (Some(n), None) => format!("record {}", n.as_str().unwrap_or("?")),
                (None, Some(n)) => format!("alert {}", n.as_str().unwrap_or("?")),
                _ => panic!("{RULES}: rule neither record nor alert: {r:?}"),
            };
            let expr = r
                .get("expr")
                .and_then(Yaml::as_str)
                .unwrap_or_else(|| panic!("{RULES}: {name} has no expr"));
            out.push(Expr {
                at: format!("{file} / {name}"),
                text: collapse(expr),
            });
        }
    }
}

/// All expressions, and how many dashboard variables were not queries.
fn collect() -> (Vec<Expr>, usize) {
    let mut out = Vec::new();
    let mut other = 0;
    let dir = workspace().join("dashboards");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("dashboards/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no dashboards/*.json");
    for p in &files {
        let file = p
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("?")
            .to_owned();
        let d: Json = serde_json::from_str(&std::fs::read_to_string(p).expect("read dashboard"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        dashboard_exprs(&file, &d, &mut out);
        other += variable_queries(&file, &d, &mut out);
    }
    rule_exprs(&mut out);
    let mut seen = BTreeSet::new();
    for e in &out {
        assert!(seen.insert(e.at.clone()), "two expressions at {}", e.at);
    }
    (out, other)
}

/// Whether `at` matches a pattern with at most one `*`.
fn at_matches(pattern: &str, at: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == at,
        Some((pre, post)) => {
            at.len() >= pre.len() + post.len() && at.starts_with(pre) && at.ends_with(post)
        }
    }
}

/// `label_values(selector, label)` or `label_values(label)`: `(selector, label)`.
fn label_values(q: &str) -> Option<(Option<&str>, &str)> {
    let inner = q
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?
        .trim();
    let (mut depth, mut quote, mut escaped, mut split) = (0_i32, None, false, None);
    for (i, c) in inner.char_indices() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(c),
            (None, '(' | '{' | '[') => depth += 1,
            (None, ')' | '}' | ']') => depth -= 1,
            (None, ',') if depth == 0 => split = Some(i),
            _ => {}
        }
    }
    Some(match split {
        Some(i) => (Some(inner[..i].trim()), inner[i + 1..].trim()),
        None => (None, inner),
    })
}

/// Evaluate a PromQL expression or a Grafana variable query now: `Ok(number of results)`.
fn evaluate(prom: &Prometheus, text: &str) -> Result<usize, String> {
    if let Some((selector, label)) = label_values(text) {
        let mut path = format!("/api/v1/label/{}/values", url_encode(label));
        if let Some(s) = selector {
            path.push_str(&format!("?match%5B%5D={}", url_encode(s)));
        }
        let data = api_data(text, &prom.get(&path))?;
        return data
            .as_array()
            .map(Vec::len)
            .ok_or_else(|| format!("label values not a list: {data}"));
    }
    assert!(
        !text.contains("label_values(") && !text.starts_with("query_result("),
        "unsupported variable query {text}"
    );
    let data = api_data(text, &prom.query(text))?;
    match data["resultType"].as_str() {
        Some("vector" | "matrix") => Ok(data["result"].as_array().map_or(0, Vec::len)),
        Some("scalar" | "string") => Ok(1),
        other => Err(format!("unexpected resultType {other:?}: {data}")),
    }
}

fn label(l: &BTreeMap<String, String>, name: &str) -> String {
    l.get(name).cloned().unwrap_or_default()
}

/// `(pod, gpu)` of each series.
fn pod_gpus(s: &[(BTreeMap<String, String>, f64)]) -> BTreeSet<(String, String)> {
    s.iter()
        .map(|(l, _)| (label(l, "pod"), label(l, "gpu")))
        .collect()
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn dashboards_and_rules_on_real_prometheus() {
    const T: &str = "dashboards_and_rules_on_real_prometheus";
    // Checked before anything starts; Prometheus::start checks it again.
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let started = Instant::now();
    let secs = || started.elapsed().as_secs_f64();
    // Collected (and every template variable resolved) before anything is started.
    let (exprs, non_query_variables) = collect();

    let tmp = TempDir::new("rules");
    let mut sidecars = Vec::new();
    for p in &PODS {
        let dir = tmp.path().join(p.name);
        std::fs::create_dir_all(&dir).expect("sidecar dir");
        let sidecar = Sidecar::start(
            &[
                "--source",
                p.source,
                "--sim-gpus",
                p.gpus,
                "--interval",
                "1s",
            ],
            &[
                ("POD_NAME", p.name),
                ("POD_NAMESPACE", p.namespace),
                ("CONTAINER_NAME", p.container),
                ("NODE_NAME", NODE),
                ("TRUTHSCALE_SOURCE__SEED", p.seed),
            ],
            &dir,
        );
        sidecars.push((p, sidecar));
    }
    eprintln!("{T}: 3 sidecars ready after {:.1} s", secs());

    let targets: Vec<String> = sidecars
        .iter()
        .map(|(_, s)| format!("'{}'", s.addr))
        .collect();
    let rules_path = workspace().join(RULES);
    let config = format!(
        "global:\n  scrape_interval: 5s\n  scrape_timeout: 4s\n  evaluation_interval: 5s\n\
         rule_files:\n  - '{}'\n\
         scrape_configs:\n  - job_name: truthscale\n    honor_labels: true\n    \
         static_configs:\n      - targets: [{}]\n",
        rules_path.display(),
        targets.join(", ")
    );
    let mut prom = Prometheus::start(&config, tmp.path());
    eprintln!("{T}: prometheus ready after {:.1} s", secs());

    let mut alive = |prom: &mut Prometheus| {
        assert!(
            prom.process.try_wait().is_none(),
            "prometheus exited:\n{}",
            prom.process.stderr()
        );
        for (p, s) in &mut sidecars {
            assert!(
                s.process.try_wait().is_none(),
                "sidecar {} exited:\n{}",
                p.name,
                s.process.stderr()
            );
        }
    };

    // All three targets up.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let up = prom.series("up{job=\"truthscale\"}");
        if up.len() == 3 && up.iter().all(|(_, v)| *v == 1.0) {
            break;
        }
        alive(&mut prom);
        assert!(
            Instant::now() < deadline,
            "not all 3 targets up in 60 s: {up:?}\nprometheus:\n{}",
            prom.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let up_at = Instant::now();
    eprintln!("{T}: all 3 targets up after {:.1} s", secs());
    while up_at.elapsed() < SCRAPE_FOR {
        alive(&mut prom);
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "{T}: scraped for {:.0} s; checking at {:.1} s",
        up_at.elapsed().as_secs_f64(),
        secs()
    );
    let checks_started = Instant::now();

    // The fleet is what the scenario says: four GPUs, each identified by pod and gpu, with
    // distinct UUIDs (one seed per sidecar), the workload's labels kept by honor_labels.
    let info = prom.series("truthscale_gpu_info");
    assert_eq!(
        pod_gpus(&info),
        set(&[
            ("idle-c", "0"),
            ("llm-a", "0"),
            ("llm-a", "1"),
            ("phantom-b", "0")
        ]),
        "{info:?}"
    );
    let uuids: BTreeSet<String> = info.iter().map(|(l, _)| label(l, "uuid")).collect();
    assert_eq!(uuids.len(), 4, "simulated UUIDs collide: {info:?}");
    for (l, _) in &info {
        assert_eq!(label(l, "node"), NODE, "{l:?}");
        assert_eq!(label(l, "fidelity"), "profiling", "{l:?}");
        let pod = PODS
            .iter()
            .find(|p| p.name == label(l, "pod"))
            .expect("pod");
        assert_eq!(label(l, "namespace"), pod.namespace, "{l:?}");
        assert_eq!(label(l, "container"), pod.container, "{l:?}");
    }

    // Every rule evaluates cleanly.
    let rules = api_data("rules", &prom.get("/api/v1/rules")).expect("/api/v1/rules");
    let mut rule_count = 0;
    for g in rules["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            rule_count += 1;
            assert_eq!(
                r["health"], "ok",
                "rule {} is not healthy: {}",
                r["name"], r["lastError"]
            );
        }
    }
    assert_eq!(
        rule_count,
        exprs
            .iter()
            .filter(|e| e.at.starts_with("truthscale.rules.yml / "))
            .count(),
        "Prometheus loaded another number of rules than {RULES} holds"
    );

    // Every expression: no error, and data, directly or via its documented form.
    let mut used = vec![0_usize; DOCUMENTED.len()];
    let (mut direct, mut via_form) = (0, 0);
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for e in &exprs {
        let result = evaluate(&prom, &e.text);
        let doc = DOCUMENTED.iter().position(|d| at_matches(d.at, &e.at));
        let Some(i) = doc else {
            match result {
                Ok(0) => failures.push(format!("{}: no data: {}", e.at, e.text)),
                Ok(_) => direct += 1,
                Err(err) => failures.push(format!("{}: {err}: {}", e.at, e.text)),
            }
            continue;
        };
        used[i] += 1;
        let d = &DOCUMENTED[i];
        let mut form = e.text.clone();
        let mut stale = false;
        for (from, to) in d.rewrites {
            if form.contains(from) {
                form = form.replacen(from, to, 1);
            } else {
                stale = true;
                failures.push(format!(
                    "{}: allow-list entry {:?} is stale: {from:?} is not in {form}",
                    e.at, d.at
                ));
            }
        }
        if stale {
            continue;
        }
        let form_result = evaluate(&prom, &form);
        match (result, form_result) {
            (Err(err), _) => failures.push(format!("{}: {err}: {}", e.at, e.text)),
            (_, Err(err)) => failures.push(format!("{}: documented form: {err}: {form}", e.at)),
            (_, Ok(0)) => failures.push(format!(
                "{}: documented form returned no data either: {form}",
                e.at
            )),
            (Ok(n), Ok(m)) if n > 0 => {
                direct += 1;
                report.push(format!(
                    "  {}: returned data directly this run ({n} series; form: {m})",
                    e.at
                ));
            }
            (Ok(_), Ok(m)) => {
                via_form += 1;
                report.push(format!("  {}: via form ({m} series): {form}", e.at));
            }
        }
    }
    for (d, n) in DOCUMENTED.iter().zip(&used) {
        if *n == 0 {
            failures.push(format!(
                "allow-list entry {:?} names no expression that still exists",
                d.at
            ));
        }
    }
    eprintln!(
        "{T}: checked {} expressions: {direct} returned data directly, {via_form} via their \
         documented data-returning form ({} dashboard variables are not queries)",
        exprs.len(),
        non_query_variables
    );
    eprintln!("{T}: allow-list:");
    for d in DOCUMENTED {
        eprintln!("  - {}: {}", d.at, d.reason);
    }
    eprintln!(
        "{T}: allow-listed expressions this run:\n{}",
        report.join("\n")
    );
    assert!(
        failures.is_empty(),
        "{} expression check(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(direct + via_form, exprs.len());

    // The variables list the scenario's pods, namespaces and node.
    for (var, want) in [
        ("pod", vec!["idle-c", "llm-a", "phantom-b"]),
        ("namespace", vec!["batch", "serving"]),
        ("node", vec![NODE]),
    ] {
        let path = format!(
            "/api/v1/label/{var}/values?match%5B%5D={}",
            url_encode("truthscale_gpu_info")
        );
        let got = api_data(&path, &prom.get(&path)).expect("label values");
        let got: Vec<&str> = got
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .collect();
        assert_eq!(got, want, "label values of {var}");
    }

    // Alerts: active (pending or firing) now, and over the whole run.
    let alerts = api_data("alerts", &prom.get("/api/v1/alerts")).expect("/api/v1/alerts");
    let mut active: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for a in alerts["alerts"].as_array().into_iter().flatten() {
        let l = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_owned();
        let state = a["state"].as_str().unwrap_or_default();
        assert!(
            matches!(state, "pending" | "firing"),
            "alert state {state}: {a}"
        );
        eprintln!(
            "{T}: alert {} {state} for {}/{} gpu {} ({})",
            l("alertname"),
            l("namespace"),
            l("pod"),
            l("gpu"),
            l("instance")
        );
        active
            .entry(l("alertname"))
            .or_default()
            .insert((l("pod"), l("gpu")));
    }
    let phantom = active
        .remove("TruthscalePhantomUtilization")
        .unwrap_or_default();
    let idle = active
        .remove("TruthscaleGPUAllocatedIdle")
        .unwrap_or_default();
    assert_eq!(
        phantom,
        set(&[("phantom-b", "0")]),
        "TruthscalePhantomUtilization must be active for the tiny-kernel GPU only"
    );
    assert_eq!(
        idle,
        set(&[("idle-c", "0")]),
        "TruthscaleGPUAllocatedIdle must be active for the idle-allocated GPU only"
    );
    // Over the whole run, not just now: the decode-bound GPUs (busy ~0.98, ECF a few %, DRAM
    // ~0.7) never trip the phantom alert.
    let window = format!("{}s", started.elapsed().as_secs() + 10);
    let ever = prom.series(
        &format!(
            "max by (pod, gpu) (max_over_time(ALERTS{{alertname=\"TruthscalePhantomUtilization\"}}[{window}]))"
        ),
    );
    assert_eq!(
        pod_gpus(&ever),
        set(&[("phantom-b", "0")]),
        "TruthscalePhantomUtilization was active for another GPU during the run"
    );
    let ever_idle = prom.series(
        &format!(
            "max by (pod, gpu) (max_over_time(ALERTS{{alertname=\"TruthscaleGPUAllocatedIdle\"}}[{window}]))"
        ),
    );
    eprintln!(
        "{T}: during the run, TruthscaleGPUAllocatedIdle was active for {:?}",
        pod_gpus(&ever_idle)
    );

    let problems = prom.process.stderr();
    assert!(
        !truthscale_e2e::logs_an_error(&problems),
        "prometheus logged errors:\n{problems}"
    );
    eprintln!(
        "{T}: checks took {:.1} s; done in {:.1} s",
        checks_started.elapsed().as_secs_f64(),
        secs()
    );
}

/// A MIG instance (tensor and DRAM counters, no busy flag, no power) and a GPU behind a
/// multiplexing dcgm-exporter (its tensor counter blank every other window), replayed from a
/// trace, scraped by a real Prometheus with the rules loaded. The recording rules must give
/// the exact means (effective compute 0.3 for both, not 0.15 for the multiplexed one), the
/// MIG instance must have no busy series at all, wasted GPUs must not go negative, and no
/// alert may be pending or firing for either.
#[test]
fn mig_and_multiplexed_means_on_real_prometheus() {
    const T: &str = "mig_and_multiplexed_means_on_real_prometheus";
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let tmp = TempDir::new("rules-mux");
    // 150 one-second windows; κ = 1 (SM clock at the H100's f_ref), so ECF = τ = 0.3.
    let mut trace = String::new();
    for i in 0..150 {
        let taken = format!("2026-01-01T00:{:02}:{:02}Z", i / 60, i % 60);
        trace.push_str(&format!(
            "{{\"taken\":\"{taken}\",\"node\":\"node-m\",\"gpu\":0,\"uuid\":\"GPU-MIG\",\
             \"model\":\"NVIDIA H100 80GB HBM3\",\"mig_gpu_instance\":1,\"mig_profile\":\"3g.40gb\",\
             \"pod\":\"mig-pod\",\"namespace\":\"batch\",\"container\":\"worker\",\
             \"tensor_active\":0.3,\"dram_active\":0.1,\"sm_clock_mhz\":1830}}\n"
        ));
        let tensor = if i % 2 == 0 {
            ",\"tensor_active\":0.3"
        } else {
            ""
        };
        trace.push_str(&format!(
            "{{\"taken\":\"{taken}\",\"node\":\"node-m\",\"gpu\":1,\"uuid\":\"GPU-MUX\",\
             \"model\":\"NVIDIA H100 80GB HBM3\",\"pod\":\"mux-pod\",\"namespace\":\"serving\",\
             \"container\":\"server\",\"gpu_util\":1.0,\"dram_active\":0.2,\
             \"sm_clock_mhz\":1830,\"power_watts\":400{tensor}}}\n"
        ));
    }
    let path = tmp.path().join("mux.jsonl");
    std::fs::write(&path, trace).expect("write trace");
    let source = format!("replay:{}", path.display());
    // The sidecar's own identity must not replace the trace's attribution.
    let sidecar = Sidecar::start(
        &["--source", &source, "--interval", "1s"],
        &[
            ("POD_NAME", "sidecar-pod"),
            ("POD_NAMESPACE", "sidecar-ns"),
            ("CONTAINER_NAME", "kserve-container"),
        ],
        tmp.path(),
    );
    let rules_path = workspace().join(RULES);
    let config = format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 1s\n  evaluation_interval: 2s\n\
         rule_files:\n  - '{}'\n\
         scrape_configs:\n  - job_name: truthscale\n    honor_labels: true\n    \
         static_configs:\n      - targets: ['{}']\n",
        rules_path.display(),
        sidecar.addr
    );
    let prom = Prometheus::start(&config, tmp.path());
    let started = Instant::now();
    // Long enough for rate() over several scrapes and a few rule evaluations.
    let deadline = started + Duration::from_secs(90);
    let pod_value = |q: &str, pod: &str| {
        prom.series(q)
            .into_iter()
            .find(|(l, _)| label(l, "pod") == pod)
            .map(|(_, v)| v)
    };
    let ecf_mean = |pod: &str| {
        pod_value(
            "pod:truthscale_gpu_effective_compute:rate5m / pod:truthscale_gpu_effective_compute_observed:rate5m",
            pod,
        )
    };
    loop {
        let ready = started.elapsed() > Duration::from_secs(30)
            && ecf_mean("mig-pod").is_some()
            && ecf_mean("mux-pod").is_some();
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{T}: no recording-rule means in 90 s; sidecar:\n{}",
            sidecar.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for pod in ["mig-pod", "mux-pod"] {
        let m = ecf_mean(pod).unwrap();
        eprintln!("{T}: {pod} effective compute mean {m}");
        assert!((m - 0.3).abs() < 1e-9, "{pod}: effective compute mean {m}");
    }
    // Dividing by all observed seconds would halve the multiplexed GPU's mean.
    let halved = pod_value(
        "pod:truthscale_gpu_effective_compute:rate5m / pod:truthscale_gpu_observed:rate5m",
        "mux-pod",
    )
    .unwrap();
    assert!((halved - 0.15).abs() < 0.02, "{halved}");
    // The busy flag: exact for the multiplexed GPU, no series at all for the MIG instance.
    let busy = pod_value(
        "pod:truthscale_gpu_busy:rate5m / pod:truthscale_gpu_busy_observed:rate5m",
        "mux-pod",
    );
    assert!(busy.is_some_and(|b| (b - 1.0).abs() < 1e-9), "{busy:?}");
    for q in [
        "truthscale_gpu_busy_seconds_total",
        "truthscale_gpu_busy_observed_seconds_total",
        "truthscale_gpu_energy_joules_total",
        "pod:truthscale_gpu_busy:rate5m",
    ] {
        assert_eq!(
            pod_value(q, "mig-pod"),
            None,
            "{q} exists for the MIG instance"
        );
    }
    // The trace's attribution, not the sidecar's identity.
    let info = prom.series("truthscale_gpu_info");
    assert_eq!(info.len(), 2, "{info:?}");
    for (l, _) in &info {
        assert_ne!(label(l, "pod"), "sidecar-pod", "{l:?}");
        assert_ne!(label(l, "container"), "kserve-container", "{l:?}");
        assert_eq!(label(l, "fidelity"), "profiling", "{l:?}");
    }
    // Wasted GPUs (busy − effective, per GPU, never negative): 0.7 for the multiplexed GPU.
    let wasted = pod_value(
        "pod:truthscale_gpu_wasted_gpus:rate5m / pod:truthscale_gpu_wasted_observed:rate5m",
        "mux-pod",
    )
    .unwrap();
    assert!((wasted - 0.7).abs() < 1e-9, "wasted {wasted}");
    for (_, v) in prom.series("pod:truthscale_gpu_wasted_gpus:rate5m") {
        assert!(v >= 0.0, "negative wasted GPUs {v}");
    }
    // No alert of any kind for either GPU.
    let alerts = prom.series("ALERTS");
    assert!(
        alerts.iter().all(|(l, _)| {
            let pod = label(l, "pod");
            pod != "mig-pod" && pod != "mux-pod"
        }),
        "false alerts: {alerts:?}"
    );
}

/// An HTTP server on 127.0.0.1 for the cause rules' test, one request per connection: a
/// kubelet's `/metrics/cadvisor` whose counters grow at fixed rates from its start (pod
/// `ml/a`'s container throttled in 6 of its 10 CFS periods a second, its pod cgroup in all
/// 10; pod `ml/b`'s container waiting on I/O 0.4 s a second), and two dcgm-exporters' busy
/// flags (`/dcgm-a`: GPU-A held by `ml/a` and GPU-C held by no one; `/dcgm-b`: GPU-B held by
/// `ml/b`). The thread ends with the test process.
fn cause_targets() -> String {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap().to_string();
    let started = Instant::now();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let path = text
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let e = started.elapsed().as_secs_f64();
            let a = "namespace=\"ml\",pod=\"a\"";
            let body = match path.as_str() {
                "/metrics/cadvisor" => format!(
                    "container_cpu_cfs_periods_total{{{a},container=\"train\"}} {}\n\
                     container_cpu_cfs_throttled_periods_total{{{a},container=\"train\"}} {}\n\
                     container_cpu_cfs_periods_total{{{a},container=\"\"}} {}\n\
                     container_cpu_cfs_throttled_periods_total{{{a},container=\"\"}} {}\n\
                     container_pressure_io_waiting_seconds_total{{namespace=\"ml\",pod=\"b\",container=\"loader\"}} {}\n\
                     container_pressure_io_waiting_seconds_total{{id=\"/\"}} {}\n",
                    10.0 * e,
                    6.0 * e,
                    10.0 * e,
                    10.0 * e,
                    0.4 * e,
                    0.9 * e
                ),
                "/dcgm-a" => format!(
                    "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-A\",Hostname=\"node-c\",{a},container=\"train\"}} 100\n\
                     DCGM_FI_DEV_GPU_UTIL{{gpu=\"2\",UUID=\"GPU-C\",Hostname=\"node-c\"}} 0\n"
                ),
                "/dcgm-b" => "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-B\",Hostname=\"node-c\",namespace=\"ml\",pod=\"b\",container=\"loader\"} 100\n".to_owned(),
                _ => String::new(),
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// `alerts/causes.rules.yml` on a real Prometheus scraping a kubelet's cAdvisor series and
/// two dcgm-exporters: one whose labels are honoured, one whose `pod` and `namespace`
/// Prometheus itself renames to `exported_pod` and `exported_namespace` (honor_labels off,
/// the target labelled with the exporter's own pod). GPU-A's holder is throttled in 60 % of
/// its CFS periods (its pod cgroup's own series, throttled in all, not counted), GPU-B's
/// waits on I/O 40 % of the time, GPU-C has no holder and no signal.
#[test]
fn cause_rules_on_real_prometheus() {
    const T: &str = "cause_rules_on_real_prometheus";
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let tmp = TempDir::new("rules-causes");
    let addr = cause_targets();
    let rules_path = workspace().join("alerts/causes.rules.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - '{}'\n\
         scrape_configs:\n\
         \x20 - job_name: kubelet\n    honor_labels: true\n    metrics_path: /metrics/cadvisor\n    \
         static_configs:\n      - targets: ['{addr}']\n\
         \x20 - job_name: dcgm-a\n    honor_labels: true\n    metrics_path: /dcgm-a\n    \
         static_configs:\n      - targets: ['{addr}']\n\
         \x20 - job_name: dcgm-b\n    metrics_path: /dcgm-b\n    \
         static_configs:\n      - targets: ['{addr}']\n        \
         labels:\n          pod: dcgm-exporter-x\n          namespace: gpu-operator\n",
        rules_path.display()
    );
    let prom = Prometheus::start(&config, tmp.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    let throttled = "device:truthscale_holder_cpu_throttled:ratio";
    let io_waiting = "device:truthscale_holder_io_pressure_waiting:ratio";
    loop {
        // A few scrapes in each rate window.
        let ready = !prom.series(throttled).is_empty()
            && !prom.series(io_waiting).is_empty()
            && !prom
                .series("pod:truthscale_io_pressure_waiting:ratio_rate5m offset 3s")
                .is_empty();
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{T}: no holder series in 60 s; prometheus:\n{}",
            prom.process.stderr()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Prometheus renamed dcgm-b's holder labels.
    let b = prom.series("DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-B\"}");
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(label(&b[0].0, "exported_pod"), "b", "{b:?}");
    assert_eq!(label(&b[0].0, "pod"), "dcgm-exporter-x", "{b:?}");
    let one = |q: &str| {
        let s = prom.series(q);
        assert_eq!(s.len(), 1, "{q}: {s:?}");
        s.into_iter().next().unwrap()
    };
    let (l, v) = one(throttled);
    eprintln!("{T}: {throttled} {l:?} {v}");
    assert_eq!(
        (label(&l, "uuid"), label(&l, "pod"), label(&l, "namespace")),
        ("GPU-A".into(), "a".into(), "ml".into())
    );
    assert!((v - 0.6).abs() < 1e-6, "{v}");
    let (l, v) = one(io_waiting);
    eprintln!("{T}: {io_waiting} {l:?} {v}");
    assert_eq!(
        (label(&l, "uuid"), label(&l, "pod"), label(&l, "namespace")),
        ("GPU-B".into(), "b".into(), "ml".into())
    );
    // rate() over 5 minutes of a series younger than that is its increase over 300 s, so
    // the share grows to 0.4 as the series ages (promtool's test,
    // alerts/tests/causes.rules.test.yml, checks the full window's 0.4); throttling is a
    // ratio of two such rates, exact at once.
    assert!(v > 0.0 && v <= 0.41, "{v}");
    // GPU-C: held by no one, no signal (never a zero).
    let info = prom.series("device:truthscale_holder_pod:info{uuid=\"GPU-C\"}");
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(label(&info[0].0, "pod"), "", "{info:?}");
}

/// A dashboard panel's expression as Grafana would send it for *All* in every variable, a
/// 24-hour time range (`$__range` 24h, `$__range_s` 86400) and a 1-minute interval,
/// whitespace collapsed.
/// The fleet dashboard's file.
const FLEET_DASHBOARD: &str = "truthscale-fleet.json";

fn panel_expr_over_a_day(file: &str, title: &str, ref_id: &str) -> String {
    let text = read(&format!("dashboards/{file}"))
        .replace("$__range_s", "86400")
        .replace("$__range_ms", "86400000")
        .replace("$__range", "24h")
        .replace("$__interval_ms", "60000")
        .replace("$__interval", "1m");
    let d: Json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut all = Vec::new();
    dashboard_exprs(file, &d, &mut all);
    let at = format!("{file} / {title} / {ref_id}");
    all.into_iter()
        .find(|e| e.at == at)
        .unwrap_or_else(|| panic!("no expression at {at}"))
        .text
}

/// One `promql_expr_test` of a promtool unit test: the panel's value at `eval_time`, each of
/// `want`'s series (labels, value) to within 1e-6 (the value is compared rounded to
/// millionths, promtool compares floats exactly), or no data at all where `want` is empty.
fn promtool_check(
    yaml: &mut String,
    (file, title, ref_id): (&str, &str, &str),
    eval_time: &str,
    want: &[(&str, f64)],
) {
    let expr = panel_expr_over_a_day(file, title, ref_id);
    let expr = if want.is_empty() {
        expr
    } else {
        format!("round(({expr}) * 1e6)")
    };
    yaml.push_str(&format!(
        "      - expr: '{}'\n        eval_time: {eval_time}\n",
        expr.replace('\'', "''")
    ));
    if want.is_empty() {
        yaml.push_str("        exp_samples: []\n");
        return;
    }
    yaml.push_str("        exp_samples:\n");
    for (labels, value) in want {
        yaml.push_str(&format!(
            "          - labels: '{labels}'\n            value: {}\n",
            (value * 1e6).round()
        ));
    }
}

/// The pooling panel with time-sliced GPUs, 30 minutes on one node: pod `w` holds GPU-W alone
/// (busy 0.3, effective compute 0.1); node mode's GPU-T is time-sliced between `t1` and `t2`
/// (series without pod labels, busy 0.9, effective compute 0.5); GPU-S is time-sliced between
/// `s1` (namespace `batch`) and `s2` (`web`), each with a sidecar reporting the whole device
/// under its own pod (busy 0.5, effective compute 0.25). Each GPU counts once, at the whole
/// device's: 3 GPUs' worth allocated, busy 0.3 + 0.9 + 0.5 = 1.7, effective 0.1 + 0.5 + 0.25
/// = 0.85. The busy and effective lines used to leave GPU-T out (its series name no
/// namespace) and count GPU-S once per sidecar: busy 1.3, effective 0.6, as though pooling
/// could recover GPU-T whole.
fn time_sliced_gpus_in_the_pooling_panel(y: &mut String, pooling: &str) {
    y.push_str(
        "  - name: time-sliced GPUs in the pooling panel\n    interval: 1m\n    input_series:\n",
    );
    let mut device = |instance: &str, gpu: u32, uuid: &str, pod: &str, (busy, ecf): (u32, u32)| {
        let l = format!(
            "job=\"truthscale\",instance=\"{instance}\",node=\"n1\",gpu=\"{gpu}\",uuid=\"{uuid}\"{pod}"
        );
        for (name, values) in [
            ("truthscale_gpu_info", "1x30".to_owned()),
            ("truthscale_gpu_share_ratio", "1x30".to_owned()),
            (
                "truthscale_gpu_observed_seconds_total",
                "0+60x30".to_owned(),
            ),
            ("truthscale_gpu_busy_seconds_total", format!("0+{busy}x30")),
            (
                "truthscale_gpu_busy_observed_seconds_total",
                "0+60x30".to_owned(),
            ),
            (
                "truthscale_gpu_effective_compute_seconds_total",
                format!("0+{ecf}x30"),
            ),
            (
                "truthscale_gpu_effective_compute_observed_seconds_total",
                "0+60x30".to_owned(),
            ),
        ] {
            y.push_str(&format!(
                "      - series: '{name}{{{l}}}'\n        values: '{values}'\n"
            ));
        }
    };
    device(
        "n1:9400",
        0,
        "GPU-W",
        ",pod=\"w\",namespace=\"batch\"",
        (18, 6),
    );
    device("n1:9400", 1, "GPU-T", "", (54, 30));
    device(
        "s1:9400",
        2,
        "GPU-S",
        ",pod=\"s1\",namespace=\"batch\"",
        (30, 15),
    );
    device(
        "s2:9400",
        2,
        "GPU-S",
        ",pod=\"s2\",namespace=\"web\"",
        (30, 15),
    );
    for (pod, replica) in [("t1", 0), ("t2", 1)] {
        y.push_str(&format!(
            "      - series: 'truthscale_gpu_allocation_info{{job=\"truthscale\",instance=\"n1:9400\",node=\"n1\",gpu=\"1\",uuid=\"GPU-T\",pod=\"{pod}\",namespace=\"batch\",container=\"c\",resource=\"nvidia.com/gpu\",replica=\"{replica}\"}}'\n        values: '1x30'\n"
        ));
    }
    y.push_str("    promql_expr_test:\n");
    for (ref_id, want) in [("A", 3.0), ("B", 1.7), ("C", 0.85)] {
        promtool_check(
            y,
            (FLEET_DASHBOARD, pooling, ref_id),
            "30m",
            &[("{}", want)],
        );
    }
}

/// The values of fixed fleet and exporter panels, exact, under `promtool test rules` with
/// `alerts/truthscale.rules.yml` loaded: inputs written sample by sample, so that each panel
/// has one right answer.
///
/// - *Wasted GPU-hours in the time range* over 24 h: namespace `batch` wastes 1 GPU for the
///   last 2 h only and reads 2 GPU-hours (the mean of the samples that exist times the range
///   read 24); `serving` wastes 0.5 GPU all day and reads 12.
/// - *GPUs without profiling counters*, *Simulated GPUs* and *Exporters down*: 0 while GPUs
///   (targets) exist and none is in the state counted, 1 once one is, and no data, never a
///   0, once nothing is reported at all.
/// - Share weighting, one node: a whole GPU at effective compute 0.1, an H100 split into
///   seven 1g instances (share 1/7 each) at 0.8, a whole GPU behind a multiplexing
///   dcgm-exporter at 0.3 measured half the time, and a whole GPU without a pod or profiling
///   counters. Effective GPUs 0.1 + 7 × 0.8 / 7 + 0.3 = 1.2 over 3 GPUs' worth measured:
///   effective utilization 0.4 in every panel that shows it (pooling seconds across entities
///   as whole GPUs read 5.85 / 8.5 = 0.688). With a node-mode GPU time-sliced between two
///   pods (series without pod labels, two allocation-info series): 10 devices held by pods
///   (the time-sliced one once; by pod labels alone, 9), and 4 GPUs' worth allocated and 5
///   in all (counting devices read 10 and 11).
#[test]
fn dashboards_fleet_and_exporter_values_under_promtool() {
    let promtool = require_tool_or_return!("/usr/bin/promtool", "prometheus");
    const FLEET: &str = FLEET_DASHBOARD;
    const EXPORTER: &str = "truthscale-exporter.json";
    let mut y = format!(
        "rule_files:\n  - '{}'\nevaluation_interval: 1m\ntests:\n",
        workspace().join(RULES).display()
    );

    // Wasted GPU-hours: the recorded series themselves (the rule has no input here, so it
    // records nothing of its own). `batch` from 22 h to 24 h, then stale as a recorded series
    // that stops is; `serving` from the first minute on.
    y.push_str(
        "  - name: wasted GPU-hours over a day\n    interval: 1m\n    input_series:\n\
         \x20     - series: 'namespace:truthscale_gpu_wasted_gpus:rate5m{namespace=\"batch\"}'\n\
         \x20       values: '_x1320 1x119 stale'\n\
         \x20     - series: 'namespace:truthscale_gpu_wasted_gpus:rate5m{namespace=\"serving\"}'\n\
         \x20       values: '_ 0.5x1439'\n\
         \x20   promql_expr_test:\n",
    );
    promtool_check(
        &mut y,
        (FLEET, "Wasted GPU-hours in the time range", "A"),
        "24h",
        &[
            ("{namespace=\"batch\"}", 2.0),
            ("{namespace=\"serving\"}", 12.0),
        ],
    );

    // Counts that must not show a fake zero: 0-59 min a profiling GPU and a target up; 60-119
    // min also an nvml-tier GPU, a simulated GPU and a target down; from 120 min nothing.
    let l = "job=\"truthscale\",instance=\"n1:9400\",node=\"n1\",pod=\"p\",namespace=\"batch\"";
    y.push_str(&format!(
        "  - name: counts without fake zeros\n    interval: 1m\n    input_series:\n\
         \x20     - series: 'truthscale_gpu_info{{{l},gpu=\"0\",uuid=\"GPU-P\",source=\"nvml\",fidelity=\"profiling\"}}'\n\
         \x20       values: '1x119 stale'\n\
         \x20     - series: 'truthscale_gpu_info{{{l},gpu=\"1\",uuid=\"GPU-N\",source=\"nvml\",fidelity=\"nvml\"}}'\n\
         \x20       values: '_x60 1x59 stale'\n\
         \x20     - series: 'truthscale_gpu_info{{{l},gpu=\"2\",uuid=\"GPU-S\",source=\"sim\",fidelity=\"profiling\"}}'\n\
         \x20       values: '_x60 1x59 stale'\n\
         \x20     - series: 'up{{job=\"truthscale\",instance=\"n1:9400\"}}'\n\
         \x20       values: '1x119 stale'\n\
         \x20     - series: 'up{{job=\"truthscale\",instance=\"n2:9400\"}}'\n\
         \x20       values: '_x60 0x59 stale'\n\
         \x20   promql_expr_test:\n"
    ));
    for (eval_time, want) in [
        ("30m", &[("{}", 0.0)][..]),
        ("90m", &[("{}", 1.0)][..]),
        ("3h", &[][..]),
    ] {
        for panel in [
            (FLEET, "GPUs without profiling counters", "A"),
            (FLEET, "Simulated GPUs", "A"),
            (EXPORTER, "Exporters down", "A"),
        ] {
            promtool_check(&mut y, panel, eval_time, want);
        }
    }

    // Share weighting: counters growing at fixed rates for 30 minutes, one node.
    let mut series = Vec::new();
    // `ecf`: effective-compute seconds and seconds it was measured, per minute.
    let mut entity = |gpu: u32, uuid: &str, extra: &str, share: f64, ecf: Option<(u32, u32)>| {
        let l = format!(
            "job=\"truthscale\",instance=\"n1:9400\",node=\"n1\",gpu=\"{gpu}\",uuid=\"{uuid}\"{extra}"
        );
        let fidelity = if ecf.is_some() { "profiling" } else { "nvml" };
        series.push((
            format!("truthscale_gpu_info{{{l},source=\"nvml\",fidelity=\"{fidelity}\"}}"),
            "1x30".to_owned(),
        ));
        series.push((
            format!("truthscale_gpu_share_ratio{{{l}}}"),
            format!("{share}x30"),
        ));
        // Observed every second: 60 s a minute.
        series.push((
            format!("truthscale_gpu_observed_seconds_total{{{l}}}"),
            "0+60x30".to_owned(),
        ));
        if let Some((seconds, measured)) = ecf {
            series.push((
                format!("truthscale_gpu_effective_compute_seconds_total{{{l}}}"),
                format!("0+{seconds}x30"),
            ));
            series.push((
                format!("truthscale_gpu_effective_compute_observed_seconds_total{{{l}}}"),
                format!("0+{measured}x30"),
            ));
        }
    };
    entity(
        0,
        "GPU-W",
        ",pod=\"w\",namespace=\"batch\"",
        1.0,
        Some((6, 60)),
    );
    for i in 1..=7 {
        entity(
            1,
            "GPU-M",
            &format!(
                ",mig_instance=\"{i}\",mig_profile=\"1g.10gb\",pod=\"m{i}\",namespace=\"batch\""
            ),
            1.0 / 7.0,
            Some((48, 60)),
        );
    }
    entity(
        2,
        "GPU-X",
        ",pod=\"x\",namespace=\"batch\"",
        1.0,
        Some((9, 30)),
    );
    entity(3, "GPU-F", "", 1.0, None);
    // Node mode: a GPU time-sliced between two pods. Its series carry no pod labels; its
    // allocation info names both holders, and it counts once.
    entity(4, "GPU-T", "", 1.0, None);
    for (pod, replica) in [("t1", 0), ("t2", 1)] {
        series.push((
            format!(
                "truthscale_gpu_allocation_info{{job=\"truthscale\",instance=\"n1:9400\",node=\"n1\",gpu=\"4\",uuid=\"GPU-T\",pod=\"{pod}\",namespace=\"batch\",container=\"c\",resource=\"nvidia.com/gpu\",replica=\"{replica}\"}}"
            ),
            "1x30".to_owned(),
        ));
    }
    y.push_str("  - name: MIG instances at their share\n    interval: 1m\n    input_series:\n");
    for (s, v) in &series {
        y.push_str(&format!("      - series: '{s}'\n        values: '{v}'\n"));
    }
    y.push_str("    promql_expr_test:\n");
    let pooling = "Pooling: effective GPUs in use vs GPUs allocated";
    for (panel, want) in [
        ((FLEET, "Effective utilization", "A"), ("{}", 0.4)),
        (
            (FLEET, "Effective utilization by namespace", "A"),
            ("{namespace=\"batch\"}", 0.4),
        ),
        ((FLEET, "Namespaces", "C"), ("{namespace=\"batch\"}", 0.4)),
        (
            (FLEET, "Effective utilization by node", "A"),
            ("{node=\"n1\"}", 0.4),
        ),
        ((FLEET, "Nodes", "C"), ("{node=\"n1\"}", 0.4)),
        ((FLEET, "Effective GPUs in use", "A"), ("{}", 1.2)),
        ((FLEET, "GPUs allocated to pods", "A"), ("{}", 10.0)),
        ((FLEET, pooling, "A"), ("{}", 4.0)),
        ((FLEET, pooling, "C"), ("{}", 1.2)),
        ((FLEET, pooling, "D"), ("{}", 5.0)),
        (
            (
                FLEET,
                "Pooling by node: effective GPUs vs GPUs present",
                "A",
            ),
            ("{}", 5.0),
        ),
    ] {
        promtool_check(&mut y, panel, "30m", &[want]);
    }

    time_sliced_gpus_in_the_pooling_panel(&mut y, pooling);

    let tmp = TempDir::new("promtool-dashboards");
    let path = tmp.path().join("dashboards.test.yml");
    std::fs::write(&path, &y).expect("write promtool test");
    let out = std::process::Command::new(&promtool)
        .args(["test", "rules"])
        .arg(&path)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

//! The autoscaling recipes of `docker/kubernetes/autoscaling/` (docs/autoscaling.md): the KEDA
//! ScaledObject, the prometheus-adapter rules with their HPA, and the recording rules of
//! `alerts/autoscaling.rules.yml` they query.
//!
//! - The generated PrometheusRule is the rules file; the manifests point at the Deployment of
//!   `docker/kubernetes/sidecar-deployment.yaml`, at each other and at recording rules that
//!   exist; the promtool unit tests (`alerts/tests/autoscaling.rules.test.yml`) evaluate the
//!   manifests' PromQL exactly as shipped.
//! - On a real Prometheus scraping real sidecars (replayed counters, so every saturation is
//!   exact, and stand-ins for the serving engines' `/metrics`): the raw series and every
//!   recording rule carry the `namespace` and `pod` labels the adapter maps; the KEDA queries,
//!   taken verbatim from the manifest, and the adapter's seriesQuery and metricsQuery,
//!   rendered as the adapter renders them, return a value per pod (one value for KEDA); and an
//!   input that is absent yields no value, never 0.
//!
//! Every process lives in a guard that kills its process group on drop. The test on a real
//! Prometheus belongs to the external-tool tier (`require_tool_or_return!`): without
//! `TRUTHSCALE_FULL_TESTS` or `CI` it says so and is not run; with either, a missing
//! `/usr/bin/prometheus` fails it: run `scripts/test`, which installs it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use truthscale_e2e::{
    Prometheus, Response, Sidecar, StandIn, TempDir, free_port, ok, require_tool_or_return,
    url_encode, workspace,
};

const RULES: &str = "alerts/autoscaling.rules.yml";
const RULE_TESTS: &str = "alerts/tests/autoscaling.rules.test.yml";
const DIR: &str = "docker/kubernetes/autoscaling";
const DEPLOYMENT: &str = "docker/kubernetes/sidecar-deployment.yaml";

use crate::manifests::{seq_of, str_of, yaml};
use crate::prometheus_rules::collapse;

/// The KEDA ScaledObject's Prometheus triggers: `(name, metadata)`.
fn keda_triggers() -> Vec<(String, Yaml)> {
    let file = format!("{DIR}/keda-scaledobject.yaml");
    let so = yaml(&file);
    assert_eq!(so["apiVersion"].as_str(), Some("keda.sh/v1alpha1"));
    assert_eq!(so["kind"].as_str(), Some("ScaledObject"));
    let triggers: Vec<_> = seq_of(&so["spec"]["triggers"], "triggers")
        .iter()
        .filter(|t| t["type"].as_str() == Some("prometheus"))
        .map(|t| {
            (
                str_of(&t["name"], "trigger name").to_owned(),
                t["metadata"].clone(),
            )
        })
        .collect();
    assert_eq!(
        triggers.len(),
        2,
        "{file}: a scale-out and a scale-in trigger"
    );
    triggers
}

/// The query of the KEDA trigger `name`.
fn keda_query(name: &str) -> String {
    keda_triggers()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, m)| str_of(&m["query"], "query").to_owned())
        .unwrap_or_else(|| panic!("no KEDA trigger named {name}"))
}

/// One prometheus-adapter rule.
#[derive(Debug)]
struct AdapterRule {
    series_query: String,
    /// The metric the seriesQuery selects.
    series: String,
    matches: String,
    exposed_as: String,
    metrics_query: String,
}

impl AdapterRule {
    /// `metricsQuery` as the adapter renders it for a request about `pods` of `namespace`.
    fn render(&self, namespace: &str, pods: &[&str]) -> String {
        self.metrics_query
            .replace("<<.Series>>", &self.series)
            .replace(
                "<<.LabelMatchers>>",
                &format!("namespace=\"{namespace}\",pod=~\"{}\"", pods.join("|")),
            )
            .replace("<<.GroupBy>>", "pod")
    }
}

/// The rules of the adapter configuration held by the ConfigMap.
fn adapter_rules() -> Vec<AdapterRule> {
    let file = format!("{DIR}/prometheus-adapter-config.yaml");
    let cm = yaml(&file);
    assert_eq!(cm["kind"].as_str(), Some("ConfigMap"));
    let config: Yaml = serde_yaml_ng::from_str(str_of(&cm["data"]["config.yaml"], "config.yaml"))
        .unwrap_or_else(|e| panic!("{file}: config.yaml is not YAML: {e}"));
    seq_of(&config["rules"], "rules")
        .iter()
        .map(|r| {
            let overrides = &r["resources"]["overrides"];
            for label in ["namespace", "pod"] {
                assert_eq!(
                    overrides[label]["resource"].as_str(),
                    Some(label),
                    "{file}: the adapter must map the {label} label to the {label} resource"
                );
            }
            let series_query = str_of(&r["seriesQuery"], "seriesQuery").to_owned();
            let series = series_query
                .split('{')
                .next()
                .unwrap_or_default()
                .to_owned();
            AdapterRule {
                series_query,
                series,
                matches: str_of(&r["name"]["matches"], "name.matches").to_owned(),
                exposed_as: str_of(&r["name"]["as"], "name.as").to_owned(),
                metrics_query: str_of(&r["metricsQuery"], "metricsQuery").to_owned(),
            }
        })
        .collect()
}

/// The names recorded by the autoscaling rules file.
fn recorded() -> BTreeSet<String> {
    let doc = yaml(RULES);
    let mut out = BTreeSet::new();
    for g in seq_of(&doc["groups"], "groups") {
        for r in seq_of(&g["rules"], "rules") {
            if let Some(n) = r["record"].as_str() {
                out.insert(n.to_owned());
            }
        }
    }
    out
}

/// `level:truthscale_...:operations` words of a PromQL expression.
fn recording_names(expr: &str) -> Vec<&str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.split(':').count() == 3 && w.contains(":truthscale_"))
        .collect()
}

/// Every `expr` of the promtool unit tests, whitespace collapsed.
fn promtool_test_exprs() -> Vec<String> {
    let doc = yaml(RULE_TESTS);
    let mut out = Vec::new();
    for t in seq_of(&doc["tests"], "tests") {
        for e in t["promql_expr_test"].as_sequence().into_iter().flatten() {
            out.push(collapse(str_of(&e["expr"], "expr")));
        }
    }
    out
}

#[test]
fn prometheus_rule_spec_is_the_autoscaling_rules_file() {
    let rule = yaml(&format!("{DIR}/prometheusrule.yaml"));
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        rule["metadata"]["name"].as_str(),
        Some("truthscale-autoscaling")
    );
    let rules = yaml(RULES);
    assert!(
        !seq_of(&rules["groups"], "groups").is_empty(),
        "{RULES} has no groups"
    );
    assert!(
        rule["spec"] == rules,
        "stale generated manifest: run `python3 docker/generate.py`"
    );
}

/// The manifests point at the Deployment of `sidecar-deployment.yaml`, at each other and at
/// recording rules that exist; empty KEDA results are errors; the promtool tests evaluate the
/// shipped PromQL.
#[test]
fn manifests_fit_the_deployment_the_rules_and_each_other() {
    let deployment = yaml(DEPLOYMENT);
    let name = str_of(&deployment["metadata"]["name"], "Deployment name");
    let containers = seq_of(
        &deployment["spec"]["template"]["spec"]["containers"],
        "containers",
    );
    // The recipes need the workload's pod and namespace labels: honorLabels on the scrape.
    let podmonitor = yaml("docker/kubernetes/podmonitor.yaml");
    for e in seq_of(&podmonitor["spec"]["podMetricsEndpoints"], "endpoints") {
        assert_eq!(e["honorLabels"].as_bool(), Some(true), "podmonitor.yaml");
    }

    // The engine reader patch turns the reader on in the sidecar of that Deployment.
    let patch = yaml(&format!("{DIR}/engine-reader-patch.yaml"));
    assert_eq!(patch["kind"].as_str(), Some("Deployment"));
    assert_eq!(patch["metadata"]["name"].as_str(), Some(name));
    let patched = seq_of(&patch["spec"]["template"]["spec"]["containers"], "patch")
        .first()
        .expect("a container in the patch");
    let container = str_of(&patched["name"], "patched container");
    assert!(
        containers
            .iter()
            .any(|c| c["name"].as_str() == Some(container)),
        "the patch names container {container}, which {DEPLOYMENT} does not have"
    );
    assert!(
        seq_of(&patched["env"], "env").iter().any(|e| {
            e["name"].as_str() == Some("TRUTHSCALE_ENGINE__ENABLED")
                && e["value"].as_str() == Some("true")
        }),
        "the patch must set TRUTHSCALE_ENGINE__ENABLED=true"
    );

    // KEDA: the Deployment, an error for an empty result, recorded names only.
    let so = yaml(&format!("{DIR}/keda-scaledobject.yaml"));
    assert_eq!(so["spec"]["scaleTargetRef"]["name"].as_str(), Some(name));
    assert!(
        so["spec"]["minReplicaCount"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "no scale to zero: with no replica there is no sidecar and no series"
    );
    assert!(
        so["spec"]["fallback"].is_null(),
        "a static fallback would set a fixed replica count when a query has no value"
    );
    let recorded = recorded();
    let test_exprs = promtool_test_exprs();
    for (trigger, m) in keda_triggers() {
        assert_eq!(
            m["ignoreNullValues"].as_str(),
            Some("false"),
            "{trigger}: KEDA reads an empty result as 0 unless ignoreNullValues is \"false\""
        );
        let threshold = str_of(&m["threshold"], "threshold");
        assert!(threshold.parse::<f64>().is_ok(), "{trigger}: {threshold}");
        let query = str_of(&m["query"], "query");
        let names = recording_names(query);
        assert!(!names.is_empty(), "{trigger}: {query}");
        for n in names {
            assert!(
                recorded.contains(n),
                "{trigger}: {n} is not recorded in {RULES}"
            );
        }
        assert!(
            test_exprs.contains(&collapse(query)),
            "{trigger}: {RULE_TESTS} does not evaluate the manifest's query {query}"
        );
    }
    let so_types: BTreeSet<&str> = seq_of(&so["spec"]["triggers"], "triggers")
        .iter()
        .filter_map(|t| t["metricType"].as_str())
        .collect();
    assert_eq!(so_types, BTreeSet::from(["AverageValue", "Value"]));

    // The adapter: recorded series, the names the HPA asks for, the shipped metricsQuery
    // evaluated by the promtool tests.
    let rules = adapter_rules();
    assert!(
        rules
            .iter()
            .any(|r| r.exposed_as == "truthscale_gpu_roofline_saturation_ratio"),
        "the adapter exposes truthscale_gpu_roofline_saturation_ratio"
    );
    for r in &rules {
        assert!(
            recorded.contains(&r.series),
            "adapter seriesQuery {}: {} is not recorded in {RULES}",
            r.series_query,
            r.series
        );
        let anchored = r
            .matches
            .strip_prefix('^')
            .and_then(|m| m.strip_suffix('$'))
            .unwrap_or_else(|| panic!("name.matches {} is not anchored", r.matches));
        assert_eq!(
            anchored, r.series,
            "name.matches must select the seriesQuery's metric"
        );
        let (before, after) = r
            .render("\u{0}", &[])
            .split_once("namespace=\"\u{0}\",pod=~\"\"")
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .expect("metricsQuery uses <<.LabelMatchers>>");
        assert!(
            test_exprs.iter().any(|e| e.starts_with(&collapse(&before))
                && e.ends_with(&collapse(&after))
                && e.contains("{namespace=\"default\",pod=~\"llm-inference-")),
            "{RULE_TESTS} does not evaluate the adapter's metricsQuery for {} ({})",
            r.exposed_as,
            r.metrics_query
        );
    }
    let hpa = yaml(&format!("{DIR}/hpa.yaml"));
    assert_eq!(hpa["apiVersion"].as_str(), Some("autoscaling/v2"));
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["kind"].as_str(),
        Some("Deployment")
    );
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"].as_str(), Some(name));
    let exposed: BTreeSet<&str> = rules.iter().map(|r| r.exposed_as.as_str()).collect();
    let asked: BTreeSet<&str> = seq_of(&hpa["spec"]["metrics"], "metrics")
        .iter()
        .map(|m| {
            assert_eq!(m["type"].as_str(), Some("Pods"), "{m:?}");
            str_of(&m["pods"]["metric"]["name"], "metric name")
        })
        .collect();
    assert_eq!(
        asked, exposed,
        "the HPA asks for exactly what the adapter exposes"
    );
}

// ---- on a real Prometheus ----------------------------------------------------------------

const DEFAULT: &str = "default";
/// The pods of Deployment llm-inference are `llm-inference-<template hash>-<suffix>`.
const POD_PREFIX: &str = "llm-inference-5f7c9d8b6-";
const CANARY: &str = "llm-inference-canary-6d8f7c9b5-zzzzz";

/// The serving engine a pod's sidecar reads.
#[derive(Clone, Copy)]
enum Engine {
    /// vLLM with requests waiting and KV-cache use.
    Vllm(f64, f64),
    /// TGI with requests waiting (TGI exports no KV-cache use).
    Tgi(f64),
    /// Nothing listens at the engine URL.
    Unreachable,
}

/// One pod: its GPUs' (tensor, DRAM) activity (`None`: no profiling counters, so no roofline
/// saturation) and its engine.
struct Pod {
    namespace: &'static str,
    name: String,
    gpus: Vec<Option<(f64, f64)>>,
    engine: Engine,
}

fn pod(suffix: &str, gpus: Vec<Option<(f64, f64)>>, engine: Engine) -> Pod {
    Pod {
        namespace: DEFAULT,
        name: format!("{POD_PREFIX}{suffix}"),
        gpus,
        engine,
    }
}

/// The scenario, with roofline saturation S = max(tensor, DRAM) (the replayed GPUs run at
/// the clock the datasheet peak assumes, and only the tensor pipe is read).
fn pods() -> Vec<Pod> {
    vec![
        // Tensor parallel on 2 GPUs, S 0.7 and 0.6; 12 waiting (written for both GPUs).
        pod(
            "aaaaa",
            vec![Some((0.2, 0.7)), Some((0.2, 0.6))],
            Engine::Vllm(12.0, 0.5),
        ),
        // Headroom (S 0.2) but queueing: not scaled out.
        pod("bbbbb", vec![Some((0.1, 0.2))], Engine::Vllm(5.0, 0.4)),
        // Headroom (S 0.25) and no queue: half a replica's worth.
        pod("ccccc", vec![Some((0.1, 0.25))], Engine::Vllm(0.0, 0.2)),
        // KV cache full: no headroom whatever the roofline says.
        pod("fffff", vec![Some((0.1, 0.25))], Engine::Vllm(2.0, 0.95)),
        // Saturated, engine not reachable: no queue value.
        pod("ddddd", vec![Some((0.2, 0.7))], Engine::Unreachable),
        // No profiling counters (busy flag and power only): no saturation, no headroom value.
        pod("eeeee", vec![None], Engine::Vllm(3.0, 0.5)),
        // No profiling counters and no queue: no saturation, so no load value either.
        pod("hhhhh", vec![None], Engine::Vllm(0.0, 0.5)),
        // TGI with headroom and no queue.
        pod("ggggg", vec![Some((0.1, 0.25))], Engine::Tgi(0.0)),
        // Not the Deployment's pods: another Deployment, another namespace.
        Pod {
            namespace: DEFAULT,
            name: CANARY.to_owned(),
            gpus: vec![Some((0.1, 0.9))],
            engine: Engine::Vllm(50.0, 0.5),
        },
        Pod {
            namespace: "staging",
            name: format!("{POD_PREFIX}qqqqq"),
            gpus: vec![Some((0.1, 0.9))],
            engine: Engine::Vllm(50.0, 0.5),
        },
    ]
}

/// A JSONL trace of `windows` one-second windows of `gpus`, for `--source replay:`.
fn trace(p: &Pod, windows: u32) -> String {
    let mut out = String::new();
    for i in 0..windows {
        let taken = format!("2026-01-01T00:{:02}:{:02}Z", i / 60, i % 60);
        for (g, counters) in p.gpus.iter().enumerate() {
            let readings = match counters {
                Some((tensor, dram)) => format!(
                    "\"gpu_util\":1.0,\"tensor_active\":{tensor},\"dram_active\":{dram},\
                     \"sm_clock_mhz\":1830,\"power_watts\":500"
                ),
                None => "\"gpu_util\":1.0,\"sm_clock_mhz\":1830,\"power_watts\":500".to_owned(),
            };
            out.push_str(&format!(
                "{{\"taken\":\"{taken}\",\"node\":\"gpu-node-1\",\"gpu\":{g},\
                 \"uuid\":\"GPU-{}-{g}\",\"model\":\"NVIDIA H100 80GB HBM3\",{readings}}}\n",
                p.name
            ));
        }
    }
    out
}

/// The engine's `/metrics` text.
fn engine_body(engine: Engine) -> Option<String> {
    match engine {
        Engine::Vllm(waiting, kv) => Some(format!(
            "# TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 16\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {waiting}\n\
             # TYPE vllm:kv_cache_usage_perc gauge\n\
             vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} {kv}\n"
        )),
        Engine::Tgi(waiting) => Some(format!(
            "# TYPE tgi_queue_size gauge\ntgi_queue_size {waiting}\n\
             # TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 6\n"
        )),
        Engine::Unreachable => None,
    }
}

/// `data` of a successful Prometheus API answer without warnings.
fn api_data(what: &str, r: &Response) -> Json {
    truthscale_e2e::api_data(what, r).unwrap_or_else(|e| panic!("{what}: {e}"))
}

type Series = Vec<(BTreeMap<String, String>, f64)>;

fn labels_of(metric: &Json) -> BTreeMap<String, String> {
    metric
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// An instant query: `(labels, value)` per series.
fn query(prom: &Prometheus, q: &str) -> Series {
    let data = api_data(q, &prom.query(q));
    assert_eq!(data["resultType"], "vector", "{q}: {data}");
    data["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let value = s["value"][1]
                .as_str()
                .and_then(|x| x.parse().ok())
                .unwrap_or(f64::NAN);
            (labels_of(&s["metric"]), value)
        })
        .collect()
}

/// Values by pod name; panics if a pod appears twice.
fn by_pod(s: &Series, q: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (l, v) in s {
        let pod = l.get("pod").cloned().unwrap_or_default();
        assert!(
            out.insert(pod.clone(), *v).is_none(),
            "{q}: pod {pod} twice: {s:?}"
        );
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Per pod (by suffix) the expected value of each recording rule; `None`: no series.
struct Expect {
    suffix: &'static str,
    saturation: Option<f64>,
    waiting: Option<f64>,
    kv: Option<f64>,
    no_headroom: Option<f64>,
    queue_no_headroom: Option<f64>,
    load: Option<f64>,
}

/// Which expected value of an [`Expect`] a recording rule has.
type Want = fn(&Expect) -> Option<f64>;

#[rustfmt::skip]
const EXPECT: [Expect; 8] = [
    Expect { suffix: "aaaaa", saturation: Some(0.7),  waiting: Some(12.0), kv: Some(0.5),  no_headroom: Some(1.0), queue_no_headroom: Some(12.0), load: Some(1.0) },
    Expect { suffix: "bbbbb", saturation: Some(0.2),  waiting: Some(5.0),  kv: Some(0.4),  no_headroom: Some(0.0), queue_no_headroom: Some(0.0),  load: Some(1.0) },
    Expect { suffix: "ccccc", saturation: Some(0.25), waiting: Some(0.0),  kv: Some(0.2),  no_headroom: Some(0.0), queue_no_headroom: Some(0.0),  load: Some(0.5) },
    Expect { suffix: "fffff", saturation: Some(0.25), waiting: Some(2.0),  kv: Some(0.95), no_headroom: Some(1.0), queue_no_headroom: Some(2.0),  load: Some(1.0) },
    Expect { suffix: "ddddd", saturation: Some(0.7),  waiting: None,       kv: None,       no_headroom: Some(1.0), queue_no_headroom: None,       load: Some(1.0) },
    Expect { suffix: "eeeee", saturation: None,       waiting: Some(3.0),  kv: Some(0.5),  no_headroom: None,      queue_no_headroom: None,       load: Some(1.0) },
    Expect { suffix: "hhhhh", saturation: None,       waiting: Some(0.0),  kv: Some(0.5),  no_headroom: None,      queue_no_headroom: None,       load: None },
    Expect { suffix: "ggggg", saturation: Some(0.25), waiting: Some(0.0),  kv: None,       no_headroom: Some(0.0), queue_no_headroom: Some(0.0),  load: Some(0.5) },
];

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn recipes_on_real_prometheus() {
    const T: &str = "recipes_on_real_prometheus";
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let started = Instant::now();
    let tmp = TempDir::new("autoscaling");

    // One sidecar per pod, reading its engine's stand-in.
    let pods = pods();
    let mut engines = Vec::new();
    let mut sidecars = Vec::new();
    for p in &pods {
        let dir = tmp.path().join(format!("{}-{}", p.namespace, p.name));
        std::fs::create_dir_all(&dir).expect("sidecar dir");
        let trace_path = dir.join("trace.jsonl");
        std::fs::write(&trace_path, trace(p, 300)).expect("write trace");
        let url = match engine_body(p.engine) {
            Some(body) => {
                let engine = StandIn::start(ok(&body));
                let url = engine.url();
                engines.push(engine);
                url
            }
            None => format!("http://127.0.0.1:{}/metrics", free_port()),
        };
        let source = format!("replay:{}", trace_path.display());
        let sidecar = Sidecar::start(
            &["--source", &source, "--interval", "1s"],
            &[
                ("POD_NAME", p.name.as_str()),
                ("POD_NAMESPACE", p.namespace),
                ("CONTAINER_NAME", "vllm"),
                ("NODE_NAME", "gpu-node-1"),
                ("TRUTHSCALE_ENGINE__ENABLED", "true"),
                ("TRUTHSCALE_ENGINE__URL", url.as_str()),
            ],
            &dir,
        );
        sidecars.push(sidecar);
    }
    eprintln!(
        "{T}: {} sidecars ready after {:.1} s",
        sidecars.len(),
        started.elapsed().as_secs_f64()
    );

    let targets: Vec<String> = sidecars.iter().map(|s| format!("'{}'", s.addr)).collect();
    let config = format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 1s\n  evaluation_interval: 2s\n\
         rule_files:\n  - '{}'\n\
         scrape_configs:\n  - job_name: truthscale\n    honor_labels: true\n    \
         static_configs:\n      - targets: [{}]\n",
        workspace().join(RULES).display(),
        targets.join(", ")
    );
    let mut prom = Prometheus::start(&config, tmp.path());

    // Until every pod's rules have their values (a few scrapes and evaluations).
    let queue_query = keda_query("queue-without-headroom");
    let load_query = keda_query("gpu-headroom");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let loads = query(&prom, "pod:truthscale_replica_load:ratio");
        let bounds = query(&prom, "pod:truthscale_replica_load:upper_bound");
        let gated = query(&prom, "pod:truthscale_serving_requests_waiting:no_headroom");
        let queue = query(&prom, &queue_query);
        // 7 Deployment pods (all but hhhhh) plus the canary and staging pods have a load,
        // and hhhhh too a bound; all of those but ddddd and eeeee a gated queue; the KEDA sum
        // is 12 + 2.
        let ready = loads.len() == 9
            && bounds.len() == 10
            && gated.len() == 7
            && queue.first().is_some_and(|(_, v)| close(*v, 14.0));
        if ready {
            break;
        }
        assert!(
            prom.process.try_wait().is_none(),
            "prometheus exited:\n{}",
            prom.process.stderr()
        );
        for s in &mut sidecars {
            assert!(
                s.process.try_wait().is_none(),
                "sidecar {} exited:\n{}",
                s.addr,
                s.process.stderr()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{T}: the rules did not settle in 120 s: loads {loads:?}, gated {gated:?}, queue {queue:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "{T}: rules settled after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The raw series carry the workload's namespace and pod (honor_labels), one per GPU.
    for metric in [
        "truthscale_gpu_roofline_saturation_ratio",
        "truthscale_serving_requests_waiting",
    ] {
        let s = query(&prom, metric);
        assert!(!s.is_empty(), "no {metric}");
        for (l, _) in &s {
            let pod = l.get("pod").map(String::as_str).unwrap_or_default();
            let ns = l.get("namespace").map(String::as_str).unwrap_or_default();
            assert!(
                pods.iter().any(|p| p.name == pod && p.namespace == ns),
                "{metric}: not a scenario pod's namespace and pod: {l:?}"
            );
        }
    }
    // The scenario holds: 2 GPUs with the same queue for aaaaa, no saturation for eeeee.
    let waiting = query(
        &prom,
        &format!("truthscale_serving_requests_waiting{{pod=\"{POD_PREFIX}aaaaa\"}}"),
    );
    assert_eq!(waiting.len(), 2, "one queue series per GPU: {waiting:?}");
    assert!(
        query(
            &prom,
            &format!("truthscale_gpu_roofline_saturation_ratio{{pod=\"{POD_PREFIX}eeeee\"}}")
        )
        .is_empty(),
        "the GPU without profiling counters has a roofline saturation"
    );

    // Every recording rule: one series per pod, labelled exactly namespace and pod, with the
    // expected value, and no series where an input is absent.
    let rules: [(&str, Want); 7] = [
        (
            "pod:truthscale_gpu_roofline_saturation_ratio:max_avg2m",
            |e| e.saturation,
        ),
        ("pod:truthscale_serving_requests_waiting:max_avg2m", |e| {
            e.waiting
        }),
        (
            "pod:truthscale_serving_kv_cache_usage_ratio:max_avg2m",
            |e| e.kv,
        ),
        ("pod:truthscale_gpu_no_headroom:bool", |e| e.no_headroom),
        ("pod:truthscale_serving_requests_waiting:no_headroom", |e| {
            e.queue_no_headroom
        }),
        ("pod:truthscale_replica_load:ratio", |e| e.load),
        // Every pod a sidecar reports: its load, or 1 (the most a replica needs) unknown.
        ("pod:truthscale_replica_load:upper_bound", |e| {
            Some(e.load.unwrap_or(1.0))
        }),
    ];
    assert_eq!(
        rules
            .iter()
            .map(|(n, _)| (*n).to_owned())
            .collect::<BTreeSet<_>>(),
        recorded(),
        "every recording rule of {RULES} is checked here"
    );
    for (rule, want) in rules {
        let q = format!("{rule}{{namespace=\"{DEFAULT}\", pod=~\"{POD_PREFIX}.*\"}}");
        let s = query(&prom, &q);
        for (l, _) in &s {
            let keys: BTreeSet<&str> = l.keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                BTreeSet::from(["__name__", "namespace", "pod"]),
                "{rule}: the labels the adapter and the KEDA queries select on"
            );
        }
        let got = by_pod(&s, &q);
        for e in &EXPECT {
            let pod = format!("{POD_PREFIX}{}", e.suffix);
            let g = got.get(&pod).copied();
            match (want(e), g) {
                (None, None) => {}
                (Some(w), Some(g)) if close(w, g) => {}
                (w, g) => panic!("{rule} for {pod}: want {w:?}, got {g:?} (absent is never 0)"),
            }
        }
        assert_eq!(
            got.len(),
            EXPECT.iter().filter(|e| want(e).is_some()).count(),
            "{rule}: {got:?}"
        );
    }

    // The KEDA triggers, verbatim: one value each, over the Deployment's pods only.
    let queue = query(&prom, &queue_query);
    assert_eq!(queue.len(), 1, "{queue_query}: {queue:?}");
    assert!(close(queue[0].1, 14.0), "12 (aaaaa) + 2 (fffff): {queue:?}");
    let load = query(&prom, &load_query);
    assert_eq!(load.len(), 1, "{load_query}: {load:?}");
    // The mean over the 8 Deployment pods, hhhhh (load unknown) at its bound 1, never at the
    // mean of the others: aaaaa 1, bbbbb 1, ccccc 0.5, fffff 1, ddddd 1, eeeee 1, ggggg 0.5
    // and hhhhh 1 = 7 over 8 (the known loads alone: 6 over 7).
    assert!(
        close(load[0].1, 7.0 / 8.0),
        "{load_query}: {load:?}, want 7 / 8"
    );
    // With no pod that has the inputs (the pods without a queue or a saturation reading),
    // the scale-out query yields no value, not 0: with ignoreNullValues "false" KEDA
    // reports an error. The scale-in query holds at 1 for a pod of unknown load: desired
    // replicas = ready replicas, no scale-in.
    let selector = "pod=~\"llm-inference-[a-z0-9]+-[a-z0-9]+\"";
    let only = |q: &str, pods: &str| {
        assert!(q.contains(selector), "{q}");
        q.replace(selector, &format!("pod=~\"{POD_PREFIX}({pods})\""))
    };
    let q = only(&queue_query, "ddddd|eeeee|hhhhh");
    assert!(query(&prom, &q).is_empty(), "{q} must have no value");
    let q = only(&load_query, "hhhhh");
    let held = query(&prom, &q);
    assert!(
        held.len() == 1 && close(held[0].1, 1.0),
        "{q}: {held:?}, want 1"
    );

    // The adapter: the seriesQuery finds series labelled namespace and pod; the metricsQuery,
    // rendered for the Deployment's pods, gives one value per pod labelled pod (its GroupBy),
    // equal to the recording rule's; a pod without a value gets none.
    let all: Vec<String> = EXPECT
        .iter()
        .map(|e| format!("{POD_PREFIX}{}", e.suffix))
        .collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    for r in adapter_rules() {
        let path = format!("/api/v1/series?match%5B%5D={}", url_encode(&r.series_query));
        let series = api_data(&r.series_query, &prom.get(&path));
        let series = series.as_array().expect("series list");
        assert!(!series.is_empty(), "{}: no series", r.series_query);
        for s in series {
            let l = labels_of(s);
            assert_eq!(l.get("__name__"), Some(&r.series), "{l:?}");
            for label in ["namespace", "pod"] {
                assert!(
                    l.get(label).is_some_and(|v| !v.is_empty()),
                    "{}: a series without {label}: {l:?}",
                    r.series_query
                );
            }
        }
        let rendered = r.render(DEFAULT, &all);
        let got = query(&prom, &rendered);
        for (l, _) in &got {
            assert_eq!(l.keys().collect::<Vec<_>>(), ["pod"], "{rendered}: {l:?}");
        }
        let got = by_pod(&got, &rendered);
        let want = by_pod(
            &query(
                &prom,
                &format!(
                    "{}{{namespace=\"{DEFAULT}\", pod=~\"{POD_PREFIX}.*\"}}",
                    r.series
                ),
            ),
            &r.series,
        );
        assert_eq!(got, want, "{}: {rendered}", r.exposed_as);
        if r.exposed_as == "truthscale_gpu_roofline_saturation_ratio" {
            assert_eq!(got.len(), 6, "every pod but eeeee and hhhhh: {got:?}");
            assert!(!got.contains_key(&format!("{POD_PREFIX}eeeee")), "{got:?}");
        }
    }

    // The rules evaluated cleanly.
    let rules = api_data("rules", &prom.get("/api/v1/rules"));
    let mut count = 0;
    for g in rules["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            count += 1;
            assert_eq!(r["health"], "ok", "{} {}", r["name"], r["lastError"]);
        }
    }
    assert_eq!(
        count,
        recorded().len() + 1,
        "the recording rules and the alert"
    );
    let log = prom.process.stderr();
    assert!(
        !truthscale_e2e::logs_an_error(&log),
        "prometheus logged errors:\n{log}"
    );
    drop(engines);
    eprintln!("{T}: done in {:.1} s", started.elapsed().as_secs_f64());
}

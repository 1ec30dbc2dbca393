//! Label and input hygiene: pod identities with quotes, backslashes, newlines and non-ASCII
//! (through the Downward API environment) give exposition that promtool, the reference
//! OpenMetrics parser and a real Prometheus all read back to the very same strings; raw CR,
//! TAB and NUL (from a source's labels) are read back by all of them as the same visible
//! text (the external-tool tier: see `require_tool_or_return!`).

use std::io::Write as _;
use std::time::{Duration, Instant};
use truthscale_e2e::{
    PROMETHEUS_CLIENT, Prometheus, Sidecar, StandIn, TempDir, ok, require_tool_or_return,
};

const POD: &str = "we\"ird\\pod\nname-é日本";
const NAMESPACE: &str = "ns-\"quoted\"";
const CONTAINER: &str = "c\\\\double\nline";
const NODE: &str = "nœud-⚙";
/// A pod name as dcgm-exporter's own labels carry it (escaped in its exposition), with raw
/// control characters the formats have no escape for.
const SOURCE_POD: &str = "src\"pod\\x\ny-ü\tt\rr\0z";
/// How every reader reads [`SOURCE_POD`] back: the control characters as visible text, and
/// the backslash before `x` (which could be read as the start of one) as `\x5c`.
const SOURCE_POD_READ: &str = "src\"pod\\x5cx\ny-ü\\tt\\rr\\0z";

fn promtool_check(promtool: &std::path::Path, body: &[u8]) {
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn awkward_identities_survive_every_parser() {
    let promtool = require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("python3:prometheus_client", PROMETHEUS_CLIENT);
    let tmp = TempDir::new("hygiene");
    let sidecar = Sidecar::start(
        &["--source", "sim", "--sim-gpus", "1", "--interval", "200ms"],
        &[
            ("POD_NAME", POD),
            ("POD_NAMESPACE", NAMESPACE),
            ("CONTAINER_NAME", CONTAINER),
            ("NODE_NAME", NODE),
        ],
        tmp.path(),
    );
    // The same kind of names through a source's own labels: a dcgm-exporter that attributes
    // its GPU to such a pod.
    let escaped = SOURCE_POD
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let dcgm = StandIn::start(ok(&format!(
        "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-h1\",device=\"nvidia0\",modelName=\"Tesla T4\",Hostname=\"h\",pod=\"{escaped}\",namespace=\"n\",container=\"c\"}} 50\n"
    )));
    let from_source = Sidecar::start(
        &[
            "--source",
            &format!("dcgm-exporter:{}", dcgm.url()),
            "--interval",
            "200ms",
        ],
        &[],
        tmp.path(),
    );
    for s in [&sidecar, &from_source] {
        let deadline = Instant::now() + Duration::from_secs(15);
        let text = loop {
            let body = s.get("/metrics", &[]).body;
            if String::from_utf8_lossy(&body).contains("truthscale_gpu_info{") {
                break body;
            }
            assert!(Instant::now() < deadline, "no GPU on {}", s.addr);
            std::thread::sleep(Duration::from_millis(100));
        };
        // The text format: promtool's parser, warnings included.
        promtool_check(&promtool, &text);
    }
    // OpenMetrics: the reference parser takes the whole body.
    for s in [&sidecar, &from_source] {
        let om = s.get(
            "/metrics",
            &[("Accept", "application/openmetrics-text; version=1.0.0")],
        );
        assert!(
            om.header("content-type")
                .unwrap_or_default()
                .starts_with("application/openmetrics-text"),
            "{:?}",
            om.header("content-type")
        );
        if let Err(e) = truthscale_e2e::openmetrics_parse(&om.body) {
            panic!("the OpenMetrics parser says {e}");
        }
    }
    // A real Prometheus scrapes it and gives back the exact strings.
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: truthscale\n    honor_labels: true\n    static_configs:\n      - targets: ['{}', '{}']\n",
        sidecar.addr, from_source.addr
    );
    let prom = Prometheus::start(&config, tmp.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    let infos = loop {
        let r = prom.query("truthscale_gpu_info");
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("query JSON");
        let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
        if result.len() == 2 {
            break result;
        }
        assert!(
            Instant::now() < deadline,
            "not both truthscale_gpu_info in Prometheus: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let by_source = |src: &str| {
        infos
            .iter()
            .map(|m| m["metric"].clone())
            .find(|m| m["source"] == src)
            .unwrap_or_else(|| panic!("no {src} GPU in {infos:?}"))
    };
    assert_eq!(by_source("dcgm_exporter")["pod"], SOURCE_POD_READ);
    let labels = by_source("sim");
    assert_eq!(labels["pod"], POD);
    assert_eq!(labels["namespace"], NAMESPACE);
    assert_eq!(labels["container"], CONTAINER);
    assert_eq!(labels["node"], NODE);
}

//! Static checks on the observability artifacts: the Grafana dashboards, the Prometheus rules
//! and alerts, their promtool tests and the runbooks. (`alerts/check.sh` runs promtool itself.)
//!
//! - Every metric name in a dashboard or rule expression exists in the catalog or is a
//!   recording rule defined in `alerts/truthscale.rules.yml`.
//! - Every dashboard is importable anywhere: current schema, a `datasource` variable, the
//!   shared variables, no fixed data-source uid, and a description on every panel.
//! - Every alert has a severity, a summary, a description and a runbook section that exists.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use truthscale_core::catalog;
use truthscale_e2e::workspace;

const RULES: &str = "alerts/truthscale.rules.yml";
const RUNBOOKS: &str = "docs/runbooks.md";
const RUNBOOK_BASE: &str = "https://github.com/truthscale/truthscale/blob/main/docs/runbooks.md#";
const DASHBOARDS: &[(&str, &str)] = &[
    ("truthscale-fleet.json", "truthscale-fleet"),
    ("truthscale-pod.json", "truthscale-pod"),
    ("truthscale-exporter.json", "truthscale-exporter"),
    ("truthscale-showback.json", "truthscale-showback"),
];
const ALERTS: &[&str] = &[
    "TruthscalePhantomUtilization",
    "TruthscaleGPUAllocatedIdle",
    "TruthscaleDecodeBoundWithoutBatching",
    "TruthscaleMemoryOverprovisioned",
    "TruthscaleExporterDown",
    "TruthscaleSourceStale",
    "TruthscaleFidelityDropped",
    "TruthscaleClockThrottling",
];
const DATASOURCE_REF: &str = "${datasource}";

fn read(rel: &str) -> String {
    let p = workspace().join(rel);
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Files in `dir` (relative to the workspace) whose name ends with `ext`, sorted.
fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let d = workspace().join(dir);
    let mut out: Vec<PathBuf> = fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("list {}: {e}", d.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(ext))
        .collect();
    out.sort();
    out
}

fn name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn dashboards() -> Vec<(String, Json)> {
    let all: Vec<(String, Json)> = files("dashboards", ".json")
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).expect("read dashboard");
            let v = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", p.display()));
            (name(&p), v)
        })
        .collect();
    for (file, _) in DASHBOARDS {
        assert!(
            all.iter().any(|(f, _)| f == file),
            "dashboards/{file} missing"
        );
    }
    all
}

fn yaml_file(p: &Path) -> Yaml {
    let text = fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: invalid YAML: {e}", p.display()))
}

fn as_str(v: &Yaml) -> Option<&str> {
    v.as_str()
}

/// One rule of a rules file.
#[derive(Debug)]
struct Rule {
    file: String,
    record: Option<String>,
    alert: Option<String>,
    expr: String,
    has_for: bool,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

fn string_map(v: Option<&Yaml>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(m) = v.and_then(Yaml::as_mapping) {
        for (k, v) in m {
            if let (Some(k), Some(v)) = (as_str(k), as_str(v)) {
                out.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    out
}

/// Every rule in `alerts/*.yml` (the rule files; tests live in `alerts/tests/`).
fn rules() -> Vec<Rule> {
    let mut out = Vec::new();
    for p in files("alerts", ".yml") {
        let file = name(&p);
        let doc = yaml_file(&p);
        let groups = doc
            .get("groups")
            .and_then(Yaml::as_sequence)
            .unwrap_or_else(|| panic!("{file}: no groups"));
        for g in groups {
            let rules = g
                .get("rules")
                .and_then(Yaml::as_sequence)
                .unwrap_or_else(|| panic!("{file}: group without rules"));
            for r in rules {
                let expr = r
                    .get("expr")
                    .and_then(as_str)
                    .unwrap_or_else(|| panic!("{file}: rule without expr: {r:?}"));
                out.push(Rule {
                    file: file.clone(),
                    record: r.get("record").and_then(as_str).map(str::to_owned),
                    alert: r.get("alert").and_then(as_str).map(str::to_owned),
                    expr: expr.to_owned(),
                    has_for: r.get("for").is_some(),
                    labels: string_map(r.get("labels")),
                    annotations: string_map(r.get("annotations")),
                });
            }
        }
    }
    assert!(
        out.iter().any(|r| r.file == name(Path::new(RULES))),
        "{RULES} missing"
    );
    out
}

/// Words of a PromQL expression: runs of `[A-Za-z0-9_:]`. Metric names, recording-rule names,
/// label names, functions and durations all come out as words; the caller classifies them.
fn words(expr: &str) -> impl Iterator<Item = &str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty())
}

fn is_catalog_like(w: &str) -> bool {
    w.strip_prefix("truthscale_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// `level:truthscale_metric:operations` (the first part `[a-z_]+`).
fn is_recording_like(w: &str) -> bool {
    let Some((level, rest)) = w.split_once(':') else {
        return false;
    };
    !level.is_empty()
        && level.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        && rest.strip_prefix("truthscale_").is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b':')
        })
}

/// Names in `expr` that are neither in the catalog nor recorded.
fn unknown_names(
    expr: &str,
    recorded: &BTreeSet<String>,
    used: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut unknown = Vec::new();
    for w in words(expr) {
        if is_recording_like(w) {
            used.insert(w.to_owned());
            if !recorded.contains(w) {
                unknown.push(w.to_owned());
            }
        } else if w.contains(':') {
            // Durations in subqueries (`[1h:5m]`) and the like.
        } else if is_catalog_like(w) {
            used.insert(w.to_owned());
            if catalog::by_name(w).is_none() {
                unknown.push(w.to_owned());
            }
        }
    }
    unknown
}

/// Every PromQL expression of a dashboard: target `expr`s and variable queries, with a label
/// saying where each one is.
fn dashboard_exprs(file: &str, d: &Json) -> Vec<(String, String)> {
    fn walk(v: &Json, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            Json::Object(m) => {
                let here = m
                    .get("title")
                    .and_then(Json::as_str)
                    .map_or_else(|| at.to_owned(), |t| format!("{at} / {t}"));
                if let Some(e) = m.get("expr").and_then(Json::as_str) {
                    out.push((here.clone(), e.to_owned()));
                }
                for (k, v) in m {
                    if k != "expr" {
                        walk(v, &here, out);
                    }
                }
            }
            Json::Array(a) => a.iter().for_each(|v| walk(v, at, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(d.get("panels").unwrap_or(&Json::Null), file, &mut out);
    for v in variables(d) {
        let q = match v.get("query") {
            Some(Json::String(s)) => Some(s.as_str()),
            Some(o @ Json::Object(_)) => o.get("query").and_then(Json::as_str),
            _ => None,
        };
        if let Some(q) = q {
            let n = v.get("name").and_then(Json::as_str).unwrap_or("?");
            out.push((format!("{file} / variable {n}"), q.to_owned()));
        }
    }
    out
}

fn variables(d: &Json) -> Vec<&Json> {
    d.pointer("/templating/list")
        .and_then(Json::as_array)
        .map(|l| l.iter().collect())
        .unwrap_or_default()
}

fn variable<'a>(d: &'a Json, name: &str) -> Option<&'a Json> {
    variables(d)
        .into_iter()
        .find(|v| v.get("name").and_then(Json::as_str) == Some(name))
}

/// All panels, including those nested in collapsed rows.
fn panels(d: &Json) -> Vec<&Json> {
    fn walk<'a>(list: &'a Json, out: &mut Vec<&'a Json>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            if let Some(inner) = p.get("panels") {
                walk(inner, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(d.get("panels").unwrap_or(&Json::Null), &mut out);
    out
}

#[test]
fn metric_names_exist_in_the_catalog_or_the_recording_rules() {
    let rules = rules();
    let recorded: BTreeSet<String> = rules.iter().filter_map(|r| r.record.clone()).collect();
    assert!(!recorded.is_empty(), "no recording rules in {RULES}");

    let mut exprs: Vec<(String, String)> = Vec::new();
    for r in &rules {
        let what = r.record.as_deref().or(r.alert.as_deref()).unwrap_or("?");
        exprs.push((format!("{} / {what}", r.file), r.expr.clone()));
    }
    for (file, d) in dashboards() {
        exprs.extend(dashboard_exprs(&file, &d));
    }

    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    for (at, e) in &exprs {
        for n in unknown_names(e, &recorded, &mut used) {
            unknown.push(format!("{at}: {n}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "metric names in neither truthscale_core::catalog::ALL nor {RULES}:\n{}",
        unknown.join("\n")
    );

    // The scan sees what it should: the counters behind exact averages, a recording rule.
    for n in [
        "truthscale_gpu_effective_compute_seconds_total",
        "truthscale_gpu_observed_seconds_total",
        "truthscale_gpu_phase_seconds_total",
        "namespace:truthscale_gpu_effective_gpus:rate5m",
    ] {
        assert!(used.contains(n), "{n} not found by the scan");
    }
}

#[test]
fn name_scanner_classifies_words() {
    let recorded: BTreeSet<String> = ["namespace:truthscale_gpu_busy:rate5m".to_owned()].into();
    let mut used = BTreeSet::new();
    let expr = r#"sum by (namespace) (rate(truthscale_gpu_busy_seconds_total{job=~".*truthscale.*"}[5m]))
        / namespace:truthscale_gpu_busy:rate5m + avg_over_time(x[$__range:5m]) * 1e9
        + truthscale_gpu_bogus_ratio + node:truthscale_gpu_busy:rate5m"#;
    let unknown = unknown_names(expr, &recorded, &mut used);
    assert_eq!(
        unknown,
        [
            "truthscale_gpu_bogus_ratio",
            "node:truthscale_gpu_busy:rate5m"
        ]
    );
    assert!(used.contains("truthscale_gpu_busy_seconds_total"));
    assert!(used.contains("namespace:truthscale_gpu_busy:rate5m"));
}

#[test]
fn recording_rules_follow_the_naming_convention() {
    let mut seen = BTreeSet::new();
    for r in rules() {
        let Some(rec) = r.record else { continue };
        assert!(
            is_recording_like(&rec) && rec.split(':').count() == 3,
            "{rec}: not level:truthscale_metric:operations"
        );
        assert!(seen.insert(rec.clone()), "{rec} recorded twice");
        assert!(
            r.labels.is_empty() && r.annotations.is_empty(),
            "{rec}: stray labels"
        );
    }
}

#[test]
fn dashboards_are_portable_and_described() {
    let mut uids = BTreeSet::new();
    for (file, d) in dashboards() {
        let schema = d.get("schemaVersion").and_then(Json::as_u64).unwrap_or(0);
        assert!(schema >= 39, "{file}: schemaVersion {schema} < 39");
        let uid = d.get("uid").and_then(Json::as_str).unwrap_or("");
        assert!(!uid.is_empty(), "{file}: no uid");
        assert!(uids.insert(uid.to_owned()), "{file}: uid {uid} reused");
        if let Some((_, want)) = DASHBOARDS.iter().find(|(f, _)| *f == file) {
            assert_eq!(
                uid, *want,
                "{file}: uid changed (links and bookmarks use it)"
            );
        }
        assert!(
            d.get("title")
                .and_then(Json::as_str)
                .is_some_and(|t| !t.is_empty()),
            "{file}: no title"
        );

        let ds =
            variable(&d, "datasource").unwrap_or_else(|| panic!("{file}: no datasource variable"));
        assert_eq!(
            ds.get("type").and_then(Json::as_str),
            Some("datasource"),
            "{file}"
        );
        assert_eq!(
            ds.get("query").and_then(Json::as_str),
            Some("prometheus"),
            "{file}"
        );
        for v in ["cluster", "namespace", "pod", "node", "gpu"] {
            assert!(variable(&d, v).is_some(), "{file}: no {v} variable");
        }
        let cluster = variable(&d, "cluster").expect("cluster variable");
        assert_eq!(
            cluster.get("includeAll").and_then(Json::as_bool),
            Some(true),
            "{file}: cluster must be optional (include All)"
        );
        assert_eq!(
            cluster.get("allValue").and_then(Json::as_str),
            Some(".*"),
            "{file}: cluster All must match series without the label"
        );

        let mut bad = Vec::new();
        fixed_datasources(&d, "$", &mut bad);
        assert!(
            bad.is_empty(),
            "{file}: fixed data sources:\n{}",
            bad.join("\n")
        );

        let mut ids = BTreeSet::new();
        for p in panels(&d) {
            let title = p
                .get("title")
                .and_then(Json::as_str)
                .unwrap_or("<untitled>");
            let id = p.get("id").and_then(Json::as_u64);
            assert!(
                id.is_some_and(|id| ids.insert(id)),
                "{file} / {title}: missing or duplicate id"
            );
            assert!(
                p.get("description")
                    .and_then(Json::as_str)
                    .is_some_and(|s| !s.trim().is_empty()),
                "{file} / {title}: no description"
            );
            assert!(p.get("gridPos").is_some(), "{file} / {title}: no gridPos");
            let kind = p.get("type").and_then(Json::as_str).unwrap_or("");
            if kind == "row" || kind == "text" {
                continue;
            }
            let targets = p.get("targets").and_then(Json::as_array);
            assert!(
                targets.is_some_and(|t| !t.is_empty()),
                "{file} / {title}: no queries"
            );
            for t in targets.into_iter().flatten() {
                assert!(
                    t.get("expr")
                        .and_then(Json::as_str)
                        .is_some_and(|e| !e.trim().is_empty()),
                    "{file} / {title}: empty expr"
                );
            }
        }
    }
}

/// Collects every place a data source is named by anything but `${datasource}`: a
/// `datasource` object whose `uid` differs, a plain-string `datasource`, or an import
/// placeholder such as `${DS_PROMETHEUS}`.
fn fixed_datasources(v: &Json, at: &str, bad: &mut Vec<String>) {
    match v {
        Json::Object(m) => {
            for (k, v) in m {
                let here = format!("{at}.{k}");
                if k == "datasource" {
                    match v {
                        Json::Object(ds) => {
                            if let Some(uid) = ds.get("uid")
                                && uid.as_str() != Some(DATASOURCE_REF)
                            {
                                bad.push(format!("{here}.uid = {uid}"));
                            }
                        }
                        Json::String(s) if s != DATASOURCE_REF => {
                            bad.push(format!("{here} = {s:?}"));
                        }
                        _ => {}
                    }
                }
                if k == "__inputs" {
                    bad.push(format!("{here}: import placeholders"));
                }
                fixed_datasources(v, &here, bad);
            }
        }
        Json::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                fixed_datasources(v, &format!("{at}[{i}]"), bad);
            }
        }
        Json::String(s) if s.contains("${DS_") => bad.push(format!("{at} = {s:?}")),
        _ => {}
    }
}

/// GitHub's heading anchors: lowercase, punctuation dropped, spaces to `-`, repeats numbered.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut fenced = false;
    for line in markdown.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = t.bytes().take_while(|&b| b == b'#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let text = t[hashes..].trim().trim_end_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = counts.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn anchors_follow_github_rules() {
    let a = anchors(
        "# Run books\n## TruthscaleX\n```\n# not a heading\n```\n## Why? (cost)\n## Why? (cost)\n#nope\n",
    );
    let want: BTreeSet<String> = ["run-books", "truthscalex", "why-cost", "why-cost-1"]
        .map(str::to_owned)
        .into();
    assert_eq!(a, want);
}

#[test]
fn alerts_are_labelled_annotated_and_have_runbooks() {
    let rules = rules();
    let runbook_anchors = anchors(&read(RUNBOOKS));
    let mut found = BTreeSet::new();
    for r in rules.iter().filter(|r| r.alert.is_some()) {
        let alert = r.alert.as_deref().unwrap_or_default();
        assert!(found.insert(alert.to_owned()), "{alert} defined twice");
        let severity = r.labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "{alert}: severity {severity:?}"
        );
        assert!(r.has_for, "{alert}: no `for`");
        for a in ["summary", "description", "runbook_url"] {
            assert!(
                r.annotations.get(a).is_some_and(|s| !s.trim().is_empty()),
                "{alert}: no {a} annotation"
            );
        }
        let url = &r.annotations["runbook_url"];
        let anchor = url
            .strip_prefix(RUNBOOK_BASE)
            .unwrap_or_else(|| panic!("{alert}: runbook_url {url} not under {RUNBOOK_BASE}"));
        assert!(
            runbook_anchors.contains(anchor),
            "{alert}: no heading for #{anchor} in {RUNBOOKS} (have {runbook_anchors:?})"
        );
    }
    let missing: Vec<&str> = ALERTS
        .iter()
        .copied()
        .filter(|a| !found.contains(*a))
        .collect();
    assert!(missing.is_empty(), "alerts missing: {missing:?}");
}

#[test]
fn every_alert_is_unit_tested_firing_and_quiet() {
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    let tests = files("alerts/tests", ".yml");
    assert!(!tests.is_empty(), "no promtool tests in alerts/tests");
    for p in tests {
        let doc = yaml_file(&p);
        for t in doc
            .get("tests")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
        {
            for a in t
                .get("alert_rule_test")
                .and_then(Yaml::as_sequence)
                .into_iter()
                .flatten()
            {
                let Some(n) = a.get("alertname").and_then(as_str) else {
                    continue;
                };
                let fired = a
                    .get("exp_alerts")
                    .and_then(Yaml::as_sequence)
                    .is_some_and(|s| !s.is_empty());
                let set = if fired { &mut firing } else { &mut quiet };
                set.insert(n.to_owned());
            }
        }
    }
    for r in rules() {
        let Some(a) = r.alert else { continue };
        assert!(firing.contains(&a), "{a}: no promtool test where it fires");
        assert!(
            quiet.contains(&a),
            "{a}: no promtool test where it stays quiet"
        );
    }
}

/// Every golden `/metrics` body (`truthscale-core/tests/golden/*.prom`, the exact bytes the
/// encoder writes for fixed inputs) passes `promtool check metrics`, warnings included.
#[test]
fn golden_bodies_pass_promtool() {
    use std::io::Write as _;
    let promtool = truthscale_e2e::require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let dir = truthscale_e2e::workspace().join("truthscale-core/tests/golden");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("golden folder") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("prom") {
            continue;
        }
        let body = std::fs::read(&path).expect("read golden");
        let mut child = std::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run promtool");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&body)
            .expect("write body");
        let out = child.wait_with_output().expect("promtool output");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "{}: promtool check metrics:\n{}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert_eq!(checked, 4, "golden bodies checked");
}

/// Every golden OpenMetrics body (`*.om.txt`) is accepted whole by the reference OpenMetrics
/// parser (Python `prometheus_client`), which rejected the whole scrape while info families
/// were written as `# TYPE truthscale_gpu_info info`.
#[test]
fn golden_openmetrics_bodies_pass_the_reference_parser() {
    use truthscale_e2e::PROMETHEUS_CLIENT;
    truthscale_e2e::require_tool_or_return!("python3:prometheus_client", PROMETHEUS_CLIENT);
    let dir = truthscale_e2e::workspace().join("truthscale-core/tests/golden");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("golden folder") {
        let path = entry.expect("entry").path();
        if !path.to_string_lossy().ends_with(".om.txt") {
            continue;
        }
        let body = std::fs::read(&path).expect("read golden");
        let text = String::from_utf8_lossy(&body);
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        match truthscale_e2e::openmetrics_parse(&body) {
            Ok(n) => assert_eq!(n, samples, "{}: every sample parsed", path.display()),
            Err(e) => panic!("{}: the OpenMetrics parser says {e}", path.display()),
        }
        assert!(
            text.contains("# TYPE truthscale_gpu info\n"),
            "{}",
            path.display()
        );
        checked += 1;
    }
    assert_eq!(checked, 4, "golden OpenMetrics bodies checked");
}

//! `truthscale report --by … --format opencost` and `--focus FILE` end to end, on the
//! showback's fleet (see `showback.rs`): the OpenCost-shaped document adds up to the fleet,
//! and the FOCUS CSV passes the FinOps Foundation's own validator (`focus-validator`, PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use truthscale_e2e::{Prometheus, TempDir, require_tool_or_return};

use crate::showback::{H, W, end_now, json, near, openmetrics, report};

/// The Python that runs `focus-validator` (it needs Python 3.12 or later):
/// `FOCUS_VALIDATOR_PYTHON`, else `python3.12`.
fn focus_python() -> String {
    std::env::var("FOCUS_VALIDATOR_PYTHON").unwrap_or_else(|_| "python3.12".to_owned())
}

/// What installs the validator; keep in step with `scripts/test`.
const FOCUS_VALIDATOR: &str = "focus-validator==2.2.1 'numpy<2' 'pyarrow>=18,<19'";

/// The folder `focus_validator` is installed in: it reads its rule files by relative path,
/// so it runs from there.
///
/// # Panics
/// When the validator is missing: the test never skips silently.
fn validator_home(python: &str) -> PathBuf {
    let out = Command::new(python)
        .args([
            "-c",
            "import os, focus_validator; print(os.path.dirname(os.path.dirname(focus_validator.__file__)))",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_owned())
        }
        _ => panic!(
            "{python} with the module focus_validator is missing: run `scripts/test`, which \
             installs it (or `{python} -m pip install {FOCUS_VALIDATOR}`; set \
             FOCUS_VALIDATOR_PYTHON to another Python 3.12 or later)"
        ),
    }
}

/// The validator's verdict on `csv`: its summary line (`Total: … | Pass: … | Fail: N | …`),
/// the rules that failed, and its whole output. Its exit code is 0 even on violations, so the line is read.
fn validate(csv: &Path) -> (String, Vec<String>, String) {
    let python = focus_python();
    let home = validator_home(&python);
    let out = Command::new(&python)
        .current_dir(&home)
        .args(["-m", "focus_validator.main", "--data-file"])
        .arg(csv)
        .arg("--block-download")
        .output()
        .expect("focus-validator runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let summary = text
        .lines()
        .find(|l| l.trim_start().starts_with("Total:"))
        .unwrap_or_else(|| panic!("no `Total:` line from focus-validator:\n{text}"))
        .trim()
        .to_owned();
    let failed = text
        .lines()
        .filter(|l| l.contains(": FAIL "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|id| id.trim_end_matches(':').to_owned())
        .collect();
    (summary, failed, text)
}

/// The validator's line for `rule` (`✅ RULE: PASS  (…)`), whatever its status.
fn rule_line<'a>(text: &'a str, rule: &str) -> &'a str {
    let id = format!(" {rule}: ");
    text.lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("focus-validator printed no line for {rule}:\n{text}"))
}

/// The `N` of `Fail: N` in the validator's summary line.
fn fail_count(summary: &str) -> u64 {
    summary
        .split('|')
        .find_map(|part| part.trim().strip_prefix("Fail:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `Fail: N` in {summary:?}"))
}

/// The FOCUS CSV of a priced showback by namespace, per hour, passes focus-validator's
/// FOCUS 1.2 rules. One rule cannot pass in any file: the validator's rule set checks
/// InvoiceId's two conditional nullability rules (C-004: null without an invoice; C-005: not
/// null with one) each on every row, their conditions dropped; a showback has no invoice, so
/// InvoiceId is null and InvoiceId-C-005-C is that one failure (their composite, C-003,
/// passes). Every other rule passes, or is skipped where a showback has no such column.
#[test]
fn the_focus_csv_of_a_report_passes_the_focus_validator() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("finops-focus");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    let focus = dir.path().join("focus.csv");
    let run = report(
        &prom.url(),
        "job=\"dcgm\"",
        &[
            "--by",
            "namespace",
            "--every",
            "1h",
            "--cost-per-gpu-hour",
            "2.5",
            "--currency",
            "EUR",
            "--focus",
            focus.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let text = std::fs::read_to_string(&focus).expect("the FOCUS CSV");
    assert!(text.lines().count() > 2, "{text}");
    assert!(text.lines().skip(1).all(|l| l.contains(",EUR,")), "{text}");
    assert_validates(&focus, &text);
}

/// Runs the validator on the FOCUS CSV `focus` (its `text`) and asserts its verdict: every
/// column the file has is accepted as a whole, and InvoiceId-C-005-C (a showback has no
/// invoice) is the only rule that fails.
pub(crate) fn assert_validates(focus: &Path, text: &str) {
    let (summary, failed, out) = validate(focus);
    eprintln!("focus-validator: {summary}");
    // Every column the file has is accepted as a whole: each column's root rule passes (or
    // is skipped, for columns a showback leaves out), none fails. InvoiceId's nullability
    // composite (C-004 or C-005) passes, and so does the dataset's check that every
    // required column passes.
    let roots: Vec<&str> = out.lines().filter(|l| l.contains("-C-000-")).collect();
    assert!(roots.len() > 40, "{out}");
    for l in &roots {
        assert!(!l.contains(": FAIL "), "a column's root rule failed: {l}");
    }
    for rule in [
        "InvoiceId-C-000-O",
        "InvoiceId-C-003-C",
        "BilledCost-C-000-M",
    ] {
        assert!(
            rule_line(&out, rule).contains(": PASS "),
            "{}",
            rule_line(&out, rule)
        );
    }
    assert!(
        rule_line(&out, "CostAndUsage-D-002-M").contains("AND passed - all child rules succeeded"),
        "{}",
        rule_line(&out, "CostAndUsage-D-002-M")
    );
    let unexpected: Vec<&String> = failed
        .iter()
        .filter(|r| *r != "InvoiceId-C-005-C")
        .collect();
    assert!(
        unexpected.is_empty(),
        "{summary}\nfailed: {failed:?}\n{text}"
    );
    assert!(fail_count(&summary) <= 1, "{summary}\nfailed: {failed:?}");
}

/// `--format opencost`: one set for the window, a row per namespace plus `__idle__` and
/// `__unallocated__`; their GPU-hours add up to the fleet's, and every cost is the hours at
/// the price.
#[test]
fn opencost_format_adds_up_to_the_fleet() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("finops-opencost");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    let v = json(&report(
        &prom.url(),
        "job=\"dcgm\"",
        &[
            "--by",
            "namespace",
            "--format",
            "opencost",
            "--cost-per-gpu-hour",
            "2",
        ],
    ));
    assert_eq!(v["code"], 200);
    let sets = v["data"].as_array().expect("data");
    assert_eq!(sets.len(), 1, "one set without --every");
    let set = sets[0].as_object().expect("a set");
    for name in ["research", "web", "__idle__", "__unallocated__"] {
        assert!(set.contains_key(name), "no {name} in {set:?}");
    }
    let hours: f64 = set
        .values()
        .map(|a| a["gpuHours"].as_f64().expect("gpuHours"))
        .sum();
    // Five GPUs over the window; a GPU is down nowhere here.
    assert!((hours - 5.0 * W * H).abs() < 1e-6, "{hours}");
    for (name, a) in set {
        let want = 2.0 * a["gpuHours"].as_f64().unwrap();
        near(&a["gpuCost"], want, &format!("{name} gpuCost"));
        assert_eq!(a["window"]["start"], a["start"], "{name}");
    }
    // The idle notebook's namespace: research held 2 GPUs, one busy all the time.
    let research = &set["research"];
    near(&research["gpuHours"], 2.0 * W * H, "research");
    near(&research["gpuEfficiency"], 0.5, "research gpuEfficiency");
    assert_eq!(set["__idle__"]["gpuEfficiency"], Value::Null);
}

/// Simulated data says so in every FinOps output: the fleet in truthscale's own series with
/// `node-b` gpu 1 (`web/batch`) a sidecar's simulated GPU (its model `Simulated H100 SXM`,
/// as the simulator names it). The `web` group, charged its hours, is marked in the CSV, the
/// FOCUS tags and the OpenCost shape; `research` (real GPUs alone) and the capacity no pod
/// held (a real GPU) are not.
#[test]
fn simulated_gpu_hours_are_marked_in_every_finops_output() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("finops-simulated");
    let real = "uuid=\"GPU-node-b-1\",model=\"NVIDIA H100 80GB HBM3\"";
    let history = openmetrics(end_now());
    assert!(history.contains(real));
    let history = history.replace(real, "uuid=\"GPU-node-b-1\",model=\"Simulated H100 SXM\"");
    let prom = Prometheus::backfilled(&history, dir.path(), None);
    let (csv, focus) = (dir.path().join("s.csv"), dir.path().join("focus.csv"));
    let run = report(
        &prom.url(),
        "job=\"truthscale\"",
        &[
            "--by",
            "namespace",
            "--cost-per-gpu-hour",
            "2",
            "--currency",
            "EUR",
            "--csv",
            csv.to_str().unwrap(),
            "--focus",
            focus.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let csv = std::fs::read_to_string(&csv).expect("the CSV");
    let column = csv
        .lines()
        .next()
        .and_then(|h| h.split(',').position(|c| c == "simulated"))
        .expect("a simulated column");
    let marks: Vec<(String, String)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[3].to_owned(), f[column].to_owned())
        })
        .collect();
    let mark = |g: &str| marks.iter().find(|(n, _)| n == g).map(|(_, m)| m.as_str());
    assert_eq!(mark("web"), Some("true"), "{csv}");
    assert_eq!(mark("research"), Some("false"), "{csv}");
    assert_eq!(mark("(unallocated)"), Some("false"), "{csv}");
    let focus = std::fs::read_to_string(&focus).expect("the FOCUS CSV");
    let tagged: Vec<&str> = focus
        .lines()
        .filter(|l| l.contains("truthscale.simulated"))
        .collect();
    assert_eq!(tagged.len(), 1, "{focus}");
    assert!(tagged[0].contains(",web,"), "{focus}");
    let v = json(&report(
        &prom.url(),
        "job=\"truthscale\"",
        &["--by", "namespace", "--format", "opencost"],
    ));
    let set = &v["data"][0];
    assert_eq!(set["web"]["truthscaleSimulated"], true, "{set:#}");
    for name in ["research", "__idle__", "__unallocated__"] {
        assert_eq!(set[name].get("truthscaleSimulated"), None, "{name}");
    }
}

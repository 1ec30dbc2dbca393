//! A GPU with no series between two holders, end to end: `truthscale report --by` on a real
//! Prometheus backfilled with promtool. In a sidecar deployment a GPU no pod holds has no
//! series, so nothing tells whether a pod held it then: those GPU-hours are *allocation
//! unknown*, never unallocated and never any group's, in the JSON, the text table, the CSV,
//! the OpenCost document and the FOCUS CSV (which the FinOps Foundation's validator passes).
//!
//! Two H100s over the last 3 hours at a 60 s step in dcgm-exporter's fields (the report reads
//! the last 2 hours: 120 steps of 1/60 h, counted back from the end):
//! - `node-a` gpu 0: `ml/first` for the steps 180 to 90 from the end (its last 30 in the
//!   window), no series at all for the 30 steps after, then `ml/second` for the last 60;
//! - `node-a` gpu 1: no pod, read throughout (busy 0): unallocated, measured.
//!
//! Counted by hand at $4 a GPU-hour: the fleet 2 + 2 h; unallocated 2 h ($8); of gpu 0,
//! `ml` 35 + 60 steps (the server's 5-minute lookback holds `ml/first` past its last
//! sample: [`LOOKBACK`]) and allocation unknown the other 25 steps, 0.416667 h ($1.67).

use std::fmt::Write as _;

use serde_json::Value;
use truthscale_e2e::{Prometheus, TempDir, require_tool_or_return};

use crate::showback::{H, W, end_now, json, near, report};

const STEP: i64 = 60;
const POINTS: i64 = 180;
/// The steps (counted back from the end) each pod on gpu 0 was read; none between.
const FIRST: std::ops::Range<i64> = 90..180;
const SECOND: std::ops::Range<i64> = 0..60;
/// Prometheus answers a series for 5 minutes (its lookback) past its last sample where no
/// staleness marker ends it: a live scrape writes one when a series goes, backfilled blocks
/// have none. So `ml/first` is answered for 5 steps past its last.
const LOOKBACK: f64 = 5.0;
/// Steps of the window at which the server answers no series of gpu 0: 30 less the
/// lookback.
const GAP: f64 = 30.0 - LOOKBACK;
const PRICE: f64 = 4.0;

/// dcgm-exporter's series of the two GPUs.
fn openmetrics(end: i64) -> String {
    let mut families: std::collections::BTreeMap<&str, String> = Default::default();
    for i in 0..POINTS {
        let t = end - (POINTS - 1 - i) * STEP;
        let from_end = (end - t) / STEP;
        let pod = if FIRST.contains(&from_end) {
            Some("first")
        } else if SECOND.contains(&from_end) {
            Some("second")
        } else {
            None
        };
        let mut gpus = vec![(1, "", "", 0.0, 0.0)];
        if let Some(pod) = pod {
            gpus.push((0, "ml", pod, 100.0, 0.4));
        }
        for (gpu, ns, pod, busy, tensor) in gpus {
            let l = format!(
                "job=\"dcgm\",gpu=\"{gpu}\",UUID=\"GPU-a-{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\""
            );
            for (name, v) in [
                ("DCGM_FI_DEV_GPU_UTIL", busy),
                ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", tensor),
                ("DCGM_FI_PROF_DRAM_ACTIVE", 0.1),
                ("DCGM_FI_DEV_SM_CLOCK", 1830.0),
            ] {
                let s = families.entry(name).or_default();
                let _ = writeln!(s, "{name}{{{l}}} {v} {t}");
            }
        }
    }
    crate::showback::exposition(&families)
}

/// The entry of `set` named `name`.
fn entry<'a>(set: &'a Value, name: &str) -> &'a Value {
    set.get(name)
        .unwrap_or_else(|| panic!("no {name} in {set:#}"))
}

#[test]
fn a_gpu_with_no_series_between_holders_is_allocation_unknown_in_every_output() {
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    let dir = TempDir::new("holder-gap");
    let prom = Prometheus::backfilled(&openmetrics(end_now()), dir.path(), None);
    let url = prom.url();
    let price = format!("NVIDIA H100 80GB HBM3={PRICE}");
    let args = ["--by", "namespace", "--gpu-hour-price", price.as_str()];
    let with = |extra: &[&str]| {
        let mut a = args.to_vec();
        a.extend_from_slice(extra);
        report(&url, "job=\"dcgm\"", &a)
    };
    let v = json(&with(&["--json"]));
    let total = &v["showback"]["total"];
    assert_eq!(total["reconciled"], true, "{}", total["check"]);
    near(&total["fleet_gpu_hours"], 2.0 * W * H, "fleet");
    near(&total["unallocated_gpu_hours"], W * H, "unallocated: gpu 1");
    near(
        &total["unallocated_cost"],
        PRICE * W * H,
        "unallocated cost",
    );
    near(&total["allocation_unknown_gpu_hours"], GAP * H, "gap");
    near(
        &total["allocation_unknown_cost"],
        PRICE * GAP * H,
        "gap cost",
    );
    let ml = crate::showback::group(&v, "ml");
    near(&ml["allocated_gpu_hours"], (W - GAP) * H, "ml allocated");
    let funnel = &total["funnel"];
    assert_eq!(funnel["adds_up"], true, "{}", funnel["check"]);
    near(
        &funnel["allocation_unknown_gpu_hours"],
        GAP * H,
        "funnel gap",
    );
    near(
        &funnel["allocated_gpu_hours"],
        (W - GAP) * H,
        "funnel allocated",
    );
    let notes = total_notes(&v);
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("0.42 GPU-hours on 1 GPU(s) had nothing")),
        "{notes:?}"
    );

    // The text table and the CSV carry the row; the OpenCost document an entry of its own.
    let text = with(&[]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    let row = text
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("(allocation unknown)"))
        .unwrap_or_else(|| panic!("no row in:\n{}", text.stdout));
    assert!(row.contains(" 0.4 ") && row.ends_with(" 1.67"), "{row}");
    // The funnel's loss at the allocated stage names both.
    assert!(
        text.stdout
            .contains("−2.0 h unallocated, −0.4 h allocation unknown"),
        "{}",
        text.stdout
    );
    let csv_path = dir.path().join("showback.csv");
    let csv = with(&["--csv", csv_path.to_str().unwrap()]);
    assert_eq!(csv.code, Some(0), "{}", csv.stderr);
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(",(allocation unknown),"))
        .unwrap_or_else(|| panic!("no row in:\n{csv}"))
        .split(',')
        .collect();
    assert_eq!(row.len(), header.len());
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(col("allocated_gpu_hours"), "0.416667");
    assert_eq!(col("allocated_cost"), "1.666667");
    assert_eq!(col("energy_kwh"), "", "nothing read: unknown, never 0");
    let doc = json(&with(&["--format", "opencost"]));
    let set = &doc["data"][0];
    let unknown = entry(set, "__allocation_unknown__");
    near(&unknown["gpuHours"], GAP * H, "opencost gap");
    near(&unknown["totalCost"], PRICE * GAP * H, "opencost gap cost");
    assert_eq!(unknown["gpuCostIdle"], Value::Null, "not known to be idle");
    let costs: f64 = set
        .as_object()
        .unwrap()
        .values()
        .map(|a| a["totalCost"].as_f64().unwrap())
        .sum();
    assert!((costs - PRICE * 2.0 * W * H).abs() < 1e-6, "{costs}");
    // The FOCUS CSV: a row of its own, priced, and the FinOps Foundation's validator passes.
    let focus = dir.path().join("focus.csv");
    let run = with(&["--currency", "EUR", "--focus", focus.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let text = std::fs::read_to_string(&focus).unwrap();
    let row = text
        .lines()
        .find(|l| l.contains("\"\"truthscale.group\"\":\"\"__allocation_unknown__\"\""))
        .unwrap_or_else(|| panic!("no row in:\n{text}"));
    assert!(row.contains(",1.666667,1.666667,1.666667,"), "{row}");
    crate::finops::assert_validates(&focus, &text);
}

fn total_notes(v: &Value) -> Vec<String> {
    v["showback"]["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

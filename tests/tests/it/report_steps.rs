//! `truthscale report --step` coarser than the scrape, on a real Prometheus: each step is
//! read as summaries of the raw samples in it (`avg_over_time` for use, `max_over_time` for
//! memory, four bands for the sizing: `quantile_over_time` at 0.5, 0.9, 0.99 and the
//! `max_over_time`, each held for its share of the step), so a one-minute burst inside a
//! five-minute step is sized by its own minute, while the means still add up to the use. The same
//! step read as one sample per step (`--scrape-interval 5m`) misses the bursts: the effect
//! the summaries exist for.
//!
//! The fleet, one hour of it repeated over 7 hours at a 60 s scrape (`source="sim"`):
//! - `burst/a`: tensor 0.1, DRAM 0.025, 20 GiB, except one minute in every 30 (the minute
//!   `t / 60 ≡ 7 (mod 30)`, never on a multiple of 5 minutes) at tensor 0.9, DRAM 0.225 and
//!   70 GiB;
//! - `steady/b`: tensor 0.3, DRAM 0.075, 30 GiB throughout.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;
use truthscale_e2e::{Prometheus, TempDir, require_tool_or_return};

use crate::report::{Run, end_now, truthscale};

const GIB: f64 = 1_073_741_824.0;
const SCRAPE: i64 = 60;
const POINTS: i64 = 7 * 60;

/// Whether `t` (Unix seconds) is a burst minute of `burst/a`.
fn burst(t: i64) -> bool {
    (t / 60) % 30 == 7
}

/// `burst/a`'s tensor activity at `t`.
fn tensor_a(t: i64) -> f64 {
    if burst(t) { 0.9 } else { 0.1 }
}

fn openmetrics(end: i64) -> String {
    openmetrics_with(end, None)
}

/// [`openmetrics`], with `steady/b`'s tensor activity at `impossible`'s time (Unix seconds)
/// its value: one no fraction can be.
fn openmetrics_with(end: i64, impossible: Option<(i64, f64)>) -> String {
    let mut tensor = String::new();
    let mut dram = String::new();
    let mut busy = String::new();
    let mut used = String::new();
    let mut total = String::new();
    for i in 0..POINTS {
        let t = end - (POINTS - 1 - i) * SCRAPE;
        for (pod, ns, x, mem) in [
            (
                "a",
                "burst",
                tensor_a(t),
                if burst(t) { 70.0 } else { 20.0 },
            ),
            (
                "b",
                "steady",
                match impossible {
                    Some((at, x)) if at == t => x,
                    _ => 0.3,
                },
                30.0,
            ),
        ] {
            let l = format!(
                "source=\"sim\",gpu=\"0\",uuid=\"GPU-{pod}\",model=\"Simulated H100 SXM\",node=\"n-{pod}\",namespace=\"{ns}\",pod=\"{pod}\""
            );
            let _ = writeln!(tensor, "truthscale_gpu_tensor_active_ratio{{{l}}} {x} {t}");
            let _ = writeln!(
                dram,
                "truthscale_gpu_dram_active_ratio{{{l}}} {} {t}",
                x / 4.0
            );
            let _ = writeln!(
                busy,
                "truthscale_gpu_reported_utilization_ratio{{{l}}} 1 {t}"
            );
            let _ = writeln!(
                used,
                "truthscale_gpu_memory_used_bytes{{{l}}} {} {t}",
                mem * GIB
            );
            let _ = writeln!(
                total,
                "truthscale_gpu_memory_total_bytes{{{l}}} {} {t}",
                80.0 * GIB
            );
        }
    }
    let mut om = String::new();
    for (name, body) in [
        ("truthscale_gpu_dram_active_ratio", dram),
        ("truthscale_gpu_memory_total_bytes", total),
        ("truthscale_gpu_memory_used_bytes", used),
        ("truthscale_gpu_reported_utilization_ratio", busy),
        ("truthscale_gpu_tensor_active_ratio", tensor),
    ] {
        let _ = writeln!(om, "# TYPE {name} gauge");
        om.push_str(&body);
    }
    om.push_str("# EOF\n");
    om
}

fn report(url: &str, until: &str, step: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "report",
        "--prometheus",
        url,
        "--since",
        "6h",
        "--until",
        until,
        "--step",
        step,
        "--by",
        "namespace",
    ];
    args.extend_from_slice(extra);
    truthscale(&args)
}

/// The fleet backfilled into a Prometheus of its own.
struct Fleet {
    /// The last sample time (Unix seconds), and it as `--until`.
    end: i64,
    until: String,
    url: String,
    // Stopped before its data directory is removed: fields drop in order.
    _prom: Prometheus,
    _dir: TempDir,
}

/// The fleet as `openmetrics(end)` writes it, in a Prometheus over a temporary directory
/// named after `name`.
fn fleet(name: &str, openmetrics: impl FnOnce(i64) -> String) -> Fleet {
    fleet_ending(name, end_now(), openmetrics)
}

/// [`fleet`], its last sample at `end`.
fn fleet_ending(name: &str, end: i64, openmetrics: impl FnOnce(i64) -> String) -> Fleet {
    let until = until_of(end);
    let dir = TempDir::new(name);
    let prom = Prometheus::backfilled(&openmetrics(end), dir.path(), None);
    Fleet {
        end,
        until,
        url: prom.url(),
        _prom: prom,
        _dir: dir,
    }
}

/// The fleet's last sample time (Unix seconds) as `--until`.
fn until_of(end: i64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(u64::try_from(end).unwrap()))
        .to_string()
}

/// `burst/a`'s right-sizing entry.
fn sizing_a(v: &Value) -> &Value {
    sizing(v, "burst/a")
}

fn sizing<'a>(v: &'a Value, workload: &str) -> &'a Value {
    v["rightsizing"]
        .as_array()
        .and_then(|r| r.iter().find(|w| w["workload"] == workload))
        .unwrap_or_else(|| panic!("no {workload} in {v:#}"))
}

/// The `burst` namespace's saturation GPU-hours in the showback (the sum of use).
fn used_a(v: &Value) -> f64 {
    v["showback"]["total"]["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["group"] == "burst"))
        .and_then(|g| g["saturation_gpu_hours"].as_f64())
        .unwrap_or_else(|| panic!("no burst group in {:#}", v["showback"]))
}

#[test]
fn a_coarse_step_keeps_the_bursts_a_fine_one_sees() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let Fleet {
        end, until, url, ..
    } = &fleet("report-steps", openmetrics);

    // The scrape's own step: every sample, bursts included.
    let fine = report(url, until, "60s", &["--json"]).json();
    assert_eq!(fine["source"]["summarized_steps"], false);
    let a = sizing_a(&fine);
    assert_eq!(a["memory_peak_bytes"].as_f64(), Some(70.0 * GIB));
    assert_eq!(a["saturation_p99"].as_f64(), Some(0.9), "{a:#}");

    // Five minutes, summarised: the step's window (t − 5m, t] holds five samples, one of
    // them the burst in one step of six. Memory: the peak, 70 GiB. Saturation for the
    // sizing: the burst step's bands are p50 0.1, p90 0.1 + 0.6 × 0.8 = 0.58, p99
    // 0.1 + 0.96 × 0.8 = 0.868 and the max 0.9; with five samples a step the top band holds
    // one sample's fifth of the step (the p99 band's share and 10 % of the p90's given to
    // it): shares 50 %, 30 %, 0 and 20 %. So 0.9 holds a fifth of one step in six, 3.3 % of
    // the time, as at the fine step: the p99 is 0.9 there too (held for the whole step, the
    // step's p99 would have read 0.868).
    let run = report(url, until, "5m", &["--json"]);
    let coarse = run.json();
    assert_eq!(coarse["source"]["step_seconds"], 300.0);
    assert_eq!(coarse["source"]["summarized_steps"], true);
    assert_eq!(
        coarse["steps"], 72,
        "6 h at 5 m: 72 steps, each standing for the 5 m up to it"
    );
    let a = sizing_a(&coarse);
    assert_eq!(a["memory_peak_bytes"].as_f64(), Some(70.0 * GIB), "{a:#}");
    assert_eq!(a["saturation_p99"].as_f64(), Some(0.9), "{a:#}");
    assert!(
        coarse["notes"]
            .to_string()
            .contains("each 300 s step summarises the raw samples"),
        "{}",
        coarse["notes"]
    );
    assert!(
        run.stderr
            .contains("every 5m (summaries of the raw samples in each)"),
        "{}",
        run.stderr
    );
    // The means still add up to the use: each step's mean of its five samples, over the 72
    // steps (the first at the first 5 m after the window's start; the windows tile
    // (start − 5m, end]).
    let start = (end - 6 * 3600).div_euclid(300) * 300 + 300;
    let want: f64 = (0..72)
        .map(|k| {
            let t = start + k * 300;
            let mean = (0..5).map(|j| tensor_a(t - j * 60)).sum::<f64>() / 5.0;
            mean * 300.0 / 3600.0
        })
        .sum();
    let got = used_a(&coarse);
    assert!((got - want).abs() < 1e-3, "used {got} GPU-h, want {want}");
    // …and match the fine step's to within one 5-minute step at the window's edge (a
    // narrower margin than what sampling loses below).
    let fine_used = used_a(&fine);
    assert!(
        (got - fine_used).abs() <= 0.9 * 300.0 / 3600.0,
        "5m {got} against 60s {fine_used}"
    );

    // The same step as one sample per step misses every burst: the peak memory, the p99
    // and a fifth of the use.
    let sampled = report(url, until, "5m", &["--json", "--scrape-interval", "5m"]).json();
    assert_eq!(sampled["source"]["summarized_steps"], false);
    let a = sizing_a(&sampled);
    assert_eq!(a["memory_peak_bytes"].as_f64(), Some(20.0 * GIB), "{a:#}");
    assert_eq!(a["saturation_p99"].as_f64(), Some(0.1), "{a:#}");
    let lost = fine_used - used_a(&sampled);
    assert!(
        lost > 2.0 * 0.9 * 300.0 / 3600.0,
        "sampling loses {lost} GPU-h, more than the margin above"
    );

    // The text report says which step it used, and how.
    let text = report(url, until, "5m", &[]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(
        text.stdout
            .contains("every 300 s (each step summarises the raw samples in it)"),
        "{}",
        text.stdout
    );
}

/// One impossible raw sample (a tensor activity of 3.0) inside a five-minute step: read one
/// sample per step it is a blank, counted; summarised, the step's mean would average it in
/// to a plausible 0.84 ((0.3 × 4 + 3) / 5), but its top band (the largest raw sample, 3.0)
/// is no fraction, so the step is unknown for that workload and counted, and its sizing is the
/// steady 0.3 of every other step.
#[test]
fn an_impossible_sample_in_a_summarised_step_blanks_the_step() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let Fleet { until, url, .. } = &fleet("report-impossible", |end| {
        // Two minutes into a five-minute step, three hours back.
        let bad = (end - 3 * 3600).div_euclid(300) * 300 + 120;
        openmetrics_with(end, Some((bad, 3.0)))
    });

    let fine = report(url, until, "60s", &["--json"]).json();
    assert_eq!(
        fine["source"]["blanked_readings"]["out_of_range"], 1,
        "{:#}",
        fine["source"]
    );
    assert_eq!(fine["source"]["impossible_steps"], 0);
    assert_eq!(
        sizing(&fine, "steady/b")["saturation_p99"].as_f64(),
        Some(0.3)
    );

    let coarse = report(url, until, "5m", &["--json"]).json();
    assert_eq!(coarse["source"]["summarized_steps"], true);
    assert_eq!(
        coarse["source"]["impossible_steps"], 1,
        "{:#}",
        coarse["source"]
    );
    assert_eq!(coarse["source"]["blanked_readings"]["out_of_range"], 1);
    let b = sizing(&coarse, "steady/b");
    assert_eq!(b["saturation_p99"].as_f64(), Some(0.3), "{b:#}");
    assert!(
        coarse["notes"]
            .to_string()
            .contains("1 workload steps held an impossible raw sample"),
        "{}",
        coarse["notes"]
    );
    // burst/a is untouched.
    assert_eq!(sizing_a(&coarse)["saturation_p99"].as_f64(), Some(0.9));
}

/// A window after the fleet's last sample says when that sample was, on a real Prometheus,
/// to within its lookback, which the server says (its flags page): each GPU has several
/// families with the same labels, and the question used to be refused ("vector cannot
/// contain metrics with the same labelset"), so the hint said only that it could not be
/// asked; and the lookback was taken as 5 minutes whatever the server's.
#[test]
fn a_window_after_the_data_names_the_newest_sample() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    newest_sample_said("report-newest", &[], 300);
    newest_sample_said("report-newest-10m", &["--query.lookback-delta=10m"], 600);
}

/// The hint of a report over a window 2 h after the last sample of a Prometheus started
/// with `flags`, whose lookback is `lookback` seconds.
fn newest_sample_said(name: &str, flags: &[&str], lookback: i64) {
    let end = end_now() - 3 * 3600;
    let dir = TempDir::new(name);
    let prom = Prometheus::backfilled_with(&openmetrics(end), dir.path(), None, flags);
    let url = prom.url();
    let later = until_of(end + 2 * 3600);
    let run = truthscale(&[
        "report",
        "--prometheus",
        &url,
        "--since",
        "30m",
        "--until",
        &later,
        "--by",
        "namespace",
    ]);
    assert_ne!(run.code, Some(0), "{}", run.stderr);
    // Seen at each minute up to the lookback after it (closed in 2.x, open on the left in
    // 3.x), so said to lie within the lookback before the last.
    let words = humantime::format_duration(Duration::from_secs(lookback.unsigned_abs()));
    let said = |seen: i64| {
        format!(
            "; the newest GPU sample is between {} and {} (at most ",
            until_of(seen - lookback),
            until_of(seen)
        )
    };
    assert!(
        run.stderr.contains(&said(end + lookback))
            || run.stderr.contains(&said(end + lookback - 60)),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "Prometheus tells it to within its lookback, {words}):"
        )),
        "{}",
        run.stderr
    );
}

/// One GPU as dcgm-exporter writes it (`steady/d`: tensor 0.3, DRAM 0.1, busy 80 %, 30 GiB
/// used of 80) at a 60 s scrape over `POINTS` minutes, its tensor activity at `sentinel`'s
/// time DCGM's FP64 blank (2^47).
fn dcgm_openmetrics(end: i64, sentinel: i64) -> String {
    let l = "gpu=\"0\",UUID=\"GPU-d\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"n-d\",namespace=\"steady\",pod=\"d\"";
    let mut om = String::new();
    for (family, normal) in [
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.3),
        ("DCGM_FI_PROF_DRAM_ACTIVE", 0.1),
        ("DCGM_FI_DEV_GPU_UTIL", 80.0),
        ("DCGM_FI_DEV_FB_USED", 30_720.0),
        ("DCGM_FI_DEV_FB_FREE", 51_200.0),
    ] {
        let _ = writeln!(om, "# TYPE {family} gauge");
        for i in 0..POINTS {
            let t = end - (POINTS - 1 - i) * SCRAPE;
            let x = if t == sentinel && family.ends_with("TENSOR_ACTIVE") {
                140_737_488_355_328.0
            } else {
                normal
            };
            let _ = writeln!(om, "{family}{{{l}}} {x} {t}");
        }
    }
    om.push_str("# EOF\n");
    om
}

/// DCGM's FP64 blank (2^47) as one raw sample of a dcgm-exporter series inside a
/// five-minute step: the step's mean is no fraction (left blank, counted), and the step is
/// counted as one that held an impossible raw sample, as 3.0 is. Its top band is the blank,
/// left blank where the answer is read, so only the p99 band shows it: the step was counted
/// as none (and said as a gap in the history).
#[test]
fn a_sentinel_in_a_summarised_step_is_counted_as_impossible() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let Fleet { until, url, .. } = &fleet("report-sentinel", |end| {
        let bad = (end - 3 * 3600).div_euclid(300) * 300 + 120;
        dcgm_openmetrics(end, bad)
    });
    let coarse = report(url, until, "5m", &["--json"]).json();
    assert_eq!(
        coarse["source"]["impossible_steps"], 1,
        "{:#}",
        coarse["source"]
    );
    // The tensor's mean.
    assert_eq!(coarse["source"]["blanked_readings"]["out_of_range"], 1);
    let d = sizing(&coarse, "steady/d");
    assert_eq!(d["saturation_p99"].as_f64(), Some(0.3), "{d:#}");
}

/// `--max-points` below the steps of the grid: each workload keeps one point per four
/// 60 s steps (360 steps, 90 points), the mean of its steps for use and their peak for
/// memory and the sizing, so the bursts are sized as at one point a step and the use adds up
/// to within the last point (one step held, counted as four).
#[test]
fn a_fine_step_over_more_steps_than_points_combines_them() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let Fleet { until, url, .. } = &fleet("report-points", openmetrics);

    let fine = report(url, until, "60s", &["--json"]).json();
    assert_eq!(fine["source"]["steps_per_point"], 1);
    let combined = report(url, until, "60s", &["--json", "--max-points", "100"]).json();
    assert_eq!(
        combined["source"]["steps_per_point"], 4,
        "{:#}",
        combined["source"]
    );
    assert_eq!(combined["source"]["step_seconds"], 60.0);
    assert_eq!(combined["step_seconds"], 240.0);
    assert_eq!(combined["steps"], 90, "360 steps of 60 s, 4 a point");
    let a = sizing_a(&combined);
    assert_eq!(a["memory_peak_bytes"].as_f64(), Some(70.0 * GIB), "{a:#}");
    assert_eq!(a["saturation_p99"].as_f64(), Some(0.9), "{a:#}");
    assert_eq!(
        sizing(&combined, "steady/b")["saturation_p99"].as_f64(),
        Some(0.3)
    );
    let (got, want) = (used_a(&combined), used_a(&fine));
    assert!(
        (got - want).abs() <= 3.0 * 0.9 * 60.0 / 3600.0,
        "combined {got} GPU-h against {want} at one point a step"
    );
    assert!(
        combined["notes"]
            .to_string()
            .contains("each point combines 4 steps of 60 s"),
        "{}",
        combined["notes"]
    );
    let text = report(url, until, "60s", &["--max-points", "100"]);
    assert!(
        text.stdout.contains("every 60 s, 4 steps per point"),
        "{}",
        text.stdout
    );
}

/// `--compression gzip` (the answers gzipped, as from a remote server) and `none` read the
/// same history: the reports are equal.
#[test]
fn gzipped_answers_give_the_same_report() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    let Fleet { until, url, .. } = &fleet("report-gzip", openmetrics);
    let plain = report(url, until, "60s", &["--json", "--compression", "none"]).json();
    let gzipped = report(url, until, "60s", &["--json", "--compression", "gzip"]).json();
    assert_eq!(sizing_a(&plain)["saturation_p99"].as_f64(), Some(0.9));
    assert_eq!(plain, gzipped);
}

/// Minutes of the day (UTC) `bursty` bursts in, in fleet `x` (inside one 15-minute and one
/// one-hour step: the windows (t − step, t] end on multiples of the step) and in fleet `y`
/// (straddling both: 659 and 660 end the steps at 11:00, 661 opens the next).
const BURST_X: [i64; 3] = [601, 602, 603];
const BURST_Y: [i64; 3] = [659, 660, 661];
/// `bursty`'s tensor activity outside and inside its burst; the four steady pods'.
const QUIET: f64 = 0.05;
const BURST: f64 = 0.95;
const STEADY: f64 = 0.35;

/// A day of two fleets (`fleet="x"`, `fleet="y"`) at a 60 s scrape, each five pods on five
/// H100s with 10 GiB each: `team/bursty` at tensor 0.05 but for its three burst minutes a
/// day at 0.95, and `team/s1`…`team/s4` at 0.35 throughout; DRAM a quarter of the tensor
/// activity, so each one's saturation is its tensor activity.
fn burst_day(end: i64) -> String {
    let mut series: [String; 5] = Default::default();
    for i in 0..1440 {
        let t = end - (1439 - i) * SCRAPE;
        let minute = t.div_euclid(60).rem_euclid(1440);
        for (fleet, minutes) in [("x", BURST_X), ("y", BURST_Y)] {
            for pod in ["bursty", "s1", "s2", "s3", "s4"] {
                let x = match pod {
                    "bursty" if minutes.contains(&minute) => BURST,
                    "bursty" => QUIET,
                    _ => STEADY,
                };
                let l = format!(
                    "source=\"sim\",fleet=\"{fleet}\",gpu=\"0\",uuid=\"GPU-{fleet}-{pod}\",model=\"Simulated H100 SXM\",node=\"n-{fleet}-{pod}\",namespace=\"team\",pod=\"{pod}\""
                );
                let _ = writeln!(
                    series[0],
                    "truthscale_gpu_tensor_active_ratio{{{l}}} {x} {t}"
                );
                let _ = writeln!(
                    series[1],
                    "truthscale_gpu_reported_utilization_ratio{{{l}}} 1 {t}"
                );
                let _ = writeln!(
                    series[2],
                    "truthscale_gpu_memory_used_bytes{{{l}}} {} {t}",
                    10.0 * GIB
                );
                let _ = writeln!(
                    series[4],
                    "truthscale_gpu_dram_active_ratio{{{l}}} {} {t}",
                    x / 4.0
                );
                let _ = writeln!(
                    series[3],
                    "truthscale_gpu_memory_total_bytes{{{l}}} {} {t}",
                    80.0 * GIB
                );
            }
        }
    }
    let mut om = String::new();
    for (name, body) in [
        "truthscale_gpu_tensor_active_ratio",
        "truthscale_gpu_reported_utilization_ratio",
        "truthscale_gpu_memory_used_bytes",
        "truthscale_gpu_memory_total_bytes",
        "truthscale_gpu_dram_active_ratio",
    ]
    .iter()
    .zip(series)
    {
        let _ = writeln!(om, "# TYPE {name} gauge");
        om.push_str(&body);
    }
    om.push_str("# EOF\n");
    om
}

/// The GPUs the day needs, worked out from the workload itself: each pod's nearest-rank
/// p99 over its minutes, and the fewest GPUs whose time-aligned sums keep a p99 of at most
/// 0.8 (headroom 0.2): `bursty` with two steady pods (0.75, and 1.65 only in its 3 of 1 440
/// minutes, 0.2 % of the time), the other two together (0.7); one GPU cannot hold 1.45.
fn needed_gpus() -> (f64, u64) {
    let mut bursty: Vec<f64> = (0..1440)
        .map(|m| if BURST_X.contains(&m) { BURST } else { QUIET })
        .collect();
    bursty.sort_by(f64::total_cmp);
    let p99 = bursty[(0.99_f64 * 1440.0).ceil() as usize - 1];
    let over = (0..1440)
        .filter(|m| {
            let a = if BURST_X.contains(m) { BURST } else { QUIET };
            a + 2.0 * STEADY > 0.8
        })
        .count();
    assert!(over <= 1440 - (0.99_f64 * 1440.0).ceil() as usize);
    let demand = p99 + 4.0 * STEADY;
    (p99, (demand / 0.8).ceil() as u64)
}

/// A three-minute burst a day sizes the same at 60 s, 15 min and 1 h, wherever the steps'
/// edges fall (fleet `x` inside a step, `y` across two): the packing, the bursty pod's
/// p99, and the GPUs needed. Held for its whole step, the burst's step p99 was the pod's
/// p99 at 15 min and 1 h (one step in 96 or 24, over 1 %), and the packing took a third GPU.
#[test]
fn a_short_burst_sizes_the_same_at_every_step_wherever_the_grid_falls() {
    require_tool_or_return!("/usr/bin/prometheus", "prometheus");
    require_tool_or_return!("/usr/bin/promtool", "prometheus");
    // The day ends on the hour, so that every step of 60 s, 15 minutes and 1 hour holds a
    // whole step of raw samples whatever the time the test runs: a step only partly
    // covered (the range starts on a step's edge, before the first sample) is read as a
    // whole one, and a burst in it would weigh more than its own minutes (docs/report.md).
    let end = end_now().div_euclid(3600) * 3600;
    let Fleet { until, url, .. } = &fleet_ending("report-burst-day", end, burst_day);
    let (p99, gpus) = needed_gpus();
    assert_eq!((p99, gpus), (QUIET, 2));
    for fleet in ["x", "y"] {
        for step in ["60s", "15m", "1h"] {
            let selector = format!("fleet=\"{fleet}\"");
            let args = [
                "report",
                "--prometheus",
                url,
                "--since",
                "24h",
                "--until",
                until,
                "--step",
                step,
                "--selector",
                &selector,
                "--json",
            ];
            let run = truthscale(&args);
            let v = run.json();
            let what = format!("fleet {fleet} at {step}");
            assert_eq!(v["workloads"], 5, "{what}: {}", run.stderr);
            assert_eq!(
                sizing(&v, "team/bursty")["saturation_p99"].as_f64(),
                Some(p99),
                "{what}"
            );
            assert_eq!(
                v["sizing"]["packing"]["gpus"], gpus,
                "{what}: {:#}",
                v["sizing"]
            );
            assert_eq!(
                v["sizing"]["pooled_lower_bound"]["gpus"], gpus,
                "{what}: {:#}",
                v["sizing"]
            );
            assert_eq!(v["savings"]["gpus_freed"], 5 - gpus, "{what}");
        }
    }
}

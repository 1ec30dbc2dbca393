//! `truthscale explain` snapshots (one per verdict), `top --once` through a pipe, the live
//! `top` view through a pseudo-terminal (tmux: the external-tool tier, see
//! `require_tool_or_return!`), and the verdict in `analyze`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use truthscale_e2e::{TempDir, clean_command, require_tool, require_tool_or_return};

/// A two-line trace of GPU 0 (an H100 at its reference SM clock, so κ = 1) with the same
/// readings on both lines.
fn trace(dir: &TempDir, name: &str, readings: &str) -> std::path::PathBuf {
    let p = dir.path().join(format!("{name}.jsonl"));
    let line = |t: &str| {
        format!(
            "{{\"taken\":\"2026-01-01T00:00:0{t}Z\",\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",\"sm_clock_mhz\":1830.0,{readings}}}\n"
        )
    };
    std::fs::write(&p, line("0") + &line("1")).unwrap();
    p
}

fn truthscale(args: &[&str]) -> (i32, String, String) {
    truthscale_with(args, &[])
}

/// [`truthscale`] with the variables `vars` set.
fn truthscale_with(args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
    let out = clean_command()
        .args(args)
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run truthscale");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CASES: &[(&str, &str, &str)] = &[
    (
        "busy",
        r#""gpu_util":1.0,"sm_active":0.8,"tensor_active":0.25,"dram_active":0.5,"throttles":[],"serving":{"engine":"vllm","kv_cache_utilization":0.42,"running_requests":24,"queued_requests":0,"prompt_tokens_per_sec":1000,"output_tokens_per_sec":600}"#,
        r#"gpu 0 (NVIDIA H100 80GB HBM3)
  dashboard says: 100 % utilized (the busy flag nvidia-smi shows: time with any kernel resident)
  counters say:   effective compute 25 %, roofline saturation 50 % (tensor 25 %, DRAM 50 %)
  the gap:        75 points of the 100 % shown are not compute
  phase:          decode
  engine:         vllm: KV cache 42 %, 24 running, 0 queued, 1000 prompt + 600 output tokens/s
  verdict:        busy
    because busy flag 100 %, roofline saturation 50 % (tensor 25 %, DRAM 50 %): real work, memory-bound
  suggestion:     batch more: the KV cache is 42 % used
"#,
    ),
    (
        "starved",
        r#""gpu_util":0.99,"sm_active":0.95,"tensor_active":0.015,"dram_active":0.19,"throttles":[]"#,
        r#"gpu 0 (NVIDIA H100 80GB HBM3)
  dashboard says: 99 % utilized (the busy flag nvidia-smi shows: time with any kernel resident)
  counters say:   effective compute 2 %, roofline saturation 19 % (tensor 2 %, DRAM 19 %)
  the gap:        98 points of the 99 % shown are not compute
  phase:          mixed
  verdict:        starved
    because busy flag 99 % but roofline saturation only 19 % (tensor 2 %, DRAM 19 %): kernels are resident, the math and memory units mostly wait
    because the wait is unknown (no cause signal crossed its threshold)
  not measured:
    - serving engine: not configured; set [engine] url to read vLLM, SGLang or TGI
  suggestion:     feed it faster or more at once: larger batches, more data-loader workers, mixed precision (bf16) so the tensor cores do the math
"#,
    ),
    (
        "throttled",
        r#""gpu_util":0.95,"tensor_active":0.4,"dram_active":0.3,"throttles":["power","sw_power_cap"]"#,
        r#"gpu 0 (NVIDIA H100 80GB HBM3)
  dashboard says: 95 % utilized (the busy flag nvidia-smi shows: time with any kernel resident)
  counters say:   effective compute 40 %, roofline saturation 40 % (tensor 40 %, DRAM 30 %)
  the gap:        55 points of the 95 % shown are not compute
  phase:          mixed
  verdict:        throttled
    because clocks capped by power, sw_power_cap while busy (95 %)
  not measured:
    - serving engine: not configured; set [engine] url to read vLLM, SGLang or TGI
  suggestion:     check the power limit (nvidia-smi -q -d POWER): the GPU is held below its clocks by power
"#,
    ),
    (
        "blocked",
        r#""gpu_util":1.0,"tensor_active":0.2,"dram_active":0.6,"throttles":[],"serving":{"engine":"vllm","kv_cache_utilization":0.95,"running_requests":64,"queued_requests":12}"#,
        r#"gpu 0 (NVIDIA H100 80GB HBM3)
  dashboard says: 100 % utilized (the busy flag nvidia-smi shows: time with any kernel resident)
  counters say:   effective compute 20 %, roofline saturation 60 % (tensor 20 %, DRAM 60 %)
  the gap:        80 points of the 100 % shown are not compute
  phase:          decode
  engine:         vllm: KV cache 95 %, 64 running, 12 queued
  verdict:        blocked
    because KV cache 95 % used with 12 requests queued
  suggestion:     add KV-cache room: more GPU memory for the cache, a shorter max context, KV quantization, or another replica
"#,
    ),
    (
        "idle",
        r#""gpu_util":0.0,"sm_active":0.0,"tensor_active":0.0,"dram_active":0.0,"throttles":[]"#,
        r#"gpu 0 (NVIDIA H100 80GB HBM3)
  dashboard says: 0 % utilized (the busy flag nvidia-smi shows: time with any kernel resident)
  counters say:   effective compute 0 %, roofline saturation 0 % (tensor 0 %, DRAM 0 %)
  the gap:        none to speak of (idle)
  phase:          idle
  verdict:        idle
    because busy flag 0 % (below 5 %)
  not measured:
    - serving engine: not configured; set [engine] url to read vLLM, SGLang or TGI
  suggestion:     give this GPU work or release it
"#,
    ),
    (
        "unknown",
        r#""gpu_util":0.9,"power_watts":400"#,
        r#"gpu 0 (NVIDIA H100 80GB HBM3)
  dashboard says: 90 % utilized (the busy flag nvidia-smi shows: time with any kernel resident)
  counters say:   effective compute at most 97 % (no tensor counter: an upper bound)
  the gap:        cannot be measured without the tensor counter
  phase:          memory_bound (estimate)
  verdict:        unknown
    because busy flag 90 % but no roofline saturation, so real work cannot be told from waiting
  not measured:
    - serving engine: not configured; set [engine] url to read vLLM, SGLang or TGI
    - clock-event reasons: not reported by this source
    - roofline saturation: needs the tensor and DRAM activity counters (DCGM profiling fields 1004/1005 or NVML GPM); run `truthscale doctor`
  suggestion:     enable profiling counters (DCGM fields 1004 and 1005, or NVML GPM) to tell busy from starved
"#,
    ),
];

#[test]
fn explain_snapshots_for_each_verdict() {
    let dir = TempDir::new("explain");
    for (verdict, readings, expected) in CASES {
        let p = trace(&dir, verdict, readings);
        let (code, out, err) = truthscale(&["explain", "--replay", p.to_str().unwrap()]);
        assert_eq!(code, 0, "{verdict}: {err}");
        assert_eq!(&out, expected, "{verdict}: explain text changed");
        assert!(out.contains(&format!("  verdict:        {verdict}\n")));
    }
    let p = trace(&dir, "one", CASES[0].1);
    let (code, _, err) = truthscale(&["explain", "--replay", p.to_str().unwrap(), "--gpu", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("no GPU 3 in the input"), "{err}");
}

/// A trace of tensor at 0.6 (compute-bound by default) and a configuration file that puts
/// compute-bound's entry at 0.95 (mixed at 0.95 too: underloaded), in `dir`.
fn tensor_trace_and_phase_config(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let p = trace(
        dir,
        "tensor",
        r#""gpu_util":1.0,"tensor_active":0.6,"dram_active":0.1"#,
    );
    let cfg = dir.path().join("phase.toml");
    std::fs::write(
        &cfg,
        "[derive.phase]\ncompute_bound_enter_tensor = 0.95\ncompute_bound_exit_tensor = 0.9\nmixed_tensor = 0.95\nmixed_dram = 0.95\n",
    )
    .unwrap();
    (p, cfg)
}

/// `explain --replay --config FILE` reads the file's `[derive]` as `analyze` does: tensor at
/// 0.6 is compute-bound by default, and underloaded where the file puts compute-bound's
/// entry at 0.95 (mixed at 0.95 too); `analyze` says the same.
#[test]
fn explain_reads_the_phase_thresholds_of_its_config() {
    let dir = TempDir::new("explain-derive");
    let (p, cfg) = tensor_trace_and_phase_config(&dir);
    let (p, cfg) = (p.to_str().unwrap(), cfg.to_str().unwrap());
    let (code, out, err) = truthscale(&["explain", "--replay", p]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("phase:          compute_bound"), "{out}");
    let (code, out, err) = truthscale(&["explain", "--replay", p, "--config", cfg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("phase:          underloaded"), "{out}");
    let (_, analyzed, _) = truthscale(&["analyze", p, "--config", cfg]);
    assert!(analyzed.contains("underloaded 100%"), "{analyzed}");
}

/// `TRUTHSCALE_DERIVE__…` variables override the file for `explain --replay` and `analyze`,
/// as they do for the sidecar: the file puts compute-bound's entry at 0.95 (underloaded at
/// tensor 0.6), the variables put it back at 0.5 (compute-bound). The sidecar's own variables
/// (an unknown source kind here) are not read by these commands, and a bad `[derive]` value
/// is refused naming its variable.
#[test]
fn explain_and_analyze_read_the_derive_variables_over_the_file() {
    let dir = TempDir::new("explain-derive-env");
    let (p, cfg) = tensor_trace_and_phase_config(&dir);
    let (p, cfg) = (p.to_str().unwrap(), cfg.to_str().unwrap());
    let back = [
        (
            "TRUTHSCALE_DERIVE__PHASE__COMPUTE_BOUND_ENTER_TENSOR",
            "0.5",
        ),
        ("TRUTHSCALE_DERIVE__PHASE__COMPUTE_BOUND_EXIT_TENSOR", "0.4"),
        ("TRUTHSCALE_SOURCE__KIND", "no-such-kind"),
    ];
    let (code, out, err) = truthscale_with(&["explain", "--replay", p, "--config", cfg], &back);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("phase:          compute_bound"), "{out}");
    let (code, analyzed, err) = truthscale_with(&["analyze", p, "--config", cfg], &back);
    assert_eq!(code, 0, "{err}");
    assert!(analyzed.contains("compute-bound 100%"), "{analyzed}");
    let bad = [("TRUTHSCALE_DERIVE__TAU_MAX", "soon")];
    let (code, _, err) = truthscale_with(&["analyze", p], &bad);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("TRUTHSCALE_DERIVE__TAU_MAX"), "{err}");
}

/// `explain --replay -` and `top --replay -` read the capture from standard input, as
/// `analyze -` does, and say the same as from the file.
#[test]
fn explain_and_top_replay_standard_input() {
    let dir = TempDir::new("replay-stdin");
    let (p, _) = tensor_trace_and_phase_config(&dir);
    for command in ["explain", "top"] {
        let mut args = vec![command, "--replay"];
        if command == "top" {
            args.insert(1, "--once");
        }
        let (code, from_file, err) = truthscale(&[&args[..], &[p.to_str().unwrap()]].concat());
        assert_eq!(code, 0, "{err}");
        let out = clean_command()
            .args([&args[..], &["-"]].concat())
            .stdin(std::fs::File::open(&p).unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{command}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), from_file, "{command}");
    }
}

/// `top` reads the same `[derive]` and `[verdict]` settings as `explain` and `analyze`: its
/// `--config` file (tensor at 0.6 underloaded where the file puts compute-bound's entry at
/// 0.95), the `TRUTHSCALE_DERIVE__…` variables over it (compute-bound again), and a bad
/// value refused naming its variable (it was ignored, and `top` disagreed with `explain`).
#[test]
fn top_reads_the_derive_and_verdict_settings_as_explain_does() {
    let dir = TempDir::new("top-derive");
    let (p, cfg) = tensor_trace_and_phase_config(&dir);
    let (p, cfg) = (p.to_str().unwrap(), cfg.to_str().unwrap());
    let phase = |out: &str| {
        out.lines()
            .nth(1)
            .map(|l| l.split_whitespace().nth(4).map(str::to_owned))
    };
    let (code, out, err) = truthscale(&["top", "--once", "--replay", p]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(phase(&out), Some(Some("compute_bound".into())), "{out}");
    let (code, out, err) = truthscale(&["top", "--once", "--replay", p, "--config", cfg]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(phase(&out), Some(Some("underloaded".into())), "{out}");
    let back = [
        (
            "TRUTHSCALE_DERIVE__PHASE__COMPUTE_BOUND_ENTER_TENSOR",
            "0.5",
        ),
        ("TRUTHSCALE_DERIVE__PHASE__COMPUTE_BOUND_EXIT_TENSOR", "0.4"),
    ];
    let args = ["top", "--once", "--replay", p, "--config", cfg];
    let (code, out, err) = truthscale_with(&args, &back);
    assert_eq!(code, 0, "{err}");
    assert_eq!(phase(&out), Some(Some("compute_bound".into())), "{out}");
    for bad in [
        ("TRUTHSCALE_DERIVE__TAU_MAX", "soon"),
        ("TRUTHSCALE_VERDICT__NO_SUCH_KEY", "1"),
    ] {
        let (code, _, err) = truthscale_with(&["top", "--once", "--replay", p], &[bad]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(bad.0), "{err}");
    }
}

/// A busy flag of 150 % is no reading: `explain --replay` leaves it blank and says so on
/// stderr, as `analyze` counts it, never "no busy flag" in silence.
#[test]
fn explain_replay_says_what_it_left_blank() {
    let dir = TempDir::new("explain-blank");
    let p = trace(&dir, "over", r#""gpu_util":1.5"#);
    let (code, out, err) = truthscale(&["explain", "--replay", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("dashboard says: nothing (no busy flag was read)"),
        "{out}"
    );
    assert!(
        err.contains("diagnostics: out_of_range 2 (first: out_of_range [gpu 0] gpu_util: 1.5 is not a fraction;"),
        "{err}"
    );
}

/// What a replayed capture holds and is not read is said on stderr by `explain --replay`
/// as `analyze` says it: a DCGM blank sentinel, counted under its field.
#[test]
fn explain_replay_says_what_the_capture_left_unread() {
    let dir = TempDir::new("explain-unread");
    let p = dir.path().join("scrape.txt");
    let scrape = |t: u64| {
        format!(
            "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-1\"}} 50 {t}\nDCGM_FI_DEV_POWER_USAGE{{gpu=\"0\",UUID=\"GPU-1\"}} 140737488355328 {t}\n"
        )
    };
    std::fs::write(&p, scrape(1_767_225_600_000) + &scrape(1_767_225_601_000)).unwrap();
    let (code, out, err) = truthscale(&["explain", "--replay", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("dashboard says: 50 % utilized"), "{out}");
    let (_, analyzed, _) = truthscale(&["analyze", p.to_str().unwrap()]);
    let said = "DCGM fields 2 reading(s) of dcgm_fi_dev_power_usage were DCGM's blank sentinel: left blank, never data";
    assert!(analyzed.contains(said), "{analyzed}");
    assert!(err.contains(said), "{err}");
}

#[test]
fn analyze_json_has_verdict_and_fraction() {
    let dir = TempDir::new("verdict-json");
    let p = trace(&dir, "starved", CASES[1].1);
    let (code, out, err) = truthscale(&["analyze", "--json", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &v["entities"][0];
    assert_eq!(e["verdict"], "starved");
    assert_eq!(e["verdict_fraction"]["starved"], 1.0);
    assert_eq!(e["verdict_fraction"]["busy"], 0.0);
    // Health never read: no share of `unavailable`, never a 0 for it.
    assert!(e["verdict_fraction"]["unavailable"].is_null());
    assert_eq!(e["verdict_fraction"].as_object().unwrap().len(), 6);
}

#[test]
fn analyze_table_has_the_verdict() {
    let dir = TempDir::new("verdict-table");
    let p = trace(&dir, "starved", CASES[1].1);
    let (code, out, err) = truthscale(&["analyze", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l == "  verdict            starved (starved 100%)"),
        "{out}"
    );
    // Two verdicts over time: the longer one leads, both shares listed.
    let p = dir.path().join("mixed.jsonl");
    let h = "\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\"";
    let mut s = String::new();
    // Every window counts, the first too (it lasts the trace's own 1 s): 4 s busy, 1 s idle.
    for t in 0..5 {
        let r = if t < 4 { CASES[0].1 } else { CASES[4].1 };
        s += &format!("{{\"taken\":\"2026-01-01T00:00:0{t}Z\",{h},{r}}}\n");
    }
    std::fs::write(&p, s).unwrap();
    let (code, out, err) = truthscale(&["analyze", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l == "  verdict            busy (busy 80%, idle 20%)"),
        "{out}"
    );
}

#[test]
fn top_once_prints_the_newest_sample_per_gpu_as_plain_text() {
    let dir = TempDir::new("top");
    let p = dir.path().join("two.jsonl");
    let h = "\"model\":\"NVIDIA H100 80GB HBM3\",\"sm_clock_mhz\":1830.0";
    let mut s = String::new();
    for (t, u0, t0) in [(0, 0.5, 0.1), (1, 1.0, 0.25)] {
        s += &format!(
            "{{\"taken\":\"2026-01-01T00:00:0{t}Z\",\"gpu\":0,{h},\"gpu_util\":{u0},\"tensor_active\":{t0},\"dram_active\":0.5,\"throttles\":[],\"serving\":{{\"engine\":\"vllm\",\"kv_cache_utilization\":0.42,\"queued_requests\":3}}}}\n"
        );
        s += &format!(
            "{{\"taken\":\"2026-01-01T00:00:0{t}Z\",\"gpu\":1,{h},\"gpu_util\":0.0,\"tensor_active\":0.0,\"dram_active\":0.0,\"throttles\":[]}}\n"
        );
    }
    std::fs::write(&p, s).unwrap();
    let (code, out, err) = truthscale(&["top", "--once", "--replay", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains('\x1b'),
        "plain text when stdout is not a terminal: {out:?}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("GPU "), "{out}");
    let row0: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &row0[..9],
        ["0", "100%", "25%", "50%", "decode", "busy", "—", "42%", "3"],
        "{out}"
    );
    let row1: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        &row1[..8],
        ["1", "0%", "0%", "0%", "idle", "idle", "—", "—"],
        "{out}"
    );
}

/// A malformed line in a replayed capture is said on stderr with its file and line, the rest
/// is explained and shown, and both commands exit 1, as `analyze` does: a script that
/// checks the status learns that part of the capture was not read.
#[test]
fn explain_and_top_exit_1_on_a_replay_with_a_malformed_line() {
    let dir = TempDir::new("malformed");
    let good = trace(&dir, "good", CASES[0].1);
    let mut text = std::fs::read_to_string(&good).unwrap();
    text.insert_str(text.find('\n').unwrap() + 1, "{\"taken\": not json\n");
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, text).unwrap();
    let path = p.to_str().unwrap();
    for args in [
        vec!["explain", "--replay", path],
        vec!["top", "--once", "--replay", path],
    ] {
        let (code, out, err) = truthscale(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(&format!("{path}:2:")), "{args:?}: {err}");
        assert!(
            err.contains("1 malformed line(s) skipped"),
            "{args:?}: {err}"
        );
        assert!(out.contains("busy"), "the rest is still read: {out}");
    }
    for args in [
        vec!["explain", "--replay", good.to_str().unwrap()],
        vec!["top", "--once", "--replay", good.to_str().unwrap()],
    ] {
        let (code, _, err) = truthscale(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
}

/// A capture with no GPU reading (a `dcgmi dmon` header alone) ends `analyze`, `explain`
/// and `top --replay` alike, with status 2 and why: `top` had printed an empty table and
/// exited 0, which passes for a machine whose GPUs are all idle.
#[test]
fn a_capture_without_a_gpu_ends_every_command_with_status_2() {
    let dir = TempDir::new("no-gpu");
    let p = dir.path().join("header.txt");
    std::fs::write(&p, "#Entity   GPUTL   TENSO\nID\n").unwrap();
    let path = p.to_str().unwrap();
    for args in [
        vec!["analyze", path],
        vec!["explain", "--replay", path],
        vec!["top", "--once", "--replay", path],
    ] {
        let (code, out, err) = truthscale(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("no GPU"), "{args:?}: {err}");
        assert!(!out.contains("GPU    REPORTED"), "{args:?}: {out}");
    }
}

/// A capture without timestamps (dcgm-exporter scrapes, 30 s apart as it collects by
/// default) is read at the spacing given: 2 100 J a scrape is 70 W over 30 s, a T4's own
/// draw, but 2 100 W over the 1 s assumed without it, which no T4 draws (its bound, 140 W):
/// then every energy window is refused as impossible.
#[test]
fn explain_and_top_read_a_capture_at_the_spacing_given() {
    let dir = TempDir::new("spacing");
    let p = dir.path().join("scrapes.txt");
    let labels = "gpu=\"0\",UUID=\"GPU-T4\",modelName=\"Tesla T4\"";
    let text: String = (0..4_u64)
        .map(|k| {
            format!(
                "DCGM_FI_DEV_GPU_UTIL{{{labels}}} 50\nDCGM_FI_DEV_POWER_USAGE{{{labels}}} 70\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {}\n",
                15_152_422_938 + k * 2_100_000
            )
        })
        .collect();
    std::fs::write(&p, text).unwrap();
    let path = p.to_str().unwrap();
    let impossible = "over 1 s is 2100 W, over the bound of 140 W";
    for (args, spaced) in [
        (vec!["explain", "--replay", path], false),
        (vec!["explain", "--replay", path, "--interval", "30s"], true),
        (vec!["top", "--once", "--replay", path], false),
        (
            vec!["top", "--once", "--replay", path, "--spacing", "30s"],
            true,
        ),
    ] {
        let (code, out, err) = truthscale(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains("50"), "{args:?}: {out}");
        assert_eq!(err.contains(impossible), !spaced, "{args:?}: {err}");
        assert_eq!(err.contains("out_of_range"), !spaced, "{args:?}: {err}");
    }
}

/// `top --once --url` on a sidecar whose source is down prints no row, says why on
/// stderr and exits 1 (as `explain --url` exits non-zero), never an empty table read as
/// "no GPU here".
#[test]
fn top_once_says_why_a_sidecar_has_no_gpu_row() {
    let port = truthscale_e2e::free_port();
    let src = format!("dcgm-exporter:http://127.0.0.1:{port}/metrics");
    let dir = TempDir::new("top-down");
    let sidecar =
        truthscale_e2e::Sidecar::start(&["--source", &src, "--interval", "200ms"], &[], dir.path());
    let url = format!("http://{}", sidecar.addr);
    let (code, out, err) = truthscale(&["top", "--once", "--url", &url]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains(&format!("sidecar {url}")), "{err}");
    assert!(err.contains("down"), "{err}");
    assert!(!out.contains("NVIDIA"), "no GPU row: {out}");
}

/// A detached tmux server on its own socket (`-L`, under the test's directory), running one
/// command in a 160x40 pane; the server, and with it the command, is killed on drop.
struct Tmux {
    socket: String,
    dir: std::path::PathBuf,
}

impl Tmux {
    fn tmux(&self) -> Command {
        let mut cmd = Command::new(require_tool("/usr/bin/tmux", "tmux"));
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.env("TMUX_TMPDIR", &self.dir);
        cmd.args(["-L", &self.socket]);
        cmd
    }

    fn start(dir: &TempDir, name: &str, command: &str) -> Tmux {
        let t = Tmux {
            socket: format!("truthscale-{name}-{}", std::process::id()),
            dir: dir.path().to_path_buf(),
        };
        let status = t
            .tmux()
            .args(["new-session", "-d", "-x", "160", "-y", "40", command])
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        t
    }

    fn capture(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p"])
            .output()
            .expect("run tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A tmux format of the pane (`#{pane_pid}`, `#{alternate_on}`), as tmux displays it.
    fn display(&self, what: &str) -> String {
        let out = self.tmux().args(["display", "-p", what]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn alive(&self) -> bool {
        self.tmux()
            .arg("has-session")
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .tmux()
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

/// What one `top` screen shows: the replay step and GPU 0's row, split on whitespace.
fn top_screen(screen: &str) -> Option<(u32, Vec<String>)> {
    let status = screen.lines().next()?;
    let step = status
        .split("sample ")
        .nth(1)?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    let row = screen
        .lines()
        .find(|l| l.contains("gpu 0 (NVIDIA H100 80GB HBM3)"))?
        .trim_matches(|c: char| c == '│' || c.is_whitespace())
        .trim_start_matches("gpu 0 (NVIDIA H100 80GB HBM3)")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    Some((step, row))
}

/// Wait for a frame at replay step `at_least` or later whose GPU 0 row matches its step:
/// at step k the newest window ends at t = k-1 s, with busy 30 + 2(k-1) % and k-1 queued.
fn consistent_frame(t: &Tmux, at_least: u32) -> (u32, Vec<String>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = t.capture();
        if let Some((k, row)) = top_screen(&last)
            && k >= at_least
            && row.len() >= 8
            && row[6] == format!("{}", k - 1)
            && row[0] == format!("{}%", 30 + 2 * (k - 1))
        {
            return (k, row, last);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no consistent top frame at step {at_least} or later; last screen:\n{last}");
}

#[test]
fn top_renders_a_live_table_in_a_terminal_and_updates_it() {
    require_tool_or_return!("/usr/bin/tmux", "tmux");
    let dir = TempDir::new("top-tty");
    let p = dir.path().join("replay.jsonl");
    let h = "\"model\":\"NVIDIA H100 80GB HBM3\",\"sm_clock_mhz\":1830.0";
    let mut s = String::new();
    for t in 0..40 {
        let busy = 0.3 + 0.02 * f64::from(t);
        s += &format!(
            "{{\"taken\":\"2026-01-01T00:{:02}:{:02}Z\",\"gpu\":0,{h},\"gpu_util\":{busy:.2},\"tensor_active\":0.25,\"dram_active\":0.5,\"throttles\":[],\"serving\":{{\"engine\":\"vllm\",\"kv_cache_utilization\":0.42,\"queued_requests\":{t}}}}}\n",
            t / 60,
            t % 60
        );
        s += &format!(
            "{{\"taken\":\"2026-01-01T00:{:02}:{:02}Z\",\"gpu\":1,{h},\"gpu_util\":0.0,\"tensor_active\":0.0,\"dram_active\":0.0,\"throttles\":[]}}\n",
            t / 60,
            t % 60
        );
    }
    std::fs::write(&p, s).unwrap();
    let command = format!(
        "{} top --replay {} --interval 250ms",
        truthscale_e2e::truthscale().display(),
        p.display()
    );
    let t = Tmux::start(&dir, "top", &command);

    let (k1, row1, screen1) = consistent_frame(&t, 2);
    assert!(
        screen1.contains("REPORTED")
            && screen1.contains("EFFECTIVE")
            && screen1.contains("VERDICT"),
        "{screen1}"
    );
    // busy (real memory-bound work), effective 25 %, saturation 50 %, KV 42 %.
    assert_eq!(
        &row1[1..6],
        ["25%", "50%", "decode", "busy", "42%"],
        "{screen1}"
    );
    assert!(screen1.contains("/40 at t+"), "{screen1}");
    let gpu1 = screen1
        .lines()
        .find(|l| l.contains("gpu 1 (NVIDIA H100 80GB HBM3)"))
        .expect("a row for GPU 1");
    let gpu1: Vec<&str> = gpu1.split_whitespace().collect();
    assert!(
        gpu1.windows(5)
            .any(|w| w == ["0%", "0%", "0%", "idle", "idle"]),
        "{screen1}"
    );
    assert!(screen1.contains('▁'), "sparkline: {screen1}");

    // The replay advances one sample per interval: a later frame has moved on.
    let (k2, row2, screen2) = consistent_frame(&t, k1 + 2);
    assert!(k2 >= k1 + 2);
    assert_ne!(
        row1[0], row2[0],
        "the busy value moves:\n{screen1}\n{screen2}"
    );
    assert_ne!(screen1, screen2);
    // The sparkline grows by one point per step (a JSONL sample is a window of its own).
    let spark = |screen: &str| {
        screen
            .lines()
            .find(|l| l.contains("gpu 0 (NVIDIA H100 80GB HBM3)"))
            .map_or(0, |l| l.chars().filter(|c| ('▁'..='█').contains(c)).count())
    };
    assert_eq!(spark(&screen1), k1 as usize, "{screen1}");
    assert_eq!(spark(&screen2), k2 as usize, "{screen2}");

    // `q` quits and the session (whose only command it was) ends.
    let status = t.tmux().args(["send-keys", "q"]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!t.alive(), "top did not quit on q");
}

/// `command` (with `{top}`, the replay of a busy GPU's trace in `dir`) in a tmux pane, once
/// `top` has drawn its first frame on the alternate screen.
fn top_in_tmux(dir: &TempDir, name: &str, command: &str) -> Tmux {
    let p = trace(
        dir,
        "busy",
        r#""gpu_util":0.9,"tensor_active":0.25,"dram_active":0.5"#,
    );
    let top = format!(
        "{} top --replay {}",
        truthscale_e2e::truthscale().display(),
        p.display()
    );
    let t = Tmux::start(dir, name, &command.replace("{top}", &top));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(t.display("#{alternate_on}") == "1" && t.capture().contains("VERDICT")) {
        assert!(Instant::now() < deadline, "no top frame:\n{}", t.capture());
        std::thread::sleep(Duration::from_millis(100));
    }
    t
}

/// `top` on a terminal stopped by another process's SIGTERM (in raw mode Ctrl-C is a key,
/// not a signal) leaves the alternate screen and shows the cursor again, exiting 0: the
/// shell it ran in is left as it was.
#[test]
fn top_restores_the_terminal_on_sigterm() {
    require_tool_or_return!("/usr/bin/tmux", "tmux");
    let dir = TempDir::new("top-sigterm");
    let t = top_in_tmux(
        &dir,
        "top-term",
        "sh -c '{top} --interval 1s; echo EXIT=$?; sleep 30'",
    );
    let display = |what: &str| t.display(what);
    let deadline = Instant::now() + Duration::from_secs(30);
    // top is the shell's child.
    let shell = display("#{pane_pid}");
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let top: u32 = children
        .split_whitespace()
        .next()
        .expect("top runs")
        .parse()
        .unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &top.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    while !t.capture().contains("EXIT=") {
        assert!(
            Instant::now() < deadline,
            "top did not end:\n{}",
            t.capture()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t.capture().contains("EXIT=0"), "{}", t.capture());
    assert_eq!(
        display("#{alternate_on}"),
        "0",
        "the alternate screen was left"
    );
    assert_eq!(display("#{cursor_flag}"), "1", "the cursor is shown");
}

/// `top` whose terminal goes away (its tmux server killed, as a closed window or a dropped
/// SSH session does: SIGHUP, and the terminal gone) ends within seconds: it had stayed for
/// good, spinning a core inside crossterm's poll of the dead terminal (crossterm issue 793),
/// a leftover found 41 minutes after a test that killed its terminal.
#[test]
fn top_ends_when_its_terminal_goes_away() {
    require_tool_or_return!("/usr/bin/tmux", "tmux");
    let dir = TempDir::new("top-hangup");
    let t = top_in_tmux(&dir, "top-hangup", "{top} --interval 250ms");
    // The pane's command is top itself.
    let top = t.display("#{pane_pid}");
    let proc_dir = format!("/proc/{top}");
    assert!(std::path::Path::new(&proc_dir).exists(), "top {top} runs");
    let status = t.tmux().arg("kill-server").status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&proc_dir).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = std::path::Path::new(&proc_dir).exists();
    if left {
        // Stop it, by its PID, before failing: a test leaves nothing running.
        let _ = Command::new("kill").args(["-KILL", &top]).status();
    }
    assert!(
        !left,
        "top {top} still ran 10 s after its terminal went away"
    );
}

/// `top --once --nvml-library` reads NVML directly (the fake library, decode scenario): two
/// samples one interval apart, then one plain-text frame.
#[test]
fn top_once_reads_nvml_directly() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "fake-nvml", "--lib"])
        .current_dir(truthscale_e2e::workspace())
        .status()
        .expect("run cargo build for the fake NVML library");
    assert!(status.success(), "building the fake NVML library failed");
    let lib = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || truthscale_e2e::workspace().join("target"),
            std::path::PathBuf::from,
        )
        .join("debug/libfake_nvml.so");
    let scenario = truthscale_e2e::workspace().join("tests/fake-nvml/scenarios/h100-decode.json");
    let out = clean_command()
        .args([
            "top",
            "--once",
            "--interval",
            "200ms",
            "--nvml-library",
            lib.to_str().unwrap(),
        ])
        .env("FAKE_NVML_SCENARIO", &scenario)
        .stdin(Stdio::null())
        .output()
        .expect("run truthscale");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &row[..8],
        ["0", "100%", "3%", "60%", "memory_bound", "busy", "—", "—"],
        "{text}"
    );

    let (code, _, err) = truthscale(&[
        "top",
        "--once",
        "--nvml-library",
        "/nonexistent/libnvidia-ml.so.1",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot load the NVML library /nonexistent/libnvidia-ml.so.1"),
        "{err}"
    );
    assert!(
        err.contains(
            "top has three sources: NVML on this machine (--nvml-library PATH where the library is elsewhere), --replay FILE (a capture), or --url http://HOST:PORT (a running truthscale)"
        ),
        "{err}"
    );
}

/// `top` with no source reads NVML on this machine (it used to demand --replay); on a
/// machine without NVIDIA's library, its error says so and names the three sources. (Where
/// the library is installed, top reads it, and this test only checks that it ran.)
#[test]
fn top_without_a_source_reads_nvml_or_names_its_three_sources() {
    let (code, out, err) = truthscale(&["top", "--once", "--interval", "200ms"]);
    if code == 0 {
        eprintln!("NVML is readable here: top read it\n{out}");
        return;
    }
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("--replay <REPLAY>"), "{err}");
    assert!(
        err.contains(
            "top reads NVML on this machine unless told otherwise, and NVML cannot be read here: "
        ),
        "{err}"
    );
    assert!(
        err.contains("--replay FILE (a capture), or --url http://HOST:PORT (a running truthscale)"),
        "{err}"
    );
}

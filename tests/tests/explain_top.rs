//! `truthscale explain` snapshots (one per verdict), `top --once` through a pipe, and the
//! verdict in `analyze --json`.

use std::process::Stdio;
use truthscale_e2e::{TempDir, clean_command};

/// A two-line trace of GPU 0 (an H100) with the same readings on both lines.
fn trace(dir: &TempDir, name: &str, readings: &str) -> std::path::PathBuf {
    let p = dir.path().join(format!("{name}.jsonl"));
    let line = |t: &str| {
        format!(
            "{{\"taken\":\"2026-01-01T00:00:0{t}Z\",\"gpu\":0,\"model\":\"NVIDIA H100 80GB HBM3\",{readings}}}\n"
        )
    };
    std::fs::write(&p, line("0") + &line("1")).unwrap();
    p
}

fn truthscale(args: &[&str]) -> (i32, String, String) {
    let out = clean_command()
        .args(args)
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
  counters say:   effective compute at most 90 % (no tensor counter: an upper bound)
  the gap:        cannot be measured without the tensor counter
  phase:          decode
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
    assert_eq!(e["verdict_fraction"].as_object().unwrap().len(), 6);
}

#[test]
fn top_once_prints_the_newest_sample_per_gpu_as_plain_text() {
    let dir = TempDir::new("top");
    let p = dir.path().join("two.jsonl");
    let h = "\"model\":\"NVIDIA H100 80GB HBM3\"";
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
        &row0[..8],
        ["0", "100%", "25%", "50%", "decode", "busy", "42%", "3"],
        "{out}"
    );
    let row1: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        &row1[..8],
        ["1", "0%", "0%", "0%", "idle", "idle", "—", "—"],
        "{out}"
    );
}

//! `truthscale serve` with `[engine]` on, against a local stand-in serving the engine
//! fixtures in `tests/fixtures/engines/`: values and rates across scrapes, a counter
//! reset, a non-engine endpoint, NaN values, an unreachable engine, and a hung one.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use truthscale_e2e::{Sample, Sidecar, Silent, StandIn, TempDir, free_port, ok, series, workspace};

fn engine_fixture(name: &str) -> String {
    std::fs::read_to_string(workspace().join("tests/fixtures/engines").join(name)).unwrap()
}

fn value(m: &[Sample], name: &str) -> Option<f64> {
    m.iter().find(|s| s.name == name).map(|s| s.value)
}

/// Exposition `a` with every value that `b` changes moved on by `k` times the change:
/// counters rising at the same rates step after step (`k` = 1 is `b`).
fn stepped(a: &str, b: &str, k: u32) -> String {
    a.lines()
        .zip(b.lines())
        .map(
            |(la, lb)| match (la.rsplit_once(' '), lb.rsplit_once(' ')) {
                (Some((series, va)), Some((_, vb))) if la != lb => {
                    let (va, vb): (f64, f64) = (va.parse().unwrap(), vb.parse().unwrap());
                    format!("{series} {:.1}\n", va + f64::from(k) * (vb - va))
                }
                _ => format!("{la}\n"),
            },
        )
        .collect()
}

/// How long a condition may take to show on `/metrics`.
const WAIT: Duration = Duration::from_secs(15);

/// The sampling interval. A rate lasts one window (counters that stop rising read a measured
/// zero in the next one), and `/metrics` is polled every 100 ms: a whole second keeps a
/// window on show for many polls on a loaded machine, where 200 ms could fall between two.
const TICK: &str = "1s";

fn start(url: &str, dir: &TempDir) -> Sidecar {
    Sidecar::start(
        &[
            "--source",
            "sim:decode-only",
            "--sim-gpus",
            "1",
            "--interval",
            TICK,
        ],
        &[
            ("TRUTHSCALE_ENGINE__ENABLED", "true"),
            ("TRUTHSCALE_ENGINE__URL", url),
            ("TRUTHSCALE_ENGINE__MODEL_PARAMS", "8000000000"),
            ("TRUTHSCALE_ENGINE__MODEL_DTYPE", "bf16"),
        ],
        dir.path(),
    )
}

#[test]
fn engine_values_rates_reset_non_engine_and_nan() {
    let dir = TempDir::new("engine");
    let engine = StandIn::start(ok(&engine_fixture("vllm-v1-a.prom")));
    let sidecar = start(&engine.url(), &dir);
    let m = sidecar.wait_for(WAIT, "engine up", |m| {
        value(m, "truthscale_serving_engine_up") == Some(1.0)
    });
    let up = m
        .iter()
        .find(|s| s.name == "truthscale_serving_engine_up")
        .unwrap();
    assert_eq!(up.label("engine"), Some("vllm"));
    assert_eq!(
        value(&m, "truthscale_serving_kv_cache_usage_ratio"),
        Some(0.42)
    );
    assert_eq!(value(&m, "truthscale_serving_requests_running"), Some(20.0));
    assert_eq!(value(&m, "truthscale_serving_batch_size"), Some(20.0));
    // Counters unchanged between scrapes: 0 tokens/s, a measured zero.
    let m = sidecar.wait_for(WAIT, "a rate", |m| {
        value(m, "truthscale_serving_prompt_tokens_per_second").is_some()
    });
    assert_eq!(
        value(&m, "truthscale_serving_prompt_tokens_per_second"),
        Some(0.0)
    );

    // Two scrapes apart: +2000 prompt and +1200 output tokens; every tick is 1 s, so the
    // first window after the change shows 2000 / dt with dt the real tick spacing.
    engine.set(ok(&engine_fixture("vllm-v1-b.prom")));
    let m = sidecar.wait_for(WAIT, "rates", |m| {
        value(m, "truthscale_serving_prompt_tokens_per_second").is_some_and(|v| v > 0.0)
    });
    let prompt = value(&m, "truthscale_serving_prompt_tokens_per_second").unwrap();
    let output = value(&m, "truthscale_serving_output_tokens_per_second").unwrap();
    assert!(
        (prompt / output - 2000.0 / 1200.0).abs() < 1e-9,
        "{prompt} {output}"
    );
    assert!(
        (1_000.0..=4_000.0).contains(&prompt),
        "2000 tokens over ~1 s: {prompt}"
    );
    assert_eq!(value(&m, "truthscale_serving_queue_seconds"), Some(0.3));
    assert_eq!(
        value(&m, "truthscale_serving_kv_cache_usage_ratio"),
        Some(0.93)
    );
    let mfu = m
        .iter()
        .find(|s| s.name == "truthscale_serving_model_flops_utilization_ratio")
        .expect("MFU with params and dtype configured");
    assert!(
        mfu.label("assumptions")
            .unwrap()
            .starts_with("params=8e9,dtype=bf16,gpus=1"),
        "{mfu:?}"
    );

    // Engine restart: counters go down; the rate is the new value over the window (300
    // tokens over ~1 s), not negative.
    engine.set(ok(&engine_fixture("vllm-v1-reset.prom")));
    let rates = |m: &[Sample]| {
        value(m, "truthscale_serving_prompt_tokens_per_second")
            .zip(value(m, "truthscale_serving_output_tokens_per_second"))
    };
    // The restart's window is the one whose rates are 300 to 150 tokens.
    let m = sidecar.wait_for(WAIT, "reset", |m| {
        rates(m).is_some_and(|(p, o)| p > 0.0 && (p / o - 2.0).abs() < 1e-9)
    });
    let (prompt, _) = rates(&m).unwrap();
    assert!(prompt < 1_000.0, "300 tokens over ~1 s: {prompt}");

    // NaN gauge: absent, never NaN or zero.
    engine.set(ok(&engine_fixture("vllm-nan.prom")));
    let m = sidecar.wait_for(WAIT, "NaN kv dropped", |m| {
        value(m, "truthscale_serving_requests_running") == Some(4.0)
    });
    assert_eq!(value(&m, "truthscale_serving_kv_cache_usage_ratio"), None);
    assert_eq!(value(&m, "truthscale_serving_engine_up"), Some(1.0));

    // Not an engine: absent, with the reason; no serving values at all.
    engine.set(ok(&engine_fixture("not-an-engine.prom")));
    let m = sidecar.wait_for(WAIT, "not an engine", |m| {
        value(m, "truthscale_serving_engine_up") == Some(0.0)
    });
    let up = m
        .iter()
        .find(|s| s.name == "truthscale_serving_engine_up")
        .unwrap();
    assert!(
        up.label("absent_reason")
            .unwrap()
            .starts_with("no vLLM, SGLang or TGI metrics at"),
        "{up:?}"
    );
    assert!(
        m.iter()
            .filter(|s| s.name.starts_with("truthscale_serving_"))
            .all(|s| s.name == "truthscale_serving_engine_up"),
        "absent is never zeros"
    );
}

#[test]
fn unreachable_engine_is_absent_with_the_reason() {
    let dir = TempDir::new("engine-down");
    let url = format!("http://127.0.0.1:{}/metrics", free_port());
    let sidecar = start(&url, &dir);
    let m = sidecar.wait_for(WAIT, "engine absent", |m| {
        value(m, "truthscale_serving_engine_up") == Some(0.0)
    });
    let up = m
        .iter()
        .find(|s| s.name == "truthscale_serving_engine_up")
        .unwrap();
    assert!(
        up.label("absent_reason")
            .unwrap()
            .starts_with(&format!("cannot reach {url}")),
        "{up:?}"
    );
    assert_eq!(value(&m, "truthscale_serving_kv_cache_usage_ratio"), None);
    // The GPU series are still served, with a verdict.
    assert!(
        m.iter()
            .any(|s| s.name == "truthscale_gpu_verdict" && s.value == 1.0)
    );
}

/// vLLM's own FLOP and byte estimates become a model-based MFU and MBU over the datasheet
/// peaks, and their agreement with the counter-based effective compute and DRAM activity is
/// exported with where each side came from.
#[test]
fn engine_flop_estimates_are_cross_checked_against_the_counters() {
    let dir = TempDir::new("engine-flops");
    let engine = StandIn::start(ok(&engine_fixture("vllm-flops-a.prom")));
    let sidecar = start(&engine.url(), &dir);
    sidecar.wait_for(WAIT, "engine up", |m| {
        value(m, "truthscale_serving_engine_up") == Some(1.0)
    });
    // The counters keep rising by b's step over a every 500 ms (one to three steps a 1 s
    // window, an MFU of 0.2 to 0.6), so that every window has its rate: a single step is on
    // show for one window only, which a loaded machine's polls can miss.
    let (a, b) = (
        engine_fixture("vllm-flops-a.prom"),
        engine_fixture("vllm-flops-b.prom"),
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let m = std::thread::scope(|s| {
        s.spawn(|| {
            for k in 1..=100 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                engine.set(ok(&stepped(&a, &b, k)));
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let m = sidecar.wait_for(WAIT, "engine estimates", |m| {
            value(m, "truthscale_serving_engine_flops_utilization_ratio").is_some_and(|v| v > 0.0)
                && value(m, "truthscale_serving_prompt_tokens_per_second").is_some_and(|v| v > 0.0)
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        m
    });
    let find = |name: &str| m.iter().find(|s| s.name == name).unwrap();
    let mfu = find("truthscale_serving_engine_flops_utilization_ratio");
    assert_eq!(
        mfu.label("assumptions"),
        Some(
            "flops=engine_estimate,peak=bf16_dense_datasheet,bytes=engine_estimate,peak=dram_datasheet"
        )
    );
    // Both rates have the same window: their ratio is the scrapes' ratio exactly.
    // The H100 SXM's datasheet peaks, typed in: 989 TFLOP/s and 3.35 TB/s.
    let prompt = value(&m, "truthscale_serving_prompt_tokens_per_second").unwrap();
    let flops_per_token = mfu.value * 989e12 / prompt;
    assert!(
        (flops_per_token / 1e11 - 1.0).abs() < 1e-9,
        "{flops_per_token}"
    );
    let mbu = value(&m, "truthscale_serving_engine_bandwidth_utilization_ratio").unwrap();
    let bytes_per_token = mbu * 3.35e12 / prompt;
    assert!(
        (bytes_per_token / 5.5e8 - 1.0).abs() < 1e-9,
        "{bytes_per_token}"
    );
    // The agreement is the engine's over the counters', labelled with both sides.
    let ecf = value(&m, "truthscale_gpu_effective_compute_ratio").unwrap();
    let agree = find("truthscale_serving_compute_agreement_ratio");
    assert_eq!(agree.label("estimate"), Some("engine_flops"));
    assert_eq!(agree.label("measure"), Some("effective_compute"));
    assert!((agree.value * ecf / mfu.value - 1.0).abs() < 1e-12);
    let dram = value(&m, "truthscale_gpu_dram_active_ratio").unwrap();
    let bw = find("truthscale_serving_bandwidth_agreement_ratio");
    assert_eq!(bw.label("measure"), Some("dram_active"));
    assert!((bw.value * dram / mbu - 1.0).abs() < 1e-12);
}

/// A serving engine that accepts and never answers, read with `engine.timeout` 5 s (issue
/// 35): it is read on a thread of its own, so it never blanks a GPU, never flaps `/readyz`,
/// never slows sampling, and is not the GPU source's overrun; the engine's own series say it
/// is absent, with its staleness, then its timeout, as the reason.
#[test]
fn a_hung_engine_never_blanks_a_gpu_nor_slows_sampling() {
    let dir = TempDir::new("engine-hung");
    let hung = Silent::start();
    let url = format!("http://{}/metrics", hung.addr());
    let sidecar = Sidecar::start(
        &["--source", "sim", "--sim-gpus", "2", "--interval", "200ms"],
        &[
            ("TRUTHSCALE_ENGINE__ENABLED", "true"),
            ("TRUTHSCALE_ENGINE__URL", &url),
            ("TRUTHSCALE_ENGINE__TIMEOUT", "5s"),
        ],
        dir.path(),
    );
    let began = Instant::now();
    let mut ticks = BTreeSet::new();
    let mut polls = 0;
    // Past the engine's 5 s timeout, so that a whole hung read falls inside the window.
    while began.elapsed() < Duration::from_secs(6) {
        let ready = sidecar.get("/readyz", &[]);
        assert_eq!(ready.status, 200, "/readyz: {}", ready.text());
        let m = sidecar.metrics();
        assert_gpus_up(&m);
        if let Some(t) = truthscale_e2e::value(&m, "truthscale_snapshot_timestamp_seconds", &[]) {
            ticks.insert(t.to_bits());
        }
        polls += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    // A 200 ms interval over the window holds about 30 ticks; a hung engine on the sampler's
    // thread gave one tick per 5 s timeout, two or three in 6 s. At least ten seen (a poll a
    // 50 ms plus its request's time, which a loaded machine stretches, can miss some).
    let expected = began.elapsed().as_secs_f64() / 0.2;
    assert!(
        ticks.len() >= 10,
        "{} ticks seen in {polls} polls over {:?}; {expected:.0} expected",
        ticks.len(),
        began.elapsed()
    );
    let m = sidecar.wait_for(WAIT, "the engine's timeout counted", |m| {
        engine_errors(m, "timeout").is_some_and(|n| n >= 1.0)
    });
    assert_gpus_up(&m);
    let labelled = |name: &str, labels: &[(&str, &str)]| truthscale_e2e::value(&m, name, labels);
    assert_eq!(
        labelled("truthscale_source_up", &[("source", "engine")]),
        Some(0.0)
    );
    // At most one overrun (a loaded machine's stall); a read on the sampler's thread took
    // 5 s a tick, which the tick count above and the duration below tell.
    for source in ["sim", "engine"] {
        let overruns = labelled(
            "truthscale_source_errors_total",
            &[("source", source), ("kind", "overrun")],
        );
        assert!(
            overruns.is_none_or(|n| n <= 1.0),
            "{source}: {overruns:?} overruns were counted"
        );
    }
    let took = labelled("truthscale_sample_duration_seconds", &[]).expect("sample duration");
    assert!(took < 1.0, "a tick took {took} s with the engine hung");
    // The engine's own series: absent on every GPU, with the reason; never zeros.
    let up = series(&m, "truthscale_serving_engine_up", &[]);
    assert_eq!(up.len(), 2, "{up:?}");
    for s in up {
        assert_eq!(s.value, 0.0);
        let reason = s.label("absent_reason").unwrap();
        assert!(
            reason.starts_with(&format!("{url}: no complete answer within "))
                || reason.starts_with(&format!("{url}: no answer within the stale period")),
            "{reason}"
        );
    }
    assert!(
        m.iter()
            .filter(|s| s.name.starts_with("truthscale_serving_"))
            .all(|s| s.name == "truthscale_serving_engine_up"),
        "absent is never zeros"
    );
}

/// Every GPU is up, and so is the GPU source.
fn assert_gpus_up(m: &[Sample]) {
    let up = series(m, "truthscale_gpu_up", &[]);
    assert_eq!(up.len(), 2, "{up:?}");
    assert!(up.iter().all(|s| s.value == 1.0), "{up:?}");
    assert_eq!(
        truthscale_e2e::value(m, "truthscale_source_up", &[("source", "sim")]),
        Some(1.0)
    );
}

/// The engine's failures of `kind` so far.
fn engine_errors(m: &[Sample], kind: &str) -> Option<f64> {
    truthscale_e2e::value(
        m,
        "truthscale_source_errors_total",
        &[("source", "engine"), ("kind", kind)],
    )
}

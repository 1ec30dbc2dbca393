//! Inputs the fuzz targets (`fuzz/`, run by `scripts/fuzz`) found, each kept as a test of
//! the invariant it broke. The target and the invariant are named on each test; the inputs
//! are written as the core's own types, minimized by hand from the fuzzer's artifacts.

use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::exposition::{self, ExporterStatus};
use truthscale_core::model::{
    EntityId, EntitySample, Field, Readings, Sample, ServingSnapshot, SourceKind, Timestamp,
};
use truthscale_core::parse::JsonlParser;
use truthscale_core::serving;
use truthscale_core::tracker::{CeilingTracker, Deriver};

fn gpu0(pairs: &[(Field, f64)]) -> EntitySample {
    let mut readings = Readings::default();
    for &(f, v) in pairs {
        readings.set_value(f, v);
    }
    EntitySample {
        id: EntityId {
            gpu: Some(0),
            model: Some("NVIDIA H100 80GB HBM3".into()),
            ..EntityId::default()
        },
        readings,
        ..EntitySample::default()
    }
}

/// `derive` target: time at the ends of the `i64` range. "Derivation never panics ...
/// whatever the input" (ARCHITECTURE.md); the deriver and the analyzer subtracted the
/// times as `i64` and overflowed (`attempt to subtract with overflow` in
/// `Analyzer::push` and in `Timestamp::seconds_since` under the deriver).
#[test]
fn times_at_the_ends_of_the_range_do_not_overflow() {
    let busy = [(Field::ReportedUtil, 0.5), (Field::TensorActive, 0.2)];
    for (a, b, first_has_gpu) in [
        (i64::MIN, i64::MAX, true),
        (i64::MAX, i64::MIN, true),
        (i64::MAX, -2, true),
        (i64::MIN, 1, true),
        (i64::MIN, 1, false),
    ] {
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let mut an = Analyzer::new(Deriver::new(DeriveConfig::default(), None), true);
        for (t, has_gpu) in [(a, first_has_gpu), (b, true)] {
            let entities = if has_gpu { vec![gpu0(&busy)] } else { vec![] };
            let s = Sample {
                taken: Timestamp(t),
                entities,
            };
            for w in d.observe(&s).windows {
                assert!(
                    w.dt_seconds.is_finite() && w.dt_seconds >= 0.0,
                    "{a} then {b}"
                );
                assert!(w.totals.observed_seconds.is_finite(), "{a} then {b}");
            }
            an.push(&s);
        }
        for e in an.report().entities {
            assert!(e.effective_compute.is_none_or(|m| m.mean.is_finite()));
        }
    }
}

/// `engine_text` target: two series of one name whose sum overflows. `serving::parse_text`
/// documents "a name with any non-finite value is unknown, never a partial sum", and the
/// module "NaN or infinite values are dropped (that quantity is absent), never exported";
/// the sum became `inf`, and `running_requests` was exported as `inf` (and the KV-cache
/// utilization clamped from `inf` to a made-up 1.0).
#[test]
fn engine_sums_that_overflow_are_not_infinite() {
    let body = "\
vllm:num_requests_running{engine=\"0\"} 1e308
vllm:num_requests_running{engine=\"1\"} 1e308
";
    let parsed = serving::parse_text(body);
    for (name, v) in &parsed {
        let finite = v.iter().flatten().all(|(_, x)| x.is_finite());
        assert!(finite, "{name}: {v:?}");
    }
    let reading = serving::read(&parsed, 0).expect("the vLLM names are there");
    let s = serving::derive(None, &reading);
    assert!(s.running_requests.is_none_or(f64::is_finite), "{s:?}");
}

/// `engine_text` target: a counter's increase over a short window overflows its rate.
/// The rates are exported values, so they must be finite or absent.
#[test]
fn engine_rates_that_overflow_are_not_infinite() {
    let a = serving::read(&serving::parse_text("vllm:prompt_tokens_total 0\n"), 0).unwrap();
    let b = serving::read(&serving::parse_text("vllm:prompt_tokens_total 1e308\n"), 1).unwrap();
    let s = serving::derive(Some(&a), &b);
    assert!(s.prompt_tokens_per_sec.is_none_or(f64::is_finite), "{s:?}");
}

/// `engine_text` target: the mean queue time is the queue-time histogram's sum increase
/// over its count increase. A count that grew by 1e-300 (no whole request) under a sum that
/// grew by 1e307 gave `queue_seconds = inf` (the exposition's last check for finite values
/// kept it off `/metrics`); and the engine's read and write byte rates, each finite, could
/// add up to `inf`. Both are absent now; whole counts still give their mean (3 s over 2
/// requests: 1.5 s).
#[test]
fn an_engine_mean_over_less_than_one_request_is_absent() {
    let scrape = |sum: &str, count: &str, t| {
        let body = format!(
            "vllm:num_requests_running 1\n\
             vllm:request_queue_time_seconds_sum {sum}\n\
             vllm:request_queue_time_seconds_count {count}\n\
             vllm:estimated_read_bytes_per_gpu_total {sum}\n\
             vllm:estimated_write_bytes_per_gpu_total {sum}\n"
        );
        serving::read(&serving::parse_text(&body), t).unwrap()
    };
    let s = serving::derive(Some(&scrape("0", "2", 0)), &scrape("1e307", "2.0000001", 1));
    assert_eq!(s.queue_seconds, None, "{s:?}");
    let s = serving::derive(Some(&scrape("0", "0", 0)), &scrape("1e307", "1e-300", 1));
    assert_eq!(s.queue_seconds, None, "{s:?}");
    // 1.5e308 bytes read and 1.5e308 written in 1 s: each rate is finite, their sum is not.
    let s = serving::derive(Some(&scrape("0", "0", 0)), &scrape("1.5e308", "2", 1000));
    assert_eq!(s.queue_seconds, Some(0.75e308), "{s:?}");
    assert_eq!(
        s.engine_bytes_per_sec, None,
        "1.5e308 + 1.5e308 overflows: {s:?}"
    );
    let s = serving::derive(Some(&scrape("1", "1", 0)), &scrape("4", "3", 1000));
    assert_eq!(s.queue_seconds, Some(1.5));
    assert_eq!(s.engine_bytes_per_sec, Some(6.0));
}

/// `engine_text` target, the same run: the model-based MFU and MBU were clamped into
/// [0, 1] after an overflow, so prompt and output rates whose sum is infinite, or a product
/// `2·params·tokens` past the largest double, gave a made-up MFU of 1. They are absent; a
/// finite estimate is still clamped, as the KV-cache gauge is.
#[test]
fn an_overflowed_model_utilization_is_absent_not_one() {
    let spec = truthscale_core::gpus::by_key("h100-sxm").unwrap();
    let model = serving::ModelParams {
        params: 4.05e11,
        dtype: serving::Dtype::Bf16,
    };
    let with = |prompt: f64, output: f64, steps: f64| {
        let mut s = truthscale_core::model::ServingSnapshot {
            prompt_tokens_per_sec: Some(prompt),
            output_tokens_per_sec: Some(output),
            steps_per_sec: Some(steps),
            ..Default::default()
        };
        serving::add_utilization(&mut s, &model, Some(spec), 1);
        s
    };
    let s = with(1e308, 1e308, 1e300);
    assert_eq!((s.mfu, s.mbu, s.assumptions), (None, None, None));
    // 2 × 4.05e11 × 1e300 overflows; the steps' product does not: 8.1e11 bytes × 1 step/s
    // over 3.35e12 B/s.
    let s = with(1e300, 0.0, 1.0);
    assert_eq!(s.mfu, None);
    assert_eq!(s.mbu, Some(8.1e11 / 3.35e12));
    assert_eq!(
        s.assumptions.as_deref(),
        Some("params=4.05e11,dtype=bf16,gpus=1,weights_read_once_per_step")
    );
    // A finite estimate past the peak is clamped: 2 × 4.05e11 × 1e6 FLOP/s is far past it.
    assert_eq!(with(1e6, 0.0, 1.0).mfu, Some(1.0));
}

/// The exposition's own values over an engine snapshot: `(family, value)` for the two
/// families computed at exposition time from the snapshot and the window, taken before the
/// encoders' last check for finite values.
fn engine_values(prompt: f64, output: f64) -> Vec<(&'static str, f64)> {
    let mut gpu = gpu0(&[
        (Field::TensorActive, 0.5),
        (Field::SmClockMhz, 1830.0),
        (Field::PowerWatts, 700.0),
    ]);
    gpu.serving = Some(ServingSnapshot {
        engine: Some("vllm".into()),
        prompt_tokens_per_sec: Some(prompt),
        output_tokens_per_sec: Some(output),
        ..ServingSnapshot::default()
    });
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let mut window = None;
    for t in [0, 1000] {
        let sample = Sample {
            taken: Timestamp(t),
            entities: vec![gpu.clone()],
        };
        window = d.observe(&sample).windows.into_iter().next();
    }
    let window = window.expect("a window after two samples");
    let gpus = crate::gpu_entries(vec![window], SourceKind::Replay);
    let mut out = Vec::new();
    exposition::for_each_derived_value(&gpus, &ExporterStatus::default(), |m, v| {
        if m.name == "truthscale_serving_tokens_per_effective_compute_second"
            || m.name == "truthscale_serving_energy_per_output_token_joules"
        {
            out.push((m.name, v));
        }
    });
    out
}

/// `derive` target, once its exposition check read the values before the encoders' last
/// check: tokens per effective-compute second was `(prompt + output) / ECF` and joules per
/// output token `watts / output`, unchecked. Rates whose sum passes the largest double, or
/// an output rate of 1e-307 tokens a second, gave an infinity that the encoders then left
/// out with nothing counting it. Both are absent where they are not finite.
#[test]
fn engine_values_past_the_largest_double_are_absent() {
    let tpe = "truthscale_serving_tokens_per_effective_compute_second";
    let jpt = "truthscale_serving_energy_per_output_token_joules";
    // ECF here is the tensor pipe's 0.5 at 1830 MHz, the clock the H100's peak is quoted
    // at: 0.5.
    assert_eq!(
        engine_values(1500.0, 300.0),
        vec![(tpe, 1800.0 / 0.5), (jpt, 700.0 / 300.0)]
    );
    // 1.5e308 + 1.5e308 overflows; 1.5e308 a second of output is 4.7e-306 J a token.
    assert_eq!(
        engine_values(1.5e308, 1.5e308),
        vec![(jpt, 700.0 / 1.5e308)]
    );
    // The sum is finite, the quotient by ECF 0.5 is not; 700 W over 1e-307 tokens a second
    // (7e309 J a token) is not either.
    assert_eq!(engine_values(1e308, 1e-307), vec![]);
}

/// `derive` target: the simulator's truth was read from traces unchecked, and the integral
/// of 1e308 overflowed to `inf`, a value derivation must never emit. A trace's truth that
/// is no fraction is now an error naming the key; a sample that carries one anyway (built
/// by a library user) still integrates to nothing infinite.
#[test]
fn a_huge_truth_in_a_trace_does_not_overflow_its_integral() {
    let mut p = JsonlParser::new("t.jsonl");
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    for s in 0..4 {
        let line = |truth: &str| {
            format!(
                "{{\"taken\":\"2024-01-01T00:00:0{s}Z\",\"gpu\":0,\"gpu_util\":1,\"source\":\"sim\"{truth}}}"
            )
        };
        let err = p
            .push_line(&line(",\"truth_effective_compute\":1e308"))
            .unwrap_err();
        assert!(
            err.to_string().contains("key `truth_effective_compute`"),
            "{err}"
        );
        let mut sample = p.push_line(&line("")).unwrap().unwrap();
        sample.entities[0].truth_effective_compute = Some(1e308);
        for w in d.observe(&sample).windows {
            let truth = w.totals.truth_effective_compute_seconds;
            assert!(truth.is_none_or(f64::is_finite), "{truth:?}");
        }
    }
}

/// `derive` target: an observed ceiling is "the best average over 60 s of continuous
/// windows"; the average of values of 1e308 is 1e308, but the running sum overflowed and
/// the ceiling came out `inf`.
#[test]
fn a_ceiling_of_huge_values_is_their_average() {
    let mut c = CeilingTracker::new(3600.0, 60.0);
    let mut last = None;
    for i in 1..=61 {
        last = c.observe(Timestamp(i * 1000), 1.0, Some(1e308));
    }
    let ceiling = last.expect("a sustained minute");
    assert!(ceiling.value.is_finite(), "{ceiling:?}");
}

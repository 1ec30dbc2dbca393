//! `idle_seconds`: how long a holder has done no work, from the windows the deriver sees.
//! The expected values are the scenario's own clock: seconds since the last sample with
//! work, counted here from the timestamps, not from the code under test.

use truthscale_core::derive::DeriveConfig;
use truthscale_core::model::{
    EntityId, EntitySample, Field, PodRef, Readings, Sample, ServingSnapshot, Timestamp,
};
use truthscale_core::tracker::Deriver;

/// A holder's GPU at second `t`: busy flag `util`, tensor `tensor`, 8 GB held, and output
/// tokens per second when a serving engine is attached.
fn gpu(pod: &str, util: f64, tensor: f64, tokens: Option<f64>) -> EntitySample {
    let mut r = Readings::default();
    for (f, v) in [
        (Field::ReportedUtil, util),
        (Field::TensorActive, tensor),
        (Field::DramActive, tensor),
        (Field::SmClockMhz, 1980.0),
        (Field::MemUsedBytes, 8e9),
    ] {
        r.set_value(f, v);
    }
    EntitySample {
        id: EntityId {
            gpu: Some(0),
            uuid: Some(format!("GPU-{pod}")),
            model: Some("NVIDIA H100 80GB HBM3".into()),
            pod: Some(PodRef {
                pod: pod.into(),
                namespace: Some("research".into()),
                container: None,
            }),
            ..EntityId::default()
        },
        readings: r,
        serving: tokens.map(|t| ServingSnapshot {
            engine: Some("vllm".into()),
            output_tokens_per_sec: Some(t),
            prompt_tokens_per_sec: Some(0.0),
            ..ServingSnapshot::default()
        }),
        ..EntitySample::default()
    }
}

fn idle(d: &mut Deriver, t: i64, e: EntitySample) -> Option<f64> {
    let s = Sample {
        taken: Timestamp(t * 1000),
        entities: vec![e],
    };
    d.observe(&s).windows.pop().and_then(|w| w.idle_seconds)
}

#[test]
fn a_notebook_with_no_kernels_for_20_minutes_is_idle_1200_s() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    // Ten seconds of work (busy 80 %, tensor 40 %), then twenty minutes of nothing.
    for t in 0..10 {
        assert_eq!(
            idle(&mut d, t, gpu("nb-0", 0.8, 0.4, None)),
            Some(0.0),
            "t = {t}"
        );
    }
    let last_work = 9;
    let mut at_20_min = None;
    for t in 10..=(last_work + 1200) {
        let got = idle(&mut d, t, gpu("nb-0", 0.0, 0.0, None));
        assert_eq!(got, Some((t - last_work) as f64), "t = {t}");
        at_20_min = got;
    }
    assert_eq!(at_20_min, Some(1200.0));
    // Work again: back to 0.
    assert_eq!(idle(&mut d, 1210, gpu("nb-0", 0.5, 0.3, None)), Some(0.0));
}

#[test]
fn a_decode_server_with_steady_tokens_is_never_idle() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    // Effective compute under 1 % and a busy flag under 5 %, but 40 tokens a second.
    for t in 0..100 {
        assert_eq!(
            idle(&mut d, t, gpu("decode-0", 0.03, 0.005, Some(40.0))),
            Some(0.0),
            "t = {t}"
        );
    }
    // The engine reports no tokens: idle from then on.
    assert_eq!(
        idle(&mut d, 100, gpu("decode-0", 0.03, 0.005, Some(0.0))),
        Some(1.0)
    );
}

#[test]
fn a_holder_that_never_worked_is_idle_since_it_was_first_seen_and_nothing_read_is_blank() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    for t in 0..30 {
        assert_eq!(
            idle(&mut d, 100 + t, gpu("never", 0.0, 0.0, None)),
            Some(t as f64)
        );
    }
    // No busy flag, no tensor, no tokens: nothing says whether it worked.
    let mut blank = gpu("never", 0.0, 0.0, None);
    blank.readings = Readings::default();
    assert_eq!(idle(&mut d, 130, blank), None);
}

fn window(d: &mut Deriver, t: i64, e: EntitySample) -> truthscale_core::tracker::EntityWindow {
    let s = Sample {
        taken: Timestamp(t * 1000),
        entities: vec![e],
    };
    d.observe(&s).windows.pop().expect("one window")
}

/// The notebook, seen from its first sample: 8 GB (8e9 bytes) held, busy 0, tensor
/// 0, one sample a second. Its idle seconds are its age: 1 199 at t = 1 199 s (under the
/// alert's threshold), exactly 1 200 at t = 1 200 s, the 8e9 bytes in every window; the
/// first window with work puts it back to 0, and idleness counts again from there.
#[test]
fn a_notebook_holding_8_gb_from_its_first_sample_is_idle_1200_s_at_t_1200() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    for t in 0..=1200 {
        let w = window(&mut d, t, gpu("nb-alice-0", 0.0, 0.0, None));
        assert_eq!(w.idle_seconds, Some(t as f64), "t = {t}");
        assert_eq!(w.readings.value(Field::MemUsedBytes), Some(8e9), "t = {t}");
    }
    // One window with a kernel (busy 30 %): 0 at once; then idle again, from that window.
    assert_eq!(
        idle(&mut d, 1201, gpu("nb-alice-0", 0.3, 0.0, None)),
        Some(0.0)
    );
    for t in 1202..=1261 {
        assert_eq!(
            idle(&mut d, t, gpu("nb-alice-0", 0.0, 0.0, None)),
            Some((t - 1201) as f64),
            "t = {t}"
        );
    }
    // A gap in the readings (59 s, past the gap limit): the GPU may have worked in it, so
    // the idle time observed starts again after it.
    assert_eq!(
        idle(&mut d, 1320, gpu("nb-alice-0", 0.0, 0.0, None)),
        Some(0.0)
    );
}

/// A decode server without an engine attached: effective compute under 1 % (tensor 0.5 %)
/// but the busy flag at 100 % (its kernels keep the GPU busy): it works, 0 for the whole
/// 20 minutes. With the busy flag under `idle_util` (5 %: 4 %) and nothing else, it would
/// be idle: the flag is what says so.
#[test]
fn a_decode_server_kept_busy_with_low_effective_compute_is_never_idle() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    for t in 0..=1200 {
        assert_eq!(
            idle(&mut d, t, gpu("decode-0", 1.0, 0.005, None)),
            Some(0.0),
            "t = {t}"
        );
    }
    assert_eq!(
        idle(&mut d, 1201, gpu("decode-0", 0.04, 0.005, None)),
        Some(1.0)
    );
}

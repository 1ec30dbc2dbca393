//! The deriver and its tracker (`Deriver`, `EntityWindow`, the ceilings) and the analyzer,
//! over arbitrary samples: readings that are values (NaN, ±Inf, negative, sentinels, huge),
//! unsupported or blank; entities that come and go, share keys or repeat in one sample;
//! time that jumps, stands still, goes backwards or sits at the ends of the range; serving
//! snapshots and simulator truth with any finite value.
//!
//! Every window is checked by `truthscale_fuzz::Checked`: no NaN or infinity, fractions in
//! [0, 1], a blank never becomes a value, integrals only with their input and never
//! decreasing, skipped windows for time that does not advance, and an exposition that
//! parses and holds only finite values.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::gpus;
use truthscale_core::model::{
    EntityId, EntitySample, Field, MigId, Phase, PodRef, Reading, Readings, Sample,
    ServingSnapshot, Throttles, Timestamp, Workload,
};
use truthscale_fuzz::Checked;

const MODELS: &[&str] = &[
    "NVIDIA H100 80GB HBM3",
    "Tesla T4",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA L40S",
    "NVIDIA A30",
    "Simulated H100 SXM",
    "Mystery GPU",
];

/// A value with the awkward cases made likely.
#[derive(Debug, Arbitrary)]
enum Value {
    Raw(f64),
    Fraction(u16),
    Special(u8),
}

const SPECIAL: &[f64] = &[
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    1.5,
    1.500_000_1,
    -1.0,
    f64::MIN_POSITIVE,
    f64::MAX,
    f64::MIN,
    140_737_488_355_328.0,
    140_737_488_355_327.0,
    4_294_967_295.0,
    2_147_483_647.0,
    9_223_372_036_854_775_794.0,
    1830.0,
    1e-300,
];

impl Value {
    fn get(&self) -> f64 {
        match self {
            Value::Raw(v) => *v,
            Value::Fraction(n) => f64::from(*n) / 50_000.0,
            Value::Special(i) => SPECIAL[usize::from(*i) % SPECIAL.len()],
        }
    }

    /// Any finite value: what a trace or an engine can carry.
    fn finite(&self) -> f64 {
        let v = self.get();
        if v.is_finite() { v } else { 0.0 }
    }
}

#[derive(Debug, Arbitrary)]
enum In {
    Blank,
    Unsupported,
    Value(Value),
}

#[derive(Debug, Arbitrary)]
struct Serving {
    engine: bool,
    values: [Option<Value>; 11],
    absent: bool,
}

#[derive(Debug, Arbitrary)]
struct Entity {
    gpu: Option<u8>,
    uuid: Option<u8>,
    model: Option<u8>,
    mig: Option<(u8, Option<u8>)>,
    pod: Option<(u8, Option<String>)>,
    node: Option<String>,
    readings: Vec<(u8, In)>,
    throttles: Option<u8>,
    serving: Option<Serving>,
    truth: Option<(u8, u8, Value)>,
    simulated: bool,
    point_clock: bool,
    /// The energy counter read this many ms after the sample's time (before it, negative).
    energy_read_offset_ms: Option<i16>,
}

#[derive(Debug, Arbitrary)]
enum Time {
    Forward(u16),
    Backward(u16),
    Same,
    At(i64),
}

#[derive(Debug, Arbitrary)]
struct Step {
    time: Time,
    entities: Vec<Entity>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    interval: u8,
    model_override: Option<u8>,
    steps: Vec<Step>,
}

fn short(s: &str) -> String {
    s.chars().take(12).collect()
}

fn entity(e: &Entity, taken: i64) -> EntitySample {
    let mut readings = Readings::default();
    for (i, r) in e.readings.iter().take(2 * Field::COUNT) {
        let f = Field::ALL[usize::from(*i) % Field::COUNT];
        readings.set(
            f,
            match r {
                In::Blank => Reading::Blank,
                In::Unsupported => Reading::Unsupported,
                In::Value(v) => Reading::Value(v.get()),
            },
        );
    }
    let serving = e.serving.as_ref().map(|s| {
        let v = |i: usize| s.values[i].as_ref().map(Value::finite);
        ServingSnapshot {
            engine: s.engine.then(|| "vllm".to_string()),
            kv_cache_utilization: v(0),
            running_requests: v(1),
            queued_requests: v(2),
            queue_seconds: v(3),
            prompt_tokens_per_sec: v(4),
            output_tokens_per_sec: v(5),
            batch_size: v(6),
            max_batch_size: v(7),
            steps_per_sec: v(8),
            mfu: v(9),
            mbu: v(10),
            absent_reason: s.absent.then(|| "unreachable".to_string()),
            ..ServingSnapshot::default()
        }
    });
    let (truth_phase, truth_workload, truth_effective_compute) = match &e.truth {
        Some((p, w, v)) => (
            Some(Phase::ALL[usize::from(*p) % Phase::ALL.len()]),
            Some(Workload::ALL[usize::from(*w) % Workload::ALL.len()]),
            Some(v.finite()),
        ),
        None => (None, None, None),
    };
    EntitySample {
        id: EntityId {
            gpu: e.gpu.map(|g| u32::from(g % 4)),
            uuid: e.uuid.map(|u| format!("GPU-{}", u % 4)),
            model: e.model.map(|m| {
                MODELS
                    .get(usize::from(m))
                    .map_or_else(|| format!("GPU model {m}"), |s| (*s).to_string())
            }),
            mig: e.mig.map(|(gi, ci)| MigId {
                gpu_instance: u32::from(gi % 8),
                compute_instance: ci.map(|c| u32::from(c % 2)),
                profile: Some("1g.10gb".to_string()),
                ..MigId::default()
            }),
            pod: e.pod.as_ref().map(|(p, ns)| PodRef {
                pod: format!("pod-{}", p % 3),
                namespace: ns.as_deref().map(short),
                container: None,
            }),
            node: e.node.as_deref().map(short),
            ..EntityId::default()
        },
        readings,
        throttles: e
            .throttles
            .map(|b| Throttles::from_event_bits(u64::from(b))),
        serving,
        truth_phase,
        truth_workload,
        truth_effective_compute,
        simulated: e.simulated,
        sm_clock_is_point: e.point_clock,
        energy_read_at: e
            .energy_read_offset_ms
            .map(|ms| Timestamp(taken.saturating_add(i64::from(ms)))),
        ..EntitySample::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let interval = [
        None,
        Some(1.0),
        Some(0.25),
        Some(0.001),
        Some(30.0),
        Some(0.0),
    ][usize::from(input.interval) % 6];
    let mut checked = Checked::new(DeriveConfig::default(), interval, true);
    if let Some(m) = input.model_override {
        checked.set_model_override(MODELS.get(usize::from(m)).and_then(|n| gpus::lookup(n)));
    }
    let mut t = 1_700_000_000_000i64;
    for step in input.steps.iter().take(256) {
        t = match step.time {
            Time::Forward(ms) => t.saturating_add(i64::from(ms)),
            Time::Backward(ms) => t.saturating_sub(i64::from(ms)),
            Time::Same => t,
            Time::At(at) => at,
        };
        let sample = Sample {
            taken: Timestamp(t),
            entities: step.entities.iter().take(8).map(|e| entity(e, t)).collect(),
        };
        checked.observe(&sample);
    }
    checked.finish();
});

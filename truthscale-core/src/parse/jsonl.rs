//! truthscale's JSONL trace format: one JSON object per line, one entity per object.
//!
//! ```text
//! {"taken":"2024-05-01T12:00:00.000Z","node":"n1","gpu":0,"gpu_util":0.97,"sm_active":0.31}
//! ```
//!
//! `taken` (RFC 3339, any offset) is required. Readings use the [`Field::name`] keys;
//! a missing key or `null` is blank, never zero. Keys this version does not know are not
//! read, so newer traces still load, and are named ([`JsonlParser::unread`]). Blank lines and `#` lines are skipped and counted.
//! An object that gives a key twice is a malformed line: which value is the reading is unknown.

use super::ParseError;
use super::dmon::error;
use crate::model::{
    EntityId, EntitySample, Field, MigId, Phase, PodRef, Reading, Readings, Sample,
    ServingSnapshot, Throttles, Timestamp, Workload,
};
use serde::de::{DeserializeOwned, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Line-at-a-time parser for JSONL traces; every data line is one [`Sample`].
#[derive(Debug)]
pub struct JsonlParser {
    file: String,
    line: usize,
    skipped: u64,
    /// Keys this version does not read, named (the first [`super::names::MAX_UNREAD_NAMES`]).
    unread: super::names::Unread,
}

impl JsonlParser {
    /// A parser for the input named `file`.
    #[must_use]
    pub fn new(file: &str) -> Self {
        JsonlParser {
            file: file.to_owned(),
            line: 0,
            skipped: 0,
            unread: super::names::Unread::default(),
        }
    }

    /// Feed the next line (without its newline); a data line yields its sample at once.
    ///
    /// # Errors
    /// A [`ParseError`] when the line is not a JSON object, lacks `taken`, or has a value
    /// of the wrong type (or an unknown name) for a known key; the message names the key.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Sample>, ParseError> {
        self.line += 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            self.skipped += 1;
            return Ok(None);
        }
        let mut impossible = Vec::new();
        let (sample, left) =
            read_line(t, &mut impossible).map_err(|m| error(&self.file, self.line, m))?;
        for key in left.keys() {
            self.unread.family(key);
        }
        for key in impossible {
            self.unread.impossible(&key);
        }
        Ok(Some(sample))
    }

    /// The keys seen and not read (a newer trace's, or a misspelt one): named, never
    /// dropped in silence.
    #[must_use]
    pub fn unread(&self) -> &super::names::Unread {
        &self.unread
    }

    /// End of input. Always `None`: every line is complete in itself.
    pub fn finish(&mut self) -> Option<Sample> {
        None
    }

    /// Lines skipped as not data: blank lines and `#` lines.
    #[must_use]
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }
}

/// A JSON value read as [`Value`] is, but for an object that gives a key twice, which is
/// refused (at any depth): `serde_json`'s map keeps the last value and drops the first in
/// silence, and a line that says two readings of one field says neither.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a json value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((k, Strict(v))) = map.next_entry::<String, Strict>()? {
            if out.contains_key(&k) {
                return Err(A::Error::custom(format!(
                    "key `{k}` given twice: which value is the reading is unknown"
                )));
            }
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// Remove `key` from `obj`: `None` when missing or `null`.
fn take<T: DeserializeOwned>(obj: &mut Map<String, Value>, key: &str) -> Result<Option<T>, String> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| format!("key `{key}`: {e}")),
    }
}

/// A non-empty string at `key`; an empty one is absent.
fn take_str(obj: &mut Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    Ok(take::<String>(obj, key)?.filter(|s| !s.is_empty()))
}

/// A line's sample, and the keys left that this version does not read; the keys of
/// values refused as impossible go to `impossible`.
fn read_line(
    t: &str,
    impossible: &mut Vec<String>,
) -> Result<(Sample, Map<String, Value>), String> {
    let mut obj = match serde_json::from_str(t) {
        Ok(Strict(Value::Object(m))) => m,
        Ok(_) => return Err("expected a json object".into()),
        // A key given twice: which of its values is the reading is not known.
        Err(e) if e.is_data() => return Err(e.to_string()),
        Err(e) => return Err(format!("invalid json: {e}")),
    };
    let o = &mut obj;
    let ms = read_taken(o)?;
    let id = read_id(o)?;
    let readings = read_readings(o)?;
    let throttles = match take::<Vec<String>>(o, "throttles")? {
        None => None,
        Some(names) => {
            let mut t = Throttles::default();
            if let Some(bad) = names.iter().find(|n| !t.set_by_name(n)) {
                return Err(format!("key `throttles`: unknown reason `{bad}`"));
            }
            Some(t)
        }
    };
    let truth_phase = match take::<String>(o, "truth_phase")? {
        None => None,
        Some(p) => {
            Some(Phase::from_name(&p).ok_or(format!("key `truth_phase`: unknown phase `{p}`"))?)
        }
    };
    let truth_workload = match take::<String>(o, "truth_workload")? {
        None => None,
        Some(w) => Some(
            Workload::from_name(&w)
                .ok_or(format!("key `truth_workload`: unknown workload `{w}`"))?,
        ),
    };
    let e = EntitySample {
        id,
        readings,
        throttles,
        serving: read_serving(o, impossible)?,
        truth_phase,
        truth_workload,
        truth_effective_compute: read_truth_fraction(o)?,
        // "sim" in any case, or "simulated": simulated data is never read as a GPU's.
        simulated: take::<String>(o, "source")?
            .is_some_and(|s| s.eq_ignore_ascii_case("sim") || s.eq_ignore_ascii_case("simulated")),
        sm_clock_is_point: take(o, "sm_clock_point")?.unwrap_or(false),
        counters_held: take(o, "counters_held")?.unwrap_or(false),
        nvlink_wait_links: take(o, "nvlink_wait_links")?.unwrap_or(0),
        energy_read_at: read_time(o, "energy_read_at")?.map(Timestamp),
        // Node mode's lists (processes, allocation, holders' pressure): not in the format.
        ..EntitySample::default()
    };
    Ok((
        Sample {
            taken: Timestamp(ms),
            entities: vec![e],
        },
        obj,
    ))
}

/// The line's `taken` (RFC 3339), in milliseconds since the epoch.
fn read_taken(o: &mut Map<String, Value>) -> Result<i64, String> {
    read_time(o, "taken")?.ok_or_else(|| "missing key `taken`".to_owned())
}

/// The RFC 3339 time under `key`, in Unix milliseconds; `None` when the key is absent.
fn read_time(o: &mut Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    let Some(t) = take::<String>(o, key)? else {
        return Ok(None);
    };
    let t = OffsetDateTime::parse(&t, &Rfc3339).map_err(|e| format!("key `{key}`: {e}"))?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000))
        .map(Some)
        .map_err(|_| format!("key `{key}`: out of range"))
}

/// The entity: the GPU, its MIG instance (whose keys need `mig_gpu_instance`) and its pod.
fn read_id(o: &mut Map<String, Value>) -> Result<EntityId, String> {
    let (gi, ci, profile) = (
        take(o, "mig_gpu_instance")?,
        take(o, "mig_compute_instance")?,
        take_str(o, "mig_profile")?,
    );
    if gi.is_none() {
        if ci.is_some() {
            return Err("key `mig_compute_instance`: needs `mig_gpu_instance`".into());
        }
        if profile.is_some() {
            return Err("key `mig_profile`: needs `mig_gpu_instance`".into());
        }
    }
    let (pod, namespace, container) = (
        take_str(o, "pod")?,
        take_str(o, "namespace")?,
        take_str(o, "container")?,
    );
    Ok(EntityId {
        gpu: take(o, "gpu")?,
        uuid: take(o, "uuid")?,
        model: take(o, "model")?,
        pci_bus_id: take(o, "pci_bus_id")?,
        driver_version: take(o, "driver_version")?,
        // Not in a trace: a replay names GPUs by index and UUID.
        minor: None,
        mig: gi.map(|gpu_instance| MigId {
            uuid: None,
            gpu_instance,
            compute_instance: ci,
            profile,
        }),
        pod: pod.map(|pod| PodRef {
            pod,
            namespace,
            container,
        }),
        node: take(o, "node")?,
    })
}

/// The simulator's true effective compute: a fraction, as the deriver integrates it
/// (`0..=1.5`); anything else is no truth, and an error naming the key.
fn read_truth_fraction(o: &mut Map<String, Value>) -> Result<Option<f64>, String> {
    const KEY: &str = "truth_effective_compute";
    match take::<f64>(o, KEY)? {
        Some(v) if !(v.is_finite() && (0.0..=1.5).contains(&v)) => Err(format!(
            "key `{KEY}`: {v} is not a fraction of the peak (0 to 1.5)"
        )),
        v => Ok(v),
    }
}

/// The keys of [`ServingSnapshot`]: any other key of a line's `serving` is named among the
/// keys not read (`serving.KEY`).
const SERVING_KEYS: [&str; 20] = [
    "engine",
    "kv_cache_utilization",
    "running_requests",
    "queued_requests",
    "queue_seconds",
    "prompt_tokens_per_sec",
    "output_tokens_per_sec",
    "batch_size",
    "max_batch_size",
    "steps_per_sec",
    "mfu",
    "mbu",
    "assumptions",
    "engine_flops_per_sec",
    "engine_bytes_per_sec",
    "engine_mfu",
    "engine_mbu",
    "engine_assumptions",
    "absent_reason",
    "gpus",
];

/// The line's `serving`: a key this version does not read is named (`serving.KEY`), and a
/// value no engine gives (a KV-cache share outside 0..1, a negative count, rate, time or
/// share) is blank and its key (`serving.KEY`) goes to `impossible`, as the live reader
/// refuses it.
fn read_serving(
    o: &mut Map<String, Value>,
    impossible: &mut Vec<String>,
) -> Result<Option<ServingSnapshot>, String> {
    let Some(Value::Object(m)) = o.get("serving") else {
        return take(o, "serving");
    };
    let unknown: Vec<String> = m
        .keys()
        .filter(|k| !SERVING_KEYS.contains(&k.as_str()))
        .map(|k| format!("serving.{k}"))
        .collect();
    let Some(mut s) = take::<ServingSnapshot>(o, "serving")? else {
        return Ok(None);
    };
    for k in unknown {
        o.insert(k, Value::Null);
    }
    let mut refuse = |name: &str, v: &mut Option<f64>, ok: fn(f64) -> bool| {
        if v.is_some_and(|x| !ok(x)) {
            *v = None;
            impossible.push(format!("serving.{name}"));
        }
    };
    refuse("kv_cache_utilization", &mut s.kv_cache_utilization, |x| {
        (0.0..=1.0).contains(&x)
    });
    let non_negative = |x: f64| x >= 0.0;
    for (name, v) in [
        ("running_requests", &mut s.running_requests),
        ("queued_requests", &mut s.queued_requests),
        ("queue_seconds", &mut s.queue_seconds),
        ("prompt_tokens_per_sec", &mut s.prompt_tokens_per_sec),
        ("output_tokens_per_sec", &mut s.output_tokens_per_sec),
        ("batch_size", &mut s.batch_size),
        ("max_batch_size", &mut s.max_batch_size),
        ("steps_per_sec", &mut s.steps_per_sec),
        ("mfu", &mut s.mfu),
        ("mbu", &mut s.mbu),
        ("engine_flops_per_sec", &mut s.engine_flops_per_sec),
        ("engine_bytes_per_sec", &mut s.engine_bytes_per_sec),
        ("engine_mfu", &mut s.engine_mfu),
        ("engine_mbu", &mut s.engine_mbu),
    ] {
        refuse(name, v, non_negative);
    }
    Ok(Some(s))
}

/// Each field's value under its name, and the fields listed as `unavailable` (each
/// unsupported where it has no value).
fn read_readings(o: &mut Map<String, Value>) -> Result<Readings, String> {
    let mut readings = Readings::default();
    for &f in Field::ALL {
        if let Some(v) = take::<f64>(o, f.name())? {
            readings.set_value(f, v);
        }
    }
    let unavailable: BTreeMap<String, String> = take(o, "unavailable")?.unwrap_or_default();
    for k in unavailable.into_keys() {
        match Field::from_name(&k) {
            Some(f) if readings.get(f) == Reading::Blank => readings.set(f, Reading::Unsupported),
            Some(_) => {}
            // A field this version does not know (a newer trace's, or a misspelt one):
            // named among the keys not read, never dropped in silence.
            None => {
                o.insert(format!("unavailable.{k}"), Value::Null);
            }
        }
    }
    Ok(readings)
}

/// The readings that have values, keyed by field name.
struct Values<'a>(&'a Readings);

impl Serialize for Values<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let values = self
            .0
            .iter()
            .filter_map(|(f, r)| Some((f.name(), r.value().filter(|v| v.is_finite())?)));
        s.collect_map(values)
    }
}

/// One trace line, as written.
#[derive(Serialize)]
struct Wire<'a> {
    taken: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uuid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pci_bus_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_gpu_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_compute_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig_profile: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<&'a str>,
    #[serde(flatten)]
    values: Values<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    throttles: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    serving: Option<&'a ServingSnapshot>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    unavailable: BTreeMap<&'static str, &'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truth_phase: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truth_workload: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truth_effective_compute: Option<f64>,
    /// How many NVLink links the transmit wait sums ([`EntitySample::nvlink_wait_links`]),
    /// where it sums any: a replay takes a new baseline where it changes, as the live
    /// source does.
    #[serde(skip_serializing_if = "Option::is_none")]
    nvlink_wait_links: Option<u16>,
    /// When the energy counter was read, where the source stamped it apart from `taken`
    /// ([`EntitySample::energy_read_at`]): a replay divides its deltas as the live source did.
    #[serde(skip_serializing_if = "Option::is_none")]
    energy_read_at: Option<String>,
    /// Whether the SM clock is a reading at one instant, not the window's mean
    /// ([`EntitySample::sm_clock_is_point`]): a replay averages it with the window's start
    /// as the live source's windows were. Written where it is.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    sm_clock_point: bool,
    /// Whether the source held its counters between its own collections
    /// ([`EntitySample::counters_held`], dcgm-exporter's): a replay pairs the energy
    /// counter's deltas with its own moves as the live source did. Written where it is.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    counters_held: bool,
}

/// One trace line for `e` taken at `taken`, without a trailing newline; [`JsonlParser`]
/// reads it back as the same sample.
///
/// Blank readings are omitted and unsupported ones are listed under `unavailable`.
/// The time is written in UTC with millisecond precision, clamped to the years 0–9999
/// that RFC 3339 can express. Not written, so not read back: non-finite values and empty
/// pod, namespace or container names.
#[must_use]
pub fn to_line(taken: Timestamp, e: &EntitySample) -> String {
    let (id, mig, pod) = (&e.id, e.id.mig.as_ref(), e.id.pod.as_ref());
    let wire = Wire {
        taken: rfc3339_ms(taken),
        node: id.node.as_deref(),
        gpu: id.gpu,
        model: id.model.as_deref(),
        uuid: id.uuid.as_deref(),
        pci_bus_id: id.pci_bus_id.as_deref(),
        driver_version: id.driver_version.as_deref(),
        mig_gpu_instance: mig.map(|m| m.gpu_instance),
        mig_compute_instance: mig.and_then(|m| m.compute_instance),
        mig_profile: mig.and_then(|m| m.profile.as_deref()),
        pod: pod.map(|p| p.pod.as_str()),
        namespace: pod.and_then(|p| p.namespace.as_deref()),
        container: pod.and_then(|p| p.container.as_deref()),
        values: Values(&e.readings),
        throttles: e.throttles.map(|t| t.names()),
        serving: e.serving.as_ref(),
        unavailable: e
            .readings
            .iter()
            .filter(|(_, r)| *r == Reading::Unsupported)
            .map(|(f, _)| (f.name(), "unsupported"))
            .collect(),
        source: e.simulated.then_some("sim"),
        truth_phase: e.truth_phase.map(Phase::as_str),
        truth_workload: e.truth_workload.map(Workload::as_str),
        truth_effective_compute: e.truth_effective_compute.filter(|v| v.is_finite()),
        nvlink_wait_links: (e.nvlink_wait_links > 0).then_some(e.nvlink_wait_links),
        energy_read_at: e.energy_read_at.map(rfc3339_ms),
        sm_clock_point: e.sm_clock_is_point,
        counters_held: e.counters_held,
    };
    serde_json::to_string(&wire).unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn rfc3339_ms(t: Timestamp) -> String {
    const MIN_MS: i64 = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
    const MAX_MS: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    let nanos = i128::from(t.0.clamp(MIN_MS, MAX_MS)) * 1_000_000;
    let d = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second(),
        d.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<Sample>, ParseError> {
        let mut p = JsonlParser::new("t.jsonl");
        let mut out = Vec::new();
        for l in text.lines() {
            out.extend(p.push_line(l)?);
        }
        assert_eq!(p.finish(), None);
        Ok(out)
    }

    fn one(line: &str) -> (Timestamp, EntitySample) {
        let mut s = read(line).unwrap();
        assert_eq!(s.len(), 1);
        let s = s.remove(0);
        assert_eq!(s.entities.len(), 1);
        (s.taken, s.entities.into_iter().next().unwrap_or_default())
    }

    fn full() -> EntitySample {
        let mut readings = Readings::default();
        // Short decimals: serde_json without its `float_roundtrip` feature may read a
        // 17-significant-digit number 1 ulp off.
        for (i, &f) in Field::ALL.iter().enumerate() {
            readings.set_value(f, i as f64 * 0.125 + 0.5);
        }
        readings.set(Field::NvlinkRxBytesPerSec, Reading::Unsupported);
        readings.set(Field::NvlinkTxBytesPerSec, Reading::Blank);
        EntitySample {
            allocation: None,
            job: None,
            holder_pressure: Vec::new(),
            id: EntityId {
                gpu: Some(3),
                uuid: Some("GPU-1".into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                pci_bus_id: Some("00000000:37:00.0".into()),
                driver_version: Some("550.54.15".into()),
                minor: None,
                mig: Some(MigId {
                    uuid: None,
                    gpu_instance: 2,
                    compute_instance: Some(0),
                    profile: Some("3g.40gb".into()),
                }),
                pod: Some(PodRef {
                    pod: "p \"q\"".into(),
                    namespace: Some("ns".into()),
                    container: None,
                }),
                node: Some("node-a".into()),
            },
            readings,
            throttles: Some(Throttles {
                thermal: true,
                sw_power_cap: true,
                ..Throttles::default()
            }),
            serving: Some(ServingSnapshot {
                engine: Some("vllm".into()),
                kv_cache_utilization: Some(0.5),
                running_requests: Some(3.0),
                ..ServingSnapshot::default()
            }),
            truth_phase: Some(Phase::MemoryBound),
            truth_workload: Some(Workload::Decode),
            sm_clock_is_point: true,
            counters_held: true,
            nvlink_wait_links: 4,
            energy_read_at: Some(Timestamp(1_714_564_800_131)),
            truth_effective_compute: Some(0.125),
            simulated: true,
            processes: Vec::new(),
        }
    }

    #[test]
    fn round_trip() {
        let e = full();
        let line = to_line(Timestamp(1_714_564_800_123), &e);
        assert!(
            line.starts_with(r#"{"taken":"2024-05-01T12:00:00.123Z","node":"node-a","gpu":3,"#),
            "{line}"
        );
        assert!(
            line.contains(r#""unavailable":{"nvlink_rx_bytes_per_sec":"unsupported"}"#),
            "{line}"
        );
        assert!(
            line.contains(r#""source":"sim""#) && !line.contains("nvlink_tx_bytes"),
            "{line}"
        );
        assert!(
            line.ends_with(
                r#","nvlink_wait_links":4,"energy_read_at":"2024-05-01T12:00:00.131Z","sm_clock_point":true,"counters_held":true}"#
            ),
            "{line}"
        );
        assert!(!line.contains('\n'));
        assert_eq!(one(&line), (Timestamp(1_714_564_800_123), e));

        let bare = EntitySample::default();
        let line = to_line(Timestamp(0), &bare);
        assert_eq!(line, r#"{"taken":"1970-01-01T00:00:00.000Z"}"#);
        assert_eq!(one(&line), (Timestamp(0), bare));
        let before = to_line(Timestamp(-1), &EntitySample::default());
        assert_eq!(one(&before).0, Timestamp(-1));
    }

    #[test]
    fn time_range_is_clamped_to_rfc3339() {
        let at = |ms| to_line(Timestamp(ms), &EntitySample::default());
        assert_eq!(at(i64::MAX), r#"{"taken":"9999-12-31T23:59:59.999Z"}"#);
        assert_eq!(at(i64::MIN), r#"{"taken":"0000-01-01T00:00:00.000Z"}"#);
        assert_eq!(one(&at(i64::MAX)).0, Timestamp(253_402_300_799_999));
        assert_eq!(one(&at(i64::MIN)).0, Timestamp(-62_167_219_200_000));
        // Sub-millisecond digits are dropped toward the past.
        let (t, _) = one(r#"{"taken":"1969-12-31T23:59:59.9999Z"}"#);
        assert_eq!(t, Timestamp(-1));
    }

    #[test]
    fn null_missing_and_zero() {
        let (_, e) = one(
            r#"{"taken":"2024-01-01T00:00:00Z","gpu_util":null,"sm_active":0,"tensor_active":0.0}"#,
        );
        assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Blank);
        assert_eq!(e.readings.get(Field::SmActive), Reading::Value(0.0));
        assert_eq!(e.readings.get(Field::TensorActive), Reading::Value(0.0));
        assert_eq!(e.readings.get(Field::DramActive), Reading::Blank);
        assert_eq!(
            (e.throttles, e.serving, e.truth_phase, e.simulated),
            (None, None, None, false)
        );
    }

    #[test]
    fn unavailable_is_unsupported() {
        let (_, e) = one(
            r#"{"taken":"2024-01-01T00:00:00Z","gpu_util":0.5,"unavailable":{"sm_active":"no dcgm","gpu_util":"x","future_field":"y"}}"#,
        );
        assert_eq!(e.readings.get(Field::SmActive), Reading::Unsupported);
        assert_eq!(
            e.readings.get(Field::ReportedUtil),
            Reading::Value(0.5),
            "a value wins"
        );
        // A field this version does not know is named, as an unknown key is.
        let mut p = JsonlParser::new("t.jsonl");
        p.push_line(
            r#"{"taken":"2024-01-01T00:00:00Z","unavailable":{"future_field":"y","sm_active":"x"}}"#,
        )
        .unwrap();
        assert_eq!(
            p.unread().families.iter().collect::<Vec<_>>(),
            ["unavailable.future_field"]
        );
    }

    /// A misspelt key of `serving` is named, never dropped in silence; a KV-cache share of
    /// 95 (a percent) and a negative queue are blank and counted as impossible, never a
    /// KV cache at 9500 % and a queue of -4.
    #[test]
    fn serving_keys_not_read_are_named_and_impossible_values_counted() {
        let mut p = JsonlParser::new("t.jsonl");
        let s = p
            .push_line(
                r#"{"taken":"2024-01-01T00:00:00Z","serving":{"engine":"vllm","kv_cache_utilisation":0.9,"kv_cache_utilization":95,"queued_requests":-4,"running_requests":3}}"#,
            )
            .unwrap()
            .unwrap();
        let serving = s.entities[0].serving.clone().unwrap();
        assert_eq!(serving.kv_cache_utilization, None);
        assert_eq!(serving.queued_requests, None);
        assert_eq!(serving.running_requests, Some(3.0));
        let u = p.unread();
        assert_eq!(
            u.families.iter().collect::<Vec<_>>(),
            ["serving.kv_cache_utilisation"]
        );
        assert_eq!(
            u.impossible,
            BTreeMap::from([
                ("serving.kv_cache_utilization".to_string(), 1),
                ("serving.queued_requests".to_string(), 1)
            ])
        );
        // Every key of a snapshot is one this version reads.
        let full = ServingSnapshot {
            engine: Some("e".into()),
            kv_cache_utilization: Some(0.5),
            running_requests: Some(1.0),
            queued_requests: Some(1.0),
            queue_seconds: Some(1.0),
            prompt_tokens_per_sec: Some(1.0),
            output_tokens_per_sec: Some(1.0),
            batch_size: Some(1.0),
            max_batch_size: Some(1.0),
            steps_per_sec: Some(1.0),
            mfu: Some(0.1),
            mbu: Some(0.1),
            assumptions: Some("a".into()),
            engine_flops_per_sec: Some(1.0),
            engine_bytes_per_sec: Some(1.0),
            engine_mfu: Some(0.1),
            engine_mbu: Some(0.1),
            engine_assumptions: Some("a".into()),
            absent_reason: Some("r".into()),
            gpus: Some(1),
        };
        let Value::Object(keys) = serde_json::to_value(full).unwrap() else {
            panic!("an object")
        };
        let mut keys: Vec<&str> = keys.keys().map(String::as_str).collect();
        let mut known = SERVING_KEYS.to_vec();
        keys.sort_unstable();
        known.sort_unstable();
        assert_eq!(keys, known);
    }

    #[test]
    fn go_v01_line_offsets_and_unknown_keys() {
        let text = "# truthscale trace\n\n\
            {\"taken\":\"2024-01-01T01:00:00.5+01:00\",\"node\":\"n\",\"gpu\":1,\"model\":\"NVIDIA A100-SXM4-80GB\",\
            \"gpu_util\":1,\"memory_used_bytes\":1073741824,\"throttles\":[\"power\",\"hw_slowdown\"],\
            \"serving\":{\"engine\":\"vllm\",\"queued_requests\":4,\"new_thing\":1},\"source\":\"dcgm\",\
            \"truth_phase\":\"prefill\",\"future\":{\"x\":[1,2]}}\n";
        let mut p = JsonlParser::new("t.jsonl");
        let mut s = Vec::new();
        for l in text.lines() {
            s.extend(p.push_line(l).unwrap());
        }
        assert_eq!(p.skipped_lines(), 2);
        assert_eq!(s.len(), 1);
        assert_eq!(
            p.unread().families.iter().collect::<Vec<_>>(),
            ["future", "serving.new_thing"]
        );
        assert_eq!(s[0].taken, Timestamp(1_704_067_200_500));
        let e = &s[0].entities[0];
        assert_eq!((e.id.gpu, e.id.node.as_deref()), (Some(1), Some("n")));
        assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Value(1.0));
        assert_eq!(
            e.readings.get(Field::MemUsedBytes),
            Reading::Value(1_073_741_824.0)
        );
        assert_eq!(
            e.throttles,
            Some(Throttles {
                power: true,
                hw_slowdown: true,
                ..Throttles::default()
            })
        );
        let serving = e.serving.as_ref().unwrap();
        assert_eq!(
            (serving.engine.as_deref(), serving.queued_requests),
            (Some("vllm"), Some(4.0))
        );
        assert_eq!(
            (e.truth_phase, e.simulated),
            (Some(Phase::ComputeBound), false)
        );
    }

    /// A trace marks simulated data with `source` "sim", in any case, or "simulated"; any
    /// other source is a GPU's.
    #[test]
    fn simulated_data_is_marked_whatever_its_case() {
        for (source, simulated) in [
            ("sim", true),
            ("SIM", true),
            ("Simulated", true),
            ("nvml", false),
            ("simulator-x", false),
        ] {
            let line = format!(r#"{{"taken":"2024-01-01T00:00:00Z","gpu":0,"source":"{source}"}}"#);
            let mut p = JsonlParser::new("t.jsonl");
            let s = p.push_line(&line).unwrap().unwrap();
            assert_eq!(s.entities[0].simulated, simulated, "{source}");
        }
    }

    #[test]
    fn bad_lines_name_line_and_key() {
        let cases = [
            (
                r#"{"taken":"2024-01-01T00:00:00Z","gpu":"zero"}"#,
                "t.jsonl:2: key `gpu`: invalid type: string \"zero\"",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","gpu":-1}"#,
                "t.jsonl:2: key `gpu`: invalid value",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","sm_active":"0.5"}"#,
                "t.jsonl:2: key `sm_active`: invalid type",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","throttles":["hot"]}"#,
                "t.jsonl:2: key `throttles`: unknown reason `hot`",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","throttles":"power"}"#,
                "t.jsonl:2: key `throttles`: invalid type",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","truth_phase":"busy"}"#,
                "t.jsonl:2: key `truth_phase`: unknown phase `busy`",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","truth_effective_compute":7}"#,
                "t.jsonl:2: key `truth_effective_compute`: 7 is not a fraction",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","truth_effective_compute":-0.1}"#,
                "t.jsonl:2: key `truth_effective_compute`: -0.1 is not a fraction",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","serving":{"batch_size":"x"}}"#,
                "t.jsonl:2: key `serving`: invalid type",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","unavailable":["gpu_util"]}"#,
                "t.jsonl:2: key `unavailable`: invalid type",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","mig_compute_instance":1}"#,
                "t.jsonl:2: key `mig_compute_instance`: needs",
            ),
            (
                r#"{"taken":"2024-01-01 00:00:00"}"#,
                "t.jsonl:2: key `taken`: ",
            ),
            (
                r#"{"taken":1704067200}"#,
                "t.jsonl:2: key `taken`: invalid type",
            ),
            (r#"{"gpu":0}"#, "t.jsonl:2: missing key `taken`"),
            (r#"{"taken":null}"#, "t.jsonl:2: missing key `taken`"),
            (r#"[1,2]"#, "t.jsonl:2: expected a json object"),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","gpu_util":0.5,"gpu_util":0.9}"#,
                "t.jsonl:2: key `gpu_util` given twice: which value is the reading is unknown",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","serving":{"batch_size":4,"batch_size":8}}"#,
                "t.jsonl:2: key `batch_size` given twice",
            ),
            (
                r#"{"taken":"2024-01-01T00:00:00Z","#,
                "t.jsonl:2: invalid json: ",
            ),
        ];
        for (line, want) in cases {
            let got = read(&format!("# header\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(got.starts_with(want), "{got} / {want}");
        }
    }
}

//! The observable instruments: one per catalog family that has an OTLP name, whose
//! callbacks read the latest published [`Snapshot`] (never sampling). The first callback of a
//! collection pins one snapshot and the others read that pinned one, so one export never
//! mixes two ticks.

use crate::publish::Snapshot;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    AsyncInstrument, Meter, ObservableCounter, ObservableGauge, ObservableUpDownCounter,
};
use opentelemetry_semantic_conventions::attribute as sa;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use truthscale_core::catalog::{self, MetricId, OtelInstrument, Scope};
use truthscale_core::exposition;

/// The values of one pinned snapshot, per catalog family: indexed by
/// [`MetricId::index`](truthscale_core::catalog::MetricId::index), empty for a family
/// without an OTLP name.
#[derive(Debug, Default)]
struct Pinned {
    /// The tick pinned, and whether it was served stale (a stale copy replaces its tick's
    /// values: every source down).
    tick: (u64, bool),
    families: Vec<Vec<(Vec<KeyValue>, f64)>>,
    /// The counter series' readings and resets, to keep each observed sum from going down.
    monotonic: Monotonic,
}

/// Each counter series' latest reading and what it counted before its resets, by family and
/// attributes. A counter read lower than before was reset (a driver reload zeroes the
/// device's volatile ECC counts; a GPU forgotten and found again is counted afresh), and the
/// OTLP sum must not go down: the SDK would send a negative delta, and a cumulative sum may
/// fall only with a new start time, which an observable instrument cannot give. So from a
/// reset on, the series observes its reading plus everything it counted before, as
/// Prometheus' `increase` reads a reset counter. `/metrics` shows the readings as they are.
#[derive(Debug, Default)]
struct Monotonic {
    /// (family index, attributes) → (its GPU's UUID, the latest reading, the offset).
    series: HashMap<(usize, String), (Option<String>, f64, f64)>,
}

impl Monotonic {
    /// Add each counter point of `families` (fresh readings) its series' offset, a reading
    /// below the series' previous one first adding that one to the offset. A series of a
    /// GPU no longer listed (`listed`, by UUID) is forgotten; one absent while its GPU is
    /// listed (stale, its counters carried) is kept.
    fn apply(&mut self, families: &mut [Vec<(Vec<KeyValue>, f64)>], listed: &[&str]) {
        let mut seen = HashMap::with_capacity(self.series.len());
        for (m, points) in catalog::ALL.iter().zip(families.iter_mut()) {
            if !is_counter(m) {
                continue;
            }
            for (attrs, v) in points.iter_mut() {
                let key = (m.id.index(), format!("{attrs:?}"));
                let (gpu, last, mut offset) = self
                    .series
                    .remove(&key)
                    .unwrap_or_else(|| (gpu_of(attrs), *v, 0.0));
                if *v < last {
                    offset += last;
                }
                seen.insert(key, (gpu, *v, offset));
                *v += offset;
            }
        }
        // What was not read this time: kept while its GPU is listed.
        seen.extend(
            self.series
                .drain()
                .filter(|(_, (gpu, ..))| gpu.as_deref().is_some_and(|g| listed.contains(&g))),
        );
        self.series = seen;
    }
}

/// Whether family `m` is an OTLP counter (a monotonic sum).
fn is_counter(m: &catalog::MetricDesc) -> bool {
    m.otel
        .is_some_and(|o| o.instrument == OtelInstrument::Counter)
}

/// The UUID of the GPU a data point is of (a MIG instance's, its GPU's), if it is a GPU's.
fn gpu_of(attrs: &[KeyValue]) -> Option<String> {
    let key = catalog::otel_attribute("uuid").unwrap_or("uuid");
    let id = attrs
        .iter()
        .find(|kv| kv.key.as_str() == key)?
        .value
        .as_str();
    id.split("/mig/").next().map(str::to_string)
}

#[derive(Debug)]
struct Shared {
    rx: watch::Receiver<Arc<Snapshot>>,
    pinned: Mutex<Pinned>,
    /// Under delta temporality: a GPU that went stale keeps its counters' last values (no
    /// increase) while it is listed, so that the SDK keeps their baselines. It drops a
    /// series missing from one collection, and the series' next value would then be sent
    /// whole, as if all of it had accrued in one interval.
    carry_counters: bool,
}

impl Shared {
    /// Pin the latest snapshot (first callback of a collection).
    fn pin(&self) {
        let snap = self.rx.borrow().clone();
        let Ok(mut p) = self.pinned.lock() else {
            return;
        };
        if p.tick == (snap.tick, snap.stale) && !p.families.is_empty() {
            return;
        }
        p.tick = (snap.tick, snap.stale);
        let previous = std::mem::replace(&mut p.families, vec![Vec::new(); catalog::ALL.len()]);
        if snap.tick == 0 {
            return;
        }
        // Each GPU's driver version, for every data point of it (`hw.driver_version`).
        let drivers: HashMap<&str, &str> = snap
            .gpus
            .iter()
            .filter_map(|g| {
                let id = &g.window.id;
                Some((id.uuid.as_deref()?, id.driver_version.as_deref()?))
            })
            .filter(|(_, d)| !d.is_empty())
            .collect();
        exposition::for_each_value(&snap.gpus, &snap.identity, &snap.status, |m, labels, v| {
            let Some(o) = m.otel else { return };
            let attrs = point_attributes(m.scope == Scope::Gpu, o.fixed, labels, &drivers);
            p.families[m.id.index()].push((attrs, v));
        });
        let listed: Vec<&str> = snap
            .gpus
            .iter()
            .filter_map(|g| g.window.id.uuid.as_deref())
            .collect();
        let Pinned {
            families,
            monotonic,
            ..
        } = &mut *p;
        monotonic.apply(families, &listed);
        if self.carry_counters {
            let stale: Vec<&str> = snap
                .gpus
                .iter()
                .filter(|g| !g.up)
                .filter_map(|g| g.window.id.uuid.as_deref())
                .collect();
            carry_stale_counters(&stale, previous, families);
        }
    }

    fn observe_f64(&self, id: MetricId, obs: &dyn AsyncInstrument<f64>) {
        if let Ok(p) = self.pinned.lock()
            && let Some(points) = p.families.get(id.index())
        {
            for (attrs, v) in points {
                obs.observe(*v, attrs);
            }
        }
    }

    fn observe_i64(&self, id: MetricId, obs: &dyn AsyncInstrument<i64>) {
        if let Ok(p) = self.pinned.lock()
            && let Some(points) = p.families.get(id.index())
        {
            for (attrs, v) in points {
                // Memory sizes: integral byte counts, exactly representable.
                obs.observe(v.round() as i64, attrs);
            }
        }
    }
}

/// The counters' points of `previous` whose GPU (by UUID) is in `stale` (listed, not read
/// within the stale period, not yet forgotten), added to `families` as they were.
fn carry_stale_counters(
    stale: &[&str],
    previous: Vec<Vec<(Vec<KeyValue>, f64)>>,
    families: &mut [Vec<(Vec<KeyValue>, f64)>],
) {
    if stale.is_empty() {
        return;
    }
    let of_stale = |attrs: &[KeyValue]| gpu_of(attrs).is_some_and(|g| stale.contains(&g.as_str()));
    for (m, (family, points)) in catalog::ALL.iter().zip(families.iter_mut().zip(previous)) {
        if is_counter(m) {
            family.extend(points.into_iter().filter(|(a, _)| of_stale(a)));
        }
    }
}

/// A data point's attributes: a GPU's fixed ones (`hw.type`, `hw.vendor`), the instrument's
/// own, and each label by its OTLP name; for a GPU, its driver version where known. A MIG
/// instance is a component of its own: `hw.id` is its GPU's UUID and instance
/// (`GPU-…/mig/3`), and `hw.parent` its GPU's UUID. `hw.state` takes the conventions'
/// values (`unavailable` is `failed`).
fn point_attributes(
    gpu: bool,
    fixed: &[(&'static str, &'static str)],
    labels: &[(&'static str, &str)],
    drivers: &HashMap<&str, &str>,
) -> Vec<KeyValue> {
    let mut attrs: Vec<KeyValue> = Vec::with_capacity(labels.len() + 6);
    if gpu {
        attrs.extend(
            catalog::OTEL_GPU_FIXED
                .iter()
                .map(|(k, v)| KeyValue::new(*k, *v)),
        );
    }
    attrs.extend(fixed.iter().map(|(k, v)| KeyValue::new(*k, *v)));
    let label = |k: &str| labels.iter().find(|(l, _)| *l == k).map(|(_, v)| *v);
    let uuid = label("uuid");
    let mig = label("mig_instance").filter(|m| !m.is_empty());
    for (l, val) in labels {
        let key = catalog::otel_attribute(l).unwrap_or(l);
        let val = match (*l, mig, uuid) {
            ("uuid", Some(m), Some(u)) => format!("{u}/mig/{m}"),
            ("state", _, _) if *val == "unavailable" => "failed".to_owned(),
            _ => (*val).to_owned(),
        };
        attrs.push(KeyValue::new(key, val));
    }
    if gpu {
        if let (Some(_), Some(u)) = (mig, uuid) {
            attrs.push(KeyValue::new(sa::HW_PARENT, u.to_owned()));
        }
        if label("driver_version").is_none()
            && let Some(d) = uuid.and_then(|u| drivers.get(u))
        {
            attrs.push(KeyValue::new(sa::HW_DRIVER_VERSION, (*d).to_owned()));
        }
    }
    attrs
}

/// The callback of a float instrument: the first registered pins the snapshot for the whole
/// collection.
fn f64_callback(
    s: Arc<Shared>,
    id: MetricId,
    first: bool,
) -> impl Fn(&dyn AsyncInstrument<f64>) + Send + Sync + 'static {
    move |obs| {
        if first {
            s.pin();
        }
        s.observe_f64(id, obs);
    }
}

/// The callback of an integer instrument, as [`f64_callback`].
fn i64_callback(
    s: Arc<Shared>,
    id: MetricId,
    first: bool,
) -> impl Fn(&dyn AsyncInstrument<i64>) + Send + Sync + 'static {
    move |obs| {
        if first {
            s.pin();
        }
        s.observe_i64(id, obs);
    }
}

/// One registered instrument (kept so that its callback stays registered).
#[derive(Debug)]
enum Instrument {
    Gauge(ObservableGauge<f64>),
    Counter(ObservableCounter<f64>),
    UpDown(ObservableUpDownCounter<i64>),
}

/// The instruments [`register`] created; dropping it does not unregister them (the SDK
/// has no unregistration), it only lets them go.
#[derive(Debug)]
pub struct Registration {
    _instruments: Vec<Instrument>,
}

/// Register one observable instrument per catalog family that has an OTLP name on
/// `meter`, in catalog order, reading values from the sampler's snapshots
/// (`Sampler::subscribe`); each callback reads its family's values by [`MetricId`].
///
/// For a service that already has an OpenTelemetry `MeterProvider`: its own reader and
/// exporter then carry truthscale's metrics, with the values `/metrics` shows.
#[must_use]
pub fn register(meter: &Meter, rx: watch::Receiver<Arc<Snapshot>>) -> Registration {
    register_with(meter, rx, false)
}

/// [`register`], for a meter whose exporter asks for delta temporality (`delta`): a GPU that
/// went stale then keeps its counters' last values while it is listed (no increase), so that
/// when it is read again the increase over the gap is sent once, not its whole total. (The
/// SDK forgets a delta series missing from one collection.) A GPU forgotten after it
/// stopped starts again from its counters' totals.
#[must_use]
pub fn register_with(
    meter: &Meter,
    rx: watch::Receiver<Arc<Snapshot>>,
    delta: bool,
) -> Registration {
    let shared = Arc::new(Shared {
        rx,
        pinned: Mutex::new(Pinned::default()),
        carry_counters: delta,
    });
    let families = catalog::ALL
        .iter()
        .filter_map(|m| Some((m, m.otel?)))
        .enumerate();
    let mut instruments = Vec::with_capacity(catalog::ALL.len());
    for (i, (m, o)) in families {
        let s = Arc::clone(&shared);
        let id = m.id;
        // The first registered callback pins the snapshot for the whole collection.
        let first = i == 0;
        let inst = match o.instrument {
            OtelInstrument::Gauge => Instrument::Gauge(
                meter
                    .f64_observable_gauge(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(f64_callback(s, id, first))
                    .build(),
            ),
            OtelInstrument::Counter => Instrument::Counter(
                meter
                    .f64_observable_counter(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(f64_callback(s, id, first))
                    .build(),
            ),
            OtelInstrument::UpDownCounter => Instrument::UpDown(
                meter
                    .i64_observable_up_down_counter(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(i64_callback(s, id, first))
                    .build(),
            ),
        };
        instruments.push(inst);
    }
    Registration {
        _instruments: instruments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(attrs: &[KeyValue], k: &str) -> Option<String> {
        attrs
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn a_mig_instance_is_its_own_component_under_its_gpu_with_the_driver_version() {
        let drivers = HashMap::from([("GPU-1", "580.65.06")]);
        let labels = [
            ("gpu", "0"),
            ("uuid", "GPU-1"),
            ("mig_instance", "3"),
            ("mig_profile", "3g.40gb"),
        ];
        let a = point_attributes(true, &[], &labels, &drivers);
        assert_eq!(get(&a, "hw.id").as_deref(), Some("GPU-1/mig/3"));
        assert_eq!(get(&a, "hw.parent").as_deref(), Some("GPU-1"));
        assert_eq!(get(&a, "hw.driver_version").as_deref(), Some("580.65.06"));
        assert_eq!(get(&a, "hw.type").as_deref(), Some("gpu"));
        assert_eq!(get(&a, "truthscale.gpu.mig.instance").as_deref(), Some("3"));
        // The whole GPU: its own UUID, no parent.
        let a = point_attributes(true, &[], &[("uuid", "GPU-1")], &drivers);
        assert_eq!(get(&a, "hw.id").as_deref(), Some("GPU-1"));
        assert_eq!(get(&a, "hw.parent"), None);
        assert_eq!(get(&a, "hw.driver_version").as_deref(), Some("580.65.06"));
        // No driver version known: none made up.
        let a = point_attributes(true, &[], &[("uuid", "GPU-2")], &drivers);
        assert_eq!(get(&a, "hw.driver_version"), None);
    }

    #[test]
    fn health_states_take_the_conventions_values() {
        let none = HashMap::new();
        let state = |s: &str| {
            let a = point_attributes(true, &[], &[("uuid", "GPU-1"), ("state", s)], &none);
            get(&a, "hw.state")
        };
        assert_eq!(state("ok").as_deref(), Some("ok"));
        assert_eq!(state("degraded").as_deref(), Some("degraded"));
        assert_eq!(state("unavailable").as_deref(), Some("failed"));
    }

    /// Under delta temporality a stale GPU's counters keep their last points (a MIG instance's
    /// too, by its GPU), and nothing else is carried: not a gauge, not a GPU that is read,
    /// not one forgotten (absent from the stale list).
    #[test]
    fn a_stale_gpus_counters_are_carried() {
        let find = |name: &str| {
            catalog::ALL
                .iter()
                .position(|m| m.otel.is_some_and(|o| o.name == name))
                .unwrap_or_else(|| panic!("{name}"))
        };
        let (energy, power) = (find("hw.energy"), find("hw.power"));
        assert_eq!(
            catalog::ALL[energy].otel.map(|o| o.instrument),
            Some(OtelInstrument::Counter)
        );
        let point = |uuid: &str, v: f64| (vec![KeyValue::new("hw.id", uuid.to_owned())], v);
        let mut previous = vec![Vec::new(); catalog::ALL.len()];
        previous[energy] = vec![
            point("GPU-a", 100.0),
            point("GPU-b", 200.0),
            point("GPU-c/mig/1", 5.0),
            point("GPU-d", 7.0),
        ];
        previous[power] = vec![point("GPU-a", 300.0)];
        let mut families = vec![Vec::new(); catalog::ALL.len()];
        families[energy] = vec![point("GPU-b", 250.0)];
        carry_stale_counters(&["GPU-a", "GPU-c"], previous, &mut families);
        assert_eq!(
            families[energy],
            [
                point("GPU-b", 250.0),
                point("GPU-a", 100.0),
                point("GPU-c/mig/1", 5.0)
            ]
        );
        assert!(families[power].is_empty());
    }

    /// A counter read lower than before was reset: from then on its reading plus what it
    /// counted before is observed, so the sum never goes down (5, 7, reset to 2, 3 is observed
    /// 5, 7, 9, 10). A series absent while its GPU is listed keeps its offset; one of a GPU no
    /// longer listed is forgotten and starts again from its reading. Gauges are left as read.
    #[test]
    fn a_reset_counter_is_observed_without_going_down() {
        let find = |name: &str| {
            catalog::ALL
                .iter()
                .position(|m| m.otel.is_some_and(|o| o.name == name))
                .unwrap_or_else(|| panic!("{name}"))
        };
        let (errors, power) = (find("hw.errors"), find("hw.power"));
        let point = |uuid: &str, v: f64| (vec![KeyValue::new("hw.id", uuid.to_owned())], v);
        let mut m = Monotonic::default();
        let mut step = |readings: &[(&str, f64)], gauge: f64, listed: &[&str]| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[errors] = readings.iter().map(|(u, v)| point(u, *v)).collect();
            families[power] = vec![point("GPU-a", gauge)];
            m.apply(&mut families, listed);
            assert_eq!(families[power], [point("GPU-a", gauge)]);
            families[errors]
                .iter()
                .map(|(_, v)| *v)
                .collect::<Vec<f64>>()
        };
        let both = ["GPU-a", "GPU-b"];
        assert_eq!(
            step(&[("GPU-a", 5.0), ("GPU-b/mig/1", 4.0)], 300.0, &both),
            [5.0, 4.0]
        );
        assert_eq!(
            step(&[("GPU-a", 7.0), ("GPU-b/mig/1", 4.0)], 200.0, &both),
            [7.0, 4.0]
        );
        assert_eq!(
            step(&[("GPU-a", 2.0), ("GPU-b/mig/1", 1.0)], 100.0, &both),
            [9.0, 5.0]
        );
        assert_eq!(step(&[("GPU-a", 3.0)], 100.0, &both), [10.0]);
        // GPU-b's instance was kept while its GPU was listed; GPU-a's series go once it is not.
        assert_eq!(step(&[("GPU-b/mig/1", 2.0)], 100.0, &["GPU-b"]), [6.0]);
        assert_eq!(
            step(&[("GPU-a", 1.0), ("GPU-b/mig/1", 2.0)], 100.0, &both),
            [1.0, 6.0]
        );
    }
}

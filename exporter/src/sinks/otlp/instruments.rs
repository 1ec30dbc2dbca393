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
    /// The families whose callbacks ran since the last pin: a callback whose family already
    /// ran is the first of the next collection. (Not the first registered family's: a View
    /// may drop any instrument, and the SDK then never calls its callback.)
    observed: Vec<bool>,
    /// The counter series' readings and resets, to keep each observed sum from going down.
    monotonic: Monotonic,
}

/// Each counter series' latest reading and what it counted before its resets, by family and
/// attributes. A counter read lower than before was reset (a driver reload zeroes the
/// device's volatile ECC counts; a GPU forgotten and found again, or an attribution given up
/// and taken again, is counted afresh), and the OTLP sum must not go down: the SDK would
/// send a negative delta, and a cumulative sum may fall only with a new start time, which
/// an observable instrument cannot give. So from a reset on, the series observes its reading
/// plus everything it counted before, as Prometheus' `increase` reads a reset counter.
/// `/metrics` shows the readings as they are.
///
/// A series not read is kept while its GPU is listed but not read (stale: its counters come
/// back), and otherwise for [`Monotonic::RETAIN_MS`] after it was last read: long enough for
/// a GPU forgotten and found again, or a pod's attribution that comes back, to go on
/// counting up; short enough that the series of pods come and gone are not kept for the
/// process's life.
#[derive(Debug, Default)]
struct Monotonic {
    /// (family index, attributes) → the series.
    series: HashMap<(usize, String), Series>,
}

/// One counter series in [`Monotonic`].
#[derive(Debug)]
struct Series {
    /// Its GPU's UUID (a MIG instance's, its GPU's), if it is a GPU's.
    gpu: Option<String>,
    /// The latest reading.
    last: f64,
    /// What it counted before its resets.
    offset: f64,
    /// When it was last read, or last kept for a GPU listed and not read (the snapshot's
    /// Unix milliseconds).
    kept_ms: i64,
    /// Under delta temporality: left out of the latest collection (not read), so the SDK
    /// forgot it and sends its next value whole.
    left_out: bool,
    /// Under delta temporality: the value observed for it in its latest collection, whose
    /// difference from the one before the SDK sends.
    observed: f64,
    /// Under delta temporality: its count (reading plus offset) up to which its changes were
    /// delivered to the collector, and its latest point's count while that point's delivery
    /// is not known.
    delivered: f64,
    pending: Option<f64>,
}

impl Series {
    /// Its point for reading `v`, a reading below the previous one first adding that one to
    /// the offset. Under delta temporality, the value whose difference from the one the SDK
    /// holds (none where the series is new or was left out) is all that was counted since
    /// the count last delivered: a change whose export failed or was skipped is sent again.
    fn point(&mut self, v: f64, delta: bool) -> f64 {
        if v < self.last {
            self.offset += self.last;
        }
        self.last = v;
        let count = v + self.offset;
        if !delta {
            return count;
        }
        let owed = count - self.delivered;
        self.observed = if std::mem::take(&mut self.left_out) {
            owed
        } else {
            self.observed + owed
        };
        self.pending = Some(count);
        self.observed
    }
}

impl Monotonic {
    /// How long a series not read is kept once its GPU is read again or no longer listed.
    const RETAIN_MS: i64 = 3_600_000;

    /// Add each counter point of `families` (fresh readings, of the snapshot taken at
    /// `now_ms`) its series' offset, a reading below the series' previous one first adding
    /// that one to the offset. A series not read is kept while its GPU is in `unread`
    /// (listed, not read: stale), else for [`Monotonic::RETAIN_MS`] after it was kept last,
    /// and has no point in `families`: nothing was measured, so nothing is sent (never a
    /// change of 0).
    ///
    /// With `delta` (delta temporality), where the SDK sends each point's difference from
    /// the series' point in the collection before and sends a series it did not have there
    /// whole: each point is chosen so that what the SDK sends is all the series counted
    /// since its count last delivered ([`Series::point`]): a series read again after it was
    /// left out sends its increase over the gap once, and a change whose export was lost
    /// ([`Monotonic::settle`]) goes with the next. A new
    /// series of a counter the device kept before it was read
    /// ([`MetricId::counted_by_device`]) starts from its first reading, its baseline (the one
    /// in `first`, noted at the tick that read it, else this one), so the first delta holds
    /// no history from before and all that was counted since.
    fn apply(
        &mut self,
        families: &mut [Vec<(Vec<KeyValue>, f64)>],
        unread: &[&str],
        now_ms: i64,
        (delta, mut first): (bool, Option<&mut SeriesValues>),
    ) {
        self.settle(true);
        let mut seen = HashMap::with_capacity(self.series.len());
        for (m, points) in catalog::ALL.iter().zip(families.iter_mut()) {
            if !is_counter(m) {
                continue;
            }
            let baseline = delta && m.id.counted_by_device();
            for (attrs, v) in points.iter_mut() {
                let key = (m.id.index(), format!("{attrs:?}"));
                let mut s = self.series.remove(&key).unwrap_or_else(|| {
                    // Its first reading (noted at the tick that read it), or this one; a
                    // reading below it was reset since, and is counted from the reset.
                    let noted = first.as_deref_mut().and_then(|f| f.remove(&key));
                    let base = noted.unwrap_or(*v);
                    Series {
                        gpu: gpu_of(attrs),
                        last: *v,
                        offset: if baseline && *v >= base { -base } else { 0.0 },
                        kept_ms: now_ms,
                        left_out: true,
                        observed: 0.0,
                        delivered: 0.0,
                        pending: None,
                    }
                });
                s.kept_ms = now_ms;
                *v = s.point(*v, delta);
                seen.insert(key, s);
            }
        }
        // What was not read this time: no point.
        for (key, mut s) in self.series.drain() {
            if s.gpu.as_deref().is_some_and(|g| unread.contains(&g)) {
                s.kept_ms = now_ms;
            } else if now_ms.saturating_sub(s.kept_ms) > Self::RETAIN_MS {
                continue;
            }
            s.left_out = delta;
            s.pending = None;
            seen.insert(key, s);
        }
        self.series = seen;
    }

    /// Under delta temporality, whether the latest collection's points reached the
    /// collector: if so, each series' pending count is delivered; if not (the export failed
    /// or was skipped), the next point of each sends that change again.
    fn settle(&mut self, delivered: bool) {
        for s in self.series.values_mut() {
            if let Some(count) = s.pending.take()
                && delivered
            {
                s.delivered = count;
            }
        }
    }

    /// Under delta temporality, a collection with no reading since the one before: every
    /// counter point is taken out of `families`, and each series sends its increase once it
    /// is read again ([`Monotonic::apply`]).
    fn leave_out(&mut self, families: &mut [Vec<(Vec<KeyValue>, f64)>]) {
        self.settle(true);
        for (m, points) in catalog::ALL.iter().zip(families.iter_mut()) {
            if is_counter(m) {
                points.clear();
            }
        }
        for s in self.series.values_mut() {
            s.left_out = true;
            s.pending = None;
        }
    }
}

/// Whether family `m` is an OTLP counter (a monotonic sum).
fn is_counter(m: &catalog::MetricDesc) -> bool {
    m.otel
        .is_some_and(|o| o.instrument == OtelInstrument::Counter)
}

/// Every value of `snap` with an OTLP name, by catalog family, as OTLP data points.
fn families_of(snap: &Snapshot) -> Vec<Vec<(Vec<KeyValue>, f64)>> {
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
    let mut families = vec![Vec::new(); catalog::ALL.len()];
    exposition::for_each_value(&snap.gpus, &snap.identity, &snap.status, |m, labels, v| {
        let Some(o) = m.otel else { return };
        let attrs = point_attributes(m.scope == Scope::Gpu, o.fixed, labels, &drivers);
        families[m.id.index()].push((attrs, v));
    });
    families
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
    /// Delta temporality: [`Monotonic`] chooses each counter point so that what the SDK
    /// sends is what the series counted since its count last delivered.
    delta: bool,
    /// Under delta temporality, the baselines [`Shared::note_first_readings`] noted.
    first: Mutex<FirstReadings>,
    /// Whether the latest export reached the collector.
    delivery: Arc<Delivery>,
}

/// Whether the latest export reached the collector, as the exporter said it
/// ([`CountingExporter`](super::exporter::CountingExporter)): under delta temporality a
/// change whose export failed or was skipped is sent again with the next
/// ([`Monotonic::settle`]). Not known (a service's own exporter): taken as delivered.
#[derive(Debug, Default)]
pub(crate) struct Delivery {
    /// The latest export did not reach the collector.
    lost: std::sync::atomic::AtomicBool,
}

impl Delivery {
    /// The export of the latest collection reached the collector (`true`) or not.
    pub(crate) fn set(&self, delivered: bool) {
        self.lost
            .store(!delivered, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the latest export was lost, forgetting it.
    fn take_lost(&self) -> bool {
        self.lost.swap(false, std::sync::atomic::Ordering::Relaxed)
    }
}

/// A value per counter series: (family index, attributes) → value.
type SeriesValues = HashMap<(usize, String), f64>;

/// The first readings of the device's own counters, by GPU read for the first time
/// ([`Shared::note_first_readings`]).
#[derive(Debug, Default)]
struct FirstReadings {
    /// The GPUs (UUIDs) whose first tick was noted.
    gpus: std::collections::HashSet<String>,
    /// (family index, attributes) → the series' first reading, until its first collection.
    values: SeriesValues,
}

impl Shared {
    /// At the first callback of a collection (the first ever, or one whose family already
    /// ran since the last pin), pin the latest snapshot for the whole collection.
    fn begin(&self, id: MetricId) {
        let first = match self.pinned.lock() {
            Ok(mut p) => {
                let n = catalog::ALL.len();
                p.observed.resize(n, false);
                let again = p.observed.get(id.index()).copied().unwrap_or(false);
                if again {
                    p.observed.fill(false);
                }
                if let Some(o) = p.observed.get_mut(id.index()) {
                    *o = true;
                }
                again || p.families.is_empty()
            }
            Err(_) => false,
        };
        if first {
            self.pin();
        }
    }

    /// Pin the latest snapshot (first callback of a collection).
    fn pin(&self) {
        let snap = self.rx.borrow().clone();
        let Ok(mut p) = self.pinned.lock() else {
            return;
        };
        if self.delivery.take_lost() {
            p.monotonic.settle(false);
        }
        if p.tick == (snap.tick, snap.stale) && !p.families.is_empty() {
            if self.delta {
                // No reading since the collection before: no change to send, not one of 0.
                let Pinned {
                    families,
                    monotonic,
                    ..
                } = &mut *p;
                monotonic.leave_out(families);
            }
            return;
        }
        p.tick = (snap.tick, snap.stale);
        if snap.tick == 0 {
            p.families = vec![Vec::new(); catalog::ALL.len()];
            return;
        }
        p.families = families_of(&snap);
        // The GPUs listed but not read within the stale period (all, in a tick served
        // stale).
        let stale: Vec<&str> = snap
            .gpus
            .iter()
            .filter(|g| !g.up)
            .filter_map(|g| g.window.id.uuid.as_deref())
            .collect();
        let Pinned {
            families,
            monotonic,
            ..
        } = &mut *p;
        let mut first = self.first.lock();
        let first = first.as_mut().ok().map(|f| &mut f.values);
        monotonic.apply(families, &stale, snap.taken_unix_ms, (self.delta, first));
    }

    /// Under delta temporality, from every tick (not only the collections): the first
    /// reading of each series of a counter the device kept before it was read
    /// ([`MetricId::counted_by_device`]) of a GPU read for the first time, its baseline, so
    /// that the first delta holds what was counted from the sidecar's first reading on,
    /// not from the first collection's (up to an export interval later).
    fn note_first_readings(&self, snap: &Snapshot) {
        if snap.tick == 0 || snap.stale {
            return;
        }
        let Ok(mut first) = self.first.lock() else {
            return;
        };
        let new: Vec<&str> = (snap.gpus.iter().filter(|g| g.up))
            .filter_map(|g| g.window.id.uuid.as_deref())
            .filter(|u| !first.gpus.contains(*u))
            .collect();
        if new.is_empty() {
            return;
        }
        for (m, points) in catalog::ALL.iter().zip(families_of(snap)) {
            if !(is_counter(m) && m.id.counted_by_device()) {
                continue;
            }
            for (attrs, v) in points {
                if gpu_of(&attrs).is_some_and(|g| new.contains(&g.as_str())) {
                    let key = (m.id.index(), format!("{attrs:?}"));
                    first.values.entry(key).or_insert(v);
                }
            }
        }
        first.gpus.extend(new.into_iter().map(str::to_owned));
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
        // An empty Prometheus label is an absent one; an empty OTLP attribute is a value
        // (OTel's common spec): not sent.
        if val.is_empty() {
            continue;
        }
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
        // `hw.id` is required on `hw.*` metrics: where the source read no UUID (a `dcgmi
        // dmon` or `nvidia-smi` capture without one), the GPU's index, unique within this
        // exporter's resource.
        if uuid.is_none_or(str::is_empty)
            && let Some(i) = label("gpu").filter(|i| !i.is_empty())
        {
            let id = match mig {
                Some(m) => format!("gpu/{i}/mig/{m}"),
                None => format!("gpu/{i}"),
            };
            attrs.push(KeyValue::new(sa::HW_ID, id));
        }
        if label("driver_version").is_none_or(str::is_empty)
            && let Some(d) = uuid.and_then(|u| drivers.get(u))
        {
            attrs.push(KeyValue::new(sa::HW_DRIVER_VERSION, (*d).to_owned()));
        }
    }
    attrs
}

/// The callback of a float instrument: the first of a collection pins the snapshot for the
/// whole collection ([`Shared::begin`]).
fn f64_callback(
    s: Arc<Shared>,
    id: MetricId,
) -> impl Fn(&dyn AsyncInstrument<f64>) + Send + Sync + 'static {
    move |obs| {
        s.begin(id);
        s.observe_f64(id, obs);
    }
}

/// The callback of an integer instrument, as [`f64_callback`].
fn i64_callback(
    s: Arc<Shared>,
    id: MetricId,
) -> impl Fn(&dyn AsyncInstrument<i64>) + Send + Sync + 'static {
    move |obs| {
        s.begin(id);
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
    /// Under delta temporality, the task noting first readings ([`watch_first_readings`]).
    first_readings: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(task) = &self.first_readings {
            task.abort();
        }
    }
}

/// Under delta temporality, a task noting each tick's first readings
/// ([`Shared::note_first_readings`]) where a Tokio runtime runs; without one, a series'
/// baseline is its reading at its first collection.
fn watch_first_readings(shared: &Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let shared = Arc::clone(shared);
    let mut rx = shared.rx.clone();
    Some(runtime.spawn(async move {
        loop {
            let snap = rx.borrow_and_update().clone();
            shared.note_first_readings(&snap);
            if rx.changed().await.is_err() {
                break;
            }
        }
    }))
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

/// [`register`], for a meter whose exporter asks for delta temporality (`delta`): a counter
/// series not read (a stale GPU's, a forgotten GPU's, a pod's whose attribution was given
/// up) sends no point, never a change of 0 for time nothing measured; when it is read again
/// (a stale GPU's while it is listed, any other within the hour after it was last read) its
/// one point is the increase over the gap, not its whole total. (The SDK forgets a delta
/// series missing from one collection and would send its next value whole.) A counter the
/// device kept before it was read starts from its first reading: called within a Tokio
/// runtime, the one of the tick that first read its GPU (a task notes them), else its
/// reading at its first collection.
#[must_use]
pub fn register_with(
    meter: &Meter,
    rx: watch::Receiver<Arc<Snapshot>>,
    delta: bool,
) -> Registration {
    register_delivered(meter, rx, delta, Arc::default())
}

/// [`register_with`], told by the exporter whether each export reached the collector
/// (`delivery`): under delta temporality a change whose export failed or was skipped is
/// sent again with the next.
pub(crate) fn register_delivered(
    meter: &Meter,
    rx: watch::Receiver<Arc<Snapshot>>,
    delta: bool,
    delivery: Arc<Delivery>,
) -> Registration {
    let shared = Arc::new(Shared {
        rx,
        pinned: Mutex::new(Pinned::default()),
        delta,
        first: Mutex::default(),
        delivery,
    });
    let first_readings = if delta {
        watch_first_readings(&shared)
    } else {
        None
    };
    let families = catalog::ALL.iter().filter_map(|m| Some((m, m.otel?)));
    let mut instruments = Vec::with_capacity(catalog::ALL.len());
    for (m, o) in families {
        let s = Arc::clone(&shared);
        let id = m.id;
        let inst = match o.instrument {
            OtelInstrument::Gauge => Instrument::Gauge(
                meter
                    .f64_observable_gauge(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(f64_callback(s, id))
                    .build(),
            ),
            OtelInstrument::Counter => Instrument::Counter(
                meter
                    .f64_observable_counter(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(f64_callback(s, id))
                    .build(),
            ),
            OtelInstrument::UpDownCounter => Instrument::UpDown(
                meter
                    .i64_observable_up_down_counter(o.name)
                    .with_unit(o.unit)
                    .with_description(m.help)
                    .with_callback(i64_callback(s, id))
                    .build(),
            ),
        };
        instruments.push(inst);
    }
    Registration {
        _instruments: instruments,
        first_readings,
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

    /// A GPU whose source read no UUID still has the `hw.id` the conventions require: its
    /// index (`gpu/0`, and `gpu/0/mig/3` for an instance); none is made up for a series
    /// that is no GPU's.
    #[test]
    fn a_gpu_without_a_uuid_is_identified_by_its_index() {
        let none = HashMap::new();
        let a = point_attributes(true, &[], &[("gpu", "0")], &none);
        assert_eq!(get(&a, "hw.id").as_deref(), Some("gpu/0"));
        let a = point_attributes(true, &[], &[("gpu", "1"), ("mig_instance", "3")], &none);
        assert_eq!(get(&a, "hw.id").as_deref(), Some("gpu/1/mig/3"));
        assert_eq!(get(&a, "hw.parent"), None);
        let a = point_attributes(true, &[], &[("gpu", "0"), ("uuid", "GPU-1")], &none);
        assert_eq!(get(&a, "hw.id").as_deref(), Some("GPU-1"));
        let a = point_attributes(false, &[], &[("gpu", "0")], &none);
        assert_eq!(get(&a, "hw.id"), None);
    }

    /// An empty label (the info family's `pci_bus_id=""` or `driver_version=""` where the
    /// source tells none) is absent in Prometheus; in OTLP an empty string is a value: not
    /// sent, and the driver version known from another family is added instead.
    #[test]
    fn empty_labels_are_not_sent_as_attributes() {
        let drivers = HashMap::from([("GPU-1", "580.65.06")]);
        let labels = [
            ("uuid", "GPU-1"),
            ("pci_bus_id", ""),
            ("driver_version", ""),
        ];
        let a = point_attributes(true, &[], &labels, &drivers);
        assert!(a.iter().all(|kv| !kv.value.to_string().is_empty()), "{a:?}");
        assert_eq!(get(&a, "hw.driver_version").as_deref(), Some("580.65.06"));
        assert_eq!(get(&a, "hw.id").as_deref(), Some("GPU-1"));
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

    /// The snapshot is pinned at the first callback of each collection, whichever family
    /// it is: with the info family dropped by a View (its callback never called), the
    /// power family's callback pins each collection's tick, once (the first registered
    /// family's callback alone used to pin, so nothing was ever observed).
    #[test]
    fn each_collection_pins_its_snapshot_whichever_family_comes_first() {
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        let s = Shared {
            rx,
            pinned: Mutex::new(Pinned::default()),
            delta: false,
            first: Mutex::default(),
            delivery: Arc::default(),
        };
        let id = |name: &str| catalog::ALL[family(name)].id;
        let (power, energy) = (id("hw.power"), id("hw.energy"));
        let tick = |s: &Shared| s.pinned.lock().unwrap().tick.0;
        tx.send_replace(Arc::new(Snapshot {
            tick: 1,
            ..Snapshot::default()
        }));
        s.begin(power);
        s.begin(energy);
        assert_eq!(tick(&s), 1);
        // A new tick within the collection is not taken up by its later callbacks.
        tx.send_replace(Arc::new(Snapshot {
            tick: 2,
            ..Snapshot::default()
        }));
        s.begin(energy);
        assert_eq!(tick(&s), 2, "energy ran again: a new collection");
        tx.send_replace(Arc::new(Snapshot {
            tick: 3,
            ..Snapshot::default()
        }));
        s.begin(power);
        assert_eq!(tick(&s), 2, "power's first run in this collection");
        s.begin(power);
        assert_eq!(tick(&s), 3);
    }

    /// The catalog index of the family whose OTLP name is `name`.
    fn family(name: &str) -> usize {
        catalog::ALL
            .iter()
            .position(|m| m.otel.is_some_and(|o| o.name == name))
            .unwrap_or_else(|| panic!("{name}"))
    }

    /// A counter series not read has no point, under delta temporality as under cumulative:
    /// nothing was measured, so no change (not even 0) is sent for that time. Under delta,
    /// the SDK sends a series missing from the collection before whole, so a series read
    /// again is shifted to its increase over the gap: GPU-a 100 J, stale, then 130 J sends
    /// 30 (the SDK's delta from nothing), then 140 J sends 40 (its delta 10). Kept while its
    /// GPU is stale (a MIG instance's by its GPU), any other for an hour after it was read;
    /// past that a series found again is new. Gauges are left as read.
    #[test]
    fn counters_not_read_have_no_point_and_send_their_increase_when_read_again() {
        let (energy, power) = (family("hw.energy"), family("hw.power"));
        assert_eq!(
            catalog::ALL[energy].otel.map(|o| o.instrument),
            Some(OtelInstrument::Counter)
        );
        let point = |uuid: &str, v: f64| (vec![KeyValue::new("hw.id", uuid.to_owned())], v);
        let mut m = Monotonic::default();
        let mut step = |energies: &[(&str, f64)], stale: &[&str], minute: i64| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[energy] = energies.iter().map(|(u, v)| point(u, *v)).collect();
            families[power] = vec![point("GPU-a", 300.0)];
            m.apply(&mut families, stale, minute * 60_000, (true, None));
            assert_eq!(families[power], [point("GPU-a", 300.0)]);
            families
                .swap_remove(energy)
                .into_iter()
                .map(|(a, v)| (a[0].value.as_str().into_owned(), v))
                .collect::<Vec<_>>()
        };
        let named = |points: &[(&str, f64)]| -> Vec<(String, f64)> {
            points.iter().map(|(u, v)| ((*u).to_owned(), *v)).collect()
        };
        let all = [
            ("GPU-a", 100.0),
            ("GPU-b", 200.0),
            ("GPU-c/mig/1", 5.0),
            ("GPU-d", 7.0),
        ];
        assert_eq!(step(&all, &[], 0), named(&all));
        // GPU-a and GPU-c stale, GPU-d not read: only GPU-b has a point.
        let stale = ["GPU-a", "GPU-c"];
        assert_eq!(
            step(&[("GPU-b", 250.0)], &stale, 1),
            named(&[("GPU-b", 250.0)])
        );
        // Read again: each sends its increase over the gap once, GPU-b goes on.
        let back = [("GPU-a", 130.0), ("GPU-b", 260.0), ("GPU-c/mig/1", 9.0)];
        let sent = [("GPU-a", 30.0), ("GPU-b", 260.0), ("GPU-c/mig/1", 4.0)];
        assert_eq!(step(&back, &[], 2), named(&sent));
        let next = [("GPU-a", 140.0), ("GPU-b", 270.0), ("GPU-d", 12.0)];
        let sent = [("GPU-a", 40.0), ("GPU-b", 270.0), ("GPU-d", 5.0)];
        assert_eq!(step(&next, &[], 3), named(&sent));
        // GPU-d not read for more than the hour after minute 3: found again, it is new.
        assert_eq!(
            step(&[("GPU-b", 280.0)], &[], 64),
            named(&[("GPU-b", 280.0)])
        );
        assert_eq!(step(&[("GPU-d", 20.0)], &[], 65), named(&[("GPU-d", 20.0)]));
    }

    /// Under delta temporality, a collection with no reading since the one before (the
    /// same tick pinned again) sends no counter point: no change of 0 for time nothing
    /// read. The next reading sends the increase since the last point once: 100 J, no
    /// reading, 160 J sends 60 (the SDK's delta from nothing), 170 J sends 70 (its delta 10).
    #[test]
    fn a_collection_without_a_new_reading_sends_no_change() {
        let (energy, power) = (family("hw.energy"), family("hw.power"));
        let point = |v: f64| (vec![KeyValue::new("hw.id", "GPU-a")], v);
        let mut m = Monotonic::default();
        let mut read = |joules: f64, minute: i64| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[energy] = vec![point(joules)];
            families[power] = vec![point(300.0)];
            m.apply(&mut families, &[], minute * 60_000, (true, None));
            families
        };
        let mut families = read(100.0, 0);
        assert_eq!(families[energy], [point(100.0)]);
        m.leave_out(&mut families);
        assert_eq!(families[energy], []);
        assert_eq!(families[power], [point(300.0)], "gauges are kept");
        let mut read = |joules: f64, minute: i64| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[energy] = vec![point(joules)];
            m.apply(&mut families, &[], minute * 60_000, (true, None));
            families.swap_remove(energy)
        };
        assert_eq!(read(160.0, 1), [point(60.0)]);
        assert_eq!(read(170.0, 2), [point(70.0)]);
    }

    /// Under delta temporality, a change whose export did not reach the collector (failed,
    /// or skipped while backing off) is sent again with the next: 100 J, 130 J (its export
    /// lost), 150 J sends 50 (the SDK's delta 180 − 130), then 160 J sends 10. Lost, then
    /// the GPU stale: read again at 170 J, it sends the 70 since the last delivered count.
    #[test]
    fn a_change_whose_export_was_lost_is_sent_again() {
        let energy = family("hw.energy");
        let point = |uuid: &str, v: f64| (vec![KeyValue::new("hw.id", uuid.to_owned())], v);
        let mut m = Monotonic::default();
        let collect = |m: &mut Monotonic, readings: &[(&str, f64)], stale: &[&str]| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[energy] = readings.iter().map(|(u, v)| point(u, *v)).collect();
            m.apply(&mut families, stale, 0, (true, None));
            families[energy]
                .iter()
                .map(|(_, v)| *v)
                .collect::<Vec<f64>>()
        };
        assert_eq!(
            collect(&mut m, &[("GPU-a", 100.0), ("GPU-b", 100.0)], &[]),
            [100.0, 100.0]
        );
        assert_eq!(
            collect(&mut m, &[("GPU-a", 130.0), ("GPU-b", 130.0)], &[]),
            [130.0, 130.0]
        );
        m.settle(false);
        assert_eq!(collect(&mut m, &[("GPU-a", 150.0)], &["GPU-b"]), [180.0]);
        assert_eq!(
            collect(&mut m, &[("GPU-a", 160.0), ("GPU-b", 170.0)], &[]),
            [190.0, 70.0]
        );
    }

    /// Under delta temporality, a counter the device kept starts from the first reading
    /// noted at the tick that read it, not from its reading at the first collection: 5
    /// errors at the first tick, 8 at the first collection sends 3. One reset in between (7
    /// noted, 2 at the first collection) sends the 2 counted since the reset.
    #[test]
    fn a_device_counter_starts_from_its_first_reading() {
        let errors = family("hw.errors");
        let attrs = |uuid: &str| vec![KeyValue::new("hw.id", uuid.to_owned())];
        let mut first = HashMap::from([
            ((errors, format!("{:?}", attrs("GPU-a"))), 5.0),
            ((errors, format!("{:?}", attrs("GPU-b"))), 7.0),
        ]);
        let mut m = Monotonic::default();
        let mut families = vec![Vec::new(); catalog::ALL.len()];
        families[errors] = vec![(attrs("GPU-a"), 8.0), (attrs("GPU-b"), 2.0)];
        m.apply(&mut families, &[], 0, (true, Some(&mut first)));
        let sent: Vec<f64> = families[errors].iter().map(|(_, v)| *v).collect();
        assert_eq!(sent, [3.0, 2.0]);
        assert!(first.is_empty(), "each baseline is used once");
    }

    /// Under delta temporality, a counter the device kept before it was read starts at 0
    /// (its baseline), and one reset while it was not read sends its reading, as
    /// Prometheus' `increase` reads a reset: 7 volatile errors (0 sent), stale, then 2 after
    /// a driver reload sends 2, then 3 sends 3 (its delta 1).
    #[test]
    fn a_counter_reset_while_not_read_sends_its_reading_once() {
        let errors = family("hw.errors");
        let point = |v: f64| (vec![KeyValue::new("hw.id", "GPU-a")], v);
        let mut m = Monotonic::default();
        let mut step = |reading: Option<f64>, stale: &[&str], minute: i64| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[errors] = reading.map(point).into_iter().collect();
            m.apply(&mut families, stale, minute * 60_000, (true, None));
            families[errors]
                .iter()
                .map(|(_, v)| *v)
                .collect::<Vec<f64>>()
        };
        assert_eq!(step(Some(7.0), &[], 0), [0.0]);
        assert_eq!(step(None, &["GPU-a"], 1), [0.0; 0]);
        assert_eq!(step(Some(2.0), &[], 2), [2.0]);
        assert_eq!(step(Some(3.0), &[], 3), [3.0]);
    }

    /// A counter read lower than before was reset: from then on its reading plus what it
    /// counted before is observed, so the sum never goes down (5, 7, reset to 2, 3 is observed
    /// 5, 7, 9, 10). A series not read keeps its offset while its GPU is stale, and for an
    /// hour after it was last read otherwise; past that it starts again from its reading.
    /// Gauges are left as read.
    #[test]
    fn a_reset_counter_is_observed_without_going_down() {
        let (errors, power) = (family("hw.errors"), family("hw.power"));
        let point = |uuid: &str, v: f64| (vec![KeyValue::new("hw.id", uuid.to_owned())], v);
        let mut m = Monotonic::default();
        let mut step = |readings: &[(&str, f64)], gauge: f64, stale: &[&str], minute: i64| {
            let mut families = vec![Vec::new(); catalog::ALL.len()];
            families[errors] = readings.iter().map(|(u, v)| point(u, *v)).collect();
            families[power] = vec![point("GPU-a", gauge)];
            m.apply(&mut families, stale, minute * 60_000, (false, None));
            assert_eq!(families[power], [point("GPU-a", gauge)]);
            families[errors]
                .iter()
                .map(|(_, v)| *v)
                .collect::<Vec<f64>>()
        };
        let both = [("GPU-a", 5.0), ("GPU-b/mig/1", 4.0)];
        assert_eq!(step(&both, 300.0, &[], 0), [5.0, 4.0]);
        assert_eq!(
            step(&[("GPU-a", 7.0), ("GPU-b/mig/1", 4.0)], 200.0, &[], 1),
            [7.0, 4.0]
        );
        assert_eq!(
            step(&[("GPU-a", 2.0), ("GPU-b/mig/1", 1.0)], 100.0, &[], 2),
            [9.0, 5.0]
        );
        // GPU-b stale for two hours: its instance's series is kept throughout.
        assert_eq!(step(&[("GPU-a", 3.0)], 100.0, &["GPU-b"], 3), [10.0]);
        assert_eq!(step(&[("GPU-a", 3.0)], 100.0, &["GPU-b"], 123), [10.0]);
        // GPU-a not read for the hour after minute 123 (unlisted, or its attribution given
        // up): kept; GPU-b's instance read again, reset, within the hour after it was kept.
        assert_eq!(step(&[("GPU-b/mig/1", 2.0)], 100.0, &[], 150), [6.0]);
        assert_eq!(step(&[("GPU-a", 1.0)], 100.0, &[], 182), [11.0]);
        // Past the hour: GPU-b's instance starts again from its reading.
        assert_eq!(step(&[("GPU-a", 1.0)], 100.0, &[], 244), [11.0]);
        assert_eq!(
            step(&[("GPU-a", 2.0), ("GPU-b/mig/1", 1.0)], 100.0, &[], 245),
            [12.0, 1.0]
        );
        assert_eq!(m.series.len(), 2);
    }
}

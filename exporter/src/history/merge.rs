//! Prometheus' series merged into samples per step: DCGM series through the core's
//! dcgm-exporter scrape mapping, truthscale's own through the catalog.

use super::api::{Matrix, PromValue};
use super::{Family, own_metric};
use std::collections::{BTreeMap, HashMap};
use truthscale_core::catalog::Raw;
use truthscale_core::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, PodRef, Sample, Timestamp,
};
use truthscale_core::parse::dcgm_text::Scrape;
use truthscale_core::parse::names::Units;

/// What one result series is, fixed once per chunk.
#[derive(Debug)]
pub(super) enum SeriesMap {
    /// A dcgm-exporter series: mapped per point by the parser's [`Scrape`].
    Dcgm {
        name: String,
        labels: Vec<(String, String)>,
    },
    /// One of truthscale's gauges: the entity (an index into the chunk's
    /// [`Chunk::entities`]) and the reading it is.
    Own { entity: u32, raw: Raw },
    /// A holder-pod signal on a dcgm-exporter series' labels: put on the entity those
    /// labels name, once the timestamp's DCGM series have named it.
    Holder {
        field: Field,
        labels: Vec<(String, String)>,
    },
}

/// What a series without the cluster label is filed under.
pub(crate) const NO_CLUSTER: &str = "(no cluster)";

/// The labels dcgm-exporter's node may be in, in the parser's order.
const DCGM_NODE_LABELS: &[&str] = &["Hostname", "hostname", "node", "instance"];

/// The cluster a series names in `cluster_label`, when that is given;
/// `(no cluster)` when the series lacks it.
pub(super) fn cluster_of<'a>(
    labels: &'a BTreeMap<String, String>,
    cluster_label: Option<&str>,
) -> Option<&'a str> {
    let label = cluster_label?;
    Some(
        labels
            .get(label)
            .map(String::as_str)
            .filter(|c| !c.is_empty())
            .unwrap_or(NO_CLUSTER),
    )
}

/// The node a series of truthscale's own names as the report keys it: its `node` label,
/// `CLUSTER/NODE` with `--cluster-label` ([`cluster_node`]); `None` without either.
pub(crate) fn own_node(
    labels: &BTreeMap<String, String>,
    cluster_label: Option<&str>,
) -> Option<String> {
    let node = labels
        .get("node")
        .filter(|n| !n.is_empty())
        .map(String::as_str);
    match cluster_of(labels, cluster_label) {
        Some(c) => Some(cluster_node(c, node)),
        None => node.map(str::to_owned),
    }
}

/// `CLUSTER/NODE`: a node named with its cluster (`CLUSTER` alone without a node).
pub(crate) fn cluster_node(cluster: &str, node: Option<&str>) -> String {
    match node {
        Some(n) => format!("{cluster}/{n}"),
        None => cluster.to_owned(),
    }
}

/// The entity truthscale's own labels name; empty values are absent.
pub(super) fn own_entity(labels: &BTreeMap<String, String>) -> EntityId {
    let get = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
    let num = |k: &str| get(k).and_then(|v| v.parse::<u32>().ok());
    EntityId {
        gpu: num("gpu"),
        uuid: get("uuid"),
        model: get("model"),
        pci_bus_id: None,
        driver_version: None,
        minor: None,
        mig: num("mig_instance").map(|gpu_instance| MigId {
            gpu_instance,
            compute_instance: None,
            profile: get("mig_profile"),
            ..MigId::default()
        }),
        pod: get("pod").map(|pod| PodRef {
            pod,
            namespace: get("namespace"),
            container: get("container"),
        }),
        // Without a node label, the scrape target stands in for it: gpu 0 of two
        // exporters is two GPUs.
        node: get("node").or_else(|| get("instance")),
    }
}

/// A dcgm-exporter series' labels, its node named `CLUSTER/NODE` with `cluster`.
pub(super) fn dcgm_labels(
    metric: &BTreeMap<String, String>,
    cluster: Option<&str>,
) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> =
        metric.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(c) = cluster {
        let node = DCGM_NODE_LABELS
            .iter()
            .find_map(|l| labels.iter().position(|(k, v)| k == l && !v.is_empty()));
        match node {
            Some(i) => labels[i].1 = cluster_node(c, Some(&labels[i].1)),
            None => labels.push(("Hostname".to_owned(), cluster_node(c, None))),
        }
    }
    labels
}

/// One chunk's series and points `(time ms, series index, value)`.
#[derive(Debug, Default)]
pub(super) struct Chunk {
    /// The chunk's first and last evaluation times: points outside (from a misbehaving
    /// server) are left out, counted in `outside`, so times keep increasing from chunk to
    /// chunk.
    pub(super) bounds: Option<(i64, i64)>,
    /// Points of the answers outside `bounds`: not read, counted ([`Refused::outside`]).
    pub(super) outside: u64,
    /// The step between evaluation times (0: not known), which lets the points be put in
    /// time order by counting, without a sort.
    pub(super) step: i64,
    /// `--cluster-label`: a series' node is named `CLUSTER/NODE`.
    pub(super) cluster_label: Option<String>,
    pub(super) series: Vec<SeriesMap>,
    pub(super) points: Vec<(i64, u32, f64)>,
    /// Where each series' points start in `points` (they come series by series).
    pub(super) starts: Vec<usize>,
    /// The entities truthscale's own series name, each once (found by key once per series
    /// and chunk, not per point).
    pub(super) entities: Vec<EntityId>,
    pub(super) entity_index: HashMap<EntityKey, u32>,
}

impl Chunk {
    pub(super) fn add(&mut self, family: Family, name: &str, matrix: &Matrix) {
        for s in &matrix.result {
            let cluster = cluster_of(&s.metric, self.cluster_label.as_deref()).map(str::to_owned);
            let map = match family {
                Family::DcgmExporter => SeriesMap::Dcgm {
                    name: name.to_owned(),
                    labels: dcgm_labels(&s.metric, cluster.as_deref()),
                },
                Family::Truthscale => {
                    let Some(raw) = own_metric(name) else {
                        continue;
                    };
                    let mut id = own_entity(&s.metric);
                    if let Some(c) = &cluster {
                        id.node = Some(cluster_node(c, id.node.as_deref()));
                    }
                    let next = u32::try_from(self.entities.len()).unwrap_or(u32::MAX);
                    let entity = *self.entity_index.entry(id.key()).or_insert(next);
                    if entity == next {
                        self.entities.push(id);
                    }
                    SeriesMap::Own { entity, raw }
                }
            };
            self.push_series(map, matrix.values_of(s));
        }
    }

    /// Add a series' points inside the chunk, as series `map`; those outside are counted
    /// in `outside`. A value that is no number is NaN ([`PromValue`]): kept, for
    /// [`Chunk::feed`] to leave blank and count.
    pub(super) fn push_series(&mut self, map: SeriesMap, values: &[(f64, PromValue)]) {
        let Ok(index) = u32::try_from(self.series.len()) else {
            return;
        };
        self.series.push(map);
        self.starts.push(self.points.len());
        for &(t, PromValue(v)) in values {
            let t = millis(t);
            if self.bounds.is_none_or(|(a, b)| (a..=b).contains(&t)) {
                self.points.push((t, index, v));
            } else {
                self.outside += 1;
            }
        }
    }

    /// Hand `each` the points of each timestamp with any, as [`for_each_time`].
    #[cfg(test)]
    pub(super) fn for_each_time(&mut self, each: impl FnMut(&[(i64, u32, f64)])) {
        for_each_time(&mut self.points, &self.starts, self.bounds, self.step, each);
    }

    /// Hand `f` the samples, one per timestamp with at least one value, in time order;
    /// one sample is built at a time, in place of the previous one. Returns what was not
    /// read: the values that are not finite or no number (left blank), the points outside
    /// the chunk, and the DCGM readings refused for an ambiguous unit (percent or 0..1), by
    /// family.
    ///
    /// `units` are the units decided by the chunks before (the percent-or-ratio families
    /// decided once for the whole read, whatever its chunks), and hold this chunk's after.
    pub(super) fn feed(self, units: &mut Units, mut f: impl FnMut(&Sample)) -> Refused {
        let Chunk {
            bounds,
            outside,
            step,
            series,
            mut points,
            entities,
            starts,
            ..
        } = self;
        let mut builder = Builder::new(entities.len());
        builder.scrape.set_units(std::mem::take(units));
        let mut non_finite = 0;
        for_each_time(&mut points, &starts, bounds, step, |group| {
            non_finite += group
                .iter()
                .filter(|&&(_, i, v)| {
                    !v.is_finite()
                        && matches!(
                            series.get(i as usize),
                            Some(SeriesMap::Own { .. } | SeriesMap::Dcgm { .. })
                        )
                })
                .count() as u64;
            let sample = builder.build(Timestamp(group[0].0), group, &series, &entities);
            if !sample.entities.is_empty() {
                f(sample);
            }
        });
        *units = builder.scrape.take_units();
        let unread = builder.scrape.take_unread();
        Refused {
            non_finite,
            outside,
            ambiguous: unread.ambiguous,
            unnamed: unread.unnamed,
            disagreeing: unread.disagreeing,
            sentinels: unread.sentinels.values().sum(),
            impossible: unread.impossible.values().sum(),
        }
    }
}

/// What a chunk's answers held that was not read as a reading.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Refused {
    /// Values of GPU series (truthscale's own or DCGM's) that are not finite, or no number
    /// at all (`"n/a"`): left blank.
    pub(super) non_finite: u64,
    /// Points the answers gave outside the chunk's times (a misbehaving server's): not
    /// read.
    pub(super) outside: u64,
    /// DCGM readings refused for an ambiguous unit, by family.
    pub(super) ambiguous: BTreeMap<String, u64>,
    /// DCGM readings of series that name no GPU (no gpu or UUID label), by
    /// family: not read.
    pub(super) unnamed: BTreeMap<String, u64>,
    /// DCGM readings that disagreed with another series of the same GPU at the same time,
    /// by family: left blank.
    pub(super) disagreeing: BTreeMap<String, u64>,
    /// DCGM readings that were one of its blank sentinels: left blank.
    pub(super) sentinels: u64,
    /// DCGM readings no GPU gives (negative free memory, a clock-event bitmask that is no
    /// whole number): left blank.
    pub(super) impossible: u64,
}

/// `(seconds × 1000).round() as i64` (halves away from zero, saturating, NaN 0) without a
/// call to libm's `round`, which is not inlined: a report converts every point's time.
#[inline]
pub(super) fn millis(seconds: f64) -> i64 {
    let x = seconds * 1000.0;
    let whole = x as i64;
    // Exact: the fraction of a double, and a truncated double back as one.
    let fraction = x - whole as f64;
    if fraction >= 0.5 {
        whole.saturating_add(1)
    } else if fraction <= -0.5 {
        whole.saturating_sub(1)
    } else {
        whole
    }
}

/// Hand `each` the points of each timestamp with any, in time order, in series order
/// within one. The points come series by series (series `i`'s from `starts[i]`), each in
/// time order: when every point is on the grid of `step` over `bounds` and each series'
/// times increase, a merge walks the series' cursors step by step without copying the
/// points (a sort into a copy had doubled a chunk's memory); otherwise a sort.
pub(super) fn for_each_time(
    points: &mut [(i64, u32, f64)],
    starts: &[usize],
    bounds: Option<(i64, i64)>,
    step: i64,
    mut each: impl FnMut(&[(i64, u32, f64)]),
) {
    let ends: Vec<usize> = starts
        .iter()
        .skip(1)
        .copied()
        .chain(std::iter::once(points.len()))
        .collect();
    if let Some((a, steps)) = grid(points, starts, &ends, bounds, step) {
        let mut cursor = starts.to_vec();
        let mut group = Vec::with_capacity(cursor.len());
        for k in 0..steps {
            let t = a + k * step;
            group.clear();
            for (c, &end) in cursor.iter_mut().zip(&ends) {
                if *c < end && points[*c].0 == t {
                    group.push(points[*c]);
                    *c += 1;
                }
            }
            if !group.is_empty() {
                each(&group);
            }
        }
        return;
    }
    points.sort_unstable_by_key(|p| (p.0, p.1));
    for group in points.chunk_by(|a, b| a.0 == b.0) {
        each(group);
    }
}

/// The grid's first time and its steps, when every point is on it and each series' times
/// increase (so that a series has at most one point a step).
fn grid(
    points: &[(i64, u32, f64)],
    starts: &[usize],
    ends: &[usize],
    bounds: Option<(i64, i64)>,
    step: i64,
) -> Option<(i64, i64)> {
    let (a, b) = bounds?;
    if step <= 0 || b < a {
        return None;
    }
    let on_grid = |t: i64| (a..=b).contains(&t) && (t - a) % step == 0;
    let ordered = starts.iter().zip(ends).all(|(&start, &end)| {
        points.get(start..end).is_some_and(|run| {
            run.iter().all(|p| on_grid(p.0)) && run.windows(2).all(|w| w[0].0 < w[1].0)
        })
    });
    ordered.then_some((a, (b - a) / step + 1))
}

/// Builds each timestamp's sample in place of the previous one. Truthscale's own entities
/// follow the DCGM scrape's, in the order their first points come; each is built (its id
/// cloned) once a chunk, kept in the sample while the next timestamp has the same entities
/// in the same order (the usual case), and kept aside in `pool` while it is not in one.
pub(super) struct Builder {
    sample: Sample,
    /// The entity of each own entity of `sample`, in its order.
    used: Vec<u32>,
    /// The next timestamp's, while it is built.
    next: Vec<u32>,
    /// One per entity: its place in the sample being built, `u32::MAX` when not in it
    /// (and between builds).
    slots: Vec<u32>,
    /// One per entity: its sample while it is not in `sample`.
    pool: Vec<Option<EntitySample>>,
    /// How many of `sample`'s entities are the DCGM scrape's.
    dcgm: usize,
    /// Maps each timestamp's DCGM points; kept from one timestamp to the next, so a unit
    /// decided from one reading (percent or 0..1) holds for the chunk.
    scrape: Scrape,
}

impl Builder {
    pub(super) fn new(entities: usize) -> Builder {
        let mut pool = Vec::new();
        pool.resize_with(entities, || None);
        Builder {
            sample: Sample::default(),
            used: Vec::new(),
            next: Vec::new(),
            slots: vec![u32::MAX; entities],
            pool,
            dcgm: 0,
            scrape: Scrape::default(),
        }
    }

    /// The sample at `taken` from its points.
    pub(super) fn build(
        &mut self,
        taken: Timestamp,
        points: &[(i64, u32, f64)],
        series: &[SeriesMap],
        entities: &[EntityId],
    ) -> &Sample {
        // Which own entities, in which order.
        self.next.clear();
        for &(_, i, _) in points {
            if let Some(&SeriesMap::Own { entity, .. }) = series.get(i as usize)
                && let Some(slot) = self.slots.get_mut(entity as usize)
                && *slot == u32::MAX
            {
                *slot = u32::try_from(self.next.len()).unwrap_or(u32::MAX);
                self.next.push(entity);
            }
        }
        let own = &mut self.sample.entities;
        own.drain(..self.dcgm);
        if self.next == self.used {
            for e in own.iter_mut() {
                e.readings.clear();
            }
        } else {
            for (&e, s) in self.used.iter().zip(own.drain(..)) {
                if let Some(place) = self.pool.get_mut(e as usize) {
                    *place = Some(s);
                }
            }
            for &e in &self.next {
                let id = &entities[e as usize];
                let mut s = self.pool[e as usize]
                    .take()
                    .unwrap_or_else(|| EntitySample {
                        id: id.clone(),
                        simulated: id
                            .model
                            .as_deref()
                            .is_some_and(|m| m.starts_with("Simulated ")),
                        ..EntitySample::default()
                    });
                s.readings.clear();
                own.push(s);
            }
            std::mem::swap(&mut self.used, &mut self.next);
        }
        let scrape = &mut self.scrape;
        for &(_, i, v) in points {
            match series.get(i as usize) {
                Some(SeriesMap::Dcgm { name, labels }) => {
                    scrape.push(name, labels, v);
                }
                Some(&SeriesMap::Own { entity, raw }) => {
                    let x = raw.read_back(v);
                    if let Some(&slot) = self.slots.get(entity as usize)
                        && let Some(e) = own.get_mut(slot as usize)
                        && x.is_finite()
                    {
                        e.readings.set_value(raw.field, x);
                    }
                }
                Some(SeriesMap::Holder { .. }) | None => {}
            }
        }
        // The holder signals once every DCGM series of the timestamp has named its entity.
        for &(_, i, v) in points {
            if let Some(SeriesMap::Holder { field, labels }) = series.get(i as usize) {
                scrape.push_field(*field, labels, v);
            }
        }
        for &e in &self.used {
            self.slots[e as usize] = u32::MAX;
        }
        let dcgm = scrape.finish();
        self.dcgm = dcgm.len();
        own.splice(..0, dcgm);
        self.sample.taken = taken;
        &self.sample
    }
}

#[cfg(test)]
mod tests;

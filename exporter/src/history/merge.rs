//! Prometheus' series merged into samples per step: DCGM series through the core's
//! dcgm-exporter scrape mapping, truthscale's own through the catalog.

use super::api::{Matrix, PromValue};
use super::{Family, own_metric};
use std::collections::{BTreeMap, HashMap};
use truthscale_core::catalog::Raw;
use truthscale_core::model::{
    EntityId, EntityKey, EntitySample, Field, MigId, PodRef, Readings, Sample, Timestamp,
};
use truthscale_core::parse::dcgm_text::Scrape;

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
    /// server) are dropped, so times keep increasing from chunk to chunk.
    pub(super) bounds: Option<(i64, i64)>,
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

    /// Add a series' points inside the chunk, as series `map`.
    pub(super) fn push_series(&mut self, map: SeriesMap, values: &[(f64, PromValue)]) {
        let Ok(index) = u32::try_from(self.series.len()) else {
            return;
        };
        self.series.push(map);
        self.starts.push(self.points.len());
        for &(t, v) in values {
            let t = millis(t);
            let inside = self.bounds.is_none_or(|(a, b)| (a..=b).contains(&t));
            if let (true, PromValue(Some(v))) = (inside, v) {
                self.points.push((t, index, v));
            }
        }
    }

    /// Hand `each` the points of each timestamp with any, as [`for_each_time`].
    #[cfg(test)]
    pub(super) fn for_each_time(&mut self, each: impl FnMut(&[(i64, u32, f64)])) {
        for_each_time(&mut self.points, &self.starts, self.bounds, self.step, each);
    }

    /// Hand `f` the samples, one per timestamp with at least one value, in time order;
    /// one sample is built at a time, in place of the previous one.
    pub(super) fn feed(self, mut f: impl FnMut(&Sample)) {
        let Chunk {
            bounds,
            step,
            series,
            mut points,
            entities,
            starts,
            ..
        } = self;
        let mut builder = Builder::new(entities.len());
        for_each_time(&mut points, &starts, bounds, step, |group| {
            let sample = builder.build(Timestamp(group[0].0), group, &series, &entities);
            if !sample.entities.is_empty() {
                f(sample);
            }
        });
    }
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
                e.readings = Readings::default();
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
                s.readings = Readings::default();
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
mod tests {
    use super::*;

    /// `millis` gives what `round` gives, bit for bit: halves, both signs, times of today
    /// with sub-millisecond noise, the ends of `i64` and beyond, NaN and infinities.
    #[test]
    fn millis_rounds_as_round_does() {
        let want = |t: f64| (t * 1000.0).round() as i64;
        let mut cases = vec![
            0.0,
            -0.0,
            0.0005,
            -0.0005,
            0.0015,
            -0.0025,
            0.000_499_999_999_999_999_9,
            0.0004999,
            0.0005001,
            1.7e9,
            1_733_000_000.123_5,
            -1e-3,
            9.3e15,
            -9.3e15,
            9.3e16,
            1e300,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for k in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
            cases.push(match k % 4 {
                0 => 1.6e9 + unit * 2e8,
                1 => (unit - 0.5) * 1e4,
                2 => f64::from_bits(x),
                _ => (1.7e12 + (x % 1_000_000) as f64 + 0.5) / 1000.0,
            });
        }
        for t in cases {
            assert_eq!(millis(t), want(t), "{t:e}");
        }
    }
    use truthscale_core::model::{Field, Reading};

    type Labels<'a> = &'a [(&'a str, &'a str)];

    fn matrix(series: &[(Labels<'_>, &[(f64, &str)])]) -> Matrix {
        Matrix::of(
            series
                .iter()
                .map(|(labels, values)| {
                    let metric = labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect();
                    let values = values
                        .iter()
                        .map(|(t, v)| (*t, PromValue(v.parse().ok())))
                        .collect();
                    (metric, values)
                })
                .collect(),
        )
    }

    #[test]
    fn merge_per_timestamp_with_gaps_and_churn() {
        let mut c = Chunk::default();
        let g0: &[(&str, &str)] = &[("gpu", "0"), ("UUID", "GPU-a"), ("pod", "")];
        let g1a: &[(&str, &str)] = &[("gpu", "1"), ("pod", "a")];
        let g1b: &[(&str, &str)] = &[("gpu", "1"), ("pod", "b")];
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_GPU_UTIL",
            &matrix(&[
                (g0, &[(15.0, "100"), (30.0, "50"), (60.0, "NaN")]),
                (g1a, &[(15.0, "10")]),
                (g1b, &[(45.0, "20")]),
            ]),
        );
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            &matrix(&[(g0, &[(30.0, "0.25")])]),
        );
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_FB_USED",
            &matrix(&[(g0, &[(15.0, "100")])]),
        );
        c.add(
            Family::DcgmExporter,
            "dcgm_fi_dev_fb_free",
            &matrix(&[(g0, &[(15.0, "300")])]),
        );
        let mut s: Vec<Sample> = Vec::new();
        c.feed(|x| s.push(x.clone()));
        let times: Vec<i64> = s.iter().map(|s| s.taken.0).collect();
        assert_eq!(times, [15_000, 30_000, 45_000, 60_000]);
        assert_eq!(s[0].entities.len(), 2);
        let e = &s[0].entities[0];
        assert_eq!(e.readings.get(Field::ReportedUtil), Reading::Value(1.0));
        // Missing at this step: blank, not zero.
        assert_eq!(e.readings.get(Field::TensorActive), Reading::Blank);
        assert_eq!(
            e.readings.get(Field::MemTotalBytes),
            Reading::Value(400.0 * 1_048_576.0)
        );
        assert_eq!(
            s[1].entities[0].readings.get(Field::TensorActive),
            Reading::Value(0.25)
        );
        assert_eq!(s[1].entities.len(), 1);
        assert_eq!(
            s[2].entities[0].id.pod.as_ref().map(|p| p.pod.as_str()),
            Some("b")
        );
        // NaN is blank.
        assert_eq!(
            s[3].entities[0].readings.get(Field::ReportedUtil),
            Reading::Blank
        );
    }

    /// Own entities that come and go, and change order: each sample holds exactly its
    /// timestamp's entities, in the order of their first points, and nothing of an earlier
    /// timestamp (the samples are built in place of the previous ones).
    #[test]
    fn own_entities_that_come_and_go_carry_nothing_over() {
        let a: Labels<'_> = &[("gpu", "0"), ("uuid", "GPU-a"), ("pod", "a")];
        let b: Labels<'_> = &[("gpu", "1"), ("uuid", "GPU-b"), ("pod", "b")];
        let mut c = Chunk::default();
        c.add(
            Family::Truthscale,
            "truthscale_gpu_tensor_active_ratio",
            &matrix(&[
                (a, &[(1.0, "0.5"), (3.0, "0.6"), (5.0, "0.8"), (6.0, "0.1")]),
                (
                    b,
                    &[
                        (1.0, "0.1"),
                        (2.0, "0.2"),
                        (3.0, "0.3"),
                        (4.0, "0.4"),
                        (5.0, "0.9"),
                    ],
                ),
            ]),
        );
        c.add(
            Family::Truthscale,
            "truthscale_gpu_dram_active_ratio",
            &matrix(&[(a, &[(4.0, "0.7")]), (b, &[(6.0, "0.3")])]),
        );
        let mut got: Vec<Vec<(String, Reading, Reading)>> = Vec::new();
        c.feed(|s| {
            got.push(
                s.entities
                    .iter()
                    .map(|e| {
                        (
                            e.id.pod.as_ref().map(|p| p.pod.clone()).unwrap_or_default(),
                            e.readings.get(Field::TensorActive),
                            e.readings.get(Field::DramActive),
                        )
                    })
                    .collect(),
            );
        });
        let (v, blank) = (Reading::Value, Reading::Blank);
        let e = |p: &str, t, d| (p.to_owned(), t, d);
        assert_eq!(
            got,
            [
                vec![e("a", v(0.5), blank), e("b", v(0.1), blank)],
                vec![e("b", v(0.2), blank)],
                vec![e("a", v(0.6), blank), e("b", v(0.3), blank)],
                vec![e("b", v(0.4), blank), e("a", blank, v(0.7))],
                vec![e("a", v(0.8), blank), e("b", v(0.9), blank)],
                vec![e("a", v(0.1), blank), e("b", blank, v(0.3))],
            ]
        );
    }

    #[test]
    fn merging_on_the_grid_orders_as_the_sort_does() {
        let g0: Labels<'_> = &[("gpu", "0")];
        let g1: Labels<'_> = &[("gpu", "1")];
        let fill = |c: &mut Chunk| {
            c.add(
                Family::DcgmExporter,
                "DCGM_FI_DEV_GPU_UTIL",
                &matrix(&[
                    (g1, &[(15.0, "1"), (30.0, "2"), (60.0, "3")]),
                    (g0, &[(30.0, "4"), (45.0, "5")]),
                ]),
            );
            c.add(
                Family::DcgmExporter,
                "DCGM_FI_DEV_FB_USED",
                &matrix(&[(g0, &[(15.0, "6"), (60.0, "7")])]),
            );
        };
        let groups = |c: &mut Chunk| {
            let mut out: Vec<Vec<(i64, u32, f64)>> = Vec::new();
            c.for_each_time(|g| out.push(g.to_vec()));
            out
        };
        let grid = || Chunk {
            bounds: Some((15_000, 60_000)),
            step: 15_000,
            ..Chunk::default()
        };
        let mut merged = grid();
        let mut sorted = Chunk::default();
        fill(&mut merged);
        fill(&mut sorted);
        let (merged, sorted) = (groups(&mut merged), groups(&mut sorted));
        assert_eq!(merged, sorted);
        let times: Vec<Vec<i64>> = merged
            .iter()
            .map(|g| g.iter().map(|p| p.0).collect())
            .collect();
        assert_eq!(
            times,
            [
                vec![15_000, 15_000],
                vec![30_000, 30_000],
                vec![45_000],
                vec![60_000, 60_000]
            ]
        );
        // Series order within a timestamp: g1's GPU_UTIL (series 0), g0's (1), FB_USED (2).
        assert_eq!(merged[0], [(15_000, 0, 1.0), (15_000, 2, 6.0)]);
        // A point off the grid, or a series out of time order: the sort, the same groups.
        for extra in [(20_000, 2, 1.0), (15_000, 2, 1.0)] {
            let mut off = grid();
            fill(&mut off);
            off.points.push(extra);
            let mut reference = Chunk::default();
            fill(&mut reference);
            reference.points.push(extra);
            let got = groups(&mut off);
            assert_eq!(got, groups(&mut reference));
            assert!(got.iter().flatten().any(|p| *p == extra), "{extra:?}");
            assert!(got.windows(2).all(|w| w[0][0].0 < w[1][0].0));
        }
    }

    #[test]
    fn points_outside_the_chunk_are_dropped() {
        let mut c = Chunk {
            bounds: Some((15_000, 30_000)),
            ..Chunk::default()
        };
        let g0: Labels<'_> = &[("gpu", "0")];
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_GPU_UTIL",
            &matrix(&[(g0, &[(0.0, "1"), (15.0, "2"), (30.0, "3"), (45.0, "4")])]),
        );
        let mut times = Vec::new();
        c.feed(|s| times.push(s.taken.0));
        assert_eq!(times, [15_000, 30_000]);
    }

    #[test]
    fn own_metrics_map_back() {
        let mut c = Chunk::default();
        let l: &[(&str, &str)] = &[
            ("gpu", "3"),
            ("uuid", "GPU-x"),
            ("model", "Simulated H100 SXM"),
            ("mig_instance", "2"),
            ("mig_profile", "3g.40gb"),
            ("pod", "p"),
            ("namespace", "ns"),
            ("container", ""),
            ("node", "n1"),
        ];
        c.add(
            Family::Truthscale,
            "truthscale_gpu_sm_clock_hertz",
            &matrix(&[(l, &[(1.0, "1830000000")])]),
        );
        c.add(
            Family::Truthscale,
            "truthscale_gpu_tensor_active_ratio",
            &matrix(&[(l, &[(1.0, "0.5")])]),
        );
        let mut s: Vec<Sample> = Vec::new();
        c.feed(|x| s.push(x.clone()));
        assert_eq!(s.len(), 1);
        let e = &s[0].entities[0];
        assert!(e.simulated);
        assert_eq!(e.readings.get(Field::SmClockMhz), Reading::Value(1830.0));
        assert_eq!(e.readings.get(Field::TensorActive), Reading::Value(0.5));
        let want = EntityId {
            gpu: Some(3),
            uuid: Some("GPU-x".into()),
            model: Some("Simulated H100 SXM".into()),
            pci_bus_id: None,
            driver_version: None,
            mig: Some(MigId {
                gpu_instance: 2,
                compute_instance: None,
                profile: Some("3g.40gb".into()),
                ..MigId::default()
            }),
            pod: Some(PodRef {
                pod: "p".into(),
                namespace: Some("ns".into()),
                container: None,
            }),
            node: Some("n1".into()),
        };
        assert_eq!(e.id, want);
    }
}

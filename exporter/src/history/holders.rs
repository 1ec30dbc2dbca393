//! The holder pods' CPU and I/O pressure beside dcgm-exporter's GPU series: cAdvisor's
//! counters (`container_cpu_cfs_*`, `container_pressure_*`), joined in PromQL to each GPU
//! by the pod that holds it, one query per signal and chunk ([`HolderSignal`]), so that a
//! starved window's cause is decided from history by the rules node mode uses
//! (`truthscale_core::causes`). Only for `analyze --prometheus` ([`History::feed`]); the
//! report reads no causes, and only the signals whose cAdvisor series discovery found.

use super::api::Matrix;
use super::columns::Column;
use super::merge::{Chunk, SeriesMap, cluster_of, dcgm_labels};
use super::query::series_query;
use super::{Family, History};
use truthscale_core::model::Field;

/// cAdvisor's CFS period counters: all periods, and those throttled.
const CFS_PERIODS: &str = "container_cpu_cfs_periods_total";
const CFS_THROTTLED: &str = "container_cpu_cfs_throttled_periods_total";
/// cAdvisor's PSI totals, in seconds: `waiting` is PSI "some", `stalled` PSI "full".
const CPU_WAITING: &str = "container_pressure_cpu_waiting_seconds_total";
const IO_WAITING: &str = "container_pressure_io_waiting_seconds_total";
const IO_STALLED: &str = "container_pressure_io_stalled_seconds_total";
const MEMORY_STALLED: &str = "container_pressure_memory_stalled_seconds_total";

/// Every cAdvisor name discovery asks for (a name absent from the range adds no query).
pub(super) const CADVISOR_NAMES: [&str; 6] = [
    CFS_PERIODS,
    CFS_THROTTLED,
    CPU_WAITING,
    IO_WAITING,
    IO_STALLED,
    MEMORY_STALLED,
];

/// The label the join puts the holder pod (and its namespace) in, from the GPU series'
/// `pod` or, where Prometheus renamed the exporter's labels, `exported_pod`; and from
/// cAdvisor's `pod`. Dropped again before the answer.
const HOLDER_POD: &str = "holder_pod_of_gpu";
const HOLDER_NAMESPACE: &str = "holder_namespace_of_gpu";

/// One holder-pod signal read from cAdvisor's series: a share of time, 0..1, per pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HolderSignal {
    /// Throttled CFS periods over all periods, summed over the pod's containers.
    CpuThrottled,
    /// `cpu` PSI "some": seconds some task waited for a CPU, per second.
    CpuWaiting,
    /// `io` PSI "some".
    IoWaiting,
    /// `io` PSI "full": seconds every task waited on I/O, per second.
    IoStalled,
    /// `memory` PSI "full".
    MemoryStalled,
}

impl HolderSignal {
    /// Every signal, in the order of their columns.
    pub(super) const ALL: [HolderSignal; 5] = [
        HolderSignal::CpuThrottled,
        HolderSignal::CpuWaiting,
        HolderSignal::IoWaiting,
        HolderSignal::IoStalled,
        HolderSignal::MemoryStalled,
    ];

    /// The reading it is on the GPU.
    pub(super) fn field(self) -> Field {
        match self {
            HolderSignal::CpuThrottled => Field::HolderCpuThrottledRatio,
            HolderSignal::CpuWaiting => Field::HolderCpuWaitingRatio,
            HolderSignal::IoWaiting => Field::HolderIoWaitingRatio,
            HolderSignal::IoStalled => Field::HolderIoStalledRatio,
            HolderSignal::MemoryStalled => Field::HolderMemoryStalledRatio,
        }
    }

    /// The cAdvisor series it is computed from (all must exist).
    fn needs(self) -> &'static [&'static str] {
        match self {
            HolderSignal::CpuThrottled => &[CFS_THROTTLED, CFS_PERIODS],
            HolderSignal::CpuWaiting => &[CPU_WAITING],
            HolderSignal::IoWaiting => &[IO_WAITING],
            HolderSignal::IoStalled => &[IO_STALLED],
            HolderSignal::MemoryStalled => &[MEMORY_STALLED],
        }
    }

    /// The signal per pod (one series per `by`: the namespace, the pod and, with
    /// `--cluster-label`, the cluster), over `window`.
    ///
    /// Throttling is the share of the pod's CFS periods throttled, or of its most throttled
    /// container's where more, as node mode and `alerts/causes.rules.yml` take it (a
    /// container's own limit throttles it in its own periods; the pod's sum would dilute it
    /// with its other containers' periods). The pod cgroup's own series (`container=""`)
    /// would count the periods twice; a pod or container with no period in the window has
    /// no share (never 0/0). A pressure signal is the largest of the pod's cgroups: the
    /// pod's own cgroup where cAdvisor exports it (`container=""`), else its containers. A
    /// container's share of time with some task waiting is a lower bound on the pod's
    /// (some task of the pod waits whenever one of a container's does), so the max over the
    /// containers is a lower bound on the pod's "some" share; for "full" (every task of the
    /// cgroup waiting) it is what the worst container suffered.
    fn per_pod(self, window: &str, by: &str) -> String {
        let rate = |name: &str, matchers: &str| format!("rate({name}{{{matchers}}}[{window}])");
        let pressure = |name: &str| format!("max by ({by}) ({})", rate(name, "pod!=\"\""));
        match self {
            HolderSignal::CpuThrottled => {
                let m = "container!=\"\",pod!=\"\"";
                let (throttled, periods) = (rate(CFS_THROTTLED, m), rate(CFS_PERIODS, m));
                format!(
                    "max by ({by}) (sum by ({by}) ({throttled}) / (sum by ({by}) ({periods}) > 0) \
                     or {throttled} / ({periods} > 0))"
                )
            }
            HolderSignal::CpuWaiting => pressure(CPU_WAITING),
            HolderSignal::IoWaiting => pressure(IO_WAITING),
            HolderSignal::IoStalled => pressure(IO_STALLED),
            HolderSignal::MemoryStalled => pressure(MEMORY_STALLED),
        }
    }
}

/// A column of holder signals: the signal, and the GPU series it is put on.
#[derive(Debug, Clone)]
pub(super) struct HolderColumn {
    /// The signal.
    pub(super) signal: HolderSignal,
    /// The GPU series that say which pod holds a GPU (the busy flag, and the graphics
    /// engine's activity, which MIG instances have too), `A or B`.
    presence: Vec<String>,
}

/// The names of `names` (dcgm-exporter's) that say a GPU, or MIG instance, is there and
/// which pod holds it: the busy flag and the graphics engine's activity.
fn presence(family: Family, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| {
            matches!(
                super::query::field_of(family, n),
                Some(Field::ReportedUtil | Field::GrActive)
            )
        })
        .cloned()
        .collect()
}

impl History {
    /// Also read the holder pods' signals from cAdvisor's series, one column per signal
    /// whose series discovery found (none for truthscale's own series, which carry them as
    /// `truthscale_gpu_holder_*`). Each column's answers are put on the GPU series'
    /// entities as the signal's reading; a pod without cAdvisor series stays blank.
    pub(crate) fn read_holders(&mut self) {
        if self.columns.iter().any(|c| c.holder.is_some()) {
            return;
        }
        let names: Vec<String> = self
            .columns
            .iter()
            .filter(|c| !c.evidence)
            .map(|c| c.name.clone())
            .collect();
        let more = holder_columns(self.family, &names, &self.cadvisor);
        self.columns.extend(more);
    }

    /// What the summary line adds for the holder signals read: `, holder pods' signals from
    /// cAdvisor (holder_cpu_throttled_ratio, …)`, or nothing where none is read.
    pub(super) fn holders_read(&self) -> String {
        let read: Vec<&str> = self
            .columns
            .iter()
            .filter_map(|c| c.holder.as_ref())
            .map(|h| h.signal.field().name())
            .collect();
        if read.is_empty() {
            String::new()
        } else {
            format!(", holder pods' signals from cAdvisor ({})", read.join(", "))
        }
    }

    /// The rate window of the holder signals: the step, and at least four
    /// `--scrape-interval`s, so a step as fine as the scrape still has samples to rate.
    fn holder_window_ms(&self) -> i64 {
        let four_scrapes =
            i64::try_from(self.scrape_interval.as_millis().saturating_mul(4)).unwrap_or(i64::MAX);
        self.range.step.max(four_scrapes).max(1)
    }

    /// The query of a holder column over `matchers` (the GPU series'): the signal per pod,
    /// put on each GPU series whose pod (`pod`, or `exported_pod`) and namespace are the
    /// pod's, with the GPU series' labels.
    pub(super) fn holder_query(&self, h: &HolderColumn, matchers: &str) -> String {
        holder_query(
            h,
            matchers,
            &format!("{}ms", self.holder_window_ms()),
            self.cluster_label.as_deref(),
        )
    }
}

impl Chunk {
    /// Add the answer of a holder column: each series (the labels of a GPU series) is
    /// `field` of the entity those labels name.
    pub(super) fn add_holder(&mut self, field: Field, matrix: &Matrix) {
        for s in &matrix.result {
            let cluster = cluster_of(&s.metric, self.cluster_label.as_deref());
            let labels = dcgm_labels(&s.metric, cluster);
            self.push_series(SeriesMap::Holder { field, labels }, matrix.values_of(s));
        }
    }
}

/// The holder columns over the GPU series `names` of `family`, with the cAdvisor names
/// `cadvisor` found: one per signal whose series are all there, put on the presence series
/// ([`presence`]); none for truthscale's own family, or without a presence series.
fn holder_columns(family: Family, names: &[String], cadvisor: &[String]) -> Vec<Column> {
    let presence = presence(family, names);
    let Some(first) = presence.first() else {
        return Vec::new();
    };
    if family != Family::DcgmExporter {
        return Vec::new();
    }
    HolderSignal::ALL
        .into_iter()
        .filter(|s| s.needs().iter().all(|n| cadvisor.iter().any(|f| f == n)))
        .map(|signal| Column {
            name: first.clone(),
            summary: None,
            band: None,
            shared: false,
            holder: Some(HolderColumn {
                signal,
                presence: presence.clone(),
            }),
            evidence: false,
        })
        .collect()
}

/// [`History::holder_query`] with its window and `--cluster-label`.
fn holder_query(
    h: &HolderColumn,
    matchers: &str,
    window: &str,
    cluster_label: Option<&str>,
) -> String {
    let cluster = cluster_label.map(|c| format!("{c}, ")).unwrap_or_default();
    let gpus: Vec<String> = h
        .presence
        .iter()
        .map(|n| series_query(n, matchers))
        .collect();
    let by = format!("{cluster}namespace, pod");
    let holder = |expr: String, pod_labels: &[&str], ns_labels: &[&str]| {
        let mut e = expr;
        for (to, from) in pod_labels
            .iter()
            .map(|l| (HOLDER_POD, l))
            .chain(ns_labels.iter().map(|l| (HOLDER_NAMESPACE, l)))
        {
            e = format!("label_replace({e}, \"{to}\", \"$1\", \"{from}\", \"(.+)\")");
        }
        e
    };
    let gpu_side = holder(
        format!("({}) * 0", gpus.join(" or ")),
        &["pod", "exported_pod"],
        &["namespace", "exported_namespace"],
    );
    let pod_side = holder(h.signal.per_pod(window, &by), &["pod"], &["namespace"]);
    format!(
        "max without ({HOLDER_NAMESPACE}, {HOLDER_POD}) ({gpu_side} + on ({cluster}{HOLDER_NAMESPACE}, {HOLDER_POD}) group_left () {pod_side})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(signal: HolderSignal) -> HolderColumn {
        HolderColumn {
            signal,
            presence: vec![
                "DCGM_FI_DEV_GPU_UTIL".into(),
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE".into(),
            ],
        }
    }

    /// The join: the GPU series' holder (`exported_pod` over `pod`) matched to cAdvisor's
    /// pod, the answer with the GPU series' labels.
    #[test]
    fn the_join_puts_each_pods_signal_on_its_gpus() {
        let q = holder_query(
            &column(HolderSignal::CpuThrottled),
            "Hostname=\"a\"",
            "60000ms",
            None,
        );
        assert_eq!(
            q,
            "max without (holder_namespace_of_gpu, holder_pod_of_gpu) (\
             label_replace(label_replace(label_replace(label_replace(\
             (DCGM_FI_DEV_GPU_UTIL{Hostname=\"a\"} or DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=\"a\"}) * 0, \
             \"holder_pod_of_gpu\", \"$1\", \"pod\", \"(.+)\"), \
             \"holder_pod_of_gpu\", \"$1\", \"exported_pod\", \"(.+)\"), \
             \"holder_namespace_of_gpu\", \"$1\", \"namespace\", \"(.+)\"), \
             \"holder_namespace_of_gpu\", \"$1\", \"exported_namespace\", \"(.+)\") \
             + on (holder_namespace_of_gpu, holder_pod_of_gpu) group_left () \
             label_replace(label_replace(\
             max by (namespace, pod) (\
             sum by (namespace, pod) (rate(container_cpu_cfs_throttled_periods_total{container!=\"\",pod!=\"\"}[60000ms])) \
             / (sum by (namespace, pod) (rate(container_cpu_cfs_periods_total{container!=\"\",pod!=\"\"}[60000ms])) > 0) \
             or rate(container_cpu_cfs_throttled_periods_total{container!=\"\",pod!=\"\"}[60000ms]) \
             / (rate(container_cpu_cfs_periods_total{container!=\"\",pod!=\"\"}[60000ms]) > 0)), \
             \"holder_pod_of_gpu\", \"$1\", \"pod\", \"(.+)\"), \
             \"holder_namespace_of_gpu\", \"$1\", \"namespace\", \"(.+)\"))"
        );
        let q = holder_query(&column(HolderSignal::IoWaiting), "", "5m", Some("cluster"));
        assert!(
            q.contains(
                "max by (cluster, namespace, pod) (rate(container_pressure_io_waiting_seconds_total{pod!=\"\"}[5m]))"
            ),
            "{q}"
        );
        assert!(
            q.contains("+ on (cluster, holder_namespace_of_gpu, holder_pod_of_gpu)"),
            "{q}"
        );
    }

    /// A holder answer lands on the GPU its labels name, after the GPU's own series, at its
    /// timestamp only; a GPU without an answer (no cAdvisor series for its pod) stays blank,
    /// and an answer for a GPU the DCGM series do not name at that timestamp adds nothing.
    #[test]
    fn holder_answers_are_readings_of_their_gpus() {
        use crate::history::api::PromValue;
        use truthscale_core::model::{Reading, Sample};
        let series = |labels: &[(&str, &str)], values: &[(f64, f64)]| {
            let metric = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let values = values.iter().map(|(t, v)| (*t, PromValue(*v))).collect();
            (metric, values)
        };
        let matrix = Matrix::of;
        let a: &[(&str, &str)] = &[
            ("gpu", "0"),
            ("UUID", "GPU-a"),
            ("pod", "a"),
            ("namespace", "ml"),
        ];
        let b: &[(&str, &str)] = &[
            ("gpu", "1"),
            ("UUID", "GPU-b"),
            ("pod", "b"),
            ("namespace", "ml"),
        ];
        let mut c = Chunk::default();
        c.add(
            Family::DcgmExporter,
            "DCGM_FI_DEV_GPU_UTIL",
            &matrix(vec![
                series(a, &[(15.0, 90.0), (30.0, 95.0)]),
                series(b, &[(15.0, 80.0)]),
            ]),
        );
        c.add_holder(
            Field::HolderCpuThrottledRatio,
            &matrix(vec![
                series(a, &[(15.0, 0.6), (30.0, 0.5)]),
                series(b, &[(30.0, 0.9)]),
            ]),
        );
        let mut got: Vec<Sample> = Vec::new();
        c.feed(&mut truthscale_core::parse::names::Units::default(), |s| {
            got.push(s.clone())
        });
        let read = |s: &Sample, gpu: u32| {
            s.entities
                .iter()
                .find(|e| e.id.gpu == Some(gpu))
                .map(|e| e.readings.get(Field::HolderCpuThrottledRatio))
        };
        assert_eq!(got.len(), 2);
        assert_eq!(read(&got[0], 0), Some(Reading::Value(0.6)));
        assert_eq!(read(&got[0], 1), Some(Reading::Blank));
        assert_eq!(read(&got[1], 0), Some(Reading::Value(0.5)));
        // GPU 1 has no DCGM series at 30 s: its holder answer makes no entity.
        assert_eq!(read(&got[1], 1), None);
        assert_eq!(got[1].entities.len(), 1);
    }

    /// A column per signal whose cAdvisor series all exist (throttling needs both CFS
    /// counters), on the busy flag and the graphics engine; none over truthscale's own
    /// series, or without a series that says which pod holds a GPU.
    #[test]
    fn only_the_signals_whose_series_exist_are_read() {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>();
        let gpus = own(&[
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        ]);
        let signals = |family, names: &[String], cadvisor: &[&str]| -> Vec<HolderSignal> {
            holder_columns(family, names, &own(cadvisor))
                .iter()
                .filter_map(|c| c.holder.as_ref().map(|h| h.signal))
                .collect()
        };
        assert_eq!(signals(Family::DcgmExporter, &gpus, &[]), []);
        assert_eq!(
            signals(
                Family::DcgmExporter,
                &gpus,
                &[CFS_PERIODS, IO_WAITING, MEMORY_STALLED]
            ),
            [HolderSignal::IoWaiting, HolderSignal::MemoryStalled]
        );
        assert_eq!(
            signals(Family::DcgmExporter, &gpus, &CADVISOR_NAMES),
            HolderSignal::ALL
        );
        let c = holder_columns(Family::DcgmExporter, &gpus, &own(&[CPU_WAITING]));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "DCGM_FI_DEV_GPU_UTIL");
        assert!(c[0].summary.is_none() && c[0].band.is_none() && !c[0].shared);
        assert_eq!(
            c[0].holder.as_ref().unwrap().presence,
            ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        );
        // No GPU series that names the holder's GPU; truthscale's own series.
        let tensor_only = own(&["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]);
        assert_eq!(
            signals(Family::DcgmExporter, &tensor_only, &CADVISOR_NAMES),
            []
        );
        let mine = own(&["truthscale_gpu_reported_utilization_ratio"]);
        assert_eq!(signals(Family::Truthscale, &mine, &CADVISOR_NAMES), []);
    }

    #[test]
    fn each_signal_is_its_field() {
        let fields: Vec<Field> = HolderSignal::ALL.iter().map(|s| s.field()).collect();
        assert_eq!(
            fields,
            [
                Field::HolderCpuThrottledRatio,
                Field::HolderCpuWaitingRatio,
                Field::HolderIoWaitingRatio,
                Field::HolderIoStalledRatio,
                Field::HolderMemoryStalledRatio,
            ]
        );
        for s in HolderSignal::ALL {
            assert!(s.needs().iter().all(|n| CADVISOR_NAMES.contains(n)));
        }
        assert_eq!(
            presence(
                Family::DcgmExporter,
                &[
                    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE".into(),
                    "DCGM_FI_DEV_GPU_UTIL".into(),
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE".into(),
                ]
            ),
            ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        );
    }
}

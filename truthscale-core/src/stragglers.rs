//! Stragglers: among the GPUs of one job, the one whose SM clock or effective compute sits
//! well below the others', sustained, and which the others then wait on.
//!
//! Pure, like [`crate::verdict`]: [`Stragglers::mark`] takes one sample's entities (all the
//! GPUs a source read at one instant) and the time it was taken, and writes on them what it
//! found; the state it keeps is how long each GPU has sat outside its job's band.
//!
//! - **A job** is the GPUs whose holder is the same pod (`group_by = "pod"`, the default:
//!   a pod that holds eight GPUs is one job), whose holder pods share the value of one pod
//!   label (`group_by = "label"`, `job_label`, e.g. `training.kubeflow.org/job-name`; the
//!   label must be one of `node.pod_labels`), or every GPU of the sample
//!   (`group_by = "node"`: one job per machine, a bare-metal training box).
//! - **The band**, per signal (the SM clock, and the compute term
//!   [`crate::derive::compute_term`], the effective compute before the clock correction),
//!   over the members that read it, at least `min_members` of them: the median `m` less
//!   the larger of `band_mads` median absolute deviations and `min_gap · m`. A member under
//!   it is out of the band by `(m − x) / m`, its gap. Only the low side counts: a GPU that
//!   computes while its peers wait is the one doing the job's work.
//! - **Sustained:** a member is a straggler once it has sat out of the band for
//!   `sustain_seconds` after the sample that first found it there (a clock that dips for a
//!   second is not one). Its gaps are written on it ([`Field::StragglerClockGap`],
//!   [`Field::StragglerComputeGap`]); every other member of its job gets the largest gap of
//!   the job's stragglers as [`Field::StragglerWaitGap`]: those wait on it, `comm_bound`,
//!   not starved on their own.

use crate::derive;
use crate::gpus::{self, GpuSpec};
use crate::model::{EntityId, EntitySample, Field, Readings, Sample, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What makes GPUs one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The GPUs one pod holds (sole holder in node mode, or the `pod` label of a source).
    #[default]
    Pod,
    /// The GPUs whose holder pods share the value of `job_label`.
    Label,
    /// Every GPU of a sample.
    Node,
    /// No straggler detection.
    Off,
}

/// The straggler rule's settings (`[verdict.stragglers]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerConfig {
    /// What makes GPUs one job.
    pub group_by: GroupBy,
    /// The pod label whose value names the job, for `group_by = "label"`.
    pub job_label: String,
    /// The band's width in median absolute deviations below the median.
    pub band_mads: f64,
    /// The band is at least this share of the median wide: a job of identical GPUs has no
    /// deviation, and a clock 2 % lower is no straggler.
    pub min_gap: f64,
    /// Seconds a GPU must stay out of the band, after the sample that first found it there.
    pub sustain_seconds: f64,
    /// Fewest members reading a signal for its band (a median of two is no majority).
    pub min_members: u32,
}

impl Default for StragglerConfig {
    fn default() -> Self {
        StragglerConfig {
            group_by: GroupBy::Pod,
            job_label: String::new(),
            band_mads: 3.0,
            min_gap: 0.10,
            sustain_seconds: 30.0,
            min_members: 3,
        }
    }
}

impl StragglerConfig {
    /// Every setting in range (keys are `<prefix>name`).
    ///
    /// # Errors
    /// Each problem, naming its key.
    pub fn validate(&self, prefix: &str) -> Result<(), Vec<crate::phase::InvalidSetting>> {
        let mut c = crate::phase::Checker::new(prefix);
        c.range("band_mads", self.band_mads, 0.0, 100.0);
        c.range("min_gap", self.min_gap, 0.0, 1.0);
        c.range("sustain_seconds", self.sustain_seconds, 0.0, 86_400.0);
        if !(3..=100_000).contains(&self.min_members) {
            c.push(
                "min_members",
                format!(
                    "{} is outside [3, 100000] (a median of two is no majority)",
                    self.min_members
                ),
            );
        }
        if self.group_by == GroupBy::Label && self.job_label.trim().is_empty() {
            c.push(
                "job_label",
                "empty while group_by = \"label\": name the pod label that names the job (and list it in node.pod_labels)".into(),
            );
        }
        c.finish()
    }
}

/// A signal's band over one job: its median and the floor under which a member is out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    /// The members' median.
    pub median: f64,
    /// `median − max(band_mads · MAD, min_gap · median)`.
    pub floor: f64,
}

impl Band {
    /// The band of `values` (finite, at least `min_members` of them), else `None`.
    #[must_use]
    pub fn of(values: &[f64], cfg: &StragglerConfig) -> Option<Band> {
        let n = u32::try_from(values.len()).unwrap_or(u32::MAX);
        if n < cfg.min_members.max(3) || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let m = median(values.to_vec());
        let mad = median(values.iter().map(|v| (v - m).abs()).collect());
        let width = (cfg.band_mads * mad).max(cfg.min_gap * m);
        Some(Band {
            median: m,
            floor: m - width,
        })
    }

    /// How far under the band `x` is, as a share of the median: `None` when in it.
    #[must_use]
    pub fn gap(&self, x: f64) -> Option<f64> {
        (x < self.floor && self.median > 0.0).then(|| (self.median - x) / self.median)
    }
}

/// The median of finite values (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => f64::midpoint(v[n / 2 - 1], v[n / 2]),
    }
}

/// The job an entity belongs to under `cfg`, when it has one.
#[must_use]
pub fn job_of(e: &EntitySample, cfg: &StragglerConfig) -> Option<String> {
    job_key(e, cfg).map(job_name)
}

/// A job's name from its parts: `namespace/name`, or the name alone.
fn job_name((ns, name): (Option<&str>, &str)) -> String {
    match ns {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// [`job_of`] in its parts, borrowed from the sample: the namespace, if any, and the name.
#[inline(always)]
fn job_key<'a>(e: &'a EntitySample, cfg: &StragglerConfig) -> Option<(Option<&'a str>, &'a str)> {
    match cfg.group_by {
        GroupBy::Off => None,
        GroupBy::Node => Some((None, "node")),
        GroupBy::Pod => {
            let pod = e.id.pod.as_ref().filter(|p| !p.pod.is_empty())?;
            Some((pod.namespace.as_deref(), &pod.pod))
        }
        GroupBy::Label => {
            let label = crate::catalog::pod_label_name(&cfg.job_label);
            e.allocation.as_ref()?.iter().find_map(|h| {
                let v = h.labels.iter().find(|(k, _)| *k == label)?;
                Some((h.pod.namespace.as_deref(), v.1.as_str()))
            })
        }
    }
}

/// One member's signals, sanitized: the SM clock and the compute term.
fn signals(e: &EntitySample) -> [Option<f64>; 2] {
    let spec: Option<&GpuSpec> = e.id.model.as_deref().and_then(gpus::lookup);
    let mut r: Readings = e.readings;
    derive::sanitize(&mut r, &e.id, spec, &mut Vec::new());
    [r.value(Field::SmClockMhz), derive::compute_term(&r, spec)]
}

/// What the detector found for one entity of a sample: its job, and the fields to write
/// on its readings (its gaps, or the gap it waits on).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// The entity's position in the sample.
    pub index: usize,
    /// Its job.
    pub job: String,
    /// [`Field::StragglerClockGap`] and [`Field::StragglerComputeGap`] for a straggler,
    /// [`Field::StragglerWaitGap`] for the others.
    pub fields: Vec<(Field, f64)>,
}

/// The straggler detector of one sampler: how long each GPU has been out of its job's band.
#[derive(Debug, Clone, Default)]
pub struct Stragglers {
    /// The previous sample's time.
    last: Option<Timestamp>,
    /// A GPU out of its band: seconds since the sample that first found it there.
    out: HashMap<EntityId, f64>,
    /// The last sample's jobs, reused while the next sample's entities have the same keys.
    jobs: Jobs,
}

/// Each entity's job key (`namespace`, name) of one sample, in entity order, and the jobs
/// of three or more members found in them: each one's name and members' positions.
#[derive(Debug, Clone, Default)]
struct Jobs {
    keys: Vec<Option<(Option<String>, String)>>,
    jobs: Vec<(String, Vec<usize>)>,
}

impl Jobs {
    /// Whether `sample`'s entities have these keys, in this order.
    fn fit(&self, sample: &Sample, cfg: &StragglerConfig) -> bool {
        self.keys.len() == sample.entities.len()
            && sample.entities.iter().zip(&self.keys).all(|(e, k)| {
                job_key(e, cfg) == k.as_ref().map(|(ns, name)| (ns.as_deref(), name.as_str()))
            })
    }

    /// The keys and jobs of `sample`: each entity's job, in one list sorted by job then
    /// position, so that a job is a run of it; only a job of three or more is kept.
    fn of(sample: &Sample, cfg: &StragglerConfig) -> Jobs {
        let mut keyed: Vec<(Option<&str>, &str, usize)> = sample
            .entities
            .iter()
            .enumerate()
            .filter_map(|(i, e)| job_key(e, cfg).map(|(ns, name)| (ns, name, i)))
            .collect();
        keyed.sort_unstable();
        let jobs = keyed
            .chunk_by(|a, b| (a.0, a.1) == (b.0, b.1))
            .filter(|run| run.len() >= 3)
            .map(|run| {
                let members = run.iter().map(|k| k.2).collect();
                (job_name((run[0].0, run[0].1)), members)
            })
            .collect();
        let keys = sample
            .entities
            .iter()
            .map(|e| job_key(e, cfg).map(|(ns, name)| (ns.map(str::to_owned), name.to_owned())))
            .collect();
        Jobs { keys, jobs }
    }
}

impl Stragglers {
    /// Mark the sample's stragglers and those that wait on them (see the module
    /// documentation). Entities outside any job, or in a job too small for a band, are left
    /// as they are.
    pub fn mark(&mut self, sample: &mut Sample, cfg: &StragglerConfig) {
        for m in self.marks(sample, cfg) {
            let e = &mut sample.entities[m.index];
            for (f, v) in m.fields {
                e.readings.set_value(f, v);
            }
            e.job = Some(m.job);
        }
    }

    /// What [`Stragglers::mark`] would write, by entity position, in order.
    pub fn marks(&mut self, sample: &Sample, cfg: &StragglerConfig) -> Vec<Mark> {
        if cfg.group_by == GroupBy::Off {
            return Vec::new();
        }
        let dt = self
            .last
            .map_or(0.0, |t| sample.taken.seconds_since(t).max(0.0));
        self.last = Some(sample.taken);
        // A sample's entities are most often the last one's, in the same order: their jobs
        // are found again only when their keys differ.
        if !self.jobs.fit(sample, cfg) {
            self.jobs = Jobs::of(sample, cfg);
        }
        // Most samples: no job of three or more, so no marks and no straggler held.
        if self.jobs.jobs.is_empty() {
            self.out.clear();
            return Vec::new();
        }
        let mut seen = HashMap::with_capacity(self.out.len());
        let mut out = Vec::new();
        for (job, members) in &self.jobs.jobs {
            self.mark_job(&sample.entities, job, members, dt, cfg, &mut seen, &mut out);
        }
        self.out = seen;
        out.sort_by_key(|m| m.index);
        out
    }

    /// One job: the bands, each member's gaps, who is sustained, and the marks.
    #[expect(clippy::too_many_arguments, reason = "one job's step of `marks`")]
    fn mark_job(
        &self,
        entities: &[EntitySample],
        job: &str,
        members: &[usize],
        dt: f64,
        cfg: &StragglerConfig,
        seen: &mut HashMap<EntityId, f64>,
        out: &mut Vec<Mark>,
    ) {
        let sig: Vec<[Option<f64>; 2]> = members.iter().map(|&i| signals(&entities[i])).collect();
        let bands: [Option<Band>; 2] = [0, 1].map(|k| {
            let v: Vec<f64> = sig.iter().filter_map(|s| s[k]).collect();
            Band::of(&v, cfg)
        });
        let mut stragglers = Vec::new();
        for (m, s) in members.iter().zip(&sig) {
            let gaps = [0, 1].map(|k| bands[k].zip(s[k]).and_then(|(b, x)| b.gap(x)));
            if gaps.iter().all(Option::is_none) {
                continue;
            }
            let id = &entities[*m].id;
            let held = self.out.get(id).map_or(0.0, |h| h + dt);
            seen.insert(id.clone(), held);
            if held + 1e-6 >= cfg.sustain_seconds {
                stragglers.push((*m, gaps));
            }
        }
        let worst = stragglers
            .iter()
            .flat_map(|(_, g)| g.iter().flatten().copied())
            .reduce(f64::max);
        let Some(worst) = worst else { return };
        for &m in members {
            let fields = match stragglers.iter().find(|(s, _)| *s == m) {
                Some((_, [clock, compute])) => [
                    (Field::StragglerClockGap, *clock),
                    (Field::StragglerComputeGap, *compute),
                ]
                .into_iter()
                .filter_map(|(f, g)| g.map(|g| (f, g)))
                .collect(),
                None => vec![(Field::StragglerWaitGap, worst)],
            };
            out.push(Mark {
                index: m,
                job: job.to_string(),
                fields,
            });
        }
    }
}

#[cfg(test)]
mod tests;

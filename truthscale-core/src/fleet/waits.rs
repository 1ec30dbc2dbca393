//! Why GPUs wait, over the report's window: each workload's starved time by cause (the
//! rules of [`crate::causes`], window by window, as `serve` and `analyze` decide them) and
//! the stragglers of jobs ([`crate::stragglers`]). Tallied per track from the windows the
//! report derives ([`WaitTally::observe`]), so that the report names the same causes as
//! node mode and `analyze` on the same readings.

use super::NotListed;
use super::track::Track;
use crate::causes::Cause;
use crate::model::Field;
use crate::tracker::EntityWindow;
use crate::verdict::Verdict;
use serde::Serialize;

/// Rows a list of the section keeps; the rest are summed in its `not_listed`.
pub const LISTED: usize = 20;

/// One track's starved and straggler seconds, from its derived windows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WaitTally {
    /// Seconds judged `starved`, by cause ([`Cause::index`]).
    pub starved_seconds: [f64; 7],
    /// Seconds with a verdict (the denominator of the starved share).
    pub judged_seconds: f64,
    /// Seconds in which the GPU was its job's straggler.
    pub straggler_seconds: f64,
    /// The straggler's largest gap below its job's median.
    pub straggler_gap_max: Option<f64>,
    /// The job it was a straggler of (the last one named).
    pub job: Option<String>,
    /// Of `starved_seconds`, those of windows another track of the same device counted at
    /// the same time (a time-sliced GPU's holders each read the one device): left out of
    /// the fleet's totals, which count a device's second once.
    pub copied_starved_seconds: [f64; 7],
    /// Of `judged_seconds`, those of such copies.
    pub copied_judged_seconds: f64,
    /// Of `straggler_seconds`, those of such copies.
    pub copied_straggler_seconds: f64,
}

impl WaitTally {
    /// Count one derived window over the seconds it was integrated; `copy`: another
    /// track's window of the same device at the same time was counted already.
    pub fn observe(&mut self, w: &EntityWindow, copy: bool) {
        let dt = w.dt_seconds;
        if !(dt.is_finite() && dt > 0.0) {
            return;
        }
        if w.verdict.verdict != Verdict::Unknown {
            self.judged_seconds += dt;
            if copy {
                self.copied_judged_seconds += dt;
            }
        }
        if let Some(f) = w.verdict.cause() {
            self.starved_seconds[f.cause.index()] += dt;
            if copy {
                self.copied_starved_seconds[f.cause.index()] += dt;
            }
        }
        let gap = [Field::StragglerClockGap, Field::StragglerComputeGap]
            .into_iter()
            .filter_map(|f| w.readings.value(f))
            .reduce(f64::max);
        if let Some(g) = gap {
            self.straggler_seconds += dt;
            if copy {
                self.copied_straggler_seconds += dt;
            }
            self.straggler_gap_max = Some(self.straggler_gap_max.map_or(g, |m| m.max(g)));
            if self.job != w.job {
                self.job.clone_from(&w.job);
            }
        }
    }
}

/// One workload on one GPU, starved part of the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StarvedRow {
    /// The workload (`namespace/pod`, or the GPU where none held it).
    pub workload: String,
    /// The GPU.
    pub gpu: String,
    /// Hours judged starved.
    pub starved_hours: f64,
    /// Of the hours with a verdict, the share starved.
    pub starved_share: f64,
    /// Starved hours by cause, every cause (0 where none).
    pub by_cause: Vec<CauseHours>,
    /// The cause of most of its starved hours.
    pub main_cause: Cause,
    /// What to do about that cause.
    pub action: String,
}

/// Hours under one cause.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CauseHours {
    /// The cause.
    pub cause: Cause,
    /// Its hours.
    pub hours: f64,
}

/// A job's straggler over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StragglerRow {
    /// The straggler's workload.
    pub workload: String,
    /// The straggler GPU.
    pub gpu: String,
    /// The job it held back.
    pub job: Option<String>,
    /// Hours it was the straggler.
    pub straggler_hours: f64,
    /// Its largest gap below the job's median, a share of the median.
    pub gap_max: f64,
}

/// The section: starved workloads (most starved hours first) and stragglers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waits {
    /// Starved GPU-hours of every device, by cause: a device's hour once, however many
    /// holders read it (a time-sliced GPU's), a MIG instance's times its share of the GPU.
    /// Empty where no window was judged (none could be starved: unknown, not 0).
    pub starved_gpu_hours: Vec<CauseHours>,
    /// GPU-hours with a verdict, every device, counted as `starved_gpu_hours` are; `None`
    /// where no window was judged.
    pub judged_gpu_hours: Option<f64>,
    /// Starved hours of MIG instances of an unknown profile (their share of the GPU not
    /// known): in their rows, not in `starved_gpu_hours`.
    pub starved_hours_of_unknown_share: f64,
    /// The workloads with starved time, most first (at most [`LISTED`]).
    pub starved: Vec<StarvedRow>,
    /// Starved workloads left out of the list, and their parts of the starved GPU-hours,
    /// counted as `starved_gpu_hours` are (a time-sliced GPU's holders once, a MIG instance
    /// by its share; one of unknown share in `starved_hours_of_unknown_share`).
    pub starved_not_listed: NotListed,
    /// The stragglers, most hours first (at most [`LISTED`]).
    pub stragglers: Vec<StragglerRow>,
    /// Stragglers left out of the list, and their parts of the GPU-hours spent as a
    /// straggler, counted as `starved_gpu_hours` are (a time-sliced GPU's holders once, a
    /// MIG instance by its share; the hours of one of unknown share apart).
    pub stragglers_not_listed: NotListed,
}

/// Hours of each cause from seconds.
fn hours_by_cause(seconds: &[f64; 7]) -> Vec<CauseHours> {
    Cause::ALL
        .iter()
        .map(|c| CauseHours {
            cause: *c,
            hours: seconds[c.index()] / 3600.0,
        })
        .collect()
}

/// The section, from every track's tally.
#[must_use]
pub fn waits(tracks: &[Track]) -> Waits {
    let mut total = [0.0; 7];
    let mut judged = 0.0;
    let mut starved = Vec::new();
    let mut stragglers = Vec::new();
    let mut unknown_share = 0.0;
    for t in tracks {
        let w = &t.waits;
        // The track's own part of its device's starved GPU-hours (as the total counts it:
        // its share, what another track of the device counted left out), where known.
        let mut own_gpu_hours = None;
        match t.device_share() {
            Some(share) => {
                judged += share * (w.judged_seconds - w.copied_judged_seconds);
                let mut own = 0.0;
                for (k, sum) in total.iter_mut().enumerate() {
                    let part = share * (w.starved_seconds[k] - w.copied_starved_seconds[k]);
                    *sum += part;
                    own += part;
                }
                own_gpu_hours = Some(own / 3600.0);
            }
            None => unknown_share += w.starved_seconds.iter().sum::<f64>(),
        }
        let name = t.pod.clone().unwrap_or_else(|| t.gpu.clone());
        if let Some(row) = starved_row(&name, &t.gpu, w) {
            starved.push((row, own_gpu_hours));
        }
        if let Some(gap) = w.straggler_gap_max {
            let row = StragglerRow {
                workload: name,
                gpu: t.gpu.clone(),
                job: w.job.clone(),
                straggler_hours: w.straggler_seconds / 3600.0,
                gap_max: gap,
            };
            let own = (w.straggler_seconds - w.copied_straggler_seconds) / 3600.0;
            stragglers.push((row, t.device_share().map(|share| share * own)));
        }
    }
    // Most hours first; ties by workload and GPU, so the order never depends on the input's.
    starved.sort_by(|(a, _), (b, _)| {
        (b.starved_hours.total_cmp(&a.starved_hours))
            .then_with(|| (&a.workload, &a.gpu).cmp(&(&b.workload, &b.gpu)))
    });
    stragglers.sort_by(|(a, _), (b, _)| {
        (b.straggler_hours.total_cmp(&a.straggler_hours))
            .then_with(|| (&a.workload, &a.gpu).cmp(&(&b.workload, &b.gpu)))
    });
    let rest = starved.split_off(starved.len().min(LISTED));
    let unlisted = stragglers.split_off(stragglers.len().min(LISTED));
    Waits {
        starved_gpu_hours: if judged > 0.0 {
            hours_by_cause(&total)
        } else {
            Vec::new()
        },
        judged_gpu_hours: (judged > 0.0).then_some(judged / 3600.0),
        starved_hours_of_unknown_share: unknown_share / 3600.0,
        // Their parts of the devices' GPU-hours, as the total counts them (a time-sliced
        // GPU's holders once, a MIG instance by its share; an instance of unknown share is in
        // `starved_hours_of_unknown_share`), summed from 0 (an empty `sum` of floats is -0).
        starved_not_listed: NotListed {
            workloads: rest.len(),
            gpu_hours: rest.iter().filter_map(|(_, g)| *g).fold(0.0, |h, g| h + g),
            hours_of_unknown_share: None,
        },
        starved: starved.into_iter().map(|(row, _)| row).collect(),
        stragglers: stragglers.into_iter().map(|(row, _)| row).collect(),
        stragglers_not_listed: stragglers_not_listed(&unlisted),
    }
}

/// The stragglers past the list: their parts of the GPU-hours (a time-sliced GPU's holders
/// once, a MIG instance by its share), and apart the hours of those whose share of the GPU
/// is not known.
fn stragglers_not_listed(unlisted: &[(StragglerRow, Option<f64>)]) -> NotListed {
    let unknown: f64 = unlisted
        .iter()
        .filter(|(_, g)| g.is_none())
        .fold(0.0, |h, (r, _)| h + r.straggler_hours);
    NotListed {
        workloads: unlisted.len(),
        gpu_hours: unlisted
            .iter()
            .filter_map(|(_, g)| *g)
            .fold(0.0, |h, g| h + g),
        hours_of_unknown_share: unlisted.iter().any(|(_, g)| g.is_none()).then_some(unknown),
    }
}

/// A track's row, when it was starved at all.
fn starved_row(name: &str, gpu: &str, w: &WaitTally) -> Option<StarvedRow> {
    let seconds: f64 = w.starved_seconds.iter().sum();
    if seconds <= 0.0 || w.judged_seconds <= 0.0 {
        return None;
    }
    let main = Cause::ALL
        .into_iter()
        .max_by(|a, b| w.starved_seconds[a.index()].total_cmp(&w.starved_seconds[b.index()]))?;
    Some(StarvedRow {
        workload: name.to_string(),
        gpu: gpu.to_string(),
        starved_hours: seconds / 3600.0,
        starved_share: seconds / w.judged_seconds,
        by_cause: hours_by_cause(&w.starved_seconds),
        main_cause: main,
        action: crate::causes::Finding {
            cause: main,
            evidence: None,
            cpu_limit_cores: None,
        }
        .advice(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::DeriveConfig;
    use crate::model::{EntityId, EntitySample, PodRef, Sample, Timestamp};
    use crate::tracker::Deriver;

    /// GPU `i` of pod `pod` at `clock`, busy flag 100 %, tensor `tensor`, DRAM 5 %, its pod
    /// throttled in `throttled` of its CFS periods.
    fn gpu(i: u32, pod: &str, clock: f64, tensor: f64, throttled: f64) -> EntitySample {
        let mut e = EntitySample {
            id: EntityId {
                gpu: Some(i),
                uuid: Some(format!("GPU-{i}")),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                pod: Some(PodRef {
                    pod: pod.into(),
                    namespace: Some("ml".into()),
                    container: None,
                }),
                ..EntityId::default()
            },
            ..EntitySample::default()
        };
        for (f, v) in [
            (Field::ReportedUtil, 1.0),
            (Field::SmClockMhz, clock),
            (Field::TensorActive, tensor),
            (Field::DramActive, 0.05),
            (Field::HolderCpuThrottledRatio, throttled),
        ] {
            e.readings.set_value(f, v);
        }
        e
    }

    /// An hour at 60 s steps of: pod `train`'s eight GPUs, GPU 3's clock capped (1200 of
    /// 1980 MHz); pod `etl`'s GPU 8, starved with its pod throttled in 60 % of its periods;
    /// pod `serve`'s GPU 9, busy.
    fn tracks() -> Vec<Track> {
        let mut d = Deriver::new(DeriveConfig::default(), Some(60.0));
        let mut tracks: Vec<Track> = (0..10)
            .map(|i| Track::new(None, format!("node-a/GPU-{i}")))
            .collect();
        for step in 0..60 {
            let mut entities: Vec<EntitySample> = (0..8)
                .map(|i| {
                    if i == 3 {
                        gpu(i, "train", 1200.0, 0.6, 0.0)
                    } else {
                        gpu(i, "train", 1980.0, 0.03, 0.0)
                    }
                })
                .collect();
            entities.push(gpu(8, "etl", 1980.0, 0.02, 0.6));
            entities.push(gpu(9, "serve", 1980.0, 0.7, 0.0));
            let s = Sample {
                taken: Timestamp(step * 60_000),
                entities,
            };
            for (t, w) in tracks.iter_mut().zip(d.observe(&s).windows) {
                t.observe(usize::try_from(step).unwrap(), &w);
            }
        }
        for (i, t) in tracks.iter_mut().enumerate() {
            let pod = match i {
                8 => "ml/etl",
                9 => "ml/serve",
                _ => "ml/train",
            };
            t.pod = Some(pod.into());
        }
        tracks
    }

    #[test]
    fn starved_hours_by_cause_and_the_straggler_of_a_job() {
        let w = waits(&tracks());
        // Every window is judged: ten GPUs × 60 steps × 60 s.
        assert!((w.judged_gpu_hours.unwrap() - 10.0).abs() < 1e-9, "{w:?}");
        let of = |c: Cause| w.starved_gpu_hours[c.index()].hours;
        // The throttled pod: the whole hour. The seven waiting GPUs: every step but the
        // first (a straggler is one once out of the band for 30 s: at the second 60 s step).
        assert!((of(Cause::CpuThrottled) - 1.0).abs() < 1e-9, "{w:?}");
        assert!(
            (of(Cause::CommBound) - 7.0 * 59.0 / 60.0).abs() < 1e-9,
            "{w:?}"
        );
        assert!((of(Cause::Unknown) - 7.0 / 60.0).abs() < 1e-9, "{w:?}");
        assert_eq!(w.starved.len(), 8, "{w:?}");
        let etl = &w.starved[0];
        assert_eq!(
            (etl.workload.as_str(), etl.gpu.as_str()),
            ("ml/etl", "node-a/GPU-8")
        );
        assert_eq!(etl.main_cause, Cause::CpuThrottled);
        assert!((etl.starved_share - 1.0).abs() < 1e-12);
        assert!(
            etl.action.starts_with("raise the pod's CPU limit"),
            "{}",
            etl.action
        );
        assert!(
            w.starved[1..]
                .iter()
                .all(|r| r.main_cause == Cause::CommBound && r.workload == "ml/train")
        );
        // The straggler: 59 minutes, 39.4 % behind (780 of 1980 MHz).
        assert_eq!(w.stragglers.len(), 1, "{w:?}");
        let s = &w.stragglers[0];
        assert_eq!(
            (s.gpu.as_str(), s.job.as_deref()),
            ("node-a/GPU-3", Some("ml/train"))
        );
        assert!((s.straggler_hours - 59.0 / 60.0).abs() < 1e-9, "{s:?}");
        assert!((s.gap_max - 780.0 / 1980.0).abs() < 1e-12, "{s:?}");
        assert_eq!(w.starved_not_listed.workloads, 0);
    }

    /// A device's second counts once in the fleet's totals: a time-sliced GPU's two holders
    /// each read its starved hour (their rows say so), the totals one GPU-hour; a MIG 1g
    /// instance of an H100 (1 of 7 compute slices) starved an hour is 1/7 GPU-hour; one of
    /// an unknown profile is named apart.
    #[test]
    fn a_devices_second_counts_once_and_a_mig_instance_its_share() {
        let mut d = Deriver::new(DeriveConfig::default(), Some(60.0));
        let mut a = Track::new(Some("ml/a".into()), "node-a/GPU-8".into());
        let mut b = Track::new(Some("ml/b".into()), "node-a/GPU-8".into());
        for step in 0..60 {
            let s = Sample {
                taken: Timestamp(step * 60_000),
                entities: vec![
                    gpu(8, "a", 1980.0, 0.02, 0.6),
                    gpu(8, "b", 1980.0, 0.02, 0.6),
                ],
            };
            let windows = d.observe(&s).windows;
            a.observe(usize::try_from(step).unwrap(), &windows[0]);
            b.observe_copy(usize::try_from(step).unwrap(), &windows[1]);
        }
        let h100 = crate::gpus::by_key("h100-sxm");
        let mig = |pod: &str, profile: Option<&str>| {
            let mut t = Track::new(Some(pod.into()), "node-b/GPU-0".into());
            t.is_mig = true;
            t.spec = h100;
            t.mig = profile.and_then(|p| h100?.mig.iter().find(|m| m.name == p));
            t.waits.judged_seconds = 3600.0;
            t.waits.starved_seconds[Cause::IoStalled.index()] = 3600.0;
            t
        };
        let w = waits(&[
            a,
            b,
            mig("ml/small", Some("1g.10gb")),
            mig("ml/unknown", None),
        ]);
        let of = |c: Cause| w.starved_gpu_hours[c.index()].hours;
        assert!((of(Cause::CpuThrottled) - 1.0).abs() < 1e-9, "{w:?}");
        assert!((of(Cause::IoStalled) - 1.0 / 7.0).abs() < 1e-12, "{w:?}");
        assert!(
            (w.judged_gpu_hours.unwrap() - (1.0 + 1.0 / 7.0)).abs() < 1e-9,
            "{w:?}"
        );
        assert!((w.starved_hours_of_unknown_share - 1.0).abs() < 1e-12);
        let rows: Vec<(&str, f64)> = w
            .starved
            .iter()
            .map(|r| (r.workload.as_str(), (r.starved_hours * 1e9).round() / 1e9))
            .collect();
        assert_eq!(
            rows,
            [
                ("ml/a", 1.0),
                ("ml/b", 1.0),
                ("ml/small", 1.0),
                ("ml/unknown", 1.0)
            ]
        );
    }

    /// Where no window was judged, nothing could be starved: no totals, not zeros.
    #[test]
    fn nothing_judged_has_no_totals() {
        let w = waits(&[Track::new(Some("ml/a".into()), "g0".into())]);
        assert_eq!(w.judged_gpu_hours, None);
        assert!(w.starved_gpu_hours.is_empty(), "{w:?}");
    }

    #[test]
    fn a_long_list_is_cut_and_the_rest_summed() {
        let mut many: Vec<Track> = (0..25)
            .map(|i| {
                let mut t = Track::new(Some(format!("ml/p{i:02}")), format!("g{i}"));
                t.waits.judged_seconds = 3600.0;
                t.waits.starved_seconds[Cause::IoStalled.index()] = 36.0 * f64::from(i + 1);
                t
            })
            .collect();
        many.push(Track::new(Some("ml/never".into()), "gx".into()));
        let w = waits(&many);
        assert_eq!(w.starved.len(), LISTED);
        assert_eq!(w.starved[0].workload, "ml/p24");
        assert_eq!(w.starved_not_listed.workloads, 5);
        // The five least starved: 36 s × (1 + … + 5) = 540 s.
        assert!((w.starved_not_listed.gpu_hours - 0.15).abs() < 1e-12);
        assert!(w.stragglers.is_empty());
        // Nothing past the list: 0 hours, never -0 (an empty float sum).
        assert_eq!(w.stragglers_not_listed.workloads, 0);
        assert!(w.stragglers_not_listed.gpu_hours.is_sign_positive());
    }

    /// The starved GPU-hours left out of the list are counted as the total counts them: two
    /// holders of one time-sliced GPU, starved the same hour (the second's counted by the
    /// first), are 1 GPU-hour, not 2.
    #[test]
    fn the_hours_left_out_of_the_list_count_a_shared_gpu_once() {
        let starved = |pod: &str, gpu: &str, seconds: f64, copied: bool| {
            let mut t = Track::new(Some(pod.into()), gpu.into());
            t.waits.judged_seconds = seconds;
            t.waits.starved_seconds[Cause::Unknown.index()] = seconds;
            if copied {
                t.waits.copied_judged_seconds = seconds;
                t.waits.copied_starved_seconds[Cause::Unknown.index()] = seconds;
            }
            t
        };
        let mut tracks: Vec<Track> = (0..20)
            .map(|i| starved(&format!("a/p{i:02}"), &format!("n/gpu{i}"), 7200.0, false))
            .collect();
        tracks.push(starved("z/a", "n/gpu99", 3600.0, false));
        tracks.push(starved("z/b", "n/gpu99", 3600.0, true));
        let w = waits(&tracks);
        let total: f64 = w.starved_gpu_hours.iter().map(|c| c.hours).sum();
        assert_eq!(total, 41.0);
        assert_eq!(w.starved_not_listed.workloads, 2);
        assert_eq!(w.starved_not_listed.gpu_hours, 1.0);
    }

    /// 23 stragglers, the one on GPU k behind for (k + 1) minutes: the 20 longest listed,
    /// the three shortest (1 + 2 + 3 minutes: 0.1 h) counted and summed apart.
    #[test]
    fn a_long_straggler_list_is_cut_and_the_rest_summed() {
        let many: Vec<Track> = (0..23)
            .map(|i| {
                let mut t = Track::new(Some(format!("ml/p{i:02}")), format!("g{i}"));
                t.waits.straggler_seconds = 60.0 * f64::from(i + 1);
                t.waits.straggler_gap_max = Some(0.2);
                t
            })
            .collect();
        let w = waits(&many);
        assert_eq!(w.stragglers.len(), LISTED);
        assert_eq!(w.stragglers[0].workload, "ml/p22");
        assert_eq!(w.stragglers_not_listed.workloads, 3);
        assert!((w.stragglers_not_listed.gpu_hours - 0.1).abs() < 1e-12);
        assert!(w.starved_not_listed.gpu_hours.is_sign_positive());
    }

    /// Past 20 stragglers of 2 h each: a time-sliced GPU's two holders, 1 h each, the second
    /// a copy of the first; a 1g.10gb instance of an H100 (1/7 of the GPU) 1 h; an instance
    /// of an unknown profile 1 h. Their GPU-hours: 1 (the device once) + 1/7, and the
    /// unknown share's hour apart.
    #[test]
    fn stragglers_past_the_list_are_counted_as_gpu_hours() {
        let h100 = crate::gpus::by_key("h100-sxm");
        let straggler = |pod: &str, gpu: &str, copy: bool, mig: Option<Option<&str>>| {
            let mut t = Track::new(Some(pod.into()), gpu.into());
            t.waits.straggler_seconds = 3600.0;
            t.waits.copied_straggler_seconds = if copy { 3600.0 } else { 0.0 };
            t.waits.straggler_gap_max = Some(0.2);
            if let Some(profile) = mig {
                t.is_mig = true;
                t.spec = h100;
                t.mig = profile.and_then(|p| h100?.mig.iter().find(|m| m.name == p));
            }
            t
        };
        let mut tracks: Vec<Track> = (0..20)
            .map(|i| {
                let mut t = straggler(&format!("a/p{i:02}"), &format!("n/gpu{i}"), false, None);
                t.waits.straggler_seconds = 7200.0;
                t
            })
            .collect();
        tracks.push(straggler("z/a", "n/gpu99", false, None));
        tracks.push(straggler("z/b", "n/gpu99", true, None));
        tracks.push(straggler(
            "z/small",
            "m/GPU-0",
            false,
            Some(Some("1g.10gb")),
        ));
        tracks.push(straggler("z/unknown", "m/GPU-0", false, Some(None)));
        let w = waits(&tracks);
        assert_eq!(w.stragglers.len(), LISTED);
        let left = w.stragglers_not_listed;
        assert_eq!(left.workloads, 4);
        assert!(
            (left.gpu_hours - (1.0 + 1.0 / 7.0)).abs() < 1e-12,
            "{left:?}"
        );
        assert_eq!(left.hours_of_unknown_share, Some(1.0));
    }
}

//! The report from a history, in one call: [`build`] reads what `--by` needs beside the GPU
//! series, collects the tracks, analyses them, adds the showback (checked against the
//! sizing, its `--top` groups folded for the text, the page and the CSV), each cluster on
//! its own, and the notes. `commands/report.rs` parses the flags, calls it and writes.

use super::showback::{self, By, PodAttributes};
use super::{Document, notes};
use crate::history::{FeedStats, History, Range};
use anyhow::bail;
use std::io::Write;
use std::time::{Duration, Instant};
use truthscale_core::fleet::{FleetConfig, FleetInput};
use truthscale_core::showback::{ModelPart, Showback, ShowbackConfig};

/// What the report is asked, from the command's flags.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The fleet analysis' settings.
    pub fleet: FleetConfig,
    /// The most points kept per workload (`--max-points`).
    pub max_points: u64,
    /// The showback (`--by`), when asked.
    pub showback: Option<ShowbackArgs>,
    /// Each cluster sized on its own (`--cluster-label` given).
    pub clusters: bool,
}

/// The showback's flags.
#[derive(Debug, Clone)]
pub(crate) struct ShowbackArgs {
    /// `--by`: the groups.
    pub by: By,
    /// `--every`: also one row per group and period of this length.
    pub every: Option<Duration>,
    /// `--gpu-hour-price`: a model's price of one GPU-hour.
    pub prices: Vec<(String, f64)>,
    /// `--energy-price-per-kwh`: the price of one kWh.
    pub energy_price_per_kwh: Option<f64>,
    /// `--top`: the groups the text, the page and the CSV list, the others summed.
    pub top: usize,
    /// `--focus`: also the showback split by GPU model, one price a part.
    pub by_model: bool,
}

/// The report, built.
#[derive(Debug)]
pub(crate) struct Built {
    /// The document the text and the page render: its showback lists the `--top` groups.
    pub doc: Document,
    /// The showback with every group, for the JSON.
    pub every_group: Option<Showback>,
    /// The showback split by GPU model (every group), where `--focus` asked for it.
    pub by_model: Option<Vec<ModelPart>>,
    /// Seconds per point of the analysis (the CSV's periods are counted in them).
    pub point_seconds: f64,
    /// How the history was read.
    pub stats: FeedStats,
    /// Seconds of the analysis and the report's assembly.
    pub analysis_seconds: f64,
}

impl Built {
    /// Write the showback (its `--top` groups) as CSV; nothing without `--by`.
    ///
    /// # Errors
    /// Writing fails.
    pub(crate) fn write_csv(&self, out: &mut impl Write) -> std::io::Result<()> {
        match &self.doc.showback {
            Some(shown) => {
                showback::write_csv(out, shown, self.doc.source.start_ms, self.point_seconds)
            }
            None => Ok(()),
        }
    }

    /// The document as `--json` writes it: its showback lists every group.
    #[must_use]
    pub(crate) fn into_json_document(self) -> Document {
        let mut doc = self.doc;
        if self.every_group.is_some() {
            doc.showback = self.every_group;
        }
        doc
    }
}

/// What the thread beside the fleet's analysis worked out: the showback `--by` asked for
/// (with its flags), else the funnel alone.
enum Charged<'a> {
    Showback(Box<(Showback, Option<Vec<ModelPart>>)>, &'a ShowbackArgs),
    Funnel(truthscale_core::showback::Funnel),
}

/// Whether `input` can be reported: some GPU reading in the window, and, for a showback
/// (`charged`), a holder somewhere. Returns whether allocation is unknown fleet-wide: no GPU
/// names a pod and no holder was read, so no hour can be called unallocated (nor allocated,
/// active or effective under a holder).
///
/// # Errors
/// No GPU reading in the window; a showback where allocation is unknown fleet-wide.
fn check_input(
    input: &truthscale_core::fleet::FleetInput,
    source: &super::Source,
    history: &History,
    charged: bool,
) -> anyhow::Result<bool> {
    if input.tracks.is_empty() {
        bail!(
            "{}: the series exist but hold no GPU readings between {} and {}{}",
            source.prometheus,
            source.start,
            source.end,
            history.newest_hint()
        );
    }
    let allocation_unknown = input.tracks.iter().all(|t| t.pod.is_none()) && input.held.is_empty();
    if allocation_unknown && charged {
        bail!(
            "{}: no GPU series between {} and {} names a pod, and no holder was read (node mode's {}): who held each GPU is unknown, so its hours cannot be charged by --by; export pod labels (dcgm-exporter's Kubernetes mapping, or truthscale in node mode) first",
            source.prometheus,
            source.start,
            source.end,
            truthscale_core::catalog::GPU_ALLOCATION.name
        );
    }
    Ok(allocation_unknown)
}

/// Read `history` and build the report.
///
/// # Errors
/// Prometheus unreachable, slow or answering errors; a pod's GPU request refused; no GPU
/// readings in the window; a showback where no GPU names a pod and no holder was read.
pub(crate) fn build(cfg: &Config, mut history: History) -> anyhow::Result<Built> {
    if let Some(every) = cfg.showback.as_ref().and_then(|s| s.every) {
        check_every(every, history.range(), cfg.max_points)?;
    }
    let attributes = match &cfg.showback {
        Some(s) => Some(showback::read(&mut history, &s.by)?),
        None => None,
    };
    // A time-sliced GPU's holders, for the sizing and the funnel (node mode writes its
    // series without pods).
    let held_steps = match &attributes {
        Some(_) => Vec::new(),
        None => showback::read_held_steps(&mut history)?,
    };
    let owners = super::owners::read(&history);
    let (mut input, source, stats) = super::collect(&mut history, cfg.max_points)?;
    let held = attributes.as_ref().map_or(&held_steps, |a| &a.held);
    input.held = showback::held_by_gpu(held, source.steps_per_point);
    grant_fractions(&mut input, attributes.as_ref());
    let allocation_unknown = check_input(&input, &source, &history, cfg.showback.is_some())?;
    let analysis = Instant::now();
    let (per, start_ms) = (source.steps_per_point, source.start_ms);
    // The fleet's analysis and the showback (or the funnel, which is one) read the same
    // tracks and nothing of each other: on two threads.
    let (mut doc, charged) = std::thread::scope(|scope| {
        let charged = scope.spawn(|| match (&cfg.showback, &attributes) {
            (Some(args), Some(attrs)) => {
                let sb = showback_of(&input, cfg, args, attrs, (per, start_ms));
                Charged::Showback(Box::new(sb), args)
            }
            _ => Charged::Funnel(super::funnel::funnel(&input, &held_steps, &cfg.fleet, per)),
        });
        let doc = super::document(&input, source, &cfg.fleet);
        (doc, charged.join())
    });
    let charged = charged.map_err(|_| anyhow::anyhow!("the showback's thread panicked"))?;
    owners.apply(&mut doc.fleet.idle);
    if let Some(args) = &cfg.showback {
        price_idle_by_model(
            &mut doc.fleet.idle,
            &args.prices,
            cfg.fleet.cost_per_gpu_hour,
        );
    }
    if !doc.fleet.idle.workloads.is_empty() {
        doc.fleet.notes.push(owners.note.clone());
    }
    let (every_group, by_model) = match charged {
        Charged::Showback(charged, args) => {
            let (sb, by_model) = *charged;
            let sb = add_showback(&mut doc, sb, args);
            doc.funnel = Some(sb.total.funnel.clone());
            (Some(sb), by_model)
        }
        Charged::Funnel(_) if allocation_unknown => {
            doc.fleet.notes.push(notes::funnel_allocation_unknown());
            (None, None)
        }
        Charged::Funnel(funnel) => {
            doc.funnel = Some(funnel);
            (None, None)
        }
    };
    if cfg.clusters {
        let clusters = super::by_cluster(&input, &cfg.fleet);
        doc.fleet.notes.extend(notes::clusters_note(clusters.len()));
        doc.clusters = Some(clusters);
    }
    doc.fleet.notes.extend(notes::source_notes(&doc.source));
    doc.fleet.notes.extend(notes::history_notes(&stats));
    Ok(Built {
        doc,
        every_group,
        by_model,
        point_seconds: input.step_seconds,
        stats,
        analysis_seconds: analysis.elapsed().as_secs_f64(),
    })
}

/// `--every` is a whole number of the report's points (each `--step`, or several where
/// `--max-points` combines them), so that each period is as long as asked and starts where
/// the one before ends.
///
/// # Errors
/// It is not, naming the point and what to give.
fn check_every(every: Duration, range: Range, max_points: u64) -> anyhow::Result<()> {
    let per = super::steps_per_point(range, max_points);
    let point_ms = u128::try_from(range.step)
        .unwrap_or(1)
        .saturating_mul(per as u128)
        .max(1);
    let every_ms = every.as_millis();
    if every_ms >= point_ms && every_ms.is_multiple_of(point_ms) {
        return Ok(());
    }
    let point = humantime::format_duration(Duration::from_millis(
        u64::try_from(point_ms).unwrap_or(u64::MAX),
    ));
    let why = if per > 1 {
        format!(
            " (--step {} × {per}, so that each workload keeps at most --max-points {max_points} points)",
            humantime::format_duration(Duration::from_millis(
                u64::try_from(range.step).unwrap_or(0)
            ))
        )
    } else {
        String::new()
    };
    anyhow::bail!(
        "--every {} is not a whole number of the report's points of {point}{why}: give a multiple of {point}{}",
        humantime::format_duration(every),
        if per > 1 {
            ", or a larger --max-points"
        } else {
            ""
        }
    )
}

/// Each track its pod's granted fraction of the GPU, where `--by` read the schedulers'
/// fractions: it holds that fraction in the idle capacity too, as the showback charges it.
fn grant_fractions(input: &mut FleetInput, attributes: Option<&PodAttributes>) {
    if let Some(attrs) = attributes {
        for t in &mut input.tracks {
            t.granted = truthscale_core::showback::granted_share(&attrs.fractions, t);
        }
    }
}

/// The points from `start_ms` to the first boundary of `every` since the epoch (midnight
/// UTC for a day, the hour for an hour), to the nearest point of `point_seconds`: where
/// `--every`'s periods are cut, so that they fall on the calendar's.
fn calendar_offset(start_ms: i64, every: Duration, point_seconds: f64) -> usize {
    let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
    let to_boundary = (every_ms - start_ms.rem_euclid(every_ms)) % every_ms;
    (to_boundary as f64 / (point_seconds * 1000.0).max(1.0)).round() as usize
}

/// The showback of `input` by `args.by` (`per`: steps a point; `start_ms`: where the first
/// begins), and, where `--focus` asked for it, the same split by GPU model.
fn showback_of(
    input: &FleetInput,
    cfg: &Config,
    args: &ShowbackArgs,
    attrs: &PodAttributes,
    (per, start_ms): (usize, i64),
) -> (Showback, Option<Vec<ModelPart>>) {
    let by = &args.by;
    let groups = showback::groups(input, by, attrs);
    let requested = showback::requested_by_group(input, &groups, by, attrs, per);
    let holders = showback::holders(input, by, attrs, per);
    let measured = super::fractions::by_point(&attrs.measured, per);
    // A whole number of points (`check_every`).
    let period_steps = args
        .every
        .map(|e| ((e.as_secs_f64() / input.step_seconds).round() as usize).max(1));
    let sb_cfg = ShowbackConfig {
        by: by.describe(),
        idle_busy_below: cfg.fleet.idle_busy_below,
        idle_compute_below: cfg.fleet.idle_compute_below,
        period_steps,
        period_offset: args
            .every
            .map_or(0, |e| calendar_offset(start_ms, e, input.step_seconds)),
        default_price: cfg.fleet.cost_per_gpu_hour,
        prices: args.prices.clone(),
        energy_price_per_kwh: args.energy_price_per_kwh,
    };
    let shares = (&attrs.fractions, &measured);
    let mut sb = truthscale_core::showback::showback_with(
        input, &groups, &holders, &requested, shares, &sb_cfg,
    );
    sb.notes.extend(attrs.notes.iter().cloned());
    let by_model = args.by_model.then(|| {
        truthscale_core::showback::showback_by_model(input, &groups, &holders, shares, &sb_cfg)
    });
    (sb, by_model)
}

/// The showback checked against the sizing: the document takes its `--top` groups (the
/// rest folded in one row); every group is returned, for the JSON.
fn add_showback(doc: &mut Document, mut sb: Showback, args: &ShowbackArgs) -> Showback {
    truthscale_core::showback::check_against_sizing(&mut sb, &doc.fleet);
    let mut shown = sb.clone();
    showback::fold_rest(&mut shown, args.top);
    doc.showback = Some(shown);
    sb
}

/// The idle workloads at their model's price, as the showback charges them: its own
/// (`--gpu-hour-price`), else `default` (`--cost-per-gpu-hour`).
fn price_idle_by_model(
    idle: &mut truthscale_core::fleet::Idle,
    prices: &[(String, f64)],
    default: Option<f64>,
) {
    for w in &mut idle.workloads {
        let price = truthscale_core::showback::model_price(w.model.as_deref(), prices, default);
        w.idle_cost = price.map(|p| p * w.idle_gpu_hours);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--every`'s periods are cut on the calendar's boundaries: a window from 10:43 UTC in
    /// minutes has its first hour boundary 17 points in and its first day's 797 (13 h 17
    /// min); from midnight, none before the first; in 5-minute points, 17 minutes is 3
    /// points to the nearest.
    #[test]
    fn every_period_is_cut_on_the_calendar() {
        const AT_10_43: i64 = 1_796_640_180_000; // 2026-12-07T10:43:00Z
        let hour = Duration::from_secs(3600);
        let day = Duration::from_secs(86_400);
        assert_eq!(calendar_offset(AT_10_43, hour, 60.0), 17);
        assert_eq!(calendar_offset(AT_10_43, day, 60.0), 797);
        assert_eq!(
            calendar_offset(AT_10_43 - 43 * 60_000 - 10 * 3_600_000, day, 60.0),
            0
        );
        assert_eq!(calendar_offset(AT_10_43, hour, 300.0), 3);
    }

    /// 2 h at 60 s: 120 points, one a step under --max-points 1000, two a step under 100.
    #[test]
    fn every_is_a_whole_number_of_points() {
        let range = Range::back_from(7_200_000, 7_200_000, 60_000);
        let min = |m: u64| Duration::from_secs(60 * m);
        assert!(check_every(min(5), range, 1000).is_ok());
        assert!(check_every(min(60), range, 100).is_ok());
        let e = check_every(min(5), range, 100).unwrap_err().to_string();
        assert_eq!(
            e,
            "--every 5m is not a whole number of the report's points of 2m (--step 1m × 2, so that each workload keeps at most --max-points 100 points): give a multiple of 2m, or a larger --max-points"
        );
        let e = check_every(Duration::from_secs(90), range, 1000)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--every 1m 30s is not a whole number of the report's points of 1m: give a multiple of 1m"
        );
        assert!(check_every(Duration::from_secs(30), range, 1000).is_err());
    }

    /// An idle H100 is priced at its model's own price (10 idle GPU-hours at 4.10: 41), as
    /// the showback charges it; an L4 without one keeps the default's cost (2.50: 25).
    #[test]
    fn idle_workloads_take_their_models_price() {
        let workload = |model: &str| truthscale_core::fleet::IdleWorkload {
            workload: format!("ns/{model}"),
            model: Some(model.to_owned()),
            idle_share: 1.0,
            held_hours: 10.0,
            measured_hours: 10.0,
            idle_gpu_hours: 10.0,
            idle_cost: Some(25.0),
            idle_for_hours: Some(10.0),
            memory_held_bytes: None,
            owner: None,
            command: None,
        };
        let mut idle = truthscale_core::fleet::Idle {
            idle_share_above: 0.5,
            busy_below: 0.05,
            effective_compute_below: 0.01,
            workloads: vec![workload("NVIDIA H100 80GB HBM3"), workload("NVIDIA L4")],
            idle_gpu_hours: Some(20.0),
            listed_idle_gpu_hours: 20.0,
            not_listed: truthscale_core::fleet::NotListed {
                workloads: 0,
                gpu_hours: 0.0,
                hours_of_unknown_share: None,
            },
            unmeasured: Vec::new(),
        };
        price_idle_by_model(
            &mut idle,
            &[("NVIDIA H100 80GB HBM3".to_owned(), 4.10)],
            Some(2.50),
        );
        let costs: Vec<_> = idle.workloads.iter().map(|w| w.idle_cost).collect();
        assert_eq!(costs, [Some(41.0), Some(25.0)]);
    }
}

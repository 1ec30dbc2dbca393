//! Goldens of the report document: two fixed fleets built in the process (no Prometheus),
//! assembled as `commands::report::run` assembles them, and rendered as the command renders
//! them (the text, the HTML page, the `--json` document and the `--csv` file). The rendered
//! bytes must equal the files under `exporter/tests/golden/report/`; `UPDATE_GOLDEN=1`
//! rewrites them (see docs/report.md, "Goldens").
//!
//! Every value of the inputs is made with integer steps and the four operations (no `sin`,
//! no clock, no hash order), so the same bytes come out on any machine.

use super::showback::{By, PodAttributes};
use super::{Document, Source};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use truthscale_core::causes::Cause;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::fleet::{BANDS, FleetConfig, FleetInput, HeldBy, Point, StepBands, Track};
use truthscale_core::gpus::{self, MigProfile};
use truthscale_core::model::{EntitySample, Field};
use truthscale_core::showback::{Holders, Holding, ModelPart, Showback, ShowbackConfig};

const GIB: f64 = 1_073_741_824.0;
/// Points of each fleet.
const STEPS: usize = 48;
const H100: &str = "NVIDIA H100 80GB HBM3";
const L4: &str = "NVIDIA L4";
/// 2025-01-06T00:00:00Z.
const START_MS: i64 = 1_736_121_600_000;
/// The time-sliced GPU's holders: `(pod, its part of the device's effective compute)`.
/// In pod order, as `report::showback::holders` sorts them.
const TIME_SLICED: [(&str, f64); 2] = [("lab/nb-b", 0.125), ("research/nb-a", 0.25)];
const REGENERATE: &str = "run `UPDATE_GOLDEN=1 cargo test -p truthscale-exporter --lib report::golden` and review the diff";

/// A triangle wave over `period` steps from `lo` (step 0) up to `hi` (half-way) and back.
fn wave(step: usize, period: usize, lo: f64, hi: f64) -> f64 {
    let half = (period / 2).max(1);
    let k = step % period;
    let up = if k <= half { k } else { period - k };
    lo + (hi - lo) * up as f64 / half as f64
}

/// How one workload's points are made from its step.
struct Shape {
    sat: fn(usize) -> Option<f64>,
    busy: f64,
    mem_gib: fn(usize) -> Option<f64>,
}

/// A track on a whole GPU of the catalog's `key` (memory total as NVML reports it).
fn gpu_track(pod: Option<&str>, gpu: String, key: &str, model: &str, total_mib: u32) -> Track {
    let mut t = Track::new(pod.map(str::to_owned), gpu);
    t.spec = gpus::by_key(key);
    assert!(t.spec.is_some(), "{key} is in the catalog");
    t.model = Some(model.to_owned());
    t.memory_total_mib = Some(total_mib);
    t
}

/// An H100's MIG instance of `profile`: its saturation is recorded in whole-GPU terms.
fn mig_track(pod: &str, gpu: String, profile: &str) -> Track {
    let mut t = gpu_track(Some(pod), gpu, "h100-sxm", H100, 40_448);
    let found: Option<&'static MigProfile> = t
        .spec
        .and_then(|s| s.mig.iter().find(|p| p.name == profile));
    assert!(found.is_some(), "{profile} is an H100 profile");
    t.mig = found;
    t.is_mig = true;
    t
}

/// Record `shape` at each of `steps`.
fn record(t: &mut Track, steps: impl IntoIterator<Item = usize>, shape: &Shape) {
    for s in steps {
        let sat = (shape.sat)(s);
        let p = Point::new(
            sat,
            sat.map(|_| shape.busy),
            sat.map(|x| x * 0.75),
            (shape.mem_gib)(s).map(|g| g * GIB),
        );
        // Power: the idle floor and a part in proportion to saturation.
        let power = sat.map(|x| 75.0 + 600.0 * x);
        t.record(s, p.with_pipes(sat, sat.map(|x| x / 2.0)).with_power(power));
    }
}

/// A raw-sample quantile of a coarse step: tensor activity `tensor`, DRAM a third of it.
fn quantile(tensor: f64, sm_clock_mhz: f64) -> EntitySample {
    let mut e = EntitySample::default();
    e.readings.set_value(Field::TensorActive, tensor);
    e.readings.set_value(Field::DramActive, tensor / 3.0);
    e.readings.set_value(Field::SmClockMhz, sm_clock_mhz);
    e.readings.set_value(Field::ReportedUtil, 1.0);
    e
}

/// The four bands of every `every`-th step of `t`, rising from `low` to `top`; and a raw
/// sample past the clamp limit in the top band of step `impossible` (the step is then
/// unknown). Returns how many steps held an impossible sample.
fn bands(t: &mut Track, every: usize, low: f64, top: f64, impossible: Option<usize>) -> u64 {
    let cfg = DeriveConfig::default();
    let clock = t.spec.map_or(1_000.0, |s| s.f_ref_mhz);
    let mut diags = Vec::new();
    let mut n = 0;
    for step in (0..STEPS).filter(|s| s % every == every - 1) {
        for j in 0..BANDS {
            let x = low + (top - low) * j as f64 / (BANDS - 1) as f64;
            let _ = t.observe_peak_sample(step, j, &quantile(x, clock), &cfg, &mut diags);
        }
    }
    if let Some(step) = impossible
        && t.observe_peak_sample(step, BANDS - 1, &quantile(2.0, clock), &cfg, &mut diags)
    {
        n += 1;
    }
    n
}

/// The workloads on whole GPUs with pods: a trainer, an embedder, a batch job with an
/// unmeasured stretch (8 steps without readings, then 4 with memory alone) and an idle
/// notebook that stops early. `at(node)` names a node's GPUs.
fn pod_tracks(at: &dyn Fn(&str) -> String) -> Vec<Track> {
    let mut train = gpu_track(
        Some("ml/train"),
        at("node-a") + "/GPU-a0",
        "h100-sxm",
        H100,
        81_559,
    );
    let shape = Shape {
        sat: |s| Some(wave(s, 12, 0.35, 0.85)),
        busy: 1.0,
        mem_gib: |s| Some(wave(s, 16, 52.0, 68.0)),
    };
    record(&mut train, 0..STEPS, &shape);
    let mut embed = gpu_track(
        Some("web/embed"),
        at("node-b") + "/GPU-b0",
        "l4",
        L4,
        23_034,
    );
    let shape = Shape {
        sat: |s| Some(wave(s, 6, 0.02, 0.12)),
        busy: 0.6,
        mem_gib: |s| Some(wave(s, 8, 3.0, 5.0)),
    };
    record(&mut embed, 0..STEPS, &shape);
    let mut batch = gpu_track(
        Some("web/batch"),
        at("node-b") + "/GPU-b1",
        "l4",
        L4,
        23_034,
    );
    let shape = Shape {
        sat: |s| Some(wave(s, 10, 0.3, 0.7)),
        busy: 0.95,
        mem_gib: |s| Some(wave(s, 10, 12.0, 18.0)),
    };
    let memory_only = Shape {
        sat: |_| None,
        busy: 0.0,
        mem_gib: |_| Some(14.0),
    };
    record(&mut batch, 0..18, &shape);
    record(&mut batch, 26..30, &memory_only);
    record(&mut batch, 30..STEPS, &shape);
    let mut idle = gpu_track(
        Some("research/idle"),
        at("node-b") + "/GPU-b2",
        "l4",
        L4,
        23_034,
    );
    let shape = Shape {
        sat: |_| Some(0.001),
        busy: 0.01,
        mem_gib: |_| Some(2.0),
    };
    record(&mut idle, 0..40, &shape);
    vec![train, embed, batch, idle]
}

/// The MIG instance (3g.40gb on an H100), a GPU without pod labels (idle, with no series for
/// four steps), and a time-sliced GPU whose series name no pod (its holders are [`TIME_SLICED`]).
fn other_tracks(at: &dyn Fn(&str) -> String) -> Vec<Track> {
    let mut infer = mig_track("ml/infer", at("node-a") + "/GPU-a1", "3g.40gb");
    let shape = Shape {
        sat: |s| Some(wave(s, 8, 0.05, 0.2)),
        busy: 0.9,
        mem_gib: |s| Some(wave(s, 8, 8.0, 14.0)),
    };
    record(&mut infer, 4..STEPS, &shape);
    let mut bare = gpu_track(None, at("node-c") + "/GPU-c0", "h100-sxm", H100, 81_559);
    let shape = Shape {
        sat: |_| Some(0.0),
        busy: 0.0,
        mem_gib: |_| Some(0.5),
    };
    // Nothing of it read at steps 20..24 (no series): whether a pod held it then is unknown.
    record(&mut bare, 0..20, &shape);
    record(&mut bare, 24..STEPS, &shape);
    let mut sliced = gpu_track(None, at("node-c") + "/GPU-c1", "h100-sxm", H100, 81_559);
    let shape = Shape {
        sat: |s| Some(wave(s, 10, 0.1, 0.45)),
        busy: 0.7,
        mem_gib: |s| Some(wave(s, 12, 20.0, 30.0)),
    };
    record(&mut sliced, 0..STEPS, &shape);
    vec![infer, bare, sliced]
}

/// The seven tracks in the order `report::collect` sorts them (by GPU, then pod).
fn tracks(at: &dyn Fn(&str) -> String) -> Vec<Track> {
    let mut all = pod_tracks(at);
    all.extend(other_tracks(at));
    for t in &mut all {
        t.finish();
        waits(t);
    }
    all.sort_by(|a, b| (&a.gpu, &a.pod).cmp(&(&b.gpu, &b.pod)));
    all
}

/// What the windows of two workloads said of their waits (the tally `report::collect`
/// makes from the derived windows): `ml/train` judged 4 h, starved 1 h (45 min
/// CFS-throttled, 15 min on I/O), and its job's straggler for 20 min, up to 25 % behind;
/// `web/batch` judged 4 h, starved 30 min on NVLink.
fn waits(t: &mut Track) {
    let w = &mut t.waits;
    match t.pod.as_deref() {
        Some("ml/train") => {
            w.judged_seconds = 14_400.0;
            w.starved_seconds[Cause::CpuThrottled.index()] = 2700.0;
            w.starved_seconds[Cause::IoStalled.index()] = 900.0;
            w.straggler_seconds = 1200.0;
            w.straggler_gap_max = Some(0.25);
            w.job = Some("ml/train".into());
        }
        Some("web/batch") => {
            w.judged_seconds = 14_400.0;
            w.starved_seconds[Cause::CommBound.index()] = 1800.0;
        }
        _ => {}
    }
}

/// The key of the time-sliced GPU among `input`'s tracks.
fn sliced_gpu(input: &FleetInput) -> String {
    let t = input.tracks.iter().find(|t| t.gpu.ends_with("/GPU-c1"));
    t.map(|t| t.gpu.clone()).unwrap_or_default()
}

/// The time-sliced GPU's holders over the window, as `FleetInput::held` takes them.
fn held(input: &FleetInput) -> BTreeMap<String, HeldBy> {
    let at: BTreeSet<usize> = (0..input.steps).collect();
    let pods = TIME_SLICED
        .iter()
        .map(|(p, _)| ((*p).to_owned(), at.clone()))
        .collect();
    BTreeMap::from([(sliced_gpu(input), HeldBy { pods })])
}

/// Fleet 1: 48 coarse steps of 300 s (about 5 raw samples each, read in bands), one
/// cluster, no showback.
fn fleet() -> (FleetInput, Source) {
    let mut input = FleetInput {
        step_seconds: 300.0,
        steps: STEPS,
        tracks: tracks(&|node| node.to_owned()),
        held: BTreeMap::new(),
        step_bands: Some(StepBands::for_samples(5.0)),
    };
    input.held = held(&input);
    let mut impossible = 0;
    for t in &mut input.tracks {
        impossible += match t.pod.as_deref() {
            Some("ml/train") => bands(t, 6, 0.6, 0.98, None),
            Some("ml/infer") => bands(t, 8, 0.3, 0.9, None),
            Some("web/batch") => bands(t, 5, 0.5, 0.8, Some(40)),
            None if t.gpu.ends_with("/GPU-c1") => bands(t, 4, 0.3, 0.7, None),
            _ => 0,
        };
        t.finish();
    }
    let source = Source {
        prometheus: "http://prometheus.example:9090".into(),
        family: "truthscale",
        selector: None,
        start: "2025-01-06T00:00:00Z".into(),
        end: "2025-01-06T04:00:00Z".into(),
        start_ms: START_MS,
        step_seconds: 300.0,
        summarized_steps: true,
        blanked_readings: BTreeMap::from([("out_of_range", 1), ("sentinel", 3)]),
        clamped_ratios: 2,
        steps_per_point: 1,
        impossible_steps: impossible,
    };
    (input, source)
}

/// Fleet 2: the same workloads in two clusters (`east/node-a`, `east/node-b`,
/// `west/node-c`), 96 fine steps of 300 s combined two to a point.
fn clustered() -> (FleetInput, Source) {
    let at = |node: &str| {
        let cluster = if node == "node-c" { "west" } else { "east" };
        format!("{cluster}/{node}")
    };
    let mut input = FleetInput {
        step_seconds: 600.0,
        steps: STEPS,
        tracks: tracks(&at),
        held: BTreeMap::new(),
        step_bands: None,
    };
    input.held = held(&input);
    let source = Source {
        prometheus: "https://prometheus.example/api/prom".into(),
        family: "dcgm_exporter",
        selector: Some("namespace!=\"kube-system\"".into()),
        start: "2025-01-06T00:00:00Z".into(),
        end: "2025-01-06T08:00:00Z".into(),
        start_ms: START_MS,
        step_seconds: 300.0,
        summarized_steps: false,
        blanked_readings: BTreeMap::new(),
        clamped_ratios: 0,
        steps_per_point: 2,
        impossible_steps: 0,
    };
    (input, source)
}

/// What `report --by` reads from the history beside the GPU series, and its flags.
struct ByArgs {
    by: By,
    attrs: PodAttributes,
    holders: Holders,
    period_steps: Option<usize>,
    prices: Vec<(String, f64)>,
    energy_price: Option<f64>,
    top: usize,
}

/// `--by namespace --every 2h --gpu-hour-price 'NVIDIA H100 80GB HBM3=4.1'
/// --energy-price-per-kwh 0.15 --top 2` over
/// fleet 2: GPU requests for most pods (one that never ran), and the time-sliced GPU's
/// holders at every point.
fn by_namespace(input: &FleetInput) -> ByArgs {
    let requested = [
        ("ml/train", 8.0),
        ("ml/infer", 4.0),
        ("web/embed", 8.0),
        ("web/batch", 6.5),
        ("research/idle", 8.0),
        ("lab/nb-b", 2.0),
        ("ghost/never-ran", 1.0),
    ];
    let attrs = PodAttributes {
        // Each pod's hours spread evenly over the window's points.
        requested: Some(HashMap::from(requested.map(|(p, h)| {
            let each = h / STEPS as f64;
            (p.to_owned(), (0..STEPS).map(|s| (s, each)).collect())
        }))),
        ..PodAttributes::default()
    };
    let holding = |(pod, part): (&str, f64)| Holding {
        pod: pod.to_owned(),
        group: pod.split_once('/').map_or("", |(ns, _)| ns).to_owned(),
        effective_compute_estimate: Some(part),
        method: Some("sm_busy".into()),
    };
    let at_each: BTreeMap<usize, Vec<Holding>> = (0..STEPS)
        .map(|s| (s, TIME_SLICED.map(holding).to_vec()))
        .collect();
    ByArgs {
        by: By::Namespace,
        attrs,
        holders: Holders::from([(sliced_gpu(input), at_each)]),
        period_steps: Some((7_200.0 / input.step_seconds).round() as usize),
        prices: vec![(H100.to_owned(), 4.1)],
        energy_price: Some(0.15),
        top: 2,
    }
}

/// The document as `commands::report::run` assembles it; with `--by`, also the showback
/// with every group (the JSON's) and the CSV.
struct Assembled {
    doc: Document,
    every_group: Option<Showback>,
    csv: Option<String>,
    /// `--format opencost`'s document and `--focus`'s CSV, with `--by`.
    exports: Vec<(&'static str, String)>,
}

/// `commands::report::run` from the document on: the showback (`by`), the clusters
/// (`cluster_label`, as `--cluster-label` gives), then the notes on how the steps were read.
fn assemble(
    input: &FleetInput,
    source: Source,
    cfg: &FleetConfig,
    by: Option<&ByArgs>,
    cluster_label: bool,
) -> Assembled {
    let start_ms = source.start_ms;
    let mut doc = super::document(input, source, cfg);
    let (mut every_group, mut csv, mut exports) = (None, None, Vec::new());
    if let Some(b) = by {
        let (shown, sb, text) = showback(input, &doc, cfg, b, start_ms);
        doc.showback = Some(shown);
        let parts = by_model(input, cfg, b);
        exports = exported(&sb, &parts, &b.by, start_ms, input.step_seconds);
        every_group = Some(sb);
        csv = Some(text);
    }
    // The funnel: the showback's own, else every holder in one group (the time-sliced
    // GPU's holders at every step, as node mode's allocation info names them).
    doc.funnel = Some(match &every_group {
        Some(sb) => sb.total.funnel.clone(),
        None => {
            let holding = |pod: &str| Holding {
                pod: pod.to_owned(),
                group: super::funnel::ALL.to_owned(),
                effective_compute_estimate: None,
                method: None,
            };
            let at_each: BTreeMap<usize, Vec<Holding>> = (0..input.steps)
                .map(|s| (s, TIME_SLICED.iter().map(|(p, _)| holding(p)).collect()))
                .collect();
            let holders = Holders::from([(sliced_gpu(input), at_each)]);
            super::funnel::of_holders(input, &holders, cfg)
        }
    });
    if cluster_label {
        let clusters = super::by_cluster(input, cfg);
        if clusters.len() > 1 {
            doc.fleet.notes.push(format!(
                "the fleet-wide figures pool the {} clusters as one; BY CLUSTER sizes each on its own, a GPU never shared across clusters",
                clusters.len()
            ));
        }
        doc.clusters = Some(clusters);
    }
    if doc.source.summarized_steps {
        let note = super::notes::summarized_note(doc.source.step_seconds);
        doc.fleet.notes.push(note);
    }
    if doc.source.steps_per_point > 1 {
        let note = super::notes::combined_note(&doc.source);
        doc.fleet.notes.push(note);
    }
    let blanks = super::notes::blanks_note(&doc.source);
    doc.fleet.notes.extend(blanks);
    Assembled {
        doc,
        every_group,
        csv,
        exports,
    }
}

/// `--format opencost`'s document and `--focus`'s CSV of `sb` (every group).
fn exported(
    sb: &Showback,
    parts: &[ModelPart],
    by: &super::showback::By,
    start_ms: i64,
    step_seconds: f64,
) -> Vec<(&'static str, String)> {
    let doc = super::opencost::document(sb, by, start_ms, step_seconds);
    let json = serde_json::to_string_pretty(&doc).expect("the document serializes") + "\n";
    let args = super::focus::FocusArgs {
        currency: "USD".into(),
    };
    let mut files = vec![("opencost.json", json)];
    let mut focus = Vec::new();
    // Without a price there is no FOCUS CSV.
    if super::focus::write(&mut focus, parts, by, &args, start_ms, step_seconds).is_ok() {
        files.push((
            "focus.csv",
            String::from_utf8(focus).expect("the CSV is UTF-8"),
        ));
    }
    files
}

/// The showback's configuration as `run` makes it.
fn showback_config(cfg: &FleetConfig, b: &ByArgs) -> ShowbackConfig {
    ShowbackConfig {
        by: b.by.describe(),
        idle_busy_below: cfg.idle_busy_below,
        idle_compute_below: cfg.idle_compute_below,
        period_steps: b.period_steps,
        period_offset: 0,
        default_price: cfg.cost_per_gpu_hour,
        prices: b.prices.clone(),
        energy_price_per_kwh: b.energy_price,
    }
}

/// The showback split by GPU model, as `--focus` makes it.
fn by_model(input: &FleetInput, cfg: &FleetConfig, b: &ByArgs) -> Vec<ModelPart> {
    let groups = super::showback::groups(input, &b.by, &b.attrs);
    let none = (
        &truthscale_core::showback::Fractions::new(),
        &truthscale_core::showback::MeasuredUse::new(),
    );
    truthscale_core::showback::showback_by_model(
        input,
        &groups,
        &b.holders,
        none,
        &showback_config(cfg, b),
    )
}

/// The showback as `run` makes it: (the `--top` groups shown, every group, the CSV).
fn showback(
    input: &FleetInput,
    doc: &Document,
    cfg: &FleetConfig,
    b: &ByArgs,
    start_ms: i64,
) -> (Showback, Showback, String) {
    let groups = super::showback::groups(input, &b.by, &b.attrs);
    let requested = super::showback::requested_by_group(input, &groups, &b.by, &b.attrs, 1);
    let mut sb = truthscale_core::showback::showback(
        input,
        &groups,
        &b.holders,
        &requested,
        &showback_config(cfg, b),
    );
    sb.notes.extend(b.attrs.notes.iter().cloned());
    truthscale_core::showback::check_against_sizing(&mut sb, &doc.fleet);
    let mut shown = sb.clone();
    super::showback::fold_rest(&mut shown, b.top);
    let mut csv = Vec::new();
    super::showback::write_csv(&mut csv, &shown, start_ms, input.step_seconds)
        .expect("a CSV written to memory");
    let csv = String::from_utf8(csv).expect("the CSV is UTF-8");
    (shown, sb, csv)
}

/// The document `--json` writes: every group of the showback.
fn json_document(a: &Assembled) -> Document {
    let mut doc = a.doc.clone();
    if a.every_group.is_some() {
        doc.showback.clone_from(&a.every_group);
    }
    doc
}

/// The golden files of `a`, named `{name}.txt`, `.html`, `.json` (and `.csv`): the text
/// and the page show the `--top` groups, the JSON every group, as `run` writes them.
fn render(name: &str, a: &Assembled) -> Vec<(String, String)> {
    let mut text = Vec::new();
    super::text::write(&mut text, &a.doc).expect("the text written to memory");
    let text = String::from_utf8(text).expect("the text is UTF-8");
    let html = super::html::render(&a.doc).expect("the page renders");
    let json = serde_json::to_string(&json_document(a)).expect("the document serializes") + "\n";
    let mut files = vec![
        (format!("{name}.json"), json),
        (format!("{name}.txt"), text),
        (format!("{name}.html"), html),
    ];
    if let Some(csv) = &a.csv {
        files.push((format!("{name}.csv"), csv.clone()));
    }
    for (suffix, text) in &a.exports {
        files.push((format!("{name}.{suffix}"), text.clone()));
    }
    files
}

/// Up to 60 characters either side of character `col` of `line`, without its line break.
fn excerpt(line: Option<&str>, col: usize) -> String {
    let Some(line) = line else {
        return "(no such line)".to_owned();
    };
    let chars: Vec<char> = line.trim_end_matches('\n').chars().collect();
    let from = col.saturating_sub(60).min(chars.len());
    let to = (col + 60).min(chars.len());
    let cut: String = chars[from..to].iter().collect();
    format!(
        "{}{cut:?}{}",
        if from > 0 { "…" } else { "" },
        if to < chars.len() { "…" } else { "" }
    )
}

/// Where `got` first differs from `want`: its line (from 1), its column, and both lines
/// around it; `None` when they are the same.
fn first_difference(want: &str, got: &str) -> Option<String> {
    if want == got {
        return None;
    }
    let mut w = want.split_inclusive('\n');
    let mut g = got.split_inclusive('\n');
    let mut n = 0;
    loop {
        n += 1;
        let (a, b) = (w.next(), g.next());
        if a == b {
            continue;
        }
        let col = match (a, b) {
            (Some(a), Some(b)) => a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count(),
            _ => 0,
        };
        return Some(format!(
            "first differs at line {n}, column {}:\n  golden: {}\n  output: {}",
            col + 1,
            excerpt(a, col),
            excerpt(b, col)
        ));
    }
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/report")
}

/// Compare `files` with their goldens, every file before failing; under `UPDATE_GOLDEN`
/// write them instead.
fn check(files: &[(String, String)]) {
    let dir = golden_dir();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(&dir).expect("the golden folder can be made");
        for (name, got) in files {
            let path = dir.join(name);
            std::fs::write(&path, got)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        }
        return;
    }
    let mut failures = Vec::new();
    for (name, got) in files {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Err(e) => failures.push(format!("{}: {e}", path.display())),
            Ok(want) => failures
                .extend(first_difference(&want, got).map(|d| format!("{}: {d}", path.display()))),
        }
    }
    assert!(
        failures.is_empty(),
        "the report's output differs from its goldens:\n{}\nif the change is intended, {REGENERATE}",
        failures.join("\n")
    );
}

/// Fleet 1 (no `--by`, no clusters): 48 coarse steps read in bands, MIG, time-sliced and
/// pod-less GPUs, an unmeasured stretch.
fn fleet_assembled() -> Assembled {
    let (input, source) = fleet();
    let cfg = FleetConfig {
        cost_per_gpu_hour: Some(3.0),
        ..FleetConfig::default()
    };
    assemble(&input, source, &cfg, None, false)
}

/// Fleet 2: `--by namespace --every 2h --top 2` with requests and prices, and
/// `--cluster-label` over two clusters.
fn showback_assembled() -> Assembled {
    let (input, source) = clustered();
    let cfg = FleetConfig {
        cost_per_gpu_hour: Some(2.5),
        ..FleetConfig::default()
    };
    let by = by_namespace(&input);
    assemble(&input, source, &cfg, Some(&by), true)
}

/// Every object key of `v`, at any depth.
fn keys_of(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                keys_of(x, out);
            }
        }
        serde_json::Value::Array(xs) => xs.iter().for_each(|x| keys_of(x, out)),
        _ => {}
    }
}

/// Whether `text` names `key`: as `` `key` ``, or at the end of a backticked dotted path
/// (`` `x.key` ``, `` `x.*.key` ``).
fn names(text: &str, key: &str) -> bool {
    if text.contains(&format!("`{key}`")) {
        return true;
    }
    let tail = format!(".{key}`");
    text.match_indices(&tail).any(|(at, _)| {
        let path_start = text[..at].rfind(|c: char| c == '`' || c.is_whitespace());
        path_start.is_some_and(|i| text[i..].starts_with('`'))
    })
}

/// The object keys of `doc`, at any depth, that `text` does not name, in order.
fn unnamed_keys(doc: &serde_json::Value, text: &str) -> Vec<String> {
    let mut keys = BTreeSet::new();
    keys_of(doc, &mut keys);
    keys.into_iter().filter(|k| !names(text, k)).collect()
}

#[test]
fn the_fleet_report_is_its_golden() {
    check(&render("fleet", &fleet_assembled()));
}

#[test]
fn the_showback_and_cluster_report_is_its_golden() {
    check(&render("showback", &showback_assembled()));
}

/// `v`'s number at the JSON `pointer`.
fn num(v: &serde_json::Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {pointer}"))
}

/// Whether `got` is `want`, worked out by hand, to 1e-6.
fn near(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-6, "{what}: {got}, by hand {want}");
}

/// The JSON document of `a` as built now and, unless it is being rewritten, the golden
/// file `{name}.json` as committed: both must hold the values worked out by hand.
fn json_forms(name: &str, a: &Assembled) -> Vec<serde_json::Value> {
    let mut forms = vec![serde_json::to_value(json_document(a)).expect("the document serializes")];
    if std::env::var_os("UPDATE_GOLDEN").is_none() {
        let path = golden_dir().join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        forms.push(serde_json::from_str(&text).expect("the golden is JSON"));
    }
    forms
}

/// Fleet 1's figures worked out by hand from its inputs (steps of 300 s, 1/12 h; 3.0 a
/// GPU-hour), never by the code under test.
fn fleet_by_hand(v: &serde_json::Value) {
    // Each GPU from its first reading to its last: GPU-a0, b0, b1 (its gap is inside),
    // c0, c1 48 steps each, a1 (the MIG instance, from step 4) 44, b2 40: 324 steps = 27 h.
    near(num(v, "/funnel/total_gpu_hours"), 27.0, "total");
    // Held: 48 (train) + 44 × 3/7 (3g.40gb of 7 slices) + 48 (embed) + 48 (batch) + 40
    // (idle) + 48 (time-sliced c1) = 250.857143 steps = 20.904762 h; the rest, 6.095238 h,
    // is c0's 4 h and the MIG GPU's other 4/7: 44 × 4/7 / 12 = 2.095238 h. Of c0's 48
    // steps, the 4 with nothing read (20..24) are allocation unknown, 0.333333 h: 44 / 12 +
    // 2.095238 = 5.761905 h unallocated.
    near(
        num(v, "/funnel/allocated_gpu_hours"),
        20.904_762,
        "allocated",
    );
    near(
        num(v, "/funnel/unallocated_gpu_hours"),
        5.761_905,
        "unallocated",
    );
    near(
        num(v, "/funnel/allocation_unknown_gpu_hours"),
        4.0 / 12.0,
        "allocation unknown",
    );
    // research/idle (busy 0.01 < 0.05, ECF 0.00075 < 0.01) for its 40 steps: 3.333333 h,
    // which at 3.0 costs 10.0.
    near(
        num(v, "/funnel/idle_held_gpu_hours"),
        40.0 / 12.0,
        "idle held",
    );
    near(num(v, "/idle/workloads/0/idle_cost"), 10.0, "idle cost");
    // web/batch unmeasured: 8 steps without readings (18..26), 4 of memory alone (26..30)
    // and step 40 (a raw sample past the clamp limit): 13 steps = 1.083333 h.
    near(
        num(v, "/funnel/use_unmeasured_gpu_hours"),
        13.0 / 12.0,
        "unmeasured",
    );
    // The busy flags summed: 1.0 + 0.6 + 0.95 + 0.01 + 0.0 + 0.7 = 3.26 before ml/infer
    // starts at step 4, 3.26 + 0.9 = 4.16 after.
    near(
        num(v, "/series/busy_claim_gpus/0"),
        3.26,
        "busy claim, step 0",
    );
    near(
        num(v, "/series/busy_claim_gpus/4"),
        4.16,
        "busy claim, step 4",
    );
}

/// Fleet 2's showback worked out by hand from its inputs (steps of 600 s, 1/6 h; H100s at
/// 4.1 a GPU-hour, others 2.5; 0.15 a kWh), never by the code under test.
fn showback_by_hand(v: &serde_json::Value) {
    let groups = v
        .pointer("/showback/total/groups")
        .and_then(serde_json::Value::as_array)
        .expect("the showback's groups");
    let g = |name: &str, key: &str| {
        let group = groups.iter().find(|x| x["group"] == name);
        let x = group.unwrap_or_else(|| panic!("no group {name}"));
        num(x, key)
    };
    // ml: train's whole H100 for 48 steps (8 h) + infer's 3g.40gb (3/7) for 44 steps:
    // 8 + 44 × (600/3600) × 3/7 = 11.142857 GPU-h; at 4.1, 45.685714.
    near(g("ml", "/allocated_gpu_hours"), 11.142_857, "ml allocated");
    near(g("ml", "/cost/allocated"), 45.685_714, "ml cost");
    // The time-sliced GPU c1 (two holders, 1/2 each, 48 steps): 4 GPU-h for lab; research
    // adds research/idle's 40 steps: 4 + 40/6 = 10.666667, of it 6.666667 idle.
    near(g("lab", "/allocated_gpu_hours"), 4.0, "lab allocated");
    near(g("lab", "/use_unknown_gpu_hours"), 4.0, "lab unknown");
    near(
        g("research", "/allocated_gpu_hours"),
        32.0 / 3.0,
        "research allocated",
    );
    near(
        g("research", "/idle_gpu_hours"),
        20.0 / 3.0,
        "research idle",
    );
    // c1's ECF is 0.75 × wave(s, 10, 0.1, 0.45): over 48 steps the wave's rises sum to
    // 4 × 25 + 22 = 122, so Σ saturation = 48 × 0.1 + 0.35 × 122/5 = 13.34 and Σ ECF =
    // 10.005; each holder's half of it, in hours: 10.005 / 2 / 6 = 0.83375.
    for ns in ["research", "lab"] {
        let ecf = g(ns, "/time_sliced_effective_compute_gpu_hours");
        near(ecf, 0.833_75, ns);
    }
    // web: power 75 + 600 × saturation per step, 600 s a step (kWh = W / 6000). embed:
    // Σ sat = 48 × 0.02 + 0.1 × 72/3 = 3.36, Σ W = 3600 + 2016 = 5616 → 0.936 kWh. batch
    // (36 steps with power): Σ sat = 36 × 0.3 + 0.4 × 94/5 = 18.32, Σ W = 2700 + 10992 =
    // 13692 → 2.282 kWh. Together 3.218 kWh; at 0.15, 0.4827. Its 16 GPU-h of L4 (two
    // whole GPUs, 48 steps each) at 2.5: 40.
    near(g("web", "/energy_kwh"), 3.218, "web energy");
    near(g("web", "/energy_cost"), 0.4827, "web energy cost");
    near(g("web", "/cost/allocated"), 40.0, "web cost");
    // The fleet: 324 GPU-steps = 54 GPU-h. Energy: train 3.48 + embed 0.936 + batch 2.282
    // + research/idle 40 × 75.6/6000 = 0.504 + c0 44 × 75/6000 = 0.55 (nothing read at 4
    // of its steps) + c1 (3600 + 600 × 13.34)/6000 = 1.934 + a1 (44 × 75 + 600 ×
    // 5.575)/6000 = 1.1075: 10.7935 kWh.
    near(
        num(v, "/showback/total/fleet_gpu_hours"),
        54.0,
        "fleet GPU-h",
    );
    near(
        num(v, "/showback/total/energy/fleet_kwh"),
        10.7935,
        "fleet kWh",
    );
    // c0's 4 steps with nothing read: allocation unknown, 4 × 600 s = 0.666667 GPU-h, at
    // its H100's price; none of the fleet's energy (none was read).
    near(
        num(v, "/showback/total/allocation_unknown_gpu_hours"),
        4.0 / 6.0,
        "allocation unknown GPU-h",
    );
}

/// The goldens hold figures worked out by hand from their inputs: regenerating a golden
/// from the code cannot bless wrong arithmetic.
#[test]
fn the_goldens_hold_values_worked_out_by_hand() {
    for v in json_forms("fleet", &fleet_assembled()) {
        fleet_by_hand(&v);
    }
    for v in json_forms("showback", &showback_assembled()) {
        showback_by_hand(&v);
    }
}

/// Without pods, allocation is unknown: the page's first bar is the GPUs reporting, named
/// so, never "allocated".
#[test]
fn without_pods_the_first_bar_is_the_gpus_reporting() {
    let mut doc = fleet_assembled().doc;
    let reporting = doc.fleet.sizing.gpus_reporting.map(|s| s.max);
    doc.fleet.sizing.allocated_gpus = None;
    let html = super::html::render(&doc).expect("the page renders");
    assert!(reporting.is_some());
    assert!(html.contains("GPUs reporting (peak)"), "no such bar");
    assert!(!html.contains("allocated (peak)<"), "an allocation bar");
}

/// Built twice in one process (each hash map with its own random keys), the files are the
/// same bytes: nothing in them follows a hash map's order.
#[test]
fn the_goldens_come_out_alike_twice() {
    assert_eq!(
        render("fleet", &fleet_assembled()),
        render("fleet", &fleet_assembled())
    );
    assert_eq!(
        render("showback", &showback_assembled()),
        render("showback", &showback_assembled())
    );
}

/// The inputs hold what the goldens are meant to cover.
#[test]
fn the_inputs_cover_what_they_claim() {
    let (input, source) = fleet();
    assert_eq!(input.tracks.len(), 7);
    assert!(
        input
            .tracks
            .iter()
            .any(|t| t.mig.is_some_and(|p| p.name == "3g.40gb"))
    );
    assert_eq!(input.held.values().map(|h| h.pods.len()).sum::<usize>(), 2);
    assert_eq!(source.impossible_steps, 1, "the raw sample past the limit");
    let a = assemble(&input, source, &FleetConfig::default(), None, false);
    assert!(a.doc.fleet.sizing.packing.is_some());
    let (input, source) = clustered();
    let by = by_namespace(&input);
    let a = assemble(&input, source, &FleetConfig::default(), Some(&by), true);
    assert_eq!(a.doc.clusters.as_ref().map(Vec::len), Some(2));
    let every = a.every_group.as_ref().expect("a showback");
    assert_eq!(every.periods.len(), 4, "2 h periods of 8 h");
    assert_eq!(
        every.total.groups.len(),
        5,
        "lab, ml, research, web, and ghost (requested, never ran)"
    );
    assert!(
        every
            .total
            .groups
            .iter()
            .all(|g| g.requested_gpu_hours.is_some())
    );
}

/// docs/report.md names every key of both JSON goldens (issue 36).
#[test]
fn docs_name_every_field_of_the_json_document() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/report.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    for (name, a) in [
        ("fleet", fleet_assembled()),
        ("showback", showback_assembled()),
    ] {
        let doc = serde_json::to_value(json_document(&a)).expect("the document serializes");
        let missing = unnamed_keys(&doc, &text);
        assert!(
            missing.is_empty(),
            "{name}.json has fields docs/report.md does not name: {}; document them in \
             docs/report.md (\"The JSON document, field by field\"), each as `key` or `object.key`",
            missing.join(", ")
        );
    }
}

#[test]
fn caught_an_undocumented_field() {
    let doc = serde_json::json!({"a": [{"no_such_field_xyz": 1, "named": {"deep": true}}]});
    let text = "`a`, `named` and `x.deep`; no_such_field_xyz bare, `no_such_field_xyz2`, `x y.no_such_field_xyz`";
    assert_eq!(unnamed_keys(&doc, text), ["no_such_field_xyz"]);
    let text = "`a`, `named` and `x.deep`; `a.no_such_field_xyz`";
    assert!(unnamed_keys(&doc, text).is_empty());
}

#[test]
fn a_difference_names_its_line_and_column() {
    assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
    let d = first_difference("a\nbcd\ne\n", "a\nbXd\ne\n").unwrap_or_default();
    assert!(d.contains("line 2, column 2"), "{d}");
    assert!(d.contains("\"bcd\"") && d.contains("\"bXd\""), "{d}");
    let d = first_difference("a\n", "a\nmore\n").unwrap_or_default();
    assert!(d.contains("line 2") && d.contains("(no such line)"), "{d}");
    let long = "x".repeat(200);
    let d =
        first_difference(&long, &format!("{}y{}", &long[..100], &long[101..])).unwrap_or_default();
    assert!(d.contains("column 101") && d.contains('…'), "{d}");
}

/// Fleet 1's idle pod `research/idle` run by Kubeflow Notebook `idle`: kube-state-metrics
/// names its owner StatefulSet `idle`, and `kube_pod_labels` its `notebook-name` label
/// `idle`. The idle row names the Notebook and, under it, the command that stops it (its
/// stop annotation), in both layouts; without the label the StatefulSet is named, and
/// scaled.
#[test]
fn an_idle_notebook_s_row_names_it_and_the_command_that_stops_it() {
    use super::owners::{Owners, tests::row};
    let pod = row(&[
        ("namespace", "research"),
        ("pod", "idle"),
        ("owner_kind", "StatefulSet"),
        ("owner_name", "idle"),
    ]);
    let label = row(&[
        ("namespace", "research"),
        ("pod", "idle"),
        ("label_notebook_name", "idle"),
    ]);
    let text_of = |owners: &Owners| {
        let mut doc = fleet_assembled().doc;
        owners.apply(&mut doc.fleet.idle);
        let mut text = Vec::new();
        super::text::write(&mut text, &doc).expect("the text written to memory");
        let html = super::html::render(&doc).expect("the page renders");
        (String::from_utf8(text).expect("UTF-8"), html)
    };
    let row_head = "  research/idle: idle 100.0% of 3.3 h measured, 3.3 idle GPU-hours (10.00); idle for the last 3.3 h, holding 2.0 GiB;";
    let (text, html) = text_of(&Owners::from_series(
        std::slice::from_ref(&pod),
        &[],
        std::slice::from_ref(&label),
    ));
    let want = format!(
        "{row_head} Notebook idle\n    to suspend it: kubectl -n research annotate notebook/idle kubeflow-resource-stopped=\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" --overwrite\n"
    );
    assert!(text.contains(&want), "{text}");
    assert!(html.contains("<td>Notebook idle</td>"), "{html}");
    assert!(
        html.contains("kubectl -n research annotate notebook/idle kubeflow-resource-stopped="),
        "{html}"
    );
    let (text, _) = text_of(&Owners::from_series(&[pod], &[], &[]));
    let want = format!(
        "{row_head} StatefulSet idle\n    to suspend it: kubectl -n research scale statefulset/idle --replicas=0\n"
    );
    assert!(text.contains(&want), "{text}");
}

/// A workload whose use was never read (memory only): the idle section names it as not
/// measured, and its cluster, where no workload's idleness was measured, has no idle total
/// (not 0), while a cluster with measured workloads has one.
#[test]
fn idleness_never_measured_is_named_and_never_a_zero() {
    let (mut input, source) = fleet();
    let mut dark = gpu_track(
        Some("lab/dark"),
        "north/GPU-x0".into(),
        "h100-sxm",
        H100,
        81_559,
    );
    let shape = Shape {
        sat: |_| None,
        busy: 0.0,
        mem_gib: |_| Some(10.0),
    };
    record(&mut dark, 0..STEPS, &shape);
    dark.finish();
    input.tracks.push(dark);
    let cfg = FleetConfig::default();
    let clusters = super::by_cluster(&input, &cfg);
    let idle_of = |name: &str| {
        clusters
            .iter()
            .find(|c| c.cluster == name)
            .map(|c| c.idle_gpu_hours)
    };
    assert_eq!(idle_of("north"), Some(None), "no workload measured");
    // node-b: `research/idle` (busy 0.01, saturation 0.001) is idle at each of the 40 steps
    // of 300 s it ran; its neighbours are busy whenever read.
    let node_b = idle_of("node-b").flatten().unwrap_or_default();
    assert!((node_b - 40.0 * 300.0 / 3600.0).abs() < 1e-9, "{node_b}");

    let doc = super::document(&input, source, &cfg);
    assert_eq!(doc.fleet.idle.unmeasured, ["lab/dark"]);
    let mut text = Vec::new();
    super::idle::text(&mut text, &doc.fleet, 1).expect("written");
    let text = String::from_utf8(text).unwrap_or_default();
    assert!(
        text.contains("idle GPU-hours not known (neither the busy flag nor effective compute read, or a MIG instance of a profile the catalog lacks), so neither listed nor counted: 1 workload(s): lab/dark"),
        "{text}"
    );
    let mut page = String::new();
    super::idle::html(&mut page, &doc.fleet, 1);
    assert!(page.contains("1 workload(s): lab/dark"), "{page}");
}

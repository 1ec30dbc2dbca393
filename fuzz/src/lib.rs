//! What the fuzz targets share: input splitting, the checks every parsed sample must pass,
//! and [`Checked`], a `Deriver` (and `Analyzer`) whose every output is checked against the
//! invariants `ARCHITECTURE.md` and `docs/derivations.md` state.
//!
//! A check that fails panics with the value at fault, so libFuzzer records the input as a
//! crash.

use std::collections::HashMap;
use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::{self, DeriveConfig, INT64_BLANK, SENTINEL_FLOOR, is_sentinel_of};
use truthscale_core::exposition::{self, ExporterStatus, GpuEntry, Identity};
use truthscale_core::gpus::GpuSpec;
use truthscale_core::model::{EntityKey, Field, Reading, Sample, Timestamp};
use truthscale_core::parse::prom_text;
use truthscale_core::tracker::{Deriver, EntityWindow, Totals};

/// The lines of `data` as a capture reader sees them: split at `\n`, a trailing `\r`
/// dropped, and a line that is not UTF-8 given as `Err` (its number still counts).
pub fn lines(data: &[u8]) -> impl Iterator<Item = Result<&str, ()>> {
    data.split(|b| *b == b'\n').map(|l| {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        std::str::from_utf8(l).map_err(|_| ())
    })
}

/// Feed `data` a line at a time to a line parser (`push` a line, then `finish`) and check
/// every sample it makes: values finite ([`check_parsed`]), `what` (a sweep, a scrape)
/// stamped after the one before where the parser stamps it itself, and each error naming
/// its own line. `own_time` says whether the samples so far carried the input's own
/// timestamps: those are kept as written, and the deriver, not the parser, reports time that
/// does not increase.
pub fn check_line_parser<P>(
    data: &[u8],
    what: &str,
    parser: &mut P,
    push: fn(&mut P, &str) -> Result<Option<Sample>, truthscale_core::parse::ParseError>,
    finish: fn(&mut P) -> Option<Sample>,
    own_time: fn(&P) -> bool,
) {
    let mut last = None;
    let mut check = |s: &Sample, own: bool| {
        check_parsed(s);
        if let Some(prev) = last
            && !own
        {
            assert!(s.taken > prev, "{what} at {:?} after {prev:?}", s.taken);
        }
        last = Some(s.taken);
    };
    for (i, line) in lines(data).enumerate() {
        match push(parser, line.unwrap_or("")) {
            Ok(Some(s)) => check(&s, own_time(parser)),
            Ok(None) => {}
            Err(e) => assert_eq!(e.line, i + 1, "{e}"),
        }
    }
    if let Some(s) = finish(parser) {
        check(&s, own_time(parser));
    }
}

/// Every value a parser produced is finite (parsers turn NaN, ±Inf and sentinels into
/// blanks).
pub fn check_parsed(s: &Sample) {
    for e in &s.entities {
        for (f, r) in e.readings.iter() {
            if let Reading::Value(v) = r {
                assert!(v.is_finite(), "parsed {} = {v} is not finite", f.name());
            }
        }
    }
}

/// `x` is absent, or finite.
fn finite(what: &str, x: Option<f64>) {
    if let Some(v) = x {
        assert!(v.is_finite(), "{what} = {v} is not finite");
    }
}

/// `x` is absent, or finite within `[lo, hi]`.
fn within(what: &str, x: Option<f64>, lo: f64, hi: f64) {
    if let Some(v) = x {
        assert!(
            v.is_finite() && (lo..=hi).contains(&v),
            "{what} = {v} is outside [{lo}, {hi}]"
        );
    }
}

/// Relative closeness for sums of the same seconds added in a different order.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// `a ≤ b`, allowing for rounding in sums.
fn at_most(a: f64, b: f64) -> bool {
    a <= b || close(a, b)
}

/// What the checker remembers of one entity.
#[derive(Debug, Default)]
struct Seen {
    last_taken: Option<Timestamp>,
    totals: Totals,
    had_busy: bool,
    had_ecf: bool,
    had_power: bool,
    last: Option<EntityWindow>,
    /// The farthest the entity's energy counter was read from its sample's time, seconds:
    /// the counter's spans run between its reads, so its seconds may pass the observed ones
    /// by twice this.
    energy_read_offset: f64,
}

/// A `Deriver` and an `Analyzer` fed the same samples, with every window checked.
#[derive(Debug)]
pub struct Checked {
    deriver: Deriver,
    analyzer: Option<Analyzer>,
    config: DeriveConfig,
    kappa_max: f64,
    seen: HashMap<EntityKey, Seen>,
    order: Vec<EntityKey>,
}

impl Checked {
    /// A checker over a deriver with `config` and `nominal_interval`; `analyze` also feeds
    /// an `Analyzer` and checks its report in [`Checked::finish`].
    pub fn new(config: DeriveConfig, nominal_interval: Option<f64>, analyze: bool) -> Checked {
        Checked {
            kappa_max: config.kappa_max,
            config: config.clone(),
            analyzer: analyze.then(|| Analyzer::new(Deriver::new(config.clone(), None), false)),
            deriver: Deriver::new(config, nominal_interval),
            seen: HashMap::new(),
            order: Vec::new(),
        }
    }

    /// Use this catalog entry for every entity, as `--model` does.
    pub fn set_model_override(&mut self, spec: Option<&'static GpuSpec>) {
        self.deriver.set_model_override(spec);
        if let Some(a) = &mut self.analyzer {
            let mut d = Deriver::new(self.config.clone(), None);
            d.set_model_override(spec);
            *a = Analyzer::new(d, false);
        }
    }

    /// Feed one sample and check what comes out.
    pub fn observe(&mut self, sample: &Sample) {
        if let Some(a) = &mut self.analyzer {
            a.push(sample);
        }
        let out = self.deriver.observe(sample);
        assert!(
            out.windows.len() <= sample.entities.len(),
            "{} windows for {} entities",
            out.windows.len(),
            sample.entities.len()
        );
        let mut this_sample: Vec<EntityKey> = Vec::new();
        for w in out.windows {
            let key = w.id.key();
            assert!(
                !this_sample.contains(&key),
                "two windows for {} in one sample",
                w.id
            );
            this_sample.push(key.clone());
            if !self.seen.contains_key(&key) {
                self.order.push(key.clone());
            }
            let read_at = sample
                .entities
                .iter()
                .find(|e| e.id.key() == key)
                .and_then(|e| e.energy_read_at);
            let seen = self.seen.entry(key).or_default();
            if let Some(at) = read_at {
                let offset = at.seconds_since(sample.taken).abs();
                seen.energy_read_offset = seen.energy_read_offset.max(offset);
            }
            check_window(&w, seen, sample.taken, self.kappa_max);
            seen.last_taken = Some(sample.taken);
            seen.totals = w.totals;
            seen.last = Some(w);
        }
    }

    /// Check the analysis report and the exposition of the last windows.
    pub fn finish(self) {
        if let Some(a) = &self.analyzer {
            check_report(a);
        }
        let gpus: Vec<GpuEntry> = self
            .order
            .iter()
            .filter_map(|k| self.seen.get(k)?.last.clone())
            .map(|window| GpuEntry {
                window,
                source: "replay",
                up: true,
                list_cap: None,
            })
            .collect();
        check_exposition(&gpus);
    }
}

fn check_window(w: &EntityWindow, seen: &mut Seen, taken: Timestamp, kappa_max: f64) {
    // A sample not later than the entity's previous one is skipped: no window.
    if let Some(prev) = seen.last_taken {
        assert!(
            taken > prev,
            "{}: a window at {taken:?} after one at {prev:?}",
            w.id
        );
    }
    // Sanitized readings: finite, not negative, below the blanks of the field's type (the
    // FP64 blank, 2^47; a cumulative counter's INT64 one), fractions ≤ 1.
    for (f, r) in w.readings.iter() {
        if let Reading::Value(v) = r {
            let floor = if f.is_int64_counter() {
                INT64_BLANK
            } else {
                SENTINEL_FLOOR
            };
            assert!(
                (0.0..floor).contains(&v) && !is_sentinel_of(f, v),
                "sanitized {} = {v}",
                f.name()
            );
            if f.is_ratio() {
                assert!(v <= 1.0, "sanitized fraction {} = {v}", f.name());
            }
        }
    }
    let m = &w.metrics;
    let r = &w.readings;
    // Never NaN or infinite; fractions in [0, 1]; the documented bounds of each formula.
    within("reported_utilization", m.reported_utilization, 0.0, 1.0);
    within("effective_compute", m.effective_compute, 0.0, 1.0);
    within(
        "effective_compute_upper_bound",
        m.effective_compute_upper_bound,
        0.0,
        1.0,
    );
    within("busiest_pipe", m.busiest_pipe, 0.0, 1.0);
    within("kappa", m.kappa, 0.0, kappa_max.max(0.0));
    within("roofline_saturation", m.roofline_saturation, 0.0, 1.0);
    within(
        "roofline_saturation_spec",
        m.roofline_saturation_spec,
        0.0,
        1.0,
    );
    within(
        "roofline_saturation_practical",
        m.roofline_saturation_practical,
        0.0,
        1.0,
    );
    within("inflation_gap_points", m.inflation_gap_points, 0.0, 100.0);
    within("inflation_ratio", m.inflation_ratio, 0.0, 100.0);
    within("spatial_inflation", m.spatial_inflation, 0.0, 100.0);
    within("roofline_gap", m.roofline_gap, -1.0, 1.0);
    within("rho", m.rho, 0.0, 50.0);
    within("power_proxy", m.power_proxy, 0.0, 1.0);
    within("memory_used_fraction", m.memory_used_fraction, 0.0, 1.0);
    within(
        "power_watts",
        m.power_watts.map(|p| p.value),
        0.0,
        f64::INFINITY,
    );
    finite("truth_effective_compute", w.truth_effective_compute);
    // A blank is never zero: each value exists exactly when its input does.
    assert_eq!(
        m.reported_utilization,
        r.value(Field::ReportedUtil),
        "reported utilization without the busy flag"
    );
    // A compute term exactly when the tensor counter was read; an effective compute
    // fraction only where it could also be clock-corrected.
    assert_eq!(
        m.compute_measured(),
        r.value(Field::TensorActive).is_some(),
        "compute term {:?} / {:?} with tensor {:?}",
        m.effective_compute,
        m.effective_compute_uncorrected,
        r.get(Field::TensorActive)
    );
    assert_eq!(
        m.effective_compute.is_some(),
        m.compute_measured() && m.kappa.is_some(),
        "effective compute {:?} with κ {:?}",
        m.effective_compute,
        m.kappa
    );
    assert_eq!(m.clock_corrected, m.effective_compute.is_some(), "clock_corrected");
    assert_eq!(m.fidelity, Some(derive::fidelity(r)), "fidelity");
    if m.memory_used_fraction.is_some() {
        assert!(r.value(Field::MemUsedBytes).is_some() && r.value(Field::MemTotalBytes).is_some());
    }
    if m.power_watts.is_some() {
        assert!(
            r.value(Field::PowerWatts).is_some() || r.value(Field::EnergyJoules).is_some(),
            "power without a power or energy reading"
        );
    }
    // The capability tier is the best any window had: it never gets worse.
    if let Some(prev) = &seen.last {
        assert!(w.capability <= prev.capability, "capability went down");
    }
    if let Some(f) = m.fidelity {
        assert!(w.capability <= f, "capability below this window's tier");
    }
    // Window length.
    assert!(
        w.dt_seconds.is_finite() && w.dt_seconds >= 0.0,
        "dt_seconds = {}",
        w.dt_seconds
    );
    // Ceilings: observed sustained averages.
    for (what, c) in [
        ("roofline ceiling", w.ceilings.roofline_saturation),
        ("output tokens ceiling", w.ceilings.output_tokens_per_second),
    ] {
        if let Some(c) = c {
            assert!(c.value.is_finite(), "{what} value = {}", c.value);
            assert!(
                c.age_seconds.is_finite() && c.age_seconds >= 0.0,
                "{what} age = {}",
                c.age_seconds
            );
        }
    }
    if let Some(c) = w.ceilings.roofline_saturation {
        assert!(
            (-1e-9..=1.0 + 1e-9).contains(&c.value),
            "roofline ceiling = {}",
            c.value
        );
    }
    seen.had_busy |= m.reported_utilization.is_some();
    seen.had_ecf |= m.effective_compute.is_some();
    seen.had_power |= m.power_watts.is_some();
    check_totals(w, seen);
}

fn check_totals(w: &EntityWindow, seen: &Seen) {
    let t = &w.totals;
    let p = &seen.totals;
    let fields: [(&str, f64, f64); 12] = [
        ("observed_seconds", t.observed_seconds, p.observed_seconds),
        ("busy_seconds", t.busy_seconds, p.busy_seconds),
        (
            "busy_observed_seconds",
            t.busy_observed_seconds,
            p.busy_observed_seconds,
        ),
        (
            "effective_compute_seconds",
            t.effective_compute_seconds,
            p.effective_compute_seconds,
        ),
        (
            "effective_compute_observed_seconds",
            t.effective_compute_observed_seconds,
            p.effective_compute_observed_seconds,
        ),
        (
            "unclassified_seconds",
            t.unclassified_seconds,
            p.unclassified_seconds,
        ),
        ("energy_joules", t.energy_joules, p.energy_joules),
        (
            "energy_observed_seconds",
            t.energy_observed_seconds,
            p.energy_observed_seconds,
        ),
        (
            "phase_compared_seconds",
            t.phase_compared_seconds,
            p.phase_compared_seconds,
        ),
        (
            "phase_agreed_seconds",
            t.phase_agreed_seconds,
            p.phase_agreed_seconds,
        ),
        (
            "phase_seconds (sum)",
            t.phase_seconds.iter().flatten().sum(),
            p.phase_seconds.iter().flatten().sum(),
        ),
        (
            "verdict_seconds (sum)",
            t.verdict_seconds.iter().sum(),
            p.verdict_seconds.iter().sum(),
        ),
    ];
    // Integrals are counters: finite, never negative, never decreasing.
    for (what, now, before) in fields {
        assert!(now.is_finite() && now >= 0.0, "{}: {what} = {now}", w.id);
        assert!(
            now >= before,
            "{}: {what} went down from {before} to {now}",
            w.id
        );
    }
    for x in t.phase_seconds.iter().flatten().chain(&t.verdict_seconds) {
        assert!(x.is_finite() && *x >= 0.0, "{}: {t:?}", w.id);
    }
    if let Some(x) = t.truth_effective_compute_seconds {
        assert!(
            x.is_finite(),
            "{}: truth_effective_compute_seconds = {x}",
            w.id
        );
    }
    assert!(t.windows >= p.windows, "windows went down");
    // Each integral has its own denominator, within the observed seconds; a fraction's
    // integral stays within its denominator.
    let o = t.observed_seconds;
    assert!(at_most(t.busy_observed_seconds, o), "{t:?}");
    assert!(at_most(t.effective_compute_observed_seconds, o), "{t:?}");
    // Energy may also cover a gap, where the energy counter's delta spans it, and runs
    // between the counter's own reads.
    let slack = 2.0 * seen.energy_read_offset;
    assert!(
        at_most(t.energy_observed_seconds, o + t.unobserved_seconds + slack),
        "{t:?}"
    );
    assert!(
        at_most(t.phase_agreed_seconds, t.phase_compared_seconds),
        "{t:?}"
    );
    assert!(at_most(t.phase_compared_seconds, o), "{t:?}");
    assert!(at_most(t.busy_seconds, t.busy_observed_seconds), "{t:?}");
    assert!(
        at_most(
            t.effective_compute_seconds,
            t.effective_compute_observed_seconds
        ),
        "{t:?}"
    );
    // Every integrated second is in one regime (or unclassified) and under one verdict.
    let regimes: f64 = t.phase_seconds.iter().flatten().sum::<f64>() + t.unclassified_seconds;
    assert!(
        close(regimes, o),
        "regime seconds {regimes} vs observed {o}"
    );
    let verdicts: f64 = t.verdict_seconds.iter().sum();
    assert!(
        close(verdicts, o),
        "verdict seconds {verdicts} vs observed {o}"
    );
    // An integral is written only for an entity that had its input.
    if !seen.had_busy {
        assert!(
            t.busy_observed_seconds == 0.0 && t.busy_seconds == 0.0,
            "busy integral without a busy flag: {t:?}"
        );
    }
    if !seen.had_ecf {
        assert!(
            t.effective_compute_observed_seconds == 0.0 && t.effective_compute_seconds == 0.0,
            "effective-compute integral without a tensor counter: {t:?}"
        );
    }
    if !seen.had_power {
        assert!(
            t.energy_observed_seconds == 0.0 && t.energy_joules == 0.0,
            "energy integral without power or energy: {t:?}"
        );
    }
}

fn check_report(a: &Analyzer) {
    for e in a.report().entities {
        finite(
            "report reported_utilization",
            e.reported_utilization.map(|m| m.mean),
        );
        finite(
            "report effective_compute",
            e.effective_compute.map(|m| m.mean),
        );
        finite(
            "report effective_compute p95",
            e.effective_compute.map(|m| m.p95),
        );
        finite(
            "report inflation_gap",
            e.inflation_gap_points.map(|m| m.mean),
        );
        finite(
            "report roofline_saturation",
            e.roofline_saturation.map(|m| m.mean),
        );
        if let Some(sum) = e.regime_fraction.map(|f| f.sum()) {
            assert!((sum - 1.0).abs() < 1e-9, "regime fractions sum to {sum}");
        }
        if let Some(m) = e.memory {
            assert!(
                m.needed_bytes.is_finite() && m.peak_used_fraction.is_finite(),
                "{m:?}"
            );
        }
    }
}

/// The exposition of `gpus` in both formats: every value the catalog derives is finite,
/// read before the encoders' last check (which would leave a NaN or an infinity out unseen),
/// every sample line parses with the one Prometheus-text parser and holds a finite value, and
/// `for_each_value` yields exactly the values the text holds.
pub fn check_exposition(gpus: &[GpuEntry]) {
    let id = Identity::default();
    let status = ExporterStatus::default();
    exposition::for_each_derived_value(gpus, &status, |m, v| {
        assert!(v.is_finite(), "{} = {v} is derived", m.name);
    });
    let mut yielded = 0usize;
    exposition::for_each_value(gpus, &id, &status, |_, _, v| {
        assert!(v.is_finite());
        yielded += 1;
    });
    for format in [exposition::Encoding::Text, exposition::Encoding::OpenMetrics] {
        let text = exposition::encode(gpus, &id, &status, format);
        let mut written = 0usize;
        for (line, s) in prom_text::samples(&text) {
            let s =
                s.unwrap_or_else(|e| panic!("{format:?} line {line} does not parse: {e}\n{text}"));
            assert!(s.value.is_finite(), "{format:?} line {line}: {}", s.value);
            written += 1;
        }
        assert_eq!(
            written, yielded,
            "{format:?}: lines written vs values yielded"
        );
    }
}

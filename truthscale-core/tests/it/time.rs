//! Time is never lost or invented: every integral carries the elapsed time of its samples'
//! own timestamps, whatever the cadence; a gap is counted apart, never as observed time;
//! energy is exact around blanks, resets and gaps. The truth in each test is computed here
//! from the trace the test wrote (its workload, its power), never from the deriver.

use proptest::prelude::*;
use truthscale_core::analysis::Analyzer;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::gpus::by_key;
use truthscale_core::model::{EntityId, EntitySample, Field, Readings, Sample, Timestamp};
use truthscale_core::tracker::{Deriver, Totals};

const H100: &str = "NVIDIA H100 80GB HBM3";

fn entity(pairs: &[(Field, f64)]) -> EntitySample {
    let mut readings = Readings::default();
    for &(f, v) in pairs {
        readings.set_value(f, v);
    }
    EntitySample {
        id: EntityId {
            gpu: Some(0),
            model: Some(H100.into()),
            ..EntityId::default()
        },
        readings,
        ..EntitySample::default()
    }
}

fn at(ms: i64, e: EntitySample) -> Sample {
    Sample {
        taken: Timestamp(ms),
        entities: vec![e],
    }
}

/// A compute-bound window (busy, tensor cores at 60 %, clock at the reference) or an idle one.
fn readings(busy: bool) -> Vec<(Field, f64)> {
    let f_ref = by_key("h100-sxm").unwrap().f_ref_mhz;
    let (u, tau, d) = if busy {
        (1.0, 0.6, 0.1)
    } else {
        (0.0, 0.0, 0.0)
    };
    vec![
        (Field::ReportedUtil, u),
        (Field::SmActive, u),
        (Field::TensorActive, tau),
        (Field::DramActive, d),
        (Field::SmClockMhz, f_ref),
    ]
}

/// A trace: (end of each window in ms, whether it was busy); the first window is as long as
/// the second.
fn trace(windows: &[(i64, bool)]) -> Vec<Sample> {
    windows
        .iter()
        .map(|&(ms, busy)| at(ms, entity(&readings(busy))))
        .collect()
}

/// The truth of a trace, from its own windows: (seconds, busy seconds, ECF seconds).
fn truth(windows: &[(i64, bool)]) -> (f64, f64, f64) {
    let mut prev = windows[0].0 - (windows[1].0 - windows[0].0);
    let (mut all, mut busy) = (0.0, 0.0);
    for &(ms, b) in windows {
        let dt = (ms - prev) as f64 / 1000.0;
        all += dt;
        if b {
            busy += dt;
        }
        prev = ms;
    }
    (all, busy, 0.6 * busy)
}

fn last_totals(d: &mut Deriver, samples: &[Sample]) -> Totals {
    let mut t = Totals::default();
    for s in samples {
        if let Some(w) = d.observe(s).windows.first() {
            t = w.totals;
        }
    }
    t
}

/// 1 s busy for 60 s, then idle at a 10 s cadence for 300 s.
fn mixed_cadence() -> Vec<(i64, bool)> {
    let mut w: Vec<(i64, bool)> = (1..=60).map(|s| (s * 1000, true)).collect();
    w.extend((1..=30).map(|k| (60_000 + k * 10_000, false)));
    w
}

#[test]
fn a_slow_cadence_is_integrated_at_its_own_length() {
    // 10 s windows, alternately busy for a minute and idle for a minute.
    let windows: Vec<(i64, bool)> = (1..=36).map(|k| (k * 10_000, (k / 6) % 2 == 0)).collect();
    let (all, busy, ecf) = truth(&windows);
    // Without a declared interval (a trace's own timestamps) the first window is the trace's
    // own 10 s; with the source's declared 10 s, the same.
    for declared in [None, Some(10.0)] {
        let t = last_totals(
            &mut Deriver::new(DeriveConfig::default(), declared),
            &trace(&windows),
        );
        assert_eq!(t.observed_seconds, all, "{declared:?}");
        assert_eq!(t.unobserved_seconds, 0.0);
        assert!((t.busy_seconds - busy).abs() < 1e-9, "{declared:?}: {t:?}");
        assert!((t.effective_compute_seconds - ecf).abs() < 1e-9);
        assert_eq!(t.windows, 36);
    }
}

#[test]
fn a_change_of_cadence_is_not_a_gap() {
    let windows = mixed_cadence();
    let (all, busy, ecf) = truth(&windows);
    assert_eq!((all, busy), (360.0, 60.0));
    let t = last_totals(
        &mut Deriver::new(DeriveConfig::default(), None),
        &trace(&windows),
    );
    assert_eq!(t.observed_seconds, all);
    assert_eq!(t.unobserved_seconds, 0.0);
    assert!((t.busy_seconds - busy).abs() < 1e-9);
    assert!((t.effective_compute_seconds - ecf).abs() < 1e-9);
    // The regime seconds sum to the observed time; compute-bound is the first minute, to
    // within the classifier's own hysteresis (one window either side).
    let regimes: f64 = t.phase_seconds.iter().flatten().sum::<f64>() + t.unclassified_seconds;
    assert!((regimes - all).abs() < 1e-9);
    let compute = t.phase_seconds.iter().map(|m| m[1]).sum::<f64>();
    assert!(
        (compute - 60.0).abs() <= 10.0,
        "compute-bound {compute} s of 60"
    );
}

#[test]
fn analyze_weighs_every_window_by_its_own_time_at_a_change_of_cadence() {
    let windows = mixed_cadence();
    let mut a = Analyzer::new(Deriver::new(DeriveConfig::default(), None), false);
    for s in trace(&windows) {
        a.push(&s);
    }
    let e = &a.report().entities[0];
    // Truth: busy 60 of 360 s; before, the 10 s windows counted as 1 s each (0.67).
    let u = e.reported_utilization.unwrap().mean;
    assert!((u - 60.0 / 360.0).abs() < 1e-9, "{u}");
    let ecf = e.effective_compute.unwrap().mean;
    assert!((ecf - 0.6 * 60.0 / 360.0).abs() < 1e-9, "{ecf}");
    let compute = e.regime_fraction.unwrap().compute_bound;
    assert!((compute - 60.0 / 360.0).abs() <= 10.0 / 360.0, "{compute}");
    assert_eq!(e.unobserved_seconds, 0.0);
    assert_eq!(e.clock_corrected, Some(1.0));
}

#[test]
fn analyze_counts_the_first_window() {
    // Three 2 s windows, the first busy: without a declared interval, the first lasts as
    // long as the trace's own spacing, and counts.
    let windows = [(2_000, true), (4_000, false), (6_000, false)];
    let mut a = Analyzer::new(Deriver::new(DeriveConfig::default(), None), false);
    for s in trace(&windows) {
        a.push(&s);
    }
    let u = a.report().entities[0].reported_utilization.unwrap().mean;
    assert!((u - 1.0 / 3.0).abs() < 1e-12, "{u}");
}

/// The end of the input decides what still waits for a next sample. Five 1 s windows, then
/// one 295 s later, with no interval declared: the last window is either a change of
/// cadence or a gap, and with no spacing after it there is nothing to tell which, so its
/// 295 s are not observed, and said. One sample alone stands for no known time, and is
/// said too; neither was counted or said before the end was.
#[test]
fn the_end_of_the_input_decides_the_windows_that_wait() {
    let mut windows: Vec<(i64, bool)> = (1..=5).map(|s| (s * 1000, true)).collect();
    windows.push((300_000, true));
    let mut a = Analyzer::new(Deriver::new(DeriveConfig::default(), None), false);
    for s in trace(&windows) {
        a.push(&s);
    }
    assert_eq!(
        a.report().entities[0].unobserved_seconds,
        0.0,
        "still waiting"
    );
    a.finish();
    let r = a.report();
    assert_eq!(r.entities[0].unobserved_seconds, 295.0);
    // 5 s observed, all busy (the first window as long as the spacing after it).
    assert_eq!(r.entities[0].reported_utilization.unwrap().mean, 1.0);
    assert_eq!(r.diagnostics.get("gap"), Some(&1), "{r:?}");
    assert!(
        r.first_diagnostics[0].contains("295 s since the previous sample, and no sample after it"),
        "{:?}",
        r.first_diagnostics
    );
    let mut one = Analyzer::new(Deriver::new(DeriveConfig::default(), None), false);
    one.push(&trace(&[(1_000, true)])[0]);
    one.finish();
    let r = one.report();
    assert_eq!(r.entities[0].reported_utilization, None);
    assert_eq!(r.entities[0].unobserved_seconds, 0.0);
    assert!(
        r.first_diagnostics[0].contains("one sample only"),
        "{:?}",
        r.first_diagnostics
    );
    // A declared interval leaves nothing waiting: nothing to say at the end.
    let mut declared = Analyzer::new(Deriver::new(DeriveConfig::default(), Some(1.0)), false);
    declared.push(&trace(&[(1_000, true)])[0]);
    declared.finish();
    assert!(declared.report().diagnostics.is_empty());
}

#[test]
fn a_gap_is_not_observed_and_is_counted() {
    // 1 s windows, then nothing for 30 s, then 1 s windows again; all busy.
    let mut windows: Vec<(i64, bool)> = (1..=10).map(|s| (s * 1000, true)).collect();
    windows.extend((0..10).map(|s| (40_000 + s * 1000, true)));
    for declared in [None, Some(1.0)] {
        let t = last_totals(
            &mut Deriver::new(DeriveConfig::default(), declared),
            &trace(&windows),
        );
        // 10 s, the 30 s gap apart, then 9 more 1 s windows.
        assert_eq!(t.observed_seconds, 19.0, "{declared:?}");
        assert_eq!(t.unobserved_seconds, 30.0, "{declared:?}");
        assert_eq!(t.busy_seconds, 19.0);
        let regimes: f64 = t.phase_seconds.iter().flatten().sum::<f64>() + t.unclassified_seconds;
        assert_eq!(regimes, 19.0);
    }
}

/// A power trace with the energy counter blank one window in four: the power gauge is the
/// truth of each window (not twice it), and the energy integral is exact.
#[test]
fn a_blank_energy_reading_is_not_counted_twice() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let (mut counter, mut truth) = (5_000.0, 0.0);
    let mut power_seen = Vec::new();
    let mut t = Totals::default();
    // 41 windows, so the last reads the counter.
    for k in 1..=41_i64 {
        let p = 200.0 + 10.0 * (k % 7) as f64;
        counter += p;
        truth += p;
        let mut pairs = vec![(Field::PowerWatts, p), (Field::ReportedUtil, 1.0)];
        if k % 4 != 0 {
            pairs.push((Field::EnergyJoules, counter));
        }
        let out = d.observe(&at(k * 1000, entity(&pairs)));
        let w = &out.windows[0];
        power_seen.push((p, w.metrics.power_watts.unwrap().value));
        t = w.totals;
    }
    // The window after each blank: its delta spans two windows, divided by two seconds;
    // its power is their mean, never the sum.
    for (k, (p, seen)) in power_seen.iter().enumerate().skip(1) {
        let window = k as i64 + 1;
        if window % 4 == 1 {
            let prev = power_seen[k - 1].0;
            assert!((seen - 0.5 * (p + prev)).abs() < 1e-9, "window {window}");
        } else {
            assert!((seen - p).abs() < 1e-9, "window {window}: {seen} for {p}");
        }
    }
    // The first window from the gauge, every other from the counter: 41 s, exactly.
    assert_eq!(t.energy_observed_seconds, 41.0);
    assert!(
        (t.energy_joules - truth).abs() < 1e-9,
        "{} vs {truth}",
        t.energy_joules
    );
}

/// dcgm-exporter repeats its values between collections: the energy counter moves once in
/// five scrapes. Power is never 0 W in between, and the integral is the counter's own.
#[test]
fn a_repeated_energy_reading_is_not_zero_watts() {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let mut counter = 1_000.0;
    let mut t = Totals::default();
    for k in 1..=20_i64 {
        if k % 5 == 0 {
            counter += 5.0 * 300.0;
        }
        let out = d.observe(&at(
            k * 1000,
            entity(&[(Field::EnergyJoules, counter), (Field::ReportedUtil, 1.0)]),
        ));
        let w = &out.windows[0];
        if let Some(p) = w.metrics.power_watts {
            assert!(p.value > 0.0, "window {k}: {p:?}");
            if k >= 10 && k % 5 == 0 {
                assert!((p.value - 300.0).abs() < 1e-9, "window {k}: {p:?}");
            }
        }
        t = w.totals;
    }
    // From the first reading (1 s) to the last: 19 s, 4 moves of 1 500 J.
    assert_eq!(t.energy_observed_seconds, 19.0);
    assert_eq!(t.energy_joules, 6_000.0);
}

/// A window without an SM-clock reading, one in three: it is not an effective compute
/// fraction, and is left out of the integral and its denominator.
#[test]
fn a_window_without_a_clock_is_left_out_of_the_corrected_integral() {
    let f_ref = by_key("h100-sxm").unwrap().f_ref_mhz;
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let mut a = Analyzer::new(Deriver::new(DeriveConfig::default(), Some(1.0)), false);
    let mut t = Totals::default();
    // The clock at half the reference: κ = 0.5, so the corrected ECF is half of τ = 0.8.
    for k in 1..=30_i64 {
        let mut pairs = vec![(Field::TensorActive, 0.8), (Field::DramActive, 0.1)];
        if k % 3 != 0 {
            pairs.push((Field::SmClockMhz, 0.5 * f_ref));
        }
        let s = at(k * 1000, entity(&pairs));
        a.push(&s);
        t = d.observe(&s).windows[0].totals;
    }
    assert_eq!(t.effective_compute_observed_seconds, 20.0);
    assert!((t.effective_compute_seconds - 0.4 * 20.0).abs() < 1e-9);
    let e = &a.report().entities[0];
    assert!((e.effective_compute.unwrap().mean - 0.4).abs() < 1e-9);
    let corrected = e.clock_corrected.unwrap();
    assert!((corrected - 2.0 / 3.0).abs() < 1e-12, "{corrected}");
}

/// One window of the energy property test: its length, the power it ran at, and what its
/// end reading says.
#[derive(Debug, Clone, Copy)]
struct EnergyWindow {
    ms: i64,
    watts: f64,
    /// The counter at the end: readable, blank, or reset (restarted from 0 within it).
    counter: CounterAt,
    gauge: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CounterAt {
    Read,
    Blank,
    Reset,
}

fn energy_window() -> impl Strategy<Value = EnergyWindow> {
    (
        prop_oneof![8 => Just(1000_i64), 1 => 1500..4000_i64, 1 => 6000..60_000_i64],
        50.0..700.0_f64,
        prop_oneof![6 => Just(CounterAt::Read), 2 => Just(CounterAt::Blank), 1 => Just(CounterAt::Reset)],
        prop_oneof![4 => Just(true), 1 => Just(false)],
    )
        .prop_map(|(ms, watts, counter, gauge)| EnergyWindow {
            ms,
            watts,
            counter,
            gauge,
        })
}

proptest! {
    /// For any pattern of blanks, resets and gaps, the energy integral equals the truth
    /// over the seconds it says were observed, to 1e-9; and those seconds are the ones the
    /// rules below (written from the trace, not from the deriver) say are knowable.
    #[test]
    fn energy_is_exact_around_blanks_resets_and_gaps(
        windows in proptest::collection::vec(energy_window(), 2..60),
    ) {
        let interval = 1.0;
        let max_gap = DeriveConfig::default().max_gap_intervals * interval;
        let mut d = Deriver::new(DeriveConfig::default(), Some(interval));
        let mut counter = 1.0e6;
        let (mut taken, mut totals) = (0_i64, Totals::default());
        // The truth: windows since the counter's last reading, and what is known so far.
        let (mut known_j, mut known_s) = (0.0, 0.0);
        let mut since_reading: Vec<(f64, f64, bool, bool)> = Vec::new();
        let mut had_reading = false;
        let mut last_read: Option<f64> = None;
        for (i, w) in windows.iter().enumerate() {
            // The first window lasts the declared interval.
            let seconds = if i == 0 { interval } else { w.ms as f64 / 1000.0 };
            taken += if i == 0 { 1000 } else { w.ms };
            let joules = w.watts * seconds;
            let gap = i > 0 && seconds > max_gap;
            // A reset shows only as a drop below the previous reading: one that would not
            // is an ordinary reading.
            let mut w = *w;
            if w.counter == CounterAt::Reset && !last_read.is_some_and(|r| 0.5 * joules < r) {
                w.counter = CounterAt::Read;
            }
            match w.counter {
                CounterAt::Reset => counter = 0.5 * joules,
                _ => counter += joules,
            }
            let mut pairs = vec![(Field::ReportedUtil, 1.0)];
            if w.gauge {
                pairs.push((Field::PowerWatts, w.watts));
            }
            if w.counter != CounterAt::Blank {
                pairs.push((Field::EnergyJoules, counter));
                last_read = Some(counter);
            }
            totals = d.observe(&at(taken, entity(&pairs))).windows[0].totals;
            // What can be known of this window's energy, by the rules in derivations.md:
            // a counter delta spans everything since the previous reading; a window it does
            // not span counts from its gauge when it is observed (not a gap).
            let gauge_ok = w.gauge && !gap;
            match w.counter {
                CounterAt::Read if had_reading => {
                    known_j += since_reading.iter().map(|x| x.0).sum::<f64>() + joules;
                    known_s += since_reading.iter().map(|x| x.1).sum::<f64>() + seconds;
                    since_reading.clear();
                }
                CounterAt::Read | CounterAt::Reset => {
                    // No delta: what waited counts by its gauge, and so does this window.
                    for &(j, s, ok, _) in &since_reading {
                        if ok {
                            known_j += j;
                            known_s += s;
                        }
                    }
                    since_reading.clear();
                    if gauge_ok {
                        known_j += joules;
                        known_s += seconds;
                    }
                    had_reading = true;
                }
                CounterAt::Blank if had_reading => since_reading.push((joules, seconds, gauge_ok, gap)),
                CounterAt::Blank => {
                    if gauge_ok {
                        known_j += joules;
                        known_s += seconds;
                    }
                }
            }
        }
        prop_assert!((totals.energy_observed_seconds - known_s).abs() < 1e-9,
            "seconds {} vs {known_s}", totals.energy_observed_seconds);
        prop_assert!((totals.energy_joules - known_j).abs() < 1e-9 * known_j.max(1.0),
            "joules {} vs {known_j}", totals.energy_joules);
    }
}

/// A GPU at a steady 400 W behind a dcgm-exporter that collects every 30 s, its first
/// collection not aligned with the first sample (before it, or after it: blank until then),
/// read at `times` (ms). Its energy counter is `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, in
/// whole mJ, read as joules as the parser does; the power gauge is collected with it.
/// Returns the totals after each sample, and the time (ms) of the last sample whose counter
/// reading differed from the one before it (the counter's last move seen), if any.
fn steady_400_w_behind_dcgm_exporter(
    first_collection_ms: i64,
    times: &[i64],
    interval: f64,
) -> Vec<(Totals, Option<i64>)> {
    const MJ_PER_MS: i64 = 400; // 400 W = 400 mJ per ms
    const COLLECT_MS: i64 = 30_000;
    let mut d = Deriver::new(DeriveConfig::default(), Some(interval));
    let (mut out, mut previous, mut last_move) = (Vec::new(), None, None);
    for &t in times {
        // The latest collection at or before `t`, if one was made yet.
        let collected = (t >= first_collection_ms).then(|| {
            first_collection_ms + (t - first_collection_ms).div_euclid(COLLECT_MS) * COLLECT_MS
        });
        let mut pairs = vec![(Field::ReportedUtil, 1.0)];
        let counter_mj = collected.map(|c| 7_000_000_000 + MJ_PER_MS * c);
        if let Some(mj) = counter_mj {
            pairs.push((Field::EnergyJoules, mj as f64 / 1000.0));
            pairs.push((Field::PowerWatts, 400.0));
            if previous.is_some_and(|p| p != mj) {
                last_move = Some(t);
            }
        }
        previous = counter_mj;
        // dcgm-exporter holds its counters between collections.
        let mut e = entity(&pairs);
        e.counters_held = true;
        out.push((d.observe(&at(t, e)).windows[0].totals, last_move));
    }
    out
}

/// The mean power behind a dcgm-exporter that refreshes every 30 s, read every 15 s, 10 s,
/// in a repeating irregular pattern (4, 11, 15 s) and every 15 s with ±0.5 s of jitter,
/// over 10 minutes, for first collections before and after the first sample: within 0.2 %
/// of the 400 W the GPU ran at (exact where the cadence repeats within the collection
/// period), and the energy-observed seconds never run ahead of the counter's last move.
#[test]
fn mean_power_behind_a_30_s_dcgm_exporter_is_unbiased() {
    let regular = |step: i64| (0..=600_000 / step).map(|k| k * step).collect::<Vec<_>>();
    let pattern: Vec<i64> = std::iter::successors(Some(0_i64), |&t| {
        Some(t + [4_000, 11_000, 15_000][((t / 1000) % 30 / 4).min(2) as usize])
    })
    .take_while(|&t| t <= 600_000)
    .collect();
    // 15 s, jittered by a fixed pseudo-random sequence within ±500 ms.
    let jittered: Vec<i64> = (0..=40_i64)
        .map(|k| k * 15_000 + (k * 7_919 % 1_001) - 500)
        .map(|t| t.max(0))
        .collect();
    let cadences = [
        ("15 s", regular(15_000), 15.0, true),
        ("10 s", regular(10_000), 10.0, true),
        ("4, 11, 15 s", pattern, 10.0, true),
        ("15 s jittered", jittered, 15.0, false),
    ];
    for (name, times, interval, exact) in &cadences {
        for first_collection_ms in [-22_500, -7_300, 4_100, 13_700] {
            let run = steady_400_w_behind_dcgm_exporter(first_collection_ms, times, *interval);
            // The first window lasts the declared interval before the first sample.
            let start_ms = times[0] as f64 - interval * 1000.0;
            for (totals, last_move) in &run {
                if let Some(moved) = last_move {
                    let to_move = (*moved as f64 - start_ms) / 1000.0;
                    assert!(
                        totals.energy_observed_seconds <= to_move + 1e-9,
                        "{name}, first collection at {first_collection_ms} ms: {} s observed, the counter's last move {to_move} s in",
                        totals.energy_observed_seconds
                    );
                }
            }
            let totals = run.last().unwrap().0;
            let mean = totals.energy_joules / totals.energy_observed_seconds;
            let tolerance = if *exact { 1e-9 } else { 0.002 * 400.0 };
            assert!(
                (mean - 400.0).abs() <= tolerance,
                "{name}, first collection at {first_collection_ms} ms: {mean} W over {} s",
                totals.energy_observed_seconds
            );
            // Ten minutes, less what the counter's last move has not covered yet.
            assert!(
                totals.energy_observed_seconds >= 540.0,
                "{name}: {totals:?}"
            );
        }
    }
}

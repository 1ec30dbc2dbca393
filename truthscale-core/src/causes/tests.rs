use super::*;
use crate::gpus;

fn h100() -> &'static GpuSpec {
    gpus::by_key("h100-sxm").expect("h100-sxm")
}

/// A starved window with nothing pointing anywhere: busy engine, SMs half used.
fn quiet() -> CauseSignals {
    CauseSignals {
        cpu_throttled: Some(0.0),
        cpu_waiting: Some(0.01),
        io_waiting: Some(0.0),
        io_stalled: Some(0.0),
        memory_stalled: Some(0.0),
        pcie_rx_share: Some(0.05),
        sm_active: Some(0.4),
        gr_active: Some(0.9),
        tensor: Some(0.05),
        nvlink_share: Some(0.0),
        ..CauseSignals::default()
    }
}

#[test]
fn pcie_capacity_is_the_lane_rate_less_the_encoding() {
    // Gen4 x16: 16 GT/s × 16 lanes × 128/130 / 8 = 31.5 GB/s per direction.
    let g4 = pcie_bytes_per_sec(4, 16).expect("gen4");
    assert!((g4 - 31.507_692e9).abs() < 1e6, "{g4}");
    // Gen5 doubles it (63.0 GB/s); Gen1 x1 is 2.5 GT/s × 0.8 / 8 = 250 MB/s.
    assert!((pcie_bytes_per_sec(5, 16).expect("gen5") - 2.0 * g4).abs() < 1.0);
    assert_eq!(pcie_bytes_per_sec(1, 1), Some(250e6));
    assert_eq!(pcie_bytes_per_sec(7, 16), None);
    assert_eq!(pcie_bytes_per_sec(4, 0), None);
}

#[test]
fn the_rules_name_their_cause_in_order() {
    let cfg = CauseConfig::default();
    let cases = [
        (
            CauseSignals {
                cpu_throttled: Some(0.6),
                cpu_limit_cores: Some(2.0),
                ..quiet()
            },
            Cause::CpuThrottled,
        ),
        (
            CauseSignals {
                cpu_waiting: Some(0.35),
                ..quiet()
            },
            Cause::CpuContended,
        ),
        (
            CauseSignals {
                io_waiting: Some(0.3),
                ..quiet()
            },
            Cause::IoStalled,
        ),
        (
            CauseSignals {
                io_stalled: Some(0.12),
                ..quiet()
            },
            Cause::IoStalled,
        ),
        (
            CauseSignals {
                pcie_rx_share: Some(0.9),
                sm_active: Some(0.2),
                ..quiet()
            },
            Cause::HostToDevice,
        ),
        (
            CauseSignals {
                sm_active: Some(0.1),
                ..quiet()
            },
            Cause::LaunchBound,
        ),
        (
            CauseSignals {
                nvlink_share: Some(0.6),
                ..quiet()
            },
            Cause::CommBound,
        ),
        (quiet(), Cause::Unknown),
        (CauseSignals::default(), Cause::Unknown),
    ];
    for (signals, want) in cases {
        assert_eq!(cause(&signals, &cfg).cause, want, "{signals:?}");
    }
    // Throttling comes first even when I/O also waits: the order is the documented one.
    let both = CauseSignals {
        cpu_throttled: Some(0.3),
        io_waiting: Some(0.9),
        ..quiet()
    };
    assert_eq!(cause(&both, &cfg).cause, Cause::CpuThrottled);
    // Host-to-device needs the SMs to be waiting: a full link feeding busy SMs is not it.
    let fed = CauseSignals {
        pcie_rx_share: Some(0.9),
        sm_active: Some(0.8),
        ..quiet()
    };
    assert_eq!(cause(&fed, &cfg).cause, Cause::Unknown);
    // A missing signal never fires a rule.
    let blank = CauseSignals {
        sm_active: None,
        ..quiet()
    };
    assert_eq!(cause(&blank, &cfg).cause, Cause::Unknown);
}

#[test]
fn a_finding_carries_its_numbers_and_advice() {
    let f = cause(
        &CauseSignals {
            cpu_throttled: Some(0.62),
            cpu_limit_cores: Some(2.0),
            ..quiet()
        },
        &CauseConfig::default(),
    );
    assert_eq!(f.evidence, Some(("cpu_throttled_ratio", 0.62, 0.25)));
    assert_eq!(
        f.to_string(),
        "cpu_throttled (cpu_throttled_ratio 0.62, at or above 0.25)"
    );
    assert!(
        f.advice().starts_with("raise the pod's CPU limit from 2 "),
        "{}",
        f.advice()
    );
    let launch = cause(
        &CauseSignals {
            sm_active: Some(0.1),
            ..quiet()
        },
        &CauseConfig::default(),
    );
    assert_eq!(
        launch.to_string(),
        "launch_bound (sm_active 0.10, below 0.25, while the graphics engine is active)"
    );
    // PCIe at 0.79 of the link both ways (a ring all-reduce over PCIe): peers' traffic, not
    // the host's copies; receive alone at that share is host_to_device.
    let both = CauseSignals {
        pcie_rx_share: Some(0.79),
        pcie_tx_share: Some(0.79),
        sm_active: Some(0.3),
        gr_active: Some(0.3),
        ..quiet()
    };
    assert_eq!(cause(&both, &CauseConfig::default()).cause, Cause::Unknown);
    let host = CauseSignals {
        pcie_tx_share: Some(0.05),
        ..both
    };
    assert_eq!(
        cause(&host, &CauseConfig::default()).cause,
        Cause::HostToDevice
    );
    // The same window on a model with NVLink whose traffic was not read: collectives run on
    // few SMs too, so nothing tells the two apart.
    let unread = cause(
        &CauseSignals {
            sm_active: Some(0.1),
            nvlink_share: None,
            nvlink_unread: true,
            ..quiet()
        },
        &CauseConfig::default(),
    );
    assert_eq!(unread.cause, Cause::Unknown);
}

#[test]
fn signals_come_from_the_readings_and_the_catalog() {
    let mut r = Readings::default();
    // 28.35 GB/s received on a measured Gen4 x16 link: 0.9 of 31.5 GB/s.
    let gen4 = 16e9 * 16.0 * 128.0 / 130.0 / 8.0;
    r.set_value(Field::PcieRxBytesPerSec, 0.9 * gen4);
    r.set_value(Field::PcieLinkGen, 4.0);
    r.set_value(Field::PcieLinkWidth, 16.0);
    // 300 + 240 GB/s of NVLink on an H100 SXM (900 GB/s): 0.6 of the peak.
    r.set_value(Field::NvlinkTxBytesPerSec, 300e9);
    r.set_value(Field::NvlinkRxBytesPerSec, 240e9);
    let s = CauseSignals::from_readings(&r, Some(h100()));
    assert!((s.pcie_rx_share.expect("share") - 0.9).abs() < 1e-12);
    assert_eq!(s.pcie_capacity.map(|(_, measured)| measured), Some(true));
    assert!((s.nvlink_share.expect("nvlink") - 0.6).abs() < 1e-12);
    // Without the current link, the model's maximum (Gen5 x16, 63 GB/s) bounds the share
    // from below: 28.35 / 63.0 = 0.45, and it says so.
    let mut r2 = r;
    r2.set(Field::PcieLinkGen, crate::model::Reading::Blank);
    let s2 = CauseSignals::from_readings(&r2, Some(h100()));
    assert!((s2.pcie_rx_share.expect("share") - 0.45).abs() < 1e-12);
    assert_eq!(s2.pcie_capacity.map(|(_, measured)| measured), Some(false));
    // No model, no link: no share at all (never a zero).
    let s3 = CauseSignals::from_readings(&r2, None);
    assert_eq!((s3.pcie_rx_share, s3.nvlink_share), (None, None));
    assert!(!s.nvlink_unread && !s3.nvlink_unread);
    // An H100 SXM (NVLink) without its NVLink read: unread; an L4 (no NVLink): not.
    let mut bare = Readings::default();
    bare.set_value(Field::SmActive, 0.1);
    assert!(CauseSignals::from_readings(&bare, Some(h100())).nvlink_unread);
    assert!(!CauseSignals::from_readings(&bare, gpus::by_key("l4")).nvlink_unread);
}

#[test]
fn every_model_has_its_interconnect() {
    for spec in gpus::CATALOG {
        let link = spec
            .interconnect()
            .unwrap_or_else(|| panic!("{}", spec.key));
        assert!((3..=6).contains(&link.pcie_gen), "{}", spec.key);
    }
    assert_eq!(
        h100().interconnect().and_then(|l| l.nvlink_bytes_per_sec),
        Some(900e9)
    );
}

#[test]
fn the_config_checks_every_key() {
    let bad = CauseConfig {
        io_stalled_ratio: 1.5,
        ..CauseConfig::default()
    };
    let e = bad.validate("causes.").expect_err("out of range");
    assert!(
        e.iter()
            .any(|e| e.to_string().contains("causes.io_stalled_ratio")),
        "{e:?}"
    );
    assert!(CauseConfig::default().validate("causes.").is_ok());
}

/// Four starved H100s, each with one cause, beside a busy one and a starved one whose cause
/// changes halfway: each gets its own cause, the busy one none, and per GPU the cause
/// seconds sum to the starved seconds.
#[test]
fn each_starved_gpu_gets_its_cause_and_the_seconds_add_up() {
    use crate::derive::DeriveConfig;
    use crate::model::{EntityId, EntitySample, Sample, Timestamp};
    use crate::tracker::Deriver;
    use crate::verdict::Verdict;
    // Starved on every counter: the busy flag high, tensor and DRAM low, SMs half used.
    let starved = |extra: &[(Field, f64)]| {
        let mut r = Readings::default();
        for (f, v) in [
            (Field::ReportedUtil, 0.98),
            (Field::GrActive, 0.9),
            (Field::SmActive, 0.4),
            (Field::TensorActive, 0.05),
            (Field::DramActive, 0.08),
            (Field::SmClockMhz, 1830.0),
        ]
        .iter()
        .chain(extra)
        {
            r.set_value(*f, *v);
        }
        r
    };
    let gpus: [(&str, &[(Field, f64)]); 5] = [
        (
            "cfs-1cpu",
            &[
                (Field::HolderCpuThrottledRatio, 0.7),
                (Field::HolderCpuLimitCores, 1.0),
            ],
        ),
        ("io", &[(Field::HolderIoWaitingRatio, 0.45)]),
        (
            "pcie",
            &[
                (Field::PcieRxBytesPerSec, 60e9),
                (Field::PcieLinkGen, 5.0),
                (Field::PcieLinkWidth, 16.0),
            ],
        ),
        // An H100 has NVLink: its traffic read (quiet), or the window's few SMs could be
        // collectives.
        (
            "tiny-kernels",
            &[
                (Field::SmActive, 0.08),
                (Field::NvlinkTxBytesPerSec, 1e9),
                (Field::NvlinkRxBytesPerSec, 1e9),
            ],
        ),
        // Tensor pipes active 70 % of the cycles: the SMs at least as much.
        (
            "busy",
            &[
                (Field::TensorActive, 0.7),
                (Field::DramActive, 0.5),
                (Field::SmActive, 0.9),
            ],
        ),
    ];
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let mut last = Vec::new();
    for i in 0..=20i64 {
        let mut entities: Vec<EntitySample> = gpus
            .iter()
            .enumerate()
            .map(|(n, (uuid, extra))| EntitySample {
                id: EntityId {
                    gpu: Some(u32::try_from(n).expect("five")),
                    uuid: Some((*uuid).into()),
                    model: Some("NVIDIA H100 80GB HBM3".into()),
                    ..EntityId::default()
                },
                readings: starved(extra),
                ..EntitySample::default()
            })
            .collect();
        // The sixth: NVLink collectives for the first 10 s, then CPU contention.
        let sixth: &[(Field, f64)] = if i <= 10 {
            &[
                (Field::NvlinkTxBytesPerSec, 300e9),
                (Field::NvlinkRxBytesPerSec, 300e9),
            ]
        } else {
            &[(Field::HolderCpuWaitingRatio, 0.5)]
        };
        entities.push(EntitySample {
            id: EntityId {
                gpu: Some(5),
                uuid: Some("changes".into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                ..EntityId::default()
            },
            readings: starved(sixth),
            ..EntitySample::default()
        });
        last = d
            .observe(&Sample {
                taken: Timestamp(i * 1000),
                entities,
            })
            .windows;
    }
    let by_uuid = |u: &str| {
        last.iter()
            .find(|w| w.id.uuid.as_deref() == Some(u))
            .unwrap_or_else(|| panic!("{u}"))
    };
    let starved_idx = Verdict::Starved.index();
    for (uuid, want) in [
        ("cfs-1cpu", Cause::CpuThrottled),
        ("io", Cause::IoStalled),
        ("pcie", Cause::HostToDevice),
        ("tiny-kernels", Cause::LaunchBound),
    ] {
        let w = by_uuid(uuid);
        assert_eq!(w.verdict.verdict, Verdict::Starved, "{uuid}");
        assert_eq!(w.verdict.cause().map(|f| f.cause), Some(want), "{uuid}");
        // 21 windows of 1 s (the first lasts the declared update interval), all starved,
        // all this cause.
        assert_eq!(w.totals.verdict_seconds[starved_idx], 21.0, "{uuid}");
        assert_eq!(w.totals.starved_cause_seconds[want.index()], 21.0, "{uuid}");
        assert_eq!(
            w.totals.starved_cause_seconds.iter().sum::<f64>(),
            21.0,
            "{uuid}"
        );
    }
    let busy = by_uuid("busy");
    assert_eq!(busy.verdict.verdict, Verdict::Busy);
    assert_eq!(busy.verdict.cause(), None);
    assert_eq!(busy.totals.starved_cause_seconds, [0.0; 7]);
    // The sixth: the windows ending at 0..=10 s NVLink (600 of 900 GB/s = 0.67 of the
    // peak), those ending at 11..=20 s CPU contention.
    let sixth = by_uuid("changes");
    let t = &sixth.totals;
    assert_eq!(t.starved_cause_seconds[Cause::CommBound.index()], 11.0);
    assert_eq!(t.starved_cause_seconds[Cause::CpuContended.index()], 10.0);
    assert_eq!(
        t.starved_cause_seconds.iter().sum::<f64>(),
        t.verdict_seconds[starved_idx]
    );
    // The limit behind the advice: 1 CPU.
    let advice = by_uuid("cfs-1cpu").verdict.explain().action;
    assert!(
        advice.starts_with("raise the pod's CPU limit from 1 "),
        "{advice}"
    );
}

#[test]
fn a_rising_nvlink_transmit_wait_is_comm_bound_even_on_few_sms() {
    let cfg = CauseConfig::default();
    // Collectives stuck on their links: traffic far from the peak, the transmit wait
    // rising, the engine busy on 15 % of the SMs, tensor 2 %.
    let s = CauseSignals {
        gr_active: Some(0.95),
        sm_active: Some(0.15),
        tensor: Some(0.02),
        nvlink_share: Some(0.05),
        nvlink_tx_wait: Some(4.0e6),
        ..quiet()
    };
    let f = cause(&s, &cfg);
    assert_eq!(f.cause, Cause::CommBound);
    assert_eq!(f.evidence, Some(("nvlink_tx_wait_per_sec", 4.0e6, 0.0)));
    // Not rising: the same window is launch-bound.
    let flat = CauseSignals {
        nvlink_tx_wait: Some(0.0),
        ..s
    };
    assert_eq!(cause(&flat, &cfg).cause, Cause::LaunchBound);
    // Rising while the tensor pipes work: not a starved window's cause.
    let working = CauseSignals {
        tensor: Some(0.5),
        gr_active: Some(0.2),
        ..s
    };
    assert_eq!(cause(&working, &cfg).cause, Cause::Unknown);
}

#[test]
fn the_transmit_wait_rate_is_the_counters_rise_over_its_own_time() {
    use crate::derive::DeriveConfig;
    use crate::model::{EntityId, EntitySample, Sample, Timestamp};
    use crate::tracker::Deriver;
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let at = |ms: i64, total: Option<f64>| {
        let mut e = EntitySample {
            id: EntityId {
                gpu: Some(0),
                uuid: Some("GPU-0".into()),
                ..EntityId::default()
            },
            ..EntitySample::default()
        };
        if let Some(t) = total {
            e.readings.set_value(Field::NvlinkTxWaitTotal, t);
        }
        Sample {
            taken: Timestamp(ms),
            entities: vec![e],
        }
    };
    let mut rate = |ms, total| {
        d.observe(&at(ms, total)).windows[0]
            .readings
            .value(Field::NvlinkTxWaitPerSec)
    };
    // First reading: no rate. 3 000 more ticks over 1.5 s: 2 000 a second. A blank, then
    // a reading 2 s after the last: its rise over those 2 s. A counter that went back: none.
    assert_eq!(rate(0, Some(1.0e9)), None);
    assert_eq!(rate(1500, Some(1.0e9 + 3000.0)), Some(2000.0));
    assert_eq!(rate(2500, None), None);
    assert_eq!(rate(3500, Some(1.0e9 + 5000.0)), Some(1000.0));
    assert_eq!(rate(4500, Some(10.0)), None);
    assert_eq!(rate(5500, Some(110.0)), Some(100.0));
}

/// dcgm-exporter holds the counter between its collections (every 30 s) while it is
/// scraped every 10 s: a rise of 3e8 ticks every 30 s is 1e7 a second in every window, its
/// repeats included (they read 0 before, two windows in three); once it stops rising, the
/// last rate holds for 60 s after the last rise, then nothing is waited.
#[test]
fn a_held_transmit_wait_counter_repeats_its_last_rise() {
    use crate::derive::DeriveConfig;
    use crate::model::{EntityId, EntitySample, Sample, Timestamp};
    use crate::tracker::Deriver;
    let mut d = Deriver::new(DeriveConfig::default(), Some(10.0));
    let mut rate = |s: i64, total: f64| {
        let mut e = EntitySample {
            id: EntityId {
                gpu: Some(0),
                uuid: Some("GPU-0".into()),
                ..EntityId::default()
            },
            counters_held: true,
            nvlink_wait_links: 0,
            ..EntitySample::default()
        };
        e.readings.set_value(Field::NvlinkTxWaitTotal, total);
        let sample = Sample {
            taken: Timestamp(s * 1000),
            entities: vec![e],
        };
        d.observe(&sample).windows[0]
            .readings
            .value(Field::NvlinkTxWaitPerSec)
    };
    let rises = |s: i64| 1.0e9 + 3.0e8 * (s.min(60) / 30) as f64;
    let got: Vec<_> = (0..=13).map(|k| rate(10 * k, rises(10 * k))).collect();
    // No rate before the first rise; the rises at 30 and 60 s and the repeats up to 120 s,
    // 60 s after the last rise: 1e7; at 130 s: 0.
    let mut want = vec![None, None, None];
    want.extend([Some(1.0e7); 10]);
    want.push(Some(0.0));
    assert_eq!(got, want);
}

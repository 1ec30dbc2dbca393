//! Golden `/metrics` bodies from fixed inputs, in `tests/golden/`: the exact bytes the
//! encoder writes for them, in both formats. `UPDATE_GOLDEN=1` rewrites them; the e2e suite
//! runs `promtool check metrics` on every file.

use std::collections::{BTreeMap, BTreeSet};
use truthscale_core::catalog;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::exposition::{
    self, Encoding, ExporterStatus, GpuEntry, Identity, SinkHealth, SourceHealth,
};
use truthscale_core::gpus::by_key;
use truthscale_core::model::{
    EntityId, EntitySample, Field, Holder, MigId, PodPressure, PodRef, ProcessReading, Reading,
    Readings, Sample, ServingSnapshot, SourceKind, Timestamp,
};
use truthscale_core::parse::{Format, LineParser};
use truthscale_core::sim::Simulator;
use truthscale_core::tracker::{Deriver, EntityWindow};

fn status(source: &str) -> ExporterStatus {
    ExporterStatus {
        version: "0.1.0".into(),
        sources: vec![SourceHealth {
            name: source.into(),
            up: true,
            errors: BTreeMap::from([("nvml".to_string(), 2)]),
        }],
        sample_duration_seconds: Some(0.000_25),
        diagnostics: BTreeMap::from([("gap".to_string(), 1)]),
        snapshot_unix_seconds: 1_767_225_600.0,
        previous_body_bytes: Some(4096),
        series_dropped: 0,
        sinks: vec![SinkHealth {
            name: "otlp".into(),
            errors: BTreeMap::from([("unavailable".to_string(), 3)]),
        }],
    }
}

/// The last window of each entity after feeding `samples`.
fn last_windows(samples: &[Sample]) -> Vec<EntityWindow> {
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    let mut last: BTreeMap<_, EntityWindow> = BTreeMap::new();
    for s in samples {
        for w in d.observe(s).windows {
            last.insert(w.id.key(), w);
        }
    }
    last.into_values().collect()
}

/// Five simulated H100s, one per scenario, 90 one-second windows.
fn simulated() -> Vec<GpuEntry> {
    let spec = by_key("h100-sxm").unwrap();
    let mut sim = Simulator::new(
        5,
        spec,
        "sim-node",
        7,
        Timestamp(0),
        Simulator::demo_scenario,
    );
    let samples: Vec<Sample> = (0..90).map(|_| sim.step(1.0)).collect();
    crate::gpu_entries(last_windows(&samples), SourceKind::Sim)
}

/// A MIG instance (no busy flag, no power) and a multiplexed GPU (tensor blank every other
/// window), attributed to pods by the source.
fn mig_and_multiplexed() -> Vec<GpuEntry> {
    let samples: Vec<Sample> = (1..=10)
        .map(|i| {
            let mut mig = Readings::default();
            mig.set_value(Field::TensorActive, 0.3);
            mig.set_value(Field::DramActive, 0.1);
            mig.set_value(Field::SmClockMhz, 1464.0);
            mig.set_value(Field::MemUsedBytes, 20e9);
            mig.set_value(Field::MemTotalBytes, 40e9);
            let mut mux = Readings::default();
            mux.set_value(Field::ReportedUtil, 1.0);
            mux.set_value(Field::DramActive, 0.2);
            mux.set_value(Field::SmClockMhz, 1830.0);
            mux.set_value(Field::PowerWatts, 400.0);
            mux.set(
                Field::TensorActive,
                if i % 2 == 0 {
                    Reading::Value(0.3)
                } else {
                    Reading::Blank
                },
            );
            let id = |gpu, uuid: &str, pod: &str, mig: Option<MigId>| EntityId {
                gpu: Some(gpu),
                uuid: Some(uuid.into()),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                mig,
                pod: Some(PodRef {
                    pod: pod.into(),
                    namespace: Some("ns".into()),
                    container: Some("c".into()),
                }),
                node: Some("node-m".into()),
                ..EntityId::default()
            };
            Sample {
                taken: Timestamp(i * 1000),
                entities: vec![
                    EntitySample {
                        id: id(
                            0,
                            "GPU-MIG",
                            "mig-pod",
                            Some(MigId {
                                uuid: None,
                                gpu_instance: 1,
                                compute_instance: None,
                                profile: Some("3g.40gb".into()),
                            }),
                        ),
                        readings: mig,
                        ..EntitySample::default()
                    },
                    EntitySample {
                        id: id(1, "GPU-MUX", "mux-pod", None),
                        readings: mux,
                        sm_clock_is_point: true,
                        ..EntitySample::default()
                    },
                ],
            }
        })
        .collect();
    crate::gpu_entries(last_windows(&samples), SourceKind::DcgmExporter)
}

/// The real T4 capture (busy flag 91 %, tensor 0.6 %) as one dcgm-exporter scrape.
#[expect(clippy::disallowed_methods, reason = "a test reads its fixture")]
fn t4_capture() -> Vec<GpuEntry> {
    let name = "dcgm-exporter-cncf-k8s-ai-conformance-ericsson-ccd-t4.txt";
    let path = format!("{}/tests/fixtures/dcgm/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let mut p = LineParser::new(Format::DcgmExporter, name, 1.0, Timestamp(0));
    let mut samples = Vec::new();
    for line in text.lines() {
        samples.extend(p.push_line(line).expect("the fixture parses"));
    }
    samples.extend(p.finish());
    crate::gpu_entries(last_windows(&samples), SourceKind::DcgmExporter)
}

/// Node mode: a shared H100 (time-sliced between two pods, with per-process attribution,
/// every reading the catalog exports as is, and a vLLM engine with model and engine
/// estimates), an idle NVML-tier H100 (busy flag and power only, allocated to no one) and
/// an H100 one pod holds alone (its measured per-pod effective compute): the inputs of the
/// families the other goldens do not write.
fn every_family() -> Vec<GpuEntry> {
    let pod = |name: &str| PodRef {
        pod: name.into(),
        namespace: Some("serving".into()),
        container: Some("vllm".into()),
    };
    let process = |pid: &str, uid: &str, name: &str, memory: f64, sm: f64| ProcessReading {
        pid: pid.into(),
        used_memory_bytes: Some(memory),
        sm_busy: Some(sm),
        pod_uid: Some(uid.into()),
        container_id: Some(format!("containerd-{pid}")),
        pod: Some(pod(name)),
    };
    let holder = |name: &str, replica: &str, team: &str| Holder {
        pod: pod(name),
        resource: "nvidia.com/gpu".into(),
        replica: Some(replica.into()),
        labels: vec![("label_team", team.into())],
        owner: Some(truthscale_core::model::PodOwner {
            kind: "Deployment".into(),
            name: format!("{name}-server"),
        }),
    };
    // A holder pod's own pressure (pod and namespace, no container): throttled, its limit,
    // CPU waiting, I/O waiting and stalled, memory stalled; `None` where not measured.
    const CHAT_A: [Option<f64>; 6] = [
        Some(0.05),
        None,
        Some(0.02),
        Some(0.01),
        Some(0.0),
        Some(0.0),
    ];
    const CHAT_B: [Option<f64>; 6] = [Some(0.0), Some(4.0), Some(0.01), None, None, Some(0.0)];
    const TRAIN: [Option<f64>; 6] = [
        Some(0.6),
        Some(2.0),
        Some(0.02),
        Some(0.01),
        Some(0.0),
        Some(0.0),
    ];
    let pressure = |name: &str, s: [Option<f64>; 6]| PodPressure {
        pod: PodRef {
            container: None,
            ..pod(name)
        },
        cpu_throttled_ratio: s[0],
        cpu_limit_cores: s[1],
        cpu_waiting_ratio: s[2],
        io_waiting_ratio: s[3],
        io_stalled_ratio: s[4],
        memory_stalled_ratio: s[5],
    };
    // NVML's PCI id and driver version: truthscale_gpu_info's joins with dcgm-exporter.
    let id = |gpu, uuid: &str| EntityId {
        gpu: Some(gpu),
        uuid: Some(uuid.into()),
        model: Some("NVIDIA H100 80GB HBM3".into()),
        pci_bus_id: Some(format!("00000000:1{}:00.0", ["A", "B", "C"][gpu as usize])),
        driver_version: Some("550.54.15".into()),
        node: Some("node-e".into()),
        ..EntityId::default()
    };
    let samples: Vec<Sample> = (1..=10)
        .map(|i| {
            let mut shared = Readings::default();
            for (f, v) in [
                (Field::ReportedUtil, 0.95),
                (Field::SmActive, 0.6),
                (Field::SmOccupancy, 0.3),
                (Field::TensorActive, 0.25),
                (Field::HmmaActive, 0.2),
                (Field::ImmaActive, 0.05),
                (Field::DramActive, 0.4),
                (Field::SmClockMhz, 1755.0),
                (Field::PowerWatts, 520.0),
                (Field::PowerLimitWatts, 700.0),
                (Field::TempCelsius, 61.0),
                (Field::MemUsedBytes, 60e9),
                (Field::MemTotalBytes, 80e9),
                (Field::PcieRxBytesPerSec, 2.5e9),
                (Field::PcieTxBytesPerSec, 0.5e9),
                (Field::PcieLinkGen, 5.0),
                (Field::PcieLinkWidth, 16.0),
                (Field::NvlinkRxBytesPerSec, 40e9),
                (Field::NvlinkTxBytesPerSec, 40e9),
                // The links' transmit wait, 1 500 ticks a second.
                (Field::NvlinkTxWaitTotal, 1.0e12 + 1500.0 * i as f64),
                (Field::HolderCpuThrottledRatio, 0.05),
                (Field::HolderCpuWaitingRatio, 0.02),
                (Field::HolderIoWaitingRatio, 0.01),
                (Field::HolderIoStalledRatio, 0.0),
                (Field::HolderMemoryStalledRatio, 0.0),
                // Healthy: no XID, no ECC error, no remap, no recovery asked for, and the
                // violation counters standing still.
                (Field::XidLast, 0.0),
                (Field::EccSbeVolatile, 0.0),
                (Field::EccDbeVolatile, 0.0),
                (Field::EccDbeAggregate, 0.0),
                (Field::RowRemapPending, 0.0),
                (Field::RowRemapFailed, 0.0),
                (Field::RowRemapUncorrectable, 0.0),
                (Field::RecoveryAction, 0.0),
                (Field::PowerViolationNs, 1.5e9),
                (Field::ThermalViolationNs, 0.0),
                // No XID counted in dcgm-exporter's window, the memory repairable, the
                // fabric healthy, and the clock-event reasons' times standing still.
                (Field::XidWindowErrors, 0.0),
                (Field::XidWindowFatal, 0.0),
                (Field::MemoryUnrepairable, 0.0),
                (Field::FabricHealthSummary, 1.0),
                (Field::ClockEventSwPowerCapNs, 1.5e9),
                (Field::ClockEventSyncBoostNs, 0.0),
                (Field::ClockEventSwThermalNs, 0.0),
                (Field::ClockEventHwThermalNs, 0.0),
                (Field::ClockEventHwPowerBrakeNs, 0.0),
            ] {
                shared.set_value(f, v);
            }
            // The training pod is starved: the busy flag high, tensor and DRAM low, and its
            // pod CFS-throttled in 60 % of its periods under a 2-CPU limit.
            let mut starved = shared;
            for (f, v) in [
                (Field::TensorActive, 0.05),
                (Field::HmmaActive, 0.04),
                (Field::ImmaActive, 0.0),
                (Field::DramActive, 0.1),
                (Field::HolderCpuThrottledRatio, 0.6),
                (Field::HolderCpuLimitCores, 2.0),
            ] {
                starved.set_value(f, v);
            }
            let mut nvml = Readings::default();
            nvml.set_value(Field::ReportedUtil, 0.7);
            nvml.set_value(Field::PowerWatts, 350.0);
            nvml.set_value(Field::SmClockMhz, 1980.0);
            // The node's GPUs as one job (group_by = "node"): the NVML GPU is its
            // straggler, its clock 30 % under the median; the shared GPU waits on it.
            nvml.set_value(Field::StragglerClockGap, 0.3);
            shared.set_value(Field::StragglerWaitGap, 0.3);
            Sample {
                taken: Timestamp(i * 1000),
                entities: vec![
                    EntitySample {
                        id: id(0, "GPU-SHARED"),
                        readings: shared,
                        serving: Some(ServingSnapshot {
                            engine: Some("vllm".into()),
                            kv_cache_utilization: Some(0.5),
                            running_requests: Some(8.0),
                            queued_requests: Some(2.0),
                            queue_seconds: Some(0.125),
                            prompt_tokens_per_sec: Some(1500.0),
                            output_tokens_per_sec: Some(300.0),
                            batch_size: Some(8.0),
                            max_batch_size: Some(256.0),
                            steps_per_sec: Some(40.0),
                            mfu: Some(0.2),
                            mbu: Some(0.5),
                            assumptions: Some("params=8e9,dtype=bf16".into()),
                            engine_flops_per_sec: Some(2.2e14),
                            engine_bytes_per_sec: Some(1.5e12),
                            engine_mfu: Some(0.22),
                            engine_mbu: Some(0.45),
                            engine_assumptions: Some("peak=h100-sxm".into()),
                            absent_reason: None,
                            gpus: Some(1),
                        }),
                        processes: vec![
                            process("4242", "uid-a", "chat-a", 40e9, 0.5),
                            process("4343", "uid-b", "chat-b", 20e9, 0.25),
                        ],
                        allocation: Some(vec![
                            holder("chat-a", "0", "search"),
                            holder("chat-b", "1", "ads"),
                        ]),
                        job: Some("node".into()),
                        // The GPU's Holder* readings are the worst of these; chat-b's I/O
                        // pressure could not be read.
                        holder_pressure: vec![
                            pressure("chat-a", CHAT_A),
                            pressure("chat-b", CHAT_B),
                        ],
                        ..EntitySample::default()
                    },
                    EntitySample {
                        id: id(1, "GPU-NVML"),
                        readings: nvml,
                        sm_clock_is_point: true,
                        allocation: Some(Vec::new()),
                        job: Some("node".into()),
                        ..EntitySample::default()
                    },
                    EntitySample {
                        id: EntityId {
                            pod: Some(pod("train")),
                            ..id(2, "GPU-SOLE")
                        },
                        readings: starved,
                        allocation: Some(vec![holder("train", "0", "search")]),
                        holder_pressure: vec![pressure("train", TRAIN)],
                        ..EntitySample::default()
                    },
                ],
            }
        })
        .collect();
    crate::gpu_entries(last_windows(&samples), SourceKind::Nvml)
}

#[expect(
    clippy::disallowed_methods,
    reason = "reads the goldens, and writes them under UPDATE_GOLDEN"
)]
fn check(name: &str, gpus: &[GpuEntry], identity: &Identity, source: &str) {
    for (format, ext) in [(Encoding::Text, "prom"), (Encoding::OpenMetrics, "om.txt")] {
        let body = exposition::encode(gpus, identity, &status(source), format);
        let path = format!("{}/tests/golden/{name}.{ext}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &body).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{path}: {e}; run `UPDATE_GOLDEN=1 cargo test -p truthscale-core --test it golden::`")
        });
        assert!(
            body == want,
            "{path} differs from the encoder's output; if the change is intended, run `UPDATE_GOLDEN=1 cargo test -p truthscale-core --test it golden::` and review the diff"
        );
    }
}

/// The value of the one series of family `name` whose labels contain every `label="v"` of
/// `with`, in the text exposition of `gpus`: the key numbers of a golden, read back to be
/// checked against hand arithmetic, so that a physics regression accepted with
/// `UPDATE_GOLDEN` still fails.
fn value_in(gpus: &[GpuEntry], identity: &Identity, name: &str, with: &[&str]) -> f64 {
    let body = exposition::encode(gpus, identity, &status("sim"), Encoding::Text);
    let found: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
    found[0]
}

fn assert_near(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-6, "{what}: {got}, by hand {want}");
}

#[test]
fn simulated_gpus() {
    let id = Identity {
        pod: Some("demo".into()),
        namespace: Some("default".into()),
        container: Some("server".into()),
        node: Some("node-1".into()),
    };
    check("sim-5-scenarios", &simulated(), &id, "sim");
}

#[test]
fn mig_instance_and_multiplexed_gpu() {
    let id = Identity {
        pod: Some("sidecar-pod".into()),
        container: Some("kserve-container".into()),
        ..Identity::default()
    };
    let gpus = mig_and_multiplexed();
    check("mig-and-multiplexed", &gpus, &id, "dcgm_exporter");
    // By hand: the MIG instance's tensor 0.3 at 1464 of the H100's 1830 MHz, ECF 0.3 × 0.8
    // = 0.24; the multiplexed GPU busy 1.0 against an ECF of 0.3, a gap of 0.7; its 4000 J
    // over 10 s, of which the 75 W idle floor is 750 J.
    let v = |name: &str, with: &[&str]| value_in(&gpus, &id, name, with);
    let mig = r#"uuid="GPU-MIG""#;
    let mux = r#"uuid="GPU-MUX""#;
    assert_near(v("truthscale_gpu_clock_correction_ratio", &[mig]), 0.8, "κ");
    assert_near(
        v("truthscale_gpu_effective_compute_ratio", &[mig]),
        0.24,
        "MIG ECF",
    );
    assert_near(v("truthscale_gpu_inflation_gap_ratio", &[mux]), 0.7, "gap");
    assert_near(
        v("truthscale_gpu_energy_joules_total", &[mux]),
        4000.0,
        "energy",
    );
    let idle = r#"part="idle_floor""#;
    assert_near(
        v("truthscale_gpu_energy_part_joules_total", &[mux, idle]),
        750.0,
        "floor",
    );
}

#[test]
fn t4_dcgm_exporter_capture() {
    let gpus = t4_capture();
    check(
        "t4-dcgm-exporter",
        &gpus,
        &Identity::default(),
        "dcgm_exporter",
    );
    // By hand, from the capture's own lines: SM clock 660 MHz of the T4's 1590 MHz
    // reference, κ = 0.415 094; tensor active 0.005 822, ECF = 0.005 822 × κ = 0.002 417;
    // busy 91 %, so a gap of 0.91 − 0.002 417 = 0.907 583.
    let v = |name: &str| value_in(&gpus, &Identity::default(), name, &[]);
    assert_near(
        v("truthscale_gpu_clock_correction_ratio"),
        660.0 / 1590.0,
        "κ",
    );
    assert_near(
        v("truthscale_gpu_effective_compute_ratio"),
        0.002_416_679,
        "ECF",
    );
    assert_near(
        v("truthscale_gpu_inflation_gap_ratio"),
        0.907_583_321,
        "gap",
    );
}

/// Every window of the five simulated scenarios, step by step (the golden has the last).
fn simulated_every_window() -> Vec<Vec<GpuEntry>> {
    let spec = by_key("h100-sxm").unwrap();
    let mut sim = Simulator::new(
        5,
        spec,
        "sim-node",
        7,
        Timestamp(0),
        Simulator::demo_scenario,
    );
    let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
    (0..90)
        .map(|_| crate::gpu_entries(d.observe(&sim.step(1.0)).windows, SourceKind::Sim))
        .collect()
}

/// The label names of every value written for the golden inputs, and for every window of
/// the five simulated scenarios, are the ones the catalog declares for the family
/// ([`catalog::MetricDesc::check_labels`]: the entity's labels in order, then exactly the
/// family's `extra_labels`).
#[test]
fn every_value_has_the_labels_its_family_declares() {
    let sidecar = Identity {
        pod: Some("sidecar-pod".into()),
        container: Some("kserve-container".into()),
        ..Identity::default()
    };
    let mut inputs: Vec<(Vec<GpuEntry>, Identity)> = vec![
        (simulated(), sidecar.clone()),
        (mig_and_multiplexed(), sidecar.clone()),
        (t4_capture(), Identity::default()),
        (every_family(), node_mode()),
    ];
    inputs.extend(
        simulated_every_window()
            .into_iter()
            .map(|g| (g, Identity::default())),
    );
    let mut families: BTreeSet<&str> = BTreeSet::new();
    let mut values = 0;
    for (gpus, identity) in &inputs {
        exposition::for_each_value(gpus, identity, &status("sim"), |m, labels, _| {
            let names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
            if let Err(e) = m.check_labels(&names) {
                panic!("{e}");
            }
            families.insert(m.name);
            values += 1;
        });
    }
    assert!(values > 1000, "{values}");
    let all: BTreeSet<&str> = catalog::ALL.iter().map(|m| m.name).collect();
    assert_eq!(
        all.difference(&families).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "families no input writes"
    );
}

/// Node mode's identity: the node only.
fn node_mode() -> Identity {
    Identity {
        node: Some("node-e".into()),
        ..Identity::default()
    }
}

#[test]
fn every_family_on_a_shared_node() {
    let gpus = every_family();
    check("every-family", &gpus, &node_mode(), "nvml");
    // By hand: the shared GPU's tensor 0.25 at 1755 of 1830 MHz, ECF 0.239 754; its holders'
    // SM-busy shares 2/3 and 1/3 of it, 0.159 836 and 0.079 918 (estimates); its 5200 J less
    // the 75 W × 10 s idle floor, 4450 J, split the same way: 2966.67 and 1483.33 J.
    let v = |name: &str, with: &[&str]| value_in(&gpus, &node_mode(), name, with);
    let shared = r#"uuid="GPU-SHARED""#;
    let (a, b) = (r#"pod="chat-a""#, r#"pod="chat-b""#);
    let ecf = "truthscale_gpu_effective_compute_ratio";
    assert_near(v(ecf, &[shared]), 0.25 * 1755.0 / 1830.0, "ECF");
    let part = "truthscale_pod_effective_compute_estimate_ratio";
    assert_near(
        v(part, &[shared, a]),
        0.25 * 1755.0 / 1830.0 * 2.0 / 3.0,
        "chat-a",
    );
    assert_near(
        v(part, &[shared, b]),
        0.25 * 1755.0 / 1830.0 / 3.0,
        "chat-b",
    );
    let joules = "truthscale_pod_energy_estimate_joules_total";
    assert_near(v(joules, &[shared, a]), 4450.0 * 2.0 / 3.0, "chat-a energy");
    assert_near(v(joules, &[shared, b]), 4450.0 / 3.0, "chat-b energy");
}

/// Every catalog family appears in some golden (its `# TYPE` line in a `.prom` file), so
/// that its exact text is reviewed; a family no core input can write would be listed here
/// with the reason (none is: the exporter's own come from [`ExporterStatus`]).
#[test]
#[expect(clippy::disallowed_methods, reason = "a test reads the goldens")]
fn every_family_is_in_a_golden() {
    const NOT_IN_A_GOLDEN: &[(&str, &str)] = &[];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let mut typed: BTreeSet<String> = BTreeSet::new();
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "prom") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        typed.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .filter_map(|l| l.split(' ').next())
                .map(str::to_owned),
        );
    }
    assert!(files >= 4, "{files} golden .prom files in {dir}");
    let missing: Vec<&str> = catalog::ALL
        .iter()
        .map(|m| m.name)
        .filter(|n| !typed.contains(*n) && !NOT_IN_A_GOLDEN.iter().any(|(x, _)| x == n))
        .collect();
    assert!(
        missing.is_empty(),
        "families in no golden (add an input to tests/it/golden.rs): {missing:?}"
    );
    for (name, why) in NOT_IN_A_GOLDEN {
        assert!(!typed.contains(*name), "{name} is in a golden now ({why})");
    }
}

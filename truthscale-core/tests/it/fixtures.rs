//! Real dcgm-exporter and `dcgmi dmon` captures (`tests/fixtures/dcgm/`), one test each, and
//! one `dcgmi dmon` capture constructed to DCGM v4.6.0's layout (its `# source:` line says
//! so).
//!
//! Each fixture starts with a `# source:` line that says where it comes from and what is
//! odd about it; the assertions below follow those notes.

use std::collections::BTreeSet;
use std::path::PathBuf;
use truthscale_core::model::*;
use truthscale_core::parse::*;

const ISSUE191: &str = "dcgm-exporter-NVIDIA-DCGM-issue191.txt";
const ISSUE226: &str = "dcgm-exporter-NVIDIA-DCGM-issue226.txt";
const ISSUE188: &str = "dcgm-exporter-NVIDIA-dcgm-exporter-issue188.txt";
const ISSUE68: &str = "dcgm-exporter-NVIDIA-dcgm-exporter-issue68.txt";
const GMT138: &str = "dcgm-exporter-NVIDIA-gpu-monitoring-tools-issue138.txt";
const ERICSSON_T4: &str = "dcgm-exporter-cncf-k8s-ai-conformance-ericsson-ccd-t4.txt";
const UPCLOUD_L40S: &str = "dcgm-exporter-cncf-k8s-ai-conformance-upcloud-l40s.txt";
const LINODE: &str = "dcgm-exporter-linode-lke-ai-conformance-README.txt";
const DMON244: &str = "dcgmi-dmon-NVIDIA-DCGM-issue244.txt";
const DMON_V460: &str = "dcgmi-dmon-constructed-dcgm-v4.6.0-layout.txt";

/// Every fixture some test below reads.
const TESTED: &[&str] = &[
    ISSUE191,
    ISSUE226,
    ISSUE188,
    ISSUE68,
    GMT138,
    ERICSSON_T4,
    UPCLOUD_L40S,
    LINODE,
    DMON244,
    DMON_V460,
];

const MIB: f64 = 1_048_576.0;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcgm")
}

#[expect(clippy::disallowed_methods, reason = "a test reads its fixtures")]
fn read(name: &str) -> String {
    let text = std::fs::read_to_string(dir().join(name)).unwrap();
    assert!(
        text.starts_with("# source: "),
        "{name} lost its source line"
    );
    text
}

/// Parse `text` as `format`, one sample per second from 0; panics on the first error.
fn parse(format: Format, name: &str, text: &str) -> (Vec<Sample>, u64) {
    assert_eq!(Format::detect(text), Some(format), "{name}");
    let mut p = LineParser::new(format, name, 1.0, Timestamp(0));
    let mut out = Vec::new();
    for line in text.lines() {
        out.extend(p.push_line(line).unwrap_or_else(|e| panic!("{e}")));
    }
    out.extend(p.finish());
    (out, p.skipped_lines())
}

fn exporter(name: &str) -> (Vec<Sample>, u64) {
    parse(Format::DcgmExporter, name, &read(name))
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

fn pod(pod: &str, namespace: &str, container: &str) -> Option<PodRef> {
    Some(PodRef {
        pod: pod.into(),
        namespace: s(namespace),
        container: s(container),
    })
}

/// Assert exact readings: `Some(v)` a value, `None` blank.
fn check(e: &EntitySample, want: &[(Field, Option<f64>)]) {
    for &(f, v) in want {
        let expected = v.map_or(Reading::Blank, Reading::Value);
        assert_eq!(e.readings.get(f), expected, "{} {}", e.id, f.name());
    }
}

fn all_blank(e: &EntitySample) -> bool {
    e.readings.iter().all(|(_, r)| r == Reading::Blank)
}

#[test]
#[expect(clippy::disallowed_methods, reason = "lists the fixtures on disk")]
fn every_fixture_is_tested() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let tested: BTreeSet<String> = TESTED.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(on_disk, tested, "add a test for each new fixture");
}

#[test]
fn dcgm_issue191_gke_t4_one_pod_one_unattributed() {
    let (samples, skipped) = exporter(ISSUE191);
    assert_eq!((samples.len(), skipped), (1, 7));
    let e = &samples[0].entities;
    assert_eq!(e.len(), 2);
    let node = s("gke-test-dcgm-default-pool-fed1e979-tt7p");
    let want0 = EntityId {
        gpu: Some(0),
        uuid: s("GPU-84412445-5790-0b3f-f714-da8aa3b2c0b0"),
        model: s("Tesla T4"),
        node: node.clone(),
        pod: pod("triton-84d57987c9-kks4k", "default", "triton-server"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    let want1 = EntityId {
        gpu: Some(1),
        uuid: s("GPU-4812b59b-1f1a-430f-d8a4-69d2ee8c18bb"),
        model: s("Tesla T4"),
        node,
        pod: None,
        // Its `device` label, `nvidia1`.
        minor: Some(1),
        ..EntityId::default()
    };
    assert_eq!((&e[0].id, &e[1].id), (&want0, &want1));
    for e in e {
        check(
            e,
            &[
                (Field::SmActive, Some(0.0)),
                (Field::SmOccupancy, Some(0.0)),
                (Field::TensorActive, Some(0.0)),
                (Field::GrActive, None),
                (Field::ReportedUtil, None),
            ],
        );
    }
}

#[test]
fn dcgm_issue226_openshift_l40s_pod_spans_two_gpus() {
    let (samples, skipped) = exporter(ISSUE226);
    assert_eq!((samples.len(), skipped), (1, 3));
    let e = &samples[0].entities;
    let ids: Vec<_> = e
        .iter()
        .map(|e| (e.id.gpu, e.id.pci_bus_id.clone(), e.id.pod.clone()))
        .collect();
    let tf = pod("tensorflow-0", "redacted", "tensorflow");
    assert_eq!(
        ids,
        [
            (Some(0), s("00000000:4E:00.0"), tf.clone()),
            (Some(1), s("00000000:62:00.0"), tf),
            (Some(2), s("00000000:C9:00.0"), None),
        ]
    );
    assert_eq!(e[2].id.uuid, s("GPU-5bd39b62-f1d2-21f3-d9d5-24cf8d513c73"));
    for e in e {
        assert_eq!(
            (e.id.model.as_deref(), e.id.node.as_deref()),
            (Some("NVIDIA L40S"), Some("l40s.example.com"))
        );
        check(
            e,
            &[(Field::GrActive, Some(0.0)), (Field::ReportedUtil, None)],
        );
    }
}

#[test]
fn dcgm_exporter_issue188_1x_metric_names() {
    let (samples, skipped) = exporter(ISSUE188);
    assert_eq!((samples.len(), skipped), (1, 1));
    let e = &samples[0].entities;
    assert_eq!(e.len(), 1);
    let want = EntityId {
        gpu: Some(0),
        uuid: s("GPU-c1f38265-5e7c-0a81-14a0-240a35ea8160"),
        node: s("dcgm-exporter-6ldbb"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    assert_eq!(e[0].id, want);
    check(
        &e[0],
        &[
            (Field::SmClockMhz, Some(585.0)),
            (Field::MemClockMhz, Some(5000.0)),
            (Field::TempCelsius, Some(54.0)),
            (Field::PowerWatts, Some(30.982)),
            (Field::EnergyJoules, Some(55_491_669.881)),
            (Field::ReportedUtil, Some(0.0)),
            (Field::MemUsedBytes, None),
            (Field::GrActive, None),
        ],
    );
}

#[test]
fn dcgm_exporter_issue68_a30_mig() {
    let text = read(ISSUE68);
    // The fixture's note: line 5 carries a markdown quote marker ("> ") copied from the
    // issue; it is not exporter output, so it is stripped before parsing. Unstripped, the
    // parser rejects it.
    let mut p = DcgmTextParser::new(ISSUE68, 1.0, Timestamp(0));
    let err = text.lines().find_map(|l| p.push_line(l).err()).unwrap();
    assert_eq!(
        err.to_string(),
        format!("{ISSUE68}:5: expected a metric name")
    );
    let stripped: String = text
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("> ").unwrap_or(l)))
        .collect();
    let (samples, skipped) = parse(Format::DcgmExporter, ISSUE68, &stripped);
    assert_eq!(skipped, 3);
    // The three fragments are excerpts, not whole scrapes: the second scrape starts where
    // a series repeats (TENSOR_ACTIVE of GI 1), so fragment 2's GR_ENGINE_ACTIVE line still
    // joins the first, and fragment 3 (another series: a different Hostname and pod)
    // joins the second.
    assert_eq!(samples.len(), 2);
    assert_eq!(
        (samples[0].taken, samples[1].taken),
        (Timestamp(0), Timestamp(1_000))
    );
    let gi1 = Some(MigId {
        uuid: None,
        gpu_instance: 1,
        compute_instance: None,
        profile: s("2g.12gb"),
    });
    let idle = EntityId {
        gpu: Some(0),
        uuid: s("GPU-603a8873-0edd-c157-ce48-2078e8b1a935"),
        model: s("NVIDIA A30"),
        mig: gi1.clone(),
        node: s("dcgm-exporter-sn5rp"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    let e = &samples[0].entities;
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].id, idle);
    check(
        &e[0],
        &[
            (Field::TensorActive, Some(0.0)),
            (Field::DramActive, Some(0.0)),
            (Field::GrActive, Some(0.381_124)),
            (Field::ReportedUtil, None),
        ],
    );
    let e = &samples[1].entities;
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].id, idle);
    check(
        &e[0],
        &[
            (Field::TensorActive, Some(0.022_137)),
            (Field::GrActive, None),
        ],
    );
    let attributed = EntityId {
        node: s("dcgm-exporter-4flp2"),
        pod: pod("testest-9sxmd", "gi-user1-giops-ai", "container-testest-1"),
        ..idle
    };
    assert_eq!(e[1].id, attributed);
    check(
        &e[1],
        &[
            (Field::GrActive, Some(0.959_228)),
            (Field::TensorActive, None),
        ],
    );
}

#[test]
fn gpu_monitoring_tools_issue138_early_2x_format() {
    let (samples, skipped) = exporter(GMT138);
    assert_eq!((samples.len(), skipped), (1, 2));
    let e = &samples[0].entities;
    assert_eq!(e.len(), 2, "two GPUs 0 from two hosts, told apart by UUID");
    let busy = EntityId {
        gpu: Some(0),
        uuid: s("GPU-6bf47ca9-ad3e-15db-beed-1079a7d74116"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    let prof = EntityId {
        gpu: Some(0),
        uuid: s("GPU-227ba87f-fcf3-c09a-dc3b-c72ea41297e3"),
        pod: pod("dcgmproftester", "default", "dcgmproftester11"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    assert_eq!((&e[0].id, &e[1].id), (&busy, &prof));
    check(
        &e[0],
        &[
            (Field::SmClockMhz, Some(1530.0)),
            (Field::MemClockMhz, Some(877.0)),
            (Field::TempCelsius, Some(55.0)),
            (Field::PowerWatts, Some(302.206)),
            (Field::EnergyJoules, Some(4_335_301.032)),
            (Field::ReportedUtil, Some(0.44)),
            (Field::DramActive, None),
        ],
    );
    check(
        &e[1],
        &[
            (Field::DramActive, Some(0.000_001)),
            (Field::Fp64Active, Some(0.0)),
            (Field::Fp32Active, Some(0.0)),
            (Field::Fp16Active, Some(0.0)),
            (Field::PcieTxBytesPerSec, Some(421_894.0)),
            (Field::ReportedUtil, None),
        ],
    );
}

#[test]
fn ericsson_t4_misleading_utilization() {
    let (samples, skipped) = exporter(ERICSSON_T4);
    assert_eq!((samples.len(), skipped), (1, 1));
    let e = &samples[0].entities;
    assert_eq!(e.len(), 1);
    let want = EntityId {
        gpu: Some(0),
        uuid: s("GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a"),
        model: s("Tesla T4"),
        pci_bus_id: s("00000000:37:00.0"),
        // The driver version from its label, as each fixture shows it.
        driver_version: s("590.48.01"),
        node: s("cp-bm14r7"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    assert_eq!(e[0].id, want);
    check(
        &e[0],
        &[
            (Field::ReportedUtil, Some(0.91)),
            (Field::GrActive, Some(0.156_205)),
            (Field::TensorActive, Some(0.005_822)),
            (Field::DramActive, Some(0.092_781)),
            (Field::SmClockMhz, Some(660.0)),
            (Field::MemClockMhz, Some(5000.0)),
            (Field::TempCelsius, Some(74.0)),
            (Field::PowerWatts, Some(68.244)),
            (Field::EnergyJoules, Some(15_152_422.938)),
            (Field::MemUsedBytes, Some(5120.0 * MIB)),
            (Field::MemTotalBytes, Some((5120.0 + 9791.0 + 447.0) * MIB)),
            (Field::PcieTxBytesPerSec, Some(4_791_810.0)),
            (Field::PcieRxBytesPerSec, Some(6_935_930.0)),
            (Field::SmActive, None),
            (Field::PowerLimitWatts, None),
        ],
    );
    assert_eq!(e[0].throttles, None);
}

#[test]
fn upcloud_l40s_idle_with_help_and_type() {
    let (samples, skipped) = exporter(UPCLOUD_L40S);
    assert_eq!((samples.len(), skipped), (1, 47));
    let e = &samples[0].entities;
    assert_eq!(e.len(), 1);
    let want = EntityId {
        gpu: Some(0),
        uuid: s("GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43"),
        model: s("NVIDIA L40S"),
        pci_bus_id: s("00000000:00:07.0"),
        // The driver version from its label, as each fixture shows it.
        driver_version: s("595.58.03"),
        node: s("gpu1-wl8sg"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    assert_eq!(e[0].id, want);
    check(
        &e[0],
        &[
            (Field::SmClockMhz, Some(210.0)),
            (Field::MemClockMhz, Some(405.0)),
            (Field::TempCelsius, Some(32.0)),
            (Field::PowerWatts, Some(35.686)),
            (Field::EnergyJoules, Some(5_551_899.58)),
            (Field::ReportedUtil, Some(0.0)),
            (Field::MemUsedBytes, Some(0.0)),
            (Field::MemTotalBytes, Some((45_459.0 + 608.0) * MIB)),
            (Field::GrActive, Some(0.0)),
            (Field::TensorActive, Some(0.0)),
            (Field::DramActive, Some(0.000_131)),
            (Field::PcieTxBytesPerSec, Some(175_084.0)),
            (Field::PcieRxBytesPerSec, Some(19_831.0)),
        ],
    );
}

#[test]
fn linode_rtx4000_ada_pod_attributed() {
    let (samples, skipped) = exporter(LINODE);
    assert_eq!((samples.len(), skipped), (1, 51));
    let e = &samples[0].entities;
    assert_eq!(
        e.len(),
        1,
        "the XID line's extra err_code/err_msg labels do not split the GPU"
    );
    let want = EntityId {
        gpu: Some(0),
        uuid: s("GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"),
        model: s("NVIDIA RTX 4000 Ada Generation"),
        pci_bus_id: s("00000000:00:02.0"),
        // The driver version from its label, as each fixture shows it.
        driver_version: s("580.95.05"),
        node: s("lke529760-766837-0a634ab30000"),
        pod: pod("cuda-75454ffb9f-8ljq7", "default", "cuda"),
        // Its `device` label, `nvidia0`.
        minor: Some(0),
        ..EntityId::default()
    };
    assert_eq!(e[0].id, want);
    check(
        &e[0],
        &[
            (Field::SmClockMhz, Some(2310.0)),
            (Field::MemClockMhz, Some(9001.0)),
            (Field::TempCelsius, Some(48.0)),
            (Field::PowerWatts, Some(40.979)),
            (Field::EnergyJoules, Some(455_497.156)),
            (Field::ReportedUtil, Some(0.0)),
            (Field::MemUsedBytes, Some(MIB)),
            (Field::MemTotalBytes, Some((1.0 + 20_015.0 + 457.0) * MIB)),
            (Field::GrActive, Some(0.004_656)),
            (Field::TensorActive, Some(0.0)),
            (Field::DramActive, Some(0.003_074)),
            (Field::PcieTxBytesPerSec, Some(78_398_480.0)),
            (Field::PcieRxBytesPerSec, Some(45_987_793.0)),
        ],
    );
}

#[test]
fn dmon_issue244_eight_gpus_multiplexed_profiling() {
    let name = DMON244;
    let (samples, skipped) = parse(Format::DcgmiDmon, name, &read(name));
    assert_eq!(skipped, 2, "the source line and the shell prompt line");
    assert_eq!(samples.len(), 2);
    assert_eq!(
        (samples[0].taken, samples[1].taken),
        (Timestamp(0), Timestamp(1_000))
    );
    let first = &samples[0].entities;
    let gpus: Vec<_> = first.iter().map(|e| e.id.gpu).collect();
    assert_eq!(gpus, (0..8).map(Some).collect::<Vec<_>>());
    assert!(
        first
            .iter()
            .all(|e| all_blank(e) && e.id.mig.is_none() && e.id.uuid.is_none())
    );
    let second = &samples[1].entities;
    assert_eq!(
        second.iter().map(|e| e.id.gpu).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
    check(
        &second[0],
        &[
            (Field::GrActive, Some(0.888)),
            (Field::SmActive, None),
            (Field::SmOccupancy, None),
            (Field::TensorActive, Some(0.178)),
            (Field::DramActive, None),
            (Field::Fp64Active, None),
            (Field::Fp32Active, None),
            (Field::Fp16Active, Some(0.001)),
        ],
    );
    check(
        &second[1],
        &[
            (Field::GrActive, None),
            (Field::SmActive, Some(0.777)),
            (Field::SmOccupancy, None),
            (Field::TensorActive, None),
            (Field::DramActive, None),
            (Field::Fp64Active, Some(0.0)),
            (Field::Fp32Active, Some(0.046)),
            (Field::Fp16Active, None),
        ],
    );
}

#[test]
fn dmon_v4_6_0_layout_units_line_repeated_headers_and_blank_fields() {
    let name = DMON_V460;
    // `parse` panics on the first error: the units lines, read as headers, give none.
    let (samples, skipped) = parse(Format::DcgmiDmon, name, &read(name));
    assert_eq!(skipped, 2, "the source line and the shell prompt line");
    assert_eq!(
        samples.len(),
        32,
        "`-c 32`, with the header twice more among the sweeps"
    );
    for (k, s) in samples.iter().enumerate() {
        assert_eq!(s.taken, Timestamp(k as i64 * 1_000));
        let gpus: Vec<_> = s.entities.iter().map(|e| e.id.gpu).collect();
        assert_eq!(gpus, [Some(0), Some(1)], "sweep {k}");
        for e in &s.entities {
            // ` mJ` after every header: about 9e6 and 1.5e7 J, never the raw millijoules.
            let j = e.readings.value(Field::EnergyJoules).unwrap();
            assert!((9.0e6..1.6e7).contains(&j), "sweep {k}: {j}");
        }
    }
    let first = &samples[0].entities;
    check(
        &first[0],
        &[
            (Field::PowerWatts, Some(250.018)),
            (Field::EnergyJoules, Some(15_152_672.956)),
            (Field::TempCelsius, Some(60.0)),
            (Field::SmClockMhz, Some(1980.0)),
            (Field::GrActive, Some(0.5)),
            (Field::TensorActive, Some(0.25)),
            (Field::DramActive, Some(0.125)),
        ],
    );
    check(
        &first[1],
        &[
            (Field::PowerWatts, Some(290.018)),
            (Field::EnergyJoules, Some(9_010_493.058)),
            (Field::TempCelsius, Some(63.0)),
            (Field::SmClockMhz, Some(1410.0)),
            (Field::GrActive, None),
            (Field::TensorActive, None),
            (Field::DramActive, None),
        ],
    );
    // The first sweep after the second header.
    check(
        &samples[15].entities[0],
        &[
            (Field::PowerWatts, Some(250.018)),
            (Field::EnergyJoules, Some(15_156_460.726)),
            (Field::TempCelsius, Some(61.0)),
            (Field::GrActive, Some(0.65)),
        ],
    );
    // GPU 1's TENSO is blank space in sweep 21: blank there only.
    check(
        &samples[20].entities[1],
        &[
            (Field::PowerWatts, Some(290.018)),
            (Field::EnergyJoules, Some(9_016_343.418)),
            (Field::TempCelsius, Some(65.0)),
            (Field::SmClockMhz, Some(1410.0)),
            (Field::GrActive, Some(0.8)),
            (Field::TensorActive, None),
            (Field::DramActive, Some(0.165)),
        ],
    );
    // GPU 0's last row ends before DRAMA.
    check(
        &samples[31].entities[0],
        &[
            (Field::PowerWatts, Some(251.268)),
            (Field::EnergyJoules, Some(15_160_499.764)),
            (Field::TempCelsius, Some(63.0)),
            (Field::SmClockMhz, Some(1980.0)),
            (Field::GrActive, Some(0.81)),
            (Field::TensorActive, Some(0.405)),
            (Field::DramActive, None),
        ],
    );
}

// nvidia-smi CSV (`tests/fixtures/nvidia-smi/`): constructed in nvidia-smi's documented CSV
// layout (their `# source:` lines say so), with and without units, with `[N/A]` values; and a
// gzip and a zstd copy of one, read by the exporter's capture reader (`exporter/src/capture.rs`
// and `tests/tests/it/cli.rs`).

const SMI_UNITS: &str = "nvidia-smi-constructed-h100-units.csv";
const SMI_NOUNITS: &str = "nvidia-smi-constructed-h100-nounits.csv";
const SMI_NA: &str = "nvidia-smi-constructed-t4-na.csv";
const SMI_GZ: &str = "nvidia-smi-constructed-h100-units.csv.gz";
const SMI_ZST: &str = "nvidia-smi-constructed-h100-units.csv.zst";

/// Every nvidia-smi fixture some test reads.
const SMI_TESTED: &[&str] = &[SMI_UNITS, SMI_NOUNITS, SMI_NA, SMI_GZ, SMI_ZST];

/// 2026-12-03T16:23:40Z, the first row's second in the H100 fixtures (read as UTC).
const SMI_T0: i64 = 1_796_315_020_000;

fn smi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi")
}

#[expect(clippy::disallowed_methods, reason = "a test reads its fixtures")]
fn smi(name: &str) -> (Vec<Sample>, u64) {
    let text = std::fs::read_to_string(smi_dir().join(name)).unwrap();
    assert!(
        text.starts_with("# source: constructed"),
        "{name} lost its source line"
    );
    parse(Format::NvidiaSmiCsv, name, &text)
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "lists the fixtures on disk and reads the compressed ones"
)]
fn every_nvidia_smi_fixture_is_tested() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(smi_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let tested: BTreeSet<String> = SMI_TESTED.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(on_disk, tested, "add a test for each new fixture");
    // The compressed copies stay compressed (the exporter checks what they hold).
    let head = |name: &str| std::fs::read(smi_dir().join(name)).unwrap()[..4].to_vec();
    assert_eq!(head(SMI_GZ)[..2], [0x1f, 0x8b]);
    assert_eq!(head(SMI_ZST), [0x28, 0xb5, 0x2f, 0xfd]);
}

/// Two H100s, 12 sweeps a second apart, each GPU's row stamped 2 ms after the other's:
/// one sample per sweep, at its later row's time; every mapped column read, in its unit;
/// `utilization.memory` not read.
#[test]
fn nvidia_smi_h100_with_units() {
    let (samples, skipped) = smi(SMI_UNITS);
    assert_eq!((samples.len(), skipped), (12, 1), "the source line");
    for (k, s) in samples.iter().enumerate() {
        assert_eq!(s.taken, Timestamp(SMI_T0 + 125 + 1_000 * k as i64));
        let gpus: Vec<_> = s.entities.iter().map(|e| e.id.gpu).collect();
        assert_eq!(gpus, [Some(0), Some(1)], "sweep {k}");
        for e in &s.entities {
            assert_eq!(e.readings.get(Field::DramActive), Reading::Blank);
            assert_eq!(e.readings.get(Field::TensorActive), Reading::Blank);
        }
    }
    let g0 = &samples[0].entities[0];
    assert_eq!(
        g0.id,
        EntityId {
            gpu: Some(0),
            uuid: s("GPU-3b9c1e0a-5f2d-4c8e-9a71-0d6e2f4b8c13"),
            model: s("NVIDIA H100 80GB HBM3"),
            pci_bus_id: s("00000000:18:00.0"),
            ..EntityId::default()
        }
    );
    check(
        g0,
        &[
            (Field::ReportedUtil, Some(0.4)),
            (Field::MemUsedBytes, Some(20_480.0 * MIB)),
            (Field::MemTotalBytes, Some(81_559.0 * MIB)),
            (Field::PowerWatts, Some(312.45)),
            (Field::PowerLimitWatts, Some(700.0)),
            (Field::SmClockMhz, Some(1980.0)),
            (Field::MemClockMhz, Some(2619.0)),
            (Field::TempCelsius, Some(48.0)),
        ],
    );
    check(
        &samples[11].entities[0],
        &[
            (Field::ReportedUtil, Some(1.0)),
            (Field::MemUsedBytes, Some(40_960.0 * MIB)),
            (Field::PowerWatts, Some(689.99)),
            (Field::SmClockMhz, Some(1755.0)),
            (Field::TempCelsius, Some(64.0)),
        ],
    );
    check(
        &samples[1].entities[1],
        &[
            (Field::ReportedUtil, Some(0.0)),
            (Field::MemUsedBytes, Some(0.0)),
            (Field::PowerWatts, Some(71.2)),
            (Field::SmClockMhz, Some(345.0)),
            (Field::TempCelsius, Some(31.0)),
        ],
    );
}

/// `--format=csv,nounits`: the same samples as with units.
#[test]
fn nvidia_smi_h100_nounits_reads_the_same() {
    let (units, _) = smi(SMI_UNITS);
    let (bare, skipped) = smi(SMI_NOUNITS);
    assert_eq!(skipped, 1);
    assert_eq!(bare, units);
}

/// A T4 without a timestamp column (samples an interval apart) and with `[N/A]`,
/// `[Not Supported]` and `N/A` readings: blanks, never 0; the total memory from used + free.
#[test]
fn nvidia_smi_t4_blanks_and_no_timestamps() {
    let (samples, skipped) = smi(SMI_NA);
    assert_eq!((samples.len(), skipped), (6, 1));
    for (k, sample) in samples.iter().enumerate() {
        assert_eq!(sample.taken, Timestamp(k as i64 * 1_000));
        let [e] = &sample.entities[..] else {
            panic!("sweep {k}: {:?}", sample.entities)
        };
        let want = EntityId {
            gpu: Some(0),
            model: s("Tesla T4"),
            pci_bus_id: s("00000000:00:1E.0"),
            ..EntityId::default()
        };
        assert_eq!(e.id, want);
    }
    let e = |k: usize| &samples[k].entities[0];
    check(
        e(1),
        &[
            (Field::ReportedUtil, None),
            (Field::PowerWatts, None),
            (Field::SmClockMhz, None),
            (Field::MemUsedBytes, Some(1024.0 * MIB)),
            (Field::MemTotalBytes, Some(15_095.0 * MIB)),
            (Field::PowerLimitWatts, Some(70.0)),
            (Field::TempCelsius, Some(38.0)),
        ],
    );
    check(
        e(3),
        &[
            (Field::ReportedUtil, Some(0.93)),
            (Field::PowerWatts, None),
            (Field::PowerLimitWatts, None),
            (Field::MemClockMhz, None),
            (Field::SmClockMhz, Some(1590.0)),
        ],
    );
    check(
        e(4),
        &[
            (Field::ReportedUtil, None),
            (Field::MemUsedBytes, None),
            (Field::MemTotalBytes, None),
            (Field::TempCelsius, None),
            (Field::PowerWatts, Some(69.75)),
        ],
    );
}

//! Why a starved GPU waits, from the GPU's own counters: `truthscale serve --source nvml` on
//! the fake NVML library (`tests/fake-nvml`) with GPUs whose PCIe, graphics-engine, SM,
//! tensor and NVLink readings each make one cause of `truthscale_gpu_starved_seconds_total`
//! (`host_to_device`, `launch_bound`, `comm_bound`), and the PCIe link NVML reports.

use serde_json::{Value as Json, json};
use std::time::Duration;
use truthscale_e2e::fake_nvml as fake;
use truthscale_e2e::{Sample, Sidecar, TempDir, clean_command, series, value};

/// How long a condition may take to show on `/metrics`.
const WAIT: Duration = Duration::from_secs(30);

/// MiB, the unit of GPM's byte rates.
const MIB: f64 = 1_048_576.0;

/// Bytes per second, per direction, of a PCIe link: GT/s per lane × lanes × the 128b/130b
/// line code (Gen 3 to 5) ÷ 8 bits. Written from the PCIe specification's figures, not
/// from truthscale's own function.
fn pcie_link_bytes_per_sec(gt_per_sec: f64, lanes: f64) -> f64 {
    gt_per_sec * 1e9 * lanes * 128.0 / 130.0 / 8.0
}

/// An H100 SXM (NVLink 4: 900 GB/s both directions together) on a Gen5 x16 link, busy
/// flag high and no clock event, with these GPM metrics (percent, MiB/s).
fn h100(index: usize, gpm: &Json) -> Json {
    json!({
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": uuid(index),
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x18 + index),
        "architecture": "hopper",
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "ecc_sbe_volatile": 0,
        "ecc_dbe_volatile": 0,
        "ecc_dbe_aggregate": 0,
        "row_remap": {},
        "power_violation_ns": 0,
        "thermal_violation_ns": 0,
        "memory_total_bytes": 85_520_809_984_u64,
        "memory_used_bytes": 40_000_000_000_u64,
        "util_percent": 100,
        "power_watts": 350,
        "power_limit_watts": 700,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 50,
        "gpm": { "metrics": gpm },
    })
}

fn uuid(index: usize) -> String {
    format!("GPU-c0a5e000-0000-4000-8000-00000000000{index}")
}

/// Write a scenario of `devices` and serve it, sampling every 250 ms.
fn serve(dir: &TempDir, comment: &str, devices: Vec<Json>) -> Sidecar {
    serve_with(dir, comment, devices, &[])
}

/// [`serve`] with more environment.
fn serve_with(dir: &TempDir, comment: &str, devices: Vec<Json>, env: &[(&str, &str)]) -> Sidecar {
    let scenario = dir.path().join("scenario.json");
    let text = json!({ "_comment": comment, "devices": devices }).to_string();
    std::fs::write(&scenario, text).expect("write the scenario");
    let mut all = vec![(
        "FAKE_NVML_SCENARIO",
        scenario.to_str().expect("a UTF-8 path"),
    )];
    all.extend_from_slice(env);
    Sidecar::start(
        &truthscale_e2e::nvml_args(fake(), "250ms"),
        &all,
        dir.path(),
    )
}

/// A GPU's series `name` (by its UUID), with `labels` too.
fn of(m: &[Sample], gpu: usize, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let id = uuid(gpu);
    let mut all = vec![("uuid", id.as_str())];
    all.extend_from_slice(labels);
    value(m, name, &all)
}

const STARVED: &str = "truthscale_gpu_starved_seconds_total";

/// A GPU's starved seconds by cause (every cause the family has).
fn starved(m: &[Sample], gpu: usize) -> Vec<(String, f64)> {
    series(m, STARVED, &[("uuid", &uuid(gpu))])
        .iter()
        .map(|s| (s.label("cause").unwrap_or("?").to_string(), s.value))
        .collect()
}

/// Whether `gpu` has starved seconds under `cause` and none under any other.
fn only_cause(m: &[Sample], gpu: usize, cause: &str) -> bool {
    let by_cause = starved(m, gpu);
    by_cause.iter().any(|(c, v)| c == cause && *v > 0.0)
        && by_cause.iter().all(|(c, v)| c == cause || *v == 0.0)
}

/// Bytes per second as NVML's whole KB/s (a `u32`).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "tens of GB/s: well inside u32 KB/s"
)]
fn kbps(bytes_per_sec: f64) -> u32 {
    (bytes_per_sec / 1000.0).round() as u32
}

fn close(v: Option<f64>, want: f64, rel: f64) -> bool {
    v.is_some_and(|v| (v - want).abs() <= want.abs() * rel)
}

#[test]
fn nvml_reads_the_pcie_link_and_its_throughput_without_gpm() {
    let dir = TempDir::new("causes-gpu-link");
    let a100 = json!({
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": uuid(0),
        "pci_bus_id": "00000000:07:00.0",
        "architecture": "ampere",
        "pcie_link_gen": 4,
        "pcie_link_width": 16,
        "ecc_sbe_volatile": 0,
        "ecc_dbe_volatile": 0,
        "ecc_dbe_aggregate": 0,
        "row_remap": {},
        "power_violation_ns": 0,
        "thermal_violation_ns": 0,
        "pcie_rx_kbps": 28_000_000,
        "pcie_tx_kbps": 1_500_000,
        "memory_total_bytes": 85_899_345_920_u64,
        "util_percent": 90,
        "power_watts": 250,
        "power_limit_watts": 400,
        "sm_clock_mhz": 1410,
        "mem_clock_mhz": 1593,
        "temperature_c": 50,
    });
    let s = serve(&dir, "An A100 without GPM on a Gen4 x16 link.", vec![a100]);
    let m = s.wait_for(WAIT, "the PCIe link and throughput", |m| {
        of(m, 0, "truthscale_gpu_pcie_receive_bytes_per_second", &[]).is_some()
    });
    let get = |n: &str| of(&m, 0, n, &[]);
    assert_eq!(get("truthscale_gpu_pcie_link_generation"), Some(4.0));
    assert_eq!(get("truthscale_gpu_pcie_link_width"), Some(16.0));
    // NVML's KB/s are thousands of bytes: 28 000 000 KB/s is 28 GB/s.
    assert_eq!(
        get("truthscale_gpu_pcie_receive_bytes_per_second"),
        Some(2.8e10)
    );
    assert_eq!(
        get("truthscale_gpu_pcie_transmit_bytes_per_second"),
        Some(1.5e9)
    );
    let errors = series(&m, "truthscale_source_errors_total", &[]);
    assert!(errors.is_empty(), "{errors:#?}");
    // `doctor` shows the link among the GPU's readings.
    let out = clean_command()
        .args([
            "doctor",
            "--nvml-library",
            fake().to_str().expect("a UTF-8 path"),
        ])
        .env("FAKE_NVML_SCENARIO", dir.path().join("scenario.json"))
        .output()
        .expect("run truthscale doctor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let readings = stdout
        .lines()
        .find(|l| l.starts_with("  readings "))
        .unwrap_or_default();
    assert!(readings.contains(", PCIe Gen4 x16, "), "{stdout}");
}

/// An A100 without GPM on a Gen4 x16 link, busy 90 %, whose throughput call reads
/// `rx_kbps` and `tx_kbps` (NVML's KB/s).
fn a100_on_gen4(rx_kbps: u32, tx_kbps: u32) -> serde_json::Value {
    json!({
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": uuid(0),
        "architecture": "ampere",
        "pcie_link_gen": 4,
        "pcie_link_width": 16,
        "pcie_rx_kbps": rx_kbps,
        "pcie_tx_kbps": tx_kbps,
        "memory_total_bytes": 85_899_345_920_u64,
        "util_percent": 90,
        "power_watts": 250,
        "sm_clock_mhz": 1410,
    })
}

/// Where the driver has NVML's PCIe byte counters, the rate is their rise over the span
/// between their own timestamps (the window's mean), not the throughput call's 20 ms
/// snapshot: the counters rise 5 GB/s and 2 GB/s while the snapshot says 28 and 1.5.
#[test]
fn nvml_reads_the_pcie_rate_from_the_byte_counters_where_it_has_them() {
    let dir = TempDir::new("causes-gpu-pcie-bytes");
    let mut a100 = a100_on_gen4(28_000_000, 1_500_000);
    a100["pcie_rx_bytes_per_sec"] = json!(5e9);
    a100["pcie_tx_bytes_per_sec"] = json!(2e9);
    let s = serve(
        &dir,
        "An A100 without GPM, with PCIe byte counters.",
        vec![a100],
    );
    let m = s.wait_for(WAIT, "the PCIe rate", |m| {
        of(m, 0, "truthscale_gpu_pcie_receive_bytes_per_second", &[]).is_some()
    });
    let get = |n: &str| of(&m, 0, n, &[]);
    let rx = get("truthscale_gpu_pcie_receive_bytes_per_second");
    let tx = get("truthscale_gpu_pcie_transmit_bytes_per_second");
    assert!(close(rx, 5e9, 0.01), "{rx:?}");
    assert!(close(tx, 2e9, 0.01), "{tx:?}");
}

/// NVML's "not available" (0xFFFFFFFF KB/s) from the throughput call is blank and counted
/// as a sentinel, never a rate (scaled, it read 4.3 TB/s: 136 times a Gen4 x16 link, and the
/// GPU's starved time went to host-to-device copies); the other direction is read.
#[test]
fn nvml_s_not_available_pcie_throughput_is_blank_and_counted() {
    let dir = TempDir::new("causes-gpu-pcie-sentinel");
    let a100 = a100_on_gen4(4_294_967_295, 1_500_000);
    let s = serve(
        &dir,
        "An A100 whose receive rate is not available.",
        vec![a100],
    );
    let m = s.wait_for(WAIT, "the PCIe transmit rate", |m| {
        of(m, 0, "truthscale_gpu_pcie_transmit_bytes_per_second", &[]).is_some()
    });
    assert_eq!(
        of(&m, 0, "truthscale_gpu_pcie_transmit_bytes_per_second", &[]),
        Some(1.5e9)
    );
    assert_eq!(
        of(&m, 0, "truthscale_gpu_pcie_receive_bytes_per_second", &[]),
        None
    );
    let sentinels = value(
        &m,
        "truthscale_source_errors_total",
        &[("source", "nvml"), ("kind", "sentinel")],
    );
    assert!(sentinels.is_some_and(|n| n >= 1.0), "{sentinels:?}");
}

#[test]
fn nvml_without_the_link_functions_leaves_the_link_blank() {
    let dir = TempDir::new("causes-gpu-no-link");
    let mut gpu = h100(0, &json!({ "sm_util": 50, "any_tensor_util": 40 }));
    let o = gpu.as_object_mut().expect("an object");
    o.remove("pcie_link_gen");
    o.remove("pcie_link_width");
    let s = serve(&dir, "An H100 whose driver reports no link.", vec![gpu]);
    let m = s.wait_for(WAIT, "a window", |m| {
        of(m, 0, "truthscale_gpu_tensor_active_ratio", &[]).is_some()
    });
    // Unsupported stays unsupported: no series, never a zero.
    for name in [
        "truthscale_gpu_pcie_link_generation",
        "truthscale_gpu_pcie_link_width",
        "truthscale_gpu_pcie_receive_bytes_per_second",
    ] {
        assert_eq!(of(&m, 0, name, &[]), None, "{name}");
    }
    // Each unsupported call (the two link calls, GPM's and NVML's PCIe rates) counted once.
    let unsupported = value(
        &m,
        "truthscale_source_errors_total",
        &[("source", "nvml"), ("kind", "unsupported")],
    );
    assert!(unsupported.is_some_and(|n| n >= 2.0), "{unsupported:?}");
}

#[test]
fn each_starved_gpu_is_given_its_cause_from_the_gpu_counters() {
    let dir = TempDir::new("causes-gpu");
    let link = pcie_link_bytes_per_sec(32.0, 16.0);
    let nvlink_peak = 900e9;
    // 0: host-to-device copies at 0.9 of the Gen5 x16 link, through nvmlDeviceGetPcieThroughput
    //    (this GPU's GPM has no PCIe metrics), SMs at 30 %.
    let rx_kbps = kbps(0.9 * link);
    let mut h2d = h100(
        0,
        &json!({
            "graphics_util": 35, "sm_util": 30, "sm_occupancy": 10, "any_tensor_util": 2,
            "dram_bw_util": 5, "fp32_util": 1, "fp16_util": 1,
            "nvlink_total_rx_per_sec": 0, "nvlink_total_tx_per_sec": 0,
        }),
    );
    h2d["pcie_rx_kbps"] = json!(rx_kbps);
    h2d["pcie_tx_kbps"] = json!(1_000_000);
    // 1: the graphics engine busy launching tiny kernels: GR 95 %, SM 10 %. NVML's own PCIe
    //    rate would say host_to_device (0.8 of the link), but GPM's (100 MiB/s) wins.
    let mut launch = h100(
        1,
        &json!({
            "graphics_util": 95, "sm_util": 10, "sm_occupancy": 5, "any_tensor_util": 1,
            "dram_bw_util": 3, "fp32_util": 1, "fp16_util": 0,
            "pcie_rx_per_sec": 100, "pcie_tx_per_sec": 100,
            "nvlink_total_rx_per_sec": 0, "nvlink_total_tx_per_sec": 0,
        }),
    );
    launch["pcie_rx_kbps"] = json!(kbps(0.8 * link));
    launch["pcie_tx_kbps"] = json!(1_000_000);
    // 2: a pure all-reduce: NVLink tx + rx at 0.7 of 900 GB/s, tensor 2 %.
    let per_direction_mib = 0.7 * nvlink_peak / 2.0 / MIB;
    let comm = h100(
        2,
        &json!({
            "graphics_util": 45, "sm_util": 40, "sm_occupancy": 20, "any_tensor_util": 2,
            "dram_bw_util": 8, "fp32_util": 2, "fp16_util": 1,
            "pcie_rx_per_sec": 50, "pcie_tx_per_sec": 50,
            "nvlink_total_rx_per_sec": per_direction_mib,
            "nvlink_total_tx_per_sec": per_direction_mib,
        }),
    );
    // 3: busy training: tensor 70 %.
    let busy = h100(
        3,
        &json!({
            "graphics_util": 100, "sm_util": 95, "sm_occupancy": 40, "any_tensor_util": 70,
            "dram_bw_util": 30, "fp32_util": 5, "fp16_util": 2,
            "pcie_rx_per_sec": 50, "pcie_tx_per_sec": 50,
            "nvlink_total_rx_per_sec": 1000, "nvlink_total_tx_per_sec": 1000,
        }),
    );
    let s = serve(
        &dir,
        "Three starved H100s, one per GPU-side cause, and a busy one.",
        vec![h2d, launch, comm, busy],
    );
    let m = s.wait_for(WAIT, "each starved GPU under its own cause", |m| {
        only_cause(m, 0, "host_to_device")
            && only_cause(m, 1, "launch_bound")
            && only_cause(m, 2, "comm_bound")
            && !starved(m, 3).is_empty()
    });
    let show = |gpu| format!("{:?}", starved(&m, gpu));
    assert_eq!(starved(&m, 0).len(), 7, "every cause of GPU 0: {}", show(0));
    // The busy GPU was judged (its counters are there) and never starved.
    assert!(
        starved(&m, 3).iter().all(|(_, v)| *v == 0.0),
        "busy GPU 3 starved: {}",
        show(3)
    );
    let get = |gpu, n: &str| of(&m, gpu, n, &[]);
    // GPU 0: the link NVML reports, and the receive rate from nvmlDeviceGetPcieThroughput.
    assert_eq!(get(0, "truthscale_gpu_pcie_link_generation"), Some(5.0));
    assert_eq!(get(0, "truthscale_gpu_pcie_link_width"), Some(16.0));
    let rx = get(0, "truthscale_gpu_pcie_receive_bytes_per_second");
    assert_eq!(rx, Some(f64::from(rx_kbps) * 1000.0));
    assert!(close(rx.map(|r| r / link), 0.9, 1e-6), "{rx:?} of {link}");
    // GPU 1: GPM's PCIe rate, not NVML's.
    assert_eq!(
        get(1, "truthscale_gpu_pcie_receive_bytes_per_second"),
        Some(100.0 * MIB)
    );
    // GPU 2: NVLink both ways, 0.7 of the peak.
    let nvlink = get(2, "truthscale_gpu_nvlink_receive_bytes_per_second")
        .zip(get(2, "truthscale_gpu_nvlink_transmit_bytes_per_second"))
        .map(|(rx, tx)| rx + tx);
    assert!(close(nvlink, 0.7 * nvlink_peak, 1e-9), "{nvlink:?}");
    // Starved and busy as the verdict says.
    for (gpu, verdict) in [(0, "starved"), (1, "starved"), (2, "starved"), (3, "busy")] {
        assert_eq!(
            of(&m, gpu, "truthscale_gpu_verdict", &[("verdict", verdict)]),
            Some(1.0),
            "GPU {gpu}"
        );
    }
}

/// An eight-GPU job on one machine (`group_by = "node"`), GPU 5's SM clock capped at
/// 1200 MHz: it computes (tensor 60 %) while the seven others wait in their collectives
/// (tensor 3 %, SMs 15 %). GPU 5 is flagged with its gap; the others are `comm_bound`, their
/// regime and their starved seconds' cause, and `explain` says so.
#[test]
fn an_eight_gpu_job_with_one_clock_capped_has_one_straggler_and_seven_waiting() {
    let dir = TempDir::new("stragglers");
    let capped = 5;
    let devices: Vec<Json> = (0..8)
        .map(|i| {
            let (tensor, sm) = if i == capped { (60, 90) } else { (3, 15) };
            let mut d = h100(
                i,
                &json!({
                    "graphics_util": 100, "sm_util": sm, "sm_occupancy": 10,
                    "any_tensor_util": tensor, "dram_bw_util": 5, "fp32_util": 1,
                    "fp16_util": 0, "pcie_rx_per_sec": 50, "pcie_tx_per_sec": 50,
                    "nvlink_total_rx_per_sec": 100, "nvlink_total_tx_per_sec": 100,
                }),
            );
            if i == capped {
                d["sm_clock_mhz"] = json!(1200);
            }
            d
        })
        .collect();
    let s = serve_with(
        &dir,
        "Eight H100s of one job, GPU 5's clock capped at 1200 MHz.",
        devices,
        &[
            ("TRUTHSCALE_VERDICT__STRAGGLERS__GROUP_BY", "node"),
            ("TRUTHSCALE_VERDICT__STRAGGLERS__SUSTAIN_SECONDS", "1"),
        ],
    );
    let waiting = |m: &[Sample], gpu| {
        of(m, gpu, "truthscale_gpu_regime", &[("regime", "comm_bound")]) == Some(1.0)
            && of(m, gpu, STARVED, &[("cause", "comm_bound")]).is_some_and(|v| v > 0.0)
    };
    let m = s.wait_for(WAIT, "one straggler and seven GPUs waiting on it", |m| {
        (0..8).filter(|g| *g != capped).all(|g| waiting(m, g))
    });
    // The gap, from the scenario's clocks: (1980 − 1200) / 1980, the median of eight
    // where seven read 1980.
    let gap = (1980.0 - 1200.0) / 1980.0;
    let flagged = series(&m, "truthscale_gpu_straggler_gap_ratio", &[]);
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0].label("uuid"), Some(uuid(capped).as_str()));
    assert_eq!(flagged[0].label("signal"), Some("sm_clock"));
    assert_eq!(flagged[0].label("job_group"), Some("node"));
    assert!(close(Some(flagged[0].value), gap, 1e-12), "{flagged:?}");
    for g in (0..8).filter(|g| *g != capped) {
        let w = of(
            &m,
            g,
            "truthscale_gpu_waiting_on_straggler_gap_ratio",
            &[("job_group", "node")],
        );
        assert!(close(w, gap, 1e-12), "GPU {g}: {w:?}");
        assert_eq!(
            of(&m, g, "truthscale_gpu_verdict", &[("verdict", "starved")]),
            Some(1.0)
        );
    }
    // The straggler itself computes: busy, never waiting, never comm-bound.
    assert_eq!(
        of(&m, capped, "truthscale_gpu_verdict", &[("verdict", "busy")]),
        Some(1.0)
    );
    assert_eq!(
        of(
            &m,
            capped,
            "truthscale_gpu_waiting_on_straggler_gap_ratio",
            &[]
        ),
        None
    );
    assert_eq!(
        of(
            &m,
            capped,
            "truthscale_gpu_regime",
            &[("regime", "comm_bound")]
        ),
        Some(0.0)
    );
    // explain, from the sidecar's /metrics.
    let out = clean_command()
        .args(["explain", "--url", &format!("http://{}", s.addr)])
        .output()
        .expect("run explain");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("  straggler:      of job node: its SM clock 39 % under the job's median; the job's other GPUs wait on it (comm_bound)"),
        "{text}"
    );
    assert_eq!(
        text.matches("  straggler:      waits on a straggler of job node (39 % behind the job's median): comm_bound, not starved on its own").count(),
        7,
        "{text}"
    );
    assert!(
        text.contains(
            "comm_bound (waiting on a straggler of its job, 39 % behind the job's median)"
        ),
        "{text}"
    );
}

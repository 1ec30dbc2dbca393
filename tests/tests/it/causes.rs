//! Why a starved GPU waits, end to end in node mode: the real binary with the fake NVML
//! library (five H100s, a scenario written here), a fake kubelet, a fake `/proc` naming each
//! process's pod, and a fake cgroup v2 tree whose counters a thread of the test advances
//! (`TRUTHSCALE_NODE__CGROUP_ROOT`): a starved GPU's seconds go to the cause its holder
//! pod's pressure names, and each holder pod's own pressure is exported under its pod.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use truthscale_e2e::kubelet::{Kubelet, State, pod};
use truthscale_e2e::{Sample, Sidecar, TempDir, series, value};
use truthscale_exporter::attribution::kubelet::proto::ListPodResourcesResponse;

const WAIT: Duration = Duration::from_secs(30);

const CAUSES: [&str; 7] = [
    "cpu_throttled",
    "cpu_contended",
    "io_stalled",
    "host_to_device",
    "launch_bound",
    "comm_bound",
    "unknown",
];

/// One fake GPU of the scenario: starved (busy flag 100 %, tensor 2 %, DRAM 10 %) or busy
/// (tensor 85 %), with its one process.
fn device(i: usize, starved: bool, pid: u32) -> serde_json::Value {
    let (tensor, dram) = if starved { (2, 10) } else { (85, 40) };
    serde_json::json!({
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": uuid(i),
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x1A + i),
        "architecture": "hopper",
        "memory_total_bytes": 85_520_809_984_u64,
        "memory_used_bytes": 40_000_000_000_u64,
        "memory_reserved_bytes": 566_231_040,
        "util_percent": 100,
        "power_watts": if starved { 250 } else { 600 },
        "power_limit_watts": 700,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "temperature_c": 45,
        "gpm": {"metrics": {
            "graphics_util": 100, "sm_util": 60, "sm_occupancy": 20,
            "any_tensor_util": tensor, "hmma_tensor_util": tensor, "imma_tensor_util": 0,
            "dram_bw_util": dram, "fp64_util": 0, "fp32_util": 3, "fp16_util": 1,
            "pcie_tx_per_sec": 12, "pcie_rx_per_sec": 30,
            "nvlink_total_rx_per_sec": 1024, "nvlink_total_tx_per_sec": 1024
        }},
        "processes": [{"pid": pid, "used_memory_bytes": 40_000_000_000_u64, "sm_util": 60}]
    })
}

fn uuid(i: usize) -> String {
    format!("GPU-5f0c6a3e-8d3b-4c1e-9a7f-00000000c0a{i}")
}

/// Write `text` to `path` whole (a reader never sees a half-written file).
fn put(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// How a pod's counters advance with the time since the start, in µs.
#[derive(Clone, Copy)]
enum Load {
    /// CFS-throttled in 70 % of its periods, under a quota of one CPU.
    Throttled,
    /// Some task waiting on I/O half of the time.
    IoWaiting,
    /// Nothing rising.
    Calm,
}

/// Write a pod's five cgroup files for `us` microseconds since the start. The throttled pod's
/// CFS period is the kernel's shortest, 1 ms (a quota of one CPU, `1000 1000`): a period a
/// millisecond, so its counts move every few milliseconds, and each throttled period held
/// back for at most its own length (half of it here).
fn write_pod(dir: &Path, load: Load, us: u64) {
    let periods = us / 1000;
    let (throttled, io_some, quota) = match load {
        Load::Throttled => (periods * 7 / 10, 0, "1000 1000"),
        Load::IoWaiting => (0, us / 2, "max 100000"),
        Load::Calm => (0, 0, "max 100000"),
    };
    let periods = match load {
        Load::Throttled => periods,
        _ => 0,
    };
    let psi = |kind: &str, total: u64| {
        format!("{kind} avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n")
    };
    put(
        &dir.join("cpu.stat"),
        &format!(
            "usage_usec {us}\nuser_usec {us}\nsystem_usec 0\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {}\nnr_bursts 0\nburst_usec 0\n",
            throttled * 500
        ),
    );
    put(&dir.join("cpu.max"), &format!("{quota}\n"));
    put(
        &dir.join("cpu.pressure"),
        &(psi("some", 0) + &psi("full", 0)),
    );
    put(
        &dir.join("io.pressure"),
        &(psi("some", io_some) + &psi("full", 0)),
    );
    put(
        &dir.join("memory.pressure"),
        &(psi("some", 0) + &psi("full", 0)),
    );
}

/// A fake process under `proc_root`: its cgroup in pod `uid`, cgroupfs layout (the pod's
/// cgroup directory under `cgroup_root` is returned), and its hostname (the pod's name).
fn cgroupfs_process(
    proc_root: &Path,
    cgroup_root: &Path,
    pid: u32,
    uid: &str,
    host: &str,
) -> PathBuf {
    let p = proc_root.join(pid.to_string());
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(
        p.join("cgroup"),
        format!("0::/kubepods/burstable/pod{uid}/{}\n", "ef".repeat(32)),
    )
    .unwrap();
    std::fs::write(
        p.join("environ"),
        format!("PATH=/bin\0HOSTNAME={host}\0HOME=/root\0"),
    )
    .unwrap();
    cgroup_root.join(format!("kubepods/burstable/pod{uid}"))
}

/// The starved seconds of GPU `gpu` by cause, `None` for a cause without a series.
fn starved(m: &[Sample], gpu: &str) -> Vec<Option<f64>> {
    CAUSES
        .iter()
        .map(|c| {
            value(
                m,
                "truthscale_gpu_starved_seconds_total",
                &[("gpu", gpu), ("cause", c)],
            )
        })
        .collect()
}

/// The starved seconds of GPU `gpu` by cause, every cause written.
fn every_cause(m: &[Sample], gpu: &str) -> Vec<f64> {
    starved(m, gpu)
        .into_iter()
        .zip(CAUSES)
        .map(|(v, c)| v.unwrap_or_else(|| panic!("GPU {gpu}: no starved seconds for {c}")))
        .collect()
}

/// A thread advancing the pods' counters every 20 ms until dropped.
struct Advancing(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Advancing {
    fn start(pods: Vec<(PathBuf, Load)>) -> Advancing {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&stop);
        let t0 = Instant::now();
        for (dir, load) in &pods {
            write_pod(dir, *load, 0);
        }
        let h = std::thread::spawn(move || {
            while !seen.load(Ordering::Relaxed) {
                let us = u64::try_from(t0.elapsed().as_micros()).unwrap();
                for (dir, load) in &pods {
                    write_pod(dir, *load, us);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Advancing(stop, Some(h))
    }
}

impl Drop for Advancing {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(h) = self.1.take() {
            let _ = h.join();
        }
    }
}

/// The two pods of the time-sliced GPU 4: E, waiting on I/O; F, without a cgroup directory.
const SHARED: [(&str, &str); 2] = [
    ("prep-e", "5f8a6cfe-6ae5-55a6-cc7a-445a0aaae86b"),
    ("nofiles-f", "6a9b7daf-7bf6-66b7-dd8b-556b1bbbf97c"),
];

/// Each holder pod's own shares, as its cgroup files say, under its pod: on a GPU it holds
/// alone, the GPU's own series' pod labels (once); on the shared GPU 4, its pod and
/// namespace (no container: the files are the pod's). Only what was measured: C's zeros,
/// no throttled share without periods, no limit where `cpu.max` is `max`, nothing for F.
fn each_pods_own_pressure(m: &[Sample]) {
    let own = |family: &str, gpu: &str, pod: &str| {
        let found = series(m, family, &[("gpu", gpu), ("pod", pod)]);
        assert!(found.len() <= 1, "{family} {pod}: {} series", found.len());
        found.first().map(|s| {
            assert_eq!(s.label("namespace"), Some("ml"), "{family} {pod}");
            s.value
        })
    };
    let near = |v: Option<f64>, want: f64, tol: f64| v.is_some_and(|v| (v - want).abs() < tol);
    let throttled = "truthscale_pod_cpu_throttled_ratio";
    let io = "truthscale_pod_io_pressure_waiting_ratio";
    for (gpu, pod) in [("0", "train-a"), ("3", "busy-d")] {
        let t = own(throttled, gpu, pod);
        assert!(near(t, 0.7, 0.05), "{pod}: {t:?}");
        assert_eq!(own("truthscale_pod_cpu_limit_cores", gpu, pod), Some(1.0));
    }
    assert!(
        near(own(io, "1", "load-b"), 0.5, 0.15),
        "{:?}",
        own(io, "1", "load-b")
    );
    assert!(
        near(own(io, "4", "prep-e"), 0.5, 0.15),
        "{:?}",
        own(io, "4", "prep-e")
    );
    for family in [
        "truthscale_pod_cpu_pressure_waiting_ratio",
        io,
        "truthscale_pod_io_pressure_stalled_ratio",
        "truthscale_pod_memory_pressure_stalled_ratio",
    ] {
        assert_eq!(own(family, "2", "calm-c"), Some(0.0), "{family}");
    }
    assert_eq!(
        own(throttled, "2", "calm-c"),
        None,
        "no periods: blank, not 0"
    );
    assert_eq!(own("truthscale_pod_cpu_limit_cores", "2", "calm-c"), None);
    let on_4 = series(m, io, &[("gpu", "4")]);
    assert!(on_4.iter().all(|s| s.label("container").is_none()));
    for family in POD_PRESSURE {
        assert_eq!(own(family, "4", "nofiles-f"), None, "{family}: made up");
        assert!(series(m, family, &[("gpu", "4")]).len() <= 1, "{family}");
    }
    // The attribution did name F (its memory is there): only its pressure is missing.
    assert!(
        value(
            m,
            "truthscale_pod_memory_used_bytes",
            &[("pod", "nofiles-f")]
        )
        .is_some()
    );
    // The GPU's worst: not written, F unmeasured (E's alone would be a lower bound of it,
    // not the worst).
    for family in [
        "truthscale_gpu_holder_io_pressure_waiting_ratio",
        "truthscale_gpu_holder_cpu_throttled_ratio",
    ] {
        assert!(series(m, family, &[("gpu", "4")]).is_empty(), "{family}");
    }
}

/// The pods of GPUs 5 and 6, calm: their GPUs are starved by their own counters (PCIe
/// receive at the link's cap; tiny kernels and syncs).
const GPU_SIDE: [(&str, &str); 2] = [
    ("copy-g", "7bacfeb0-8cf7-77c8-ee8d-667c2ccc0a8d"),
    ("tiny-h", "8cbd0fc1-9d08-88d9-ff9e-778d3ddd1b9e"),
];

/// MiB, the unit of GPM's byte rates.
const MIB: f64 = 1_048_576.0;

/// A Gen5 x16 link, bytes per second per direction: 32 GT/s × 16 lanes × 128/130 ÷ 8,
/// from the PCIe specification's figures.
const GEN5_X16: f64 = 32e9 * 16.0 * 128.0 / 130.0 / 8.0;

/// The per-pod pressure families.
const POD_PRESSURE: [&str; 6] = [
    "truthscale_pod_cpu_throttled_ratio",
    "truthscale_pod_cpu_limit_cores",
    "truthscale_pod_cpu_pressure_waiting_ratio",
    "truthscale_pod_io_pressure_waiting_ratio",
    "truthscale_pod_io_pressure_stalled_ratio",
    "truthscale_pod_memory_pressure_stalled_ratio",
];

/// Four H100s, one pod each. Pod A (GPU 0) is throttled in 70 % of its CFS periods under a
/// quota of one CPU; pod B (GPU 1) waits on I/O half of the time; pod C (GPU 2) has nothing
/// rising; pod D's GPU 3 is busy though D is throttled too. Between two scrapes once the
/// pressure is read: GPU 0's starved seconds all go to `cpu_throttled`, GPU 1's to
/// `io_stalled`, GPU 2's to `unknown`, GPU 3 has none; and A's throttled share and limit are
/// exported. GPU 4 is time-sliced between pod E, waiting on I/O half of the time, and pod
/// F, whose cgroup directory is not there: each pod's own shares are exported under its
/// pod (on GPUs 0 to 3, the GPU's own pod labels; on GPU 4, the pod and namespace), C's
/// zeros as zeros, and nothing for F, nor GPU 4's worst (F's unknown). GPUs 5 and 6 hold calm pods G and H and are starved
/// by their own counters: G's PCIe receive at 0.9 of its Gen5 x16 link (`host_to_device`),
/// H's tiny kernels, the engine busy and the SMs at 10 % (`launch_bound`).
#[test]
fn a_starved_gpus_seconds_go_to_its_holders_pressure() {
    let dir = TempDir::new("causes");
    let socket = dir.path().join("kubelet.sock");
    let pods = [
        (
            "train-a",
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            Load::Throttled,
        ),
        (
            "load-b",
            "2c5f39cb-3fb2-22e3-994f-1127e4ddb538",
            Load::IoWaiting,
        ),
        ("calm-c", "3d6f4adc-4fc3-33f4-aa5f-2238f5eec649", Load::Calm),
        (
            "busy-d",
            "4e7f5bed-5fd4-44f5-bb6f-3349f6ffd75a",
            Load::Throttled,
        ),
    ];
    let state = State::default();
    *state.answer.lock().unwrap() =
        ListPodResourcesResponse {
            pod_resources: pods
                .iter()
                .enumerate()
                .map(|(i, (name, _, _))| pod(name, "ml", "cuda", "nvidia.com/gpu", &[&uuid(i)]))
                .chain(SHARED.iter().enumerate().map(|(r, (name, _))| {
                    pod(
                        name,
                        "ml",
                        "cuda",
                        "nvidia.com/gpu",
                        &[&format!("{}::{r}", uuid(4))],
                    )
                }))
                .chain(GPU_SIDE.iter().enumerate().map(|(j, (name, _))| {
                    pod(name, "ml", "cuda", "nvidia.com/gpu", &[&uuid(5 + j)])
                }))
                .collect(),
        };
    let _kubelet = Kubelet::start(&socket, state);
    let proc_root = dir.path().join("proc");
    let cgroup_root = dir.path().join("cgroup");
    let mut advancing = Vec::new();
    let mut devices = Vec::new();
    for (i, (_, uid, load)) in pods.iter().enumerate() {
        let pid = 6001 + u32::try_from(i).unwrap();
        let p = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&p).unwrap();
        // Two drivers' layouts: systemd for A and C, cgroupfs for B and D.
        let (line, cg) = if i % 2 == 0 {
            let slice = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
            (
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/{slice}/cri-containerd-{}.scope\n",
                    "ab".repeat(32)
                ),
                cgroup_root
                    .join("kubepods.slice/kubepods-burstable.slice")
                    .join(slice),
            )
        } else {
            (
                format!("0::/kubepods/burstable/pod{uid}/{}\n", "cd".repeat(32)),
                cgroup_root.join(format!("kubepods/burstable/pod{uid}")),
            )
        };
        std::fs::write(p.join("cgroup"), line).unwrap();
        std::fs::create_dir_all(&cg).unwrap();
        advancing.push((cg, *load));
        devices.push(device(i, i < 3, pid));
    }
    // GPU 4, time-sliced: E's cgroup directory is advanced, F's never made.
    let mut shared = device(4, false, 6005);
    for (i, (name, uid)) in SHARED.iter().enumerate() {
        let pid = 6005 + u32::try_from(i).unwrap();
        let cg = cgroupfs_process(&proc_root, &cgroup_root, pid, uid, name);
        if i == 0 {
            std::fs::create_dir_all(&cg).unwrap();
            advancing.push((cg, Load::IoWaiting));
        } else {
            shared["processes"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!(
                    {"pid": pid, "used_memory_bytes": 1_000_000_000_u64, "sm_util": 10}
                ));
        }
    }
    devices.push(shared);
    // GPUs 5 and 6: calm pods, each GPU starved by its own counters.
    for (j, (name, uid)) in GPU_SIDE.iter().enumerate() {
        let pid = 6007 + u32::try_from(j).unwrap();
        let cg = cgroupfs_process(&proc_root, &cgroup_root, pid, uid, name);
        std::fs::create_dir_all(&cg).unwrap();
        advancing.push((cg, Load::Calm));
        let mut d = device(5 + j, true, pid);
        let gpm = d["gpm"]["metrics"].as_object_mut().unwrap();
        if j == 0 {
            // Host-to-device copies at 0.9 of the Gen5 x16 link, SMs at 30 %.
            d["pcie_link_gen"] = serde_json::json!(5);
            d["pcie_link_width"] = serde_json::json!(16);
            let gpm = d["gpm"]["metrics"].as_object_mut().unwrap();
            gpm.insert(
                "pcie_rx_per_sec".into(),
                serde_json::json!(0.9 * GEN5_X16 / MIB),
            );
            gpm.insert("sm_util".into(), serde_json::json!(30));
            gpm.insert("graphics_util".into(), serde_json::json!(35));
        } else {
            // Tiny kernels and syncs: the engine busy, SMs at 10 %.
            gpm.insert("sm_util".into(), serde_json::json!(10));
            gpm.insert("graphics_util".into(), serde_json::json!(95));
        }
        devices.push(d);
    }
    let _advancing = Advancing::start(advancing);
    let scenario = dir.path().join("scenario.json");
    std::fs::write(
        &scenario,
        serde_json::to_string_pretty(&serde_json::json!({ "devices": devices })).unwrap(),
    )
    .unwrap();
    let lib = truthscale_e2e::fake_nvml();
    let sidecar = Sidecar::start(
        &[
            &["--mode", "node"][..],
            // 1 s windows: the cgroup files' writer (every 20 ms) may stall for a few
            // hundred ms on a loaded machine, and in a 500 ms window that moved a ratio
            // past its threshold.
            &truthscale_e2e::nvml_args(lib, "1s"),
        ]
        .concat(),
        &[
            ("FAKE_NVML_SCENARIO", scenario.to_str().unwrap()),
            ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES", "true"),
            ("TRUTHSCALE_NODE__SOCKET", socket.to_str().unwrap()),
            ("TRUTHSCALE_NODE__PROC_ROOT", proc_root.to_str().unwrap()),
            (
                "TRUTHSCALE_NODE__CGROUP_ROOT",
                cgroup_root.to_str().unwrap(),
            ),
        ],
        dir.path(),
    );
    let read = |m: &[Sample]| {
        value(
            m,
            "truthscale_gpu_holder_cpu_throttled_ratio",
            &[("gpu", "0")],
        )
        .is_some()
            && value(
                m,
                "truthscale_gpu_holder_io_pressure_waiting_ratio",
                &[("gpu", "1")],
            )
            .is_some()
            && starved(m, "0").iter().flatten().sum::<f64>() > 0.0
            && value(
                m,
                "truthscale_pod_io_pressure_waiting_ratio",
                &[("gpu", "4"), ("pod", "prep-e")],
            )
            .is_some()
    };
    let before = sidecar.wait_for(WAIT, "the holders' pressure", read);
    // Three or more 1 s windows, all with the pressure read.
    std::thread::sleep(Duration::from_secs(4));
    let after = sidecar.metrics();
    let delta = |gpu: &str| -> Vec<f64> {
        every_cause(&after, gpu)
            .iter()
            .zip(every_cause(&before, gpu))
            .map(|(a, b)| a - b)
            .collect()
    };
    for (gpu, cause) in [
        ("0", "cpu_throttled"),
        ("1", "io_stalled"),
        ("2", "unknown"),
        ("5", "host_to_device"),
        ("6", "launch_bound"),
    ] {
        let d = delta(gpu);
        let at = CAUSES.iter().position(|c| *c == cause).unwrap();
        assert!(d[at] >= 1.0, "GPU {gpu}: {cause} rose by {}: {d:?}", d[at]);
        for (i, v) in d.iter().enumerate() {
            if i != at {
                assert!(*v == 0.0, "GPU {gpu}: {} rose by {v}: {d:?}", CAUSES[i]);
            }
        }
    }
    assert_eq!(
        starved(&after, "3").iter().flatten().sum::<f64>(),
        0.0,
        "the busy GPU is never starved"
    );
    let ratio = value(
        &after,
        "truthscale_gpu_holder_cpu_throttled_ratio",
        &[("gpu", "0")],
    )
    .unwrap();
    assert!((ratio - 0.7).abs() < 0.05, "{ratio}");
    assert_eq!(
        value(
            &after,
            "truthscale_gpu_holder_cpu_limit_cores",
            &[("gpu", "0")]
        ),
        Some(1.0)
    );
    let io = value(
        &after,
        "truthscale_gpu_holder_io_pressure_waiting_ratio",
        &[("gpu", "1")],
    )
    .unwrap();
    assert!((io - 0.5).abs() < 0.15, "{io}");
    assert_eq!(
        value(
            &after,
            "truthscale_gpu_holder_cpu_throttled_ratio",
            &[("gpu", "2")]
        ),
        None,
        "no periods: blank, not 0"
    );
    assert_eq!(
        value(
            &after,
            "truthscale_gpu_holder_io_pressure_waiting_ratio",
            &[("gpu", "2")]
        ),
        Some(0.0)
    );
    assert!(
        value(
            &after,
            "truthscale_gpu_holder_cpu_throttled_ratio",
            &[("gpu", "3")]
        )
        .is_some()
    );
    each_pods_own_pressure(&after);
    // The stage counted no failure but F's missing directory.
    let errors = series(
        &after,
        "truthscale_source_errors_total",
        &[("source", "pressure")],
    );
    assert!(
        errors
            .iter()
            .all(|s| (s.label("kind") == Some("not_found")) == (s.value > 0.0)),
        "{:?}",
        errors
            .iter()
            .map(|s| (s.label("kind"), s.value))
            .collect::<Vec<_>>()
    );
    eprintln!(
        "GPU 0 throttled ratio {ratio}, GPU 1 io waiting {io}; starved seconds over 3 s: {:?} {:?} {:?}",
        delta("0"),
        delta("1"),
        delta("2")
    );
}

//! Which Kubernetes pod and container a process belongs to, from `/proc/<pid>/cgroup`.
//!
//! The kubelet puts each pod in a cgroup named after its UID and each container in a child
//! named after its container id:
//!
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID
//!   with _ for ->.slice/cri-containerd-<id>.scope` (also `docker-`, `crio-`);
//! - cgroupfs driver: `/kubepods/burstable/pod<UID>/<id>` (`/kubepods/pod<UID>/<id>` for
//!   Guaranteed pods).
//!
//! Read from a container with a cgroup namespace of its own, another pod's path is relative
//! to the reader's own cgroup and may hold no `kubepods` segment (cgroupfs driver:
//! `/../../../besteffort/pod<UID>/<id>`): a path that climbs above the namespace's root is
//! read from its first segment.
//!
//! NVML reports host PIDs; inside a container with its own PID namespace they are not
//! visible in `/proc`, and nothing is attributed.

/// A process's pod UID and container id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attribution {
    /// Pod UID (`1b4e28ba-2fa1-11d2-883f-0016d3cca427`).
    pub pod_uid: String,
    /// Container id (64 hex digits), when the path names one.
    pub container_id: Option<String>,
}

/// The largest `/proc/<pid>/cgroup` read (a few hundred bytes in practice).
pub(crate) const MAX_CGROUP_BYTES: u64 = 64 << 10;

/// The largest `/proc/<pid>/environ` read (the kernel's default limit on the arguments and
/// environment together is 2 MiB; a container's environment is a few KiB).
pub(crate) const MAX_ENVIRON_BYTES: u64 = 1 << 20;

/// Why a `/proc` file was not read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ProcRead {
    /// Missing, unreadable, or not a regular file (a FIFO, a device: a fake `/proc` can
    /// hold anything).
    Unusable,
    /// Larger than the limit.
    TooLarge,
}

/// Read the `/proc` file `path` through [`crate::bounds::read_file`]: opened without
/// blocking (a FIFO does not hang the caller), only when it is a regular file, and at most
/// `limit` bytes (`/dev/zero` behind a symlink does not grow memory).
///
/// # Errors
/// [`ProcRead`]: what made it unusable.
pub(crate) fn read_proc_file(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, ProcRead> {
    crate::bounds::read_file(path, limit).map_err(|e| match e.kind() {
        std::io::ErrorKind::FileTooLarge => ProcRead::TooLarge,
        _ => ProcRead::Unusable,
    })
}

/// Read and parse `/proc/<pid>/cgroup`; `None` when the process is not visible or not in a
/// Kubernetes pod.
#[must_use]
pub(crate) fn of_pid(pid: u32) -> Option<Attribution> {
    let path = std::path::PathBuf::from(format!("/proc/{pid}/cgroup"));
    let bytes = read_proc_file(&path, MAX_CGROUP_BYTES).ok()?;
    parse(std::str::from_utf8(&bytes).ok()?)
}

/// Parse the text of a `/proc/<pid>/cgroup` file (`ID:CONTROLLERS:PATH` lines, v1 or v2).
#[must_use]
pub(crate) fn parse(text: &str) -> Option<Attribution> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find_map(parse_path)
}

fn is_uid(s: &str) -> bool {
    s.len() == 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn parse_path(path: &str) -> Option<Attribution> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let kube = segs
        .iter()
        .position(|s| s.starts_with("kubepods"))
        .or_else(|| (segs.first() == Some(&"..")).then_some(0))?;
    for (i, seg) in segs.iter().enumerate().skip(kube) {
        let raw = if let Some(rest) = seg.strip_prefix("pod") {
            rest
        } else if let Some(stem) = seg.strip_suffix(".slice")
            && let Some(pos) = stem.rfind("-pod")
        {
            &stem[pos + 4..]
        } else {
            continue;
        };
        let uid = raw.replace('_', "-");
        if !is_uid(&uid) {
            continue;
        }
        let container_id = segs.get(i + 1).and_then(|c| container_id(c));
        return Some(Attribution {
            pod_uid: uid,
            container_id,
        });
    }
    None
}

fn container_id(seg: &str) -> Option<String> {
    let s = seg.strip_suffix(".scope").unwrap_or(seg);
    let s = ["cri-containerd-", "docker-", "crio-", "containerd-"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
        .unwrap_or(s);
    (s.len() >= 12 && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_string())
}

/// The largest cgroup v2 interface file read (`cpu.stat`, `cpu.max`, a PSI file): a few
/// hundred bytes in practice.
pub(crate) const MAX_CGROUP_FILE_BYTES: u64 = 64 << 10;

/// What a cgroup v2 `cpu.stat` counts of CFS bandwidth control (cumulative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuStat {
    /// Enforcement periods that have elapsed (`nr_periods`).
    pub nr_periods: u64,
    /// Periods in which the group was throttled (`nr_throttled`).
    pub nr_throttled: u64,
    /// Time the group was throttled, in microseconds (`throttled_usec`), where written.
    pub throttled_usec: Option<u64>,
}

/// Parse a cgroup v2 `cpu.stat` (`key value` lines). Refused, saying which line or key,
/// without `nr_periods` and `nr_throttled` (no CPU controller, or not a `cpu.stat`), or
/// when a line is not a key and one unsigned integer. Other keys (`usage_usec`,
/// `nr_bursts`, …) are ignored.
///
/// # Errors
/// What is wrong, naming the line (from 1) or the key.
pub(crate) fn parse_cpu_stat(text: &str) -> Result<CpuStat, String> {
    let (mut periods, mut throttled, mut usec) = (None, None, None);
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_ascii_whitespace();
        let (Some(key), Some(value), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!(
                "line {}: {line:?} is not a key and one value",
                n + 1
            ));
        };
        let v: u64 = value
            .parse()
            .map_err(|_| format!("line {}: {key} {value:?} is not an unsigned integer", n + 1))?;
        match key {
            "nr_periods" => periods = Some(v),
            "nr_throttled" => throttled = Some(v),
            "throttled_usec" => usec = Some(v),
            _ => {}
        }
    }
    Ok(CpuStat {
        nr_periods: periods.ok_or("no nr_periods (no CPU controller?)")?,
        nr_throttled: throttled.ok_or("no nr_throttled")?,
        throttled_usec: usec,
    })
}

/// A cgroup v2 `cpu.max`: the CPU limit it sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CpuMax {
    /// `max <period>`: no limit.
    Unlimited,
    /// `<quota> <period>`: this many CPUs (quota over period).
    Cores(f64),
}

/// Parse a cgroup v2 `cpu.max` (`$MAX $PERIOD`, the period optional): `max 100000` is no
/// limit, `200000 100000` two CPUs. Refused for anything else (a zero period or quota, more
/// than two words, a number that is not one).
///
/// # Errors
/// What is wrong, quoting the text.
pub(crate) fn parse_cpu_max(text: &str) -> Result<CpuMax, String> {
    let bad = |why: &str| format!("{:?}: {why}", text.trim_end());
    let mut it = text.split_ascii_whitespace();
    let quota = it.next().ok_or_else(|| bad("empty"))?;
    let period: u64 = match it.next() {
        Some(p) => p
            .parse()
            .map_err(|_| bad("the period is not an unsigned integer"))?,
        // The kernel's default period when only the quota is written.
        None => 100_000,
    };
    if it.next().is_some() {
        return Err(bad("more than a quota and a period"));
    }
    if period == 0 {
        return Err(bad("a zero period"));
    }
    // The kernel refuses a period outside 1 ms to 1 s, a quota under 1 ms, and a quota over
    // 2^44 − 1 µs (`tg_set_cfs_bandwidth`): such a file is no reading of a limit.
    if !(1_000..=1_000_000).contains(&period) {
        return Err(bad("a period outside the kernel's 1 ms to 1 s"));
    }
    if quota == "max" {
        return Ok(CpuMax::Unlimited);
    }
    let quota: u64 = quota
        .parse()
        .map_err(|_| bad("the quota is neither `max` nor an unsigned integer"))?;
    if quota == 0 {
        return Err(bad("a zero quota"));
    }
    if !(1_000..(1 << 44)).contains(&quota) {
        return Err(bad("a quota outside the kernel's 1 ms to 2^44 µs"));
    }
    #[expect(clippy::cast_precision_loss, reason = "microseconds, far below 2^53")]
    Ok(CpuMax::Cores(quota as f64 / period as f64))
}

/// A PSI file (`cpu.pressure`, `io.pressure`, `memory.pressure`): the cumulative stall
/// times, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pressure {
    /// Time some task of the group was stalled (`some … total=`).
    pub some_usec: Option<u64>,
    /// Time every non-idle task was stalled at once (`full … total=`); absent in older
    /// kernels' `cpu.pressure`.
    pub full_usec: Option<u64>,
}

/// Parse a PSI file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=123456` and `full …`
/// lines. Refused when no line is a `some` or `full` line with a `total`, or when a line of
/// either kind is malformed (its `total` not an unsigned integer, written twice, or
/// missing); the averages are not read.
///
/// # Errors
/// What is wrong, naming the line (from 1).
pub(crate) fn parse_pressure(text: &str) -> Result<Pressure, String> {
    let mut p = Pressure {
        some_usec: None,
        full_usec: None,
    };
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}", n + 1);
        let mut words = line.split_ascii_whitespace();
        let slot = match words.next() {
            Some("some") => &mut p.some_usec,
            Some("full") => &mut p.full_usec,
            other => return Err(bad(&format!("{other:?} is neither `some` nor `full`"))),
        };
        if slot.is_some() {
            return Err(bad("a second line of its kind"));
        }
        let mut total = None;
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| bad(&format!("{w:?} is not key=value")))?;
            if k == "total" {
                total = Some(
                    v.parse::<u64>()
                        .map_err(|_| bad(&format!("total {v:?} is not an unsigned integer")))?,
                );
            }
        }
        *slot = Some(total.ok_or_else(|| bad("no total"))?);
    }
    if p.some_usec.is_none() && p.full_usec.is_none() {
        return Err("no `some` or `full` line".into());
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    /// A fake `/proc` can hold anything: `/dev/zero` behind a symlink is refused without
    /// reading it (it grew RSS to 22.8 GB), a FIFO without blocking (it hung the sampler),
    /// a file over the limit as too large; a regular file under it is read.
    #[test]
    fn proc_files_are_read_bounded_and_never_block() {
        let dir = std::env::temp_dir().join(format!("truthscale-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let zero = dir.join("environ-zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let fifo = dir.join("environ-fifo");
        assert_eq!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .map(|s| s.success())
                .ok(),
            Some(true),
            "mkfifo {}",
            fifo.display()
        );
        let big = dir.join("environ-big");
        std::fs::write(&big, vec![b'x'; 2 << 20]).unwrap();
        let ok = dir.join("environ-ok");
        std::fs::write(&ok, b"HOSTNAME=chat-a\0PATH=/bin\0").unwrap();
        let t = Instant::now();
        assert_eq!(
            read_proc_file(&zero, MAX_ENVIRON_BYTES),
            Err(ProcRead::Unusable)
        );
        assert_eq!(
            read_proc_file(&fifo, MAX_ENVIRON_BYTES),
            Err(ProcRead::Unusable)
        );
        assert_eq!(
            read_proc_file(&big, MAX_ENVIRON_BYTES),
            Err(ProcRead::TooLarge)
        );
        assert_eq!(
            read_proc_file(&ok, MAX_ENVIRON_BYTES).as_deref(),
            Ok(&b"HOSTNAME=chat-a\0PATH=/bin\0"[..])
        );
        assert_eq!(
            read_proc_file(&dir.join("missing"), 10),
            Err(ProcRead::Unusable)
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
    }

    use super::*;

    const UID: &str = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn systemd_driver_cgroup_v2() {
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        assert_eq!(
            parse(&text),
            Some(Attribution {
                pod_uid: UID.into(),
                container_id: Some(CID.into())
            })
        );
    }

    #[test]
    fn cgroupfs_driver_v1_and_guaranteed_pods() {
        let text = format!(
            "12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        );
        let a = parse(&text).unwrap();
        assert_eq!(a.pod_uid, UID);
        assert_eq!(a.container_id.as_deref(), Some(CID));
        let a = parse(&format!("0::/kubepods/pod{UID}/docker-{CID}.scope")).unwrap();
        assert_eq!(a.container_id.as_deref(), Some(CID));
        let a = parse(&format!(
            "0::/kubepods.slice/kubepods-pod{}.slice",
            UID.replace('-', "_")
        ))
        .unwrap();
        assert_eq!((a.pod_uid.as_str(), a.container_id), (UID, None));
    }

    #[test]
    fn cri_o_and_cgroupfs_v2() {
        // cri-o under the systemd driver (v2 unified hierarchy).
        let a = parse(&format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/crio-{CID}.scope\n",
            UID.replace('-', "_")
        ))
        .unwrap();
        assert_eq!(a.pod_uid, UID);
        assert_eq!(a.container_id.as_deref(), Some(CID));
        // containerd under the cgroupfs driver, v2.
        let a = parse(&format!("0::/kubepods/besteffort/pod{UID}/{CID}\n")).unwrap();
        assert_eq!(
            (a.pod_uid.as_str(), a.container_id.as_deref()),
            (UID, Some(CID))
        );
    }

    /// Read from a container with a cgroup namespace of its own, another pod's path is
    /// relative to the reader's cgroup: up to the common parent, then down.
    #[test]
    fn a_path_relative_to_a_private_cgroup_namespace() {
        for path in [
            format!("0::/../../pod{UID}/{CID}\n"),
            format!("0::/../../../besteffort/pod{UID}/{CID}\n"),
        ] {
            let a = parse(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(
                (a.pod_uid.as_str(), a.container_id.as_deref()),
                (UID, Some(CID)),
                "{path}"
            );
        }
        // The systemd driver's names still say kubepods.
        let a = parse(&format!(
            "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        ))
        .unwrap();
        assert_eq!(a.pod_uid, UID);
        // A path that does not climb, without kubepods, is no pod's.
        assert_eq!(parse(&format!("0::/pod{UID}/{CID}\n")), None);
    }

    #[test]
    fn not_a_pod() {
        assert_eq!(
            parse("0::/user.slice/user-1000.slice/session-2.scope\n"),
            None
        );
        assert_eq!(parse("0::/system.slice/podman.service\n"), None);
        assert_eq!(parse("0::/kubepods/burstable/podnot-a-uid/abc\n"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("garbage"), None);
    }
    #[test]
    fn cpu_stat_of_a_throttled_pod() {
        let text = "usage_usec 8712345678\nuser_usec 7000000000\nsystem_usec 1712345678\ncore_sched.force_idle_usec 0\nnr_periods 123456\nnr_throttled 86419\nthrottled_usec 4321098765\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse_cpu_stat(text),
            Ok(CpuStat {
                nr_periods: 123_456,
                nr_throttled: 86_419,
                throttled_usec: Some(4_321_098_765),
            })
        );
        // Each refusal names its line or key.
        for (bad, why) in [
            // No CPU controller enabled: only the usage keys.
            (
                "usage_usec 1\nuser_usec 1\nsystem_usec 0\n",
                "no nr_periods (no CPU controller?)",
            ),
            (
                "nr_periods 1\nnr_throttled -1\n",
                "line 2: nr_throttled \"-1\" is not an unsigned integer",
            ),
            (
                "nr_periods 1 2\nnr_throttled 1\n",
                "line 1: \"nr_periods 1 2\" is not a key and one value",
            ),
            (
                "nr_periods\nnr_throttled 1\n",
                "line 1: \"nr_periods\" is not a key and one value",
            ),
            ("nr_periods 5\n", "no nr_throttled"),
            ("", "no nr_periods (no CPU controller?)"),
            (
                "nr_periods 99999999999999999999999\nnr_throttled 1\n",
                "line 1: nr_periods \"99999999999999999999999\" is not an unsigned integer",
            ),
        ] {
            assert_eq!(parse_cpu_stat(bad), Err(why.to_string()), "{bad:?}");
        }
    }

    #[test]
    fn cpu_max_limits() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(CpuMax::Unlimited));
        assert_eq!(parse_cpu_max("200000 100000\n"), Ok(CpuMax::Cores(2.0)));
        assert_eq!(parse_cpu_max("50000 100000"), Ok(CpuMax::Cores(0.5)));
        assert_eq!(parse_cpu_max("100000"), Ok(CpuMax::Cores(1.0)));
        assert_eq!(parse_cpu_max("max"), Ok(CpuMax::Unlimited));
        for bad in [
            "",
            "\n",
            "0 100000",
            "100 0",
            "max 0",
            "1 2 3",
            "x 100000",
            "-1 100000",
            "1.5 100000",
        ] {
            assert!(parse_cpu_max(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_cpu_max("x 100000\n"),
            Err("\"x 100000\": the quota is neither `max` nor an unsigned integer".into())
        );
        assert_eq!(
            parse_cpu_max("100 0"),
            Err("\"100 0\": a zero period".into())
        );
        // Limits the kernel refuses to set are no reading: the shortest and longest period
        // and the smallest quota pass, the rest not (a quota of 2^64 − 1 µs over 1 µs had
        // read as 1.8e19 cores).
        assert_eq!(parse_cpu_max("1000 1000"), Ok(CpuMax::Cores(1.0)));
        assert_eq!(parse_cpu_max("2000000 1000000"), Ok(CpuMax::Cores(2.0)));
        for impossible in [
            "18446744073709551615 1",
            "100000 999",
            "100000 1000001",
            "999 100000",
            "17592186044416 100000",
        ] {
            assert!(parse_cpu_max(impossible).is_err(), "{impossible:?}");
        }
    }

    #[test]
    fn pressure_files() {
        let io = "some avg10=1.23 avg60=0.87 avg300=0.20 total=987654321\nfull avg10=0.50 avg60=0.30 avg300=0.10 total=123456789\n";
        assert_eq!(
            parse_pressure(io),
            Ok(Pressure {
                some_usec: Some(987_654_321),
                full_usec: Some(123_456_789),
            })
        );
        // Kernels before 5.13 write no `full` line in cpu.pressure.
        assert_eq!(
            parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"),
            Ok(Pressure {
                some_usec: Some(42),
                full_usec: None,
            })
        );
        for (bad, why) in [
            ("", "no `some` or `full` line"),
            (
                "garbage",
                "line 1: Some(\"garbage\") is neither `some` nor `full`",
            ),
            (
                "some avg10=0.00 avg60=0.00 avg300=0.00\n",
                "line 1: no total",
            ),
            (
                "some total=-1\n",
                "line 1: total \"-1\" is not an unsigned integer",
            ),
            (
                "some total=1\nsome total=2\n",
                "line 2: a second line of its kind",
            ),
            (
                "some total=1\nhalf total=2\n",
                "line 2: Some(\"half\") is neither `some` nor `full`",
            ),
            ("some avg10 total=1\n", "line 1: \"avg10\" is not key=value"),
        ] {
            assert_eq!(parse_pressure(bad), Err(why.to_string()), "{bad:?}");
        }
    }
}

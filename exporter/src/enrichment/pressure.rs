//! Node mode: the CPU and I/O pressure of the pods that hold each GPU, from their cgroup v2
//! files, so that a starved GPU's cause can be told (`truthscale_core::causes`).
//!
//! The pods are those of the GPU's processes that hold it: where the kubelet said who holds
//! the GPU, a process of another pod (a node daemon that sees every GPU), or of no named pod,
//! counts for nothing, and a GPU nobody holds has no holder pressure.
//!
//! After node attribution, each GPU entity's processes carry their pod's UID (from
//! `/proc/<pid>/cgroup`; a process without one is looked up here, under `node.proc_root`).
//! Each pod's cgroup directory is found under `node.cgroup_root` (a directory at most
//! [`MAX_DEPTH`] levels down whose name holds `pod<UID>`, cgroupfs driver, or `pod<UID with _
//! for ->`, systemd driver), cached, and its `cpu.stat`, `cpu.max`, `cpu.pressure`,
//! `io.pressure` and `memory.pressure` read once a tick, bounded and without blocking. From
//! the counters' deltas since the previous tick over the wall time between the reads:
//!
//! - `HolderCpuThrottledRatio`: `Δnr_throttled / Δnr_periods` of the pod's `cpu.stat`, or
//!   of its most throttled container's where more (a container's own limit throttles it in
//!   its own periods, which the pod's do not count; a pod has a quota only where every
//!   container has a limit); blank without periods; more throttled periods than periods is
//!   blank and counted `impossible`;
//! - `HolderCpuLimitCores`: the `cpu.max` of that most throttled cgroup (blank when `max`);
//! - the waiting and stalled shares: `Δtotal / Δwall`, clamped to 1 up to 1.5 (the read's
//!   time is taken a little apart from the files'), blank and counted `impossible` beyond;
//!
//! each the worst of the GPU's pods, only where every one of them was measured this tick
//! (the largest of some is a lower bound, not the worst). Each pod's own shares are kept on the entity too
//! (`EntitySample::holder_pressure`, exported as `truthscale_pod_cpu_throttled_ratio` and
//! the like), named by the pod and namespace its processes were attributed to: a pod whose
//! processes name none still counts in the GPU's worst, without series of its own. A pod's
//! first read, a counter that went backwards (the pod restarted, counted `reset`) and a file
//! that could not be read give no value: the field stays blank, never a zero nobody
//! measured.

use crate::bounds::MAX_GPU_PODS;
use crate::cgroup::{
    CpuMax, CpuStat, MAX_CGROUP_BYTES, MAX_CGROUP_FILE_BYTES, Pressure as Psi, ProcRead,
    parse_cpu_max, parse_cpu_stat, parse_pressure, read_proc_file,
};
use crate::pipeline::{Health, Stage, Tick};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Instant;
use truthscale_core::derive::RATIO_CLAMP_LIMIT;
use truthscale_core::exposition::SourceHealth;
use truthscale_core::model::{EntitySample, Field, PodPressure, PodRef};

/// The `source` label of the stage's health.
pub(crate) const PRESSURE: &str = "pressure";

/// How deep below the cgroup root a pod's directory is looked for.
pub(crate) const MAX_DEPTH: usize = 4;

/// Directory entries read per tick while looking for pods' cgroup directories: the search's
/// cost per tick is bounded by this, whatever the size of the hierarchy (a pod not found
/// within it is looked for again next tick).
pub(crate) const WALK_ENTRIES_PER_TICK: usize = 20_000;

/// Processes without a pod UID whose `/proc/<pid>/cgroup` is read per tick.
const PID_READS_PER_TICK: usize = 256;

/// What one read of a pod's cgroup files gave, at the instant it was read.
#[derive(Debug, Clone)]
struct Counters {
    at: Instant,
    cpu: Option<CpuStat>,
    limit: Option<CpuMax>,
    cpu_psi: Option<Psi>,
    io_psi: Option<Psi>,
    memory_psi: Option<Psi>,
    /// Each container's own `cpu.stat` and `cpu.max`, by its directory's name: a container
    /// throttled by its own limit counts in its own `nr_throttled`, not the pod's (and the
    /// pod has no quota of its own unless every container has a limit).
    containers: Vec<(String, Option<CpuStat>, Option<CpuMax>)>,
}

/// Containers of one pod whose CPU counters are read.
const MAX_CONTAINERS: usize = 16;

/// A pod's shares over the last tick: each `None` where it was not measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Shares {
    /// Whether the throttled share is known: the pod's own `cpu.stat` read at both ends and
    /// none of its cgroups' shares refused, so a `throttled` of `None` is a pod no CFS
    /// period ran for (no limit), not one unread.
    throttled_known: bool,
    throttled: Option<f64>,
    limit_cores: Option<f64>,
    cpu_waiting: Option<f64>,
    io_waiting: Option<f64>,
    io_stalled: Option<f64>,
    memory_stalled: Option<f64>,
}

impl Shares {
    /// Whether any share was measured.
    fn any(&self) -> bool {
        [
            self.throttled,
            self.limit_cores,
            self.cpu_waiting,
            self.io_waiting,
            self.io_stalled,
            self.memory_stalled,
        ]
        .iter()
        .any(Option::is_some)
    }
}

/// An entity's pods by UID, each with the names (pod and namespace) its processes carry.
type Pods = BTreeMap<String, BTreeSet<PodRef>>;

/// Node mode's holder-pressure stage (see the module documentation).
#[derive(Debug)]
pub(crate) struct HolderPressure {
    cgroup_root: PathBuf,
    proc_root: PathBuf,
    /// Pod UID → its cgroup directory, while it exists.
    dirs: HashMap<String, PathBuf>,
    /// Pod UID → the last read of its counters (pods seen this tick only).
    last: HashMap<String, Counters>,
    /// PID → the pod UID its cgroup names (`None`: none), with the tick it was last seen.
    pids: HashMap<String, (Option<String>, u64)>,
    tick: u64,
    /// Directory entries read by the searches so far (for tests).
    pub(crate) walked: u64,
    health: Health,
    /// Each failure kind's last log.
    log: crate::logging::LogLimiter,
}

impl HolderPressure {
    /// Read the holder pods' cgroups under `cgroup_root`, their processes under
    /// `proc_root`.
    #[must_use]
    pub(crate) fn new(cgroup_root: PathBuf, proc_root: PathBuf) -> HolderPressure {
        HolderPressure {
            cgroup_root,
            proc_root,
            dirs: HashMap::new(),
            last: HashMap::new(),
            pids: HashMap::new(),
            tick: 0,
            walked: 0,
            health: Health::default(),
            log: crate::logging::LogLimiter::default(),
        }
    }

    /// The pod UIDs of an entity's processes, looking up (within this tick's budget) the
    /// cgroup of a process that has none; each with the names (pod and namespace) its
    /// processes were attributed to, if any.
    fn pods_of(&mut self, e: &EntitySample, reads_left: &mut usize) -> Pods {
        let tick = self.tick;
        let mut pods = Pods::new();
        for p in &e.processes {
            // A GPU one pod holds: a process the pod list showed to be another pod's (its
            // name taken off by attribution) is not the holder's, nor is its pressure.
            if e.id.pod.is_some() && p.pod.is_none() {
                continue;
            }
            // Where the kubelet said who holds the GPU, only its holders' processes count: a
            // process of another pod (a node daemon that sees every GPU), or of none named,
            // is no holder, nor is its pressure; a GPU nobody holds has no holder pressure.
            if let Some(holders) = e.allocation.as_deref()
                && !p
                    .pod
                    .as_ref()
                    .is_some_and(|r| holders.iter().any(|h| h.pod.same_pod(r)))
            {
                continue;
            }
            let uid = match (&p.pod_uid, self.pids.get_mut(&p.pid)) {
                (Some(uid), _) => Some(uid.clone()),
                (None, Some((uid, at))) => {
                    *at = tick;
                    uid.clone()
                }
                (None, None) if *reads_left == 0 => continue,
                (None, None) => {
                    *reads_left -= 1;
                    let uid = self.pid_uid(&p.pid);
                    self.pids.insert(p.pid.clone(), (uid.clone(), tick));
                    uid
                }
            };
            let Some(uid) = uid else { continue };
            let names = pods.entry(uid).or_default();
            names.extend(p.pod.as_ref().map(|r| PodRef {
                pod: r.pod.clone(),
                namespace: r.namespace.clone(),
                container: None,
            }));
        }
        pods
    }

    /// The pod UID `<proc_root>/<pid>/cgroup` names (bounded, non-blocking read).
    fn pid_uid(&self, pid: &str) -> Option<String> {
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let bytes = read_proc_file(&self.proc_root.join(pid).join("cgroup"), MAX_CGROUP_BYTES);
        let text = String::from_utf8(bytes.ok()?).ok()?;
        crate::cgroup::parse(&text).map(|a| a.pod_uid)
    }

    /// Find the cgroup directories of the `wanted` pods not cached (or whose cached
    /// directory is gone): one breadth-first walk below the root, `kubepods` first, within
    /// [`WALK_ENTRIES_PER_TICK`] entries; a pod's own directory is not descended into.
    fn find_dirs(&mut self, wanted: &BTreeSet<String>) {
        self.dirs
            .retain(|uid, dir| wanted.contains(uid) && dir.is_dir());
        let mut missing: HashMap<String, String> = wanted
            .iter()
            .filter(|u| !self.dirs.contains_key(*u))
            .flat_map(|u| {
                [
                    (format!("pod{u}"), u.clone()),
                    (format!("pod{}", u.replace('-', "_")), u.clone()),
                ]
            })
            .collect();
        let mut queue = VecDeque::from([(self.cgroup_root.clone(), 0usize)]);
        let mut budget = WALK_ENTRIES_PER_TICK;
        while !missing.is_empty()
            && budget > 0
            && let Some((dir, depth)) = queue.pop_front()
        {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                self.walked += 1;
                let Ok(entry) = entry else { continue };
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if let Some(uid) = pod_in(name, &missing) {
                    missing.retain(|_, u| *u != uid);
                    self.dirs.insert(uid, entry.path());
                } else if name.contains("pod") && looks_like_a_pod(name) {
                    // Another pod: only its containers are below.
                } else if depth + 1 < MAX_DEPTH {
                    if name.contains("kubepods") {
                        queue.push_front((entry.path(), depth + 1));
                    } else {
                        queue.push_back((entry.path(), depth + 1));
                    }
                }
            }
        }
    }

    /// Read a pod's five files (`None` for each that could not be read or parsed, counted).
    fn read_pod(&mut self, dir: &Path) -> Counters {
        let at = Instant::now();
        let cpu = self.read(dir, "cpu.stat", parse_cpu_stat);
        let limit = self.read(dir, "cpu.max", parse_cpu_max);
        let cpu_psi = self.read(dir, "cpu.pressure", parse_pressure);
        let io_psi = self.read(dir, "io.pressure", parse_pressure);
        let memory_psi = self.read(dir, "memory.pressure", parse_pressure);
        Counters {
            at,
            cpu,
            limit,
            cpu_psi,
            io_psi,
            memory_psi,
            containers: containers(dir),
        }
    }

    /// Read one file of a pod's cgroup, bounded and without blocking, and parse it; a
    /// failure is counted by kind: `unreadable` (missing, not a regular file: a FIFO, a
    /// device, a directory), `too_large`, `malformed` (not UTF-8, or not what the file
    /// holds), and logged with the file's path and what is wrong (each kind every 30 s at
    /// most).
    fn read<T>(
        &mut self,
        dir: &Path,
        file: &str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let path = dir.join(file);
        let (kind, why) = match read_proc_file(&path, MAX_CGROUP_FILE_BYTES) {
            Ok(bytes) => match std::str::from_utf8(&bytes) {
                Ok(text) => match parse(text) {
                    Ok(v) => return Some(v),
                    Err(why) => ("malformed", why),
                },
                Err(e) => ("malformed", format!("not UTF-8: {e}")),
            },
            Err(ProcRead::Unusable) => ("unreadable", "missing, or not a regular file".to_string()),
            Err(ProcRead::TooLarge) => ("too_large", format!("over {MAX_CGROUP_FILE_BYTES} bytes")),
        };
        self.health.count(kind);
        if self.log.allow(kind) {
            tracing::warn!(
                source = PRESSURE,
                kind,
                file = %path.display(),
                "A pod's cgroup file could not be read: {why}; that share is blank this tick (counted in {}{{source=\"pressure\"}}; repeats logged every 30 s).",
                truthscale_core::catalog::SOURCE_ERRORS.name
            );
        }
        None
    }

    /// This tick's shares of each of `pods` (at most [`MAX_GPU_PODS`], the rest counted
    /// once as `over_limit`), the previous reads of pods not among them forgotten.
    fn measure(&mut self, pods: &BTreeSet<String>) -> HashMap<String, Shares> {
        if pods.len() > MAX_GPU_PODS {
            self.health.count("over_limit");
        }
        let pods: BTreeSet<String> = pods.iter().take(MAX_GPU_PODS).cloned().collect();
        self.find_dirs(&pods);
        let mut shares = HashMap::new();
        let mut last = HashMap::new();
        for uid in &pods {
            let Some(dir) = self.dirs.get(uid).cloned() else {
                self.health.count("not_found");
                continue;
            };
            let now = self.read_pod(&dir);
            if let Some(before) = self.last.get(uid) {
                let mut refused = Vec::new();
                shares.insert(uid.clone(), between(before, &now, &mut refused));
                for why in refused {
                    self.health.count(why.kind());
                }
            }
            last.insert(uid.clone(), now);
        }
        self.last = last;
        shares
    }
}

/// The CPU counters of the containers below a pod's directory (its child directories, at
/// most [`MAX_CONTAINERS`], bounded reads): a file that does not read is `None` (a container
/// without a CPU limit has no periods), not counted, as the pod's own files are.
fn containers(pod: &Path) -> Vec<(String, Option<CpuStat>, Option<CpuMax>)> {
    let Ok(entries) = std::fs::read_dir(pod) else {
        return Vec::new();
    };
    let read = |dir: &Path, file: &str| {
        read_proc_file(&dir.join(file), MAX_CGROUP_FILE_BYTES)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .take(MAX_CONTAINERS)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let dir = e.path();
            let cpu = read(&dir, "cpu.stat")
                .as_deref()
                .and_then(|t| parse_cpu_stat(t).ok());
            let limit = read(&dir, "cpu.max")
                .as_deref()
                .and_then(|t| parse_cpu_max(t).ok());
            Some((name, cpu, limit))
        })
        .collect()
}

/// The wanted pod a directory name holds (`pod<UID>` or `pod<UID_>`), by its UID.
fn pod_in(name: &str, missing: &HashMap<String, String>) -> Option<String> {
    name.match_indices("pod")
        .find_map(|(at, _)| missing.get(name.get(at..at + 39)?).cloned())
}

/// Whether a directory name is a pod's (`pod` then a UID, dashes or underscores).
fn looks_like_a_pod(name: &str) -> bool {
    name.match_indices("pod").any(|(at, _)| {
        name.get(at + 3..at + 39).is_some_and(|u| {
            u.bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_')
        })
    })
}

/// Why two reads of a pod's counters give no share, counted by kind.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Refused {
    /// A counter went backwards: the cgroup was made again (the pod restarted).
    Reset,
    /// More than the whole: more throttled periods than periods, or a stall longer than
    /// half as much again as the time between the reads.
    Impossible,
}

impl Refused {
    fn kind(self) -> &'static str {
        match self {
            Refused::Reset => "reset",
            Refused::Impossible => "impossible",
        }
    }
}

/// `Δpart / Δwhole` as read, `None` where the whole did not advance; refused where either
/// went backwards.
#[expect(clippy::cast_precision_loss, reason = "counter deltas, far below 2^53")]
fn ratio(part: (u64, u64), whole: (u64, u64)) -> Result<Option<f64>, Refused> {
    let dp = part.1.checked_sub(part.0).ok_or(Refused::Reset)?;
    let dw = whole.1.checked_sub(whole.0).ok_or(Refused::Reset)?;
    Ok((dw > 0).then(|| dp as f64 / dw as f64))
}

/// The throttled share of `nr_throttled` over `nr_periods` between two reads: each period
/// is throttled or not, so more than all of them is refused.
fn throttled_share(b: CpuStat, n: CpuStat) -> Result<Option<f64>, Refused> {
    let r = ratio(
        (b.nr_throttled, n.nr_throttled),
        (b.nr_periods, n.nr_periods),
    )?;
    if r.is_some_and(|r| r > 1.0) {
        return Err(Refused::Impossible);
    }
    Ok(r)
}

/// A stall share of the time between two reads: clamped to 1 up to
/// [`RATIO_CLAMP_LIMIT`] (the reads' own times are taken a little apart from the files'),
/// refused beyond it.
fn stall_share(part: (u64, u64), wall_usec: u64) -> Result<Option<f64>, Refused> {
    match ratio(part, (0, wall_usec))? {
        Some(r) if r > RATIO_CLAMP_LIMIT => Err(Refused::Impossible),
        r => Ok(r.map(|r| r.min(1.0))),
    }
}

/// A share, or `None` with why it was refused counted in `refused`.
fn counted(r: Result<Option<f64>, Refused>, refused: &mut Vec<Refused>) -> Option<f64> {
    r.unwrap_or_else(|why| {
        refused.push(why);
        None
    })
}

/// A pod's shares between two reads, each refused one (a counter gone backwards, a share
/// no cgroup gives) blank and put in `refused`.
fn between(before: &Counters, now: &Counters, refused: &mut Vec<Refused>) -> Shares {
    let wall_usec = u64::try_from(now.at.duration_since(before.at).as_micros()).ok();
    let mut psi = |f: fn(&Counters) -> Option<Psi>, full: bool| {
        let pick = |p: Option<Psi>| p.and_then(|p| if full { p.full_usec } else { p.some_usec });
        let (b, n, w) = (pick(f(before))?, pick(f(now))?, wall_usec?);
        counted(stall_share((b, n), w), refused)
    };
    let cpu_waiting = psi(|c| c.cpu_psi, false);
    let io_waiting = psi(|c| c.io_psi, false);
    let io_stalled = psi(|c| c.io_psi, true);
    let memory_stalled = psi(|c| c.memory_psi, true);
    let refused_before = refused.len();
    let (throttled, limit) = most_throttled(before, now, refused);
    Shares {
        throttled_known: before.cpu.is_some()
            && now.cpu.is_some()
            && refused.len() == refused_before,
        throttled,
        limit_cores: match limit {
            Some(CpuMax::Cores(c)) => Some(c),
            _ => None,
        },
        cpu_waiting,
        io_waiting,
        io_stalled,
        memory_stalled,
    }
}

/// The throttled share of the pod, or of its most throttled container where more, with that
/// cgroup's limit: a container's own quota throttles it in its own periods, which the pod's
/// `cpu.stat` does not count. `None` where neither the pod nor a container has periods.
fn most_throttled(
    before: &Counters,
    now: &Counters,
    refused: &mut Vec<Refused>,
) -> (Option<f64>, Option<CpuMax>) {
    let mut share = |b: Option<CpuStat>, n: Option<CpuStat>| {
        let (b, n) = b.zip(n)?;
        counted(throttled_share(b, n), refused)
    };
    let mut best = (share(before.cpu, now.cpu), now.limit);
    for (name, cpu, limit) in &now.containers {
        let Some((_, was, _)) = before.containers.iter().find(|(n, ..)| n == name) else {
            continue;
        };
        let Some(r) = share(*was, *cpu) else { continue };
        if best.0.is_none_or(|b| r > b) {
            best = (Some(r), *limit);
        }
    }
    best
}

/// The worst of a GPU's pods' shares (`None`: a pod not measured this tick), each only where
/// every pod's was measured: the largest of some would be a lower bound, never the worst
/// (a pod whose throttled share is known and ran no CFS period was not throttled). The CPU
/// limit of the most throttled pod (of the first pod with a limit when none has a throttled
/// share).
fn worst(pods: &[Option<&Shares>]) -> Shares {
    let Some(pods) = pods.iter().copied().collect::<Option<Vec<&Shares>>>() else {
        return Shares::default();
    };
    let max = |f: fn(&Shares) -> Option<f64>| {
        pods.iter()
            .map(|s| f(s))
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .reduce(f64::max)
    };
    let throttled = pods
        .iter()
        .all(|s| s.throttled_known)
        .then(|| pods.iter().filter_map(|s| s.throttled).reduce(f64::max))
        .flatten();
    let most_throttled = pods
        .iter()
        .filter(|s| s.throttled.is_some())
        .max_by(|a, b| {
            a.throttled
                .partial_cmp(&b.throttled)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    let limit_cores = match most_throttled {
        Some(s) => s.limit_cores,
        None => pods.iter().find_map(|s| s.limit_cores),
    };
    Shares {
        throttled_known: pods.iter().all(|s| s.throttled_known),
        throttled,
        limit_cores,
        cpu_waiting: max(|s| s.cpu_waiting),
        io_waiting: max(|s| s.io_waiting),
        io_stalled: max(|s| s.io_stalled),
        memory_stalled: max(|s| s.memory_stalled),
    }
}

/// Each pod's own shares, where any was measured, named by its processes' pod and
/// namespace: a pod whose processes name none, or disagree, and a name two pods' processes
/// carry (not told apart) get none. In name order.
fn per_pod(pods: &Pods, shares: &HashMap<String, Shares>) -> Vec<PodPressure> {
    let mut out: Vec<PodPressure> = Vec::new();
    let (mut seen, mut twice) = (BTreeSet::new(), BTreeSet::new());
    for (uid, names) in pods {
        let mut names = names.iter();
        let (Some(name), None) = (names.next(), names.next()) else {
            continue;
        };
        if !seen.insert(name) {
            twice.insert(name);
            continue;
        }
        let Some(s) = shares.get(uid).filter(|s| s.any()) else {
            continue;
        };
        out.push(PodPressure {
            pod: name.clone(),
            cpu_throttled_ratio: s.throttled,
            cpu_limit_cores: s.limit_cores,
            cpu_waiting_ratio: s.cpu_waiting,
            io_waiting_ratio: s.io_waiting,
            io_stalled_ratio: s.io_stalled,
            memory_stalled_ratio: s.memory_stalled,
        });
    }
    out.retain(|p| !twice.contains(&p.pod));
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

/// Write the measured shares on the entity; what was not measured stays as it was (blank).
fn set(e: &mut EntitySample, s: &Shares) {
    for (field, v) in [
        (Field::HolderCpuThrottledRatio, s.throttled),
        (Field::HolderCpuLimitCores, s.limit_cores),
        (Field::HolderCpuWaitingRatio, s.cpu_waiting),
        (Field::HolderIoWaitingRatio, s.io_waiting),
        (Field::HolderIoStalledRatio, s.io_stalled),
        (Field::HolderMemoryStalledRatio, s.memory_stalled),
    ] {
        if let Some(v) = v {
            e.readings.set_value(field, v);
        }
    }
}

impl Stage for HolderPressure {
    fn name(&self) -> &'static str {
        PRESSURE
    }

    fn apply(&mut self, tick: &mut Tick<'_>) {
        self.tick += 1;
        self.health.up = self.cgroup_root.is_dir();
        let mut reads_left = PID_READS_PER_TICK;
        let mut by_entity = Vec::new();
        let mut all = BTreeSet::new();
        for (si, s) in tick.produced.samples.iter().enumerate() {
            for (ei, e) in s.entities.iter().enumerate() {
                let pods = self.pods_of(e, &mut reads_left);
                if !pods.is_empty() {
                    all.extend(pods.keys().cloned());
                    by_entity.push((si, ei, pods));
                }
            }
        }
        let tick_no = self.tick;
        self.pids.retain(|_, (_, at)| *at == tick_no);
        let shares = self.measure(&all);
        for (si, ei, pods) in by_entity {
            let each: Vec<Option<&Shares>> = pods.keys().map(|u| shares.get(u)).collect();
            let w = worst(&each);
            if let Some(e) = tick.produced.samples[si].entities.get_mut(ei) {
                set(e, &w);
                e.holder_pressure = per_pod(&pods, &shares);
            }
        }
    }

    fn health(&self) -> SourceHealth {
        self.health.report(PRESSURE)
    }

    fn count(&mut self, kind: &str) {
        self.health.count(kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Produced;
    use std::time::{Duration, Instant};
    use truthscale_core::model::{EntityId, ProcessReading, Sample, Timestamp};

    const A: &str = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    const B: &str = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538";
    const C: &str = "3d6a4adc-4ac3-33f4-aa5a-2238f5eec649";

    /// A scratch folder, removed when dropped.
    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn scratch(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("truthscale-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// Write a pod's cgroup files: CFS periods and throttled ones, its quota (`None`:
    /// `max`), and the PSI totals (cpu some, io some, io full, memory full), in µs.
    fn write_pod(dir: &Path, periods: u64, throttled: u64, quota: Option<u64>, psi: [u64; 4]) {
        std::fs::create_dir_all(dir).unwrap();
        let w = |f: &str, t: String| std::fs::write(dir.join(f), t).unwrap();
        w(
            "cpu.stat",
            format!(
                "usage_usec 100\nuser_usec 90\nsystem_usec 10\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {}\nnr_bursts 0\nburst_usec 0\n",
                throttled * 50_000
            ),
        );
        w(
            "cpu.max",
            quota.map_or("max 100000\n".into(), |q| format!("{q} 100000\n")),
        );
        let line =
            |kind: &str, t: u64| format!("{kind} avg10=0.00 avg60=0.00 avg300=0.00 total={t}\n");
        w("cpu.pressure", line("some", psi[0]) + &line("full", 0));
        w("io.pressure", line("some", psi[1]) + &line("full", psi[2]));
        w("memory.pressure", line("some", 0) + &line("full", psi[3]));
    }

    fn gpu(index: u32, pods: &[Option<&str>]) -> EntitySample {
        EntitySample {
            id: EntityId {
                gpu: Some(index),
                uuid: Some(format!("GPU-{index}")),
                ..Default::default()
            },
            processes: pods
                .iter()
                .enumerate()
                .map(|(i, uid)| ProcessReading {
                    pid: format!("{}", 1000 * (index + 1) + u32::try_from(i).unwrap()),
                    pod_uid: uid.map(str::to_string),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn tick(stage: &mut HolderPressure, entities: Vec<EntitySample>) -> Vec<EntitySample> {
        let mut produced = Produced {
            samples: vec![Sample {
                taken: Timestamp(0),
                entities,
            }],
            ..Produced::default()
        };
        let mut t = Tick {
            stale_after: Duration::from_secs(1),
            produced: &mut produced,
            held: None,
        };
        stage.apply(&mut t);
        produced.samples.remove(0).entities
    }

    /// Where the kubelet said who holds a GPU, only its holders' processes make its holder
    /// pressure: GPU 0 is `solo`'s (10 % of its periods throttled) and also runs a process
    /// of `intruder` (90 %, a node daemon that sees every GPU), so its holder share is
    /// 0.1, and only `solo` has pod series; GPU 1 is held by nobody (the kubelet listed
    /// none): no holder pressure, though `intruder`'s process runs there too.
    #[test]
    fn only_the_holders_processes_make_the_holder_pressure() {
        use truthscale_core::model::Holder;
        let root = scratch("cgroup-holders");
        let (solo, intruder) = (
            root.0.join(format!("kubepods/burstable/pod{A}")),
            root.0.join(format!("kubepods/burstable/pod{B}")),
        );
        let named = |pod: &str| PodRef {
            pod: pod.into(),
            namespace: Some("ml".into()),
            container: None,
        };
        let entities = || {
            let mut held = gpu(0, &[Some(A), Some(B)]);
            held.processes[0].pod = Some(named("solo"));
            held.processes[1].pod = Some(named("intruder"));
            held.id.pod = Some(named("solo"));
            held.allocation = Some(vec![Holder {
                pod: named("solo"),
                resource: "nvidia.com/gpu".into(),
                replica: None,
                labels: Vec::new(),
                owner: None,
            }]);
            let mut free = gpu(1, &[Some(B)]);
            free.processes[0].pod = Some(named("intruder"));
            free.allocation = Some(Vec::new());
            vec![held, free]
        };
        write_pod(&solo, 1000, 0, Some(100_000), [0; 4]);
        write_pod(&intruder, 1000, 0, Some(100_000), [0; 4]);
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        tick(&mut stage, entities());
        write_pod(&solo, 1100, 10, Some(100_000), [0; 4]);
        write_pod(&intruder, 1100, 90, Some(100_000), [0; 4]);
        let second = tick(&mut stage, entities());
        let v = |e: &EntitySample, f| e.readings.value(f);
        assert_eq!(v(&second[0], Field::HolderCpuThrottledRatio), Some(0.1));
        let pods: Vec<&str> = second[0]
            .holder_pressure
            .iter()
            .map(|p| p.pod.pod.as_str())
            .collect();
        assert_eq!(pods, ["solo"]);
        assert_eq!(v(&second[1], Field::HolderCpuThrottledRatio), None);
        assert!(second[1].holder_pressure.is_empty());
    }

    /// Both drivers' layouts: a pod found by its UID (cgroupfs) or its UID with `_`
    /// (systemd), read twice: the first read gives nothing (no delta), the second the
    /// deltas' shares over the wall time; the GPU takes the worst of its pods, and the
    /// limit of the most throttled one.
    #[test]
    fn both_layouts_give_the_deltas_shares_on_the_gpu() {
        let root = scratch("cgroup-layouts");
        let a = root.0.join(format!("kubepods/burstable/pod{A}"));
        let b = root.0.join(format!(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
            B.replace('-', "_")
        ));
        std::fs::create_dir_all(a.join("0123456789ab")).unwrap();
        std::fs::create_dir_all(root.0.join("system.slice/containerd.service")).unwrap();
        write_pod(&a, 1000, 100, Some(100_000), [0, 0, 0, 0]);
        write_pod(&b, 500, 0, Some(200_000), [0, 0, 0, 0]);
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        let entities = || {
            vec![
                gpu(0, &[Some(A), Some(B), None]),
                gpu(1, &[Some(B)]),
                gpu(2, &[]),
            ]
        };
        // Before the first read: the stage's span between its reads is then at most `wall`.
        let t0 = Instant::now();
        let first = tick(&mut stage, entities());
        for e in &first {
            for (f, r) in e.readings.iter() {
                assert!(
                    r.value().is_none()
                        || !matches!(
                            f,
                            Field::HolderCpuThrottledRatio | Field::HolderIoWaitingRatio
                        ),
                    "{f:?} on a first read"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        // A: 70 % of its new periods throttled; B: I/O waited 100 ms of some, 20 ms full.
        write_pod(&a, 1100, 170, Some(100_000), [30_000, 0, 0, 0]);
        write_pod(&b, 600, 10, Some(200_000), [0, 100_000, 20_000, 5_000]);
        let second = tick(&mut stage, entities());
        let wall = t0.elapsed().as_secs_f64();
        let v = |e: &EntitySample, f| e.readings.value(f);
        assert_eq!(v(&second[0], Field::HolderCpuThrottledRatio), Some(0.7));
        assert_eq!(v(&second[0], Field::HolderCpuLimitCores), Some(1.0));
        let io = v(&second[0], Field::HolderIoWaitingRatio).unwrap();
        // 100 ms of waiting over the stage's own span between reads: at least the 200 ms
        // slept, at most `wall`, which holds it.
        assert!(io <= 0.1 / 0.2 && io >= 0.1 / wall, "{io} {wall}");
        assert!(v(&second[0], Field::HolderCpuWaitingRatio).unwrap() > 0.0);
        // The second GPU only has B: 10 % throttled, its own limit.
        assert_eq!(v(&second[1], Field::HolderCpuThrottledRatio), Some(0.1));
        assert_eq!(v(&second[1], Field::HolderCpuLimitCores), Some(2.0));
        assert_eq!(v(&second[1], Field::HolderCpuWaitingRatio), Some(0.0));
        assert!(v(&second[1], Field::HolderIoStalledRatio).unwrap() > 0.0);
        assert!(v(&second[1], Field::HolderMemoryStalledRatio).unwrap() > 0.0);
        // No process: nothing.
        assert_eq!(v(&second[2], Field::HolderCpuThrottledRatio), None);
        assert!(
            stage.health().errors.is_empty(),
            "{:?}",
            stage.health().errors
        );
        assert!(stage.health().up);
        // A restarted (counters back to small values): no value this tick, a value again
        // on the next; a pod no longer present is forgotten.
        write_pod(&a, 10, 5, None, [0, 0, 0, 0]);
        let third = tick(&mut stage, vec![gpu(0, &[Some(A)])]);
        assert_eq!(v(&third[0], Field::HolderCpuThrottledRatio), None);
        assert_eq!(
            v(&third[0], Field::HolderCpuLimitCores),
            None,
            "cpu.max is max"
        );
        assert_eq!(v(&third[0], Field::HolderCpuWaitingRatio), None);
        // Counted: its periods and its CPU stall went backwards.
        assert_eq!(stage.health().errors.get("reset"), Some(&2));
        assert_eq!(stage.last.len(), 1);
        write_pod(&a, 20, 5, None, [0, 0, 0, 0]);
        let fourth = tick(&mut stage, vec![gpu(0, &[Some(A)])]);
        assert_eq!(v(&fourth[0], Field::HolderCpuThrottledRatio), Some(0.0));
        // The pod's directory moves (recreated elsewhere): found again.
        let walked = stage.walked;
        std::fs::remove_dir_all(&a).unwrap();
        let moved = root.0.join(format!("kubepods/pod{A}"));
        write_pod(&moved, 1, 1, None, [0, 0, 0, 0]);
        tick(&mut stage, vec![gpu(0, &[Some(A)])]);
        assert!(stage.walked > walked);
        assert_eq!(stage.dirs.get(A), Some(&moved));
    }

    /// A GPU's worst is of every pod on it or none: with one pod's first read, the other's
    /// 0 % would be a lower bound, not the worst. More throttled periods than periods, and
    /// a stall of 10 s within a fifth of one, are blank and counted `impossible`, never 1;
    /// the GPU's worst is then not known either.
    #[test]
    fn the_worst_is_of_every_pod_and_impossible_shares_are_counted() {
        let root = scratch("cgroup-worst");
        let a = root.0.join(format!("kubepods/burstable/pod{A}"));
        let b = root.0.join(format!("kubepods/burstable/pod{B}"));
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        let v = |e: &EntitySample, f| e.readings.value(f);
        write_pod(&a, 1000, 100, Some(100_000), [0; 4]);
        write_pod(&b, 1000, 100, Some(100_000), [0; 4]);
        tick(&mut stage, vec![gpu(0, &[Some(A)])]);
        std::thread::sleep(Duration::from_millis(200));
        // A: none of its 100 new periods throttled; B: its first read.
        write_pod(&a, 1100, 100, Some(100_000), [0; 4]);
        let second = tick(&mut stage, vec![gpu(0, &[Some(A), Some(B)])]);
        assert_eq!(v(&second[0], Field::HolderCpuThrottledRatio), None);
        assert_eq!(v(&second[0], Field::HolderCpuWaitingRatio), None);
        std::thread::sleep(Duration::from_millis(200));
        // A: 40 throttled in 10 periods, and an I/O stall of 10 s; B: 45 of 100 throttled.
        write_pod(&a, 1110, 140, Some(100_000), [0, 10_000_000, 0, 0]);
        write_pod(&b, 1100, 145, Some(100_000), [0; 4]);
        let third = tick(&mut stage, vec![gpu(0, &[Some(A), Some(B)])]);
        assert_eq!(v(&third[0], Field::HolderCpuThrottledRatio), None);
        assert_eq!(v(&third[0], Field::HolderIoWaitingRatio), None);
        assert_eq!(v(&third[0], Field::HolderCpuWaitingRatio), Some(0.0));
        let errors = stage.health().errors;
        assert_eq!(errors.get("impossible"), Some(&2), "{errors:?}");
        // B alone is measured: its own 0.45.
        std::thread::sleep(Duration::from_millis(200));
        write_pod(&b, 1200, 190, Some(100_000), [0; 4]);
        let fourth = tick(&mut stage, vec![gpu(0, &[Some(B)])]);
        assert_eq!(v(&fourth[0], Field::HolderCpuThrottledRatio), Some(0.45));
    }

    /// A container throttled by its own limit: its periods are its own, not the pod's. A
    /// Burstable pod (a sidecar without a limit: the pod has no quota, so no periods) whose
    /// GPU container has 4 CPUs and is throttled in 60 % of its periods reads 0.6 and 4; a
    /// pod of quota 9 (limits 8 + 1) that never runs out, its 8-CPU container throttled in
    /// 60 %, reads 0.6 and 8, not the pod's 0 and 9.
    #[test]
    fn a_container_throttled_by_its_own_limit_counts() {
        let root = scratch("cgroup-containers");
        let a = root.0.join(format!("kubepods/burstable/pod{A}"));
        let b = root.0.join(format!("kubepods/burstable/pod{B}"));
        let step = |n: u64| {
            write_pod(&a, 0, 0, None, [0, 0, 0, 0]);
            write_pod(
                &a.join("main"),
                100 * n,
                60 * n,
                Some(400_000),
                [0, 0, 0, 0],
            );
            write_pod(&a.join("sidecar"), 0, 0, None, [0, 0, 0, 0]);
            write_pod(&b, 100 * n, 0, Some(900_000), [0, 0, 0, 0]);
            write_pod(
                &b.join("main"),
                100 * n,
                60 * n,
                Some(800_000),
                [0, 0, 0, 0],
            );
            write_pod(&b.join("log"), 100 * n, 0, Some(100_000), [0, 0, 0, 0]);
        };
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        step(1);
        tick(&mut stage, vec![gpu(0, &[Some(A)]), gpu(1, &[Some(B)])]);
        step(2);
        let second = tick(&mut stage, vec![gpu(0, &[Some(A)]), gpu(1, &[Some(B)])]);
        let v = |e: &EntitySample, f| e.readings.value(f);
        assert_eq!(v(&second[0], Field::HolderCpuThrottledRatio), Some(0.6));
        assert_eq!(v(&second[0], Field::HolderCpuLimitCores), Some(4.0));
        assert_eq!(v(&second[1], Field::HolderCpuThrottledRatio), Some(0.6));
        assert_eq!(v(&second[1], Field::HolderCpuLimitCores), Some(8.0));
    }

    /// Processes of the pods `(UID, pod name)` on GPU `index`, in namespace `ml`, each
    /// pod's name given by its process's attribution (`None`: not attributed).
    fn named(index: u32, pods: &[(&str, Option<&str>)]) -> EntitySample {
        let mut e = gpu(
            index,
            &pods.iter().map(|(u, _)| Some(*u)).collect::<Vec<_>>(),
        );
        for (p, (_, name)) in e.processes.iter_mut().zip(pods) {
            p.pod = name.map(|n| PodRef {
                pod: n.into(),
                namespace: Some("ml".into()),
                container: Some(format!("c{}", p.pid)),
            });
        }
        e
    }

    /// Two pods on one GPU (and a third whose processes name no pod): each named pod has
    /// its own shares, by pod and namespace (no container: the files are the pod's), the
    /// GPU the worst of all three; a pod's two processes are one pod; two pods whose
    /// processes carry one name are not told apart, so neither has its own.
    #[test]
    fn each_pod_has_its_own_shares_and_the_gpu_the_worst() {
        let root = scratch("cgroup-per-pod");
        let dir = |uid: &str| root.0.join(format!("kubepods/burstable/pod{uid}"));
        write_pod(&dir(A), 1000, 100, Some(100_000), [0, 0, 0, 0]);
        write_pod(&dir(B), 500, 0, Some(200_000), [0, 0, 0, 0]);
        write_pod(&dir(C), 100, 0, Some(300_000), [0, 0, 0, 0]);
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        let entities = || {
            let train = Some("train");
            vec![
                named(0, &[(A, train), (A, train), (B, Some("loader")), (C, None)]),
                named(1, &[(A, Some("twin")), (B, Some("twin"))]),
            ]
        };
        let t0 = Instant::now();
        let first = tick(&mut stage, entities());
        assert!(
            first.iter().all(|e| e.holder_pressure.is_empty()),
            "no delta yet"
        );
        std::thread::sleep(Duration::from_millis(200));
        // A: 70 % throttled; B: 10 % throttled and I/O waiting; C: 90 % throttled.
        write_pod(&dir(A), 1100, 170, Some(100_000), [0, 0, 0, 0]);
        write_pod(&dir(B), 600, 10, Some(200_000), [0, 100_000, 20_000, 0]);
        write_pod(&dir(C), 200, 90, Some(300_000), [0, 0, 0, 0]);
        let second = tick(&mut stage, entities());
        let wall = t0.elapsed().as_secs_f64();
        let pods = &second[0].holder_pressure;
        let names: Vec<_> = pods.iter().map(|p| p.pod.pod.as_str()).collect();
        assert_eq!(names, ["loader", "train"]);
        assert!(
            pods.iter()
                .all(|p| p.pod.namespace.as_deref() == Some("ml"))
        );
        assert!(pods.iter().all(|p| p.pod.container.is_none()));
        let (loader, train) = (&pods[0], &pods[1]);
        assert_eq!(train.cpu_throttled_ratio, Some(0.7));
        assert_eq!(train.cpu_limit_cores, Some(1.0));
        assert_eq!(train.io_waiting_ratio, Some(0.0));
        assert_eq!(train.memory_stalled_ratio, Some(0.0));
        assert_eq!(loader.cpu_throttled_ratio, Some(0.1));
        assert_eq!(loader.cpu_limit_cores, Some(2.0));
        let io = loader.io_waiting_ratio.unwrap();
        // As above: 100 ms over a span of at least the 200 ms slept and at most `wall`.
        assert!(io <= 0.5 && io >= 0.1 / wall, "{io} {wall}");
        assert!(loader.io_stalled_ratio.unwrap() > 0.0);
        // The GPU: the worst of the three, the unnamed pod C included.
        let v = |f| second[0].readings.value(f);
        assert_eq!(v(Field::HolderCpuThrottledRatio), Some(0.9));
        assert_eq!(v(Field::HolderCpuLimitCores), Some(3.0));
        assert_eq!(v(Field::HolderIoWaitingRatio), loader.io_waiting_ratio);
        // One name, two pods: no per-pod shares, the GPU's still measured.
        assert!(second[1].holder_pressure.is_empty());
        assert_eq!(
            second[1].readings.value(Field::HolderCpuThrottledRatio),
            Some(0.7)
        );
        // A pod whose files went away: no shares of its own, the other's kept.
        std::fs::remove_dir_all(dir(B)).unwrap();
        let third = tick(&mut stage, entities());
        let names: Vec<_> = third[0]
            .holder_pressure
            .iter()
            .map(|p| &p.pod.pod)
            .collect();
        assert_eq!(names, ["train"]);
    }

    /// On a GPU one pod holds, a process of another pod (its name taken off by the pod
    /// list's UIDs) is not the holder's: the GPU's holder pressure is the holder's 0 %,
    /// never the other pod's 90 % under the holder's name.
    #[test]
    fn another_pods_process_on_a_held_gpu_is_not_the_holders_pressure() {
        let root = scratch("cgroup-foreign");
        let dir = |uid: &str| root.0.join(format!("kubepods/burstable/pod{uid}"));
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        let entity = || {
            let mut e = named(0, &[(A, Some("holder")), (B, None)]);
            e.id.pod = e.processes[0].pod.clone();
            vec![e]
        };
        write_pod(&dir(A), 1000, 100, Some(100_000), [0; 4]);
        write_pod(&dir(B), 1000, 100, Some(100_000), [0; 4]);
        tick(&mut stage, entity());
        std::thread::sleep(Duration::from_millis(200));
        write_pod(&dir(A), 1100, 100, Some(100_000), [0; 4]);
        write_pod(&dir(B), 1100, 190, Some(100_000), [0; 4]);
        let second = tick(&mut stage, entity());
        assert_eq!(
            second[0].readings.value(Field::HolderCpuThrottledRatio),
            Some(0.0)
        );
        assert_eq!(second[0].holder_pressure.len(), 1);
        assert_eq!(second[0].holder_pressure[0].pod.pod, "holder");
    }

    /// A process without a pod UID is looked up under the proc root; a pod with no cgroup
    /// directory is counted `not_found`, never a value.
    #[test]
    fn a_process_is_looked_up_and_a_missing_pod_is_counted() {
        let root = scratch("cgroup-lookup");
        let procs = root.0.join("proc");
        std::fs::create_dir_all(procs.join("1000")).unwrap();
        std::fs::write(
            procs.join("1000/cgroup"),
            format!("0::/kubepods/burstable/pod{A}/0123456789abcdef\n"),
        )
        .unwrap();
        let cg = root.0.join("cg");
        let a = cg.join(format!("kubepods/burstable/pod{A}"));
        write_pod(&a, 0, 0, Some(50_000), [0, 0, 0, 0]);
        let mut stage = HolderPressure::new(cg.clone(), procs);
        tick(&mut stage, vec![gpu(0, &[None])]);
        write_pod(&a, 10, 5, Some(50_000), [0, 0, 0, 0]);
        let e = tick(&mut stage, vec![gpu(0, &[None])]);
        assert_eq!(
            e[0].readings.value(Field::HolderCpuThrottledRatio),
            Some(0.5)
        );
        assert_eq!(e[0].readings.value(Field::HolderCpuLimitCores), Some(0.5));
        let e = tick(&mut stage, vec![gpu(0, &[Some(B)])]);
        assert_eq!(e[0].readings.value(Field::HolderCpuThrottledRatio), None);
        assert_eq!(stage.health().errors.get("not_found"), Some(&1));
    }

    /// Hostile cgroup files (`/dev/zero`, a FIFO, a directory, one over the cap, garbage,
    /// missing) are refused at once and counted by kind; never a panic, a hang or a value.
    #[test]
    fn hostile_cgroup_files_are_bounded_and_counted() {
        let root = scratch("cgroup-hostile");
        let pod = root.0.join(format!("kubepods/burstable/pod{A}"));
        let cases = crate::bounds::hostile::files(&root.0.join("h"), MAX_CGROUP_FILE_BYTES);
        std::fs::create_dir_all(&pod).unwrap();
        // Each of the five files is one hostile kind (the fifth, garbage).
        let files = ["cpu.stat", "cpu.max", "cpu.pressure", "io.pressure"];
        for ((path, _), file) in cases.iter().zip(files) {
            let target = pod.join(file);
            if path.is_dir() {
                std::fs::create_dir_all(&target).unwrap();
            } else if file == "io.pressure" {
                std::fs::rename(path, &target).unwrap();
            } else {
                std::os::unix::fs::symlink(path, &target).unwrap();
            }
        }
        std::fs::write(pod.join("memory.pressure"), b"\xff\xfe garbage").unwrap();
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        let t = Instant::now();
        for _ in 0..3 {
            let e = tick(&mut stage, vec![gpu(0, &[Some(A)])]);
            assert!(
                e[0].readings
                    .iter()
                    .all(|(f, r)| r.value().is_none() || !format!("{f:?}").starts_with("Holder"))
            );
        }
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let errors = stage.health().errors;
        assert_eq!(errors.get("unreadable"), Some(&9), "{errors:?}");
        assert_eq!(errors.get("too_large"), Some(&3), "{errors:?}");
        assert_eq!(errors.get("malformed"), Some(&3), "{errors:?}");
        std::fs::remove_file(pod.join("memory.pressure")).unwrap();
        tick(&mut stage, vec![gpu(0, &[Some(A)])]);
        assert_eq!(stage.health().errors.get("unreadable"), Some(&13));
    }

    /// A malformed file is logged with its path and what is wrong in it (the line and the
    /// key), not only counted.
    #[test]
    fn a_malformed_file_is_logged_with_its_path_and_line() {
        #[derive(Clone, Default)]
        struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Log {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let root = scratch("cgroup-logged");
        let pod = root.0.join(format!("kubepods/burstable/pod{A}"));
        write_pod(&pod, 1, 0, None, [0; 4]);
        std::fs::write(pod.join("cpu.stat"), "nr_periods 1\nnr_throttled x\n").unwrap();
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        tracing::subscriber::with_default(subscriber, || {
            tick(&mut stage, vec![gpu(0, &[Some(A)])]);
        });
        assert_eq!(stage.health().errors.get("malformed"), Some(&1));
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains(&format!("file={}", pod.join("cpu.stat").display()))
                && text.contains("line 2: nr_throttled \"x\" is not an unsigned integer"),
            "{text}"
        );
    }

    /// The search for pods' directories reads at most its budget of entries a tick, and
    /// pods past the cap are left out and counted once as `over_limit`.
    #[test]
    fn the_search_and_the_pods_are_bounded() {
        let root = scratch("cgroup-bounds");
        for i in 0..50 {
            std::fs::create_dir_all(root.0.join(format!("system.slice/s{i}.service/x"))).unwrap();
        }
        let mut stage = HolderPressure::new(root.0.clone(), "/nonexistent".into());
        let many: Vec<String> = (0..=MAX_GPU_PODS)
            .map(|i| format!("00000000-0000-0000-0000-{i:012}"))
            .collect();
        let uids: Vec<Option<&str>> = many.iter().map(|u| Some(u.as_str())).collect();
        let t = Instant::now();
        tick(&mut stage, vec![gpu(0, &uids)]);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let errors = stage.health().errors;
        assert_eq!(errors.get("over_limit"), Some(&1), "{errors:?}");
        assert_eq!(errors.get("not_found"), Some(&(MAX_GPU_PODS as u64)));
        assert!(
            stage.walked <= WALK_ENTRIES_PER_TICK as u64,
            "{}",
            stage.walked
        );
        assert!(stage.last.is_empty());
    }

    #[test]
    fn shares_of_counters() {
        assert_eq!(ratio((0, 70), (0, 100)), Ok(Some(0.7)));
        assert_eq!(ratio((0, 70), (5, 5)), Ok(None), "no periods");
        assert_eq!(
            ratio((10, 5), (0, 100)),
            Err(Refused::Reset),
            "went backwards"
        );
        let cpu = |periods, throttled| CpuStat {
            nr_periods: periods,
            nr_throttled: throttled,
            throttled_usec: None,
        };
        assert_eq!(
            throttled_share(cpu(0, 0), cpu(10, 40)),
            Err(Refused::Impossible),
            "40 of 10 periods throttled"
        );
        assert_eq!(throttled_share(cpu(0, 0), cpu(10, 10)), Ok(Some(1.0)));
        assert_eq!(stall_share((0, 120), 100), Ok(Some(1.0)), "clamped");
        assert_eq!(stall_share((0, 150), 100), Ok(Some(1.0)), "clamped");
        assert_eq!(stall_share((0, 151), 100), Err(Refused::Impossible));
        assert!(looks_like_a_pod(&format!("pod{A}")));
        assert!(looks_like_a_pod(&format!(
            "kubepods-pod{}.slice",
            A.replace('-', "_")
        )));
        assert!(!looks_like_a_pod("kubepods-burstable.slice"));
    }
}

//! `truthscale doctor`: what this machine's NVML gives, which fidelity tier that is, and how
//! to get a better one.
//!
//! It runs the NVML source itself for two ticks 250 ms apart (so GPM takes one sample pair),
//! and reports what `serve --source nvml` would get: the fidelity tier comes from the same
//! readings the core derives from.

use crate::sources::Source as _;
use crate::sources::nvml::{
    self, DeviceReport, GpmStatus, Ident, NvmlSource, ProcessInfo, Versions,
};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use truthscale_core::derive::{Fidelity, fidelity};
use truthscale_core::model::{EntityKey, EntitySample, Field};

/// Spacing of the two probe ticks (GPM needs more than 100 ms).
const PROBE_SPACING: Duration = Duration::from_millis(250);

/// What the probe found.
#[derive(Debug)]
pub(crate) struct Probe {
    /// The library loaded.
    pub library: String,
    /// Driver, NVML, CUDA versions.
    pub versions: Versions,
    /// Per GPU.
    pub devices: Vec<DeviceReport>,
    /// The latest readings of every entity.
    pub entities: Vec<EntitySample>,
    /// Errors met, by kind.
    pub errors: BTreeMap<String, Vec<String>>,
}

/// Load NVML from `library` and read every GPU twice.
///
/// # Errors
/// NVML cannot be loaded or initialized; the message says what to do.
pub(crate) fn probe(library: &std::path::Path) -> Result<Probe, nvml::OpenError> {
    let mut source = NvmlSource::open(library, PROBE_SPACING, None)?;
    let first = source.sample(SystemTime::now());
    std::thread::sleep(PROBE_SPACING);
    let second = source.sample(SystemTime::now());
    let mut latest: BTreeMap<EntityKey, EntitySample> = BTreeMap::new();
    let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for produced in [first, second] {
        for e in produced.samples.into_iter().flat_map(|s| s.entities) {
            latest.insert(e.id.key(), e);
        }
        for e in produced.errors {
            errors
                .entry(e.kind().to_string())
                .or_default()
                .push(e.to_string());
        }
    }
    Ok(Probe {
        library: source.library().to_string(),
        versions: source.versions().clone(),
        devices: source.report(),
        entities: latest.into_values().collect(),
        errors,
    })
}

/// Run `truthscale doctor`.
///
/// # Errors
/// Never: every problem is reported and reflected in the exit status (1: no usable NVML or
/// no GPU).
pub(crate) fn run(args: &DoctorArgs, env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    // The flag, else the variable `serve` reads (empty: not set), else the default.
    let from_env = env
        .iter()
        .find(|(k, v)| k == LIBRARY_VAR && !v.is_empty())
        .map(|(_, v)| PathBuf::from(v));
    let library = args
        .nvml_library
        .clone()
        .or(from_env)
        .unwrap_or_else(|| PathBuf::from(nvml::DEFAULT_LIBRARY));
    match probe(&library) {
        Ok(p) => {
            write!(crate::stdout::lock(), "{}", render(&p))?;
            Ok(if p.devices.iter().any(|d| d.ident.is_some()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(e) => {
            let lib = library.display();
            writeln!(crate::stdout::lock(), "NVML library    {lib}: not usable")?;
            crate::stdout::say!("truthscale doctor: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

fn pct(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

fn gib(b: f64) -> String {
    format!("{:.1} GiB", b / 1_073_741_824.0)
}

/// The readings worth showing, in one line.
fn readings_line(e: &EntitySample) -> String {
    let r = &e.readings;
    let mut parts = Vec::new();
    let fields: [(Field, &str); 6] = [
        (Field::ReportedUtil, "busy"),
        (Field::GrActive, "GR active"),
        (Field::SmActive, "SM active"),
        (Field::TensorActive, "tensor"),
        (Field::DramActive, "DRAM"),
        (Field::SmOccupancy, "occupancy"),
    ];
    for (f, name) in fields {
        if let Some(v) = r.value(f) {
            parts.push(format!("{name} {}", pct(v)));
        }
    }
    if let Some(p) = r.value(Field::PowerWatts) {
        parts.push(format!("power {p:.0} W"));
    }
    if let Some(f) = r.value(Field::SmClockMhz) {
        parts.push(format!("SM clock {f:.0} MHz"));
    }
    if let (Some(g), Some(w)) = (r.value(Field::PcieLinkGen), r.value(Field::PcieLinkWidth)) {
        parts.push(format!("PCIe Gen{g:.0} x{w:.0}"));
    }
    if let (Some(u), Some(t)) = (r.value(Field::MemUsedBytes), r.value(Field::MemTotalBytes)) {
        parts.push(format!("memory {} of {}", gib(u), gib(t)));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn model_name(ident: &Ident) -> String {
    ident
        .spec
        .map_or_else(|| ident.name.clone(), |s| s.name.to_string())
}

fn is_hopper_or_newer(ident: &Ident) -> bool {
    matches!(
        ident.architecture.as_deref(),
        Some("Hopper" | "Blackwell" | "Unknown")
    )
}

/// How to get a better tier than `tier` on this GPU (or MIG instance).
#[must_use]
pub(crate) fn advice(d: &DeviceReport, tier: Fidelity, mig: bool) -> String {
    const DCGM: &str = "run dcgm-exporter with the profiling fields \
        (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, DCGM_FI_PROF_DRAM_ACTIVE, DCGM_FI_PROF_SM_ACTIVE) \
        and use --source dcgm-exporter:URL";
    let Some(ident) = &d.ident else {
        return "the GPU is not answering; see the errors below".into();
    };
    if tier <= Fidelity::Profiling {
        return "nothing to do: GPM counters give the profiling tier \
                (tensor, DRAM and SM activity)"
            .into();
    }
    let bound = if mig {
        "until then a MIG instance has no activity counter at all (no busy flag on MIG)"
    } else {
        "until then effective compute is only an upper bound (the busy fraction)"
    };
    match d.gpm {
        GpmStatus::Denied => format!(
            "GPM is supported but NVML refused it (NVML_ERROR_NO_PERMISSION): run the \
             container privileged or with CAP_SYS_ADMIN for the profiling tier, or {DCGM}; \
             {bound}"
        ),
        GpmStatus::Active { sampled: false } => format!(
            "GPM is supported but sampling failed (see the errors below); or {DCGM}; {bound}"
        ),
        GpmStatus::Unsupported if is_hopper_or_newer(ident) => format!(
            "this {} should have GPM but the driver's NVML does not offer it: update the \
             driver (GPM needs an NVML from CUDA 12 or newer), or {DCGM}; {bound}",
            ident.architecture.as_deref().unwrap_or("GPU")
        ),
        GpmStatus::Unsupported => format!(
            "{} has no GPM (Hopper or newer only): {DCGM} for the profiling tier; {bound}",
            model_name(ident)
        ),
        GpmStatus::Active { sampled: true } => format!(
            "GPM answers but gave no tensor counter (see the errors below); or {DCGM}; {bound}"
        ),
    }
}

fn process_line(p: &ProcessInfo) -> String {
    let mut s = format!("pid {}", p.pid);
    if let Some(gi) = p.gpu_instance {
        let _ = write!(s, ", GPU instance {gi}");
    }
    match p.used_memory_bytes {
        Some(b) => {
            let _ = write!(s, ", {}", gib(b as f64));
        }
        None => s.push_str(", memory unknown"),
    }
    if let Some(u) = p.sm_busy {
        let _ = write!(s, ", SM busy {}", pct(u));
    }
    match &p.attribution {
        Some(a) => {
            let _ = write!(s, ", pod {}", a.pod_uid);
            if let Some(c) = &a.container_id {
                let _ = write!(s, ", container {}", &c[..c.len().min(12)]);
            }
        }
        None => s.push_str(", pod unknown"),
    }
    s
}

fn gpm_line(d: &DeviceReport) -> &'static str {
    match d.gpm {
        GpmStatus::Active { sampled: true } => "supported and permitted (a sample pair succeeded)",
        GpmStatus::Active { sampled: false } => "supported, but no sample succeeded",
        GpmStatus::Denied => "supported but not permitted (NVML_ERROR_NO_PERMISSION)",
        GpmStatus::Unsupported => "not supported",
    }
}

/// The report as text.
#[must_use]
pub(crate) fn render(p: &Probe) -> String {
    let mut s = String::new();
    versions(&mut s, p);
    for d in &p.devices {
        let _ = writeln!(s);
        device(&mut s, p, d);
    }
    if !p.errors.is_empty() {
        let _ = writeln!(
            s,
            "\nerrors during the probe (truthscale_source_errors_total kinds):"
        );
        for (kind, list) in &p.errors {
            let _ = writeln!(s, "  {kind} ({}): {}", list.len(), list[0]);
        }
    }
    s
}

/// The library, the versions and the GPUs NVML sees.
fn versions(s: &mut String, p: &Probe) {
    let v = &p.versions;
    let or_q = |o: &Option<String>| o.clone().unwrap_or_else(|| "unknown".into());
    let _ = writeln!(s, "NVML library    {} (loaded)", p.library);
    let _ = writeln!(s, "driver version  {}", or_q(&v.driver));
    let _ = writeln!(s, "NVML version    {}", or_q(&v.nvml));
    let _ = writeln!(s, "CUDA driver     {}", or_q(&v.cuda));
    let _ = writeln!(s, "GPUs            {}", p.devices.len());
    if p.devices.is_empty() {
        let _ = writeln!(
            s,
            "\nNVML sees no GPU. In a container, request nvidia.com/gpu (or run with the NVIDIA \
             container runtime) so the GPU and its device node are visible."
        );
    }
}

/// One GPU: what it is, its MIG mode and GPM, the tier of each of its entities and how to
/// get a better one, its processes and what it does not support.
fn device(s: &mut String, p: &Probe, d: &DeviceReport) {
    let Some(ident) = &d.ident else {
        let _ = writeln!(s, "GPU {}  not answering (lost or unreadable)", d.index);
        return;
    };
    identity(s, d.index, ident);
    let mine: Vec<&EntitySample> = p
        .entities
        .iter()
        .filter(|e| e.id.gpu == Some(d.index) && e.id.uuid.as_deref() == Some(&ident.uuid))
        .collect();
    let _ = writeln!(
        s,
        "  MIG mode        {}",
        match d.mig {
            Some(true) => format!(
                "enabled, {} GPU instance{} (no busy flag on MIG)",
                mine.len(),
                if mine.len() == 1 { "" } else { "s" }
            ),
            Some(false) => "disabled".into(),
            None => "not supported".into(),
        }
    );
    let _ = writeln!(s, "  GPM             {}", gpm_line(d));
    let worst = tiers(s, &mine);
    let _ = writeln!(
        s,
        "  better tier     {}",
        advice(d, worst, d.mig == Some(true))
    );
    let _ = writeln!(
        s,
        "  processes       {}",
        if d.processes.is_empty() {
            "none listed".to_string()
        } else {
            d.processes.len().to_string()
        }
    );
    for proc in &d.processes {
        let _ = writeln!(s, "    {}", process_line(proc));
    }
    if !d.unsupported.is_empty() {
        let _ = writeln!(s, "  not available   {}", d.unsupported.join(", "));
    }
}

/// A GPU's name, uuid, bus id, minor number, architecture and catalog model.
fn identity(s: &mut String, index: u32, ident: &Ident) {
    let _ = writeln!(s, "GPU {index}  {}", ident.name);
    let _ = writeln!(s, "  uuid            {}", ident.uuid);
    if let Some(pci) = &ident.pci_bus_id {
        let _ = writeln!(s, "  PCI bus id      {pci}");
    }
    if let Some(m) = ident.minor {
        let _ = writeln!(
            s,
            "  minor number    {m} (/dev/nvidia{m}; a DRA claim names it gpu-{m})"
        );
    }
    let _ = writeln!(
        s,
        "  architecture    {}",
        ident.architecture.as_deref().unwrap_or("unknown")
    );
    let _ = writeln!(
        s,
        "  catalog model   {}",
        ident.spec.map_or_else(
            || "unknown (no datasheet peaks: no clock correction)".to_string(),
            |sp| format!("{} ({})", sp.key, sp.name)
        )
    );
}

/// The fidelity tier and readings of each of a GPU's entities (the GPU, or its MIG
/// instances); returns the worst tier (`none` without any).
fn tiers(s: &mut String, mine: &[&EntitySample]) -> Fidelity {
    if mine.is_empty() {
        let _ = writeln!(s, "  fidelity tier   none (no readings)");
    }
    // The worst is the largest tier (`none` is the last).
    let mut worst = None;
    for e in mine {
        let tier = fidelity(&e.readings);
        worst = worst.max(Some(tier));
        match &e.id.mig {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "  instance {:<6} {}  fidelity tier {}",
                    m.gpu_instance,
                    m.profile.as_deref().unwrap_or("unknown profile"),
                    tier.as_str()
                );
                let _ = writeln!(s, "    readings      {}", readings_line(e));
            }
            None => {
                let _ = writeln!(s, "  fidelity tier   {}", tier.as_str());
                let _ = writeln!(s, "  readings        {}", readings_line(e));
            }
        }
    }
    worst.unwrap_or(Fidelity::None)
}

/// The variable that names the NVML library, as `serve` reads it.
const LIBRARY_VAR: &str = "TRUTHSCALE_SOURCE__LIBRARY";

/// `truthscale doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// The NVML library to load [default: TRUTHSCALE_SOURCE__LIBRARY where set and not
    /// empty, else libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::gpus;

    fn report(name: &str, arch: &str, gpm: GpmStatus) -> DeviceReport {
        DeviceReport {
            index: 0,
            ident: Some(Ident {
                uuid: "GPU-1".into(),
                name: name.into(),
                pci_bus_id: None,
                architecture: Some(arch.into()),
                spec: gpus::lookup(name),
                minor: Some(0),
            }),
            mig: Some(false),
            gpm,
            processes: Vec::new(),
            unsupported: Vec::new(),
        }
    }

    #[test]
    fn advice_per_case() {
        let a100 = report("NVIDIA A100-SXM4-80GB", "Ampere", GpmStatus::Unsupported);
        let a = advice(&a100, Fidelity::Nvml, false);
        assert!(a.starts_with("A100 80GB SXM has no GPM"), "{a}");
        assert!(a.contains("--source dcgm-exporter:URL"), "{a}");
        let h100 = report("NVIDIA H100 80GB HBM3", "Hopper", GpmStatus::Denied);
        let a = advice(&h100, Fidelity::Nvml, false);
        assert!(
            a.contains("NO_PERMISSION") && a.contains("CAP_SYS_ADMIN"),
            "{a}"
        );
        let h100 = report("NVIDIA H100 80GB HBM3", "Hopper", GpmStatus::Unsupported);
        assert!(advice(&h100, Fidelity::Nvml, false).contains("update the driver"));
        let ok = report(
            "NVIDIA H100 80GB HBM3",
            "Hopper",
            GpmStatus::Active { sampled: true },
        );
        assert!(advice(&ok, Fidelity::Profiling, false).starts_with("nothing to do"));
    }
}

//! The metric catalog: every exported metric name, its type, help and extra labels.
//!
//! This is the single source of truth for names: the exposition encoder only accepts a
//! [`MetricDesc`] from here, and `docs/metrics.md` is checked against it by a test.

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A monotonic total.
    Counter,
}

impl Kind {
    /// The `# TYPE` word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// Which label set a metric carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Per GPU entity: `gpu`, `uuid`, `model`, MIG and pod labels.
    Gpu,
    /// About the exporter itself.
    Exporter,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDesc {
    /// Full name (counters end in `_total`).
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// `# HELP` text.
    pub help: &'static str,
    /// Label set.
    pub scope: Scope,
    /// Labels beyond the scope's own (e.g. `phase`).
    pub extra_labels: &'static [&'static str],
}

macro_rules! metrics {
    ($( $id:ident = $name:literal, $kind:ident, $scope:ident, [$($l:literal),*], $help:literal; )+) => {
        $(
            #[doc = $help]
            pub const $id: MetricDesc = MetricDesc {
                name: $name,
                kind: Kind::$kind,
                help: $help,
                scope: Scope::$scope,
                extra_labels: &[$($l),*],
            };
        )+
        /// Every metric, in exposition order.
        pub const ALL: &[MetricDesc] = &[$($id),+];
    };
}

metrics! {
    GPU_INFO = "truthscale_gpu_info", Gauge, Gpu, ["source", "fidelity", "catalog_model"],
        "Identity of a GPU or MIG instance (value 1); source=\"sim\" marks simulated data.";
    GPU_REPORTED_UTILIZATION = "truthscale_gpu_reported_utilization_ratio", Gauge, Gpu, [],
        "Busy fraction as nvidia-smi reports it: time with at least one kernel resident.";
    GPU_EFFECTIVE_COMPUTE = "truthscale_gpu_effective_compute_ratio", Gauge, Gpu, [],
        "Effective compute fraction of the last window: clock-corrected tensor work over the datasheet dense peak.";
    GPU_EFFECTIVE_COMPUTE_UPPER_BOUND = "truthscale_gpu_effective_compute_upper_bound_ratio", Gauge, Gpu, [],
        "Upper bound on effective compute when no tensor counter exists (equals the busy fraction).";
    GPU_ROOFLINE_SATURATION = "truthscale_gpu_roofline_saturation_ratio", Gauge, Gpu, [],
        "Roofline saturation at the clocks the GPU ran: max(compute, DRAM activity).";
    GPU_INFLATION_GAP = "truthscale_gpu_inflation_gap_ratio", Gauge, Gpu, [],
        "Reported utilization minus effective compute (multiply by 100 for points).";
    GPU_SPATIAL_INFLATION = "truthscale_gpu_spatial_inflation_factor", Gauge, Gpu, [],
        "Reported utilization over SM active: how much the busy flag overstates SM coverage.";
    GPU_INTENSITY_RIDGE = "truthscale_gpu_intensity_ridge_ratio", Gauge, Gpu, [],
        "Operational intensity over the roofline ridge (rho = tensor / DRAM activity); above 1 is compute-bound.";
    GPU_POWER_PROXY = "truthscale_gpu_power_proxy_ratio", Gauge, Gpu, [],
        "Power above idle over the power range: an estimate of work intensity, not compute (below the profiling tier).";
    GPU_CLOCK_CORRECTION = "truthscale_gpu_clock_correction_ratio", Gauge, Gpu, [],
        "SM clock over the clock the datasheet peak assumes (kappa).";
    GPU_SM_ACTIVE = "truthscale_gpu_sm_active_ratio", Gauge, Gpu, [],
        "Raw SM active fraction, where the source provides it.";
    GPU_SM_OCCUPANCY = "truthscale_gpu_sm_occupancy_ratio", Gauge, Gpu, [],
        "Raw SM occupancy, where the source provides it.";
    GPU_TENSOR_ACTIVE = "truthscale_gpu_tensor_active_ratio", Gauge, Gpu, [],
        "Raw tensor pipe active fraction, where the source provides it.";
    GPU_DRAM_ACTIVE = "truthscale_gpu_dram_active_ratio", Gauge, Gpu, [],
        "Raw DRAM bandwidth fraction, where the source provides it.";
    GPU_OBSERVED_SECONDS = "truthscale_gpu_observed_seconds_total", Counter, Gpu, [],
        "Seconds covered by derived windows (the denominator for exact averages).";
    GPU_BUSY_SECONDS = "truthscale_gpu_busy_seconds_total", Counter, Gpu, [],
        "Integral of reported utilization over time, in seconds.";
    GPU_EFFECTIVE_COMPUTE_SECONDS = "truthscale_gpu_effective_compute_seconds_total", Counter, Gpu, [],
        "Integral of the effective compute fraction over time, in seconds.";
    GPU_PHASE_SECONDS = "truthscale_gpu_phase_seconds_total", Counter, Gpu, ["phase"],
        "Seconds spent in each phase.";
    GPU_PHASE = "truthscale_gpu_phase", Gauge, Gpu, ["phase"],
        "The current phase (1) and the others (0).";
    GPU_MEMORY_USED = "truthscale_gpu_memory_used_bytes", Gauge, Gpu, [],
        "Allocated device memory.";
    GPU_MEMORY_TOTAL = "truthscale_gpu_memory_total_bytes", Gauge, Gpu, [],
        "Total device memory.";
    GPU_POWER = "truthscale_gpu_power_watts", Gauge, Gpu, [],
        "Power over the last window (from the energy counter when available).";
    GPU_POWER_LIMIT = "truthscale_gpu_power_limit_watts", Gauge, Gpu, [],
        "Enforced power limit.";
    GPU_ENERGY = "truthscale_gpu_energy_joules_total", Counter, Gpu, [],
        "Energy consumed since the exporter first saw the GPU.";
    GPU_SM_CLOCK = "truthscale_gpu_sm_clock_hertz", Gauge, Gpu, [],
        "SM clock.";
    GPU_TEMPERATURE = "truthscale_gpu_temperature_celsius", Gauge, Gpu, [],
        "GPU temperature.";
    GPU_CLOCK_EVENT = "truthscale_gpu_clock_event_active", Gauge, Gpu, ["reason"],
        "Clock-event (throttle) reasons active in the last window (1) or not (0).";
    SIM_TRUTH_EFFECTIVE_COMPUTE_SECONDS = "truthscale_sim_truth_effective_compute_seconds_total", Counter, Gpu, [],
        "Simulator only: the true integral of effective compute, to check the derived one against.";
    BUILD_INFO = "truthscale_build_info", Gauge, Exporter, ["version"],
        "Build of the running exporter (value 1).";
    SOURCE_UP = "truthscale_source_up", Gauge, Exporter, ["source"],
        "Whether the counter source produced a sample recently (1) or went stale (0).";
    SOURCE_ERRORS = "truthscale_source_errors_total", Counter, Exporter, ["source", "kind"],
        "Failed sampling attempts by kind.";
    SAMPLE_DURATION = "truthscale_sample_duration_seconds", Gauge, Exporter, [],
        "Time the last sampling and derivation tick took.";
    DIAGNOSTICS = "truthscale_derivation_diagnostics_total", Counter, Exporter, ["kind"],
        "Readings dropped, clamped or skipped during derivation, by kind.";
    SNAPSHOT_TIMESTAMP = "truthscale_snapshot_timestamp_seconds", Gauge, Exporter, [],
        "Unix time of the snapshot being served.";
    SCRAPE_BODY = "truthscale_scrape_body_bytes", Gauge, Exporter, [],
        "Size of the previous tick's /metrics body.";
}

/// The catalog entry with this name.
#[must_use]
pub fn by_name(name: &str) -> Option<&'static MetricDesc> {
    ALL.iter().find(|m| m.name == name)
}

/// Labels every GPU-scoped series may carry, in order.
pub const GPU_LABELS: &[&str] = &[
    "gpu",
    "uuid",
    "model",
    "mig_instance",
    "mig_profile",
    "pod",
    "namespace",
    "container",
    "node",
];

/// The catalog as a Markdown table (the body of `docs/metrics.md`).
#[must_use]
pub fn markdown_table() -> String {
    let mut out = String::from("| name | type | labels | meaning |\n|---|---|---|---|\n");
    for m in ALL {
        let mut labels: Vec<&str> = match m.scope {
            Scope::Gpu => GPU_LABELS.to_vec(),
            Scope::Exporter => Vec::new(),
        };
        labels.extend_from_slice(m.extra_labels);
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            m.name,
            m.kind.as_str(),
            labels,
            m.help.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_conventions() {
        let mut seen = std::collections::HashSet::new();
        for m in ALL {
            assert!(seen.insert(m.name), "duplicate {}", m.name);
            assert!(m.name.starts_with("truthscale_"), "{}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            assert!(
                m.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            );
            assert!(!m.help.is_empty());
        }
        assert_eq!(by_name("truthscale_gpu_info"), Some(&GPU_INFO));
    }
}

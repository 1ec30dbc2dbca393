//! Counter sources. Each produces raw [`Sample`]s and derives nothing.
//!
//! Sources are synchronous: the sampler runs them on its own thread, never on the scrape
//! path. `auto` is NVML when the library loads. Each source owns its configuration
//! ([`SourceConfig`]), which builds it, and implements [`Source`].

use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use truthscale_core::model::{EntityKey, Sample};

pub mod dcgm_exporter;
pub mod engine;
pub mod null;
pub mod nvml;
pub mod replay;
pub mod sim;

pub use dcgm_exporter::DcgmExporterSource;
pub use nvml::NvmlSource;
pub use replay::ReplaySource;
pub use sim::SimSource;

/// A counter source: it produces raw samples when asked and derives nothing. The sampler
/// calls it on its own thread, never on the scrape path, and never asks which source it is.
pub trait Source: Send + std::fmt::Debug {
    /// The `source` label value (`sim`, `replay`, `nvml`, `dcgm_exporter`, …).
    fn name(&self) -> &'static str;
    /// The length of the window each sample covers, when the source knows it; `None` lets
    /// the deriver learn it from the samples' own spacing.
    fn window(&self) -> Option<Duration>;
    /// Produce what is due at wall time `now`.
    fn sample(&mut self, now: SystemTime) -> Produced;
}

/// What every source's configuration may draw on, as the configuration resolved it.
#[derive(Debug, Clone, PartialEq)]
pub struct Common {
    /// Sampling interval.
    pub interval: Duration,
    /// Simulated GPUs.
    pub sim_gpus: u32,
    /// Simulated model.
    pub sim_gpu_model: &'static truthscale_core::gpus::GpuSpec,
    /// Simulator seed.
    pub seed: u64,
    /// This node's name, when known.
    pub node: Option<String>,
    /// Loop replays.
    pub replay_loop: bool,
    /// Replay spacing for captures without timestamps.
    pub replay_interval: Duration,
    /// dcgm-exporter scrape timeout.
    pub scrape_timeout: Duration,
    /// GPU UUIDs to keep (dcgm-exporter).
    pub gpu_uuids: Vec<String>,
    /// GPU indices to keep (dcgm-exporter).
    pub gpu_indices: Vec<u32>,
    /// The NVML library.
    pub nvml_library: PathBuf,
    /// Per-process series on (NVML).
    pub per_process_series: bool,
    /// `NODE_IP` (the default dcgm-exporter URL).
    pub node_ip: Option<String>,
    /// `NVIDIA_VISIBLE_DEVICES` (dcgm-exporter scope fallback).
    pub nvidia_visible_devices: Option<String>,
    /// This pod's name and namespace (dcgm-exporter scope).
    pub pod: Option<String>,
    /// This pod's namespace.
    pub namespace: Option<String>,
}

/// The configured source: one variant per source, each holding that source's own
/// configuration, which builds it. Adding a source is its file and one arm in each match here.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceConfig {
    /// The simulated GPU.
    Sim(sim::SimConfig),
    /// A capture replayed at its recorded pace.
    Replay(replay::ReplayConfig),
    /// NVML in-process (`auto` too).
    Nvml(nvml::NvmlConfig),
    /// A live dcgm-exporter.
    DcgmExporter(dcgm_exporter::DcgmExporterConfig),
    /// Nothing: a source that never produces a sample (for tests and embedding).
    Null(null::NullConfig),
}

impl SourceConfig {
    /// The configuration `spec` (`sim[:SCENARIO]`, `replay:PATH`, `nvml`, `auto`,
    /// `dcgm-exporter[:URL]`, `null`) names, with the settings in `common`.
    ///
    /// # Errors
    /// A message saying what is accepted.
    pub fn from_spec(spec: &str, common: &Common) -> Result<SourceConfig, String> {
        let s = spec.trim();
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match kind {
            "sim" => sim::SimConfig::from_spec(arg, common).map(SourceConfig::Sim),
            "replay" => replay::ReplayConfig::from_spec(arg, common).map(SourceConfig::Replay),
            "nvml" | "auto" => {
                nvml::NvmlConfig::from_spec(kind == "auto", arg, common).map(SourceConfig::Nvml)
            }
            "dcgm-exporter" => dcgm_exporter::DcgmExporterConfig::from_spec(arg, common)
                .map(SourceConfig::DcgmExporter),
            "null" => null::NullConfig::from_spec(arg, common).map(SourceConfig::Null),
            _ => Err(format!(
                "{s:?} is not a source; use sim[:SCENARIO], replay:PATH, nvml, dcgm-exporter:URL, auto or null"
            )),
        }
    }

    /// Build the source.
    ///
    /// # Errors
    /// [`BuildError`] for an NVML that cannot be loaded or replay files that cannot be used.
    pub fn build(&self, now: SystemTime) -> Result<Box<dyn Source>, BuildError> {
        match self {
            SourceConfig::Sim(c) => c.build(now),
            SourceConfig::Replay(c) => c.build(now),
            SourceConfig::Nvml(c) => c.build(now),
            SourceConfig::DcgmExporter(c) => c.build(now),
            SourceConfig::Null(c) => c.build(now),
        }
    }
}

/// Why a source could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// NVML could not be loaded or initialized (the message says what to do).
    #[error("{0}")]
    Nvml(String),
    /// A replay file could not be opened or recognised.
    #[error("{path}: {message}")]
    Replay {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Why a sampling attempt failed, or a value was dropped.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Input could not be read.
    #[error("read error: {0}")]
    Io(String),
    /// Input was malformed.
    #[error("{0}")]
    Parse(String),
    /// The endpoint could not be reached (refused, timed out, DNS).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The endpoint answered with an error status.
    #[error("{0}")]
    Http(String),
    /// A DCGM sentinel value was dropped.
    #[error("sentinel value dropped: {0}")]
    Sentinel(String),
    /// NVML refused (`NVML_ERROR_NO_PERMISSION`), e.g. GPM in an unprivileged container.
    #[error("no permission: {0}")]
    NoPermission(String),
    /// A GPU fell off the bus (`NVML_ERROR_GPU_IS_LOST`).
    #[error("{0}")]
    GpuLost(String),
    /// The GPU or driver cannot provide a value (counted once per GPU and function).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Any other NVML error.
    #[error("NVML: {0}")]
    Nvml(String),
}

impl SourceError {
    /// The `kind` label value.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            SourceError::Io(_) => "io",
            SourceError::Parse(_) => "parse",
            SourceError::Unreachable(_) => "unreachable",
            SourceError::Http(_) => "http",
            SourceError::Sentinel(_) => "sentinel",
            SourceError::NoPermission(_) => "no_permission",
            SourceError::GpuLost(_) => "gpu_lost",
            SourceError::Unsupported(_) => "unsupported",
            SourceError::Nvml(_) => "nvml",
        }
    }
}

/// What one sampling call produced.
#[derive(Debug, Default)]
pub struct Produced {
    /// Samples, oldest first (possibly none this tick).
    pub samples: Vec<Sample>,
    /// Non-fatal problems met while producing them.
    pub errors: Vec<SourceError>,
    /// Entities seen again with unchanged readings (alive, but nothing new to derive).
    pub unchanged: Vec<EntityKey>,
}

/// dcgm-exporter on this node: `http://$NODE_IP:9400/metrics`, else localhost.
#[must_use]
pub fn default_dcgm_url(node_ip: Option<&str>) -> String {
    match node_ip.filter(|ip| !ip.is_empty()) {
        Some(ip) if ip.contains(':') => format!("http://[{ip}]:9400/metrics"),
        Some(ip) => format!("http://{ip}:9400/metrics"),
        None => "http://127.0.0.1:9400/metrics".into(),
    }
}

/// Milliseconds since the Unix epoch of a wall time (0 before 1970).
#[must_use]
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::sim::Scenario;

    pub(crate) fn common() -> Common {
        Common {
            interval: Duration::from_secs(1),
            sim_gpus: 2,
            sim_gpu_model: truthscale_core::gpus::by_key("h100-sxm").unwrap(),
            seed: 1,
            node: Some("n1".into()),
            replay_loop: false,
            replay_interval: Duration::from_secs(1),
            scrape_timeout: Duration::from_secs(1),
            gpu_uuids: Vec::new(),
            gpu_indices: Vec::new(),
            nvml_library: "libnvidia-ml.so.1".into(),
            per_process_series: false,
            node_ip: Some("10.1.2.3".into()),
            nvidia_visible_devices: None,
            pod: None,
            namespace: None,
        }
    }

    #[test]
    fn specs_parse() {
        let c = common();
        let parse = |s: &str| SourceConfig::from_spec(s, &c);
        match parse("sim:tiny-kernel") {
            Ok(SourceConfig::Sim(s)) => {
                assert_eq!(s.scenario, Some(Scenario::TinyKernel));
                assert_eq!(s.gpus, 2);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse("sim"), Ok(SourceConfig::Sim(s)) if s.scenario.is_none()));
        assert!(
            matches!(parse("replay:/x.txt"), Ok(SourceConfig::Replay(r)) if r.path == std::path::Path::new("/x.txt"))
        );
        assert!(matches!(parse("nvml"), Ok(SourceConfig::Nvml(n)) if !n.auto));
        assert!(matches!(parse("auto"), Ok(SourceConfig::Nvml(n)) if n.auto));
        assert!(matches!(parse("null"), Ok(SourceConfig::Null(_))));
        assert!(matches!(
            parse("dcgm-exporter:http://10.0.0.1:9400/metrics"),
            Ok(SourceConfig::DcgmExporter(d)) if d.url == "http://10.0.0.1:9400/metrics"
        ));
        // Without a URL: this node's dcgm-exporter.
        assert!(matches!(
            parse("dcgm-exporter"),
            Ok(SourceConfig::DcgmExporter(d)) if d.url == "http://10.1.2.3:9400/metrics"
        ));
        assert!(parse("dcgm-exporter:localhost:9400").is_err());
        assert_eq!(
            default_dcgm_url(Some("10.1.2.3")),
            "http://10.1.2.3:9400/metrics"
        );
        assert_eq!(
            default_dcgm_url(Some("fd00::1")),
            "http://[fd00::1]:9400/metrics"
        );
        assert_eq!(default_dcgm_url(None), "http://127.0.0.1:9400/metrics");
        assert!(parse("sim:nope").unwrap_err().contains("llm-serving"));
        assert!(parse("replay:").is_err());
        assert!(parse("null:x").is_err());
        assert!(parse("gpu").unwrap_err().contains("is not a source"));
    }
}

//! Counter sources. Each produces raw [`Sample`]s and derives nothing.
//!
//! Sources are synchronous: the sampler runs them on its own thread, never on the scrape
//! path. `auto` is NVML when the library loads.

use std::path::PathBuf;
use std::time::SystemTime;
use truthscale_core::model::{EntityKey, Sample, SourceKind};
use truthscale_core::sim::Scenario;

pub mod dcgm_exporter;
pub mod nvml;
pub mod replay;
pub mod sim;

pub use dcgm_exporter::DcgmExporterSource;
pub use nvml::NvmlSource;
pub use replay::ReplaySource;
pub use sim::SimSource;

/// The `--source` value, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// The simulated GPU; one scenario for every GPU, or a contrasting mix.
    Sim {
        /// The scenario, when one was named.
        scenario: Option<Scenario>,
    },
    /// A capture replayed at its recorded pace.
    Replay {
        /// The capture.
        path: PathBuf,
    },
    /// NVML in-process.
    Nvml,
    /// A live dcgm-exporter.
    DcgmExporter {
        /// Its `/metrics` URL; `None` means `http://$NODE_IP:9400/metrics`, else localhost.
        url: Option<String>,
    },
    /// NVML when the library loads, else a start error saying what to do.
    Auto,
}

impl SourceSpec {
    /// Parse `sim[:SCENARIO]`, `replay:PATH`, `nvml`, `dcgm-exporter:URL` or `auto`.
    ///
    /// # Errors
    /// A message saying what is accepted.
    pub fn parse(s: &str) -> Result<SourceSpec, String> {
        let s = s.trim();
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind, arg) {
            ("sim", None) => Ok(SourceSpec::Sim { scenario: None }),
            ("sim", Some(name)) => Scenario::from_name(name)
                .map(|sc| SourceSpec::Sim { scenario: Some(sc) })
                .ok_or_else(|| {
                    let names: Vec<_> = Scenario::ALL.iter().map(|s| s.as_str()).collect();
                    format!(
                        "unknown scenario {name:?}; choose one of {}",
                        names.join(", ")
                    )
                }),
            ("replay", Some(p)) if !p.is_empty() => Ok(SourceSpec::Replay { path: p.into() }),
            ("nvml", None) => Ok(SourceSpec::Nvml),
            ("auto", None) => Ok(SourceSpec::Auto),
            ("dcgm-exporter", None) => Ok(SourceSpec::DcgmExporter { url: None }),
            ("dcgm-exporter", Some(url))
                if url.starts_with("http://") || url.starts_with("https://") =>
            {
                Ok(SourceSpec::DcgmExporter {
                    url: Some(url.to_string()),
                })
            }
            _ => Err(format!(
                "{s:?} is not a source; use sim[:SCENARIO], replay:PATH, nvml, dcgm-exporter:URL or auto"
            )),
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

/// Any source, dispatched statically.
#[derive(Debug)]
pub enum AnySource {
    /// The simulator.
    Sim(SimSource),
    /// A replay (boxed: it holds a reader and a parser).
    Replay(Box<ReplaySource>),
    /// A live dcgm-exporter.
    DcgmExporter(Box<DcgmExporterSource>),
    /// NVML in-process.
    Nvml(Box<NvmlSource>),
}

impl AnySource {
    /// The source label.
    #[must_use]
    pub fn kind(&self) -> SourceKind {
        match self {
            AnySource::Sim(_) => SourceKind::Sim,
            AnySource::Replay(_) => SourceKind::Replay,
            AnySource::DcgmExporter(_) => SourceKind::DcgmExporter,
            AnySource::Nvml(_) => SourceKind::Nvml,
        }
    }

    /// Produce what is due at wall time `now`.
    pub fn sample(&mut self, now: SystemTime) -> Produced {
        match self {
            AnySource::Sim(s) => s.sample(now),
            AnySource::Replay(r) => r.sample(now),
            AnySource::DcgmExporter(d) => d.sample(now),
            AnySource::Nvml(n) => n.sample(now),
        }
    }
}

/// Build the source the settings ask for.
///
/// # Errors
/// [`BuildError`] for an NVML that cannot be loaded or replay files that cannot be used.
pub fn build(settings: &crate::config::Settings, now: SystemTime) -> Result<AnySource, BuildError> {
    match &settings.source {
        SourceSpec::Sim { scenario } => Ok(AnySource::Sim(SimSource::new(
            settings.sim_gpus,
            settings.sim_gpu_model,
            settings.seed,
            *scenario,
            settings.identity.node.as_deref().unwrap_or("sim-node"),
            now,
            settings.interval,
        ))),
        SourceSpec::Replay { path } => Ok(AnySource::Replay(Box::new(ReplaySource::open(
            path,
            settings.replay_interval,
            settings.replay_loop,
            now,
        )?))),
        SourceSpec::Nvml => build_nvml(settings, ""),
        SourceSpec::Auto => build_nvml(
            settings,
            "--source auto found no usable NVML (it reads NVML when the library loads): ",
        ),
        SourceSpec::DcgmExporter { url } => {
            let url = url
                .clone()
                .unwrap_or_else(|| default_dcgm_url(settings.node_ip.as_deref()));
            let id = &settings.identity;
            let scope = dcgm_exporter::Scope::choose(
                &settings.gpu_uuids,
                &settings.gpu_indices,
                id.pod.as_deref(),
                id.namespace.as_deref(),
                settings.nvidia_visible_devices.as_deref(),
            );
            tracing::info!(url = %url, scope = ?scope, "Reading dcgm-exporter.");
            Ok(AnySource::DcgmExporter(Box::new(DcgmExporterSource::new(
                &url,
                settings.scrape_timeout,
                scope,
            ))))
        }
    }
}

fn build_nvml(settings: &crate::config::Settings, prefix: &str) -> Result<AnySource, BuildError> {
    NvmlSource::open_with(
        &settings.nvml_library,
        settings.interval,
        settings.identity.node.clone(),
        settings.per_process_series,
    )
    .map(|s| AnySource::Nvml(Box::new(s)))
    .map_err(|e| BuildError::Nvml(format!("{prefix}{e}")))
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

    #[test]
    fn specs_parse() {
        assert_eq!(
            SourceSpec::parse("sim"),
            Ok(SourceSpec::Sim { scenario: None })
        );
        assert_eq!(
            SourceSpec::parse("sim:tiny-kernel"),
            Ok(SourceSpec::Sim {
                scenario: Some(Scenario::TinyKernel)
            })
        );
        assert_eq!(
            SourceSpec::parse("replay:/x.txt"),
            Ok(SourceSpec::Replay {
                path: "/x.txt".into()
            })
        );
        assert_eq!(SourceSpec::parse("nvml"), Ok(SourceSpec::Nvml));
        assert_eq!(
            SourceSpec::parse("dcgm-exporter:http://10.0.0.1:9400/metrics"),
            Ok(SourceSpec::DcgmExporter {
                url: Some("http://10.0.0.1:9400/metrics".into())
            })
        );
        assert_eq!(
            SourceSpec::parse("dcgm-exporter"),
            Ok(SourceSpec::DcgmExporter { url: None })
        );
        assert!(SourceSpec::parse("dcgm-exporter:localhost:9400").is_err());
        assert_eq!(
            default_dcgm_url(Some("10.1.2.3")),
            "http://10.1.2.3:9400/metrics"
        );
        assert_eq!(
            default_dcgm_url(Some("fd00::1")),
            "http://[fd00::1]:9400/metrics"
        );
        assert_eq!(default_dcgm_url(None), "http://127.0.0.1:9400/metrics");
        assert!(
            SourceSpec::parse("sim:nope")
                .unwrap_err()
                .contains("llm-serving")
        );
        assert!(SourceSpec::parse("replay:").is_err());
        assert!(SourceSpec::parse("gpu").is_err());
    }
}

//! Counter sources. Each produces raw [`Sample`]s and derives nothing.
//!
//! Sources are synchronous: the sampler runs them on its own thread, never on the scrape
//! path. `auto`, the default, is NVML when the library loads, and an error naming the other
//! sources when it does not: the simulator runs only when asked for. Each source owns its
//! configuration ([`SourceConfig`]), which builds it, and implements [`Source`].

use crate::setting::Invalid;
use std::time::{Duration, SystemTime};
use truthscale_core::model::{EntityKey, Sample};

pub mod dcgm_exporter;
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
    /// How often the source updates its readings, when it declares it: each entity's first
    /// window lasts that long, and a window longer than `derive.max_gap_intervals` of them is
    /// a gap (not observed). `None`: a first window lasts as long as the entity's next
    /// spacing, and gaps are told from each entity's own cadence. Window lengths always come
    /// from the samples' own timestamps.
    fn update_interval(&self) -> Option<Duration>;
    /// Produce what is due at wall time `now`.
    fn sample(&mut self, now: SystemTime) -> Produced;
}

/// What a source may draw on besides its own settings, as the configuration resolved it
/// (the sampling interval, this pod's identity, the node's environment).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Context {
    /// Sampling interval.
    pub interval: Duration,
    /// The stale period: a tick not ended within it (and an interval) is served stale.
    pub stale_after: Duration,
    /// This node's name, when known.
    pub node: Option<String>,
    /// This pod's name, when known.
    pub pod: Option<String>,
    /// This pod's namespace, when known.
    pub namespace: Option<String>,
    /// `NODE_IP` (the default dcgm-exporter URL).
    pub node_ip: Option<String>,
    /// `NVIDIA_VISIBLE_DEVICES` (the dcgm-exporter scope fallback).
    pub nvidia_visible_devices: Option<String>,
}

/// The longest a read may wait and each tick still be published within the watchdog's limit
/// of the one before (the stale period plus an interval): the stale period's whole
/// intervals less half an interval (2.5 s at the default 1 s interval and 3 s stale period).
///
/// A tick starts on a slot of the interval and the next starts on the first slot after it
/// ends. While every read waits `t`, two publications are `ceil((t + ε) / interval)`
/// intervals apart (ε the tick's own work, under half an interval): at this bound at most
/// the stale period, an interval inside the limit. Where a quick tick is followed by the
/// first that waits, they are an interval plus `t + ε` apart: inside the limit by half an
/// interval less ε. A read as long as the stale period itself put every two of them a
/// stale period and an interval apart, the limit itself, and each tick was served stale,
/// then fresh, by turns.
#[must_use]
pub(crate) fn longest_read(interval: Duration, stale_after: Duration) -> Duration {
    let whole = stale_after.as_nanos() / interval.as_nanos().max(1);
    let whole = u32::try_from(whole.max(1)).unwrap_or(u32::MAX);
    interval.saturating_mul(whole) - interval / 2
}

/// One source's own settings: a table in `[source]` (beside `kind`), which checks itself and
/// builds the source.
pub(crate) trait SourceSettings {
    /// The setting that the argument of the `--source KIND:ARG` shorthand fills, when the
    /// kind takes one (`replay:PATH` fills `path`).
    const ARG: Option<&'static str>;
    /// Check every value, naming the key (`source.gpus`).
    ///
    /// # Errors
    /// The first setting that cannot be used.
    fn check(&self) -> Result<(), Invalid>;
    /// Check the settings against the sampling `interval` and the stale period
    /// `stale_after`: a read that could hang past [`longest_read`] would have each tick
    /// served stale, then fresh, by turns.
    ///
    /// # Errors
    /// The setting that lets a read outlast [`longest_read`].
    fn check_within(&self, _interval: Duration, _stale_after: Duration) -> Result<(), Invalid> {
        Ok(())
    }
    /// Build the source.
    ///
    /// # Errors
    /// A [`BuildError`] saying what to do.
    fn build(&self, context: &Context, now: SystemTime) -> Result<Box<dyn Source>, BuildError>;
    /// What `config check` can tell about this machine without starting the source: for a
    /// kind whose source depends on it (`auto`), which source it would be, as a phrase.
    ///
    /// # Errors
    /// The [`BuildError`] the start would meet.
    fn probe(&self) -> Result<Option<String>, BuildError> {
        Ok(None)
    }
}

/// The sources: `kind` name → variant (its own settings struct). The one list a new source
/// joins; the enum, its TOML tag and every dispatch are generated from it.
macro_rules! sources {
    ($($(#[$doc:meta])* $name:literal => $variant:ident($ty:ty),)*) => {
        /// `[source]`: which source (`kind`) and its own settings, one variant per source.
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(tag = "kind")]
        pub enum SourceConfig {
            $($(#[$doc])* #[serde(rename = $name)] $variant($ty),)*
        }

        impl SourceConfig {
            /// Every `kind`.
            pub const KINDS: &'static [&'static str] = &[$($name),*];

            /// This source's `kind`.
            #[must_use]
            pub fn kind(&self) -> &'static str {
                match self {
                    $(SourceConfig::$variant(_) => $name,)*
                }
            }

            /// The setting a `KIND:ARG` argument fills: `None` for an unknown kind,
            /// `Some(None)` for a kind that takes no argument.
            fn arg_key(kind: &str) -> Option<Option<&'static str>> {
                match kind {
                    $($name => Some(<$ty as SourceSettings>::ARG),)*
                    _ => None,
                }
            }

            /// Check the source's own settings.
            ///
            /// # Errors
            /// The first setting that cannot be used, naming its key.
            pub(crate) fn check(&self) -> Result<(), Invalid> {
                match self {
                    $(SourceConfig::$variant(c) => c.check(),)*
                }
            }

            /// Check the source's settings against the interval and the stale period
            /// ([`longest_read`]).
            ///
            /// # Errors
            /// The setting that lets a read outlast it, naming its key.
            pub(crate) fn check_within(
                &self,
                interval: Duration,
                stale_after: Duration,
            ) -> Result<(), Invalid> {
                match self {
                    $(SourceConfig::$variant(c) => c.check_within(interval, stale_after),)*
                }
            }

            /// What this machine makes of the source, when its kind depends on it
            /// (`config check`).
            ///
            /// # Errors
            /// The [`BuildError`] the start would meet.
            pub(crate) fn probe(&self) -> Result<Option<String>, BuildError> {
                match self {
                    $(SourceConfig::$variant(c) => c.probe(),)*
                }
            }

            /// Build the source.
            ///
            /// # Errors
            /// [`BuildError`] for an NVML that cannot be loaded or replay files that cannot
            /// be used.
            pub(crate) fn build(
                &self,
                context: &Context,
                now: SystemTime,
            ) -> Result<Box<dyn Source>, BuildError> {
                match self {
                    $(SourceConfig::$variant(c) => c.build(context, now),)*
                }
            }
        }
    };
}

sources! {
    /// The simulated GPU.
    "sim" => Sim(sim::SimConfig),
    /// A capture replayed at its recorded pace.
    "replay" => Replay(replay::ReplayConfig),
    /// NVML in-process.
    "nvml" => Nvml(nvml::NvmlConfig),
    /// NVML when the library loads, else an error naming the other sources; the default.
    "auto" => Auto(nvml::AutoConfig),
    /// A live dcgm-exporter.
    "dcgm-exporter" => DcgmExporter(dcgm_exporter::DcgmExporterConfig),
    /// Nothing: a source that never produces a sample (for tests and embedding).
    "null" => Null(null::NullConfig),
}

/// No source configured: NVML when a driver is present, else a start error naming the
/// choices; never the simulator, which runs only when asked for.
impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig::Auto(nvml::AutoConfig::default())
    }
}

impl SourceConfig {
    /// The settings the `--source` shorthand `KIND[:ARG]` stands for (`sim:tiny-kernel` is
    /// `kind = "sim"` and `scenario = "tiny-kernel"`), as dotted keys.
    ///
    /// # Errors
    /// An unknown kind, or an argument the kind does not take; the message says what is
    /// accepted.
    pub(crate) fn shorthand(spec: &str) -> Result<Vec<(&'static str, String)>, String> {
        let s = spec.trim();
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let Some(arg_key) = SourceConfig::arg_key(kind) else {
            return Err(format!(
                "{s:?} is not a source; use one of {} (sim:SCENARIO, replay:PATH, dcgm-exporter:URL)",
                SourceConfig::KINDS.join(", ")
            ));
        };
        let mut out = vec![("source.kind", kind.to_string())];
        match (arg, arg_key) {
            (None, _) => {}
            (Some(a), Some(key)) => out.push((key, a.to_string())),
            (Some(a), None) => {
                return Err(format!("{kind}:{a}: {kind} takes no argument"));
            }
        }
        Ok(out)
    }
}

/// Why a source could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// NVML could not be loaded or initialized (the message says what to do).
    #[error("{0}")]
    Nvml(String),
    /// A setting cannot be used (checked again when built outside the configuration).
    #[error("{key}: {message}")]
    Invalid {
        /// The dotted key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A replay file could not be opened or recognised.
    #[error("{path}: {message}")]
    Replay {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl From<Invalid> for BuildError {
    fn from(e: Invalid) -> BuildError {
        BuildError::Invalid {
            key: e.key,
            message: e.message,
        }
    }
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
    /// The endpoint did not answer completely within its timeout.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The answer was larger than the limit, and was not read.
    #[error("{0}")]
    TooLarge(String),
    /// A tick took longer than the sampling interval (the cadence slipped).
    #[error("{0}")]
    Overrun(String),
    /// Part of an answer was over a reader's cap (entities, label values, label sets, pods,
    /// holders, processes) and was left out.
    #[error("over limit: {0}")]
    OverLimit(String),
    /// The endpoint answered with an error status.
    #[error("{0}")]
    Http(String),
    /// A DCGM sentinel value was dropped.
    #[error("sentinel value dropped: {0}")]
    Sentinel(String),
    /// A reading no GPU gives (negative free memory, a clock-event bitmask that is no whole
    /// number) was dropped.
    #[error("impossible reading dropped: {0}")]
    Impossible(String),
    /// A cumulative counter went backwards (wrapped, or reset with the driver): no rate
    /// across it, the counter read again from there.
    #[error("counter reset: {0}")]
    Reset(String),
    /// A DCGM family (metric or column) truthscale does not read: counted once per family
    /// and source, named in the log.
    #[error("not read: {0}")]
    UnreadFamily(String),
    /// A reading refused because its unit (percent or 0..1 ratio) could not be told.
    #[error("ambiguous unit: {0}")]
    AmbiguousUnit(String),
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
    /// The same error, its message rewritten by `f` (a URL's password taken out).
    #[must_use]
    pub fn map_message(self, f: impl FnOnce(&str) -> String) -> SourceError {
        use SourceError as E;
        match self {
            E::Io(m) => E::Io(f(&m)),
            E::Parse(m) => E::Parse(f(&m)),
            E::Unreachable(m) => E::Unreachable(f(&m)),
            E::Timeout(m) => E::Timeout(f(&m)),
            E::TooLarge(m) => E::TooLarge(f(&m)),
            E::Overrun(m) => E::Overrun(f(&m)),
            E::OverLimit(m) => E::OverLimit(f(&m)),
            E::Http(m) => E::Http(f(&m)),
            E::Sentinel(m) => E::Sentinel(f(&m)),
            E::Impossible(m) => E::Impossible(f(&m)),
            E::Reset(m) => E::Reset(f(&m)),
            E::UnreadFamily(m) => E::UnreadFamily(f(&m)),
            E::AmbiguousUnit(m) => E::AmbiguousUnit(f(&m)),
            E::NoPermission(m) => E::NoPermission(f(&m)),
            E::GpuLost(m) => E::GpuLost(f(&m)),
            E::Unsupported(m) => E::Unsupported(f(&m)),
            E::Nvml(m) => E::Nvml(f(&m)),
        }
    }

    /// What to do about it, for the kinds with one remedy (logged beside the error).
    #[must_use]
    pub fn advice(&self) -> Option<&'static str> {
        match self {
            SourceError::NoPermission(_) => Some(
                "the driver refuses this call to truthscale's process: give it read access to /dev/nvidiactl and /dev/nvidia<N> (a container requesting nvidia.com/gpu, or the NVIDIA container runtime with NVIDIA_VISIBLE_DEVICES); GPM refusals in some containers went away with --privileged; `truthscale doctor` says which case applies (docs/nvml.md, Permissions and containers)",
            ),
            SourceError::GpuLost(_) => Some(
                "the GPU fell off the bus: drain the node's GPU workloads, then reset the GPU (nvidia-smi -r) or reboot; `dmesg | grep -i xid` shows the driver's view (docs/runbooks.md, TruthscaleGPUUnavailable)",
            ),
            _ => None,
        }
    }

    /// The `kind` label value.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            SourceError::Io(_) => "io",
            SourceError::Parse(_) => "parse",
            SourceError::Unreachable(_) => "unreachable",
            SourceError::Timeout(_) => "timeout",
            SourceError::TooLarge(_) => "too_large",
            SourceError::Overrun(_) => "overrun",
            SourceError::OverLimit(_) => "over_limit",
            SourceError::Http(_) => "http",
            SourceError::Sentinel(_) => "sentinel",
            SourceError::Impossible(_) => "impossible",
            SourceError::Reset(_) => "reset",
            SourceError::UnreadFamily(_) => "unread_family",
            SourceError::AmbiguousUnit(_) => "ambiguous_unit",
            SourceError::NoPermission(_) => "no_permission",
            SourceError::GpuLost(_) => "gpu_lost",
            SourceError::Unsupported(_) => "unsupported",
            SourceError::Nvml(_) => "nvml",
        }
    }
}

impl From<crate::client::FetchError> for SourceError {
    fn from(e: crate::client::FetchError) -> SourceError {
        use crate::client::FetchError;
        match e {
            FetchError::Unreachable { .. } => SourceError::Unreachable(e.to_string()),
            FetchError::Timeout { .. } => SourceError::Timeout(e.to_string()),
            FetchError::Status { .. } | FetchError::Redirect { .. } => {
                SourceError::Http(e.to_string())
            }
            FetchError::TooLarge { .. } => SourceError::TooLarge(e.to_string()),
            FetchError::NotText { .. } => SourceError::Parse(e.to_string()),
            FetchError::Body { .. } => SourceError::Io(e.to_string()),
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
    /// Entities seen again too soon to read a new window (alive, but nothing to derive).
    pub unchanged: Vec<EntityKey>,
    /// The samples (their indices in `samples`, ascending) before which a line of the
    /// source's input was malformed and not read: whose time that line held is not known,
    /// so it is never the next sample's (`Deriver::line_lost`). A replay's only.
    pub lost_before: Vec<usize>,
}

/// dcgm-exporter on this node: `http://$NODE_IP:9400/metrics`, else localhost.
#[must_use]
pub(crate) fn default_dcgm_url(node_ip: Option<&str>) -> String {
    match node_ip.filter(|ip| !ip.is_empty()) {
        Some(ip) if ip.contains(':') => format!("http://[{ip}]:9400/metrics"),
        Some(ip) => format!("http://{ip}:9400/metrics"),
        None => "http://127.0.0.1:9400/metrics".into(),
    }
}

/// How a source error of one kind is made from its message.
type ErrorOf = fn(String) -> SourceError;

/// The errors for the readings a DCGM parser refused by whose or what they are (`unread`'s
/// counts, from `origin`): each refused for an ambiguous unit, each of a series that names
/// no GPU, and each that disagreed with another series of the same GPU.
pub(crate) fn refused_readings(
    origin: &str,
    unread: &truthscale_core::parse::Unread,
    errors: &mut Vec<SourceError>,
) {
    let kinds: [(_, _, ErrorOf); 3] = [
        (
            &unread.unnamed,
            "the series has no gpu or UUID label, so whose reading it is is unknown; not read",
            SourceError::Parse,
        ),
        (
            &unread.disagreeing,
            "two series of the same GPU gave readings that disagree (two exporters reading it, say); neither is known to be the GPU's, so the field is left blank",
            SourceError::Parse,
        ),
        (
            &unread.ambiguous,
            "percent or 0..1 ratio cannot be told; the reading is refused",
            SourceError::AmbiguousUnit,
        ),
    ];
    for (counts, what, make) in kinds {
        for (f, n) in counts {
            errors.extend((0..*n).map(|_| make(format!("{origin}: {f}: {what}"))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorthands_name_the_settings() {
        let sh = |s: &str| SourceConfig::shorthand(s);
        assert_eq!(
            sh("sim:tiny-kernel").unwrap(),
            [
                ("source.kind", "sim".to_string()),
                ("source.scenario", "tiny-kernel".to_string())
            ]
        );
        assert_eq!(sh(" sim ").unwrap(), [("source.kind", "sim".to_string())]);
        assert_eq!(
            sh("replay:/x.txt").unwrap()[1],
            ("source.path", "/x.txt".to_string())
        );
        assert_eq!(
            sh("dcgm-exporter:http://10.0.0.1:9400/metrics").unwrap()[1],
            ("source.url", "http://10.0.0.1:9400/metrics".to_string())
        );
        for k in ["nvml", "auto", "null", "dcgm-exporter"] {
            assert_eq!(sh(k).unwrap(), [("source.kind", k.to_string())]);
        }
        assert_eq!(sh("null:x").unwrap_err(), "null:x: null takes no argument");
        assert!(
            sh("nvml:/lib.so")
                .unwrap_err()
                .contains("takes no argument")
        );
        let err = sh("gpu").unwrap_err();
        assert!(
            err.contains("is not a source") && err.contains("dcgm-exporter"),
            "{err}"
        );
    }

    #[test]
    fn each_kind_checks_its_own_settings() {
        let toml = |t: &str| toml::from_str::<SourceConfig>(t);
        let c = toml("kind = \"sim\"\nscenario = \"nope\"").unwrap();
        assert!(c.check().unwrap_err().message.contains("llm-serving"));
        let c = toml("kind = \"sim\"\ngpus = 0").unwrap();
        assert_eq!(c.check().unwrap_err().key, "source.gpus");
        let c = toml("kind = \"replay\"").unwrap();
        assert_eq!(c.check().unwrap_err().key, "source.path");
        let c = toml("kind = \"dcgm-exporter\"\nurl = \"localhost:9400\"").unwrap();
        assert_eq!(c.check().unwrap_err().key, "source.url");
        let c = toml("kind = \"dcgm-exporter\"\nscrape_timeout = \"1h\"").unwrap();
        assert_eq!(c.check().unwrap_err().key, "source.scrape_timeout");
        let c = toml("kind = \"auto\"\nlibrary = \"/x/libnvidia-ml.so.1\"").unwrap();
        assert!(
            matches!(&c, SourceConfig::Auto(a) if a.0.library == std::path::Path::new("/x/libnvidia-ml.so.1"))
        );
        // A key of another kind is refused, naming it.
        let err = toml("kind = \"sim\"\nurl = \"http://x\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `url`"), "{err}");
        let err = toml("kind = \"gpu\"").unwrap_err().to_string();
        assert!(err.contains("unknown variant `gpu`"), "{err}");
        assert!(toml("kind = \"null\"").unwrap().check().is_ok());
    }

    #[test]
    fn default_dcgm_urls() {
        assert_eq!(
            default_dcgm_url(Some("10.1.2.3")),
            "http://10.1.2.3:9400/metrics"
        );
        assert_eq!(
            default_dcgm_url(Some("fd00::1")),
            "http://[fd00::1]:9400/metrics"
        );
        assert_eq!(default_dcgm_url(None), "http://127.0.0.1:9400/metrics");
    }
}

//! Configuration: built-in defaults < TOML file < `TRUTHSCALE_…` environment < flags.
//!
//! [`Config`] is what a file holds (every key optional, unknown keys rejected);
//! [`Config::validate`] turns it into [`Settings`], checking every value and naming the key
//! that is wrong.

use crate::sinks::otlp::config::{OtlpConfig, OtlpSettings};
use crate::sources::engine::{EngineConfig, EngineSettings};
use crate::sources::{self, Common};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use truthscale_core::derive::DeriveConfig;
use truthscale_core::exposition::Identity;
use truthscale_core::verdict::VerdictConfig;

/// The default listen port: clear of dcgm-exporter (9400) and nvidia_gpu_exporter (9835).
pub const DEFAULT_PORT: u16 = 9488;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address and port to serve `/metrics` on.
    pub listen_address: String,
    /// Web config (TLS, basic auth) in the style of Prometheus's exporter-toolkit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<PathBuf>,
    /// Where counters come from and how often.
    pub source: SourceConfig,
    /// The pod this sidecar runs beside. Unset keys fall back to the Downward API
    /// environment (`POD_NAME`, `POD_NAMESPACE`, `CONTAINER_NAME`, `NODE_NAME`).
    pub identity: IdentityConfig,
    /// HTTP server limits.
    pub http: HttpConfig,
    /// Derivation thresholds.
    pub derive: DeriveConfig,
    /// OTLP push (see `docs/otlp.md`).
    pub otlp: OtlpConfig,
    /// Verdict thresholds (see `docs/verdicts.md`).
    pub verdict: VerdictConfig,
    /// The serving engine in the same pod (see `docs/serving-engines.md`).
    pub engine: EngineConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen_address: format!("0.0.0.0:{DEFAULT_PORT}"),
            web_config_file: None,
            source: SourceConfig::default(),
            identity: IdentityConfig::default(),
            http: HttpConfig::default(),
            derive: DeriveConfig::default(),
            otlp: OtlpConfig::default(),
            verdict: VerdictConfig::default(),
            engine: EngineConfig::default(),
        }
    }
}

/// `[source]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceConfig {
    /// `sim[:SCENARIO]`, `replay:PATH`, `nvml`, `dcgm-exporter:URL` or `auto`.
    pub spec: String,
    /// Sampling interval (at least 100ms).
    pub interval: String,
    /// After this long without a sample, derived series disappear and `up` goes to 0.
    /// Empty: three intervals.
    pub stale_after: String,
    /// Simulated GPUs (`sim` only).
    pub sim_gpus: u32,
    /// Simulated GPU model (`sim` only).
    pub sim_gpu_model: String,
    /// Simulator seed (`sim` only).
    pub seed: u64,
    /// Start a replay again from the top when it ends (`replay:` only).
    pub replay_loop: bool,
    /// Time between samples of a replayed capture that has no timestamps.
    pub replay_interval: String,
    /// Timeout of one scrape of dcgm-exporter (`dcgm-exporter` only).
    pub scrape_timeout: String,
    /// Keep only these GPU UUIDs (`dcgm-exporter` only; default: this pod's GPUs).
    pub gpu_uuids: Vec<String>,
    /// Keep only these GPU indices (`dcgm-exporter` only).
    pub gpu_indices: Vec<u32>,
    /// The NVML library to load (`nvml` and `auto`): a file name looked up by the dynamic
    /// loader, or a path.
    pub nvml_library: String,
    /// Export per-process series (`nvml` only): memory and SM busy per process, labelled
    /// with pid, pod UID and container id. High cardinality: off by default.
    pub per_process_series: bool,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            spec: "sim".into(),
            interval: "1s".into(),
            stale_after: String::new(),
            sim_gpus: 4,
            sim_gpu_model: "h100-sxm".into(),
            seed: 1,
            replay_loop: false,
            replay_interval: "1s".into(),
            scrape_timeout: "5s".into(),
            gpu_uuids: Vec::new(),
            gpu_indices: Vec::new(),
            nvml_library: crate::sources::nvml::DEFAULT_LIBRARY.into(),
            per_process_series: false,
        }
    }
}

/// `[identity]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// Pod name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Container that owns the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `[http]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Longest a request may take.
    pub request_timeout: String,
    /// Requests served at once; more wait.
    pub max_concurrent_requests: usize,
    /// Largest request head accepted.
    pub max_header_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            request_timeout: "10s".into(),
            max_concurrent_requests: 64,
            max_header_bytes: 16 * 1024,
        }
    }
}

/// A configuration problem, naming where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment could not be read or does not match the schema.
    #[error("{origin}: {message}")]
    Load {
        /// The file, or "environment".
        origin: String,
        /// What is wrong (names the key).
        message: String,
    },
    /// Thresholds that cannot be used: each `[origin: ]key: message`, one per line.
    #[error("{}", .0.join("\n"))]
    Thresholds(Vec<String>),
    /// A key has a bad value.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted key, such as `source.interval`.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Web config file.
    pub web_config_file: Option<PathBuf>,
    /// The source, with its own configuration.
    pub source: sources::SourceConfig,
    /// Sampling interval.
    pub interval: Duration,
    /// Stale period.
    pub stale_after: Duration,
    /// Identity labels.
    pub identity: Identity,
    /// Request timeout.
    pub request_timeout: Duration,
    /// Concurrency bound.
    pub max_concurrent_requests: usize,
    /// Header size bound.
    pub max_header_bytes: usize,
    /// Derivation thresholds.
    pub derive: DeriveConfig,
    /// OTLP push, when on.
    pub otlp: Option<OtlpSettings>,
    /// Verdict thresholds.
    pub verdict: VerdictConfig,
    /// The serving engine, when on.
    pub engine: Option<EngineSettings>,
}

/// Variables truthscale reads besides its own `TRUTHSCALE_…` and the standard `OTEL_…`.
const READ_VARIABLES: &[&str] = &[
    "POD_NAME",
    "POD_NAMESPACE",
    "CONTAINER_NAME",
    "NODE_NAME",
    "NODE_IP",
    "NVIDIA_VISIBLE_DEVICES",
    "RUST_LOG",
];

/// The process environment as text. A variable that is not UTF-8 is left out, unless it is
/// one truthscale reads, which is refused naming it; an unrelated one never stops the start
/// (`std::env::vars` would panic on it).
///
/// # Errors
/// A variable truthscale reads is not UTF-8.
pub fn environment() -> Result<Vec<(String, String)>, ConfigError> {
    environment_from(std::env::vars_os())
}

fn environment_from(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (k, v) in vars {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => out.push((k, v)),
            (k, _) => {
                let name = match k {
                    Ok(k) => k,
                    Err(k) => k.to_string_lossy().into_owned(),
                };
                if name.starts_with("TRUTHSCALE_")
                    || name.starts_with("OTEL_")
                    || READ_VARIABLES.contains(&name.as_str())
                {
                    return Err(ConfigError::Load {
                        origin: "environment".into(),
                        message: format!("{name} is not valid UTF-8; set it to text or unset it"),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The 1-based line of dotted `key` (`derive.phase.idle_enter_util`) in TOML `text`: the
/// line that sets its last part inside the table of the rest, or a dotted assignment.
fn key_line(text: &str, key: &str) -> Option<usize> {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim().trim_matches(['[', ']']).replace(' ', "");
            continue;
        }
        let Some((lhs, _)) = t.split_once('=') else {
            continue;
        };
        let lhs = lhs.trim().replace(' ', "");
        let full = if current.is_empty() {
            lhs
        } else {
            format!("{current}.{lhs}")
        };
        if full == format!("{table}.{name}") || (table.is_empty() && full == name) {
            return Some(i + 1);
        }
    }
    None
}

fn duration(key: &'static str, s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s.trim()).map_err(|e| ConfigError::Invalid {
        key,
        message: format!("{s:?} is not a duration ({e}); write e.g. 500ms, 1s, 2m"),
    })
}

impl Config {
    /// Load: defaults, then `file` (when given), then `TRUTHSCALE_…` variables from `env`,
    /// then `overrides` (dotted key → value, from flags).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file or environment and the key.
    pub fn load(
        file: Option<&Path>,
        env: &[(String, String)],
        overrides: &[(&str, String)],
    ) -> Result<Config, ConfigError> {
        let defaults =
            config::Config::try_from(&Config::default()).map_err(|e| ConfigError::Load {
                origin: "defaults".into(),
                message: e.to_string(),
            })?;
        let mut b = config::Config::builder().add_source(defaults);
        if let Some(f) = file {
            let text = std::fs::read_to_string(f).map_err(|e| ConfigError::Load {
                origin: f.display().to_string(),
                message: format!("cannot read: {e}"),
            })?;
            // Check the file alone first, so that its errors name it.
            let own: Config = toml::from_str(&text).map_err(|e| {
                let line = e
                    .span()
                    .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
                ConfigError::Load {
                    origin: match line {
                        Some(l) => format!("{}:{l}", f.display()),
                        None => f.display().to_string(),
                    },
                    message: e.message().to_string(),
                }
            })?;
            // Its thresholds too, naming the line of each bad key.
            if let Err(problems) = own.check_thresholds() {
                return Err(ConfigError::Thresholds(
                    problems
                        .into_iter()
                        .map(|p| match key_line(&text, &p.key) {
                            Some(l) => format!("{}:{l}: {p}", f.display()),
                            None => format!("{}: {p}", f.display()),
                        })
                        .collect(),
                ));
            }
            b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
        }
        let env_map: config::Map<String, String> = env
            .iter()
            .filter(|(k, _)| k.starts_with("TRUTHSCALE_"))
            .cloned()
            .collect();
        let env_keys: Vec<String> = env_map.keys().cloned().collect();
        b = b.add_source(
            config::Environment::with_prefix("TRUTHSCALE")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .list_separator(",")
                .with_list_parse_key("source.gpu_uuids")
                .with_list_parse_key("source.gpu_indices")
                .source(Some(env_map)),
        );
        for (k, v) in overrides {
            b = b
                .set_override(*k, v.clone())
                .map_err(|e| ConfigError::Load {
                    origin: "flags".into(),
                    message: e.to_string(),
                })?;
        }
        let built = b.build().map_err(|e| ConfigError::Load {
            origin: "configuration".into(),
            message: e.to_string(),
        })?;
        built
            .try_deserialize::<Config>()
            .map_err(|e| ConfigError::Load {
                origin: if env_keys.is_empty() {
                    "flags".into()
                } else {
                    format!("environment ({})", env_keys.join(", "))
                },
                message: e.to_string(),
            })
    }

    /// Check every value and resolve the Downward API fallbacks from `env`.
    ///
    /// # Errors
    /// A [`ConfigError::Invalid`] naming the key.
    pub fn validate(&self, env: &[(String, String)]) -> Result<Settings, ConfigError> {
        // Thresholds from the environment or flags (a file's were checked when loaded).
        if let Err(problems) = self.check_thresholds() {
            return Err(ConfigError::Thresholds(
                problems.into_iter().map(|p| p.to_string()).collect(),
            ));
        }
        let listen: SocketAddr =
            self.listen_address
                .trim()
                .parse()
                .map_err(|_| ConfigError::Invalid {
                    key: "listen_address",
                    message: format!(
                        "{:?} is not ADDRESS:PORT (e.g. 0.0.0.0:{DEFAULT_PORT})",
                        self.listen_address
                    ),
                })?;
        let interval = duration("source.interval", &self.source.interval)?;
        if interval < Duration::from_millis(100) {
            return Err(ConfigError::Invalid {
                key: "source.interval",
                message: format!("{:?} is below the 100ms minimum", self.source.interval),
            });
        }
        let stale_after = if self.source.stale_after.trim().is_empty() {
            interval * 3
        } else {
            duration("source.stale_after", &self.source.stale_after)?
        };
        if stale_after < interval {
            return Err(ConfigError::Invalid {
                key: "source.stale_after",
                message: "must be at least one interval".into(),
            });
        }
        if self.source.sim_gpus == 0 || self.source.sim_gpus > 64 {
            return Err(ConfigError::Invalid {
                key: "source.sim_gpus",
                message: format!("{} is out of range 1..=64", self.source.sim_gpus),
            });
        }
        let sim_gpu_model =
            truthscale_core::gpus::lookup(&self.source.sim_gpu_model).ok_or_else(|| {
                let keys: Vec<_> = truthscale_core::gpus::CATALOG
                    .iter()
                    .map(|s| s.key)
                    .collect();
                ConfigError::Invalid {
                    key: "source.sim_gpu_model",
                    message: format!(
                        "{:?} is not in the catalog; known: {}",
                        self.source.sim_gpu_model,
                        keys.join(", ")
                    ),
                }
            })?;
        if self.source.nvml_library.trim().is_empty() {
            return Err(ConfigError::Invalid {
                key: "source.nvml_library",
                message: format!(
                    "must name the NVML library (default {})",
                    crate::sources::nvml::DEFAULT_LIBRARY
                ),
            });
        }
        let replay_interval = duration("source.replay_interval", &self.source.replay_interval)?;
        let scrape_timeout = duration("source.scrape_timeout", &self.source.scrape_timeout)?;
        let request_timeout = duration("http.request_timeout", &self.http.request_timeout)?;
        if self.http.max_concurrent_requests == 0 {
            return Err(ConfigError::Invalid {
                key: "http.max_concurrent_requests",
                message: "must be at least 1".into(),
            });
        }
        if self.http.max_header_bytes < 1024 {
            return Err(ConfigError::Invalid {
                key: "http.max_header_bytes",
                message: "must be at least 1024".into(),
            });
        }
        let getenv = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let otlp = self
            .otlp
            .validate(env)
            .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
        let engine = self
            .engine
            .validate()
            .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
        let id = &self.identity;
        let identity = Identity {
            pod: id.pod.clone().or_else(|| getenv("POD_NAME")),
            namespace: id.namespace.clone().or_else(|| getenv("POD_NAMESPACE")),
            container: id.container.clone().or_else(|| getenv("CONTAINER_NAME")),
            node: id.node.clone().or_else(|| getenv("NODE_NAME")),
        };
        let common = Common {
            interval,
            sim_gpus: self.source.sim_gpus,
            sim_gpu_model,
            seed: self.source.seed,
            node: identity.node.clone(),
            replay_loop: self.source.replay_loop,
            replay_interval,
            scrape_timeout,
            gpu_uuids: self.source.gpu_uuids.clone(),
            gpu_indices: self.source.gpu_indices.clone(),
            nvml_library: PathBuf::from(self.source.nvml_library.trim()),
            per_process_series: self.source.per_process_series,
            node_ip: getenv("NODE_IP"),
            nvidia_visible_devices: getenv("NVIDIA_VISIBLE_DEVICES"),
            pod: identity.pod.clone(),
            namespace: identity.namespace.clone(),
        };
        let source =
            sources::SourceConfig::from_spec(&self.source.spec, &common).map_err(|message| {
                ConfigError::Invalid {
                    key: "source.spec",
                    message,
                }
            })?;
        Ok(Settings {
            listen,
            web_config_file: self.web_config_file.clone(),
            source,
            interval,
            stale_after,
            identity,
            request_timeout,
            max_concurrent_requests: self.http.max_concurrent_requests,
            max_header_bytes: self.http.max_header_bytes,
            derive: self.derive.clone(),
            otlp,
            verdict: self.verdict.clone(),
            engine,
        })
    }

    /// Every `[derive]`, `[derive.phase]` and `[verdict]` threshold in range, and every
    /// hysteresis band pointing the right way.
    ///
    /// # Errors
    /// Each problem, keyed like `derive.phase.idle_enter_util`.
    pub fn check_thresholds(&self) -> Result<(), Vec<truthscale_core::phase::InvalidSetting>> {
        let mut problems = Vec::new();
        for r in [
            self.derive.validate("derive."),
            self.verdict.validate("verdict."),
        ] {
            if let Err(p) = r {
                problems.extend(p);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The configuration as TOML.
    ///
    /// # Errors
    /// Never in practice: every field serializes.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string_pretty(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::otlp::config::{OtlpProtocol, OtlpTemporality};

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn defaults_validate() {
        let s = Config::default().validate(&[]).unwrap();
        assert_eq!(s.listen.port(), DEFAULT_PORT);
        assert_eq!(s.interval, Duration::from_secs(1));
        assert_eq!(s.stale_after, Duration::from_secs(3));
        match s.source {
            sources::SourceConfig::Sim(sim) => assert_eq!(sim.gpus, 4),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn precedence_file_env_flags() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.toml");
        std::fs::write(
            &f,
            "[source]\ninterval = \"2s\"\nsim_gpus = 2\n[identity]\npod = \"from-file\"\n",
        )
        .unwrap();
        let e = env(&[
            ("TRUTHSCALE_SOURCE__SIM_GPUS", "3"),
            ("POD_NAME", "downward"),
        ]);
        let c = Config::load(Some(&f), &e, &[]).unwrap();
        assert_eq!(c.source.interval, "2s");
        assert_eq!(c.source.sim_gpus, 3);
        let c = Config::load(Some(&f), &e, &[("source.sim_gpus", "5".into())]).unwrap();
        assert_eq!(c.source.sim_gpus, 5);
        let s = c.validate(&e).unwrap();
        assert_eq!(s.identity.pod.as_deref(), Some("from-file"));
        let s = Config::default().validate(&e).unwrap();
        assert_eq!(s.identity.pod.as_deref(), Some("downward"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_key() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.toml");
        std::fs::write(&f, "[source]\nintervl = \"2s\"\n").unwrap();
        let err = Config::load(Some(&f), &[], &[]).unwrap_err().to_string();
        assert!(err.contains("bad.toml") && err.contains("intervl"), "{err}");
        let err = Config::load(None, &env(&[("TRUTHSCALE_SOURCE__NOPE", "1")]), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("environment") && err.contains("nope"), "{err}");
        let mut c = Config::default();
        c.source.interval = "50ms".into();
        assert_eq!(
            c.validate(&[]).unwrap_err().to_string(),
            "source.interval: \"50ms\" is below the 100ms minimum"
        );
        c.source.interval = "soon".into();
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("source.interval: \"soon\" is not a duration")
        );
        let c = Config {
            listen_address: "9488".into(),
            ..Config::default()
        };
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("listen_address:")
        );
        let mut c = Config::default();
        c.source.spec = "gpu".into();
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("source.spec:")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_thresholds_name_the_key_and_line() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-thr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.toml");
        std::fs::write(
            &f,
            "[derive]\ntau_max = 0.9\nheadroom = -0.5\n\n[derive.phase]\n# hysteresis\nidle_enter_util = 0.2\nidle_exit_util = 0.1\n\n[verdict]\nbusy_util = nan\n",
        )
        .unwrap();
        let err = Config::load(Some(&f), &[], &[]).unwrap_err().to_string();
        let name = f.display().to_string();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 3, "{err}");
        assert!(
            lines[0].starts_with(&format!("{name}:3: derive.headroom: -0.5 is outside")),
            "{err}"
        );
        assert!(
            lines[1].starts_with(&format!("{name}:7: derive.phase.idle_enter_util: 0.2 must be below derive.phase.idle_exit_util")),
            "{err}"
        );
        assert!(
            lines[2].starts_with(&format!(
                "{name}:11: verdict.busy_util: NaN is not a number"
            )),
            "{err}"
        );
        // The same from the environment names the key.
        let c = Config::load(
            None,
            &env(&[("TRUTHSCALE_DERIVE__PHASE__SWITCH_AFTER", "0")]),
            &[],
        )
        .unwrap();
        let err = c.validate(&[]).unwrap_err().to_string();
        assert!(
            err.starts_with("derive.phase.switch_after: 0 is outside [1, 100]"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn otlp_is_on_by_endpoint_config_or_env() {
        assert_eq!(Config::default().validate(&[]).unwrap().otlp, None);
        let s = Config::default()
            .validate(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")]))
            .unwrap();
        // The SDK reads the environment itself: nothing is passed on.
        assert_eq!(
            s.otlp,
            Some(OtlpSettings {
                endpoint: None,
                protocol: None,
                timeout: None,
                interval: None,
                temporality: None
            })
        );
        let c = Config::load(
            None,
            &env(&[
                ("TRUTHSCALE_OTLP__PROTOCOL", "grpc"),
                ("TRUTHSCALE_OTLP__TEMPORALITY", "delta"),
            ]),
            &[("otlp.endpoint", "http://c:4317".into())],
        )
        .unwrap();
        let o = c.validate(&[]).unwrap().otlp.unwrap();
        assert_eq!(o.endpoint.as_deref(), Some("http://c:4317"));
        assert_eq!(o.protocol, Some(OtlpProtocol::Grpc));
        assert_eq!(o.temporality, Some(OtlpTemporality::Delta));
        let mut c = Config::default();
        c.otlp.enabled = true;
        assert!(c.validate(&[]).unwrap().otlp.is_some());
        assert!(
            c.validate(&env(&[("OTEL_SDK_DISABLED", "true")]))
                .unwrap()
                .otlp
                .is_none()
        );
        c.otlp.protocol = Some("http/json".into());
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("otlp.protocol:")
        );
        c.otlp.protocol = None;
        c.otlp.endpoint = Some("https://c:4317".into());
        assert!(c.validate(&[]).unwrap_err().to_string().contains("TLS"));
    }

    #[test]
    fn nvml_library_key() {
        let library = |c: &Config| match c.validate(&[]).unwrap().source {
            sources::SourceConfig::Nvml(n) => n.library,
            other => panic!("{other:?}"),
        };
        let mut d = Config::default();
        d.source.spec = "nvml".into();
        assert_eq!(library(&d), PathBuf::from("libnvidia-ml.so.1"));
        let c = Config::load(
            None,
            &env(&[("TRUTHSCALE_SOURCE__NVML_LIBRARY", "/env/libnvidia-ml.so.1")]),
            &[
                ("source.nvml_library", "/flag/libnvidia-ml.so.1".into()),
                ("source.spec", "nvml".into()),
            ],
        )
        .unwrap();
        assert_eq!(library(&c), PathBuf::from("/flag/libnvidia-ml.so.1"));
        let mut c = Config::default();
        c.source.nvml_library = " ".into();
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("source.nvml_library:")
        );
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let text = Config::default().to_toml().unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back, Config::default());
        assert!(text.contains("listen_address = \"0.0.0.0:9488\""));
    }

    #[test]
    fn a_non_utf8_variable_is_refused_only_when_read() {
        use std::os::unix::ffi::OsStringExt as _;
        let bad = std::ffi::OsString::from_vec(vec![0xff, 0xfe]);
        let vars = |k: &str| {
            vec![
                ("PATH".into(), "/bin".into()),
                (std::ffi::OsString::from(k), bad.clone()),
            ]
            .into_iter()
        };
        let env = environment_from(vars("UNRELATED")).unwrap();
        assert_eq!(env, [("PATH".to_string(), "/bin".to_string())]);
        for read in [
            "TRUTHSCALE_SOURCE__SPEC",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "POD_NAME",
        ] {
            let err = environment_from(vars(read)).unwrap_err().to_string();
            assert!(err.contains(read) && err.contains("UTF-8"), "{err}");
        }
    }

    /// `docs/config.md` holds exactly what `Config::default()` prints.
    #[test]
    fn config_doc_matches_defaults() {
        const BEGIN: &str = "<!-- defaults:begin -->\n";
        const END: &str = "<!-- defaults:end -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md");
        let doc = std::fs::read_to_string(path).expect("docs/config.md exists");
        let (head, rest) = doc.split_once(BEGIN).expect("the begin marker");
        let (_, tail) = rest.split_once(END).expect("the end marker");
        let toml = Config::default().to_toml().expect("defaults serialize");
        let expected = format!("{head}{BEGIN}```toml\n{toml}```\n{END}{tail}");
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(path, &expected).unwrap();
            return;
        }
        assert!(
            doc == expected,
            "docs/config.md is out of date with Config::default(); run `UPDATE_DOCS=1 cargo test -p truthscale-exporter --lib config_doc`"
        );
    }
}

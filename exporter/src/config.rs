//! Configuration: built-in defaults < TOML file < `TRUTHSCALE_…` environment < flags.
//!
//! [`Config`] is what a file holds (every key optional, unknown keys rejected);
//! [`Config::validate`] turns it into [`Settings`], checking every value and naming the key
//! that is wrong.

use crate::attribution::config::{NodeConfig, NodeSettings, SidecarConfig, SidecarSettings};
use crate::enrichment::engine::{EngineConfig, EngineSettings};
use crate::setting::Invalid;
use crate::sinks::otlp::config::{OtlpConfig, OtlpSettings};
use crate::sources;
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
    pub source: SourceSection,
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
    /// `sidecar` (the default: this pod's GPUs, labelled with this pod) or `node` (every GPU
    /// of the node, each attributed to its pods through the kubelet; see `[node]`).
    pub mode: Mode,
    /// Sidecar mode: whether to ask the kubelet which GPUs are this pod's (`pod_resources`),
    /// and its PodResources socket and GPU resource names.
    pub sidecar: SidecarConfig,
    /// Node mode: the kubelet's PodResources socket and the GPU resource names.
    pub node: NodeConfig,
    /// The most GPU series one `/metrics` holds: beyond it, whole entities are left out (the
    /// last first) and counted in `truthscale_series_dropped_total`. The exporter's own series
    /// are always written.
    pub max_series: usize,
}

/// How truthscale is deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum Mode {
    /// Beside one pod: its GPUs, labelled with its Downward API identity.
    #[default]
    Sidecar,
    /// One per node: every GPU, attributed to its pods by the kubelet.
    Node,
}

impl TryFrom<String> for Mode {
    type Error = String;

    /// The mode by its name; another name is refused naming both (the configuration
    /// library's own words for an unknown variant name neither).
    fn try_from(name: String) -> Result<Mode, String> {
        match name.trim() {
            "sidecar" => Ok(Mode::Sidecar),
            "node" => Ok(Mode::Node),
            other => Err(format!("{other:?} is not a mode: sidecar or node")),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen_address: format!("0.0.0.0:{DEFAULT_PORT}"),
            web_config_file: None,
            source: SourceSection::default(),
            identity: IdentityConfig::default(),
            http: HttpConfig::default(),
            derive: DeriveConfig::default(),
            otlp: OtlpConfig::default(),
            verdict: VerdictConfig::default(),
            engine: EngineConfig::default(),
            mode: Mode::Sidecar,
            sidecar: SidecarConfig::default(),
            node: NodeConfig::default(),
            max_series: 50_000,
        }
    }
}

/// `[source]`: the sampling interval and stale period, which every source has, and which
/// source (`kind`, default `auto`: NVML when a driver is present, else a start error naming
/// the choices; the simulator only when asked for) with that source's own settings beside it
/// ([`sources::SourceConfig`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSection {
    /// Sampling interval (100ms..=1h).
    pub interval: String,
    /// After this long without a sample, derived series disappear and `up` goes to 0.
    /// Empty: three intervals.
    pub stale_after: String,
    /// The source and its own settings.
    pub config: sources::SourceConfig,
}

impl Default for SourceSection {
    fn default() -> Self {
        SourceSection {
            interval: "1s".into(),
            stale_after: String::new(),
            config: sources::SourceConfig::default(),
        }
    }
}

/// The keys of `[source]` that every kind has.
const SOURCE_COMMON_KEYS: [&str; 2] = ["interval", "stale_after"];

impl Serialize for SourceSection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Out<'a> {
            interval: &'a str,
            stale_after: &'a str,
            #[serde(flatten)]
            config: &'a sources::SourceConfig,
        }
        Out {
            interval: &self.interval,
            stale_after: &self.stale_after,
            config: &self.config,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for SourceSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut table = toml::Table::deserialize(d)?;
        let mut take = |key: &str| match table.remove(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            // A bare number (`--interval 5`, `TRUTHSCALE_SOURCE__INTERVAL=5`) goes on to the
            // duration check, which says how to write one.
            Some(toml::Value::Integer(n)) => Ok(Some(n.to_string())),
            Some(toml::Value::Float(n)) => Ok(Some(n.to_string())),
            Some(other) => Err(D::Error::custom(format!(
                "source.{key}: expected a string, found {}",
                other.type_str()
            ))),
        };
        let defaults = SourceSection::default();
        let interval = take("interval")?.unwrap_or(defaults.interval);
        let stale_after = take("stale_after")?.unwrap_or(defaults.stale_after);
        // Keys of another kind without a kind are most likely the simulator's (`gpus`): say
        // that the default is not the simulator.
        let hint = if table.contains_key("kind") {
            ""
        } else {
            " (no source.kind is set, so it is auto, which reads NVML: set the kind these keys \
             belong to, e.g. --source sim or kind = \"sim\")"
        };
        if let Some(v) = table.get_mut("gpu_indices") {
            *v = index_list(v).map_err(D::Error::custom)?;
        }
        table
            .entry("kind")
            .or_insert_with(|| toml::Value::String(defaults.config.kind().into()));
        let config =
            sources::SourceConfig::deserialize(toml::Value::Table(table)).map_err(|e| {
                let message = e.message().trim_end();
                // The keys every kind has were taken out above: list them too.
                let message = match unknown_field(message) {
                    Some((field, expected)) => {
                        let mut keys: Vec<&str> = SOURCE_COMMON_KEYS.to_vec();
                        keys.push("kind");
                        keys.extend(expected.iter().filter(|k| **k != "kind"));
                        format!(
                            "unknown field `{field}`, expected one of {}",
                            keys.iter()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                    None => message.to_owned(),
                };
                D::Error::custom(format!("in [source]: {message}{hint}"))
            })?;
        Ok(SourceSection {
            interval,
            stale_after,
            config,
        })
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
    /// Numbers that cannot be used (thresholds, limits, counts): each
    /// `[origin: ]key: message`, one per line, the origin the file and line, the variable or
    /// the flags that set it.
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

impl From<Invalid> for ConfigError {
    fn from(e: Invalid) -> ConfigError {
        ConfigError::Invalid {
            key: e.key,
            message: e.message,
        }
    }
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where to listen.
    pub(crate) listen: SocketAddr,
    /// Web config file.
    pub(crate) web_config_file: Option<PathBuf>,
    /// The source, with its own configuration.
    pub(crate) source: sources::SourceConfig,
    /// What the source draws on besides its own settings.
    pub(crate) source_context: sources::Context,
    /// Sampling interval.
    pub(crate) interval: Duration,
    /// Stale period.
    pub(crate) stale_after: Duration,
    /// Identity labels.
    pub(crate) identity: Identity,
    /// Request timeout.
    pub(crate) request_timeout: Duration,
    /// Concurrency bound.
    pub(crate) max_concurrent_requests: usize,
    /// Header size bound.
    pub(crate) max_header_bytes: usize,
    /// Derivation thresholds.
    pub(crate) derive: DeriveConfig,
    /// OTLP push, when on.
    pub(crate) otlp: Option<OtlpSettings>,
    /// Verdict thresholds.
    pub(crate) verdict: VerdictConfig,
    /// The serving engine, when on.
    pub(crate) engine: Option<EngineSettings>,
    /// Sidecar mode's kubelet `Get` for this pod, when `sidecar.pod_resources` is on; `None`
    /// otherwise and in node mode.
    pub(crate) pod_resources: Option<SidecarSettings>,
    /// Node mode's kubelet settings; `None` in sidecar mode.
    pub(crate) node: Option<NodeSettings>,
    /// The series cap.
    pub(crate) max_series: usize,
}

/// Variables truthscale reads besides its own `TRUTHSCALE_…` and the standard `OTEL_…`.
const READ_VARIABLES: &[&str] = &[
    "POD_NAME",
    "POD_UID",
    "POD_NAMESPACE",
    "CONTAINER_NAME",
    "NODE_NAME",
    "NODE_IP",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
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

/// Leave only the `[source]` keys every kind has (and `kind`, when `keep_kind`). Returns the
/// keys of the table's own kind it took out (not `kind`): what a kind set above it leaves
/// unused.
fn keep_common_source_keys(table: &mut toml::Table, keep_kind: bool) -> Vec<String> {
    let mut taken = Vec::new();
    if let Some(toml::Value::Table(source)) = table.get_mut("source") {
        source.retain(|k, _| {
            let keep = SOURCE_COMMON_KEYS.contains(&k) || (keep_kind && k == "kind");
            if !keep && k != "kind" {
                taken.push(k.to_owned());
            }
            keep
        });
    }
    taken
}

fn duration(
    key: &'static str,
    s: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    crate::setting::duration(key, s, min, max).map_err(ConfigError::from)
}

/// A TOML error in file `f` (its text `text`) at the line it concerns: an unknown key at its
/// own line with the valid key it is closest to, an integer past TOML's range with its
/// setting's range.
fn toml_error(f: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let mut line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let mut message = e.message().trim_end().to_string();
    // An unknown key: its own line (a table's error points at the table), and the
    // valid key it is closest to.
    if let Some((field, expected)) = unknown_field(&message) {
        let table = line.map(|l| table_at(text, l)).unwrap_or_default();
        let dotted = if table.is_empty() {
            field.to_owned()
        } else {
            format!("{table}.{field}")
        };
        line = key_line(text, &dotted).or(line);
        if let Some(near) = closest(field, &expected) {
            message = format!("{message}; did you mean `{near}`?");
        }
    }
    // An integer TOML cannot hold (past 2^63 − 1) is refused as TOML: name its key
    // and range too.
    if let Some(r) = line
        .and_then(|l| key_at_line(text, l))
        .and_then(|k| crate::setting::INTEGERS.iter().find(|r| r.key == k))
    {
        message = format!(
            "{}: {message}; use a whole number in {}..={}",
            r.key, r.min, r.max
        );
    }
    ConfigError::Load {
        origin: match line {
            Some(l) => format!("{}:{l}", f.display()),
            None => f.display().to_string(),
        },
        message,
    }
}

/// `source.gpu_indices` as a list of whole numbers, however a layer gave it: a TOML list, or
/// from the environment a number (`1`), or text split at commas (`0, 1`, whose parts are
/// text); an empty part is none.
fn index_list(v: &toml::Value) -> Result<toml::Value, String> {
    let bad = |what: &str| {
        format!("source.gpu_indices: `{what}` is not a GPU index (a whole number from 0)")
    };
    let one = |v: &toml::Value| -> Result<Option<toml::Value>, String> {
        match v {
            toml::Value::Integer(_) => Ok(Some(v.clone())),
            toml::Value::String(s) if s.trim().is_empty() => Ok(None),
            toml::Value::String(s) => s
                .trim()
                .parse::<u32>()
                .map(|i| Some(toml::Value::Integer(i.into())))
                .map_err(|_| bad(s)),
            other => Err(bad(&other.to_string())),
        }
    };
    let items: Vec<toml::Value> = match v {
        toml::Value::Array(a) => a.iter().map(one).collect::<Result<Vec<_>, _>>()?,
        toml::Value::String(s) => s
            .split(',')
            .map(|p| one(&toml::Value::String(p.to_owned())))
            .collect::<Result<Vec<_>, _>>()?,
        other => vec![one(other)?],
    }
    .into_iter()
    .flatten()
    .collect();
    Ok(toml::Value::Array(items))
}

impl IdentityConfig {
    /// The `TRUTHSCALE_IDENTITY__*` variables of `env` as written: the environment layer
    /// reads a value that looks like a number as one (`0123` became `123`, `1e3` `1000`),
    /// and these are names.
    fn text_from(&mut self, env: &[(String, String)]) {
        for (k, v) in env {
            let Some(key) = k.strip_prefix("TRUTHSCALE_IDENTITY__") else {
                continue;
            };
            let field = match key.to_ascii_lowercase().as_str() {
                "pod" => &mut self.pod,
                "namespace" => &mut self.namespace,
                "container" => &mut self.container,
                "node" => &mut self.node,
                _ => continue,
            };
            *field = Some(v.clone());
        }
    }
}

/// Where a value that does not deserialize may have come from, above the file (which was
/// read on its own before): the flags and the variables given, each named.
fn layers_above_the_file(env_keys: &[String], overrides: &[(&str, String)]) -> String {
    let flags: Vec<&str> = overrides.iter().map(|(k, _)| *k).collect();
    let mut layers = Vec::new();
    if !flags.is_empty() {
        layers.push(format!("flags ({})", flags.join(", ")));
    }
    if !env_keys.is_empty() {
        layers.push(format!("environment ({})", env_keys.join(", ")));
    }
    if layers.is_empty() {
        "configuration".into()
    } else {
        layers.join(" or ")
    }
}

/// The first key of a section that differs from its default, if any (the keys in order).
fn first_set_key<T: Serialize + Default>(section: &T) -> Option<String> {
    let table = |v: &T| match toml::Value::try_from(v) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    let (set, default) = (table(section), table(&T::default()));
    set.into_iter()
        .find(|(k, v)| default.get(k) != Some(v))
        .map(|(k, _)| k)
}

/// The source kind chosen above the file (flags, then environment), if any.
fn upper_kind(env: &[(String, String)], overrides: &[(&str, String)]) -> Option<String> {
    overrides
        .iter()
        .rev()
        .find(|(k, _)| *k == "source.kind")
        .map(|(_, v)| v.clone())
        .or_else(|| {
            env.iter()
                .find(|(k, _)| k == "TRUTHSCALE_SOURCE__KIND")
                .map(|(_, v)| v.clone())
        })
}

/// The `TRUTHSCALE_*` variables as a layer: `__` between sections; the lists are a layer of
/// their own ([`env_lists`]).
fn env_layer(env_map: config::Map<String, String>) -> config::Environment {
    config::Environment::with_prefix("TRUTHSCALE")
        .prefix_separator("_")
        .separator("__")
        .try_parsing(true)
        .source(Some(env_map))
}

/// The list settings the environment may hold, each a comma-separated list: variable,
/// section and key.
const ENV_LISTS: [(&str, &str, &str); 5] = [
    ("TRUTHSCALE_SOURCE__GPU_UUIDS", "source", "gpu_uuids"),
    ("TRUTHSCALE_SOURCE__GPU_INDICES", "source", "gpu_indices"),
    ("TRUTHSCALE_NODE__POD_LABELS", "node", "pod_labels"),
    ("TRUTHSCALE_NODE__RESOURCE_NAMES", "node", "resource_names"),
    (
        "TRUTHSCALE_SIDECAR__RESOURCE_NAMES",
        "sidecar",
        "resource_names",
    ),
];

/// The list variables of `env_map`, taken out of it, as a layer of lists of text split at
/// commas (each item trimmed, empty ones left out: `A, B` is two items, an empty variable an
/// empty list), whatever they hold: the environment layer reads a lone `123` or `true` as a
/// number or a boolean first (a pod label key `123` would be refused, `007` read as 7).
fn env_lists(
    env_map: &mut config::Map<String, String>,
) -> Option<config::File<config::FileSourceString, config::FileFormat>> {
    let mut table = toml::Table::new();
    for (var, section, key) in ENV_LISTS {
        let Some(v) = env_map.remove(var) else {
            continue;
        };
        let list = crate::setting::list_items(&v)
            .map(|s| toml::Value::String(s.to_owned()))
            .collect();
        let section = table
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(t) = section {
            t.insert(key.to_owned(), toml::Value::Array(list));
        }
    }
    (!table.is_empty())
        .then(|| config::File::from_str(&table.to_string(), config::FileFormat::Toml))
}

/// A flag's value, typed as the environment's values are: a source's own settings are read
/// through its tagged table, which does not turn text into numbers.
fn flag_value(v: &str) -> config::Value {
    if let Ok(b) = v.parse::<bool>() {
        b.into()
    } else if let Ok(i) = v.parse::<i64>() {
        i.into()
    } else {
        v.to_owned().into()
    }
}

/// The text and table of the configuration file `f`, checked alone first so that its
/// errors name it and the line: its schema, then its numbers (and its source's, unless a
/// kind set above it, `upper_kind`, replaces its `[source]`, which is then dropped from the
/// table but for the keys every kind has).
fn file_layer(f: &Path, upper_kind: Option<&str>) -> Result<(String, toml::Table), ConfigError> {
    let text =
        crate::bounds::read_file_to_string(f, crate::bounds::MAX_CONFIG_FILE).map_err(|e| {
            ConfigError::Load {
                origin: f.display().to_string(),
                message: format!("cannot read: {e}"),
            }
        })?;
    let at_line = |e: &toml::de::Error| toml_error(f, &text, e);
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| at_line(&e))?;
    // Its integers as written, before the schema converts them, naming their range.
    let named = |problems: Vec<truthscale_core::phase::InvalidSetting>| {
        ConfigError::Thresholds(
            problems
                .into_iter()
                .map(|p| match key_line(&text, &p.key) {
                    Some(l) => format!("{}:{l}: {p}", f.display()),
                    None => format!("{}: {p}", f.display()),
                })
                .collect(),
        )
    };
    let written = check_table_integers(&table);
    if !written.is_empty() {
        return Err(named(written));
    }
    let own: Config = toml::from_str(&text).map_err(|e| at_line(&e))?;
    let replaced = upper_kind.is_some_and(|kind| kind != own.source.config.kind());
    let problems = own.check_numbers(!replaced);
    if !problems.is_empty() {
        return Err(named(problems));
    }
    // A kind chosen by a flag or the environment replaces the file's source, with its
    // settings; the interval and stale period still apply.
    if let Some(kind) = upper_kind
        && replaced
    {
        let unused = keep_common_source_keys(&mut table, false).join(", ");
        let replaced = "The source kind set by a flag or TRUTHSCALE_SOURCE__KIND replaces the file's [source] settings (its interval and stale_after still apply)";
        if unused.is_empty() {
            tracing::info!(
                file = %f.display(),
                file_kind = own.source.config.kind(),
                kind = %kind,
                "{replaced}."
            );
        } else {
            tracing::warn!(
                file = %f.display(),
                file_kind = own.source.config.kind(),
                kind = %kind,
                unused = %unused,
                "{replaced}: the file's source keys named in `unused` are not used; set them for the new kind (TRUTHSCALE_SOURCE__…, or in the file) if it needs them."
            );
        }
    }
    Ok((text, table))
}

/// The dotted key a `TRUTHSCALE_…` variable sets (`TRUTHSCALE_HTTP__MAX_HEADER_BYTES` →
/// `http.max_header_bytes`).
/// Whether `var` is one of the variables Kubernetes writes into a pod for each Service of
/// its namespace (`enableServiceLinks`, on by default), for a Service whose name starts with
/// `truthscale`: `NAME_SERVICE_HOST`, `NAME_SERVICE_PORT[_PORTNAME]`, `NAME_PORT` and
/// `NAME_PORT_<port>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR]`, `NAME` the Service's name in
/// capitals with `-` as `_`. None is a setting (a setting in a section has `__`, and no
/// top-level one ends so), so each is left out rather than refused as an unknown key, which
/// stopped a sidecar beside a Service called `truthscale`.
fn is_service_link(var: &str) -> bool {
    let Some(rest) = var.strip_prefix("TRUTHSCALE") else {
        return false;
    };
    if rest.contains("__") {
        return false;
    }
    let parts: Vec<&str> = rest.split('_').skip(1).collect();
    (0..parts.len()).any(|i| {
        let tail = &parts[i..];
        match tail {
            ["SERVICE", "HOST"] | ["PORT"] => true,
            ["SERVICE", "PORT", ..] => true,
            ["PORT", port, proto, more @ ..] => {
                port.bytes().all(|b| b.is_ascii_digit())
                    && !port.is_empty()
                    && ["TCP", "UDP", "SCTP"].contains(proto)
                    && matches!(more, [] | ["PROTO" | "PORT" | "ADDR"])
            }
            _ => false,
        }
    })
}

fn env_key(var: &str) -> Option<String> {
    var.strip_prefix("TRUTHSCALE_")
        .map(|k| k.to_ascii_lowercase().replace("__", "."))
}

/// Each integer of [`crate::setting::INTEGERS`] that the TOML `table` sets, as written: a
/// whole number in its range (a list's every item), not a fraction, `inf` or `nan`.
fn check_table_integers(table: &toml::Table) -> Vec<truthscale_core::phase::InvalidSetting> {
    let mut problems = Vec::new();
    for range in crate::setting::INTEGERS {
        let mut value = None;
        let mut t = Some(table);
        let parts: Vec<&str> = range.key.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let Some(v) = t.and_then(|t| t.get(*part)) else {
                break;
            };
            if i + 1 == parts.len() {
                value = Some(v);
            } else {
                t = v.as_table();
            }
        }
        let items: Vec<&toml::Value> = match value {
            None => continue,
            Some(toml::Value::Array(items)) => items.iter().collect(),
            Some(v) => vec![v],
        };
        let problem = items.into_iter().find_map(|v| match v {
            toml::Value::Integer(i) => range.check(*i).err(),
            other => Some(crate::setting::Invalid::new(
                range.key,
                format!(
                    "{other} is not a whole number; use one in {}..={}",
                    range.min, range.max
                ),
            )),
        });
        if let Some(e) = problem {
            problems.push(truthscale_core::phase::InvalidSetting {
                key: e.key.to_string(),
                message: e.message,
            });
        }
    }
    problems
}

/// The keys of `table` (the defaults) whose values are numbers with a fraction, with the
/// optional ones the defaults leave out.
fn fraction_keys(table: &toml::Table) -> Vec<String> {
    fn walk(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            match v {
                toml::Value::Float(_) => out.push(format!("{prefix}{k}")),
                toml::Value::Table(t) => walk(t, &format!("{prefix}{k}."), out),
                _ => {}
            }
        }
    }
    let mut out: Vec<String> = crate::setting::OPTIONAL_FRACTIONS
        .iter()
        .map(|k| (*k).to_string())
        .collect();
    walk(table, "", &mut out);
    out
}

/// Each `TRUTHSCALE_…` variable of a numeric setting, as text, before it is converted (which
/// would turn `1e19` and `inf` into the largest integer and `NaN` into 0): an integer's is a
/// whole number in its range, a list's every item; a fraction's a number (its range is the
/// setting's own check). `defaults` finds the fractions.
///
/// # Errors
/// The first variable that is not, naming it, the key and the range.
fn check_env_numbers(
    env: &config::Map<String, String>,
    defaults: &toml::Table,
) -> Result<(), ConfigError> {
    let fractions = fraction_keys(defaults);
    for (var, text) in env {
        let Some(key) = env_key(var) else { continue };
        let problem = if let Some(range) = crate::setting::INTEGERS.iter().find(|r| r.key == key) {
            // A list's items, each; an empty list is no item.
            let items: Vec<&str> = if key == crate::setting::GPU_INDICES.key {
                crate::setting::list_items(text).collect()
            } else {
                vec![text.as_str()]
            };
            items
                .into_iter()
                .find_map(|item| range.check_text(item).err())
                .map(|e| e.to_string())
        } else if fractions.contains(&key) && text.trim().parse::<f64>().is_err() {
            let hint = fraction_range(defaults, &key).unwrap_or_default();
            Some(format!(
                "{key}: {} is not a number{hint}",
                crate::setting::shown(text)
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            return Err(ConfigError::Load {
                origin: format!("environment ({var})"),
                message,
            });
        }
    }
    Ok(())
}

/// The range of the fraction `key`, as its own check writes it (`; use a value in [0, 1]`):
/// the check is asked about `NaN` in `defaults`, so that the range is written only there.
fn fraction_range(defaults: &toml::Table, key: &str) -> Option<String> {
    let mut table = defaults.clone();
    let (path, last) = key.rsplit_once('.').unwrap_or(("", key));
    let mut t = &mut table;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        t = t
            .entry(part)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()?;
    }
    t.insert(last.to_string(), toml::Value::Float(f64::NAN));
    let config = Config::deserialize(toml::Value::Table(table)).ok()?;
    let problem = config
        .check_numbers(false)
        .into_iter()
        .find(|p| p.key == key)?;
    let (_, range) = problem.message.split_once("; ")?;
    Some(format!("; {range}"))
}

/// Where `key` was set, as the start of a message: the variable, the flags, or the file and
/// line; empty when none of them sets it (a default).
fn origin_of(
    key: &str,
    file: Option<(&Path, &str)>,
    env: &[(String, String)],
    overrides: &[(&str, String)],
) -> String {
    if overrides.iter().any(|(k, _)| *k == key) {
        return "flags: ".into();
    }
    if let Some((var, _)) = env
        .iter()
        .find(|(var, _)| env_key(var).as_deref() == Some(key))
    {
        return format!("environment ({var}): ");
    }
    match file {
        Some((f, text)) => match key_line(text, key) {
            Some(l) => format!("{}:{l}: ", f.display()),
            None => String::new(),
        },
        None => String::new(),
    }
}

/// The field and the expected fields of serde's "unknown field `x`, expected `a` or `b`"
/// (or "expected one of `a`, `b`, `c`") in `message`.
fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    let rest = &message[message.find("unknown field `")? + "unknown field `".len()..];
    let (field, rest) = rest.split_once('`')?;
    let expected = rest
        .split_once("expected")
        .map(|(_, list)| list.split('`').skip(1).step_by(2).collect())
        .unwrap_or_default();
    Some((field, expected))
}

/// Of `keys`, the one closest to `word` by edit distance, if it is close: at most a
/// third of the word's length away (one edit for a short word).
fn closest<'a>(word: &str, keys: &[&'a str]) -> Option<&'a str> {
    let most = (word.chars().count() / 3).max(1);
    keys.iter()
        .map(|k| (crate::setting::edit_distance(word, k), *k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The dotted name of the table that 1-based `line` of TOML `text` is in (the table a
/// header on that line opens); empty for the top level.
fn table_at(text: &str, line: usize) -> String {
    let mut current = String::new();
    for l in text.lines().take(line) {
        let t = l.trim();
        if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim().trim_matches(['[', ']']).replace(' ', "");
        }
    }
    current
}

/// The dotted key set on 1-based `line` of TOML `text`, the inverse of [`key_line`].
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let mut current = String::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim().trim_matches(['[', ']']).replace(' ', "");
        } else if i + 1 == line {
            let (lhs, _) = t.split_once('=')?;
            let lhs = lhs.trim().replace(' ', "");
            return Some(if current.is_empty() {
                lhs
            } else {
                format!("{current}.{lhs}")
            });
        }
    }
    None
}

impl Config {
    /// The `[derive]` and `[verdict]` sections the offline commands (`analyze`, `explain`)
    /// read: defaults, then `file` (when given), then the `TRUTHSCALE_DERIVE__…` and
    /// `TRUTHSCALE_VERDICT__…` variables of `env`. The other variables set the sidecar, which
    /// these commands do not run, so a shell or pod set up for the sidecar does not stop them.
    ///
    /// # Errors
    /// As [`Config::load`]: a [`ConfigError`] naming the file or variable and the key.
    pub(crate) fn offline_sections(
        file: Option<&Path>,
        env: &[(String, String)],
    ) -> Result<(DeriveConfig, VerdictConfig), ConfigError> {
        let env: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| {
                ["TRUTHSCALE_DERIVE__", "TRUTHSCALE_VERDICT__"]
                    .iter()
                    .any(|p| k.starts_with(p))
            })
            .cloned()
            .collect();
        if file.is_none() && env.is_empty() {
            return Ok((DeriveConfig::default(), VerdictConfig::default()));
        }
        let c = Config::load(file, &env, &[])?;
        Ok((c.derive, c.verdict))
    }

    /// Load: defaults, then `file` (when given), then `TRUTHSCALE_…` variables from `env`,
    /// then `overrides` (dotted key → value, from flags). Every numeric setting is checked
    /// here against its range, naming where it was set (the file and line, the variable, or
    /// the flags); [`Config::validate`] checks them again, with everything else.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file or environment and the key.
    pub fn load(
        file: Option<&Path>,
        env: &[(String, String)],
        overrides: &[(&str, String)],
    ) -> Result<Config, ConfigError> {
        // The defaults hold only the `[source]` keys every kind has: a kind's own settings
        // default in its own struct, so that choosing another kind carries none across. The
        // kind too, so that an unset kind is seen as such (and defaults when deserialized).
        let mut defaults =
            toml::Table::try_from(Config::default()).map_err(|e| ConfigError::Load {
                origin: "defaults".into(),
                message: e.to_string(),
            })?;
        keep_common_source_keys(&mut defaults, false);
        let mut b = config::Config::builder().add_source(config::File::from_str(
            &defaults.to_string(),
            config::FileFormat::Toml,
        ));
        let mut file_text = None;
        if let Some(f) = file {
            let (text, table) = file_layer(f, upper_kind(env, overrides).as_deref())?;
            b = b.add_source(config::File::from_str(
                &table.to_string(),
                config::FileFormat::Toml,
            ));
            file_text = Some((f, text));
        }
        // Every `TRUTHSCALE_` variable is a setting, but the password `report` and
        // `analyze --prometheus` read, which a shell or pod may hold for them, and the
        // variables Kubernetes writes for a Service named `truthscale…` in the namespace.
        let mut env_map: config::Map<String, String> = env
            .iter()
            .filter(|(k, _)| {
                k.starts_with("TRUTHSCALE_")
                    && k != crate::history::PASSWORD_ENV
                    && !is_service_link(k)
            })
            .cloned()
            .collect();
        check_env_numbers(&env_map, &defaults)?;
        let env_keys: Vec<String> = env_map.keys().cloned().collect();
        let lists = env_lists(&mut env_map);
        b = b.add_source(env_layer(env_map));
        if let Some(lists) = lists {
            b = b.add_source(lists);
        }
        for (k, v) in overrides {
            b = b
                .set_override(*k, flag_value(v))
                .map_err(|e| ConfigError::Load {
                    origin: "flags".into(),
                    message: e.to_string(),
                })?;
        }
        let built = b.build().map_err(|e| ConfigError::Load {
            origin: "configuration".into(),
            message: e.to_string(),
        })?;
        let mut config: Config =
            built
                .try_deserialize::<Config>()
                .map_err(|e| ConfigError::Load {
                    origin: layers_above_the_file(&env_keys, overrides),
                    message: e.to_string(),
                })?;
        config.identity.text_from(env);
        // The numbers of all the layers together, each problem named by where it was set.
        let problems = config.check_numbers(true);
        if problems.is_empty() {
            return Ok(config);
        }
        let file_text = file_text.as_ref().map(|(f, t)| (*f, t.as_str()));
        Err(ConfigError::Thresholds(
            problems
                .iter()
                .map(|p| format!("{}{p}", origin_of(&p.key, file_text, env, overrides)))
                .collect(),
        ))
    }

    /// Check every value and resolve the Downward API fallbacks from `env`.
    ///
    /// # Errors
    /// A [`ConfigError::Invalid`] naming the key.
    pub fn validate(&self, env: &[(String, String)]) -> Result<Settings, ConfigError> {
        // The numbers, as `load` checked them (for a `Config` built in code, the only check).
        let problems = self.check_numbers(true);
        if !problems.is_empty() {
            return Err(ConfigError::Thresholds(
                problems.into_iter().map(|p| p.to_string()).collect(),
            ));
        }
        let listen = self.listen()?;
        let (interval, stale_after) = self.source_timing()?;
        self.source.config.check().map_err(ConfigError::from)?;
        self.source
            .config
            .check_within(interval, stale_after)
            .map_err(ConfigError::from)?;
        let request_timeout = duration(
            "http.request_timeout",
            &self.http.request_timeout,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )?;
        let getenv = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let otlp = self.otlp.validate(env).map_err(ConfigError::from)?;
        let engine = self.engine.validate().map_err(ConfigError::from)?;
        let identity = self.identity_from(&getenv);
        let (pod_resources, node) = self.mode_settings(&identity, &getenv)?;
        let source_context = sources::Context {
            interval,
            stale_after,
            node: identity.node.clone(),
            pod: identity.pod.clone(),
            namespace: identity.namespace.clone(),
            node_ip: getenv("NODE_IP"),
            nvidia_visible_devices: getenv("NVIDIA_VISIBLE_DEVICES"),
        };
        Ok(Settings {
            listen,
            // Empty (`TRUTHSCALE_WEB_CONFIG_FILE=`, an unset chart value) is none, as an
            // empty identity variable is: not a file named "".
            web_config_file: self
                .web_config_file
                .clone()
                .filter(|p| !p.as_os_str().is_empty()),
            source: self.source.config.clone(),
            source_context,
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
            pod_resources,
            node,
            max_series: self.max_series,
        })
    }

    /// [`Config::validate`], where its error is about one key said with where that key was
    /// set, as [`Config::load`] says a number's: the file and line (`file`, as loaded), the
    /// variable, or the flags (`overrides`). A key left at its default is named alone.
    ///
    /// # Errors
    /// As [`Config::validate`].
    pub fn validate_at(
        &self,
        file: Option<&Path>,
        env: &[(String, String)],
        overrides: &[(&str, String)],
    ) -> Result<Settings, ConfigError> {
        match self.validate(env) {
            Err(ConfigError::Invalid { key, message }) => {
                // The file as loaded; were it gone since, the key is named alone.
                let text = file.and_then(|f| {
                    crate::bounds::read_file_to_string(f, crate::bounds::MAX_CONFIG_FILE).ok()
                });
                let located = file.zip(text.as_deref());
                let origin = origin_of(key, located, env, overrides);
                match origin.strip_suffix(": ") {
                    Some(origin) => Err(ConfigError::Load {
                        origin: origin.to_string(),
                        message: format!("{key}: {message}"),
                    }),
                    None => Err(ConfigError::Invalid { key, message }),
                }
            }
            other => other,
        }
    }

    /// `listen_address` as an address and port.
    fn listen(&self) -> Result<SocketAddr, ConfigError> {
        self.listen_address
            .trim()
            .parse()
            .map_err(|_| ConfigError::Invalid {
                key: "listen_address",
                message: format!(
                    "{:?} is not ADDRESS:PORT (e.g. 0.0.0.0:{DEFAULT_PORT})",
                    self.listen_address
                ),
            })
    }

    /// The sampling interval and the stale period (three intervals when unset, never less
    /// than one).
    fn source_timing(&self) -> Result<(Duration, Duration), ConfigError> {
        let interval = duration(
            "source.interval",
            &self.source.interval,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )?;
        let stale_after = if self.source.stale_after.trim().is_empty() {
            interval * 3
        } else {
            duration(
                "source.stale_after",
                &self.source.stale_after,
                Duration::from_millis(100),
                Duration::from_secs(24 * 3600),
            )?
        };
        if stale_after < interval {
            return Err(ConfigError::Invalid {
                key: "source.stale_after",
                message: "must be at least one interval".into(),
            });
        }
        Ok((interval, stale_after))
    }

    /// Who this process speaks for: `[identity]`, else the Downward API variables. In node
    /// mode the agent's own pod is not the GPUs' pod: only the node is its identity.
    /// A key set to an empty value (`TRUTHSCALE_IDENTITY__POD=`) is unset, as an empty
    /// Downward API variable is: never an empty label over the variable's value.
    fn identity_from(&self, getenv: &dyn Fn(&str) -> Option<String>) -> Identity {
        let id = &self.identity;
        let or = |key: &Option<String>, var: &str| {
            key.clone()
                .filter(|v| !v.trim().is_empty())
                .or_else(|| getenv(var))
        };
        let node = or(&id.node, "NODE_NAME");
        match self.mode {
            // A namespace or container names a pod's: without a pod (a `CONTAINER_NAME` some
            // other runtime set, outside Kubernetes), they would label the GPUs with half a
            // workload, so neither is taken.
            Mode::Sidecar => {
                let pod = or(&id.pod, "POD_NAME");
                let of_pod = |key: &Option<String>, var: &str| pod.as_ref().and(or(key, var));
                Identity {
                    namespace: of_pod(&id.namespace, "POD_NAMESPACE"),
                    container: of_pod(&id.container, "CONTAINER_NAME"),
                    pod,
                    node,
                }
            }
            Mode::Node => Identity {
                pod: None,
                namespace: None,
                container: None,
                node,
            },
        }
    }

    /// The mode's own settings: the sidecar's pod resources, or the node agent's (node mode
    /// lists every pod: it reads no `[sidecar]` key).
    fn mode_settings(
        &self,
        identity: &Identity,
        getenv: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(Option<SidecarSettings>, Option<NodeSettings>), ConfigError> {
        let (mode, other, set) = match self.mode {
            Mode::Sidecar => ("sidecar", "node", first_set_key(&self.node)),
            Mode::Node => ("node", "sidecar", first_set_key(&self.sidecar)),
        };
        if let Some(key) = set {
            return Err(ConfigError::Invalid {
                key: "mode",
                message: format!(
                    "{mode}, but {other}.{key} is set: [{other}] is read only in {other} mode; set mode = \"{other}\" (--mode {other}, TRUTHSCALE_MODE={other}), or leave {other}.{key} out"
                ),
            });
        }
        Ok(match self.mode {
            Mode::Sidecar => (
                self.sidecar
                    .validate(identity.pod.as_deref(), identity.namespace.as_deref())
                    .map_err(ConfigError::from)?,
                None,
            ),
            Mode::Node => (
                None,
                Some(
                    self.node
                        .validate(identity.node.as_deref(), getenv)
                        .map_err(ConfigError::from)?,
                ),
            ),
        })
    }

    /// Every numeric setting in its range: the `[derive]`, `[derive.phase]` and `[verdict]`
    /// thresholds (and every hysteresis band pointing the right way), `max_series`, the
    /// `[http]` limits, `engine.model_params`, and, with `with_source`, the source's own
    /// numbers. The ranges are in `docs/config.md`; [`crate::setting::INTEGERS`] holds the
    /// integers'.
    ///
    /// Each problem, keyed like `derive.phase.idle_enter_util`.
    pub(crate) fn check_numbers(
        &self,
        with_source: bool,
    ) -> Vec<truthscale_core::phase::InvalidSetting> {
        use crate::setting::{MAX_CONCURRENT_REQUESTS, MAX_HEADER_BYTES, MAX_SERIES};
        let mut problems = Vec::new();
        for r in [
            self.derive.validate("derive."),
            self.verdict.validate("verdict."),
        ] {
            if let Err(p) = r {
                problems.extend(p);
            }
        }
        let mut own = vec![
            MAX_SERIES.check(self.max_series),
            MAX_CONCURRENT_REQUESTS.check(self.http.max_concurrent_requests),
            MAX_HEADER_BYTES.check(self.http.max_header_bytes),
        ];
        if let Some(p) = self.engine.model_params {
            own.push(crate::enrichment::engine::check_model_params(p));
        }
        // The source's own check stops at its first problem: only a number's is taken here
        // (the others are `validate`'s, unchanged).
        if with_source
            && let Err(e) = self.source.config.check()
            && crate::setting::INTEGERS.iter().any(|r| r.key == e.key)
        {
            own.push(Err(e));
        }
        problems.extend(own.into_iter().filter_map(Result::err).map(|e| {
            truthscale_core::phase::InvalidSetting {
                key: e.key.to_string(),
                message: e.message,
            }
        }));
        problems
    }

    /// The configuration as TOML.
    ///
    /// # Errors
    /// Never in practice: every field serializes.
    pub(crate) fn to_toml(&self) -> Result<String, toml::ser::Error> {
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

    /// The offline commands' sections: the defaults where nothing sets them (read without
    /// building the whole configuration), the same as the whole configuration's; the
    /// `TRUTHSCALE_DERIVE__…` and `TRUTHSCALE_VERDICT__…` variables over them; the
    /// sidecar's variables not read.
    #[test]
    fn the_offline_sections_are_the_configurations() {
        let whole = Config::load(None, &[], &[]).unwrap();
        assert_eq!(
            Config::offline_sections(None, &[]).unwrap(),
            (whole.derive, whole.verdict)
        );
        let vars = env(&[
            ("TRUTHSCALE_VERDICT__IDLE_UTIL", "0.02"),
            ("TRUTHSCALE_SOURCE__KIND", "no-such-kind"),
        ]);
        let (_, verdict) = Config::offline_sections(None, &vars).unwrap();
        assert_eq!(verdict.idle_util, 0.02);
    }

    /// Every key of `config defaults` that holds a duration, with its section switched on
    /// (so that it is checked), refuses 0, a huge value and garbage, naming the key. The keys
    /// come from the defaults themselves, so a new duration key is walked without a line here.
    #[test]
    fn every_duration_key_refuses_zero_huge_and_garbage() {
        // With the simulator's table, so that a source's own duration key is walked too.
        let mut with_sim = Config::default();
        with_sim.source.config = sources::SourceConfig::Sim(Default::default());
        let defaults: toml::Table = toml::from_str(&with_sim.to_toml().unwrap()).unwrap();
        // (section, key) of every string that parses as a duration, or is the empty
        // `stale_after` (a duration left to its default).
        let mut keys = Vec::new();
        for (section, v) in &defaults {
            let Some(t) = v.as_table() else { continue };
            for (k, v) in t {
                if let Some(text) = v.as_str()
                    && (humantime::parse_duration(text).is_ok() || k == "stale_after")
                {
                    keys.push((section.clone(), k.clone()));
                }
            }
        }
        let names: Vec<String> = keys.iter().map(|(s, k)| format!("{s}.{k}")).collect();
        for expected in [
            "source.interval",
            "source.stale_after",
            "source.sample_every",
            "http.request_timeout",
            "engine.timeout",
            "sidecar.timeout",
            "node.timeout",
            "node.pod_labels_refresh",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} in {names:?}"
            );
        }
        let in_cluster = env(&[
            ("POD_NAME", "p"),
            ("POD_NAMESPACE", "ns"),
            ("NODE_NAME", "n1"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        for ((section, key), name) in keys.iter().zip(&names) {
            for bad in ["0s", "100y", "soon"] {
                let mut t = defaults.clone();
                let on = |t: &mut toml::Table, s: &str, k: &str, v: toml::Value| {
                    t.entry(s)
                        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                        .as_table_mut()
                        .unwrap()
                        .insert(k.into(), v);
                };
                // The engine's and the sidecar's keys with their feature off: a bad value is
                // refused before anyone turns it on.
                if section == "node" {
                    t.insert("mode".into(), "node".into());
                    on(&mut t, "node", "pod_labels", vec!["team"].into());
                }
                on(&mut t, section, key, bad.into());
                let c: Config = toml::from_str(&toml::to_string(&t).unwrap())
                    .unwrap_or_else(|e| panic!("{name} = {bad:?}: {e}"));
                match c.validate(&in_cluster) {
                    Err(ConfigError::Invalid { key: k, message }) => {
                        assert_eq!(k, name.as_str(), "{name} = {bad:?}: {message}");
                    }
                    other => panic!("{name} = {bad:?} was not refused naming it: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn max_series_has_a_ceiling() {
        let huge = "9".repeat(309);
        let err = Config::load(None, &env(&[("TRUTHSCALE_MAX_SERIES", &huge)]), &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "environment (TRUTHSCALE_MAX_SERIES): max_series: \"{}\"… (309 characters) is \
                 outside 100..=10000000",
                "9".repeat(40)
            )
        );
        // A `Config` built in code is checked by `validate` the same way.
        let c = Config {
            max_series: usize::MAX,
            ..Config::default()
        };
        assert_eq!(
            c.validate(&[]).unwrap_err().to_string(),
            "max_series: 18446744073709551615 is outside 100..=10000000"
        );
    }

    /// Every numeric key of the configuration, found in the defaults of every source kind,
    /// plus the ones the defaults leave out (`setting::OPTIONAL_FRACTIONS`, and
    /// `source.gpu_indices`, an empty list by default): the key, whether it is an integer,
    /// and the source kind it belongs to (for a `source.` key).
    fn numeric_keys() -> Vec<(String, bool, Option<&'static str>)> {
        fn walk(
            t: &toml::Table,
            prefix: &str,
            kind: Option<&'static str>,
            out: &mut Vec<(String, bool, Option<&'static str>)>,
        ) {
            for (k, v) in t {
                let key = format!("{prefix}{k}");
                let integer = match v {
                    toml::Value::Integer(_) => true,
                    toml::Value::Float(_) => false,
                    toml::Value::Table(t) => {
                        walk(t, &format!("{key}."), kind, out);
                        continue;
                    }
                    _ => continue,
                };
                if !out.iter().any(|(k, _, _)| *k == key) {
                    let kind = if key.starts_with("source.") {
                        kind
                    } else {
                        None
                    };
                    out.push((key, integer, kind));
                }
            }
        }
        let mut out = vec![(
            "source.gpu_indices".to_string(),
            true,
            Some("dcgm-exporter"),
        )];
        for k in crate::setting::OPTIONAL_FRACTIONS {
            out.push(((*k).to_string(), false, None));
        }
        for kind in sources::SourceConfig::KINDS {
            let mut t = toml::Table::new();
            t.insert("kind".into(), (*kind).into());
            let mut c = Config::default();
            c.source.config = sources::SourceConfig::deserialize(toml::Value::Table(t)).unwrap();
            let table: toml::Table = toml::from_str(&c.to_toml().unwrap()).unwrap();
            walk(&table, "", Some(kind), &mut out);
        }
        out
    }

    /// Every integer key has its range in `setting::INTEGERS` (a new one without a range
    /// fails here), every range there is a key, and each range is the one its check
    /// applies: its bounds pass, one past each is refused naming the key.
    #[test]
    fn every_numeric_key_has_a_range() {
        let keys = numeric_keys();
        let integers: Vec<&str> = keys
            .iter()
            .filter(|(_, i, _)| *i)
            .map(|(k, _, _)| k.as_str())
            .collect();
        let ranged: Vec<&str> = crate::setting::INTEGERS.iter().map(|r| r.key).collect();
        for k in &integers {
            assert!(ranged.contains(k), "{k} has no range in setting::INTEGERS");
        }
        for k in &ranged {
            assert!(
                integers.contains(k),
                "setting::INTEGERS has {k}, no such key"
            );
        }
        assert!(keys.len() > 40, "{keys:?}");
        for r in crate::setting::INTEGERS {
            let (_, _, kind) = keys.iter().find(|(k, _, _)| k == r.key).unwrap();
            for (value, ok) in [(r.min, true), (r.max, true), (r.min - 1, false)]
                .into_iter()
                .chain((r.max < i64::MAX).then(|| (r.max + 1, false)))
            {
                let text = if r.key == crate::setting::GPU_INDICES.key {
                    format!("[{value}]")
                } else {
                    value.to_string()
                };
                let c = with_value(r.key, &text, *kind);
                let problems: Vec<String> = match &c {
                    Ok(c) => c
                        .check_numbers(true)
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                    // Negative for an unsigned key: the schema refuses it.
                    Err(e) => vec![format!("{}: {e}", r.key)],
                };
                assert_eq!(problems.is_empty(), ok, "{} = {value}: {problems:?}", r.key);
                if !ok {
                    assert!(
                        problems[0].starts_with(&format!("{}: ", r.key)),
                        "{problems:?}"
                    );
                }
            }
        }
    }

    /// The defaults with `key` (dotted) set to the TOML `value`, under source `kind`.
    fn with_value(key: &str, value: &str, kind: Option<&str>) -> Result<Config, String> {
        let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
        let mut text = String::new();
        if section.is_empty() {
            text.push_str(&format!("{name} = {value}\n"));
        }
        if let Some(kind) = kind {
            text.push_str(&format!("[source]\nkind = \"{kind}\"\n"));
            if section == "source" {
                text.push_str(&format!("{name} = {value}\n"));
            }
        }
        if !section.is_empty() && section != "source" {
            text.push_str(&format!("[{section}]\n{name} = {value}\n"));
        }
        toml::from_str(&text).map_err(|e| e.message().to_string())
    }

    /// Hostile values of every numeric key, from a file and from the environment, are
    /// refused with an error naming the key and where it was set (the file and line, or the
    /// variable), and, for an integer, its range; never converted into something that
    /// passes (the conversion rounds `1e19` and `inf` to the largest integer, `NaN` to 0).
    #[test]
    fn hostile_numbers_are_refused_naming_the_key_file_and_variable() {
        let dir = std::env::temp_dir().join(format!("truthscale-numbers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        for (key, integer, kind) in numeric_keys() {
            let range = crate::setting::INTEGERS.iter().find(|r| r.key == key);
            let var = format!("TRUTHSCALE_{}", key.to_ascii_uppercase().replace('.', "__"));
            let env_values: &[&str] = if integer {
                &[
                    "1e19",
                    "1e308",
                    "inf",
                    "NaN",
                    "-1",
                    "1.5",
                    "18446744073709551616",
                ]
            } else {
                &["1e308", "-1e308", "inf", "-inf", "NaN", "abc"]
            };
            for v in env_values {
                let mut vars = vec![(var.clone(), (*v).to_string())];
                if let Some(kind) = kind {
                    vars.push(("TRUTHSCALE_SOURCE__KIND".into(), kind.into()));
                }
                let err = Config::load(None, &vars, &[])
                    .and_then(|c| c.validate(&vars))
                    .err()
                    .unwrap_or_else(|| panic!("{var}={v} was accepted"))
                    .to_string();
                // A fraction out of range may also turn hysteresis bands round: more lines,
                // each naming its key.
                assert!(!integer || err.lines().count() == 1, "{err}");
                let err = err.lines().next().unwrap_or_default().to_string();
                let head = format!("environment ({var}): {key}: ");
                assert!(err.starts_with(&head), "{var}={v}: {err}");
                match range {
                    Some(r) if v.parse::<i128>().is_ok() => assert_eq!(
                        err,
                        format!("{head}\"{v}\" is outside {}..={}", r.min, r.max)
                    ),
                    Some(r) => assert_eq!(
                        err,
                        format!(
                            "{head}\"{v}\" is not a whole number; use one in {}..={}",
                            r.min, r.max
                        )
                    ),
                    None => assert!(
                        err.contains(" is not a number; use ") || err.contains(" is outside ["),
                        "{err}"
                    ),
                }
            }
            let file_values: &[&str] = if integer {
                &["1e19", "inf", "nan", "-1", "1.5", "99999999999999999999"]
            } else {
                &["1e308", "-1e308", "inf", "-inf", "nan"]
            };
            for v in file_values {
                check_file_value(&file, &key, v, kind, range);
            }
            if let Some(r) = range
                && r.max < i64::MAX
                && r.key != crate::setting::SWITCH_AFTER.key
                && r.key != crate::setting::STRAGGLER_MIN_MEMBERS.key
            {
                let over = (r.max + 1).to_string();
                let (err, line) = check_file_value(&file, &key, &over, kind, range);
                assert_eq!(
                    err,
                    format!(
                        "{}:{line}: {key}: {over} is outside {}..={}",
                        file.display(),
                        r.min,
                        r.max
                    )
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `key = value` in the file `file` (under source `kind`) is refused by `load`, naming
    /// the file, the line and the key (and the range, for an integer); the error and line.
    fn check_file_value(
        file: &Path,
        key: &str,
        value: &str,
        kind: Option<&str>,
        range: Option<&crate::setting::IntRange>,
    ) -> (String, usize) {
        let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
        let value = if key == crate::setting::GPU_INDICES.key {
            format!("[{value}]")
        } else {
            value.to_string()
        };
        let mut text = String::new();
        if section.is_empty() {
            text.push_str(&format!("{name} = {value}\n"));
        }
        if let Some(kind) = kind {
            text.push_str(&format!("[source]\nkind = \"{kind}\"\n"));
        } else if !section.is_empty() {
            text.push_str(&format!("[{section}]\n"));
        }
        if !section.is_empty() {
            text.push_str(&format!("{name} = {value}\n"));
        }
        let line = text.lines().count();
        std::fs::write(file, &text).unwrap();
        let err = Config::load(Some(file), &[], &[])
            .and_then(|c| c.validate(&[]))
            .err()
            .unwrap_or_else(|| panic!("{key} = {value} was accepted"))
            .to_string();
        let head = format!("{}:{line}: {key}: ", file.display());
        assert!(err.starts_with(&head), "{key} = {value}: {err}");
        assert!(range.is_none() || err.lines().count() == 1, "{err}");
        let err = err.lines().next().unwrap_or_default().to_string();
        if let Some(r) = range {
            assert!(
                err.contains(&format!("{}..={}", r.min, r.max)) || err.contains("[1, 100]"),
                "{err}"
            );
        }
        (err, line)
    }

    /// A value the validation refuses (a duration, an address) is said with where it was
    /// set, as a number is: the file and line, the variable, or the flags; a default alone.
    #[test]
    fn a_refused_duration_or_address_names_its_file_line_variable_or_flag() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-at-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            "mode = \"sidecar\"\n\n[source]\ninterval = \"5 parsecs\"\n",
        )
        .unwrap();
        let refused = |env: &[(String, String)], flags: &[(&str, String)]| {
            Config::load(Some(&f), env, flags)
                .unwrap()
                .validate_at(Some(&f), env, flags)
                .unwrap_err()
                .to_string()
        };
        let head = "source.interval: \"5 parsecs\" is not a duration";
        let err = refused(&[], &[]);
        assert!(
            err.starts_with(&format!("{}:4: {head}", f.display())),
            "{err}"
        );
        let vars = env(&[("TRUTHSCALE_SOURCE__INTERVAL", "soon")]);
        let err = refused(&vars, &[]);
        let head = "source.interval: \"soon\" is not a duration";
        assert!(
            err.starts_with(&format!(
                "environment (TRUTHSCALE_SOURCE__INTERVAL): {head}"
            )),
            "{err}"
        );
        let err = refused(&vars, &[("source.interval", "soon".to_string())]);
        assert!(err.starts_with(&format!("flags: {head}")), "{err}");
        std::fs::write(&f, "\n[http]\nrequest_timeout = \"1s\"\n").unwrap();
        let vars = env(&[("TRUTHSCALE_LISTEN_ADDRESS", "9488")]);
        assert!(
            refused(&vars, &[])
                .starts_with("environment (TRUTHSCALE_LISTEN_ADDRESS): listen_address: ")
        );
        // Set nowhere: the key alone, as `validate` says it.
        let c = Config {
            listen_address: "9488".into(),
            ..Config::default()
        };
        let err = c.validate_at(Some(&f), &[], &[]).unwrap_err().to_string();
        assert!(err.starts_with("listen_address: "), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An empty web config path (`TRUTHSCALE_WEB_CONFIG_FILE=`) is none, not a file named
    /// "" that cannot be opened.
    #[test]
    fn an_empty_web_config_path_is_none() {
        let vars = env(&[("TRUTHSCALE_WEB_CONFIG_FILE", "")]);
        let s = Config::load(None, &vars, &[])
            .unwrap()
            .validate(&vars)
            .unwrap();
        assert_eq!(s.web_config_file, None);
        let vars = env(&[("TRUTHSCALE_WEB_CONFIG_FILE", "web.yml")]);
        let s = Config::load(None, &vars, &[])
            .unwrap()
            .validate(&vars)
            .unwrap();
        assert_eq!(s.web_config_file.as_deref(), Some(Path::new("web.yml")));
    }

    /// The variables Kubernetes writes for a Service named `truthscale` (or
    /// `truthscale-metrics`) in the pod's namespace are not settings: a sidecar beside such
    /// a Service read `TRUTHSCALE_SERVICE_PORT_METRICS` as the unknown key
    /// `service_port_metrics` and stopped. Settings and misspelt settings are still read.
    #[test]
    fn service_link_variables_are_not_settings() {
        let links = [
            "TRUTHSCALE_SERVICE_HOST",
            "TRUTHSCALE_SERVICE_PORT",
            "TRUTHSCALE_SERVICE_PORT_METRICS",
            "TRUTHSCALE_PORT",
            "TRUTHSCALE_PORT_9488_TCP",
            "TRUTHSCALE_PORT_9488_TCP_PROTO",
            "TRUTHSCALE_PORT_9488_TCP_PORT",
            "TRUTHSCALE_PORT_9488_TCP_ADDR",
            "TRUTHSCALE_METRICS_SERVICE_HOST",
            "TRUTHSCALE_METRICS_PORT_9488_UDP",
        ];
        for v in links {
            assert!(is_service_link(v), "{v}");
        }
        let values = [
            "10.0.0.5",
            "9488",
            "9488",
            "tcp://10.0.0.5:9488",
            "tcp://10.0.0.5:9488",
            "tcp",
            "9488",
            "10.0.0.5",
            "10.0.0.6",
            "udp://10.0.0.6:9488",
        ];
        let mut vars: Vec<(String, String)> = links
            .iter()
            .zip(values)
            .map(|(k, v)| ((*k).to_string(), v.to_string()))
            .collect();
        vars.push(("TRUTHSCALE_MAX_SERIES".into(), "123".into()));
        let c = Config::load(None, &vars, &[]).unwrap();
        assert_eq!(c.max_series, 123);
        for setting in [
            "TRUTHSCALE_LISTEN_ADDRESS",
            "TRUTHSCALE_MAX_SERIES",
            "TRUTHSCALE_SOURCE__PORT",
            "TRUTHSCALE_PORTS",
            "TRUTHSCALE_PORT_X_TCP",
            "TRUTHSCALE_PORT_9488_TCP_HOST",
            "TRUTHSCALE_SERVICE",
        ] {
            assert!(!is_service_link(setting), "{setting}");
        }
        let err = Config::load(None, &env(&[("TRUTHSCALE_PORTS", "1")]), &[]).unwrap_err();
        assert!(err.to_string().contains("ports"), "{err}");
    }

    /// What `serve` aborted on: above the semaphore's limit, through the environment, is
    /// refused by the same check that `config check` runs.
    #[test]
    fn max_concurrent_requests_over_the_semaphore_limit_is_refused() {
        for v in ["2305843009213693952", "1e19", "1e308", "inf"] {
            let vars = env(&[("TRUTHSCALE_HTTP__MAX_CONCURRENT_REQUESTS", v)]);
            let err = Config::load(None, &vars, &[]).unwrap_err().to_string();
            let why = if v.contains(['e', 'i']) {
                "is not a whole number; use one in"
            } else {
                "is outside"
            };
            assert_eq!(
                err,
                format!(
                    "environment (TRUTHSCALE_HTTP__MAX_CONCURRENT_REQUESTS): \
                     http.max_concurrent_requests: \"{v}\" {why} 1..=65536"
                )
            );
        }
        let c = Config {
            http: HttpConfig {
                max_concurrent_requests: 65_536,
                ..HttpConfig::default()
            },
            ..Config::default()
        };
        assert_eq!(c.validate(&[]).unwrap().max_concurrent_requests, 65_536);
    }

    /// The configuration file is read bounded: `/dev/zero`, a FIFO, a directory and a file
    /// over 1 MiB are refused at once, naming the file.
    #[test]
    fn the_configuration_file_is_read_bounded() {
        let dir = std::env::temp_dir().join(format!("truthscale-cfgfile-{}", std::process::id()));
        let t = std::time::Instant::now();
        for (path, why) in crate::bounds::hostile::files(&dir, crate::bounds::MAX_CONFIG_FILE) {
            let err = Config::load(Some(&path), &[], &[]).unwrap_err().to_string();
            assert_eq!(err, format!("{}: cannot read: {why}", path.display()));
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn defaults_validate() {
        let s = Config::default().validate(&[]).unwrap();
        assert_eq!(s.listen.port(), DEFAULT_PORT);
        assert_eq!(s.interval, Duration::from_secs(1));
        assert_eq!(s.stale_after, Duration::from_secs(3));
        // No source configured: auto (NVML when a driver is present), never the simulator.
        match s.source {
            sources::SourceConfig::Auto(a) => {
                assert_eq!(a.0.library, PathBuf::from("libnvidia-ml.so.1"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.source_context.interval, Duration::from_secs(1));
    }

    /// Without a kind (file, environment or flag), the source is auto; the simulator's keys
    /// then are refused with a hint that the default is not the simulator.
    #[test]
    fn no_kind_is_auto_and_sim_keys_without_it_say_so() {
        let c = Config::load(None, &[], &[]).unwrap();
        assert_eq!(
            c.source.config,
            sources::SourceConfig::Auto(Default::default())
        );
        let c = Config::load(None, &[], &[("mode", "node".into())]).unwrap();
        assert_eq!(c.mode, Mode::Node);
        assert_eq!(c.source.config.kind(), "auto");
        let err = Config::load(None, &[], &[("source.gpus", "8".into())])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "flags (source.gpus): in [source]: unknown field `gpus`, expected one of `interval`, \
             `stale_after`, `kind`, `library`, `per_process_series` (no source.kind is set, so it is auto, which reads NVML: set \
             the kind these keys belong to, e.g. --source sim or kind = \"sim\") for key \
             `source`"
        );
        let flags = [("source.kind", "sim".into()), ("source.gpus", "8".into())];
        let c = Config::load(None, &[], &flags).unwrap();
        assert!(matches!(&c.source.config, sources::SourceConfig::Sim(s) if s.gpus == 8));
    }

    /// A dcgm-exporter scrape set longer than the stale period's whole intervals less half an
    /// interval is refused, naming the key and the stale period: each hung scrape would be
    /// served stale, then fresh, by turns.
    #[test]
    fn a_scrape_timeout_past_the_stale_period_is_refused() {
        let with = |timeout: &str, interval: &str| {
            let flags = sources::SourceConfig::shorthand("dcgm-exporter").unwrap();
            let over = [
                flags[0].clone(),
                ("source.scrape_timeout", timeout.into()),
                ("source.interval", interval.into()),
            ];
            Config::load(None, &[], &over).unwrap().validate(&[])
        };
        // 1 s interval: a stale period of 3 s, a scrape of at most 2.5 s.
        let e = with("3s", "1s").unwrap_err().to_string();
        assert!(
            e.contains("source.scrape_timeout")
                && e.contains("3s is longer than 2s 500ms (the stale period 3s"),
            "{e}"
        );
        assert!(with("2500ms", "1s").is_ok());
        assert!(
            with("5s", "2s").is_ok(),
            "a stale period of 6 s: at most 5 s"
        );
        assert!(with("5001ms", "2s").is_err());
    }

    /// A kind chosen by a flag or the environment replaces the file's `[source]` settings;
    /// without one, the file's kind and settings hold.
    #[test]
    fn a_kind_above_the_file_replaces_its_source_settings() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-kind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k.toml");
        std::fs::write(
            &f,
            "[source]\nkind = \"dcgm-exporter\"\nurl = \"http://10.0.0.9:9400/metrics\"\ninterval = \"2s\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&f), &[], &[]).unwrap();
        assert!(
            matches!(&c.source.config, sources::SourceConfig::DcgmExporter(d) if d.url.as_deref() == Some("http://10.0.0.9:9400/metrics"))
        );
        let flags = sources::SourceConfig::shorthand("sim:decode-only").unwrap();
        let c = Config::load(Some(&f), &[], &flags).unwrap();
        assert_eq!(c.source.interval, "2s");
        assert!(
            matches!(&c.source.config, sources::SourceConfig::Sim(s) if s.scenario.as_deref() == Some("decode-only") && s.gpus == 4)
        );
        // What the kind above it leaves unused is named (logged as a warning).
        let mut table: toml::Table = toml::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(keep_common_source_keys(&mut table, false), ["url"]);
        let c = Config::load(Some(&f), &env(&[("TRUTHSCALE_SOURCE__KIND", "null")]), &[]).unwrap();
        assert_eq!(
            c.source.config,
            sources::SourceConfig::Null(Default::default())
        );
        // The same kind keeps the file's settings under the flag's.
        let flags = sources::SourceConfig::shorthand("dcgm-exporter").unwrap();
        let c = Config::load(
            Some(&f),
            &[],
            &[flags[0].clone(), ("source.scrape_timeout", "2s".into())],
        )
        .unwrap();
        assert!(
            matches!(&c.source.config, sources::SourceConfig::DcgmExporter(d) if d.url.is_some() && d.scrape_timeout == "2s")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn precedence_file_env_flags() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.toml");
        std::fs::write(
            &f,
            "[source]\nkind = \"sim\"\ninterval = \"2s\"\ngpus = 2\n[identity]\npod = \"from-file\"\n",
        )
        .unwrap();
        let e = env(&[("TRUTHSCALE_SOURCE__GPUS", "3"), ("POD_NAME", "downward")]);
        let c = Config::load(Some(&f), &e, &[]).unwrap();
        assert_eq!(c.source.interval, "2s");
        let gpus = |c: &Config| match &c.source.config {
            sources::SourceConfig::Sim(s) => s.gpus,
            other => panic!("{other:?}"),
        };
        assert_eq!(gpus(&c), 3);
        let c = Config::load(Some(&f), &e, &[("source.gpus", "5".into())]).unwrap();
        assert_eq!(gpus(&c), 5);
        let s = c.validate(&e).unwrap();
        assert_eq!(s.identity.pod.as_deref(), Some("from-file"));
        let s = Config::default().validate(&e).unwrap();
        assert_eq!(s.identity.pod.as_deref(), Some("downward"));
        // An empty key is unset: the Downward API variable applies, not an empty label.
        // Names that look like numbers are names, as written.
        let e = env(&[
            ("TRUTHSCALE_IDENTITY__POD", "0123"),
            ("TRUTHSCALE_IDENTITY__NAMESPACE", "1e3"),
        ]);
        let s = Config::load(None, &e, &[]).unwrap().validate(&e).unwrap();
        assert_eq!(
            (s.identity.pod.as_deref(), s.identity.namespace.as_deref()),
            (Some("0123"), Some("1e3"))
        );
        let empty = env(&[("TRUTHSCALE_IDENTITY__POD", " "), ("POD_NAME", "downward")]);
        let s = Config::load(None, &empty, &[])
            .unwrap()
            .validate(&empty)
            .unwrap();
        assert_eq!(s.identity.pod.as_deref(), Some("downward"));
        // A container or namespace without a pod is half a workload: no label at all.
        let half = env(&[
            ("CONTAINER_NAME", "uid-x"),
            ("POD_NAMESPACE", "ns"),
            ("NODE_NAME", "n1"),
        ]);
        let s = Config::load(None, &half, &[])
            .unwrap()
            .validate(&half)
            .unwrap();
        let id = &s.identity;
        assert_eq!(
            (
                id.pod.as_deref(),
                id.namespace.as_deref(),
                id.container.as_deref()
            ),
            (None, None, None)
        );
        assert_eq!(id.node.as_deref(), Some("n1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `TRUTHSCALE_SOURCE__GPU_INDICES`, as documented: a list at commas, spaces or not, one
    /// index, or nothing (every GPU); never an error for a valid value.
    #[test]
    fn gpu_indices_from_the_environment() {
        for (value, want) in [
            ("0,1", vec![0, 1]),
            ("0, 1", vec![0, 1]),
            ("3", vec![3]),
            ("", vec![]),
        ] {
            let e = env(&[
                ("TRUTHSCALE_SOURCE__KIND", "dcgm-exporter"),
                ("TRUTHSCALE_SOURCE__GPU_INDICES", value),
            ]);
            let c = Config::load(None, &e, &[]).unwrap_or_else(|e| panic!("{value:?}: {e}"));
            match &c.source.config {
                sources::SourceConfig::DcgmExporter(d) => assert_eq!(d.gpu_indices, want),
                other => panic!("{other:?}"),
            }
        }
        let e = env(&[
            ("TRUTHSCALE_SOURCE__KIND", "dcgm-exporter"),
            ("TRUTHSCALE_SOURCE__GPU_INDICES", "0,x"),
        ]);
        let err = Config::load(None, &e, &[]).unwrap_err().to_string();
        assert!(err.contains("TRUTHSCALE_SOURCE__GPU_INDICES"), "{err}");
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
        // The password `report` reads is no setting, and no stray variable either.
        let vars = env(&[("TRUTHSCALE_PROMETHEUS_PASSWORD", "s3cret")]);
        assert_eq!(
            Config::load(None, &vars, &[]).unwrap(),
            Config::load(None, &[], &[]).unwrap()
        );
        let mut c = Config::default();
        c.source.interval = "50ms".into();
        assert_eq!(
            c.validate(&[]).unwrap_err().to_string(),
            "source.interval: \"50ms\" is outside 100ms..=1h"
        );
        c.source.interval = "365d".into();
        assert_eq!(
            c.validate(&[]).unwrap_err().to_string(),
            "source.interval: \"365d\" is outside 100ms..=1h"
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
        let err = Config::load(None, &env(&[("TRUTHSCALE_SOURCE__KIND", "gpu")]), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `gpu`"), "{err}");
        // The mode names the modes, not the configuration library's enum words.
        let err = Config::load(None, &env(&[("TRUTHSCALE_MODE", "cluster")]), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("TRUTHSCALE_MODE")
                && err.contains("\"cluster\" is not a mode: sidecar or node"),
            "{err}"
        );
        std::fs::write(&f, "[source]\nkind = \"sim\"\nurl = \"http://x\"\n").unwrap();
        let err = Config::load(Some(&f), &[], &[]).unwrap_err().to_string();
        assert!(
            err.contains("bad.toml:3:") && err.contains("unknown field `url`"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A misspelt key is named on its own line (not its table's), with the valid key it is
    /// closest to; `[source]`'s list of keys holds the keys every kind has.
    #[test]
    fn a_misspelt_key_is_named_on_its_line_with_the_closest_key() {
        let dir = std::env::temp_dir().join(format!("ts-cfg-typo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("typo.toml");
        std::fs::write(&f, "[source]\nkind = \"sim\"\nintervall = \"5s\"\n").unwrap();
        let err = Config::load(Some(&f), &[], &[]).unwrap_err().to_string();
        let at = format!("{}:3: in [source]: unknown field `intervall`", f.display());
        assert!(err.starts_with(&at), "{err}");
        assert!(
            err.contains("expected one of `interval`, `stale_after`, `kind`,"),
            "{err}"
        );
        assert!(err.ends_with("; did you mean `interval`?"), "{err}");
        std::fs::write(&f, "[http]\n\nrequest_timout = \"5s\"\n").unwrap();
        let err = Config::load(Some(&f), &[], &[]).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "{}:3: unknown field `request_timout`",
                f.display()
            )) && err.ends_with("; did you mean `request_timeout`?"),
            "{err}"
        );
        // Nothing close: no guess.
        std::fs::write(&f, "colour = 1\n").unwrap();
        let err = Config::load(Some(&f), &[], &[]).unwrap_err().to_string();
        assert!(
            err.contains("unknown field `colour`") && !err.contains("did you mean"),
            "{err}"
        );
        assert_eq!(
            closest("intervall", &["interval", "stale_after"]),
            Some("interval")
        );
        assert_eq!(crate::setting::edit_distance("kitten", "sitting"), 3);
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
        // The same from the environment names the variable and the key.
        let err = Config::load(
            None,
            &env(&[("TRUTHSCALE_DERIVE__PHASE__SWITCH_AFTER", "0")]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "environment (TRUTHSCALE_DERIVE__PHASE__SWITCH_AFTER): derive.phase.switch_after: \
             \"0\" is outside 1..=100"
        );
        let err = Config::load(None, &env(&[("TRUTHSCALE_VERDICT__BUSY_UTIL", "2")]), &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "environment (TRUTHSCALE_VERDICT__BUSY_UTIL): verdict.busy_util: 2 is outside [0, 1]"
        );
        // A `Config` built in code: `validate` checks it, naming the key.
        let mut c = Config::default();
        c.derive.phase.switch_after = 0;
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
        // The endpoint stays the variable's: only the variables are passed on.
        assert_eq!(
            s.otlp,
            Some(OtlpSettings {
                endpoint: None,
                protocol: None,
                timeout: None,
                interval: None,
                temporality: None,
                effective_timeout: Duration::from_secs(10),
                headers: Default::default(),
                compression: None,
                tls: Default::default(),
                env: env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")]),
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
        assert!(c.validate(&[]).unwrap().otlp.is_some());
        c.otlp.endpoint = Some("ftp://c:4317".into());
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("otlp.endpoint:")
        );
    }

    #[test]
    fn nvml_library_key() {
        let library = |c: &Config| match c.validate(&[]).unwrap().source {
            sources::SourceConfig::Nvml(n) => n.library,
            other => panic!("{other:?}"),
        };
        let mut d = Config::default();
        d.source.config = sources::SourceConfig::Nvml(Default::default());
        assert_eq!(library(&d), PathBuf::from("libnvidia-ml.so.1"));
        let c = Config::load(
            None,
            &env(&[
                ("TRUTHSCALE_SOURCE__KIND", "nvml"),
                ("TRUTHSCALE_SOURCE__LIBRARY", "/env/libnvidia-ml.so.1"),
            ]),
            &[("source.library", "/flag/libnvidia-ml.so.1".into())],
        )
        .unwrap();
        assert_eq!(library(&c), PathBuf::from("/flag/libnvidia-ml.so.1"));
        let mut c = Config::default();
        c.source.config = sources::SourceConfig::Nvml(crate::sources::nvml::NvmlConfig {
            library: PathBuf::new(),
            per_process_series: false,
        });
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("source.library:")
        );
    }

    /// A list variable holding one item that reads as a number or a boolean is a list of
    /// that text, as written: label keys `123`, `007` and `TRUE` are keys.
    #[test]
    fn a_list_variable_of_one_number_is_a_list_of_its_text() {
        for key in ["123", "007", "TRUE", "1.5"] {
            let vars = [
                ("TRUTHSCALE_MODE", "node"),
                ("TRUTHSCALE_NODE__POD_LABELS", key),
            ];
            let c = Config::load(None, &env(&vars), &[]).unwrap();
            assert_eq!(c.node.pod_labels, [key], "{key}");
        }
        let vars = [("TRUTHSCALE_NODE__POD_LABELS", "team,007")];
        let c = Config::load(None, &env(&vars), &[]).unwrap();
        assert_eq!(c.node.pod_labels, ["team", "007"]);
    }

    /// `[node] pod_labels` from the environment (a comma-separated list), checked at load;
    /// without the node's name the start is refused.
    #[test]
    fn pod_labels_from_the_environment_need_a_node_name() {
        let vars = [
            ("TRUTHSCALE_MODE", "node"),
            ("TRUTHSCALE_NODE__POD_LABELS", "app.kubernetes.io/name,team"),
            ("TRUTHSCALE_NODE__POD_LABELS_REFRESH", "5s"),
            ("TRUTHSCALE_NODE__API_SERVER", "https://127.0.0.1:6443"),
        ];
        let c = Config::load(None, &env(&vars), &[]).unwrap();
        assert_eq!(c.node.pod_labels, ["app.kubernetes.io/name", "team"]);
        let err = c.validate(&env(&vars)).unwrap_err().to_string();
        assert!(
            err.starts_with("node.pod_labels:") && err.contains("NODE_NAME"),
            "{err}"
        );
        let mut with_node = env(&vars);
        with_node.push(("NODE_NAME".into(), "gpu-node-3".into()));
        let p = c
            .validate(&with_node)
            .unwrap()
            .node
            .unwrap()
            .pod_labels
            .unwrap();
        assert_eq!(p.node, "gpu-node-3");
        assert_eq!(p.refresh, Duration::from_secs(5));
        assert_eq!(p.api_server, "https://127.0.0.1:6443");
        let names: Vec<&str> = p.keys.iter().map(|k| k.name).collect();
        assert_eq!(names, ["label_app_kubernetes_io_name", "label_team"]);
        // An empty variable is off; a bad key is named.
        let c = Config::load(
            None,
            &env(&[
                ("TRUTHSCALE_MODE", "node"),
                ("TRUTHSCALE_NODE__POD_LABELS", ""),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.validate(&[]).unwrap().node.unwrap().pod_labels, None);
        let c = Config::load(
            None,
            &env(&[
                ("TRUTHSCALE_MODE", "node"),
                ("TRUTHSCALE_NODE__POD_LABELS", "team,Bad Key"),
            ]),
            &[],
        )
        .unwrap();
        let err = c.validate(&with_node).unwrap_err().to_string();
        assert!(
            err.starts_with("node.pod_labels: \"Bad Key\" is not a Kubernetes label key"),
            "{err}"
        );
        // Sidecar mode reads no [node] key: one set is refused, naming the mode to set.
        let mut c = Config::default();
        c.node.pod_labels = vec!["team".into()];
        assert_eq!(
            c.validate(&[]).unwrap_err().to_string(),
            "mode: sidecar, but node.pod_labels is set: [node] is read only in node mode; set mode = \"node\" (--mode node, TRUTHSCALE_MODE=node), or leave node.pod_labels out"
        );
    }

    /// A bare number given for a duration goes to the duration check, which says how to
    /// write one, and the error names the flags and variables it may have come from.
    #[test]
    fn a_number_for_a_duration_is_told_how_to_write_one() {
        let err = Config::load(None, &[], &[("source.interval", "5".into())])
            .and_then(|c| c.validate(&[]).map(|_| c))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("source.interval:") && err.contains("500ms"),
            "{err}"
        );
        let err = Config::load(
            None,
            &env(&[("TRUTHSCALE_SOURCE__INTERVAL", "1s")]),
            &[("source.gpus", "8".into())],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "flags (source.gpus) or environment (TRUTHSCALE_SOURCE__INTERVAL): in [source]"
            ),
            "{err}"
        );
    }

    /// List variables are split at commas, each item trimmed and empty ones left out; the
    /// resource names are lists too.
    #[test]
    fn list_variables_are_trimmed_items() {
        let vars = [
            ("TRUTHSCALE_MODE", "node"),
            ("TRUTHSCALE_SOURCE__KIND", "dcgm-exporter"),
            ("TRUTHSCALE_SOURCE__GPU_UUIDS", "GPU-a, GPU-b,"),
            (
                "TRUTHSCALE_NODE__RESOURCE_NAMES",
                "nvidia.com/gpu, nvidia.com/mig-*",
            ),
        ];
        let c = Config::load(None, &env(&vars), &[]).unwrap();
        let sources::SourceConfig::DcgmExporter(d) = &c.source.config else {
            panic!("{:?}", c.source.config);
        };
        assert_eq!(d.gpu_uuids, ["GPU-a", "GPU-b"]);
        assert_eq!(
            c.node.resource_names,
            ["nvidia.com/gpu", "nvidia.com/mig-*"]
        );
        let vars = [
            ("TRUTHSCALE_SOURCE__KIND", "dcgm-exporter"),
            ("TRUTHSCALE_SOURCE__GPU_UUIDS", ""),
            ("TRUTHSCALE_SIDECAR__RESOURCE_NAMES", "example.com/gpu"),
        ];
        let c = Config::load(None, &env(&vars), &[]).unwrap();
        let sources::SourceConfig::DcgmExporter(d) = &c.source.config else {
            panic!("{:?}", c.source.config);
        };
        assert!(d.gpu_uuids.is_empty());
        assert_eq!(c.sidecar.resource_names, ["example.com/gpu"]);
        // In a file, a UUID with spaces around it is refused, named.
        let mut c = c;
        c.source.config =
            sources::SourceConfig::DcgmExporter(sources::dcgm_exporter::DcgmExporterConfig {
                gpu_uuids: vec![" GPU-b".into()],
                ..Default::default()
            });
        let err = c.validate(&[]).unwrap_err().to_string();
        assert!(err.starts_with("source.gpu_uuids: \" GPU-b\""), "{err}");
    }

    /// `[sidecar] pod_resources` from the environment, checked at load: it needs the pod's
    /// name and namespace, and node mode reads no `[sidecar]` key.
    #[test]
    fn sidecar_pod_resources_need_the_pods_name_and_namespace() {
        let vars = [
            ("TRUTHSCALE_SIDECAR__POD_RESOURCES", "true"),
            (
                "TRUTHSCALE_SIDECAR__SOCKET",
                "/run/pod-resources/kubelet.sock",
            ),
            ("TRUTHSCALE_SIDECAR__TIMEOUT", "500ms"),
        ];
        let c = Config::load(None, &env(&vars), &[]).unwrap();
        assert!(c.sidecar.pod_resources);
        let err = c.validate(&env(&vars)).unwrap_err().to_string();
        assert!(
            err.starts_with("sidecar.pod_resources:")
                && err.contains("POD_NAME")
                && err.contains("POD_NAMESPACE"),
            "{err}"
        );
        let mut with_name = env(&vars);
        with_name.push(("POD_NAME".into(), "chat-a".into()));
        let err = c.validate(&with_name).unwrap_err().to_string();
        assert!(
            err.contains("POD_NAMESPACE") && !err.contains("POD_NAME ("),
            "{err}"
        );
        with_name.push(("POD_NAMESPACE".into(), "web".into()));
        let s = c.validate(&with_name).unwrap();
        let p = s.pod_resources.unwrap();
        assert_eq!((p.pod.as_str(), p.namespace.as_str()), ("chat-a", "web"));
        assert_eq!(
            p.kubelet.socket,
            Path::new("/run/pod-resources/kubelet.sock")
        );
        assert_eq!(p.kubelet.timeout, Duration::from_millis(500));
        // The identity still labels the GPUs the kubelet does not answer for.
        assert_eq!(s.identity.pod.as_deref(), Some("chat-a"));
        // identity.* counts as well as the Downward API.
        let mut c = Config::default();
        c.sidecar.pod_resources = true;
        c.identity.pod = Some("chat-b".into());
        c.identity.namespace = Some("web".into());
        assert_eq!(
            c.validate(&[]).unwrap().pod_resources.unwrap().pod,
            "chat-b"
        );
        // Off by default; a bad value is named whether on or not (before anyone turns it
        // on).
        let mut c = Config::default();
        assert!(c.validate(&[]).unwrap().pod_resources.is_none());
        c.sidecar.timeout = "2h".into();
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("sidecar.timeout:")
        );
        c.sidecar.pod_resources = true;
        c.identity.pod = Some("chat-b".into());
        c.identity.namespace = Some("web".into());
        assert!(
            c.validate(&[])
                .unwrap_err()
                .to_string()
                .starts_with("sidecar.timeout:")
        );
        // Node mode reads no [sidecar] key: one set is refused.
        c.mode = Mode::Node;
        let err = c.validate(&[]).unwrap_err().to_string();
        assert!(err.starts_with("mode: node, but sidecar."), "{err}");
        c.sidecar = SidecarConfig::default();
        assert!(c.validate(&[]).unwrap().pod_resources.is_none());
        let err = Config::load(
            None,
            &env(&[("TRUTHSCALE_SIDECAR__POD_RESOURCE", "true")]),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("pod_resource"), "{err}");
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
            "TRUTHSCALE_SOURCE__KIND",
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

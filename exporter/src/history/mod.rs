//! `truthscale analyze --prometheus URL`: the same analysis as `analyze FILE`, over the
//! DCGM history a Prometheus server (or a compatible API) already holds.
//!
//! 1. Discovery: one `GET /api/v1/label/__name__/values` with
//!    `match[]={__name__=~"<every mapped name>", <selector>}` over the range lists the metric
//!    names present. The dcgm-exporter names the text parser maps
//!    ([`dcgm_text::mapped_metrics`], `DCGM_FI_*` and the old lowercase `dcgm_*` names) are
//!    used when any exist; otherwise truthscale's own `truthscale_gpu_*` gauges.
//! 2. Chunks: the range is cut into chunks of at most `CHUNK_POINTS` steps (under
//!    Prometheus' 11 000 points per series), aligned to multiples of the step. Each chunk
//!    runs one `query_range` per metric name (`NAME{selector}`).
//! 3. Merge: a chunk's points are sorted by (timestamp, series) and each timestamp becomes
//!    one [`Sample`](truthscale_core::model::Sample) with the entities that have a value
//!    at it, built with the text parser's own mapping ([`Scrape`](dcgm_text::Scrape)):
//!    units, sentinels, label conventions, MIG, pods. A series missing at a step is blank
//!    there, never zero; series that come and go (pods, relabelling) are entities that
//!    come and go.
//! 4. The samples feed the [`Analyzer`](truthscale_core::analysis::Analyzer) in time order
//!    with a nominal interval of one step, and the report prints as `analyze FILE`'s does.

mod api;
mod args;
mod columns;
mod feed;
mod holders;
mod merge;
pub(crate) use merge::own_node;
mod metadata;
mod newest;
mod query;
mod read;
mod readers;
mod remote;
mod resolved;
mod selector;

use crate::times::rfc3339;
use anyhow::{Context, bail};
use api::Client;
#[cfg(any(test, feature = "fuzzing"))]
use api::Matrix;
use args::Compression;
pub(crate) use args::PASSWORD_ENV;
pub(crate) use args::PrometheusArgs;
use columns::Column;
pub(crate) use columns::SampleKind;
pub(crate) use feed::FeedStats;
#[cfg(any(test, feature = "fuzzing"))]
use merge::Chunk;
pub(crate) use merge::NO_CLUSTER;
pub(crate) use query::Range;
use query::secs;
pub(crate) use resolved::{DEFAULT_MAX_STEPS, Defaults, Resolved, default_step};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use truthscale_core::catalog::{self, GpuMetric, MetricId, Raw};
#[cfg(any(test, feature = "fuzzing"))]
use truthscale_core::model::Sample;
use truthscale_core::parse::Unread;
use truthscale_core::parse::dcgm_text;

/// Which metric names the history is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// dcgm-exporter's raw counters (`DCGM_FI_*`, old `dcgm_*`).
    DcgmExporter,
    /// truthscale's own gauges (`truthscale_gpu_*`), when no DCGM series exist.
    Truthscale,
}

impl Family {
    /// How the output names it.
    #[must_use]
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Family::DcgmExporter => "dcgm-exporter series (DCGM_FI_*)",
            Family::Truthscale => "truthscale series (truthscale_gpu_*)",
        }
    }
}

/// The families of truthscale's own that the history does not read back, though each is
/// one reading ([`catalog::MetricDesc::raw`]): the history never read them (it read the
/// families the analysis uses), and reading them would add a `query_range` per family
/// and chunk for readings the analysis does not use.
const NOT_READ_BACK: &[MetricId] = &[
    MetricId::Gpu(GpuMetric::GpuHmmaActive),
    MetricId::Gpu(GpuMetric::GpuImmaActive),
    MetricId::Gpu(GpuMetric::GpuTemperature),
];

/// How one of truthscale's own series is read back: the reading its family is, from the
/// catalog (exported as is, or an estimate of it, as the power is).
fn own_metric(name: &str) -> Option<Raw> {
    let m = MetricId::from_name(name)?.desc();
    m.raw.filter(|_| !NOT_READ_BACK.contains(&m.id))
}

/// The names of truthscale's own families read back, in catalog order.
fn own_names() -> impl Iterator<Item = &'static str> {
    catalog::ALL
        .iter()
        .map(|m| m.name)
        .filter(|n| own_metric(n).is_some())
}

fn is_dcgm(name: &str) -> bool {
    dcgm_text::mapped_metrics().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// The DCGM families among the names `found` that are not read (`DCGM_FI_*`, `DCGM_EXP_*`,
/// dcgm-exporter 1.x's `dcgm_*`), named as a capture's are.
fn unread_dcgm(found: &[String]) -> Unread {
    let mut unread = Unread::default();
    for n in found.iter().filter(|n| !is_dcgm(n)) {
        unread.dcgm_family(n);
    }
    unread
}

/// The `Authorization` header value, from `--bearer-token-file` or `--basic-auth` (the
/// password, when not in the flag, from `PASSWORD_ENV` in `env`).
fn authorization(
    args: &PrometheusArgs,
    env: &[(String, String)],
) -> anyhow::Result<Option<String>> {
    use base64::Engine as _;
    if let Some(path) = &args.bearer_token_file {
        let token = crate::bounds::read_file_to_string(path, crate::bounds::MAX_TOKEN_FILE)
            .with_context(|| format!("cannot read --bearer-token-file {}", path.display()))?;
        let token = token.trim();
        if token.is_empty() {
            bail!("--bearer-token-file {}: the file is empty", path.display());
        }
        return Ok(Some(format!("Bearer {token}")));
    }
    let Some(basic) = &args.basic_auth else {
        return Ok(None);
    };
    let (user, password) = match basic.split_once(':') {
        Some((u, p)) => (u.to_owned(), p.to_owned()),
        None => match env.iter().find(|(k, _)| k == PASSWORD_ENV) {
            Some((_, p)) => (basic.clone(), p.clone()),
            None => bail!(
                "--basic-auth USER without :PASSWORD takes the password from {PASSWORD_ENV}, which is not set"
            ),
        },
    };
    if user.is_empty() {
        bail!("--basic-auth: the user name is empty");
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    Ok(Some(format!("Basic {encoded}")))
}

/// What discovery found: the family read, its names, the DCGM families not read, and the
/// cAdvisor names present.
type Discovered = (Family, Vec<String>, Unread, Vec<String>);

/// Discovery: which names exist in the range, and which DCGM families beside them are not
/// read (named, never dropped in silence): the family read, its names, the others, and
/// the cAdvisor names present (asked in the same request, without the selector, which
/// narrows the GPU series: a pod's series need not carry the GPU's labels).
///
/// # Errors
/// Prometheus unreachable or answering an error; no GPU series in the range.
fn discover(client: &Client, range: Range, matchers: &str) -> anyhow::Result<Discovered> {
    let discover = gpu_series(matchers);
    // From where the first step begins, as the window is named.
    let (start_s, end_s) = (secs(range.covered_from()), secs(range.end));
    let cadvisor_match = format!("{{__name__=~\"{}\"}}", holders::CADVISOR_NAMES.join("|"));
    let found: Vec<String> = client.get(
        "/api/v1/label/__name__/values",
        &[
            ("match[]", &discover),
            ("match[]", &cadvisor_match),
            ("start", &start_s),
            ("end", &end_s),
        ],
    )?;
    let cadvisor: Vec<String> = found
        .iter()
        .filter(|n| holders::CADVISOR_NAMES.contains(&n.as_str()))
        .cloned()
        .collect();
    let dcgm: Vec<String> = found.iter().filter(|n| is_dcgm(n)).cloned().collect();
    let unread = unread_dcgm(&found);
    let own: Vec<String> = found
        .iter()
        .filter(|n| own_metric(n).is_some())
        .cloned()
        .collect();
    let (family, names) = if !dcgm.is_empty() {
        (Family::DcgmExporter, dcgm)
    } else if !own.is_empty() {
        (Family::Truthscale, own)
    } else {
        bail!(
            "{}: no DCGM_FI_*, dcgm_* or truthscale_gpu_* series{} between {} and {}{}",
            client.base,
            if matchers.is_empty() {
                String::new()
            } else {
                format!(" matching {{{matchers}}}")
            },
            rfc3339(range.covered_from()),
            rfc3339(range.end),
            newest::said(client, &discover, range)
        );
    };
    Ok((family, names, unread, cadvisor))
}

/// The series selector of every GPU series discovery looks for, within `matchers`.
fn gpu_series(matchers: &str) -> String {
    // Prefixes, not every name: the URL stays short (a proxy in front of Prometheus refuses
    // one of 8 KB, as nginx does by default), and the names found are filtered here
    // (`is_dcgm`, `own_metric`).
    let own: BTreeSet<String> = own_names()
        .filter_map(|n| {
            let mut words = n.splitn(3, '_');
            Some(format!("{}_{}_.+", words.next()?, words.next()?))
        })
        .collect();
    let own: Vec<String> = own.into_iter().collect();
    let names_re = format!("DCGM_.+|dcgm_.+|{}", own.join("|"));
    let mut selector = format!("{{__name__=~\"{names_re}\"");
    if !matchers.is_empty() {
        selector.push(',');
        selector.push_str(matchers);
    }
    selector.push('}');
    selector
}

impl History {
    /// What to add to "the series exist but hold no GPU readings": the newest GPU sample
    /// and a `--since`/`--step` that reaches it (one more query, asked only then).
    pub(crate) fn newest_hint(&self) -> String {
        newest::said(&self.client, &gpu_series(&self.matchers), self.range)
    }
}

/// A Prometheus history to read: the flags checked, the range fixed, the series found.
#[derive(Debug)]
pub(crate) struct History {
    client: Client,
    range: Range,
    matchers: String,
    family: Family,
    /// The queries of each chunk, one per metric name (and one per band for an activity
    /// ratio read in bands).
    columns: Vec<Column>,
    /// Each step summarises the raw samples in it (`--step` at least twice
    /// `--scrape-interval`).
    summarizes: bool,
    /// `--scrape-interval`: a step holds the step over it in raw samples.
    scrape_interval: Duration,
    in_flight: usize,
    /// `--cluster-label`.
    cluster_label: Option<String>,
    /// `--max-requests-per-query`.
    requests_per_query: u64,
    /// Queries the server refused for a limit and that were split.
    splits: AtomicU64,
    /// Points [`History::series_by_step`]'s answers gave outside the times asked for: left
    /// out, and warned of with the chunks' (`feed::outside_warning`).
    outside: AtomicU64,
    /// After a split: the most steps one query of a name has been answered for, so later
    /// chunks start there (`i64::MAX`: no split yet).
    steps_answered: AtomicI64,
    /// The DCGM families in the range that are not read.
    unread: Unread,
    /// The cAdvisor names in the range ([`holders::CADVISOR_NAMES`]), whatever the
    /// selector: the holder pods' signals are read from them ([`History::read_holders`]).
    cadvisor: Vec<String>,
    /// `--remote-read`.
    remote_when: args::RemoteRead,
    /// How the server evaluates, when the plain series are read by remote-read.
    remote: Option<remote::Evaluation>,
    /// A remote-read failed under `--remote-read auto`: `query_range` from then on.
    remote_failed: std::sync::atomic::AtomicBool,
    /// Each name's span read by remote-read ahead of the chunks.
    remote_held: std::sync::Mutex<std::collections::HashMap<String, remote::Span>>,
    /// The units the families' help texts decided ([`metadata::units_of`]), before any
    /// value is read.
    units: truthscale_core::parse::names::Units,
}

impl History {
    /// Discover which series the range of `r` holds.
    ///
    /// # Errors
    /// A bad `--prometheus` URL or `--ca-file`; `--until` in the future; Prometheus
    /// unreachable, answering an error, a status other than 200 or something that is not
    /// its API JSON; no GPU series in the range.
    pub(crate) fn open(r: &Resolved) -> anyhow::Result<History> {
        let client = Self::client(r)?;
        let range = window(r)?;
        let summarizes = r.summarizes();
        let (family, names, unread, cadvisor) = discover(&client, range, &r.matchers)?;
        let units = match family {
            Family::DcgmExporter => metadata::units_of(&client, &names),
            Family::Truthscale => truthscale_core::parse::names::Units::default(),
        };
        let columns = names
            .into_iter()
            .flat_map(|name| Column::of(family, name, summarizes))
            .collect();
        let mut history = History {
            client,
            range,
            matchers: r.matchers.clone(),
            family,
            columns,
            summarizes,
            scrape_interval: r.scrape_interval,
            in_flight: r.in_flight,
            cluster_label: r.cluster_label.clone(),
            requests_per_query: r.requests_per_query,
            splits: AtomicU64::new(0),
            outside: AtomicU64::new(0),
            steps_answered: AtomicI64::new(i64::MAX),
            unread,
            cadvisor,
            remote_when: r.remote_read,
            remote: None,
            remote_failed: std::sync::atomic::AtomicBool::new(false),
            remote_held: std::sync::Mutex::default(),
            units,
        };
        // A coarse step reads summaries only, which remote-read does not give.
        if !summarizes {
            history.choose_remote_read(r.remote_read)?;
        }
        Ok(history)
    }

    /// The client `r` asks for: its timeout, retries and compression, the deadline of the
    /// whole read (from now), and the largest answer for `r.in_flight` queries at once.
    fn client(r: &Resolved) -> anyhow::Result<Client> {
        let mut client = Client::new(
            &r.url,
            r.authorization.clone(),
            r.timeout,
            r.ca_file.as_deref(),
        )?;
        client.retries = r.retries;
        client.waiting_notice = Some(r.waiting_notice).filter(|d| !d.is_zero());
        client.max_body = api::max_body(r.in_flight);
        client.deadline = Some(api::Deadline {
            at: std::time::Instant::now() + r.deadline,
            given: r.deadline,
        });
        client.gzip = match r.compression {
            Compression::Auto => !client.is_local(),
            Compression::Gzip => true,
            Compression::None => false,
        };
        Ok(client)
    }

    /// The step, as a duration: the range's.
    fn step(&self) -> Duration {
        Duration::from_millis(self.range.step.unsigned_abs())
    }

    /// Raw samples a step holds: the step over `--scrape-interval`.
    fn samples_per_step(&self) -> f64 {
        self.step().as_secs_f64() / self.scrape_interval.as_secs_f64()
    }

    /// Each step summarises the raw samples in it (the step is at least twice
    /// `--scrape-interval`).
    #[must_use]
    pub(crate) fn summarizes(&self) -> bool {
        self.summarizes
    }

    /// The step, in seconds: the nominal interval of the samples.
    #[must_use]
    pub(crate) fn step_seconds(&self) -> f64 {
        self.range.step as f64 / 1000.0
    }

    /// The range read, in milliseconds since the epoch.
    #[must_use]
    pub(crate) fn range(&self) -> Range {
        self.range
    }

    /// Which metric names are read.
    #[must_use]
    pub(crate) fn family(&self) -> Family {
        self.family
    }

    /// The server's base URL.
    #[must_use]
    pub(crate) fn base_url(&self) -> &str {
        &self.client.base
    }

    /// The label matchers of `--selector`, without braces.
    #[must_use]
    pub(crate) fn matchers(&self) -> &str {
        &self.matchers
    }

    /// `--cluster-label`, when given.
    #[must_use]
    pub(crate) fn cluster_label(&self) -> Option<&str> {
        self.cluster_label.as_deref()
    }

    /// The label matcher list `{more, …}` of a series of pods (kube-state-metrics',
    /// HAMi's): `more` and the matchers of `--selector` on the labels such series name as
    /// the GPU series do (`namespace`, `pod`, and `--cluster-label`'s); the selector's others
    /// (`job`, `node`, `gpu`…) name GPU series only. Empty with none.
    #[must_use]
    pub(crate) fn pod_selector(&self, more: &str) -> String {
        pod_selector(&self.matchers, self.cluster_label.as_deref(), more)
    }
}

/// [`History::pod_selector`] of the selector's `matchers` (without braces).
fn pod_selector(matchers: &str, cluster_label: Option<&str>, more: &str) -> String {
    let pods = selector::matchers(matchers).unwrap_or_default();
    let mut all: Vec<String> = Vec::new();
    if !more.is_empty() {
        all.push(more.to_owned());
    }
    for m in pods {
        if m.name == "namespace" || m.name == "pod" || Some(m.name.as_str()) == cluster_label {
            all.push(format!(
                "{}{}{}",
                m.name,
                m.op,
                query::promql_string(&m.value)
            ));
        }
    }
    if all.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", all.join(","))
    }
}

/// The range `r` reads: `--since` back from `--until` (or now), in steps of `--step`.
///
/// # Errors
/// `--until` is in the future.
fn window(r: &Resolved) -> anyhow::Result<Range> {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let now = match r.until {
        Some(u) => {
            let end = u.end_ms(wall);
            if end > wall {
                bail!("--until is in the future: the window must end by now");
            }
            end
        }
        None => wall,
    };
    let step = i64::try_from(r.step.as_millis()).unwrap_or(i64::MAX);
    let since = i64::try_from(r.since.as_millis()).unwrap_or(i64::MAX / 2);
    Ok(Range::back_from(now, since.min(now), step))
}

/// Read a streamed remote-read answer as a read does and return its series and values
/// counts: the path such an answer takes from the HTTP body on, without the network. For
/// the fuzz targets.
///
/// # Errors
/// The answer's frames or chunks are malformed.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub fn evaluate_remote_read_answer(body: &[u8]) -> anyhow::Result<(usize, usize)> {
    remote::evaluate_answer(body)
}

/// `message` framed as a streamed remote-read answer frames it (length, CRC-32C): for the
/// fuzz target, whose inputs then reach the protobuf and the chunks.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
#[must_use]
pub fn remote_read_frame(message: &[u8]) -> Vec<u8> {
    remote::frame(message)
}

/// Decode one `query_range` answer for the series `metric` (one of truthscale's own, or a
/// DCGM field) and hand `on_sample` the samples it maps to: the path an answer takes from the
/// HTTP body on, without the network. For the fuzz targets and tests.
///
/// # Errors
/// The body is not a successful Prometheus API matrix answer.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub fn decode_range_answer(
    metric: &str,
    body: &[u8],
    on_sample: impl FnMut(&Sample),
) -> anyhow::Result<()> {
    let (matrix, _warnings) = api::decode::<Matrix>("query_range", 200, body)?;
    if matrix.result_type != "matrix" {
        bail!(
            "query_range: expected a matrix, got {:?}",
            matrix.result_type
        );
    }
    let family = if metric.starts_with("truthscale_") {
        Family::Truthscale
    } else {
        Family::DcgmExporter
    };
    let mut chunk = Chunk::default();
    chunk.add(family, metric, &matrix);
    chunk.feed(
        &mut truthscale_core::parse::names::Units::default(),
        on_sample,
    );
    Ok(())
}

#[cfg(test)]
mod tests;

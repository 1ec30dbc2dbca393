//! Publishing, the pipeline's last step: the snapshot each tick encodes once (text 0.0.4
//! and OpenMetrics) under the series cap, which every scrape clones and every push sink
//! reads, and the push sinks' failure counts it carries.
//!
//! gzip is done by the sampler too, next to the encoding and never per request: a format is
//! compressed each tick once a scraper has asked for it gzipped (`GzipDemand`), and for as
//! long as one keeps asking. The first such request, before any compressed body exists, is
//! answered uncompressed, which `Accept-Encoding` allows.

use axum::body::Bytes;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use truthscale_core::exposition::{self, Encoding, ExporterStatus, GpuEntry, Identity, SinkHealth};

/// The exporter's version, as `truthscale_build_info` reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Everything a tick produced, encoded once.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Tick number (0 before the first tick).
    pub tick: u64,
    /// Wall time of the tick, Unix milliseconds.
    pub taken_unix_ms: i64,
    /// When the tick (or, before the first, the sampler) started, on the monotonic clock:
    /// what liveness measures the sampler's progress by. `None` for a snapshot no sampler
    /// made.
    pub(crate) taken_at: Option<std::time::Instant>,
    /// When the tick ended and published this, on the monotonic clock: what staleness is
    /// measured by (a tick that hangs publishes nothing).
    pub(crate) published_at: Option<std::time::Instant>,
    /// The GPU entities being served; a GPU that stopped has `up == false` for a while
    /// (only `truthscale_gpu_up 0` is written for it).
    pub gpus: Vec<GpuEntry>,
    /// Whether the source produced data within the stale period.
    pub source_up: bool,
    /// Whether this is the last tick's data served stale, because the tick after it has
    /// run past the stale limit (a read that hangs): every source is down and each GPU
    /// writes only `truthscale_gpu_up 0`.
    pub stale: bool,
    /// The source label.
    pub source: String,
    /// `/metrics` in text format 0.0.4.
    pub text: Bytes,
    /// `/metrics` in OpenMetrics.
    pub openmetrics: Bytes,
    /// `text`, gzipped, when a scraper asked for it lately.
    pub(crate) text_gzip: Option<Bytes>,
    /// `openmetrics`, gzipped, when a scraper asked for it lately.
    pub(crate) openmetrics_gzip: Option<Bytes>,
    /// Where scrapers note that they asked for gzip (shared by every snapshot of a sampler).
    pub(crate) gzip_demand: Arc<GzipDemand>,
    /// The exporter status encoded into this snapshot.
    pub status: ExporterStatus,
    /// The identity labels encoded into this snapshot.
    pub identity: Identity,
}

/// Failure counts of push sinks (OTLP), shared between a sink, which adds to them, and the
/// sampler, which copies them into every snapshot (`truthscale_sink_errors_total`).
#[derive(Debug, Clone, Default)]
pub(crate) struct SinkErrors(Arc<Mutex<BTreeMap<String, BTreeMap<String, u64>>>>);

impl SinkErrors {
    /// Declare a sink and its error kinds, so that they are exposed (at 0) before the first
    /// failure.
    pub(crate) fn register(&self, sink: &str, kinds: &[&str]) {
        if let Ok(mut m) = self.0.lock() {
            let e = m.entry(sink.to_string()).or_default();
            for k in kinds {
                e.entry((*k).to_string()).or_default();
            }
        }
    }

    /// Count one failure of `sink` of this kind.
    pub(crate) fn add(&self, sink: &str, kind: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(sink.to_string())
                .or_default()
                .entry(kind.to_string())
                .or_default() += 1;
        }
    }

    pub(crate) fn health(&self) -> Vec<SinkHealth> {
        self.0
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(name, errors)| SinkHealth {
                        name: name.clone(),
                        errors: errors.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// How long after the last request for a gzipped format the sampler keeps compressing it.
const GZIP_DEMAND_FOR_MS: i64 = 10 * 60 * 1000;

/// When a scraper last asked for each format gzipped (Unix milliseconds, 0 never).
#[derive(Debug, Default)]
pub(crate) struct GzipDemand {
    text: AtomicI64,
    openmetrics: AtomicI64,
}

impl GzipDemand {
    fn of(&self, format: Encoding) -> &AtomicI64 {
        match format {
            Encoding::Text => &self.text,
            Encoding::OpenMetrics => &self.openmetrics,
        }
    }

    /// A scraper asked for `format` gzipped at `now_unix_ms`.
    pub(crate) fn ask(&self, format: Encoding, now_unix_ms: i64) {
        self.of(format).fetch_max(now_unix_ms, Ordering::Relaxed);
    }

    /// A scraper asks for `format` gzipped now.
    pub(crate) fn ask_now(&self, format: Encoding) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.ask(format, now);
    }

    /// Whether `format` should be compressed at `now_unix_ms`: asked for within 10 minutes.
    #[must_use]
    pub(crate) fn wanted(&self, format: Encoding, now_unix_ms: i64) -> bool {
        let asked = self.of(format).load(Ordering::Relaxed);
        asked > 0 && now_unix_ms.saturating_sub(asked) <= GZIP_DEMAND_FOR_MS
    }

    /// `body` gzipped when `format` is wanted at `now_unix_ms`.
    #[must_use]
    pub(crate) fn compress_if_wanted(
        &self,
        format: Encoding,
        body: &[u8],
        now_unix_ms: i64,
    ) -> Option<Bytes> {
        self.wanted(format, now_unix_ms).then(|| gzip(body))
    }
}

/// `body` gzipped at the fastest level: an exposition body is repetitive, so level 1 already
/// takes it to about a tenth, at a fraction of the default level's CPU.
#[must_use]
pub(crate) fn gzip(body: &[u8]) -> Bytes {
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 8),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = e.write_all(body);
    e.finish().unwrap_or_default().into()
}

impl Snapshot {
    /// Whether a tick has run and its data is not stale (readiness).
    #[must_use]
    pub fn ready(&self) -> bool {
        self.tick > 0 && !self.stale
    }

    /// This snapshot served stale: the same tick, every source down, every GPU only
    /// `truthscale_gpu_up 0`, encoded again (rare: once per stuck tick).
    #[must_use]
    pub(crate) fn stale(&self) -> Snapshot {
        let mut status = self.status.clone();
        for s in &mut status.sources {
            s.up = false;
        }
        let gpus: Vec<GpuEntry> = self
            .gpus
            .iter()
            .map(|g| GpuEntry {
                up: false,
                ..g.clone()
            })
            .collect();
        let text = exposition::encode(&gpus, &self.identity, &status, Encoding::Text);
        let openmetrics = exposition::encode(&gpus, &self.identity, &status, Encoding::OpenMetrics);
        let now_ms = crate::sources::unix_ms(std::time::SystemTime::now());
        let demand = &self.gzip_demand;
        Snapshot {
            tick: self.tick,
            taken_unix_ms: self.taken_unix_ms,
            taken_at: self.taken_at,
            published_at: self.published_at,
            text_gzip: demand.compress_if_wanted(Encoding::Text, text.as_bytes(), now_ms),
            openmetrics_gzip: demand.compress_if_wanted(
                Encoding::OpenMetrics,
                openmetrics.as_bytes(),
                now_ms,
            ),
            gpus,
            source_up: false,
            stale: true,
            source: self.source.clone(),
            text: text.into(),
            openmetrics: openmetrics.into(),
            gzip_demand: Arc::clone(demand),
            status,
            identity: self.identity.clone(),
        }
    }

    /// The body for `format`.
    #[must_use]
    pub(crate) fn body(&self, format: Encoding) -> Bytes {
        match format {
            Encoding::Text => self.text.clone(),
            Encoding::OpenMetrics => self.openmetrics.clone(),
        }
    }

    /// The gzipped body for `format`, when this tick compressed it.
    #[must_use]
    pub(crate) fn body_gzip(&self, format: Encoding) -> Option<Bytes> {
        match format {
            Encoding::Text => self.text_gzip.clone(),
            Encoding::OpenMetrics => self.openmetrics_gzip.clone(),
        }
    }
}

/// Encodes each tick's snapshot: the series cap, both formats, gzip where asked.
#[derive(Debug)]
pub(crate) struct Publisher {
    identity: Identity,
    max_series: usize,
    series_dropped: u64,
    warned_cap: bool,
    previous_body: Option<usize>,
    tick: u64,
    /// Which formats scrapers want gzipped (shared with every snapshot).
    gzip: Arc<GzipDemand>,
}

/// What a tick publishes besides the GPUs: the source's name and health, and when.
pub(crate) struct Published {
    /// The wall time of the tick.
    pub(crate) now: std::time::SystemTime,
    /// When the tick started, on the monotonic clock.
    pub(crate) started: std::time::Instant,
    /// The source's name.
    pub(crate) source: &'static str,
    /// Whether the source produced data within the stale period.
    pub(crate) source_up: bool,
}

impl Publisher {
    pub(crate) fn new(identity: Identity, max_series: usize) -> Publisher {
        Publisher {
            identity,
            max_series,
            series_dropped: 0,
            warned_cap: false,
            previous_body: None,
            tick: 0,
            gzip: Arc::default(),
        }
    }

    /// Encode this tick's snapshot.
    pub(crate) fn publish(
        &mut self,
        gpus: Vec<GpuEntry>,
        mut status: ExporterStatus,
        tick: &Published,
    ) -> Snapshot {
        self.tick += 1;
        status.previous_body_bytes = self.previous_body;
        let (gpus, text, status) = self.capped(gpus, status);
        let openmetrics = exposition::encode(&gpus, &self.identity, &status, Encoding::OpenMetrics);
        self.previous_body = Some(text.len());
        let now_ms = crate::sources::unix_ms(tick.now);
        let text_gzip = self
            .gzip
            .compress_if_wanted(Encoding::Text, text.as_bytes(), now_ms);
        let openmetrics_gzip =
            self.gzip
                .compress_if_wanted(Encoding::OpenMetrics, openmetrics.as_bytes(), now_ms);
        Snapshot {
            tick: self.tick,
            taken_unix_ms: now_ms,
            taken_at: Some(tick.started),
            published_at: Some(std::time::Instant::now()),
            gpus,
            source_up: tick.source_up,
            stale: false,
            source: tick.source.to_string(),
            text: text.into(),
            openmetrics: openmetrics.into(),
            text_gzip,
            openmetrics_gzip,
            gzip_demand: Arc::clone(&self.gzip),
            status,
            identity: self.identity.clone(),
        }
    }

    /// The entities that fit the series cap, the text body and the status that counts what
    /// was left out. Entities are left out whole, the last first; the exporter's own series
    /// always stay. Counting costs one extra encoding per entity, only when over the cap.
    fn capped(
        &mut self,
        mut gpus: Vec<GpuEntry>,
        mut status: ExporterStatus,
    ) -> (Vec<GpuEntry>, String, ExporterStatus) {
        let samples = |body: &str| {
            body.lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .count()
        };
        status.series_dropped = self.series_dropped;
        let text = exposition::encode(&gpus, &self.identity, &status, Encoding::Text);
        let all = samples(&text);
        // Under the cap even with the exporter's own series counted: no second encoding.
        if all <= self.max_series {
            return (gpus, text, status);
        }
        let own = samples(&exposition::encode(
            &[],
            &self.identity,
            &status,
            Encoding::Text,
        ));
        if all - own <= self.max_series {
            return (gpus, text, status);
        }
        let mut total = 0;
        let mut dropped = 0;
        gpus.retain(|g| {
            let n = samples(&exposition::encode(
                std::slice::from_ref(g),
                &self.identity,
                &status,
                Encoding::Text,
            )) - own;
            if total + n <= self.max_series {
                total += n;
                true
            } else {
                dropped += n;
                false
            }
        });
        self.series_dropped += dropped as u64;
        if !self.warned_cap {
            self.warned_cap = true;
            tracing::warn!(
                max_series = self.max_series,
                dropped,
                "More GPU series than max_series: whole entities are left out of /metrics (counted in truthscale_series_dropped_total). Raise max_series, or turn per-process series off."
            );
        }
        status.series_dropped = self.series_dropped;
        let text = exposition::encode(&gpus, &self.identity, &status, Encoding::Text);
        (gpus, text, status)
    }
}

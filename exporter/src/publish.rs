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
        let now_ms = crate::times::unix_ms(std::time::SystemTime::now());
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
        let now_ms = crate::times::unix_ms(tick.now);
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
    /// was left out; the exporter's own series always stay. The first cut is the listed
    /// series (per process, per holder), capped per GPU alike, so that the devices' own
    /// series stay; only when those alone are over the cap are whole entities left out, the
    /// last first. Counting costs extra encodings, only when over the cap.
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
        let series = |g: &GpuEntry| {
            samples(&exposition::encode(
                std::slice::from_ref(g),
                &self.identity,
                &status,
                Encoding::Text,
            )) - own
        };
        // The devices' own series: each GPU with nothing listed.
        for g in &mut gpus {
            g.list_cap = Some(0);
        }
        let devices: Vec<usize> = gpus.iter().map(series).collect();
        let device_total: usize = devices.iter().sum();
        if device_total <= self.max_series {
            // What is left is shared alike: a process writes at most two series, a holder
            // one, so `k` of each per GPU write at most 3k.
            let k = (self.max_series - device_total) / (3 * gpus.len().max(1));
            for g in &mut gpus {
                g.list_cap = Some(k);
            }
            let text = exposition::encode(&gpus, &self.identity, &status, Encoding::Text);
            let dropped = all - samples(&text);
            return self.count_dropped(
                gpus,
                status,
                dropped,
                "the per-process and per-holder series of each GPU are capped alike",
            );
        }
        let mut total = 0;
        let mut dropped = all - own - device_total;
        let mut i = 0;
        gpus.retain(|_| {
            let n = devices[i];
            i += 1;
            if total + n <= self.max_series {
                total += n;
                true
            } else {
                dropped += n;
                false
            }
        });
        self.count_dropped(
            gpus,
            status,
            dropped,
            "whole entities are left out, and no per-process or per-holder series is written",
        )
    }

    /// Count `dropped` series, warn the first time, and encode what is kept.
    fn count_dropped(
        &mut self,
        gpus: Vec<GpuEntry>,
        mut status: ExporterStatus,
        dropped: usize,
        how: &str,
    ) -> (Vec<GpuEntry>, String, ExporterStatus) {
        self.series_dropped += dropped as u64;
        if !self.warned_cap {
            self.warned_cap = true;
            tracing::warn!(
                max_series = self.max_series,
                dropped,
                "More GPU series than max_series: {how} (counted in truthscale_series_dropped_total). Raise max_series, or turn per-process series off."
            );
        }
        status.series_dropped = self.series_dropped;
        let text = exposition::encode(&gpus, &self.identity, &status, Encoding::Text);
        (gpus, text, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::derive::DeriveConfig;
    use truthscale_core::model::{
        EntityId, EntitySample, Field, Holder, PodRef, ProcessReading, Readings, Sample, Timestamp,
    };
    use truthscale_core::tracker::Deriver;

    /// GPU `i`, shared by `holders` time-slicing replicas running `processes` processes.
    fn shared_gpu(i: u32, holders: usize, processes: usize) -> GpuEntry {
        let mut r = Readings::default();
        r.set_value(Field::ReportedUtil, 1.0);
        r.set_value(Field::SmActive, 0.5);
        r.set_value(Field::TensorActive, 0.25);
        r.set_value(Field::DramActive, 0.5);
        let pod = |n: usize| PodRef {
            pod: format!("p{n}"),
            namespace: Some("ns".into()),
            container: Some("c".into()),
        };
        let e = EntitySample {
            id: EntityId {
                gpu: Some(i),
                uuid: Some(format!("GPU-{i}")),
                model: Some("NVIDIA H100 80GB HBM3".into()),
                ..EntityId::default()
            },
            readings: r,
            processes: (0..processes)
                .map(|n| ProcessReading {
                    pid: n.to_string(),
                    used_memory_bytes: Some(1e6),
                    sm_busy: Some(0.01),
                    pod: Some(pod(n % holders.max(1))),
                    ..ProcessReading::default()
                })
                .collect(),
            allocation: Some(
                (0..holders)
                    .map(|n| Holder {
                        pod: pod(n),
                        resource: "nvidia.com/gpu.shared".into(),
                        replica: Some(n.to_string()),
                        labels: Vec::new(),
                        owner: None,
                    })
                    .collect(),
            ),
            ..EntitySample::default()
        };
        let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
        let window = d
            .observe(&Sample {
                taken: Timestamp(1000),
                entities: vec![e],
            })
            .windows
            .remove(0);
        GpuEntry {
            window,
            source: "nvml",
            up: true,
            list_cap: None,
        }
    }

    fn count(text: &str, name: &str, gpu: &str) -> usize {
        let gpu = format!("gpu=\"{gpu}\"");
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(&gpu))
            .count()
    }

    /// Over the cap, the per-process and per-holder series go first, capped per GPU alike,
    /// and counted; every GPU keeps its own series, its holder count and its per-pod parts
    /// (of all its processes). Only when the devices alone are over the cap do whole GPUs go.
    #[test]
    fn the_series_cap_cuts_listed_series_before_devices() {
        let tick = Published {
            now: std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2),
            started: std::time::Instant::now(),
            source: "nvml",
            source_up: true,
        };
        let gpus = || {
            vec![
                shared_gpu(0, 600, 5000),
                shared_gpu(1, 600, 5000),
                shared_gpu(2, 1, 1),
            ]
        };
        let uncapped = Publisher::new(Identity::default(), usize::MAX).publish(
            gpus(),
            ExporterStatus::default(),
            &tick,
        );
        let full = String::from_utf8_lossy(&uncapped.text).into_owned();
        assert_eq!(
            count(&full, "truthscale_process_memory_used_bytes", "0"),
            5000
        );
        let own_series = |text: &str, gpu: &str| {
            text.lines()
                .filter(|l| {
                    l.contains(&format!("gpu=\"{gpu}\""))
                        && !l.starts_with("truthscale_process_")
                        && !l.starts_with("truthscale_gpu_allocation_info")
                })
                .count()
        };

        let mut p = Publisher::new(Identity::default(), 4000);
        let snap = p.publish(gpus(), ExporterStatus::default(), &tick);
        let text = String::from_utf8_lossy(&snap.text).into_owned();
        for g in ["0", "1", "2"] {
            assert_eq!(
                own_series(&text, g),
                own_series(&full, g),
                "GPU {g}'s own series"
            );
        }
        let listed = count(&text, "truthscale_process_memory_used_bytes", "0");
        assert!(listed > 100 && listed < 5000, "{listed}");
        assert_eq!(listed, count(&text, "truthscale_gpu_allocation_info", "0"));
        assert_eq!(
            listed,
            count(&text, "truthscale_process_memory_used_bytes", "1")
        );
        assert!(text.contains("truthscale_gpu_pods{gpu=\"0\""));
        assert!(
            text.lines()
                .any(|l| l.starts_with("truthscale_gpu_pods{gpu=\"0\"") && l.ends_with(" 600"))
        );
        let samples = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count();
        let all = full
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(snap.status.series_dropped as usize, all - samples);

        // Devices alone over the cap: whole GPUs go (each that does not fit in what is
        // left, in order), with nothing listed.
        let cap = own_series(&full, "0") + own_series(&full, "2") + 5;
        let mut p = Publisher::new(Identity::default(), cap);
        let snap = p.publish(gpus(), ExporterStatus::default(), &tick);
        let text = String::from_utf8_lossy(&snap.text).into_owned();
        assert_eq!(own_series(&text, "0"), own_series(&full, "0"));
        assert_eq!(own_series(&text, "1"), 0);
        assert_eq!(own_series(&text, "2"), own_series(&full, "2"));
        assert_eq!(count(&text, "truthscale_process_memory_used_bytes", "0"), 0);
    }
}

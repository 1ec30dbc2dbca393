//! The composition root: from validated [`Settings`], the source, the stages and the
//! pipeline's configuration, handed to `Sampler::start`. The only place that turns the
//! configuration's source table into a source; the pipeline is given what it runs.
//!
//! ```no_run
//! use truthscale_exporter::{compose, config::Config};
//! let settings = Config::default().validate(&[]).expect("valid defaults");
//! // No source configured: NVML where a driver is present, else an error naming the choices.
//! let sampler = compose::start(&settings).expect("an NVIDIA driver");
//! println!("{} GPUs", sampler.latest().gpus.len());
//! ```

use crate::attribution::kubelet::Kubelet;
use crate::attribution::{NodeAttribution, OwnPod, PodLabels, apiserver::ApiServer};
use crate::config::Settings;
use crate::enrichment::{Engine, HolderPressure};
use crate::http::web::{WebConfig, WebConfigError};
use crate::pipeline::{self, Sampler, SourceLabel, Stage};
use crate::sources::{BuildError, Source};
use std::time::SystemTime;
use truthscale_core::exposition::Identity;
use truthscale_core::model::PodRef;

/// Build the source the settings name, and start sampling it through the stages they ask for.
///
/// # Errors
/// The source cannot be built (no NVML, a replay file that cannot be used), or node mode's
/// pod labels are asked for and the API server's CA or token cannot be read.
pub fn start(settings: &Settings) -> Result<Sampler, BuildError> {
    let source = settings
        .source
        .build(&settings.source_context, SystemTime::now())?;
    let api = pod_label_client(settings)?;
    Ok(start_sampler(settings, source, api))
}

/// Start sampling an already built source through the stages the settings ask for. Node
/// mode's pod labels, when asked for and their API server client cannot be made, are left
/// out with an error logged.
#[must_use]
pub fn start_with_source(settings: &Settings, source: Box<dyn Source>) -> Sampler {
    let api = pod_label_client(settings).unwrap_or_else(|e| {
        tracing::error!(
            error = %e,
            "Pod labels are not read: the API server client cannot be made; allocation info is exported without them."
        );
        None
    });
    start_sampler(settings, source, api)
}

/// Start the sampler on `source`, handing the pipeline the source's label once.
fn start_sampler(settings: &Settings, source: Box<dyn Source>, api: Option<ApiServer>) -> Sampler {
    let label = SourceLabel::new(source.name());
    Sampler::start(&config(settings), label, source, stages(settings, api))
}

/// The pipeline's own configuration.
#[must_use]
pub(crate) fn config(settings: &Settings) -> pipeline::Config {
    pipeline::Config {
        interval: settings.interval,
        stale_after: settings.stale_after,
        derive: settings.derive.clone(),
        verdict: settings.verdict.clone(),
        // With the kubelet's answer, attribution is per GPU: a GPU the answer does not give
        // this pod must not fall back to its identity when encoded.
        identity: if settings.pod_resources.is_some() {
            Identity {
                pod: None,
                namespace: None,
                container: None,
                node: settings.identity.node.clone(),
            }
        } else {
            settings.identity.clone()
        },
        max_series: settings.max_series,
    }
}

/// The stages, in order: attribution (node mode's `List`, pod labels with the pod UIDs that
/// settle each process's pod, and its holder pods' CPU and I/O pressure, or the sidecar's
/// own `Get`), then the serving engine.
fn stages(settings: &Settings, api: Option<ApiServer>) -> Vec<Box<dyn Stage>> {
    let mut stages: Vec<Box<dyn Stage>> = Vec::new();
    if let Some(n) = &settings.node {
        stages.push(Box::new(NodeAttribution::new(
            Kubelet::new(n.kubelet()),
            n.proc_root.clone(),
            settings.interval,
        )));
        // Pod labels before pressure: the pod UIDs they bring settle each process's pod,
        // by which pressure names its pods.
        if let Some(api) = api {
            stages.push(Box::new(PodLabels::start(api)));
        }
        stages.push(Box::new(HolderPressure::new(
            n.cgroup_root.clone(),
            n.proc_root.clone(),
        )));
    }
    if let Some(p) = settings.pod_resources.clone() {
        tracing::info!(
            pod = %p.pod,
            namespace = %p.namespace,
            socket = %p.kubelet.socket.display(),
            "Asking the kubelet (PodResources Get) which GPUs are this pod's: only those are labelled with it, the others this container sees are exported without pod labels."
        );
        let own = PodRef {
            pod: p.pod.clone(),
            namespace: Some(p.namespace.clone()),
            container: settings.identity.container.clone(),
        };
        stages.push(Box::new(OwnPod::new(
            Kubelet::for_pod(p.kubelet, &p.pod, &p.namespace),
            own,
            settings.interval,
        )));
    }
    if let Some(e) = settings.engine.clone() {
        stages.push(Box::new(Engine::new(e, settings.interval)));
    }
    stages
}

/// The web config the settings name (`web_config_file`), read and checked as `serve` uses
/// it: with its TLS acceptor built, the certificate and key read and matched. `config check`
/// runs it too, so that a web config that passes the check starts.
///
/// # Errors
/// A [`WebConfigError`] naming the file and the key.
pub(crate) fn web_config(settings: &Settings) -> Result<Option<WebParts>, WebConfigError> {
    let Some(path) = &settings.web_config_file else {
        return Ok(None);
    };
    let config = WebConfig::load(path)?;
    let tls = config.tls_acceptor()?;
    Ok(Some(WebParts { config, tls }))
}

/// A web config read and checked, with its TLS acceptor when it sets TLS.
pub(crate) struct WebParts {
    /// The web config.
    pub(crate) config: WebConfig,
    /// Its TLS acceptor, when it has `tls_server_config`.
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The API server client for node mode's pod labels, when they are asked for.
fn pod_label_client(settings: &Settings) -> Result<Option<ApiServer>, BuildError> {
    settings
        .node
        .as_ref()
        .and_then(|n| n.pod_labels.clone())
        .map(ApiServer::new)
        .transpose()
}

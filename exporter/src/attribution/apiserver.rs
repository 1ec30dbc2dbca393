//! Node mode's pod labels: the allowlisted labels (`node.pod_labels`) of this node's pods,
//! from the Kubernetes API server, copied onto `truthscale_gpu_allocation_info` as
//! `label_<key>` (the kubelet's PodResources API carries no labels).
//!
//! - **Request.** `GET /api/v1/pods?fieldSelector=spec.nodeName=<node>` with the
//!   ServiceAccount's bearer token (re-read at every refresh: projected tokens rotate), over
//!   HTTPS checked against `node.ca_file`, asking for metadata only
//!   (`PartialObjectMetadataList`) and from the API server's cache (`resourceVersion=0`).
//!   It needs `list` on `pods` (`docker/kubernetes/node/pod-labels`).
//! - **Thread.** The list is read on a thread of its own every `node.pod_labels_refresh`
//!   (30 s by default), neither on the scrape path nor on the sampler's: a slow API server
//!   never slips the GPU cadence. The sampler takes the last answer at each tick.
//! - **Failures.** Counted as the `apiserver` source's errors (`no_permission` for 401 and
//!   403, else as for any HTTP source), logged with what to do at most every 30 s. The last
//!   answer is used for three refresh periods; after that allocation info flows without the
//!   extra labels (`truthscale_source_up{source="apiserver"} 0`). A label is never made up:
//!   a pod without an allowlisted label, or not in the last answer, has no such label.

use crate::bounds::{LeftOut, MAX_LABEL_BYTES, MAX_LABELS, MAX_PODS, fits};
use crate::client::{FetchError, get_text_with};
use crate::setting::Invalid;
use crate::sources::{BuildError, Produced, SourceError};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use truthscale_core::model::{Holder, NOTEBOOK_NAME_LABEL, PodOwner, PodRef, ProcessReading};

/// The `source` label of the API server reader's health.
pub(crate) const SOURCE: &str = "apiserver";

/// The in-cluster ServiceAccount token.
pub(crate) const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The in-cluster CA of the API server.
pub(crate) const DEFAULT_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// The overlay that grants the agent `list` on pods.
pub(crate) const RBAC_OVERLAY: &str = "docker/kubernetes/node/pod-labels";

/// Largest pod list read (metadata of one node's pods is far smaller).
const MAX_BODY: u64 = 32 << 20;

/// One allowlisted pod label: its Kubernetes key and its Prometheus label name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodLabelKey {
    /// The key, as on the pod (`app.kubernetes.io/name`).
    pub key: String,
    /// The label name (`label_app_kubernetes_io_name`).
    pub name: &'static str,
}

/// Whether `key` is a Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a
/// name of 1 to 63 characters, alphanumeric at both ends, `-`, `_` and `.` between.
///
/// # Errors
/// What is wrong with it.
pub(crate) fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 {
            return Err(
                "its prefix (before /) must be a DNS subdomain of 1 to 253 characters".into(),
            );
        }
        for part in p.split('.') {
            let ok = !part.is_empty()
                && part.len() <= 63
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-');
            if !ok {
                return Err(format!(
                    "its prefix {p:?} is not a DNS subdomain (lowercase letters, digits and -, in dot-separated parts)"
                ));
            }
        }
    }
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > 63
        || !edge(name.bytes().next())
        || !edge(name.bytes().last())
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(format!(
            "its name {name:?} must be 1 to 63 characters, letters, digits, -, _ and ., beginning and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// The label names handed out so far: each allowlisted key's name is made once, for the
/// process's life (the allowlist is configuration, so this stays as small as it is).
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(n) = names.get(name.as_str()) {
        return n;
    }
    let n: &'static str = Box::leak(name.into_boxed_str());
    names.insert(n);
    n
}

/// Check `node.pod_labels` (blank entries are ignored, so that an empty variable turns the
/// feature off) and name each key's label.
///
/// # Errors
/// A key that is not a Kubernetes label key, listed twice, or whose label name another key
/// already has (`a.b` and `a_b` are both `label_a_b`).
pub(crate) fn label_keys(keys: &[String]) -> Result<Vec<PodLabelKey>, Invalid> {
    const KEY: &str = "node.pod_labels";
    let mut out: Vec<PodLabelKey> = Vec::new();
    for k in keys.iter().map(|k| k.trim()).filter(|k| !k.is_empty()) {
        check_label_key(k)
            .map_err(|e| Invalid::new(KEY, format!("{k:?} is not a Kubernetes label key: {e}")))?;
        let name = truthscale_core::catalog::pod_label_name(k);
        if let Some(other) = out.iter().find(|o| o.name == name) {
            return Err(Invalid::new(
                KEY,
                if other.key == k {
                    format!("{k:?} is listed twice")
                } else {
                    format!(
                        "{:?} and {k:?} would both be exported as {name}; keep one",
                        other.key
                    )
                },
            ));
        }
        out.push(PodLabelKey {
            key: k.to_string(),
            name: intern(name),
        });
    }
    Ok(out)
}

/// The pod-label reader's settings, checked (`node.pod_labels` not empty).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodLabelSettings {
    /// The allowlist.
    pub keys: Vec<PodLabelKey>,
    /// How often the list is read.
    pub refresh: Duration,
    /// The API server's base URL (`https://…`, no trailing `/`).
    pub api_server: String,
    /// This node's name (the field selector).
    pub node: String,
    /// The bearer token's file.
    pub token_file: PathBuf,
    /// The CA file.
    pub ca_file: PathBuf,
    /// Timeout of one request.
    pub timeout: Duration,
}

/// The API server to use: `configured` when set (it must be `https://`), else the
/// in-cluster address from `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
///
/// # Errors
/// Not https, or nothing configured outside a cluster.
pub(crate) fn api_server_url(
    configured: &str,
    getenv: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Invalid> {
    const KEY: &str = "node.api_server";
    let configured = configured.trim();
    if !configured.is_empty() {
        let host = configured.strip_prefix("https://").ok_or_else(|| {
            Invalid::new(
                KEY,
                format!("{configured:?} must be an https:// URL (the bearer token is sent to it)"),
            )
        })?;
        if host.trim_matches('/').is_empty() {
            return Err(Invalid::new(KEY, format!("{configured:?} names no host")));
        }
        return Ok(configured.trim_end_matches('/').to_string());
    }
    match (
        getenv("KUBERNETES_SERVICE_HOST"),
        getenv("KUBERNETES_SERVICE_PORT"),
    ) {
        (Some(host), Some(port)) => Ok(if host.contains(':') {
            format!("https://[{host}]:{port}")
        } else {
            format!("https://{host}:{port}")
        }),
        _ => Err(Invalid::new(
            KEY,
            "not set, and KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not in the environment (not in a cluster?): set node.api_server (TRUTHSCALE_NODE__API_SERVER) to read pod labels, or empty node.pod_labels",
        )),
    }
}

/// Percent-encode a query value.
fn query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl PodLabelSettings {
    /// The list request: this node's pods (metadata only, from the API server's cache).
    #[must_use]
    pub(crate) fn list_url(&self) -> String {
        format!(
            "{}/api/v1/pods?fieldSelector={}&resourceVersion=0",
            self.api_server,
            query_value(&format!("spec.nodeName={}", self.node))
        )
    }
}

#[derive(Deserialize)]
struct List<'a> {
    #[serde(default, borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    items: Items<'a>,
}

/// The list's pods, at most [`MAX_PODS`]; the rest are counted and skipped unread.
struct Items<'a> {
    kept: Vec<Item<'a>>,
    over: u64,
}

impl<'de: 'a, 'a> Deserialize<'de> for Items<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Items<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of pods")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Items<'a>, A::Error> {
                let mut items = Items {
                    kept: Vec::new(),
                    over: 0,
                };
                while items.kept.len() < MAX_PODS {
                    match seq.next_element()? {
                        Some(i) => items.kept.push(i),
                        None => return Ok(items),
                    }
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    items.over += 1;
                }
                Ok(items)
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow)]
    metadata: Metadata<'a>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    namespace: Cow<'a, str>,
    #[serde(default, borrow)]
    uid: Cow<'a, str>,
    #[serde(default, borrow)]
    labels: Labels<'a>,
    #[serde(default, borrow, rename = "ownerReferences")]
    owner_references: Vec<OwnerReference<'a>>,
}

/// One of a pod's `ownerReferences`.
#[derive(Deserialize)]
struct OwnerReference<'a> {
    #[serde(default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    controller: bool,
}

/// The label the Deployment controller puts on its ReplicaSets' pods, whose value ends the
/// ReplicaSet's name (`<deployment>-<hash>`).
const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// A pod's owner: its controller reference (else its first), followed from a ReplicaSet to
/// its Deployment where the ReplicaSet's name is the Deployment's and the pod's
/// `pod-template-hash` (how the Deployment controller names them), and from a StatefulSet
/// to its Kubeflow Notebook where the pod's `notebook-name` label is the StatefulSet's name
/// (how Kubeflow's notebook controller makes them: [`PodOwner::through_notebook`]). Both
/// rules read only the pod's own metadata: no extra request.
fn owner_of(m: &Metadata<'_>, labels: &[(Cow<'_, str>, Cow<'_, str>)]) -> Option<PodOwner> {
    let r = m
        .owner_references
        .iter()
        .find(|r| r.controller)
        .or(m.owner_references.first())?;
    if r.kind.is_empty() || r.name.is_empty() || !fits(&r.kind) || !fits(&r.name) {
        return None;
    }
    let label = |key: &str| {
        labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    };
    let hash = label(POD_TEMPLATE_HASH);
    let deployment = (r.kind == "ReplicaSet")
        .then(|| r.name.strip_suffix(hash?)?.strip_suffix('-'))
        .flatten()
        .filter(|d| !d.is_empty());
    Some(match deployment {
        Some(d) => PodOwner {
            kind: "Deployment".into(),
            name: d.into(),
        },
        None => PodOwner {
            kind: r.kind.to_string(),
            name: r.name.to_string(),
        }
        .through_notebook(label(NOTEBOOK_NAME_LABEL)),
    })
}

/// A pod's labels, borrowed from the answer where they need no unescaping; `None` when
/// there are more than [`MAX_LABELS`] (the rest are skipped unread).
struct Labels<'a>(Option<Vec<(Cow<'a, str>, Cow<'a, str>)>>);

impl Default for Labels<'_> {
    /// No labels (not over the cap).
    fn default() -> Self {
        Labels(Some(Vec::new()))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Labels<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_unit<E>(self) -> Result<Labels<'a>, E> {
                Ok(Labels(Some(Vec::new())))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Labels<'a>, A::Error> {
                let mut kept = Vec::new();
                while let Some((Text(k), Text(v))) = map.next_entry()? {
                    kept.push((k, v));
                    if kept.len() > MAX_LABELS {
                        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                        return Ok(Labels(None));
                    }
                }
                Ok(Labels(Some(kept)))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A string borrowed from the answer when it can be (serde's `Cow<str>` always copies).
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// The allowlisted labels and the owner of each pod of one list answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodLabels {
    /// (namespace, name) → (label name, value), in allowlist order, only those it has.
    by_pod: HashMap<(String, String), Vec<(&'static str, String)>>,
    /// (namespace, name) → the pod's owner, where it has one.
    owners: HashMap<(String, String), PodOwner>,
    /// (namespace, name) → the pod's UID, where the answer gave one.
    uids: HashMap<(String, String), String>,
    /// What the caps left out of the answer.
    left_out: LeftOut,
}

impl PodLabels {
    /// Parse a `PodList` or `PartialObjectMetadataList` answer, keeping the labels of `keys`
    /// within the caps: at most [`MAX_PODS`] pods; a pod with more than [`MAX_LABELS`]
    /// labels, or a name over [`MAX_LABEL_BYTES`], is left out; so is a label value over
    /// it. Each is counted.
    ///
    /// # Errors
    /// Not JSON, or not a list of pods.
    pub(crate) fn from_json(body: &str, keys: &[PodLabelKey]) -> Result<PodLabels, String> {
        let list: List = serde_json::from_str(body).map_err(|e| format!("not a pod list: {e}"))?;
        if !list.kind.is_empty()
            && !matches!(list.kind.as_ref(), "PodList" | "PartialObjectMetadataList")
        {
            return Err(format!("a {} where a pod list was expected", list.kind));
        }
        let mut left_out = LeftOut::default();
        left_out.add(format!("pods past the first {MAX_PODS}"), list.items.over);
        let (mut many, mut long_names, mut long_values) = (0, 0, 0);
        let mut by_pod = HashMap::with_capacity(list.items.kept.len());
        let mut owners = HashMap::new();
        let mut uids = HashMap::new();
        for item in list.items.kept {
            let mut m = item.metadata;
            if !m.uid.is_empty() && fits(&m.uid) && fits(&m.name) && fits(&m.namespace) {
                let key = (m.namespace.to_string(), m.name.to_string());
                uids.insert(key, std::mem::take(&mut m.uid).into_owned());
            }
            let Labels(Some(all)) = std::mem::take(&mut m.labels) else {
                many += 1;
                continue;
            };
            if !fits(&m.name) || !fits(&m.namespace) {
                long_names += 1;
                continue;
            }
            let mut labels: Vec<(&'static str, String)> = Vec::new();
            for k in keys {
                let Some((_, v)) = all.iter().find(|(name, v)| *name == k.key && !v.is_empty())
                else {
                    continue;
                };
                if fits(v) {
                    labels.push((k.name, v.to_string()));
                } else {
                    long_values += 1;
                }
            }
            let owner = owner_of(&m, &all);
            let key = (m.namespace.into_owned(), m.name.into_owned());
            if let Some(o) = owner {
                owners.insert(key.clone(), o);
            }
            by_pod.insert(key, labels);
        }
        left_out.add(format!("pods with more than {MAX_LABELS} labels"), many);
        left_out.add(
            format!("pods whose name or namespace is over {MAX_LABEL_BYTES} bytes"),
            long_names,
        );
        left_out.add(
            format!("label values over {MAX_LABEL_BYTES} bytes"),
            long_values,
        );
        Ok(PodLabels {
            by_pod,
            owners,
            uids,
            left_out,
        })
    }

    /// Every pod's labels kept (for the fuzz targets).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn all_labels(&self) -> impl Iterator<Item = &[(&'static str, String)]> {
        self.by_pod.values().map(Vec::as_slice)
    }

    /// How many pods the answer listed.
    #[must_use]
    pub(crate) fn pods(&self) -> usize {
        self.by_pod.len()
    }

    /// The labels of pod `name` in `namespace` (empty when it has none, or was not listed).
    #[must_use]
    pub(crate) fn of(&self, namespace: Option<&str>, name: &str) -> &[(&'static str, String)] {
        self.by_pod
            .get(&(namespace.unwrap_or_default().to_string(), name.to_string()))
            .map_or(&[], Vec::as_slice)
    }

    /// The owner of pod `name` in `namespace`, where the answer named one.
    #[must_use]
    pub(crate) fn owner(&self, namespace: Option<&str>, name: &str) -> Option<&PodOwner> {
        self.owners
            .get(&(namespace.unwrap_or_default().to_string(), name.to_string()))
    }

    /// The UID of pod `name` in `namespace`, where the answer gave one.
    fn uid(&self, namespace: Option<&str>, name: &str) -> Option<&str> {
        self.uids
            .get(&(namespace.unwrap_or_default().to_string(), name.to_string()))
            .map(String::as_str)
    }

    /// Give every holder of every entity of `produced` its pod's labels and owner, and every
    /// process on a held GPU the pod its cgroup's pod UID names ([`PodLabels::pod_by_uid`]).
    /// Returns how many processes the hostname had given a holder whose UID is not theirs.
    pub(crate) fn apply(&self, produced: &mut Produced) -> usize {
        let mut not_theirs = 0;
        for s in &mut produced.samples {
            for e in &mut s.entities {
                let Some(holders) = e.allocation.as_mut() else {
                    continue;
                };
                for h in holders.iter_mut() {
                    let ns = h.pod.namespace.as_deref();
                    h.labels = self.of(ns, &h.pod.pod).to_vec();
                    h.owner = self.owner(ns, &h.pod.pod).cloned();
                }
                for p in &mut e.processes {
                    not_theirs += usize::from(self.pod_by_uid(p, holders));
                }
            }
        }
        not_theirs
    }

    /// A process's pod by the pod UID its cgroup names, where this answer lists the UIDs of
    /// the GPU's holders: the holder (or holders, its containers) of that UID, the container
    /// not told when two of its containers hold the GPU; else none where the pod its hostname
    /// named (or the GPU's only holder) has another UID: a process of a pod that holds no
    /// share of the GPU, whatever its hostname. Where neither is known, the pod stays as the
    /// hostname gave it. Returns whether the pod it had was taken away.
    fn pod_by_uid(&self, p: &mut ProcessReading, holders: &[Holder]) -> bool {
        let Some(uid) = p.pod_uid.as_deref() else {
            return false;
        };
        let mut found: Option<PodRef> = None;
        for h in holders {
            if self.uid(h.pod.namespace.as_deref(), &h.pod.pod) != Some(uid) {
                continue;
            }
            match &mut found {
                None => found = Some(h.pod.clone()),
                Some(f) if f.container != h.pod.container => f.container = None,
                Some(_) => {}
            }
        }
        if found.is_some() {
            p.pod = found;
            return false;
        }
        let other = p
            .pod
            .as_ref()
            .and_then(|pod| self.uid(pod.namespace.as_deref(), &pod.pod))
            .is_some_and(|u| u != uid);
        if other {
            p.pod = None;
        }
        other
    }
}

impl crate::pipeline::Answer for PodLabels {
    fn left_out(&self) -> Option<SourceError> {
        self.left_out
            .message("the API server's pod list")
            .map(SourceError::OverLimit)
    }
}

/// A client of the API server's pod list.
pub(crate) struct ApiServer {
    settings: PodLabelSettings,
    agent: ureq::Agent,
    url: String,
}

impl ApiServer {
    /// How often the pod list is read (`node.pod_labels_refresh`).
    pub(crate) fn refresh(&self) -> Duration {
        self.settings.refresh
    }
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// A client trusting `ca_file`, after checking that the token can be read.
    ///
    /// # Errors
    /// The CA or the token file cannot be read, naming the key and the file.
    pub(crate) fn new(settings: PodLabelSettings) -> Result<ApiServer, BuildError> {
        let agent = crate::client::agent_trusting(settings.timeout, &settings.ca_file).map_err(
            |e| BuildError::Invalid {
                key: "node.ca_file",
                message: format!(
                    "{e}: the API server's CA is needed to read pod labels (node.pod_labels); in a pod it is {DEFAULT_CA_FILE}, mounted with the ServiceAccount token (automountServiceAccountToken: true, as {RBAC_OVERLAY} sets)"
                ),
            },
        )?;
        read_token(&settings).map_err(|message| BuildError::Invalid {
            key: "node.token_file",
            message,
        })?;
        let url = settings.list_url();
        Ok(ApiServer {
            settings,
            agent,
            url,
        })
    }

    /// The pod list now.
    ///
    /// # Errors
    /// The token cannot be read (`io`), the API server refuses it or the request (401, 403:
    /// `no_permission`), cannot be reached, is slow, answers another error status, or not
    /// with a pod list.
    pub(crate) fn list(&self) -> Result<PodLabels, SourceError> {
        let token = read_token(&self.settings).map_err(SourceError::Io)?;
        let auth = format!("Bearer {token}");
        let body = get_text_with(
            &self.agent,
            &self.url,
            &[
                ("Authorization", auth.as_str()),
                (
                    "Accept",
                    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json",
                ),
            ],
            MAX_BODY,
        )
        .map_err(|e| self.error(e))?;
        PodLabels::from_json(&body, &self.settings.keys)
            .map_err(|e| SourceError::Parse(format!("{}: {e}", self.url)))
    }

    fn error(&self, e: FetchError) -> SourceError {
        match e {
            FetchError::Status { status: 401, .. } => SourceError::NoPermission(format!(
                "{e} (Unauthorized): the API server did not accept the token in {}; is it this cluster's ServiceAccount token, mounted and current?",
                self.settings.token_file.display()
            )),
            FetchError::Status { status: 403, .. } => SourceError::NoPermission(format!(
                "{e} (Forbidden): the agent's ServiceAccount may not list pods; grant list on pods: kubectl apply --server-side -k {RBAC_OVERLAY} (or empty node.pod_labels)"
            )),
            FetchError::Unreachable { .. } => SourceError::Unreachable(format!(
                "{e}; is node.api_server right and reachable, and node.ca_file its CA?"
            )),
            e => SourceError::from(e),
        }
    }
}

/// The bearer token, read now.
fn read_token(settings: &PodLabelSettings) -> Result<String, String> {
    let path = &settings.token_file;
    let hint = format!(
        "the ServiceAccount token is needed to read pod labels (node.pod_labels); mount it (automountServiceAccountToken: true, as {RBAC_OVERLAY} sets) or set node.token_file"
    );
    let text = crate::bounds::read_file_to_string(path, crate::bounds::MAX_TOKEN_FILE)
        .map_err(|e| format!("{}: cannot read the token ({e}): {hint}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "{}: the token file is empty: {hint}",
            path.display()
        ));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use truthscale_core::model::{EntitySample, Holder, PodRef, ProcessReading, Sample, Timestamp};

    #[test]
    fn label_keys_are_checked() {
        for ok in [
            "team",
            "app.kubernetes.io/name",
            "a",
            "A-b_c.D9",
            "example.com/x",
            "a-1.b/c",
        ] {
            assert_eq!(check_label_key(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-team",
            "team-",
            "has space",
            "a/b/c",
            "/name",
            "Example.com/x",
            "ex_ample.com/x",
            "prefix./x",
            "x/",
            "émoji",
            &"n".repeat(64),
        ] {
            assert!(check_label_key(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_label_key(&"n".repeat(63)), Ok(()));
        let keys = |k: &[&str]| label_keys(&k.iter().map(|s| (*s).to_string()).collect::<Vec<_>>());
        let got = keys(&["app.kubernetes.io/name", " team ", ""]).unwrap();
        assert_eq!(
            got.iter()
                .map(|k| (k.key.as_str(), k.name))
                .collect::<Vec<_>>(),
            [
                ("app.kubernetes.io/name", "label_app_kubernetes_io_name"),
                ("team", "label_team")
            ]
        );
        // The same name is the same interned text.
        assert!(std::ptr::eq(got[1].name, keys(&["team"]).unwrap()[0].name));
        let err = keys(&["team", "bad key"]).unwrap_err();
        assert_eq!(err.key, "node.pod_labels");
        assert!(
            err.message
                .contains("\"bad key\" is not a Kubernetes label key"),
            "{}",
            err.message
        );
        assert!(
            keys(&["team", "team"])
                .unwrap_err()
                .message
                .contains("listed twice")
        );
        let err = keys(&["a.b", "a_b"]).unwrap_err().message;
        assert!(err.contains("label_a_b"), "{err}");
        assert_eq!(keys(&[""]).unwrap(), []);
    }

    #[test]
    fn api_server_url_in_and_outside_a_cluster() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_string())
            }
        };
        let cluster = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        assert_eq!(
            api_server_url("", &cluster).unwrap(),
            "https://10.96.0.1:443"
        );
        let v6 = env(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        assert_eq!(api_server_url("", &v6).unwrap(), "https://[fd00::1]:443");
        assert_eq!(
            api_server_url("https://127.0.0.1:6443/", &cluster).unwrap(),
            "https://127.0.0.1:6443"
        );
        let none = env(&[]);
        let err = api_server_url("", &none).unwrap_err();
        assert_eq!(err.key, "node.api_server");
        assert!(
            err.message.contains("KUBERNETES_SERVICE_HOST"),
            "{}",
            err.message
        );
        assert!(
            api_server_url("http://127.0.0.1:6443", &none)
                .unwrap_err()
                .message
                .contains("https://")
        );
        assert!(api_server_url("https://", &none).is_err());
    }

    fn settings() -> PodLabelSettings {
        PodLabelSettings {
            keys: label_keys(&["app.kubernetes.io/name".into(), "team".into()]).unwrap(),
            refresh: Duration::from_secs(30),
            api_server: "https://10.96.0.1:443".into(),
            node: "gpu-node-3".into(),
            token_file: DEFAULT_TOKEN_FILE.into(),
            ca_file: DEFAULT_CA_FILE.into(),
            timeout: Duration::from_secs(2),
        }
    }

    #[test]
    fn the_list_asks_for_this_node_only() {
        assert_eq!(
            settings().list_url(),
            "https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-3&resourceVersion=0"
        );
    }

    #[test]
    fn labels_of_each_pod_and_none_made_up() {
        let body = r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},
          "items":[
            {"metadata":{"name":"chat-a","namespace":"web","uid":"u1",
              "labels":{"app.kubernetes.io/name":"chat","team":"search","pod-template-hash":"x"}}},
            {"metadata":{"name":"chat-b","namespace":"web","labels":{"team":""}}},
            {"metadata":{"name":"train","namespace":"ml"}}
          ]}"#;
        let s = settings();
        let l = PodLabels::from_json(body, &s.keys).unwrap();
        assert_eq!(l.pods(), 3);
        assert_eq!(
            l.of(Some("web"), "chat-a"),
            [
                ("label_app_kubernetes_io_name", "chat".to_string()),
                ("label_team", "search".to_string())
            ]
        );
        // An empty value is no label; a pod without labels, or not listed, has none.
        assert!(l.of(Some("web"), "chat-b").is_empty());
        assert!(l.of(Some("ml"), "train").is_empty());
        assert!(l.of(Some("ml"), "chat-a").is_empty());
        let mut produced = Produced {
            samples: vec![Sample {
                taken: Timestamp(0),
                entities: vec![EntitySample {
                    allocation: Some(vec![Holder {
                        pod: PodRef {
                            pod: "chat-a".into(),
                            namespace: Some("web".into()),
                            container: Some("vllm".into()),
                        },
                        ..Holder::default()
                    }]),
                    ..EntitySample::default()
                }],
            }],
            ..Produced::default()
        };
        l.apply(&mut produced);
        assert_eq!(
            produced.samples[0].entities[0].allocation.as_ref().unwrap()[0]
                .labels
                .len(),
            2
        );
        // A full PodList parses the same way; anything else is refused.
        assert!(PodLabels::from_json(r#"{"kind":"PodList","items":[]}"#, &s.keys).is_ok());
        assert!(PodLabels::from_json(r#"{"kind":"Status","items":[]}"#, &s.keys).is_err());
        assert!(PodLabels::from_json(r#"{"kind":"PodList"}"#, &s.keys).is_err());
        assert!(PodLabels::from_json("<html>", &s.keys).is_err());
    }

    /// Two pods named `chat` in two namespaces share a time-sliced GPU, and a third pod (not
    /// a holder) is named `train` as the holder of another GPU is: the hostname tells none of
    /// their processes apart, the cgroup's pod UID does, once the API server lists the UIDs.
    #[test]
    fn a_process_s_pod_is_the_holder_its_cgroup_uid_names() {
        let body = r#"{"kind":"PartialObjectMetadataList","items":[
            {"metadata":{"name":"chat","namespace":"web","uid":"u-web"}},
            {"metadata":{"name":"chat","namespace":"staging","uid":"u-staging"}},
            {"metadata":{"name":"train","namespace":"ml","uid":"u-train"}},
            {"metadata":{"name":"train","namespace":"lab","uid":"u-lab"}}
          ]}"#;
        let l = PodLabels::from_json(body, &settings().keys).unwrap();
        let holder = |pod: &str, ns: &str, container: &str| Holder {
            pod: PodRef {
                pod: pod.into(),
                namespace: Some(ns.into()),
                container: Some(container.into()),
            },
            ..Holder::default()
        };
        // `pod`: what the hostname rule gave (`None` on the shared GPU: the name is ambiguous).
        let process = |pid: &str, uid: Option<&str>, pod: Option<&Holder>| ProcessReading {
            pid: pid.into(),
            pod_uid: uid.map(str::to_string),
            pod: pod.map(|h| h.pod.clone()),
            ..ProcessReading::default()
        };
        let (web, staging) = (holder("chat", "web", "a"), holder("chat", "staging", "b"));
        let train = holder("train", "ml", "t");
        let entity = |holders: Vec<Holder>, processes| EntitySample {
            allocation: Some(holders),
            processes,
            ..EntitySample::default()
        };
        let mut produced = Produced {
            samples: vec![Sample {
                taken: Timestamp(0),
                entities: vec![
                    entity(
                        vec![web.clone(), staging.clone()],
                        vec![
                            process("1", Some("u-web"), None),
                            process("2", Some("u-staging"), None),
                            process("3", Some("u-elsewhere"), None),
                            process("4", None, None),
                        ],
                    ),
                    entity(
                        vec![train.clone()],
                        vec![
                            process("5", Some("u-train"), Some(&train)),
                            process("6", Some("u-lab"), Some(&train)),
                        ],
                    ),
                ],
            }],
            ..Produced::default()
        };
        assert_eq!(
            l.apply(&mut produced),
            1,
            "the lab pod's process was the ml pod's"
        );
        let pods: Vec<Vec<Option<PodRef>>> = produced.samples[0]
            .entities
            .iter()
            .map(|e| e.processes.iter().map(|p| p.pod.clone()).collect())
            .collect();
        assert_eq!(
            pods,
            [
                vec![Some(web.pod), Some(staging.pod), None, None],
                vec![Some(train.pod.clone()), None],
            ]
        );
        // Without the UIDs (another answer), the hostname's pod stands.
        let no_uids = PodLabels::from_json(
            r#"{"kind":"PodList","items":[{"metadata":{"name":"train","namespace":"ml"}}]}"#,
            &settings().keys,
        )
        .unwrap();
        let mut p = process("6", Some("u-lab"), Some(&train));
        assert!(!no_uids.pod_by_uid(&mut p, std::slice::from_ref(&train)));
        assert_eq!(p.pod, Some(train.pod));
    }

    #[test]
    fn each_pod_s_owner_a_replicaset_followed_to_its_deployment() {
        let body = r#"{"kind":"PartialObjectMetadataList","items":[
          {"metadata":{"name":"web-7d9f8b-x2k4q","namespace":"serving",
            "labels":{"pod-template-hash":"7d9f8b","team":"search"},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d9f8b","uid":"u1","controller":true}]}},
          {"metadata":{"name":"nb-0","namespace":"research",
            "ownerReferences":[{"kind":"Other","name":"x"},{"apiVersion":"apps/v1","kind":"StatefulSet","name":"nb","controller":true}]}},
          {"metadata":{"name":"odd-abc","namespace":"ml","labels":{"pod-template-hash":"zzz"},
            "ownerReferences":[{"kind":"ReplicaSet","name":"odd-abc","controller":true}]}},
          {"metadata":{"name":"bare","namespace":"ml"}}
        ]}"#;
        let s = settings();
        let l = PodLabels::from_json(body, &s.keys).unwrap();
        let owner = |ns: &str, pod: &str| {
            l.owner(Some(ns), pod)
                .map(|o| (o.kind.clone(), o.name.clone()))
        };
        assert_eq!(
            owner("serving", "web-7d9f8b-x2k4q"),
            Some(("Deployment".into(), "web".into()))
        );
        // The controller reference, not the first.
        assert_eq!(
            owner("research", "nb-0"),
            Some(("StatefulSet".into(), "nb".into()))
        );
        // A ReplicaSet whose name does not end in the pod's hash stays a ReplicaSet.
        assert_eq!(
            owner("ml", "odd-abc"),
            Some(("ReplicaSet".into(), "odd-abc".into()))
        );
        assert_eq!(owner("ml", "bare"), None);
        assert_eq!(owner("ml", "not-listed"), None);
    }

    /// Kubeflow's notebook controller runs Notebook `nb-alice` as StatefulSet `nb-alice`
    /// (the Notebook its controller) and labels its pod `notebook-name: nb-alice`: the pod's
    /// owner is the Notebook, from the pod's own metadata. A StatefulSet whose pods carry
    /// another notebook's name, or none, stays a StatefulSet; the label on a Deployment's
    /// pod changes nothing.
    #[test]
    fn a_notebook_s_statefulset_pod_is_owned_by_the_notebook() {
        let body = r#"{"kind":"PodList","items":[
          {"metadata":{"name":"nb-alice-0","namespace":"research",
            "labels":{"notebook-name":"nb-alice","statefulset":"nb-alice","app":"nb-alice"},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"nb-alice","controller":true}]}},
          {"metadata":{"name":"db-0","namespace":"research",
            "labels":{"notebook-name":"nb-alice"},
            "ownerReferences":[{"kind":"StatefulSet","name":"db","controller":true}]}},
          {"metadata":{"name":"blank-0","namespace":"research",
            "labels":{"notebook-name":""},
            "ownerReferences":[{"kind":"StatefulSet","name":"blank","controller":true}]}},
          {"metadata":{"name":"web-7d9f8b-x2k4q","namespace":"research",
            "labels":{"pod-template-hash":"7d9f8b","notebook-name":"web"},
            "ownerReferences":[{"kind":"ReplicaSet","name":"web-7d9f8b","controller":true}]}}
        ]}"#;
        let l = PodLabels::from_json(body, &settings().keys).unwrap();
        let owner = |pod: &str| {
            l.owner(Some("research"), pod)
                .map(|o| (o.kind.as_str(), o.name.as_str()))
        };
        assert_eq!(owner("nb-alice-0"), Some(("Notebook", "nb-alice")));
        assert_eq!(owner("db-0"), Some(("StatefulSet", "db")));
        assert_eq!(owner("blank-0"), Some(("StatefulSet", "blank")));
        assert_eq!(owner("web-7d9f8b-x2k4q"), Some(("Deployment", "web")));
        // The labels reader is unchanged: `notebook-name` is not allowlisted, so not copied.
        assert!(l.of(Some("research"), "nb-alice-0").is_empty());
    }

    #[test]
    fn a_missing_token_or_ca_is_refused_naming_the_key() {
        let dir = std::env::temp_dir().join(format!("ts-apiserver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = settings();
        s.ca_file = dir.join("absent-ca.crt");
        match ApiServer::new(s.clone()) {
            Err(BuildError::Invalid { key, message }) => {
                assert_eq!(key, "node.ca_file");
                assert!(message.contains("absent-ca.crt"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        s.ca_file = dir.join("ca.crt");
        std::fs::write(&s.ca_file, ca.cert.pem()).unwrap();
        s.token_file = dir.join("absent-token");
        match ApiServer::new(s.clone()) {
            Err(BuildError::Invalid { key, message }) => {
                assert_eq!(key, "node.token_file");
                assert!(
                    message.contains("absent-token") && message.contains("cannot read the token"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        std::fs::write(&s.token_file, "\n").unwrap();
        assert!(
            matches!(ApiServer::new(s.clone()), Err(BuildError::Invalid { message, .. }) if message.contains("empty"))
        );
        std::fs::write(&s.token_file, "abc\n").unwrap();
        let api = ApiServer::new(s).unwrap();
        assert_eq!(read_token(&api.settings).unwrap(), "abc");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The token and the CA are read bounded: `/dev/zero`, a FIFO, a directory and a file
    /// over the cap (64 KiB for the token, 1 MiB for the CA) are refused at once, naming the
    /// key and the file; none hangs the start or grows memory.
    #[test]
    fn token_and_ca_files_are_read_bounded() {
        use crate::bounds::{MAX_PEM_FILE, MAX_TOKEN_FILE, hostile};
        let dir = std::env::temp_dir().join(format!("ts-apiserver-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let good_ca = dir.join("ca.crt");
        std::fs::write(&good_ca, ca.cert.pem()).unwrap();
        let t = std::time::Instant::now();
        for (path, why) in hostile::files(&dir.join("token"), MAX_TOKEN_FILE) {
            let mut s = settings();
            s.ca_file = good_ca.clone();
            s.token_file = path.clone();
            match ApiServer::new(s) {
                Err(BuildError::Invalid { key, message }) => {
                    assert_eq!(key, "node.token_file");
                    let head = format!("{}: cannot read the token ({why}): ", path.display());
                    assert!(message.starts_with(&head), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
        for (path, why) in hostile::files(&dir.join("ca"), MAX_PEM_FILE) {
            let mut s = settings();
            s.ca_file = path.clone();
            match ApiServer::new(s) {
                Err(BuildError::Invalid { key, message }) => {
                    assert_eq!(key, "node.ca_file");
                    let head = format!("{}: cannot read: {why}: ", path.display());
                    assert!(message.starts_with(&head), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What is over a cap is left out and counted, never truncated: pods past the first
    /// 10 000, a pod with more than 256 labels or a name over 1 024 bytes, a label value over
    /// 1 024 bytes. Escaped strings are read as well as borrowed ones.
    #[test]
    fn pod_list_caps_leave_out_and_count() {
        use crate::pipeline::Answer as _;
        let s = settings();
        let pod = |name: &str, labels: &str| {
            format!(r#"{{"metadata":{{"name":"{name}","namespace":"web","labels":{{{labels}}}}}}}"#)
        };
        let long = "x".repeat(MAX_LABEL_BYTES + 1);
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!(r#""k{i}":"v""#)).collect();
        let mut items = vec![
            pod("ok", r#""team":"se\u0061rch""#),
            pod("long-value", &format!(r#""team":"{long}""#)),
            pod(&long, r#""team":"a""#),
            pod("many", &many.join(",")),
        ];
        items.extend((0..MAX_PODS).map(|i| pod(&format!("p{i}"), r#""team":"t""#)));
        let body = format!(r#"{{"kind":"PodList","items":[{}]}}"#, items.join(","));
        let l = PodLabels::from_json(&body, &s.keys).unwrap();
        assert_eq!(
            l.of(Some("web"), "ok"),
            [("label_team", "search".to_string())]
        );
        assert!(l.of(Some("web"), "long-value").is_empty());
        assert!(l.of(Some("web"), "many").is_empty());
        assert_eq!(
            l.pods(),
            MAX_PODS - 2,
            "the long name and the many labels are left out"
        );
        let e = l.left_out().expect("counted");
        assert_eq!(e.kind(), "over_limit");
        assert_eq!(
            e.to_string(),
            "over limit: the API server's pod list: left out 4 pods past the first 10000, 1 pods with more than 256 labels, 1 pods whose name or namespace is over 1024 bytes, 1 label values over 1024 bytes (the reader's caps bound its memory; see docs/reliability.md)"
        );
        let small =
            PodLabels::from_json(&format!(r#"{{"items":[{}]}}"#, pod("a", "")), &s.keys).unwrap();
        assert!(small.left_out().is_none());
    }
}

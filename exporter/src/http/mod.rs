//! The HTTP surface: `/metrics`, `/`, `/healthz`, `/readyz`.

pub(crate) mod landing;
pub mod web;

use crate::publish::Snapshot;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use truthscale_core::exposition::Encoding;

/// Limits applied to every route.
#[derive(Debug, Clone, Copy)]
pub struct RouterLimits {
    /// Longest a request may take (408 after).
    pub request_timeout: Duration,
    /// Requests handled at once; more wait their turn.
    pub max_concurrent_requests: usize,
    /// `/healthz` fails when the newest snapshot began longer ago than this: sampling has
    /// stopped (a hung source). It always fails once the sampler is gone.
    pub liveness_after: Duration,
}

impl Default for RouterLimits {
    fn default() -> Self {
        RouterLimits {
            request_timeout: Duration::from_secs(10),
            max_concurrent_requests: 64,
            liveness_after: Duration::from_secs(60),
        }
    }
}

type Snap = watch::Receiver<Arc<Snapshot>>;

/// The router over a snapshot receiver.
pub fn router(rx: Snap, limits: RouterLimits) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(landing))
        .route(
            "/healthz",
            get(move |State(rx): State<Snap>| healthz(rx, limits.liveness_after)),
        )
        .route("/readyz", get(readyz))
        .with_state(rx)
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            limits.max_concurrent_requests.max(1),
        ))
}

/// The entries of a header's values (`Accept`, `Accept-Encoding`): each one's name (a media
/// type or coding, without its other parameters) and its q-value (1 where not given, 0 where
/// it does not parse: an entry that cannot be read accepts nothing).
fn weighted(headers: &HeaderMap, name: header::HeaderName) -> impl Iterator<Item = (&str, f64)> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|entry| {
            let mut parts = entry.split(';');
            let name = parts.next().unwrap_or("").trim();
            let q = parts
                .find_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case("q")
                        .then(|| v.trim().parse::<f64>().unwrap_or(0.0))
                })
                .unwrap_or(1.0);
            (name, q)
        })
        .filter(|(name, _)| !name.is_empty())
}

/// The highest q-value the header `name` gives each of `names`, in one pass over it; `None`
/// for a name it does not list.
fn q_each<const N: usize>(
    headers: &HeaderMap,
    name: header::HeaderName,
    names: [&str; N],
) -> [Option<f64>; N] {
    let mut best = [None; N];
    for (entry, q) in weighted(headers, name) {
        for (b, n) in best.iter_mut().zip(names) {
            if entry.eq_ignore_ascii_case(n) {
                *b = Some(b.map_or(q, |x: f64| x.max(q)));
            }
        }
    }
    best
}

/// OpenMetrics when the client's `Accept` asks for it at least as much as for text (its
/// q-value above 0, and not below text/plain's, else `text/*`'s or `*/*`'s), else text
/// 0.0.4.
#[must_use]
pub(crate) fn negotiate(headers: &HeaderMap) -> Encoding {
    let [open, plain, text_any, any] = q_each(
        headers,
        header::ACCEPT,
        [
            "application/openmetrics-text",
            "text/plain",
            "text/*",
            "*/*",
        ],
    );
    let Some(open) = open else {
        return Encoding::Text;
    };
    let text = plain.or(text_any).or(any).unwrap_or(0.0);
    if open > 0.0 && open >= text {
        Encoding::OpenMetrics
    } else {
        Encoding::Text
    }
}

/// Whether `Accept-Encoding` accepts gzip with a q-value above 0: `gzip` or `x-gzip` where it
/// lists either, else `*` (which stands only for the codings it does not list, RFC 9110
/// §12.5.3).
#[must_use]
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    let [gzip, x_gzip, any] = q_each(headers, header::ACCEPT_ENCODING, ["gzip", "x-gzip", "*"]);
    gzip.into_iter()
        .chain(x_gzip)
        .reduce(f64::max)
        .or(any)
        .is_some_and(|q| q > 0.0)
}

async fn metrics(State(rx): State<Snap>, headers: HeaderMap) -> Response {
    let snap = rx.borrow().clone();
    // A stale snapshot is served: it says that every source is down.
    if snap.tick == 0 {
        return (StatusCode::SERVICE_UNAVAILABLE, "no snapshot yet\n").into_response();
    }
    let format = negotiate(&headers);
    let gzipped = if accepts_gzip(&headers) {
        snap.gzip_demand.ask_now(format);
        snap.body_gzip(format)
    } else {
        None
    };
    let vary = (header::VARY, "Accept, Accept-Encoding");
    match gzipped {
        Some(body) => (
            [
                (header::CONTENT_TYPE, format.content_type()),
                (header::CONTENT_ENCODING, "gzip"),
                vary,
            ],
            body,
        )
            .into_response(),
        None => (
            [(header::CONTENT_TYPE, format.content_type()), vary],
            snap.body(format),
        )
            .into_response(),
    }
}

async fn landing(State(rx): State<Snap>) -> Response {
    let snap = rx.borrow().clone();
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        // Rendered on request, not every tick.
        landing::render(&snap.gpus, &snap.source, snap.source_up, snap.taken_unix_ms),
    )
        .into_response()
}

/// Liveness: the sampler is running and has begun a tick within `after`.
async fn healthz(rx: Snap, after: Duration) -> Response {
    if rx.has_changed().is_err() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "sampling has stopped: the sampler thread ended (see the log)\n",
        )
            .into_response();
    }
    let taken_at = rx.borrow().taken_at;
    match taken_at.map(|t| t.elapsed()) {
        Some(age) if age > after => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "sampling has stopped: the last tick began {} s ago (limit {} s); the source may hang\n",
                age.as_secs(),
                after.as_secs()
            ),
        )
            .into_response(),
        _ => (StatusCode::OK, "ok\n").into_response(),
    }
}

async fn readyz(State(rx): State<Snap>) -> Response {
    if rx.has_changed().is_err() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "sampling has stopped: the sampler thread ended (see the log); /metrics serves its last data as down\n",
        )
            .into_response();
    }
    let snap = rx.borrow().clone();
    if snap.ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else if snap.stale {
        let age = snap.published_at.map_or(0, |t| t.elapsed().as_secs());
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stale: the last tick ended {age} s ago and the next has not (a read that hangs); /metrics serves its data as down\n"
            ),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the first sample\n",
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, v.parse().unwrap());
            accepts_gzip(&h)
        };
        assert!(with("gzip"));
        assert!(with("GZIP"));
        assert!(with("x-gzip"));
        assert!(with("deflate, gzip;q=0.5"));
        assert!(with("br;q=1.0, gzip;q=1.0, *;q=0.1"));
        assert!(with("*"));
        assert!(!with("gzip;q=0"));
        assert!(!with("gzip; q=0.0"));
        assert!(!with("identity"));
        assert!(!with("br, deflate"));
        assert!(!with("gzipx"));
        assert!(!accepts_gzip(&HeaderMap::new()));
        // A coding it lists is decided by its own q-value; `*` stands for the others.
        assert!(!with("gzip;q=0, *"));
        assert!(!with("*, gzip;q=0"));
        assert!(with("br;q=0, *"));
        assert!(!with("*;q=0"));
    }

    /// OpenMetrics only where `Accept` asks for it at least as much as for text, and not
    /// with q=0: Prometheus' own headers, either way round, and refusals.
    #[test]
    fn accept_chooses_by_q_value() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, v.parse().unwrap());
            negotiate(&h)
        };
        let om = Encoding::OpenMetrics;
        assert_eq!(
            with(
                "application/openmetrics-text;version=1.0.0;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            ),
            om
        );
        assert_eq!(with("application/openmetrics-text; version=1.0.0"), om);
        assert_eq!(with("text/plain, application/openmetrics-text"), om);
        // scrape_protocols with text first.
        assert_ne!(
            with(
                "text/plain;version=0.0.4;q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.4"
            ),
            om
        );
        assert_ne!(with("application/openmetrics-text;q=0, text/plain"), om);
        assert_ne!(with("application/openmetrics-text;q=0"), om);
        assert_ne!(with("application/openmetrics-text;q=0.2, */*;q=0.5"), om);
        assert_ne!(with("text/plain"), om);
        assert_ne!(negotiate(&HeaderMap::new()), om);
    }

    /// A sampler whose thread has ended (a panic) is neither live nor ready, whatever its
    /// last snapshot says.
    #[tokio::test]
    async fn a_stopped_sampler_is_neither_live_nor_ready() {
        let ready = Snapshot {
            tick: 1,
            taken_at: Some(std::time::Instant::now()),
            ..Snapshot::default()
        };
        assert!(ready.ready());
        let (tx, rx) = watch::channel(Arc::new(ready));
        let after = Duration::from_secs(60);
        assert_eq!(readyz(State(rx.clone())).await.status(), StatusCode::OK);
        assert_eq!(healthz(rx.clone(), after).await.status(), StatusCode::OK);
        drop(tx);
        let r = readyz(State(rx.clone())).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            healthz(rx, after).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}

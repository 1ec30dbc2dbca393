//! The Prometheus HTTP API client: `query_range` and label queries, the JSON envelope,
//! and errors that name the URL.

mod answer;
mod post;
mod retry;
mod waiting;

use answer::Envelope;
#[cfg(test)]
use answer::MAX_WARNINGS;
pub(super) use answer::{Matrix, PromValue, RangeSeries, Warnings};
use anyhow::{Context, bail};
use serde::de::{DeserializeOwned, IgnoredAny};
use std::time::Duration;

/// Largest response body read (after decompression), whatever the queries in flight
/// ([`MAX_BODIES_IN_FLIGHT`] shared by them may lower it).
const MAX_BODY: u64 = 256 << 20;

/// Retries of a request that failed for a passing reason, by default.
pub(crate) const DEFAULT_RETRIES: u32 = 3;
/// The first wait before a retry; each next one doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// A limit the server enforces on one query, which a smaller query can meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Too many samples in memory: Prometheus' `--query.max-samples` (HTTP 422), Mimir's
    /// `-querier.max-samples`.
    Samples,
    /// The query ran out of time on the server: Prometheus' `--query.timeout` (HTTP 503,
    /// `errorType` `timeout`), Mimir's `-querier.timeout`. Only the server's own answer
    /// says so: no whole answer within `--prometheus-timeout` is not a limit (a smaller
    /// query is not known to meet it), it is tried again and then an error.
    Timeout,
    /// One of Mimir's per-query limits (`err-mimir-max-*`): series, chunks or chunk bytes
    /// fetched; the flag to raise.
    Mimir(&'static str),
}

impl Limit {
    /// What the limit is and which flag raises it.
    #[must_use]
    pub(crate) fn advice(self) -> String {
        match self {
            Limit::Samples => "the server's sample limit per query (Prometheus: raise --query.max-samples; Mimir: -querier.max-samples)".to_owned(),
            Limit::Timeout => "the server's time limit per query (Prometheus: raise --query.timeout; Mimir: -querier.timeout)".to_owned(),
            Limit::Mimir(flag) => format!("Mimir's per-query limit (raise {flag})"),
        }
    }
}

/// Mimir's limit errors by their ID, and the flag each names.
const MIMIR_LIMITS: &[(&str, &str)] = &[
    (
        "err-mimir-max-series-per-query",
        "-querier.max-fetched-series-per-query",
    ),
    (
        "err-mimir-max-chunks-per-query",
        "-querier.max-fetched-chunks-per-query",
    ),
    (
        "err-mimir-max-chunks-bytes-per-query",
        "-querier.max-fetched-chunk-bytes-per-query",
    ),
    (
        "err-mimir-max-estimated-chunks-per-query",
        "-querier.max-estimated-fetched-chunks-per-query-multiplier",
    ),
    // The time a query spans: split in time, each part spans less.
    (
        "err-mimir-max-query-length",
        "-query-frontend.max-query-length",
    ),
    (
        "err-mimir-max-total-query-length",
        "-query-frontend.max-total-query-length",
    ),
];

/// The limit an error answer reports, if any: from its status, `errorType` and text.
#[must_use]
pub(crate) fn limit_of(status: u16, error_type: Option<&str>, error: &str) -> Option<Limit> {
    if let Some((_, flag)) = MIMIR_LIMITS.iter().find(|(id, _)| error.contains(id)) {
        return Some(Limit::Mimir(flag));
    }
    if error.contains("would load too many samples") {
        return Some(Limit::Samples);
    }
    if error_type == Some("timeout") || (status == 503 && error.contains("query timed out")) {
        return Some(Limit::Timeout);
    }
    None
}

/// Why a request failed.
#[derive(Debug)]
pub(crate) enum GetError {
    /// The server refused the query for a limit a smaller query can meet.
    Limit {
        /// Which limit.
        limit: Limit,
        /// The whole message, naming the URL.
        message: String,
    },
    /// Anything else (after the retries for passing failures).
    Other(anyhow::Error),
}

impl From<GetError> for anyhow::Error {
    fn from(e: GetError) -> anyhow::Error {
        match e {
            GetError::Limit { limit, message } => {
                anyhow::anyhow!("{message}; this is {}", limit.advice())
            }
            GetError::Other(e) => e,
        }
    }
}

/// What a failed attempt means for the next one.
enum Attempt {
    /// Passing (5xx, a connection refused or cut, no answer in time): try again later;
    /// `true`: no whole answer in time.
    Retry(anyhow::Error, bool),
    /// Passing, and the server said how long to wait first (`Retry-After`, seconds).
    Wait(anyhow::Error, Duration),
    /// Final.
    Fail(GetError),
}

/// Counters of a [`Client`], shared by the requests in flight.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) warnings: Warnings,
    /// Requests answered.
    pub(super) queries: u64,
    /// Requests sent, retries and the parts of split queries included.
    pub(super) sent: u64,
    /// Requests tried again after a passing failure.
    pub(super) retries: u64,
    /// Requests answered by remote-read.
    pub(super) remote_reads: u64,
    /// Time spent waiting for Prometheus' answers (until the whole body is read), summed
    /// over the requests (in flight together, they overlap).
    pub(super) waiting: Duration,
    /// Time spent decoding the answers, summed over the requests.
    pub(super) decoding: Duration,
}

/// The one deadline of a whole read (`--deadline`): every request ends by it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    /// When it runs out.
    pub(super) at: std::time::Instant,
    /// As given, for the messages.
    pub(super) given: Duration,
}

/// The requests one query may take (`--max-requests-per-query`): its retries, and the
/// smaller queries (and label lookups) it is split into when the server refuses it.
#[derive(Debug)]
pub(super) struct Budget {
    /// The most requests.
    pub(super) max: u64,
    /// Requests sent so far.
    spent: std::cell::Cell<u64>,
}

impl Budget {
    /// A budget of `max` requests, none spent.
    pub(super) fn new(max: u64) -> Budget {
        Budget {
            max,
            spent: std::cell::Cell::new(0),
        }
    }

    /// Take one request from the budget; an error naming `--max-requests-per-query` when
    /// none is left.
    fn spend(&self, url: &str) -> Result<(), GetError> {
        let spent = self.spent.get();
        if spent >= self.max {
            return Err(GetError::Other(anyhow::anyhow!(
                "{url}: the request budget of one query ran out (--max-requests-per-query {}): {spent} requests (its retries, the smaller queries it was split into and their label lookups) did not read it whole; the server refuses queries this size: narrow --selector, use a longer --step or a shorter --since, or raise the budget",
                self.max
            )));
        }
        self.spent.set(spent + 1);
        Ok(())
    }
}

/// The most bytes of answers held at once, all queries in flight together: one answer may
/// be at most this over `--max-queries-in-flight` (and at most [`MAX_BODY`]).
pub(crate) const MAX_BODIES_IN_FLIGHT: u64 = 512 << 20;

/// The largest answer read for `in_flight` queries at once: [`MAX_BODIES_IN_FLIGHT`]
/// shared, at most [`MAX_BODY`].
#[must_use]
pub(crate) fn max_body(in_flight: usize) -> u64 {
    (MAX_BODIES_IN_FLIGHT / (in_flight.max(1) as u64)).min(MAX_BODY)
}

/// A blocking client for one Prometheus API base URL; requests may run from several
/// threads at once.
#[derive(Debug)]
pub(super) struct Client {
    pub(super) base: String,
    pub(super) agent: ureq::Agent,
    pub(super) authorization: Option<String>,
    /// Time limit of one request, body included.
    pub(super) timeout: Duration,
    /// Retries of a request after a passing failure.
    pub(super) retries: u32,
    /// Ask for gzip-compressed answers (`Accept-Encoding: gzip`); else `identity`.
    pub(super) gzip: bool,
    /// The deadline of the whole read, if any.
    pub(super) deadline: Option<Deadline>,
    /// How long a request waits before it is said on stderr, and again as often
    /// (`--waiting-notice`); `None`: never.
    pub(super) waiting_notice: Option<Duration>,
    /// The requests in flight, and the thread that says which waits.
    waiting: std::sync::Arc<waiting::Waiting>,
    /// The largest answer read, in bytes (after decompression).
    pub(super) max_body: u64,
    pub(super) counters: std::sync::Mutex<Counters>,
    /// The buffers answers are read into, kept for the next request: a report reads
    /// hundreds of answers of megabytes, and a buffer allocated (and grown) afresh for each
    /// leaves the allocator holding freed megabytes in every reading thread's arena.
    bodies: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Buffers kept for the next answers: one per query in flight, up to this many.
const KEPT_BODIES: usize = 8;

/// The `host[:port]` of an `http://` or `https://` URL; `None` for another scheme.
fn authority(url: &str) -> Option<&str> {
    url.strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .and_then(|rest| rest.split('/').next())
}

/// The first bytes of a body, for an error message.
pub(super) fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
    if text.trim().is_empty() {
        "an empty body".to_owned()
    } else {
        format!("{text:?}")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.waiting.close();
    }
}

impl Client {
    pub(super) fn new(
        url: &str,
        authorization: Option<String>,
        timeout: Duration,
        ca_file: Option<&std::path::Path>,
    ) -> anyhow::Result<Client> {
        let base = url.trim().trim_end_matches('/');
        // These two do not echo the URL: it may hold a password or a token.
        if base.contains('@') {
            bail!(
                "--prometheus: give credentials with --basic-auth or --bearer-token-file, not in the URL"
            );
        }
        if base.contains(['?', '#']) {
            bail!("--prometheus: give the server's base URL, without a query or fragment");
        }
        if authority(base).is_none_or(str::is_empty) {
            bail!("--prometheus {url:?}: expected a URL like http://prometheus:9090");
        }
        let agent = match ca_file {
            None => crate::client::agent(timeout),
            Some(f) => crate::client::agent_trusting(timeout, f)
                .map_err(|e| anyhow::anyhow!("--ca-file {e}"))?,
        };
        Ok(Client {
            base: base.to_owned(),
            agent,
            authorization,
            timeout,
            retries: DEFAULT_RETRIES,
            gzip: true,
            deadline: None,
            waiting_notice: None,
            waiting: std::sync::Arc::default(),
            max_body: MAX_BODY,
            counters: std::sync::Mutex::new(Counters::default()),
            bodies: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Whether the server is on this host: `localhost`, an address in 127.0.0.0/8, or
    /// `[::1]`.
    pub(super) fn is_local(&self) -> bool {
        let authority = authority(&self.base).unwrap_or_default();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// The counters, whatever a panicking thread left.
    pub(super) fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Count a request answered: sent at `started`, its body read by `answered`, and decoded
    /// since; the counters, for what else the caller counts.
    fn answered(
        &self,
        started: std::time::Instant,
        answered: std::time::Instant,
    ) -> std::sync::MutexGuard<'_, Counters> {
        let mut c = self.counters();
        c.queries += 1;
        c.waiting += answered - started;
        c.decoding += answered.elapsed();
        c
    }

    /// The kept buffers, whatever a panicking thread left.
    fn bodies(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.bodies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An empty buffer to read an answer into: a kept one, else a new one.
    fn take_body(&self) -> Vec<u8> {
        self.bodies().pop().unwrap_or_default()
    }

    /// Keep `body`'s buffer for the next answer (up to [`KEPT_BODIES`] buffers).
    fn keep_body(&self, mut body: Vec<u8>) {
        body.clear();
        let mut kept = self.bodies();
        if kept.len() < KEPT_BODIES {
            kept.push(body);
        }
    }

    /// `GET base+path?params`, and the `data` of a successful API answer; an error for the
    /// other answers.
    pub(super) fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &[(&str, &str)],
    ) -> anyhow::Result<T> {
        self.get_limited(path, params, None)
            .map_err(anyhow::Error::from)
    }

    /// `GET base+path` once (no retry, no budget): the `data` of a successful answer, or an
    /// error. For what the server says of itself, where a failure only means asking less.
    pub(super) fn get_once<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let (timeout, _) = self.call_timeout().map_err(anyhow::Error::from)?;
        self.attempt(path, &[], timeout).map_err(|e| match e {
            Attempt::Retry(e, _) | Attempt::Wait(e, _) => e,
            Attempt::Fail(e) => e.into(),
        })
    }

    /// The error of a read whose deadline ran out.
    fn deadline_error(&self, d: Deadline) -> GetError {
        let c = self.counters();
        GetError::Other(anyhow::anyhow!(
            "{}: the overall deadline (--deadline {}) ran out after {} requests to Prometheus ({} answered); raise --deadline, or read less (a shorter --since, a longer --step, a narrower --selector)",
            self.base,
            humantime::format_duration(d.given),
            c.sent,
            c.queries
        ))
    }

    /// The time limit of the next request: `--prometheus-timeout`, or what is left of the
    /// deadline when that is less (`true`: cut by the deadline); an error when none is left.
    fn call_timeout(&self) -> Result<(Duration, bool), GetError> {
        let Some(d) = self.deadline else {
            return Ok((self.timeout, false));
        };
        let left = d.at.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(self.deadline_error(d));
        }
        Ok((left.min(self.timeout), left < self.timeout))
    }

    /// [`Client::get`], telling a server's per-query limit apart ([`GetError::Limit`]). A
    /// passing failure (HTTP 5xx other than a limit, 429, a connection refused or cut, no
    /// whole answer within the timeout) is tried again up to `retries` times, after
    /// 250 ms, 500 ms, 1 s… (each jittered down to half, so queries in flight retry apart),
    /// or after the server's `Retry-After` where it gives one (up to a minute); then it is
    /// an error (no whole answer in time names
    /// `--prometheus-timeout`: it is never taken for a server's limit). No answer in time
    /// is first told apart from a hung server by a light request
    /// ([`Client::hung_error`]): a server that answers not even that is an error at once.
    /// Each request ends by the deadline, and takes one from `budget`; either running out
    /// is an error naming its flag. A wait is said on stderr every `waiting_notice`.
    pub(super) fn get_limited<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &[(&str, &str)],
        budget: Option<&Budget>,
    ) -> Result<T, GetError> {
        self.while_waiting(|| self.get_tried(path, params, budget))
    }

    /// [`Client::get_limited`] without the notices of a wait.
    fn get_tried<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &[(&str, &str)],
        budget: Option<&Budget>,
    ) -> Result<T, GetError> {
        self.tried(path, budget, |timeout| self.attempt(path, params, timeout))
    }

    /// One request, ending within `timeout`.
    fn attempt<T: DeserializeOwned>(
        &self,
        path: &str,
        params: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<T, Attempt> {
        let url = format!("{}{path}", self.base);
        let req = self.request(&url, path, params, timeout);
        let started = std::time::Instant::now();
        self.counters().sent += 1;
        let (status, body, asked) = self.call(&url, || req.call())?;
        let answered = std::time::Instant::now();
        let decoded = decode::<T>(&url, status, &body);
        let limit = if status == 200 {
            None
        } else {
            serde_json::from_slice::<Envelope<IgnoredAny>>(&body)
                .ok()
                .and_then(|e| limit_of(status, e.error_type.as_deref(), e.error.as_deref()?))
        };
        self.keep_body(body);
        let mut c = self.answered(started, answered);
        match decoded {
            Ok((data, warnings)) => {
                c.warnings.add(warnings);
                Ok(data)
            }
            Err(message) => Err(match limit {
                Some(limit) => Attempt::Fail(GetError::Limit {
                    limit,
                    message: format!("{message:#}"),
                }),
                None if status >= 500 || status == 429 => match asked {
                    Some(w) => Attempt::Wait(message, w),
                    None => Attempt::Retry(message, false),
                },
                None => Attempt::Fail(GetError::Other(message)),
            }),
        }
    }

    /// The request `GET url` (`base+path`) with `params`, ending within `timeout`, with
    /// the client's headers; listed at debug level.
    fn request(
        &self,
        url: &str,
        path: &str,
        params: &[(&str, &str)],
        timeout: Duration,
    ) -> ureq::RequestBuilder<ureq::typestate::WithoutBody> {
        tracing::debug!(
            target: "truthscale::prometheus",
            "GET {path} {}",
            serde_json::Value::Object(
                params
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
                    .collect()
            )
        );
        let mut req = within(self.agent.get(url), timeout);
        for (k, v) in params {
            req = req.query(k, v);
        }
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        if !self.gzip {
            req = req.header("Accept-Encoding", "identity");
        }
        req
    }

    /// Send the request (`send`) to `url` and read its answer whole: the HTTP status and the
    /// body (at most `max_body` bytes). A connection refused or cut and no answer in time are
    /// passing; a body over the cap is final.
    fn call(
        &self,
        url: &str,
        send: impl FnOnce() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, Vec<u8>, Option<Duration>), Attempt> {
        let timeout = self.timeout;
        let max_body = self.max_body;
        let mut resp = send().map_err(|e| {
            let timed_out = matches!(e, ureq::Error::Timeout(_));
            let passing =
                timed_out || matches!(e, ureq::Error::Io(_) | ureq::Error::ConnectionFailed);
            let e = call_error(url, e, timeout);
            if passing {
                Attempt::Retry(e, timed_out)
            } else {
                Attempt::Fail(GetError::Other(e))
            }
        })?;
        let status = resp.status();
        let asked = retry::retry_after(resp.headers());
        let mut body = self.take_body();
        let read = std::io::Read::read_to_end(
            &mut resp.body_mut().with_config().limit(max_body).reader(),
            &mut body,
        );
        if let Err(e) = read {
            self.keep_body(body);
            // The reader's errors are ureq's, carried in an I/O error.
            let e = e.downcast::<ureq::Error>().unwrap_or_else(ureq::Error::Io);
            return Err(match e {
                ureq::Error::BodyExceedsLimit(_) => {
                    Attempt::Fail(GetError::Other(anyhow::anyhow!(
                        "{url}: the answer is larger than {} MiB (the cap of one answer: {} MiB shared by the queries in flight, --max-queries-in-flight); narrow --selector, use a longer --step or a shorter --since",
                        max_body >> 20,
                        MAX_BODIES_IN_FLIGHT >> 20
                    )))
                }
                ureq::Error::Timeout(_) => Attempt::Retry(
                    anyhow::anyhow!(
                        "{url}: no complete answer within {} (--prometheus-timeout)",
                        humantime::format_duration(timeout)
                    ),
                    true,
                ),
                e => Attempt::Retry(
                    anyhow::anyhow!("{url}: the answer could not be read (cut short?): {e}"),
                    false,
                ),
            });
        }
        Ok((status.as_u16(), body, asked))
    }
}

/// `req` ending within `timeout`: the agent's whole-request timeout, narrowed for this one
/// request to what is left of the deadline (the agent's other settings stay).
#[expect(
    clippy::disallowed_methods,
    reason = "narrows the agent's whole-request timeout for one request"
)]
fn within<B>(req: ureq::RequestBuilder<B>, timeout: Duration) -> ureq::RequestBuilder<B> {
    req.config().timeout_global(Some(timeout)).build()
}

/// The `data` and warnings of an API answer with HTTP `status` and `body` from `url`.
///
/// # Errors
/// An error status, an answer that is not Prometheus API JSON, or `status` not `success`;
/// each names `url`.
pub(super) fn decode<T: DeserializeOwned>(
    url: &str,
    status: u16,
    body: &[u8],
) -> anyhow::Result<(T, Vec<String>)> {
    if status != 200 {
        let detail = serde_json::from_slice::<Envelope<IgnoredAny>>(body)
            .ok()
            .and_then(|e| e.error_text())
            .unwrap_or_else(|| snippet(body));
        let hint = match status {
            401 | 403 => " (check --bearer-token-file or --basic-auth)",
            404 => " (is this the Prometheus base URL?)",
            300..=399 => " (a redirect, which truthscale does not follow: give the final URL)",
            _ => "",
        };
        let reason = ureq::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        bail!("{url}: HTTP {status} {reason}{hint}: {detail}");
    }
    let envelope: Envelope<T> = match serde_json::from_slice(body) {
        Ok(e) => e,
        Err(e) => {
            if let Ok(env) = serde_json::from_slice::<Envelope<IgnoredAny>>(body)
                && env.status == "error"
            {
                bail!(
                    "{url}: Prometheus answered an error: {}",
                    env.error_text().unwrap_or_else(|| "(no message)".into())
                );
            }
            let cut = if e.is_eof() { "cut short: " } else { "" };
            bail!(
                "{url}: the answer is {cut}not Prometheus API JSON ({e}); it begins {}",
                snippet(body)
            );
        }
    };
    if envelope.status != "success" {
        bail!(
            "{url}: Prometheus answered status {:?}: {}",
            envelope.status,
            envelope
                .error_text()
                .unwrap_or_else(|| "(no message)".into())
        );
    }
    let warnings = envelope.warnings;
    let data = envelope
        .data
        .with_context(|| format!("{url}: the answer is not Prometheus API JSON (no `data`)"))?;
    Ok((data, warnings))
}

pub(super) fn call_error(url: &str, e: ureq::Error, timeout: Duration) -> anyhow::Error {
    use std::io::ErrorKind;
    match e {
        ureq::Error::Io(io) if io.kind() == ErrorKind::ConnectionRefused => {
            anyhow::anyhow!("cannot reach Prometheus at {url}: connection refused")
        }
        ureq::Error::Io(io) => anyhow::anyhow!("cannot reach Prometheus at {url}: {io}"),
        ureq::Error::HostNotFound => {
            anyhow::anyhow!("cannot reach Prometheus at {url}: host not found")
        }
        ureq::Error::ConnectionFailed => {
            anyhow::anyhow!("cannot reach Prometheus at {url}: connection failed")
        }
        ureq::Error::Timeout(t) => anyhow::anyhow!(
            "{url}: no answer within {} ({t}; --prometheus-timeout)",
            humantime::format_duration(timeout)
        ),
        e => anyhow::anyhow!("{url}: {e}"),
    }
}

#[cfg(test)]
mod tests;

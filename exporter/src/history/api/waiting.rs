//! A request to Prometheus that keeps the user waiting: said on stderr while it waits
//! (`--waiting-notice`), and, when it gets no answer in time, told apart from a server that
//! hung (accepted the connection, answers nothing) by a light request.

use super::{Client, GetError};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The path of the light request: every Prometheus-compatible server (Prometheus, Thanos,
/// Mimir, VictoriaMetrics) answers it at once, whatever its queries.
const PROBE_PATH: &str = "/api/v1/status/buildinfo";
/// The longest the light request may wait for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the light request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// An answer, whatever its status: the server serves; the query ran long.
    Answers,
    /// A connection, and no answer: the server hung.
    Hung,
    /// No connection in time (a host down, packets dropped).
    NoConnection,
    /// Something else (refused, reset): no verdict.
    Unknown,
}

/// The line said while a request to `base` has waited `waited`.
pub(super) fn waiting_line(base: &str, waited: Duration) -> String {
    format!(
        "truthscale: still waiting for Prometheus at {base} ({} s)",
        waited.as_secs()
    )
}

impl Client {
    /// Run `f` (a request, its retries included), saying on stderr every `waiting_notice`
    /// that it still waits; one line per period whatever the requests in flight.
    pub(super) fn while_waiting<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(every) = self.waiting_notice else {
            return f();
        };
        let (done, wait) = channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let started = Instant::now();
                while let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(every) {
                    let mut last = self
                        .last_notice
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if last.is_none_or(|t| t.elapsed() + every / 10 >= every) {
                        *last = Some(Instant::now());
                        eprintln!("{}", waiting_line(&self.base, started.elapsed()));
                    }
                }
            });
            let r = f();
            drop(done);
            r
        })
    }

    /// After `path` got no answer within `timeout`: the error to end with at once when a
    /// light request gets none either (the server hung, or cannot be reached); `None` when
    /// the server answers it (the query runs long: tried again as usual).
    pub(super) fn hung_error(&self, path: &str, timeout: Duration) -> Option<GetError> {
        let wait = self.probe_time()?;
        let waited = humantime::format_duration(timeout);
        let base = &self.base;
        let message = match self.probe(wait) {
            Probe::Answers | Probe::Unknown => return None,
            Probe::Hung => format!(
                "{base}{path}: Prometheus at {base} accepted the connection but sent no answer \
                 within {waited} (--prometheus-timeout), nor to a light request ({PROBE_PATH}) \
                 within {}: the server is hung, not a query running long; check that it is up \
                 and serving (its /-/ready page, its logs), or point --prometheus at one that is",
                humantime::format_duration(wait)
            ),
            Probe::NoConnection => format!(
                "{base}{path}: no answer within {waited} (--prometheus-timeout), and no \
                 connection to {base} within {}: the host is down or a firewall drops the \
                 packets; check --prometheus",
                humantime::format_duration(wait)
            ),
        };
        Some(GetError::Other(anyhow::anyhow!(message)))
    }

    /// The time the light request may take: [`PROBE_TIMEOUT`], `--prometheus-timeout` or
    /// what is left of the deadline, the least; `None` when none is left.
    fn probe_time(&self) -> Option<Duration> {
        let mut wait = PROBE_TIMEOUT.min(self.timeout);
        if let Some(d) = self.deadline {
            wait = wait.min(d.at.saturating_duration_since(Instant::now()));
        }
        (!wait.is_zero()).then_some(wait)
    }

    /// Send the light request, each phase within `wait`, so that no connection and no
    /// answer are told apart.
    #[expect(
        clippy::disallowed_methods,
        reason = "the light request's own time limits, per phase, on the client's agent"
    )]
    fn probe(&self, wait: Duration) -> Probe {
        let url = format!("{}{PROBE_PATH}", self.base);
        let mut req = self
            .agent
            .get(&url)
            .config()
            .timeout_global(None)
            .timeout_connect(Some(wait))
            .timeout_recv_response(Some(wait))
            .build();
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        match req.call() {
            Ok(_) => Probe::Answers,
            Err(ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve)) => {
                Probe::NoConnection
            }
            Err(ureq::Error::Timeout(_)) => Probe::Hung,
            Err(_) => Probe::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiting_line_names_the_server_and_the_wait() {
        assert_eq!(
            waiting_line("http://prometheus:9090", Duration::from_millis(20_400)),
            "truthscale: still waiting for Prometheus at http://prometheus:9090 (20 s)"
        );
    }

    /// A server that accepts and never answers is named hung, at the first timeout (no
    /// retries), and the waits are said.
    #[test]
    fn a_server_that_accepts_and_never_answers_is_named_hung() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held = std::thread::spawn(move || {
            let mut conns = Vec::new();
            for c in listener.incoming().take(2) {
                conns.push(c);
            }
            std::thread::sleep(Duration::from_secs(3));
        });
        let base = format!("http://{addr}");
        let mut c = Client::new(&base, None, Duration::from_millis(600), None).unwrap();
        c.waiting_notice = Some(Duration::from_millis(400));
        let started = Instant::now();
        let e = c
            .get_limited::<serde_json::Value>("/api/v1/query", &[], None)
            .unwrap_err();
        let msg = anyhow::Error::from(e).to_string();
        assert!(started.elapsed() < Duration::from_secs(3), "no retries");
        assert_eq!(
            msg,
            format!(
                "{base}/api/v1/query: Prometheus at {base} accepted the connection but sent no \
                 answer within 600ms (--prometheus-timeout), nor to a light request \
                 (/api/v1/status/buildinfo) within 600ms: the server is hung, not a query \
                 running long; check that it is up and serving (its /-/ready page, its logs), \
                 or point --prometheus at one that is"
            )
        );
        assert!(c.last_notice.lock().unwrap().is_some(), "the wait was said");
        held.join().unwrap();
    }
}

//! A request to Prometheus that keeps the user waiting: said on stderr while it waits
//! (`--waiting-notice`), and, when it gets no answer in time, told apart from a server that
//! hung (accepted the connection, answers nothing) by a light request.

use super::{Client, GetError};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
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

/// The requests in flight, watched by one thread per client that says on stderr which has
/// waited (one thread for all of them: a thread per request, hundreds in a report, each
/// took an allocator arena of its own and left the reading threads to start new ones).
#[derive(Debug, Default)]
pub(super) struct Waiting {
    state: Mutex<WaitState>,
    wake: Condvar,
    /// The watching thread, once a request waited for.
    watcher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct WaitState {
    /// When each request in flight started, by its number.
    started: BTreeMap<u64, Instant>,
    next: u64,
    /// When a wait was last said.
    said: Option<Instant>,
    /// The client is gone: the watcher ends.
    closed: bool,
}

impl Waiting {
    fn lock(&self) -> MutexGuard<'_, WaitState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a wait was said.
    #[cfg(test)]
    pub(super) fn said(&self) -> bool {
        self.lock().said.is_some()
    }

    /// End the watcher, if it runs, and wait for it.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
        let watcher = self
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = watcher {
            let _ = w.join();
        }
    }

    /// Say on stderr, at most once every `every`, that the request in flight longest still
    /// waits, while it has waited `every` or more; until closed.
    fn watch(&self, base: &str, every: Duration) {
        let mut st = self.lock();
        while !st.closed {
            let now = Instant::now();
            let Some(&oldest) = st.started.values().min() else {
                st = self.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let due = (oldest + every).max(st.said.map_or(now, |t| t + every));
            if due <= now {
                st.said = Some(now);
                // Said without the lock: a request that starts or ends meanwhile never waits
                // on stderr (a pipe nobody reads, a notice shorter than one line's write).
                drop(st);
                crate::stdout::say!("{}", waiting_line(base, now - oldest));
                st = self.lock();
                continue;
            }
            st = self
                .wake
                .wait_timeout(st, due - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A request in flight, watched while it lives.
struct InFlight<'a>(&'a Waiting, u64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().started.remove(&self.1);
    }
}

impl Client {
    /// Run `f` (a request, its retries included), said on stderr every `waiting_notice`
    /// while it waits; one line per period whatever the requests in flight.
    pub(super) fn while_waiting<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(every) = self.waiting_notice else {
            return f();
        };
        let w = &self.waiting;
        let id = {
            let mut st = w.lock();
            st.next += 1;
            let id = st.next;
            st.started.insert(id, Instant::now());
            id
        };
        let _in_flight = InFlight(w, id);
        self.start_watcher(every);
        w.wake.notify_all();
        f()
    }

    /// The watching thread, started with the first request waited for.
    fn start_watcher(&self, every: Duration) {
        let mut watcher = self
            .waiting
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if watcher.is_some() {
            return;
        }
        let (waiting, base) = (Arc::clone(&self.waiting), self.base.clone());
        let spawned = std::thread::Builder::new()
            .name("prometheus-wait".into())
            .spawn(move || waiting.watch(&base, every));
        match spawned {
            Ok(handle) => *watcher = Some(handle),
            // Nothing is said while waiting then; the request runs all the same.
            Err(e) => tracing::warn!("the thread that says a request waits could not start: {e}"),
        }
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

    /// A notice more often than one line can be written (the flag refuses it; set here
    /// directly) never holds up the requests: each starts and ends while lines are said.
    /// The requests go on until a line was said (the watcher may be scheduled late on a
    /// loaded machine), at least three of them, and at most for the test's 10 s.
    #[test]
    fn a_notice_shorter_than_a_line_never_holds_up_a_request() {
        let mut c = Client::new("http://127.0.0.1:9", None, Duration::from_secs(1), None).unwrap();
        c.waiting_notice = Some(Duration::from_nanos(1));
        let c = Arc::new(c);
        let (done, finished) = std::sync::mpsc::channel();
        let client = Arc::clone(&c);
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let mut requests = 0;
            while requests < 3
                || (!client.waiting.said() && started.elapsed() < Duration::from_secs(9))
            {
                client.while_waiting(|| std::thread::sleep(Duration::from_millis(2)));
                requests += 1;
            }
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(10)).is_ok(),
            "the requests were held up by the notices"
        );
        assert!(c.waiting.said());
        c.waiting.close();
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
        assert!(c.waiting.said(), "the wait was said");
        held.join().unwrap();
    }
}

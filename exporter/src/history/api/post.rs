//! A remote-read request: `POST` of a snappy block of protobuf, its answer handed to the
//! caller's decoding, with the retries, time limits, budget and notices of every request.

use super::{Attempt, Budget, Client, GetError, snippet, within};
use std::time::Duration;

impl Client {
    /// `POST base+path` with a remote-read `request` (a snappy block of protobuf), its
    /// answer handed to `decode`: retried, timed, budgeted and said while it waits as
    /// [`Client::get_limited`] is. An answer other than HTTP 200 is an error naming its
    /// status and first bytes.
    pub(in crate::history) fn post_read<T>(
        &self,
        path: &str,
        request: &[u8],
        budget: Option<&Budget>,
        decode: impl Fn(&[u8]) -> anyhow::Result<T>,
    ) -> Result<T, GetError> {
        self.while_waiting(|| {
            self.tried(path, budget, |timeout| {
                self.post_attempt(path, request, timeout, &decode)
            })
        })
    }

    /// One remote-read request, ending within `timeout`.
    fn post_attempt<T>(
        &self,
        path: &str,
        request: &[u8],
        timeout: Duration,
        decode: &impl Fn(&[u8]) -> anyhow::Result<T>,
    ) -> Result<T, Attempt> {
        let url = format!("{}{path}", self.base);
        tracing::debug!(target: "truthscale::prometheus", "POST {path} ({} bytes)", request.len());
        let mut req = within(self.agent.post(&url), timeout)
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Read-Version", "0.1.0");
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        let started = std::time::Instant::now();
        self.counters().sent += 1;
        let (status, body, asked) = self.call(&url, || req.send(request))?;
        let answered = std::time::Instant::now();
        let decoded = if status == 200 {
            decode(&body).map_err(|e| e.context(format!("{url}: the streamed answer")))
        } else {
            Err(anyhow::anyhow!("{url}: HTTP {status}: {}", snippet(&body)))
        };
        self.keep_body(body);
        self.answered(started, answered).remote_reads += u64::from(decoded.is_ok());
        decoded.map_err(|e| match (status, asked) {
            (429 | 500.., Some(w)) => Attempt::Wait(e, w),
            (429 | 500.., None) => Attempt::Retry(e, false),
            // The server's error after frames it had sent: passing, as a 5xx is.
            _ if e
                .downcast_ref::<crate::history::remote::StreamEnded>()
                .is_some() =>
            {
                Attempt::Retry(e, false)
            }
            _ => Attempt::Fail(GetError::Other(e)),
        })
    }
}

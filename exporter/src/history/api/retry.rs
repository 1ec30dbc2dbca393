//! Retrying a passing failure: the backoff (jittered), or the wait the server asks for.

use super::{Attempt, Budget, Client, FIRST_BACKOFF, GetError};
use std::time::Duration;

impl Client {
    /// Run `attempt` (one request, given its time limit) until it answers, retrying a
    /// passing failure as [`Client::get_limited`] says; `path` names the request.
    pub(super) fn tried<T>(
        &self,
        path: &str,
        budget: Option<&Budget>,
        mut attempt: impl FnMut(Duration) -> Result<T, Attempt>,
    ) -> Result<T, GetError> {
        let mut backoff = FIRST_BACKOFF;
        let mut probed = false;
        let mut tries = 0;
        let mut wait = Duration::ZERO;
        loop {
            if let Some(b) = budget {
                b.spend(&format!("{}{path}", self.base))?;
            }
            let (timeout, cut) = self.call_timeout()?;
            let e = match attempt(timeout) {
                Ok(data) => return Ok(data),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::Wait(e, asked)) => {
                    wait = asked.min(MAX_SERVER_WAIT);
                    (e, false)
                }
                Err(Attempt::Retry(e, timed_out)) => {
                    if let Some(d) = self.deadline.filter(|_| timed_out && cut) {
                        return Err(self.deadline_error(d));
                    }
                    if timed_out
                        && !std::mem::replace(&mut probed, true)
                        && let Some(hung) = self.hung_error(path, timeout)
                    {
                        return Err(hung);
                    }
                    (e, timed_out)
                }
            };
            if tries >= self.retries {
                let (e, timed_out) = e;
                let after = if tries == 0 {
                    String::new()
                } else {
                    format!(" (after {tries} retries, --prometheus-retries)")
                };
                let hint = if timed_out {
                    "; raise --prometheus-timeout, or ask for less (a narrower --selector, a longer --step, a shorter --since)"
                } else {
                    ""
                };
                return Err(GetError::Other(anyhow::anyhow!("{e:#}{after}{hint}")));
            }
            tries += 1;
            self.counters().retries += 1;
            // The server's own wait where it said one; else the backoff, jittered so that
            // the queries in flight do not retry in step.
            let pause = std::mem::take(&mut wait).max(jittered(backoff));
            if let Some(d) = self.deadline
                && d.at.saturating_duration_since(std::time::Instant::now()) <= pause
            {
                return Err(self.deadline_error(d));
            }
            std::thread::sleep(pause);
            backoff = backoff.saturating_mul(2);
        }
    }
}

/// The longest wait a server's `Retry-After` is followed for.
const MAX_SERVER_WAIT: Duration = Duration::from_secs(60);

/// A `Retry-After` of delta-seconds (an HTTP date is not followed).
pub(super) fn retry_after(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let s = headers.get("retry-after")?.to_str().ok()?.trim();
    s.parse::<u64>().ok().map(Duration::from_secs)
}

/// `backoff` times a factor from 0.5 to 1, taken from the clock's nanoseconds: queries
/// that failed together retry apart.
fn jittered(backoff: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    backoff.mul_f64(0.5 + f64::from(nanos % 1000) / 2000.0)
}

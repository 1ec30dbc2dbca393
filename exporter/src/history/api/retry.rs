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
            // The longer of the server's own wait (where it said one) and the backoff,
            // jittered so that the queries in flight do not retry in step.
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

/// `backoff` times a random factor from 0.5 to 1 (the standard library's randomly keyed
/// hasher, keyed afresh for each call): queries that failed together retry apart.
fn jittered(backoff: Duration) -> Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    let unit = (h.finish() % 1_000_001) as f64 / 1_000_000.0;
    backoff.mul_f64(0.5 + unit / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jittered backoff lies in [half, whole], and two draws differ.
    #[test]
    fn jitter_is_within_the_backoff_and_varies() {
        let b = Duration::from_millis(1000);
        let draws: Vec<Duration> = (0..64).map(|_| jittered(b)).collect();
        assert!(draws.iter().all(|d| *d >= b / 2 && *d <= b), "{draws:?}");
        assert!(draws.windows(2).any(|w| w[0] != w[1]), "{draws:?}");
        assert_eq!(
            retry_after(&{
                let mut h = ureq::http::HeaderMap::new();
                h.insert("retry-after", "7".parse().unwrap());
                h
            }),
            Some(Duration::from_secs(7))
        );
    }
}

//! A stage's reads of the outside world, off the sampler's thread: a thread of its own reads
//! every period and keeps the last answer, with its time, and the failures by kind. A read
//! that is slow or hangs delays only that thread; the stage takes the last answer while it
//! is fresh, so a hung kubelet never slows sampling nor counts against the GPU source.

use crate::sources::SourceError;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An answer a [`Background`] reader keeps: it may say that part of it was over a reader's
/// cap and left out, which is counted as that error's kind (`over_limit`).
pub(crate) trait Answer {
    /// The error that counts what the caps left out of this answer, if anything.
    fn left_out(&self) -> Option<SourceError> {
        None
    }
}

/// What the reading thread last read.
#[derive(Debug)]
struct Latest<T> {
    last: Option<(Arc<T>, Instant)>,
    errors: BTreeMap<String, u64>,
}

/// A thread that reads every period, and what it last read. Dropping it stops the thread
/// (after the read in flight, which has its own timeout).
#[derive(Debug)]
pub(crate) struct Background<T> {
    shared: Arc<Mutex<Latest<T>>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Answer + Send + Sync + 'static> Background<T> {
    /// Start reading now with `read`, then every `every`, on a thread named `name`; `told`
    /// hears each outcome on that thread (to log it).
    pub(crate) fn start<R, L>(name: &str, every: Duration, mut read: R, mut told: L) -> Self
    where
        R: FnMut() -> Result<T, SourceError> + Send + 'static,
        L: FnMut(Result<&T, &SourceError>) + Send + 'static,
    {
        let shared = Arc::new(Mutex::new(Latest {
            last: None,
            errors: BTreeMap::new(),
        }));
        let (stop, stopped) = mpsc::channel::<()>();
        let s = Arc::clone(&shared);
        let mut log = crate::logging::LogLimiter::default();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                loop {
                    let started = Instant::now();
                    let answer = read();
                    told(answer.as_ref());
                    {
                        let mut l = s.lock().unwrap_or_else(PoisonError::into_inner);
                        match answer {
                            Ok(v) => {
                                if let Some(e) = v.left_out() {
                                    *l.errors.entry(e.kind().to_string()).or_default() += 1;
                                    if log.allow(e.kind()) {
                                        tracing::warn!(
                                            reader = %std::thread::current().name().unwrap_or_default(),
                                            error = %e,
                                            "Part of an answer was over a cap and left out; counted in truthscale_source_errors_total{{kind=\"over_limit\"}} (repeats logged every 30 s)."
                                        );
                                    }
                                }
                                l.last = Some((Arc::new(v), Instant::now()));
                            }
                            Err(e) => *l.errors.entry(e.kind().to_string()).or_default() += 1,
                        }
                    }
                    // A read every `every` from the start of the last, not `every` after it
                    // ended: a slow answer does not stretch the cadence past the period a
                    // reader is fresh for.
                    match stopped.recv_timeout(every.saturating_sub(started.elapsed())) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!(
                thread = name,
                "Could not start a reader's thread; what it reads is not known (its source stays down)."
            );
        }
        Background {
            shared,
            stop: Some(stop),
            thread,
        }
    }

    /// The last answer while it is younger than `fresh_for` (`None` otherwise, which is also
    /// when the reader counts as down), and the failures so far by kind.
    pub(crate) fn current(&self, fresh_for: Duration) -> (Option<Arc<T>>, BTreeMap<String, u64>) {
        let l = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let last = l
            .last
            .as_ref()
            .filter(|(_, at)| at.elapsed() <= fresh_for)
            .map(|(v, _)| Arc::clone(v));
        (last, l.errors.clone())
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Answer for i32 {}

    /// A read that hangs does not hold up the caller: `current` answers at once with the
    /// last answer, and a failure is counted by kind.
    #[test]
    fn a_hung_read_holds_up_only_its_thread() {
        let mut n = 0;
        let b = Background::start(
            "test-reader",
            Duration::from_millis(10),
            move || {
                n += 1;
                match n {
                    1 => Ok(7),
                    2 => Err(SourceError::Timeout("slow".into())),
                    _ => {
                        // Long enough that the count below is seen before it ends, on a
                        // loaded machine too.
                        std::thread::sleep(Duration::from_secs(2));
                        Ok(8)
                    }
                }
            },
            |_| {},
        );
        let t = Instant::now();
        loop {
            let (v, errors) = b.current(Duration::from_secs(10));
            if errors.get("timeout") == Some(&1) {
                assert_eq!(v.as_deref(), Some(&7));
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "no second read");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The third read hangs; asking is immediate.
        let asked = Instant::now();
        let (v, _) = b.current(Duration::from_secs(10));
        assert!(asked.elapsed() < Duration::from_millis(500));
        assert!(v.is_some());
        // An answer older than fresh_for is not used.
        std::thread::sleep(Duration::from_millis(30));
        let (v, _) = b.current(Duration::from_millis(1));
        assert!(v.is_none(), "{v:?}");
    }
}

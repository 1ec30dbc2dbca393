//! The threads that read each chunk's queries: started once for the whole read, not once
//! a chunk. A thread of its own each chunk took an allocator arena of its own, and every
//! arena keeps what was freed in it: over 2 000 GPUs × 14 days the report's memory was half
//! as much again as what it held.

use super::History;
use super::api::Matrix;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};

/// One query of a chunk: the chunk's range, and the column.
type Job = (i64, i64, usize);
/// A column's answer; `None`: not read, another query having failed.
type Answer = (usize, Option<anyhow::Result<Vec<Matrix>>>);

/// The reading threads: a chunk's queries go to them, its answers come back.
pub(super) struct Readers {
    jobs: mpsc::Sender<Job>,
    answers: mpsc::Receiver<Answer>,
    columns: usize,
    /// Set when a query failed, or the readers are dropped: the jobs left are not read.
    stop: Arc<AtomicBool>,
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl History {
    /// Start `--max-queries-in-flight` reading threads in `scope`, for as long as the
    /// [`Readers`] returned lives; each query after one failed is left unread.
    pub(super) fn start_readers<'scope, 'env>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        bar: Option<&'env indicatif::ProgressBar>,
    ) -> Readers {
        let threads = self.in_flight.min(self.columns.len()).max(1);
        let read = move |i, first, last| self.read_column(i, first, last);
        Readers::start(scope, threads, self.columns.len(), read, bar)
    }

    /// Column `i`'s answers over `[first, last]`; a panic in the reading is an error.
    fn read_column(&self, i: usize, first: i64, last: i64) -> anyhow::Result<Vec<Matrix>> {
        let column = &self.columns[i];
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            if let Some(answer) = self.read_remote(column, first, last) {
                return answer.map(|m| vec![m]);
            }
            let query = self.column_query(column, &self.matchers);
            self.read(&query, Some((column, &self.matchers)), first, last)
        }))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a history reader thread panicked")))
    }
}

impl Readers {
    /// `threads` reading threads in `scope`, each reading a chunk's column `i` over
    /// `[first, last]` with `read`.
    fn start<'scope, 'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        threads: usize,
        columns: usize,
        read: impl Fn(usize, i64, i64) -> anyhow::Result<Vec<Matrix>> + Send + Copy + 'env,
        bar: Option<&'env indicatif::ProgressBar>,
    ) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let (jobs, queue) = mpsc::channel::<Job>();
        let (done, answers) = mpsc::channel::<Answer>();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..threads {
            let (queue, done, failed) = (Arc::clone(&queue), done.clone(), Arc::clone(&stop));
            scope.spawn(move || {
                loop {
                    // The lock is held while waiting for a job (one thread waits at a time)
                    // and let go before the job is read: a statement of its own (in a
                    // `while let`, it would be held through the reading, one query at a time).
                    let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok((first, last, i)) = job else {
                        break;
                    };
                    let answer = (!failed.load(Ordering::Relaxed)).then(|| {
                        let answer = read(i, first, last);
                        failed.fetch_or(answer.is_err(), Ordering::Relaxed);
                        answer
                    });
                    if let Some(bar) = bar {
                        bar.inc(1);
                    }
                    if done.send((i, answer)).is_err() {
                        break;
                    }
                }
            });
        }
        Readers {
            jobs,
            answers,
            columns,
            stop,
        }
    }

    /// Send a chunk's queries (one per column) over `[first, last]` to the threads.
    pub(super) fn submit(&self, first: i64, last: i64) -> anyhow::Result<()> {
        for i in 0..self.columns {
            self.jobs
                .send((first, last, i))
                .map_err(|_| anyhow::anyhow!("the history reader threads ended"))?;
        }
        Ok(())
    }

    /// The answers of the chunk submitted last, one list per column in order; the first
    /// error in column order when a query failed.
    pub(super) fn collect(&self) -> anyhow::Result<Vec<Vec<Matrix>>> {
        let mut slots: Vec<Option<anyhow::Result<Vec<Matrix>>>> =
            (0..self.columns).map(|_| None).collect();
        for _ in 0..self.columns {
            let (i, answer) = self
                .answers
                .recv()
                .map_err(|_| anyhow::anyhow!("the history reader threads ended"))?;
            slots[i] = answer;
        }
        // A slot left empty was not read because another query of the chunk failed, and
        // that slot's error is returned here (the first in column order).
        let mut out = Vec::with_capacity(self.columns);
        let mut unread = false;
        for slot in slots {
            match slot {
                Some(answer) => out.push(answer?),
                None => unread = true,
            }
        }
        if unread {
            anyhow::bail!("a query of the history was not read: another query failed before it");
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};

    /// Two reading threads read two queries at once (each query here waits, up to a
    /// guard of 5 s, for another to be read beside it), and the answers come back in
    /// column order; a failed query's error is the chunk's.
    #[test]
    fn queries_are_read_side_by_side_and_answered_in_order() {
        let (active, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let read = |i: usize, first: i64, _last: i64| {
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let guard = Instant::now();
            while most.load(Ordering::SeqCst) < 2 && guard.elapsed() < Duration::from_secs(5) {
                std::thread::yield_now();
            }
            active.fetch_sub(1, Ordering::SeqCst);
            if first < 0 && i == 2 {
                anyhow::bail!("column {i} refused");
            }
            Ok((0..i).map(|_| Matrix::of(Vec::new())).collect())
        };
        std::thread::scope(|scope| {
            let readers = Readers::start(scope, 2, 4, read, None);
            readers.submit(0, 10).unwrap();
            let answers = readers.collect().unwrap();
            let lens: Vec<usize> = answers.iter().map(Vec::len).collect();
            assert_eq!(lens, [0, 1, 2, 3]);
            readers.submit(-10, 0).unwrap();
            let e = readers.collect().unwrap_err();
            assert!(format!("{e:#}").contains("column 2 refused"), "{e:#}");
        });
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "two queries in flight at once"
        );
    }
}

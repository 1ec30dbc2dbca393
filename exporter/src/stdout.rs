//! The commands' standard output: a lock on it that notes when its reader went away
//! (`truthscale analyze … | head`), so that the process ends quietly with status 0 instead
//! of calling a closed pipe an error. Only a write to standard output sets the note: a
//! broken pipe anywhere else (a server's connection) is still an error.
//!
//! And standard error's lines ([`say!`]): a write that fails is ignored, where `eprintln!`
//! panics (`truthscale analyze … 2>&1 | head` closes it too), and a panic ends the process.

use std::io::{self, StdoutLock, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static READER_LEFT: AtomicBool = AtomicBool::new(false);

/// Standard output, locked, noting a broken pipe.
pub(crate) struct Stdout(StdoutLock<'static>);

/// Lock standard output for a command's writes.
pub(crate) fn lock() -> Stdout {
    Stdout(io::stdout().lock())
}

/// Whether a write to standard output found its reader gone.
pub(crate) fn reader_left() -> bool {
    READER_LEFT.load(Ordering::Relaxed)
}

fn note(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        READER_LEFT.store(true, Ordering::Relaxed);
    }
    e
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(note)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf).map_err(note)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(note)
    }
}

/// `eprintln!` that never panics: one line on standard error, a failed write (its reader
/// gone) ignored.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::stdout::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// Write `args` and a line end on standard error, ignoring a failure.
pub(crate) fn say_line(args: std::fmt::Arguments<'_>) {
    let mut e = io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.write_all(b"\n"));
}

//! The commands' standard output: a lock on it that notes when its reader went away
//! (`truthscale analyze … | head`), so that the process ends quietly with status 0 instead
//! of calling a closed pipe an error. Only a write to standard output sets the note: a
//! broken pipe anywhere else (a server's connection) is still an error.

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

//! The caps on what a reader keeps of one answer from a peer it does not trust (a
//! dcgm-exporter, the kubelet, the API server, a GPU's process list), so that memory is
//! bounded by these and by `max_series`, not by the size of the answer. What is over a cap
//! is left out whole (never truncated into a value nobody wrote) and counted as the
//! reader's `over_limit` error (`SourceError::OverLimit`), once per answer, with a message
//! saying how much by cap.
//!
//! | cap | value | why this size |
//! |---|---|---|
//! | entities per dcgm-exporter answer | 1 024 | a node has at most 8–16 GPUs, 7 MIG instances each |
//! | bytes of a label value | 1 024 | Kubernetes names are at most 253 bytes, label values 63 |
//! | labels of one series or pod | 256 | far above what a pod or a dcgm-exporter series carries |
//! | pods in the API server's list | 10 000 | the list is of this node's pods (110 by default) |
//! | holders of one device | 256 | time-slicing replicas are tens per GPU |
//! | processes of one GPU | 1 024 | more than a GPU's memory can hold contexts for |
//! | pods whose cgroup files are read in one tick (node mode's holder pressure) | 1 024 | the pods holding a node's GPUs: 8–16 GPUs, tens of time-slicing replicas each |
//!
//! Every whole file truthscale reads goes through [`read_file`]: opened without blocking (a
//! FIFO cannot hang the start), a regular file only (a FIFO, a device such as `/dev/zero`, a
//! directory or a socket is refused naming what it is), and at most a cap per kind of file,
//! refused over it (never truncated). Captures (`analyze FILE`, `replay`) are streamed, not
//! read whole, and are not under these caps.
//!
//! | file | cap | why this size |
//! |---|---|---|
//! | configuration (TOML), web config (YAML) | 1 MiB | a full configuration is about 3 KiB |
//! | PEM: TLS certificate and key, CA files (web config, OTLP, API server, `--ca-file`) | 1 MiB | a CA bundle of every public root is about 220 KiB |
//! | bearer token (`node.token_file`, `--bearer-token-file`) | 64 KiB | a ServiceAccount token is 1–2 KiB |
//! | `/proc/sys/kernel/hostname` | 4 KiB | at most 64 bytes |

use std::io::Read as _;
use std::path::Path;
use truthscale_core::parse::dcgm_text::{Limits, Refused};

/// Entities kept of one dcgm-exporter answer.
pub(crate) const MAX_ENTITIES: usize = 1024;
/// Bytes of a label value (pod, namespace and container names, pod labels, dcgm-exporter
/// labels).
pub(crate) const MAX_LABEL_BYTES: usize = 1024;
/// Labels of one series (dcgm-exporter) or one pod (the API server's list).
pub(crate) const MAX_LABELS: usize = 256;
/// Pods kept of the API server's list.
pub(crate) const MAX_PODS: usize = 10_000;
/// Holders (containers, time-slicing replicas) kept of one device.
pub(crate) const MAX_HOLDERS: usize = 256;
/// Processes kept of one GPU.
pub(crate) const MAX_PROCESSES: usize = 1024;

/// Pods holding GPUs whose cgroup files (CPU and I/O pressure) are read in one tick.
pub(crate) const MAX_GPU_PODS: usize = 1024;

/// The largest configuration file or web config read.
pub(crate) const MAX_CONFIG_FILE: u64 = 1 << 20;
/// The largest PEM file (certificate chain, private key, CA bundle) read.
pub(crate) const MAX_PEM_FILE: u64 = 1 << 20;
/// The largest bearer-token file read.
pub(crate) const MAX_TOKEN_FILE: u64 = 64 << 10;
/// The largest `/proc/sys/kernel/hostname` read.
pub(crate) const MAX_HOSTNAME_FILE: u64 = 4 << 10;

/// What a path that is not a regular file is, as an error message says it.
fn file_type_name(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// A byte count as a message writes a cap: `1 MiB`, `64 KiB`, else bytes.
fn shown_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// The whole file at `path`, read bounded: opened without blocking (`O_NONBLOCK`: a FIFO
/// does not hang the caller), only when it is a regular file, and at most `cap` bytes.
///
/// # Errors
/// The open's or the read's own error; [`std::io::ErrorKind::InvalidInput`] for what is not
/// a regular file (a FIFO, a device such as `/dev/zero`, a directory, a socket), saying
/// what it is; [`std::io::ErrorKind::FileTooLarge`] for a file over `cap`, naming the cap.
/// The messages do not repeat the path: every caller names the file, and the setting that
/// named it, around them.
pub(crate) fn read_file(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = f.metadata()?.file_type();
    if !kind.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "is {}, not a regular file: point the setting at a regular file",
                file_type_name(kind)
            ),
        ));
    }
    let mut out = Vec::new();
    f.take(cap.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > cap {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!(
                "is larger than {}, the most truthscale reads of such a file: is it the right file?",
                shown_bytes(cap)
            ),
        ));
    }
    Ok(out)
}

/// [`read_file`] as UTF-8 text.
///
/// # Errors
/// As [`read_file`]; [`std::io::ErrorKind::InvalidData`] for text that is not UTF-8.
pub(crate) fn read_file_to_string(path: &Path, cap: u64) -> std::io::Result<String> {
    String::from_utf8(read_file(path, cap)?).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "is not UTF-8 text: is it the right file?",
        )
    })
}

/// The caps of a dcgm-exporter answer.
pub(crate) const DCGM_EXPORTER: Limits = Limits {
    max_entities: MAX_ENTITIES,
    max_label_bytes: MAX_LABEL_BYTES,
    max_labels: MAX_LABELS,
};

/// Whether a name or label value fits [`MAX_LABEL_BYTES`].
#[must_use]
pub(crate) fn fits(value: &str) -> bool {
    value.len() <= MAX_LABEL_BYTES
}

/// What one reader left out of one answer, by cap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeftOut(Vec<(String, u64)>);

impl LeftOut {
    /// Count `n` things left out by the cap described as `what` (a plural noun phrase:
    /// "pods past 10000").
    pub(crate) fn add(&mut self, what: impl Into<String>, n: u64) {
        if n == 0 {
            return;
        }
        let what = what.into();
        match self.0.iter_mut().find(|(w, _)| *w == what) {
            Some((_, c)) => *c += n,
            None => self.0.push((what, n)),
        }
    }

    /// What a dcgm-exporter parser's caps left out.
    #[must_use]
    pub(crate) fn of_scrape(r: Refused) -> LeftOut {
        let mut l = LeftOut::default();
        l.add(
            format!("lines of entities past the cap of {MAX_ENTITIES} entities"),
            r.entities,
        );
        l.add(
            format!("lines with a label value over {MAX_LABEL_BYTES} bytes"),
            r.long_values,
        );
        l.add(
            format!("lines with more than {MAX_LABELS} labels"),
            r.label_sets,
        );
        l
    }

    /// What was left out of this answer from `peer`, when anything was: the message of
    /// its one `over_limit` error.
    #[must_use]
    pub(crate) fn message(&self, peer: &str) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let parts: Vec<String> = self.0.iter().map(|(w, n)| format!("{n} {w}")).collect();
        Some(format!(
            "{peer}: left out {} (the reader's caps bound its memory; see docs/reliability.md)",
            parts.join(", ")
        ))
    }
}

/// Files no reader may hang or grow on, for the tests of every reader of a whole file.
#[cfg(test)]
pub(crate) mod hostile {
    use std::path::{Path, PathBuf};

    /// Under `dir` (created): `/dev/zero` behind a symlink, a FIFO (made with `mkfifo`), a
    /// directory, and a regular file one byte over `cap`; each with the message
    /// [`super::read_file`] refuses it with.
    pub(crate) fn files(dir: &Path, cap: u64) -> Vec<(PathBuf, String)> {
        std::fs::create_dir_all(dir).expect("create the test folder");
        let zero = dir.join("zero");
        let _ = std::fs::remove_file(&zero);
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink /dev/zero");
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        assert!(made, "mkfifo {}", fifo.display());
        let folder = dir.join("folder");
        std::fs::create_dir_all(&folder).expect("create a folder");
        let big = dir.join("big");
        std::fs::write(
            &big,
            vec![b'#'; usize::try_from(cap).expect("a small cap") + 1],
        )
        .expect("write the big file");
        let not_regular = |what: &str| {
            format!("is {what}, not a regular file: point the setting at a regular file")
        };
        vec![
            (zero, not_regular("a character device")),
            (fifo, not_regular("a FIFO (named pipe)")),
            (folder, not_regular("a directory")),
            (
                big,
                format!(
                    "is larger than {}, the most truthscale reads of such a file: is it the right file?",
                    super::shown_bytes(cap)
                ),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/dev/zero` (itself and behind a symlink), a FIFO, a directory and a file over the
    /// cap are each refused at once with what they are; a regular file at the cap is read
    /// whole, and a missing one gives the open's own error.
    #[test]
    fn whole_files_are_regular_bounded_and_never_block() {
        let dir = std::env::temp_dir().join(format!("truthscale-bounds-{}", std::process::id()));
        let t = std::time::Instant::now();
        let mut cases = hostile::files(&dir, 1024);
        cases.push((
            "/dev/zero".into(),
            "is a character device, not a regular file: point the setting at a regular file".into(),
        ));
        for (path, message) in &cases {
            let e = read_file(path, 1024).expect_err("refused");
            assert_eq!(e.to_string(), *message, "{}", path.display());
        }
        assert_eq!(
            read_file(&dir.join("big"), 1024)
                .expect_err("over the cap")
                .kind(),
            std::io::ErrorKind::FileTooLarge
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
        let exact = dir.join("exact");
        std::fs::write(&exact, [b'a'; 1024]).unwrap();
        assert_eq!(read_file(&exact, 1024).unwrap().len(), 1024);
        std::fs::write(&exact, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_file_to_string(&exact, 1024).unwrap_err().to_string(),
            "is not UTF-8 text: is it the right file?"
        );
        assert_eq!(
            read_file(&dir.join("missing"), 1024).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        assert_eq!(shown_bytes(MAX_CONFIG_FILE), "1 MiB");
        assert_eq!(shown_bytes(MAX_TOKEN_FILE), "64 KiB");
        assert_eq!(shown_bytes(1000), "1000 bytes");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn left_out_is_one_counted_error_per_answer() {
        let mut l = LeftOut::default();
        assert!(l.message("x").is_none());
        l.add("pods past 10000", 3);
        l.add("labels over 1024 bytes", 0);
        l.add("pods past 10000", 2);
        assert_eq!(
            l.message("the API server").expect("a message"),
            "the API server: left out 5 pods past 10000 (the reader's caps bound its memory; see docs/reliability.md)"
        );
    }
}

//! Helpers for the end-to-end tests: locate (building if needed) the `truthscale` binary and
//! the shared fixtures.

pub mod kubelet;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The workspace root.
#[must_use]
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
}

/// The `truthscale` binary, built once per test process with the same profile.
///
/// # Panics
/// When the build fails: an end-to-end test cannot run without the binary, and must not skip.
pub fn truthscale() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = cargo_build(&["-p", "truthscale-exporter", "--bin", "truthscale"]);
        let bin = dir.join("truthscale");
        assert!(bin.exists(), "{} missing after build", bin.display());
        bin
    })
}

/// Run `cargo build --quiet ARGS` in the workspace (same profile as the tests) and return
/// the profile's output folder (`target/debug`).
///
/// # Panics
/// When the build fails: an end-to-end test cannot run without what it builds, and must not
/// skip.
#[must_use]
pub fn cargo_build(args: &[&str]) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    // The variables cargo sets for this test process describe the test crate, not the build:
    // a build script that reads one (ring's reads CARGO_MANIFEST_DIR) would otherwise see it
    // change between this build and the test runner's, and rebuild half the tree each time.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if [
            "CARGO_MANIFEST_",
            "CARGO_PKG_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
        ]
        .iter()
        .any(|p| k.starts_with(p))
        {
            cmd.env_remove(&*k);
        }
    }
    let status = cmd
        .args(["build", "--quiet"])
        .args(args)
        .current_dir(workspace())
        .status()
        .unwrap_or_else(|e| panic!("run cargo build {args:?}: {e}"));
    assert!(status.success(), "cargo build {args:?} failed");
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), PathBuf::from)
        .join("debug")
}

/// A fake `/proc` under `root`, as the node agent reads it: each process (pid, pod UID,
/// hostname) with its `cgroup` (the pod's, systemd driver) and its `environ`.
///
/// # Panics
/// When a file cannot be written.
pub fn fake_proc(root: &Path, procs: &[(u32, &str, &str)]) {
    for (pid, uid, host) in procs {
        let d = root.join(pid.to_string());
        std::fs::create_dir_all(&d).expect("fake /proc");
        std::fs::write(
            d.join("cgroup"),
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{}.scope\n",
                uid.replace('-', "_"),
                "ab".repeat(32)
            ),
        )
        .expect("cgroup");
        std::fs::write(
            d.join("environ"),
            format!("PATH=/bin\0HOSTNAME={host}\0HOME=/root\0"),
        )
        .expect("environ");
    }
}

/// The fake NVML library (`tests/fake-nvml`), built once per test process.
///
/// # Panics
/// When the build fails or leaves no library.
#[must_use]
pub fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let lib = cargo_build(&["-p", "fake-nvml", "--lib"]).join("libfake_nvml.so");
        assert!(lib.exists(), "{} missing after build", lib.display());
        lib
    })
}

/// The arguments that serve GPUs from the NVML library `lib` (the fake one, or a variant
/// of it), sampled every `interval`: `--source nvml --nvml-library LIB --interval INTERVAL`.
///
/// # Panics
/// `lib` is not a UTF-8 path.
#[must_use]
pub fn nvml_args<'a>(lib: &'a Path, interval: &'a str) -> [&'a str; 6] {
    let lib = lib.to_str().expect("a UTF-8 library path");
    [
        "--source",
        "nvml",
        "--nvml-library",
        lib,
        "--interval",
        interval,
    ]
}

/// Run `truthscale` with `args`, in this environment but for [`FULL_TESTS`] (the binary
/// reads every `TRUTHSCALE_*` variable as a setting, and an unknown one stops it).
///
/// # Panics
/// When the process cannot be started.
#[must_use]
pub fn run(args: &[&str]) -> Output {
    Command::new(truthscale())
        .args(args)
        .env_remove(FULL_TESTS)
        .output()
        .expect("start truthscale")
}

/// A fixture copied from real captures, by file name.
#[must_use]
pub fn fixture(name: &str) -> PathBuf {
    workspace()
        .join("truthscale-core/tests/fixtures/dcgm")
        .join(name)
}

/// A `truthscale` command with a clean environment: only `PATH` is kept, so no stray
/// `TRUTHSCALE_*` override (an unknown one makes startup fail) or pod variable leaks in.
#[must_use]
pub fn clean_command() -> Command {
    let mut cmd = Command::new(truthscale());
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd
}

/// A fresh directory under the system temp directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Create a new, empty directory.
    ///
    /// # Panics
    /// When the directory cannot be created.
    #[must_use]
    pub fn new(prefix: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "truthscale-e2e-{prefix}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released), never Prometheus' default 9090.
///
/// # Panics
/// When no port can be bound.
#[must_use]
pub fn free_port() -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        if port != 9090 {
            return port;
        }
    }
}

/// A spawned process, in its own process group, killed (the whole group) on drop unless it
/// has already been reaped. Its stdout and stderr go to files, read with [`Spawned::stderr`].
#[derive(Debug)]
pub struct Spawned {
    child: std::process::Child,
    name: String,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Spawned {
    /// Start `cmd` in a new process group, with output to files in `dir` named after `name`.
    ///
    /// # Panics
    /// When the process cannot be started.
    #[must_use]
    pub fn start(mut cmd: Command, dir: &Path, name: &str) -> Self {
        use std::os::unix::process::CommandExt;
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let child = cmd
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("create stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("create stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({cmd:?}): {e}"));
        Self {
            child,
            name: name.to_owned(),
            stdout,
            stderr,
        }
    }

    /// The process id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited (and its status), without waiting.
    ///
    /// # Panics
    /// When the status cannot be read.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Wait up to `limit` for it to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send a signal (e.g. `"TERM"`) to the process itself with `kill`.
    ///
    /// # Panics
    /// When `kill` cannot be run or fails.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([format!("-{sig}"), self.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.id());
    }

    /// Wait up to `limit` for `truthscale serve`'s log line that says where it listens
    /// (`Serving /metrics. listen=…`), and return that address: with `--listen
    /// 127.0.0.1:0`, the port the kernel gave it.
    ///
    /// # Errors
    /// Why not, with its stderr: it exited first, or `limit` passed.
    pub fn serve_addr(&mut self, limit: Duration) -> Result<String, String> {
        let deadline = Instant::now() + limit;
        loop {
            let stderr = self.stderr();
            if let Some(addr) = listening_on(&stderr) {
                return Ok(addr);
            }
            if let Some(status) = self.try_wait() {
                return Err(format!(
                    "exited ({status}) before listening; stderr:\n{stderr}"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "did not listen within {limit:?}; stderr:\n{stderr}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything it wrote to stdout so far.
    #[must_use]
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Everything it wrote to stderr so far.
    #[must_use]
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Kill the process group now (if the leader is not yet reaped) and reap the leader.
    pub fn kill(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // The leader is alive or a zombie, so its process group id is still ours.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stderr(std::process::Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Run to completion within `limit`, killing the group when it overruns.
    ///
    /// # Panics
    /// When it does not finish within `limit`.
    pub fn finish(mut self, limit: Duration) -> std::process::ExitStatus {
        match self.wait_timeout(limit) {
            Some(status) => status,
            None => {
                self.kill();
                panic!(
                    "{} did not finish within {limit:?}; stderr:\n{}",
                    self.name,
                    self.stderr()
                );
            }
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header names (lower-cased) and values.
    pub headers: Vec<(String, String)>,
    /// Body, decoded from chunked transfer encoding when needed.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header with this (lower-case) name.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Percent-encode a query-string component.
#[must_use]
pub fn url_encode(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `GET http://{addr}{path}` over a plain TCP connection (HTTP/1.1, `Connection: close`),
/// with extra request headers.
///
/// # Errors
/// When the connection or the read fails, or the response is malformed.
pub fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    use std::io::{Error, Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(15)))?;
    stream.set_write_timeout(Some(Duration::from_secs(15)))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let bad =
        |what: &str| Error::other(format!("malformed HTTP response from {addr}{path}: {what}"));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or_else(|| bad("chunk size"))?;
            let size_text = String::from_utf8_lossy(&rest[..eol]);
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| bad("chunk size"))?;
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            if rest.len() < size + 2 {
                return Err(bad("short chunk"));
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        body = out;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// One sample of a Prometheus text exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels in exposition order.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
}

impl Sample {
    /// The value of a label.
    #[must_use]
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The value of the first sample named `name` that has every label of `labels`.
#[must_use]
pub fn value(m: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    series(m, name, labels).first().map(|s| s.value)
}

/// Every sample named `name` that has every label of `labels` (`&[]`: all of them).
#[must_use]
pub fn series<'a>(m: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    m.iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .collect()
}

/// A Prometheus API answer's `data`, on success without warnings; else what went wrong
/// (the status, Prometheus' `errorType` and `error`, or the warnings).
///
/// # Errors
/// Not JSON, not a success, or with warnings.
pub fn api_data(what: &str, r: &Response) -> Result<serde_json::Value, String> {
    let v: serde_json::Value = serde_json::from_slice(&r.body)
        .map_err(|e| format!("HTTP {} for {what}, not JSON ({e}): {}", r.status, r.text()))?;
    if r.status != 200 || v["status"] != "success" {
        return Err(format!(
            "HTTP {}: {} {}",
            r.status,
            v["errorType"].as_str().unwrap_or("?"),
            v["error"].as_str().unwrap_or("?")
        ));
    }
    if let Some(w) = v
        .get("warnings")
        .and_then(serde_json::Value::as_array)
        .filter(|w| !w.is_empty())
    {
        return Err(format!("warnings: {w:?}"));
    }
    Ok(v["data"].clone())
}

/// Parse the samples of a text exposition (0.0.4 or OpenMetrics) with the core's one
/// Prometheus-text parser; comments are skipped.
///
/// # Panics
/// On a line that is not a well-formed sample.
#[must_use]
pub fn parse_exposition(body: &str) -> Vec<Sample> {
    truthscale_core::parse::prom_text::samples(body)
        .map(|(line, s)| {
            let s = s.unwrap_or_else(|e| panic!("line {line} is not a sample ({e}):\n{body}"));
            Sample {
                name: s.name.to_owned(),
                labels: s
                    .labels
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
                value: s.value,
            }
        })
        .collect()
}

/// The address a server logged where it listens, once the line is there: the value of
/// ` key=` on the first line of `log` that holds `marker`.
fn logged_addr(log: &str, marker: &str, key: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(marker))?;
    let addr = line.split_once(key)?.1.split_whitespace().next()?;
    Some(addr.to_owned())
}

/// The address in `truthscale serve`'s log line `Serving /metrics. listen=ADDR …`.
fn listening_on(log: &str) -> Option<String> {
    logged_addr(log, "Serving /metrics.", " listen=")
}

/// The address in Prometheus' log line `msg="Listening on" address=ADDR` (logfmt).
fn prometheus_listening_on(log: &str) -> Option<String> {
    logged_addr(log, "msg=\"Listening on\"", " address=")
}

/// A running `truthscale serve` on a 127.0.0.1 port of its own, killed on drop.
#[derive(Debug)]
pub struct Sidecar {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The process.
    pub process: Spawned,
}

impl Sidecar {
    /// Start `truthscale serve ARGS --listen 127.0.0.1:0` with a clean environment plus
    /// `env`, read the port it bound from its own log line (`Serving /metrics. listen=…`),
    /// and wait (up to 30 s in all) until `/readyz` answers 200. The kernel hands the port
    /// to the process itself: a port chosen here and bound later could be taken in between
    /// by another test's server, whose `/readyz` would then answer for this one.
    ///
    /// # Panics
    /// When it exits early, never says where it listens, or is not ready in time.
    #[must_use]
    pub fn start(args: &[&str], env: &[(&str, &str)], dir: &Path) -> Self {
        // clean_command builds the binary first where it is not built yet: the 30 s start
        // after it.
        let mut cmd = clean_command();
        cmd.arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"]);
        cmd.envs(env.iter().copied());
        let mut process = Spawned::start(cmd, dir, "truthscale-serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = process
            .serve_addr(Duration::from_secs(30))
            .unwrap_or_else(|why| panic!("truthscale serve {args:?} {why}"));
        let mut sidecar = Self { addr, process };
        let left = deadline.saturating_duration_since(Instant::now());
        if let Err(stderr) = sidecar.wait_ready(left) {
            panic!(
                "truthscale serve {args:?} never became ready on {}; stderr:\n{stderr}",
                sidecar.addr
            );
        }
        sidecar
    }

    /// Poll `/readyz` every 50 ms until it answers 200; `Err(stderr)` when the process exits
    /// or `limit` passes first.
    ///
    /// # Errors
    /// With the process's stderr when it is not ready in time.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.process.try_wait() {
                return Err(format!("(exited: {status})\n{}", self.process.stderr()));
            }
            if http_get(&self.addr, "/readyz", &[]).is_ok_and(|r| r.status == 200) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "(not ready after {limit:?})\n{}",
                    self.process.stderr()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET path` on the sidecar.
    ///
    /// # Panics
    /// When the request fails.
    #[must_use]
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(&self.addr, path, headers).unwrap_or_else(|e| {
            panic!(
                "GET {}{path}: {e}; stderr:\n{}",
                self.addr,
                self.process.stderr()
            )
        })
    }

    /// Poll `/metrics` every 100 ms until `f` holds, and return that exposition.
    ///
    /// # Panics
    /// When `limit` passes first; the message shows the last exposition and stderr.
    pub fn wait_for(
        &self,
        limit: Duration,
        what: &str,
        f: impl Fn(&[Sample]) -> bool,
    ) -> Vec<Sample> {
        let t = Instant::now();
        loop {
            let m = self.metrics();
            if f(&m) {
                return m;
            }
            assert!(
                t.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}; last metrics:\n{m:#?}\nstderr:\n{}",
                self.process.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The parsed text exposition of `/metrics`.
    ///
    /// # Panics
    /// When the request fails or does not answer 200.
    #[must_use]
    pub fn metrics(&self) -> Vec<Sample> {
        let r = self.get("/metrics", &[]);
        assert_eq!(r.status, 200, "/metrics: {}", r.text());
        parse_exposition(&r.text())
    }
}

// ---------------------------------------------------------------------------------------
// The two test tiers.
//
// The Rust-only tier (`cargo test --workspace`, nothing set) runs every test that needs only
// the truthscale binary, the fake NVML library and servers written in Rust. The
// external-tool tier adds the tests that drive Prometheus, promtool, Chromium, tmux, openssl
// or Python's `prometheus_client`; it is on when `TRUTHSCALE_FULL_TESTS` or `CI` is set
// (`scripts/test` sets the first), and then a missing tool fails the test.

/// The variable that turns the external-tool tier on (as `CI` does). The binary takes every
/// `TRUTHSCALE_*` variable for a setting and refuses an unknown one, so the helpers that
/// start it ([`run`], [`clean_command`]) leave this one out: a test that starts the binary
/// in the test's own environment otherwise fails in this tier.
pub const FULL_TESTS: &str = "TRUTHSCALE_FULL_TESTS";

/// Whether the external-tool tier is on, from the values of `TRUTHSCALE_FULL_TESTS` and `CI`
/// (`None`: unset): on when either is set to anything but empty, `0`, `false` or `no`.
#[must_use]
pub fn tier_on(full_tests: Option<&str>, ci: Option<&str>) -> bool {
    let set = |v: Option<&str>| {
        v.is_some_and(|v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "" | "0" | "false" | "no"
            )
        })
    };
    set(full_tests) || set(ci)
}

/// [`tier_on`] for this process's environment, read once.
fn external_tier() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        tier_on(var(FULL_TESTS).as_deref(), var("CI").as_deref())
    })
}

/// The line a test of the external-tool tier prints when the tier is off.
#[must_use]
pub fn not_run_message(tool: &str) -> String {
    let tool = match tool.strip_prefix("python3:") {
        Some(module) => format!("python3 with {module}"),
        None => tool.to_owned(),
    };
    format!(
        "not run: needs {tool} (the external-tool tier); set {FULL_TESTS}=1 or CI to run it, \
         and ./scripts/test installs the tools"
    )
}

/// Where `tool` is: an absolute path must be a file; a bare name (`python3`) is looked up on
/// `PATH`; `python3:MODULE` is the `python3` on `PATH` when it imports `MODULE`.
fn locate(tool: &str) -> Option<PathBuf> {
    if let Some(module) = tool.strip_prefix("python3:") {
        let python = locate("python3")?;
        let imports = Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        return imports.then_some(python);
    }
    locate_on(tool, std::env::var_os("PATH").as_deref())
}

/// A path (with a `/`) when it is a file, else a bare name in the folders of `path` (`PATH`).
fn locate_on(tool: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if tool.contains('/') {
        return Path::new(tool).is_file().then(|| PathBuf::from(tool));
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// What to say when `tool` is missing with the tier on: how to install it.
fn missing_message(tool: &str, package: &str) -> String {
    match tool.strip_prefix("python3:") {
        Some(module) => format!(
            "python3 with the module {module} is missing: run `scripts/test`, which installs \
             {package} (or `python3 -m pip install {package}`)"
        ),
        None => format!(
            "{tool} is missing: run `scripts/test`, which installs the Debian package \
             `{package}` (or `apt-get install --no-install-recommends {package}`)"
        ),
    }
}

/// The guard at the start of a test of the external-tool tier (through
/// [`require_tool_or_return!`]): `Some(path)` of `tool` when the tier is on; `None` when it
/// is off, after one line on stderr saying why the test is not run, so it never skips
/// silently. `tool` is an absolute path, a name on `PATH`, or `python3:MODULE`; `package` is
/// what installs it (a Debian package, or the pip requirement for a Python module).
///
/// # Panics
/// When the tier is on and `tool` is missing, naming `package`.
#[must_use]
pub fn external_tool(tool: &str, package: &str) -> Option<PathBuf> {
    match external_tool_in(external_tier(), tool, package) {
        Ok(path) => Some(path),
        Err(not_run) => {
            // Straight to the file descriptor, past the test harness' capture of
            // `eprintln!`, so that `cargo test` shows it, after the test's name.
            let test = std::thread::current()
                .name()
                .filter(|n| *n != "main")
                .map(|n| format!("{n}: "))
                .unwrap_or_default();
            let _ = writeln!(std::io::stderr().lock(), "{test}{not_run}");
            None
        }
    }
}

/// The decision of [`external_tool`], with the tier given rather than read from the
/// environment: `Ok(path)` when `tier_on` (and then helpers on this thread may use `tool`),
/// `Err(the line to print)` when the test is not run.
///
/// # Panics
/// When `tier_on` and `tool` is missing, naming `package`.
pub fn external_tool_in(tier_on: bool, tool: &str, package: &str) -> Result<PathBuf, String> {
    if !tier_on {
        return Err(not_run_message(tool));
    }
    let path = locate(tool).unwrap_or_else(|| panic!("{}", missing_message(tool, package)));
    GUARDED.with(|g| g.borrow_mut().insert(tool.to_owned()));
    Ok(path)
}

thread_local! {
    /// The tools this test's guards let through (the harness runs each test on its own
    /// thread), so that a helper can tell a guarded test from one that is not.
    static GUARDED: std::cell::RefCell<std::collections::BTreeSet<String>> =
        const { std::cell::RefCell::new(std::collections::BTreeSet::new()) };
}

/// An external tool where a helper uses it (e.g. [`Prometheus::start`]), in a test that
/// started with [`require_tool_or_return!`] for the same `tool` on this thread.
///
/// # Panics
/// When the test has no such guard, in either tier (without one it would fail where the tool
/// is missing instead of not running), or when `tool` is missing (naming `package`).
#[must_use]
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    require_tool_in(GUARDED.with(|g| g.borrow().contains(tool)), tool, package)
}

/// [`require_tool`] with whether this test's guard let `tool` through given.
///
/// # Panics
/// As [`require_tool`].
#[must_use]
pub fn require_tool_in(guarded: bool, tool: &str, package: &str) -> PathBuf {
    assert!(
        guarded,
        "{tool} is used by a test without `require_tool_or_return!({tool:?}, {package:?})` \
         at its start: a test that needs an external tool belongs to the external-tool tier, \
         which runs only with {FULL_TESTS} or CI set"
    );
    locate(tool).unwrap_or_else(|| panic!("{}", missing_message(tool, package)))
}

/// The first line of a test of the external-tool tier: the path of `tool` (see
/// [`external_tool`]) when the tier is on, else one line on stderr and `return` from the
/// test.
///
/// ```no_run
/// let promtool = truthscale_e2e::require_tool_or_return!("/usr/bin/promtool", "prometheus");
/// # drop(promtool);
/// ```
#[macro_export]
macro_rules! require_tool_or_return {
    ($tool:expr, $package:expr $(,)?) => {
        match $crate::external_tool($tool, $package) {
            ::std::option::Option::Some(path) => path,
            ::std::option::Option::None => return,
        }
    };
}

/// A running `/usr/bin/prometheus` on a free 127.0.0.1 port, with its configuration and TSDB
/// in a directory; its process group is killed on drop.
#[derive(Debug)]
pub struct Prometheus {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The process.
    pub process: Spawned,
    /// Whether it serves https.
    tls: bool,
}

impl Prometheus {
    /// Write `config` (the text of `prometheus.yml`) into `dir`, start Prometheus with its TSDB
    /// under `dir` and wait (up to 60 s) until `/-/ready` answers 200. Retries with another
    /// port when the chosen one was taken in between.
    ///
    /// # Panics
    /// When `/usr/bin/prometheus` is missing (run `scripts/test`) or the test did not start
    /// with its [`require_tool_or_return!`], or Prometheus exits early or is not ready in time.
    #[must_use]
    pub fn start(config: &str, dir: &Path) -> Self {
        Self::start_with(config, dir, &[])
    }

    /// [`Prometheus::start`], with more command-line `flags` (`--agent`,
    /// `--web.enable-remote-write-receiver`, …).
    ///
    /// # Panics
    /// As [`Prometheus::start`].
    #[must_use]
    pub fn start_with(config: &str, dir: &Path, flags: &[&str]) -> Self {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let agent = flags.contains(&Self::agent_flag());
        let storage = dir.join(if agent { "wal" } else { "tsdb" });
        Self::launch(dir, &config_file, &storage, None, flags)
    }

    /// A Prometheus serving a TSDB backfilled from `openmetrics` (OpenMetrics text) with
    /// `promtool tsdb create-blocks-from openmetrics`, with no scrape jobs, its files in
    /// `dir`; over https with `tls` (certificate, key) when given.
    ///
    /// # Panics
    /// When promtool or Prometheus is missing (run `scripts/test`) or the test did not start
    /// with their [`require_tool_or_return!`], the backfill fails, or Prometheus exits early or
    /// is not ready in time.
    #[must_use]
    pub fn backfilled(openmetrics: &str, dir: &Path, tls: Option<(&Path, &Path)>) -> Self {
        Self::backfilled_with(openmetrics, dir, tls, &[])
    }

    /// [`Prometheus::backfilled`], with more command-line `flags` (query limits, …).
    ///
    /// # Panics
    /// As [`Prometheus::backfilled`].
    #[must_use]
    pub fn backfilled_with(
        openmetrics: &str,
        dir: &Path,
        tls: Option<(&Path, &Path)>,
        flags: &[&str],
    ) -> Self {
        let promtool = require_tool("/usr/bin/promtool", "prometheus");
        let om = dir.join("backfill.om.txt");
        std::fs::write(&om, openmetrics).expect("write the OpenMetrics text");
        let data = dir.join("tsdb");
        let out = Command::new(promtool)
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(&om)
            .arg(&data)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool tsdb create-blocks-from openmetrics failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, "global:\n  scrape_interval: 15s\n")
            .expect("write prometheus.yml");
        let web = tls.map(|(cert, key)| {
            let web = dir.join("web.yml");
            std::fs::write(
                &web,
                format!(
                    "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
                    cert.display(),
                    key.display()
                ),
            )
            .expect("write web.yml");
            web
        });
        Self::launch(dir, &config_file, &data, web.as_deref(), flags)
    }

    /// The flag that starts `/usr/bin/prometheus` in agent mode: `--agent` from v3.0.0,
    /// `--enable-feature=agent` from v2.32 through v2.x.
    ///
    /// # Panics
    /// When `/usr/bin/prometheus --version` cannot be run.
    #[must_use]
    pub fn agent_flag() -> &'static str {
        static FLAG: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
        FLAG.get_or_init(|| {
            let out = Command::new(require_tool("/usr/bin/prometheus", "prometheus"))
                .arg("--version")
                .output()
                .expect("run prometheus --version");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            if text.contains("version 2.") {
                "--enable-feature=agent"
            } else {
                "--agent"
            }
        })
    }

    /// `http://ADDR`, or `https://ADDR` when it serves TLS.
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.addr
        )
    }

    /// Start Prometheus on a port the kernel gives it (`127.0.0.1:0`, read back from its
    /// `Listening on` log line), with the TSDB at `storage` and the web config `web` (TLS)
    /// when given, and wait until it is ready. A port chosen here and bound later could be
    /// taken in between by another test's Prometheus, which would then answer for this one.
    fn launch(
        dir: &Path,
        config_file: &Path,
        storage: &Path,
        web: Option<&Path>,
        flags: &[&str],
    ) -> Self {
        let binary = require_tool("/usr/bin/prometheus", "prometheus");
        let storage_flag = if flags.contains(&Self::agent_flag()) {
            "--storage.agent.path"
        } else {
            "--storage.tsdb.path"
        };
        let mut cmd = Command::new(&binary);
        cmd.arg(format!("--config.file={}", config_file.display()))
            .arg(format!("{storage_flag}={}", storage.display()))
            .arg("--web.listen-address=127.0.0.1:0")
            // Info, for the line that says where it listens.
            .arg("--log.level=info")
            .args(flags);
        if let Some(web) = web {
            cmd.arg(format!("--web.config.file={}", web.display()));
        }
        let mut process = Spawned::start(cmd, dir, "prometheus");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut addr = None;
        loop {
            if let Some(status) = process.try_wait() {
                panic!("prometheus exited ({status}):\n{}", process.stderr());
            }
            if addr.is_none() {
                addr = prometheus_listening_on(&process.stderr());
            }
            // Plain HTTP to a TLS port is answered 400: then the server is up.
            let ready = if web.is_some() { 400 } else { 200 };
            if let Some(addr) = &addr
                && http_get(addr, "/-/ready", &[]).is_ok_and(|r| r.status == ready)
            {
                return Self {
                    addr: addr.clone(),
                    process,
                    tls: web.is_some(),
                };
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready in 60 s:\n{}",
                process.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path` on Prometheus (any status).
    ///
    /// # Panics
    /// When the request fails.
    #[must_use]
    pub fn get(&self, path: &str) -> Response {
        http_get(&self.addr, path, &[]).unwrap_or_else(|e| {
            panic!(
                "GET {}{path}: {e}; prometheus stderr:\n{}",
                self.addr,
                self.process.stderr()
            )
        })
    }

    /// An instant query at the current time, `GET /api/v1/query?query=…`: the raw response
    /// (any status; an invalid expression answers 400 with a JSON error).
    ///
    /// # Panics
    /// When the request fails.
    #[must_use]
    pub fn query(&self, expr: &str) -> Response {
        self.get(&format!("/api/v1/query?query={}", url_encode(expr)))
    }

    /// An instant query that must succeed: `(labels, value)` per series.
    ///
    /// # Panics
    /// The query fails or answers with warnings.
    #[must_use]
    pub fn series(&self, query: &str) -> Vec<(std::collections::BTreeMap<String, String>, f64)> {
        let data = api_data(query, &self.query(query)).unwrap_or_else(|e| panic!("{query}: {e}"));
        data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = s["value"][1]
                    .as_str()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect()
    }
}

/// What the stand-in answers: a status line and a raw body (possibly cut short).
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status line after `HTTP/1.1 `, e.g. `200 OK`.
    pub status: &'static str,
    /// The bytes sent as the body.
    pub body: Vec<u8>,
    /// Announce this length but send only `body` (a truncated response).
    pub claimed_len: Option<usize>,
}

/// Whether Prometheus' log `log` holds an error: `level=error` in Prometheus 2's logfmt,
/// `level=ERROR` in Prometheus 3's.
#[must_use]
pub fn logs_an_error(log: &str) -> bool {
    log.lines()
        .any(|l| l.to_ascii_lowercase().contains("level=error"))
}

/// A tiny HTTP/1.1 server on 127.0.0.1 whose reply can be changed while it runs.
#[derive(Debug)]
pub struct StandIn {
    addr: String,
    reply: Arc<Mutex<Reply>>,
    /// Requests answered so far.
    pub hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StandIn {
    /// Start serving `reply` on a free 127.0.0.1 port.
    ///
    /// # Panics
    /// When no port can be bound.
    #[must_use]
    pub fn start(reply: Reply) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let reply = Arc::new(Mutex::new(reply));
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, h, s) = (reply.clone(), hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                h.fetch_add(1, Ordering::SeqCst);
                let reply = r.lock().unwrap().clone();
                let len = reply.claimed_len.unwrap_or(reply.body.len());
                let _ = write!(
                    conn,
                    "HTTP/1.1 {}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n",
                    reply.status
                );
                let _ = conn.write_all(&reply.body);
            }
        });
        StandIn {
            addr,
            reply,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://ADDR/metrics`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// Answer `reply` from now on.
    ///
    /// # Panics
    /// When the lock is poisoned.
    pub fn set(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A 200 reply with `body`.
#[must_use]
pub fn ok(body: &str) -> Reply {
    Reply {
        status: "200 OK",
        body: body.as_bytes().to_vec(),
        claimed_len: None,
    }
}

/// A server on 127.0.0.1 that accepts connections and never answers (a hung endpoint); the
/// connections stay open until it is dropped.
#[derive(Debug)]
pub struct Silent {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Silent {
    /// Start listening on a free port.
    ///
    /// # Panics
    /// When no port can be bound.
    #[must_use]
    pub fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(c) = conn {
                    held.push(c);
                }
            }
        });
        Silent {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// `HOST:PORT`.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The version of the Python `prometheus_client` whose OpenMetrics parser (the reference
/// implementation) checks truthscale's OpenMetrics output; `scripts/test` installs it.
pub const PROMETHEUS_CLIENT: &str = "prometheus_client==0.26.0";

/// Parse `body` with the reference OpenMetrics parser (Python `prometheus_client`):
/// `Ok(samples)` or `Err(what it said)`.
///
/// # Panics
/// When `python3` or the module is missing (run `scripts/test`, which installs it), or the
/// test did not start with `require_tool_or_return!("python3:prometheus_client", …)`.
pub fn openmetrics_parse(body: &[u8]) -> Result<usize, String> {
    use std::io::Write as _;
    const SCRIPT: &str = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
        try:\n    n = sum(len(f.samples) for f in p(sys.stdin.read()))\n\
        except Exception as e:\n    print('REJECTED', e); sys.exit(3)\n\
        print(n)\n";
    let mut child = Command::new(require_tool("python3:prometheus_client", PROMETHEUS_CLIENT))
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body)
        .expect("write body");
    let out = child.wait_with_output().expect("python3 output");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named"),
        "the Python module prometheus_client is missing: run scripts/test, which installs {PROMETHEUS_CLIENT} (or `pip install {PROMETHEUS_CLIENT}`)"
    );
    match out.status.code() {
        Some(0) => stdout.parse().map_err(|_| stdout.clone()),
        _ => Err(format!("{stdout}{stderr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound address is read from the serve log's own line, as `tracing` writes it,
    /// and nothing is read before that line is there.
    #[test]
    fn the_listening_address_is_read_from_the_serve_log() {
        let log = "2026-12-06T17:33:28.698384Z  INFO truthscale_exporter::sources::sim: Simulating 2 GPUs.\n\
                   2026-12-06T17:33:28.698384Z  INFO truthscale_exporter::commands::serve: Serving /metrics. listen=127.0.0.1:37501 source=\"sim\" interval=1s tls=false\n";
        assert_eq!(listening_on(log).as_deref(), Some("127.0.0.1:37501"));
        assert_eq!(listening_on(log.lines().next().unwrap()), None);
        assert_eq!(listening_on(""), None);
        // Prometheus' logfmt lines (2.42): the address it asked for, then the one it bound.
        let prom = "ts=2026-12-06T17:38:03.573Z caller=web.go:503 level=info component=web msg=\"Start listening for connections\" address=127.0.0.1:0\n\
                    ts=2026-12-06T17:38:03.575Z caller=tls_config.go:232 level=info component=web msg=\"Listening on\" address=127.0.0.1:36367\n";
        assert_eq!(
            prometheus_listening_on(prom).as_deref(),
            Some("127.0.0.1:36367")
        );
        assert_eq!(prometheus_listening_on(prom.lines().next().unwrap()), None);
    }

    /// A tool that is nowhere.
    const NOWHERE: &str = "/nonexistent/truthscale-tier-test/tool";

    /// Both Prometheus generations' error lines are found; other levels are not.
    #[test]
    fn an_error_in_either_prometheus_log_format_is_found() {
        let v2 = "level=info ts=1 msg=\"Server is ready\"\nlevel=error ts=2 msg=\"rule failed\"";
        let v3 = "time=2026-12-06T07:00:00Z level=ERROR source=manager.go msg=\"rule failed\"";
        assert!(logs_an_error(v2) && logs_an_error(v3));
        assert!(!logs_an_error(
            "level=info msg=ready\ntime=1 level=WARN msg=slow"
        ));
    }

    #[test]
    fn the_external_tool_tier_is_on_with_either_variable() {
        assert!(!tier_on(None, None));
        for off in ["", " ", "0", "false", "FALSE", "no"] {
            assert!(!tier_on(Some(off), None), "{off:?}");
            assert!(!tier_on(None, Some(off)), "{off:?}");
        }
        for on in ["1", "true", "yes"] {
            assert!(tier_on(Some(on), None), "{on:?}");
            assert!(tier_on(None, Some(on)), "{on:?}");
        }
        assert!(tier_on(Some("0"), Some("true")));
        assert!(tier_on(Some("1"), Some("false")));
    }

    #[test]
    fn with_the_tier_off_an_external_tool_test_is_not_run_and_says_why() {
        assert_eq!(
            external_tool_in(false, NOWHERE, "some-package"),
            Err(not_run_message(NOWHERE))
        );
        // The tier decides, not the machine: a tool that is there is not used either.
        let here = std::env::current_exe().expect("the test binary");
        let here_s = here.to_str().expect("UTF-8 path");
        assert_eq!(
            external_tool_in(false, here_s, "x"),
            Err(not_run_message(here_s))
        );
        assert_eq!(
            not_run_message("/usr/bin/prometheus"),
            "not run: needs /usr/bin/prometheus (the external-tool tier); set \
             TRUTHSCALE_FULL_TESTS=1 or CI to run it, and ./scripts/test installs the tools"
        );
        assert!(
            not_run_message("python3:prometheus_client")
                .starts_with("not run: needs python3 with prometheus_client (the external-tool")
        );
    }

    #[test]
    fn with_the_tier_on_a_tool_that_is_there_is_found() {
        let here = std::env::current_exe().expect("the test binary");
        let here_s = here.to_str().expect("UTF-8 path");
        assert_eq!(external_tool_in(true, here_s, "x"), Ok(here.clone()));
        // The guard let it through: a helper on this thread may use it.
        assert_eq!(require_tool(here_s, "x"), here);
        // A bare name is looked up on PATH.
        let dir = here.parent().expect("a folder");
        let name = here.file_name().and_then(|n| n.to_str()).expect("a name");
        let path =
            std::env::join_paths(["/nonexistent", dir.to_str().expect("UTF-8")]).expect("a PATH");
        assert_eq!(locate_on(name, Some(&path)), Some(here.clone()));
        assert_eq!(locate_on("truthscale-no-such-tool", Some(&path)), None);
        assert_eq!(locate_on(name, None), None);
    }

    #[test]
    #[should_panic(expected = "/nonexistent/truthscale-tier-test/tool is missing: run \
                               `scripts/test`, which installs the Debian package \
                               `some-package` (or `apt-get install --no-install-recommends \
                               some-package`)")]
    fn with_the_tier_on_a_missing_tool_fails_naming_its_package() {
        let _ = external_tool_in(true, NOWHERE, "some-package");
    }

    #[test]
    #[should_panic(
        expected = "installs truthscale_no_such_module==1.0 (or `python3 -m pip \
                               install truthscale_no_such_module==1.0`)"
    )]
    fn with_the_tier_on_a_missing_python_module_fails_naming_its_requirement() {
        let _ = external_tool_in(
            true,
            "python3:truthscale_no_such_module",
            "truthscale_no_such_module==1.0",
        );
    }

    #[test]
    #[should_panic(expected = "apt-get install --no-install-recommends some-package")]
    fn a_helper_in_a_guarded_test_fails_on_a_missing_tool() {
        let _ = require_tool_in(true, NOWHERE, "some-package");
    }

    #[test]
    #[should_panic(expected = "is used by a test without \
                               `require_tool_or_return!(\"/nonexistent/truthscale-tier-test/tool\", \
                               \"some-package\")` at its start")]
    fn a_helper_fails_the_test_that_has_no_guard() {
        // Nothing on this thread guarded it, whatever the tier.
        let _ = require_tool(NOWHERE, "some-package");
    }

    #[test]
    fn a_guard_that_does_not_run_the_test_lets_nothing_through() {
        let here = std::env::current_exe().expect("the test binary");
        let here_s = here.to_str().expect("UTF-8 path");
        assert!(external_tool_in(false, here_s, "x").is_err());
        assert!(!GUARDED.with(|g| g.borrow().contains(here_s)));
    }
}

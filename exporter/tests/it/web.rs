//! Integration tests for `truthscale_exporter::http::web`: web-config loading, basic auth, TLS,
//! request-head limits and graceful shutdown, all over loopback sockets.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use truthscale_exporter::http::web::{self, HttpLimits, WebConfig, WebConfigError};

const USER: &str = "alice";
const PASSWORD: &str = "correct horse battery staple";

/// A fresh, empty directory under Cargo's per-test temporary directory; each test passes its
/// own `name`, and a rerun starts from scratch instead of piling up directories.
fn temp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("web-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A self-signed certificate for `localhost` and `127.0.0.1`: (cert PEM, key PEM, cert DER).
fn self_signed() -> (String, String, rustls::pki_types::CertificateDer<'static>) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("generate certificate");
    (
        certified.cert.pem(),
        certified.signing_key.serialize_pem(),
        certified.cert.der().clone(),
    )
}

/// Writes a web config (and, with `tls`, a certificate and key) into a fresh directory.
/// Returns the web-config path and the certificate DER when TLS is on.
fn write_config(
    name: &str,
    tls: bool,
    users: bool,
) -> (PathBuf, Option<rustls::pki_types::CertificateDer<'static>>) {
    let dir = temp_dir(name);
    let mut yaml = String::new();
    let mut der = None;
    if tls {
        let (cert, key, cert_der) = self_signed();
        std::fs::write(dir.join("server.crt"), cert).expect("write cert");
        std::fs::write(dir.join("server.key"), key).expect("write key");
        // Relative paths: they must resolve against the web-config directory.
        yaml.push_str("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n");
        der = Some(cert_der);
    }
    if users {
        let hash = bcrypt::hash(PASSWORD, 4).expect("bcrypt");
        yaml.push_str(&format!("basic_auth_users:\n  {USER}: {hash}\n"));
    }
    let path = dir.join("web.yml");
    std::fs::write(&path, yaml).expect("write web config");
    (path, der)
}

fn write_raw(name: &str, yaml: &str) -> PathBuf {
    let path = temp_dir(name).join("web.yml");
    std::fs::write(&path, yaml).expect("write web config");
    path
}

fn basic(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {token}")
}

/// A running server plus the means to stop it.
struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(
        app: Router,
        tls: Option<tokio_rustls::TlsAcceptor>,
        limits: HttpLimits,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let handle = tokio::spawn(web::serve(listener, app, tls, limits, shutdown));
        Server {
            addr,
            stop: Some(stop),
            handle,
        }
    }

    /// Triggers shutdown and asserts `serve` returns `Ok` within `within`.
    async fn stop_within(mut self, within: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = tokio::time::timeout(within, &mut self.handle)
            .await
            .expect("serve returned in time")
            .expect("serve task did not panic");
        assert!(result.is_ok(), "serve failed: {result:?}");
    }
}

fn metrics_app() -> Router {
    Router::new()
        .route("/metrics", get(|| async { "ok" }))
        .route("/healthz", get(|| async { "healthy" }))
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    head: String,
    body: String,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}

/// Sends `GET path` with `Connection: close` and optional extra header lines, reads until EOF
/// (or an error), and parses what came back. `None` when no parsable response arrived.
async fn request<S>(mut stream: S, path: &str, extra_headers: &[String]) -> Option<RawResponse>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for header in extra_headers {
        req.push_str(header);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    // The server may close early (e.g. on an oversized head); keep whatever it answered.
    let _ = stream.write_all(req.as_bytes()).await;
    let _ = stream.flush().await;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(RawResponse {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

async fn plain_get(addr: SocketAddr, path: &str, extra_headers: &[String]) -> Option<RawResponse> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    request(stream, path, extra_headers).await
}

fn tls_connector(cert: rustls::pki_types::CertificateDer<'static>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("add root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[test]
fn loads_good_config_with_tls_and_one_user() {
    let (path, _) = write_config("good", true, true);
    let config = WebConfig::load(&path).expect("valid config");
    assert!(config.tls_enabled());
    assert!(config.tls_acceptor().expect("tls acceptor").is_some());
    let auth = config.basic_auth().expect("basic auth configured");
    assert_eq!(auth.user_count(), 1);

    let right = axum::http::HeaderValue::from_str(&basic(USER, PASSWORD)).expect("header");
    let wrong = axum::http::HeaderValue::from_str(&basic(USER, "nope")).expect("header");
    let stranger = axum::http::HeaderValue::from_str(&basic("bob", PASSWORD)).expect("header");
    let lowercase_scheme =
        axum::http::HeaderValue::from_str(&basic(USER, PASSWORD).replacen("Basic", "basic", 1))
            .expect("header");
    assert!(auth.check(Some(&right)));
    // A second check hits the cache and must give the same answer.
    assert!(auth.check(Some(&right)));
    assert!(auth.check(Some(&lowercase_scheme)));
    assert!(!auth.check(Some(&wrong)));
    assert!(!auth.check(Some(&stranger)));
    assert!(!auth.check(None));
    assert!(!auth.check(Some(&axum::http::HeaderValue::from_static("Bearer abc"))));
    assert!(!auth.check(Some(&axum::http::HeaderValue::from_static("Basic !!!"))));
}

#[test]
fn passwords_over_72_bytes_are_not_truncated() {
    let long = "a".repeat(72);
    let hash = bcrypt::hash(&long, 4).expect("bcrypt");
    let path = write_raw(
        "long-password",
        &format!("basic_auth_users:\n  {USER}: {hash}\n"),
    );
    let auth = WebConfig::load(&path)
        .expect("valid config")
        .basic_auth()
        .expect("users configured");
    let exact = axum::http::HeaderValue::from_str(&basic(USER, &long)).expect("header");
    let longer = axum::http::HeaderValue::from_str(&basic(USER, &format!("{long}-and-more")))
        .expect("header");
    assert!(auth.check(Some(&exact)));
    assert!(!auth.check(Some(&longer)));
}

/// A password over 72 bytes is refused before bcrypt for known and unknown users alike, and an
/// unknown user is verified (against the stand-in hash) like a known one: the cheap path
/// does not depend on whether the name exists.
#[test]
fn user_names_take_the_same_path_known_or_not() {
    let (path, _) = write_config("same-path", false, true);
    let auth = WebConfig::load(&path)
        .expect("valid config")
        .basic_auth()
        .expect("users configured");
    let header = |u: &str, p: &str| axum::http::HeaderValue::from_str(&basic(u, p)).unwrap();
    let long = "b".repeat(73);
    for user in [USER, "mallory"] {
        assert!(
            matches!(
                auth.precheck(Some(&header(user, &long))),
                web::Precheck::Refused
            ),
            "{user}"
        );
        assert!(
            matches!(
                auth.precheck(Some(&header(user, "wrong"))),
                web::Precheck::Verify(_)
            ),
            "{user}"
        );
    }
    assert!(!auth.check(Some(&header("mallory", PASSWORD))));
    assert!(auth.check(Some(&header(USER, PASSWORD))));
    assert!(matches!(
        auth.precheck(Some(&header(USER, PASSWORD))),
        web::Precheck::Cached
    ));
}

#[test]
fn bcrypt_costs_above_the_maximum_are_refused() {
    // A cost-13 hash, written out (computing one would take half a second).
    let hash = "$2b$13$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy";
    let path = write_raw("costly", &format!("basic_auth_users:\n  {USER}: {hash}\n"));
    let err = WebConfig::load(&path).expect_err("cost 13").to_string();
    assert!(
        err.contains("basic_auth_users.alice: bcrypt cost 13 is above the maximum of 12"),
        "{err}"
    );
    assert!(err.contains(&path.display().to_string()), "{err}");
}

/// A client that keeps failing is refused with 429 without bcrypt work once its allowance is
/// spent, while the right (cached) credentials from the same address still get through.
#[tokio::test]
async fn failed_logins_are_rate_limited_per_address() {
    let (path, _) = write_config("rate-limit", false, true);
    let auth = WebConfig::load(&path)
        .expect("valid config")
        .basic_auth()
        .expect("users configured");
    let app = web::layer(metrics_app(), auth);
    let server = Server::start(app, None, HttpLimits::default()).await;
    let right = format!("Authorization: {}", basic(USER, PASSWORD));
    let ok = plain_get(server.addr, "/metrics", std::slice::from_ref(&right))
        .await
        .expect("response");
    assert_eq!(ok.status, 200);
    let wrong = format!("Authorization: {}", basic(USER, "wrong"));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let r = plain_get(server.addr, "/metrics", std::slice::from_ref(&wrong))
            .await
            .expect("response");
        statuses.push(r.status);
    }
    // Five attempts at once (one may have come back during the loop), then 429.
    assert!(statuses[..5].iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let limited = plain_get(server.addr, "/metrics", std::slice::from_ref(&wrong))
        .await
        .expect("response");
    assert_eq!(limited.header("retry-after"), Some("1"));
    let ok = plain_get(server.addr, "/metrics", std::slice::from_ref(&right))
        .await
        .expect("response");
    assert_eq!(ok.status, 200, "cached credentials are not rate-limited");
    server.stop_within(Duration::from_secs(5)).await;
}

/// Guessing from the scraper's own address, with made-up user names or another user's, does
/// not lock the scraper out, even before its first login: its login takes from its own
/// user's allowance (the flood that answered the scraper 429 38 times out of 38).
#[tokio::test]
async fn a_flood_from_the_same_address_does_not_lock_out_a_valid_user() {
    let hash = bcrypt::hash(PASSWORD, 4).expect("bcrypt");
    let path = write_raw(
        "flood",
        &format!("basic_auth_users:\n  {USER}: {hash}\n  bob: {hash}\n"),
    );
    let auth = WebConfig::load(&path)
        .expect("valid config")
        .basic_auth()
        .expect("users configured");
    let app = web::layer(metrics_app(), auth);
    let server = Server::start(app, None, HttpLimits::default()).await;
    let right = format!("Authorization: {}", basic(USER, PASSWORD));
    let mut scraper = Vec::new();
    let mut flood = Vec::new();
    for round in 0..10 {
        for i in 0..10 {
            let guess = if i % 2 == 0 {
                basic(&format!("admin{round}{i}"), "guess")
            } else {
                basic("bob", &format!("guess{round}{i}"))
            };
            let r = plain_get(
                server.addr,
                "/metrics",
                &[format!("Authorization: {guess}")],
            )
            .await
            .expect("response");
            flood.push(r.status);
        }
        // The scraper's first login comes after the flood has spent the address's
        // allowance for the other names.
        if round >= 2 {
            let r = plain_get(server.addr, "/metrics", std::slice::from_ref(&right))
                .await
                .expect("response");
            scraper.push(r.status);
        }
    }
    // Each made-up name has an allowance of its own, as a configured name does (so the
    // answers never say which names exist): every one fails once, 401. Guessing bob's
    // password is what the allowance bounds: 5 at once, then 429 but for the one a second
    // it regains.
    let (made_up, bob): (Vec<_>, Vec<_>) = flood.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    assert!(made_up.iter().all(|(_, s)| **s == 401), "{flood:?}");
    assert!(
        bob.iter().filter(|(_, s)| **s == 429).count() >= 35,
        "{flood:?}"
    );
    assert!(scraper.iter().all(|s| *s == 200), "{scraper:?}");
    server.stop_within(Duration::from_secs(5)).await;
}

/// GET `path` from the local address `from` (a loopback address of its own: a fresh client).
async fn get_from(
    from: std::net::IpAddr,
    addr: SocketAddr,
    path: &str,
    headers: &[String],
) -> RawResponse {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from, 0)).expect("bind");
    let stream = socket.connect(addr).await.expect("connect");
    request(stream, path, headers).await.expect("response")
}

/// No user-name oracle: walked from fresh addresses, a made-up name and a configured one
/// get the same answers, status by status (401 five times, then 429), and both 401s pay a
/// bcrypt verification (the unknown name against the stand-in hash of the same cost).
#[tokio::test]
async fn the_failed_login_allowance_does_not_tell_which_names_exist() {
    let hash = bcrypt::hash(PASSWORD, 8).expect("bcrypt");
    let path = write_raw("oracle", &format!("basic_auth_users:\n  {USER}: {hash}\n"));
    let auth = WebConfig::load(&path)
        .expect("valid config")
        .basic_auth()
        .expect("users configured");
    let server = Server::start(web::layer(metrics_app(), auth), None, HttpLimits::default()).await;
    // One verification at this cost, timed here (the least of five, so that a preemption of
    // one does not raise the bar): what a 401 must at least take.
    let bcrypt_time = (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            assert!(!bcrypt::verify("wrong", &hash).expect("verify"));
            t.elapsed()
        })
        .min()
        .expect("five timings");
    let walk = |from: [u8; 4], user: &'static str| {
        let addr = server.addr;
        async move {
            let header = format!("Authorization: {}", basic(user, "wrong"));
            let mut answers = Vec::new();
            for _ in 0..6 {
                let t = std::time::Instant::now();
                let r =
                    get_from(from.into(), addr, "/metrics", std::slice::from_ref(&header)).await;
                answers.push((r.status, t.elapsed()));
            }
            answers
        }
    };
    // Five made-up names from their own addresses first, as an attacker would begin.
    for (i, user) in ["admin", "root", "bob", "mallory", "ops"]
        .into_iter()
        .enumerate()
    {
        let made_up = walk([127, 0, 1, 10 + i as u8], user).await;
        let configured = walk([127, 0, 2, 10 + i as u8], USER).await;
        let statuses = |a: &[(u16, Duration)]| a.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(statuses(&made_up), [401, 401, 401, 401, 401, 429], "{user}");
        assert_eq!(
            statuses(&made_up),
            statuses(&configured),
            "{user} against {USER}"
        );
        for (status, took) in made_up.iter().chain(&configured) {
            if *status == 401 {
                assert!(
                    *took >= bcrypt_time / 2,
                    "a 401 in {took:?} without bcrypt ({bcrypt_time:?})"
                );
            }
        }
    }
    // The probe of the issue: five failures with made-up names from one address, then one
    // more made-up name and the configured one: the same answer for both (it was 429 for
    // the unknown name and 401 for the configured one).
    for i in 0..3u8 {
        let from: std::net::IpAddr = [127, 0, 3, 10 + i].into();
        let fail = |user: String| {
            let addr = server.addr;
            async move {
                let header = format!("Authorization: {}", basic(&user, "wrong"));
                get_from(from, addr, "/metrics", &[header]).await.status
            }
        };
        for k in 0..5 {
            assert_eq!(fail(format!("guess{i}{k}")).await, 401);
        }
        let unknown = fail(format!("another{i}")).await;
        let configured = fail(USER.to_owned()).await;
        assert_eq!((unknown, configured), (401, 401), "address {from}");
    }
    server.stop_within(Duration::from_secs(5)).await;
}

#[test]
fn empty_config_means_plain_http_without_auth() {
    let path = write_raw("empty", "# nothing configured\n");
    let config = WebConfig::load(&path).expect("empty config is valid");
    assert!(!config.tls_enabled());
    assert!(config.tls_acceptor().expect("no tls").is_none());
    assert!(config.basic_auth().is_none());

    let default = WebConfig::default();
    assert!(default.tls_acceptor().expect("no tls").is_none());
    assert!(default.basic_auth().is_none());
}

#[test]
fn unknown_key_is_rejected_with_file_and_key() {
    let path = write_raw("unknown-top", "tls_config:\n  cert_file: a\n");
    let err = WebConfig::load(&path).expect_err("unknown key");
    assert!(matches!(err, WebConfigError::Parse { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(msg.contains("unknown field `tls_config`"), "{msg}");

    let path = write_raw(
        "unknown-nested",
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
    );
    let msg = WebConfig::load(&path)
        .expect_err("unknown nested key")
        .to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(msg.contains("tls_server_config"), "{msg}");
    assert!(msg.contains("unknown field `client_auth_type`"), "{msg}");
}

#[test]
fn non_bcrypt_hash_is_rejected_with_file_and_user() {
    let path = write_raw("plaintext", "basic_auth_users:\n  alice: hunter2\n");
    let err = WebConfig::load(&path).expect_err("plaintext password");
    assert!(matches!(err, WebConfigError::NotBcrypt { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: basic_auth_users.alice: not a bcrypt hash",
            path.display()
        )
    );
    // The plaintext must not leak into the message.
    assert!(!err.to_string().contains("hunter2"));
}

#[test]
fn missing_cert_file_is_rejected_with_file_and_key() {
    let dir = temp_dir("missing-cert");
    let (_, key, _) = self_signed();
    std::fs::write(dir.join("server.key"), key).expect("write key");
    let path = dir.join("web.yml");
    std::fs::write(
        &path,
        "tls_server_config:\n  cert_file: absent.crt\n  key_file: server.key\n",
    )
    .expect("write web config");
    let err = WebConfig::load(&path).expect_err("missing cert");
    assert!(matches!(err, WebConfigError::TlsRead { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(msg.contains("tls_server_config.cert_file"), "{msg}");
    // Resolved against the web-config directory.
    assert!(
        msg.contains(&dir.join("absent.crt").display().to_string()),
        "{msg}"
    );
}

#[test]
fn garbage_key_file_is_rejected_with_file_and_key() {
    let (path, _) = write_config("garbage-key", true, false);
    let dir = path.parent().expect("dir");
    std::fs::write(dir.join("server.key"), "not a key\n").expect("overwrite key");
    let msg = WebConfig::load(&path).expect_err("garbage key").to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(msg.contains("tls_server_config.key_file"), "{msg}");
    assert!(msg.contains("no PEM private key found"), "{msg}");
}

/// Under `dir`: `/dev/zero` behind a symlink, a FIFO, a directory and a file one byte over
/// 1 MiB (the cap of a web config and of a PEM file), each with why it is refused.
fn hostile_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let zero = dir.join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink /dev/zero");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo {}", fifo.display());
    let folder = dir.join("folder");
    std::fs::create_dir_all(&folder).expect("create a folder");
    let big = dir.join("big");
    std::fs::write(&big, vec![b'#'; (1 << 20) + 1]).expect("write the big file");
    let not_regular =
        |what: &str| format!("is {what}, not a regular file: point the setting at a regular file");
    vec![
        (zero, not_regular("a character device")),
        (fifo, not_regular("a FIFO (named pipe)")),
        (folder, not_regular("a directory")),
        (
            big,
            "is larger than 1 MiB, the most truthscale reads of such a file: is it the right file?"
                .to_owned(),
        ),
    ]
}

/// The web config, its certificate and its key are read bounded: `/dev/zero`, a FIFO (which
/// blocked the start), a directory and a file over 1 MiB are each refused at once, naming
/// the web config, the key and the file; none grows memory.
#[test]
fn web_config_and_tls_files_are_read_bounded() {
    let (good, _) = write_config("bounded", true, false);
    let dir = good.parent().expect("dir").to_path_buf();
    let started = std::time::Instant::now();
    for (path, why) in hostile_files(&dir) {
        let err = WebConfig::load(&path).expect_err("refused").to_string();
        assert_eq!(err, format!("{}: {why}", path.display()));
        for key in ["cert_file", "key_file"] {
            let (cert, tls_key) = if key == "cert_file" {
                (path.display().to_string(), "server.key".to_owned())
            } else {
                ("server.crt".to_owned(), path.display().to_string())
            };
            let config = dir.join(format!("web-{key}.yml"));
            std::fs::write(
                &config,
                format!("tls_server_config:\n  cert_file: {cert}\n  key_file: {tls_key}\n"),
            )
            .expect("write the web config");
            let err = WebConfig::load(&config).expect_err("refused").to_string();
            assert_eq!(
                err,
                format!(
                    "{}: tls_server_config.{key}: {}: {why}",
                    config.display(),
                    path.display()
                )
            );
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn basic_auth_over_plain_http() {
    let (path, _) = write_config("auth-http", false, true);
    let config = WebConfig::load(&path).expect("valid config");
    let auth = config.basic_auth().expect("users configured");
    let app = web::layer(metrics_app(), auth);
    let server = Server::start(app, None, HttpLimits::default()).await;

    let anonymous = plain_get(server.addr, "/metrics", &[])
        .await
        .expect("response");
    assert_eq!(anonymous.status, 401);
    assert_eq!(
        anonymous.header("www-authenticate"),
        Some("Basic realm=\"truthscale\"")
    );

    let wrong = format!("Authorization: {}", basic(USER, "wrong"));
    let denied = plain_get(server.addr, "/metrics", &[wrong])
        .await
        .expect("response");
    assert_eq!(denied.status, 401);

    let right = format!("Authorization: {}", basic(USER, PASSWORD));
    for _ in 0..2 {
        // The second round is served from the credential cache.
        let ok = plain_get(server.addr, "/metrics", std::slice::from_ref(&right))
            .await
            .expect("response");
        assert_eq!(ok.status, 200);
        assert_eq!(ok.body, "ok");
    }

    // /healthz is protected as well, like exporter-toolkit.
    let health = plain_get(server.addr, "/healthz", &[])
        .await
        .expect("response");
    assert_eq!(health.status, 401);
    // Unknown paths too: no route probing without credentials.
    let unknown = plain_get(server.addr, "/nope", &[])
        .await
        .expect("response");
    assert_eq!(unknown.status, 401);
    let unknown = plain_get(server.addr, "/nope", &[right])
        .await
        .expect("response");
    assert_eq!(unknown.status, 404);

    server.stop_within(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn serves_over_tls_and_refuses_plain_text() {
    let (path, cert) = write_config("tls", true, false);
    let config = WebConfig::load(&path).expect("valid config");
    let acceptor = config.tls_acceptor().expect("tls").expect("tls configured");
    let server = Server::start(metrics_app(), Some(acceptor), HttpLimits::default()).await;
    let connector = tls_connector(cert.expect("cert"));

    // A client that connects and never speaks must not hold up anyone else.
    let _silent = TcpStream::connect(server.addr).await.expect("connect");

    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let server_name = rustls::pki_types::ServerName::try_from("localhost").expect("server name");
    let tls = connector
        .connect(server_name, tcp)
        .await
        .expect("tls handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let ok = request(tls, "/metrics", &[]).await.expect("response");
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body, "ok");

    // Also by IP address, which the certificate names as well.
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let server_name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    let tls = connector
        .connect(server_name, tcp)
        .await
        .expect("tls handshake by ip");
    let ok = request(tls, "/metrics", &[]).await.expect("response");
    assert_eq!(ok.status, 200);

    let plain = plain_get(server.addr, "/metrics", &[]).await;
    assert!(
        plain.as_ref().is_none_or(|r| r.status != 200),
        "plain text to the TLS port got {plain:?}"
    );

    // Shutdown does not wait for the silent client's handshake.
    server.stop_within(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn oversized_request_head_is_refused() {
    let limits = HttpLimits {
        max_header_bytes: 8 * 1024,
        ..HttpLimits::default()
    };
    let server = Server::start(metrics_app(), None, limits).await;

    let normal = plain_get(server.addr, "/metrics", &[])
        .await
        .expect("response");
    assert_eq!(normal.status, 200);

    let big = format!("X-Padding: {}", "a".repeat(32 * 1024));
    let response = plain_get(server.addr, "/metrics", &[big]).await;
    // The server may reset the connection before the client reads the 431.
    if let Some(r) = &response {
        assert_eq!(r.status, 431, "{r:?}");
    }

    server.stop_within(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn slow_request_head_times_out() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_millis(200),
        ..HttpLimits::default()
    };
    let server = Server::start(metrics_app(), None, limits).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .expect("partial head");
    // Never finish the head: the server must give up and close the connection.
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "connection still open after the header read timeout"
    );
    assert!(!String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"));

    server.stop_within(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests_and_returns() {
    let app = metrics_app().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            "slow ok"
        }),
    );
    let server = Server::start(app, None, HttpLimits::default()).await;
    let addr = server.addr;

    // An idle keep-alive connection must not hold up shutdown.
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut chunk = [0u8; 1024];
    let n = idle.read(&mut chunk).await.expect("read");
    assert!(String::from_utf8_lossy(&chunk[..n]).starts_with("HTTP/1.1 200"));

    let in_flight = tokio::spawn(async move { plain_get(addr, "/slow", &[]).await });
    tokio::time::sleep(Duration::from_millis(150)).await;

    let started = std::time::Instant::now();
    server.stop_within(Duration::from_secs(5)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    let slow = in_flight
        .await
        .expect("client task")
        .expect("in-flight request answered");
    assert_eq!(slow.status, 200);
    assert_eq!(slow.body, "slow ok");

    // The listener is closed: new connections are refused (or never answered).
    let after = match TcpStream::connect(addr).await {
        Ok(stream) => request(stream, "/metrics", &[]).await,
        Err(_) => None,
    };
    assert!(after.is_none(), "served after shutdown: {after:?}");
}

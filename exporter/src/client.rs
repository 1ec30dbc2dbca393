//! The one HTTP client builder. Every outgoing request (dcgm-exporter, the serving engine,
//! Prometheus, a sidecar's `/metrics`, the API server's pod list) goes through an agent
//! built here, with a timeout on the whole request, and every body is read with a size
//! limit: a body over the limit is an error, never silently cut short. No agent follows a
//! redirect: one is an error naming where it points (a redirect could take a bearer token's
//! answer, or the answer itself, off https).

use std::time::Duration;

mod tls;

/// Largest body read from a metrics endpoint (after decompression).
pub(crate) const MAX_METRICS_BODY: u64 = 32 << 20;

/// An agent whose requests, body included, take at most `timeout`; HTTP error statuses
/// are answers to inspect, not errors.
#[must_use]
pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    agent_with_tls(timeout, ureq::tls::TlsConfig::default())
}

/// What every agent is: one deadline for the whole request (`timeout`), HTTP error statuses
/// as answers, no redirect followed.
#[expect(clippy::disallowed_methods, reason = "the one HTTP client builder")]
fn settings(timeout: Duration) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
}

#[expect(clippy::disallowed_methods, reason = "the one HTTP client builder")]
fn agent_with_tls(timeout: Duration, tls: ureq::tls::TlsConfig) -> ureq::Agent {
    settings(timeout).tls_config(tls).build().into()
}

/// [`agent`], over a rustls configuration of the caller's own for https (OTLP/HTTP: the
/// same configuration as its gRPC channel, with the client certificate and the resolver that
/// notes a collector asking for one), with the [`settings`] of every agent.
#[must_use]
#[expect(clippy::disallowed_methods, reason = "the one HTTP client builder")]
pub(crate) fn agent_with_rustls(timeout: Duration, tls: rustls::ClientConfig) -> ureq::Agent {
    use ureq::unversioned::resolver::DefaultResolver;
    use ureq::unversioned::transport::{ConnectProxyConnector, Connector as _, TcpConnector};
    let config = settings(timeout).build();
    let connector = TcpConnector::default()
        .chain(ConnectProxyConnector::default())
        .chain(tls::RustlsWith(std::sync::Arc::new(tls)));
    ureq::Agent::with_parts(config, connector, DefaultResolver::default())
}

/// [`agent`], trusting only the CA certificates in the PEM file `ca` for https.
///
/// # Errors
/// The file cannot be read or holds no certificate; the message names it.
pub(crate) fn agent_trusting(
    timeout: Duration,
    ca: &std::path::Path,
) -> Result<ureq::Agent, String> {
    let pem = crate::bounds::read_file(ca, crate::bounds::MAX_PEM_FILE)
        .map_err(|e| format!("{}: cannot read: {e}", ca.display()))?;
    let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", ca.display()));
    }
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
        .build();
    Ok(agent_with_tls(timeout, tls))
}

/// Why a `GET` for text failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// Not reached (refused, timed out, DNS).
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// The URL.
        url: String,
        /// What the client said.
        message: String,
    },
    /// No complete answer within the agent's timeout (a hung endpoint).
    #[error(
        "{url}: no complete answer within {message} (the peer took the request but did not finish answering)"
    )]
    Timeout {
        /// The URL.
        url: String,
        /// The deadline, as `5s`.
        message: String,
    },
    /// An answer other than 200.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// A redirect, which no agent follows.
    #[error(
        "{url} answered HTTP {status}, a redirect to {location:?}: not followed (truthscale follows no redirect; give the final URL)"
    )]
    Redirect {
        /// The URL.
        url: String,
        /// The status code (3xx).
        status: u16,
        /// Where it points (`Location`), as sent.
        location: String,
    },
    /// The body is over the limit.
    #[error("{url}: the body is larger than the limit of {} MiB; not read", limit >> 20)]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The body is not UTF-8 text.
    #[error("{url}: the body is not UTF-8 text (byte {at})")]
    NotText {
        /// The URL.
        url: String,
        /// Offset of the first invalid byte.
        at: usize,
    },
    /// The body could not be read (cut off, connection reset).
    #[error("{url}: cannot read the body: {message}")]
    Body {
        /// The URL.
        url: String,
        /// What went wrong.
        message: String,
    },
}

impl FetchError {
    /// The same error with a user and password in `url` taken out wherever it shows the URL
    /// ([`redact_userinfo`]): every error [`get_text_with`] and [`for_each_line`] return.
    fn redacted(self, url: &str) -> FetchError {
        let shown = redact_userinfo(url);
        if shown == url {
            return self;
        }
        let hide = |s: String| s.replace(url, &shown);
        use FetchError as E;
        match self {
            E::Unreachable { url, message } => E::Unreachable {
                url: hide(url),
                message: hide(message),
            },
            E::Timeout { url, message } => E::Timeout {
                url: hide(url),
                message: hide(message),
            },
            E::Status { url, status } => E::Status {
                url: hide(url),
                status,
            },
            E::Redirect {
                url,
                status,
                location,
            } => E::Redirect {
                url: hide(url),
                status,
                location: hide(location),
            },
            E::TooLarge { url, limit } => E::TooLarge {
                url: hide(url),
                limit,
            },
            E::NotText { url, at } => E::NotText { url: hide(url), at },
            E::Body { url, message } => E::Body {
                url: hide(url),
                message: hide(message),
            },
        }
    }

    /// The `kind` label value of `truthscale_source_errors_total`.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            FetchError::Unreachable { .. } => "unreachable",
            FetchError::Timeout { .. } => "timeout",
            FetchError::Status { .. } | FetchError::Redirect { .. } => "http",
            FetchError::TooLarge { .. } => "too_large",
            FetchError::NotText { .. } => "parse",
            FetchError::Body { .. } => "io",
        }
    }
}

/// `GET url` with `Accept: accept`, and its body as text, at most `limit` bytes.
///
/// # Errors
/// [`FetchError`], naming the URL.
pub(crate) fn get_text(
    agent: &ureq::Agent,
    url: &str,
    accept: &str,
    limit: u64,
) -> Result<String, FetchError> {
    get_text_with(agent, url, &[("Accept", accept)], limit)
}

/// [`get_text`] with the request headers `headers` (`Accept`, `Authorization`).
///
/// # Errors
/// [`FetchError`], naming the URL (without a user and password in it).
pub(crate) fn get_text_with(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    limit: u64,
) -> Result<String, FetchError> {
    text_with(agent, url, headers, limit).map_err(|e| e.redacted(url))
}

/// [`get_text_with`], its errors naming `url` as given.
fn text_with(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    limit: u64,
) -> Result<String, FetchError> {
    let mut resp = answer(agent, url, headers, limit)?;
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(|e| body_error(agent, url, limit, e))?;
    String::from_utf8(bytes).map_err(|e| FetchError::NotText {
        url: url.to_string(),
        at: e.utf8_error().valid_up_to(),
    })
}

/// The longest line [`for_each_line`] reads: a text exposition's lines are a series each.
pub(crate) const MAX_LINE: u64 = 1 << 20;

/// `GET url` with `Accept: accept`, its body (at most `limit` bytes) handed to `line` one
/// line at a time as it arrives, never held whole: memory is one line's (at most
/// [`MAX_LINE`]) whatever the body. `line` returns `false` to stop reading. Returns the
/// bytes read.
///
/// # Errors
/// [`FetchError`], naming the URL (without a user and password in it); a line over
/// [`MAX_LINE`] is [`FetchError::TooLarge`].
pub(crate) fn for_each_line(
    agent: &ureq::Agent,
    url: &str,
    accept: &str,
    limit: u64,
    line: impl FnMut(&str) -> bool,
) -> Result<u64, FetchError> {
    each_line(agent, url, accept, limit, line).map_err(|e| e.redacted(url))
}

/// [`for_each_line`], its errors naming `url` as given.
fn each_line(
    agent: &ureq::Agent,
    url: &str,
    accept: &str,
    limit: u64,
    mut line: impl FnMut(&str) -> bool,
) -> Result<u64, FetchError> {
    use std::io::{BufRead as _, Read as _};
    let mut resp = answer(agent, url, &[("Accept", accept)], limit)?;
    let mut reader = std::io::BufReader::new(resp.body_mut().with_config().limit(limit).reader());
    let (mut buf, mut read) = (Vec::new(), 0u64);
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| body_error(agent, url, limit, ureq::Error::from(e)))?;
        if n == 0 {
            return Ok(read);
        }
        if n as u64 > MAX_LINE {
            return Err(FetchError::TooLarge {
                url: url.to_string(),
                limit: MAX_LINE,
            });
        }
        let text = std::str::from_utf8(&buf).map_err(|e| FetchError::NotText {
            url: url.to_string(),
            at: usize::try_from(read).unwrap_or(usize::MAX) + e.valid_up_to(),
        })?;
        read += n as u64;
        if !line(text.trim_end_matches(['\n', '\r'])) {
            return Ok(read);
        }
    }
}

/// A request to `url` that ran past `agent`'s deadline, naming the deadline.
fn timed_out(agent: &ureq::Agent, url: &str) -> FetchError {
    let deadline = agent.config().timeouts().global;
    FetchError::Timeout {
        url: url.to_string(),
        message: deadline.map_or_else(
            || "the deadline".to_string(),
            |d| humantime::format_duration(d).to_string(),
        ),
    }
}

/// The error of a body read of `url` under `limit`.
fn body_error(agent: &ureq::Agent, url: &str, limit: u64, e: ureq::Error) -> FetchError {
    match e {
        ureq::Error::BodyExceedsLimit(_) => FetchError::TooLarge {
            url: url.to_string(),
            limit,
        },
        ureq::Error::Timeout(_) => timed_out(agent, url),
        e => FetchError::Body {
            url: url.to_string(),
            message: e.to_string(),
        },
    }
}

/// `GET url` with `headers`: the answer, once it is a 200 that does not say it is over
/// `limit` (its body not read yet).
fn answer(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    limit: u64,
) -> Result<ureq::http::Response<ureq::Body>, FetchError> {
    let mut req = agent.get(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.call().map_err(|e| match e {
        ureq::Error::Timeout(_) => timed_out(agent, url),
        e => FetchError::Unreachable {
            url: url.to_string(),
            message: e.to_string(),
        },
    })?;
    let status = resp.status().as_u16();
    if (300..400).contains(&status) {
        let location = resp
            .headers()
            .get("location")
            .map(|l| {
                String::from_utf8_lossy(l.as_bytes())
                    .chars()
                    .take(200)
                    .collect()
            })
            .unwrap_or_default();
        return Err(FetchError::Redirect {
            url: url.to_string(),
            status,
            location,
        });
    }
    if status != 200 {
        return Err(FetchError::Status {
            url: url.to_string(),
            status,
        });
    }
    // An answer that says it is over the limit is refused before a byte of it is read.
    if resp.body().content_length().is_some_and(|n| n > limit) {
        return Err(FetchError::TooLarge {
            url: url.to_string(),
            limit,
        });
    }
    Ok(resp)
}

/// `https://user:secret@host` → `https://…@host`, for logs and reasons shown.
#[must_use]
pub(crate) fn redact_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) if !scheme.is_empty() => format!("{scheme}://…{}", &rest[at..]),
        Some(at) => format!("…{}", &rest[at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    /// A server that answers every connection with `answer`, counting connections.
    fn serve(answer: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let s = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                let _ = c.write_all(answer.as_bytes());
            }
        });
        (format!("http://{addr}"), seen)
    }

    /// A redirect is refused, naming where it points, and its target is never asked: the
    /// API server's answer (sent with a bearer token) cannot be taken off https this way.
    #[test]
    fn a_redirect_is_not_followed() {
        let (target, target_seen) =
            serve("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".into());
        for status in [
            "301 Moved Permanently",
            "302 Found",
            "307 Temporary Redirect",
            "308 Permanent Redirect",
        ] {
            let (url, _) = serve(format!(
                "HTTP/1.1 {status}\r\nLocation: {target}/api/v1/pods\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ));
            let e = get_text(
                &agent(Duration::from_secs(5)),
                &url,
                "application/json",
                1 << 20,
            )
            .unwrap_err();
            assert!(
                matches!(&e, FetchError::Redirect { location, .. } if location == &format!("{target}/api/v1/pods")),
                "{status}: {e}"
            );
            assert_eq!(e.kind(), "http");
            assert!(e.to_string().contains("not followed"), "{e}");
        }
        assert_eq!(target_seen.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// A peer that trickles its answer (a byte every 100 ms) is a `timeout` at the agent's
    /// one deadline for the whole exchange, not an exchange that lasts as long as it likes;
    /// one that answers more than the limit is `too_large`, not read whole. Every HTTP peer
    /// (dcgm-exporter, the serving engine, the API server) is read through this function.
    #[test]
    fn a_trickle_is_a_timeout_and_a_huge_answer_too_large() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf);
                    let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
                    for _ in 0..1000 {
                        if c.write_all(b"x").is_err() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
        });
        let t = std::time::Instant::now();
        let e = get_text(
            &agent(Duration::from_millis(700)),
            &url,
            "text/plain",
            1 << 20,
        )
        .unwrap_err();
        assert_eq!(e.kind(), "timeout", "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "{url}: no complete answer within 700ms (the peer took the request but did not finish answering)"
            )
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

        let body = "x".repeat(2 << 20);
        let (url, _) = serve(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ));
        let e = get_text(&agent(Duration::from_secs(5)), &url, "text/plain", 1 << 20).unwrap_err();
        assert_eq!(e.kind(), "too_large", "{e}");

        // Without a Content-Length the limit stops the read.
        let (url, _) = serve(format!(
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{body}"
        ));
        let e = get_text(&agent(Duration::from_secs(5)), &url, "text/plain", 1 << 20).unwrap_err();
        assert_eq!(e.kind(), "too_large", "{e}");
    }

    /// An answer whose `Content-Length` is over the limit is refused on its head: this one
    /// closes without its body, so only a refusal before the read makes it `too_large`.
    #[test]
    fn a_claimed_length_over_the_limit_is_refused_unread() {
        let (url, _) = serve("HTTP/1.1 200 OK\r\nContent-Length: 2097152\r\n\r\n".to_string());
        let t = std::time::Instant::now();
        let e = get_text(&agent(Duration::from_secs(10)), &url, "text/plain", 1 << 20).unwrap_err();
        assert_eq!(e.kind(), "too_large", "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    /// An error names its URL without the user and password in it, from either entry
    /// point: what every caller logs, counts and shows as a reason.
    #[test]
    fn errors_never_show_a_password_in_the_url() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://scraper:s3cret@127.0.0.1:{port}/metrics");
        let a = agent(Duration::from_secs(2));
        let e = get_text(&a, &url, "text/plain", 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("cannot reach http://…@127.0.0.1:{port}/metrics"))
                && !e.contains("s3cret"),
            "{e}"
        );
        let e = for_each_line(&a, &url, "text/plain", 1 << 20, |_| true)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret") && e.contains("…@127.0.0.1"), "{e}");
    }

    /// A CA file (`node.ca_file`, `--ca-file`) is read bounded: `/dev/zero`, a FIFO, a
    /// directory and a file over 1 MiB are refused at once, naming the file.
    #[test]
    fn ca_files_are_read_bounded() {
        let dir = std::env::temp_dir().join(format!("ts-client-ca-{}", std::process::id()));
        let t = std::time::Instant::now();
        for (path, why) in crate::bounds::hostile::files(&dir, crate::bounds::MAX_PEM_FILE) {
            let e = agent_trusting(Duration::from_secs(1), &path).unwrap_err();
            assert_eq!(e, format!("{}: cannot read: {why}", path.display()));
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

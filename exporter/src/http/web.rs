//! The HTTP front of the sidecar: web-config file, TLS, basic auth and a hardened server loop.
//!
//! The web-config file follows the format of Prometheus's
//! [exporter-toolkit](https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md),
//! restricted to the keys truthscale implements:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt   # PEM certificate chain, leaf first
//!   key_file: server.key    # PEM private key (PKCS#8, PKCS#1 or SEC1)
//! basic_auth_users:
//!   alice: $2y$10$...       # bcrypt hash of alice's password
//! ```
//!
//! Unknown keys are rejected rather than ignored, so a setting copied from a richer
//! exporter-toolkit configuration (say `client_auth_type`) cannot silently do nothing.
//! Relative certificate and key paths resolve against the directory of the web-config file.
//!
//! - [`WebConfig::load`] reads and validates the file; [`WebConfig::tls_acceptor`] and
//!   [`WebConfig::basic_auth`] turn it into what [`serve`] and [`layer`] need.
//! - [`BasicAuth`] checks `Authorization: Basic` headers against bcrypt hashes, caching
//!   successful checks so a scrape every few seconds does not pay a bcrypt cost each time.
//! - [`serve`] runs the accept loop: per-connection TLS handshakes with a timeout, a bound on
//!   request-head size and read time, and graceful shutdown with a bounded grace period.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

/// The realm announced in `WWW-Authenticate` challenges.
const REALM_CHALLENGE: &str = "Basic realm=\"truthscale\"";

/// The highest bcrypt cost accepted: cost 12 is about 250 ms of one core per check.
pub const MAX_BCRYPT_COST: u32 = 12;

/// bcrypt verifications that may run at once, whatever the number of clients: one, so that
/// a flood of wrong passwords costs at most one core and a cached scraper keeps the other.
const VERIFY_PERMITS: usize = 1;

/// How long a request waits for a verification slot before it is answered 503.
const VERIFY_WAIT: Duration = Duration::from_secs(2);

/// Failed logins a client address may make at once for one user name, configured or not; it
/// regains one per [`FAILURE_REFILL`].
const FAILURE_BURST: f64 = 5.0;

/// The time in which a client address regains one failed login.
const FAILURE_REFILL: Duration = Duration::from_secs(1);

/// (Client address, user) pairs whose failures are tracked at most; beyond, the quiet ones
/// are forgotten, else the one with the most attempts left.
const MAX_TRACKED_CLIENTS: usize = 4096;

/// Whose failed logins share one allowance: a client address and a user name (as a digest,
/// so a long name costs no more memory), whether the name is configured or not: the
/// allowance never tells a configured name from an unknown one.
type Attempts = (IpAddr, [u8; 32]);

/// How many successful credential checks [`BasicAuth`] remembers before it starts over.
const AUTH_CACHE_CAPACITY: usize = 64;

/// The longest password bcrypt can tell apart; longer ones are refused, as in Go's bcrypt.
const MAX_BCRYPT_PASSWORD_BYTES: usize = 72;

/// How long [`serve`] waits for in-flight requests once shutdown has been requested: a
/// scrape is answered in milliseconds, and a client that has not finished sending its request
/// (a stalled one holds its connection until the 10 s head timeout) is not waited on longer.
const GRACE_PERIOD: Duration = Duration::from_secs(3);

/// How long the accept loop pauses after a failed `accept` (for example `EMFILE`).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// The least time between two warnings about failed accepts.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Why a web-config file could not be loaded or turned into a TLS acceptor.
///
/// Every message starts with the path of the web-config file and names the offending key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebConfigError {
    // The cause is written into each message, so it is not also the error's `source()`
    // (which a caller printing the chain would write a second time).
    /// The web-config file could not be read.
    #[error("{}: {error}", path.display())]
    Read {
        /// The web-config file.
        path: PathBuf,
        /// The underlying I/O error.
        error: io::Error,
    },
    /// The web-config file is not valid YAML for this schema (includes unknown keys).
    #[error("{}: {error}", path.display())]
    Parse {
        /// The web-config file.
        path: PathBuf,
        /// The YAML error, which names the key and position.
        error: serde_yaml_ng::Error,
    },
    /// A `basic_auth_users` value is not a bcrypt hash.
    #[error("{}: basic_auth_users.{user}: not a bcrypt hash", path.display())]
    NotBcrypt {
        /// The web-config file.
        path: PathBuf,
        /// The user whose hash is malformed.
        user: String,
    },
    /// A bcrypt cost so high that every login attempt would cost a core for too long.
    #[error(
        "{}: basic_auth_users.{user}: bcrypt cost {cost} is above the maximum of {max}; each check would take about {ms} ms of CPU (hash the password again with a cost of 10 to 12)",
        path.display(), max = MAX_BCRYPT_COST, ms = 60u64 << cost.saturating_sub(10).min(20)
    )]
    CostTooHigh {
        /// The web-config file.
        path: PathBuf,
        /// The user whose hash is too costly.
        user: String,
        /// Its cost.
        cost: u32,
    },
    /// A `basic_auth_users` key cannot be a user name (it contains `:`).
    #[error("{}: basic_auth_users.{user}: user name must not contain ':'", path.display())]
    InvalidUser {
        /// The web-config file.
        path: PathBuf,
        /// The offending user name.
        user: String,
    },
    /// A required path setting is empty.
    #[error("{}: {key}: must not be empty", path.display())]
    EmptyPath {
        /// The web-config file.
        path: PathBuf,
        /// The key, e.g. `tls_server_config.cert_file`.
        key: &'static str,
    },
    /// A certificate or key file could not be read.
    #[error("{}: {key}: {}: {error}", path.display(), file.display())]
    TlsRead {
        /// The web-config file.
        path: PathBuf,
        /// The key naming the file, e.g. `tls_server_config.key_file`.
        key: &'static str,
        /// The certificate or key file, resolved against the web-config directory.
        file: PathBuf,
        /// The underlying I/O error.
        error: io::Error,
    },
    /// A certificate or key file does not hold the expected PEM content.
    #[error("{}: {key}: {}: {reason}", path.display(), file.display())]
    Pem {
        /// The web-config file.
        path: PathBuf,
        /// The key naming the file, e.g. `tls_server_config.cert_file`.
        key: &'static str,
        /// The certificate or key file, resolved against the web-config directory.
        file: PathBuf,
        /// What is wrong with its content.
        reason: String,
    },
    /// rustls rejected the certificate and key (for example, they do not match).
    #[error("{}: tls_server_config: {error}", path.display())]
    Tls {
        /// The web-config file.
        path: PathBuf,
        /// The rustls error.
        error: rustls::Error,
    },
}

/// The on-disk schema of the web-config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    #[serde(default)]
    tls_server_config: Option<RawTlsServerConfig>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

/// The on-disk schema of `tls_server_config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTlsServerConfig {
    cert_file: PathBuf,
    key_file: PathBuf,
}

/// Certificate and key paths, already resolved against the web-config directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TlsFiles {
    cert_file: PathBuf,
    key_file: PathBuf,
}

/// A validated web-config file: optional TLS material and optional basic-auth users.
///
/// [`WebConfig::default`] is the configuration of a sidecar started without a web-config
/// file: plain HTTP, no authentication.
#[derive(Debug, Clone, Default)]
pub struct WebConfig {
    /// The file this configuration came from, for error messages.
    path: PathBuf,
    /// Resolved certificate and key paths, when TLS is configured.
    tls: Option<TlsFiles>,
    /// User name to bcrypt hash.
    users: BTreeMap<String, String>,
}

impl WebConfig {
    /// Reads and validates the web-config file at `path`.
    ///
    /// Unknown keys, malformed bcrypt hashes and empty paths are rejected. When
    /// `tls_server_config` is present the certificate and key are read and checked right away,
    /// so a bad TLS setup fails at startup rather than at the first connection.
    ///
    /// # Errors
    ///
    /// A [`WebConfigError`] whose message names `path` and the offending key.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = crate::bounds::read_file_to_string(path, crate::bounds::MAX_CONFIG_FILE)
            .map_err(|error| WebConfigError::Read {
                path: path.to_path_buf(),
                error,
            })?;
        WebConfig::parse(&text, path)
    }

    /// [`WebConfig::load`] of `text`, as if read from `path` (relative certificate paths
    /// resolve against its folder).
    ///
    /// # Errors
    ///
    /// As [`WebConfig::load`], but for reading the file.
    pub fn parse(text: &str, path: &Path) -> Result<WebConfig, WebConfigError> {
        // An empty (or comment-only) file is a valid, empty configuration.
        let raw: Option<RawWebConfig> =
            serde_yaml_ng::from_str(text).map_err(|error| WebConfigError::Parse {
                path: path.to_path_buf(),
                error,
            })?;
        let raw = raw.unwrap_or_default();
        let base = path.parent().unwrap_or_else(|| Path::new(""));

        let tls = match raw.tls_server_config {
            None => None,
            Some(tls) => Some(TlsFiles {
                cert_file: resolve(path, base, "tls_server_config.cert_file", tls.cert_file)?,
                key_file: resolve(path, base, "tls_server_config.key_file", tls.key_file)?,
            }),
        };

        let users = raw.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.contains(':') {
                return Err(WebConfigError::InvalidUser {
                    path: path.to_path_buf(),
                    user: user.clone(),
                });
            }
            let Some(cost) = bcrypt_cost(hash) else {
                return Err(WebConfigError::NotBcrypt {
                    path: path.to_path_buf(),
                    user: user.clone(),
                });
            };
            if cost > MAX_BCRYPT_COST {
                return Err(WebConfigError::CostTooHigh {
                    path: path.to_path_buf(),
                    user: user.clone(),
                    cost,
                });
            }
        }

        let config = WebConfig {
            path: path.to_path_buf(),
            tls,
            users,
        };
        if let Some(tls) = &config.tls {
            build_server_config(&config.path, tls)?;
        }
        Ok(config)
    }

    /// Builds a TLS acceptor from the configured certificate and key, or `None` without
    /// `tls_server_config`.
    ///
    /// The files are read again on each call, so calling this after a certificate rotation
    /// picks up the new material. The server uses the ring provider with rustls's safe default
    /// protocol versions (TLS 1.2 and 1.3), asks for no client certificate, and offers ALPN
    /// `http/1.1`.
    ///
    /// # Errors
    ///
    /// A [`WebConfigError`] naming the web-config file, the key and the certificate or key file
    /// when one cannot be read or parsed, or when rustls rejects the pair.
    pub fn tls_acceptor(&self) -> Result<Option<tokio_rustls::TlsAcceptor>, WebConfigError> {
        match &self.tls {
            None => Ok(None),
            Some(tls) => {
                let config = build_server_config(&self.path, tls)?;
                Ok(Some(tokio_rustls::TlsAcceptor::from(config)))
            }
        }
    }

    /// The basic-auth checker for the configured users, or `None` when there are none.
    pub fn basic_auth(&self) -> Option<BasicAuth> {
        if self.users.is_empty() {
            None
        } else {
            Some(BasicAuth::from_validated(self.users.clone()))
        }
    }

    /// Whether `basic_auth_users` names at least one user.
    pub fn auth_enabled(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether `tls_server_config` is set.
    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }
}

/// Resolves a configured path against the web-config file's directory, rejecting empty ones.
fn resolve(
    config_path: &Path,
    base: &Path,
    key: &'static str,
    file: PathBuf,
) -> Result<PathBuf, WebConfigError> {
    if file.as_os_str().is_empty() {
        return Err(WebConfigError::EmptyPath {
            path: config_path.to_path_buf(),
            key,
        });
    }
    Ok(if file.is_absolute() {
        file
    } else {
        base.join(file)
    })
}

/// Whether `hash` is a well-formed bcrypt hash with a usable cost.
fn bcrypt_cost(hash: &str) -> Option<u32> {
    hash.parse::<bcrypt::HashParts>()
        .ok()
        .map(|parts| parts.get_cost())
        .filter(|c| (4..=31).contains(c))
}

/// Reads one of the TLS files, naming it in the error.
fn read_tls_file(
    config_path: &Path,
    key: &'static str,
    file: &Path,
) -> Result<Vec<u8>, WebConfigError> {
    crate::bounds::read_file(file, crate::bounds::MAX_PEM_FILE).map_err(|error| {
        WebConfigError::TlsRead {
            path: config_path.to_path_buf(),
            key,
            file: file.to_path_buf(),
            error,
        }
    })
}

/// Reads the certificate chain and key and builds the rustls server configuration.
fn build_server_config(
    config_path: &Path,
    tls: &TlsFiles,
) -> Result<Arc<rustls::ServerConfig>, WebConfigError> {
    const CERT_KEY: &str = "tls_server_config.cert_file";
    const KEY_KEY: &str = "tls_server_config.key_file";
    let pem_error = |key: &'static str, file: &Path, reason: String| WebConfigError::Pem {
        path: config_path.to_path_buf(),
        key,
        file: file.to_path_buf(),
        reason,
    };

    let cert_pem = read_tls_file(config_path, CERT_KEY, &tls.cert_file)?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|err| pem_error(CERT_KEY, &tls.cert_file, format!("invalid PEM: {err}")))?;
    if certs.is_empty() {
        return Err(pem_error(
            CERT_KEY,
            &tls.cert_file,
            "no PEM certificate found".to_owned(),
        ));
    }

    let key_pem = read_tls_file(config_path, KEY_KEY, &tls.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|err| match err {
        pem::Error::NoItemsFound => pem_error(
            KEY_KEY,
            &tls.key_file,
            "no PEM private key found".to_owned(),
        ),
        err => pem_error(KEY_KEY, &tls.key_file, format!("invalid PEM: {err}")),
    })?;

    let tls_error = |error| WebConfigError::Tls {
        path: config_path.to_path_buf(),
        error,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(tls_error)?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(tls_error)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A cache key: the user and a SHA-256 digest of the password (salted with the user's bcrypt
/// hash), so plaintext passwords are never kept in memory beyond the request.
type CacheKey = (String, [u8; 32]);

/// HTTP basic authentication against bcrypt hashes from a web-config file.
///
/// - Successful checks are remembered (at most 64 at a time; the cache is cleared when full),
///   keyed by user and a SHA-256 digest of the password, so repeated scrapes with the same
///   credentials cost a hash lookup instead of a bcrypt verification. Failures are never
///   cached.
/// - bcrypt verification is bounded: one at a time; a request that waits longer than 2 s for
///   its turn gets 503. Each client address may fail 5 times at once for each user name,
///   configured or not, and regains one attempt a second; beyond that it gets 429 without
///   any bcrypt work. So guessing from an address, with made-up user names or another
///   user's, never locks out a valid user there: the allowance a scraper's login takes from
///   is its own name's. (Guessing that very user's password from that very address does
///   lock it out from there while the guessing lasts: that is what bounds the guessing. A
///   scraper that logged in before is cached and never refused.) Since a made-up name and a
///   configured one are limited alike, the answers (status, timing) never say which names
///   exist; bcrypt work stays bounded by the one verification slot. At most 4 096
///   (address, name) pairs are tracked: beyond, those whose allowance is full again are
///   forgotten, else the one with the most left, so a flood of new names never gives a pair
///   being held back its attempts again.
/// - User names do not show in timing: an unknown user is verified against a stand-in hash
///   of the highest configured cost, and a password over 72 bytes is refused without bcrypt
///   for every user, known or not.
pub struct BasicAuth {
    /// User name to bcrypt hash; never empty.
    users: BTreeMap<String, String>,
    /// The stand-in hash unknown users are verified against.
    stand_in: String,
    /// Recently verified credentials.
    cache: Mutex<HashSet<CacheKey>>,
    /// Verification slots.
    permits: tokio::sync::Semaphore,
    /// Failed-login allowance per client address and user: (attempts left, when last
    /// updated).
    failures: Mutex<HashMap<Attempts, (f64, Instant)>>,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hashes are not secrets in the strict sense, but there is no reason to print them.
        f.debug_struct("BasicAuth")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What the cheap part of a check decided.
#[derive(Debug)]
pub enum Precheck {
    /// No usable credentials: refuse without bcrypt.
    Refused,
    /// Credentials verified before: allow.
    Cached,
    /// A bcrypt verification decides.
    Verify(Pending),
}

/// A verification still to run.
pub struct Pending {
    key: CacheKey,
    password: String,
    hash: String,
    known: bool,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}

impl BasicAuth {
    /// Builds a checker from users whose hashes [`WebConfig::load`] has validated.
    fn from_validated(users: BTreeMap<String, String>) -> BasicAuth {
        let costs: BTreeSet<u32> = users.values().filter_map(|h| bcrypt_cost(h)).collect();
        if costs.len() > 1 {
            warn!(
                costs = ?costs,
                "basic_auth_users hashes have different bcrypt costs: a known user with a cheaper hash can be told from an unknown one by timing; hash every password with the same cost"
            );
        }
        let cost = costs.last().copied().unwrap_or(bcrypt::DEFAULT_COST);
        let stand_in = bcrypt::hash("truthscale stand-in for unknown users", cost)
            .unwrap_or_else(|_| users.values().next().cloned().unwrap_or_default());
        BasicAuth {
            users,
            stand_in,
            cache: Mutex::new(HashSet::new()),
            permits: tokio::sync::Semaphore::new(VERIFY_PERMITS),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// How many users are configured (for tests and the fuzz targets).
    #[cfg(any(test, feature = "testing", feature = "fuzzing"))]
    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// The cheap part of a check of `authorization` (the `Authorization` header, if any): no
    /// bcrypt. Known and unknown users take the same path.
    pub fn precheck(&self, authorization: Option<&HeaderValue>) -> Precheck {
        let Some((user, password)) = authorization.and_then(parse_basic) else {
            return Precheck::Refused;
        };
        // Like Go's bcrypt (and so exporter-toolkit), passwords over 72 bytes are refused
        // rather than silently truncated to their first 72 bytes; for every user alike.
        if password.len() > MAX_BCRYPT_PASSWORD_BYTES {
            return Precheck::Refused;
        }
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.stand_in.clone(), false),
        };
        let key = (user, password_digest(&hash, &password));
        if known && self.cache_lock().contains(&key) {
            return Precheck::Cached;
        }
        Precheck::Verify(Pending {
            key,
            password,
            hash,
            known,
        })
    }

    /// Run the bcrypt verification of `p` (slow: tens of milliseconds at cost 10; call it off
    /// the async executor, as [`layer`] does), remembering a success.
    pub fn verify(&self, p: Pending) -> bool {
        let ok = bcrypt::verify(p.password.as_bytes(), &p.hash).unwrap_or(false) && p.known;
        if ok {
            let mut cache = self.cache_lock();
            if cache.len() >= AUTH_CACHE_CAPACITY {
                cache.clear();
            }
            cache.insert(p.key);
        }
        ok
    }

    /// Whether `authorization` carries valid `Basic` credentials for a configured user:
    /// [`BasicAuth::precheck`], then [`BasicAuth::verify`] when needed, unbounded (the
    /// server bounds it in [`layer`]). For tests.
    #[cfg(any(test, feature = "testing"))]
    pub fn check(&self, authorization: Option<&HeaderValue>) -> bool {
        match self.precheck(authorization) {
            Precheck::Refused => false,
            Precheck::Cached => true,
            Precheck::Verify(p) => self.verify(p),
        }
    }

    /// Whose allowance a login of `p` from `client` takes from: the name's, configured or
    /// not.
    fn attempts(client: IpAddr, p: &Pending) -> Attempts {
        (client, Sha256::digest(p.key.0.as_bytes()).into())
    }

    /// Take one failed-login attempt from `who`'s allowance; `false` when none is left.
    fn take_attempt(&self, who: &Attempts) -> bool {
        let now = Instant::now();
        // The attempts an allowance has now, refilled since it was last updated.
        let allowance = |&(left, at): &(f64, Instant)| {
            (left + now.duration_since(at).as_secs_f64() / FAILURE_REFILL.as_secs_f64())
                .min(FAILURE_BURST)
        };
        let mut map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_TRACKED_CLIENTS && !map.contains_key(who) {
            // Forget the pairs whose allowance is full again; if none, the one with the most
            // left. Never all of them: a flood of new names would give back the attempts of
            // a pair being held back.
            map.retain(|_, v| allowance(v) < FAILURE_BURST);
            if map.len() >= MAX_TRACKED_CLIENTS
                && let Some(fullest) = map
                    .iter()
                    .max_by(|a, b| allowance(a.1).total_cmp(&allowance(b.1)))
                    .map(|(k, _)| *k)
            {
                map.remove(&fullest);
            }
        }
        let entry = map.entry(*who).or_insert((FAILURE_BURST, now));
        entry.0 = allowance(entry);
        let (left, at) = entry;
        *at = now;
        if *left >= 1.0 {
            *left -= 1.0;
            true
        } else {
            false
        }
    }

    /// Give back the attempt a successful login took.
    fn refund_attempt(&self, who: &Attempts) {
        let mut map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((left, _)) = map.get_mut(who) {
            *left = (*left + 1.0).min(FAILURE_BURST);
        }
    }

    /// Locks the cache; a panic elsewhere cannot leave a set of keys inconsistent, so poisoning
    /// is ignored.
    fn cache_lock(&self) -> std::sync::MutexGuard<'_, HashSet<CacheKey>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// SHA-256 of the password, salted with the user's bcrypt hash.
fn password_digest(hash: &str, password: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(hash.as_bytes());
    hasher.update([0]);
    hasher.update(password.as_bytes());
    hasher.finalize().into()
}

/// Parses `Basic base64(user:password)`; the scheme is case-insensitive.
fn parse_basic(value: &HeaderValue) -> Option<(String, String)> {
    let value = value.to_str().ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Protects every route of `router` (including the fallback) with `auth`.
///
/// Requests without valid credentials get `401 Unauthorized` with
/// `WWW-Authenticate: Basic realm="truthscale"`. Wrap the router after adding every route
/// that should be protected; as in exporter-toolkit, that normally includes `/healthz`.
pub fn layer(router: Router, auth: BasicAuth) -> Router {
    let auth = Arc::new(auth);
    router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let auth = Arc::clone(&auth);
            authorize(auth, req, next)
        },
    ))
}

/// The middleware body of [`layer`].
async fn authorize(auth: Arc<BasicAuth>, req: Request, next: Next) -> Response {
    let pending = match auth.precheck(req.headers().get(AUTHORIZATION)) {
        Precheck::Cached => return next.run(req).await,
        Precheck::Refused => return unauthorized(),
        Precheck::Verify(p) => p,
    };
    let who = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| BasicAuth::attempts(c.0.ip(), &pending));
    if let Some(who) = &who
        && !auth.take_attempt(who)
    {
        debug!(client = %who.0, "too many failed logins; refused without checking");
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many failed logins from this address for this user; retry later\n",
        );
    }
    let Ok(Ok(permit)) = tokio::time::timeout(VERIFY_WAIT, auth.permits.acquire()).await else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "Busy checking credentials; retry later\n",
        );
    };
    // bcrypt is CPU-bound; keep it off the executor threads.
    let checker = Arc::clone(&auth);
    let allowed = tokio::task::spawn_blocking(move || checker.verify(pending))
        .await
        .unwrap_or(false);
    drop(permit);
    if allowed {
        if let Some(who) = &who {
            auth.refund_attempt(who);
        }
        next.run(req).await
    } else {
        unauthorized()
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(WWW_AUTHENTICATE, HeaderValue::from_static(REALM_CHALLENGE))],
        "Unauthorized\n",
    )
        .into_response()
}

fn refusal(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from_static("1"),
        )],
        body,
    )
        .into_response()
}

/// Limits that protect the server from oversized or slow clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// The largest request head (request line plus headers) accepted, in bytes; larger ones get
    /// `431 Request Header Fields Too Large`. Values below 8 KiB are raised to 8 KiB, hyper's
    /// minimum buffer size.
    pub max_header_bytes: usize,
    /// How long a client may take to send a complete request head; also the limit on the TLS
    /// handshake. Zero disables both limits.
    pub header_read_timeout: Duration,
}

impl Default for HttpLimits {
    /// 16 KiB of request head, 10 seconds to send it.
    fn default() -> Self {
        HttpLimits {
            max_header_bytes: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

impl HttpLimits {
    /// The header read timeout, or `None` when disabled.
    fn timeout(&self) -> Option<Duration> {
        (!self.header_read_timeout.is_zero()).then_some(self.header_read_timeout)
    }
}

/// Serves `app` on `listener` over HTTP/1.1, with TLS when `tls` is given, until `shutdown`
/// resolves.
///
/// Each connection runs in its own task; the TLS handshake happens there too, bounded by
/// [`HttpLimits::header_read_timeout`], so a slow or broken client never stalls the accept
/// loop. Failed handshakes and connection errors are logged at debug level. Accept errors
/// (such as running out of file descriptors) are logged and retried after a short pause.
///
/// When `shutdown` resolves the listener is closed, idle connections are closed, pending TLS
/// handshakes are dropped, and in-flight requests get up to 10 seconds to finish; connections
/// still open after that are aborted and the function returns.
///
/// # Errors
///
/// None at present: every per-connection and accept failure is logged and survived. The
/// `Result` leaves room for fatal listener errors.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut shutdown = std::pin::pin!(shutdown);
    let graceful = GracefulShutdown::new();
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut accept_warned: Option<Instant> = None;
    let mut accept_failures: u64 = 0;

    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let conn = Connection {
                    app: app.clone(),
                    tls: tls.clone(),
                    limits,
                    watcher: graceful.watcher(),
                    closing: closing_rx.clone(),
                    peer,
                };
                connections.spawn(conn.run(stream));
            }
            Err(err) => {
                // Out of file descriptors repeats for as long as it lasts: say it at most
                // once per ACCEPT_WARN_EVERY, with how often it happened meanwhile.
                let now = Instant::now();
                if accept_warned.is_none_or(|at| now.duration_since(at) >= ACCEPT_WARN_EVERY) {
                    warn!(
                        error = %err,
                        repeated = accept_failures,
                        "accepting a connection failed; retrying (if this says 'Too many open files', raise the file-descriptor limit or lower the client count)"
                    );
                    accept_warned = Some(now);
                    accept_failures = 0;
                } else {
                    accept_failures += 1;
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(ACCEPT_RETRY_DELAY) => {}
                }
            }
        }
    }

    drop(listener);
    // Stop pending TLS handshakes, then let watched connections finish their requests.
    let _ = closing_tx.send(true);
    while connections.try_join_next().is_some() {}
    if !connections.is_empty() {
        info!(
            connections = connections.len(),
            grace_period = ?GRACE_PERIOD,
            "Waiting for open connections to finish their requests before stopping."
        );
    }
    if tokio::time::timeout(GRACE_PERIOD, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(
            grace_period = ?GRACE_PERIOD,
            "connections still open after the grace period; closing them"
        );
    }
    connections.shutdown().await;
    Ok(())
}

/// Everything a connection task needs.
struct Connection {
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: HttpLimits,
    watcher: Watcher,
    closing: watch::Receiver<bool>,
    peer: SocketAddr,
}

impl Connection {
    /// Runs the TLS handshake (if any), then serves HTTP/1.1 until the connection ends.
    async fn run(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let Some(acceptor) = self.tls.clone() else {
            self.serve_http(stream).await;
            return;
        };
        let peer = self.peer;
        let mut closing = self.closing.clone();
        let handshake = with_timeout(self.limits.timeout(), acceptor.accept(stream));
        let tls_stream = tokio::select! {
            result = handshake => match result {
                Some(Ok(tls_stream)) => tls_stream,
                Some(Err(err)) => {
                    debug!(%peer, error = %err, "tls handshake failed");
                    return;
                }
                None => {
                    debug!(%peer, "tls handshake timed out");
                    return;
                }
            },
            _ = closing.wait_for(|closing| *closing) => {
                debug!(%peer, "tls handshake abandoned at shutdown");
                return;
            }
        };
        self.serve_http(tls_stream).await;
    }

    /// Serves HTTP/1.1 on an established stream under graceful-shutdown watch.
    async fn serve_http<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .max_buf_size(self.limits.max_header_bytes.max(8192))
            .header_read_timeout(self.limits.timeout());
        // Handlers (the login limiter) see the client's address.
        let peer = self.peer;
        let app = tower::ServiceExt::map_request(
            self.app,
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        );
        let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
        if let Err(err) = self.watcher.watch(conn).await {
            debug!(peer = %self.peer, error = %err, "connection ended with an error");
        }
    }
}

/// Runs `fut` with an optional time limit; `None` when the limit passes first.
async fn with_timeout<F: Future>(limit: Option<Duration>, fut: F) -> Option<F::Output> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, fut).await.ok(),
        None => Some(fut.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood of logins under new names, from many addresses, past the pairs tracked, never
    /// gives back the attempts of a pair being held back: the pairs with the most left are
    /// forgotten first. (Before, the whole table was cleared, and with it the allowance that
    /// bounded guessing a configured user's password.)
    #[test]
    fn a_flood_of_new_names_never_restores_a_held_back_allowance() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let auth = BasicAuth::from_validated(BTreeMap::from([("alice".to_string(), hash)]));
        let pair = |ip: IpAddr, user: &str| -> Attempts { (ip, Sha256::digest(user).into()) };
        let victim = pair(IpAddr::from([10, 0, 0, 1]), "alice");
        for _ in 0..5 {
            assert!(auth.take_attempt(&victim));
        }
        assert!(!auth.take_attempt(&victim), "a sixth attempt at once");
        for i in 0..MAX_TRACKED_CLIENTS + 100 {
            let ip = IpAddr::from([10, 1, (i >> 8) as u8, i as u8]);
            assert!(auth.take_attempt(&pair(ip, &format!("made-up-{i}"))), "{i}");
        }
        let map = auth.failures.lock().unwrap();
        assert_eq!(map.len(), MAX_TRACKED_CLIENTS);
        let (left, _) = map.get(&victim).expect("the held-back pair was forgotten");
        assert!(*left < 1.0, "{left} attempts left");
    }
}

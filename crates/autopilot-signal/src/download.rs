//! Streaming, verified HTTP(S) download into a directory, with no partial file ever left at
//! the destination (REF §7.5).
//!
//! Start at [`Downloader::download`] (or the one-shot [`download`]). Trust roots are the
//! system's (`SSL_CERT_FILE`/`SSL_CERT_DIR` honoured), never a kubeconfig's. Proxies are the
//! environment's (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`; `autopilot_shell::proxy`).
//!
//! The bytes go into a hidden partial file beside the destination (`.<name>.partial`, mode
//! 0600, never executable), next to a record of what they are (`.<name>.partial.json`: the
//! URL, the expected digest and the server's validator). An interrupted download — a cut
//! connection, a killed process — continues from what is on disk with `Range` and
//! `If-Range`, hashing the kept prefix again rather than trusting it; a server that ignores
//! `Range`, or whose payload changed, sends it whole and it is written from zero. The
//! decisions are `autopilot_engine::download`'s. Receiving, writing and hashing overlap:
//! the runtime thread receives, one blocking thread writes, another hashes (and checks a
//! streamed signature), joined by bounded channels.

use std::io::{self, Write as _};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autopilot_engine::download::{
    self as decide, Answer, PartialRecord, Start, Throttle, Validator,
};
use autopilot_shell::https::{self, HttpsClient, HttpsClientBuilder};
use autopilot_shell::proxy::Proxies;
use bytes::Bytes;
use http::header::{
    CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_RANGE, LAST_MODIFIED, LOCATION,
    RANGE, USER_AGENT,
};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use url::Url;

use crate::signature::{Expected, Signature, TrustedKeys};

/// Result of this module.
pub type Result<T, E = DownloadError> = std::result::Result<T, E>;

/// Why a download failed. The destination is untouched and no temp file is left behind.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The URL does not parse or has no host.
    #[error("invalid url {url:?}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
    },
    /// The URL's scheme is neither `http` nor `https`.
    #[error("unsupported url scheme {scheme:?} in {url} (only http and https)")]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// The expected digest is not 64 hex digits.
    #[error("invalid sha256 {value:?}: expected 64 hex digits")]
    InvalidSha256 {
        /// The digest as given.
        value: String,
    },
    /// The TLS client could not be set up.
    #[error("setting up the tls client")]
    Tls(#[source] rustls::Error),
    /// The extra trust roots in [`DownloadConfig::ca_file`] cannot be read.
    #[error("reading trust roots from {path}")]
    CaFile {
        /// The PEM file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The server answered with a status other than 200 (or an unusable redirect).
    #[error("GET {url}: {status}")]
    Status {
        /// The URL requested.
        url: String,
        /// The status it answered with.
        status: StatusCode,
    },
    /// A redirect without a usable `Location` header.
    #[error("GET {url}: {status} without a usable location")]
    BadRedirect {
        /// The URL requested.
        url: String,
        /// The redirect status.
        status: StatusCode,
    },
    /// A redirect pointed at a URL already visited.
    #[error("GET {url}: redirect loop")]
    RedirectLoop {
        /// The URL that was redirected to a second time.
        url: String,
    },
    /// A redirect from an `https://` URL to a plain `http://` one: following it would give
    /// up the TLS that authenticates the server, so it is refused (a payload without a
    /// `sha256` would then arrive with nothing vouching for it).
    #[error("GET {from}: refusing the redirect to {to}: it leaves https for plain http")]
    InsecureRedirect {
        /// The `https://` URL that answered with the redirect.
        from: String,
        /// The `http://` URL it pointed at.
        to: String,
    },
    /// More redirects than [`DownloadConfig::max_redirects`].
    #[error("GET {url}: too many redirects (more than {limit})")]
    TooManyRedirects {
        /// The original URL.
        url: String,
        /// The limit.
        limit: u32,
    },
    /// Connecting or sending the request failed.
    #[error("GET {url}: request failed")]
    Request {
        /// The URL requested.
        url: String,
        /// The cause.
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    /// Reading the response body failed (other than a short body, see [`Self::Truncated`]).
    #[error("GET {url}: reading the body")]
    Body {
        /// The URL requested.
        url: String,
        /// The cause.
        #[source]
        source: hyper::Error,
    },
    /// No response or no body bytes arrived for [`DownloadConfig::stall_timeout`].
    #[error("GET {url}: no data received for {timeout:?}")]
    Stalled {
        /// The URL requested.
        url: String,
        /// The stall timeout.
        timeout: Duration,
    },
    /// The whole download took longer than [`DownloadConfig::overall_timeout`].
    #[error("GET {url}: not finished within {timeout:?}")]
    TimedOut {
        /// The URL requested.
        url: String,
        /// The overall timeout.
        timeout: Duration,
    },
    /// The body is (or announces to be) larger than [`DownloadConfig::max_size`].
    #[error("GET {url}: body larger than the limit of {limit} bytes")]
    TooLarge {
        /// The URL requested.
        url: String,
        /// The size cap.
        limit: u64,
    },
    /// The body ended before the announced `Content-Length`.
    #[error("GET {url}: body truncated after {received} of {expected} bytes")]
    Truncated {
        /// The URL requested.
        url: String,
        /// Bytes received.
        received: u64,
        /// Bytes announced.
        expected: u64,
    },
    /// The downloaded bytes do not have the expected SHA-256 digest.
    #[error("sha256 mismatch for {url}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The URL requested.
        url: String,
        /// The expected digest (lowercase hex).
        expected: String,
        /// The digest of the downloaded bytes (lowercase hex).
        actual: String,
    },
    /// The payload does not carry a valid signature by a trusted key (DESIGN §14).
    #[error("the signature of {url} does not verify: {reason}")]
    Signature {
        /// The payload's URL.
        url: String,
        /// Why (no trusted key made it, it is not over these bytes, ...).
        reason: String,
    },
    /// Neither `Content-Disposition` nor the URL yields a usable file name.
    #[error("GET {url}: no usable file name in the response or the url")]
    NoFileName {
        /// The final URL.
        url: String,
    },
    /// The file system is full (or a quota is exhausted).
    #[error("no space left on device writing {path}")]
    NoSpace {
        /// The file being written.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another file system error.
    #[error("{action} {path}")]
    Io {
        /// What was being done (e.g. "creating a temp file in").
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl DownloadError {
    /// A stable, low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::InvalidUrl { .. } => "invalid_url",
            Self::UnsupportedScheme { .. } => "unsupported_scheme",
            Self::InvalidSha256 { .. } => "invalid_sha256",
            Self::Tls(_) => "tls",
            Self::CaFile { .. } => "ca_file",
            Self::Status { .. } => "status",
            Self::BadRedirect { .. } => "bad_redirect",
            Self::RedirectLoop { .. } => "redirect_loop",
            Self::InsecureRedirect { .. } => "insecure_redirect",
            Self::TooManyRedirects { .. } => "too_many_redirects",
            Self::Request { .. } => "request",
            Self::Body { .. } => "body",
            Self::Stalled { .. } => "stalled",
            Self::TimedOut { .. } => "timed_out",
            Self::TooLarge { .. } => "too_large",
            Self::Truncated { .. } => "truncated",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::Signature { .. } => "signature",
            Self::NoFileName { .. } => "no_file_name",
            Self::NoSpace { .. } => "no_space",
            Self::Io { .. } => "io",
        }
    }

    /// Whether the bytes a failed download kept are worth keeping for the next attempt:
    /// after a transport failure (cut, stalled, timed out, refused by the server for now)
    /// yes; after a failure about the payload itself (wrong digest or signature, too large,
    /// no space left) no.
    pub fn keeps_partial(&self) -> bool {
        match self {
            Self::Truncated { .. }
            | Self::Body { .. }
            | Self::Stalled { .. }
            | Self::TimedOut { .. }
            | Self::Request { .. }
            | Self::Status { .. } => true,
            Self::InvalidUrl { .. }
            | Self::UnsupportedScheme { .. }
            | Self::InvalidSha256 { .. }
            | Self::Tls(_)
            | Self::CaFile { .. }
            | Self::BadRedirect { .. }
            | Self::RedirectLoop { .. }
            | Self::InsecureRedirect { .. }
            | Self::TooManyRedirects { .. }
            | Self::TooLarge { .. }
            | Self::DigestMismatch { .. }
            | Self::Signature { .. }
            | Self::NoFileName { .. }
            | Self::NoSpace { .. }
            | Self::Io { .. } => false,
        }
    }

    /// Wraps an I/O error, mapping "no space left" and "quota exceeded" to [`Self::NoSpace`].
    pub fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
                Self::NoSpace { path, source }
            }
            _ => Self::Io { action, path, source },
        }
    }
}

/// Limits and identity of the downloader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownloadConfig {
    /// Give up when no response or body bytes arrive for this long (default 60s).
    pub stall_timeout: Duration,
    /// Give up when the whole download takes longer than this (default 6h).
    pub overall_timeout: Duration,
    /// Largest accepted body in bytes (default 512 MiB).
    pub max_size: u64,
    /// Most redirects followed (default 10).
    pub max_redirects: u32,
    /// `User-Agent` header (default `k0s/<crate version>`; see [`Self::for_version`]).
    pub user_agent: String,
    /// Extra trust roots (PEM), in addition to the system's (default none).
    pub ca_file: Option<PathBuf>,
    /// Most bytes per second received, over every download of this downloader and its
    /// clones (default none: as fast as the network and the disk go).
    pub rate_limit: Option<u64>,
    /// The proxies to go through (default: the environment's, [`Proxies::from_env`]).
    pub proxies: Proxies,
}

impl Default for DownloadConfig {
    fn default() -> Self {
        Self {
            stall_timeout: Duration::from_secs(60),
            overall_timeout: Duration::from_secs(6 * 60 * 60),
            max_size: 512 * 1024 * 1024,
            max_redirects: 10,
            user_agent: format!("k0s/{}", env!("CARGO_PKG_VERSION")),
            ca_file: None,
            rate_limit: None,
            proxies: Proxies::from_env(),
        }
    }
}

impl DownloadConfig {
    /// The defaults, with `User-Agent: k0s/<version>`.
    pub fn for_version(version: &str) -> Self {
        Self { user_agent: format!("k0s/{version}"), ..Self::default() }
    }
}

/// Download flags shared by `k0s worker` and `k0s controller` (flatten into their args).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct DownloadArgs {
    /// Abort an update download when no data arrives for this long.
    #[arg(long, default_value = "60s", value_parser = autopilot_api::duration::parse,
          value_name = "DURATION", env = "K0S_DOWNLOAD_STALL_TIMEOUT")]
    pub download_stall_timeout: Duration,

    /// Abort an update download that takes longer than this overall.
    #[arg(long, default_value = "6h", value_parser = autopilot_api::duration::parse,
          value_name = "DURATION", env = "K0S_DOWNLOAD_TIMEOUT")]
    pub download_timeout: Duration,

    /// Largest accepted update download (bytes, or with a Ki/Mi/Gi suffix).
    #[arg(long, default_value = "512Mi", value_parser = parse_size, value_name = "SIZE",
          env = "K0S_DOWNLOAD_MAX_SIZE")]
    pub download_max_size: u64,

    /// Most HTTP redirects followed by an update download.
    #[arg(long, default_value_t = 10, value_name = "COUNT")]
    pub download_max_redirects: u32,

    /// Extra trust roots (PEM) for HTTPS update downloads, besides the system's.
    #[arg(long, value_name = "FILE", env = "K0S_DOWNLOAD_CA_FILE")]
    pub download_ca_file: Option<PathBuf>,

    /// Most bytes per second this node's update downloads receive, all together (e.g.
    /// `2MiB`, `512KiB`, `1048576`; default: no limit).
    #[arg(long, value_parser = parse_rate, value_name = "BYTES_PER_SECOND",
          env = "K0S_DOWNLOAD_RATE_LIMIT")]
    pub download_rate_limit: Option<u64>,
}

impl DownloadArgs {
    /// The download configuration these flags describe, for a k0s of `version`.
    pub fn config(&self, version: &str) -> DownloadConfig {
        let Self {
            download_stall_timeout,
            download_timeout,
            download_max_size,
            download_max_redirects,
            download_ca_file,
            download_rate_limit,
        } = self;
        DownloadConfig {
            stall_timeout: *download_stall_timeout,
            overall_timeout: *download_timeout,
            max_size: *download_max_size,
            max_redirects: *download_max_redirects,
            ca_file: download_ca_file.clone(),
            rate_limit: *download_rate_limit,
            ..DownloadConfig::for_version(version)
        }
    }
}

/// Parses a size: plain bytes (`1048576`) or with a binary suffix (`512Ki`, `512Mi`, `1Gi`).
pub fn parse_size(value: &str) -> Result<u64, String> {
    let trimmed = value.trim();
    let (digits, unit) = match trimmed.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => trimmed.split_at(i),
        None => (trimmed, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(format!("{value:?} is not a size (e.g. 1048576, 512Mi, 1Gi)")),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{value:?} is not a size (e.g. 1048576, 512Mi, 1Gi)"))?;
    number.checked_mul(1 << shift).ok_or_else(|| format!("{value:?} is too large"))
}

/// Parses a rate in bytes per second: a size as [`parse_size`] takes it, optionally ending
/// in `B` and `/s` (`2MiB`, `2MiB/s`, `512Ki`, `1048576`). Zero is refused (leave the flag
/// out for no limit).
pub fn parse_rate(value: &str) -> Result<u64, String> {
    let trimmed = value.trim();
    let unit_less = trimmed.strip_suffix("/s").unwrap_or(trimmed);
    let unit_less = match unit_less.strip_suffix('B') {
        Some(rest) if rest.ends_with("Ki") || rest.ends_with("Mi") || rest.ends_with("Gi") => rest,
        Some(rest) if rest.bytes().all(|b| b.is_ascii_digit()) => rest,
        Some(_) | None => unit_less,
    };
    let rate = parse_size(unit_less).map_err(|_| {
        format!("{value:?} is not a rate in bytes per second (e.g. 2MiB, 512KiB, 1048576)")
    })?;
    if rate == 0 {
        return Err(format!("{value:?}: a rate limit must be above zero (leave it out for none)"));
    }
    Ok(rate)
}

/// Where a download goes.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// Exactly this path (its directory must exist).
    File(&'a Path),
    /// This directory, under the name from `Content-Disposition` or the final URL's last
    /// path segment, sanitised with [`sanitise_file_name`].
    Directory(&'a Path),
}

/// A completed, verified download.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Downloaded {
    /// Where the file now is.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256 digest (lowercase hex).
    pub sha256: String,
    /// The URL finally fetched (after redirects).
    pub url: String,
    /// The id of the trusted key whose signature verified the payload, when one was
    /// expected.
    pub signed_by: Option<String>,
}

/// An HTTP(S) client with the system's trust roots; cheap to reuse for many downloads.
#[derive(Clone, Debug)]
pub struct Downloader {
    client: HttpsClient,
    config: DownloadConfig,
    /// Counts every body byte received (the `agent_download_bytes` metric once
    /// [`Self::counting_bytes`] shared it; otherwise counted for nobody).
    bytes: prometheus_client::metrics::counter::Counter,
    /// [`DownloadConfig::rate_limit`], shared by the clones of this downloader.
    throttle: Option<Arc<Mutex<Throttle>>>,
}

/// How many received chunks may wait for the writer or the hasher: bounds the memory a fast
/// network can fill while the disk or the hash lags (hyper's chunks are at most a few
/// hundred KiB).
const PIPELINE_DEPTH: usize = 32;

/// The writer's buffer: small network chunks are written in blocks of this size, large
/// ones directly.
const WRITE_BUFFER: usize = 256 * 1024;

/// Write-behind: every this many bytes, the writer asks its sync thread to hand what was
/// written to the disk (`fdatasync`), so the fsync after the last byte has only the tail
/// left. The disk's work then overlaps receiving, writing and hashing instead of following
/// them.
const WRITE_BEHIND: u64 = 4 << 20;

/// How much of a kept prefix is read at once to hash it again.
const REHASH_BUFFER: usize = 1 << 20;

impl Downloader {
    /// A downloader with `config`. Unreadable system certificates are skipped (HTTPS to a
    /// server they would have vouched for then fails verification with a clear error).
    pub fn new(config: DownloadConfig) -> Result<Self> {
        let mut roots = https::system_roots();
        if let Some(path) = &config.ca_file {
            let ca_error = |source| DownloadError::CaFile { path: path.clone(), source };
            for cert in CertificateDer::pem_file_iter(path).map_err(ca_error)? {
                roots.add(cert.map_err(ca_error)?).map_err(DownloadError::Tls)?;
            }
        }
        let client = HttpsClientBuilder::new(roots)
            .with_connect_timeout(config.stall_timeout)
            .without_idle_connections()
            .with_proxies(config.proxies.clone())
            .build()
            .map_err(DownloadError::Tls)?;
        let throttle = config.rate_limit.map(|rate| Arc::new(Mutex::new(Throttle::new(rate))));
        Ok(Self { client, config, bytes: Default::default(), throttle })
    }

    /// The same downloader, adding every body byte it receives to `bytes`.
    pub fn counting_bytes(self, bytes: prometheus_client::metrics::counter::Counter) -> Self {
        Self { bytes, ..self }
    }

    /// The limits in force.
    pub fn config(&self) -> &DownloadConfig {
        &self.config
    }

    /// Downloads `url` to `target`, verifying `sha256` (lowercase or uppercase hex; empty or
    /// `None` skips verification). The bytes stream into a hidden partial file in the
    /// target's directory, which is fsynced, verified and then renamed into place. A
    /// download cut off mid-body continues from the bytes on disk (at once, or in a later
    /// call, even by another process) when the server gave a validator; a failure about the
    /// payload itself (wrong digest, too large, no space) removes them. The destination is
    /// untouched on any failure.
    pub async fn download(
        &self,
        url: &str,
        sha256: Option<&str>,
        target: Target<'_>,
    ) -> Result<Downloaded> {
        self.download_signed(url, sha256, target, None).await
    }

    /// [`Self::download`], and the payload must carry the `expected` signature (if any):
    /// checked over the same stream (a cosign signature against the SHA-256 it computes, a
    /// minisign one with its own pass over the bytes as they arrive: never a second read of
    /// the payload, only of a kept prefix), after the digest and before the file is renamed
    /// into place. A payload whose signature does not verify ends like one with the wrong
    /// digest: nothing is kept.
    pub async fn download_signed(
        &self,
        url: &str,
        sha256: Option<&str>,
        target: Target<'_>,
        expected: Option<Expected<'_>>,
    ) -> Result<Downloaded> {
        let want = match sha256.map(str::trim).filter(|s| !s.is_empty()) {
            Some(s) => Some(parse_sha256(s)?),
            None => None,
        };
        let uri = parse_url(url)?;
        let timeout = self.config.overall_timeout;
        // Started before the request: a minisign signature by no trusted key fails at once.
        if let Some(expected) = expected {
            expected
                .start()
                .map_err(|reason| DownloadError::Signature { url: url.to_string(), reason })?;
        }
        let expected = expected.map(|e| (e.keys.clone(), e.signature.clone()));
        // The deadline is checked at every wait (the answer, each frame, each retry), so a
        // download out of time ends through the same path as any failure: its threads
        // joined, what it kept kept or removed as for any other transport failure.
        let deadline = tokio::time::Instant::now() + timeout;
        self.fetch(uri, want, target, expected, deadline).await
    }

    /// GETs a small file (a signature) into memory: at most `limit` bytes, under the same
    /// TLS, proxy, redirect, stall and overall-time rules as a download.
    pub async fn fetch_small(&self, url: &str, limit: usize) -> Result<Vec<u8>> {
        let uri = parse_url(url)?;
        let timeout = self.config.overall_timeout;
        let fetch = async {
            let deadline = tokio::time::Instant::now() + timeout;
            let (final_uri, response) =
                self.follow_redirects(uri, &Start::FromZero, deadline).await?;
            let status = response.status();
            if status != StatusCode::OK {
                return Err(DownloadError::Status { url: final_uri.to_string(), status });
            }
            let mut body = response.into_body();
            let mut bytes = Vec::new();
            loop {
                let frame = tokio::time::timeout(self.config.stall_timeout, body.frame())
                    .await
                    .map_err(|_| self.stalled(&final_uri))?;
                let Some(frame) = frame else { return Ok(bytes) };
                let frame = frame
                    .map_err(|source| DownloadError::Body { url: final_uri.to_string(), source })?;
                let Ok(data) = frame.into_data() else { continue };
                self.bytes.inc_by(data.len() as u64);
                if bytes.len() + data.len() > limit {
                    return Err(DownloadError::TooLarge {
                        url: final_uri.to_string(),
                        limit: limit as u64,
                    });
                }
                bytes.extend_from_slice(&data);
            }
        };
        match tokio::time::timeout(timeout, fetch).await {
            Ok(result) => result,
            Err(_elapsed) => Err(DownloadError::TimedOut { url: url.to_string(), timeout }),
        }
    }

    /// The download itself, without the overall timeout: attempts (each continuing from
    /// what the last one kept, as `autopilot_engine::download` decides) until one brings a
    /// whole body, which is verified and renamed into place.
    async fn fetch(
        &self,
        uri: Uri,
        want: Option<String>,
        target: Target<'_>,
        expected: Option<(TrustedKeys, Signature)>,
        deadline: tokio::time::Instant,
    ) -> Result<Downloaded> {
        let url = uri.to_string();
        if let Some(proxy) = self.client.route(&uri).proxy() {
            tracing::info!(%url, %proxy, "downloading through a proxy");
        }
        let (dir, partial_name) = partial_location(target, &uri)?;
        if let Target::Directory(dir) = target {
            remove_other_partials(dir, &partial_name);
        }
        let partial = Partial::open(&dir, &partial_name)?;
        let job = Job { uri: &uri, want: want.clone(), target, expected, deadline };
        let mut attempts = 0;
        let mut without_progress = 0;
        let mut from_zero = false;
        loop {
            attempts += 1;
            let kept_before = partial.len()?;
            let start = if from_zero {
                Start::FromZero
            } else {
                decide::start(partial.record().as_ref(), Some(kept_before), &url, want.as_deref())
            };
            from_zero = false;
            if let Start::Continue { from, .. } = &start {
                tracing::info!(%url, kept = from, "continuing a download from the bytes on disk");
            }
            let failed = match self.attempt(&job, &partial, &start).await {
                Ok(Attempt::Done(done)) => {
                    match self.finish(&partial, done, want.as_deref()) {
                        Ok(downloaded) => return Ok(downloaded),
                        // Crash safety: a kept prefix is hashed again, but a power loss may
                        // have lost or garbled what the page cache held; the whole payload is
                        // fetched once more before the digest is believed wrong.
                        Err((err, true)) if attempts < decide::MAX_ATTEMPTS => {
                            tracing::warn!(%url, error = %err, "a continued download does not verify; fetching it whole");
                            partial.reset()?;
                            from_zero = true;
                            continue;
                        }
                        Err((err, _resumed)) => {
                            partial.discard();
                            return Err(err);
                        }
                    }
                }
                Ok(Attempt::AskAgainFromZero(why)) => {
                    tracing::info!(%url, %why, "the server cannot continue the download; starting from zero");
                    partial.reset()?;
                    if attempts >= decide::MAX_ATTEMPTS {
                        return Err(DownloadError::Status {
                            url,
                            status: StatusCode::RANGE_NOT_SATISFIABLE,
                        });
                    }
                    from_zero = true;
                    continue;
                }
                Err(err) => err,
            };
            let kept_after = partial.len().unwrap_or(0);
            without_progress = if kept_after > kept_before { 0 } else { without_progress + 1 };
            self.after_failed_attempt(
                &uri,
                &partial,
                failed,
                (attempts, without_progress),
                deadline,
            )
            .await?;
        }
    }

    /// After attempt number `tries.0` into `partial` failed with `failed` (the last
    /// `tries.1` of them without progress): wait, and `Ok` to go on, when the download may
    /// continue within `deadline` (`autopilot_engine::download::retry_after`); else the
    /// error, with what is kept discarded unless a later download can continue it.
    async fn after_failed_attempt(
        &self,
        uri: &Uri,
        partial: &Partial,
        failed: DownloadError,
        tries: (u32, u32),
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        let url = uri.to_string();
        let kept = partial.len().unwrap_or(0);
        let resumable = partial.record().is_some();
        let cut = matches!(failed, DownloadError::Truncated { .. } | DownloadError::Body { .. });
        match decide::retry_after(tries.0, tries.1, resumable && cut) {
            Some(wait) => {
                tracing::warn!(%url, error = %failed, kept, retry_in = ?wait, "download cut off; continuing");
                if tokio::time::Instant::now() + wait >= deadline {
                    return Err(self.timed_out(uri));
                }
                tokio::time::sleep(wait).await;
                Ok(())
            }
            None => {
                if !(resumable && failed.keeps_partial()) {
                    partial.discard();
                }
                Err(failed)
            }
        }
    }

    /// One request and its body into `partial`: what came back, or why it failed.
    async fn attempt(&self, job: &Job<'_>, partial: &Partial, start: &Start) -> Result<Attempt> {
        let Job { uri, want, target, expected: _, deadline } = job;
        let (target, deadline) = (*target, *deadline);
        let (final_uri, response) = self.follow_redirects((*uri).clone(), start, deadline).await?;
        let status = response.status();
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
        let (from, announced_total) =
            match decide::answer(start, status.as_u16(), header(CONTENT_RANGE)) {
                Answer::Refused => {
                    return Err(DownloadError::Status { url: final_uri.to_string(), status });
                }
                Answer::AskAgainFromZero { why } => return Ok(Attempt::AskAgainFromZero(why)),
                Answer::Whole => {
                    // Crash safety: the bytes go first, the record of what they are second; a
                    // record is only ever written for an empty file, so it never describes bytes
                    // of another payload.
                    partial.reset()?;
                    let validator = Validator::of(header(ETAG), header(LAST_MODIFIED));
                    if let Some(validator) = validator {
                        let record =
                            PartialRecord { url: uri.to_string(), sha256: want.clone(), validator };
                        partial.write_record(&record)?;
                    }
                    (0, announced_length(&response))
                }
                Answer::Rest { from, total } => {
                    (from, total.or_else(|| announced_length(&response).map(|n| from + n)))
                }
            };
        self.check_announced_size(&final_uri, announced_total)?;
        let (dir, name) = destination(target, &response, &final_uri)?;
        let written = self
            .write_body(response.into_body(), &final_uri, (from, announced_total), partial, job)
            .await?;
        Ok(Attempt::Done(Done { written, final_uri, dir, name, resumed: from > 0 }))
    }

    /// Verifies a whole body and renames it into place. `Err` carries whether the body was
    /// a continued one (worth one more whole attempt).
    fn finish(
        &self,
        partial: &Partial,
        done: Done,
        want: Option<&str>,
    ) -> std::result::Result<Downloaded, (DownloadError, bool)> {
        let Done { written, final_uri, dir, name, resumed } = done;
        let Written { size, sha256, signature } = written;
        let url = final_uri.to_string();
        verify_digest(&url, want.map(str::to_owned), &sha256).map_err(|e| (e, resumed))?;
        let signed_by = match signature {
            Some(verdict) => {
                let key = verdict.map_err(|reason| {
                    (DownloadError::Signature { url: url.clone(), reason }, false)
                })?;
                tracing::info!(%url, %key, "payload signature verified");
                Some(key)
            }
            None => None,
        };
        let path = partial.persist(&dir, &name).map_err(|e| (e, false))?;
        Ok(Downloaded { path, size, sha256, url, signed_by })
    }

    /// GETs `uri` (ranged as `start` says), following redirects (each checked by
    /// [`Self::check_redirect`]), until a final answer; returns the URL that gave it and the
    /// answer.
    async fn follow_redirects(
        &self,
        uri: Uri,
        start: &Start,
        deadline: tokio::time::Instant,
    ) -> Result<(Uri, Response<Incoming>)> {
        let original = uri.to_string();
        let mut current = uri;
        let mut visited = vec![current.clone()];
        loop {
            let response = self.get(&current, start, deadline).await?;
            let status = response.status();
            if !is_followed_redirect(status) {
                return Ok((current, response));
            }
            let next = redirect_target(&current, &response)?;
            self.check_redirect(&original, &current, &next, &visited)?;
            visited.push(next.clone());
            current = next;
        }
    }

    /// One GET of `uri` (with `Range` and `If-Range` to continue), given
    /// [`DownloadConfig::stall_timeout`] to answer.
    async fn get(
        &self,
        uri: &Uri,
        start: &Start,
        deadline: tokio::time::Instant,
    ) -> Result<Response<Incoming>> {
        let mut request =
            Request::get(uri.clone()).header(USER_AGENT, self.config.user_agent.as_str());
        if let Start::Continue { from, validator } = start {
            request = request
                .header(RANGE, format!("bytes={from}-"))
                .header(IF_RANGE, validator.if_range());
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|_| DownloadError::InvalidUrl { url: uri.to_string() })?;
        let (wait, stall) = self.wait_limit(deadline);
        tokio::time::timeout(wait, self.client.request(request))
            .await
            .map_err(|_| if stall { self.stalled(uri) } else { self.timed_out(uri) })?
            .map_err(|source| DownloadError::Request { url: uri.to_string(), source })
    }

    /// Refuses a redirect from `current` to `next` that leaves https for http, comes back to
    /// a URL already `visited`, or goes past [`DownloadConfig::max_redirects`].
    fn check_redirect(
        &self,
        original: &str,
        current: &Uri,
        next: &Uri,
        visited: &[Uri],
    ) -> Result<()> {
        let max_redirects = self.config.max_redirects;
        if is_https(current) && !is_https(next) {
            return Err(DownloadError::InsecureRedirect {
                from: current.to_string(),
                to: next.to_string(),
            });
        }
        if visited.contains(next) {
            return Err(DownloadError::RedirectLoop { url: next.to_string() });
        }
        if visited.len() > max_redirects as usize {
            return Err(DownloadError::TooManyRedirects {
                url: original.to_string(),
                limit: max_redirects,
            });
        }
        Ok(())
    }

    /// Refuses a payload announced (`Content-Length`, or `Content-Range`'s total) larger
    /// than [`DownloadConfig::max_size`] before a byte of it is read.
    fn check_announced_size(&self, url: &Uri, announced: Option<u64>) -> Result<()> {
        let limit = self.config.max_size;
        if announced.is_some_and(|n| n > limit) {
            return Err(DownloadError::TooLarge { url: url.to_string(), limit });
        }
        Ok(())
    }

    /// Streams `body` (from `url`: bytes `from..`, of a payload announced as `total` bytes)
    /// into `partial` after its first `from` bytes, hashing the kept prefix and the body, then
    /// fsyncs the file. Receiving (here), writing and hashing (one blocking thread each) run
    /// at the same time.
    async fn write_body(
        &self,
        body: Incoming,
        url: &Uri,
        (from, total): (u64, Option<u64>),
        partial: &Partial,
        job: &Job<'_>,
    ) -> Result<Written> {
        let path = partial.path.clone();
        let io_error = |action, e| DownloadError::io(action, &path, e);
        let file = partial.file.try_clone().map_err(|e| io_error("opening", e))?;
        let prefix = partial.file.try_clone().map_err(|e| io_error("opening", e))?;
        let (write_tx, write_rx) = mpsc::channel::<Bytes>(PIPELINE_DEPTH);
        let (hash_tx, hash_rx) = mpsc::channel::<Bytes>(PIPELINE_DEPTH);
        let writer = tokio::task::spawn_blocking(move || write_stream(file, from, write_rx));
        let expected = job.expected.clone();
        let deadline = job.deadline;
        let hasher =
            tokio::task::spawn_blocking(move || hash_stream(prefix, from, hash_rx, expected));
        let received = self.receive(body, url, from, total, (&write_tx, &hash_tx), deadline).await;
        drop((write_tx, hash_tx));
        // Both threads end once their channel is closed: wait for them whatever happened,
        // so the file holds every byte received before a failure (what the next attempt
        // continues from).
        let wrote = writer.await.map_err(|e| io_error("writing", io::Error::other(e)))?;
        let hashed = hasher.await.map_err(|e| io_error("hashing", io::Error::other(e)));
        let size = match received {
            Ok(size) => size,
            Err(Stop::Failed(err)) => return Err(err),
            // A thread stopped taking bytes: its error says why.
            Err(Stop::SinkClosed) => {
                wrote.map_err(|e| io_error("writing", e))?;
                hashed?.map_err(|e| io_error("reading back", e))?;
                return Err(io_error("writing", io::Error::other("the download pipeline stopped")));
            }
        };
        let file = wrote.map_err(|e| io_error("writing", e))?;
        let Hashed { digest, signature } = hashed?.map_err(|e| io_error("reading back", e))?;
        tokio::task::spawn_blocking(move || file.sync_all())
            .await
            .map_err(|e| io_error("syncing", io::Error::other(e)))?
            .map_err(|e| io_error("syncing", e))?;
        Ok(Written { size, sha256: hex::encode(digest), signature })
    }

    /// Receives `body` frame by frame (bytes `from..` of the payload) and hands each to the
    /// writer and the hasher, pausing to stay under [`DownloadConfig::rate_limit`]; fails
    /// when a frame takes longer than the stall timeout, the body errs, or the payload grows
    /// past [`DownloadConfig::max_size`]. Returns the payload's size.
    async fn receive(
        &self,
        mut body: Incoming,
        url: &Uri,
        from: u64,
        total: Option<u64>,
        (write_tx, hash_tx): (&mpsc::Sender<Bytes>, &mpsc::Sender<Bytes>),
        deadline: tokio::time::Instant,
    ) -> std::result::Result<u64, Stop> {
        let max_size = self.config.max_size;
        let mut size = from;
        loop {
            let (wait, stall) = self.wait_limit(deadline);
            let frame = match tokio::time::timeout(wait, body.frame()).await {
                Err(_elapsed) if stall => return Err(Stop::Failed(self.stalled(url))),
                Err(_elapsed) => return Err(Stop::Failed(self.timed_out(url))),
                Ok(None) => break,
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(source))) => {
                    return Err(Stop::Failed(body_error(url, size, total, source)));
                }
            };
            let Ok(data) = frame.into_data() else { continue };
            let len = data.len() as u64;
            size += len;
            self.bytes.inc_by(len);
            if size > max_size {
                return Err(Stop::Failed(DownloadError::TooLarge {
                    url: url.to_string(),
                    limit: max_size,
                }));
            }
            if hash_tx.send(data.clone()).await.is_err() || write_tx.send(data).await.is_err() {
                return Err(Stop::SinkClosed);
            }
            self.pace(len).await;
        }
        check_complete(url, size, total).map_err(Stop::Failed)?;
        Ok(size)
    }

    /// Pauses as long as [`DownloadConfig::rate_limit`] needs after `bytes` more.
    async fn pace(&self, bytes: u64) {
        let Some(throttle) = &self.throttle else { return };
        let now = tokio::time::Instant::now();
        let pause = {
            let mut throttle = throttle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            throttle.take(now.duration_since(throttle_origin()), bytes)
        };
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }

    /// How long the next wait may take: the stall timeout, or less if the `deadline` comes
    /// first (then `false`: running out means the overall timeout).
    fn wait_limit(&self, deadline: tokio::time::Instant) -> (Duration, bool) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let stall = self.config.stall_timeout;
        if stall <= left { (stall, true) } else { (left, false) }
    }

    /// The error of a download of `url` out of [`DownloadConfig::overall_timeout`].
    fn timed_out(&self, url: &Uri) -> DownloadError {
        DownloadError::TimedOut { url: url.to_string(), timeout: self.config.overall_timeout }
    }

    /// The error of nothing arriving from `url` for the stall timeout.
    fn stalled(&self, url: &Uri) -> DownloadError {
        DownloadError::Stalled { url: url.to_string(), timeout: self.config.stall_timeout }
    }
}

/// The monotonic origin of every throttle's clock (the first time any asked).
fn throttle_origin() -> tokio::time::Instant {
    static ORIGIN: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(tokio::time::Instant::now)
}

/// Why receiving stopped early.
enum Stop {
    /// The download failed.
    Failed(DownloadError),
    /// The writer or the hasher stopped taking bytes (it failed: its result says why).
    SinkClosed,
}

/// Writes every chunk from `chunks` into `file` from byte `from` on (cutting off anything
/// after it first); returns the file, with everything but what came after the last
/// [`WRITE_BEHIND`] step handed to the disk (a whole body is fsynced after this; the next
/// attempt hashes a kept prefix again anyway).
fn write_stream(
    file: std::fs::File,
    from: u64,
    mut chunks: mpsc::Receiver<Bytes>,
) -> io::Result<std::fs::File> {
    file.set_len(from)?;
    let syncing = file.try_clone()?;
    let mut file = file;
    io::Seek::seek(&mut file, io::SeekFrom::Start(from))?;
    // The disk's work runs on a thread of its own: the writer never waits for it, so a
    // slow `fdatasync` holds up neither receiving nor hashing.
    let (dirty_tx, dirty_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let syncer = std::thread::Builder::new().name("download-sync".into()).spawn(
        move || -> io::Result<()> {
            while dirty_rx.recv().is_ok() {
                syncing.sync_data()?;
            }
            Ok(())
        },
    )?;
    let written = (|| {
        let mut out = io::BufWriter::with_capacity(WRITE_BUFFER, file);
        let mut unsynced = 0u64;
        while let Some(chunk) = chunks.blocking_recv() {
            out.write_all(&chunk)?;
            unsynced += chunk.len() as u64;
            if unsynced >= WRITE_BEHIND {
                out.flush()?;
                // A sync still running covers most of this step too: asking once is
                // enough, and a syncer that failed says why when it is joined.
                let _ = dirty_tx.try_send(());
                unsynced = 0;
            }
            // Nothing more waiting: hand what was received to the file now, so a process
            // killed while the network is quiet keeps all of it to continue from.
            if chunks.is_empty() {
                out.flush()?;
            }
        }
        out.into_inner().map_err(io::IntoInnerError::into_error)
    })();
    drop(dirty_tx);
    let synced = syncer.join().map_err(|_| io::Error::other("the sync thread panicked"))?;
    let file = written?;
    synced?;
    Ok(file)
}

/// What the hashing thread found.
struct Hashed {
    digest: [u8; 32],
    /// The signature's verdict (the id of the key that made it, or why it does not verify),
    /// if one was expected.
    signature: Option<std::result::Result<String, String>>,
}

/// Hashes the first `from` bytes of `file` (what an earlier attempt kept), then every chunk
/// from `chunks`; checks the `expected` signature over the same bytes.
fn hash_stream(
    file: std::fs::File,
    from: u64,
    mut chunks: mpsc::Receiver<Bytes>,
    expected: Option<(TrustedKeys, Signature)>,
) -> io::Result<Hashed> {
    let mut hasher = Sha256::new();
    let mut check = expected.as_ref().map(|(keys, signature)| Expected { keys, signature }.start());
    let mut update = |bytes: &[u8]| {
        hasher.update(bytes);
        if let Some(Ok(check)) = check.as_mut() {
            check.update(bytes);
        }
    };
    let mut buf = vec![0u8; REHASH_BUFFER.min(usize::try_from(from).unwrap_or(usize::MAX)).max(1)];
    let mut offset = 0;
    while offset < from {
        let want = usize::try_from(from - offset).unwrap_or(usize::MAX).min(buf.len());
        let n = file.read_at(&mut buf[..want], offset)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the kept part of the download ends at {offset} of {from} bytes"),
            ));
        }
        update(&buf[..n]);
        offset += n as u64;
    }
    while let Some(chunk) = chunks.blocking_recv() {
        update(&chunk);
    }
    let digest: [u8; 32] = hasher.finalize().into();
    let signature = check.map(|check| check.and_then(|check| check.finish(&digest)));
    Ok(Hashed { digest, signature })
}

/// What every attempt of one download shares.
struct Job<'a> {
    /// The URL asked for (before redirects).
    uri: &'a Uri,
    /// The digest the payload must have.
    want: Option<String>,
    target: Target<'a>,
    /// The signature the payload must carry, and the keys that may have made it.
    expected: Option<(TrustedKeys, Signature)>,
    /// When [`DownloadConfig::overall_timeout`] runs out.
    deadline: tokio::time::Instant,
}

/// One attempt's outcome.
enum Attempt {
    /// A whole body is in the partial file.
    Done(Done),
    /// The server's ranged answer was unusable: start over from zero.
    AskAgainFromZero(String),
}

/// A whole body in the partial file, and where it goes.
struct Done {
    written: Written,
    final_uri: Uri,
    dir: PathBuf,
    name: String,
    /// Whether part of it came from an earlier attempt.
    resumed: bool,
}

/// A body written to its partial file: its size, SHA-256 digest (lowercase hex) and
/// signature verdict.
struct Written {
    size: u64,
    sha256: String,
    signature: Option<std::result::Result<String, String>>,
}

/// A download's partial file (`.<name>.partial`, locked while this process downloads into
/// it, never executable) and the record of what it holds (`.<name>.partial.json`).
#[derive(Debug)]
struct Partial {
    file: std::fs::File,
    path: PathBuf,
    record_path: PathBuf,
    dir: PathBuf,
}

impl Partial {
    /// Opens (or creates) `name` in `dir` and locks it; fails if another download holds it.
    fn open(dir: &Path, name: &str) -> Result<Self> {
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| DownloadError::io("opening", &path, e))?;
        // Held while this download owns the file (released when the process dies or
        // execs): a second download into the same place fails instead of mixing bytes.
        file.try_lock().map_err(|e| {
            DownloadError::io(
                "locking",
                &path,
                io::Error::other(format!("{e}: another download into this file is running")),
            )
        })?;
        // Never executable, whatever an earlier process or an operator left.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| DownloadError::io("restricting the permissions of", &path, e))?;
        let record_path = dir.join(format!("{name}.json"));
        Ok(Self { file, path, record_path, dir: dir.to_path_buf() })
    }

    /// How many bytes are kept.
    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| DownloadError::io("reading metadata of", &self.path, e))
    }

    /// The record of what the kept bytes are (`None`: none, or unreadable).
    fn record(&self) -> Option<PartialRecord> {
        let bytes = std::fs::read(&self.record_path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the record whole (temp file, fsync, rename, directory fsync).
    fn write_record(&self, record: &PartialRecord) -> Result<()> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| DownloadError::io("encoding", &self.record_path, io::Error::other(e)))?;
        let name = self.record_path.file_name().unwrap_or_default().to_string_lossy();
        let mut temp = tempfile::Builder::new()
            .prefix(&format!("{name}."))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(|e| DownloadError::io("creating a temp file in", &self.dir, e))?;
        temp.write_all(&bytes)
            .and_then(|()| temp.as_file().sync_all())
            .map_err(|e| DownloadError::io("writing", temp.path(), e))?;
        temp.persist(&self.record_path).map_err(|e| {
            DownloadError::io("renaming a temp file to", &self.record_path, e.error)
        })?;
        sync_dir(&self.dir)
    }

    /// Drops the record, then the kept bytes (in that order: a record never outlives the
    /// bytes it describes... nor describes bytes it was not written for).
    fn reset(&self) -> Result<()> {
        remove_if_present(&self.record_path)?;
        self.file.set_len(0).map_err(|e| DownloadError::io("truncating", &self.path, e))
    }

    /// Removes the record and the file (best effort: the next download starts over anyway).
    fn discard(&self) {
        let _ = remove_if_present(&self.record_path);
        let _ = std::fs::remove_file(&self.path);
    }

    /// Renames the verified file to `name` in `dest_dir`, makes the rename durable and
    /// removes the record.
    fn persist(&self, dest_dir: &Path, name: &str) -> Result<PathBuf> {
        let dest = dest_dir.join(name);
        std::fs::rename(&self.path, &dest)
            .map_err(|e| DownloadError::io("renaming the download to", &dest, e))?;
        sync_dir(dest_dir)?;
        // Crash safety: a record left behind describes a file that is gone; the next
        // download finds no bytes and starts from zero.
        remove_if_present(&self.record_path)?;
        Ok(dest)
    }
}

/// Where the partial file of a download into `target` from `uri` lives: beside the target
/// file (`.<name>.partial`), or in the target directory under a name made from the URL
/// (the file's own name comes with the answer).
fn partial_location(target: Target<'_>, uri: &Uri) -> Result<(PathBuf, String)> {
    match target {
        Target::File(path) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| DownloadError::NoFileName { url: uri.to_string() })?;
            Ok((parent_dir(path), format!(".{name}{PARTIAL_SUFFIX}")))
        }
        Target::Directory(dir) => {
            let id = hex::encode(Sha256::digest(uri.to_string().as_bytes()));
            Ok((dir.to_path_buf(), format!(".download-{}{PARTIAL_SUFFIX}", &id[..16])))
        }
    }
}

/// The suffix of partial download files.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// Removes the partial downloads (and their records) in `dir` other than `keep`, that no
/// running download holds: a directory target keeps only the download of its current URL.
fn remove_other_partials(dir: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') || !name.ends_with(PARTIAL_SUFFIX) || name == keep {
            continue;
        }
        let path = entry.path();
        let Ok(file) = std::fs::File::open(&path) else { continue };
        if file.try_lock().is_ok() {
            let _ = std::fs::remove_file(dir.join(format!("{name}.json")));
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DownloadError::io("removing", path, e)),
    }
}

/// The `Location` a redirect from `current` points at, resolved and checked as a URL.
fn redirect_target(current: &Uri, response: &Response<Incoming>) -> Result<Uri> {
    let status = response.status();
    let next = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|location| resolve(current, location))
        .ok_or_else(|| DownloadError::BadRedirect { url: current.to_string(), status })?;
    parse_url(&next.to_string())
}

/// The body length the response announces (`Content-Length`), if it announces a usable one.
fn announced_length(response: &Response<Incoming>) -> Option<u64> {
    response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// The directory and file name the download goes to: `target`'s own for a file, else the
/// name the response (a single `Content-Disposition`) or the final `url` gives.
fn destination(
    target: Target<'_>,
    response: &Response<Incoming>,
    url: &Uri,
) -> Result<(PathBuf, String)> {
    let no_file_name = || DownloadError::NoFileName { url: url.to_string() };
    match target {
        Target::File(path) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(no_file_name)?;
            Ok((parent_dir(path), name))
        }
        Target::Directory(dir) => {
            let mut dispositions = response.headers().get_all(CONTENT_DISPOSITION).iter();
            let disposition = match (dispositions.next(), dispositions.next()) {
                (Some(one), None) => one.to_str().ok(),
                (None, _) | (Some(_), Some(_)) => None,
            };
            let name = file_name_from_response(disposition, url).ok_or_else(no_file_name)?;
            Ok((dir.to_path_buf(), name))
        }
    }
}

/// The error for a body from `url` that failed after `received` bytes: truncated if fewer
/// bytes than announced arrived, else the transport error itself.
fn body_error(
    url: &Uri,
    received: u64,
    announced: Option<u64>,
    source: hyper::Error,
) -> DownloadError {
    let url = url.to_string();
    match announced {
        Some(expected) if received < expected => {
            DownloadError::Truncated { url, received, expected }
        }
        Some(_) | None => DownloadError::Body { url, source },
    }
}

/// Refuses a body that ended with other than the announced number of bytes.
fn check_complete(url: &Uri, received: u64, announced: Option<u64>) -> Result<()> {
    match announced {
        Some(expected) if received != expected => {
            Err(DownloadError::Truncated { url: url.to_string(), received, expected })
        }
        Some(_) | None => Ok(()),
    }
}

/// Refuses bytes whose digest `actual` is not the one wanted (if one is).
fn verify_digest(url: &str, want: Option<String>, actual: &str) -> Result<()> {
    match want {
        Some(expected) if expected != actual => Err(DownloadError::DigestMismatch {
            url: url.to_string(),
            expected,
            actual: actual.to_string(),
        }),
        Some(_) | None => Ok(()),
    }
}

/// One-shot download with a fresh [`Downloader`] (see [`Downloader::download`]); the entry
/// point for benchmarks.
pub async fn download(
    url: &str,
    sha256: Option<&str>,
    target: Target<'_>,
    config: DownloadConfig,
) -> Result<Downloaded> {
    Downloader::new(config)?.download(url, sha256, target).await
}

/// Fsyncs a directory so that renames in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| DownloadError::io("syncing directory", dir, e))
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        Some(_) | None => PathBuf::from("."),
    }
}

/// Normalises a hex SHA-256 digest to lowercase, rejecting anything but 64 hex digits.
pub fn parse_sha256(value: &str) -> Result<String> {
    let value = value.trim();
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(DownloadError::InvalidSha256 { value: value.to_string() })
    }
}

fn parse_url(url: &str) -> Result<Uri> {
    let invalid = || DownloadError::InvalidUrl { url: url.to_string() };
    let uri: Uri = url.parse().map_err(|_| invalid())?;
    let scheme = uri.scheme_str().ok_or_else(invalid)?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(DownloadError::UnsupportedScheme {
            url: url.to_string(),
            scheme: scheme.to_string(),
        });
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid());
    }
    Ok(uri)
}

/// Whether `uri` is fetched over TLS (`parse_url` admits only `http` and `https`).
fn is_https(uri: &Uri) -> bool {
    uri.scheme_str().is_some_and(|scheme| scheme.eq_ignore_ascii_case("https"))
}

fn is_followed_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

/// Resolves a `Location` header value against the URL that answered with it (RFC 3986
/// reference resolution; a fragment is dropped, it is never sent).
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    let base = Url::parse(&base.to_string()).ok()?;
    let mut next = base.join(location.trim()).ok()?;
    next.set_fragment(None);
    next.as_str().parse().ok()
}

/// The file name for an airgap bundle (REF §7.5): the `filename` parameter of a
/// `Content-Disposition` value if it yields a usable name, else the last path segment of
/// `url` (percent-decoded), each sanitised with [`sanitise_file_name`].
pub fn file_name_from_response(content_disposition: Option<&str>, url: &Uri) -> Option<String> {
    content_disposition
        .and_then(disposition_file_name)
        .and_then(|name| sanitise_file_name(&name))
        .or_else(|| {
            let segment = url.path().rsplit('/').next().unwrap_or_default();
            sanitise_file_name(&percent_decode_str(segment).decode_utf8_lossy())
        })
}

fn disposition_file_name(value: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|param| {
        let (key, value) = param.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case("filename") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .map_or_else(|| value.to_string(), |v| v.replace("\\\"", "\"").replace("\\\\", "\\"));
        Some(value)
    })
}

/// Makes `name` safe as a single file name (REF §7.5): path separators, `<>|:"?*`, control
/// and bidi-override characters, a leading space and trailing dots/spaces become `_`;
/// Windows reserved names get a `_` prefix; the result is cut to 255 bytes. `None` for an
/// empty name, `.` or `..`. (Unicode NFC normalisation is not applied.)
pub fn sanitise_file_name(name: &str) -> Option<String> {
    if name.is_empty() || name == "." || name == ".." {
        return None;
    }
    let mut chars: Vec<char> =
        name.chars().map(|c| if is_forbidden(c) { '_' } else { c }).collect();
    if let Some(first) = chars.first_mut()
        && *first == ' '
    {
        *first = '_';
    }
    for c in chars.iter_mut().rev() {
        if *c == '.' || *c == ' ' {
            *c = '_';
        } else {
            break;
        }
    }
    let mut out: String = chars.into_iter().collect();
    let stem = out.split('.').next().unwrap_or_default().to_ascii_uppercase();
    if is_windows_reserved(&stem) {
        out.insert(0, '_');
    }
    while out.len() > 255 {
        out.pop();
    }
    Some(out)
}

fn is_forbidden(c: char) -> bool {
    matches!(c, '/' | '\\' | '<' | '>' | '|' | ':' | '"' | '?' | '*')
        || c.is_control()
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn is_windows_reserved(stem: &str) -> bool {
    match stem {
        "CON" | "PRN" | "AUX" | "NUL" => true,
        _ => {
            let (prefix, digit) = (stem.get(..3), stem.get(3..));
            matches!(prefix, Some("COM" | "LPT"))
                && digit
                    .is_some_and(|d| d.len() == 1 && d.bytes().all(|b| (b'1'..=b'9').contains(&b)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitising_replaces_separators_and_trailing_dots() {
        assert_eq!(sanitise_file_name("a/b\\c:d.tar."), Some("a_b_c_d.tar_".into()));
        assert_eq!(sanitise_file_name(" x "), Some("_x_".into()));
        assert_eq!(sanitise_file_name("evil\u{202E}rat.exe"), Some("evil_rat.exe".into()));
    }

    #[test]
    fn sanitising_rejects_dot_names_and_prefixes_reserved_names() {
        assert_eq!(sanitise_file_name(""), None);
        assert_eq!(sanitise_file_name("."), None);
        assert_eq!(sanitise_file_name(".."), None);
        assert_eq!(sanitise_file_name("con.tar"), Some("_con.tar".into()));
        assert_eq!(sanitise_file_name("COM1"), Some("_COM1".into()));
        assert_eq!(sanitise_file_name("COM10"), Some("COM10".into()));
    }

    #[test]
    fn sanitising_cuts_long_names_to_255_bytes() {
        let long = "é".repeat(200);
        let out = sanitise_file_name(&long).expect("usable");
        assert!(out.len() <= 255);
    }

    #[test]
    fn bundle_name_comes_from_content_disposition_then_url() {
        let url: Uri = "http://h/dist/bundle%20v2.tar?x=1".parse().expect("uri");
        assert_eq!(file_name_from_response(None, &url), Some("bundle v2.tar".into()));
        assert_eq!(
            file_name_from_response(Some("attachment; filename=\"images.tar\""), &url),
            Some("images.tar".into())
        );
        assert_eq!(
            file_name_from_response(Some("attachment; filename=\"..\""), &url),
            Some("bundle v2.tar".into())
        );
        let bare: Uri = "http://h/".parse().expect("uri");
        assert_eq!(file_name_from_response(None, &bare), None);
    }

    #[test]
    fn relative_redirects_resolve_against_the_request_url() {
        let base: Uri = "http://h:1/a/b/c?q".parse().expect("uri");
        let r = |l| resolve(&base, l).map(|u| u.to_string());
        assert_eq!(r("/x"), Some("http://h:1/x".into()));
        assert_eq!(r("y"), Some("http://h:1/a/b/y".into()));
        assert_eq!(r("https://o/z"), Some("https://o/z".into()));
        assert_eq!(r("//o/z"), Some("http://o/z".into()));
        assert_eq!(r("../d/./e?v=1#top"), Some("http://h:1/a/d/e?v=1".into()));
        assert_eq!(r("?v=2"), Some("http://h:1/a/b/c?v=2".into()));
    }

    #[test]
    fn only_https_urls_count_as_tls() {
        let uri = |s: &str| s.parse::<Uri>().expect("uri");
        assert!(is_https(&uri("https://h/k0s")));
        assert!(is_https(&uri("HTTPS://h/k0s")));
        assert!(!is_https(&uri("http://h/k0s")));
    }

    #[test]
    fn only_http_and_https_urls_are_accepted() {
        assert!(matches!(
            parse_url("ftp://h/k0s"),
            Err(DownloadError::UnsupportedScheme { scheme, .. }) if scheme == "ftp"
        ));
        assert!(matches!(parse_url("/k0s"), Err(DownloadError::InvalidUrl { .. })));
        assert!(parse_url("HTTPS://h/k0s").is_ok());
    }

    #[test]
    fn a_full_disk_is_reported_as_no_space_left() {
        let full = io::Error::from_raw_os_error(28); // ENOSPC
        let err = DownloadError::io("writing", Path::new("/d/.k0s.x.tmp"), full);
        assert_eq!(err.to_string(), "no space left on device writing /d/.k0s.x.tmp");
        let other = io::Error::from_raw_os_error(13); // EACCES
        let err = DownloadError::io("writing", Path::new("/d/f"), other);
        assert!(matches!(err, DownloadError::Io { .. }));
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("512Mi"), Ok(512 * 1024 * 1024));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("2Gi"), Ok(2 << 30));
        assert!(parse_size("12MB").is_err());
        assert!(parse_size("Mi").is_err());
    }

    #[test]
    fn the_flag_defaults_are_the_config_defaults() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            download: DownloadArgs,
        }
        let cli = Cli::try_parse_from(["k0s"]).expect("defaults parse");
        assert_eq!(cli.download.config("v1"), DownloadConfig::for_version("v1"));
    }

    #[test]
    fn sha256_must_be_64_hex_digits() {
        assert!(parse_sha256("xyz").is_err());
        assert_eq!(parse_sha256(&"AB".repeat(32)).expect("valid"), "ab".repeat(32));
    }
}

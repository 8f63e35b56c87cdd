//! Streaming, verified HTTP(S) download into a directory, with no partial file ever left at
//! the destination (REF §7.5).
//!
//! Start at [`Downloader::download`] (or the one-shot [`download`]). Trust roots are the
//! system's (`SSL_CERT_FILE`/`SSL_CERT_DIR` honoured), never a kubeconfig's.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use autopilot_shell::https::{self, HttpsClient, HttpsClientBuilder};
use bytes::Bytes;
use http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH, LOCATION, USER_AGENT};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use sha2::{Digest as _, Sha256};
use tempfile::NamedTempFile;
use tokio::io::AsyncWriteExt as _;
use url::Url;

use crate::signature::{Check, Expected};

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
        } = self;
        DownloadConfig {
            stall_timeout: *download_stall_timeout,
            overall_timeout: *download_timeout,
            max_size: *download_max_size,
            max_redirects: *download_max_redirects,
            ca_file: download_ca_file.clone(),
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
}

/// An HTTP(S) client with the system's trust roots; cheap to reuse for many downloads.
#[derive(Clone, Debug)]
pub struct Downloader {
    client: HttpsClient,
    config: DownloadConfig,
    /// Counts every body byte received (the `agent_download_bytes` metric once
    /// [`Self::counting_bytes`] shared it; otherwise counted for nobody).
    bytes: prometheus_client::metrics::counter::Counter,
}

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
            .build()
            .map_err(DownloadError::Tls)?;
        Ok(Self { client, config, bytes: Default::default() })
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
    /// `None` skips verification). The bytes stream into a hidden temp file in the target's
    /// directory, which is fsynced, verified and then renamed into place; on any failure
    /// (including this future being dropped) the temp file is removed and the destination is
    /// untouched.
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
    /// minisign one with its own pass over the bytes as they arrive: never a second read),
    /// after the digest and before the file is renamed into place. A payload whose
    /// signature does not verify ends like one with the wrong digest: nothing is kept.
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
        let check = expected
            .map(Expected::start)
            .transpose()
            .map_err(|reason| DownloadError::Signature { url: url.to_string(), reason })?;
        match tokio::time::timeout(timeout, self.fetch(uri, want, target, check)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(DownloadError::TimedOut { url: url.to_string(), timeout }),
        }
    }

    /// GETs a small file (a signature) into memory: at most `limit` bytes, under the same
    /// TLS, redirect, stall and overall-time rules as a download.
    pub async fn fetch_small(&self, url: &str, limit: usize) -> Result<Vec<u8>> {
        let uri = parse_url(url)?;
        let timeout = self.config.overall_timeout;
        let fetch = async {
            let (final_uri, response) = self.follow_redirects(uri).await?;
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

    /// The download itself, without the overall timeout: follow the redirects to a `200 OK`,
    /// stream its body into a locked temp file beside the destination, verify it and rename
    /// it into place.
    async fn fetch(
        &self,
        uri: Uri,
        want: Option<String>,
        target: Target<'_>,
        mut check: Option<Check<'_>>,
    ) -> Result<Downloaded> {
        let (final_uri, response) = self.follow_redirects(uri).await?;
        let announced = announced_length(&response);
        self.check_announced_size(&final_uri, announced)?;
        let (dir, name) = destination(target, &response, &final_uri)?;
        let temp = create_locked_temp(&dir, &name)?;
        let Written { size, sha256, digest } =
            self.write_body(response.into_body(), &final_uri, announced, &temp, &mut check).await?;
        let url = final_uri.to_string();
        verify_digest(&url, want, &sha256)?;
        if let Some(check) = check {
            let key = check
                .finish(&digest)
                .map_err(|reason| DownloadError::Signature { url: url.clone(), reason })?;
            tracing::info!(%url, %key, "payload signature verified");
        }
        let path = persist(temp, &dir, &name)?;
        Ok(Downloaded { path, size, sha256, url })
    }

    /// GETs `uri`, following redirects (each checked by [`Self::check_redirect`]), until a
    /// `200 OK` answers; returns the URL that answered and its response.
    async fn follow_redirects(&self, uri: Uri) -> Result<(Uri, Response<Incoming>)> {
        let original = uri.to_string();
        let mut current = uri;
        let mut visited = vec![current.clone()];
        loop {
            let response = self.get(&current).await?;
            let status = response.status();
            if status == StatusCode::OK {
                return Ok((current, response));
            }
            if !is_followed_redirect(status) {
                return Err(DownloadError::Status { url: current.to_string(), status });
            }
            let next = redirect_target(&current, &response)?;
            self.check_redirect(&original, &current, &next, &visited)?;
            visited.push(next.clone());
            current = next;
        }
    }

    /// One GET of `uri`, given [`DownloadConfig::stall_timeout`] to answer.
    async fn get(&self, uri: &Uri) -> Result<Response<Incoming>> {
        let request = Request::get(uri.clone())
            .header(USER_AGENT, self.config.user_agent.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|_| DownloadError::InvalidUrl { url: uri.to_string() })?;
        tokio::time::timeout(self.config.stall_timeout, self.client.request(request))
            .await
            .map_err(|_| self.stalled(uri))?
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

    /// Refuses a body announced (`Content-Length`) larger than [`DownloadConfig::max_size`]
    /// before a byte of it is read.
    fn check_announced_size(&self, url: &Uri, announced: Option<u64>) -> Result<()> {
        let limit = self.config.max_size;
        if announced.is_some_and(|n| n > limit) {
            return Err(DownloadError::TooLarge { url: url.to_string(), limit });
        }
        Ok(())
    }

    /// Streams `body` (from `url`, announced as `announced` bytes) into `temp`, hashing it,
    /// then flushes and fsyncs the file.
    async fn write_body(
        &self,
        body: Incoming,
        url: &Uri,
        announced: Option<u64>,
        temp: &NamedTempFile,
        check: &mut Option<Check<'_>>,
    ) -> Result<Written> {
        let temp_path = temp.path();
        let handle =
            temp.as_file().try_clone().map_err(|e| DownloadError::io("opening", temp_path, e))?;
        let mut out =
            tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::from_std(handle));
        let (size, hasher) =
            self.stream_body(body, url, announced, &mut out, temp_path, check).await?;
        check_complete(url, size, announced)?;
        out.flush().await.map_err(|e| DownloadError::io("writing", temp_path, e))?;
        let file = out.into_inner();
        file.sync_all().await.map_err(|e| DownloadError::io("syncing", temp_path, e))?;
        let digest: [u8; 32] = hasher.finalize().into();
        Ok(Written { size, sha256: hex::encode(digest), digest })
    }

    /// Copies `body` into `out` frame by frame, counting and hashing the bytes; fails when a
    /// frame takes longer than the stall timeout, the body errs, or it grows past
    /// [`DownloadConfig::max_size`]. Returns the bytes received and their hash.
    async fn stream_body(
        &self,
        mut body: Incoming,
        url: &Uri,
        announced: Option<u64>,
        out: &mut tokio::io::BufWriter<tokio::fs::File>,
        temp_path: &Path,
        check: &mut Option<Check<'_>>,
    ) -> Result<(u64, Sha256)> {
        let max_size = self.config.max_size;
        let mut hasher = Sha256::new();
        let mut received: u64 = 0;
        loop {
            let frame = match tokio::time::timeout(self.config.stall_timeout, body.frame()).await {
                Err(_elapsed) => return Err(self.stalled(url)),
                Ok(None) => return Ok((received, hasher)),
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(source))) => return Err(body_error(url, received, announced, source)),
            };
            let Ok(data) = frame.into_data() else { continue };
            received += data.len() as u64;
            self.bytes.inc_by(data.len() as u64);
            if received > max_size {
                return Err(DownloadError::TooLarge { url: url.to_string(), limit: max_size });
            }
            hasher.update(&data);
            if let Some(check) = check.as_mut() {
                check.update(&data);
            }
            out.write_all(&data).await.map_err(|e| DownloadError::io("writing", temp_path, e))?;
        }
    }

    /// The error of nothing arriving from `url` for the stall timeout.
    fn stalled(&self, url: &Uri) -> DownloadError {
        DownloadError::Stalled { url: url.to_string(), timeout: self.config.stall_timeout }
    }
}

/// A body written to its temp file: its size and SHA-256 digest (lowercase hex).
struct Written {
    size: u64,
    sha256: String,
    digest: [u8; 32],
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

/// A hidden temp file for `name` in `dir`, locked by this process.
fn create_locked_temp(dir: &Path, name: &str) -> Result<NamedTempFile> {
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| DownloadError::io("creating a temp file in", dir, e))?;
    // Held while this download owns the file (released when the process dies or execs):
    // how a later process tells a leftover from a download in progress.
    temp.as_file()
        .try_lock()
        .map_err(|e| DownloadError::io("locking", temp.path(), io::Error::other(e.to_string())))?;
    Ok(temp)
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

/// Renames the verified temp file to `name` in `dir` and makes the rename durable.
fn persist(temp: NamedTempFile, dir: &Path, name: &str) -> Result<PathBuf> {
    let dest = dir.join(name);
    temp.persist(&dest)
        .map_err(|e| DownloadError::io("renaming a temp file to", &dest, e.error))?;
    sync_dir(dir)?;
    Ok(dest)
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

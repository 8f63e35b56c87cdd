//! The host effects of the signal agent behind [`Host`]: download and stage, swap the
//! binary, prepare a restart. [`LinuxHost`] does them for real; [`FakeHost`] keeps an
//! in-memory disk with injectable failures and crashes for replay tests.
//!
//! Not here: re-exec or exit of the process (the agent shell does that after
//! [`Host::prepare_restart`] returns) and anything talking to the API server.

pub mod fake;
pub mod linux;

use std::path::PathBuf;

use autopilot_api::signal::{SignalData, UpdateRef};
use serde::{Deserialize, Serialize};

use crate::download::DownloadError;
use crate::phase::{ActionKind, Facts, HostAction};

pub use fake::FakeHost;
pub use linux::LinuxHost;

/// Result of this module.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// Why a host action or observation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Downloading, verifying or storing the artifact failed.
    #[error(transparent)]
    Download(#[from] DownloadError),
    /// A file system operation failed.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The restart marker exists but cannot be parsed.
    #[error("parsing restart marker {path}")]
    Marker {
        /// The marker's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A hashing or I/O task could not be joined.
    #[error("background task failed")]
    Task(#[source] tokio::task::JoinError),
    /// [`FakeHost`] only: a failure injected with [`FakeHost::fail_next`].
    #[error("injected failure of {0:?}")]
    Injected(ActionKind),
    /// [`FakeHost`] only: the simulated process crashed (see [`FakeHost::crash_after`]).
    #[error("simulated crash")]
    Crashed,
}

impl HostError {
    /// Wraps an I/O error with what was being done on which path.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io { action, path: path.into(), source }
    }

    /// A stable, low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Download(e) => e.metric_label(),
            Self::Io { .. } => "io",
            Self::Marker { .. } => "marker",
            Self::Task(_) => "task",
            Self::Injected(_) => "injected",
            Self::Crashed => "crashed",
        }
    }

    /// The error and its causes joined with `": "`, for a signal status reason.
    pub fn reason(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            out.push_str(": ");
            out.push_str(&cause.to_string());
            source = cause.source();
        }
        out
    }
}

/// Identity of one signal: a restart marker or staged file belongs to exactly one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalKey {
    /// The plan's `spec.id`.
    pub plan_id: String,
    /// When the leader signalled.
    pub created: String,
    /// The command index.
    pub command_id: u32,
    /// The plan run, if the signal names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl SignalKey {
    /// The key of `signal`.
    pub fn of(signal: &SignalData) -> Self {
        Self {
            plan_id: signal.plan_id.clone(),
            created: signal.created.clone(),
            command_id: signal.command.id,
            run_id: signal.run_id.clone(),
        }
    }
}

/// What the restart marker file holds: which signal, prepared by which process instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartMarker {
    /// The signal the restart is for.
    pub signal: SignalKey,
    /// The instance id of the process that prepared it (see [`LinuxHost::instance`]).
    pub instance: String,
}

/// The host's share of [`Facts`], owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// A verified staged binary for this signal exists next to the live binary.
    pub staged: bool,
    /// SHA-256 of the live binary (lowercase hex), if readable.
    pub live_sha256: Option<String>,
    /// The restart marker names this signal and another process instance.
    pub restarted: bool,
}

impl Observed {
    /// The full facts for the phase machine.
    pub fn facts<'a>(
        &'a self,
        update: UpdateRef<'a>,
        running_version: &'a str,
        kubelet: bool,
    ) -> Facts<'a> {
        Facts {
            update,
            running_version,
            staged: self.staged,
            live_sha256: self.live_sha256.as_deref(),
            restarted: self.restarted,
            kubelet,
        }
    }
}

/// Host effects. Every method is idempotent: calling it again after a crash at any point
/// converges, and the live binary is always a complete file (old or new).
#[allow(async_fn_in_trait)] // single-threaded use inside the agent; revisit if we need Send bounds
pub trait Host {
    /// The host facts for `signal` asking for `update` (read-only).
    async fn observe(&self, signal: &SignalKey, update: UpdateRef<'_>) -> Result<Observed>;

    /// Downloads `url`, verifies `sha256` and stages it next to the live binary. The live
    /// binary is never touched; a failure leaves no staged or temp file behind.
    async fn download(&self, url: &str, sha256: Option<&str>) -> Result<()>;

    /// Downloads and verifies an airgap bundle into the images directory; returns its path.
    async fn download_bundle(&self, url: &str, sha256: Option<&str>) -> Result<PathBuf>;

    /// Moves the staged binary over the live one (same directory, `rename(2)`), keeping the
    /// previous one as `k0s.prev`. Without a staged binary: nothing to do (already swapped).
    fn swap_binary(&self) -> Result<()>;

    /// Records the restart marker for `signal`. The caller re-execs (or exits) afterwards.
    fn prepare_restart(&self, signal: &SignalKey) -> Result<()>;
}

/// Performs `action` for `signal` on `host`.
pub async fn perform(host: &impl Host, action: &HostAction, signal: &SignalKey) -> Result<()> {
    match action {
        HostAction::Download { url, sha256 } => host.download(url, sha256.as_deref()).await,
        HostAction::DownloadBundle { url, sha256 } => {
            host.download_bundle(url, sha256.as_deref()).await.map(drop)
        }
        HostAction::Swap => host.swap_binary(),
        HostAction::Restart => host.prepare_restart(signal),
    }
}

/// The expected digest of `update`, lowercase, if it names one.
pub(crate) fn expected_sha256(update: UpdateRef<'_>) -> Option<String> {
    let sha = match update {
        UpdateRef::K0s(u) => u.sha256.trim(),
        UpdateRef::Airgap(u) => u.sha256.trim(),
    };
    (!sha.is_empty()).then(|| sha.to_ascii_lowercase())
}

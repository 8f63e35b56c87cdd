//! The signal envelope: how the leader tells a node what to do, and how the node reports
//! back (REF §5).
//!
//! A signal is two annotations on the node's signal object (`ControlNode` for controllers,
//! `Node` for pure workers): [`keys::ANNOTATION_SIGNAL_VERSION`] = `v2` and
//! [`keys::ANNOTATION_SIGNAL_DATA`] = the JSON of [`SignalData`]. The JSON is compatible
//! with k0s both ways: field names and order are k0s', our one extra field
//! (`status.reason`) is left out when unset, and unknown fields are ignored on read.
//!
//! Read with [`from_annotations`] or [`from_meta`] (which also [`validate`]), write with
//! [`to_annotations`]; [`annotation_values`] and [`has_annotations`] look at the raw
//! annotations. Everything here is pure: no I/O, no clock.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;

/// The signal data JSON (`k0sproject.io/autopilot-signal-data`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalData {
    /// The Plan's `spec.id`; correlates the signal with the plan run.
    pub plan_id: String,

    /// RFC 3339 time the leader signalled the node; never parsed during validation.
    pub created: String,

    /// What to do.
    pub command: SignalCommand,

    /// What the node has done so far; absent until the node first reacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SignalStatus>,

    /// The plan run this signal belongs to (the Plan's `status.runId`; our addition, ignored
    /// by k0s). Absent in signals written by k0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// What the node is asked to do: exactly one of `k0supdate`, `airgapupdate`, `preflight` and
/// `rollback`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalCommand {
    /// Index of the command within the plan (0 is valid and always written).
    pub id: u32,

    /// Replace the k0s binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k0supdate: Option<CommandK0sUpdate>,

    /// Download an airgap image bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub airgapupdate: Option<CommandAirgapUpdate>,

    /// Run preflight checks (ours, DESIGN §13; k0s does not know it). A reference only: the
    /// node reads the checks' definitions from the Plan's frozen command, never from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<CommandPreflight>,

    /// Undo this run's update on the node (ours, DESIGN §15; k0s does not know it): put back
    /// what the node ran before the run. Authorized only by the Plan's status, which lists
    /// the node among the command's rollback targets with the same `version` as its "from".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<CommandRollback>,
}

/// Put back what the node ran before this run's update (DESIGN §15): no download.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandRollback {
    /// The version the node ran before the run (its "from" version, as the leader saw it
    /// when it signalled the update): what the node must run again when it completes.
    pub version: String,

    /// What is rolled back: the k0s binary (`k0s`: `k0s.prev` goes back in place, with a
    /// self-test and a trial boot like any update) or an airgap bundle (`airgap`: the
    /// previous bundle file set is restored).
    pub of: RollbackOf,
}

/// What a rollback puts back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RollbackOf {
    /// The k0s binary (from `k0s.prev`).
    #[serde(rename = "k0s")]
    K0s,
    /// The airgap bundle files.
    #[serde(rename = "airgap")]
    Airgap,
}

impl RollbackOf {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::K0s => "k0s",
            Self::Airgap => "airgap",
        }
    }
}

/// Run the checks `checks` of the `preflight` command at this signal's command index of the
/// plan run the signal names, and report a [`crate::preflight::RawRecord`] for each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandPreflight {
    /// The ids of the checks that target this node, in spec order.
    pub checks: Vec<String>,
}

/// Replace the k0s binary with the one at `url`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandK0sUpdate {
    /// Where to download the binary from.
    pub url: String,

    /// The version the new binary reports; checked after the restart.
    pub version: String,

    /// Hex SHA-256 of the binary; empty means "do not verify".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,

    /// Update even if the node already runs `version`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub forceupdate: bool,
}

/// Download the airgap bundle at `url`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandAirgapUpdate {
    /// Where to download the bundle from.
    pub url: String,

    /// The k0s version the bundle belongs to.
    pub version: String,

    /// Hex SHA-256 of the bundle; empty means "do not verify".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
}

/// The node's progress on a signal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalStatus {
    /// The phase the node is in.
    pub status: SignalPhase,

    /// RFC 3339 time the node entered the phase.
    pub timestamp: String,

    /// Human-readable detail, mostly why a phase failed (ours; k0s ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// For a preflight signal: what the node observed running each check, by check id
    /// (ours). Bounded ([`crate::preflight::RawRecord::bounded`]); the leader judges them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preflight: BTreeMap<String, crate::preflight::RawRecord>,
}

impl SignalStatus {
    /// A status in `phase` as of `now`, with no reason.
    pub fn new(phase: SignalPhase, now: jiff::Timestamp) -> Self {
        Self {
            status: phase,
            timestamp: format_timestamp(now),
            reason: None,
            preflight: BTreeMap::new(),
        }
    }

    /// The same status with a human-readable reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Node-side phase of a signal (REF §7.3). Serialised with k0s' strings.
///
/// Normal order: `Downloading → Cordoning → ApplyingUpdate → Restart → UnCordoning →
/// Completed`; `FailedDownload` and `Failed` end a signal unsuccessfully.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SignalPhase {
    /// Downloading (and verifying) the artifact. Exits: `Cordoning`, `FailedDownload`.
    Downloading,
    /// Cordoning and draining the node's kubelet, if it has one. Exit: `ApplyingUpdate`.
    Cordoning,
    /// Swapping the binary in place (or unpacking the bundle). Exits: `Restart`, `Failed`.
    ApplyingUpdate,
    /// Restarting into the new binary. Exits: `UnCordoning`, `Failed`.
    #[serde(rename = "Restart")]
    Restarting,
    /// Uncordoning the node. Exit: `Completed`.
    #[serde(rename = "UnCordoning")]
    Uncordoning,
    /// Terminal: the node runs the requested version.
    Completed,
    /// Terminal: the download or its verification failed.
    FailedDownload,
    /// Terminal: applying the update failed (the status `reason` says why).
    Failed,
}

impl SignalPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [SignalPhase; 8] = [
        Self::Downloading,
        Self::Cordoning,
        Self::ApplyingUpdate,
        Self::Restarting,
        Self::Uncordoning,
        Self::Completed,
        Self::FailedDownload,
        Self::Failed,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Downloading => "Downloading",
            Self::Cordoning => "Cordoning",
            Self::ApplyingUpdate => "ApplyingUpdate",
            Self::Restarting => "Restart",
            Self::Uncordoning => "UnCordoning",
            Self::Completed => "Completed",
            Self::FailedDownload => "FailedDownload",
            Self::Failed => "Failed",
        }
    }

    /// Whether the node is done with the signal, successfully or not.
    pub fn is_terminal(self) -> bool {
        match self {
            Self::Downloading
            | Self::Cordoning
            | Self::ApplyingUpdate
            | Self::Restarting
            | Self::Uncordoning => false,
            Self::Completed | Self::FailedDownload | Self::Failed => true,
        }
    }

    /// Whether the node gave up (`FailedDownload` or `Failed`).
    pub fn is_failure(self) -> bool {
        matches!(self, Self::FailedDownload | Self::Failed)
    }
}

impl fmt::Display for SignalPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JsonSchema for SignalPhase {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SignalPhase".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::schema::string_enum(
            "Node-side phase of a signal.",
            Self::ALL.iter().map(|p| p.as_str()),
        )
    }
}

/// Which kind of update a signal asks for, borrowed from a [`SignalCommand`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateRef<'a> {
    /// A k0s binary update.
    K0s(&'a CommandK0sUpdate),
    /// An airgap bundle update.
    Airgap(&'a CommandAirgapUpdate),
    /// Putting back what the node ran before a run's update (no download).
    Rollback(&'a CommandRollback),
}

impl SignalCommand {
    /// The update this command asks for, if exactly one of `k0supdate`, `airgapupdate` and
    /// `rollback` is set (a preflight command asks for none).
    pub fn update(&self) -> Option<UpdateRef<'_>> {
        match (&self.k0supdate, &self.airgapupdate, &self.rollback) {
            (Some(k0s), None, None) => Some(UpdateRef::K0s(k0s)),
            (None, Some(airgap), None) => Some(UpdateRef::Airgap(airgap)),
            (None, None, Some(rollback)) => Some(UpdateRef::Rollback(rollback)),
            _ => None,
        }
    }
}

impl SignalData {
    /// The same signal with `status` replaced.
    pub fn with_status(mut self, status: SignalStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// The node's phase, if it reported one.
    pub fn phase(&self) -> Option<SignalPhase> {
        self.status.as_ref().map(|s| s.status)
    }
}

/// Why a signal could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// One of the two signal annotations is present and the other is not.
    #[error("signal annotation {key} is missing")]
    MissingAnnotation {
        /// The missing annotation key.
        key: &'static str,
    },

    /// The version annotation is not `v2`.
    #[error("unsupported signal version {found:?}, expected \"v2\"")]
    UnsupportedVersion {
        /// The version found.
        found: String,
    },

    /// The data annotation is not JSON of the expected shape (this includes a missing
    /// `command` or `command.id`, and an unknown `status.status`).
    #[error("signal data is not valid json")]
    InvalidJson {
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },

    /// A required string field is empty.
    #[error("signal field {field} is empty")]
    EmptyField {
        /// JSON path of the field, e.g. `planId` or `command.k0supdate.version`.
        field: &'static str,
    },

    /// `command` has none of `k0supdate`, `airgapupdate`, `preflight` and `rollback`.
    #[error("signal field command has none of k0supdate, airgapupdate, preflight and rollback")]
    NoUpdate,

    /// `command` has more than one of `k0supdate`, `airgapupdate`, `preflight` and
    /// `rollback`.
    #[error(
        "signal field command has more than one of k0supdate, airgapupdate, preflight and rollback"
    )]
    BothUpdates,

    /// An update URL does not look like a URL.
    #[error("signal field {field} is not a valid url ({problem}): {url:?}")]
    InvalidUrl {
        /// JSON path of the field, e.g. `command.k0supdate.url`.
        field: &'static str,
        /// The offending value.
        url: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// Both signal annotations for `data`: version `v2` and the compact JSON.
///
/// Does not validate; the writer is expected to have built a valid signal (see
/// [`validate`]).
pub fn to_annotations(data: &SignalData) -> BTreeMap<String, String> {
    let (version, json) = encode(data);
    BTreeMap::from([
        (keys::ANNOTATION_SIGNAL_VERSION.to_owned(), version),
        (keys::ANNOTATION_SIGNAL_DATA.to_owned(), json),
    ])
}

/// The most bytes a signal's data annotation may take when the leader writes it (DESIGN
/// §14). Kubernetes allows 256 KiB of annotations per object, shared with every other
/// writer; a signal is well under 1 KiB unless a Plan carries huge values (a URL, many
/// checks), and a write the API server refuses would be retried on every pass.
pub const MAX_SIGNAL_BYTES: usize = 16 * 1024;

/// The two annotation values for `data`: `("v2", compact JSON)`.
pub fn encode(data: &SignalData) -> (String, String) {
    let json = serde_json::to_string(data)
        .expect("signal data has only string keys and plain values, so it always serialises");
    (keys::SIGNAL_VERSION.to_owned(), json)
}

/// The raw values of the two signal annotations, `[version, data]`, each `None` when
/// absent: the one place that reads the signal keys (nothing is parsed or checked).
pub fn annotation_values(annotations: &BTreeMap<String, String>) -> [Option<&str>; 2] {
    [
        annotations.get(keys::ANNOTATION_SIGNAL_VERSION).map(String::as_str),
        annotations.get(keys::ANNOTATION_SIGNAL_DATA).map(String::as_str),
    ]
}

/// Whether an object carries either signal annotation, valid or not.
pub fn has_annotations(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|all| annotation_values(all).iter().any(Option::is_some))
}

/// Read and [`validate`] the signal in an object's annotations.
///
/// `Ok(None)` when neither annotation is present (no signal); an error when only one is,
/// or when the signal is not valid.
pub fn from_annotations(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<SignalData>, SignalError> {
    let [version, data] = annotation_values(annotations);
    let (version, data) = match (version, data) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(SignalError::MissingAnnotation { key: keys::ANNOTATION_SIGNAL_DATA });
        }
        (None, Some(_)) => {
            return Err(SignalError::MissingAnnotation { key: keys::ANNOTATION_SIGNAL_VERSION });
        }
        (Some(version), Some(data)) => (version, data),
    };
    decode(version, data).map(Some)
}

/// [`from_annotations`] on an object's metadata (no annotations at all means no signal).
pub fn from_meta(meta: &ObjectMeta) -> Result<Option<SignalData>, SignalError> {
    meta.annotations.as_ref().map_or(Ok(None), from_annotations)
}

/// The signal in an object's annotations, parsed but not validated: for answering a signal
/// that fails [`validate`] (its `planId`, `created` and `command.id` identify it).
/// `Ok(None)` without both annotations.
pub fn from_meta_unchecked(meta: &ObjectMeta) -> Result<Option<SignalData>, SignalError> {
    let Some(all) = meta.annotations.as_ref() else { return Ok(None) };
    let [Some(version), Some(data)] = annotation_values(all) else {
        return Ok(None);
    };
    if version != keys::SIGNAL_VERSION {
        return Err(SignalError::UnsupportedVersion { found: version.to_owned() });
    }
    serde_json::from_str(data).map(Some).map_err(|source| SignalError::InvalidJson { source })
}

/// Parse and [`validate`] a signal from its two annotation values.
pub fn decode(version: &str, data: &str) -> Result<SignalData, SignalError> {
    if version != keys::SIGNAL_VERSION {
        return Err(SignalError::UnsupportedVersion { found: version.to_owned() });
    }
    let data: SignalData =
        serde_json::from_str(data).map_err(|source| SignalError::InvalidJson { source })?;
    validate(&data)?;
    Ok(data)
}

/// Check a signal against the rules of REF §5.3.
///
/// `planId` and `created` are non-empty; exactly one of `k0supdate`/`airgapupdate` is set;
/// its `url` looks like a URL (scheme plus host, or an opaque part) and its `version` is
/// non-empty; a present `status` has a non-empty `timestamp`. Timestamps are not parsed.
/// The presence of `command`, `command.id` and `status.status` is enforced by the types.
pub fn validate(data: &SignalData) -> Result<(), SignalError> {
    non_empty("planId", &data.plan_id)?;
    non_empty("created", &data.created)?;
    let command = &data.command;
    let set = [
        command.k0supdate.is_some(),
        command.airgapupdate.is_some(),
        command.preflight.is_some(),
        command.rollback.is_some(),
    ];
    match set.iter().filter(|set| **set).count() {
        0 => return Err(SignalError::NoUpdate),
        1 => {}
        _ => return Err(SignalError::BothUpdates),
    }
    if let Some(update) = &command.k0supdate {
        check_url("command.k0supdate.url", &update.url)?;
        non_empty("command.k0supdate.version", &update.version)?;
    }
    if let Some(update) = &command.airgapupdate {
        check_url("command.airgapupdate.url", &update.url)?;
        non_empty("command.airgapupdate.version", &update.version)?;
    }
    if let Some(preflight) = &command.preflight {
        if preflight.checks.is_empty() {
            return Err(SignalError::EmptyField { field: "command.preflight.checks" });
        }
        for check in &preflight.checks {
            non_empty("command.preflight.checks[]", check.trim())?;
        }
    }
    if let Some(rollback) = &command.rollback {
        non_empty("command.rollback.version", rollback.version.trim())?;
    }
    if let Some(status) = &data.status {
        non_empty("status.timestamp", &status.timestamp)?;
    }
    Ok(())
}

/// An RFC 3339 timestamp the way Kubernetes and k0s write them: UTC, whole seconds
/// (`2024-05-01T12:00:00Z`).
pub fn format_timestamp(ts: jiff::Timestamp) -> String {
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", ts).unwrap_or_else(|_| ts.to_string())
}

/// A signal's `created` as the leader writes it: an RFC 3339 UTC timestamp with the
/// fraction of the second (`2024-05-01T12:00:00.123456789Z`; none when it is zero). The Plan
/// status records it for the node before the signal is written (DESIGN §14), and the node
/// acts only on a signal whose `created` the status records: with the fraction, no one can
/// write a copy ahead of time whose `created` the leader's next signal would have.
pub fn format_created(ts: jiff::Timestamp) -> String {
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%S%.fZ", ts).unwrap_or_else(|_| ts.to_string())
}

fn non_empty(field: &'static str, value: &str) -> Result<(), SignalError> {
    if value.is_empty() { Err(SignalError::EmptyField { field }) } else { Ok(()) }
}

fn check_url(field: &'static str, url: &str) -> Result<(), SignalError> {
    if url.is_empty() {
        return Err(SignalError::EmptyField { field });
    }
    url_problem(url).map_or(Ok(()), |problem| {
        Err(SignalError::InvalidUrl { field, url: url.to_owned(), problem })
    })
}

/// What makes `url` not look like an absolute URL, if anything.
///
/// A tiny RFC 3986 reading, close to what Go's `url.Parse` plus k0s' checks accept: a
/// scheme, then either `//authority` with a non-empty host (`file:///path` is allowed
/// without one) or a non-empty opaque part.
fn url_problem(url: &str) -> Option<&'static str> {
    if url.chars().any(|c| c.is_control() || c == ' ') {
        return Some("contains whitespace or control characters");
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Some("no scheme");
    };
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Some("no scheme");
    }
    let Some(after_slashes) = rest.strip_prefix("//") else {
        // Opaque form, e.g. `mailto:someone@example.com`.
        return if rest.is_empty() { Some("no host") } else { None };
    };
    let authority_end = after_slashes.find(['/', '?', '#']).unwrap_or(after_slashes.len());
    let (authority, path) = after_slashes.split_at(authority_end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host_port)| host_port);
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        // IPv6 literal: `[::1]:8080`.
        let Some((ip, port)) = bracketed.split_once(']') else {
            return Some("unterminated ipv6 host");
        };
        if !(port.is_empty() || port.strip_prefix(':').is_some_and(is_port)) {
            return Some("invalid port");
        }
        ip
    } else {
        match host_port.split_once(':') {
            Some((host, port)) if is_port(port) => host,
            Some(_) => return Some("invalid port"),
            None => host_port,
        }
    };
    // `file:///path` has an empty host and is still accepted, as k0s does.
    let hostless_file = scheme.eq_ignore_ascii_case("file") && !path.is_empty();
    if host.is_empty() && !hostless_file {
        return Some("no host");
    }
    None
}

/// A URL port: digits only (empty is allowed, as in `http://host:/`).
fn is_port(port: &str) -> bool {
    port.chars().all(|c| c.is_ascii_digit())
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests;

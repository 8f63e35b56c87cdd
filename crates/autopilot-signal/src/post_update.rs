//! The post-update watch on the node (DESIGN §15): the shell around
//! [`autopilot_engine::post_update::decide`].
//!
//! A passed trial boot swaps the new binary in and records a [`WatchRecord`] in the restart
//! marker (`crate::trial`). From then on, for `--post-update-watch`:
//! - [`guard`] (`k0s.prev post-update-guard`, the units' `ExecStartPre`, run from the proven
//!   binary: the witness outside the binary under test) counts each start of the new binary
//!   before it is made, and the abnormal exit of the start before it; it puts `k0s.prev`
//!   back before the new binary starts once it has exited abnormally three times (crashed,
//!   or killed by the units' watchdog because it hung), or once the window is over without
//!   a proof. A new binary that dies or hangs before it records anything is counted so;
//! - the window counts only time in which a quorum read of the node's own object (a request
//!   that needs the datastore, made with the node's own identity) succeeded, as the running
//!   new binary counted it (it reads every few seconds and records the count in the marker):
//!   an outage of the API server or of etcd proves nothing, so it never ends a window and
//!   never rolls a node back;
//! - [`at_start`] (first thing in `k0s worker` / `k0s controller`) takes up the start the
//!   guard counted, or counts it itself, with the abnormal exit of a start that never
//!   stopped cleanly (so a node without the guard is covered too), or finds that the proven
//!   binary runs again after a rollback and must report it;
//! - [`Watching::run`] (in the running new binary) proves it after 60 s healthy in a row
//!   (its update agent holds an established watch of its own object, see [`Established`],
//!   and its quorum reads succeed) and a write of its own on that object that a quorum read
//!   sees back ([`Datastore`]), or rolls back itself when the window ends first;
//! - [`stopped_cleanly`] records a clean stop (SIGTERM, or an exit for a restart).
//!
//! A rollback is crash-safe like a swap: the marker records it first, then [`finish`] links
//! the new binary aside as `k0s.refused.new`, renames a link of `k0s.prev` over the live
//! path (the live path always holds a complete binary) and moves the refused file to
//! `k0s.refused`, mode 0600. `k0s.prev` keeps the proven binary (then the same file as the
//! live one). Only the very file the swap put in place (its device and inode, and the digest
//! the watch recorded) is ever taken out: a binary an operator put in place by hand, even
//! with the same bytes, is left alone.

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use autopilot_engine::post_update::{Caller, Reason, Verdict, decide};
use tracing::{info, warn};

use crate::download::{parent_dir, sync_dir};
use crate::host::linux::{read_marker, sha256_file, write_json};
use crate::host::{FileId, RestartMarker, WatchRecord, WatchState};

/// The restart marker's file name in the data directory (see `LinuxHost::marker_path`).
pub const MARKER_FILE: &str = "autopilot-restart.json";

/// How often the running new binary looks at its health and the window.
const TICK: Duration = Duration::from_secs(1);

/// How often the running new binary reads its own object with a quorum read: time counts
/// against the window only after such a read succeeded.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// How long one request to the datastore may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

/// How often the running new binary records in the marker the time it counted while the API
/// server answered (a crash loses at most this much of the count: the window only gets
/// longer).
const RECORD_EVERY: Duration = Duration::from_secs(10);

/// Where the watch's files are: the live binary (its `k0s.prev` and `k0s.refused` next to
/// it) and the data directory (the restart marker).
#[derive(Clone, Debug)]
pub struct Files {
    live: PathBuf,
    data_dir: PathBuf,
}

impl Files {
    /// The files of the node whose live binary is `live` and data directory `data_dir`.
    pub fn new(live: PathBuf, data_dir: PathBuf) -> Self {
        Self { live, data_dir }
    }

    /// The restart marker.
    pub fn marker_path(&self) -> PathBuf {
        self.data_dir.join(MARKER_FILE)
    }

    /// The proven binary a rollback puts back.
    pub fn previous_path(&self) -> PathBuf {
        self.sibling(".prev")
    }

    /// Where the rolled-back binary is kept, not executable.
    pub fn refused_path(&self) -> PathBuf {
        self.sibling(".refused")
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut name = self.live.file_name().unwrap_or_default().to_os_string();
        name.push(suffix);
        parent_dir(&self.live).join(name)
    }

    fn read(&self) -> anyhow::Result<Option<(RestartMarker, WatchRecord)>> {
        let marker = read_marker(&self.marker_path()).context("reading the restart marker")?;
        Ok(marker.and_then(|m| m.watch.clone().map(|w| (m, w))))
    }

    /// Writes `marker` with `change` applied to its watch.
    fn write(
        &self,
        mut marker: RestartMarker,
        change: impl FnOnce(&mut WatchRecord),
    ) -> anyhow::Result<()> {
        if let Some(watch) = marker.watch.as_mut() {
            change(watch);
        }
        write_json(&self.data_dir, &self.marker_path(), &marker)
            .context("writing the restart marker")
    }
}

/// The wall clock, unix seconds.
pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// What [`guard`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guarded {
    /// Nothing to do (no marker, no watch, or no watch in progress).
    Nothing,
    /// The start that follows is counted (no rollback due).
    Counted {
        /// How many starts of the new binary, this one included.
        starts: u32,
        /// How many of its runs ended abnormally so far.
        abnormal_exits: u32,
    },
    /// `k0s.prev` is live again.
    RolledBack {
        /// Why.
        why: String,
    },
    /// A rollback was due and is recorded, but the live binary stays: `k0s.prev` holds its
    /// very bytes (a reinstall of the same version), or it is not the file the update put in
    /// place (installed by hand since). Only reported.
    Kept {
        /// Why the rollback was due.
        why: String,
    },
}

/// The guard before a start (`k0s.prev post-update-guard`): counts the start of the new
/// binary under watch (and the abnormal exit of the one before), puts `k0s.prev` back when
/// the watch says so; finishes a rollback a killed process left half done. Safe without a
/// marker, a watch or a `k0s.prev` (then it does nothing). Run once per start.
pub fn guard(files: &Files, now: i64) -> anyhow::Result<Guarded> {
    let Some((marker, watch)) = files.read()? else { return Ok(Guarded::Nothing) };
    match decide(&watch.view(), Caller::Guard) {
        Verdict::RecordStart { abnormal_exit } => {
            let counted = record_start(files, marker, abnormal_exit, true)?;
            Ok(Guarded::Counted { starts: counted.starts, abnormal_exits: counted.abnormal_exits })
        }
        Verdict::RollBack { reason, why } => {
            if !roll_back(files, marker, reason, &why, now)? {
                Ok(Guarded::Nothing)
            } else if still_the_new_bytes(files, &watch)? {
                Ok(Guarded::Kept { why })
            } else {
                Ok(Guarded::RolledBack { why })
            }
        }
        Verdict::Nothing
        | Verdict::KeepWatching
        | Verdict::Counted
        | Verdict::WriteProof
        | Verdict::Proven
        | Verdict::Report => {
            finish(files, &watch)?;
            Ok(Guarded::Nothing)
        }
    }
}

/// What [`at_start`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtStart {
    /// No watch concerns this process.
    Nothing,
    /// This process is the new binary under watch; its start is counted.
    Watched(Watching),
    /// This process is the new binary and the watch rolled it back just now: restart into
    /// the live binary (the proven one).
    RolledBack {
        /// Why.
        why: String,
    },
    /// This process is the proven binary after a rollback that is not reported yet.
    Report(Report),
}

/// The rollback the proven binary reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The metric label (`crashed`, `unhealthy`).
    pub reason: String,
    /// Why, in words.
    pub why: String,
    /// The version put back.
    pub from: String,
    /// The version rolled back.
    pub to: String,
    /// Nothing was put back: the live binary stays (`k0s.prev` had its very bytes, or it is
    /// not the file the update put in place).
    pub kept: bool,
}

/// The check first thing at the start of a node process running `version`: counts the
/// start of the new binary under watch (and the abnormal exit of its previous start), rolls
/// back after the third abnormal exit or after the window, or finds a rollback to report.
pub fn at_start(files: &Files, version: &str, now: i64) -> anyhow::Result<AtStart> {
    let Some((marker, watch)) = files.read()? else { return Ok(AtStart::Nothing) };
    let caller = match &watch.state {
        // A run back to the same version (a forceupdate that reinstalled it): whichever
        // binary starts after its rollback is the one to report it.
        WatchState::RolledBack { .. } if watch.from == watch.to => Caller::Previous,
        WatchState::Watching | WatchState::Proven { .. } | WatchState::RolledBack { .. } => {
            if watch.is_about(version) { Caller::Starting } else { Caller::Previous }
        }
    };
    match decide(&watch.view(), caller) {
        Verdict::RecordStart { abnormal_exit } => {
            record_start(files, marker, abnormal_exit, false)?;
            Ok(AtStart::Watched(Watching { files: files.clone(), since: watch.since }))
        }
        Verdict::Counted => {
            files.write(marker, |w| w.counted = false)?;
            info!(
                starts = watch.starts,
                abnormal_exits = watch.abnormal_exits,
                "the new binary is watched after the update (this start counted by the guard)"
            );
            Ok(AtStart::Watched(Watching { files: files.clone(), since: watch.since }))
        }
        Verdict::RollBack { reason, why } => {
            if roll_back(files, marker, reason, &why, now)? {
                Ok(AtStart::RolledBack { why })
            } else {
                Ok(AtStart::Nothing)
            }
        }
        Verdict::Report => match &watch.state {
            WatchState::RolledBack { reason, why, .. } => {
                finish(files, &watch)?;
                Ok(AtStart::Report(Report {
                    reason: reason.clone(),
                    why: why.clone(),
                    from: watch.from.clone(),
                    to: watch.to.clone(),
                    kept: still_the_new_bytes(files, &watch)?,
                }))
            }
            WatchState::Watching | WatchState::Proven { .. } => Ok(AtStart::Nothing),
        },
        Verdict::Nothing | Verdict::KeepWatching | Verdict::WriteProof | Verdict::Proven => {
            if let Err(err) = finish(files, &watch) {
                warn!(error = %format!("{err:#}"), "could not finish an interrupted rollback");
            }
            Ok(AtStart::Nothing)
        }
    }
}

/// Records a start of the new binary (and the abnormal exit of the one before, if so);
/// `by_guard`: the guard counts the start that follows it. Returns the watch as recorded.
fn record_start(
    files: &Files,
    marker: RestartMarker,
    abnormal_exit: bool,
    by_guard: bool,
) -> anyhow::Result<WatchRecord> {
    let mut counted = None;
    files.write(marker, |w| {
        w.starts += 1;
        w.abnormal_exits += u32::from(abnormal_exit);
        w.running = true;
        w.counted = by_guard;
        counted = Some(w.clone());
    })?;
    let counted = counted.context("the marker has no watch")?;
    info!(
        starts = counted.starts,
        abnormal_exits = counted.abnormal_exits,
        by_guard,
        window = %autopilot_api::duration::format(Duration::from_secs(counted.window_secs)),
        "the new binary is watched after the update"
    );
    Ok(counted)
}

/// Records a clean stop of the new binary running `version` (SIGTERM, or an exit for a
/// restart): its next start is not an abnormal exit. Best effort.
pub fn stopped_cleanly(files: &Files, version: &str) {
    let result = files.read().and_then(|found| match found {
        Some((marker, watch))
            if matches!(watch.state, WatchState::Watching)
                && watch.running
                && watch.is_about(version) =>
        {
            files.write(marker, |w| w.running = false)
        }
        Some(_) | None => Ok(()),
    });
    if let Err(err) = result {
        warn!(error = %format!("{err:#}"), "could not record the clean stop in the restart marker");
    }
}

/// Records that the rollback was reported.
pub fn reported(files: &Files) -> anyhow::Result<()> {
    let Some((marker, watch)) = files.read()? else { return Ok(()) };
    match watch.state {
        WatchState::RolledBack { reported: false, .. } => files.write(marker, |w| {
            if let WatchState::RolledBack { reported, .. } = &mut w.state {
                *reported = true;
            }
        }),
        WatchState::RolledBack { reported: true, .. }
        | WatchState::Watching
        | WatchState::Proven { .. } => Ok(()),
    }
}

/// Rolls back: records it in the marker (`reason`, `why`), then [`finish`]es it. `false`
/// (and nothing done) when there is no `k0s.prev` to put back.
fn roll_back(
    files: &Files,
    marker: RestartMarker,
    reason: Reason,
    why: &str,
    now: i64,
) -> anyhow::Result<bool> {
    let previous = files.previous_path();
    if !previous.is_file() {
        warn!(%why, previous = %previous.display(), "a rollback is due, but there is no previous binary to put back");
        return Ok(false);
    }
    warn!(reason = reason.as_str(), %why, "rolling back to the previous binary after the update");
    let mut rolled = None;
    // Crash safety: the marker first. From then on the decision stands, and whoever reads
    // the marker next (the guard, or any start) finishes the file moves.
    files.write(marker, |w| {
        w.running = false;
        w.counted = false;
        w.state = WatchState::RolledBack {
            reason: reason.as_str().to_string(),
            why: why.to_string(),
            at: now,
            reported: false,
        };
        rolled = Some(w.clone());
    })?;
    if let Some(watch) = rolled {
        finish(files, &watch)?;
    }
    Ok(true)
}

/// Finishes a recorded rollback: while the live binary is still the new one (the file the
/// swap put in place, with the recorded digest), links it aside as `k0s.refused.new` and renames a link of `k0s.prev`
/// over it; then makes `k0s.refused.new` not executable and renames it to `k0s.refused`.
/// Every step can be repeated after a crash; the live path always holds a whole binary.
///
/// A `k0s.prev` with the new binary's very bytes (a `forceupdate` that reinstalled them)
/// leaves nothing to roll back: the files stay as they are and the rollback is only
/// reported. And no file that shares its inode with the live binary or `k0s.prev` is ever
/// made non-executable: such a link is removed instead.
pub fn finish(files: &Files, watch: &WatchRecord) -> anyhow::Result<()> {
    if !matches!(watch.state, WatchState::RolledBack { .. }) {
        return Ok(());
    }
    let live = &files.live;
    let dir = parent_dir(live);
    let previous = files.previous_path();
    let refused_new = files.sibling(".refused.new");
    let live_sha = sha256_file(live).context("hashing the live binary")?;
    let same_file = watch.to_file.is_none_or(|file| FileId::of(live) == Some(file));
    if !same_file && live_sha.as_deref() == Some(watch.to_sha256.as_str()) {
        info!(live = %live.display(), "the live binary has the new binary's bytes but is another file (put in place since the swap): left alone");
    }
    if same_file && live_sha.as_deref() == Some(watch.to_sha256.as_str()) {
        let previous_sha = sha256_file(&previous).context("hashing the previous binary")?;
        anyhow::ensure!(previous_sha.is_some(), "no {} to put back", previous.display());
        if previous_sha == live_sha {
            warn!(live = %live.display(), previous = %previous.display(), "the previous binary has the new binary's bytes: nothing to put back, the rollback is only reported");
        } else {
            put_back(live, &previous, &refused_new, files)?;
            sync_dir(&dir)?;
            info!(live = %live.display(), "the previous binary is live again");
        }
    }
    if refused_new.exists() {
        if shares_inode(&refused_new, live) || shares_inode(&refused_new, &previous) {
            // A link to a binary that runs, or runs after a rollback: it stays executable.
            remove_if_present(&refused_new)?;
            return Ok(());
        }
        // Kept to be looked at, never to be run by mistake (as a trial refusal).
        std::fs::set_permissions(&refused_new, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} not executable", refused_new.display()))?;
        let refused = files.refused_path();
        std::fs::rename(&refused_new, &refused)
            .with_context(|| format!("renaming to {}", refused.display()))?;
        sync_dir(&dir)?;
    }
    Ok(())
}

/// Whether the live binary still has the bytes the watch was about (after a finished
/// rollback: nothing was put back).
fn still_the_new_bytes(files: &Files, watch: &WatchRecord) -> anyhow::Result<bool> {
    let live_sha = sha256_file(&files.live).context("hashing the live binary")?;
    Ok(live_sha.as_deref() == Some(watch.to_sha256.as_str()))
}

/// Links the live binary aside as `refused_new`, then renames a link of `previous` over the
/// live path.
fn put_back(live: &Path, previous: &Path, refused_new: &Path, files: &Files) -> anyhow::Result<()> {
    remove_if_present(refused_new)?;
    link_or_copy(live, refused_new)?;
    let putting_back = files.sibling(".rollback.tmp");
    remove_if_present(&putting_back)?;
    link_or_copy(previous, &putting_back)?;
    std::fs::rename(&putting_back, live)
        .with_context(|| format!("renaming {} to {}", putting_back.display(), live.display()))
}

/// Whether `a` and `b` are the same file (device and inode).
fn shares_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

fn link_or_copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        std::fs::File::open(to).and_then(|f| f.sync_all())?;
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// Whether this node's update agent holds an established watch of its own object (its Node
/// or ControlNode): what "healthy" means for the post-update watch, with the health of the
/// Kubernetes components where `k0s` runs them. The agent sets it when its watch delivered
/// its object and clears it when the watch fails; cheap to clone.
pub type Established = autopilot_shell::health::Health;

/// The watch of the running new binary (from [`at_start`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watching {
    files: Files,
    /// Which watch (its start): a marker with another one is not this watch any more.
    since: i64,
}

impl PartialEq for Files {
    fn eq(&self, other: &Self) -> bool {
        self.live == other.live && self.data_dir == other.data_dir
    }
}

impl Eq for Files {}

/// How the watch of the running new binary ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// Proven after the update, or the watch is not this process's any more.
    Over,
    /// Rolled back: restart into the live (proven) binary.
    RolledBack {
        /// Why.
        why: String,
    },
}

/// The requests that need the datastore, made with the node's own identity on its own
/// object: what the post-update watch counts and proves with (not `/version`, which the API
/// server answers without etcd, nor an open watch, which stays open while etcd is away).
pub trait Datastore {
    /// Whether a quorum read of the node's own object succeeded now.
    fn reads(&mut self) -> impl std::future::Future<Output = bool>;
    /// Whether writing `token` on the node's own object went through and a quorum read sees
    /// it there now.
    fn writes(&mut self, token: &str) -> impl std::future::Future<Output = bool>;
}

/// The node's own object (its Node or ControlNode) as the [`Datastore`] of its watch.
pub struct OwnObject<K> {
    api: kube::Api<K>,
    name: String,
    /// This process runs the API server its client talks to: time counts whether or not
    /// reads succeed (the API server is on trial), the proof still needs the write.
    counts_without_reads: bool,
}

impl<K> OwnObject<K> {
    /// The object `name` of kind `K`, read and written with `client` (the node's identity).
    pub fn new(client: kube::Client, name: impl Into<String>) -> Self
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>,
    {
        Self { api: kube::Api::all(client), name: name.into(), counts_without_reads: false }
    }

    /// The same, counting time whether or not its reads succeed (see the field).
    pub fn counting_without_reads(self) -> Self {
        Self { counts_without_reads: true, ..self }
    }
}

impl<K> Datastore for OwnObject<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    async fn reads(&mut self) -> bool {
        // No resourceVersion: a quorum read, which etcd must answer.
        self.counts_without_reads
            || matches!(
                tokio::time::timeout(PROBE_TIMEOUT, self.api.get(&self.name)).await,
                Ok(Ok(_))
            )
    }

    async fn writes(&mut self, token: &str) -> bool {
        use kube::api::{Patch, PatchParams};
        let key = autopilot_api::keys::ANNOTATION_POST_UPDATE_PROOF;
        let patch = serde_json::json!({ "metadata": { "annotations": { key: token } } });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let written = self.api.patch(&self.name, &params, &patch);
        match tokio::time::timeout(PROBE_TIMEOUT, written).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => {
                warn!(error = %err, "post-update watch: cannot write the proof on its own object");
                return false;
            }
            Err(_elapsed) => return false,
        }
        match tokio::time::timeout(PROBE_TIMEOUT, self.api.get(&self.name)).await {
            Ok(Ok(object)) => {
                object.meta().annotations.as_ref().and_then(|a| a.get(key))
                    == Some(&token.to_string())
            }
            Ok(Err(_)) | Err(_) => false,
        }
    }
}

impl Watching {
    /// Looks every second until the new binary is proven (healthy, per `healthy`, for a
    /// minute in a row while its quorum reads succeed, then a write of its own read back)
    /// or the window, counted while its quorum reads succeed, ends first (then rolls back).
    pub async fn run(self, healthy: Established, mut store: impl Datastore) -> Watched {
        use tokio::time::Instant;
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut healthy_since: Option<Instant> = None;
        let (mut answered, mut wrote) = (false, false);
        // Time counted while the quorum reads succeeded, not recorded in the marker yet.
        let mut unrecorded = Duration::ZERO;
        let (mut last_tick, mut next_probe) = (Instant::now(), Instant::now());
        let mut next_record = Instant::now() + RECORD_EVERY;
        let mut writes = 0u32;
        loop {
            ticker.tick().await;
            let now = Instant::now();
            if answered {
                unrecorded += now - last_tick;
            }
            last_tick = now;
            let probe = now >= next_probe;
            if probe {
                answered = store.reads().await;
                next_probe = Instant::now() + PROBE_EVERY;
            }
            healthy_since = match (healthy.get() && answered, healthy_since) {
                (true, Some(since)) => Some(since),
                (true, None) => Some(Instant::now()),
                (false, _) => None,
            };
            let healthy_for = healthy_since.map(|s| s.elapsed()).unwrap_or_default();
            let record = now >= next_record;
            match self.look(healthy_for, wrote, unrecorded, record) {
                Ok(Looked::Over(watched)) => return watched,
                Ok(Looked::Watching { recorded, write_proof }) => {
                    unrecorded = unrecorded.saturating_sub(recorded);
                    if record {
                        next_record = now + RECORD_EVERY;
                    }
                    // A write at most once per probe interval, each with its own token.
                    if write_proof && probe {
                        writes += 1;
                        wrote = store.writes(&format!("{}-{writes}", self.since)).await;
                    }
                }
                Err(err) => warn!(error = %format!("{err:#}"), "post-update watch: cannot look"),
            }
        }
    }

    /// One look: the marker's watch with `unrecorded` counted time added, judged; the count
    /// is recorded when `record` (or with any verdict that writes the marker).
    fn look(
        &self,
        healthy_for: Duration,
        wrote: bool,
        unrecorded: Duration,
        record: bool,
    ) -> anyhow::Result<Looked> {
        let Some((mut marker, watch)) = self.files.read()? else {
            return Ok(Looked::Over(Watched::Over));
        };
        if watch.since != self.since {
            return Ok(Looked::Over(Watched::Over));
        }
        let counted = Duration::from_secs(unrecorded.as_secs());
        let answered_secs = watch.answered_secs.saturating_add(counted.as_secs());
        if let Some(w) = marker.watch.as_mut() {
            w.answered_secs = answered_secs;
        }
        let now = now();
        let judged = WatchRecord { answered_secs, ..watch };
        let keep_watching = |write_proof: bool| -> anyhow::Result<Looked> {
            if record && !counted.is_zero() {
                self.files.write(marker.clone(), |_| {})?;
                Ok(Looked::Watching { recorded: counted, write_proof })
            } else {
                Ok(Looked::Watching { recorded: Duration::ZERO, write_proof })
            }
        };
        match decide(&judged.view(), Caller::Running { healthy_for, wrote }) {
            Verdict::KeepWatching => keep_watching(false),
            Verdict::WriteProof => keep_watching(true),
            Verdict::Proven => {
                self.files.write(marker, |w| w.state = WatchState::Proven { at: now })?;
                info!(healthy_for = ?healthy_for, answered_secs, "the new binary is proven after the update (a write of its own read back with a quorum read); the watch is over");
                Ok(Looked::Over(Watched::Over))
            }
            Verdict::RollBack { reason, why } => {
                if roll_back(&self.files, marker, reason, &why, now)? {
                    Ok(Looked::Over(Watched::RolledBack { why }))
                } else {
                    Ok(Looked::Over(Watched::Over))
                }
            }
            Verdict::Nothing | Verdict::RecordStart { .. } | Verdict::Counted | Verdict::Report => {
                Ok(Looked::Over(Watched::Over))
            }
        }
    }
}

/// What one look of the running new binary found.
enum Looked {
    /// Still watching; `recorded` of the counted time is now in the marker.
    Watching {
        /// How much of the counted time the marker holds now.
        recorded: Duration,
        /// Healthy long enough: write the proof on its own object.
        write_proof: bool,
    },
    /// The watch is over for this process.
    Over(Watched),
}

/// The reason of the Event a node writes on its own object after a post-update rollback.
pub const EVENT_REASON: &str = "RolledBackAfterUpdate";

/// How many times the proven binary tries to write the Event about a rollback before it
/// gives up (the log line and the metric are there anyway).
const EVENT_ATTEMPTS: u32 = 10;

/// Reports a rollback from the proven binary: an Event on `regarding` (this node's own
/// object, as `reporter`), retried while the API server does not take it, then records the
/// report in the marker. The caller has logged it and counted it already.
pub async fn report_event(
    client: kube::Client,
    reporter: autopilot_shell::events::Reporter,
    regarding: k8s_openapi::api::core::v1::ObjectReference,
    files: Files,
    report: Report,
) {
    use autopilot_shell::events::{Event, EventType, publish};
    let Report { reason: _, why, from, to, kept } = report;
    let to = if to.is_empty() { "the new binary".to_string() } else { to };
    let note = if kept {
        // Nothing was put back (a reinstall of the same bytes, or a binary put in by hand).
        format!(
            "{to} failed after the update ({why}); the live binary stays: k0s.prev holds the same \
             bytes, or it is not the file the update put in place"
        )
    } else {
        format!("rolled back from {to} to {from} after the update: {why}")
    };
    let event = Event {
        regarding,
        action: "PostUpdateWatch",
        type_: EventType::Warning,
        reason: EVENT_REASON,
        note,
    };
    let mut delay = Duration::from_secs(1);
    for attempt in 1..=EVENT_ATTEMPTS {
        let written = match publish(&client, &reporter, &event).await {
            Ok(()) => Ok(()),
            // A node's own identity may write core Events only (the Node authorizer).
            Err(kube::Error::Api(response)) if response.code == 403 => {
                publish_core(&client, &reporter, &event).await
            }
            Err(err) => Err(err),
        };
        match written {
            Ok(()) => {
                info!(reason = EVENT_REASON, "rollback after the update reported");
                break;
            }
            Err(err) if attempt == EVENT_ATTEMPTS => {
                warn!(error = %err, "cannot write the Event about the rollback after the update; giving up");
            }
            Err(err) => {
                warn!(error = %err, retry_in = ?delay, "cannot write the Event about the rollback after the update");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
    if let Err(err) = reported(&files) {
        warn!(error = %format!("{err:#}"), "cannot record the report in the restart marker");
    }
}

/// Writes `event` as a core `v1` Event (what the Node authorizer lets a node write).
async fn publish_core(
    client: &kube::Client,
    reporter: &autopilot_shell::events::Reporter,
    event: &autopilot_shell::events::Event,
) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    let namespace = autopilot_api::keys::EVENT_NAMESPACE;
    let now = jiff::Timestamp::now();
    let name = event.regarding.name.clone().unwrap_or_else(|| "node".to_string());
    let body = CoreEvent {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        involved_object: event.regarding.clone(),
        action: Some(event.action.to_string()),
        reason: Some(event.reason.to_string()),
        message: Some(autopilot_api::text::truncate(
            &event.note,
            autopilot_shell::events::NOTE_MAX_BYTES,
        )),
        type_: Some(event.type_.as_str().to_string()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_component: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        source: Some(EventSource {
            component: Some(reporter.controller.clone()),
            host: Some(reporter.instance.clone()),
        }),
        ..Default::default()
    };
    kube::Api::<CoreEvent>::namespaced(client.clone(), namespace)
        .create(&kube::api::PostParams::default(), &body)
        .await
        .map(drop)
}

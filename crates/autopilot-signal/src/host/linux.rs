//! [`Host`] on a real Linux machine: files next to the running binary and in the data
//! directory (REF §7.5, §7.7).

use std::collections::HashMap;
use std::io::{self, Read as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use autopilot_api::signal::{CommandRollback, RollbackOf, UpdateRef};
use sha2::{Digest as _, Sha256};

use super::{
    BundleRecord, FileId, HostError, Observed, RestartMarker, RestartState, Result, SignalKey,
    SignatureSource, StagedBundle, StagedRecord, SwapKeeps, TrialState, WatchRecord, WatchStart,
    WatchState, expected_sha256, judge_previous, judge_self_test, what_the_swap_keeps,
};
use crate::download::{DownloadConfig, Downloader, Target, parent_dir, sync_dir};
use crate::host::Host;
use crate::signature::{self, Expected, Signature, TrustedKeys};

/// The keys a node checks payload signatures with (DESIGN §14), and whether it requires
/// signed airgap bundles.
#[derive(Clone, Debug, Default)]
pub struct Signing {
    /// `--payload-keys`: with any, every `k0supdate` payload must be signed by one of them.
    pub keys: TrustedKeys,
    /// `--require-signed-bundles`: airgap bundles must be signed too (otherwise a bundle's
    /// signature is checked only when the Plan gives one).
    pub require_signed_bundles: bool,
    /// Why every payload is refused, when this node required signed payloads before and
    /// its keys are gone ([`crate::signature::KeysRule::RefuseAll`]).
    pub refuse_all: Option<String>,
}

/// What a signature is over, for messages and for which rule applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    Binary,
    Bundle,
}

impl Payload {
    fn describe(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::Bundle => "airgap bundle",
        }
    }
}

/// How long a staged binary's `version` may run in its self-test.
pub const SELF_TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most output of a self-test that is kept (the first line is what counts).
const SELF_TEST_OUTPUT_LIMIT: u64 = 64 * 1024;

/// The real host. Given the live binary `D/k0s`: the staged binary is `D/k0s.tmp`, the
/// previous one `D/k0s.prev`, a binary refused by its trial `D/k0s.refused`, download temp
/// files `D/.k0s.tmp.<random>.tmp`; the restart marker is `<data-dir>/autopilot-restart.json`,
/// the staging record `<data-dir>/autopilot-staged.json`, and bundles go to
/// `<data-dir>/images` (downloaded into `<data-dir>/images.incoming` first; the file a
/// bundle replaced is kept in `<data-dir>/images.prev`, described by
/// `<data-dir>/autopilot-bundle.json`).
#[derive(Clone, Debug)]
pub struct LinuxHost {
    live: PathBuf,
    data_dir: PathBuf,
    downloader: Downloader,
    signing: Signing,
    instance: String,
    digests: DigestCache,
    /// The file this process runs (device and inode of `live` when the host was made): the
    /// proven binary, the only one a swap keeps as `k0s.prev`.
    running: Option<(u64, u64)>,
}

/// Which file a path named when it was hashed: a rename over the path, a rewrite or a
/// truncation changes at least one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_nsec: i128,
    ctime_nsec: i128,
}

impl FileIdentity {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_nsec: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_nsec: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

/// SHA-256 of files, remembered per path while the file's identity is unchanged: the agent
/// observes the host on every signal change, and re-reading a 100+ MiB binary each time
/// made every step cost a full hash.
#[derive(Clone, Debug, Default)]
struct DigestCache(Arc<Mutex<HashMap<PathBuf, (FileIdentity, String)>>>);

impl DigestCache {
    /// The digest of `path` (`None` if it does not exist), hashing only when the file
    /// changed since the last call.
    async fn sha256(&self, path: &Path) -> Result<Option<String>> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.forget(path);
                return Ok(None);
            }
            Err(e) => return Err(HostError::io("reading metadata of", path, e)),
        };
        let identity = FileIdentity::of(&meta);
        if let Some((known, digest)) = self.lock().get(path)
            && *known == identity
        {
            return Ok(Some(digest.clone()));
        }
        let digest = sha256_file_async(path.to_path_buf()).await?;
        match &digest {
            // Only remember the digest if the file did not change while it was read.
            Some(d) if std::fs::metadata(path).is_ok_and(|m| FileIdentity::of(&m) == identity) => {
                self.lock().insert(path.to_path_buf(), (identity, d.clone()));
            }
            Some(_) | None => self.forget(path),
        }
        Ok(digest)
    }

    fn forget(&self, path: &Path) {
        self.lock().remove(path);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (FileIdentity, String)>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LinuxHost {
    /// A host replacing `live` (the running executable, symlinks resolved, captured at
    /// startup) and keeping its state in `data_dir`. Construct it once per process: its
    /// instance id tells this process from the one before a restart.
    pub fn new(live: PathBuf, data_dir: PathBuf, config: DownloadConfig) -> Result<Self> {
        let instance = process_instance().to_string();
        let running = std::fs::metadata(&live).ok().map(|m| (m.dev(), m.ino()));
        let host = Self {
            live,
            data_dir,
            downloader: Downloader::new(config)?,
            signing: Signing::default(),
            instance,
            digests: DigestCache::default(),
            running,
        };
        // Free the disk space a killed download holds as early as possible.
        host.remove_leftovers();
        host.remove_record_temp_files();
        if let Err(err) = host.finish_rollback() {
            tracing::warn!(error = %err.reason(), "could not finish an interrupted rollback");
        }
        Ok(host)
    }

    /// The same host, counting downloaded bytes in `metrics`.
    pub fn with_metrics(self, metrics: &crate::metrics::Metrics) -> Self {
        Self { downloader: self.downloader.counting_bytes(metrics.download_bytes.clone()), ..self }
    }

    /// The same host checking payload signatures with `signing`.
    pub fn with_signing(self, signing: Signing) -> Self {
        Self { signing, ..self }
    }

    /// The signature a `what` payload must carry, from `source`: `None` when this node
    /// checks none (it trusts no key, or the Plan gives no signature for a bundle it does
    /// not require signed). `Err` when one is required and missing, cannot be fetched, or
    /// is in no accepted format.
    async fn expected_signature(
        &self,
        what: Payload,
        source: &SignatureSource,
    ) -> Result<Option<Signature>> {
        if let Some(reason) = &self.signing.refuse_all {
            return Err(HostError::Signature { reason: reason.clone() });
        }
        let keys = &self.signing.keys;
        if keys.is_empty() {
            return Ok(None);
        }
        let required = match what {
            Payload::Binary => true,
            Payload::Bundle => self.signing.require_signed_bundles,
        };
        let text = match (&source.inline, &source.url) {
            (Some(inline), _) => inline.as_bytes().to_vec(),
            (None, Some(url)) => {
                self.downloader.fetch_small(url, signature::MAX_SIGNATURE_BYTES).await.map_err(
                    |err| HostError::Signature {
                        reason: format!(
                            "fetching the {} signature: {}",
                            what.describe(),
                            HostError::from(err).reason()
                        ),
                    },
                )?
            }
            (None, None) if required => {
                return Err(HostError::Signature {
                    reason: format!(
                        "the Plan gives no signature for the {}, and this node requires one by \
                         key {}",
                        what.describe(),
                        keys.ids().join(" or ")
                    ),
                });
            }
            (None, None) => return Ok(None),
        };
        signature::parse_signature(&text).map(Some).map_err(|why| HostError::Signature {
            reason: format!("the {} signature is unusable: {why}", what.describe()),
        })
    }

    /// The same host with an explicit process instance id.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }

    /// This process instance's id (recorded in the restart marker).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The live binary.
    pub fn live_path(&self) -> &Path {
        &self.live
    }

    /// Where a downloaded, verified binary waits for the swap.
    pub fn staged_path(&self) -> PathBuf {
        self.sibling(".tmp")
    }

    /// Where the binary replaced by the last swap is kept.
    pub fn previous_path(&self) -> PathBuf {
        self.sibling(".prev")
    }

    /// Where a binary refused by its trial boot is kept for inspection.
    pub fn refused_path(&self) -> PathBuf {
        self.sibling(".refused")
    }

    /// The restart marker.
    pub fn marker_path(&self) -> PathBuf {
        self.data_dir.join("autopilot-restart.json")
    }

    /// The staging record: which signal the staged binary is for, and whether it passed
    /// its self-test.
    pub fn staged_record_path(&self) -> PathBuf {
        self.data_dir.join("autopilot-staged.json")
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Where airgap bundles go.
    pub fn images_dir(&self) -> PathBuf {
        self.data_dir.join("images")
    }

    /// Where an airgap bundle is downloaded before it goes into the images directory (a
    /// sibling: whatever reads the images directory never sees a bundle that is not whole,
    /// nor one kept for a rollback).
    pub fn incoming_bundles_dir(&self) -> PathBuf {
        self.data_dir.join("images.incoming")
    }

    /// Where a pre-staged airgap bundle waits for its update (`prestage: true`).
    pub fn staged_bundles_dir(&self) -> PathBuf {
        self.data_dir.join("images.staged")
    }

    /// The record of the pre-staged airgap bundle ([`StagedBundle`]).
    pub fn staged_bundle_record_path(&self) -> PathBuf {
        self.data_dir.join("autopilot-staged-bundle.json")
    }

    /// The pre-staged bundle for `url` with digest `sha256`, if one waits whole: its path.
    /// When the update expects a signature (`signed`), only a bundle a key the node trusts
    /// now verified (see [`StagedRecord::judge`]).
    async fn staged_bundle(
        &self,
        url: &str,
        sha256: Option<&str>,
        signed: bool,
    ) -> Option<PathBuf> {
        let want = sha256?.trim().to_ascii_lowercase();
        let bytes = std::fs::read(self.staged_bundle_record_path()).ok()?;
        let record: StagedBundle = serde_json::from_slice(&bytes).ok()?;
        if record.url != url || record.sha256 != want || record.name.contains('/') {
            return None;
        }
        if self.signing.refuse_all.is_some() {
            // The node's keys are gone: nothing staged is taken, every payload is refused.
            return None;
        }
        let trusted = self.signing.keys.ids();
        if signed && !record.signed_by.as_deref().is_some_and(|key| trusted.contains(&key)) {
            tracing::info!(
                url,
                "the pre-staged bundle was not verified by a key this node trusts now; downloading it again"
            );
            return None;
        }
        let path = self.staged_bundles_dir().join(&record.name);
        // The digest is checked again: the record says what was staged, the file must be it.
        let actual = self.digests.sha256(&path).await.ok().flatten()?;
        (actual == want).then_some(path)
    }

    /// Where the file the last airgap bundle replaced is kept, for a rollback.
    pub fn kept_bundles_dir(&self) -> PathBuf {
        self.data_dir.join("images.prev")
    }

    /// The record of what the last airgap bundle replaced ([`BundleRecord`]).
    pub fn bundle_record_path(&self) -> PathBuf {
        self.data_dir.join("autopilot-bundle.json")
    }

    fn read_bundle_record(&self) -> Option<BundleRecord> {
        let bytes = std::fs::read(self.bundle_record_path()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Keeps what the images directory holds under `name` (or that it holds nothing) before
    /// the bundle of `signal` is put there. Once per signal: after a crash between keeping
    /// and storing, the images directory may already hold the new bundle, which must not be
    /// kept as the previous one.
    fn keep_replaced_bundle(&self, signal: &SignalKey, name: &str) -> Result<()> {
        if self.read_bundle_record().is_some_and(|r| &r.signal == signal && r.name == name) {
            return Ok(());
        }
        // Crash safety: the record goes first and comes back last, so it never describes a
        // half-kept file.
        remove_if_present(&self.bundle_record_path())?;
        let kept = self.kept_bundles_dir();
        match std::fs::read_dir(&kept) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    remove_if_present(&entry.path())?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(HostError::io("reading", &kept, e)),
        }
        std::fs::create_dir_all(&kept).map_err(|e| HostError::io("creating", &kept, e))?;
        let current = self.images_dir().join(name);
        let keep = kept.join(name);
        // A link is enough: bundles are only ever replaced by a rename, never rewritten.
        let replaced = match std::fs::hard_link(&current, &keep) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(_) => {
                std::fs::copy(&current, &keep)
                    .map_err(|e| HostError::io("keeping the replaced bundle as", &keep, e))?;
                true
            }
        };
        sync_dir(&kept)?;
        let record = BundleRecord { signal: signal.clone(), name: name.to_owned(), replaced };
        self.write_json(&self.bundle_record_path(), &record)
    }

    /// Copies `k0s.prev` as the staged binary: under a locked temp name, then renamed, so
    /// the staged path only ever holds a whole copy. A copy, not a link: a refused staged
    /// binary is made non-executable, which must never touch `k0s.prev`.
    fn copy_previous_to_staged(&self) -> Result<()> {
        let previous = self.previous_path();
        let staged = self.staged_path();
        let mut source = match std::fs::File::open(&previous) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(HostError::Rollback {
                    reason: format!("no {} to roll back to", display_name(&previous)),
                });
            }
            Err(e) => return Err(HostError::io("opening", &previous, e)),
        };
        let dir = parent_dir(&self.live);
        let mut temp = tempfile::Builder::new()
            .prefix(&format!(".{}.", display_name(&staged)))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(|e| HostError::io("creating a temp file in", &dir, e))?;
        // Held while the copy is made: how `remove_leftovers` tells it from a leftover.
        temp.as_file()
            .try_lock()
            .map_err(|e| HostError::io("locking", temp.path(), io::Error::other(e.to_string())))?;
        io::copy(&mut source, temp.as_file_mut())
            .and_then(|_| temp.as_file().sync_all())
            .map_err(|e| HostError::io("copying the previous binary to", temp.path(), e))?;
        temp.persist(&staged).map_err(|e| {
            HostError::io("renaming the copy of the previous binary to", &staged, e.error)
        })?;
        sync_dir(&dir)?;
        Ok(())
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut name = self.live.file_name().unwrap_or_default().to_os_string();
        name.push(suffix);
        parent_dir(&self.live).join(name)
    }

    /// Where the binary a fleet rollback moved away from is kept, not executable.
    pub fn rejected_path(&self) -> PathBuf {
        self.sibling(".rejected")
    }

    /// Links the live binary as `to` (a copy where links are not possible), replacing
    /// whatever `to` held; nothing when there is no live binary.
    fn link_live_as(&self, to: &Path) -> Result<()> {
        remove_if_present(to)?;
        match std::fs::hard_link(&self.live, to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(_) => std::fs::copy(&self.live, to)
                .map(drop)
                .map_err(|e| HostError::io("copying the live binary to", to, e)),
        }
    }

    /// Ends a swap that moved away from the live binary ([`SwapKeeps::LiveRejected`]):
    /// `k0s.rejected.new` is made non-executable (0644) and renamed to `k0s.rejected`. A
    /// link that is still the live binary or `k0s.prev` (a swap killed before its rename)
    /// is only removed: nothing that runs is ever made non-executable. Idempotent.
    fn finish_rejected(&self) -> Result<()> {
        let rejected_new = self.sibling(".rejected.new");
        let Ok(meta) = std::fs::metadata(&rejected_new) else { return Ok(()) };
        let same = |path: &Path| {
            std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()))
        };
        if same(&self.live) || same(&self.previous_path()) {
            return remove_if_present(&rejected_new);
        }
        std::fs::set_permissions(&rejected_new, std::fs::Permissions::from_mode(0o644)).map_err(
            |e| HostError::io("making the rejected binary not executable", &rejected_new, e),
        )?;
        let rejected = self.rejected_path();
        std::fs::rename(&rejected_new, &rejected)
            .map_err(|e| HostError::io("keeping the rejected binary as", &rejected, e))?;
        sync_dir(&parent_dir(&self.live))?;
        Ok(())
    }

    /// Moves the staged binary aside as `k0s.refused` if the restart marker says it was
    /// refused (the staging record still names the refused signal): the end of a rollback a
    /// killed process did not finish. Idempotent; run at startup and by the rollback.
    pub fn finish_rollback(&self) -> Result<()> {
        let Some(marker) = self.read_marker()? else { return Ok(()) };
        let refused_signal = matches!(marker.trial, TrialState::RolledBack { .. });
        let record = self.read_staged_record();
        if !refused_signal || record.is_some_and(|r| r.signal != marker.signal) {
            return Ok(());
        }
        let refused = self.refused_path();
        match std::fs::rename(self.staged_path(), &refused) {
            Ok(()) => sync_dir(&parent_dir(&self.live))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(HostError::io("keeping the refused binary as", &refused, e)),
        }
        // Kept to be looked at, never to be run by mistake: not executable (DESIGN §14).
        {
            use std::os::unix::fs::PermissionsExt as _;
            match std::fs::set_permissions(&refused, std::fs::Permissions::from_mode(0o600)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(HostError::io(
                        "making the refused binary not executable",
                        &refused,
                        e,
                    ));
                }
            }
        }
        remove_if_present(&self.staged_record_path())
    }

    /// Removes the temp files of downloads a killed process left next to the binary and in
    /// the images directory (a download in progress is never touched).
    pub fn remove_leftovers(&self) {
        let name = self.live.file_name().map(|n| n.to_string_lossy().into_owned());
        let staged = name.map(|n| format!("{n}.tmp"));
        let mut removed = remove_leftover_temp_files(&parent_dir(&self.live), staged.as_deref());
        removed.extend(remove_leftover_temp_files(&self.images_dir(), None));
        removed.extend(remove_leftover_temp_files(&self.incoming_bundles_dir(), None));
        for path in removed {
            tracing::info!(path = %path.display(), "removed a download left by an earlier process");
        }
    }

    /// Removes the temp files of marker and staging-record writes a process killed in the
    /// middle of one left in the data directory (the record itself is either the old or the
    /// new one: it is renamed into place). Only at startup, when no write of this node is in
    /// flight.
    fn remove_record_temp_files(&self) {
        for record in [self.marker_path(), self.staged_record_path(), self.bundle_record_path()] {
            let name = record.file_name().map(|n| n.to_string_lossy().into_owned());
            for path in remove_leftover_temp_files(&self.data_dir, name.as_deref()) {
                tracing::info!(path = %path.display(), "removed a half-written record of an earlier process");
            }
        }
    }

    fn read_staged_record(&self) -> Option<StagedRecord> {
        let bytes = std::fs::read(self.staged_record_path()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write_json(&self, path: &Path, value: &impl serde::Serialize) -> Result<()> {
        write_json(&self.data_dir, path, value)
    }

    /// The version the staged binary reported in its self-test, if it passed one.
    pub fn staged_version(&self) -> Option<String> {
        self.read_staged_record().and_then(|r| r.self_tested)
    }

    fn write_marker(&self, signal: &SignalKey, trial: TrialState) -> Result<()> {
        let marker = RestartMarker {
            signal: signal.clone(),
            instance: self.instance.clone(),
            trial,
            watch: None,
        };
        self.write_json(&self.marker_path(), &marker)
    }

    /// The restart marker, if there is one.
    pub fn read_marker(&self) -> Result<Option<RestartMarker>> {
        read_marker(&self.marker_path())
    }
}

/// The restart marker at `path`, if there is one.
pub fn read_marker(path: &Path) -> Result<Option<RestartMarker>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| HostError::Marker { path: path.to_path_buf(), source }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(HostError::io("reading restart marker", path, e)),
    }
}

/// Writes `value` as JSON to `path` in `data_dir` whole: a synced temp file renamed into
/// place, then the directory synced. A reader sees the old or the new record, never half.
pub fn write_json(data_dir: &Path, path: &Path, value: &impl serde::Serialize) -> Result<()> {
    std::fs::create_dir_all(data_dir).map_err(|e| HostError::io("creating", data_dir, e))?;
    let bytes = serde_json::to_vec(value)
        .map_err(|source| HostError::Marker { path: path.to_path_buf(), source })?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(data_dir)
        .map_err(|e| HostError::io("creating a temp file in", data_dir, e))?;
    std::io::Write::write_all(&mut temp, &bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|e| HostError::io("writing", temp.path(), e))?;
    temp.persist(path).map_err(|e| HostError::io("renaming to", path, e.error))?;
    sync_dir(data_dir)?;
    Ok(())
}

/// This process's instance id (pid and start time), the same for every [`LinuxHost`] made
/// in it: a restart marker written by this process names it, and the next process (even
/// with the same pid, after an exec) has another.
pub fn process_instance() -> &'static str {
    static INSTANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    INSTANCE.get_or_init(|| {
        let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        format!("{}-{}", std::process::id(), started.as_nanos())
    })
}

/// SHA-256 of a file (lowercase hex); `None` if it does not exist.
pub fn sha256_file(path: &Path) -> Result<Option<String>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(HostError::io("opening", path, e)),
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| HostError::io("reading", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(Some(hex::encode(hasher.finalize())))
}

async fn sha256_file_async(path: PathBuf) -> Result<Option<String>> {
    tokio::task::spawn_blocking(move || sha256_file(&path)).await.map_err(HostError::Task)?
}

/// Removes download temp files (`.<name>.<random>.tmp`) in `dir` that no live download
/// owns: a download holds a lock on its temp file until it finishes, and the lock dies with
/// the process, so a file whose lock can be taken was left by a killed process. `name`
/// limits it to temp files of that target; `None` takes every hidden `.tmp` file (the
/// images directory holds only bundles). Best effort: returns what it removed.
pub fn remove_leftover_temp_files(dir: &Path, name: Option<&str>) -> Vec<PathBuf> {
    let prefix = match name {
        Some(name) => format!(".{name}."),
        None => ".".to_owned(),
    };
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return removed };
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if !file_name.starts_with(&prefix) || !file_name.ends_with(".tmp") {
            continue;
        }
        let path = entry.path();
        let Ok(file) = std::fs::File::open(&path) else { continue };
        if file.try_lock().is_ok() && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// A path's file name, for messages.
fn display_name(path: &Path) -> String {
    path.file_name().unwrap_or_default().to_string_lossy().into_owned()
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(HostError::io("removing", path, e)),
    }
}

impl Host for LinuxHost {
    async fn observe(&self, signal: &SignalKey, update: UpdateRef<'_>) -> Result<Observed> {
        let binary = match update {
            UpdateRef::Airgap(_)
            | UpdateRef::Rollback(CommandRollback { of: RollbackOf::Airgap, .. }) => false,
            UpdateRef::K0s(_)
            | UpdateRef::Rollback(CommandRollback { of: RollbackOf::K0s, .. }) => true,
        };
        // A node whose required keys are gone takes no staged payload: the download it
        // goes to instead refuses ([`Signing::refuse_all`]). A rollback needs no key.
        let refusing =
            self.signing.refuse_all.is_some() && !matches!(update, UpdateRef::Rollback(_));
        let (staged, proven) = if binary && !refusing {
            let actual = self.digests.sha256(&self.staged_path()).await?;
            let record = self.read_staged_record();
            // A rollback's staged file is a copy of `k0s.prev`: that is the digest to match.
            let want = match update {
                UpdateRef::Rollback(_) => self.digests.sha256(&self.previous_path()).await?,
                UpdateRef::K0s(_) | UpdateRef::Airgap(_) => expected_sha256(update),
            };
            // A rollback puts back the node's own proven binary: no signature to check.
            let keys = self.signing.keys.ids();
            let trusted: &[&str] = match update {
                UpdateRef::Rollback(_) => &[],
                UpdateRef::K0s(_) | UpdateRef::Airgap(_) => &keys,
            };
            let (staged, proven) = StagedRecord::judge(
                record.as_ref(),
                actual.as_deref(),
                want.as_deref(),
                signal,
                trusted,
            );
            let proven = proven
                && match update {
                    UpdateRef::Rollback(rollback) => {
                        StagedRecord::proves_rollback(record.as_ref(), signal, &rollback.version)
                    }
                    UpdateRef::K0s(_) | UpdateRef::Airgap(_) => true,
                };
            (staged, proven)
        } else {
            (false, false)
        };
        let live_sha256 =
            if binary { self.digests.sha256(&self.live).await.ok().flatten() } else { None };
        // A corrupt marker is a fact for the phase machine (the signal fails with why), not
        // an error to retry for ever.
        let (restart, rolled_back_after_update) = match self.read_marker() {
            Ok(marker) => {
                let after_update = marker
                    .as_ref()
                    .filter(|m| &m.signal == signal)
                    .and_then(|m| m.watch.as_ref())
                    .and_then(|w| match &w.state {
                        WatchState::RolledBack { why, .. } => Some(why.clone()),
                        WatchState::Watching | WatchState::Proven { .. } => None,
                    });
                (RestartState::of(marker.as_ref(), signal, &self.instance), after_update)
            }
            Err(err @ HostError::Marker { .. }) => (RestartState::Unreadable(err.reason()), None),
            Err(err) => return Err(err),
        };
        Ok(Observed { staged, proven, live_sha256, restart, rolled_back_after_update })
    }

    async fn download(
        &self,
        signal: &SignalKey,
        url: &str,
        sha256: Option<&str>,
        signature: &SignatureSource,
    ) -> Result<()> {
        let staged = self.staged_path();
        self.remove_leftovers();
        // The record must never describe a file it was not written for; and a staged file
        // not taken (another payload, or one not verified by a key trusted now) goes, so a
        // failed download leaves nothing staged.
        remove_if_present(&self.staged_record_path())?;
        remove_if_present(&staged)?;
        let signature = self.expected_signature(Payload::Binary, signature).await?;
        let expected =
            signature.as_ref().map(|signature| Expected { keys: &self.signing.keys, signature });
        let done =
            self.downloader.download_signed(url, sha256, Target::File(&staged), expected).await?;
        let record = StagedRecord {
            signal: signal.clone(),
            sha256: done.sha256,
            signed_by: done.signed_by,
            self_tested: None,
        };
        self.write_json(&self.staged_record_path(), &record)
    }

    async fn self_test(&self, signal: &SignalKey, version: &str, any_version: bool) -> Result<()> {
        let staged = self.staged_path();
        let verdict = match run_version(&staged).await {
            Ok((exit, output)) => judge_self_test(exit, &output, version, any_version),
            Err(reason) => Err(reason),
        };
        // The Kubernetes components it carries are of the minor its version names.
        if let Ok(reported) = &verdict
            && let Err(reason) = carried_kubernetes(&staged, reported).await
        {
            remove_if_present(&staged)?;
            remove_if_present(&self.staged_record_path())?;
            return Err(HostError::Carried { reason });
        }
        match verdict {
            Ok(reported) => {
                let sha256 = self.digests.sha256(&staged).await?.ok_or_else(|| {
                    HostError::SelfTest { reason: "the staged binary is gone".into() }
                })?;
                // Who verified these bytes stays on record (a record of other bytes says
                // nothing about them).
                let signed_by = self
                    .read_staged_record()
                    .filter(|r| r.sha256 == sha256)
                    .and_then(|r| r.signed_by);
                let record = StagedRecord {
                    signal: signal.clone(),
                    sha256,
                    signed_by,
                    self_tested: Some(reported),
                };
                self.write_json(&self.staged_record_path(), &record)
            }
            Err(reason) => {
                remove_if_present(&staged)?;
                remove_if_present(&self.staged_record_path())?;
                Err(HostError::SelfTest { reason })
            }
        }
    }

    async fn download_bundle(
        &self,
        signal: &SignalKey,
        url: &str,
        sha256: Option<&str>,
        signature: &SignatureSource,
    ) -> Result<PathBuf> {
        let dir = self.images_dir();
        let incoming = self.incoming_bundles_dir();
        for dir in [&dir, &incoming] {
            std::fs::create_dir_all(dir).map_err(|e| HostError::io("creating", dir, e))?;
        }
        self.remove_leftovers();
        // A bundle pre-staged for the same URL and digest is taken as it is: it was
        // downloaded and verified (signature included) when it was staged, by a key the
        // node still trusts.
        let signature = self.expected_signature(Payload::Bundle, signature).await?;
        let downloaded = match self.staged_bundle(url, sha256, signature.is_some()).await {
            Some(staged) => {
                let path = incoming.join(display_name(&staged));
                std::fs::rename(&staged, &path)
                    .map_err(|e| HostError::io("taking the pre-staged bundle to", &path, e))?;
                remove_if_present(&self.staged_bundle_record_path())?;
                path
            }
            None => {
                let expected = signature
                    .as_ref()
                    .map(|signature| Expected { keys: &self.signing.keys, signature });
                self.downloader
                    .download_signed(url, sha256, Target::Directory(&incoming), expected)
                    .await?
                    .path
            }
        };
        let name = display_name(&downloaded);
        self.keep_replaced_bundle(signal, &name)?;
        let path = dir.join(&name);
        std::fs::rename(&downloaded, &path)
            .map_err(|e| HostError::io("moving the bundle to", &path, e))?;
        sync_dir(&dir)?;
        Ok(path)
    }

    async fn stage_bundle(
        &self,
        url: &str,
        sha256: Option<&str>,
        signature: &SignatureSource,
    ) -> Result<()> {
        let dir = self.staged_bundles_dir();
        std::fs::create_dir_all(&dir).map_err(|e| HostError::io("creating", &dir, e))?;
        // The record must never describe a file it was not written for.
        remove_if_present(&self.staged_bundle_record_path())?;
        let signature = self.expected_signature(Payload::Bundle, signature).await?;
        let expected =
            signature.as_ref().map(|signature| Expected { keys: &self.signing.keys, signature });
        let done =
            self.downloader.download_signed(url, sha256, Target::Directory(&dir), expected).await?;
        let record = StagedBundle {
            url: url.to_owned(),
            sha256: done.sha256,
            name: display_name(&done.path),
            signed_by: done.signed_by,
        };
        self.write_json(&self.staged_bundle_record_path(), &record)
    }

    fn swap_binary(&self) -> Result<()> {
        let staged = self.staged_path();
        let dir = parent_dir(&self.live);
        match std::fs::File::open(&staged) {
            Ok(file) => {
                file.set_permissions(std::fs::Permissions::from_mode(0o755))
                    .and_then(|()| file.sync_all())
                    .map_err(|e| HostError::io("making executable", &staged, e))?;
            }
            // Already swapped by an earlier attempt (which may have been killed before it
            // made the rejected binary non-executable).
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.finish_rejected(),
            Err(e) => return Err(HostError::io("opening", &staged, e)),
        }
        // While the staged file exists the live binary is still the old one, so repeating
        // any of this is harmless.
        let live_identity = std::fs::metadata(&self.live).ok().map(|m| (m.dev(), m.ino()));
        let live_runs = live_identity.is_some() && live_identity == self.running;
        let keeps = if live_runs {
            let previous = sha256_file(&self.previous_path())?;
            let is_previous = |path: &Path| -> Result<bool> {
                Ok(previous.is_some() && sha256_file(path)? == previous)
            };
            what_the_swap_keeps(true, is_previous(&staged)?, is_previous(&self.live)?)
        } else {
            what_the_swap_keeps(false, false, false)
        };
        match keeps {
            // An unproven live binary (swapped in by an earlier signal and never run) must
            // not displace the last good copy.
            SwapKeeps::Nothing => {}
            // Keep the proven binary (the one this process runs): link it under a temp
            // name, then rename that over `k0s.prev`, so `k0s.prev` is always complete too.
            SwapKeeps::LiveAsPrevious => {
                let previous = self.previous_path();
                let previous_new = self.sibling(".prev.new");
                self.link_live_as(&previous_new)?;
                if previous_new.exists() {
                    std::fs::rename(&previous_new, &previous)
                        .map_err(|e| HostError::io("renaming to", &previous, e))?;
                }
            }
            // `k0s.prev` stays the fallback; the live binary is linked aside, to be made
            // non-executable once it is no longer live (`finish_rejected`).
            SwapKeeps::LiveRejected => self.link_live_as(&self.sibling(".rejected.new"))?,
        }
        std::fs::rename(&staged, &self.live)
            .map_err(|e| HostError::io("renaming the staged binary to", &self.live, e))?;
        sync_dir(&dir)?;
        remove_if_present(&self.staged_record_path())?;
        self.finish_rejected()
    }

    fn prepare_restart(&self, signal: &SignalKey) -> Result<()> {
        self.write_marker(signal, TrialState::Pending)
    }

    fn pass_trial(&self, signal: &SignalKey, watch: Option<&WatchStart>) -> Result<()> {
        let watch = match watch.filter(|w| !w.window.is_zero()) {
            // The new binary is live now: its digest is what a rollback may take out.
            Some(start) => sha256_file(&self.live)?.map(|to_sha256| WatchRecord {
                since: jiff::Timestamp::now().as_second(),
                window_secs: start.window.as_secs(),
                answered_secs: 0,
                from: start.from.clone(),
                to: start.to.clone().unwrap_or_default(),
                to_sha256,
                to_file: FileId::of(&self.live),
                starts: 0,
                abnormal_exits: 0,
                running: false,
                counted: false,
                state: WatchState::Watching,
            }),
            None => None,
        };
        let marker = RestartMarker {
            signal: signal.clone(),
            instance: self.instance.clone(),
            trial: TrialState::Passed,
            watch,
        };
        self.write_json(&self.marker_path(), &marker)
    }

    fn roll_back(&self, signal: &SignalKey, to_version: &str, reason: &str) -> Result<()> {
        // The marker first: from then on the refusal stands, and an interrupted move of the
        // refused file is finished by the next process (see `finish_rollback`).
        let trial =
            TrialState::RolledBack { to: to_version.to_string(), reason: reason.to_string() };
        self.write_marker(signal, trial)?;
        self.finish_rollback()
    }

    fn has_staged(&self) -> bool {
        self.staged_path().exists()
    }

    async fn stage_previous(&self, signal: &SignalKey, version: &str) -> Result<()> {
        // The record must never describe a file it was not written for.
        remove_if_present(&self.staged_record_path())?;
        self.copy_previous_to_staged()?;
        let staged = self.staged_path();
        let name = display_name(&self.previous_path());
        let verdict = match run_version(&staged).await {
            Ok((exit, output)) => judge_previous(&name, exit, &output, version),
            Err(reason) => Err(format!("{name} does not run: {reason}")),
        };
        match verdict {
            Ok(reported) => {
                let sha256 = self.digests.sha256(&staged).await?.ok_or_else(|| {
                    HostError::Rollback { reason: format!("the staged copy of {name} is gone") }
                })?;
                let record = StagedRecord {
                    signal: signal.clone(),
                    sha256,
                    signed_by: None,
                    self_tested: Some(reported),
                };
                self.write_json(&self.staged_record_path(), &record)
            }
            Err(reason) => {
                remove_if_present(&staged)?;
                Err(HostError::Rollback { reason })
            }
        }
    }

    fn restore_bundle(&self, signal: &SignalKey) -> Result<()> {
        let record = self.read_bundle_record();
        let record = BundleRecord::for_rollback(record.as_ref(), signal)
            .map_err(|reason| HostError::Rollback { reason })?;
        let dir = self.images_dir();
        let path = dir.join(&record.name);
        if !record.replaced {
            // The run's bundle added the file: take it away again.
            remove_if_present(&path)?;
            return if dir.exists() { sync_dir(&dir).map_err(Into::into) } else { Ok(()) };
        }
        let kept = self.kept_bundles_dir().join(&record.name);
        // Crash safety: linked under a temp name beside the kept file, then renamed over the
        // bundle: the images directory holds one whole file or the other, and the kept file
        // stays, so restoring again is harmless.
        let temp = self.kept_bundles_dir().join(format!(".{}.restore", record.name));
        remove_if_present(&temp)?;
        match std::fs::hard_link(&kept, &temp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(HostError::Rollback {
                    reason: format!("the kept airgap bundle {} is gone", kept.display()),
                });
            }
            Err(_) => {
                std::fs::copy(&kept, &temp)
                    .map_err(|e| HostError::io("copying the kept bundle to", &temp, e))?;
            }
        }
        std::fs::create_dir_all(&dir).map_err(|e| HostError::io("creating", &dir, e))?;
        std::fs::rename(&temp, &path)
            .map_err(|e| HostError::io("putting the kept bundle back as", &path, e))?;
        sync_dir(&dir)?;
        Ok(())
    }
}

/// Runs `binary version` with a clean environment and no shell, bounded by
/// [`SELF_TEST_TIMEOUT`]; returns its exit code and output (stdout, then stderr, each cut at
/// [`SELF_TEST_OUTPUT_LIMIT`]), or why it could not be run.
///
/// The binary is executable only while it runs: before and after, it stays 0600, so nothing
/// but this self-test runs a staged binary before the swap makes it the live one.
async fn run_version(binary: &Path) -> std::result::Result<(Option<i32>, String), String> {
    if let Err(e) = std::fs::set_permissions(binary, std::fs::Permissions::from_mode(0o755)) {
        return Err(format!("cannot make it executable: {e}"));
    }
    let result = match tokio::time::timeout(SELF_TEST_TIMEOUT, run_once(binary)).await {
        Ok(result) => result,
        Err(_) => Err(format!("`version` did not finish within {}s", SELF_TEST_TIMEOUT.as_secs())),
    };
    match std::fs::set_permissions(binary, std::fs::Permissions::from_mode(0o600)) {
        Ok(()) => result,
        // A self-test that failed removes the file anyway.
        Err(_) if result.is_err() => result,
        Err(e) => Err(format!("cannot make it private again after its self-test: {e}")),
    }
}

/// Whether the Kubernetes components `binary` carries are of the minor `version` names
/// (`autopilot_engine::carried::check`); a binary that carries no component set passes.
/// `Err` says which are not, or why the set cannot be read.
async fn carried_kubernetes(binary: &Path, version: &str) -> std::result::Result<(), String> {
    let path = binary.to_path_buf();
    let read = tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(&path)?;
        k0s_components::carried::read(&mut file).map_err(|err| io::Error::other(format!("{err:#}")))
    })
    .await;
    let set = match read {
        Ok(Ok(set)) => set,
        Ok(Err(err)) => return Err(format!("its component set cannot be read: {err}")),
        Err(err) => return Err(format!("reading its component set did not finish: {err}")),
    };
    let Some(set) = set else { return Ok(()) };
    let components = set.components.iter().map(|c| (c.name.as_str(), c.version.as_str()));
    autopilot_engine::carried::check(components, version)
}

/// Runs `binary version` once (see [`run_version`]).
async fn run_once(binary: &Path) -> std::result::Result<(Option<i32>, String), String> {
    use tokio::io::AsyncReadExt as _;
    let run = async {
        // A file just written can be briefly "busy" (ETXTBSY) while another thread's fork
        // still holds its write descriptor; that passes in milliseconds.
        let mut delay = std::time::Duration::from_millis(20);
        let mut child = loop {
            let spawned = tokio::process::Command::new(binary)
                .arg("version")
                .env_clear()
                .current_dir(parent_dir(binary))
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn();
            match spawned {
                Ok(child) => break child,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && delay.as_secs() < 2 => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => return Err(format!("it cannot be executed: {e}")),
            }
        };
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let out = child.stdout.take();
        let err = child.stderr.take();
        let read_out = async {
            if let Some(out) = out {
                let _ = out.take(SELF_TEST_OUTPUT_LIMIT).read_to_end(&mut stdout).await;
            }
        };
        let read_err = async {
            if let Some(err) = err {
                let _ = err.take(SELF_TEST_OUTPUT_LIMIT).read_to_end(&mut stderr).await;
            }
        };
        let ((), (), status) = tokio::join!(read_out, read_err, child.wait());
        let status = status.map_err(|e| format!("waiting for it failed: {e}"))?;
        let mut output = String::from_utf8_lossy(&stdout).into_owned();
        output.push('\n');
        output.push_str(&String::from_utf8_lossy(&stderr));
        Ok((status.code(), output))
    };
    run.await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_of(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[tokio::test]
    async fn a_record_write_cut_short_by_a_kill_leaves_no_temp_file_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("k0s");
        std::fs::write(&live, b"binary").unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let half_written = [
            data.join(".autopilot-restart.json.AbC123.tmp"),
            data.join(".autopilot-staged.json.XyZ789.tmp"),
        ];
        for path in &half_written {
            std::fs::write(path, b"{\"sign").unwrap();
        }
        let unrelated = data.join(".someone-else.tmp");
        std::fs::write(&unrelated, b"keep").unwrap();

        let _host = LinuxHost::new(live, data.clone(), DownloadConfig::default()).unwrap();
        for path in &half_written {
            assert!(!path.exists(), "{} is removed at startup", path.display());
        }
        assert!(unrelated.exists(), "only the records' temp files are removed");
    }

    #[tokio::test]
    async fn digest_cache_notices_every_kind_of_change_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k0s");
        let cache = DigestCache::default();
        assert_eq!(cache.sha256(&path).await.unwrap(), None, "absent file");

        std::fs::write(&path, b"version one").unwrap();
        assert_eq!(cache.sha256(&path).await.unwrap(), Some(hex_of(b"version one")));
        assert_eq!(cache.sha256(&path).await.unwrap(), Some(hex_of(b"version one")), "cached");

        // Rewritten in place with the same length.
        std::fs::write(&path, b"version two").unwrap();
        assert_eq!(cache.sha256(&path).await.unwrap(), Some(hex_of(b"version two")));

        // Another file renamed over the path (what a swap does).
        let other = dir.path().join("k0s.tmp");
        std::fs::write(&other, b"version 3").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(cache.sha256(&path).await.unwrap(), Some(hex_of(b"version 3")));

        std::fs::remove_file(&path).unwrap();
        assert_eq!(cache.sha256(&path).await.unwrap(), None, "removed");
        std::fs::write(&path, b"version 3").unwrap();
        assert_eq!(cache.sha256(&path).await.unwrap(), Some(hex_of(b"version 3")), "recreated");
    }
}

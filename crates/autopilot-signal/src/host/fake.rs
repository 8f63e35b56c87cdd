//! [`FakeHost`]: an in-memory disk and HTTP server for replay tests, with injected failures
//! ([`FakeHost::fail_next`]) and crashes ([`FakeHost::crash_after`]).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use autopilot_api::signal::{CommandRollback, RollbackOf, UpdateRef};
use http::StatusCode;
use sha2::{Digest as _, Sha256};

use super::{
    BundleRecord, Host, HostError, Observed, RestartMarker, RestartState, Result, SignalKey,
    SignatureSource, StagedRecord, TrialState, expected_sha256, judge_previous, judge_self_test,
};
use crate::download::{DownloadError, parse_sha256};
use autopilot_engine::agent::ActionKind;

/// The live binary's name on the fake disk.
pub const LIVE: &str = "k0s";
/// The staged binary's name.
pub const STAGED: &str = "k0s.tmp";
/// The previous binary's name.
pub const PREVIOUS: &str = "k0s.prev";
/// The restart marker's name.
pub const MARKER: &str = "autopilot-restart.json";
/// The staging record's name.
pub const STAGED_RECORD: &str = "autopilot-staged.json";
/// Where a binary refused by its trial is kept.
pub const REFUSED: &str = "k0s.refused";
/// The record of what the last airgap bundle replaced.
pub const BUNDLE_RECORD: &str = "autopilot-bundle.json";
/// Where the file an airgap bundle replaced is kept (`images.prev/<name>`).
pub const KEPT_BUNDLES: &str = "images.prev";

/// What running a fake binary's `version` gives: a file starting with `#!k0s <version>` (or
/// `#!k0s-crash <version>`, one that answers `version` but fails its trial boot) prints the
/// version and exits 0; anything else cannot be executed (exit 126).
pub fn run_version(bytes: &[u8]) -> (Option<i32>, String) {
    let text = String::from_utf8_lossy(bytes);
    let header = text.lines().next().unwrap_or_default();
    match header.strip_prefix("#!k0s ").or_else(|| header.strip_prefix("#!k0s-crash ")) {
        Some(version) => (Some(0), format!("{version}\n")),
        None => (Some(126), "cannot execute binary file: Exec format error\n".to_string()),
    }
}

/// The components a fake binary carries: each line `#carries <name> <version>` after its
/// header, as a release's manifest lists them (none: it carries no set).
pub fn carried(bytes: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("#carries ")?.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// Whether a fake binary passes its trial boot (see [`run_version`]).
pub fn boots(bytes: &[u8]) -> bool {
    bytes.starts_with(b"#!k0s ")
}

/// A fake host. Every disk mutation is atomic (like `rename(2)`) and counts as one crash
/// point; after [`Self::crash_after`]`(n)` the (n+1)th mutation fails with
/// [`HostError::Crashed`] without happening, and so does everything after it until
/// [`Self::restart_process`].
#[derive(Debug, Default)]
pub struct FakeHost {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<String, Vec<u8>>,
    /// The bytes of the binary the current process runs (proven).
    running: Vec<u8>,
    server: BTreeMap<String, Vec<u8>>,
    fail: VecDeque<ActionKind>,
    budget: Option<usize>,
    crashed: bool,
    mutations: usize,
    instance: u64,
    log: Vec<String>,
}

impl State {
    /// Writes the staging record of the staged `bytes`, which passed their self-test
    /// reporting `reported` (a crash point).
    fn record_self_tested(
        &mut self,
        signal: &SignalKey,
        bytes: &[u8],
        reported: String,
    ) -> Result<()> {
        let record = StagedRecord {
            signal: signal.clone(),
            sha256: sha256_hex(bytes),
            signed_by: None,
            self_tested: Some(reported),
        };
        self.mutate(format!("write {STAGED_RECORD} (self-tested)"))?;
        self.files.insert(STAGED_RECORD.to_string(), record_bytes(&record));
        Ok(())
    }

    /// Spends one crash point; `Err(Crashed)` when the budget is exhausted.
    fn mutate(&mut self, what: String) -> Result<()> {
        if self.crashed {
            return Err(HostError::Crashed);
        }
        if let Some(budget) = self.budget.as_mut() {
            if *budget == 0 {
                self.crashed = true;
                return Err(HostError::Crashed);
            }
            *budget -= 1;
        }
        self.mutations += 1;
        self.log.push(what);
        Ok(())
    }

    fn injected(&mut self, kind: ActionKind) -> Result<()> {
        if self.crashed {
            return Err(HostError::Crashed);
        }
        if self.fail.front() == Some(&kind) {
            self.fail.pop_front();
            return Err(HostError::Injected(kind));
        }
        Ok(())
    }

    fn fetch(&self, url: &str, sha256: Option<&str>) -> Result<Vec<u8>> {
        let want = sha256.map(parse_sha256).transpose()?;
        let body = self.server.get(url).ok_or_else(|| DownloadError::Status {
            url: url.to_string(),
            status: StatusCode::NOT_FOUND,
        })?;
        let actual = sha256_hex(body);
        if let Some(expected) = want
            && expected != actual
        {
            return Err(
                DownloadError::DigestMismatch { url: url.to_string(), expected, actual }.into()
            );
        }
        Ok(body.clone())
    }
}

/// SHA-256 of `bytes` (lowercase hex).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl FakeHost {
    /// A host whose live binary holds `live`.
    pub fn new(live: &[u8]) -> Self {
        let host = Self::default();
        let mut state = host.lock();
        state.files.insert(LIVE.to_string(), live.to_vec());
        state.running = live.to_vec();
        drop(state);
        host
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serves `body` at `url` from now on.
    pub fn serve(&self, url: &str, body: &[u8]) {
        self.lock().server.insert(url.to_string(), body.to_vec());
    }

    /// Makes the next action of `kind` fail with [`HostError::Injected`] (queued in order).
    pub fn fail_next(&self, kind: ActionKind) {
        self.lock().fail.push_back(kind);
    }

    /// Lets `n` more mutations happen, then crashes.
    pub fn crash_after(&self, n: usize) {
        self.lock().budget = Some(n);
    }

    /// Whether the simulated process crashed.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// A new process starts on the same disk and gets a new instance id. After a crash,
    /// no further crash is scheduled; after a clean re-exec the crash budget carries on.
    pub fn restart_process(&self) {
        let mut state = self.lock();
        if state.crashed {
            state.crashed = false;
            state.budget = None;
        }
        state.instance += 1;
        state.running = state.files.get(LIVE).cloned().unwrap_or_default();
        // What a new LinuxHost does at startup.
        let _ = state.finish_rollback();
    }

    /// Spends one crash point for an effect outside the host (e.g. a status write), so
    /// replay tests can crash around it; `Err(Crashed)` when the budget is exhausted.
    pub fn external_effect(&self, what: &str) -> Result<()> {
        self.lock().mutate(what.to_string())
    }

    /// How many mutations (host and external) happened so far.
    pub fn mutations(&self) -> usize {
        self.lock().mutations
    }

    /// What happened, one line per mutation.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// The restart marker, if there is one.
    pub fn marker(&self) -> Option<RestartMarker> {
        let bytes = self.file(MARKER)?;
        serde_json::from_slice(&bytes).ok()
    }

    /// A file on the fake disk (names: [`LIVE`], [`STAGED`], [`PREVIOUS`], [`MARKER`],
    /// `images/<name>`).
    pub fn file(&self, name: &str) -> Option<Vec<u8>> {
        self.lock().files.get(name).cloned()
    }

    /// The names of all files on the fake disk.
    pub fn files(&self) -> Vec<String> {
        self.lock().files.keys().cloned().collect()
    }
}

impl Host for FakeHost {
    async fn observe(&self, signal: &SignalKey, update: UpdateRef<'_>) -> Result<Observed> {
        let state = self.lock();
        if state.crashed {
            return Err(HostError::Crashed);
        }
        let ((staged, proven), live_sha256) = match update {
            UpdateRef::Airgap(_)
            | UpdateRef::Rollback(CommandRollback { of: RollbackOf::Airgap, .. }) => {
                ((false, false), None)
            }
            UpdateRef::K0s(_)
            | UpdateRef::Rollback(CommandRollback { of: RollbackOf::K0s, .. }) => {
                let record = state
                    .files
                    .get(STAGED_RECORD)
                    .and_then(|b| serde_json::from_slice::<StagedRecord>(b).ok());
                let actual = state.files.get(STAGED).map(|b| sha256_hex(b));
                let want = match update {
                    UpdateRef::Rollback(_) => state.files.get(PREVIOUS).map(|b| sha256_hex(b)),
                    UpdateRef::K0s(_) | UpdateRef::Airgap(_) => expected_sha256(update),
                };
                // The fake host checks no signatures.
                let (staged, proven) = StagedRecord::judge(
                    record.as_ref(),
                    actual.as_deref(),
                    want.as_deref(),
                    signal,
                    &[],
                );
                let proven = proven
                    && match update {
                        UpdateRef::Rollback(rollback) => StagedRecord::proves_rollback(
                            record.as_ref(),
                            signal,
                            &rollback.version,
                        ),
                        UpdateRef::K0s(_) | UpdateRef::Airgap(_) => true,
                    };
                let judged = (staged, proven);
                (judged, state.files.get(LIVE).map(|b| sha256_hex(b)))
            }
        };
        let marker = state
            .files
            .get(MARKER)
            .map(|bytes| serde_json::from_slice::<RestartMarker>(bytes))
            .transpose()
            .map_err(|source| HostError::Marker { path: PathBuf::from(MARKER), source })?;
        let instance = state.instance.to_string();
        let restart = RestartState::of(marker.as_ref(), signal, &instance);
        Ok(Observed { staged, proven, live_sha256, restart, rolled_back_after_update: None })
    }

    async fn download(
        &self,
        signal: &SignalKey,
        url: &str,
        sha256: Option<&str>,
        _signature: &SignatureSource,
    ) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::Download)?;
        if state.files.contains_key(STAGED_RECORD) {
            state.mutate(format!("remove {STAGED_RECORD}"))?;
            state.files.remove(STAGED_RECORD);
        }
        let body = state.fetch(url, sha256)?;
        let record = StagedRecord {
            signal: signal.clone(),
            sha256: sha256_hex(&body),
            signed_by: None,
            self_tested: None,
        };
        state.mutate(format!("stage {url}"))?;
        state.files.insert(STAGED.to_string(), body);
        state.mutate(format!("write {STAGED_RECORD}"))?;
        state.files.insert(STAGED_RECORD.to_string(), record_bytes(&record));
        Ok(())
    }

    async fn self_test(&self, signal: &SignalKey, version: &str, any_version: bool) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::SelfTest)?;
        let Some(staged) = state.files.get(STAGED).cloned() else {
            return Err(HostError::SelfTest { reason: "the staged binary is gone".into() });
        };
        let (exit, output) = run_version(&staged);
        let verdict = judge_self_test(exit, &output, version, any_version);
        if let Ok(reported) = &verdict {
            let components = carried(&staged);
            let named = components.iter().map(|(name, version)| (name.as_str(), version.as_str()));
            if let Err(reason) = autopilot_engine::carried::check(named, reported) {
                state.mutate(format!("remove {STAGED}"))?;
                state.files.remove(STAGED);
                state.files.remove(STAGED_RECORD);
                return Err(HostError::Carried { reason });
            }
        }
        match verdict {
            Ok(reported) => state.record_self_tested(signal, &staged, reported),
            Err(reason) => {
                state.mutate(format!("remove {STAGED}"))?;
                state.files.remove(STAGED);
                state.files.remove(STAGED_RECORD);
                Err(HostError::SelfTest { reason })
            }
        }
    }

    async fn download_bundle(
        &self,
        signal: &SignalKey,
        url: &str,
        sha256: Option<&str>,
        _signature: &SignatureSource,
    ) -> Result<PathBuf> {
        let mut state = self.lock();
        state.injected(ActionKind::DownloadBundle)?;
        let body = state.fetch(url, sha256)?;
        let uri: http::Uri =
            url.parse().map_err(|_| DownloadError::InvalidUrl { url: url.into() })?;
        let name = crate::download::file_name_from_response(None, &uri)
            .ok_or_else(|| DownloadError::NoFileName { url: url.to_string() })?;
        state.keep_replaced_bundle(signal, &name)?;
        let path = format!("images/{name}");
        state.mutate(format!("store {path}"))?;
        state.files.insert(path.clone(), body);
        Ok(PathBuf::from(path))
    }

    async fn stage_bundle(
        &self,
        url: &str,
        sha256: Option<&str>,
        _signature: &SignatureSource,
    ) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::DownloadBundle)?;
        let body = state.fetch(url, sha256)?;
        state.mutate("store images.staged/bundle".to_owned())?;
        state.files.insert("images.staged/bundle".to_owned(), body);
        Ok(())
    }

    fn swap_binary(&self) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::Swap)?;
        let Some(staged) = state.files.get(STAGED).cloned() else {
            return Ok(());
        };
        // Only the binary this process runs is proven; an unproven live binary (swapped in
        // by an earlier signal, never run) is simply replaced.
        if let Some(live) = state.files.get(LIVE).cloned()
            && live == state.running
        {
            state.mutate(format!("keep {LIVE} as {PREVIOUS}"))?;
            state.files.insert(PREVIOUS.to_string(), live);
        }
        state.mutate(format!("rename {STAGED} over {LIVE}"))?;
        state.files.remove(STAGED);
        state.files.insert(LIVE.to_string(), staged);
        state.files.remove(STAGED_RECORD);
        Ok(())
    }

    fn prepare_restart(&self, signal: &SignalKey) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::Restart)?;
        let instance = state.instance.to_string();
        state.write_marker(signal, instance, TrialState::Pending)
    }

    fn pass_trial(&self, signal: &SignalKey, _watch: Option<&super::WatchStart>) -> Result<()> {
        let mut state = self.lock();
        let instance = state.instance.to_string();
        state.write_marker(signal, instance, TrialState::Passed)
    }

    fn roll_back(&self, signal: &SignalKey, to_version: &str, reason: &str) -> Result<()> {
        let mut state = self.lock();
        let instance = state.instance.to_string();
        let trial =
            TrialState::RolledBack { to: to_version.to_string(), reason: reason.to_string() };
        state.write_marker(signal, instance, trial)?;
        state.finish_rollback()
    }

    fn has_staged(&self) -> bool {
        self.lock().files.contains_key(STAGED)
    }

    async fn stage_previous(&self, signal: &SignalKey, version: &str) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::StagePrevious)?;
        if state.files.contains_key(STAGED_RECORD) {
            state.mutate(format!("remove {STAGED_RECORD}"))?;
            state.files.remove(STAGED_RECORD);
        }
        let Some(previous) = state.files.get(PREVIOUS).cloned() else {
            return Err(HostError::Rollback { reason: format!("no {PREVIOUS} to roll back to") });
        };
        state.mutate(format!("copy {PREVIOUS} to {STAGED}"))?;
        state.files.insert(STAGED.to_string(), previous.clone());
        let (exit, output) = run_version(&previous);
        match judge_previous(PREVIOUS, exit, &output, version) {
            Ok(reported) => state.record_self_tested(signal, &previous, reported),
            Err(reason) => {
                state.mutate(format!("remove {STAGED}"))?;
                state.files.remove(STAGED);
                Err(HostError::Rollback { reason })
            }
        }
    }

    fn restore_bundle(&self, signal: &SignalKey) -> Result<()> {
        let mut state = self.lock();
        state.injected(ActionKind::RestoreBundle)?;
        let record = state
            .files
            .get(BUNDLE_RECORD)
            .and_then(|b| serde_json::from_slice::<BundleRecord>(b).ok());
        let record = BundleRecord::for_rollback(record.as_ref(), signal)
            .map_err(|reason| HostError::Rollback { reason })?
            .clone();
        let path = format!("images/{}", record.name);
        if !record.replaced {
            state.mutate(format!("remove {path}"))?;
            state.files.remove(&path);
            return Ok(());
        }
        let kept = format!("{KEPT_BUNDLES}/{}", record.name);
        let Some(bytes) = state.files.get(&kept).cloned() else {
            return Err(HostError::Rollback {
                reason: format!("the kept airgap bundle {kept} is gone"),
            });
        };
        state.mutate(format!("put {kept} back as {path}"))?;
        state.files.insert(path, bytes);
        Ok(())
    }
}

fn record_bytes(record: &StagedRecord) -> Vec<u8> {
    serde_json::to_vec(record).expect("a staging record serialises")
}

impl State {
    /// Like `LinuxHost::keep_replaced_bundle`: keeps `images/<name>` (or that there is
    /// none) for a rollback, once per signal.
    fn keep_replaced_bundle(&mut self, signal: &SignalKey, name: &str) -> Result<()> {
        let record = self
            .files
            .get(BUNDLE_RECORD)
            .and_then(|b| serde_json::from_slice::<BundleRecord>(b).ok());
        if record.is_some_and(|r| &r.signal == signal && r.name == name) {
            return Ok(());
        }
        if self.files.contains_key(BUNDLE_RECORD) {
            self.mutate(format!("remove {BUNDLE_RECORD}"))?;
            self.files.remove(BUNDLE_RECORD);
        }
        let prefix = format!("{KEPT_BUNDLES}/");
        let kept: Vec<String> =
            self.files.keys().filter(|name| name.starts_with(&prefix)).cloned().collect();
        for old in kept {
            self.mutate(format!("remove {old}"))?;
            self.files.remove(&old);
        }
        let current = self.files.get(&format!("images/{name}")).cloned();
        let replaced = current.is_some();
        if let Some(bytes) = current {
            self.mutate(format!("keep images/{name} as {prefix}{name}"))?;
            self.files.insert(format!("{prefix}{name}"), bytes);
        }
        let record = BundleRecord { signal: signal.clone(), name: name.to_owned(), replaced };
        let bytes = serde_json::to_vec(&record).expect("a bundle record serialises");
        self.mutate(format!("write {BUNDLE_RECORD}"))?;
        self.files.insert(BUNDLE_RECORD.to_string(), bytes);
        Ok(())
    }

    /// Like `LinuxHost::finish_rollback`: moves a refused staged binary aside.
    fn finish_rollback(&mut self) -> Result<()> {
        let marker =
            self.files.get(MARKER).and_then(|b| serde_json::from_slice::<RestartMarker>(b).ok());
        let Some(marker) = marker.filter(|m| matches!(m.trial, TrialState::RolledBack { .. }))
        else {
            return Ok(());
        };
        let record = self
            .files
            .get(STAGED_RECORD)
            .and_then(|b| serde_json::from_slice::<StagedRecord>(b).ok());
        if record.is_some_and(|r| r.signal != marker.signal) {
            return Ok(());
        }
        if let Some(refused) = self.files.get(STAGED).cloned() {
            self.mutate(format!("move {STAGED} to {REFUSED}"))?;
            self.files.remove(STAGED);
            self.files.insert(REFUSED.to_string(), refused);
        }
        self.files.remove(STAGED_RECORD);
        Ok(())
    }

    fn write_marker(
        &mut self,
        signal: &SignalKey,
        instance: String,
        trial: TrialState,
    ) -> Result<()> {
        let marker = RestartMarker { signal: signal.clone(), instance, trial, watch: None };
        let bytes = serde_json::to_vec(&marker)
            .map_err(|source| HostError::Marker { path: PathBuf::from(MARKER), source })?;
        self.mutate(format!("write {MARKER} ({:?})", marker.trial))?;
        self.files.insert(MARKER.to_string(), bytes);
        Ok(())
    }
}

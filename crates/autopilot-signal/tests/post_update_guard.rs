//! The post-update guard on a temp directory: the swap back to `k0s.prev` after the third
//! abnormal exit, kept aside as `k0s.refused` (mode 0600), idempotent, and a no-op without a
//! marker, a watch or a `k0s.prev`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use autopilot_signal::host::{
    FileId, RestartMarker, SignalKey, TrialState, WatchRecord, WatchState,
};
use autopilot_signal::post_update::{
    AtStart, Datastore, Established, Files, Guarded, Watched, at_start, guard,
};
use sha2::{Digest as _, Sha256};

const V1: &[u8] = b"#!/bin/sh\necho v1\n";
const V2: &[u8] = b"#!/bin/sh\necho v2\n";
const NOW: i64 = 1_700_000_000;

struct Node {
    _dir: tempfile::TempDir,
    live: std::path::PathBuf,
    data: std::path::PathBuf,
    files: Files,
}

fn node(prev: bool) -> Node {
    let dir = tempfile::tempdir().expect("test fixture");
    let live = dir.path().join("k0s");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("test fixture");
    std::fs::write(&live, V2).expect("test fixture");
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).expect("test fixture");
    if prev {
        std::fs::write(dir.path().join("k0s.prev"), V1).expect("test fixture");
        std::fs::set_permissions(
            dir.path().join("k0s.prev"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("test fixture");
    }
    let files = Files::new(live.clone(), data.clone());
    Node { _dir: dir, live, data, files }
}

fn watch(abnormal_exits: u32, running: bool) -> WatchRecord {
    WatchRecord {
        since: NOW - 60,
        window_secs: 600,
        answered_secs: 0,
        from: "v1".into(),
        to: "v2".into(),
        to_sha256: hex::encode(Sha256::digest(V2)),
        to_file: None,
        starts: abnormal_exits + u32::from(running),
        abnormal_exits,
        running,
        counted: false,
        state: WatchState::Watching,
    }
}

/// A watch that rolled back after three crashes, not reported yet.
fn rolled_back() -> WatchRecord {
    let mut rolled = watch(3, false);
    rolled.state = WatchState::RolledBack {
        reason: "crashed".into(),
        why: "x".into(),
        at: NOW,
        reported: false,
    };
    rolled
}

fn write_marker(data: &Path, watch: Option<WatchRecord>) {
    let marker = RestartMarker {
        signal: SignalKey {
            plan_id: "id".into(),
            created: "2024-01-01T00:00:00Z".into(),
            command_id: 0,
            run_id: None,
        },
        instance: "1-1".into(),
        trial: TrialState::Passed,
        watch,
    };
    std::fs::write(
        data.join("autopilot-restart.json"),
        serde_json::to_vec(&marker).expect("test fixture"),
    )
    .expect("test fixture");
}

fn marker(data: &Path) -> RestartMarker {
    serde_json::from_slice(
        &std::fs::read(data.join("autopilot-restart.json")).expect("test fixture"),
    )
    .expect("test fixture")
}

#[test]
fn the_guard_puts_k0s_prev_back_after_the_third_abnormal_exit_and_keeps_v2_aside() {
    let n = node(true);
    write_marker(&n.data, Some(watch(2, true)));

    let guarded = guard(&n.files, NOW).expect("test fixture");
    assert_eq!(
        guarded,
        Guarded::RolledBack {
            why: "the new binary exited abnormally 3 times within 10m of the update".into()
        }
    );
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1, "v1 is live");
    let mode = std::fs::metadata(&n.live).expect("test fixture").permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "the live binary stays executable");
    assert_eq!(
        std::fs::read(n.files.previous_path()).expect("test fixture"),
        V1,
        "k0s.prev keeps v1"
    );
    let refused = n.files.refused_path();
    assert_eq!(std::fs::read(&refused).expect("test fixture"), V2, "k0s.refused holds v2");
    let mode = std::fs::metadata(&refused).expect("test fixture").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "k0s.refused is not executable");
    let recorded = marker(&n.data).watch.expect("test fixture");
    assert!(!recorded.running);
    match &recorded.state {
        WatchState::RolledBack { reason, reported, at, .. } => {
            assert_eq!(reason, "crashed");
            assert!(!reported);
            assert_eq!(*at, NOW);
        }
        other => panic!("not rolled back: {other:?}"),
    }

    // Again: nothing more happens.
    let before = marker(&n.data);
    assert_eq!(guard(&n.files, NOW + 5).expect("test fixture"), Guarded::Nothing);
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1);
    assert_eq!(std::fs::read(&refused).expect("test fixture"), V2);
    assert_eq!(marker(&n.data), before, "the marker is unchanged");

    // The proven binary then starts and finds a rollback to report.
    let AtStart::Report(report) = at_start(&n.files, "v1", NOW + 6).expect("test fixture") else {
        panic!("expected a report")
    };
    assert_eq!(
        (report.reason.as_str(), report.from.as_str(), report.to.as_str()),
        ("crashed", "v1", "v2")
    );
    assert!(!report.kept, "v1 was put back");
    autopilot_signal::post_update::reported(&n.files).expect("test fixture");
    assert_eq!(
        at_start(&n.files, "v1", NOW + 7).expect("test fixture"),
        AtStart::Nothing,
        "reported once"
    );
}

#[test]
fn a_rollback_interrupted_after_the_swap_is_finished_by_the_next_guard() {
    let n = node(true);
    write_marker(&n.data, Some(rolled_back()));
    // Killed after the swap, before the refused file was moved: v1 live, v2 as .refused.new.
    let refused_new = n.live.with_file_name("k0s.refused.new");
    std::fs::rename(&n.live, &refused_new).expect("test fixture");
    std::fs::copy(n.files.previous_path(), &n.live).expect("test fixture");

    assert_eq!(guard(&n.files, NOW + 1).expect("test fixture"), Guarded::Nothing);
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1);
    assert!(!refused_new.exists());
    let refused = n.files.refused_path();
    assert_eq!(std::fs::read(&refused).expect("test fixture"), V2);
    assert_eq!(
        std::fs::metadata(&refused).expect("test fixture").permissions().mode() & 0o777,
        0o600
    );
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).expect("test fixture").permissions().mode() & 0o777
}

#[test]
fn a_rollback_to_a_previous_binary_with_the_same_bytes_changes_no_file_and_keeps_both_executable() {
    // A forceupdate reinstalled v2's own bytes: k0s.prev and k0s are v2, two files.
    let n = node(true);
    std::fs::write(n.files.previous_path(), V2).expect("test fixture");
    write_marker(&n.data, Some(watch(2, true)));

    let guarded = guard(&n.files, NOW).expect("test fixture");
    assert!(matches!(guarded, Guarded::Kept { .. }), "{guarded:?}");
    for _ in 0..3 {
        // Every later start (the guard, then the binary's own start) changes nothing more.
        assert_eq!(guard(&n.files, NOW + 5).expect("test fixture"), Guarded::Nothing);
        let _ = at_start(&n.files, "v2", NOW + 6).expect("test fixture");
    }
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);
    assert_eq!(mode_of(&n.live), 0o755, "the live binary stays executable");
    assert_eq!(mode_of(&n.files.previous_path()), 0o755, "k0s.prev stays executable");
    assert!(!n.files.refused_path().exists(), "nothing was taken out");
    assert!(matches!(marker(&n.data).watch.expect("a watch").state, WatchState::RolledBack { .. }));
}

#[test]
fn a_refused_link_that_is_the_live_binary_or_k0s_prev_is_removed_never_made_private() {
    let n = node(true);
    write_marker(&n.data, Some(rolled_back()));
    // v1 live again (a link of k0s.prev), and a leftover k0s.refused.new linked to it.
    std::fs::remove_file(&n.live).expect("test fixture");
    std::fs::hard_link(n.files.previous_path(), &n.live).expect("test fixture");
    let refused_new = n.live.with_file_name("k0s.refused.new");
    std::fs::hard_link(&n.live, &refused_new).expect("test fixture");

    assert_eq!(guard(&n.files, NOW + 1).expect("test fixture"), Guarded::Nothing);
    assert!(!refused_new.exists());
    assert_eq!(mode_of(&n.live), 0o755, "the live binary stays executable");
    assert_eq!(mode_of(&n.files.previous_path()), 0o755, "k0s.prev stays executable");
}

#[test]
fn the_guard_does_nothing_without_a_marker_a_watch_a_previous_binary_or_a_due_rollback() {
    // No marker.
    let n = node(true);
    assert_eq!(guard(&n.files, NOW).expect("test fixture"), Guarded::Nothing);
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);

    // A marker without a watch.
    write_marker(&n.data, None);
    assert_eq!(guard(&n.files, NOW).expect("test fixture"), Guarded::Nothing);

    // Two abnormal exits and a clean stop: not due; the guard counts the start to come.
    write_marker(&n.data, Some(watch(2, false)));
    assert_eq!(
        guard(&n.files, NOW).expect("test fixture"),
        Guarded::Counted { starts: 3, abnormal_exits: 2 }
    );
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);
    let w = marker(&n.data).watch.expect("test fixture");
    assert_eq!((w.starts, w.abnormal_exits, w.running, w.counted), (3, 2, true, true));

    // Due, but no k0s.prev to put back.
    let n = node(false);
    write_marker(&n.data, Some(watch(2, true)));
    assert_eq!(guard(&n.files, NOW).expect("test fixture"), Guarded::Nothing);

    // Over: nothing to count.
    let n = node(true);
    let mut proven = watch(0, true);
    proven.state = WatchState::Proven { at: NOW };
    write_marker(&n.data, Some(proven.clone()));
    assert_eq!(guard(&n.files, NOW).expect("test fixture"), Guarded::Nothing);
    assert_eq!(marker(&n.data).watch, Some(proven), "the guard counts nothing after the proof");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);
    assert!(!n.files.refused_path().exists());
}

#[test]
fn the_new_binary_counts_its_starts_and_rolls_itself_back_without_the_guard() {
    let n = node(true);
    write_marker(&n.data, Some(watch(0, false)));
    for start in 1..=3 {
        let found = at_start(&n.files, "v2", NOW).expect("test fixture");
        assert!(matches!(found, AtStart::Watched(_)), "start {start}: {found:?}");
        let w = marker(&n.data).watch.expect("test fixture");
        assert_eq!((w.starts, w.abnormal_exits, w.running), (start, start - 1, true));
    }
    // The third run never stopped cleanly either: the fourth start rolls back.
    let found = at_start(&n.files, "v2", NOW).expect("test fixture");
    assert!(matches!(found, AtStart::RolledBack { .. }), "{found:?}");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1);

    // A clean stop is not an abnormal exit.
    let n = node(true);
    write_marker(&n.data, Some(watch(0, false)));
    at_start(&n.files, "v2", NOW).expect("test fixture");
    autopilot_signal::post_update::stopped_cleanly(&n.files, "v2");
    at_start(&n.files, "v2", NOW).expect("test fixture");
    let w = marker(&n.data).watch.expect("test fixture");
    assert_eq!((w.starts, w.abnormal_exits, w.running), (2, 0, true));
}

#[test]
fn a_new_binary_that_never_records_anything_is_counted_by_the_guard_and_rolled_back() {
    // Each start dies (or hangs until the watchdog kills it) before its first line of k0s
    // code: only the guard before each start counts.
    let n = node(true);
    write_marker(&n.data, Some(identified(&n, watch(0, false))));
    for (start, abnormal_exits) in [(1, 0), (2, 1), (3, 2)] {
        let guarded = guard(&n.files, NOW).expect("test fixture");
        assert_eq!(guarded, Guarded::Counted { starts: start, abnormal_exits }, "start {start}");
    }
    let guarded = guard(&n.files, NOW).expect("test fixture");
    let Guarded::RolledBack { why } = guarded else { panic!("rolled back: {guarded:?}") };
    assert_eq!(why, "the new binary exited abnormally 3 times within 10m of the update");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1);

    // A start the guard counted is taken up by the new binary, not counted again.
    let n = node(true);
    write_marker(&n.data, Some(identified(&n, watch(0, false))));
    guard(&n.files, NOW).expect("test fixture");
    let found = at_start(&n.files, "v2", NOW).expect("test fixture");
    assert!(matches!(found, AtStart::Watched(_)), "{found:?}");
    let w = marker(&n.data).watch.expect("test fixture");
    assert_eq!((w.starts, w.abnormal_exits, w.running, w.counted), (1, 0, true, false));
    // The second run exited abnormally too (after the first): the guard counts the second
    // exit and lets the third start run; that start is not an exit of its own.
    write_marker(&n.data, Some(identified(&n, watch(1, true))));
    assert_eq!(
        guard(&n.files, NOW).expect("test fixture"),
        Guarded::Counted { starts: 3, abnormal_exits: 2 }
    );
    let found = at_start(&n.files, "v2", NOW).expect("test fixture");
    assert!(matches!(found, AtStart::Watched(_)), "{found:?}");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);
}

/// `watch` with the identity of `node`'s live binary recorded, as the swap records it.
fn identified(node: &Node, mut watch: WatchRecord) -> WatchRecord {
    watch.to_file = FileId::of(&node.live);
    watch
}

#[test]
fn a_live_binary_with_the_new_bytes_but_another_file_is_never_taken_out() {
    // The swap recorded v2's file; an operator then installed the same bytes by hand.
    let n = node(true);
    write_marker(&n.data, Some(identified(&n, watch(2, true))));
    let by_hand = n.live.with_file_name("k0s.by-hand");
    std::fs::copy(&n.live, &by_hand).expect("test fixture");
    std::fs::rename(&by_hand, &n.live).expect("test fixture");

    let guarded = guard(&n.files, NOW).expect("test fixture");
    assert!(matches!(guarded, Guarded::Kept { .. }), "the rollback is due: {guarded:?}");
    for _ in 0..2 {
        assert_eq!(guard(&n.files, NOW + 5).expect("test fixture"), Guarded::Nothing);
    }
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2, "the operator's file stays");
    assert_eq!(mode_of(&n.live), 0o755);
    assert_eq!(std::fs::read(n.files.previous_path()).expect("test fixture"), V1);
    assert!(!n.files.refused_path().exists(), "nothing was taken out");
}

#[test]
fn hours_without_the_datastore_never_end_the_window() {
    // Swapped in a day ago, but no quorum read succeeded while it ran: the guard and every
    // start leave it alone (not proven yet).
    let n = node(true);
    let mut long_ago = identified(&n, watch(1, false));
    long_ago.since = NOW - 86_400;
    write_marker(&n.data, Some(long_ago.clone()));
    let guarded = guard(&n.files, NOW).expect("test fixture");
    assert!(matches!(guarded, Guarded::Counted { .. }), "{guarded:?}");
    let found = at_start(&n.files, "v2", NOW).expect("test fixture");
    assert!(matches!(found, AtStart::Watched(_)), "{found:?}");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);

    // Once it ran the whole window while the datastore answered, the next start rolls back.
    let mut answered = long_ago;
    answered.answered_secs = 600;
    write_marker(&n.data, Some(answered));
    let guarded = guard(&n.files, NOW).expect("test fixture");
    let Guarded::RolledBack { why } = guarded else { panic!("expected a rollback: {guarded:?}") };
    assert!(why.ends_with("while the datastore answered"), "{why}");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1);
}

/// The files a rollback leaves after each of its steps (the marker records the rollback
/// first): a process killed right after step `step` leaves exactly this.
fn crashed_after(n: &Node, step: usize) {
    let refused_new = n.live.with_file_name("k0s.refused.new");
    let rollback_tmp = n.live.with_file_name("k0s.rollback.tmp");
    let steps: [&dyn Fn(); 5] = [
        // 1: the new binary linked aside.
        &|| std::fs::hard_link(&n.live, &refused_new).expect("test fixture"),
        // 2: a link of k0s.prev made to rename over the live path.
        &|| std::fs::hard_link(n.files.previous_path(), &rollback_tmp).expect("test fixture"),
        // 3: renamed over the live path: v1 is live.
        &|| std::fs::rename(&rollback_tmp, &n.live).expect("test fixture"),
        // 4: the refused file made not executable.
        &|| {
            std::fs::set_permissions(&refused_new, std::fs::Permissions::from_mode(0o600))
                .expect("test fixture");
        },
        // 5: moved to k0s.refused.
        &|| std::fs::rename(&refused_new, n.files.refused_path()).expect("test fixture"),
    ];
    for done in &steps[..step] {
        done();
    }
}

#[test]
fn a_rollback_killed_after_any_step_is_finished_by_the_next_start_and_leaves_both_binaries_runnable()
 {
    for step in 0..=5 {
        for same_bytes in [false, true] {
            let n = node(true);
            if same_bytes {
                // A forceupdate that reinstalled v2's own bytes: k0s.prev is v2 too.
                std::fs::write(n.files.previous_path(), V2).expect("test fixture");
            }
            write_marker(&n.data, Some(identified(&n, rolled_back())));
            if !same_bytes {
                crashed_after(&n, step);
            }
            // The next start: the guard, then the binary put back reports.
            assert_eq!(guard(&n.files, NOW + 1).expect("test fixture"), Guarded::Nothing);
            let found = at_start(&n.files, "v1", NOW + 2).expect("test fixture");
            assert!(matches!(found, AtStart::Report(_)), "step {step}: {found:?}");
            // And any number of starts after it.
            assert_eq!(guard(&n.files, NOW + 3).expect("test fixture"), Guarded::Nothing);

            let at = format!("killed after step {step} (same bytes: {same_bytes})");
            let expected_live = if same_bytes { V2 } else { V1 };
            assert_eq!(std::fs::read(&n.live).expect("test fixture"), expected_live, "{at}");
            assert_eq!(mode_of(&n.live), 0o755, "{at}: the live binary runs");
            assert_eq!(mode_of(&n.files.previous_path()), 0o755, "{at}: k0s.prev runs");
            for leftover in ["k0s.refused.new", "k0s.rollback.tmp"] {
                assert!(!n.live.with_file_name(leftover).exists(), "{at}: {leftover} is left");
            }
            if same_bytes {
                assert!(!n.files.refused_path().exists(), "{at}: nothing taken out");
            } else {
                let refused = n.files.refused_path();
                assert_eq!(std::fs::read(&refused).expect("test fixture"), V2, "{at}");
                assert_eq!(mode_of(&refused), 0o600, "{at}: k0s.refused never runs");
            }
        }
    }
}

/// A datastore in virtual time: whether quorum reads and writes succeed, as functions of
/// the virtual seconds since the run started; the tokens written that were read back.
struct Virtual<R, W> {
    started: tokio::time::Instant,
    reads: R,
    writes: W,
    written: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl<R: Fn(u64) -> bool, W: Fn(u64) -> bool> Datastore for Virtual<R, W> {
    async fn reads(&mut self) -> bool {
        (self.reads)(self.started.elapsed().as_secs())
    }

    async fn writes(&mut self, token: &str) -> bool {
        let wrote = (self.writes)(self.started.elapsed().as_secs());
        if wrote {
            self.written.lock().expect("test fixture").push(token.to_string());
        }
        wrote
    }
}

/// The running new binary (started under `watch`) with virtual time: what its watch ends
/// with within `within`, given whether the datastore answers (reads and writes) and its
/// agent's watch holds (both as functions of the virtual seconds since it started).
/// `None`: still watching.
async fn run_watch(
    n: &Node,
    within: std::time::Duration,
    answers: impl Fn(u64) -> bool + Copy + 'static,
    established: impl Fn(u64) -> bool + 'static,
) -> Option<Watched> {
    let written = std::sync::Arc::default();
    run_store(n, within, (answers, answers, written), established).await
}

/// [`run_watch`] with reads and writes apart, and where the tokens read back go.
async fn run_store(
    n: &Node,
    within: std::time::Duration,
    (reads, writes, written): (
        impl Fn(u64) -> bool + 'static,
        impl Fn(u64) -> bool + 'static,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ),
    established: impl Fn(u64) -> bool + 'static,
) -> Option<Watched> {
    let AtStart::Watched(watching) = at_start(&n.files, "v2", NOW).expect("test fixture") else {
        panic!("the new binary is watched")
    };
    let healthy = Established::default();
    let started = tokio::time::Instant::now();
    let seconds = move || started.elapsed().as_secs();
    let flag = healthy.clone();
    let ticking = async move {
        loop {
            flag.set(established(seconds()));
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    };
    let run = watching.run(healthy, Virtual { started, reads, writes, written });
    tokio::select! {
        watched = tokio::time::timeout(within, run) => watched.ok(),
        () = ticking => unreachable!("the flag task never ends"),
    }
}

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn healthy_with_reads_but_no_write_of_its_own_proves_nothing() {
    let n = node(true);
    write_marker(&n.data, Some(identified(&n, watch(0, false))));
    // Reads answer and the agent's watch holds, but no write goes through for 5 minutes.
    let written = std::sync::Arc::default();
    let store = (|_| true, |_| false, std::sync::Arc::clone(&written));
    let unproven = run_store(&n, std::time::Duration::from_secs(300), store, |_| true).await;
    assert_eq!(unproven, None, "not proven without a write of its own");
    let w = marker(&n.data).watch.expect("test fixture");
    assert_eq!(w.state, WatchState::Watching);
    assert!(written.lock().expect("test fixture").is_empty());

    // Writes go through from 20 s into the next run: proven after its minute healthy and
    // one write read back, named after the watch.
    let store = (|_| true, |s| s >= 20, std::sync::Arc::clone(&written));
    let proven = run_store(&n, HOUR, store, |_| true).await;
    assert_eq!(proven, Some(Watched::Over));
    let w = marker(&n.data).watch.expect("test fixture");
    assert!(matches!(w.state, WatchState::Proven { .. }), "{:?}", w.state);
    assert_eq!(*written.lock().expect("test fixture"), [format!("{}-1", NOW - 60)]);
}

#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_the_window_rolls_nothing_back_and_the_node_is_proven_after_it() {
    let n = node(true);
    write_marker(&n.data, Some(identified(&n, watch(0, false))));
    // Two hours without an API server (the window is 10 minutes): still watching.
    let outage = run_watch(&n, 2 * HOUR, |_| false, |_| false).await;
    assert_eq!(outage, None, "not proven yet, never unhealthy");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);
    let w = marker(&n.data).watch.expect("test fixture");
    assert_eq!((w.answered_secs, &w.state), (0, &WatchState::Watching), "no time counted");

    // The API server comes back 10 s into the next run and the agent's watch holds: proven.
    let n2 = n;
    let proven = run_watch(&n2, HOUR, |s| s >= 10, |s| s >= 12).await;
    assert_eq!(proven, Some(Watched::Over));
    let w = marker(&n2.data).watch.expect("test fixture");
    assert!(matches!(w.state, WatchState::Proven { .. }), "{:?}", w.state);
    assert_eq!(std::fs::read(&n2.live).expect("test fixture"), V2);
}

#[tokio::test(start_paused = true)]
async fn only_time_while_the_api_server_answers_counts_and_it_is_recorded_across_starts() {
    let n = node(true);
    write_marker(&n.data, Some(identified(&n, watch(0, false))));
    // The API server answers every other 5 minutes; the agent's watch never holds.
    let on_and_off = |s: u64| (s / 300).is_multiple_of(2);
    // In 14 minutes it answered for 9 (0-5 and 10-14): the 10-minute window is not over.
    let first = run_watch(&n, std::time::Duration::from_secs(14 * 60), on_and_off, |_| false).await;
    assert_eq!(first, None);
    let counted = marker(&n.data).watch.expect("test fixture").answered_secs;
    assert!((500..=540).contains(&counted), "about 9 minutes recorded: {counted} s");
    // The next start goes on from what was recorded: one more answered minute ends it.
    let second = run_watch(&n, HOUR, |_| true, |_| false).await;
    let Some(Watched::RolledBack { why }) = second else { panic!("rolled back: {second:?}") };
    assert!(why.ends_with("while the datastore answered"), "{why}");
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V1);
    let w = marker(&n.data).watch.expect("test fixture");
    assert!(w.answered_secs >= 600, "{}", w.answered_secs);
}

#[test]
fn after_the_rollback_of_a_reinstalled_version_the_binary_that_starts_reports_it() {
    // A forceupdate reinstalled v1's own bytes (from v1 to v1), then it crashed three times.
    let n = node(true);
    std::fs::write(&n.live, V1).expect("test fixture");
    let mut reinstalled = identified(&n, watch(2, true));
    reinstalled.to = "v1".into();
    reinstalled.to_sha256 = hex::encode(Sha256::digest(V1));
    write_marker(&n.data, Some(reinstalled));

    let guarded = guard(&n.files, NOW).expect("test fixture");
    assert!(matches!(guarded, Guarded::Kept { .. }), "{guarded:?}");
    let found = at_start(&n.files, "v1", NOW + 1).expect("test fixture");
    let AtStart::Report(report) = found else { panic!("the start reports it: {found:?}") };
    assert_eq!((report.from.as_str(), report.to.as_str()), ("v1", "v1"));
    assert!(report.kept, "nothing was put back: the report says the binary stays");
    assert_eq!(mode_of(&n.live), 0o755);
    assert_eq!(mode_of(&n.files.previous_path()), 0o755);
    assert!(!n.files.refused_path().exists(), "nothing was taken out");
}

//! The post-update guard on a temp directory: the swap back to `k0s.prev` after the third
//! abnormal exit, kept aside as `k0s.refused` (mode 0600), idempotent, and a no-op without a
//! marker, a watch or a `k0s.prev`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use autopilot_signal::host::{RestartMarker, SignalKey, TrialState, WatchRecord, WatchState};
use autopilot_signal::post_update::{AtStart, Files, Guarded, at_start, guard};
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
        from: "v1".into(),
        to: "v2".into(),
        to_sha256: hex::encode(Sha256::digest(V2)),
        starts: abnormal_exits + u32::from(running),
        abnormal_exits,
        running,
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
    assert!(matches!(guarded, Guarded::RolledBack { .. }), "{guarded:?}");
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

    // Two abnormal exits and a clean stop: not due.
    write_marker(&n.data, Some(watch(2, false)));
    assert_eq!(guard(&n.files, NOW).expect("test fixture"), Guarded::Nothing);
    assert_eq!(std::fs::read(&n.live).expect("test fixture"), V2);
    assert_eq!(marker(&n.data).watch, Some(watch(2, false)), "the guard counts nothing");

    // Due, but no k0s.prev to put back.
    let n = node(false);
    write_marker(&n.data, Some(watch(2, true)));
    assert_eq!(guard(&n.files, NOW).expect("test fixture"), Guarded::Nothing);
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

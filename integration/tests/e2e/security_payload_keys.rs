//! A worker's trusted keys fail closed (issue 46 item 3): a `--payload-keys` directory the
//! node cannot use is a start error naming the path, never "no keys" (which would require
//! no signature). Three real workers against the real API server, each started with a
//! directory that is wrong in one way: missing (a typo, a mount not there yet), a dangling
//! symlink, and one holding only a subdirectory. Each exits non-zero within the start-up
//! bound, and its last words are `error: update agent cannot start: --payload-keys <path>:
//! <what is wrong>`.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// How long a refused start may take: the worker registers its Node first, then the update
/// agent's start reads the keys (no network, no timer).
const START_BOUND: Duration = Duration::from_secs(60);

/// Starts worker `name` with `--payload-keys keys` and checks it exits non-zero saying
/// `error: update agent cannot start: --payload-keys <keys>: <why>`.
async fn refused(cluster: &integration::Cluster, name: &str, keys: &Path, why: &str) {
    let worker = cluster
        .k0s_worker(name)
        .args(["--payload-keys", keys.to_str().expect("a UTF-8 temp path")])
        .spawn()
        .await
        .expect("spawned");
    let exit = worker.wait_exit(START_BOUND).await.expect("the worker exits");
    assert!(!exit.success(), "{name} started with unusable keys: {}", worker.log_tail(20));
    let said =
        format!("error: update agent cannot start: --payload-keys {}: {why}", keys.display());
    assert!(worker.log().contains(&said), "{name}: expected {said:?} in:\n{}", worker.log_tail(20));
}

#[tokio::test]
async fn a_worker_with_a_missing_dangling_or_keyless_payload_keys_directory_does_not_start() {
    let Fleet { cluster, client: _client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("security-payload-keys")
            .controllers(1)
            .workers(&["keys-missing", "keys-dangling", "keys-subdir"])
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    let work = tempfile::tempdir().expect("tempdir");

    // A typo, or a mount not there yet.
    let missing = work.path().join("not-mounted-yet");
    refused(&cluster, "keys-missing", &missing, "no such directory").await;

    // A symlink to a directory that is gone.
    let dangling = work.path().join("keys-link");
    std::os::unix::fs::symlink(work.path().join("gone"), &dangling).expect("symlink");
    refused(&cluster, "keys-dangling", &dangling, "no such directory").await;

    // Only a subdirectory: no key file, and not a key file either.
    let subdir = work.path().join("keys");
    std::fs::create_dir_all(subdir.join("old")).expect("mkdir");
    seal_keys_dir(&subdir);
    let old = subdir.join("old");
    refused(
        &cluster,
        "keys-subdir",
        &subdir,
        &format!("{} is a directory, not a key file", old.display()),
    )
    .await;
}

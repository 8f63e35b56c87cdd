//! `cargo xtask dist` end to end (issue 29 item 4): the payload and the Plan that `dist`
//! writes install on a real cluster. `dist` packages the v2 build the harness already has
//! (no second release build), signed with a P-256 key made by `openssl` at test time; the
//! test serves the binary and its `.sig` over loopback and changes only what an operator
//! changes, the Plan's `url` and `signatureURL`. A controller and a worker that requires a
//! signature by that key (`--payload-keys`) both end up running v2.

use std::path::Path;
use std::process::Command;

use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::dist;
use integration::http::FileServer;

use crate::support::*;

fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().expect("running openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The last path segment of `url`.
fn file_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

#[tokio::test]
async fn the_signed_payload_and_plan_dist_writes_update_a_controller_and_a_worker() {
    let v2 = integration::k0s_binary_with_version(V2).expect("the v2 build");
    let work = tempfile::tempdir().expect("tempdir");
    let key = work.path().join("release.pem");
    let keys_dir = work.path().join("trusted-keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path_str(&key),
    ]);
    let public = keys_dir.join("release.pub");
    openssl(&["pkey", "-in", path_str(&key), "-pubout", "-out", path_str(&public)]);

    let options = dist::Options {
        binary: Some(v2),
        out: Some(work.path().join("dist")),
        key: Some(key),
        ..dist::Options::new(V2)
    };
    let written = dist::dist(&options).expect("dist");
    let signature = written.signature.clone().expect("signed with the P-256 key");

    // The operator publishes the files (here: loopback servers, one per file) and edits the
    // URLs of the Plan as written on disk; nothing else.
    let as_written: Plan =
        serde_saphyr::from_str(&std::fs::read_to_string(&written.plan).expect("plan.yaml"))
            .expect("plan.yaml is a Plan");
    let binary_server =
        FileServer::start(std::fs::read(&written.binary).expect("the binary")).await.unwrap();
    let sig_server =
        FileServer::start(std::fs::read(&signature).expect("the signature")).await.unwrap();
    let mut edited = as_written.clone();
    let update = edited.spec.commands[0].k0supdate.as_mut().expect("a k0supdate command");
    assert_eq!(update.version, V2);
    let entry = update
        .platforms
        .get_mut(&autopilot_api::platform::current())
        .expect("an entry for this platform");
    assert_eq!(
        entry.sha256.as_deref(),
        Some(sha256_hex(&std::fs::read(&written.binary).unwrap()).as_str())
    );
    let sig_url = entry.signature_url.clone().expect("a signatureURL");
    entry.url = format!("{}/{}", binary_server.base_url(), file_name(&entry.url));
    entry.signature_url = Some(format!("{}/{}", sig_server.base_url(), file_name(&sig_url)));

    seal_keys_dir(&keys_dir);
    let keys_arg = path_str(&keys_dir).to_owned();
    let Fleet { cluster: _cluster, client, controllers, workers } = FleetBuilder::new("dist")
        .controllers(1)
        .workers(&["worker-0"])
        .agents(Agents::Real)
        .worker_args(&["--payload-keys", keys_arg.as_str()])
        .start()
        .await
        .unwrap();
    assert_ne!(version_on_disk(&workers[0]), V2);

    create_plan(&client, &edited).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    for name in ["controller-0", "worker-0"] {
        assert_eq!(
            target(&done, 0, name).state,
            TargetState::SignalCompleted,
            "{name}: {}",
            status_yaml(&done)
        );
    }
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    assert_eq!(version_on_disk(&workers[0]), V2);
    assert_eq!(version_on_disk(&controllers[0]), V2);
    assert!(sig_server.requests() >= 1, "the worker fetched the signature");
}

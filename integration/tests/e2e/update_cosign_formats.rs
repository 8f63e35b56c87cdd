//! Signatures as cosign users make them (issue 46 item 8): the real cosign 2 (v2.6.5) and
//! cosign 3 (v3.1.3), built by the harness, run the commands `docs/security.md` gives, as
//! written there (read from the file): each makes a key pair (`generate-key-pair`, empty
//! password) and signs each payload, named `k0s`, offline as a `.sig` and as a bundle.
//! One cluster, one worker trusting both public keys, one plan at a time (each deleted
//! before the next), the worker going back and forth between v1 and v2:
//!
//! - cosign 2's `.sig`, from a `signatureURL`: to v2;
//! - cosign 2's `--bundle` file (`{"base64Signature": …}`), inline: back to v1;
//! - cosign 3's default bundle (protobuf JSON, `messageSignature`), from a `signatureURL`: to
//!   v2;
//! - cosign 3's `.sig` (`--new-bundle-format=false`), inline: back to v1;
//! - and first, a cosign bundle the node cannot read (cosign 3's `attest-blob` bundle: an
//!   in-toto attestation about the payload, not a signature of it) ends the plan
//!   `ApplyFailed` with the sentence naming the cosign commands that make files it reads,
//!   the worker untouched.

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanCommandK0sUpdate, PlanStateType, TargetState};
use autopilot_signal::signature::ACCEPTED_COSIGN_FILES;
use integration::cosign::{COSIGN_2, COSIGN_3, Cosign, documented_commands};
use integration::http::FileServer;
use std::path::{Path, PathBuf};

use crate::support::*;

/// How the Plan carries a signature: its text (`signature`) or where it is (`signatureURL`).
enum Carried {
    Inline(String),
    Url(String),
}

/// worker-0 to `version` from `<base>/k0s` with `sha256`, signed as `carried` says.
fn signed_update(
    version: &str,
    base: &str,
    sha256: &str,
    carried: Carried,
) -> PlanCommandK0sUpdate {
    let mut update = update_to(version, base, sha256, None, Some(static_nodes(&["worker-0"], 1)));
    for entry in update.platforms.values_mut() {
        match &carried {
            Carried::Inline(text) => entry.signature = Some(text.clone()),
            Carried::Url(url) => entry.signature_url = Some(url.clone()),
        }
    }
    update
}

/// Runs plan `id` with `update` to completion and checks worker-0 runs `version`.
async fn plan_updates(
    client: &kube::Client,
    worker: &integration::K0sProcess,
    id: &str,
    version: &str,
    update: PlanCommandK0sUpdate,
) {
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)])).await.expect("plan");
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .unwrap_or_else(|e| panic!("{id}: the plan completes: {e:#}"));
    assert_eq!(
        target(&done, 0, "worker-0").state,
        TargetState::SignalCompleted,
        "{id}: {}",
        status_yaml(&done)
    );
    wait_node_version(client, "worker-0", version).await.expect("the Node's version");
    assert_eq!(version_on_disk(worker), version, "{id}: the binary on disk");
    delete_plan(client).await;
}

/// What one cosign release made by running the docs' commands: its public key, and the
/// `.sig` and bundle of each payload (file names as in the docs).
struct Signed {
    public: PathBuf,
    v1: PathBuf,
    v2: PathBuf,
}

impl Signed {
    fn file(dir: &Path, name: &str) -> String {
        let path = dir.join(name);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("the docs' commands wrote no {}: {e}", path.display()))
    }
    fn v1(&self, name: &str) -> String {
        Self::file(&self.v1, name)
    }
    fn v2(&self, name: &str) -> String {
        Self::file(&self.v2, name)
    }
}

/// Runs `cosign`'s commands from `docs/security.md` in `<work>/<version>-v2/` over the v2
/// bytes as `k0s`, then, with the key pair made there, its signing commands in
/// `<work>/<version>-v1/` over the v1 bytes.
fn run_the_docs(cosign: &Cosign, work: &Path, v1: &[u8], v2: &[u8]) -> Signed {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/security.md");
    let docs = std::fs::read_to_string(&docs).expect("docs/security.md");
    let commands = documented_commands(&docs, cosign.release()).expect("the docs' commands");
    let version = cosign.release().version;
    let (dir_v1, dir_v2) = (work.join(format!("{version}-v1")), work.join(format!("{version}-v2")));
    for (dir, bytes) in [(&dir_v1, v1), (&dir_v2, v2)] {
        std::fs::create_dir(dir).expect("mkdir");
        std::fs::write(dir.join("k0s"), bytes).expect("the payload");
    }
    for command in &commands {
        cosign.run_documented(&dir_v2, command).expect("the docs' command");
    }
    for file in ["cosign.key", "cosign.pub"] {
        std::fs::copy(dir_v2.join(file), dir_v1.join(file)).expect("the key pair");
    }
    for command in commands.iter().filter(|c| c.get(1).is_some_and(|w| w == "sign-blob")) {
        cosign.run_documented(&dir_v1, command).expect("the docs' command");
    }
    Signed { public: dir_v2.join("cosign.pub"), v1: dir_v1, v2: dir_v2 }
}

#[tokio::test]
async fn a_worker_updates_with_each_signature_cosign_2_and_3_make_offline() {
    let cosign2 = Cosign::cached(COSIGN_2).expect("cosign 2 (cargo xtask control-plane)");
    let cosign3 = Cosign::cached(COSIGN_3).expect("cosign 3 (cargo xtask control-plane)");
    let (v2_bytes, v2_sha) = v2_build();
    let v1_bytes = std::fs::read(integration::k0s_binary().expect("k0s")).expect("the v1 build");
    let work = tempfile::tempdir().expect("tempdir");
    let work = work.path();
    let signed2 = run_the_docs(&cosign2, work, &v1_bytes, &v2_bytes);
    let signed3 = run_the_docs(&cosign3, work, &v1_bytes, &v2_bytes);
    let keys_dir = work.join("trusted-keys");
    std::fs::create_dir(&keys_dir).expect("mkdir");
    std::fs::copy(&signed2.public, keys_dir.join("cosign2.pub")).expect("the cosign 2 key");
    std::fs::copy(&signed3.public, keys_dir.join("cosign3.pub")).expect("the cosign 3 key");
    seal_keys_dir(&keys_dir);

    let keys_arg = keys_dir.display().to_string();
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-cosign-formats")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .worker_args(&["--payload-keys", keys_arg.as_str()])
            .start()
            .await
            .unwrap();
    let worker = workers.remove(0);
    let before = Before::of(&worker);
    assert!(before.bytes == v1_bytes, "the worker runs the v1 build the docs' commands signed");
    let v1_sha = sha256_hex(&before.bytes);
    let v2_server = FileServer::start(v2_bytes.clone()).await.unwrap();
    let v1_server = FileServer::start(before.bytes.clone()).await.unwrap();

    // A bundle the node cannot read: refused with the commands that make one it reads.
    let predicate = signed3.v2.join("predicate.json");
    std::fs::write(&predicate, r#"{"builder": "ci"}"#).expect("the predicate");
    let key3 = signed3.v2.join("cosign.key");
    let out = signed3.v2.join("k0s.attestation.json");
    let attestation = cosign3
        .attest_blob(&key3, &signed3.v2.join("k0s"), &predicate, &out)
        .expect("cosign attest-blob");
    let attestation = String::from_utf8(attestation).expect("cosign writes text");
    unreadable_bundle_refused(&client, &worker, &before, &v2_server, &v2_sha, attestation).await;

    // cosign 2's `.sig` from its URL: to v2.
    let sig_server = FileServer::start(signed2.v2("k0s.sig").into_bytes()).await.unwrap();
    let url = format!("{}/k0s.sig", sig_server.base_url());
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, Carried::Url(url));
    plan_updates(&client, &worker, "cosign2-sig", V2, update).await;
    assert!(sig_server.requests() >= 1, "the signature was fetched from its URL");

    // cosign 2's bundle, inline: back to v1.
    let bundle2 = signed2.v1("k0s.bundle");
    assert!(bundle2.contains("\"base64Signature\""), "cosign 2's own bundle: {bundle2}");
    let update =
        signed_update(&before.version, v1_server.base_url(), &v1_sha, Carried::Inline(bundle2));
    plan_updates(&client, &worker, "cosign2-bundle", &before.version, update).await;

    // cosign 3's bundle from its URL: to v2.
    let bundle3 = signed3.v2("k0s.sigstore.json");
    assert!(bundle3.contains("\"messageSignature\""), "cosign 3's bundle: {bundle3}");
    let bundle_server = FileServer::start(bundle3.into_bytes()).await.unwrap();
    let url = format!("{}/k0s.sigstore.json", bundle_server.base_url());
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, Carried::Url(url));
    plan_updates(&client, &worker, "cosign3-bundle", V2, update).await;

    // cosign 3's `.sig`, inline: back to v1.
    let sig3 = signed3.v1("k0s.sig");
    let update =
        signed_update(&before.version, v1_server.base_url(), &v1_sha, Carried::Inline(sig3));
    plan_updates(&client, &worker, "cosign3-sig", &before.version, update).await;
}

/// `attestation`, a bundle the node cannot read, given as the signature: the plan ends
/// `ApplyFailed` with the node's `FailedDownload` reason naming the cosign commands that make
/// a file it reads; the worker is untouched and nothing is downloaded.
async fn unreadable_bundle_refused(
    client: &kube::Client,
    worker: &integration::K0sProcess,
    before: &Before,
    v2_server: &FileServer,
    v2_sha: &str,
    attestation: String,
) {
    assert!(attestation.contains("\"dsseEnvelope\""), "an attestation bundle: {attestation}");
    let update = signed_update(V2, v2_server.base_url(), v2_sha, Carried::Inline(attestation));
    create_plan(client, &plan("autopilot", "unreadable", vec![k0s_command(update)]))
        .await
        .expect("plan");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan fails");
    let target = target(&failed, 0, "worker-0");
    assert_eq!(target.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(target.phase, Some(SignalPhase::FailedDownload), "{}", status_yaml(&failed));
    let reason = target.reason.clone().unwrap_or_default();
    assert!(reason.contains("the binary signature is unusable"), "{reason}");
    assert!(reason.contains("holds an attestation (dsseEnvelope)"), "{reason}");
    assert!(reason.contains(ACCEPTED_COSIGN_FILES), "names the cosign commands: {reason}");
    assert_eq!(v2_server.requests(), 0, "nothing was downloaded");
    before.assert_untouched(worker, "unreadable");
    delete_plan(client).await;
}

//! Signed payloads with the real control plane and a real worker (DESIGN §14, issue 24
//! item 2). The worker trusts two keys, made at test time: a P-256 key made with `openssl`
//! (cosign's format) and a minisign key made with `minisign`. One cluster, one plan at a time
//! (each deleted before the next):
//!
//! - the worker publishes the ids of the keys it requires on its Node, and a plan without a
//!   signature for it fails that node at NewPlan, naming the node and the key (its one failure
//!   is past `maxFailures: 0`, so the plan ends `ApplyFailed`); nothing is signalled or
//!   downloaded;
//! - a signature by a key the worker does not trust, one over other bytes, a truncated one
//!   and a `signatureURL` that answers 404 each end the plan `ApplyFailed` with the node's
//!   `FailedDownload` reason, the worker untouched (same process, same binary, nothing
//!   staged) and each counted as a verification failure;
//! - a cosign `.sig` from a `signatureURL` (k0s's release layout) updates the worker to v2,
//!   and a minisign signature given inline takes it back to v1.

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{PlanCommandK0sUpdate, PlanStateType, TargetState};
use base64::Engine as _;
use integration::http::{FileServer, Serve};
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

fn run(program: &str, args: &[&str], paths: &[&Path]) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .args(paths)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A P-256 key made by `openssl` in `dir`; its public half written to `public` (if given).
/// Returns the private key's path.
pub(crate) fn p256_key(dir: &Path, name: &str, public: Option<&Path>) -> PathBuf {
    let key = dir.join(format!("{name}.pem"));
    run("openssl", &["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"], &[&key]);
    if let Some(public) = public {
        run("openssl", &["ec", "-pubout", "-in"], &[&key, Path::new("-out"), public]);
    }
    key
}

/// The id of the P-256 public key in `public`: hex SHA-256 of its DER encoding.
pub(crate) fn p256_key_id(public: &Path) -> String {
    let der = run("openssl", &["ec", "-pubin", "-outform", "DER", "-in"], &[public]);
    sha256_hex(&der)
}

/// What `cosign sign-blob` writes for the file `blob`: base64 of the DER ECDSA-P256-SHA256
/// signature.
fn cosign_sig(key: &Path, blob: &Path) -> String {
    let der = run("openssl", &["dgst", "-sha256", "-sign"], &[key, blob]);
    base64::engine::general_purpose::STANDARD.encode(der)
}

/// A minisign key pair without a password: `(secret key path, key id)`, the public key
/// written to `public`.
fn minisign_key(dir: &Path, public: &Path) -> (PathBuf, String) {
    let secret = dir.join("minisign.key");
    run("minisign", &["-G", "-W", "-p"], &[public, Path::new("-s"), &secret]);
    let text = std::fs::read_to_string(public).expect("the minisign public key");
    let line = text.lines().rfind(|l| !l.trim().is_empty()).expect("a key line").trim();
    let blob = base64::engine::general_purpose::STANDARD.decode(line).expect("base64");
    (secret, sha256_hex(&blob))
}

/// minisign's (prehashed) signature of the file `blob`.
fn minisign_sig(secret: &Path, blob: &Path) -> String {
    let sig = blob.with_extension("minisig");
    run("minisign", &["-S", "-s"], &[secret, Path::new("-m"), blob, Path::new("-x"), &sig]);
    std::fs::read_to_string(sig).expect("the signature")
}

/// worker-0 to `version` from `url` with `sha256`, signed as `signature` (inline) or
/// `signature_url`.
fn signed_update(
    version: &str,
    base: &str,
    sha256: &str,
    signature: Option<String>,
    signature_url: Option<String>,
) -> PlanCommandK0sUpdate {
    let mut update = update_to(version, base, sha256, None, Some(static_nodes(&["worker-0"], 1)));
    for entry in update.platforms.values_mut() {
        entry.signature = signature.clone();
        entry.signature_url = signature_url.clone();
    }
    update
}

/// Runs plan `id` with `update`, waits for it to fail on worker-0's download, checks the
/// worker is untouched and returns the target's reason.
async fn plan_fails(
    client: &kube::Client,
    worker: &K0sProcess,
    before: &Before,
    id: &str,
    update: PlanCommandK0sUpdate,
) -> String {
    create_plan(client, &plan("autopilot", id, vec![k0s_command(update)])).await.expect("plan");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan fails");
    let target = target(&failed, 0, "worker-0");
    assert_eq!(target.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(target.phase, Some(SignalPhase::FailedDownload), "{}", status_yaml(&failed));
    before.assert_untouched(worker, id);
    let (unschedulable, marked) = node_cordon(client, "worker-0").await.expect("the Node");
    assert!(!unschedulable && !marked, "a refused payload never cordons the node ({id})");
    delete_plan(client).await;
    target.reason.clone().unwrap_or_default()
}

/// The worker's `agent_verify_failures_total`.
async fn verify_failures(worker: &K0sProcess) -> f64 {
    let address = worker.metrics_address().expect("started with metrics");
    let scrape = integration::metrics::scrape(address).await.expect("scraping the worker");
    scrape.value_or_zero("k0s_autopilot_agent_verify_failures_total", &[])
}

#[tokio::test]
async fn a_worker_with_trusted_keys_runs_only_payloads_signed_by_one_of_them() {
    let (v2_bytes, v2_sha) = v2_build();
    let keys_work = tempfile::tempdir().expect("tempdir");
    let work = keys_work.path();
    let keys_dir = work.join("trusted-keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    let cosign_pub = keys_dir.join("cosign.pub");
    let release = p256_key(work, "release", Some(&cosign_pub));
    let stranger = p256_key(work, "stranger", None);
    let (minisign_secret, minisign_id) = minisign_key(work, &keys_dir.join("minisign.pub"));
    let cosign_id = p256_key_id(&cosign_pub);
    let v2_file = work.join("k0s-v2");
    std::fs::write(&v2_file, &v2_bytes).expect("v2 file");

    seal_keys_dir(&keys_dir);
    let keys_arg = keys_dir.display().to_string();
    let Fleet { cluster: _cluster, client, controllers: _controllers, mut workers } =
        FleetBuilder::new("update-signed-payload")
            .controllers(1)
            .workers(&["worker-0"])
            .agents(Agents::Real)
            .worker_args(&["--payload-keys", keys_arg.as_str()])
            .worker_metrics()
            .start()
            .await
            .unwrap();
    let worker = workers.remove(0);
    let before = Before::of(&worker);
    let v1_file = work.join("k0s-v1");
    std::fs::write(&v1_file, &before.bytes).expect("v1 file");

    // The worker publishes the ids of both keys on its Node.
    check_published_keys(&client, &[cosign_id.as_str(), minisign_id.as_str()]).await;

    // (a) No signature: refused at NewPlan, naming the node and its keys; nothing is
    // signalled or fetched.
    let v2_server = FileServer::start(v2_bytes.clone()).await.unwrap();
    unsigned_refused(&client, &worker, &before, &v2_server, &v2_sha, &cosign_id).await;

    // (b) A signature by a key the worker does not trust.
    let by_stranger = cosign_sig(&stranger, &v2_file);
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, Some(by_stranger), None);
    let reason = plan_fails(&client, &worker, &before, "wrong-key", update).await;
    assert!(reason.contains("does not verify: no trusted key made this signature"), "{reason}");

    // (c) A trusted key's signature over other bytes (v1's).
    let over_v1 = cosign_sig(&release, &v1_file);
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, Some(over_v1), None);
    let reason = plan_fails(&client, &worker, &before, "bad-signature", update).await;
    assert!(reason.contains("does not verify: no trusted key made this signature"), "{reason}");

    // (d) A truncated signature.
    let good = cosign_sig(&release, &v2_file);
    let truncated = good[..good.len() / 2].to_owned();
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, Some(truncated), None);
    let reason = plan_fails(&client, &worker, &before, "truncated", update).await;
    assert!(reason.contains("the binary signature is unusable"), "{reason}");

    // (e) A signatureURL with nothing there.
    let missing = FileServer::start_with(Serve::Status(404)).await.unwrap();
    let missing_url = format!("{}/k0s.sig", missing.base_url());
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, None, Some(missing_url.clone()));
    let reason = plan_fails(&client, &worker, &before, "missing", update).await;
    assert!(reason.contains("fetching the binary signature"), "{reason}");
    assert!(reason.contains("404") && reason.contains(&missing_url), "{reason}");
    assert_eq!(
        verify_failures(&worker).await,
        4.0,
        "each refusal counts as a verification failure"
    );

    // (f) cosign's `.sig` beside the binary: the worker goes to v2.
    let sig_server = FileServer::start(good.into_bytes()).await.unwrap();
    let sig_url = format!("{}/k0s.sig", sig_server.base_url());
    let update = signed_update(V2, v2_server.base_url(), &v2_sha, None, Some(sig_url));
    create_plan(&client, &plan("autopilot", "cosign", vec![k0s_command(update)])).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    assert_eq!(version_on_disk(&worker), V2);
    assert!(sig_server.requests() >= 1, "the signature was fetched from its URL");
    delete_plan(&client).await;

    // (g) A minisign signature, inline: back to v1.
    let v1_server = FileServer::start(before.bytes.clone()).await.unwrap();
    let v1_sha = sha256_hex(&before.bytes);
    let signature = minisign_sig(&minisign_secret, &v1_file);
    let update =
        signed_update(&before.version, v1_server.base_url(), &v1_sha, Some(signature), None);
    create_plan(&client, &plan("autopilot", "minisign", vec![k0s_command(update)])).await.unwrap();
    wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    wait_node_version(&client, "worker-0", &before.version).await.unwrap();
    assert_eq!(version_on_disk(&worker), before.version);
}

/// The worker publishes the ids of the keys it trusts (`key_ids`) on its Node.
async fn check_published_keys(client: &kube::Client, key_ids: &[&str]) {
    let nodes: Api<Node> = Api::all(client.clone());
    let published = wait_for(STARTUP, "worker-0 to publish the keys it requires", || async {
        let node = nodes.get("worker-0").await?;
        Ok(node.metadata.annotations.and_then(|a| a.get(keys::ANNOTATION_PAYLOAD_KEYS).cloned()))
    })
    .await
    .expect("the published keys");
    let mut ids: Vec<&str> = published.split(',').collect();
    ids.sort_unstable();
    let mut expected = key_ids.to_vec();
    expected.sort_unstable();
    assert_eq!(ids, expected, "the ids of the P-256 and the minisign key");
}

/// (a) No signature: refused at NewPlan, naming the node and its key; nothing is signalled
/// or fetched.
async fn unsigned_refused(
    client: &kube::Client,
    worker: &K0sProcess,
    before: &Before,
    v2_server: &FileServer,
    v2_sha: &str,
    cosign_id: &str,
) {
    let unsigned = signed_update(V2, v2_server.base_url(), v2_sha, None, None);
    create_plan(client, &plan("autopilot", "unsigned", vec![k0s_command(unsigned)]))
        .await
        .expect("creating the plan");
    let refused =
        wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed).await.expect("refused");
    let description = refused.status.as_ref().and_then(|s| s.commands[0].description.clone());
    let description = description.unwrap_or_default();
    assert!(
        description.contains("Node worker-0: not signalled: Node worker-0 requires a signature"),
        "{description}"
    );
    assert!(description.contains(cosign_id), "the key is named: {description}");
    assert!(
        node_signal(client, "worker-0").await.expect("reading the signal").is_none(),
        "never signalled"
    );
    assert_eq!(v2_server.requests(), 0, "nothing was downloaded");
    before.assert_untouched(worker, "unsigned");
    delete_plan(client).await;
}

/// One worker publishing a key no signature of the Plan matches, `maxFailures: 1`: that
/// worker fails at NewPlan (never signalled, nothing fetched by it), naming the node and the
/// key; the other workers update and the plan completes (issue 46 item 4).
#[tokio::test]
async fn one_worker_publishing_a_key_no_signature_matches_fails_alone() {
    let (v2_bytes, v2_sha) = v2_build();
    let keys_work = tempfile::tempdir().expect("tempdir");
    let keys_dir = keys_work.path().join("trusted-keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    let cosign_pub = keys_dir.join("cosign.pub");
    p256_key(keys_work.path(), "release", Some(&cosign_pub));
    let cosign_id = p256_key_id(&cosign_pub);
    seal_keys_dir(&keys_dir);
    let keys_arg = keys_dir.display().to_string();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("update-one-keyed-worker")
            .controllers(1)
            .workers(&["worker-0", "worker-1", "worker-2"])
            .agents(Agents::Real)
            .node_args("worker-1", &["--payload-keys", keys_arg.as_str()])
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(STARTUP, "worker-1 to publish the key it requires", || async {
        let node = nodes.get("worker-1").await?;
        Ok(node.metadata.annotations.and_then(|a| a.get(keys::ANNOTATION_PAYLOAD_KEYS).cloned()))
    })
    .await
    .expect("worker-1's keys");

    let v2_server = FileServer::start(v2_bytes).await.unwrap();
    let mut workers_target = static_nodes(&["worker-0", "worker-1", "worker-2"], 1);
    workers_target.limits.max_failures = Some(1);
    let update = update_to(V2, v2_server.base_url(), &v2_sha, None, Some(workers_target));
    create_plan(&client, &plan("autopilot", "one-keyed", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan completes without worker-1");
    for name in ["worker-0", "worker-2"] {
        assert_eq!(target(&done, 0, name).state, TargetState::SignalCompleted, "{name}");
        wait_node_version(&client, name, V2).await.unwrap();
    }
    let keyed = target(&done, 0, "worker-1");
    assert_eq!(keyed.state, TargetState::SignalApplyFailed, "{}", status_yaml(&done));
    let reason = keyed.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "not signalled: Node worker-1 requires a signature by key {cosign_id} and \
             platforms.linux-amd64 has none; only this node fails"
        )),
        "{reason}"
    );
    assert!(
        node_signal(&client, "worker-1").await.expect("reading the signal").is_none(),
        "worker-1 is never signalled"
    );
    let description = done.status.as_ref().and_then(|s| s.commands[0].description.clone());
    assert!(
        description.unwrap_or_default().contains("within limits.maxFailures 1"),
        "{}",
        status_yaml(&done)
    );
    // The workers come in the order they were named.
    assert_ne!(version_on_disk(&workers[1]), V2, "worker-1 keeps its binary");
}

//! Authenticated payloads with the real control plane and the real node agents (DESIGN §11
//! "Authenticated payloads"). One cluster, one controller, two workers, one plan at a time
//! (each deleted before the next):
//!
//! - (a) a plain-http payload without sha256: the controller refuses the plan at NewPlan
//!   (`Warning`, the reason naming the platform entry and the fixes); worker-0 is never
//!   signalled and keeps its process and binary, and nothing is downloaded;
//! - (d) an https payload whose server redirects to a plain-http URL: the worker refuses
//!   the redirect, the plan ends `ApplyFailed` naming it, and worker-0 is untouched;
//! - (c) an https payload without sha256: the update completes, and a Warning Event on the
//!   Plan names the platform entry and the risk;
//! - (b) the controller restarted with `--allow-unverified-payloads`: worker-0 (without the
//!   flag) still refuses the plain-http payload of (a) itself and fetches nothing; worker-1
//!   (with it, still on v1) is updated to the end.

use std::time::Duration;

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    PlanCommandK0sUpdate, PlanCommandRollout, PlanCommandTargets, PlanResourceUrl, PlanStateType,
    TargetState,
};
use integration::http::{FileServer, Serve};
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::Api;

use crate::support::*;

/// A `k0supdate` of `worker` to [`V2`] from `url`, with no sha256.
fn unverified_update(worker: &str, url: &str) -> PlanCommandK0sUpdate {
    PlanCommandK0sUpdate {
        drain: None,
        drain_options: None,
        version: V2.to_owned(),
        forceupdate: false,
        platforms: [(
            autopilot_api::platform::current(),
            PlanResourceUrl { url: url.to_owned(), sha256: None, ..Default::default() },
        )]
        .into(),
        targets: PlanCommandTargets {
            controllers: None,
            workers: Some(static_nodes(&[worker], 1)),
        },
        rollout: PlanCommandRollout::default(),
    }
}

/// `(type, reason, note)` of every Event about the Plan named `autopilot`.
async fn plan_events(client: &kube::Client) -> anyhow::Result<Vec<(String, String, String)>> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&Default::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Plan") && r.name.as_deref() == Some("autopilot")
            })
        })
        .map(|e| {
            (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.note.unwrap_or_default())
        })
        .collect())
}

#[tokio::test]
async fn payloads_no_node_can_verify_are_refused_and_https_ones_are_warned_about() {
    let (v2_bytes, _v2_sha) = v2_build();
    let p = Payloads::start(v2_bytes).await;
    // The workers trust a CA file the test puts in the cluster's directory: the test starts
    // them.
    let Fleet { cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("update-unverified-payload")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .agents(Agents::Real)
            .unstarted_workers()
            .start()
            .await
            .unwrap();
    // The workers trust both TLS servers' certificates.
    let ca = cluster.dir().join("download-ca.pem");
    let pems = [&p.tls, &p.redirecting].map(|server| server.ca_pem().expect("a tls server"));
    std::fs::write(&ca, pems.join("")).unwrap();
    let ca_arg = ca.display().to_string();
    // worker-1 alone accepts unverified payloads, as (b) needs.
    let worker = cluster.spawn_worker("worker-0", &["--download-ca-file", &ca_arg]).await.unwrap();
    let spare = cluster
        .spawn_worker("worker-1", &["--download-ca-file", &ca_arg, "--allow-unverified-payloads"])
        .await
        .unwrap();
    wait_nodes_ready(&client, &["worker-0", "worker-1"]).await.unwrap();
    let (worker, spare) = (&worker, &spare);
    let before = Before::of(worker);
    assert_ne!(before.version, V2);

    // (a) Plain http, no sha256: refused at NewPlan, before anything is signalled.
    plain_http_refused(&client, &p, worker, &before).await;

    // (d) https redirecting to plain http: the worker refuses to follow.
    redirect_to_plain_http_refused(&client, &p, worker, &before).await;

    // (c) https, no sha256: runs to the end, with a Warning Event naming the risk.
    https_warned_about(&client, &p).await;

    // (b) The controller restarted with --allow-unverified-payloads: plain http runs.
    allowed_plain_http(&cluster, &client, &p, &controllers[0], spare).await;
}

/// The payload servers: plain http, https, and https redirecting to plain http.
struct Payloads {
    /// v2 over plain http.
    plain: FileServer,
    /// Its URL.
    plain_url: String,
    /// v2 over https.
    tls: FileServer,
    /// Its URL.
    tls_url: String,
    /// v2 over plain http, where the redirect points.
    redirect_target: FileServer,
    /// Its URL.
    redirect_to: String,
    /// https, redirecting to `redirect_to`.
    redirecting: FileServer,
    /// Its URL.
    redirect_from: String,
}

impl Payloads {
    /// Serves `v2_bytes` over plain http, over https, and behind an https redirect to plain
    /// http.
    async fn start(v2_bytes: Vec<u8>) -> Self {
        let plain = FileServer::start(v2_bytes.clone()).await.expect("a plain http server");
        let plain_url = format!("{}/k0s", plain.base_url());
        let tls =
            FileServer::start_tls(Serve::Body(v2_bytes.clone())).await.expect("an https server");
        let tls_url = format!("{}/k0s", tls.base_url());
        let redirect_target = FileServer::start(v2_bytes).await.expect("a plain http server");
        let redirect_to = format!("{}/k0s", redirect_target.base_url());
        let redirecting = FileServer::start_tls(Serve::Redirect(redirect_to.clone()))
            .await
            .expect("an https server");
        let redirect_from = format!("{}/k0s", redirecting.base_url());
        Self {
            plain,
            plain_url,
            tls,
            tls_url,
            redirect_target,
            redirect_to,
            redirecting,
            redirect_from,
        }
    }
}

/// (a) Plain http, no sha256: refused at NewPlan, before anything is signalled.
async fn plain_http_refused(
    client: &kube::Client,
    p: &Payloads,
    worker: &K0sProcess,
    before: &Before,
) {
    let platform = autopilot_api::platform::current();
    let plain_url = &p.plain_url;
    let update = unverified_update("worker-0", plain_url);
    create_plan(client, &plan("autopilot", "plain-http", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let refused =
        wait_plan_state(client, "autopilot", PlanStateType::Warning).await.expect("the plan ends");
    let description = command(&refused, 0).description.clone().unwrap_or_default();
    assert_eq!(
        description,
        format!(
            "command 0 (k0supdate): platform {platform} ({plain_url}) has no sha256 and is not \
             https, so nothing would check what the nodes download; give its sha256, serve it \
             over https, or run the controller with --allow-unverified-payloads"
        ),
        "{}",
        status_yaml(&refused)
    );
    assert_eq!(command(&refused, 0).state, PlanStateType::Warning);
    assert!(targets(command(&refused, 0)).is_empty(), "{}", status_yaml(&refused));
    assert!(
        node_signal(client, "worker-0").await.expect("reading the signal").is_none(),
        "worker-0 not signalled"
    );
    assert_eq!(p.plain.requests(), 0, "nothing was downloaded");
    before.assert_untouched(worker, "(a)");
    delete_plan(client).await;
}

/// (d) https redirecting to plain http: the worker refuses to follow.
async fn redirect_to_plain_http_refused(
    client: &kube::Client,
    p: &Payloads,
    worker: &K0sProcess,
    before: &Before,
) {
    let (redirect_from, redirect_to) = (&p.redirect_from, &p.redirect_to);
    let update = unverified_update("worker-0", redirect_from);
    create_plan(client, &plan("autopilot", "redirect", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan ends");
    let failed_target = target(&failed, 0, "worker-0");
    assert_eq!(failed_target.state, TargetState::SignalApplyFailed, "{}", status_yaml(&failed));
    assert_eq!(failed_target.phase, Some(SignalPhase::FailedDownload));
    let reason = failed_target.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "GET {redirect_from}: refusing the redirect to {redirect_to}: it leaves https for \
             plain http"
        )),
        "{reason}"
    );
    assert!(p.redirecting.requests() >= 1, "the worker asked the https server");
    assert_eq!(p.redirect_target.requests(), 0, "the plain-http URL was never fetched");
    before.assert_untouched(worker, "(d)");
    delete_plan(client).await;
}

/// (c) https, no sha256: runs to the end, with a Warning Event naming the risk, once per
/// run.
async fn https_warned_about(client: &kube::Client, p: &Payloads) {
    let platform = autopilot_api::platform::current();
    let tls_url = &p.tls_url;
    let update = unverified_update("worker-0", tls_url);
    create_plan(client, &plan("autopilot", "https", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends");
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
    wait_node_version(client, "worker-0", V2).await.expect("the worker publishes v2");
    assert!(p.tls.requests() >= 1, "worker-0 downloaded over https");
    let warning = wait_for(Duration::from_secs(30), "the UnverifiedPayload event", || async {
        let events = plan_events(client).await?;
        // The plan of (d) was warned about too (its URL is https without sha256).
        Ok(events
            .into_iter()
            .find(|(_, reason, note)| reason == "UnverifiedPayload" && note.contains(tls_url)))
    })
    .await
    .expect("the UnverifiedPayload event");
    let (kind, _, note) = warning;
    assert_eq!(kind, "Warning");
    assert_eq!(
        note,
        format!(
            "command 0 (k0supdate): platform {platform} ({tls_url}) has no sha256: it is \
             downloaded over https without an integrity check; give its sha256 to have every \
             node verify it"
        )
    );
    let warnings = plan_events(client)
        .await
        .expect("the plan's Events")
        .into_iter()
        .filter(|(_, reason, note)| reason == "UnverifiedPayload" && note.contains(tls_url))
        .count();
    assert_eq!(warnings, 1, "once per run");
    delete_plan(client).await;
}

/// (b) The controller restarted with --allow-unverified-payloads: plain http runs on the
/// node that allows it too (`spare`), not on one that does not.
async fn allowed_plain_http(
    cluster: &integration::Cluster,
    client: &kube::Client,
    p: &Payloads,
    controller: &K0sProcess,
    spare: &K0sProcess,
) {
    let plain_url = &p.plain_url;
    assert_ne!(binary_version(spare.binary_path()), V2, "worker-1 is still on v1");
    let old_leader = leader_identity(client).await.expect("reading the leader");
    controller.stop(Duration::from_secs(20)).await.expect("stopping the controller");
    let _allowing = cluster
        .spawn_controller(0, &["--allow-unverified-payloads"])
        .await
        .expect("the controller starts again");
    wait_for(STARTUP, "the restarted controller to lead", || async {
        let now = leader_identity(client).await?;
        Ok(now.filter(|holder| Some(holder) != old_leader.as_ref()))
    })
    .await
    .expect("the restarted controller to lead");
    // A node that does not allow unverified payloads itself still refuses the signal: the
    // controller's check is not the only one.
    let update = unverified_update("worker-0", plain_url);
    create_plan(client, &plan("autopilot", "plain-http-node-refuses", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let failed = wait_plan_state(client, "autopilot", PlanStateType::ApplyFailed)
        .await
        .expect("the plan ends");
    let failed_target = target(&failed, 0, "worker-0");
    assert_eq!(failed_target.phase, Some(SignalPhase::Failed), "{}", status_yaml(&failed));
    let reason = failed_target.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(&format!("refused: {plain_url:?} is plain http without a sha256")),
        "{reason}"
    );
    assert_eq!(p.plain.requests(), 0, "worker-0 fetched nothing");
    delete_plan(client).await;
    // worker-1 runs with --allow-unverified-payloads: the update runs to the end.
    let update = unverified_update("worker-1", plain_url);
    create_plan(client, &plan("autopilot", "plain-http-allowed", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let done = wait_plan_state(client, "autopilot", PlanStateType::Completed)
        .await
        .expect("the plan ends");
    assert_eq!(target(&done, 0, "worker-1").state, TargetState::SignalCompleted);
    wait_node_version(client, "worker-1", V2).await.expect("the worker publishes v2");
    assert!(p.plain.requests() >= 1, "worker-1 downloaded over plain http");
    assert_eq!(binary_version(spare.binary_path()), V2);
    let warning = wait_for(Duration::from_secs(30), "the UnverifiedPayload event", || async {
        let events = plan_events(client).await?;
        Ok(events
            .into_iter()
            .find(|(_, reason, note)| reason == "UnverifiedPayload" && note.contains(plain_url)))
    })
    .await
    .expect("the UnverifiedPayload event");
    assert!(warning.2.contains("allowed by --allow-unverified-payloads"), "{}", warning.2);
}

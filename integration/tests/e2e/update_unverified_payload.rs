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
    PlanCommandK0sUpdate, PlanCommandTargets, PlanResourceUrl, PlanStateType, TargetState,
};
use integration::http::{FileServer, Serve};
use integration::{ClusterBuilder, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::Api;

use crate::support::*;

/// A `k0supdate` of `worker` to [`V2`] from `url`, with no sha256.
fn unverified_update(worker: &str, url: &str) -> PlanCommandK0sUpdate {
    PlanCommandK0sUpdate {
        prestage: false,
        prestage_concurrent: None,
        gates: Vec::new(),
        drain: None,
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
        progress_timeout: None,
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
    let platform = autopilot_api::platform::current();
    let plain = FileServer::start(v2_bytes.clone()).await.unwrap();
    let plain_url = format!("{}/k0s", plain.base_url());
    let tls = FileServer::start_tls(Serve::Body(v2_bytes.clone())).await.unwrap();
    let tls_url = format!("{}/k0s", tls.base_url());
    let redirect_target = FileServer::start(v2_bytes).await.unwrap();
    let redirect_to = format!("{}/k0s", redirect_target.base_url());
    let redirecting = FileServer::start_tls(Serve::Redirect(redirect_to.clone())).await.unwrap();
    let redirect_from = format!("{}/k0s", redirecting.base_url());

    let cluster = ClusterBuilder::new("update-unverified-payload")
        .controllers(1)
        .workers(&["worker-0", "worker-1"])
        .build()
        .await
        .unwrap();
    let client = cluster.admin_client().await.unwrap();
    // The workers trust both TLS servers' certificates.
    let ca = cluster.dir().join("download-ca.pem");
    let pems = [&tls, &redirecting].map(|server| server.ca_pem().expect("a tls server"));
    std::fs::write(&ca, pems.join("")).unwrap();
    let ca_arg = ca.display().to_string();
    let controllers = start_controllers_with_agents(&cluster, 1, &[]).await.unwrap();
    // worker-1 alone accepts unverified payloads, as (b) needs.
    let worker =
        start_workers_with_agents_and(&cluster, &["worker-0"], &["--download-ca-file", &ca_arg])
            .await
            .unwrap()
            .remove(0);
    let spare = start_workers_with_agents_and(
        &cluster,
        &["worker-1"],
        &["--download-ca-file", &ca_arg, "--allow-unverified-payloads"],
    )
    .await
    .unwrap()
    .remove(0);
    let (worker, spare) = (&worker, &spare);
    let before = Before::of(worker);
    assert_ne!(before.version, V2);

    // (a) Plain http, no sha256: refused at NewPlan, before anything is signalled.
    let update = unverified_update("worker-0", &plain_url);
    create_plan(&client, &plan("autopilot", "plain-http", vec![k0s_command(update)]))
        .await
        .unwrap();
    let refused = wait_plan_state(&client, "autopilot", PlanStateType::Warning).await.unwrap();
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
    assert!(node_signal(&client, "worker-0").await.unwrap().is_none(), "worker-0 not signalled");
    assert_eq!(plain.requests(), 0, "nothing was downloaded");
    before.assert_untouched(worker, "(a)");
    delete_plan(&client).await;

    // (d) https redirecting to plain http: the worker refuses to follow.
    let update = unverified_update("worker-0", &redirect_from);
    create_plan(&client, &plan("autopilot", "redirect", vec![k0s_command(update)])).await.unwrap();
    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
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
    assert!(redirecting.requests() >= 1, "the worker asked the https server");
    assert_eq!(redirect_target.requests(), 0, "the plain-http URL was never fetched");
    before.assert_untouched(worker, "(d)");
    delete_plan(&client).await;

    // (c) https, no sha256: runs to the end, with a Warning Event naming the risk.
    let update = unverified_update("worker-0", &tls_url);
    create_plan(&client, &plan("autopilot", "https", vec![k0s_command(update)])).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    assert!(tls.requests() >= 1, "worker-0 downloaded over https");
    let warning = wait_for(Duration::from_secs(30), "the UnverifiedPayload event", || async {
        let events = plan_events(&client).await?;
        // The plan of (d) was warned about too (its URL is https without sha256).
        Ok(events
            .into_iter()
            .find(|(_, reason, note)| reason == "UnverifiedPayload" && note.contains(&tls_url)))
    })
    .await
    .unwrap();
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
    let warnings = plan_events(&client)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, reason, note)| reason == "UnverifiedPayload" && note.contains(&tls_url))
        .count();
    assert_eq!(warnings, 1, "once per run");
    delete_plan(&client).await;

    // (b) The controller restarted with --allow-unverified-payloads: plain http runs.
    assert_ne!(binary_version(spare.binary_path()), V2, "worker-1 is still on v1");
    let old_leader = leader_identity(&client).await.unwrap();
    controllers[0].stop(Duration::from_secs(20)).await.unwrap();
    let _allowing = cluster.spawn_controller(0, &["--allow-unverified-payloads"]).await.unwrap();
    wait_for(STARTUP, "the restarted controller to lead", || async {
        let now = leader_identity(&client).await?;
        Ok(now.filter(|holder| Some(holder) != old_leader.as_ref()))
    })
    .await
    .unwrap();
    // A node that does not allow unverified payloads itself still refuses the signal: the
    // controller's check is not the only one.
    let update = unverified_update("worker-0", &plain_url);
    create_plan(&client, &plan("autopilot", "plain-http-node-refuses", vec![k0s_command(update)]))
        .await
        .unwrap();
    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let failed_target = target(&failed, 0, "worker-0");
    assert_eq!(failed_target.phase, Some(SignalPhase::Failed), "{}", status_yaml(&failed));
    let reason = failed_target.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(&format!("refused: {plain_url:?} is plain http without a sha256")),
        "{reason}"
    );
    assert_eq!(plain.requests(), 0, "worker-0 fetched nothing");
    delete_plan(&client).await;
    // worker-1 runs with --allow-unverified-payloads: the update runs to the end.
    let update = unverified_update("worker-1", &plain_url);
    create_plan(&client, &plan("autopilot", "plain-http-allowed", vec![k0s_command(update)]))
        .await
        .unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(target(&done, 0, "worker-1").state, TargetState::SignalCompleted);
    wait_node_version(&client, "worker-1", V2).await.unwrap();
    assert!(plain.requests() >= 1, "worker-1 downloaded over plain http");
    assert_eq!(binary_version(spare.binary_path()), V2);
    let warning = wait_for(Duration::from_secs(30), "the UnverifiedPayload event", || async {
        let events = plan_events(&client).await?;
        Ok(events
            .into_iter()
            .find(|(_, reason, note)| reason == "UnverifiedPayload" && note.contains(&plain_url)))
    })
    .await
    .unwrap();
    assert!(warning.2.contains("allowed by --allow-unverified-payloads"), "{}", warning.2);
}

//! Pre-staging (`prestage: true`) with the real node agents: every target downloads,
//! verifies and self-tests the payload before the first node is signalled, so before any is
//! cordoned; the update then takes the staged file (nothing is downloaded twice). A node that
//! cannot stage fails the plan with no node signalled, cordoned or changed.

use autopilot_api::prestage::PrestageState;
use autopilot_api::v1beta2::{PlanStateType, TargetState};
use integration::http::{FileServer, Serve};
use integration::signals::SignalRecorder;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

#[tokio::test]
async fn every_worker_stages_before_the_first_is_cordoned_and_the_update_downloads_nothing() {
    let (v2, sha) = v2_build();
    // Both staging downloads are held part-way until the test has looked around.
    let server = FileServer::start_with(Serve::HoldUntilReleased { body: v2, after: 1 << 20 })
        .await
        .unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("plan-prestage")
            .controllers(1)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let recorder = SignalRecorder::start(&client).await.unwrap();
    let mut update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&WORKERS, 1)));
    update.rollout.prestage = true;
    create_plan(&client, &plan("autopilot", "prestage", vec![k0s_command(update)])).await.unwrap();

    // Both workers stage at once (prestageConcurrent unset: all), and while they do no node
    // carries a signal or a cordon.
    server.wait_held(2, PLAN_TIMEOUT).await.unwrap();
    let staging = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "both asked to stage", |p| {
        WORKERS.iter().all(|w| target(p, 0, w).prestage == Some(PrestageState::Requested))
    })
    .await
    .unwrap();
    assert_eq!(command(&staging, 0).staged.as_deref(), Some("0/2"), "{}", status_yaml(&staging));
    let reason = command(&staging, 0).reason.clone().unwrap_or_default();
    assert!(reason.starts_with("pre-staging: "), "{reason}");
    assert!(reason.contains("; 0/2 staged, waiting for"), "{reason}");
    for name in WORKERS {
        assert_eq!(node_cordon(&client, name).await.unwrap(), (false, false), "{name} cordoned");
        assert!(node_signal(&client, name).await.unwrap().is_none(), "{name} signalled");
    }
    assert!(recorder.history().is_empty(), "signalled while staging: {:?}", recorder.history());

    server.release();
    let done = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    assert_eq!(command(&done, 0).staged.as_deref(), Some("2/2"), "{}", status_yaml(&done));
    for name in WORKERS {
        let t = target(&done, 0, name);
        assert_eq!(t.state, TargetState::SignalCompleted, "{}", status_yaml(&done));
        assert_eq!(t.prestage, Some(PrestageState::Staged), "{name}");
    }
    for process in &workers {
        assert_eq!(version_on_disk(process), V2, "{}", process.node_name());
    }
    // One download per worker: the updates took the staged files.
    assert_eq!(server.requests(), 2, "the update downloaded again");
    // The first signal came after both had staged: the recorder saw nothing before the
    // release, and each worker got exactly one signal.
    let per_object = recorder.by_object();
    assert_eq!(per_object.len(), 2, "{per_object:?}");
}

#[tokio::test]
async fn a_worker_that_cannot_stage_fails_the_plan_with_nothing_signalled_or_cordoned() {
    let (v2, _) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("plan-prestage-fails")
            .controllers(1)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let before: Vec<Before> = workers.iter().map(Before::of).collect();
    let recorder = SignalRecorder::start(&client).await.unwrap();
    // The digest is not the payload's: verification fails on every worker.
    let wrong = sha256_hex(b"not the v2 build");
    let mut update =
        update_to(V2, server.base_url(), &wrong, None, Some(static_nodes(&WORKERS, 1)));
    update.rollout.prestage = true;
    create_plan(&client, &plan("autopilot", "prestage-fails", vec![k0s_command(update)]))
        .await
        .unwrap();

    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let description = command(&failed, 0).description.clone().unwrap_or_default();
    // The first report ends the plan; which worker's comes first is the workers' race.
    assert!(description.contains("Node worker-"), "{description}");
    assert!(description.contains("could not stage the payload"), "{description}");
    assert!(description.contains("sha256"), "{description}");
    assert!(recorder.history().is_empty(), "a node was signalled: {:?}", recorder.history());
    // The other worker finishes its own attempt (and fails too) after the plan ended.
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    for name in WORKERS {
        integration::wait_for(PLAN_TIMEOUT, &format!("{name}'s pre-staging report"), || async {
            let node = nodes.get(name).await?;
            let report =
                autopilot_api::ask::report_of::<autopilot_api::prestage::Prestage>(&node.metadata)
                    .map_err(|problem| anyhow::anyhow!(problem))?;
            Ok(report
                .filter(|r| r.says.outcome == autopilot_api::prestage::PrestageOutcome::Failed))
        })
        .await
        .unwrap();
    }
    for (process, before) in workers.iter().zip(&before) {
        let name = process.node_name();
        assert_eq!(node_cordon(&client, name).await.unwrap(), (false, false), "{name} cordoned");
        before.assert_untouched(process, name);
    }
}

/// How many workers the big plan stages, one at a time.
const BIG: usize = 300;

/// A Node name of 230 characters: with 300 of them the Plan's status is far over the 64 KiB
/// above which its progress is written at a pace.
fn long_name(i: usize) -> String {
    let name = format!("stager-{i:03}-");
    format!("{name}{}", "n".repeat(230 - name.len()))
}

/// Creates the Node `name` on this machine's platform.
async fn register(nodes: &kube::Api<k8s_openapi::api::core::v1::Node>, name: String) {
    let node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name,
            "annotations": { autopilot_api::keys::ANNOTATION_K0S_VERSION: PLAIN_VERSION },
            "labels": {
            autopilot_api::keys::LABEL_OS: autopilot_api::platform::os(),
            autopilot_api::keys::LABEL_ARCH: autopilot_api::platform::arch(),
        } },
    }))
    .expect("a Node");
    nodes.create(&Default::default(), &node).await.unwrap_or_else(|e| panic!("{name}: {e}"));
}

/// Answers every pre-staging request on the Nodes as the node agent does: it reads the Plan
/// and stages only what its status authorizes (`authorize::prestage`); a request the status
/// does not back is answered `Failed` with the refusal. Counts the refusals.
async fn stage_as_agents(
    client: kube::Client,
    refusals: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use autopilot_api::ask::{report_of, request_of};
    use autopilot_api::prestage::{Prestage, PrestageOutcome, PrestageSays};
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let plans: kube::Api<autopilot_api::v1beta2::Plan> = kube::Api::all(client);
    let mut events = watcher(nodes.clone(), watcher::Config::default()).applied_objects().boxed();
    while let Some(Ok(node)) = events.next().await {
        let Ok(Some(request)) = request_of::<Prestage>(&node.metadata) else { continue };
        let answered = report_of::<Prestage>(&node.metadata).ok().flatten();
        if answered.is_some_and(|r| r.run_id == request.run_id && r.command == request.command) {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let plan = plans.get_opt(autopilot_api::keys::PLAN_NAME).await.ok().flatten();
        let platform = autopilot_api::platform::current();
        let node_ref = autopilot_engine::authorize::Node {
            name: &name,
            role: autopilot_engine::authorize::Role::Worker,
            platform: Some(&platform),
        };
        let (outcome, reason) =
            match autopilot_engine::authorize::prestage(plan.as_ref(), &request, node_ref) {
                Ok(_) => (PrestageOutcome::Staged, None),
                Err(refusal) => {
                    refusals.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    (PrestageOutcome::Failed, Some(refusal))
                }
            };
        let report = request.answer(PrestageSays { outcome, reason });
        let patch = serde_json::json!({ "metadata": { "annotations": {
            autopilot_api::keys::ANNOTATION_PRESTAGE_REPORT: serde_json::to_string(&report).expect("JSON"),
        } } });
        let params = kube::api::PatchParams::default();
        if let Err(e) = nodes.patch(&name, &params, &kube::api::Patch::Merge(&patch)).await {
            eprintln!("stager: reporting on {name}: {e}");
        }
    }
}

/// With the Plan's status over 64 KiB (its progress written at a pace) and
/// `prestageConcurrent: 1`, each request to stage is written after the status that asks the
/// node, so no node finds its request unauthorized: every target ends `Staged`.
#[tokio::test]
async fn every_target_of_a_plan_over_64_kib_stages_one_at_a_time() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _ } =
        FleetBuilder::new("plan-prestage-big").controllers(1).start().await.unwrap();
    let nodes = kube::Api::all(client.clone());
    let names: Vec<String> = (0..BIG).map(long_name).collect();
    futures::StreamExt::collect::<Vec<()>>(futures::StreamExt::buffer_unordered(
        futures::stream::iter(names.iter().map(|name| register(&nodes, name.clone()))),
        16,
    ))
    .await;
    let refusals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stager = tokio::spawn(stage_as_agents(client.clone(), refusals.clone()));

    let sha = "ab".repeat(32);
    let names_ref: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut update =
        update_to(V2, "https://127.0.0.1:9", &sha, None, Some(static_nodes(&names_ref, 1)));
    update.rollout.prestage = true;
    update.rollout.prestage_concurrent = Some(1);
    create_plan(&client, &plan("autopilot", "big-prestage", vec![k0s_command(update)]))
        .await
        .unwrap();
    let staged =
        wait_plan(&client, "autopilot", std::time::Duration::from_secs(300), "all staged", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.commands.first().and_then(|c| c.staged.as_deref())
                    == Some(&format!("{BIG}/{BIG}"))
            }) || state(p).is_terminal()
        })
        .await
        .unwrap();
    let bytes = serde_json::to_vec(&staged.status).expect("JSON").len();
    assert!(bytes > 64 * 1024, "the status is over 64 KiB: {bytes} bytes");
    for name in &names {
        assert_eq!(
            target(&staged, 0, name).prestage,
            Some(PrestageState::Staged),
            "{name}: {}",
            status_yaml(&staged)
        );
    }
    assert_eq!(
        refusals.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a request came before its status"
    );
    stager.abort();
    delete_plan(&client).await;
}

//! Upgrade path and version skew at NewPlan, on the real control plane with real controller
//! and worker processes (the responder plays the update agents). The versions judged are the
//! ones the cluster reports: the controller's, what its API server answers on `/version`
//! (the harness's kube-apiserver, `v1.35.4`, while the controller publishes k0s
//! `v1.35.0+k0s.0`); the worker's, its Node's `status.nodeInfo.kubeletVersion` (this worker
//! runs no kubelet, so the test writes that report as a kubelet would). A plan of the workers
//! alone to `v1.36` (workers newer than the API server) and one of the controller to `v1.37`
//! (skipping `v1.36`) end `Warning` before anything is signalled, naming the rule, the nodes,
//! their versions with where each came from and the version to go through first (a worker's
//! own report of its version alone refuses no plan); `k0s autopilot preview -f` says the same
//! and exits 1. The annotation `autopilot.k0sproject.io/allow-skew` naming another plan id
//! does not count (the refusal says so); naming the plan's id lets the same plan run to
//! `Completed`, and the preview of the annotated file says it would run. Last, a kubelet that
//! reports a minor behind the k0s version its node publishes is what counts: the controller's
//! update runs, and a `VersionSkewLeftBehind` Event names the worker by its kubelet's version.

use std::process::Output;

use autopilot_api::keys;
use autopilot_api::v1beta2::{Plan, PlanStateType};
use integration::Cluster;
use integration::responder::{Config, Responder};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use crate::support::*;

/// A forced update (no removed-API lookup) of the given targets to `version`.
fn skewed(id: &str, version: &str, controllers: bool, workers: bool) -> Plan {
    let mut update = k0s_update(
        controllers.then(|| static_nodes(&["controller-0"], 1)),
        workers.then(|| static_nodes(&["worker-0"], 1)),
    );
    update.version = version.to_owned();
    plan("autopilot", id, vec![k0s_command(update)])
}

fn annotated(mut plan: Plan, allow_skew: &str) -> Plan {
    plan.metadata.annotations =
        Some([(keys::ANNOTATION_ALLOW_SKEW.to_owned(), allow_skew.to_owned())].into());
    plan
}

/// `k0s autopilot preview -f` of `plan` as the admin.
async fn preview(cluster: &Cluster, file: &str, plan: &Plan) -> Output {
    preview_plan(cluster, file, plan, cluster.admin_kubeconfig(0)).await
}

/// Stand in for the kubelet of Node `name`: report `version` in its
/// `status.nodeInfo.kubeletVersion` (the status subresource, as the admin).
async fn kubelet_reports(client: &kube::Client, name: &str, version: &str) {
    let status = serde_json::json!({"status": {"nodeInfo": {"kubeletVersion": version}}});
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the kubelet's report");
    let reported = node.status.and_then(|s| s.node_info).map(|info| info.kubelet_version);
    assert_eq!(reported.as_deref(), Some(version));
}

/// Create `plan`, wait for it to end, and return command 0's description (the plan deleted
/// again).
async fn refusal(client: &kube::Client, plan: &Plan) -> String {
    create_plan(client, plan).await.expect("the plan");
    let ended =
        wait_plan_state(client, "autopilot", PlanStateType::Warning).await.expect("Warning");
    let status = status_yaml(&ended);
    assert_eq!(command(&ended, 0).state, PlanStateType::Warning, "{status}");
    delete_plan(client).await;
    command(&ended, 0).description.clone().unwrap_or_default()
}

#[tokio::test]
async fn skew_is_refused_naming_the_rule_and_the_version_and_allow_skew_lets_the_plan_run() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-skew").controllers(1).workers(&["worker-0"]).start().await.unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();
    kubelet_reports(&client, "worker-0", "v1.35.4").await;

    // Workers ahead of the controller's API server.
    let workers_first = skewed("workers-first", "v1.36.0+k0s.0", false, true);
    let expected = "commands[0].k0supdate.version: v1.36.0+k0s.0 breaks the version skew rules: \
                    [worker-newer-than-controller] worker worker-0 (planned k0s v1.36.0+k0s.0) \
                    would be newer than controller controller-0 (API server v1.35.4); update the \
                    controllers to v1.36 first (controllers go first). To run the plan anyway, \
                    annotate it autopilot.k0sproject.io/allow-skew=workers-first";
    assert_eq!(refusal(&client, &workers_first).await, expected);
    let output = preview(&cluster, "workers-first.yaml", &workers_first).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(&format!("  - the plan would end Warning: {expected}\n")), "{stdout}");

    // The controller skipping a minor version (and leaving the worker two behind).
    let skip = skewed("skip", "v1.37.0+k0s.0", true, false);
    let description = refusal(&client, &skip).await;
    assert!(
        description.contains(
            "[controller-minor-skip] controller controller-0 (API server v1.35.4) would go to \
             v1.37.0+k0s.0 in one step, skipping v1.36; update it to a v1.36 release first"
        ),
        "{description}"
    );
    // The worker left two minors behind rests on that worker's own report: it fails no
    // plan (it would be named in a VersionSkewLeftBehind Event of a run that goes on).
    assert!(!description.contains("[worker-too-old]"), "{description}");
    let output = preview(&cluster, "skip.yaml", &skip).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("[controller-minor-skip] controller controller-0 (API server v1.35.4)"),
        "{stdout}"
    );
    assert!(responder.log().is_empty(), "nothing was signalled:\n{}", responder.log());

    // The annotation naming another plan id does not count, and the refusal says so.
    let other = annotated(workers_first.clone(), "an-earlier-plan");
    let description = refusal(&client, &other).await;
    assert!(
        description.ends_with(
            "(the annotation names plan id \"an-earlier-plan\", not this plan's id \
             \"workers-first\")"
        ),
        "{description}"
    );

    // Naming the plan's id: the preview says it would run, and the same plan runs.
    let allowed = annotated(workers_first, "workers-first");
    let output = preview(&cluster, "allowed.yaml", &allowed).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.ends_with("The plan would run.\n"), "{stdout}");
    create_plan(&client, &allowed).await.unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(command(&done, 0).state, PlanStateType::Completed, "{}", status_yaml(&done));
    delete_plan(&client).await;

    // The worker's kubelet reports v1.34 (its node still publishes k0s v1.35.0+k0s.0): the
    // controller going to v1.36 leaves it two minor versions behind by its own report, so
    // the run goes on and an Event names it with its kubelet's version.
    kubelet_reports(&client, "worker-0", "v1.34.4").await;
    let controller_up = skewed("controller-up", "v1.36.0+k0s.0", true, false);
    let output = preview(&cluster, "controller-up.yaml", &controller_up).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    create_plan(&client, &controller_up).await.unwrap();
    let note = wait_plan_event(&client, "VersionSkewLeftBehind").await.unwrap();
    assert!(
        note.contains(
            "[worker-too-old] worker worker-0 (kubelet v1.34.4) would be 2 minor versions \
             behind controller controller-0 (planned k0s v1.36.0+k0s.0)"
        ),
        "{note}"
    );
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(command(&done, 0).state, PlanStateType::Completed, "{}", status_yaml(&done));
}

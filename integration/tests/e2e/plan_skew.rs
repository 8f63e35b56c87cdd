//! Upgrade path and version skew at NewPlan, on the real control plane with real controller
//! and worker processes (they publish the versions they run, `v1.35.0+k0s.0`; the responder
//! plays the update agents). A plan of the workers alone to `v1.36` (workers newer than the
//! controller) and one of the controller to `v1.37` (skipping `v1.36`) end `Warning` before
//! anything is signalled, naming the rule, the nodes, their versions and the version to go
//! through first (a worker's own report of its version alone refuses no plan); `k0s autopilot preview -f` says the same and exits 1. The annotation
//! `autopilot.k0sproject.io/allow-skew` naming another plan id does not count (the refusal
//! says so); naming the plan's id lets the same plan run to `Completed`, and the preview of
//! the annotated file says it would run.

use std::process::Output;

use autopilot_api::keys;
use autopilot_api::v1beta2::{Plan, PlanStateType};
use integration::Cluster;
use integration::responder::{Config, Responder};

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

    // Workers ahead of the controller.
    let workers_first = skewed("workers-first", "v1.36.0+k0s.0", false, true);
    let expected = "commands[0].k0supdate.version: v1.36.0+k0s.0 breaks the version skew rules: \
                    [worker-newer-than-controller] worker worker-0 would run v1.36.0+k0s.0, \
                    newer than controller controller-0 (v1.35.0+k0s.0); update the controllers \
                    to v1.36 first (controllers go first). To run the plan anyway, annotate it \
                    autopilot.k0sproject.io/allow-skew=workers-first";
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
            "[controller-minor-skip] controller controller-0 would go from v1.35.0+k0s.0 to \
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
    assert!(stdout.contains("[controller-minor-skip] controller controller-0"), "{stdout}");
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
}

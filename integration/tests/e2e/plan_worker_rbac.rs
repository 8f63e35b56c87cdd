//! A cluster installed without `manifests/rbac/worker.yaml` (issue 47, item 8): the workers'
//! agents may not read the Plan, so each signalled worker would refuse its signal once its
//! read stayed forbidden for `authorize::read::FORBIDDEN_GRACE`, one node at a time. NewPlan
//! asks the API server first (a SubjectAccessReview for one worker's identity): the plan
//! ends `Warning` within seconds, naming the identity and the manifest, and no node is
//! signalled. `k0s autopilot preview`, run by an admin, says the same before the Plan
//! exists. (With the manifest applied, every other real-agent scenario runs as before,
//! e.g. `plan_api_outage`.)

use std::process::Output;
use std::time::{Duration, Instant};

use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::Cluster;
use integration::http::FileServer;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// How soon the plan must end: well before a single worker's refusal could end it
/// (`FORBIDDEN_GRACE`, 60 s, after it was signalled).
const SAID_WITHIN: Duration = Duration::from_secs(15);

/// Writes `plan` as YAML into the cluster directory and runs `k0s autopilot preview -f` on
/// it as the admin (who may create SubjectAccessReviews).
async fn preview_as_admin(cluster: &Cluster, plan: &Plan) -> Output {
    preview_plan(cluster, "plan.yaml", plan, cluster.admin_kubeconfig(0)).await
}

#[tokio::test]
async fn without_the_worker_rbac_the_plan_ends_warning_at_new_plan_and_no_worker_is_signalled() {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.expect("the v2 file server");
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-worker-rbac")
            .controllers(1)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .controller_args(&[NO_AGENT])
            .without_worker_rbac()
            .start()
            .await
            .unwrap();
    let update = update_to(V2, server.base_url(), &sha, None, Some(static_nodes(&WORKERS, 1)));
    let plan = plan("autopilot", "worker-rbac", vec![k0s_command(update)]);

    // The preview says it first: exit 1, the missing permission among the problems.
    let output = preview_as_admin(&cluster, &plan).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("the preview:\n{stdout}");
    assert_eq!(output.status.code(), Some(1), "stdout:\n{stdout}");
    assert!(
        stdout.contains(
            "  - the plan would end Warning: the workers may not read the Plan: \
             system:node:worker-0 (groups system:nodes, system:authenticated) may not get \
             plans.autopilot.k0sproject.io \"autopilot\""
        ),
        "{stdout}"
    );
    assert!(stdout.contains("kubectl apply -f manifests/rbac/worker.yaml"), "{stdout}");

    // The leader says it at NewPlan, within seconds, before signalling anyone.
    let created = Instant::now();
    create_plan(&client, &plan).await.unwrap();
    let ended = wait_plan_state(&client, "autopilot", PlanStateType::Warning).await.unwrap();
    let took = created.elapsed();
    eprintln!("the plan ended Warning {took:?} after it was created:\n{}", status_yaml(&ended));
    assert!(took <= SAID_WITHIN, "ended after {took:?}; at most {SAID_WITHIN:?} allowed");
    let command = command(&ended, 0);
    assert_eq!(command.state, PlanStateType::Warning);
    let description = command.description.as_deref().unwrap_or_default();
    for part in [
        "system:node:worker-0",
        "get plans.autopilot.k0sproject.io \"autopilot\"",
        "ClusterRoleBinding k0s-autopilot-worker",
        "kubectl apply -f manifests/rbac/worker.yaml",
    ] {
        assert!(description.contains(part), "{part:?} not in {description:?}");
    }
    for target in targets(command) {
        assert_eq!(target.state, TargetState::SignalPending, "{}: never signalled", target.name);
    }
    let signalled = objects_with_signals(&client).await.unwrap();
    assert!(signalled.is_empty(), "no node carries a signal: {signalled:?}");
}

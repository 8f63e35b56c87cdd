//! `k0s autopilot pause|resume|abort` against a real API server: each verb writes (or
//! removes) its annotation on the Plan and prints one line saying what it did and what
//! happens next, counting the nodes in flight from the Plan's status; repeating a verb
//! writes nothing and says so; a missing Plan and an ended Plan are one `error:` line and
//! exit status 1, with nothing written.
//!
//! No k0s controller runs: the verbs only annotate the Plan (what the plan engine does with
//! the annotations is the engine's scenarios' business). The Plan CRD is installed from `manifests/crds/`, and the
//! Plan's status, with two nodes in flight, is written through the status subresource as the
//! engine would.

use std::collections::BTreeMap;
use std::process::Output;

use autopilot_api::keys;
use autopilot_api::v1beta2::{
    Plan, PlanCommandK0sUpdateStatus, PlanCommandStatus, PlanStateType, PlanStatus, TargetState,
    TargetStatus,
};
use integration::{Cluster, run_k0s};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::*;

/// A running status: two workers in flight (`SignalSent`), one done, one pending.
fn running_status() -> PlanStatus {
    let now = jiff::Timestamp::now();
    let worker = |name: &str, state| TargetStatus::new(name, state, now);
    PlanStatus {
        state: PlanStateType::SchedulableWait,
        commands: vec![PlanCommandStatus {
            id: 0,
            state: PlanStateType::SchedulableWait,
            k0supdate: Some(PlanCommandK0sUpdateStatus {
                controllers: Vec::new(),
                workers: vec![
                    worker("worker-0", TargetState::SignalCompleted),
                    worker("worker-1", TargetState::SignalSent),
                    worker("worker-2", TargetState::SignalSent),
                    worker("worker-3", TargetState::SignalPending),
                ],
            }),
            ..PlanCommandStatus::default()
        }],
        ..PlanStatus::default()
    }
}

/// Creates the Plan `name` and writes `status` through the status subresource.
async fn create_plan_with_status(client: &kube::Client, name: &str, status: &PlanStatus) {
    let workers = ["worker-0", "worker-1", "worker-2", "worker-3"];
    let update = k0s_update(None, Some(static_nodes(&workers, 2)));
    create_plan(client, &plan(name, "steer", vec![k0s_command(update)]))
        .await
        .expect("creating the plan");
    let plans: Api<Plan> = Api::all(client.clone());
    plans
        .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
        .await
        .expect("writing the plan status");
}

/// Runs `k0s autopilot <args> --kubeconfig <admin>` off the async runtime.
async fn k0s_autopilot(cluster: &Cluster, args: &[&str]) -> Output {
    let kubeconfig = cluster.admin_kubeconfig(0);
    let mut all: Vec<String> = vec!["autopilot".into()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    all.extend(["--kubeconfig".into(), kubeconfig.to_string_lossy().into_owned()]);
    tokio::task::spawn_blocking(move || {
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        run_k0s(&all).expect("k0s runs")
    })
    .await
    .expect("the k0s run")
}

/// Asserts a successful run that printed exactly `line` on stdout.
fn assert_says(output: &Output, line: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "k0s failed ({}); stderr:\n{stderr}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("{line}\n"), "stderr:\n{stderr}");
}

/// Asserts a run that failed with exit status 1 and exactly the one stderr line `line`.
fn assert_fails(output: &Output, line: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "exit status; stderr:\n{stderr}");
    assert_eq!(stderr, format!("{line}\n"));
    assert!(output.stdout.is_empty(), "nothing on stdout: {:?}", output.stdout);
}

/// The steering annotations on the Plan `name`.
async fn steering(client: &kube::Client, name: &str) -> BTreeMap<String, String> {
    let plans: Api<Plan> = Api::all(client.clone());
    let plan = plans.get(name).await.expect("reading the plan");
    plan.annotations()
        .iter()
        .filter(|(key, _)| {
            [keys::ANNOTATION_PAUSED, keys::ANNOTATION_ABORT].contains(&key.as_str())
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test]
async fn pause_resume_and_abort_annotate_the_plan_and_say_what_happens_next() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("cli-steer")
            .controllers(1)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    install_crd(&client, keys::CRD_PLANS).await;

    // No Plan yet: every verb says so and fails.
    for verb in ["pause", "resume", "abort"] {
        let output = k0s_autopilot(&cluster, &[verb]).await;
        assert_fails(&output, "error: plan \"autopilot\" not found");
    }

    create_plan_with_status(&client, keys::PLAN_NAME, &running_status()).await;
    let paused = [(keys::ANNOTATION_PAUSED, "true")];

    let output = k0s_autopilot(&cluster, &["pause"]).await;
    assert_says(
        &output,
        "plan autopilot paused: no new node will be signalled; 2 node(s) in flight will finish \
         (k0s autopilot resume to go on)",
    );
    assert_eq!(steering(&client, "autopilot").await, annotations(&paused));

    let output = k0s_autopilot(&cluster, &["pause", "--plan", "autopilot"]).await;
    assert_says(
        &output,
        "plan autopilot was already paused: no new node will be signalled; 2 node(s) in flight \
         will finish (k0s autopilot resume to go on)",
    );
    assert_eq!(steering(&client, "autopilot").await, annotations(&paused));

    let output = k0s_autopilot(&cluster, &["resume"]).await;
    assert_says(
        &output,
        "plan autopilot resumed: nodes will be signalled again as its limits allow",
    );
    assert_eq!(steering(&client, "autopilot").await, annotations(&[]));

    let output = k0s_autopilot(&cluster, &["resume"]).await;
    assert_says(
        &output,
        "plan autopilot was not paused: nodes will be signalled again as its limits allow",
    );
    assert_eq!(steering(&client, "autopilot").await, annotations(&[]));

    // Abort a paused plan: resume afterwards removes the pause and only the pause.
    assert!(k0s_autopilot(&cluster, &["pause"]).await.status.success());
    let output = k0s_autopilot(&cluster, &["abort"]).await;
    assert_says(
        &output,
        "plan autopilot aborted: no new node will be signalled; 2 node(s) in flight will finish, \
         then the plan ends Aborted with no autopilot cordon left",
    );
    assert_eq!(
        steering(&client, "autopilot").await,
        annotations(&[(keys::ANNOTATION_PAUSED, "true"), (keys::ANNOTATION_ABORT, "true")])
    );
    let output = k0s_autopilot(&cluster, &["abort"]).await;
    assert_says(
        &output,
        "plan autopilot was already being aborted: no new node will be signalled; 2 node(s) in \
         flight will finish, then the plan ends Aborted with no autopilot cordon left",
    );
    let output = k0s_autopilot(&cluster, &["resume"]).await;
    assert_says(
        &output,
        "plan autopilot resumed: it is being aborted, so no new node will be signalled",
    );
    assert_eq!(
        steering(&client, "autopilot").await,
        annotations(&[(keys::ANNOTATION_ABORT, "true")])
    );

    // An ended plan (another name, through --plan) is neither paused nor aborted.
    let ended = PlanStatus { state: PlanStateType::ApplyFailed, ..running_status() };
    create_plan_with_status(&client, "ended", &ended).await;
    let output = k0s_autopilot(&cluster, &["pause", "--plan", "ended"]).await;
    assert_fails(&output, "error: plan \"ended\" already ended in ApplyFailed: nothing to pause");
    let output = k0s_autopilot(&cluster, &["abort", "--plan", "ended"]).await;
    assert_fails(&output, "error: plan \"ended\" already ended in ApplyFailed: nothing to abort");
    assert_eq!(steering(&client, "ended").await, annotations(&[]), "nothing written");
}

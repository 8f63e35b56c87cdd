//! What GitOps engines read from a live Plan (issue 47): the conditions the leader writes,
//! judged by the engines' own code (the real kstatus of cli-utils, the shipped
//! `healthCheckExprs` evaluated by Flux's evaluator, `manifests/gitops/plan-health.lua` run
//! as Argo CD runs it) and waited on with the real `kubectl wait`, through one run that
//! completes and runs that end `ApplyFailed` (the node's download fails its sha256),
//! `Warning` (a payload URL no node could fetch) and `Aborted` (the abort annotation).
//!
//! One controller and two workers, updated one at a time (so an abort with worker-0 in flight
//! leaves worker-1 undone); the responder plays the nodes.

use std::path::Path;
use std::process::ExitStatus;

use anyhow::Context as _;
use autopilot_api::keys::{self, conditions};
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::gitops::{self, Health, Kstatus, Verdict};
use integration::responder::{Behaviour, Config, Release, Responder};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// What the node says of a payload whose bytes do not match the Plan's sha256.
const SHA256_MISMATCH: &str = "sha256 mismatch: the payload hashes to 1f2e…, the plan says 0000…";

#[tokio::test]
async fn kstatus_flux_argo_cd_and_kubectl_wait_read_every_end_of_a_live_plan() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("gitops-health").controllers(1).workers(&WORKERS).start().await.unwrap();
    let kubeconfig = cluster.admin_kubeconfig(0);
    let release = Release::new();
    let config = Config::new().node("worker-0", Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await.unwrap();

    // Running: worker-0 in flight (worker-1 completes at once when its turn comes).
    create_plan(&client, &plan("autopilot", "gitops-1", vec![worker_update()])).await.unwrap();
    let running = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "worker-0 in flight", |p| {
        count_targets(p, TargetState::SignalSent) == 1
            && condition_holds(p, conditions::RECONCILING)
    })
    .await
    .unwrap();
    assert_verdicts(&running, Kstatus::InProgress, Health::Progressing);

    // Completed.
    release.release();
    let completed = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_verdicts(&completed, Kstatus::Current, Health::Healthy);
    let ready = kubectl_wait(&kubeconfig, "Ready", "60s").await.unwrap();
    assert!(ready.success(), "kubectl wait --for=condition=Ready: {ready}");

    // ApplyFailed: the node's download fails its sha256.
    delete_plan(&client).await;
    responder
        .set_behaviour("worker-0", Behaviour::fail(SignalPhase::FailedDownload, SHA256_MISMATCH));
    create_plan(&client, &plan("autopilot", "gitops-2", vec![worker_update()])).await.unwrap();
    let failed = wait_plan_state(&client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    assert_stalled(&kubeconfig, &failed).await;

    // Warning: a payload URL no node could fetch, refused in the first pass.
    delete_plan(&client).await;
    let mut update = k0s_update(None, Some(static_nodes(&WORKERS, 1)));
    for entry in update.platforms.values_mut() {
        entry.url = "http://127.0.0.1:port/k0s".to_owned();
    }
    create_plan(&client, &plan("autopilot", "gitops-3", vec![k0s_command(update)])).await.unwrap();
    let warning = wait_plan_state(&client, "autopilot", PlanStateType::Warning).await.unwrap();
    assert_stalled(&kubeconfig, &warning).await;

    // Aborted: the abort annotation with worker-0 in flight, which then finishes.
    delete_plan(&client).await;
    let release = Release::new();
    responder.set_behaviour("worker-0", Behaviour::CompleteAfter(release.clone()));
    create_plan(&client, &plan("autopilot", "gitops-4", vec![worker_update()])).await.unwrap();
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "worker-0 in flight", |p| {
        count_targets(p, TargetState::SignalSent) == 1
    })
    .await
    .unwrap();
    abort(&client).await.unwrap();
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "the plan to wait on abort", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.commands.first())
            .and_then(|c| c.reason.as_deref())
            .is_some_and(|r| r.contains("the plan is aborted"))
    })
    .await
    .unwrap();
    release.release();
    let aborted = wait_plan_state(&client, "autopilot", PlanStateType::Aborted).await.unwrap();
    assert_stalled(&kubeconfig, &aborted).await;
}

/// A `k0supdate` of the workers, one at a time.
fn worker_update() -> autopilot_api::v1beta2::PlanCommand {
    k0s_command(k0s_update(None, Some(static_nodes(&WORKERS, 1))))
}

/// Whether the plan's condition `kind` is True.
fn condition_holds(plan: &Plan, kind: &str) -> bool {
    plan.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// The message of the plan's condition `kind`.
fn condition_message(plan: &Plan, kind: &str) -> String {
    let status = plan.status.as_ref().expect("a status");
    let condition = status.conditions.iter().find(|c| c.type_ == kind);
    condition
        .unwrap_or_else(|| panic!("no {kind} condition:\n{}", status_yaml(plan)))
        .message
        .clone()
}

/// kstatus and Flux's evaluation of the shipped expressions say `kstatus`, Argo CD's says
/// `health`; returns the kstatus and Argo CD verdicts.
fn assert_verdicts(
    plan: &Plan,
    kstatus: Kstatus,
    health: Health,
) -> (Verdict<Kstatus>, Verdict<Health>) {
    let object = serde_json::to_value(plan).expect("the plan as JSON");
    let said = gitops::kstatus(&object).expect("kstatus judges the plan");
    assert_eq!(said.status, kstatus, "kstatus: {said}\n{}", status_yaml(plan));
    let exprs = gitops::plan_flux_exprs().expect("the shipped healthCheckExprs");
    let flux = gitops::flux_health(&exprs, &object).expect("Flux evaluates the expressions");
    assert_eq!(flux.status, kstatus, "Flux: {flux}\n{}", status_yaml(plan));
    let argo = gitops::argo_health(&gitops::plan_health_script(), &object).expect("the Lua runs");
    assert_eq!(argo.status, health, "Argo CD: {argo}\n{}", status_yaml(plan));
    (said, argo)
}

/// An unsuccessful end: kstatus and Flux `Failed`, Argo CD `Degraded`, both with Stalled's
/// message; `kubectl wait --for=condition=Stalled` exits 0 and `--for=condition=Ready` does
/// not.
async fn assert_stalled(kubeconfig: &Path, plan: &Plan) {
    let (said, argo) = assert_verdicts(plan, Kstatus::Failed, Health::Degraded);
    let stalled = condition_message(plan, conditions::STALLED);
    assert!(!stalled.is_empty(), "Stalled says why:\n{}", status_yaml(plan));
    assert_eq!(said.message, stalled, "kstatus gives Stalled's message");
    assert_eq!(argo.message, stalled, "Argo CD gives Stalled's message");
    let waited = kubectl_wait(kubeconfig, "Stalled", "60s").await.expect("kubectl runs");
    assert!(waited.success(), "kubectl wait --for=condition=Stalled: {waited}");
    let ready = kubectl_wait(kubeconfig, "Ready", "5s").await.expect("kubectl runs");
    assert!(!ready.success(), "kubectl wait --for=condition=Ready passed on a stalled plan");
}

/// `kubectl wait --for=condition=<condition> plan/autopilot --timeout=<timeout>`.
async fn kubectl_wait(
    kubeconfig: &Path,
    condition: &str,
    timeout: &str,
) -> anyhow::Result<ExitStatus> {
    let mut command = tokio::process::Command::from(gitops::kubectl(kubeconfig)?);
    command.args([
        "wait",
        &format!("--for=condition={condition}"),
        "plan/autopilot",
        &format!("--timeout={timeout}"),
    ]);
    let output = command.output().await.context("running kubectl wait")?;
    eprintln!(
        "kubectl wait --for=condition={condition}: {} {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output.status)
}

/// Sets the abort annotation on the Plan, as `kubectl annotate` does.
async fn abort(client: &kube::Client) -> anyhow::Result<()> {
    let plans: Api<Plan> = Api::all(client.clone());
    let patch = json!({ "metadata": { "annotations": { keys::ANNOTATION_ABORT: "true" } } });
    plans.patch(keys::PLAN_NAME, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

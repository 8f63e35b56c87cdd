//! Health gates (DESIGN §15; issue 25 item 2) against the real control plane, with real
//! worker agents doing real updates (v1 <-> v2 served over loopback) and a real Prometheus
//! scraping the workers:
//! - a `kubernetes` gate after each node (Pods on the node, by `spec.nodeName={{ .Node }}`)
//!   holds the second worker while the first one's Pod is not Running, lets it go once it
//!   is, and holds the plan's end for the second one's Pod;
//! - the same gate that never passes ends the plan `ApplyFailed` at its timeout, naming the
//!   gate and the node, with the second worker never signalled;
//! - a `prometheus` gate on the workers' `up` series fails when the threshold says it must
//!   (the gate's own `url`) and passes when it holds (the controller's `--prometheus-url`);
//! - a `settle` gate holds the second worker until the DaemonSet Pod on the first is Ready,
//!   and the plan names that Pod meanwhile;
//! - a `kubernetes` gate on a kind the controller's least-privilege role cannot list says
//!   so, naming the kind, and passes once the example grant of `manifests/rbac/` is applied;
//! - the Pod gate `after: batch` with two workers at a time: the first wave is judged as one
//!   once both completed, and the third worker waits until both of the wave's Pods run;
//! - a `check` gate (a `fileExists` probe run by the agent of the node just updated) holds
//!   the second worker while the file is missing, is asked again and passes once the file
//!   is there; the update signal stays the node's answer about the update; a request
//!   written on a node in no gate run is answered with a refusal.
//!
//! One cluster (one controller, three workers) and one Prometheus for every case; each case is
//! its own run of the Plan `autopilot`. The target version alternates so that each run
//! really updates the workers it signals: the failing cases change only the first worker,
//! and the next case goes back the other way.
//!
//! No kubelet runs in the test topology: the Pods the gates look at are created bound to a
//! worker and their status is written by the test. They are owned by a DaemonSet (which
//! does not exist, and no controller-manager collects them), so the leader's drain leaves
//! them in place, as it leaves a real DaemonSet's Pods.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use autopilot_api::v1beta2::{
    Gate, GateAfter, GateOnFailure, KubernetesGate, Plan, PlanCommandK0sUpdate, PlanStateType,
    PrometheusGate, TargetState,
};
use integration::Cluster;
use integration::http::FileServer;
use integration::prometheus::{Prometheus, ScrapeTarget};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

/// The workers most cases update, one at a time.
const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// Every worker: the batch case updates a third one in a second wave.
const ALL_WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

/// The namespace of the Pods the gates look at.
const NAMESPACE: &str = "default";

/// The label of those Pods (`app=<PROBE>`).
const PROBE: &str = "gate-probe";

/// How long the test watches that the second worker stays unsignalled while a gate holds.
const QUIET_WINDOW: Duration = Duration::from_secs(4);

/// The timeout of the gates that must fail: long enough for a look or two, short for a test.
const FAILING_TIMEOUT: &str = "15s";

/// How long a case waits for a plan state: an update of each worker, a gate's timeout and
/// the harness's slack.
const CASE_TIMEOUT: Duration = Duration::from_secs(150);

/// The two builds the workers go between, each served with its sha256.
struct Builds {
    v1: String,
    v1_server: FileServer,
    v1_sha: String,
    v2_server: FileServer,
    v2_sha: String,
}

impl Builds {
    /// A `k0supdate` of both [`WORKERS`], one at a time, to `version` (v1 or [`V2`]) with
    /// `gates`.
    fn update(&self, version: &str, gates: Vec<Gate>) -> PlanCommandK0sUpdate {
        self.update_of(version, &WORKERS, 1, gates)
    }

    /// A `k0supdate` of `workers`, `concurrent` at a time, to `version` with `gates`.
    fn update_of(
        &self,
        version: &str,
        workers: &[&str],
        concurrent: u32,
        gates: Vec<Gate>,
    ) -> PlanCommandK0sUpdate {
        let (server, sha) = if version == V2 {
            (&self.v2_server, &self.v2_sha)
        } else {
            (&self.v1_server, &self.v1_sha)
        };
        let targets = static_nodes(workers, concurrent);
        let mut update = update_to(version, server.base_url(), sha, None, Some(targets));
        update.rollout.gates = gates;
        update
    }
}

#[tokio::test]
async fn gates_hold_the_next_worker_until_they_pass_and_halt_the_plan_when_they_fail() {
    let started = Instant::now();
    let prometheus_binary = integration::prometheus::binary().unwrap();
    eprintln!("prometheus binary: {}", prometheus_binary.display());
    let (v2, v2_sha) = v2_build();
    let v2_server = FileServer::start(v2).await.unwrap();

    // Workers first (they register their Nodes themselves), with metrics for Prometheus;
    // then Prometheus; then the controller, told where Prometheus is.
    let Fleet { cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("plan-gates")
            .controllers(1)
            .workers(&ALL_WORKERS)
            .agents(Agents::Real)
            .worker_metrics()
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    let targets: Vec<ScrapeTarget> =
        workers.iter().map(|w| ScrapeTarget::node(w).unwrap()).collect();
    let prom = Prometheus::start(targets).await.unwrap();
    let prometheus_url = prom.base_url();
    let _controller =
        cluster.spawn_controller(0, &["--prometheus-url", &prometheus_url]).await.unwrap();
    wait_controllers_ready(&client, 1).await.unwrap();
    create_default_service_account(&client).await.unwrap();

    let v1 = version_on_disk(&workers[0]);
    assert_ne!(v1, V2);
    let v1_bytes = std::fs::read(workers[0].binary_path()).unwrap();
    let v1_sha = sha256_hex(&v1_bytes);
    let v1_server = FileServer::start(v1_bytes).await.unwrap();
    let builds = Builds { v1: v1.clone(), v1_server, v1_sha, v2_server, v2_sha };
    eprintln!("cluster, workers, prometheus and controller up after {:?}", started.elapsed());

    let timed = |case: &'static str, since: Instant| {
        eprintln!("case {case:?} took {:?}", since.elapsed());
    };

    // Both workers v1 -> v2.
    let since = Instant::now();
    a_kubernetes_gate_holds_the_next_worker_until_the_pods_run(&client, &builds).await.unwrap();
    timed("kubernetes gate passes", since);
    delete_plan(&client).await;

    // worker-0 v2 -> v1, worker-1 stays v2.
    let since = Instant::now();
    a_kubernetes_gate_that_never_passes_halts_the_plan(&client, &builds).await.unwrap();
    timed("kubernetes gate fails", since);
    delete_plan(&client).await;
    assert_eq!(version_on_disk(&workers[0]), v1);
    assert_eq!(version_on_disk(&workers[1]), V2);

    // worker-0 v1 -> v2: both on v2 again.
    let since = Instant::now();
    a_prometheus_gate_whose_threshold_fails_halts_the_plan(&client, &builds, &prometheus_url)
        .await
        .unwrap();
    timed("prometheus gate fails", since);
    delete_plan(&client).await;

    // Both v2 -> v1.
    let since = Instant::now();
    a_prometheus_gate_on_the_controllers_prometheus_passes(&client, &builds).await.unwrap();
    timed("prometheus gate passes", since);
    delete_plan(&client).await;

    // Both v1 -> v2.
    let since = Instant::now();
    a_settle_gate_waits_for_the_daemon_set_pods_to_be_ready(&client, &builds).await.unwrap();
    timed("settle gate", since);
    delete_plan(&client).await;

    // Both v2 -> v1.
    let since = Instant::now();
    a_gate_on_a_kind_the_controller_may_not_list_names_it_until_granted(&cluster, &builds)
        .await
        .unwrap();
    timed("kubernetes gate needs a grant", since);
    delete_plan(&client).await;

    // All three v1 -> v2, in waves of two.
    let since = Instant::now();
    a_batch_gate_holds_the_next_wave_until_every_node_of_the_last_passes(&client, &builds)
        .await
        .unwrap();
    timed("batch gate", since);
    delete_plan(&client).await;

    // Both v2 -> v1.
    let since = Instant::now();
    a_check_gate_runs_on_the_node_just_updated_until_it_passes(&client, &builds).await.unwrap();
    timed("check gate", since);

    for worker in &workers {
        assert!(worker.is_running(), "{} exited:\n{}", worker.node_name(), worker.log_tail(40));
    }
    eprintln!("plan_gates took {:?} in all", started.elapsed());
}

/// The ServiceAccount `default` of [`NAMESPACE`] (kube-controller-manager's job in a real
/// cluster; the API server admits no Pod without it).
async fn create_default_service_account(client: &kube::Client) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } }))?;
    accounts.create(&PostParams::default(), &account).await.context("creating the account")?;
    Ok(())
}

/// Creates the Pod `name` bound to `node`, owned by a DaemonSet, labelled `app=<PROBE>`,
/// with `status` (merged into the status the API server gave it).
async fn create_probe(
    client: &kube::Client,
    name: &str,
    node: &str,
    status: serde_json::Value,
) -> anyhow::Result<()> {
    // The DaemonSet the probes name exists: the drains leave its Pods in place.
    inert_daemon_set(client, NAMESPACE, "node-probe").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": PROBE },
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "node-probe",
                "uid": "6c3a44e4-5a4c-4b53-9d38-5f0f3c6f0a01",
                "controller": true,
            }],
        },
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": false,
            "containers": [{ "name": "probe", "image": "example.invalid/probe:1" }],
        },
    }))?;
    pods.create(&PostParams::default(), &pod).await.with_context(|| format!("creating {name}"))?;
    set_probe_status(client, name, status).await
}

/// Merges `status` into the status of the Pod `name`.
async fn set_probe_status(
    client: &kube::Client,
    name: &str,
    status: serde_json::Value,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let patch = json!({ "status": status });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("writing the status of {name}"))?;
    Ok(())
}

/// Deletes every probe Pod (grace period 0: no kubelet confirms a deletion) and waits until
/// they are gone.
async fn delete_probes(client: &kube::Client) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = format!("app={PROBE}");
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default().labels(&selector),
    )
    .await
    .context("deleting the probe Pods")?;
    integration::wait_for(Duration::from_secs(30), "the probe Pods to be gone", || async {
        Ok(pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await
}

/// A Pod status in phase `Running`, Ready or not.
fn running(ready: bool) -> serde_json::Value {
    let ready = if ready { "True" } else { "False" };
    json!({ "phase": "Running", "conditions": [{ "type": "Ready", "status": ready }] })
}

/// A gate `id` after each node, with `timeout`.
fn gate(id: &str, timeout: Option<&str>) -> Gate {
    Gate {
        id: id.to_owned(),
        after: GateAfter::Node,
        timeout: timeout.map(str::to_owned),
        on_failure: GateOnFailure::Halt,
        ..Gate::default()
    }
}

/// A `kubernetes` gate `id`: the probe Pods on the node all Running.
fn probes_running(id: &str, timeout: Option<&str>) -> Gate {
    Gate {
        kubernetes: Some(KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            namespace: Some(NAMESPACE.to_owned()),
            label_selector: Some(format!("app={PROBE}")),
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: r#"objects.all(p, p.status.phase == "Running")"#.to_owned(),
        }),
        ..gate(id, timeout)
    }
}

/// The text of every open gate run's `waiting` of command 0.
fn waiting(plan: &Plan) -> String {
    let Some(status) = plan.status.as_ref().and_then(|s| s.commands.first()) else {
        return String::new();
    };
    status.gating.iter().filter_map(|run| run.waiting.as_deref()).collect::<Vec<_>>().join("; ")
}

/// Whether command 0 has a gate run open for `node`.
fn gating(plan: &Plan, node: &str) -> bool {
    plan.status
        .as_ref()
        .and_then(|s| s.commands.first())
        .is_some_and(|c| c.gating.iter().any(|run| run.nodes.iter().any(|n| n == node)))
}

/// Waits until `node`'s gate run waits for a reason containing `text`, with `node` done
/// and `other` not signalled; then watches for [`QUIET_WINDOW`] that `other` stays
/// unsignalled, in status and on its Node.
async fn hold_on(
    client: &kube::Client,
    run: &str,
    node: &str,
    other: Option<&str>,
    text: &str,
) -> anyhow::Result<()> {
    let what = format!("{node}'s gate to wait for {text:?}");
    let held = wait_plan(client, "autopilot", CASE_TIMEOUT, &what, |p| {
        gating(p, node)
            && waiting(p).contains(text)
            && target(p, 0, node).state == TargetState::SignalCompleted
    })
    .await?;
    eprintln!("{node} gating: {}", waiting(&held));
    match other {
        Some(other) => stays_unsignalled(client, run, other, &format!("{node}'s gate holds")).await,
        None => Ok(()),
    }
}

/// Watches for [`QUIET_WINDOW`] that `other` stays `SignalPending` and carries no signal of
/// run `run` (`while` says why it must not be signalled).
async fn stays_unsignalled(
    client: &kube::Client,
    run: &str,
    other: &str,
    while_: &str,
) -> anyhow::Result<()> {
    watch_plan_for(client, "autopilot", QUIET_WINDOW, |p| {
        let state = target(p, 0, other).state;
        if state == TargetState::SignalPending {
            Ok(())
        } else {
            Err(format!("{other} is {state} while {while_}"))
        }
    })
    .await?;
    let signal = node_signal(client, other).await?;
    anyhow::ensure!(
        signal.as_ref().is_none_or(|s| s.plan_id != run),
        "{other} carries a signal of run {run} while {while_}: {signal:?}"
    );
    Ok(())
}

/// `node`'s signal is one of run `run`, created no earlier than `after` (the signal's
/// `created` is the leader's clock truncated to the second, so it is compared with `after`
/// truncated the same way).
async fn signalled_after(
    client: &kube::Client,
    node: &str,
    run: &str,
    after: jiff::Timestamp,
) -> anyhow::Result<()> {
    let signal = node_signal(client, node).await?.context("a signal")?;
    anyhow::ensure!(signal.plan_id == run, "{node} carries {signal:?}, not one of run {run}");
    let created: jiff::Timestamp = signal.created.parse()?;
    let second =
        jiff::TimestampRound::new().smallest(jiff::Unit::Second).mode(jiff::RoundMode::Trunc);
    let floor = after.round(second)?;
    eprintln!("{node} signalled at {created}; the gate was made to pass at {after}");
    anyhow::ensure!(
        created >= floor,
        "{node} was signalled at {created}, before the gate could pass at {after}"
    );
    Ok(())
}

/// Both workers v1 -> v2 with a `kubernetes` gate after each node: worker-0's probe Pod
/// is `Pending` when it completes, so worker-1 waits; once the Pod is Running worker-1 goes;
/// then the plan waits for worker-1's own probe before it completes.
async fn a_kubernetes_gate_holds_the_next_worker_until_the_pods_run(
    client: &kube::Client,
    builds: &Builds,
) -> anyhow::Result<()> {
    const RUN: &str = "kubernetes-passes";
    let pending = json!({ "phase": "Pending" });
    create_probe(client, "probe-0", "worker-0", pending.clone()).await?;
    create_probe(client, "probe-1", "worker-1", pending).await?;
    let update = builds.update(V2, vec![probes_running("pods-running", Some("2m"))]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;

    let since = Instant::now();
    hold_on(client, RUN, "worker-0", Some("worker-1"), "is false on 1 Pod(s) for worker-0").await?;
    eprintln!("worker-0 updated and held by its gate after {:?}", since.elapsed());
    let passed_at = jiff::Timestamp::now();
    set_probe_status(client, "probe-0", running(true)).await?;

    // worker-1 goes, completes, and its own gate holds the plan until its Pod runs.
    hold_on(client, RUN, "worker-1", None, "is false on 1 Pod(s) for worker-1").await?;
    signalled_after(client, "worker-1", RUN, passed_at).await?;
    set_probe_status(client, "probe-1", running(true)).await?;
    let done = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to complete", |p| {
        state(p) == PlanStateType::Completed
    })
    .await?;
    let status = status_yaml(&done);
    for name in WORKERS {
        anyhow::ensure!(
            target(&done, 0, name).state == TargetState::SignalCompleted,
            "{name}:\n{status}"
        );
    }
    anyhow::ensure!(command(&done, 0).gates_passed == 2, "two gate runs passed:\n{status}");
    anyhow::ensure!(command(&done, 0).gating.is_empty(), "no gate run left open:\n{status}");
    delete_probes(client).await
}

/// worker-0 v2 -> v1 with the same gate, whose Pod on worker-0 has `Failed`: the plan ends
/// `ApplyFailed` at the gate's timeout, naming the gate and worker-0; worker-1 was never
/// signalled by the run and stays `SignalPending`.
async fn a_kubernetes_gate_that_never_passes_halts_the_plan(
    client: &kube::Client,
    builds: &Builds,
) -> anyhow::Result<()> {
    const RUN: &str = "kubernetes-fails";
    create_probe(client, "probe-0", "worker-0", json!({ "phase": "Failed" })).await?;
    let update =
        builds.update(&builds.v1, vec![probes_running("pods-running", Some(FAILING_TIMEOUT))]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;

    let failed = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to fail", |p| {
        state(p) == PlanStateType::ApplyFailed
    })
    .await?;
    assert_halted_by(client, &failed, RUN, "pods-running", "is false on 1 Pod(s) for worker-0")
        .await?;
    delete_probes(client).await
}

/// The plan `failed` (run `run`) ended `ApplyFailed` because `gate` failed on worker-0
/// (its description says so, with `why`); worker-0 completed its update, worker-1 was never
/// signalled by the run.
async fn assert_halted_by(
    client: &kube::Client,
    failed: &Plan,
    run: &str,
    gate: &str,
    why: &str,
) -> anyhow::Result<()> {
    let status = status_yaml(failed);
    let description = command(failed, 0).description.clone().unwrap_or_default();
    eprintln!("the plan ended ApplyFailed: {description}");
    anyhow::ensure!(
        description.contains(&format!("gate {gate} failed on worker-0"))
            && description.contains(why),
        "the description names the gate, the node and why:\n{status}"
    );
    anyhow::ensure!(
        target(failed, 0, "worker-0").state == TargetState::SignalCompleted,
        "worker-0 updated before its gate failed:\n{status}"
    );
    anyhow::ensure!(
        target(failed, 0, "worker-1").state == TargetState::SignalPending,
        "worker-1 stays pending:\n{status}"
    );
    let signal = node_signal(client, "worker-1").await?;
    anyhow::ensure!(
        signal.as_ref().is_none_or(|s| s.plan_id != run),
        "worker-1 carries a signal of run {run}: {signal:?}"
    );
    Ok(())
}

/// A `prometheus` gate `id` on the node's `up` series with `condition`.
fn up_gate(id: &str, url: Option<&str>, condition: &str, timeout: Option<&str>) -> Gate {
    Gate {
        prometheus: Some(PrometheusGate {
            url: url.map(str::to_owned),
            query: r#"up{node="{{ .Node }}"}"#.to_owned(),
            condition: condition.to_owned(),
        }),
        ..gate(id, timeout)
    }
}

/// worker-0 v1 -> v2 with a `prometheus` gate (its own `url`) whose threshold no `up`
/// sample meets (above 1): the plan ends `ApplyFailed` naming the gate; worker-1 is never
/// signalled.
///
/// Not "the node is down" (`== 0`): the scrape that races a node's re-exec fails, so the
/// first look after an update may well see `up` 0 and pass such a gate.
async fn a_prometheus_gate_whose_threshold_fails_halts_the_plan(
    client: &kube::Client,
    builds: &Builds,
    prometheus_url: &str,
) -> anyhow::Result<()> {
    const RUN: &str = "prometheus-fails";
    let condition = "result.size() == 1 && result.all(s, s.value > 1.0)";
    let gate = up_gate("up-above-one", Some(prometheus_url), condition, Some(FAILING_TIMEOUT));
    let update = builds.update(V2, vec![gate]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;
    let failed = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to fail", |p| {
        state(p) == PlanStateType::ApplyFailed
    })
    .await?;
    assert_halted_by(client, &failed, RUN, "up-above-one", "is false on 1 sample(s) for worker-0")
        .await
}

/// Both workers v2 -> v1 with a `prometheus` gate without a `url` (the controller's
/// `--prometheus-url`) that wants each updated node up: both pass, the plan completes.
async fn a_prometheus_gate_on_the_controllers_prometheus_passes(
    client: &kube::Client,
    builds: &Builds,
) -> anyhow::Result<()> {
    const RUN: &str = "prometheus-passes";
    let condition = "result.size() == 1 && result.all(s, s.value == 1.0)";
    let update = builds.update(&builds.v1, vec![up_gate("node-up", None, condition, Some("1m"))]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;
    let done = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to complete", |p| {
        state(p) == PlanStateType::Completed
    })
    .await?;
    let status = status_yaml(&done);
    anyhow::ensure!(command(&done, 0).gates_passed == 2, "both nodes' gates passed:\n{status}");
    for name in WORKERS {
        let signal = node_signal(client, name).await?.context("a signal")?;
        anyhow::ensure!(signal.plan_id == RUN, "{name} was updated by the run: {signal:?}");
    }
    Ok(())
}

/// Both workers v1 -> v2 with `settle: 60s`: worker-0's DaemonSet Pod is Running but not
/// Ready, so worker-1 waits and the plan names the Pod; once it is Ready worker-1 goes.
async fn a_settle_gate_waits_for_the_daemon_set_pods_to_be_ready(
    client: &kube::Client,
    builds: &Builds,
) -> anyhow::Result<()> {
    const RUN: &str = "settle";
    create_probe(client, "probe-0", "worker-0", running(false)).await?;
    let settle = Gate { settle: Some("60s".to_owned()), ..gate("settled", None) };
    let update = builds.update(V2, vec![settle]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;

    let text = format!("DaemonSet Pod(s) not Ready on worker-0: {NAMESPACE}/probe-0");
    hold_on(client, RUN, "worker-0", Some("worker-1"), &text).await?;
    let reason = format!("waiting for the gates of worker-0: gate settled: {text}");
    let plan = wait_plan(client, "autopilot", CASE_TIMEOUT, "the command's reason", |p| {
        command(p, 0).reason.as_deref().is_some_and(|r| r.starts_with(&reason))
    })
    .await?;
    eprintln!("while settling, the command's reason: {:?}", command(&plan, 0).reason);
    let passed_at = jiff::Timestamp::now();
    set_probe_status(client, "probe-0", running(true)).await?;
    let done = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to complete", |p| {
        state(p) == PlanStateType::Completed
    })
    .await?;
    anyhow::ensure!(command(&done, 0).gates_passed == 2, "{}", status_yaml(&done));
    signalled_after(client, "worker-1", RUN, passed_at).await?;
    delete_probes(client).await
}

/// Both workers v2 -> v1 with a gate listing DaemonSets, which the controller's role does
/// not allow: worker-0's gate waits, saying the controller may not list `daemonsets`; once
/// `manifests/rbac/gates-example.yaml` is applied the gate passes and the plan completes.
async fn a_gate_on_a_kind_the_controller_may_not_list_names_it_until_granted(
    cluster: &Cluster,
    builds: &Builds,
) -> anyhow::Result<()> {
    const RUN: &str = "needs-a-grant";
    let client = cluster.admin_client().await?;
    let daemon_sets = Gate {
        kubernetes: Some(KubernetesGate {
            api_version: "apps/v1".to_owned(),
            kind: "DaemonSet".to_owned(),
            namespace: Some("kube-system".to_owned()),
            label_selector: None,
            field_selector: None,
            condition: "objects.all(d, d.status.numberReady == d.status.desiredNumberScheduled)"
                .to_owned(),
        }),
        ..gate("daemon-sets-ready", Some("2m"))
    };
    let update = builds.update(&builds.v1, vec![daemon_sets]);
    create_plan(&client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;
    hold_on(&client, RUN, "worker-0", Some("worker-1"), "may not list daemonsets").await?;

    integration::rbac::apply_file(&client, "gates-example.yaml", GATES_EXAMPLE).await?;
    let done = wait_plan(&client, "autopilot", CASE_TIMEOUT, "the plan to complete", |p| {
        state(p) == PlanStateType::Completed
    })
    .await?;
    anyhow::ensure!(command(&done, 0).gates_passed == 2, "{}", status_yaml(&done));
    Ok(())
}

/// The example grant of what gates list.
const GATES_EXAMPLE: &str = include_str!("../../../manifests/rbac/gates-example.yaml");

/// All three workers v1 -> v2, two at a time, with the Pod gate `after: batch`: worker-0 and
/// worker-1 go together and are judged as one wave once both completed; worker-2 (the next
/// wave) waits while either one's probe Pod is not Running, and goes once both are.
async fn a_batch_gate_holds_the_next_wave_until_every_node_of_the_last_passes(
    client: &kube::Client,
    builds: &Builds,
) -> anyhow::Result<()> {
    const RUN: &str = "batch";
    let pending = json!({ "phase": "Pending" });
    create_probe(client, "probe-0", "worker-0", pending.clone()).await?;
    create_probe(client, "probe-1", "worker-1", pending).await?;
    let gate = Gate { after: GateAfter::Batch, ..probes_running("wave-running", Some("2m")) };
    let update = builds.update_of(V2, &ALL_WORKERS, 2, vec![gate]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;

    // Once the plan has a status: both nodes of the first wave completed, and the wave's
    // run waits for `node`'s Pod.
    let wave_waits_for = |node: &'static str| {
        move |p: &Plan| {
            let Some(status) = p.status.as_ref().and_then(|s| s.commands.first()) else {
                return false;
            };
            let text = format!("is false on 1 Pod(s) for {node}");
            let waits = status.gating.iter().any(|run| {
                run.after == GateAfter::Batch
                    && run.nodes == WORKERS
                    && run.since.is_some()
                    && run.waiting.as_deref().is_some_and(|w| w.contains(&text))
            });
            waits
                && WORKERS
                    .iter()
                    .all(|name| target(p, 0, name).state == TargetState::SignalCompleted)
        }
    };
    let held = wait_plan(client, "autopilot", CASE_TIMEOUT, "the first wave's gate to wait", {
        wave_waits_for("worker-0")
    })
    .await?;
    eprintln!("first wave gating: {}", waiting(&held));
    stays_unsignalled(client, RUN, "worker-2", "worker-0's Pod is not Running").await?;

    // One node of the wave is healthy: the wave still waits, now for the other.
    set_probe_status(client, "probe-0", running(true)).await?;
    let held = wait_plan(client, "autopilot", CASE_TIMEOUT, "the wave to wait for worker-1", {
        wave_waits_for("worker-1")
    })
    .await?;
    eprintln!("first wave gating: {}", waiting(&held));
    stays_unsignalled(client, RUN, "worker-2", "worker-1's Pod is not Running").await?;

    let passed_at = jiff::Timestamp::now();
    set_probe_status(client, "probe-1", running(true)).await?;
    let done = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to complete", |p| {
        state(p) == PlanStateType::Completed
    })
    .await?;
    let status = status_yaml(&done);
    anyhow::ensure!(command(&done, 0).gates_passed == 2, "two waves passed:\n{status}");
    signalled_after(client, "worker-2", RUN, passed_at).await?;
    delete_probes(client).await
}

/// Both workers v2 -> v1 with a `check` gate after each node: a `fileExists` probe of a file
/// that is missing when worker-0 completes, so worker-0's agent reports status code 1 and
/// worker-1 waits; the leader asks again; once the file exists the next attempt passes and
/// worker-1 goes (its own check passes at once). worker-0's signal stays its `Completed`
/// update signal. A request the test writes on worker-2, which is in no gate run, is
/// answered with a refusal and nothing run.
async fn a_check_gate_runs_on_the_node_just_updated_until_it_passes(
    client: &kube::Client,
    builds: &Builds,
) -> anyhow::Result<()> {
    use autopilot_api::gate_check::{GateCheckAsks, GateCheckReport, GateCheckRequest, GateChecks};
    use autopilot_api::keys;
    use k8s_openapi::api::core::v1::Node;
    const RUN: &str = "check-gate";
    let dir = tempfile::tempdir()?;
    let ready = dir.path().join("ready");
    let check: autopilot_api::v1beta2::GateCheck = serde_json::from_value(json!({
        "message": "the node's health file exists",
        "command": {"id": "fileExists", "timeout": 5, "data": {"path": ready}},
        "results": [
            {"status": "success", "message": "{{ .Result }}", "condition": {"statusCode": 0}},
            {"status": "error", "message": "{{ .Node }}: {{ .Result }}"}
        ]
    }))?;
    let file_ready = Gate { check: Some(check), ..gate("file-ready", Some("2m")) };
    let update = builds.update(&builds.v1, vec![file_ready]);
    create_plan(client, &plan("autopilot", RUN, vec![k0s_command(update)])).await?;

    let since = Instant::now();
    hold_on(client, RUN, "worker-0", Some("worker-1"), "check on worker-0: worker-0:").await?;
    eprintln!("worker-0 updated and held by its check after {:?}", since.elapsed());
    let nodes: Api<Node> = Api::all(client.clone());
    let report_of = |node: &Node| autopilot_api::ask::report_of::<GateChecks>(&node.metadata);
    let report = |node: Node| report_of(&node).map_err(anyhow::Error::msg);
    let first: GateCheckReport = report(nodes.get("worker-0").await?)?.context("a report")?;
    eprintln!("worker-0 reported: {first:?}");
    let record = first.says.records.get("file-ready").context("a record for the gate")?;
    anyhow::ensure!(record.status_code == 1 && first.says.refused.is_none(), "{first:?}");

    // Nobody asked worker-2 (not a target of this run): a request written there is refused,
    // visibly.
    let forged = GateCheckRequest {
        plan_id: RUN.to_owned(),
        run_id: first.run_id.clone(),
        command: 0,
        asked: jiff::Timestamp::now().to_string(),
        asks: GateCheckAsks { gates: vec!["file-ready".to_owned()], attempt: 1 },
    };
    let patch = json!({"metadata": {"annotations": {
        keys::ANNOTATION_GATE_CHECK: serde_json::to_string(&forged)?
    }}});
    nodes.patch("worker-2", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let refusal = integration::wait_for(CASE_TIMEOUT, "worker-2 to refuse the request", || {
        let nodes = nodes.clone();
        async move { Ok(report_of(&nodes.get("worker-2").await?).ok().flatten()) }
    })
    .await?;
    eprintln!("worker-2 answered: {refusal:?}");
    let why = refusal.says.refused.clone().unwrap_or_default();
    anyhow::ensure!(
        why.contains("worker-2 is not one of its workers") && refusal.says.records.is_empty(),
        "{refusal:?}"
    );

    let passed_at = jiff::Timestamp::now();
    std::fs::write(&ready, b"ok")?;
    let done = wait_plan(client, "autopilot", CASE_TIMEOUT, "the plan to complete", |p| {
        state(p) == PlanStateType::Completed
    })
    .await?;
    eprintln!("the check passed and the plan completed {:?} after worker-0 held", since.elapsed());
    signalled_after(client, "worker-1", RUN, passed_at).await?;
    let status = status_yaml(&done);
    anyhow::ensure!(command(&done, 0).gates_passed == 2, "two gate runs passed:\n{status}");
    let last: GateCheckReport = report(nodes.get("worker-0").await?)?.context("a report")?;
    anyhow::ensure!(
        last.says.attempt > first.says.attempt
            && last.says.records.get("file-ready").is_some_and(|r| r.status_code == 0),
        "a later attempt passed: {last:?}"
    );
    let signal = node_signal(client, "worker-0").await?.context("worker-0's signal")?;
    anyhow::ensure!(
        signal.command.k0supdate.is_some()
            && signal.status.as_ref().map(|s| s.status)
                == Some(autopilot_api::signal::SignalPhase::Completed),
        "worker-0 still carries its completed update signal: {signal:?}"
    );
    Ok(())
}

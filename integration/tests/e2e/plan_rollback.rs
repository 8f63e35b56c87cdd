//! Rolling back a rollout (DESIGN §15) end to end: a real control plane, real `k0s`
//! controllers and workers with their real update agents, v1 -> v2 runs undone by the Plan
//! engine. One fleet (3 controllers, 4 workers) serves three cases, one after another:
//!
//! 1. A `kubernetes` gate with `onFailure: Rollback` fails after the 3rd of 4 workers
//!    (concurrency 1): the plan ends `RolledBack`, workers 3, 2, 1 are put back in that
//!    order, one at a time, each on v1 again (published and on disk); worker 4 was never
//!    signalled; no cordon is left.
//! 2. `k0s autopilot rollback` after a `Completed` 3 controllers + 3 workers run: all six
//!    back on v1, workers before controllers, controllers one at a time in reverse name
//!    order. `k0s autopilot status` is captured while the rollback runs.
//! 3. The leader is SIGKILLed while the workers' rollback is in flight: a standby takes over
//!    and finishes it, and no node is signalled twice for the rollback.
//!
//! Every case prints how long the update and the rollback took.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    ControlNode, Gate, GateAfter, GateOnFailure, KubernetesGate, Plan, PlanStateType, TargetState,
    TargetStatus,
};
use integration::signals::{ObjectKind, ObjectRef, Seen, SignalRecorder};
use integration::{Cluster, K0sProcess, run_k0s, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];
const WORKERS: [&str; 4] = ["worker-0", "worker-1", "worker-2", "worker-3"];

/// How long one update or one rollback of the fleet may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Lease duration (6 s) plus jitter and the take-over round trips.
const FAILOVER: Duration = Duration::from_secs(30);

/// The gate's DaemonSet Pod on the 3rd worker (drains leave DaemonSet Pods in place).
const FAILED_POD: &str = "agent-worker-2";

fn describe(history: &[Seen]) -> String {
    history
        .iter()
        .map(|s| {
            format!(
                "{} plan={} created={} {:?} @{}",
                s.object, s.plan_id, s.created, s.phase, s.revision
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One signal of a run as the recorder saw it: when it was written and when it completed
/// (etcd revisions).
#[derive(Debug, Clone)]
struct Signalled {
    object: ObjectRef,
    created: String,
    written: u64,
    completed: Option<u64>,
}

/// The signals of the run of plan id `plan_id`, per object, in the order written: the first
/// is the update, the second (if any) the rollback.
fn signals_of(recorder: &SignalRecorder, plan_id: &str) -> BTreeMap<ObjectRef, Vec<Signalled>> {
    let mut by_object: BTreeMap<ObjectRef, Vec<Signalled>> = BTreeMap::new();
    for seen in recorder.history().into_iter().filter(|s| s.plan_id == plan_id) {
        let signals = by_object.entry(seen.object.clone()).or_default();
        if signals.last().is_none_or(|s| s.created != seen.created) {
            assert!(
                signals.iter().all(|s| s.created != seen.created),
                "{}: signal {} came back after another:\n{}",
                seen.object,
                seen.created,
                describe(&recorder.history())
            );
            signals.push(Signalled {
                object: seen.object.clone(),
                created: seen.created.clone(),
                written: seen.revision,
                completed: None,
            });
        }
        let last = signals.last_mut().expect("just pushed");
        if seen.phase == Some(SignalPhase::Completed) && last.completed.is_none() {
            last.completed = Some(seen.revision);
        }
    }
    by_object
}

/// The rollback signals of the run `plan_id` in the order they were written; asserts that
/// each object in `changed` got exactly one update and one rollback signal (nothing
/// signalled twice), that each completed, and that no other object was signalled.
fn rollback_order(
    recorder: &SignalRecorder,
    plan_id: &str,
    changed: &[ObjectRef],
) -> Vec<Signalled> {
    let by_object = signals_of(recorder, plan_id);
    let history = describe(&recorder.history());
    let objects: Vec<&ObjectRef> = by_object.keys().collect();
    let mut expected: Vec<&ObjectRef> = changed.iter().collect();
    expected.sort();
    assert_eq!(objects, expected, "the objects signalled by run {plan_id}:\n{history}");
    let mut rollbacks: Vec<Signalled> = by_object
        .into_iter()
        .map(|(object, signals)| {
            assert_eq!(
                signals.len(),
                2,
                "{object}: one update and one rollback signal in run {plan_id}:\n{history}"
            );
            for s in &signals {
                assert!(
                    s.completed.is_some(),
                    "{object}: signal {} completed:\n{history}",
                    s.created
                );
            }
            signals[1].clone()
        })
        .collect();
    rollbacks.sort_by_key(|s| s.written);
    rollbacks
}

/// The most signals in flight at once (written, not completed), by etcd revision.
fn max_in_flight(signals: &[Signalled]) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for s in signals {
        edges.push((s.written, 1));
        edges.push((s.completed.unwrap_or(u64::MAX), -1));
    }
    // A completion and a signal at the same revision: the completion came first.
    edges.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        max = max.max(now);
    }
    usize::try_from(max).unwrap_or_default()
}

fn names(signals: &[Signalled]) -> Vec<&str> {
    signals.iter().map(|s| s.object.name.as_str()).collect()
}

/// Waits (polling with a deadline; the plan passes through terminal states on the way) until
/// the plan has started its rollback, and returns it.
async fn wait_rollback_started(client: &kube::Client) -> Plan {
    let plans: Api<Plan> = Api::all(client.clone());
    wait_for(RUN_TIMEOUT, "the rollback to start", || async {
        let plan = plans.get(keys::PLAN_NAME).await?;
        let started = plan.status.as_ref().is_some_and(|s| s.rollback.is_some());
        Ok(started.then_some(plan))
    })
    .await
    .expect("the rollback starts")
}

/// Waits until the plan ended `RolledBack` and no node carries autopilot's cordon.
async fn wait_rolled_back(client: &kube::Client) -> Plan {
    let plans: Api<Plan> = Api::all(client.clone());
    let ended = wait_for(RUN_TIMEOUT, "the plan to end RolledBack", || async {
        let plan = plans.get(keys::PLAN_NAME).await?;
        Ok((state(&plan) == PlanStateType::RolledBack).then_some(plan))
    })
    .await;
    let plan = match ended {
        Ok(plan) => plan,
        Err(e) => {
            let last = plans.get(keys::PLAN_NAME).await.map(|p| status_yaml(&p));
            panic!("{e:#}; status now:\n{last:?}")
        }
    };
    wait_no_autopilot_cordons(client, keys::PLAN_NAME).await.expect("no cordon left");
    plan
}

/// Asserts a rollback list holds exactly `expected` (any order), each completed and having
/// run `from` before the run.
fn assert_list(list: &[TargetStatus], expected: &[&str], from: &str, plan: &Plan) {
    let mut listed: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
    listed.sort_unstable();
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    assert_eq!(listed, expected, "rollback list:\n{}", status_yaml(plan));
    for t in list {
        assert_eq!(t.state, TargetState::SignalCompleted, "{}:\n{}", t.name, status_yaml(plan));
        assert_eq!(t.from.as_deref(), Some(from), "{}:\n{}", t.name, status_yaml(plan));
    }
}

/// Asserts each process runs `version` (the live binary on disk and the published running
/// version) and no Node is cordoned.
async fn assert_on(client: &kube::Client, processes: &[&K0sProcess], version: &str) {
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    for process in processes {
        let name = process.node_name();
        assert!(process.is_running(), "{name} runs:\n{}", process.log_tail(40));
        assert_eq!(version_on_disk(process), version, "{name}: the live binary");
        wait_for(Duration::from_secs(60), &format!("{name} to publish {version}"), || async {
            let published = if name.starts_with("controller-") {
                control_nodes.get(name).await?.k0s_version().map(str::to_owned)
            } else {
                nodes.get(name).await?.annotations().get(keys::ANNOTATION_K0S_VERSION).cloned()
            };
            Ok((published.as_deref() == Some(version)).then_some(()))
        })
        .await
        .expect("the published version");
    }
    for node in nodes.list(&Default::default()).await.expect("listing the Nodes") {
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        assert!(!cordoned, "{} is cordoned", node.name_any());
        assert!(!node.annotations().contains_key(keys::ANNOTATION_CORDONED), "{}", node.name_any());
    }
}

/// Runs `k0s autopilot <args> --kubeconfig <admin>` off the async runtime; asserts success
/// and returns stdout.
pub(crate) async fn k0s_autopilot(cluster: &Cluster, args: &[&str]) -> String {
    let kubeconfig = cluster.admin_kubeconfig(0);
    let mut all: Vec<String> = vec!["autopilot".into()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    all.extend(["--kubeconfig".into(), kubeconfig.to_string_lossy().into_owned()]);
    let output = tokio::task::spawn_blocking(move || {
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        run_k0s(&all).expect("k0s runs")
    })
    .await
    .expect("the k0s run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "k0s {args:?} failed ({}); stderr:\n{stderr}", output.status);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A DaemonSet Pod bound to the 3rd worker whose phase is `Failed` (no kubelet runs here,
/// so the status is written by hand); drains leave it in place.
async fn failed_pod_on_worker_2(client: &kube::Client) {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } }))
            .expect("a ServiceAccount");
    accounts.create(&PostParams::default(), &account).await.expect("creating the ServiceAccount");
    // Its DaemonSet exists, so drains leave the Pod in place (a finished Pod of no DaemonSet
    // that exists would be evicted: it loses nothing).
    inert_daemon_set(client, "default", "agent").await.expect("the DaemonSet");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": FAILED_POD,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
            }],
        },
        "spec": {
            "nodeName": "worker-2",
            "automountServiceAccountToken": false,
            "containers": [{ "name": "agent", "image": "example.invalid/agent:1" }],
        },
    }))
    .expect("a Pod");
    pods.create(&PostParams::default(), &pod).await.expect("creating the gate's pod");
    let failed = json!({ "status": { "phase": "Failed" } });
    pods.patch_status(FAILED_POD, &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .expect("failing the gate's pod");
}

/// The gate of case 1: every Pod on the node just updated runs, judged within 15 s; a
/// failure rolls the run back.
fn pods_running_gate() -> Gate {
    Gate {
        id: "pods-running".to_owned(),
        after: GateAfter::Node,
        timeout: Some("15s".to_owned()),
        on_failure: GateOnFailure::Rollback,
        kubernetes: Some(KubernetesGate {
            api_version: "v1".to_owned(),
            kind: "Pod".to_owned(),
            field_selector: Some("spec.nodeName={{ .Node }}".to_owned()),
            condition: r#"objects.all(p, p.status.phase == "Running")"#.to_owned(),
            ..KubernetesGate::default()
        }),
        ..Gate::default()
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[tokio::test]
async fn rollbacks_put_every_changed_node_back_on_what_it_ran() {
    let (v2, sha) = v2_build();
    let server = integration::http::FileServer::start(v2).await.unwrap();
    let Fleet { cluster, client, controllers, workers } = FleetBuilder::new("plan-rollback")
        .controllers(3)
        .workers(&WORKERS)
        .agents(Agents::Real)
        .controller_args(FAST_ELECTION)
        .start()
        .await
        .unwrap();
    let v1 = version_on_disk(&workers[0]);
    assert_ne!(v1, V2);
    let recorder = SignalRecorder::start(&client).await.unwrap();

    let scenario = Scenario {
        cluster: &cluster,
        client: &client,
        base: server.base_url(),
        sha: &sha,
        controllers: &controllers,
        workers: &workers,
        v1: &v1,
        recorder: &recorder,
    };

    // --- 1. A gate fails on the 3rd of 4 workers: onFailure: Rollback. ---
    scenario.gate_fails().await;
    // --- 2. k0s autopilot rollback after a Completed 3 controllers + 3 workers run. ---
    scenario.cli_rollback().await;
    // --- 3. The leader is SIGKILLed mid-rollback; a standby finishes it. ---
    scenario.failover().await;
}

/// What the steps of [`rollbacks_put_every_changed_node_back_on_what_it_ran`] share.
struct Scenario<'a> {
    /// The cluster (`k0s autopilot` runs against it).
    cluster: &'a Cluster,
    /// An admin client.
    client: &'a kube::Client,
    /// The v2 payload's server and sha256.
    base: &'a str,
    sha: &'a str,
    /// The 3 controllers.
    controllers: &'a [K0sProcess],
    /// The 4 workers.
    workers: &'a [K0sProcess],
    /// The version every node ran before.
    v1: &'a str,
    /// Every signal phase, in etcd order.
    recorder: &'a SignalRecorder,
}

impl Scenario<'_> {
    /// Step 1: a gate fails on the 3rd of 4 workers: onFailure: Rollback puts the three
    /// changed workers back, newest first, one at a time.
    async fn gate_fails(&self) {
        let node = |name: &str| ObjectRef::node(name);
        failed_pod_on_worker_2(self.client).await;
        let mut update = update_to(V2, self.base, self.sha, None, Some(static_nodes(&WORKERS, 1)));
        update.rollout.gates = vec![pods_running_gate()];
        let started = Instant::now();
        create_plan(self.client, &plan("autopilot", "gate", vec![k0s_command(update)]))
            .await
            .expect("creating the plan");
        let rolling = wait_rollback_started(self.client).await;
        let update_took = started.elapsed();
        let rollback_started = Instant::now();
        let done = wait_rolled_back(self.client).await;
        let rollback_took = rollback_started.elapsed();
        eprintln!(
            "plan_rollback gate: update until the gate failed {:.1} s (3 workers + the 15 s gate), \
             rollback of 3 workers {:.1} s",
            secs(update_took),
            secs(rollback_took)
        );
        let reason = rolling.status.as_ref().and_then(|s| s.rollback.as_ref()).map(|r| &r.reason);
        eprintln!("plan_rollback gate: rollback reason: {reason:?}");
        assert!(
            reason.is_some_and(|r| r.contains("gate pods-running failed on worker-2")),
            "{reason:?}"
        );
        let status = command(&done, 0);
        let lists = status.rollback.as_ref().expect("rollback lists");
        assert!(lists.controllers.is_empty(), "{}", status_yaml(&done));
        assert_list(&lists.workers, &["worker-2", "worker-1", "worker-0"], self.v1, &done);
        assert_eq!(target(&done, 0, "worker-3").state, TargetState::SignalPending);
        assert!(
            node_signal(self.client, "worker-3").await.expect("reading the signal").is_none(),
            "worker-3 never signalled"
        );
        assert_on(self.client, &self.workers[..3].iter().collect::<Vec<_>>(), self.v1).await;
        let rollbacks = rollback_order(
            self.recorder,
            "gate",
            &[node("worker-0"), node("worker-1"), node("worker-2")],
        );
        assert_eq!(names(&rollbacks), ["worker-2", "worker-1", "worker-0"], "{rollbacks:?}");
        for pair in rollbacks.windows(2) {
            assert!(
                pair[0].completed.is_some_and(|c| c < pair[1].written),
                "concurrency 1: {} signalled before {} completed: {rollbacks:?}",
                pair[1].object,
                pair[0].object
            );
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        pods.delete(FAILED_POD, &DeleteParams::default().grace_period(0))
            .await
            .expect("deleting the failed Pod");
        delete_plan(self.client).await;
    }

    /// Step 2: `k0s autopilot rollback` after a Completed 3 controllers + 3 workers run:
    /// workers first, two at a time, newest first, then the controllers one by one.
    async fn cli_rollback(&self) {
        let node = |name: &str| ObjectRef::node(name);
        let control_node = |name: &str| ObjectRef::control_node(name);
        let three = &WORKERS[..3];
        let update = update_to(
            V2,
            self.base,
            self.sha,
            Some(static_nodes(&CONTROLLERS, 1)),
            Some(static_nodes(three, 2)),
        );
        let started = Instant::now();
        create_plan(self.client, &plan("autopilot", "cli", vec![k0s_command(update)]))
            .await
            .expect("creating the plan");
        wait_plan(self.client, "autopilot", RUN_TIMEOUT, "Completed", |p| {
            state(p) == PlanStateType::Completed
        })
        .await
        .expect("the run completes");
        let update_took = started.elapsed();
        let all: Vec<&K0sProcess> = self.controllers.iter().chain(&self.workers[..3]).collect();
        assert_on(self.client, &all, V2).await;
        // What the rollback would do, before asking for it.
        self.preview_rollback().await;
        let rollback_started = Instant::now();
        let said = k0s_autopilot(self.cluster, &["rollback"]).await;
        eprintln!("plan_rollback cli: k0s autopilot rollback said: {said}");
        // While the rollback runs: what an operator sees.
        self.watch_rolling_back().await;
        let done = wait_rolled_back(self.client).await;
        let rollback_took = rollback_started.elapsed();
        eprintln!(
            "plan_rollback cli: update of 3 controllers + 3 workers {:.1} s, rollback {:.1} s",
            secs(update_took),
            secs(rollback_took)
        );
        let lists = command(&done, 0).rollback.as_ref().expect("rollback lists");
        assert_list(&lists.workers, &["worker-2", "worker-1", "worker-0"], self.v1, &done);
        assert_list(
            &lists.controllers,
            &["controller-2", "controller-1", "controller-0"],
            self.v1,
            &done,
        );
        assert_on(self.client, &all, self.v1).await;
        let changed: Vec<ObjectRef> = CONTROLLERS
            .iter()
            .map(|c| control_node(c))
            .chain(three.iter().map(|w| node(w)))
            .collect();
        let rollbacks = rollback_order(self.recorder, "cli", &changed);
        check_cli_rollback_order(&rollbacks);
        delete_plan(self.client).await;
    }

    /// What the rollback would do, before asking for it: the nodes put back in the
    /// engine's order (workers first, two at a time, then the controllers one by one), to v1.
    async fn preview_rollback(&self) {
        let v1 = self.v1;
        let previewed = k0s_autopilot(self.cluster, &["preview", "--rollback"]).await;
        eprintln!("plan_rollback cli: k0s autopilot preview --rollback said:\n{previewed}");
        assert!(previewed.starts_with("Rollback of the run of plan autopilot"), "{previewed}");
        assert!(previewed.contains(&format!("rollback of k0supdate to {v1}")), "{previewed}");
        assert!(previewed.contains("The rollback would run."), "{previewed}");
        let order: Vec<&str> = previewed
            .lines()
            .filter(|line| line.trim_start().starts_with(char::is_numeric))
            .collect();
        assert_eq!(order.len(), 5, "two waves of workers, then three controllers:\n{previewed}");
        assert!(order[0].contains("Node/") && !order[0].contains("ControlNode/"), "{previewed}");
        assert!(order[4].contains("ControlNode/"), "{previewed}");
        let json: serde_json::Value = serde_json::from_str(
            &k0s_autopilot(self.cluster, &["preview", "--rollback", "-o", "json"]).await,
        )
        .expect("the preview as JSON");
        assert_eq!(json["endState"], "RolledBack", "{json}");
        assert_eq!(json["rollback"], true, "{json}");
        let unchanged = client_plan(self.client).await;
        assert_eq!(state(&unchanged), PlanStateType::Completed, "a preview writes nothing");
    }

    /// While the rollback runs: a node is being rolled back and `k0s autopilot status` says
    /// so, with no warning.
    async fn watch_rolling_back(&self) {
        let plans: Api<Plan> = Api::all(self.client.clone());
        wait_for(RUN_TIMEOUT, "a node being rolled back", || async {
            let plan = plans.get(keys::PLAN_NAME).await?;
            let sent = plan
                .status
                .iter()
                .flat_map(|s| &s.commands)
                .filter_map(|c| c.rollback.as_ref())
                .flat_map(|l| l.workers.iter().chain(&l.controllers))
                .any(|t| t.state == TargetState::SignalSent);
            Ok(sent.then_some(()))
        })
        .await
        .expect("a node being rolled back");
        let screen = k0s_autopilot(self.cluster, &["status"]).await;
        eprintln!("plan_rollback cli: k0s autopilot status during the rollback:\n{screen}");
        assert!(screen.contains("rolling back"), "the status says so:\n{screen}");
        assert!(!screen.contains("WorkerNotReady"), "a rollback step is no warning:\n{screen}");
    }

    /// Step 3: the leader is SIGKILLed mid-rollback; a standby finishes it.
    async fn failover(&self) {
        let node = |name: &str| ObjectRef::node(name);
        let update = update_to(V2, self.base, self.sha, None, Some(static_nodes(&WORKERS, 2)));
        let started = Instant::now();
        create_plan(self.client, &plan("autopilot", "failover", vec![k0s_command(update)]))
            .await
            .expect("creating the plan");
        wait_plan(self.client, "autopilot", RUN_TIMEOUT, "Completed", |p| {
            state(p) == PlanStateType::Completed
        })
        .await
        .expect("the run completes");
        let update_took = started.elapsed();
        let fleet: Vec<&K0sProcess> = self.workers.iter().collect();
        assert_on(self.client, &fleet, V2).await;
        let rollback_started = Instant::now();
        k0s_autopilot(self.cluster, &["rollback"]).await;
        let first = wait_for(RUN_TIMEOUT, "the first rollback signal", || async {
            let by_object = signals_of(self.recorder, "failover");
            Ok(by_object.values().find_map(|s| s.get(1).cloned()))
        })
        .await
        .expect("the first rollback signal");
        let killed_at = self.kill_the_leader(&first).await;
        let done = wait_rolled_back(self.client).await;
        let rollback_took = rollback_started.elapsed();
        eprintln!(
            "plan_rollback failover: update of 4 workers {:.1} s, rollback with a failover {:.1} s",
            secs(update_took),
            secs(rollback_took)
        );
        let lists = command(&done, 0).rollback.as_ref().expect("rollback lists");
        assert_list(
            &lists.workers,
            &["worker-3", "worker-2", "worker-1", "worker-0"],
            self.v1,
            &done,
        );
        assert_on(self.client, &fleet, self.v1).await;
        let changed: Vec<ObjectRef> = WORKERS.iter().map(|w| node(w)).collect();
        let rollbacks = rollback_order(self.recorder, "failover", &changed);
        eprintln!("plan_rollback failover: rollback order {:?}", names(&rollbacks));
        assert!(max_in_flight(&rollbacks) <= 2, "at most 2 at a time: {rollbacks:?}");
        let mut first_two = names(&rollbacks)[..2].to_vec();
        first_two.sort_unstable();
        assert_eq!(first_two, ["worker-2", "worker-3"], "newest first: {rollbacks:?}");
        let by_standby: Vec<&str> = rollbacks
            .iter()
            .filter(|s| s.written > killed_at)
            .map(|s| s.object.name.as_str())
            .collect();
        eprintln!("plan_rollback failover: signalled by the standby: {by_standby:?}");
        assert!(!by_standby.is_empty(), "the standby signalled the rest: {rollbacks:?}");
    }

    /// Kills the leader once `first` is being rolled back and waits for a new one; returns
    /// the Nodes' revision at the kill.
    async fn kill_the_leader(&self, first: &Signalled) -> u64 {
        let old_identity =
            leader_identity(self.client).await.expect("reading the leader").expect("a leader");
        let old_leader =
            leader(self.client).await.expect("reading the leader").expect("a leader index");
        self.controllers[old_leader].kill().expect("killing the leader");
        let nodes: Api<Node> = Api::all(self.client.clone());
        let killed_at: u64 = nodes
            .list_metadata(&Default::default())
            .await
            .expect("listing the Nodes")
            .metadata
            .resource_version
            .and_then(|rv| rv.parse().ok())
            .expect("the list's revision");
        eprintln!(
            "plan_rollback failover: {} rolling back; killed the leader {old_identity}",
            first.object
        );
        let new_identity = wait_for(FAILOVER, "a new leader", || async {
            Ok(leader_identity(self.client).await?.filter(|h| *h != old_identity))
        })
        .await
        .expect("a new leader");
        eprintln!("plan_rollback failover: {new_identity} took over");
        killed_at
    }
}

/// The order of the CLI rollback: the controllers newest first, after every worker and one
/// at a time; the workers at most two at a time, newest first.
fn check_cli_rollback_order(rollbacks: &[Signalled]) {
    let (back_workers, back_controllers): (Vec<_>, Vec<_>) =
        rollbacks.iter().cloned().partition(|s| s.object.kind == ObjectKind::Node);
    assert_eq!(names(&back_controllers), ["controller-2", "controller-1", "controller-0"]);
    assert!(max_in_flight(&back_workers) <= 2, "workers at most 2 at a time: {rollbacks:?}");
    let mut first_two = names(&back_workers)[..2].to_vec();
    first_two.sort_unstable();
    assert_eq!(first_two, ["worker-1", "worker-2"], "newest first: {rollbacks:?}");
    let workers_done = back_workers.iter().filter_map(|s| s.completed).max().expect("workers");
    assert!(
        back_controllers.iter().all(|c| c.written > workers_done),
        "every controller after every worker: {rollbacks:?}"
    );
    for pair in back_controllers.windows(2) {
        assert!(
            pair[0].completed.is_some_and(|c| c < pair[1].written),
            "controllers one at a time: {rollbacks:?}"
        );
    }
}

/// The Plan `autopilot` as it is now.
async fn client_plan(client: &kube::Client) -> Plan {
    Api::<Plan>::all(client.clone()).get(keys::PLAN_NAME).await.expect("the Plan")
}

//! Failure-domain waves (issue 27 item 6) on the real control plane with the real node
//! agents doing real updates (a v2 build served over loopback): six workers in three zones
//! (`topology.kubernetes.io/zone` a, b, c; two workers each, named so that name order is not
//! zone order), `limits.groupBy` on that label with `concurrent: 2` and a soak of 2 s between
//! groups.
//!
//! - Zone order: zone a's workers go first, zone b's only after both of zone a's completed
//!   and the soak passed; no signal of zone b is written while a worker of zone a works
//!   (etcd revision order, from a passive recorder), and no Plan status ever shows workers of
//!   two zones in flight.
//! - A failure in zone b: worker-2's agent refuses its signal (its Node was relabelled to
//!   claim another architecture, so the payload it is sent is not the one its own platform
//!   gets), the plan ends `ApplyFailed` naming it, and zone c's workers are untouched: no
//!   signal, the same process, the same binary.
//! - Membership is frozen when the run starts: worker-3 (zone c) relabels itself into zone a
//!   mid-run and is still not updated with zone a; the status keeps its group `c`.

use std::sync::Mutex;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    BetweenGroups, Plan, PlanCommandK0sUpdate, PlanResourceUrl, PlanStateType, TargetState,
};
use integration::http::FileServer;
use integration::signals::{ObjectRef, SignalRecorder};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const ZONE: &str = "topology.kubernetes.io/zone";

/// The workers and their zones: zone order (a, b, c) is not name order.
const WORKERS: [(&str, &str); 6] = [
    ("worker-0", "c"),
    ("worker-1", "a"),
    ("worker-2", "b"),
    ("worker-3", "c"),
    ("worker-4", "a"),
    ("worker-5", "b"),
];

/// The soak between two groups, as the plan spells it.
const SOAK_SPEC: &str = "2s";

/// The worker of zone b whose agent refuses its signal.
const FAILING: &str = "worker-2";

/// An architecture this machine is not.
fn other_arch() -> &'static str {
    if autopilot_api::platform::arch() == "s390x" { "ppc64le" } else { "s390x" }
}

fn zone(name: &str) -> &'static str {
    WORKERS.iter().find(|(worker, _)| *worker == name).map_or("?", |(_, zone)| zone)
}

fn in_zone(wanted: &str) -> Vec<&'static str> {
    WORKERS.iter().filter(|(_, zone)| *zone == wanted).map(|(name, _)| *name).collect()
}

/// The zones of the workers a status shows in flight (signalled, not done).
fn zones_in_flight(plan: &Plan) -> Vec<String> {
    let Some(command) = plan.status.as_ref().and_then(|s| s.commands.first()) else {
        return Vec::new();
    };
    let mut zones: Vec<String> = targets(command)
        .into_iter()
        .filter(|t| t.state == TargetState::SignalSent)
        .map(|t| t.group.clone().unwrap_or_default())
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

#[tokio::test]
async fn zones_go_in_order_one_at_a_time_and_a_failure_in_zone_b_leaves_zone_c_untouched() {
    let (v2, sha) = v2_build();
    let server = FileServer::start(v2).await.unwrap();
    let names: Vec<&str> = WORKERS.iter().map(|(name, _)| *name).collect();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("plan-waves")
            .controllers(1)
            .workers(&names)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    label_zones(&nodes).await;
    let zone_c: Vec<_> =
        workers.iter().filter(|w| zone(w.node_name()) == "c").map(|w| (w, Before::of(w))).collect();
    let recorder = SignalRecorder::start(&client).await.unwrap();

    let update = waves_update(&names, server.base_url(), &sha);
    create_plan(&client, &plan("autopilot", "waves", vec![k0s_command(update)])).await.unwrap();

    // Once the run has started (the groups are frozen), worker-3 moves itself into zone a.
    wait_plan(&client, "autopilot", PLAN_TIMEOUT, "the run to start", |p| {
        p.status.as_ref().and_then(|s| s.commands.first()).is_some_and(|c| !targets(c).is_empty())
    })
    .await
    .unwrap();
    let patch = json!({ "metadata": { "labels": { ZONE: "a" } } });
    nodes.patch("worker-3", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    // Every status the run goes through: never two zones in flight; the reasons it gave.
    let ended = follow_waves(&client).await;

    // The outcome: zone a and the rest of zone b updated, worker-2 failed, zone c pending.
    check_outcome(&client, &ended, &workers, &zone_c).await;

    // Zone order in etcd revision order: every signal of zone b was written after both of
    // zone a's workers completed, and no zone c node ever carried a signal.
    check_zone_order(&recorder);
}

/// Labels every worker with its zone; the failing worker's Node also claims another
/// architecture.
async fn label_zones(nodes: &Api<Node>) {
    for (name, zone) in WORKERS {
        let mut labels = json!({ ZONE: zone });
        if name == FAILING {
            labels[keys::LABEL_ARCH] = json!(other_arch());
        }
        let patch = json!({ "metadata": { "labels": labels } });
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("labelling a Node");
    }
}

/// The update: the workers in waves by zone, two at a time, with a soak between the zones;
/// the other architecture's entry serves the same payload.
fn waves_update(names: &[&str], base_url: &str, sha: &str) -> PlanCommandK0sUpdate {
    let mut waves = static_nodes(names, 2);
    waves.limits.group_by = Some(ZONE.to_owned());
    waves.limits.between_groups = Some(BetweenGroups { soak: Some(SOAK_SPEC.to_owned()) });
    let mut update = update_to(V2, base_url, sha, None, Some(waves));
    // The failing worker's Node claims another platform: the leader sends it that entry's
    // payload, which its agent (which knows its own platform) refuses.
    update.platforms.insert(
        format!("linux-{}", other_arch()),
        PlanResourceUrl {
            url: format!("{base_url}/other/k0s"),
            sha256: Some(sha.to_owned()),
            ..Default::default()
        },
    );
    update
}

/// Follows the run until it ends ApplyFailed: never two zones in flight, and the reasons it
/// gave name the first group's update and its soak. Returns the ended plan.
async fn follow_waves(client: &kube::Client) -> Plan {
    let violations = Mutex::new(Vec::new());
    let reasons = Mutex::new(Vec::new());
    let ended = wait_plan(client, "autopilot", PLAN_TIMEOUT, "the plan to end ApplyFailed", |p| {
        let zones = zones_in_flight(p);
        if zones.len() > 1 {
            violations
                .lock()
                .expect("the violations")
                .push(format!("{zones:?}:\n{}", status_yaml(p)));
        }
        if let Some(reason) = p.status.as_ref().and_then(|s| s.commands.first()?.reason.clone()) {
            reasons.lock().expect("the reasons").push(reason);
        }
        state(p) == PlanStateType::ApplyFailed
    })
    .await
    .expect("the plan to end ApplyFailed");
    let violations = violations.into_inner().expect("the violations");
    assert!(violations.is_empty(), "two zones in flight: {violations:#?}");
    let reasons = reasons.into_inner().expect("the reasons");
    eprintln!("reasons seen: {reasons:#?}");
    assert!(
        reasons.iter().any(|r| r.starts_with(&format!("updating group {ZONE}=a (1 of 3)"))),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|r| r.starts_with(&format!("soaking: group {ZONE}=a completed"))),
        "{reasons:#?}"
    );

    ended
}

/// The outcome: zone a and the rest of zone b updated, worker-2 failed (its agent refused
/// the other platform's payload), zone c untouched and never signalled.
async fn check_outcome(
    client: &kube::Client,
    ended: &Plan,
    workers: &[integration::K0sProcess],
    zone_c: &[(&integration::K0sProcess, Before)],
) {
    let status = status_yaml(ended);
    let description = command(ended, 0).description.clone().unwrap_or_default();
    assert!(description.contains(FAILING), "the description names {FAILING}:\n{status}");
    for (name, zone) in WORKERS {
        let target = target(ended, 0, name);
        assert_eq!(target.group.as_deref(), Some(zone), "{name}'s group is frozen:\n{status}");
        let expected = match (name, zone) {
            (FAILING, _) => TargetState::SignalApplyFailed,
            (_, "a" | "b") => TargetState::SignalCompleted,
            (_, _) => TargetState::SignalPending,
        };
        assert_eq!(target.state, expected, "{name}:\n{status}");
    }
    for process in workers {
        let name = process.node_name();
        if in_zone("a").contains(&name) || name == "worker-5" {
            assert_eq!(version_on_disk(process), V2, "{name} updated");
        }
    }
    for (process, before) in zone_c {
        before.assert_untouched(process, process.node_name());
        assert!(
            node_signal(client, process.node_name()).await.expect("reading the signal").is_none(),
            "{} never signalled",
            process.node_name()
        );
    }
    let failing =
        node_signal(client, FAILING).await.expect("reading the signal").expect("a signal");
    let answer = failing.status.expect("an answer");
    assert_eq!(answer.status, SignalPhase::Failed, "{answer:?}");
    assert!(answer.reason.as_deref().is_some_and(|r| r.starts_with("refused: ")), "{answer:?}");
}

/// Zone order in etcd revision order: every signal of zone b was written after both of
/// zone a's workers completed and the soak, and no zone c node ever carried a signal.
fn check_zone_order(recorder: &SignalRecorder) {
    let by_object = recorder.by_object();
    let seen = |name: &str| by_object.get(&ObjectRef::node(name)).cloned().unwrap_or_default();
    let zone_a_done = in_zone("a")
        .into_iter()
        .map(|name| {
            seen(name)
                .iter()
                .find(|s| s.phase == Some(SignalPhase::Completed))
                .unwrap_or_else(|| panic!("{name}'s completion in {:?}", recorder.history()))
                .clone()
        })
        .collect::<Vec<_>>();
    let last_a = zone_a_done.iter().map(|s| s.revision).max().expect("zone a");
    for name in in_zone("b") {
        let first = seen(name).first().cloned().expect("zone b signalled");
        assert!(
            first.revision > last_a,
            "{name} signalled (revision {}) before zone a was done (revision {last_a}): {:?}",
            first.revision,
            recorder.history()
        );
        // And only after the soak between the groups (the leader's clock and the agents'
        // are this machine's).
        let created: jiff::Timestamp = first.created.parse().expect("a timestamp");
        for done in &zone_a_done {
            let completed: jiff::Timestamp =
                done.timestamp.as_deref().expect("a timestamp").parse().expect("a timestamp");
            let soak = jiff::SignedDuration::try_from(Duration::from_secs(2)).expect("a soak");
            assert!(
                created >= completed + soak,
                "{name} signalled at {created}, {} completed at {completed}",
                done.object.name
            );
        }
    }
    for name in in_zone("c") {
        assert!(seen(name).is_empty(), "{name} carried a signal: {:?}", seen(name));
    }
}

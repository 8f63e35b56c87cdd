//! Fuzz targets of the Plan engine: arbitrary and mutated Plans (with a preflight, a
//! k0supdate and an airgapupdate command) through the first pass (NewPlan) over a small
//! cluster, and arbitrary label and field selectors. No input panics; every failed plan
//! says why; a refused plan signals no node; signals only go to nodes that exist.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::Plan;
use autopilot_api::fuzz::{config, json, mutated, word};
use autopilot_engine::plan::selector::{FieldSelector, LabelSelector};
use autopilot_engine::plan::{
    CheckPods, Effect, EventKind, Observed, ObservedSignal, PlanAccess, PlanReader, PlanView,
    Policy, Readiness, Steering, TargetObject, Transition, step,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A valid Plan: a k0supdate and an airgapupdate command, after a preflight command if
/// `preflight` (such a plan stops at the preflight, so the update commands are reached
/// mostly through the plans without one).
fn valid_plan(preflight: bool) -> Value {
    let platform = autopilot_api::platform::current();
    let mut plan = json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "Plan",
        "metadata": { "name": "autopilot", "uid": "uid-1", "generation": 1 },
        "spec": {
            "id": "id-1",
            "timestamp": "now",
            "commands": [{
                "preflight": {
                    "onWarn": "Block",
                    "deadline": "2m",
                    "checks": [{
                        "id": "api-port",
                        "targets": { "all": true },
                        "command": { "id": "tcpDial", "timeout": 5,
                                     "data": { "host": "127.0.0.1", "port": 6443 } },
                        "results": [
                            { "status": "success", "message": "{{ .Node }} reaches {{ .Result }}",
                              "condition": { "statusCode": 0, "error": false,
                                             "boolExpr": "statusCode == 0 && !error" } },
                            { "status": "warn",
                              "message": { "id": "m", "defaultMessage": "{{ .Args.a }}",
                                           "args": { "a": "{{ .StatusCode }}" } },
                              "condition": { "statusCode": 62 } },
                            { "status": "error", "message": "{{ .Error }}" },
                        ],
                    }],
                },
            }, {
                "k0supdate": {
                    "version": "v1.35.1+k0s.0",
                    "platforms": { platform.clone(): {
                        "url": "https://127.0.0.1:8443/k0s", "sha256": "ab".repeat(32) } },
                    "targets": {
                        "controllers": { "discovery": { "static": { "nodes": ["c0", "c1"] } } },
                        "workers": {
                            "discovery": { "selector": { "labels": "role=worker" } },
                            "limits": { "concurrent": "50%", "maxFailures": 1, "canary": 1, "soak": "1m" },
                        },
                    },
                },
            }, {
                "airgapupdate": {
                    "version": "v1.35.1+k0s.0",
                    "platforms": { platform: { "url": "https://127.0.0.1/bundle.tar" } },
                    "workers": { "discovery": { "static": { "nodes": ["w0", "w1"] } } },
                },
            }],
        },
    });
    if !preflight {
        let commands = plan["spec"]["commands"].as_array_mut().expect("commands is a list");
        commands.remove(0);
    }
    plan
}

fn target(name: &str, labels: &[(&str, &str)]) -> (String, TargetObject) {
    let mut all: BTreeMap<String, String> = [
        (autopilot_api::keys::LABEL_OS, autopilot_api::platform::os()),
        (autopilot_api::keys::LABEL_ARCH, autopilot_api::platform::arch()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    all.extend(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let object = TargetObject {
        prestage: Default::default(),
        drained: None,
        gate_check: Default::default(),
        version: None,
        kubelet_version: None,
        name: name.to_owned(),
        labels: all.into(),
        ready: true,
        signal: ObservedSignal::None,
        required_keys: Default::default(),
    };
    (name.to_owned(), object)
}

fn policy(exclude_workers: bool) -> Policy {
    Policy {
        prometheus_url: None,
        exclude_controllers: false,
        exclude_workers,
        readiness_grace: Duration::from_secs(600),
        readiness_recheck: Duration::from_secs(2),
        node_progress_timeout: Duration::from_secs(900),
        drain_timeout: Duration::from_secs(600),
        allow_unverified_payloads: false,
    }
}

/// The cluster every case runs on: ControlNodes `c0`, `c1`; worker Nodes `w0`, `w1`
/// (label `role=worker`); all Ready, on this machine's platform, no signals.
fn cluster() -> (BTreeMap<String, TargetObject>, BTreeMap<String, TargetObject>) {
    let control_nodes = [target("c0", &[]), target("c1", &[])].into();
    let nodes = [target("w0", &[("role", "worker")]), target("w1", &[("role", "worker")])].into();
    (control_nodes, nodes)
}

/// The engine's first pass over `plan` (no status yet) on [`cluster`].
fn first_pass(plan: &Plan, exclude_workers: bool, paused: bool) -> Transition {
    let (control_nodes, nodes) = cluster();
    let readiness: BTreeMap<_, _> = ["c0", "c1"].map(|c| (c.to_owned(), Readiness::Ready)).into();
    // Both workers may read the Plan (the API server's answer to NewPlan's access review).
    let reviewed: BTreeMap<_, _> =
        ["w0", "w1"].map(|w| (PlanReader::worker(w), PlanAccess::Allowed)).into();
    let observed = Observed {
        gate_answers: &autopilot_engine::plan::NO_GATE_ANSWERS,
        plan_access: &reviewed,
        now: jiff::Timestamp::from_second(1_800_000_000).expect("in range"),
        term_started: None,
        control_nodes: &control_nodes,
        nodes: &nodes,
        readiness: &readiness,
        api_versions: &autopilot_engine::plan::NO_API_VERSIONS,
        removed_apis: Some(&[]),
        check_pods: CheckPods::NONE,
    };
    let view = PlanView {
        rollback: None,
        name: plan.metadata.name.as_deref().unwrap_or_default(),
        uid: "uid-1",
        generation: 1,
        spec: &plan.spec,
        status: None,
        steering: Steering { paused, aborted: false },
        accepted_warnings: None,
        allow_skew: None,
    };
    step(view, &observed, &policy(exclude_workers))
}

#[test]
fn the_plan_every_mutation_starts_from_signals_the_first_controller() {
    // Without this, a base plan the engine refuses would make the fuzz target below test
    // refusals only.
    let plan: Plan = serde_json::from_value(valid_plan(false)).expect("the base plan decodes");
    let transition = first_pass(&plan, false, false);
    assert!(!transition.status.state.is_terminal(), "{:?}", transition.status);
    let signalled: Vec<&str> = transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Signal { target, .. } => Some(target.name.as_str()),
            Effect::CreatePod(_)
            | Effect::DeletePod { .. }
            | Effect::Event { .. }
            | Effect::GateCheck { .. }
            | Effect::Prestage { .. } => None,
        })
        .collect();
    assert_eq!(signalled, ["c0"]);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn new_plans_start_or_are_refused_with_a_reason(
        doc in prop_oneof![
            1 => json(4),
            3 => mutated(valid_plan(false)),
            3 => mutated(valid_plan(true)),
        ],
        exclude_workers in any::<bool>(),
        paused in any::<bool>(),
    ) {
        let Ok(plan) = serde_json::from_value::<Plan>(doc) else { return Ok(()) };
        let (control_nodes, nodes) = cluster();
        let transition = first_pass(&plan, exclude_workers, paused);
        let status = &transition.status;

        if status.state.is_failure() {
            let said = status.commands.iter().any(|c| {
                c.description.as_deref().is_some_and(|d| !d.trim().is_empty())
                    || c.reason.as_deref().is_some_and(|r| !r.trim().is_empty())
            }) || status.conditions.iter().any(|c| !c.message.trim().is_empty());
            prop_assert!(said, "{} without a reason: {status:?}", status.state);
        }
        for effect in &transition.effects {
            match effect {
                Effect::Signal { target, data } => {
                    prop_assert!(
                        !status.state.is_failure(),
                        "a refused plan ({}) signalled {}", status.state, target.name
                    );
                    prop_assert!(
                        control_nodes.contains_key(&target.name) || nodes.contains_key(&target.name),
                        "a signal to {} which does not exist", target.name
                    );
                    prop_assert!(autopilot_api::signal::validate(data).is_ok(), "{data:?}");
                }
                Effect::Event { kind: EventKind::Warning, note, .. } => {
                    prop_assert!(!note.trim().is_empty(), "a Warning Event without a note");
                }
                Effect::CreatePod(pod) => {
                    prop_assert!(
                        !status.state.is_failure(),
                        "a refused plan ({}) created Pod {:?}", status.state, pod.metadata.name
                    );
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                    prop_assert!(
                        node.is_some_and(|node| nodes.contains_key(node)),
                        "a check Pod bound to {node:?}, which is not a Node"
                    );
                }
                Effect::GateCheck { target, .. } => {
                    prop_assert!(
                        !status.state.is_failure(),
                        "a refused plan ({}) asked {} to run gate checks", status.state, target.name
                    );
                }
                Effect::Prestage { target, .. } => {
                    prop_assert!(
                        !status.state.is_failure(),
                        "a refused plan ({}) asked {} to pre-stage", status.state, target.name
                    );
                }
                // Nothing observed: nothing to delete.
                Effect::DeletePod { name, .. } => prop_assert!(false, "deleted {name}, never seen"),
                Effect::Event { kind: EventKind::Normal, .. } => {}
            }
        }
    }

    #[test]
    fn label_selectors_parse_or_say_why(
        text in prop_oneof![
            "[a-z0-9./-]{0,6}(=|==|!=| in | notin |<|>)?[a-z0-9(), -]{0,10}(,[!a-z0-9=]{0,6})?",
            word(),
            any::<String>(),
        ],
        labels in proptest::collection::btree_map("[a-z]{1,3}", "[a-z0-9]{0,3}", 0..4),
    ) {
        match LabelSelector::parse(&text) {
            Ok(selector) => {
                let _ = selector.matches(&labels.into());
            }
            Err(err) => prop_assert!(!err.to_string().trim().is_empty()),
        }
    }

    #[test]
    fn field_selectors_parse_or_say_why(
        text in prop_oneof![
            "(metadata\\.name|spec\\.x)?(=|==|!=)?[a-z0-9\\\\,=-]{0,10}",
            word(),
            any::<String>(),
        ],
        name in "[a-z0-9-]{0,8}",
    ) {
        match FieldSelector::parse(&text) {
            Ok(selector) => {
                let _ = selector.matches(&name);
            }
            Err(err) => prop_assert!(!err.to_string().trim().is_empty()),
        }
    }
}

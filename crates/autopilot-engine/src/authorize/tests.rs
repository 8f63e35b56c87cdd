use autopilot_api::fixtures::*;
use autopilot_api::signal::{
    CommandPreflight, CommandRollback, RollbackOf, SignalCommand, SignalData,
};
use autopilot_api::v1beta2::{
    Plan, PlanCommandAirgapUpdateStatus, PlanCommandK0sUpdateStatus, PlanCommandPreflight,
    PlanCommandPreflightStatus, PlanCommandStatus, PlanSpec, PlanStateType, PlanStatus,
    TargetState, TargetStatus,
};

use super::*;

const V2: &str = "v1.35.1+k0s.0";
const RUN: &str = "uid-1/2";
/// The `created` of the signals the leader wrote in these Plans (their targets record it).
const CREATED: &str = "2026-11-28T08:00:00Z";
const AMD64: &str = "https://example.com/k0s-linux-amd64";
const ARM64: &str = "https://example.com/k0s-linux-arm64";

fn target(name: &str, checks: &[&str]) -> TargetStatus {
    let mut target = TargetStatus::new(name, TargetState::SignalSent, jiff::Timestamp::UNIX_EPOCH);
    target.signalled = Some(CREATED.to_owned());
    target.checks = checks.iter().map(|&check| check.to_owned()).collect();
    target
}

/// Plan `autopilot` on run [`RUN`] of spec id `id123`: command 0 updates k0s on controller
/// `c1` and workers `w1`, `w2`; command 1 brings an airgap bundle to `w1`; command 2 is a
/// preflight command that gives `w1` the check `port`.
fn plan() -> Plan {
    let spec: PlanSpec = spec("id123").then_k0s_update(V2).then_airgap_update(V2).then_command(
        autopilot_api::v1beta2::PlanCommand {
            k0supdate: None,
            airgapupdate: None,
            preflight: Some(PlanCommandPreflight::default()),
        },
    );
    let k0s = PlanCommandK0sUpdateStatus {
        controllers: vec![target("c1", &[])],
        workers: vec![target("w1", &[]), target("w2", &[])],
    };
    let commands = vec![
        PlanCommandStatus {
            id: 0,
            frozen: Some(spec.commands[0].clone()),
            k0supdate: Some(k0s),
            ..PlanCommandStatus::default()
        },
        PlanCommandStatus {
            id: 1,
            frozen: Some(spec.commands[1].clone()),
            airgapupdate: Some(PlanCommandAirgapUpdateStatus { workers: vec![target("w1", &[])] }),
            ..PlanCommandStatus::default()
        },
        PlanCommandStatus {
            id: 2,
            frozen: Some(spec.commands[2].clone()),
            preflight: Some(PlanCommandPreflightStatus {
                workers: vec![target("w1", &["port"])],
                ..PlanCommandPreflightStatus::default()
            }),
            ..PlanCommandStatus::default()
        },
    ];
    let mut plan = Plan::new("autopilot", spec);
    plan.status = Some(PlanStatus {
        run_id: Some(RUN.into()),
        plan_id: Some("id123".into()),
        commands,
        ..PlanStatus::default()
    });
    plan
}

fn k0s_to(url: &str) -> SignalData {
    k0s_signal("id123", V2, url, &sha('a')).in_run(RUN).created(CREATED)
}

fn worker(name: &str) -> Node<'_> {
    Node { name, role: Role::Worker, platform: Some("linux-amd64") }
}

fn check(signal: &SignalData, node: Node<'_>) -> Result<(), String> {
    authorize(Some(&plan()), signal, node).map(drop)
}

fn refusal(signal: &SignalData, node: Node<'_>) -> String {
    let refusal = check(signal, node).expect_err("must be refused");
    assert!(refusal.starts_with("refused: "), "{refusal}");
    refusal
}

#[test]
fn the_signal_the_leader_writes_is_authorized() {
    assert_eq!(check(&k0s_to(AMD64), worker("w1")), Ok(()));
    assert_eq!(check(&k0s_to(AMD64), worker("w2")), Ok(()));
    let controller = Node { name: "c1", role: Role::Controller, platform: Some("linux-amd64") };
    assert_eq!(check(&k0s_to(AMD64), controller), Ok(()));
    // The digest is compared without regard to case.
    let upper = k0s_signal("id123", V2, AMD64, &sha('A')).in_run(RUN).created(CREATED);
    assert_eq!(check(&upper, worker("w1")), Ok(()));
}

#[test]
fn a_signal_without_a_run_or_with_another_run_is_refused() {
    let no_run = k0s_signal("id123", V2, AMD64, &sha('a'));
    assert!(refusal(&no_run, worker("w1")).contains("names no plan run"));
    let other = k0s_signal("id123", V2, AMD64, &sha('a')).in_run("uid-1/1");
    let reason = refusal(&other, worker("w1"));
    assert!(
        reason.contains("run uid-1/1 is not the current run of Plan autopilot (uid-1/2)"),
        "{reason}"
    );
    let reason = authorize(None, &k0s_to(AMD64), worker("w1")).unwrap_err();
    assert_eq!(reason, "refused: Plan autopilot does not exist");
    let mut not_started = plan();
    not_started.status = None;
    let reason = authorize(Some(&not_started), &k0s_to(AMD64), worker("w1")).unwrap_err();
    assert!(reason.contains("(none)"), "{reason}");
}

#[test]
fn a_signal_with_another_plan_id_or_command_is_refused() {
    let other_id = k0s_signal("id999", V2, AMD64, &sha('a')).in_run(RUN).created(CREATED);
    assert!(refusal(&other_id, worker("w1")).contains("planId \"id999\""));
    let mut no_command = k0s_to(AMD64);
    no_command.command.id = 7;
    assert!(refusal(&no_command, worker("w1")).contains("run uid-1/2 has no command 7"));
    // Command 1 is the airgap update: a k0s update at its index is another kind.
    let mut wrong_kind = k0s_to(AMD64);
    wrong_kind.command.id = 1;
    let reason = refusal(&wrong_kind, worker("w1"));
    assert!(
        reason.contains("command 1 of run uid-1/2: it is airgapupdate, not k0supdate"),
        "{reason}"
    );
}

#[test]
fn every_payload_field_must_be_the_frozen_commands() {
    let reason = refusal(&k0s_to("http://evil.example/k0s"), worker("w1"));
    assert!(
        reason.contains("url \"http://evil.example/k0s\" is not the Plan's for linux-amd64"),
        "{reason}"
    );
    // Another platform's payload is refused on a node that knows its platform …
    assert!(refusal(&k0s_to(ARM64), worker("w1")).contains("is not the Plan's for linux-amd64"));
    // … and accepted by a checker that does not (the leader).
    let anywhere = Node { platform: None, ..worker("w1") };
    assert_eq!(check(&k0s_to(ARM64), anywhere), Ok(()));
    assert!(
        refusal(&k0s_to("https://evil.example/k0s"), anywhere)
            .contains("none of the Plan's payloads")
    );
    let unknown = Node { platform: Some("linux-riscv64"), ..worker("w1") };
    assert!(
        refusal(&k0s_to(AMD64), unknown)
            .contains("no payload for this node's platform linux-riscv64")
    );
    let other_digest = k0s_signal("id123", V2, AMD64, &sha('b')).in_run(RUN).created(CREATED);
    assert!(refusal(&other_digest, worker("w1")).contains("sha256"));
    let no_digest = k0s_signal("id123", V2, AMD64, "").in_run(RUN).created(CREATED);
    assert!(refusal(&no_digest, worker("w1")).contains("sha256 \"\""));
    let other_version =
        k0s_signal("id123", "v9.9.9+k0s.0", AMD64, &sha('a')).in_run(RUN).created(CREATED);
    assert!(
        refusal(&other_version, worker("w1"))
            .contains("version is \"v9.9.9+k0s.0\", the Plan says")
    );
    let mut forced = k0s_to(AMD64);
    forced.command.k0supdate.as_mut().unwrap().forceupdate = true;
    assert!(refusal(&forced, worker("w1")).contains("forceupdate is true, the Plan says false"));
}

#[test]
fn only_the_commands_targets_are_authorized() {
    let reason = refusal(&k0s_to(AMD64), worker("w3"));
    assert!(reason.contains("w3 is not one of its workers"), "{reason}");
    // A worker's name in the controllers' list does not make its Node a target, and back.
    let as_controller = Node { name: "w1", role: Role::Controller, platform: Some("linux-amd64") };
    assert!(refusal(&k0s_to(AMD64), as_controller).contains("w1 is not one of its controllers"));
    assert!(refusal(&k0s_to(AMD64), worker("c1")).contains("c1 is not one of its workers"));
}

#[test]
fn airgap_signals_match_the_airgap_command_and_only_workers() {
    let bundle = "https://example.com/bundle-linux-amd64";
    let mut signal = airgap_signal("id123", V2, bundle, &sha('a')).in_run(RUN).created(CREATED);
    signal.command.id = 1;
    assert_eq!(check(&signal, worker("w1")), Ok(()));
    assert!(refusal(&signal, worker("w2")).contains("w2 is not one of its workers"));
    let controller = Node { name: "w1", role: Role::Controller, platform: Some("linux-amd64") };
    assert!(refusal(&signal, controller).contains("not one of its controllers"));
    let mut elsewhere = signal.clone();
    elsewhere.command.airgapupdate.as_mut().unwrap().url = "https://evil.example/b".into();
    assert!(refusal(&elsewhere, worker("w1")).contains("url \"https://evil.example/b\""));
}

fn preflight(checks: &[&str]) -> SignalData {
    SignalData {
        plan_id: "id123".into(),
        created: CREATED.into(),
        command: SignalCommand {
            rollback: None,
            id: 2,
            k0supdate: None,
            airgapupdate: None,
            preflight: Some(CommandPreflight {
                checks: checks.iter().map(|&check| check.to_owned()).collect(),
            }),
        },
        status: None,
        run_id: Some(RUN.into()),
    }
}

#[test]
fn preflight_signals_name_only_the_nodes_own_checks() {
    assert_eq!(check(&preflight(&["port"]), worker("w1")), Ok(()));
    let reason = refusal(&preflight(&["port", "exec-anything"]), worker("w1"));
    assert!(reason.contains("check \"exec-anything\" is not one of w1's checks"), "{reason}");
    assert!(refusal(&preflight(&["port"]), worker("w2")).contains("w2 is not one of its workers"));
    let mut at_update = preflight(&["port"]);
    at_update.command.id = 0;
    assert!(refusal(&at_update, worker("w1")).contains("it is k0supdate, not preflight"));
}

#[test]
fn a_command_of_no_kind_or_several_kinds_is_refused() {
    let mut empty = k0s_to(AMD64);
    empty.command.k0supdate = None;
    assert!(refusal(&empty, worker("w1")).contains("not exactly one of"));
    let mut both = k0s_to(AMD64);
    both.command.preflight = Some(CommandPreflight { checks: vec![] });
    assert!(refusal(&both, worker("w1")).contains("not exactly one of"));
}

#[test]
fn plain_http_without_a_digest_is_unverified() {
    assert!(unverified("http://127.0.0.1/k0s", "").is_some_and(|r| r.starts_with("refused: ")));
    assert!(unverified("http://127.0.0.1/k0s", "  ").is_some());
    assert_eq!(unverified("http://127.0.0.1/k0s", &sha('a')), None);
    assert_eq!(unverified("https://example.com/k0s", ""), None);
}

// === Rollback signals ===

const V1: &str = "v1.35.0+k0s.0";

/// [`plan`] being rolled back: every target of commands 0 and 1 completed its update from
/// [`V1`], and each command's rollback lists them (in `SignalSent`, as the leader writes
/// them before the signal).
fn rolling_back() -> Plan {
    let mut plan = plan();
    let status = plan.status.as_mut().expect("status");
    status.rollback = serde_json::from_value(serde_json::json!({
        "reason": "requested by an operator",
        "since": "2026-11-26T00:00:00Z",
    }))
    .expect("a rollback status");
    let completed = |targets: &mut Vec<TargetStatus>| {
        for target in targets {
            target.state = TargetState::SignalCompleted;
            target.from = Some(V1.into());
        }
    };
    for command in &mut status.commands {
        let mut rollback = PlanCommandK0sUpdateStatus::default();
        if let Some(k0s) = command.k0supdate.as_mut() {
            completed(&mut k0s.controllers);
            completed(&mut k0s.workers);
            rollback = k0s.clone();
        }
        if let Some(airgap) = command.airgapupdate.as_mut() {
            completed(&mut airgap.workers);
            rollback.workers = airgap.workers.clone();
        }
        for target in rollback.controllers.iter_mut().chain(&mut rollback.workers) {
            target.state = TargetState::SignalSent;
        }
        command.rollback = Some(rollback);
    }
    plan
}

fn rollback(command: u32, of: RollbackOf, version: &str) -> SignalData {
    SignalData {
        plan_id: "id123".into(),
        created: CREATED.into(),
        command: SignalCommand {
            rollback: Some(CommandRollback { version: version.into(), of }),
            id: command,
            k0supdate: None,
            airgapupdate: None,
            preflight: None,
        },
        status: None,
        run_id: Some(RUN.into()),
    }
}

fn rolled_back(plan: &Plan, signal: &SignalData, node: Node<'_>) -> Result<(), String> {
    authorize(Some(plan), signal, node).map(|entry| assert_eq!(entry, None, "no payload"))
}

fn rollback_refusal(plan: &Plan, signal: &SignalData, node: Node<'_>) -> String {
    let refusal = rolled_back(plan, signal, node).expect_err("must be refused");
    assert!(refusal.starts_with("refused: "), "{refusal}");
    refusal
}

fn controller(name: &str) -> Node<'_> {
    Node { name, role: Role::Controller, platform: Some("linux-amd64") }
}

#[test]
fn the_rollback_signal_the_leader_writes_is_authorized() {
    let plan = rolling_back();
    let k0s = rollback(0, RollbackOf::K0s, V1);
    assert_eq!(rolled_back(&plan, &k0s, worker("w1")), Ok(()));
    assert_eq!(rolled_back(&plan, &k0s, worker("w2")), Ok(()));
    assert_eq!(rolled_back(&plan, &k0s, controller("c1")), Ok(()));
    // The leader does not know the platform; a rollback has no payload to match anyway.
    assert_eq!(rolled_back(&plan, &k0s, Node { platform: None, ..worker("w1") }), Ok(()));
    let airgap = rollback(1, RollbackOf::Airgap, V1);
    assert_eq!(rolled_back(&plan, &airgap, worker("w1")), Ok(()));
}

#[test]
fn a_rollback_of_a_run_not_being_rolled_back_is_refused() {
    let mut plan = rolling_back();
    plan.status.as_mut().expect("status").rollback = None;
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V1), worker("w1"));
    assert_eq!(reason, "refused: command 0 of run uid-1/2: the run is not being rolled back");
    // The run and plan id checks come first, as for every signal.
    let mut other_run = rollback(0, RollbackOf::K0s, V1);
    other_run.run_id = Some("uid-1/1".into());
    let reason = rollback_refusal(&rolling_back(), &other_run, worker("w1"));
    assert!(reason.contains("is not the current run"), "{reason}");
}

#[test]
fn a_rollback_of_another_kind_than_the_command_is_refused() {
    let plan = rolling_back();
    let reason = rollback_refusal(&plan, &rollback(1, RollbackOf::K0s, V1), worker("w1"));
    assert!(reason.contains("it is airgapupdate, not k0supdate (a rollback of k0s)"), "{reason}");
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::Airgap, V1), worker("w1"));
    assert!(
        reason.contains("it is k0supdate, not airgapupdate (a rollback of airgap)"),
        "{reason}"
    );
    let reason = rollback_refusal(&plan, &rollback(2, RollbackOf::K0s, V1), worker("w1"));
    assert!(reason.contains("it is preflight, not k0supdate"), "{reason}");
}

#[test]
fn a_rollback_must_list_the_node_in_the_list_of_its_role() {
    let mut plan = rolling_back();
    let k0s = rollback(0, RollbackOf::K0s, V1);
    let reason = rollback_refusal(&plan, &k0s, worker("w3"));
    assert!(reason.contains("w3 is not one of its rollback's workers"), "{reason}");
    let reason = rollback_refusal(&plan, &k0s, controller("w1"));
    assert!(reason.contains("w1 is not one of its rollback's controllers"), "{reason}");
    // Airgap bundles are rolled back on workers only.
    let reason = rollback_refusal(&plan, &rollback(1, RollbackOf::Airgap, V1), controller("w1"));
    assert!(reason.contains("w1 is not one of its rollback's controllers"), "{reason}");
    // A node that completed the update but is not (yet) in the rollback is not signalled.
    let status = plan.status.as_mut().expect("status");
    let back = status.commands[0].rollback.as_mut().expect("rollback");
    back.workers.retain(|target| target.name != "w2");
    let reason = rollback_refusal(&plan, &k0s, worker("w2"));
    assert!(reason.contains("w2 is not one of its rollback's workers"), "{reason}");
    plan.status.as_mut().expect("status").commands[0].rollback = None;
    let reason = rollback_refusal(&plan, &k0s, worker("w1"));
    assert!(reason.contains("w1 is not one of its rollback's workers"), "{reason}");
}

#[test]
fn a_rollback_to_another_version_than_the_nodes_from_is_refused() {
    let plan = rolling_back();
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V2), worker("w1"));
    assert!(
        reason.contains(&format!(
            "version is \"{V2}\", its rollback records w1 ran \"{V1}\" before the run"
        )),
        "{reason}"
    );
    // The update's own record must agree with the rollback's.
    let mut plan = rolling_back();
    let status = plan.status.as_mut().expect("status");
    status.commands[0].k0supdate.as_mut().expect("k0s").workers[0].from = Some(V2.into());
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V1), worker("w1"));
    assert!(reason.contains("the update records w1 ran"), "{reason}");
    let status = plan.status.as_mut().expect("status");
    status.commands[0].k0supdate.as_mut().expect("k0s").workers[0].from = None;
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V1), worker("w1"));
    assert!(reason.contains("the update records no version w1 ran before the run"), "{reason}");
    let mut plan = rolling_back();
    let status = plan.status.as_mut().expect("status");
    status.commands[0].rollback.as_mut().expect("rollback").workers[0].from = None;
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V1), worker("w1"));
    assert!(reason.contains("its rollback records no version w1 ran"), "{reason}");
}

#[test]
fn a_rollback_of_a_node_that_did_not_complete_the_update_is_refused() {
    for state in
        [TargetState::SignalPending, TargetState::SignalSent, TargetState::SignalApplyFailed]
    {
        let mut plan = rolling_back();
        let status = plan.status.as_mut().expect("status");
        status.commands[0].k0supdate.as_mut().expect("k0s").workers[0].state = state;
        let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V1), worker("w1"));
        assert!(
            reason.contains(&format!(
                "w1 did not complete the update it would roll back (it is {state})"
            )),
            "{reason}"
        );
    }
    // In the rollback list but not among the update's targets at all.
    let mut plan = rolling_back();
    let status = plan.status.as_mut().expect("status");
    status.commands[0].k0supdate.as_mut().expect("k0s").workers.retain(|t| t.name != "w1");
    let reason = rollback_refusal(&plan, &rollback(0, RollbackOf::K0s, V1), worker("w1"));
    assert!(reason.contains("w1 is not one of its workers"), "{reason}");
}

#[test]
fn a_rollback_together_with_another_kind_is_refused() {
    let mut both = rollback(0, RollbackOf::K0s, V1);
    both.command.k0supdate = k0s_to(AMD64).command.k0supdate;
    let reason = rollback_refusal(&rolling_back(), &both, worker("w1"));
    assert!(reason.contains("not exactly one of"), "{reason}");
    let mut with_checks = rollback(2, RollbackOf::K0s, V1);
    with_checks.command.preflight = Some(CommandPreflight { checks: vec!["port".into()] });
    let reason = rollback_refusal(&rolling_back(), &with_checks, worker("w1"));
    assert!(reason.contains("not exactly one of"), "{reason}");
}

/// [`plan`] with a `check` gate `kubelet` and a `kubernetes` gate `pods` on command 0, and
/// `w1` in an open gate run of it (`w2` in a failed one).
fn gating() -> Plan {
    let mut plan = plan();
    let status = plan.status.as_mut().expect("status");
    let check: autopilot_api::v1beta2::GateCheck = serde_json::from_value(serde_json::json!({
        "command": {"id": "k0sVersion"},
        "results": [{"status": "success", "message": "ok"}]
    }))
    .expect("a check");
    let gates = vec![
        autopilot_api::v1beta2::Gate {
            id: "kubelet".into(),
            check: Some(check),
            ..Default::default()
        },
        autopilot_api::v1beta2::Gate {
            id: "pods".into(),
            settle: Some("1m".into()),
            ..Default::default()
        },
    ];
    if let Some(update) = status.commands[0].frozen.as_mut().and_then(|f| f.k0supdate.as_mut()) {
        update.rollout.gates = gates;
    }
    let run = |node: &str, failed: Option<&str>| autopilot_api::v1beta2::GateRun {
        nodes: vec![node.into()],
        after: autopilot_api::v1beta2::GateAfter::Node,
        since: None,
        passed: Vec::new(),
        waiting: None,
        failed: failed.map(str::to_owned),
    };
    status.commands[0].gating = vec![run("w1", None), run("w2", Some("kubelet"))];
    plan
}

fn gate_request(gates: &[&str]) -> autopilot_api::gate_check::GateCheckRequest {
    autopilot_api::gate_check::GateCheckRequest {
        plan_id: "id123".into(),
        run_id: RUN.into(),
        command: 0,
        asked: "2026-11-26T10:00:00Z".into(),
        asks: autopilot_api::gate_check::GateCheckAsks {
            gates: gates.iter().map(|&g| g.to_owned()).collect(),
            attempt: 1,
        },
    }
}

#[test]
fn a_gate_check_request_is_authorized_only_for_a_node_of_an_open_gate_run() {
    let plan = gating();
    let checks =
        gate_checks(Some(&plan), &gate_request(&["kubelet"]), worker("w1")).expect("w1 gates");
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].0, "kubelet");

    let refused = |request: autopilot_api::gate_check::GateCheckRequest, node: Node<'_>| {
        let reason = gate_checks(Some(&plan), &request, node).expect_err("must be refused");
        assert!(reason.starts_with("refused: "), "{reason}");
        reason
    };
    let reason = refused(gate_request(&["kubelet"]), worker("w2"));
    assert!(reason.contains("w2 is in no open gate run"), "{reason}");
    let reason = refused(gate_request(&["pods"]), worker("w1"));
    assert!(reason.contains("it has no check gate \"pods\""), "{reason}");
    let reason = refused(gate_request(&[]), worker("w1"));
    assert!(reason.contains("names no gate"), "{reason}");
    let controller = Node { name: "w1", role: Role::Controller, platform: None };
    let reason = refused(gate_request(&["kubelet"]), controller);
    assert!(reason.contains("w1 is not one of its controllers"), "{reason}");
    let other_run = autopilot_api::gate_check::GateCheckRequest {
        run_id: "uid-1/1".into(),
        ..gate_request(&["kubelet"])
    };
    let reason = refused(other_run, worker("w1"));
    assert!(reason.contains("is not the current run"), "{reason}");
    let other_id = autopilot_api::gate_check::GateCheckRequest {
        plan_id: "id999".into(),
        ..gate_request(&["kubelet"])
    };
    assert!(refused(other_id, worker("w1")).contains("planId"));
    let preflight =
        autopilot_api::gate_check::GateCheckRequest { command: 2, ..gate_request(&["kubelet"]) };
    assert!(refused(preflight, worker("w1")).contains("not an update command with gates"));
    let reason = gate_checks(None, &gate_request(&["kubelet"]), worker("w1")).unwrap_err();
    assert_eq!(reason, "refused: Plan autopilot does not exist");
}

/// [`plan`] with command 0 pre-staging: `w1` was asked to stage, `w2` was not.
fn prestaging() -> Plan {
    let mut plan = plan();
    let status = plan.status.as_mut().expect("status");
    let command = &mut status.commands[0];
    command.frozen.as_mut().and_then(|f| f.k0supdate.as_mut()).expect("k0s").rollout.prestage =
        true;
    let k0s = command.k0supdate.as_mut().expect("k0s status");
    for target in &mut k0s.workers {
        target.state = TargetState::SignalPending;
    }
    k0s.workers[0].prestage = Some(autopilot_api::prestage::PrestageState::Requested);
    plan
}

fn prestage_request(run: &str, command: u32) -> autopilot_api::prestage::PrestageRequest {
    autopilot_api::prestage::PrestageRequest {
        plan_id: "id123".into(),
        run_id: run.into(),
        command,
        asked: "2026-11-26T10:00:00Z".into(),
        asks: autopilot_api::prestage::PrestageAsks {},
    }
}

#[test]
fn a_prestage_request_is_authorized_only_for_an_asked_target_with_the_plans_payload() {
    let plan = prestaging();
    let staging =
        prestage(Some(&plan), &prestage_request(RUN, 0), worker("w1")).expect("w1 was asked");
    // The payload is the Plan's for the node's own platform, never the request's.
    assert_eq!(staging.entry.url, AMD64);
    assert_eq!(staging.kind, StagingKind::K0s);
    assert_eq!(staging.version, V2);
    let arm = Node { name: "w1", role: Role::Worker, platform: Some("linux-arm64") };
    assert_eq!(
        prestage(Some(&plan), &prestage_request(RUN, 0), arm).expect("arm").entry.url,
        ARM64
    );

    let refused = |plan: &Plan, request, node| {
        let reason = prestage(Some(plan), &request, node).expect_err("must be refused");
        assert!(reason.starts_with("refused: "), "{reason}");
        reason
    };
    let reason = refused(&plan, prestage_request(RUN, 0), worker("w2"));
    assert!(reason.contains("w2 is not asked to stage"), "{reason}");
    let reason = refused(&plan, prestage_request(RUN, 0), worker("w9"));
    assert!(reason.contains("w9 is not one of its workers"), "{reason}");
    let reason = refused(&plan, prestage_request("uid-1/1", 0), worker("w1"));
    assert!(reason.contains("is not the current run"), "{reason}");
    let reason = refused(&plan, prestage_request(RUN, 2), worker("w1"));
    assert!(reason.contains("not an update command"), "{reason}");
    let reason = refused(&plan, prestage_request(RUN, 1), worker("w1"));
    assert!(reason.contains("does not pre-stage"), "{reason}");
    let unknown = Node { name: "w1", role: Role::Worker, platform: Some("linux-s390x") };
    let reason = refused(&plan, prestage_request(RUN, 0), unknown);
    assert!(reason.contains("no payload for this node's platform linux-s390x"), "{reason}");
    let controller = Node { name: "w1", role: Role::Controller, platform: Some("linux-amd64") };
    let reason = refused(&plan, prestage_request(RUN, 0), controller);
    assert!(reason.contains("w1 is not one of its controllers"), "{reason}");
    assert!(prestage(None, &prestage_request(RUN, 0), worker("w1")).is_err());

    // Once signalled (or after the command ended) a node is not asked to stage any more.
    let mut signalled = prestaging();
    let status = signalled.status.as_mut().expect("status");
    status.commands[0].k0supdate.as_mut().expect("k0s").workers[0].state = TargetState::SignalSent;
    let reason = refused(&signalled, prestage_request(RUN, 0), worker("w1"));
    assert!(reason.contains("it is SignalSent"), "{reason}");
    let mut ended = prestaging();
    ended.status.as_mut().expect("status").commands[0].state =
        autopilot_api::v1beta2::PlanStateType::ApplyFailed;
    let reason = refused(&ended, prestage_request(RUN, 0), worker("w1"));
    assert!(reason.contains("it has ended (ApplyFailed)"), "{reason}");
}

#[test]
fn a_signal_the_status_does_not_record_for_the_node_is_not_the_leaders() {
    // Copied from another node, or written with a fresh `created`: the payload is the
    // Plan's, the node a target, but the leader never recorded this signal for it.
    let copied = k0s_to(AMD64).created("2026-11-28T09:00:00Z");
    let refused = refusal(&copied, worker("w1"));
    assert!(refused.starts_with("refused: not signalled by the leader"), "{refused}");
    assert!(
        refused.contains("created 2026-11-28T08:00:00Z, not 2026-11-28T09:00:00Z"),
        "{refused}"
    );

    let mut plan = plan();
    let workers =
        &mut plan.status.as_mut().unwrap().commands[0].k0supdate.as_mut().unwrap().workers;
    workers[1].state = TargetState::SignalPending;
    workers[1].signalled = None;
    let refused = authorize(Some(&plan), &k0s_to(AMD64), worker("w2")).expect_err("not signalled");
    assert!(
        refused
            .starts_with("refused: not signalled by the leader: the Plan records no signal for w2"),
        "{refused}"
    );
    assert_eq!(authorize(Some(&plan), &k0s_to(AMD64), worker("w1")).map(drop), Ok(()));
}

#[test]
fn no_signal_is_authorized_once_the_plan_or_its_command_ended() {
    for state in [PlanStateType::Aborted, PlanStateType::Completed, PlanStateType::ApplyFailed] {
        let mut plan = plan();
        plan.status.as_mut().unwrap().state = state;
        let refused = authorize(Some(&plan), &k0s_to(AMD64), worker("w1")).expect_err("ended");
        assert!(refused.starts_with("refused: the plan has ended"), "{refused}");
        assert!(refused.contains(&state.to_string()), "{refused}");

        let mut plan = self::plan();
        plan.status.as_mut().unwrap().commands[0].state = state;
        let refused = authorize(Some(&plan), &k0s_to(AMD64), worker("w1")).expect_err("ended");
        assert!(refused.starts_with("refused: the plan has ended its command 0"), "{refused}");
    }
}

#[test]
fn a_node_goes_on_from_applying_update_only_when_the_status_records_its_drain() {
    let signal = k0s_to(AMD64);
    let refused = drained(Some(&plan()), &signal, worker("w1")).expect_err("not drained yet");
    assert!(refused.starts_with("refused: the Plan does not record the drain of w1"), "{refused}");

    let mut plan = plan();
    let workers =
        &mut plan.status.as_mut().unwrap().commands[0].k0supdate.as_mut().unwrap().workers;
    workers[0].drained = Some(CREATED.to_owned());
    assert_eq!(drained(Some(&plan), &signal, worker("w1")), Ok(()));
    assert!(drained(Some(&plan), &signal, worker("w2")).is_err(), "w2's drain is not w1's");
    let other = signal.clone().created("2026-11-28T09:00:00Z");
    assert!(drained(Some(&plan), &other, worker("w1")).is_err(), "another signal's drain");
    assert!(drained(None, &signal, worker("w1")).is_err(), "no Plan");
}

#[test]
fn a_run_signalled_before_records_existed_goes_on_but_no_copy_onto_a_waiting_node_does() {
    // The status a leader of CRD schema generation 4 wrote: no records.
    let mut plan = plan();
    let workers =
        &mut plan.status.as_mut().unwrap().commands[0].k0supdate.as_mut().unwrap().workers;
    for target in workers.iter_mut() {
        target.signalled = None;
    }
    workers[1].state = TargetState::SignalPending;
    let signal = k0s_to(AMD64);
    assert_eq!(authorize(Some(&plan), &signal, worker("w1")).map(drop), Ok(()), "signalled");
    assert_eq!(drained(Some(&plan), &signal, worker("w1")), Ok(()), "its drain moved it on");
    let refused = authorize(Some(&plan), &signal, worker("w2")).expect_err("w2 waits");
    assert!(refused.starts_with("refused: not signalled by the leader"), "{refused}");
}

fn at(signal: SignalData, phase: SignalPhase) -> SignalData {
    let now = jiff::Timestamp::UNIX_EPOCH;
    SignalData { status: Some(autopilot_api::signal::SignalStatus::new(phase, now)), ..signal }
}

#[test]
fn a_signal_of_a_target_that_ended_is_refused_at_any_phase_before_its_end() {
    for ended in [TargetState::SignalCompleted, TargetState::SignalApplyFailed] {
        let mut plan = plan();
        let workers =
            &mut plan.status.as_mut().unwrap().commands[0].k0supdate.as_mut().unwrap().workers;
        workers[0].state = ended;
        let fresh = k0s_to(AMD64);
        let rewinds = [
            fresh.clone(),
            at(fresh.clone(), SignalPhase::Downloading),
            at(fresh.clone(), SignalPhase::Cordoning),
            at(fresh.clone(), SignalPhase::ApplyingUpdate),
            at(fresh.clone(), SignalPhase::Restarting),
            at(fresh.clone(), SignalPhase::Uncordoning),
        ];
        for rewound in &rewinds {
            let refused = authorize(Some(&plan), rewound, worker("w1")).expect_err("rewound");
            assert!(refused.starts_with("refused: rewound: the Plan records w1 as"), "{refused}");
            assert!(refused.contains(ended.as_str()), "{refused}");
            // The same signal in flight on the other worker goes on at every phase.
            assert_eq!(authorize(Some(&plan), rewound, worker("w2")).map(drop), Ok(()));
        }
        // Its end is accepted: the node reports it, the drain uncordons after it.
        for end in [SignalPhase::Completed, SignalPhase::Failed] {
            let ended_signal = at(fresh.clone(), end);
            assert_eq!(authorize(Some(&plan), &ended_signal, worker("w1")).map(drop), Ok(()));
        }
    }
}

#[test]
fn a_rollback_signal_of_a_node_whose_rollback_ended_is_refused_before_its_end() {
    let mut plan = rolling_back();
    let signal = rollback(0, RollbackOf::K0s, V1);
    assert_eq!(rolled_back(&plan, &signal, worker("w1")), Ok(()));
    let rollback_targets =
        &mut plan.status.as_mut().unwrap().commands[0].rollback.as_mut().unwrap().workers;
    rollback_targets[0].state = TargetState::SignalCompleted;
    let refused = rollback_refusal(&plan, &at(signal, SignalPhase::Cordoning), worker("w1"));
    assert!(refused.starts_with("refused: rewound:"), "{refused}");
}

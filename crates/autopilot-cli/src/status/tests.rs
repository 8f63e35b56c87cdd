use std::collections::BTreeMap;

use autopilot_api::fixtures::{
    ControlNodeBuilder, MetaBuilder, NodeBuilder, PlanBuilder, SignalBuilder, control_node,
    k0s_signal, node, spec,
};
use autopilot_api::signal::{SignalData, SignalStatus};
use autopilot_api::v1beta2::{
    PlanCommandK0sUpdateStatus, PlanCommandTarget, PlanStatus, UpdateConfig,
};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, ObjectMeta, Time};

use super::*;

const RUN: &str = "uid-1/1";

fn at(text: &str) -> jiff::Timestamp {
    text.parse().expect("a fixture timestamp")
}

/// The time every fixture is looked at.
fn now() -> jiff::Timestamp {
    at("2026-01-01T12:10:00Z")
}

fn target(name: &str, state: TargetState, phase: Option<SignalPhase>, since: &str) -> TargetStatus {
    TargetStatus {
        prestage: None,
        signalled: None,
        drained: None,
        from: None,
        name: name.to_owned(),
        state,
        last_updated_timestamp: Time(at(since)),
        phase,
        reason: None,
        checks: Vec::new(),
        drain: None,
        group: None,
    }
}

/// A signal of this run for command 0, created at `created`, with the node in `phase` since
/// `since`.
fn signal(created: &str, phase: Option<(SignalPhase, &str)>) -> SignalData {
    SignalData {
        status: phase.map(|(phase, since)| SignalStatus::new(phase, at(since))),
        ..k0s_signal("rollout", "v1.35.1+k0s.0", "https://example.com/k0s", "")
            .created(created)
            .in_run(RUN)
    }
}

fn event(name: &str, time: &str, type_: &str, reason: &str, note: &str, plan: &str) -> Event {
    Event {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        event_time: Some(MicroTime(at(time))),
        type_: Some(type_.to_owned()),
        reason: Some(reason.to_owned()),
        note: Some(note.to_owned()),
        regarding: Some(ObjectReference {
            kind: Some("Plan".to_owned()),
            name: Some(plan.to_owned()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    }
}

/// A plan mid-update: one controller done (it took 60 s), worker-0 done (90 s), worker-1
/// downloading, worker-2 and worker-3 waiting, workers 2 at a time.
fn mid_update() -> Snapshot {
    Snapshot {
        plan: Some(mid_update_plan()),
        nodes: mid_update_nodes(),
        control_nodes: vec![control_node("controller-0").k0s_version("v1.35.1+k0s.0").signalled(
            &signal("2026-01-01T12:00:00Z", Some((SignalPhase::Completed, "2026-01-01T12:01:00Z"))),
        )],
        events: mid_update_events(),
        api_versions: BTreeMap::from([("controller-0".to_owned(), "v1.35.4".to_owned())]),
        ..Snapshot::empty("autopilot")
    }
}

/// `node` with its kubelet reporting `version` (`status.nodeInfo.kubeletVersion`).
fn with_kubelet(mut node: Node, version: &str) -> Node {
    let status = node.status.get_or_insert_with(Default::default);
    status.node_info = Some(k8s_openapi::api::core::v1::NodeSystemInfo {
        kubelet_version: version.to_owned(),
        ..Default::default()
    });
    node
}

/// The Plan of [`mid_update`]: one `k0supdate` command to v1.35.1+k0s.0, in `SchedulableWait`.
fn mid_update_plan() -> Plan {
    let spec = spec("rollout")
        .then_k0s_update("v1.35.1+k0s.0")
        .without_payloads()
        .controller_target(PlanCommandTarget::default())
        .concurrent(2);
    let command = spec.commands[0].clone();
    let mut plan = Plan::new("autopilot", spec);
    plan.status = Some(PlanStatus {
        state: PlanStateType::SchedulableWait,
        commands: vec![PlanCommandStatus {
            id: 0,
            state: PlanStateType::SchedulableWait,
            k0supdate: Some(PlanCommandK0sUpdateStatus {
                controllers: vec![target(
                    "controller-0",
                    TargetState::SignalCompleted,
                    Some(SignalPhase::Completed),
                    "2026-01-01T12:01:00Z",
                )],
                workers: mid_update_workers(),
            }),
            frozen: Some(command),
            ..PlanCommandStatus::default()
        }],
        run_id: Some(RUN.to_owned()),
        plan_id: Some("rollout".to_owned()),
        progress: Some("2/5".to_owned()),
        ..PlanStatus::default()
    });
    plan
}

/// The worker targets of [`mid_update`]'s command.
fn mid_update_workers() -> Vec<TargetStatus> {
    vec![
        target(
            "worker-0",
            TargetState::SignalCompleted,
            Some(SignalPhase::Completed),
            "2026-01-01T12:02:30Z",
        ),
        target(
            "worker-1",
            TargetState::SignalSent,
            Some(SignalPhase::Downloading),
            "2026-01-01T12:09:30Z",
        ),
        target("worker-2", TargetState::SignalPending, None, "2026-01-01T12:00:00Z"),
        target("worker-3", TargetState::SignalPending, None, "2026-01-01T12:00:00Z"),
    ]
}

/// The Nodes of [`mid_update`]'s workers (worker-3 not Ready).
fn mid_update_nodes() -> Vec<Node> {
    vec![
        with_kubelet(
            node("worker-0").k0s_version("v1.35.1+k0s.0").signalled(&signal(
                "2026-01-01T12:01:00Z",
                Some((SignalPhase::Completed, "2026-01-01T12:02:30Z")),
            )),
            "v1.35.4",
        ),
        with_kubelet(
            node("worker-1").k0s_version("v1.35.0+k0s.0").signalled(&signal(
                "2026-01-01T12:09:30Z",
                Some((SignalPhase::Downloading, "2026-01-01T12:09:30Z")),
            )),
            "v1.34.4",
        ),
        node("worker-2").k0s_version("v1.35.0+k0s.0"),
        node("worker-3").k0s_version("v1.35.0+k0s.0").ready(false),
    ]
}

/// The Events of [`mid_update`]: two about the Plan, one about another plan.
fn mid_update_events() -> Vec<Event> {
    vec![
        event(
            "a",
            "2026-01-01T12:00:00Z",
            "Normal",
            "NodesSignalled",
            "controller-0 signalled",
            "autopilot",
        ),
        event("x", "2026-01-01T12:00:01Z", "Normal", "Other", "about another plan", "other"),
        event(
            "b",
            "2026-01-01T12:09:30Z",
            "Normal",
            "NodesSignalled",
            "worker-1 signalled",
            "autopilot",
        ),
    ]
}

#[test]
fn the_screen_shows_state_progress_eta_nodes_blocking_and_the_plans_events() {
    let screen = render(&mid_update(), now());
    let expected = "\
Plan autopilot: SchedulableWait   id rollout
Command 1/1: k0supdate to v1.35.1+k0s.0: SchedulableWait
Progress: 2/5 node updates (40%), 1 in flight   ETA 2m00s (mean 1m15s per node over 2 update(s))

Blocking:
  worker-3: Node is not Ready (not signalled until it is)

NODE             ROLE       CMD STATE             PHASE          IN PHASE  READY VERSION          KUBERNETES REASON
controller-0     controller 0   SignalCompleted   Completed         9m00s  -     v1.35.1+k0s.0    v1.35.4
worker-0         worker     0   SignalCompleted   Completed         7m30s  yes   v1.35.1+k0s.0    v1.35.4
worker-1         worker     0   SignalSent        Downloading         30s  yes   v1.35.0+k0s.0    v1.34.4
worker-2         worker     0   SignalPending     -                10m00s  yes   v1.35.0+k0s.0    -
worker-3         worker     0   SignalPending     -                10m00s  NO    v1.35.0+k0s.0    -

Events (last 2):
    10m00s ago  Normal   NodesSignalled       controller-0 signalled
       30s ago  Normal   NodesSignalled       worker-1 signalled
";
    assert_eq!(screen, expected, "\n{screen}");
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn no_eta_before_a_node_update_completed() {
    assert_eq!(eta(&[], &[EtaGroup::new(1, Vec::new(), 3)]), None);
}

#[test]
fn the_eta_of_one_at_a_time_is_the_mean_times_the_nodes_left() {
    // Means 60 s; three pending, one at a time.
    let samples = [secs(40), secs(80)];
    assert_eq!(eta(&samples, &[EtaGroup::new(1, Vec::new(), 3)]), Some(secs(180)));
}

#[test]
fn the_eta_fills_the_slots_as_nodes_in_flight_should_finish() {
    // Mean 60 s, 2 at a time; one node in flight for 50 s (10 s left), three pending:
    // slots [10, 0] -> [10, 60] -> [70, 60] -> [70, 120].
    let samples = [secs(60)];
    let group = EtaGroup::new(2, vec![secs(50)], 3);
    assert_eq!(eta(&samples, &[group]), Some(secs(120)));
}

#[test]
fn groups_run_one_after_another_and_a_late_node_counts_as_due_now() {
    // Controllers: one in flight for longer than the mean (due now), one pending: 60 s.
    // Workers: 4 pending, 4 at a time: 60 s.
    let samples = [secs(60)];
    let groups = [EtaGroup::new(1, vec![secs(500)], 1), EtaGroup::new(4, Vec::new(), 4)];
    assert_eq!(eta(&samples, &groups), Some(secs(120)));
}

#[test]
fn nothing_left_is_an_eta_of_zero() {
    assert_eq!(eta(&[secs(30)], &[EtaGroup::new(3, Vec::new(), 0)]), Some(Duration::ZERO));
}

#[test]
fn a_missing_plan_is_said_in_one_line() {
    let snapshot = Snapshot::empty("autopilot");
    assert_eq!(render(&snapshot, now()), "Plan autopilot: not found\n");
    let view = view(&snapshot, now());
    assert!(!view.found);
    assert_eq!(view.blocking, ["there is no Plan named autopilot"]);
}

#[test]
fn a_pause_a_blocked_drain_and_the_commands_hold_are_what_blocks() {
    let mut snapshot = mid_update();
    let plan = snapshot.plan.as_mut().expect("the fixture plan");
    plan.metadata.annotations =
        Some(BTreeMap::from([(keys::ANNOTATION_PAUSED.to_owned(), "true".to_owned())]));
    let status = plan.status.as_mut().expect("the fixture status");
    status.conditions.push(Condition {
        type_: keys::conditions::PAUSED.to_owned(),
        status: "True".to_owned(),
        message: "paused by an operator".to_owned(),
        reason: keys::conditions::REASON_PAUSED_BY_OPERATOR.to_owned(),
        last_transition_time: Time(now()),
        observed_generation: None,
    });
    let command = &mut status.commands[0];
    command.reason = Some("worker worker-3 is not Ready".to_owned());
    let workers = &mut command.k0supdate.as_mut().expect("k0supdate").workers;
    workers[1].phase = Some(SignalPhase::Cordoning);
    workers[1].reason = Some(
        "draining worker-1: evicting default/web-0 is blocked by PodDisruptionBudget \
         default/web; retrying"
            .to_owned(),
    );

    let view = view(&snapshot, now());
    assert!(view.paused);
    assert_eq!(
        view.blocking,
        [
            "paused by an operator: no new node is signalled (k0s autopilot resume to go on)",
            "command 0: worker worker-3 is not Ready",
            "worker-1: draining worker-1: evicting default/web-0 is blocked by \
             PodDisruptionBudget default/web; retrying",
        ]
    );
    let screen = render_view(&view);
    assert!(screen.starts_with("Plan autopilot: SchedulableWait (paused)"), "{screen}");
    assert!(
        screen.contains(
            "worker-1         worker     0   SignalSent        Cordoning           30s  yes   \
             v1.35.0+k0s.0    v1.34.4    draining worker-1: evicting default/web-0 is bloc…"
        ),
        "{screen}"
    );
}

#[test]
fn a_failed_plan_says_why_it_ended_and_shows_no_eta() {
    let mut snapshot = mid_update();
    let status = snapshot.plan.as_mut().and_then(|p| p.status.as_mut()).expect("a status");
    status.state = PlanStateType::ApplyFailed;
    status.commands[0].state = PlanStateType::ApplyFailed;
    status.commands[0].description = Some("worker-1 failed: sha256 mismatch".to_owned());
    let view = view(&snapshot, now());
    assert!(view.ended);
    assert_eq!(view.eta, None);
    assert_eq!(view.blocking, ["command 0 ended ApplyFailed: worker-1 failed: sha256 mismatch"]);
}

#[test]
fn only_the_newest_events_about_the_plan_are_shown_oldest_first() {
    let mut snapshot = mid_update();
    snapshot.events = (0..12)
        .map(|i| {
            let time = format!("2026-01-01T12:00:{i:02}Z");
            event(
                &format!("e{i}"),
                &time,
                "Normal",
                "NodesSignalled",
                &format!("n{i}"),
                "autopilot",
            )
        })
        .rev()
        .collect();
    let view = view(&snapshot, now());
    let notes: Vec<&str> = view.events.iter().map(|e| e.note.as_str()).collect();
    assert_eq!(notes, ["n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"]);
}

#[test]
fn the_json_document_has_stable_field_names() {
    let json = serde_json::to_value(view(&mid_update(), now())).expect("serialisable");
    let keys: Vec<&str> = json.as_object().expect("an object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "aborting", "blocking", "command", "commands", "ended", "eta", "events", "found",
            "nodes", "paused", "plan", "planId", "progress", "runId", "state", "updaters",
            "windows"
        ]
    );
    assert_eq!(
        json["progress"],
        serde_json::json!({ "completed": 2, "failed": 0, "inFlight": 1, "planned": 5 })
    );
    assert_eq!(
        json["eta"],
        serde_json::json!({ "remainingSeconds": 120, "samples": 2, "meanSeconds": 75 })
    );
    assert_eq!(
        json["nodes"][2],
        serde_json::json!({
            "name": "worker-1", "role": "worker", "command": 0, "state": "SignalSent",
            "phase": "Downloading", "since": "2026-01-01T12:09:30Z", "secondsInPhase": 30,
            "ready": true, "version": "v1.35.0+k0s.0", "kubernetes": "v1.34.4"
        })
    );
    assert_eq!(json["events"][1]["reason"], "NodesSignalled");
    assert_eq!(json["events"][1]["type"], "Normal");
}

fn update_config(name: &str, start: &str, length: &str) -> UpdateConfig {
    use autopilot_api::v1beta2::{
        PeriodicUpgradeStrategy, UpdateConfigSpec, UpgradeStrategy, UpgradeStrategyType,
    };
    UpdateConfig::new(
        name,
        UpdateConfigSpec {
            upgrade_strategy: Some(UpgradeStrategy {
                r#type: Some(UpgradeStrategyType::Periodic),
                cron: None,
                periodic: Some(PeriodicUpgradeStrategy {
                    days: Vec::new(),
                    start_time: Some(start.to_owned()),
                    length: Some(length.to_owned()),
                }),
                min_interval: None,
            }),
            ..UpdateConfigSpec::default()
        },
    )
}

#[test]
fn a_closed_update_window_is_what_blocks_once_no_plan_runs() {
    // 12:10 UTC: the nightly window (02:00, 2h) is closed, the noon one (12:00, 1h) open.
    let mut snapshot = Snapshot::empty("autopilot");
    snapshot.update_configs =
        vec![update_config("nightly", "02:00", "2h"), update_config("noon", "12:00", "1h")];
    let view = view(&snapshot, now());
    assert_eq!(
        view.blocking,
        [
            "there is no Plan named autopilot",
            "UpdateConfig nightly: its update window (every day at 02:00 for 2h) is closed until \
             2026-01-02T02:00:00Z: the updater creates no plan before it opens",
        ]
    );
    let screen = render_view(&view);
    assert!(
        screen.contains(
            "Update window of UpdateConfig noon: every day at 12:00 for 1h (open until \
             2026-01-01T13:00:00Z)"
        ),
        "{screen}"
    );

    // While a plan runs, the window holds nothing: it is shown, not listed as blocking.
    let mut running = mid_update();
    running.update_configs = snapshot.update_configs.clone();
    let view = self::view(&running, now());
    assert!(view.blocking.iter().all(|b| !b.contains("update window")), "{:?}", view.blocking);
    assert_eq!(view.windows.len(), 2);
}

fn checked(
    mut config: UpdateConfig,
    reason: &str,
    eol: Option<(&str, Option<bool>, &str)>,
) -> UpdateConfig {
    use autopilot_api::v1beta2::{EndOfLifeStatus, UpdateCheckStatus, UpdateConfigStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    config.status = Some(UpdateConfigStatus {
        last_check: Some(UpdateCheckStatus {
            time: Time(at("2026-01-01T12:09:00Z")),
            reason: reason.to_owned(),
            message: String::new(),
        }),
        offered_version: Some("v1.35.2+k0s.0".to_owned()),
        next_update_allowed: (reason == "MinIntervalWait")
            .then(|| Time(at("2026-01-02T12:00:00Z"))),
        end_of_life: eol.map(|(date, past, message)| EndOfLifeStatus {
            date: date.to_owned(),
            past,
            message: message.to_owned(),
        }),
        ..UpdateConfigStatus::default()
    });
    config
}

#[test]
fn the_updater_line_shows_the_interval_wait_and_a_past_end_of_life_blocks() {
    let mut snapshot = Snapshot::empty("autopilot");
    snapshot.update_configs = vec![
        checked(
            update_config("daily", "00:00", "24h"),
            "MinIntervalWait",
            Some(("2025-12-01", Some(true), "")),
        ),
        checked(
            update_config("weekly", "00:00", "24h"),
            "UpToDate",
            Some((
                "next spring",
                None,
                "the update server's eolDate \"next spring\" is not a date",
            )),
        ),
        update_config("unchecked", "00:00", "24h"),
    ];
    let view = view(&snapshot, now());
    assert_eq!(view.updaters.len(), 2, "an UpdateConfig without a check has no line");
    assert!(
        view.blocking.iter().any(|b| b
            == "UpdateConfig daily: the running version is past its end of life (2025-12-01, as \
                the update server says)"),
        "{:?}",
        view.blocking
    );
    assert!(view.blocking.iter().all(|b| !b.contains("weekly")), "{:?}", view.blocking);
    let screen = render_view(&view);
    assert!(
        screen.contains(
            "Updater of UpdateConfig daily: MinIntervalWait at 2026-01-01T12:09:00Z, offered \
             v1.35.2+k0s.0, next update allowed at 2026-01-02T12:00:00Z; eolDate 2025-12-01 \
             (running version PAST its end of life)"
        ),
        "{screen}"
    );
    assert!(screen.contains("(end of life not judged): the update server's eolDate"), "{screen}");
}

#[test]
fn node_written_text_is_one_line_and_cannot_act_on_the_terminal() {
    assert_eq!(super::cut("failed:\nexit 1", 40), "failed: exit 1");
    assert_eq!(super::cut("ok\x1b]0;owned\x07\u{202e}", 40), "ok\\u{1b}]0;owned\\u{7}\\u{202e}");
    assert_eq!(super::cut("\x1b[2J and more", 8), "\\u{1b}[…");
}

#[test]
fn a_rollback_in_progress_says_why_how_far_and_who_is_in_flight() {
    let mut snapshot = mid_update();
    let plan = snapshot.plan.as_mut().expect("a plan");
    let status = plan.status.as_mut().expect("a status");
    status.rollback = Some(autopilot_api::v1beta2::RollbackStatus {
        reason: "gate healthy failed on worker-1: \"objects.all(p, p.ready)\" is false".into(),
        since: Time(at("2026-01-01T12:09:00Z")),
    });
    let from = |name: &str, state, phase| {
        let mut t = target(name, state, phase, "2026-01-01T12:09:30Z");
        t.from = Some("v1.35.0+k0s.0".into());
        t
    };
    status.commands[0].rollback = Some(PlanCommandK0sUpdateStatus {
        controllers: vec![from("controller-0", TargetState::SignalPending, None)],
        workers: vec![
            from("worker-0", TargetState::SignalSent, Some(SignalPhase::Restarting)),
            from("worker-1", TargetState::SignalCompleted, Some(SignalPhase::Completed)),
        ],
    });
    let view = view(&snapshot, now());
    let rollback = view.rollback.as_ref().expect("a rollback");
    assert_eq!((rollback.back, rollback.total), (1, 3));
    assert_eq!(rollback.in_flight, ["worker-0 (Restart)"]);
    let rows: Vec<(&str, &str, Option<&str>)> = view
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.state.as_str(), n.reason.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("controller-0", "SignalPending", Some("to be put back on v1.35.0+k0s.0")),
            ("worker-0", "SignalSent", Some("to be put back on v1.35.0+k0s.0")),
            ("worker-1", "SignalCompleted", Some("back on v1.35.0+k0s.0")),
        ],
        "the rows are the nodes put back"
    );
    let screen = render_view(&view);
    let line = screen.lines().nth(1).expect("a second line");
    assert_eq!(
        line,
        "Rolling back: 1/3 node(s) back on their earlier version (gate healthy failed on \
         worker-1: \"objects.all(p, p.ready)\" is false); in flight: worker-0 (Restart)"
    );
}

/// A condition of `type_` with `status` and `message`, as the leader writes them.
fn kstatus_condition(type_: &str, status: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        message: message.to_owned(),
        reason: "SchedulableWait".to_owned(),
        last_transition_time: Time(now()),
        observed_generation: Some(1),
    }
}

#[test]
fn the_kstatus_conditions_block_only_a_running_plan_that_stalled() {
    let mut snapshot = mid_update();
    let status = snapshot.plan.as_mut().and_then(|p| p.status.as_mut()).expect("a status");
    status.conditions = vec![
        kstatus_condition(keys::conditions::READY, "False", "run r is in progress"),
        kstatus_condition(keys::conditions::RECONCILING, "True", "run r is in progress"),
        kstatus_condition(keys::conditions::STALLED, "False", "nothing stops the run"),
    ];
    let running = view(&snapshot, now());
    assert!(running.blocking.iter().all(|b| !b.starts_with("Reconciling")), "{running:?}");

    // Held past the readiness grace: Stalled is what blocks.
    let status = snapshot.plan.as_mut().and_then(|p| p.status.as_mut()).expect("a status");
    status.conditions[2] =
        kstatus_condition(keys::conditions::STALLED, "True", "controller c2 is not ready");
    let held = view(&snapshot, now());
    assert!(held.blocking.contains(&"Stalled: controller c2 is not ready".to_owned()));

    // Completed: Ready says so, and nothing blocks.
    let status = snapshot.plan.as_mut().and_then(|p| p.status.as_mut()).expect("a status");
    status.state = PlanStateType::Completed;
    status.commands[0].state = PlanStateType::Completed;
    status.conditions = vec![
        kstatus_condition(keys::conditions::READY, "True", "every command completed"),
        kstatus_condition(keys::conditions::RECONCILING, "False", "the run completed"),
        kstatus_condition(keys::conditions::STALLED, "False", "the run completed"),
    ];
    let done = view(&snapshot, now());
    assert!(done.blocking.iter().all(|b| !b.starts_with("Ready")), "{:?}", done.blocking);
}

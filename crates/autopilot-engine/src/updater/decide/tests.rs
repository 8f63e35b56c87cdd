//! Table-style tests of [`super::decide`] and [`super::plan_spec`].

use std::collections::BTreeMap;

use autopilot_api::v1beta2::{
    AutopilotPlanCommandAirgapUpdate, AutopilotPlanCommandK0sUpdate, PeriodicUpgradeStrategy,
    PlanCommandRollout, PlanCommandStatus, PlanCommandTargetDiscoveryStatic,
    PlanCommandTargetLimits, PlanResourceUrl, PlanStatus,
};
use jiff::civil::date;

use super::*;

const RUNNING: &str = "v1.35.1+k0s.0";

/// No Nodes or ControlNodes (nothing to judge version skew on).
static NO_OBJECTS: BTreeMap<String, TargetObject> = BTreeMap::new();
const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Monday 2026-11-23 at `hour:minute` UTC.
fn monday(hour: i8, minute: i8) -> Timestamp {
    date(2026, 11, 23).at(hour, minute, 0, 0).to_zoned(TimeZone::UTC).unwrap().timestamp()
}

fn periodic(days: &[&str], start: &str, length: &str) -> UpdateConfigSpec {
    UpdateConfigSpec {
        upgrade_strategy: Some(UpgradeStrategy {
            r#type: Some(UpgradeStrategyType::Periodic),
            cron: None,
            periodic: Some(PeriodicUpgradeStrategy {
                days: days.iter().map(|d| (*d).to_owned()).collect(),
                start_time: Some(start.to_owned()),
                length: Some(length.to_owned()),
            }),
            min_interval: None,
        }),
        ..UpdateConfigSpec::default()
    }
}

/// Window Monday 13:00 for 2h.
fn monday_window() -> UpdateConfigSpec {
    periodic(&["Monday"], "13:00", "2h")
}

fn cron(expr: &str) -> UpdateConfigSpec {
    UpdateConfigSpec {
        upgrade_strategy: Some(UpgradeStrategy {
            r#type: Some(UpgradeStrategyType::Cron),
            cron: Some(expr.to_owned()),
            periodic: None,
            min_interval: None,
        }),
        ..UpdateConfigSpec::default()
    }
}

fn answer(version: &str) -> ChannelAnswer {
    ChannelAnswer {
        version: version.to_owned(),
        k0s: BTreeMap::from([
            (
                "linux-amd64".to_owned(),
                PlanResourceUrl {
                    url: "https://x/k0s-amd64".to_owned(),
                    sha256: Some(SHA.to_owned()),
                    ..Default::default()
                },
            ),
            (
                "linux-arm64".to_owned(),
                PlanResourceUrl {
                    url: "https://x/k0s-arm64".to_owned(),
                    sha256: None,
                    ..Default::default()
                },
            ),
        ]),
        airgap: BTreeMap::from([(
            "linux-amd64".to_owned(),
            PlanResourceUrl {
                url: "https://x/airgap-amd64".to_owned(),
                sha256: Some(SHA.to_owned()),
                ..Default::default()
            },
        )]),
        ..ChannelAnswer::default()
    }
}

fn plan_in(state: PlanStateType, spec: PlanSpec) -> Plan {
    let mut plan = Plan::new("autopilot", spec);
    plan.status = Some(PlanStatus { state, ..PlanStatus::default() });
    plan
}

fn run(
    spec: &UpdateConfigSpec,
    now: Timestamp,
    offered: &ChannelAnswer,
    plan: Option<&Plan>,
) -> Decision {
    decide_with(spec, now, offered, plan, None)
}

fn selector_all() -> PlanCommandTarget {
    PlanCommandTarget {
        discovery: PlanCommandTargetDiscovery {
            r#static: None,
            selector: Some(PlanCommandTargetDiscoverySelector::default()),
        },
        limits: PlanCommandTargetLimits::default(),
    }
}

fn static_nodes(nodes: &[&str], concurrent: u32) -> PlanCommandTarget {
    PlanCommandTarget {
        discovery: PlanCommandTargetDiscovery {
            r#static: Some(PlanCommandTargetDiscoveryStatic {
                nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            }),
            selector: None,
        },
        limits: PlanCommandTargetLimits {
            concurrent: autopilot_api::v1beta2::Concurrency::Count(concurrent),
            ..PlanCommandTargetLimits::default()
        },
    }
}

// === periodic ===

#[test]
fn newer_version_inside_the_window_creates_the_whole_cluster_plan() {
    let now = monday(13, 30);
    let decision = run(&monday_window(), now, &answer("v1.35.2+k0s.0"), None);
    let expected = PlanSpec {
        download_window: Default::default(),
        window: Default::default(),
        windows: Default::default(),
        id: now.as_second().to_string(),
        timestamp: now.as_second().to_string(),
        commands: vec![PlanCommand {
            k0supdate: Some(PlanCommandK0sUpdate {
                drain: None,
                drain_options: None,
                version: "v1.35.2+k0s.0".to_owned(),
                forceupdate: false,
                platforms: answer("v1.35.2+k0s.0").k0s,
                targets: PlanCommandTargets {
                    controllers: Some(selector_all()),
                    workers: Some(selector_all()),
                },
                rollout: PlanCommandRollout::default(),
            }),
            airgapupdate: None,
            preflight: None,
        }],
    };
    assert_eq!(decision, Decision::CreatePlan { spec: expected, left_out: Vec::new() });
    assert_eq!(decision.reason(), reasons::PLAN_CREATED);
}

#[test]
fn whole_cluster_plan_serialises_selectors_as_empty_objects() {
    let spec = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap();
    let json = serde_json::to_value(&spec).unwrap();
    let targets = &json["commands"][0]["k0supdate"]["targets"];
    assert_eq!(targets["controllers"]["discovery"], serde_json::json!({ "selector": {} }));
    assert_eq!(targets["workers"]["discovery"], serde_json::json!({ "selector": {} }));
    assert_eq!(json["id"], serde_json::json!(monday(13, 30).as_second().to_string()));
}

#[test]
fn same_version_is_up_to_date_even_inside_the_window() {
    let decision = run(&monday_window(), monday(13, 30), &answer(RUNNING), None);
    assert_eq!(
        decision,
        Decision::UpToDate { running: RUNNING.to_owned(), offered: RUNNING.to_owned() }
    );
}

#[test]
fn older_version_is_up_to_date() {
    let decision = run(&monday_window(), monday(13, 30), &answer("v1.35.0+k0s.3"), None);
    assert!(matches!(decision, Decision::UpToDate { .. }), "{decision:?}");
}

#[test]
fn newer_k0s_build_of_the_same_kubernetes_version_is_an_update() {
    let decision = run(&monday_window(), monday(13, 30), &answer("v1.35.1+k0s.1"), None);
    assert!(matches!(decision, Decision::CreatePlan { .. }), "{decision:?}");
}

#[test]
fn newer_version_outside_the_window_waits_for_it_to_open() {
    let decision = run(&monday_window(), monday(12, 0), &answer("v1.35.2+k0s.0"), None);
    assert_eq!(
        decision,
        Decision::OutsideWindow {
            offered: "v1.35.2+k0s.0".to_owned(),
            opens_at: Some(monday(13, 0))
        }
    );
}

#[test]
fn window_end_is_exclusive_in_the_decision_too() {
    let decision = run(&monday_window(), monday(15, 0), &answer("v1.35.2+k0s.0"), None);
    assert!(matches!(decision, Decision::OutsideWindow { .. }), "{decision:?}");
    let decision = run(&monday_window(), monday(13, 0), &answer("v1.35.2+k0s.0"), None);
    assert!(matches!(decision, Decision::CreatePlan { .. }), "{decision:?}");
}

#[test]
fn running_plan_is_never_touched() {
    let old = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(13, 0)).unwrap();
    for state in
        [PlanStateType::NewPlan, PlanStateType::SchedulableWait, PlanStateType::Schedulable]
    {
        let plan = plan_in(state, old.clone());
        let decision = run(&monday_window(), monday(13, 30), &answer("v1.35.3+k0s.0"), Some(&plan));
        assert_eq!(decision, Decision::PlanRunning { state });
    }
}

#[test]
fn plan_without_status_counts_as_running() {
    let mut plan = plan_in(PlanStateType::NewPlan, PlanSpec::default());
    plan.status = None;
    let decision = run(&monday_window(), monday(13, 30), &answer("v1.35.2+k0s.0"), Some(&plan));
    assert_eq!(decision, Decision::PlanRunning { state: PlanStateType::NewPlan });
}

#[test]
fn terminal_plan_is_replaced_by_a_fresh_run() {
    let old = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(13, 0)).unwrap();
    for state in [PlanStateType::Completed, PlanStateType::ApplyFailed, PlanStateType::Warning] {
        let plan = plan_in(state, old.clone());
        let now = monday(13, 30);
        let decision = run(&monday_window(), now, &answer("v1.35.3+k0s.0"), Some(&plan));
        let Decision::ReplacePlan { previous, spec, .. } = &decision else {
            panic!("{decision:?}");
        };
        assert_eq!(*previous, state);
        assert_eq!(spec.id, now.as_second().to_string());
        assert_ne!(spec.id, old.id);
        assert_eq!(spec.commands[0].k0supdate.as_ref().unwrap().version, "v1.35.3+k0s.0");
    }
}

#[test]
fn terminal_plan_with_the_same_commands_is_not_rerun() {
    let offered = answer("v1.35.2+k0s.0");
    let old = plan_spec(None, &offered, monday(13, 0)).unwrap();
    let plan = plan_in(PlanStateType::ApplyFailed, old);
    let decision = run(&monday_window(), monday(13, 30), &offered, Some(&plan));
    assert_eq!(
        decision,
        Decision::AlreadyPlanned {
            state: PlanStateType::ApplyFailed,
            offered: "v1.35.2+k0s.0".to_owned()
        }
    );
}

/// A Plan whose run of `spec` was rolled back (its commands frozen, as the engine records).
fn rolled_back(spec: PlanSpec) -> Plan {
    let mut plan = plan_in(PlanStateType::RolledBack, spec.clone());
    let status = plan.status.as_mut().expect("a status");
    status.plan_id = Some(spec.id.clone());
    status.commands = spec
        .commands
        .iter()
        .enumerate()
        .map(|(id, command)| PlanCommandStatus {
            id: u32::try_from(id).expect("few commands"),
            state: PlanStateType::RolledBack,
            frozen: Some(command.clone()),
            ..PlanCommandStatus::default()
        })
        .collect();
    plan
}

#[test]
fn a_rolled_back_version_is_not_proposed_again_even_with_other_commands() {
    let offered = answer("v1.35.2+k0s.0");
    let old = plan_spec(None, &offered, monday(13, 0)).unwrap();
    let plan = rolled_back(old.clone());
    let decision = run(&monday_window(), monday(13, 30), &offered, Some(&plan));
    assert_eq!(
        decision,
        Decision::RolledBackVersion {
            offered: "v1.35.2+k0s.0".to_owned(),
            plan_id: old.id.clone()
        }
    );
    assert!(decision.message().contains("not proposed again"), "{}", decision.message());
    // A node requiring signatures changes the commands the updater would write; the
    // version is still held back.
    let window = monday_window();
    let signed = decide(&Inputs {
        spec: &window,
        now: monday(13, 30),
        tz: &TimeZone::UTC,
        running_version: RUNNING,
        answer: &offered,
        plan: Some(&plan),
        allow_unverified_payloads: false,
        signatures: Signatures { payloads: true, bundles: false },
        control_nodes: &NO_OBJECTS,
        nodes: &NO_OBJECTS,
        status: None,
    });
    assert!(matches!(signed, Decision::RolledBackVersion { .. }), "{signed:?}");
    // A newer version is proposed over it.
    let newer = run(&monday_window(), monday(13, 30), &answer("v1.35.3+k0s.0"), Some(&plan));
    assert!(matches!(newer, Decision::ReplacePlan { .. }), "{newer:?}");
}

#[test]
fn forced_update_takes_a_different_version_but_never_the_same_one() {
    let mut spec = monday_window();
    spec.plan_spec = Some(AutopilotPlanSpec {
        commands: vec![AutopilotPlanCommand {
            k0supdate: Some(AutopilotPlanCommandK0sUpdate {
                forceupdate: true,
                targets: PlanCommandTargets { controllers: Some(selector_all()), workers: None },
                ..Default::default()
            }),
            airgapupdate: None,
        }],
        ..Default::default()
    });
    let decision = run(&spec, monday(13, 30), &answer("v1.35.0+k0s.0"), None);
    let Decision::CreatePlan { spec: plan, .. } = &decision else { panic!("{decision:?}") };
    assert!(plan.commands[0].k0supdate.as_ref().unwrap().forceupdate);
    let decision = run(&spec, monday(13, 30), &answer(RUNNING), None);
    assert!(matches!(decision, Decision::UpToDate { .. }), "{decision:?}");
}

#[test]
fn unparseable_offered_version_is_invalid() {
    let decision = run(&monday_window(), monday(13, 30), &answer("latest"), None);
    let Decision::Invalid(reason) = &decision else { panic!("{decision:?}") };
    assert!(reason.contains("\"latest\""), "{reason}");
}

#[test]
fn unknown_weekday_makes_the_config_invalid() {
    let spec = periodic(&["Tuesdsay"], "13:00", "2h");
    let decision = run(&spec, monday(13, 30), &answer("v1.35.2+k0s.0"), None);
    let Decision::Invalid(reason) = &decision else { panic!("{decision:?}") };
    assert!(reason.contains("Tuesdsay"), "{reason}");
    assert_eq!(decision.reason(), reasons::INVALID);
}

#[test]
fn missing_strategy_type_is_invalid() {
    let decision =
        run(&UpdateConfigSpec::default(), monday(13, 30), &answer("v1.35.2+k0s.0"), None);
    assert_eq!(
        decision,
        Decision::Invalid("upgradeStrategy.type is required (periodic or cron)".to_owned())
    );
}

// === plan generation from planSpec ===

#[test]
fn plan_spec_items_fill_version_platforms_digests_and_targets() {
    let template = AutopilotPlanSpec {
        commands: vec![
            AutopilotPlanCommand {
                k0supdate: Some(AutopilotPlanCommandK0sUpdate {
                    forceupdate: true,
                    targets: PlanCommandTargets {
                        controllers: Some(static_nodes(&["c1", "c2"], 1)),
                        workers: Some(static_nodes(&["w1"], 5)),
                    },
                    ..Default::default()
                }),
                airgapupdate: None,
            },
            AutopilotPlanCommand {
                k0supdate: None,
                airgapupdate: Some(AutopilotPlanCommandAirgapUpdate {
                    workers: static_nodes(&["w1"], 2),
                    ..Default::default()
                }),
            },
        ],
        ..Default::default()
    };
    let offered = answer("v1.35.2+k0s.0");
    let spec = plan_spec(Some(&template), &offered, monday(13, 30)).unwrap();
    assert_eq!(
        spec.commands,
        vec![
            PlanCommand {
                k0supdate: Some(PlanCommandK0sUpdate {
                    drain: None,
                    drain_options: None,
                    version: "v1.35.2+k0s.0".to_owned(),
                    forceupdate: true,
                    platforms: offered.k0s.clone(),
                    targets: PlanCommandTargets {
                        controllers: Some(static_nodes(&["c1", "c2"], 1)),
                        workers: Some(static_nodes(&["w1"], 5)),
                    },
                    rollout: PlanCommandRollout::default(),
                }),
                airgapupdate: None,
                preflight: None,
            },
            PlanCommand {
                k0supdate: None,
                airgapupdate: Some(PlanCommandAirgapUpdate {
                    version: "v1.35.2+k0s.0".to_owned(),
                    platforms: offered.airgap.clone(),
                    workers: static_nodes(&["w1"], 2),
                    rollout: PlanCommandRollout::default(),
                }),
                preflight: None,
            },
        ]
    );
    assert_eq!(
        spec.commands[0].k0supdate.as_ref().unwrap().platforms["linux-amd64"].sha256.as_deref(),
        Some(SHA)
    );
}

#[test]
fn item_with_both_parts_becomes_airgap_then_k0s() {
    let template = AutopilotPlanSpec {
        commands: vec![AutopilotPlanCommand {
            k0supdate: Some(AutopilotPlanCommandK0sUpdate {
                forceupdate: false,
                targets: PlanCommandTargets { controllers: None, workers: Some(selector_all()) },
                ..Default::default()
            }),
            airgapupdate: Some(AutopilotPlanCommandAirgapUpdate {
                workers: selector_all(),
                ..Default::default()
            }),
        }],
        ..Default::default()
    };
    let spec = plan_spec(Some(&template), &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap();
    assert_eq!(spec.commands.len(), 2);
    assert!(spec.commands[0].airgapupdate.is_some() && spec.commands[0].k0supdate.is_none());
    assert!(spec.commands[1].k0supdate.is_some() && spec.commands[1].airgapupdate.is_none());
}

#[test]
fn empty_plan_spec_means_the_whole_cluster() {
    let empty = AutopilotPlanSpec { commands: vec![], ..Default::default() };
    let from_empty = plan_spec(Some(&empty), &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap();
    let from_none = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap();
    assert_eq!(from_empty, from_none);
}

#[test]
fn item_with_neither_part_is_invalid() {
    let template = AutopilotPlanSpec {
        commands: vec![
            AutopilotPlanCommand {
                k0supdate: Some(AutopilotPlanCommandK0sUpdate::default()),
                airgapupdate: None,
            },
            AutopilotPlanCommand::default(),
        ],
        ..Default::default()
    };
    let err = plan_spec(Some(&template), &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap_err();
    assert!(err.contains("planSpec.commands[1]"), "{err}");
}

// === cron ===

#[test]
fn cron_strategy_lets_the_server_decide_the_version() {
    // No local comparison: even the running version creates a plan when none exists.
    let decision = run(&cron("@hourly"), monday(3, 0), &answer(RUNNING), None);
    assert!(matches!(decision, Decision::CreatePlan { .. }), "{decision:?}");
}

#[test]
fn cron_strategy_never_replaces_a_running_plan() {
    let old = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(2, 0)).unwrap();
    let plan = plan_in(PlanStateType::SchedulableWait, old);
    let decision = run(&cron("* * * * * *"), monday(3, 0), &answer("v1.35.3+k0s.0"), Some(&plan));
    assert_eq!(decision, Decision::PlanRunning { state: PlanStateType::SchedulableWait });
}

#[test]
fn cron_strategy_replaces_a_completed_plan_for_a_new_answer() {
    let old = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(2, 0)).unwrap();
    let plan = plan_in(PlanStateType::Completed, old);
    let decision = run(&cron("@hourly"), monday(3, 0), &answer("v1.35.3+k0s.0"), Some(&plan));
    assert!(
        matches!(decision, Decision::ReplacePlan { previous: PlanStateType::Completed, .. }),
        "{decision:?}"
    );
}

// === downloads without digests ===

/// What the legacy (cron) endpoint answers: `version` and one k0s URL per platform, never a
/// digest.
fn legacy_answer(version: &str, urls: &[(&str, &str)]) -> ChannelAnswer {
    let body = urls
        .iter()
        .fold(format!("version: {version}\ndownloadURLs:\n  k0s:\n"), |body, (platform, url)| {
            format!("{body}    {platform}: {url}\n")
        });
    ChannelAnswer::from_legacy_yaml(&body).unwrap()
}

#[test]
fn a_legacy_answer_over_https_creates_the_plan_without_digests() {
    let offered = legacy_answer("v1.35.3+k0s.0", &[("linux-amd64", "https://x/k0s-amd64")]);
    let decision = run(&cron("@hourly"), monday(3, 0), &offered, None);
    let Decision::CreatePlan { spec, .. } = &decision else { panic!("{decision:?}") };
    let update = spec.commands[0].k0supdate.as_ref().unwrap();
    assert_eq!(update.platforms["linux-amd64"].sha256, None);
    assert!(!decision.is_problem());
}

#[test]
fn a_controller_allowing_unverified_payloads_plans_plain_http_downloads_too() {
    let offered = legacy_answer("v1.35.3+k0s.0", &[("linux-amd64", "http://x/k0s-amd64")]);
    let decision = decide(&Inputs {
        spec: &cron("@hourly"),
        now: monday(3, 0),
        tz: &TimeZone::UTC,
        running_version: RUNNING,
        answer: &offered,
        plan: None,
        allow_unverified_payloads: true,
        signatures: Signatures::default(),
        control_nodes: &NO_OBJECTS,
        nodes: &NO_OBJECTS,
        status: None,
    });
    assert!(matches!(decision, Decision::CreatePlan { .. }), "{decision:?}");
}

#[test]
fn a_legacy_answer_over_plain_http_creates_no_plan_and_says_why() {
    let offered = legacy_answer(
        "v1.35.3+k0s.0",
        &[("linux-amd64", "https://x/k0s-amd64"), ("linux-arm64", "http://x/k0s-arm64")],
    );
    let decision = run(&cron("@hourly"), monday(3, 0), &offered, None);
    assert_eq!(
        decision,
        Decision::UnverifiedPayload {
            offered: "v1.35.3+k0s.0".to_owned(),
            entries: vec!["k0s linux-arm64 (http://x/k0s-arm64)".to_owned()],
        }
    );
    assert_eq!(decision.plan_spec(), None);
    assert_eq!(decision.reason(), reasons::UNVERIFIED_PAYLOAD);
    assert!(decision.is_problem(), "a Warning Event and a warn log line");
    assert_eq!(
        decision.message(),
        "not planning v1.35.3+k0s.0: the update server gives no sha256 for k0s linux-arm64 \
         (http://x/k0s-arm64), and it is not https, so no node could check what it downloads; \
         the server must serve its downloads over https or give their digests (k0sSha256, \
         airgapSha256 in index.yaml)"
    );
}

#[test]
fn a_plain_http_answer_never_replaces_an_ended_plan() {
    let old = plan_spec(None, &answer("v1.35.2+k0s.0"), monday(2, 0)).unwrap();
    let plan = plan_in(PlanStateType::Completed, old);
    let offered = legacy_answer("v1.35.3+k0s.0", &[("linux-amd64", "http://x/k0s")]);
    let decision = run(&cron("@hourly"), monday(3, 0), &offered, Some(&plan));
    assert!(matches!(decision, Decision::UnverifiedPayload { .. }), "{decision:?}");
}

#[test]
fn index_entries_over_plain_http_need_their_digests() {
    let mut offered = answer("v1.35.2+k0s.0");
    offered.k0s.get_mut("linux-amd64").unwrap().url = "http://x/k0s-amd64".to_owned();
    let decision = run(&monday_window(), monday(13, 30), &offered, None);
    assert!(
        matches!(decision, Decision::CreatePlan { .. }),
        "verified by its digest: {decision:?}"
    );

    let mut spec = monday_window();
    spec.plan_spec = Some(AutopilotPlanSpec {
        commands: vec![AutopilotPlanCommand {
            k0supdate: None,
            airgapupdate: Some(AutopilotPlanCommandAirgapUpdate {
                workers: selector_all(),
                ..Default::default()
            }),
        }],
        ..Default::default()
    });
    offered.airgap.insert(
        "linux-arm64".to_owned(),
        PlanResourceUrl {
            url: "http://x/airgap-arm64".to_owned(),
            sha256: Some(String::new()),
            ..Default::default()
        },
    );
    offered.k0s.get_mut("linux-arm64").unwrap().url = "http://x/k0s-arm64".to_owned();
    let decision = run(&spec, monday(13, 30), &offered, None);
    let Decision::UnverifiedPayload { entries, .. } = &decision else { panic!("{decision:?}") };
    assert_eq!(
        entries,
        &["airgap linux-arm64 (http://x/airgap-arm64)"],
        "only what the plan downloads counts: this plan has no k0supdate"
    );
}

#[test]
fn invalid_cron_expression_is_invalid() {
    let decision = run(&cron("every hour"), monday(3, 0), &answer("v1.35.2+k0s.0"), None);
    let Decision::Invalid(reason) = &decision else { panic!("{decision:?}") };
    assert!(reason.starts_with("cron expression \"every hour\""), "{reason}");
}

#[test]
fn strategy_from_spec_gives_the_shell_the_schedule() {
    let spec = cron("0 30 * * * *");
    let Ok(Strategy::Cron(schedule)) = Strategy::from_spec(spec.upgrade_strategy.as_ref()) else {
        panic!("not a cron strategy");
    };
    assert_eq!(schedule.next_after(monday(3, 0), &TimeZone::UTC).unwrap(), monday(3, 30));
    let spec = monday_window();
    assert!(matches!(
        Strategy::from_spec(spec.upgrade_strategy.as_ref()),
        Ok(Strategy::Periodic(_))
    ));
}

#[test]
fn every_decision_has_a_message() {
    let decisions = [
        run(&monday_window(), monday(13, 30), &answer(RUNNING), None),
        run(&monday_window(), monday(12, 0), &answer("v1.35.2+k0s.0"), None),
        run(&monday_window(), monday(13, 30), &answer("v1.35.2+k0s.0"), None),
    ];
    for decision in decisions {
        assert!(!decision.message().is_empty());
    }
}

#[test]
fn next_check_is_a_period_later_for_periodic_and_the_next_firing_for_cron() {
    let period = std::time::Duration::from_secs(600);
    let spec = monday_window();
    let periodic = Strategy::from_spec(spec.upgrade_strategy.as_ref()).unwrap();
    assert_eq!(periodic.next_check(monday(3, 0), &TimeZone::UTC, period), Some(monday(3, 10)));
    let spec = cron("@hourly");
    let hourly = Strategy::from_spec(spec.upgrade_strategy.as_ref()).unwrap();
    assert_eq!(hourly.next_check(monday(3, 0), &TimeZone::UTC, period), Some(monday(4, 0)));
}

#[test]
fn after_a_check_the_next_one_is_the_period_or_sooner_when_the_window_opens_first() {
    let strategy = Strategy::from_spec(monday_window().upgrade_strategy.as_ref()).unwrap();
    let period = std::time::Duration::from_secs(600);
    // Outside the window, opening in 5 minutes: the check comes back when it opens.
    let now = monday(12, 55);
    let next = strategy.after_check(now, &TimeZone::UTC, period, Some(monday(13, 0)));
    assert_eq!(
        next,
        NextCheck {
            at: Some(monday(13, 0)),
            wait: Some(std::time::Duration::from_secs(300)),
            window_open: false
        }
    );
    // Opening after the next period, or already past: the period decides.
    let next = strategy.after_check(now, &TimeZone::UTC, period, Some(monday(14, 0)));
    assert_eq!(next.at, Some(monday(13, 5)));
    let next = strategy.after_check(now, &TimeZone::UTC, period, Some(monday(12, 0)));
    assert_eq!(next.at, Some(monday(13, 5)));
    // Inside the window.
    let next = strategy.after_check(monday(13, 30), &TimeZone::UTC, period, None);
    assert_eq!(
        next,
        NextCheck {
            at: Some(monday(13, 40)),
            wait: Some(std::time::Duration::from_secs(600)),
            window_open: true
        }
    );
    // A cron strategy has no window to wait for.
    let cron = Strategy::from_spec(cron("0 0 * * * *").upgrade_strategy.as_ref()).unwrap();
    assert!(cron.after_check(now, &TimeZone::UTC, period, None).window_open);
}

#[test]
fn payloads_the_nodes_require_signed_get_the_sig_beside_them() {
    let offered = answer("v1.35.2+k0s.0");
    let decide_with = |signatures| {
        decide(&Inputs {
            spec: &monday_window(),
            now: monday(13, 30),
            tz: &TimeZone::UTC,
            running_version: RUNNING,
            answer: &offered,
            plan: None,
            allow_unverified_payloads: false,
            signatures,
            control_nodes: &NO_OBJECTS,
            nodes: &NO_OBJECTS,
            status: None,
        })
    };
    let Decision::CreatePlan { spec: unsigned, .. } = decide_with(Signatures::default()) else {
        panic!("a plan")
    };
    let k0s = &unsigned.commands[0].k0supdate.as_ref().expect("k0supdate").platforms;
    assert!(k0s.values().all(|e| e.signature_url.is_none()), "no node requires keys: {k0s:?}");

    let signed = decide_with(Signatures { payloads: true, bundles: false });
    let Decision::CreatePlan { spec, .. } = signed else { panic!("a plan") };
    let k0s = &spec.commands[0].k0supdate.as_ref().expect("k0supdate").platforms;
    for entry in k0s.values() {
        assert_eq!(entry.signature_url, Some(format!("{}.sig", entry.url)));
    }
}

/// A ControlNode or Node on linux-amd64 that says it runs `version`.
fn at_version(name: &str, version: &str) -> (String, TargetObject) {
    let object = TargetObject {
        prestage: Default::default(),
        drained: None,
        name: name.to_owned(),
        labels: BTreeMap::from([
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ])
        .into(),
        ready: true,
        signal: crate::plan::ObservedSignal::None,
        required_keys: Default::default(),
        version: Some(version.to_owned()),
        kubelet_version: None,
        gate_check: Default::default(),
    };
    (name.to_owned(), object)
}

#[test]
fn a_version_that_would_break_the_skew_rules_is_not_planned_and_the_event_names_the_rule() {
    let controllers = BTreeMap::from([at_version("c1", "v1.33.4+k0s.0")]);
    let nodes = BTreeMap::from([at_version("w1", "v1.33.4+k0s.0")]);
    let offered = answer("v1.35.3+k0s.0");
    let decide_on = |offered: &ChannelAnswer| {
        decide(&Inputs {
            spec: &monday_window(),
            now: monday(13, 30),
            tz: &TimeZone::UTC,
            running_version: "v1.33.4+k0s.0",
            answer: offered,
            plan: None,
            allow_unverified_payloads: false,
            signatures: Signatures::default(),
            control_nodes: &controllers,
            nodes: &nodes,
            status: None,
        })
    };
    let decision = decide_on(&offered);
    let Decision::VersionSkew { offered: version, problems } = &decision else {
        panic!("{decision:?}")
    };
    assert_eq!(version, "v1.35.3+k0s.0");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains(
            "[controller-minor-skip] controller c1 (published k0s v1.33.4+k0s.0) would go to \
             v1.35.3+k0s.0 in one step, skipping v1.34; update it to a v1.34 release first"
        ),
        "{problems:?}"
    );
    assert!(decision.is_problem());
    assert_eq!(decision.reason(), reasons::VERSION_SKEW);
    assert!(decision.message().starts_with("not planning v1.35.3+k0s.0: commands[0]"));
    assert!(decision.plan_spec().is_none());
    // One minor version up, controllers and workers together: planned.
    let next = answer("v1.34.1+k0s.0");
    assert!(matches!(decide_on(&next), Decision::CreatePlan { .. }), "{:?}", decide_on(&next));
}

#[test]
fn a_workers_own_version_holds_no_update_the_plan_is_written_and_names_the_worker() {
    let controllers = BTreeMap::from([at_version("c1", "v1.33.4+k0s.0")]);
    // w2 reports a version far behind (a lie, or a node left out for long): the rule rests on
    // its own report.
    let nodes =
        BTreeMap::from([at_version("w1", "v1.33.4+k0s.0"), at_version("w2", "v1.20.0+k0s.0")]);
    let decision = decide(&Inputs {
        spec: &monday_window(),
        now: monday(13, 30),
        tz: &TimeZone::UTC,
        running_version: "v1.33.4+k0s.0",
        answer: &answer("v1.34.1+k0s.0"),
        plan: None,
        allow_unverified_payloads: false,
        signatures: Signatures::default(),
        control_nodes: &controllers,
        nodes: &nodes,
        status: None,
    });
    let Decision::CreatePlan { spec, left_out } = &decision else { panic!("{decision:?}") };
    assert_eq!(spec.commands.len(), 1, "the whole cluster's update is written");
    assert_eq!(
        left_out,
        &vec![
            "Node w2, by the version it reports about itself: [worker-too-old] worker w2 \
             (published k0s v1.20.0+k0s.0) would be 14 minor versions behind controller c1 \
             (planned k0s v1.34.1+k0s.0); update the workers to v1.33 first (it fails in the \
             run)"
                .to_owned()
        ]
    );
    assert!(decision.is_problem(), "a Warning Event says so");
    assert_eq!(decision.reason(), reasons::PLAN_CREATED);
    assert!(
        decision.message().contains("the run fails only these nodes' part: Node w2"),
        "{}",
        decision.message()
    );
}

#[test]
fn plan_spec_passes_windows_gates_drain_prestage_and_progress_timeout_through() {
    let template: AutopilotPlanSpec = serde_json::from_value(serde_json::json!({
        "window": { "timeZone": "Europe/Berlin",
                    "weekly": [{ "days": ["Sat"], "startTime": "02:00", "length": "4h" }] },
        "downloadWindow": { "weekly": [{ "days": ["Fri"], "startTime": "20:00", "length": "6h" }] },
        "windows": { "rack-b": { "weekly": [{ "days": ["Sun"], "startTime": "02:00", "length": "2h" }] } },
        "commands": [{
            "airgapupdate": {
                "workers": { "discovery": { "selector": {} } },
                "progressTimeout": "20m",
                "prestage": true,
                "gates": [{ "id": "settled", "settle": "2m" }],
            },
            "k0supdate": {
                "targets": { "workers": { "discovery": { "selector": {} } } },
                "progressTimeout": "30m",
                "drain": "IfPossible",
                "prestage": true,
                "prestageConcurrent": 5,
                "gates": [{ "id": "settled", "settle": "1m", "after": "batch" }],
            },
        }],
    }))
    .expect("a valid template");
    let spec = plan_spec(Some(&template), &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap();
    assert_eq!(spec.window, template.window);
    assert_eq!(spec.download_window, template.download_window);
    assert_eq!(spec.windows, template.windows);
    assert!(spec.window.is_some() && spec.download_window.is_some() && spec.windows.len() == 1);

    let airgap = spec.commands[0].airgapupdate.as_ref().expect("the bundle first");
    let from = template.commands[0].airgapupdate.as_ref().unwrap();
    assert_eq!(airgap.rollout.progress_timeout.as_deref(), Some("20m"));
    assert!(airgap.rollout.prestage);
    assert_eq!(airgap.rollout.prestage_concurrent, None);
    assert_eq!(airgap.rollout.gates, from.rollout.gates);

    let k0s = spec.commands[1].k0supdate.as_ref().expect("then k0s");
    let from = template.commands[0].k0supdate.as_ref().unwrap();
    assert_eq!(k0s.rollout.progress_timeout.as_deref(), Some("30m"));
    assert_eq!(k0s.drain, Some(autopilot_api::v1beta2::DrainPolicy::IfPossible));
    assert!(k0s.rollout.prestage);
    assert_eq!(k0s.rollout.prestage_concurrent, Some(5));
    assert_eq!(k0s.rollout.gates, from.rollout.gates);
    assert_eq!(k0s.rollout.gates.len(), 1);
    assert_eq!(k0s.version, "v1.35.2+k0s.0");
}

#[test]
fn a_template_with_windows_and_no_commands_updates_everyone_inside_its_window() {
    let template: AutopilotPlanSpec = serde_json::from_value(serde_json::json!({
        "window": { "ranges": [{ "start": "2026-12-01T00:00:00Z", "end": "2026-12-01T04:00:00Z" }] },
        "commands": [],
    }))
    .expect("a valid template");
    let spec = plan_spec(Some(&template), &answer("v1.35.2+k0s.0"), monday(13, 30)).unwrap();
    assert_eq!(spec.window, template.window);
    assert_eq!(spec.commands.len(), 1);
    let k0s = spec.commands[0].k0supdate.as_ref().unwrap();
    assert!(k0s.targets.controllers.is_some() && k0s.targets.workers.is_some());
    assert!(!k0s.rollout.prestage && k0s.rollout.gates.is_empty() && k0s.drain.is_none());
}

// === minimum interval ===

const HOUR: i64 = 3600;

fn with_min_interval(patch: Option<&str>, minor: Option<&str>) -> UpdateConfigSpec {
    let mut spec = monday_window();
    if let Some(strategy) = spec.upgrade_strategy.as_mut() {
        strategy.min_interval = Some(autopilot_api::v1beta2::MinInterval {
            patch: patch.map(str::to_owned),
            minor: minor.map(str::to_owned),
        });
    }
    spec
}

fn decide_with(
    spec: &UpdateConfigSpec,
    now: Timestamp,
    offered: &ChannelAnswer,
    plan: Option<&Plan>,
    status: Option<&UpdateConfigStatus>,
) -> Decision {
    decide(&Inputs {
        spec,
        now,
        tz: &TimeZone::UTC,
        running_version: RUNNING,
        answer: offered,
        plan,
        allow_unverified_payloads: false,
        signatures: Signatures::default(),
        control_nodes: &NO_OBJECTS,
        nodes: &NO_OBJECTS,
        status,
    })
}

fn last_updates(patch: Option<Timestamp>, minor: Option<Timestamp>) -> UpdateConfigStatus {
    UpdateConfigStatus {
        last_patch_update: patch.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        last_minor_update: minor.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        ..UpdateConfigStatus::default()
    }
}

#[test]
fn a_patch_inside_the_patch_interval_waits_and_says_until_when() {
    let now = monday(13, 30);
    let last = now.checked_sub(jiff::SignedDuration::from_hours(2)).unwrap();
    let spec = with_min_interval(Some("24h"), Some("720h"));
    let status = last_updates(Some(last), None);
    let decision = decide_with(&spec, now, &answer("v1.35.2+k0s.0"), None, Some(&status));
    let allowed_at = last.checked_add(jiff::SignedDuration::from_hours(24)).unwrap();
    assert_eq!(
        decision,
        Decision::MinIntervalWait {
            offered: "v1.35.2+k0s.0".to_owned(),
            kind: UpdateKind::Patch,
            last,
            allowed_at,
        }
    );
    assert_eq!(decision.reason(), reasons::MIN_INTERVAL_WAIT);
    assert!(!decision.is_problem());
    assert!(decision.message().contains(&allowed_at.to_string()), "{}", decision.message());
    assert!(decision.message().contains("minInterval.patch"), "{}", decision.message());
}

#[test]
fn a_patch_after_the_patch_interval_is_planned() {
    let now = monday(13, 30);
    let last = Timestamp::from_second(now.as_second() - 24 * HOUR).unwrap();
    let spec = with_min_interval(Some("24h"), Some("720h"));
    let status = last_updates(Some(last), Some(now));
    let decision = decide_with(&spec, now, &answer("v1.35.2+k0s.0"), None, Some(&status));
    assert!(matches!(decision, Decision::CreatePlan { .. }), "{decision:?}");
}

#[test]
fn a_minor_inside_the_minor_interval_waits_even_when_the_patch_interval_passed() {
    let now = monday(13, 30);
    let last = Timestamp::from_second(now.as_second() - 10 * 24 * HOUR).unwrap();
    let spec = with_min_interval(Some("24h"), Some("720h"));
    let status = last_updates(Some(last), Some(last));
    let decision = decide_with(&spec, now, &answer("v1.36.0+k0s.0"), None, Some(&status));
    let Decision::MinIntervalWait { kind, allowed_at, .. } = decision else {
        panic!("the minor update waits: {decision:?}");
    };
    assert_eq!(kind, UpdateKind::Minor);
    assert_eq!(allowed_at, Timestamp::from_second(last.as_second() + 30 * 24 * HOUR).unwrap());
    // The same status lets a patch through: the kinds are kept apart.
    let patch = decide_with(&spec, now, &answer("v1.35.2+k0s.0"), None, Some(&status));
    assert!(matches!(patch, Decision::CreatePlan { .. }), "{patch:?}");
}

#[test]
fn a_minor_after_the_minor_interval_is_planned() {
    let now = monday(13, 30);
    let last = Timestamp::from_second(now.as_second() - 30 * 24 * HOUR).unwrap();
    let spec = with_min_interval(None, Some("720h"));
    let status = last_updates(None, Some(last));
    let decision = decide_with(&spec, now, &answer("v1.36.0+k0s.0"), None, Some(&status));
    assert!(matches!(decision, Decision::CreatePlan { .. }), "{decision:?}");
}

#[test]
fn a_lost_status_waits_from_the_updaters_last_plan() {
    let now = monday(13, 30);
    let written = Timestamp::from_second(now.as_second() - HOUR).unwrap();
    let spec = with_min_interval(Some("24h"), None);
    let plan = plan_in(
        PlanStateType::Completed,
        plan_spec(None, &answer("v1.35.1+k0s.0"), written).unwrap(),
    );
    let decision = decide_with(&spec, now, &answer("v1.35.2+k0s.0"), Some(&plan), None);
    assert!(
        matches!(decision, Decision::MinIntervalWait { last, .. } if last == written),
        "{decision:?}"
    );
}

#[test]
fn the_window_and_a_running_plan_come_before_the_interval() {
    let now = monday(13, 30);
    let spec = with_min_interval(Some("24h"), None);
    let status = last_updates(Some(now), None);
    let closed = decide_with(&spec, monday(9, 0), &answer("v1.35.2+k0s.0"), None, Some(&status));
    assert!(matches!(closed, Decision::OutsideWindow { .. }), "{closed:?}");
    let running = plan_in(PlanStateType::SchedulableWait, PlanSpec::default());
    let decision = decide_with(&spec, now, &answer("v1.35.2+k0s.0"), Some(&running), Some(&status));
    assert!(matches!(decision, Decision::PlanRunning { .. }), "{decision:?}");
    let same = decide_with(&spec, now, &answer(RUNNING), None, Some(&status));
    assert!(matches!(same, Decision::UpToDate { .. }), "{same:?}");
}

#[test]
fn a_malformed_min_interval_is_invalid_and_names_the_field() {
    let spec = with_min_interval(Some("daily"), None);
    let decision = decide_with(&spec, monday(13, 30), &answer("v1.35.2+k0s.0"), None, None);
    let Decision::Invalid(message) = decision else { panic!("invalid: {decision:?}") };
    assert!(message.contains("upgradeStrategy.minInterval.patch"), "{message}");
}

use autopilot_api::fixtures::{MetaBuilder, spec};
use autopilot_api::v1beta2::{
    PlanCommandPreflightStatus, PlanCommandStatus, PlanStatus, PreflightCheckStatus,
    PreflightNodeStatus,
};

use super::*;

const CHECKS: &str = r#"
onWarn: Block
checks:
  - id: port-free
    targets: {all: true}
    command: {id: portAvailable, data: {port: 10250}}
    results:
      - {status: error, condition: {status_code: 98}, message: "in use on {{ .Node }}"}
      - {status: success, message: free}
"#;

fn checks() -> PlanCommandPreflight {
    parse(CHECKS).expect("valid checks").value
}

fn ended(state: PlanStateType, generation: i64, worst: Option<CheckStatus>) -> Plan {
    let mut plan = Plan::new(keys::PLAN_NAME, spec("old"));
    plan.metadata.generation = Some(generation);
    let command = PlanCommandStatus {
        state,
        description: Some(format!("command 0 (preflight): {state}")),
        preflight: Some(PlanCommandPreflightStatus {
            status: worst,
            checks: vec![PreflightCheckStatus {
                id: "port-free".into(),
                status: worst,
                nodes: vec![
                    PreflightNodeStatus {
                        name: "controller-0".into(),
                        status: CheckStatus::Success,
                        status_code: 0,
                        message: "free".into(),
                    },
                    PreflightNodeStatus {
                        name: "w1".into(),
                        status: worst.unwrap_or(CheckStatus::Error),
                        status_code: 98,
                        message: "in use on w1".into(),
                    },
                ],
            }],
            ..PlanCommandPreflightStatus::default()
        }),
        ..PlanCommandStatus::default()
    };
    plan.status = Some(PlanStatus {
        state,
        commands: vec![command],
        observed_generation: Some(generation),
        ..PlanStatus::default()
    });
    plan
}

#[test]
fn seed_spellings_are_read_as_ours_and_noted() {
    let Read { value, notes } = parse(CHECKS).expect("valid checks");
    let condition = value.checks[0].results[0].condition.clone().expect("condition");
    assert_eq!(condition.status_code, Some(98));
    assert_eq!(
        notes,
        ["checks[0].results[0].condition.status_code: seed 004's spelling, read as statusCode"]
    );
    // What `check` writes to the Plan is camelCase, which the API server keeps.
    let wire = serde_json::to_value(&value).expect("serialise");
    assert_eq!(wire["checks"][0]["results"][0]["condition"], serde_json::json!({"statusCode": 98}));
}

#[test]
fn an_empty_condition_is_refused_as_new_plan_refuses_it() {
    let empty = CHECKS.replace("condition: {status_code: 98}", "condition: {}");
    assert_eq!(
        parse(&empty).expect_err("empty condition"),
        format!("checks[0].results[0].condition: {}", autopilot_engine::preflight::EMPTY_CONDITION)
    );
}

#[test]
fn unknown_fields_are_refused_naming_them() {
    let typo = CHECKS.replace("targets: {all: true}", "targets: {workerz: {}, all: true}");
    assert_eq!(
        parse(&typo).expect_err("workerz"),
        format!("checks[0].targets.workerz: {}", crate::file::UNKNOWN_FIELD)
    );
    let typo = CHECKS.replace(
        "onWarn: Block",
        "onWarn: Block
deadlin: 2m",
    );
    assert_eq!(
        parse(&typo).expect_err("deadlin"),
        format!("deadlin: {}", crate::file::UNKNOWN_FIELD)
    );
    // Unknown fields of a check's data are refused by the compilation, naming them.
    let typo = CHECKS.replace("data: {port: 10250}", "data: {port: 10250, adress: x}");
    let refused = parse(&typo).expect_err("adress");
    assert!(
        refused.starts_with("checks[0].command.data: ") && refused.contains("`adress`"),
        "{refused}"
    );
}

#[test]
fn the_file_is_a_preflight_body_and_never_holds_on_warnings() {
    let parsed = checks();
    assert_eq!(parsed.checks.len(), 1);
    assert_eq!(parsed.on_warn, OnWarn::Proceed, "an ad hoc check has nothing to hold");
    assert_eq!(
        parse("checks: []").unwrap_err(),
        "checks: is empty; a preflight command needs a check"
    );
    let bad_cel = CHECKS.replace("status_code: 98", "bool_expr: 'statuscode == 98'");
    let refused = parse(&bad_cel).unwrap_err();
    assert!(
        refused.starts_with("checks[0].results[0].condition.boolExpr: ")
            && refused.contains("\"statuscode\""),
        "refused before anything is written, naming the field: {refused}"
    );
    assert!(parse("spec: {}").unwrap_err().contains("not a Plan"));
    assert!(parse("preflight: {checks: []}").unwrap_err().contains("not a Plan or a command"));
    assert!(parse("checks: [{id: x}]").unwrap_err().starts_with("not a set of checks"));
    assert!(parse(": :").unwrap_err().starts_with("not YAML"));
}

#[test]
fn checks_create_the_plan_or_replace_an_ended_one_and_never_a_running_one() {
    let created = start(None, checks(), "check-1", "t");
    let Start::Create(plan) = created else { panic!("{created:?}") };
    assert_eq!(plan.metadata.name.as_deref(), Some(keys::PLAN_NAME));
    assert_eq!(plan.spec.id, "check-1");
    assert_eq!(plan.spec.commands.len(), 1, "only the checks, no update");
    assert!(plan.spec.commands[0].preflight.is_some());

    let done = ended(PlanStateType::Completed, 3, Some(CheckStatus::Success));
    let replaced = start(Some(&done), checks(), "check-2", "t");
    let Start::Replace { plan, ended: what } = replaced else { panic!("{replaced:?}") };
    assert_eq!(plan.metadata, done.metadata, "same object, same resourceVersion");
    assert_eq!(plan.spec.id, "check-2");
    assert_eq!(what, "the ended Plan autopilot (id old, Completed)");

    for state in
        [PlanStateType::NewPlan, PlanStateType::SchedulableWait, PlanStateType::Schedulable]
    {
        let running = ended(state, 1, None);
        let refused = start(Some(&running), checks(), "check-3", "t");
        let Start::Refuse(why) = refused else { panic!("{state}: {refused:?}") };
        assert!(why.contains(&format!("is {state}")), "{why}");
    }
    for key in [keys::ANNOTATION_ABORT, keys::ANNOTATION_PAUSED] {
        let held = ended(PlanStateType::Aborted, 1, None).annotated(key, "true");
        let refused = start(Some(&held), checks(), "check-4", "t");
        let Start::Refuse(why) = refused else { panic!("{key}: {refused:?}") };
        assert!(why.contains(key), "{why}");
    }
}

#[test]
fn the_exit_status_is_the_worst_result_of_this_run() {
    let code = |plan: &Plan, generation| match outcome(plan, generation) {
        Outcome::Ended { code, .. } => Some(code),
        Outcome::Running => None,
    };
    let success = ended(PlanStateType::Completed, 2, Some(CheckStatus::Success));
    assert_eq!(code(&success, 2), Some(0));
    assert_eq!(code(&success, 3), None, "the status of an earlier spec is not this run's");
    assert_eq!(code(&ended(PlanStateType::Completed, 2, Some(CheckStatus::Warn)), 2), Some(1));
    assert_eq!(
        code(&ended(PlanStateType::PreflightFailed, 2, Some(CheckStatus::Error)), 2),
        Some(2)
    );
    assert_eq!(code(&ended(PlanStateType::SchedulableWait, 2, None), 2), None);
    let refused = ended(PlanStateType::Warning, 2, None);
    let Outcome::Ended { code, summary } = outcome(&refused, 2) else { panic!() };
    assert_eq!(code, 2, "checks that could not run are an error");
    assert!(summary.contains("ended Warning: command 0 (preflight): Warning"), "{summary}");
}

#[test]
fn the_table_shows_each_check_then_each_node() {
    let mut plan = ended(PlanStateType::PreflightFailed, 1, Some(CheckStatus::Error));
    let Start::Create(with_spec) = start(None, checks(), "x", "t") else { panic!() };
    plan.spec = with_spec.spec;
    plan.spec.commands[0].preflight.as_mut().expect("checks").checks[0].message =
        Some("the kubelet port".into());
    assert_eq!(
        render(&plan),
        "CHECK port-free: error (the kubelet port)\n\
         \x20 NODE          STATUS   CODE  MESSAGE\n\
         \x20 controller-0  success     0  free\n\
         \x20 w1            error      98  in use on w1\n\n"
    );
}

#[test]
fn a_node_message_cannot_act_on_the_terminal() {
    let mut plan = ended(PlanStateType::PreflightFailed, 1, Some(CheckStatus::Error));
    let status = plan.status.as_mut().expect("status");
    let preflight = status.commands[0].preflight.as_mut().expect("preflight");
    preflight.checks[0].nodes[1].message = "in use\x1b[2J\x1b[1;1Hall good\r\u{202e}ko".into();
    let table = render(&plan);
    assert!(!table.contains('\x1b') && !table.contains('\r') && !table.contains('\u{202e}'));
    assert!(
        table.contains(
            "  w1            error      98  in use\\u{1b}[2J\\u{1b}[1;1Hall good\\r\\u{202e}ko\n"
        ),
        "{table}"
    );
}

//! Seed 004's evaluation rules as tables: result order, catch-all, no match, every
//! condition field, each status code, placeholders, aggregation, and refused plans.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::preflight::{RawRecord, status_code};
use autopilot_api::v1beta2::{CheckStatus, PlanCommand, PlanCommandPreflight, PlanSpec};
use serde_json::{Value, json};

use super::*;

const DEADLINE: Duration = Duration::from_secs(75);

/// A `portAvailable` check with these results.
fn check_with(results: Value) -> Value {
    json!({
        "id": "api-port",
        "targets": {"all": true},
        "command": {"id": "portAvailable", "data": {"port": 6443}},
        "results": results,
    })
}

fn command_of(checks: Value) -> PlanCommandPreflight {
    serde_json::from_value(json!({"checks": checks})).expect("a preflight command")
}

fn compiled(checks: Value) -> CompiledCommand {
    compile_command("spec.commands[0].preflight", &command_of(checks)).expect("compiles")
}

fn single(results: Value) -> CompiledCheck {
    compiled(json!([check_with(results)])).checks.remove(0)
}

fn record(code: i64, error: Option<&str>, messages: &[&str]) -> RawRecord {
    RawRecord {
        status_code: code,
        error: error.map(str::to_owned),
        messages: messages.iter().map(|m| (*m).to_owned()).collect(),
        ..RawRecord::default()
    }
}

fn ok(messages: &[&str]) -> RawRecord {
    record(status_code::SUCCESS, None, messages)
}

/// The result list most tables use: errors first, then a success, then a catch-all warn.
fn ladder() -> Value {
    json!([
        {"status": "error", "message": "port {{ .Result }} in use on {{ .Node }}",
         "condition": {"statusCode": 98}},
        {"status": "error", "message": "probe failed: {{ .Error }} ({{ .StatusCode }})",
         "condition": {"error": true}},
        {"status": "success", "message": "free", "condition": {"error": false, "statusCode": 0}},
        {"status": "warn", "message": "unexpected: {{ .Result }}"}
    ])
}

#[test]
fn the_first_matching_result_decides_in_order() {
    let check = single(ladder());
    let cases = [
        // (record, status, matched result, message)
        (record(98, None, &["6443"]), CheckStatus::Error, Some(0), "port 6443 in use on n1"),
        // 98 with an error set: result 0 comes first and still decides.
        (
            record(98, Some("bind"), &["6443"]),
            CheckStatus::Error,
            Some(0),
            "port 6443 in use on n1",
        ),
        (
            record(1, Some("permission denied"), &[]),
            CheckStatus::Error,
            Some(1),
            "probe failed: permission denied (1)",
        ),
        (ok(&["6443 free"]), CheckStatus::Success, Some(2), "free"),
        // Code 0 with an error fails `error: false`; 1 without error fails `statusCode: 0`.
        (record(0, Some("odd"), &["x"]), CheckStatus::Error, Some(1), "probe failed: odd (0)"),
        (record(1, None, &["busy"]), CheckStatus::Warn, Some(3), "unexpected: busy"),
    ];
    for (record, status, matched, message) in cases {
        let verdict = check.judge("n1", &record);
        assert_eq!(
            (verdict.status, verdict.matched, verdict.message.as_str()),
            (status, matched, message),
            "{record:?}"
        );
        assert_eq!(verdict.status_code, record.status_code);
    }
}

#[test]
fn a_result_without_condition_always_matches() {
    let check = single(json!([{"status": "warn", "message": "m"}]));
    for record in [ok(&[]), record(111, Some("refused"), &[]), record(62, None, &[])] {
        let verdict = check.judge("n1", &record);
        assert_eq!((verdict.status, verdict.matched), (CheckStatus::Warn, Some(0)));
    }
}

#[test]
fn a_condition_that_is_present_but_empty_is_refused_naming_its_path() {
    // `{}` is what pruning leaves of a condition in unlisted fields (seed 004's status_code);
    // `null` is the same as no condition at all.
    for empty in [json!({}), json!({"statusCode": null, "boolExpr": null, "error": null})] {
        let found = compile_command(
            "spec.commands[0].preflight",
            &command_of(json!([
                check_with(json!([{"status": "success", "message": "ok"}])),
                check_with(json!([
                    {"status": "error", "message": "in use", "condition": {"statusCode": 98}},
                    {"status": "success", "message": "free", "condition": empty}
                ]))
            ])),
        )
        .expect_err("an empty condition");
        let found: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(
            found.contains(&format!(
                "spec.commands[0].preflight.checks[1].results[1].condition: {EMPTY_CONDITION}"
            )),
            "{found:#?}"
        );
    }
    assert!(EMPTY_CONDITION.starts_with("is empty; "));
    let absent = command_of(json!([check_with(
        json!([{"status": "success", "message": "ok", "condition": null}])
    )]));
    compile_command("p", &absent).expect("a null condition is an absent one");
}

#[test]
fn no_matching_result_is_an_error_that_shows_the_outcome() {
    let check =
        single(json!([{"status": "success", "message": "ok", "condition": {"statusCode": 0}}]));
    let verdict = check.judge("n1", &record(111, Some("connection refused"), &[]));
    assert_eq!(verdict.status, CheckStatus::Error);
    assert_eq!(verdict.matched, None);
    assert_eq!(verdict.message, "no result matched status code 111, error \"connection refused\"");

    let check = single(json!([{"status": "warn", "message": "odd", "condition": {"error": true}}]));
    let verdict = check.judge("n1", &ok(&["fine"]));
    assert_eq!(verdict.status, CheckStatus::Error, "nothing matched");
    assert_eq!(verdict.message, "no result matched status code 0, result \"fine\"");
}

#[test]
fn error_false_is_a_real_constraint() {
    let check = single(json!([
        {"status": "success", "message": "ran", "condition": {"error": false}}
    ]));
    assert_eq!(check.judge("n", &ok(&[])).status, CheckStatus::Success);
    let failed = check.judge("n", &record(0, Some("could not run"), &[]));
    assert_eq!((failed.status, failed.matched), (CheckStatus::Error, None));
}

#[test]
fn every_set_condition_field_must_hold() {
    let check = single(json!([
        {"status": "success", "message": "all three",
         "condition": {"error": false, "statusCode": 0, "boolExpr": "result == 'yes'"}}
    ]));
    let cases = [
        (ok(&["yes"]), CheckStatus::Success),
        (ok(&["no"]), CheckStatus::Error),
        (record(1, None, &["yes"]), CheckStatus::Error),
        (record(0, Some("e"), &["yes"]), CheckStatus::Error),
    ];
    for (record, status) in cases {
        assert_eq!(check.judge("n", &record).status, status, "{record:?}");
    }
}

#[test]
fn each_seed_status_code_selects_its_result() {
    let results: Vec<Value> = status_code::ALL
        .iter()
        .map(|code| {
            json!({"status": "warn", "message": "code {{ .StatusCode }}",
                            "condition": {"statusCode": code}})
        })
        .collect();
    let check = single(Value::Array(results));
    for (index, code) in status_code::ALL.into_iter().enumerate() {
        let verdict = check.judge("n", &record(code, None, &[]));
        assert_eq!(verdict.matched, Some(index), "code {code}");
        assert_eq!(verdict.message, format!("code {code}"));
    }
    assert_eq!(status_code::ALL, [0, 1, 22, 62, 98, 111]);
}

#[test]
fn bool_expr_sees_every_variable() {
    let cases = [
        ("result == 'first'", true),
        ("results == ['first', 'second']", true),
        ("size(results) == 2 && results[1] == 'second'", true),
        ("results.exists(m, m == 'second')", true),
        ("statusCode == 0", true),
        ("!error", true),
        ("stdout.contains('ready')", true),
        ("stderr == ''", true),
        ("node == 'worker-1'", true),
        ("node.startsWith('controller')", false),
        ("int(result.size()) > 100", false),
        ("results.all(m, m.size() > 3)", true),
        ("type(statusCode) == int", true),
    ];
    let record = RawRecord { stdout: "service ready\n".into(), ..ok(&["first", "second"]) };
    for (expr, holds) in cases {
        let check = single(json!([
            {"status": "success", "message": "held", "condition": {"boolExpr": expr}}
        ]));
        let verdict = check.judge("worker-1", &record);
        let status = if holds { CheckStatus::Success } else { CheckStatus::Error };
        assert_eq!(verdict.status, status, "{expr}: {}", verdict.message);
    }
}

#[test]
fn a_bool_expr_that_cannot_be_evaluated_decides_error_not_the_next_result() {
    let check = single(json!([
        {"status": "error", "message": "too few", "condition": {"boolExpr": "int(result) < 10"}},
        {"status": "success", "message": "enough"}
    ]));
    assert_eq!(check.judge("n", &ok(&["42"])).status, CheckStatus::Success);
    assert_eq!(check.judge("n", &ok(&["3"])).status, CheckStatus::Error);
    let verdict = check.judge("n", &ok(&["lots"]));
    assert_eq!((verdict.status, verdict.matched), (CheckStatus::Error, None));
    assert!(
        verdict.message.starts_with("results[0].condition.boolExpr could not be evaluated: "),
        "{}",
        verdict.message
    );

    // Gives a bool on the trial record (status code 0) and an int on this one.
    let not_a_bool = single(json!([
        {"status": "success", "message": "m",
         "condition": {"boolExpr": "statusCode == 0 ? true : statusCode"}}
    ]));
    let verdict = not_a_bool.judge("n", &record(1, None, &[]));
    assert_eq!(verdict.status, CheckStatus::Error);
    assert!(verdict.message.ends_with("not a bool"), "{}", verdict.message);
}

#[test]
fn placeholders_and_message_args_are_filled_in() {
    let check = single(json!([
        {"status": "warn",
         "message": {"id": "port.busy",
                     "defaultMessage": "{{.Args.what}} on {{ .Node }}: {{ .Result }} / {{ .Results }} / {{ .StatusCode }} / [{{ .Error }}]",
                     "args": {"what": "port {{ .Result }}", "unused": "x"}}}
    ]));
    let verdict = check.judge("worker-1", &record(98, Some("in use"), &["6443", "pid 7"]));
    assert_eq!(verdict.message, "port 6443 on worker-1: 6443 / 6443; pid 7 / 98 / [in use]");
    let verdict = check.judge("worker-2", &ok(&[]));
    assert_eq!(verdict.message, "port  on worker-2:  /  / 0 / []");
}

#[test]
fn a_check_is_its_worst_node_and_a_command_its_worst_check() {
    let command = compiled(json!([
        check_with(ladder()),
        {"id": "version", "targets": {"controllers": {"discovery": {"selector": {}}}},
         "command": {"id": "k0sVersion"},
         "results": [{"status": "success", "message": "{{ .Result }}", "condition": {"statusCode": 0}},
                     {"status": "warn", "message": "no version"}]}
    ]));
    let nodes = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let targets = BTreeMap::from([
        ("api-port".to_owned(), nodes(&["c1", "w1", "w2"])),
        ("version".to_owned(), nodes(&["c1"])),
    ]);
    let records = |port: [RawRecord; 3], version: RawRecord| {
        let [c1, w1, w2] = port;
        BTreeMap::from([
            (
                "api-port".to_owned(),
                BTreeMap::from([
                    ("c1".to_owned(), c1),
                    ("w1".to_owned(), w1),
                    ("w2".to_owned(), w2),
                ]),
            ),
            ("version".to_owned(), BTreeMap::from([("c1".to_owned(), version)])),
        ])
    };
    let cases = [
        // (port records c1/w1/w2, version record, port status, version status, command)
        (
            [ok(&[]), ok(&[]), ok(&[])],
            ok(&["v1"]),
            CheckStatus::Success,
            CheckStatus::Success,
            CheckStatus::Success,
        ),
        (
            [ok(&[]), record(1, None, &[]), ok(&[])],
            ok(&["v1"]),
            CheckStatus::Warn,
            CheckStatus::Success,
            CheckStatus::Warn,
        ),
        (
            [ok(&[]), record(1, None, &[]), record(98, None, &[])],
            ok(&["v1"]),
            CheckStatus::Error,
            CheckStatus::Success,
            CheckStatus::Error,
        ),
        (
            [ok(&[]), ok(&[]), ok(&[])],
            record(1, None, &[]),
            CheckStatus::Success,
            CheckStatus::Warn,
            CheckStatus::Warn,
        ),
    ];
    for (port, version, port_status, version_status, command_status) in cases {
        let verdict = command.evaluate(&targets, &records(port, version), DEADLINE);
        assert_eq!(verdict.checks[0].status, port_status);
        assert_eq!(verdict.checks[1].status, version_status);
        assert_eq!(verdict.status, command_status);
        assert_eq!(verdict.checks[0].nodes.len(), 3);
        let status = verdict.to_status();
        assert_eq!(status.status, Some(command_status));
        assert_eq!(status.checks[0].status, Some(port_status));
        let names: Vec<&str> = status.checks[0].nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["c1", "w1", "w2"]);
    }
}

#[test]
fn a_node_without_a_report_counts_as_status_code_62() {
    let check = single(json!([
        {"status": "warn", "message": "{{ .Node }} timed out: {{ .Error }}",
         "condition": {"statusCode": 62, "error": true}},
        {"status": "success", "message": "ok"}
    ]));
    let targets = ["n1".to_owned(), "n2".to_owned()];
    let records = BTreeMap::from([("n1".to_owned(), ok(&[]))]);
    let verdict = check.evaluate(&targets, &records, DEADLINE);
    assert_eq!(verdict.status, CheckStatus::Warn);
    assert_eq!(verdict.nodes[0].status, CheckStatus::Success);
    assert_eq!(verdict.nodes[1].status_code, status_code::TIMEOUT);
    assert_eq!(verdict.nodes[1].message, "n2 timed out: no report within the deadline of 1m15s");
}

#[test]
fn a_check_that_ran_on_no_node_is_an_error() {
    let check = single(json!([{"status": "success", "message": "ok"}]));
    let verdict = check.evaluate(&[], &BTreeMap::new(), DEADLINE);
    assert_eq!(verdict.status, CheckStatus::Error);
    assert!(verdict.nodes.is_empty());
}

#[test]
fn warnings_block_only_with_on_warn_block_until_accepted_for_this_plan() {
    use autopilot_api::keys::ANNOTATION_ACCEPT_WARNINGS;
    use autopilot_api::v1beta2::OnWarn;

    let verdict = |status| CommandVerdict { status, checks: Vec::new() };
    let cases = [
        // (status, onWarn, accepted, may proceed)
        (CheckStatus::Success, OnWarn::Block, false, true),
        (CheckStatus::Warn, OnWarn::Proceed, false, true),
        (CheckStatus::Warn, OnWarn::Block, false, false),
        (CheckStatus::Warn, OnWarn::Block, true, true),
        (CheckStatus::Error, OnWarn::Proceed, true, false),
        (CheckStatus::Error, OnWarn::Block, true, false),
    ];
    for (status, on_warn, accepted, proceeds) in cases {
        assert_eq!(
            verdict(status).may_proceed(on_warn, accepted),
            proceeds,
            "{status} {on_warn:?} accepted={accepted}"
        );
    }

    let annotations =
        |value: &str| BTreeMap::from([(ANNOTATION_ACCEPT_WARNINGS.to_owned(), value.to_owned())]);
    assert!(warnings_accepted(&annotations("upgrade-1.33"), "upgrade-1.33"));
    assert!(!warnings_accepted(&annotations("upgrade-1.32"), "upgrade-1.33"), "another plan");
    assert!(!warnings_accepted(&BTreeMap::new(), "upgrade-1.33"));
}

// === Compiling ===

fn plan_with(checks: Value) -> PlanSpec {
    let k0s: PlanCommand = serde_json::from_value(json!({"k0supdate": {
        "version": "v2", "platforms": {}, "targets": {}
    }}))
    .expect("k0supdate");
    PlanSpec {
        download_window: Default::default(),
        window: Default::default(),
        windows: Default::default(),
        id: "id".into(),
        timestamp: "now".into(),
        commands: vec![
            k0s.clone(),
            PlanCommand { preflight: Some(command_of(checks)), ..PlanCommand::default() },
            k0s,
        ],
    }
}

fn problems(checks: Value) -> Vec<String> {
    match compile(&plan_with(checks)) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_good_plan_compiles_by_command_index() {
    let compiled = compile(&plan_with(json!([check_with(ladder())]))).expect("compiles");
    assert!(compiled.command(0).is_none());
    assert!(compiled.command(2).is_none());
    let command = compiled.command(1).expect("the preflight command");
    assert_eq!(command.checks[0].id, "api-port");
    assert_eq!(command.checks[0].timeout, Duration::from_secs(15));
    assert_eq!(command.deadline(DEFAULT_DEADLINE_MARGIN), Duration::from_secs(75));

    let plain = PlanSpec {
        commands: vec![plan_with(json!([])).commands[0].clone()],
        ..PlanSpec::default()
    };
    assert!(compile(&plain).expect("no preflight").is_empty());
}

#[test]
fn a_bad_bool_expr_is_refused_naming_the_check_and_field() {
    let checks = json!([
        check_with(json!([{"status": "success", "message": "ok"}])),
        {"id": "second", "targets": {"all": true}, "command": {"id": "k0sVersion"},
         "results": [{"status": "error", "message": "m", "condition": {"boolExpr": "statusCode =="}}]}
    ]);
    let found = problems(checks);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(
            "spec.commands[1].preflight.checks[1].results[0].condition.boolExpr: does not parse as CEL"
        ),
        "{found:?}"
    );
}

#[test]
fn a_message_that_is_neither_text_nor_a_message_object_is_refused_naming_the_field() {
    for message in [json!(42), json!(["a"]), json!({"id": "x"}), json!(null)] {
        let checks = json!([
            {"id": "only", "targets": {"all": true}, "command": {"id": "k0sVersion"},
             "results": [{"status": "success", "message": message}]}
        ]);
        let found = problems(checks);
        assert_eq!(found.len(), 1, "{message}: {found:?}");
        assert!(
            found[0].starts_with(
                "spec.commands[1].preflight.checks[0].results[0].message: must be a string or an object"
            ),
            "{message}: {found:?}"
        );
    }
}

#[test]
fn unknown_variables_are_refused_but_comprehension_variables_are_not() {
    let expr = |expr: &str| {
        check_with(json!([{"status": "success", "message": "m", "condition": {"boolExpr": expr}}]))
    };
    assert_eq!(
        problems(json!([expr("statuscode == 0")])),
        ["spec.commands[1].preflight.checks[0].results[0].condition.boolExpr: uses unknown \
          variable \"statuscode\"; the variables are result, results, statusCode, error, \
          stdout, stderr, node"]
    );
    assert_eq!(
        problems(json!([expr("results.exists(line, line.contains(node))")])),
        Vec::<String>::new()
    );
    assert_eq!(
        problems(json!([expr("results.map(x, x.size()).all(n, n > 0)")])),
        Vec::<String>::new()
    );
    assert_eq!(problems(json!([expr("results.exists(x, x == y)")])).len(), 1);
    assert_eq!(problems(json!([expr("  ")])).len(), 1, "an empty expression is refused");
}

#[test]
fn expressions_that_cannot_be_a_condition_are_refused_on_a_trial_run() {
    let expr = |expr: &str| {
        check_with(json!([{"status": "success", "message": "m", "condition": {"boolExpr": expr}}]))
    };
    let path = "spec.commands[1].preflight.checks[0].results[0].condition.boolExpr";
    let cases = [
        ("statusCode", "gives int, not a bool"),
        ("result", "gives string, not a bool"),
        ("sizeof(result) > 0", "calls \"sizeof\", which CEL does not have"),
        ("statusCode + 'x' == 1", "fails on any record: "),
        ("result < 5", "fails on any record: "),
    ];
    for (source, message) in cases {
        let found = problems(json!([expr(source)]));
        assert_eq!(found.len(), 1, "{source}: {found:?}");
        assert!(found[0].starts_with(&format!("{path}: {message}")), "{source}: {found:?}");
    }
    // Failures that depend on the record are left to evaluation.
    for source in
        ["int(result) > 3", "results[0] == 'x'", "size(results) > 0 && results[0] == 'ok'"]
    {
        assert_eq!(problems(json!([expr(source)])), Vec::<String>::new(), "{source}");
    }
}

#[test]
fn every_problem_of_a_plan_is_reported_at_once() {
    let checks = json!([
        {"id": "a", "targets": {}, "command": {"id": "tcpDial", "timeout": 0, "data": {"host": "x"}},
         "results": [{"status": "error", "message": "{{ .Nope }}"},
                     {"status": "warn", "message": {"defaultMessage": "{{ .Args.missing }}"}},
                     {"status": "warn", "message": "{{ .Result"}]},
        {"id": "a", "targets": {"all": true, "workers": {"discovery": {}}},
         "command": {"id": "fileExists", "timeout": -2, "data": {"path": "/etc"}},
         "results": [{"status": "success", "message": "ok"}]}
    ]);
    let found = problems(checks);
    let paths: Vec<&str> = found.iter().map(|p| p.split(": ").next().unwrap_or_default()).collect();
    assert_eq!(
        paths,
        [
            "spec.commands[1].preflight.checks[1].id",
            "spec.commands[1].preflight.checks[0].targets",
            "spec.commands[1].preflight.checks[0].command.timeout",
            "spec.commands[1].preflight.checks[0].command.data",
            "spec.commands[1].preflight.checks[0].results[0].message",
            "spec.commands[1].preflight.checks[0].results[1].message",
            "spec.commands[1].preflight.checks[0].results[2].message",
            "spec.commands[1].preflight.checks[1].targets",
            "spec.commands[1].preflight.checks[1].command.timeout",
        ],
        "{found:#?}"
    );
    assert!(found[0].contains("\"a\" is also the id of checks[0]"), "{}", found[0]);
    assert!(found[4].contains("{{ .Nope }} is not a placeholder"), "{}", found[4]);
    assert!(found[5].contains("names no argument \"missing\""), "{}", found[5]);
    assert!(found[6].contains("is not closed"), "{}", found[6]);
}

#[test]
fn timeouts_default_to_fifteen_seconds_and_minus_one_is_the_node_maximum() {
    let with_timeout = |timeout: Value| {
        let mut check = check_with(json!([{"status": "success", "message": "ok"}]));
        check["command"]["timeout"] = timeout;
        compiled(json!([check])).checks.remove(0).timeout
    };
    assert_eq!(with_timeout(json!(3)), Duration::from_secs(3));
    assert_eq!(with_timeout(json!(-1)), autopilot_api::preflight::MAX_CHECK_DURATION);
    assert_eq!(with_timeout(json!(100_000)), autopilot_api::preflight::MAX_CHECK_DURATION);
    assert_eq!(
        single(json!([{"status": "success", "message": "ok"}])).timeout,
        Duration::from_secs(15)
    );
}

#[test]
fn a_deadline_must_be_a_non_zero_duration_and_overrides_the_margin() {
    let mut command =
        command_of(json!([check_with(json!([{"status": "success", "message": "ok"}]))]));
    command.deadline = Some("2m".into());
    let compiled = compile_command("p", &command).expect("compiles");
    assert_eq!(compiled.deadline(DEFAULT_DEADLINE_MARGIN), Duration::from_secs(120));
    for bad in ["0s", "soon"] {
        command.deadline = Some(bad.into());
        let found = compile_command("p", &command).expect_err(bad);
        assert_eq!(found[0].path, "p.deadline");
    }
    let empty = compile_command("p", &command_of(json!([]))).expect_err("no checks");
    assert_eq!(empty[0].to_string(), "p.checks: is empty; a preflight command needs a check");
}

#[test]
fn a_check_without_results_is_refused_since_nothing_could_match() {
    let found =
        compile_command("p", &command_of(json!([check_with(json!([]))]))).expect_err("no results");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].path, "p.checks[0].results");
    assert!(found[0].to_string().contains("every node would end error"), "{}", found[0]);
}

#[test]
fn compiled_plans_can_be_shared_across_tasks() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<Compiled>();
}

// === Properties ===

mod props {
    use proptest::prelude::*;

    use super::*;

    fn status() -> impl Strategy<Value = CheckStatus> {
        prop::sample::select(CheckStatus::ALL.to_vec())
    }

    fn code() -> impl Strategy<Value = i64> {
        prop::sample::select(status_code::ALL.to_vec())
    }

    /// A result whose condition sets any subset of `error` and `statusCode`.
    fn result() -> impl Strategy<Value = (CheckStatus, Option<bool>, Option<i64>)> {
        (status(), prop::option::of(any::<bool>()), prop::option::of(code()))
    }

    proptest! {
        /// Seed 004's rule as a model: the first result whose every set field holds decides;
        /// none is `error`.
        #[test]
        fn the_first_result_whose_condition_holds_decides(
            results in prop::collection::vec(result(), 1..6),
            code in code(),
            failed in any::<bool>(),
        ) {
            let spec: Vec<Value> = results
                .iter()
                .map(|(status, error, status_code)| {
                    let mut condition = serde_json::Map::new();
                    if let Some(error) = error {
                        condition.insert("error".into(), json!(error));
                    }
                    if let Some(status_code) = status_code {
                        condition.insert("statusCode".into(), json!(status_code));
                    }
                    // No field set: a catch-all, which omits `condition` (an empty one is
                    // refused).
                    if condition.is_empty() {
                        json!({"status": status, "message": "r"})
                    } else {
                        json!({"status": status, "message": "r", "condition": condition})
                    }
                })
                .collect();
            let check = single(Value::Array(spec));
            let record = record(code, failed.then_some("failed"), &[]);
            let expected = results
                .iter()
                .position(|(_, error, status_code)| {
                    error.is_none_or(|error| error == failed)
                        && status_code.is_none_or(|status_code| status_code == code)
                })
                .map_or((CheckStatus::Error, None), |index| (results[index].0, Some(index)));
            let verdict = check.judge("n", &record);
            prop_assert_eq!((verdict.status, verdict.matched), expected);
        }

        /// A check is its worst node; a check on no node is `error`.
        #[test]
        fn a_check_is_exactly_as_bad_as_its_worst_node(
            statuses in prop::collection::vec(status(), 0..8),
        ) {
            // Each node reports the status code that selects its status.
            let check = single(json!([
                {"status": "success", "message": "s", "condition": {"statusCode": 0}},
                {"status": "warn", "message": "w", "condition": {"statusCode": 1}},
                {"status": "error", "message": "e", "condition": {"statusCode": 22}}
            ]));
            let code_of = |status: CheckStatus| match status {
                CheckStatus::Success => 0,
                CheckStatus::Warn => 1,
                CheckStatus::Error => 22,
            };
            let targets: Vec<String> = (0..statuses.len()).map(|i| format!("n{i}")).collect();
            let records: BTreeMap<String, RawRecord> = statuses
                .iter()
                .enumerate()
                .map(|(i, status)| (format!("n{i}"), record(code_of(*status), None, &[])))
                .collect();
            let verdict = check.evaluate(&targets, &records, DEADLINE);
            let worst = statuses.iter().copied().max().unwrap_or(CheckStatus::Error);
            prop_assert_eq!(verdict.status, worst);
            prop_assert_eq!(verdict.nodes.len(), statuses.len());
        }
    }
}

/// What compiling `source` as the only `boolExpr` of a plan reports (nothing when it
/// compiles), the field's path cut off.
fn bool_expr_problems(source: &str) -> Vec<String> {
    let check = check_with(
        json!([{"status": "success", "message": "m", "condition": {"boolExpr": source}}]),
    );
    let path = "spec.commands[1].preflight.checks[0].results[0].condition.boolExpr: ";
    problems(json!([check]))
        .into_iter()
        .map(|problem| problem.strip_prefix(path).map(str::to_owned).unwrap_or(problem))
        .collect()
}

/// A list literal of `len` distinct short strings.
fn list_literal(len: usize) -> String {
    let elements: Vec<String> = (0..len).map(|index| format!("'v{index}'")).collect();
    format!("[{}]", elements.join(", "))
}

#[test]
fn a_bool_expr_over_a_bound_is_refused_naming_the_field_and_the_bound() {
    let check = check_with(json!([{"status": "success", "message": "m",
                                   "condition": {"boolExpr": "result == '' && 'x'.size() > 0"}},
                                  {"status": "warn", "message": "m",
                                   "condition": {"boolExpr": format!("result in {}", list_literal(101))}}]));
    assert_eq!(
        problems(json!([check])),
        ["spec.commands[1].preflight.checks[0].results[1].condition.boolExpr: has a list \
          literal of 101 elements; at most 100 are allowed"]
    );
}

#[test]
fn a_bool_expr_may_be_as_long_as_the_source_bound_and_no_longer() {
    let at_bound = format!("{:<width$}", "result == 'ok'", width = MAX_CEL_SOURCE_BYTES);
    assert_eq!(bool_expr_problems(&at_bound), Vec::<String>::new());
    assert_eq!(
        bool_expr_problems(&format!("{at_bound} ")),
        ["is 4097 bytes long; at most 4096 are allowed"]
    );
}

#[test]
fn a_bool_expr_may_have_as_many_nodes_as_the_bound_and_no_more() {
    // Each `statusCode == 0` is three nodes, each `||` one more: 125 terms are 499 nodes,
    // one `!` makes 500, one more `|| error` 501.
    let terms = vec!["statusCode == 0"; 125].join(" || ");
    assert_eq!(bool_expr_problems(&format!("!({terms})")), Vec::<String>::new());
    assert_eq!(
        bool_expr_problems(&format!("{terms} || error")),
        ["has 501 expression nodes (macros expanded); at most 500 are allowed"]
    );
}

#[test]
fn comprehensions_may_nest_two_deep_and_may_be_chained() {
    for source in [
        "results.all(a, results.all(b, a == b))",
        "results.exists(m, ['ready', 'ok'].exists(p, m.contains(p)))",
        // One after another is not nesting: each runs once.
        "results.filter(m, m != '').map(m, m.size()).all(n, n > 0)",
        "results.map(m, results.filter(n, n == m).size()).all(c, c == 1)",
    ] {
        assert_eq!(bool_expr_problems(source), Vec::<String>::new(), "{source}");
    }
    for source in [
        "results.all(a, results.all(b, results.all(c, a == b && b == c)))",
        "[1].exists(a, [2].map(b, [3].filter(c, c > a + b)).size() > 0)",
        "results.all(a, results.exists_one(b, results.exists(c, a + b == c)))",
    ] {
        assert_eq!(
            bool_expr_problems(source),
            ["has 3 nested comprehensions; at most 2 are allowed"],
            "{source}"
        );
    }
}

#[test]
fn string_and_bytes_literals_may_be_as_long_as_the_bound_and_no_longer() {
    let at_bound = "x".repeat(MAX_CEL_LITERAL_BYTES);
    assert_eq!(bool_expr_problems(&format!("result == '{at_bound}'")), Vec::<String>::new());
    assert_eq!(
        bool_expr_problems(&format!("bytes(result) == b'{at_bound}'")),
        Vec::<String>::new()
    );
    let refused = ["has a 1025-byte literal; at most 1024 bytes are allowed"];
    assert_eq!(bool_expr_problems(&format!("result == '{at_bound}x'")), refused);
    assert_eq!(bool_expr_problems(&format!("bytes(result) == b'{at_bound}x'")), refused);
}

#[test]
fn list_and_map_literals_may_have_as_many_elements_as_the_bound_and_no_more() {
    let bound = MAX_CEL_LITERAL_ELEMENTS;
    let map = |len: usize| {
        let entries: Vec<String> = (0..len).map(|index| format!("'v{index}': {index}")).collect();
        format!("{{{}}}", entries.join(", "))
    };
    assert_eq!(
        bool_expr_problems(&format!("result in {}", list_literal(bound))),
        Vec::<String>::new()
    );
    assert_eq!(bool_expr_problems(&format!("result in {}", map(bound))), Vec::<String>::new());
    assert_eq!(
        bool_expr_problems(&format!("result in {}", list_literal(bound + 1))),
        ["has a list literal of 101 elements; at most 100 are allowed"]
    );
    assert_eq!(
        bool_expr_problems(&format!("result in {}", map(bound + 1))),
        ["has a map literal of 101 entries; at most 100 are allowed"]
    );
}

#[test]
fn an_expression_that_may_cost_too_much_on_the_largest_record_is_refused() {
    // Two full loops over the largest `results`, comparing whole messages: fifteen
    // comparisons per pair are just under the cost bound, sixteen just over.
    let nested = |comparisons: usize| {
        format!("results.all(a, results.all(b, {}))", vec!["a == b"; comparisons].join(" || "))
    };
    assert_eq!(bool_expr_problems(&nested(15)), Vec::<String>::new());
    let refused = bool_expr_problems(&nested(16));
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].starts_with(
            "may cost up to 10125504 steps on the largest record a node can report; at \
             most 10000000 are allowed"
        ),
        "{refused:?}"
    );
}

#[test]
fn a_value_grown_in_a_chain_of_comprehensions_is_refused_by_its_cost() {
    // Each `map` triples the string; no limit on shape catches it, the estimate does.
    let grow =
        |times: usize| format!("[stdout]{}[0].size() > 0", ".map(s, s + s + s)".repeat(times));
    assert_eq!(bool_expr_problems(&grow(4)), Vec::<String>::new());
    for times in [6, 12, 40] {
        let refused = bool_expr_problems(&grow(times));
        assert!(refused[0].starts_with("may cost up to "), "{times}: {refused:?}");
    }
    // Nested loops over long literal lists with a real body are refused the same way.
    let list = list_literal(MAX_CEL_LITERAL_ELEMENTS);
    let nested = format!("{list}.all(x, {list}.all(y, x == y || x.startsWith(y) || result == x))");
    assert!(bool_expr_problems(&nested)[0].starts_with("may cost up to "));
}

#[test]
fn the_documented_conditions_are_well_within_the_bounds() {
    for source in [
        "int(result) > 10737418240",
        "result == \"200\"",
        "result.startsWith(\"v1.35\")",
        "results.exists(m, m.contains(\"healthy\"))",
        "node.startsWith(\"edge-\")",
        "statusCode == 0 && !error",
        "results.exists(m, m.matches(\"^ok [0-9]+$\"))",
        "stdout.contains(\"ready\") && stderr == \"\"",
        "results.exists(m, ['v1.34', 'v1.35'].exists(v, m.startsWith(v)))",
    ] {
        assert_eq!(bool_expr_problems(source), Vec::<String>::new(), "{source}");
    }
}

#[test]
fn a_verdict_message_is_cut_to_its_budget() {
    let check = single(ladder());
    // A 16 KiB result fills the catch-all's message.
    let large = "x".repeat(16 * 1024);
    let verdict = check.judge("n1", &record(1, None, &[&large]));
    assert_eq!(verdict.status, CheckStatus::Warn);
    assert!(verdict.message.len() <= MAX_VERDICT_MESSAGE, "{} bytes", verdict.message.len());
    assert!(verdict.message.starts_with("unexpected: xxx"));
    assert!(verdict.message.ends_with('…'), "a cut is marked");
    // A short one is kept whole.
    assert_eq!(check.judge("n1", &record(1, None, &["busy"])).message, "unexpected: busy");
}

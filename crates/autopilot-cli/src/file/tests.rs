use serde_json::json;

use super::*;

/// Seed 004's scheduler example, spelled the seed's way, as a Plan's preflight command.
const SEED_PLAN: &str = r#"
apiVersion: autopilot.k0sproject.io/v1beta2
kind: Plan
metadata:
  name: autopilot
spec:
  id: seed
  timestamp: now
  commands:
    - preflight:
        checks:
          - id: license
            targets: {global: true}
            command:
              id: scheduler
              data: {kubernetes: {pod_name: license-checker, node_selector: {role: edge}}}
            results:
              - status: success
                message:
                  id: license.ok
                  default_message: "valid on {{ .Node }}"
                condition: {status_code: 0, bool_expr: 'result.startsWith("valid")'}
              - {status: error, message: "{{ .Result }}"}
          - id: disk
            targets: {workers: {discovery: {selector: {}}}}
            command: {id: diskSpaceAvailable, data: {path: /var, min_bytes: 1024}}
            results: [{status: success, message: ok}]
"#;

#[test]
fn a_plan_in_seed_spelling_is_read_in_ours_and_each_rename_is_noted() {
    let Read { value: plan, notes } = plan(SEED_PLAN).expect("the seed's spellings are read");
    let wire = serde_json::to_value(&plan.spec).expect("serialise");
    let check = &wire["commands"][0]["preflight"]["checks"][0];
    assert_eq!(check["targets"], json!({"all": true}));
    assert_eq!(
        check["command"]["data"],
        json!({"kubernetes": {"podName": "license-checker", "nodeSelector": {"role": "edge"}}})
    );
    assert_eq!(
        check["results"][0]["condition"],
        json!({"statusCode": 0, "boolExpr": "result.startsWith(\"valid\")"})
    );
    assert_eq!(
        check["results"][0]["message"],
        json!({"id": "license.ok", "defaultMessage": "valid on {{ .Node }}"})
    );
    let disk = &wire["commands"][0]["preflight"]["checks"][1];
    assert_eq!(disk["command"]["data"], json!({"path": "/var", "minBytes": 1024}));

    // The engine compiles what was read: nothing was lost on the way.
    autopilot_engine::preflight::compile(&plan.spec).expect("compiles");

    let at = "spec.commands[0].preflight.checks[0]";
    assert_eq!(
        notes,
        [
            format!("{at}.targets.global: seed 004's spelling, read as all"),
            format!("{at}.command.data.kubernetes.pod_name: seed 004's spelling, read as podName"),
            format!(
                "{at}.command.data.kubernetes.node_selector: seed 004's spelling, read as \
                 nodeSelector"
            ),
            format!(
                "{at}.results[0].condition.status_code: seed 004's spelling, read as statusCode"
            ),
            format!("{at}.results[0].condition.bool_expr: seed 004's spelling, read as boolExpr"),
            format!(
                "{at}.results[0].message.default_message: seed 004's spelling, read as \
                 defaultMessage"
            ),
            "spec.commands[0].preflight.checks[1].command.data.min_bytes: seed 004's spelling, \
             read as minBytes"
                .to_owned(),
        ]
    );
    assert_eq!(notes.len(), SEED_SPELLINGS.len(), "every spelling this reading knows");
}

#[test]
fn a_plan_in_our_spelling_is_read_without_notes() {
    let ours = SEED_PLAN
        .replace("global: true", "all: true")
        .replace("pod_name", "podName")
        .replace("node_selector", "nodeSelector")
        .replace("default_message", "defaultMessage")
        .replace("status_code", "statusCode")
        .replace("bool_expr", "boolExpr")
        .replace("min_bytes", "minBytes");
    let ours = plan(&ours).expect("camelCase");
    assert!(ours.notes.is_empty(), "{:?}", ours.notes);
    assert_eq!(ours.value, plan(SEED_PLAN).expect("seed").value);
}

#[test]
fn an_unknown_field_is_refused_naming_its_path() {
    let typo = r#"
metadata: {name: autopilot}
spec:
  id: x
  timestamp: now
  commands:
    - k0supdate:
        version: v1.31.2+k0s.0
        platforms: {linux-amd64: {url: "https://example.com/k0s"}}
        targets:
          controllers: {discovery: {static: {nodes: [c1]}}}
          workerz: {discovery: {selector: {}}}
"#;
    assert_eq!(
        plan(typo).expect_err("workerz"),
        format!("spec.commands[0].k0supdate.targets.workerz: {UNKNOWN_FIELD}")
    );

    // Every unknown field at once, in a preflight command too (its message objects
    // included, which the API types read leniently).
    let typos = SEED_PLAN
        .replace("targets: {global: true}", "targets: {global: true, controlers: {}}")
        .replace("id: license.ok", "id: license.ok\n                  arg: {x: y}")
        .replace("timestamp: now", "timestamp: now\n  ids: [x]");
    let refused = plan(&typos).expect_err("three typos");
    let at = "spec.commands[0].preflight.checks[0]";
    for path in [
        format!("{at}.results[0].message.arg"),
        format!("{at}.targets.controlers"),
        "spec.ids".to_owned(),
    ] {
        assert!(refused.contains(&format!("{path}: {UNKNOWN_FIELD}")), "{path}: {refused}");
    }
}

#[test]
fn both_spellings_of_one_field_are_refused() {
    let both = SEED_PLAN.replace("{status_code: 0,", "{status_code: 0, statusCode: 1,");
    assert_eq!(
        plan(&both).expect_err("both"),
        "spec.commands[0].preflight.checks[0].results[0].condition.status_code: set together \
         with statusCode, the same field in our spelling; keep statusCode"
    );
}

#[test]
fn a_plan_from_kubectl_get_is_read_without_its_status() {
    let mut document: Value = autopilot_engine::yaml::from_str(SEED_PLAN).expect("yaml");
    document["status"] = json!({"state": "Completed", "whatever": 1});
    document["metadata"]["resourceVersion"] = json!("42");
    let text = serde_json::to_string(&document).expect("json");
    let read = plan(&text).expect("read");
    assert_eq!(read.value.status, None);
    let not_yaml = plan("spec: [").expect_err("yaml");
    assert!(not_yaml.starts_with("not YAML or JSON: "), "{not_yaml}");
    assert!(not_yaml.ends_with("at line 1, column 7"), "the place of the error: {not_yaml}");
    assert!(
        plan("{metadata: {}, spec: {id: x}}")
            .expect_err("no timestamp")
            .starts_with("not a Plan: ")
    );
    let foreign = SEED_PLAN.replace("kind: Plan", "kind: ControlNode");
    assert_eq!(plan(&foreign).expect_err("a ControlNode"), "kind: is \"ControlNode\", not Plan");
}

#[test]
fn a_seed_spelling_outside_its_place_is_an_unknown_field() {
    // `global` renames only in a check's targets; in a k0supdate's it is a typo.
    let misplaced = r#"
metadata: {name: autopilot}
spec:
  id: x
  timestamp: now
  commands:
    - k0supdate:
        version: v1.31.2+k0s.0
        platforms: {linux-amd64: {url: "https://example.com/k0s"}}
        targets: {global: true}
"#;
    assert_eq!(
        plan(misplaced).expect_err("global"),
        format!("spec.commands[0].k0supdate.targets.global: {UNKNOWN_FIELD}")
    );
}

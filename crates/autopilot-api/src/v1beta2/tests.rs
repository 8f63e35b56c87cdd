//! Golden tests for the CRD types and structural checks for the generated CRDs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::{CustomResourceExt, Resource};
use serde_json::{Value, json};

use super::*;
use crate::keys;
use crate::signal::SignalPhase;

// === States on the wire ===

#[test]
fn every_plan_state_serialises_to_its_k0s_string() {
    let wire: Vec<Value> =
        PlanStateType::ALL.iter().map(|s| serde_json::to_value(s).expect("serialise")).collect();
    assert_eq!(
        wire,
        [
            json!(""),
            json!("SchedulableWait"),
            json!("Schedulable"),
            json!("Completed"),
            json!("IncompleteTargets"),
            json!("MissingSignalNode"),
            json!("MissingPlatform"),
            json!("InconsistentTargets"),
            json!("Restricted"),
            json!("ApplyFailed"),
            json!("Warning"),
            json!("Aborted"),
            json!("PreflightFailed"),
            json!("RolledBack"),
        ]
    );
    for state in PlanStateType::ALL {
        assert_eq!(serde_json::to_value(state).expect("serialise"), json!(state.as_str()));
        let back: PlanStateType = serde_json::from_value(json!(state.as_str())).expect("parse");
        assert_eq!(back, state);
    }
}

#[test]
fn new_plan_is_read_from_empty_absent_or_its_name() {
    let parse = |v: Value| serde_json::from_value::<PlanStateType>(v).expect("parse");
    assert_eq!(parse(json!("")), PlanStateType::NewPlan);
    assert_eq!(parse(json!("NewPlan")), PlanStateType::NewPlan);
    let status: PlanStatus = serde_json::from_value(json!({})).expect("parse");
    assert_eq!(status.state, PlanStateType::NewPlan);
    assert_eq!(PlanStateType::NewPlan.to_string(), "NewPlan");
}

#[test]
fn only_new_plan_and_the_schedulable_states_are_not_terminal() {
    let running: Vec<_> = PlanStateType::ALL.into_iter().filter(|s| !s.is_terminal()).collect();
    assert_eq!(
        running,
        [PlanStateType::NewPlan, PlanStateType::SchedulableWait, PlanStateType::Schedulable]
    );
    let failures: Vec<_> = PlanStateType::ALL.into_iter().filter(|s| s.is_failure()).collect();
    assert_eq!(failures.len(), 10);
    assert!(!PlanStateType::Completed.is_failure());
}

#[test]
fn every_target_state_serialises_to_its_k0s_string() {
    let wire: Vec<Value> =
        TargetState::ALL.iter().map(|s| serde_json::to_value(s).expect("serialise")).collect();
    assert_eq!(
        wire,
        [
            json!("SignalPending"),
            json!("SignalSent"),
            json!("SignalCompleted"),
            json!("SignalApplyFailed"),
            json!("SignalMissingPlatform"),
            json!("SignalMissingNode"),
        ]
    );
    for state in TargetState::ALL {
        assert_eq!(serde_json::to_value(state).expect("serialise"), json!(state.as_str()));
        let back: TargetState = serde_json::from_value(json!(state.as_str())).expect("parse");
        assert_eq!(back, state);
        assert_eq!(state.to_string(), state.as_str());
    }
    assert!(!TargetState::SignalPending.is_terminal());
    assert!(!TargetState::SignalSent.is_terminal());
    assert!(TargetState::SignalCompleted.is_terminal());
}

#[test]
fn upgrade_strategy_types_are_lowercase_on_the_wire() {
    assert_eq!(
        serde_json::to_value(UpgradeStrategyType::Periodic).expect("ser"),
        json!("periodic")
    );
    assert_eq!(serde_json::to_value(UpgradeStrategyType::Cron).expect("ser"), json!("cron"));
}

// === Plan ===

/// A plan in the shape of the k0s documentation, every field used.
fn k0s_plan_json() -> Value {
    json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "Plan",
        "metadata": {"name": "autopilot"},
        "spec": {
            "id": "id123",
            "timestamp": "now",
            "commands": [
                {
                    "k0supdate": {
                        "version": "v1.30.2+k0s.0",
                        "forceupdate": true,
                        "platforms": {
                            "linux-amd64": {
                                "url": "https://github.com/k0sproject/k0s/releases/download/v1.30.2+k0s.0/k0s-v1.30.2+k0s.0-amd64",
                                "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                            },
                            "linux-arm64": {"url": "https://example.com/k0s-arm64"}
                        },
                        "targets": {
                            "controllers": {
                                "discovery": {"static": {"nodes": ["controller0", "controller1"]}},
                                "limits": {"concurrent": 1}
                            },
                            "workers": {
                                "discovery": {"selector": {"labels": "env=prod", "fields": "metadata.name=worker0"}},
                                "limits": {"concurrent": 3}
                            }
                        }
                    }
                },
                {
                    "airgapupdate": {
                        "version": "v1.30.2+k0s.0",
                        "platforms": {"linux-amd64": {"url": "https://example.com/bundle.tar"}},
                        "workers": {"discovery": {"selector": {}}, "limits": {"concurrent": 1}}
                    }
                }
            ]
        },
        "status": {
            "state": "SchedulableWait",
            "commands": [
                {
                    "id": 0,
                    "state": "SchedulableWait",
                    "k0supdate": {
                        "controllers": [
                            {"name": "controller0", "state": "SignalCompleted", "lastUpdatedTimestamp": "2024-05-01T12:00:00Z"},
                            {"name": "controller1", "state": "SignalSent", "lastUpdatedTimestamp": "2024-05-01T12:01:00Z"}
                        ],
                        "workers": [
                            {"name": "worker0", "state": "SignalPending", "lastUpdatedTimestamp": "2024-05-01T12:00:00Z"}
                        ]
                    }
                },
                {
                    "id": 1,
                    "state": "SchedulableWait",
                    "airgapupdate": {
                        "workers": [
                            {"name": "worker0", "state": "SignalPending", "lastUpdatedTimestamp": "2024-05-01T12:00:00Z"}
                        ]
                    }
                }
            ]
        }
    })
}

#[test]
fn a_k0s_shaped_plan_round_trips_unchanged() {
    let plan: Plan = serde_json::from_value(k0s_plan_json()).expect("parse");
    assert_eq!(serde_json::to_value(&plan).expect("serialise"), k0s_plan_json());
}

#[test]
fn a_k0s_shaped_plan_reads_into_the_expected_types() {
    let plan: Plan = serde_json::from_value(k0s_plan_json()).expect("parse");
    let k0s = plan.spec.commands[0].k0supdate.as_ref().expect("k0supdate");
    assert!(k0s.forceupdate);
    assert_eq!(k0s.platforms.len(), 2);
    assert_eq!(k0s.platforms["linux-arm64"].sha256, None);
    let controllers = k0s.targets.controllers.as_ref().expect("controllers");
    let nodes = &controllers.discovery.r#static.as_ref().expect("static").nodes;
    assert_eq!(nodes, &["controller0", "controller1"]);
    let workers = k0s.targets.workers.as_ref().expect("workers");
    assert_eq!(workers.limits.concurrent, Concurrency::Count(3));
    let selector = workers.discovery.selector.as_ref().expect("selector");
    assert_eq!(selector.labels.as_deref(), Some("env=prod"));

    let status = plan.status.as_ref().expect("status");
    assert_eq!(status.state, PlanStateType::SchedulableWait);
    let first = status.commands[0].k0supdate.as_ref().expect("k0supdate status");
    assert_eq!(first.controllers[1].state, TargetState::SignalSent);
    assert_eq!(
        first.controllers[1].last_updated_timestamp,
        Time("2024-05-01T12:01:00Z".parse().expect("timestamp"))
    );
}

#[test]
fn concurrency_reads_a_count_or_a_percentage_and_writes_it_back_the_same() {
    for (wire, parsed) in [
        (json!(3), Concurrency::Count(3)),
        (json!("25%"), Concurrency::Percent(25)),
        (json!("100%"), Concurrency::Percent(100)),
        (json!("2"), Concurrency::Count(2)),
        (json!(null), Concurrency::Count(1)),
    ] {
        let read: Concurrency = serde_json::from_value(wire.clone()).expect("parse");
        assert_eq!(read, parsed, "{wire}");
    }
    assert_eq!(serde_json::to_value(Concurrency::Percent(25)).expect("write"), json!("25%"));
    assert_eq!(serde_json::to_value(Concurrency::Count(4)).expect("write"), json!(4));
    for bad in [json!("0%"), json!("101%"), json!("%"), json!("+5%"), json!("x"), json!(-1)] {
        let error = serde_json::from_value::<Concurrency>(bad.clone()).expect_err("refused");
        assert!(!error.to_string().is_empty(), "{bad}");
    }
}

#[test]
fn a_percentage_rounds_down_and_never_goes_below_one_node() {
    assert_eq!(Concurrency::Percent(50).of(4), 2);
    assert_eq!(Concurrency::Percent(25).of(7), 1);
    assert_eq!(Concurrency::Percent(25).of(3), 1);
    assert_eq!(Concurrency::Percent(100).of(9), 9);
    assert_eq!(Concurrency::Percent(10).of(0), 1);
    assert_eq!(Concurrency::Count(0).of(5), 1);
    assert_eq!(Concurrency::Count(3).of(2), 3);
}

#[test]
fn limits_default_to_one_concurrent_node() {
    let target: PlanCommandTarget =
        serde_json::from_value(json!({"discovery": {}})).expect("parse");
    assert_eq!(target.limits.concurrent, Concurrency::Count(1));
    let target: PlanCommandTarget =
        serde_json::from_value(json!({"discovery": {}, "limits": {}})).expect("parse");
    assert_eq!(target.limits.concurrent, Concurrency::Count(1));
}

#[test]
fn false_forceupdate_and_missing_options_are_left_out() {
    let command = PlanCommand {
        k0supdate: Some(PlanCommandK0sUpdate {
            drain: None,
            drain_options: None,
            version: "v1".into(),
            forceupdate: false,
            platforms: BTreeMap::from([(
                "linux-amd64".to_owned(),
                PlanResourceUrl { url: "https://x/k0s".into(), sha256: None, ..Default::default() },
            )]),
            targets: PlanCommandTargets::default(),
            rollout: PlanCommandRollout {
                progress_timeout: None,
                gates: Vec::new(),
                prestage: false,
                prestage_concurrent: None,
            },
        }),
        airgapupdate: None,
        preflight: None,
    };
    assert_eq!(
        serde_json::to_value(&command).expect("serialise"),
        json!({"k0supdate": {"version": "v1", "platforms": {"linux-amd64": {"url": "https://x/k0s"}}, "targets": {}}})
    );
}

/// A command's (or template command's) own fields plus every rollout field, as on the wire.
fn with_rollout(command: Value) -> Value {
    let mut command = command.as_object().expect("an object").clone();
    command.extend(
        json!({
            "progressTimeout": "10m",
            "gates": [{"id": "settled", "after": "batch", "onFailure": "Halt", "settle": "2m"}],
            "prestage": true,
            "prestageConcurrent": 2,
        })
        .as_object()
        .expect("an object")
        .clone(),
    );
    Value::Object(command)
}

#[test]
fn the_rollout_fields_are_fields_of_the_command_itself_on_the_wire() {
    let expected = PlanCommandRollout {
        progress_timeout: Some("10m".into()),
        gates: vec![Gate {
            id: "settled".into(),
            after: GateAfter::Batch,
            settle: Some("2m".into()),
            ..Gate::default()
        }],
        prestage: true,
        prestage_concurrent: Some(2),
    };
    let workers = json!({"discovery": {"selector": {}}, "limits": {"concurrent": 1}});

    let wire =
        with_rollout(json!({"version": "v1", "platforms": {}, "targets": {}, "drain": "Never"}));
    let k0s: PlanCommandK0sUpdate = serde_json::from_value(wire.clone()).expect("parse");
    assert_eq!(k0s.rollout, expected);
    assert_eq!(serde_json::to_value(&k0s).expect("serialise"), wire);

    let wire = with_rollout(json!({"version": "v1", "platforms": {}, "workers": workers}));
    let airgap: PlanCommandAirgapUpdate = serde_json::from_value(wire.clone()).expect("parse");
    assert_eq!(airgap.rollout, expected);
    assert_eq!(serde_json::to_value(&airgap).expect("serialise"), wire);

    let wire = with_rollout(json!({"targets": {}, "drain": "Never"}));
    let k0s: AutopilotPlanCommandK0sUpdate = serde_json::from_value(wire.clone()).expect("parse");
    assert_eq!(k0s.rollout, expected);
    assert_eq!(serde_json::to_value(&k0s).expect("serialise"), wire);

    let wire = with_rollout(json!({"workers": workers}));
    let airgap: AutopilotPlanCommandAirgapUpdate =
        serde_json::from_value(wire.clone()).expect("parse");
    assert_eq!(airgap.rollout, expected);
    assert_eq!(serde_json::to_value(&airgap).expect("serialise"), wire);

    let yaml = "version: v1\nplatforms: {}\nworkers: {discovery: {}}\nprogressTimeout: 10m\n\
                gates: [{id: settled, after: batch, settle: 2m}]\nprestage: true\n\
                prestageConcurrent: 2\n";
    let airgap: PlanCommandAirgapUpdate = serde_saphyr::from_str(yaml).expect("parse");
    assert_eq!(airgap.rollout, expected);
}

#[test]
fn our_extra_status_fields_appear_only_when_set() {
    let now: jiff::Timestamp = "2024-05-01T12:00:00.750Z".parse().expect("timestamp");
    let mut target = TargetStatus::new("worker0", TargetState::SignalSent, now);
    assert_eq!(
        serde_json::to_value(&target).expect("serialise"),
        json!({"name": "worker0", "state": "SignalSent", "lastUpdatedTimestamp": "2024-05-01T12:00:00Z"})
    );
    target.phase = Some(SignalPhase::Restarting);
    target.reason = Some("waiting for the restart".into());
    assert_eq!(
        serde_json::to_value(&target).expect("serialise"),
        json!({
            "name": "worker0",
            "state": "SignalSent",
            "lastUpdatedTimestamp": "2024-05-01T12:00:00Z",
            "phase": "Restart",
            "reason": "waiting for the restart"
        })
    );

    let status = PlanStatus { state: PlanStateType::Completed, ..PlanStatus::default() };
    assert_eq!(
        serde_json::to_value(&status).expect("serialise"),
        json!({"state": "Completed", "commands": []})
    );
    let status = PlanStatus { observed_generation: Some(3), ..status };
    assert_eq!(
        serde_json::to_value(&status).expect("serialise"),
        json!({"state": "Completed", "commands": [], "observedGeneration": 3})
    );
}

// === ControlNode ===

#[test]
fn a_control_node_has_no_spec_on_the_wire() {
    let mut node = ControlNode::new("controller0");
    node.status = Some(ControlNodeStatus {
        addresses: vec![
            NodeAddress { type_: "Hostname".into(), address: "controller0".into() },
            NodeAddress { type_: "InternalIP".into(), address: "10.0.0.1".into() },
        ],
        k0s_version: Some("v1.30.1+k0s.0".into()),
    });
    let wire = json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "ControlNode",
        "metadata": {"name": "controller0"},
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "controller0"},
                {"type": "InternalIP", "address": "10.0.0.1"}
            ],
            "k0sVersion": "v1.30.1+k0s.0"
        }
    });
    assert_eq!(serde_json::to_value(&node).expect("serialise"), wire);
    let back: ControlNode = serde_json::from_value(wire).expect("parse");
    assert_eq!(back, node);
    assert_eq!(
        serde_json::to_value(ControlNode::new("c")).expect("serialise"),
        json!({"apiVersion": "autopilot.k0sproject.io/v1beta2", "kind": "ControlNode", "metadata": {"name": "c"}})
    );
}

#[test]
fn internal_ip_is_the_first_internal_ip_address() {
    let mut node = ControlNode::new("controller0");
    assert_eq!(node.internal_ip(), None);
    node.status = Some(ControlNodeStatus {
        addresses: vec![
            NodeAddress { type_: "Hostname".into(), address: "host0".into() },
            NodeAddress { type_: "InternalIP".into(), address: "10.0.0.1".into() },
            NodeAddress { type_: "InternalIP".into(), address: "10.0.0.2".into() },
        ],
        k0s_version: None,
    });
    assert_eq!(node.internal_ip(), Some("10.0.0.1"));
    assert_eq!(node.hostname(), Some("host0"));
    assert_eq!(node.k0s_version(), None);
}

#[test]
fn a_control_node_reads_unknown_fields_and_a_missing_status() {
    let node: ControlNode = serde_json::from_value(json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "ControlNode",
        "metadata": {"name": "c", "annotations": {"autopilot.k0sproject.io/mode": "controller"}},
        "spec": {"ignored": true}
    }))
    .expect("parse");
    assert_eq!(node.status, None);
    assert_eq!(
        node.metadata.annotations.expect("annotations")[keys::ANNOTATION_MODE],
        "controller"
    );
}

#[test]
fn resource_metadata_matches_the_keys() {
    assert_eq!(ControlNode::api_version(&()), keys::API_VERSION);
    assert_eq!(ControlNode::kind(&()), "ControlNode");
    assert_eq!(ControlNode::plural(&()), "controlnodes");
    assert_eq!(Plan::api_version(&()), keys::API_VERSION);
    assert_eq!(Plan::plural(&()), "plans");
    assert_eq!(UpdateConfig::plural(&()), "updateconfigs");
    assert_eq!(ControlNode::crd_name(), keys::CRD_CONTROL_NODES);
    assert_eq!(Plan::crd_name(), keys::CRD_PLANS);
    assert_eq!(UpdateConfig::crd_name(), keys::CRD_UPDATE_CONFIGS);
}

// === UpdateConfig ===

#[test]
fn update_config_defaults_channel_and_server() {
    let spec: UpdateConfigSpec = serde_json::from_value(json!({})).expect("parse");
    assert_eq!(spec, UpdateConfigSpec::default());
    assert_eq!(spec.channel, "stable");
    assert_eq!(spec.update_server, "https://updates.k0sproject.io");
}

#[test]
fn a_k0s_shaped_update_config_round_trips_unchanged() {
    let wire = json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "UpdateConfig",
        "metadata": {"name": "example"},
        "spec": {
            "channel": "edge_release",
            "updateServer": "https://updates.example.com",
            "upgradeStrategy": {
                "type": "periodic",
                "periodic": {"days": ["Monday", "Tuesday"], "startTime": "01:00", "length": "2h"}
            },
            "planSpec": {
                "commands": [
                    {
                        "k0supdate": {
                            "forceupdate": true,
                            "targets": {
                                "controllers": {"discovery": {"static": {"nodes": ["c0"]}}, "limits": {"concurrent": 1}},
                                "workers": {"discovery": {"selector": {"labels": "a=b"}}, "limits": {"concurrent": 2}}
                            }
                        }
                    },
                    {"airgapupdate": {"workers": {"discovery": {"selector": {}}, "limits": {"concurrent": 1}}}}
                ]
            }
        }
    });
    let config: UpdateConfig = serde_json::from_value(wire.clone()).expect("parse");
    let strategy = config.spec.upgrade_strategy.as_ref().expect("strategy");
    assert_eq!(strategy.r#type, Some(UpgradeStrategyType::Periodic));
    assert_eq!(serde_json::to_value(&config).expect("serialise"), wire);
}

// === CRDs ===

#[test]
fn crds_are_the_three_autopilot_crds_in_name_order() {
    let names: Vec<String> =
        crds().into_iter().map(|crd| crd.metadata.name.expect("name")).collect();
    assert_eq!(names, [keys::CRD_CONTROL_NODES, keys::CRD_PLANS, keys::CRD_UPDATE_CONFIGS]);
    for crd in crds() {
        assert_eq!(crd.spec.group, keys::GROUP);
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, keys::VERSION);
        assert!(version.served && version.storage);
    }
}

#[test]
fn every_crd_has_a_status_subresource() {
    let has_status = |crd: &CustomResourceDefinition| {
        crd.spec.versions[0].subresources.as_ref().is_some_and(|s| s.status.is_some())
    };
    assert!(has_status(&ControlNode::crd()));
    assert!(has_status(&Plan::crd()));
    assert!(has_status(&UpdateConfig::crd()));
}

#[test]
fn update_config_status_and_min_interval_keep_their_wire_names() {
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).expect("a time"));
    let status = UpdateConfigStatus {
        observed_generation: Some(2),
        conditions: Vec::new(),
        last_check: Some(UpdateCheckStatus {
            time: at(0),
            reason: "UpToDate".to_owned(),
            message: String::new(),
        }),
        running_version: Some("v1.35.1+k0s.0".to_owned()),
        offered_version: Some("v1.35.1+k0s.0".to_owned()),
        end_of_life: Some(EndOfLifeStatus {
            date: "2026-01-15".to_owned(),
            past: Some(true),
            message: String::new(),
        }),
        last_patch_update: Some(at(60)),
        last_minor_update: None,
        next_update_allowed: Some(at(120)),
        last_plan_id: Some("60".to_owned()),
    };
    assert_eq!(
        serde_json::to_value(&status).expect("serialisable"),
        serde_json::json!({
            "observedGeneration": 2,
            "lastCheck": { "time": "1970-01-01T00:00:00Z", "reason": "UpToDate" },
            "runningVersion": "v1.35.1+k0s.0",
            "offeredVersion": "v1.35.1+k0s.0",
            "endOfLife": { "date": "2026-01-15", "past": true },
            "lastPatchUpdate": "1970-01-01T00:01:00Z",
            "nextUpdateAllowed": "1970-01-01T00:02:00Z",
            "lastPlanId": "60",
        })
    );
    let strategy: UpgradeStrategy = serde_json::from_value(serde_json::json!({
        "type": "periodic",
        "minInterval": { "patch": "24h", "minor": "720h" },
    }))
    .expect("a strategy");
    assert_eq!(
        strategy.min_interval,
        Some(MinInterval { patch: Some("24h".to_owned()), minor: Some("720h".to_owned()) })
    );
}

#[test]
fn update_config_printer_columns_show_ready_last_check_offered_and_eol() {
    let crd = UpdateConfig::crd();
    let columns = crd.spec.versions[0].additional_printer_columns.as_ref().expect("columns");
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["Ready", "Last Check", "Offered", "Past EOL", "Age"]);
    assert_eq!(columns[0].json_path, ".status.conditions[?(@.type==\"Ready\")].status");
    assert_eq!(columns[3].json_path, ".status.endOfLife.past");
}

#[test]
fn plan_printer_columns_are_state_command_progress_and_age() {
    let crd = Plan::crd();
    let columns = crd.spec.versions[0].additional_printer_columns.as_ref().expect("columns");
    let columns: Vec<(&str, &str)> =
        columns.iter().map(|c| (c.name.as_str(), c.json_path.as_str())).collect();
    assert_eq!(
        columns,
        [
            ("State", ".status.state"),
            ("Command", ".status.commands[?(@.state!=\"Completed\")].id"),
            ("Progress", ".status.progress"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}

fn root_schema(crd: &CustomResourceDefinition) -> Value {
    let schema = crd.spec.versions[0].schema.as_ref().expect("schema");
    serde_json::to_value(schema.open_api_v3_schema.as_ref().expect("openAPIV3Schema"))
        .expect("serialise")
}

fn at<'a>(schema: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(schema, |node, key| &node[key])
}

#[test]
fn the_schemas_carry_the_validation_we_promise() {
    let plan = root_schema(&Plan::crd());
    let k0s = at(&plan, &["properties", "spec", "properties", "commands", "items", "properties"]);
    let k0s = &k0s["k0supdate"]["properties"];
    let url = &k0s["platforms"]["additionalProperties"]["properties"]["sha256"];
    assert_eq!(url["pattern"], json!("^[a-fA-F0-9]{64}$"));
    let limits = at(k0s, &["targets", "properties", "workers", "properties", "limits"]);
    assert_eq!(limits["default"], json!({"concurrent": 1}));
    assert_eq!(limits["properties"]["concurrent"]["minimum"], json!(1.0));
    assert_eq!(limits["properties"]["concurrent"]["default"], json!(1));
    assert_eq!(at(&plan, &["required"]), &json!(["spec"]));

    let state = at(&plan, &["properties", "status", "properties", "state"]);
    assert_eq!(state["enum"].as_array().expect("enum").len(), PlanStateType::ALL.len());

    let update_config = root_schema(&UpdateConfig::crd());
    let spec = at(&update_config, &["properties", "spec", "properties"]);
    assert_eq!(spec["channel"]["default"], json!("stable"));
    assert_eq!(spec["updateServer"]["default"], json!("https://updates.k0sproject.io"));
    assert_eq!(
        spec["upgradeStrategy"]["properties"]["type"]["enum"],
        json!(["periodic", "cron", null])
    );

    let control_node = root_schema(&ControlNode::crd());
    let properties: Vec<&String> =
        control_node["properties"].as_object().expect("properties").keys().collect();
    assert_eq!(properties, ["status"], "a ControlNode has only a status");
}

#[test]
fn the_plan_schema_refuses_an_empty_id_version_and_a_url_without_http_or_https() {
    let plan = root_schema(&Plan::crd());
    let spec = at(&plan, &["properties", "spec", "properties"]);
    assert_eq!(spec["id"]["minLength"], json!(1));
    let command = at(spec, &["commands", "items", "properties"]);
    for kind in ["k0supdate", "airgapupdate"] {
        let update = &command[kind]["properties"];
        assert_eq!(update["version"]["minLength"], json!(1), "{kind}");
        assert_eq!(update["version"]["pattern"], json!(crate::payload::VERSION_PATTERN), "{kind}");
        let url = &update["platforms"]["additionalProperties"]["properties"]["url"];
        assert_eq!(url["pattern"], json!(r"^https?://[^\s/?#]+\S*$"), "{kind}");
        assert_eq!(url["pattern"], json!(crate::payload::URL_PATTERN), "{kind}");
    }
    // The frozen copy in the status is the same type: a run's status always validates,
    // because the copy comes from a spec that did.
    let frozen = at(&plan, &["properties", "status", "properties", "commands", "items"]);
    let frozen = at(frozen, &["properties", "frozen", "properties", "k0supdate", "properties"]);
    assert_eq!(frozen["version"]["minLength"], json!(1));
}

#[test]
fn an_update_config_template_has_no_version_or_url_the_updater_must_fill_in() {
    // The updater fills `version` and the platform URLs from the update server; the
    // template an operator writes must not be required to carry them.
    let update_config = root_schema(&UpdateConfig::crd());
    let template = at(
        &update_config,
        &["properties", "spec", "properties", "planSpec", "properties", "commands", "items"],
    );
    for kind in ["k0supdate", "airgapupdate"] {
        let update = &template["properties"][kind];
        assert!(update["properties"].get("version").is_none(), "{kind}: {update}");
        assert!(update["properties"].get("platforms").is_none(), "{kind}: {update}");
        let required = update["required"].as_array().cloned().unwrap_or_default();
        assert!(!required.contains(&json!("version")), "{kind}: {update}");
    }
}

#[test]
fn plan_and_template_commands_share_the_rollout_fields_with_one_schema() {
    let plan = root_schema(&Plan::crd());
    let plan = at(&plan, &["properties", "spec", "properties", "commands", "items"]);
    let update_config = root_schema(&UpdateConfig::crd());
    let template = at(
        &update_config,
        &["properties", "spec", "properties", "planSpec", "properties", "commands", "items"],
    );
    let shared = &plan["properties"]["k0supdate"]["properties"];
    for commands in [plan, template] {
        for kind in ["k0supdate", "airgapupdate"] {
            let update = &commands["properties"][kind];
            assert!(update.get("allOf").is_none(), "{kind}: {update}");
            let properties = &update["properties"];
            assert_eq!(properties["prestageConcurrent"]["minimum"], json!(1.0), "{kind}");
            for field in ["progressTimeout", "gates", "prestage", "prestageConcurrent"] {
                assert_eq!(properties[field], shared[field], "{kind}.{field}");
            }
        }
    }
}

/// Every way `schema` (at `path`) breaks the apiserver's structural-schema rules.
///
/// The rules checked are those of `apiextensions-apiserver` (`schema/validation.go`,
/// `ValidateStructural` and `validateCustomResourceDefinitionOpenAPISchema`): every node
/// has a type unless it is int-or-string or preserves unknown fields; no `$ref`,
/// `definitions` or `$schema`; `properties` and `additionalProperties` are exclusive and
/// `additionalProperties: false` is not allowed; arrays have `items`; `uniqueItems` is not
/// true; the logical junctors carry no types, defaults, descriptions or nullability;
/// `metadata` is not constrained beyond `name`/`generateName`. It also checks, as our own
/// consistency rule, that every `required` name is a declared property.
fn structural_violations(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        out.push(format!("{path}: not an object"));
        return;
    };
    for forbidden in ["$ref", "definitions", "$defs", "$schema", "patternProperties"] {
        if node.contains_key(forbidden) {
            out.push(format!("{path}: has {forbidden}"));
        }
    }
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    match node.get("type").and_then(Value::as_str) {
        Some("object" | "array" | "string" | "integer" | "number" | "boolean") => {}
        Some(other) => out.push(format!("{path}: unknown type {other:?}")),
        None if int_or_string || preserve => {}
        None => out.push(format!("{path}: has no type")),
    }
    if node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(false)) {
        out.push(format!("{path}: x-kubernetes-preserve-unknown-fields is false"));
    }
    if node.get("uniqueItems") == Some(&json!(true)) {
        out.push(format!("{path}: uniqueItems is true"));
    }
    if let Some(additional) = node.get("additionalProperties") {
        if node.contains_key("properties") {
            out.push(format!("{path}: has both properties and additionalProperties"));
        }
        match additional {
            Value::Bool(false) => out.push(format!("{path}: additionalProperties is false")),
            Value::Bool(true) => {}
            schema => structural_violations(schema, &format!("{path}.additionalProperties"), out),
        }
    }
    if node.get("type") == Some(&json!("array")) {
        match node.get("items") {
            Some(items) => structural_violations(items, &format!("{path}.items"), out),
            None => out.push(format!("{path}: array without items")),
        }
    }
    if let Some(properties) = node.get("properties") {
        let Some(properties) = properties.as_object() else {
            out.push(format!("{path}: properties is not an object"));
            return;
        };
        for (name, property) in properties {
            structural_violations(property, &format!("{path}.{name}"), out);
        }
    }
    if let Some(required) = node.get("required") {
        let names = required.as_array().map(|r| r.iter().filter_map(Value::as_str));
        let properties = node.get("properties").and_then(Value::as_object);
        for name in names.into_iter().flatten() {
            if !properties.is_some_and(|p| p.contains_key(name)) {
                out.push(format!("{path}: required {name:?} is not a property"));
            }
        }
    }
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        let branches: Vec<&Value> = match node.get(junctor) {
            None => continue,
            Some(Value::Array(items)) => items.iter().collect(),
            Some(single) => vec![single],
        };
        for (i, branch) in branches.into_iter().enumerate() {
            for key in ["type", "default", "description", "nullable", "additionalProperties"] {
                if branch.get(key).is_some() {
                    out.push(format!("{path}.{junctor}[{i}]: has {key}"));
                }
            }
        }
    }
}

#[test]
fn every_crd_schema_is_structural() {
    for crd in crds() {
        let name = crd.metadata.name.clone().expect("name");
        let schema = root_schema(&crd);
        let mut violations = Vec::new();
        structural_violations(&schema, &name, &mut violations);
        assert_eq!(violations, Vec::<String>::new(), "{name} is not structural");

        assert_eq!(schema["type"], json!("object"), "{name}: root must be an object");
        if let Some(metadata) = schema["properties"].get("metadata") {
            let allowed = ["type", "properties"];
            let keys: Vec<&String> = metadata.as_object().expect("object").keys().collect();
            assert!(keys.iter().all(|k| allowed.contains(&k.as_str())), "{name}: {keys:?}");
        }
        // The schema must also survive the round trip through the typed k8s-openapi model,
        // which is what the apiserver receives.
        let typed: JSONSchemaProps = serde_json::from_value(schema.clone()).expect("typed");
        assert_eq!(serde_json::to_value(typed).expect("serialise"), schema);
    }
}

#[test]
fn the_structural_check_catches_what_the_apiserver_rejects() {
    let mut violations = Vec::new();
    let bad = json!({
        "type": "object",
        "properties": {
            "untyped": {"description": "no type"},
            "referenced": {"$ref": "#/definitions/x", "type": "object"},
            "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "list": {"type": "array"},
            "choice": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
        },
        "required": ["missing"]
    });
    structural_violations(&bad, "bad", &mut violations);
    violations.sort();
    assert_eq!(
        violations,
        [
            "bad.both: has both properties and additionalProperties",
            "bad.choice.anyOf[0]: has type",
            "bad.choice.anyOf[1]: has type",
            "bad.choice: has no type",
            "bad.list: array without items",
            "bad.referenced: has $ref",
            "bad.untyped: has no type",
            "bad: required \"missing\" is not a property",
        ]
    );
}

#[test]
fn every_schema_property_has_a_description() {
    fn walk(schema: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                let here = format!("{path}.{name}");
                if property.get("description").and_then(Value::as_str).is_none_or(str::is_empty) {
                    out.push(here.clone());
                }
                walk(property, &here, out);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(inner) = schema.get(key) {
                walk(inner, path, out);
            }
        }
    }
    for crd in crds() {
        let mut undocumented = Vec::new();
        walk(&root_schema(&crd), "", &mut undocumented);
        assert_eq!(undocumented, Vec::<String>::new(), "{:?}", crd.metadata.name);
    }
}

#[test]
fn the_plan_schema_describes_the_preflight_command() {
    let schema = root_schema(&Plan::crd());
    let command = at(&schema, &["properties", "spec", "properties", "commands", "items"]);
    let preflight = at(command, &["properties", "preflight"]);
    assert!(preflight["description"].as_str().is_some_and(|d| d.contains("PreflightFailed")));
    let check = at(preflight, &["properties", "checks", "items", "properties"]);
    assert_eq!(
        check["command"]["properties"]["id"]["enum"],
        json!([
            "scheduler",
            "diskSpaceAvailable",
            "tcpDial",
            "portAvailable",
            "httpGet",
            "fileExists",
            "k0sVersion",
            "exec"
        ])
    );
    assert_eq!(check["command"]["properties"]["timeout"]["default"], json!(15));
    assert_eq!(check["command"]["properties"]["timeout"]["minimum"].as_f64(), Some(-1.0));
    assert_eq!(
        check["command"]["properties"]["data"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    let result = at(check, &["results", "items", "properties"]);
    assert_eq!(result["status"]["enum"], json!(["success", "warn", "error"]));
    assert_eq!(result["message"]["x-kubernetes-preserve-unknown-fields"], json!(true));
    for field in ["error", "statusCode", "boolExpr"] {
        let described = result["condition"]["properties"][field]["description"].as_str();
        assert!(described.is_some_and(|d| !d.is_empty()), "condition.{field}");
    }
    assert_eq!(preflight["properties"]["onWarn"]["enum"], json!(["Proceed", "Block"]));
}

#[test]
fn the_embedded_crds_are_the_generated_ones() {
    assert!(
        CRDS_JSONL == crds_jsonl(),
        "{CRDS_JSONL_PATH} differs from the CRDs the types generate: run `cargo xtask crdgen`"
    );
    let names: Vec<String> = CRDS_JSONL
        .lines()
        .map(|line| {
            let crd: CustomResourceDefinition = serde_json::from_str(line).expect("a CRD");
            crd.metadata.name.expect("a name")
        })
        .collect();
    assert_eq!(
        names,
        [
            "controlnodes.autopilot.k0sproject.io",
            "plans.autopilot.k0sproject.io",
            "updateconfigs.autopilot.k0sproject.io"
        ]
    );
}

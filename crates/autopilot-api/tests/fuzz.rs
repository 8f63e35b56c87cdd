//! Fuzz targets of the API crate: arbitrary and mutated Plan, UpdateConfig and signal
//! documents through the types and the signal decoder, arbitrary strings through the
//! payload and duration rules. No input panics; every refusal says why.

use autopilot_api::fuzz::{config, json, mutated, word};
use autopilot_api::signal::{self, SignalData};
use autopilot_api::{Plan, UpdateConfig, duration, payload};
use proptest::prelude::*;
use serde_json::{Value, json};

fn valid_plan() -> Value {
    json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "Plan",
        "metadata": { "name": "autopilot" },
        "spec": {
            "id": "id-1",
            "timestamp": "now",
            "commands": [{
                "k0supdate": {
                    "version": "v1.35.1+k0s.0",
                    "forceupdate": false,
                    "platforms": { "linux-amd64": {
                        "url": "https://127.0.0.1:8443/k0s", "sha256": "ab".repeat(32) } },
                    "targets": {
                        "controllers": { "discovery": { "static": { "nodes": ["c0", "c1"] } } },
                        "workers": {
                            "discovery": { "selector": { "labels": "role=worker" } },
                            "limits": { "concurrent": "25%", "maxFailures": 1, "canary": 1, "soak": "1m" },
                        },
                    },
                },
            }, {
                "airgapupdate": {
                    "version": "v1.35.1+k0s.0",
                    "platforms": { "linux-arm64": { "url": "http://127.0.0.1/bundle.tar" } },
                    "workers": { "discovery": { "static": { "nodes": ["w0"] } } },
                },
            }],
        },
    })
}

fn valid_update_config() -> Value {
    json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "UpdateConfig",
        "metadata": { "name": "k0s" },
        "spec": {
            "channel": "stable",
            "updateServer": "https://127.0.0.1:8443",
            "upgradeStrategy": { "type": "periodic", "periodic": {
                "days": ["Monday", "Friday"], "startTime": "02:00", "length": "2h" } },
            "planSpec": { "commands": [{ "k0supdate": { "targets": {
                "controllers": { "discovery": { "static": { "nodes": ["c0"] } } } } } }] },
        },
    })
}

fn valid_signal() -> Value {
    json!({
        "planId": "id-1",
        "created": "2026-11-23T12:00:00Z",
        "runId": "uid/1",
        "command": { "id": 0, "k0supdate": {
            "url": "https://127.0.0.1/k0s", "version": "v1.35.1+k0s.0",
            "sha256": "ab".repeat(32), "forceupdate": false } },
        "status": { "status": "Downloading", "timestamp": "2026-11-23T12:00:01Z" },
    })
}

/// Decoding `value` as `T`: no panic, and a refusal names a reason.
fn decodes_or_says_why<T: serde::de::DeserializeOwned>(value: Value) -> Result<(), TestCaseError> {
    if let Err(err) = serde_json::from_value::<T>(value) {
        prop_assert!(!err.to_string().trim().is_empty(), "a refusal without a reason");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn plan_documents_decode_or_say_why(doc in prop_oneof![json(4), mutated(valid_plan())]) {
        decodes_or_says_why::<Plan>(doc)?;
    }

    #[test]
    fn decoded_plans_survive_a_round_trip(doc in mutated(valid_plan())) {
        if let Ok(plan) = serde_json::from_value::<Plan>(doc) {
            let written = serde_json::to_value(&plan).expect("a Plan serialises");
            let again: Plan = serde_json::from_value(written.clone())
                .expect("what the types write, they read back");
            prop_assert_eq!(serde_json::to_value(&again).expect("a Plan serialises"), written);
        }
    }

    #[test]
    fn update_configs_decode_or_say_why(
        doc in prop_oneof![json(4), mutated(valid_update_config())],
    ) {
        decodes_or_says_why::<UpdateConfig>(doc)?;
    }

    #[test]
    fn signals_decode_or_say_why(
        data in prop_oneof![
            mutated(valid_signal()).prop_map(|v| v.to_string()),
            json(3).prop_map(|v| v.to_string()),
            any::<String>(),
        ],
        version in prop_oneof![Just("v2".to_owned()), word()],
    ) {
        match signal::decode(&version, &data) {
            Ok(decoded) => {
                // What decodes is valid and encodes back to the same signal.
                prop_assert!(signal::validate(&decoded).is_ok());
                let (version, text) = signal::encode(&decoded);
                let again: SignalData = signal::decode(&version, &text)
                    .expect("an encoded valid signal decodes");
                prop_assert_eq!(again, decoded);
            }
            Err(err) => prop_assert!(!err.to_string().trim().is_empty()),
        }
    }

    #[test]
    fn payload_rules_answer_any_string(text in prop_oneof![word(), any::<String>()]) {
        // A problem, when there is one, is a sentence.
        if let Some(problem) = payload::url_problem(&text) {
            prop_assert!(!problem.trim().is_empty());
        }
        if let Some(problem) = payload::version_problem(&text) {
            prop_assert!(!problem.trim().is_empty());
        }
    }

    #[test]
    fn durations_parse_or_say_why(
        text in prop_oneof![word(), "[0-9hmsu.µn-]{0,12}", any::<String>()],
    ) {
        if let Err(reason) = duration::parse(&text) {
            prop_assert!(!reason.trim().is_empty());
        }
    }
}

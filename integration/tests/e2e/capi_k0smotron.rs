//! Cluster API's in-place updates, as k0smotron drives them (docs/updating-a-cluster.md,
//! "Driven by Cluster API (k0smotron)"): its requests replayed against the real control plane
//! and real node agents. One controller and two workers; each worker is a Machine k0smotron
//! updates in place, one after the other:
//!
//! - worker-0 (no trusted keys): k0smotron finds no Plan and creates its Plan (one static
//!   node, the same https URL under its three platforms, no sha256, no signature), polls it
//!   every 15 s and sees only the states it accepts until `Completed`. worker-0 runs v2, the
//!   Plan carries the `UnverifiedPayload` Warning and its `Ready` condition.
//! - worker-1 (trusted keys): k0smotron finds the completed Plan of worker-0, deletes it and
//!   creates worker-1's. worker-1 is never signalled, and the Plan ends `ApplyFailed`, a
//!   state k0smotron reports as an error, with the sentence of the docs naming what to
//!   configure, in the command's description and in the `Stalled` condition.

use std::collections::BTreeSet;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_engine::plan::UNSIGNED_PLAN_HINT;
use integration::http::{FileServer, Serve};
use serde_json::{Value, json};

use crate::support::*;
use crate::update_signed_payload::p256_key;

/// How long k0smotron waits before it reads the Plan again (`RetryAfterSeconds: 15` of its
/// in-place update hook).
const RETRY: Duration = Duration::from_secs(15);

/// How long one Machine's update may take in this replay.
const MACHINE_DEADLINE: Duration = Duration::from_secs(240);

const PLANS: &str = "/apis/autopilot.k0sproject.io/v1beta2/plans";

/// The Plan k0smotron creates for one Machine: the fields, values and layout its
/// `CreatePlan` posts (k0smotron v2.1, `internal/autopilot`), for a custom download URL
/// (then every platform gets that same URL).
fn k0smotron_plan(machine: &str, version: &str, url: &str, target: &str, unix: i64) -> Value {
    json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "Plan",
        "metadata": { "name": "autopilot" },
        "spec": {
            "id": format!("id-{machine}-{version}-{unix}"),
            "timestamp": unix.to_string(),
            "commands": [{
                "k0supdate": {
                    "version": version,
                    "platforms": {
                        "linux-amd64": { "url": url },
                        "linux-arm64": { "url": url },
                        "linux-arm": { "url": url }
                    },
                    "targets": {
                        target: { "discovery": { "static": { "nodes": [machine] } } }
                    }
                }
            }]
        }
    })
}

/// What k0smotron makes of a Plan it read back (`IsPlanCompleted`).
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Completed,
    InProgress,
    /// An error: no state at all, or a state other than the four it knows.
    Unexpected(String),
}

fn verdict(plan: &Value) -> Verdict {
    match plan["status"]["state"].as_str() {
        None => Verdict::Unexpected("autopilot plan state not found".to_owned()),
        Some("Completed") => Verdict::Completed,
        Some("NewPlan" | "Schedulable" | "SchedulableWait") => Verdict::InProgress,
        Some(other) => Verdict::Unexpected(format!("unexpected autopilot plan state: {other}")),
    }
}

/// How k0smotron's update of one Machine ended.
#[derive(Debug)]
struct Outcome {
    /// `Ok`: "Extension completed updating Machine"; `Err`: the error it reports.
    result: Result<(), String>,
    /// Every state it read, in order.
    seen: Vec<String>,
    /// The Plan as it read it last.
    plan: Value,
}

/// Replays k0smotron's in-place update hook for `machine` until it reports success or an
/// error: read the Plan; none: create it; not completed: come back in 15 s; completed for
/// another machine or version: delete it and create this machine's.
async fn update_machine(
    client: &kube::Client,
    machine: &str,
    target: &str,
    version: &str,
    url: &str,
) -> Outcome {
    let deadline = tokio::time::Instant::now() + MACHINE_DEADLINE;
    let mut seen = Vec::new();
    loop {
        assert!(tokio::time::Instant::now() < deadline, "{machine}: no outcome; read {seen:?}");
        let Some(plan) = get_plan(client).await else {
            create(client, machine, version, url, target).await;
            tokio::time::sleep(RETRY).await;
            continue;
        };
        seen.push(plan["status"]["state"].as_str().unwrap_or("<none>").to_owned());
        match verdict(&plan) {
            Verdict::Unexpected(error) => return Outcome { result: Err(error), seen, plan },
            Verdict::InProgress => tokio::time::sleep(RETRY).await,
            Verdict::Completed => {
                let command = &plan["spec"]["commands"][0]["k0supdate"];
                let nodes: BTreeSet<String> = command["targets"]
                    .as_object()
                    .into_iter()
                    .flat_map(|targets| targets.values())
                    .flat_map(|t| t["discovery"]["static"]["nodes"].as_array().cloned())
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect();
                if nodes.contains(machine) && command["version"] == version {
                    return Outcome { result: Ok(()), seen, plan };
                }
                delete_as_k0smotron(client).await;
                create(client, machine, version, url, target).await;
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

async fn get_plan(client: &kube::Client) -> Option<Value> {
    let request = http::Request::get(format!("{PLANS}/autopilot")).body(Vec::new()).expect("GET");
    match client.request_text(request).await {
        Ok(text) => Some(serde_json::from_str(&text).expect("a Plan in JSON")),
        Err(kube::Error::Api(status)) if status.code == 404 => None,
        Err(e) => panic!("reading the Plan: {e}"),
    }
}

async fn create(client: &kube::Client, machine: &str, version: &str, url: &str, target: &str) {
    let unix = jiff::Timestamp::now().as_second();
    let body = serde_json::to_vec(&k0smotron_plan(machine, version, url, target, unix))
        .expect("the Plan's JSON");
    let request = http::Request::post(PLANS)
        .header("Content-Type", "application/json")
        .body(body)
        .expect("POST");
    client.request_text(request).await.expect("creating the Plan as k0smotron does");
}

async fn delete_as_k0smotron(client: &kube::Client) {
    let request =
        http::Request::delete(format!("{PLANS}/autopilot")).body(Vec::new()).expect("DELETE");
    client.request_text(request).await.expect("deleting the Plan as k0smotron does");
    // k0smotron creates the next one at once; the API server may still hold the old one
    // while its finalizers run (there are none), so wait until it is gone.
    integration::wait_for(Duration::from_secs(30), "the old Plan to be gone", || async {
        Ok(get_plan(client).await.is_none().then_some(()))
    })
    .await
    .expect("the old Plan gone");
}

/// The condition `type_` of a Plan read as JSON: `(status, reason, message)`.
fn condition(plan: &Value, type_: &str) -> (String, String, String) {
    let found = plan["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {plan:#}"));
    let text = |key: &str| found[key].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

#[tokio::test]
async fn k0smotron_in_place_updates_complete_unsigned_and_say_what_to_configure_when_signed() {
    let (v2_bytes, _sha) = v2_build();
    let server = FileServer::start_tls(Serve::Body(v2_bytes)).await.expect("an https server");
    let url = format!("{}/k0s", server.base_url());
    let work = tempfile::tempdir().expect("tempdir");
    let ca = work.path().join("download-ca.pem");
    std::fs::write(&ca, server.ca_pem().expect("a tls server")).expect("the CA file");
    let keys_dir = work.path().join("trusted-keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    p256_key(work.path(), "release", Some(&keys_dir.join("cosign.pub")));
    seal_keys_dir(&keys_dir);
    let (ca_arg, keys_arg) = (ca.display().to_string(), keys_dir.display().to_string());
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers } =
        FleetBuilder::new("capi-k0smotron")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .agents(Agents::Real)
            .node_args("worker-0", &["--download-ca-file", &ca_arg])
            .node_args("worker-1", &["--download-ca-file", &ca_arg, "--payload-keys", &keys_arg])
            .start()
            .await
            .unwrap();
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    integration::wait_for(STARTUP, "worker-1 to publish the key it requires", || async {
        let node = nodes.get("worker-1").await?;
        Ok(node.metadata.annotations.and_then(|a| a.get(keys::ANNOTATION_PAYLOAD_KEYS).cloned()))
    })
    .await
    .expect("worker-1's keys");

    // worker-0: no keys, the unsigned Plan runs to the end.
    let done = update_machine(&client, "worker-0", "workers", V2, &url).await;
    assert_eq!(done.result, Ok(()), "{done:#?}");
    assert!(
        done.seen.iter().all(|s| ["SchedulableWait", "Schedulable", "Completed"].contains(&&**s)),
        "k0smotron read only states it accepts: {:?}",
        done.seen
    );
    wait_node_version(&client, "worker-0", V2).await.unwrap();
    assert_eq!(condition(&done.plan, "Ready").0, "True", "{:#}", done.plan);
    let warning = wait_plan_event(&client, "UnverifiedPayload").await.unwrap();
    assert!(warning.contains("linux-amd64"), "{warning}");

    // worker-1: trusted keys; k0smotron replaces worker-0's completed Plan with its own,
    // which ends ApplyFailed with the docs' sentence.
    let refused = update_machine(&client, "worker-1", "workers", V2, &url).await;
    assert_eq!(
        refused.result,
        Err("unexpected autopilot plan state: ApplyFailed".to_owned()),
        "{refused:#?}"
    );
    let id = refused.plan["spec"]["id"].as_str().unwrap_or_default();
    assert!(id.starts_with(&format!("id-worker-1-{V2}-")), "worker-1's own Plan: {id}");
    let description =
        refused.plan["status"]["commands"][0]["description"].as_str().unwrap_or_default();
    assert!(description.ends_with(UNSIGNED_PLAN_HINT), "{description}");
    let stalled = condition(&refused.plan, "Stalled");
    assert_eq!((stalled.0.as_str(), stalled.1.as_str()), ("True", "ApplyFailed"));
    assert!(stalled.2.contains("Driven by Cluster API (k0smotron)"), "{}", stalled.2);
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/updating-a-cluster.md"),
    )
    .expect("the docs");
    assert!(docs.contains("\n## Driven by Cluster API (k0smotron)\n"), "the section exists");
    // Compared word by word: the docs wrap lines.
    let words = |text: &str| text.replace('"', "").split_whitespace().collect::<Vec<_>>().join(" ");
    let sentence = words(UNSIGNED_PLAN_HINT.trim_start_matches(". "));
    assert!(words(&docs).contains(&sentence), "the docs quote the sentence: {sentence}");
    assert!(node_signal(&client, "worker-1").await.unwrap().is_none(), "worker-1 not signalled");
    assert_ne!(version_on_disk(&workers[1]), V2, "worker-1 keeps its binary");
}

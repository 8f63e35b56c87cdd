//! Validation up front (issue 11, item 7; DESIGN §2, §4, §11): a Plan no node could run
//! never signals a node.
//!
//! (a) What the CRD schema can refuse, the API server refuses at create time, with the
//! field in the error: an empty `spec.id`, an empty `version`, a platform URL that is not
//! `http://…` or `https://…`.
//! (b) What the schema lets through but no node or scheduler could act on (a `soak` that is
//! not a duration, a canary on controllers, a URL or version the node agent would refuse)
//! ends `Warning` in the engine's first pass, the field named in the command's
//! `description`, and no Node or ControlNode ever carries a signal.
//!
//! One cluster, the plans in sequence; the test responder plays the nodes (it would answer
//! any signal, so it also records that none came).

use std::time::Duration;

use autopilot_api::keys::PLAN_NAME;
use autopilot_api::v1beta2::{
    Concurrency, Plan, PlanCommand, PlanCommandAirgapUpdate, PlanCommandTargetLimits, PlanStateType,
};
use futures::StreamExt;
use integration::responder::{Config, Responder};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;

use crate::support::*;

const WORKERS: [&str; 1] = ["worker-0"];

/// How long the API server may take to answer a create.
const API_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn plans_no_node_could_run_are_refused_up_front_with_the_field_named() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-validation")
            .controllers(1)
            .workers(&WORKERS)
            .start()
            .await
            .unwrap();
    let responder = Responder::start(client.clone(), Config::new()).await.unwrap();
    let platform = autopilot_api::platform::current();

    // (a) The API server refuses what the schema can refuse, naming the field.
    let url_field = format!("spec.commands[0].k0supdate.platforms.{platform}.url");
    let refusals = schema_refusals(&url_field);
    let plans: Api<Plan> = Api::all(client.clone());
    for (case, plan, field) in refusals {
        let created =
            tokio::time::timeout(API_TIMEOUT, plans.create(&PostParams::default(), &plan))
                .await
                .unwrap_or_else(|_| panic!("{case}: the API server did not answer"));
        match created {
            Err(kube::Error::Api(status)) => {
                eprintln!("{case}: the API server says: {}", status.message);
                assert_eq!(status.code, 422, "{case}: {status:?}");
                assert!(status.message.contains(field), "{case}: {field} not named: {status:?}");
            }
            other => panic!("{case}: the API server accepted the plan: {other:?}"),
        }
        assert!(plans.get_opt(PLAN_NAME).await.unwrap().is_none(), "{case}: a plan exists");
    }

    // (b) The engine refuses, in its first pass, what no node or scheduler could act on.
    let cases = engine_refusals(&platform);
    for (case, plan, description) in cases {
        let (ended, states) = create_and_follow(&client, &plan).await;
        assert_eq!(
            states,
            [PlanStateType::Warning],
            "{case}: the plan went through other states first:\n{}",
            status_yaml(&ended)
        );
        let command = command(&ended, 0);
        assert_eq!(command.state, PlanStateType::Warning, "{case}:\n{}", status_yaml(&ended));
        let said = command.description.as_deref().unwrap_or_default();
        assert!(said.starts_with(&description), "{case}: {said}");
        assert_no_signal(&client, &responder, case).await;
        delete_plan(&client).await;
    }

    // The same cluster runs a plan it can: validation refuses the fields, not the cluster.
    let good = plan_with(|update| {
        let limits = workers_limits(update);
        limits.concurrent = Concurrency::Percent(50);
        limits.max_failures = Some(0);
    });
    let (ended, states) = create_and_follow(&client, &good).await;
    assert_eq!(ended.status.as_ref().map(|s| s.state), Some(PlanStateType::Completed));
    assert!(!states.contains(&PlanStateType::Warning), "{states:?}");
    assert!(responder.log().was_signalled(&integration::responder::ObjectRef::node("worker-0")));
}

/// The plans the API server's schema refuses: the case, the plan, the field it names.
fn schema_refusals(url_field: &str) -> Vec<(&'static str, Plan, &str)> {
    vec![
        (
            "an empty k0supdate version",
            plan_with(|update| update.version = String::new()),
            "spec.commands[0].k0supdate.version",
        ),
        (
            "a k0supdate version with a space",
            plan_with(|update| update.version = "v1.35.0 +k0s.0".to_owned()),
            "spec.commands[0].k0supdate.version",
        ),
        (
            "a version no node can report (a non-breaking space)",
            plan(
                PLAN_NAME,
                "validation",
                vec![airgap_with(|airgap| airgap.version = "v1.35.0\u{a0}+k0s.0".to_owned())],
            ),
            "spec.commands[0].airgapupdate.version",
        ),
        (
            "a version that would carry a path into the payload URLs",
            plan_with(|update| update.version = "v1.36.0-a/../x+k0s.0".to_owned()),
            "spec.commands[0].k0supdate.version",
        ),
        (
            "a URL without a scheme",
            plan_with(|update| {
                for entry in update.platforms.values_mut() {
                    entry.url = "example.invalid/k0s".to_owned();
                }
            }),
            url_field,
        ),
        (
            "an empty airgapupdate version",
            plan(
                PLAN_NAME,
                "validation",
                vec![airgap_with(|airgap| airgap.version = String::new())],
            ),
            "spec.commands[0].airgapupdate.version",
        ),
        ("an empty id", plan(PLAN_NAME, "", vec![k0s_command(worker_update())]), "spec.id"),
    ]
}

/// The plans the engine refuses in its first pass: the case, the plan, the start of the
/// description it gives.
fn engine_refusals(platform: &str) -> Vec<(&'static str, Plan, String)> {
    let workers_path = "commands[0].k0supdate.targets.workers.limits";
    let controllers_path = "commands[0].k0supdate.targets.controllers.limits";
    let bad_port = "http://127.0.0.1:port/k0s";
    vec![
        (
            "a soak that is not a duration",
            plan_with(|update| {
                let limits = workers_limits(update);
                limits.canary = Some(1);
                limits.soak = Some("soon".to_owned());
            }),
            format!("{workers_path}.soak: \"soon\" is not a duration (e.g. 30s, 5m, 1h30m)"),
        ),
        (
            "a canary on controllers",
            plan_with(|update| {
                update.targets.controllers = Some(static_nodes(&["controller-0"], 1));
                controllers_limits(update).canary = Some(1);
            }),
            format!("{controllers_path}.canary: 1 is not allowed on controllers"),
        ),
        (
            "a URL the node would refuse",
            plan_with(|update| {
                for entry in update.platforms.values_mut() {
                    entry.url = bad_port.to_owned();
                }
            }),
            format!(
                "commands[0].k0supdate.platforms.{platform}.url: {bad_port:?} is not a valid URL"
            ),
        ),
    ]
}

/// A forced k0supdate of worker-0 (this machine's platform, a digest), as a valid plan
/// would have it.
fn worker_update() -> autopilot_api::v1beta2::PlanCommandK0sUpdate {
    k0s_update(None, Some(static_nodes(&WORKERS, 1)))
}

/// The `autopilot` Plan of one k0supdate of worker-0, with `edit` applied.
fn plan_with(edit: impl FnOnce(&mut autopilot_api::v1beta2::PlanCommandK0sUpdate)) -> Plan {
    let mut update = worker_update();
    edit(&mut update);
    plan(PLAN_NAME, "validation", vec![k0s_command(update)])
}

/// An airgapupdate of worker-0, with `edit` applied.
fn airgap_with(edit: impl FnOnce(&mut PlanCommandAirgapUpdate)) -> PlanCommand {
    let mut command = airgap_command(static_nodes(&WORKERS, 1));
    edit(command.airgapupdate.as_mut().expect("an airgapupdate"));
    command
}

fn workers_limits(
    update: &mut autopilot_api::v1beta2::PlanCommandK0sUpdate,
) -> &mut PlanCommandTargetLimits {
    &mut update.targets.workers.as_mut().expect("workers").limits
}

fn controllers_limits(
    update: &mut autopilot_api::v1beta2::PlanCommandK0sUpdate,
) -> &mut PlanCommandTargetLimits {
    &mut update.targets.controllers.as_mut().expect("controllers").limits
}

/// Creates `plan` (the `autopilot` Plan) with a watch already on it, and follows it until it
/// ends: returns the plan as it ended and every distinct state it was seen in, in order,
/// after the state it was created with (so a plan refused in its first pass shows only
/// `[Warning]`).
async fn create_and_follow(client: &kube::Client, plan: &Plan) -> (Plan, Vec<PlanStateType>) {
    let plans: Api<Plan> = Api::all(client.clone());
    let mut stream = std::pin::pin!(watcher::watch_object(plans.clone(), PLAN_NAME));
    // The watch answers first that the plan does not exist: from then on it sees every
    // write, so no state the engine writes can slip by unseen.
    let first = tokio::time::timeout(API_TIMEOUT, stream.next()).await;
    assert!(
        matches!(first, Ok(Some(Ok(None)))),
        "the watch did not start empty: {:?}",
        first.map(|item| item.map(|r| r.map(|p| p.map(|p| status_yaml(&p)))))
    );
    plans.create(&PostParams::default(), plan).await.expect("the API server accepts the plan");
    let mut states = Vec::new();
    let deadline = tokio::time::Instant::now() + PLAN_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => panic!("the plan did not end within {PLAN_TIMEOUT:?}; states {states:?}"),
            Ok(None) => panic!("the watch on the plan ended"),
            Ok(Some(Err(err))) => eprintln!("watch on the plan: {err} (retrying)"),
            Ok(Some(Ok(None))) => panic!("the plan disappeared"),
            Ok(Some(Ok(Some(seen)))) => {
                let now = state(&seen);
                if now != PlanStateType::NewPlan && states.last() != Some(&now) {
                    states.push(now);
                }
                if now.is_terminal() {
                    return (seen, states);
                }
            }
        }
    }
}

/// No node was touched: the responder (which sees every signal written) saw none, no Node
/// or ControlNode carries signal annotations now, and the worker is neither cordoned nor
/// marked as cordoned by autopilot.
async fn assert_no_signal(client: &kube::Client, responder: &Responder, case: &str) {
    let log = responder.log();
    assert_eq!(log.signals().count(), 0, "{case}: a node was signalled:\n{log}");
    let annotated = objects_with_signals(client).await.expect("listing signal objects");
    assert!(annotated.is_empty(), "{case}: objects carry a signal: {annotated:?}");
    for worker in WORKERS {
        let cordon = node_cordon(client, worker).await.expect("reading the worker");
        assert_eq!(cordon, (false, false), "{case}: {worker} cordoned / marked");
    }
}

//! Roles for people (`manifests/rbac/operators.yaml`): a steerer may pause, resume, abort
//! and accept warnings on a Plan, and nothing else; a viewer may only read.
//!
//! One API server, no k0s controller (a Plan object is all the roles act on): the three
//! CRDs from `manifests/crds/`, every document of `operators.yaml` applied as is
//! (server-side apply, admin), and a Plan. `alice` (group `k0s-autopilot-steerers`) and `bob`
//! (group `k0s-autopilot-viewers`) are the admin impersonating them, so they have exactly the
//! rights the file grants those groups.
//!
//! alice sets and removes each steering annotation, and `k0s autopilot pause|resume|abort`
//! work with her kubeconfig. The rollback policy (docs/security.md, "Rollback of a finished
//! run"): alice may set `rollback` (and `k0s autopilot rollback` works) only while the run
//! is running; on a Plan not yet started or whose run ended `Completed` the policy refuses
//! her with its message, and the annotation stays as it was; she may still remove a rollback
//! a Plan author (here the admin, who may) asked for on a finished run. The policy refuses with 403 and its message (what is allowed,
//! then what was not) each of her changes of the spec (a payload URL by patch, alone and
//! next to a resume; the version by PUT), of `allow-skew`, of another annotation, of the
//! labels and of the owner references, and the Plan stays as it was. RBAC refuses her the
//! status, deletes and creates. bob gets and lists Plans and Events and runs `k0s autopilot
//! status`; he may not patch a Plan, nor `k0s autopilot resume`.
//!
//! The API server compiles a new policy in the background, so the test first waits (with a
//! deadline) until a dry-run spec change by alice is refused by the policy.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::v1beta2::Plan;
use integration::{Cluster, run_k0s, wait_for};
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{ResourceExt as _, discovery};
use serde_json::json;

use crate::support::*;

/// The file under test.
const OPERATORS_YAML: &str = include_str!("../../../manifests/rbac/operators.yaml");

/// The policy (and its binding) `operators.yaml` ships.
const POLICY: &str = "k0s-autopilot-steering";

/// What every refusal of the policy says is allowed.
const ALLOWED: &str = "a member of k0s-autopilot-steerers may change only the Plan \
     annotations autopilot.k0sproject.io/paused, autopilot.k0sproject.io/abort, \
     autopilot.k0sproject.io/rollback, autopilot.k0sproject.io/accept-warnings";

/// How long RBAC and the policy get to take effect after they are applied.
const TAKE_EFFECT: Duration = Duration::from_secs(60);

/// Applies every document of `operators.yaml` with `admin` (server-side apply, forced).
async fn apply_operators_yaml(admin: &kube::Client) {
    let params = PatchParams::apply("k0s-integration").force();
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(OPERATORS_YAML).expect("YAML documents");
    for value in documents {
        if value.is_null() {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(value.clone()).expect("an object");
        let types = object.types.as_ref().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(types).expect("a group, version and kind");
        let (resource, _) = discovery::pinned_kind(admin, &gvk).await.expect("a served kind");
        // Every object of the file is cluster-scoped.
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &resource);
        api.patch(&object.name_any(), &params, &Patch::Apply(&value))
            .await
            .unwrap_or_else(|e| panic!("applying {} {}: {e}", gvk.kind, object.name_any()));
    }
}

/// Asserts that `result` is the policy's 403, saying what is allowed and then `not`.
#[track_caller]
fn assert_refused_by_policy<T: std::fmt::Debug>(result: Result<T, kube::Error>, not: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let message = &status.message;
            assert!(message.contains(POLICY), "refused by the policy {POLICY}: {message}");
            assert!(
                message.ends_with(&format!("{ALLOWED}; not {not}")),
                "the refusal says what is allowed and what was not: {message}"
            );
        }
        other => panic!("expected the policy's 403 (not {not}), got {other:?}"),
    }
}

/// Asserts that `result` is RBAC's 403 (the request never reached admission).
#[track_caller]
fn assert_forbidden_by_rbac<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            assert!(!status.message.contains(POLICY), "{what}: refused by RBAC: {status:?}");
        }
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// A kubeconfig of the admin impersonating `user` in `group` (kubectl's `as` and
/// `as-groups`), for running `k0s autopilot` as them.
fn kubeconfig_as(cluster: &Cluster, user: &str, group: &str) -> PathBuf {
    let admin = std::fs::read_to_string(cluster.admin_kubeconfig(0)).expect("admin kubeconfig");
    let mut config: serde_json::Value = serde_saphyr::from_str(&admin).expect("a kubeconfig");
    let users = config["users"].as_array_mut().expect("kubeconfig users");
    for entry in users {
        entry["user"]["as"] = user.into();
        entry["user"]["as-groups"] = vec![serde_json::Value::from(group)].into();
    }
    let path = cluster.dir().join(format!("{user}.kubeconfig"));
    std::fs::write(&path, serde_saphyr::to_string(&config).expect("YAML")).expect("writing it");
    path
}

/// Runs `k0s autopilot <verb> --kubeconfig <kubeconfig>` off the async runtime.
async fn k0s_autopilot(kubeconfig: &std::path::Path, verb: &str) -> Output {
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let verb = verb.to_owned();
    tokio::task::spawn_blocking(move || {
        run_k0s(&["autopilot", &verb, "--kubeconfig", &kubeconfig]).expect("k0s runs")
    })
    .await
    .expect("the k0s run")
}

/// Asserts that `output` is a run that succeeded.
#[track_caller]
fn assert_success(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} ({}); stderr:\n{stderr}", output.status);
}

fn annotate(key: &str, value: Option<&str>) -> Patch<serde_json::Value> {
    Patch::Merge(json!({ "metadata": { "annotations": { key: value } } }))
}

/// The Plan's spec with every platform's URL pointing elsewhere, as a merge patch.
fn other_url(plan: &Plan) -> serde_json::Value {
    let mut spec = plan.spec.clone();
    for command in &mut spec.commands {
        let update = command.k0supdate.as_mut().expect("a k0s update");
        for platform in update.platforms.values_mut() {
            platform.url = "https://payloads.example.com/k0s".to_owned();
        }
    }
    json!({ "spec": spec })
}

#[tokio::test]
async fn a_steerer_may_change_only_the_steering_annotations_and_a_viewer_only_read() {
    let Fleet { cluster, client: admin, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("rbac-steering")
            .controllers(1)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    for crd in [keys::CRD_PLANS, keys::CRD_CONTROL_NODES, keys::CRD_UPDATE_CONFIGS] {
        install_crd(&admin, crd).await;
    }
    apply_operators_yaml(&admin).await;
    let update = k0s_update(None, Some(static_nodes(&["worker-0"], 1)));
    let created = create_plan(&admin, &plan(keys::PLAN_NAME, "steer", vec![k0s_command(update)]))
        .await
        .unwrap();

    let alice = cluster.client_as("alice", &["k0s-autopilot-steerers"]).await.unwrap();
    let bob = cluster.client_as("bob", &["k0s-autopilot-viewers"]).await.unwrap();
    let alice_plans: Api<Plan> = Api::all(alice.clone());
    let bob_plans: Api<Plan> = Api::all(bob.clone());

    // RBAC and the policy take effect in the background: wait until a spec change by alice
    // gets as far as the policy and is refused by it (dry runs, so an early success changes
    // nothing).
    let spec_change = other_url(&created);
    take_effect(&alice_plans, &bob_plans, &spec_change).await;

    // --- alice, the steerer ---
    alice_rolls_back_only_a_running_run(&cluster, &admin, &alice_plans).await;
    alice_steers(&cluster, &admin, &alice_plans).await;
    alice_refused_by_policy(&admin, &alice_plans, &spec_change).await;
    alice_forbidden_by_rbac(&alice_plans).await;

    // --- bob, the viewer ---
    bob_views(&cluster, &admin, &bob, &bob_plans).await;
}

/// Waits until RBAC and the policy took effect: alice's spec change (a dry run) is refused
/// by the policy, and bob may read Plans.
async fn take_effect(
    alice_plans: &Api<Plan>,
    bob_plans: &Api<Plan>,
    spec_change: &serde_json::Value,
) {
    let name = keys::PLAN_NAME;
    let dry_run = PatchParams { dry_run: true, ..PatchParams::default() };
    wait_for(TAKE_EFFECT, "the policy to refuse alice's spec change", || async {
        match alice_plans.patch(name, &dry_run, &Patch::Merge(spec_change)).await {
            Err(kube::Error::Api(status)) if status.message.contains(POLICY) => Ok(Some(())),
            Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
            Err(e) => Err(e.into()),
            Ok(_) => Ok(None),
        }
    })
    .await
    .expect("the policy refuses alice's spec change");
    wait_for(TAKE_EFFECT, "bob to be allowed to read Plans", || async {
        Ok(bob_plans.get_opt(name).await.ok().flatten())
    })
    .await
    .expect("bob reads Plans");
}

/// The status the admin writes for the Plan's run `steer` being in `state` (no controller
/// runs here: the status is what the policy reads).
async fn set_run_state(admin: &kube::Client, state: &str) {
    let status = json!({ "status": { "state": state, "planId": "steer" } });
    Api::<Plan>::all(admin.clone())
        .patch_status(keys::PLAN_NAME, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|e| panic!("the admin sets the Plan's state {state}: {e}"));
}

/// Asserts that `result` is the rollback rule's 403: only while the run runs, not `not`.
#[track_caller]
fn assert_rollback_refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, not: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {
            let message = &status.message;
            assert!(message.contains(POLICY), "refused by the policy {POLICY}: {message}");
            assert!(message.ends_with(&rollback_refusal(not)), "the rule's message: {message}");
        }
        other => panic!("expected the policy's 403 for a rollback {not}, got {other:?}"),
    }
}

/// What the policy says when it refuses a steerer's rollback `not` while the run runs.
fn rollback_refusal(not: &str) -> String {
    format!(
        "a member of k0s-autopilot-steerers may roll back a run only while it runs (Plan state \
         SchedulableWait or Schedulable), not {not}: a finished run is rolled back by a Plan \
         author (whoever may write Plans outside k0s-autopilot-steerers)"
    )
}

/// The rollback policy: alice may ask for a rollback only while the run runs (by annotation
/// and with `k0s autopilot rollback`), never before it started or after it ended; she may
/// remove a rollback annotation any time. The admin (a Plan author) may roll back a finished
/// run. Leaves the run `SchedulableWait` and no rollback annotation.
async fn alice_rolls_back_only_a_running_run(
    cluster: &Cluster,
    admin: &kube::Client,
    alice_plans: &Api<Plan>,
) {
    let name = keys::PLAN_NAME;
    let merge = PatchParams::default();
    let rollback = keys::ANNOTATION_ROLLBACK;
    let rollback_of = |plan: &Plan| plan.annotations().get(rollback).cloned();
    let alice_kubeconfig = kubeconfig_as(cluster, "alice", "k0s-autopilot-steerers");

    // Not started (no status yet): refused.
    let asked = alice_plans.patch(name, &merge, &annotate(rollback, Some("steer"))).await;
    assert_rollback_refused(asked, "before it started");

    // Running: allowed, by annotation and by the verb; removing it too.
    set_run_state(admin, "SchedulableWait").await;
    let asked = alice_plans.patch(name, &merge, &annotate(rollback, Some("steer"))).await;
    let asked = asked.unwrap_or_else(|e| panic!("alice rolls back a running run: {e}"));
    assert_eq!(rollback_of(&asked).as_deref(), Some("steer"), "the rollback is asked");
    let removed = alice_plans.patch(name, &merge, &annotate(rollback, None)).await;
    assert_eq!(rollback_of(&removed.expect("alice removes the rollback")), None);
    let verb = k0s_autopilot(&alice_kubeconfig, "rollback").await;
    assert_success(&verb, "alice: rollback of a running run");
    assert_eq!(rollback_of(&admin_plan(admin, name).await).as_deref(), Some("steer"));
    alice_plans.patch(name, &merge, &annotate(rollback, None)).await.expect("alice removes it");

    // Ended Completed: refused, by annotation, by PUT and by the verb; the Plan keeps no
    // rollback annotation.
    set_run_state(admin, "Completed").await;
    let asked = alice_plans.patch(name, &merge, &annotate(rollback, Some("steer"))).await;
    assert_rollback_refused(asked, "after it ended Completed");
    let mut replaced = admin_plan(admin, name).await;
    replaced.annotations_mut().insert(rollback.to_owned(), "steer".to_owned());
    let put = alice_plans.replace(name, &PostParams::default(), &replaced).await;
    assert_rollback_refused(put, "after it ended Completed");
    let verb = k0s_autopilot(&alice_kubeconfig, "rollback").await;
    assert_eq!(verb.status.code(), Some(1), "alice: rollback of a Completed run fails");
    let stderr = String::from_utf8_lossy(&verb.stderr);
    assert!(
        stderr.contains(&rollback_refusal("after it ended Completed")),
        "alice: the verb says the policy's reason: {stderr}"
    );
    assert_eq!(rollback_of(&admin_plan(admin, name).await), None, "nothing asked");

    // A Plan author may roll back the finished run; alice may change her mind for them only
    // by removing it (another value is a new rollback, refused).
    let admin_plans = Api::<Plan>::all(admin.clone());
    let asked = admin_plans.patch(name, &merge, &annotate(rollback, Some("steer"))).await;
    let asked = asked.expect("the admin rolls back a finished run");
    assert_eq!(rollback_of(&asked).as_deref(), Some("steer"));
    let other = alice_plans.patch(name, &merge, &annotate(rollback, Some("other"))).await;
    assert_rollback_refused(other, "after it ended Completed");
    let removed = alice_plans.patch(name, &merge, &annotate(rollback, None)).await;
    assert_eq!(rollback_of(&removed.expect("alice removes a rollback")), None);

    set_run_state(admin, "SchedulableWait").await;
}

/// alice, the steerer, sets and removes every steering annotation (the run is running, as
/// `rollback` needs), and steers with the verbs.
async fn alice_steers(cluster: &Cluster, admin: &kube::Client, alice_plans: &Api<Plan>) {
    let name = keys::PLAN_NAME;
    let merge = PatchParams::default();
    for key in [
        keys::ANNOTATION_PAUSED,
        keys::ANNOTATION_ABORT,
        keys::ANNOTATION_ACCEPT_WARNINGS,
        keys::ANNOTATION_ROLLBACK,
    ] {
        let set = alice_plans.patch(name, &merge, &annotate(key, Some("true"))).await;
        let set = set.unwrap_or_else(|e| panic!("alice sets {key}: {e}"));
        assert_eq!(set.annotations().get(key).map(String::as_str), Some("true"), "{key} set");
        let removed = alice_plans.patch(name, &merge, &annotate(key, None)).await;
        let removed = removed.unwrap_or_else(|e| panic!("alice removes {key}: {e}"));
        assert!(!removed.annotations().contains_key(key), "{key} removed");
    }
    // The steering verbs, with a kubeconfig as alice.
    let alice_kubeconfig = kubeconfig_as(cluster, "alice", "k0s-autopilot-steerers");
    for verb in ["pause", "resume", "pause", "abort"] {
        assert_success(&k0s_autopilot(&alice_kubeconfig, verb).await, &format!("alice: {verb}"));
    }
    let steered = admin_plan(admin, name).await;
    for key in [keys::ANNOTATION_PAUSED, keys::ANNOTATION_ABORT] {
        assert_eq!(steered.annotations().get(key).map(String::as_str), Some("true"), "{key}");
    }
}

/// The policy refuses alice any other change: the spec, other annotations, labels, owners;
/// the admin still writes specs.
async fn alice_refused_by_policy(
    admin: &kube::Client,
    alice_plans: &Api<Plan>,
    spec_change: &serde_json::Value,
) {
    let name = keys::PLAN_NAME;
    let merge = PatchParams::default();
    let dry_run = PatchParams { dry_run: true, ..PatchParams::default() };
    let before = admin_plan(admin, name).await;
    assert_refused_by_policy(
        alice_plans.patch(name, &merge, &Patch::Merge(spec_change)).await,
        "the spec",
    );
    let mut spec_and_resume = spec_change.clone();
    spec_and_resume["metadata"] = json!({ "annotations": { keys::ANNOTATION_PAUSED: null } });
    assert_refused_by_policy(
        alice_plans.patch(name, &merge, &Patch::Merge(&spec_and_resume)).await,
        "the spec",
    );
    let mut replaced = before.clone();
    replaced.spec.commands[0].k0supdate.as_mut().expect("a k0s update").version =
        "v9.9.9+k0s.0".to_owned();
    assert_refused_by_policy(
        alice_plans.replace(name, &PostParams::default(), &replaced).await,
        "the spec",
    );
    assert_refused_by_policy(
        alice_plans
            .patch(name, &merge, &annotate("autopilot.k0sproject.io/allow-skew", Some("true")))
            .await,
        "autopilot.k0sproject.io/allow-skew",
    );
    assert_refused_by_policy(
        alice_plans.patch(name, &merge, &annotate("example.com/note", Some("x"))).await,
        "example.com/note",
    );
    assert_refused_by_policy(
        alice_plans
            .patch(name, &merge, &Patch::Merge(json!({ "metadata": { "labels": { "a": "b" } } })))
            .await,
        "the labels",
    );
    // An owner that does not exist would get the Plan garbage-collected.
    let owner = json!({ "metadata": { "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "gone",
        "uid": "00000000-0000-0000-0000-000000000000",
    }] } });
    assert_refused_by_policy(
        alice_plans.patch(name, &merge, &Patch::Merge(&owner)).await,
        "the finalizers or owner references",
    );
    let after = admin_plan(admin, name).await;
    assert_eq!(after.spec, before.spec, "the spec is unchanged");
    assert_eq!(after.metadata.labels, before.metadata.labels, "the labels are unchanged");
    assert_eq!(after.annotations(), before.annotations(), "the annotations are unchanged");
    assert_eq!(after.metadata.owner_references, None, "no owner");
    // The policy holds the steerers only: a Plan author (here the admin) still writes specs.
    Api::<Plan>::all(admin.clone())
        .patch(name, &dry_run, &Patch::Merge(spec_change))
        .await
        .expect("the admin may change the spec");
}

/// RBAC forbids alice the status, deleting and creating Plans.
async fn alice_forbidden_by_rbac(alice_plans: &Api<Plan>) {
    let name = keys::PLAN_NAME;
    let merge = PatchParams::default();
    assert_forbidden_by_rbac(
        alice_plans
            .patch_status(
                name,
                &merge,
                &Patch::Merge(json!({ "status": { "state": "Completed" } })),
            )
            .await,
        "alice writing the status",
    );
    let dry_delete = DeleteParams { dry_run: true, ..DeleteParams::default() };
    assert_forbidden_by_rbac(alice_plans.delete(name, &dry_delete).await, "alice deleting");
    let dry_create = PostParams { dry_run: true, ..PostParams::default() };
    assert_forbidden_by_rbac(
        alice_plans.create(&dry_create, &plan("another", "x", Vec::new())).await,
        "alice creating a Plan",
    );
}

/// bob, the viewer, reads the plan, its Events and its status, and may not resume it.
async fn bob_views(
    cluster: &Cluster,
    admin: &kube::Client,
    bob: &kube::Client,
    bob_plans: &Api<Plan>,
) {
    let name = keys::PLAN_NAME;
    let merge = PatchParams::default();
    bob_plans.get(name).await.expect("bob gets the plan");
    let listed = bob_plans.list(&ListParams::default()).await.expect("bob lists plans");
    assert_eq!(listed.items.len(), 1, "bob sees the plan");
    Api::<Event>::namespaced(bob.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("bob lists events");
    let bob_kubeconfig = kubeconfig_as(cluster, "bob", "k0s-autopilot-viewers");
    let status = k0s_autopilot(&bob_kubeconfig, "status").await;
    assert_success(&status, "bob: status");
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.starts_with("Plan autopilot"), "bob sees the plan:\n{shown}");
    assert_forbidden_by_rbac(
        bob_plans.patch(name, &merge, &annotate(keys::ANNOTATION_PAUSED, None)).await,
        "bob resuming the plan",
    );
    let resume = k0s_autopilot(&bob_kubeconfig, "resume").await;
    assert_eq!(resume.status.code(), Some(1), "bob: resume fails");
    let stderr = String::from_utf8_lossy(&resume.stderr);
    assert!(stderr.contains("forbidden"), "bob: resume is forbidden: {stderr}");
    assert_eq!(
        admin_plan(admin, name).await.annotations().get(keys::ANNOTATION_PAUSED),
        Some(&"true".to_owned()),
        "still paused"
    );
}

/// The Plan `name` as the admin reads it.
async fn admin_plan(admin: &kube::Client, name: &str) -> Plan {
    Api::<Plan>::all(admin.clone()).get(name).await.expect("the admin reads the plan")
}

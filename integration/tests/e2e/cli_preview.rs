//! `k0s autopilot preview -f plan.yaml` against a real control plane with real controllers
//! and workers, run by an identity that may only get, list and watch (a ClusterRole bound
//! here to the harness's viewer group): a good plan prints its targets and batches and exits
//! 0; a plan naming a node that does not exist, and one whose worker is not Ready, exit 1
//! naming the problem. Nothing is written: there is still no Plan afterwards.

use std::process::Output;
use std::time::Duration;

use autopilot_api::v1beta2::Plan;
use integration::{Cluster, VIEWER_GROUP, client_from_kubeconfig, wait_for};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// Binds a ClusterRole that allows get, list and watch of everything, and nothing else, to
/// the viewer group, and waits until the viewer can list Nodes.
async fn bind_read_only(cluster: &Cluster, admin: &kube::Client) {
    let role = ClusterRole {
        metadata: kube::api::ObjectMeta {
            name: Some("read-only".to_owned()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["*".to_owned()]),
            resources: Some(vec!["*".to_owned()]),
            verbs: vec!["get".to_owned(), "list".to_owned(), "watch".to_owned()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("creating the read-only ClusterRole");
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some("read-only-viewers".to_owned()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: "read-only".to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "Group".to_owned(),
            name: VIEWER_GROUP.to_owned(),
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the read-only ClusterRole");
    let viewer = client_from_kubeconfig(&cluster.viewer_kubeconfig(0)).await.expect("a client");
    let nodes: Api<Node> = Api::all(viewer);
    wait_for(Duration::from_secs(30), "the viewer to list Nodes", || async {
        Ok(nodes.list(&ListParams::default()).await.ok().map(drop))
    })
    .await
    .expect("the read-only role takes effect");
}

/// Writes `plan` as YAML into the cluster directory and runs `k0s autopilot preview -f` on
/// it as the viewer.
async fn preview(cluster: &Cluster, file: &str, plan: &Plan) -> Output {
    preview_plan(cluster, file, plan, cluster.viewer_kubeconfig(0)).await
}

/// An unforced update of controller-0 and both workers (one at a time) to the version they
/// already run, so neither the removed-API check nor the skew checks object.
fn good_plan(workers: &[&str]) -> Plan {
    let mut update =
        k0s_update(Some(static_nodes(&["controller-0"], 1)), Some(static_nodes(workers, 1)));
    update.version = "v1.35.0+k0s.0".to_owned();
    update.forceupdate = false;
    plan("autopilot", "preview", vec![k0s_command(update)])
}

#[tokio::test]
async fn preview_run_read_only_says_what_a_plan_would_do_and_exits_1_naming_each_problem() {
    let Fleet { cluster, client: admin, controllers: _controllers, workers } =
        FleetBuilder::new("cli-preview").controllers(1).workers(&WORKERS).start().await.unwrap();
    bind_read_only(&cluster, &admin).await;

    // A good plan: exit 0, the targets and the batches, no problem.
    let output = preview(&cluster, "good.yaml", &good_plan(&WORKERS)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("the good plan:\n{stdout}");
    assert_eq!(output.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("  controllers (one at a time): controller-0\n"), "{stdout}");
    assert!(stdout.contains("  workers (1 at a time): worker-0, worker-1\n"), "{stdout}");
    assert!(stdout.contains("   1. command 0: ControlNode/controller-0\n"), "{stdout}");
    assert!(stdout.contains("   2. command 0: Node/worker-0\n"), "{stdout}");
    assert!(stdout.contains("   3. command 0: Node/worker-1\n"), "{stdout}");
    assert!(stdout.ends_with("Problems: none\nThe plan would run.\n"), "{stdout}");
    // The viewer may not create SubjectAccessReviews: the workers' access is not checked,
    // and said so (no problem: the leader checks when the run starts).
    assert!(
        stdout.contains(
            "Could not check whether the workers may read Plan autopilot (system:node:worker-0 \
             in system:nodes, system:authenticated): this identity may not create \
             subjectaccessreviews.authorization.k8s.io"
        ),
        "{stdout}"
    );

    // A target that does not exist: exit 1, named.
    let output = preview(&cluster, "missing.yaml", &good_plan(&["worker-0", "worker-9"])).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("the plan with a missing node:\n{stdout}");
    assert_eq!(output.status.code(), Some(1), "stdout:\n{stdout}");
    assert!(
        stdout.contains(
            "  - the plan would end IncompleteTargets: command 0 (k0supdate): targets without an \
             object: Node worker-9\n"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("The plan would not run as it is.\n"), "{stdout}");
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));

    // A worker that is not Ready (its process stopped, its Ready condition False): exit 1,
    // named.
    workers[1].stop(Duration::from_secs(10)).await.unwrap();
    let now = jiff::Timestamp::now().to_string();
    Api::<Node>::all(admin.clone())
        .patch_status(
            "worker-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({ "status": { "conditions": [{
                "type": "Ready", "status": "False", "reason": "Stopped",
                "message": "the test stopped it", "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }] } })),
        )
        .await
        .unwrap();
    let output = preview(&cluster, "not-ready.yaml", &good_plan(&WORKERS)).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("the plan with a NotReady worker:\n{stdout}");
    assert_eq!(output.status.code(), Some(1), "stdout:\n{stdout}");
    assert!(
        stdout.contains(
            "  - worker worker-1 is not Ready: the plan would wait for it before signalling it\n"
        ),
        "{stdout}"
    );

    // Nothing was written.
    let plans: Api<Plan> = Api::all(admin);
    assert!(plans.list(&ListParams::default()).await.unwrap().items.is_empty());
}

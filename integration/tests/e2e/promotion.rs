//! A staged promotion across two clusters (docs/gitops.md): two real control planes, A and B,
//! each with one controller and two real workers. A test promoter, as a fleet tool would,
//! waits with the real `kubectl wait` for the Plan on A to be `Ready` (or `Stalled`) and only
//! then applies the same Plan to B with `kubectl apply`.
//!
//! The Plan is the promotion pipeline's usual shape: `canary: 1` and a `soak` long enough for
//! the post-update watch to catch a binary that crashes after its boot.
//!
//! - A payload that passes its trial boot, then dies 8 s into every run: A's canary crashes
//!   three times and its guard puts v1 back; the signal turns `Failed`, A's Plan ends
//!   `ApplyFailed` and is `Stalled`; the promoter holds, and B has no Plan and no node of B is
//!   ever signalled.
//! - A good payload: A completes, the promoter applies the Plan to B, and every node of both
//!   clusters runs v2.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::v1beta2::{Plan, PlanStateType, TargetState};
use integration::gitops;
use integration::http::FileServer;

use crate::support::*;
use crate::update_post_watch::dying_v2;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// How long the promoter waits for A: two workers, a soak, and the margins of a loaded
/// machine.
const PROMOTER_TIMEOUT: &str = "400s";

/// How long B's run may take: two workers and the soak.
const B_TIMEOUT: Duration = Duration::from_secs(400);

/// What the promoter did.
#[derive(Debug, PartialEq, Eq)]
enum Promotion {
    /// A was `Ready`: the Plan was applied to B.
    Applied,
    /// A was `Stalled`: nothing was applied; `Stalled`'s message.
    Held(String),
}

/// The promoter: waits on A for `Ready` or `Stalled`, whichever comes first (two real
/// `kubectl wait`s), and on `Ready` applies `plan_file` to B (`kubectl apply -f`).
async fn promote(a: &Path, b: &Path, plan_file: &Path) -> anyhow::Result<Promotion> {
    let wait = |condition: &str| -> anyhow::Result<tokio::process::Command> {
        let mut command = tokio::process::Command::from(gitops::kubectl(a)?);
        command.args([
            "wait",
            &format!("--for=condition={condition}"),
            "plan/autopilot",
            &format!("--timeout={PROMOTER_TIMEOUT}"),
        ]);
        command.kill_on_drop(true);
        Ok(command)
    };
    let (mut ready, mut stalled) = (wait("Ready")?, wait("Stalled")?);
    let (ready, stalled) = (ready.output(), stalled.output());
    let promote = tokio::select! {
        out = ready => out.context("kubectl wait Ready")?.status.success(),
        out = stalled => {
            anyhow::ensure!(out.context("kubectl wait Stalled")?.status.success(), "neither");
            false
        }
    };
    if !promote {
        let mut get = tokio::process::Command::from(gitops::kubectl(a)?);
        get.args([
            "get",
            "plan/autopilot",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Stalled")].message}"#,
        ]);
        let out = get.output().await.context("kubectl get")?;
        return Ok(Promotion::Held(String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    let mut apply = tokio::process::Command::from(gitops::kubectl(b)?);
    apply.args(["apply", "-f"]).arg(plan_file);
    let out = apply.output().await.context("kubectl apply")?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply on B: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Promotion::Applied)
}

/// The Plan of the pipeline: both workers, one canary with a soak, from `url`.
fn pipeline_plan(id: &str, url: &str, sha256: &str) -> Plan {
    let mut workers = static_nodes(&WORKERS, 1);
    workers.limits.canary = Some(1);
    workers.limits.soak = Some("60s".to_owned());
    let update = update_to(V2, url, sha256, None, Some(workers));
    plan("autopilot", id, vec![k0s_command(update)])
}

/// Writes `plan` as the file the promoter applies (what the pipeline keeps in git).
fn plan_file(dir: &Path, plan: &Plan) -> std::path::PathBuf {
    let path = dir.join(format!("{}.json", plan.spec.id));
    std::fs::write(&path, serde_json::to_vec_pretty(plan).expect("the Plan")).expect("the file");
    path
}

#[tokio::test]
async fn a_plan_reaches_cluster_b_only_once_ready_on_cluster_a() {
    let a = FleetBuilder::new("promotion-a")
        .controllers(1)
        .workers(&WORKERS)
        .agents(Agents::Real)
        .worker_args(&["--restart", "exit"])
        .start()
        .await
        .unwrap();
    let b = FleetBuilder::new("promotion-b")
        .controllers(1)
        .workers(&WORKERS)
        .agents(Agents::Real)
        .start()
        .await
        .unwrap();
    let (a_config, b_config) = (a.cluster.admin_kubeconfig(0), b.cluster.admin_kubeconfig(0));
    let Fleet { cluster: _a_cluster, client: a_client, controllers: _a_controllers, workers } = a;
    // A's workers run under a restarting supervisor (the units' `Restart=`), which the crash
    // case needs.
    let a_workers: Vec<_> =
        workers.into_iter().map(|w| w.supervise(Duration::from_secs(1))).collect();
    let work = tempfile::tempdir().expect("tempdir");
    let v1 = binary_version(a_workers[0].process().binary_path());
    assert_ne!(v1, V2);

    // The payload that crashes after its boot: the real v2, killed 8 s into every run.
    let (v2_bytes, v2_sha) = v2_build();
    let real = work.path().join("v2-real");
    std::fs::write(&real, &v2_bytes).expect("the real v2");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dying = dying_v2(&real);
    let dying_sha = sha256_hex(&dying);
    let dying_server = FileServer::start(dying).await.unwrap();
    let good_server = FileServer::start(v2_bytes).await.unwrap();

    // (1) The crashing payload: A stalls, the promoter holds, B is never touched.
    let crashing = pipeline_plan("promote-crashing", dying_server.base_url(), &dying_sha);
    let file = plan_file(work.path(), &crashing);
    create_plan(&a_client, &crashing).await.unwrap();
    let held = promote(&a_config, &b_config, &file).await.unwrap();
    let ended = wait_plan_state(&a_client, "autopilot", PlanStateType::ApplyFailed).await.unwrap();
    let status = status_yaml(&ended);
    let Promotion::Held(message) = held else { panic!("promoted a crashing payload: {status}") };
    assert!(message.contains("worker-0"), "Stalled names the canary: {message}\n{status}");
    assert!(message.contains("rolled back after the update"), "{message}");
    assert_eq!(target(&ended, 0, "worker-1").state, TargetState::SignalPending, "{status}");
    assert_eq!(binary_version(a_workers[0].process().binary_path()), v1, "the canary is back");
    let b_plans: kube::Api<Plan> = kube::Api::all(b.client.clone());
    assert!(b_plans.list(&Default::default()).await.unwrap().items.is_empty(), "no Plan on B");
    for name in WORKERS {
        assert!(node_signal(&b.client, name).await.unwrap().is_none(), "B's {name} signalled");
    }

    // (2) The good payload: A completes, then B.
    delete_plan(&a_client).await;
    let good = pipeline_plan("promote-good", good_server.base_url(), &v2_sha);
    let file = plan_file(work.path(), &good);
    create_plan(&a_client, &good).await.unwrap();
    assert_eq!(promote(&a_config, &b_config, &file).await.unwrap(), Promotion::Applied);
    let a_done = wait_plan_state(&a_client, "autopilot", PlanStateType::Completed).await.unwrap();
    assert_eq!(a_done.spec.id, "promote-good");
    let b_done = wait_plan(&b.client, "autopilot", B_TIMEOUT, "B's run to complete", |p| {
        p.spec.id == "promote-good" && state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    for name in WORKERS {
        assert_eq!(target(&b_done, 0, name).state, TargetState::SignalCompleted);
        wait_node_version(&a_client, name, V2).await.unwrap();
        wait_node_version(&b.client, name, V2).await.unwrap();
    }
}

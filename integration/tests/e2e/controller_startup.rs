//! Controller startup against the real control plane: CRDs installed and Established, the
//! ControlNode registered (and unchanged by a restart), a newer CRD in the cluster left as it
//! is, exactly one leader among three
//! controllers, failover after the leader is killed, lease released on SIGTERM.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use autopilot_api::keys;
use autopilot_api::v1beta2::ControlNode;
use integration::{run_k0s, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::support::{Agents, Fleet, FleetBuilder};

/// Fast election timings so failover is observable in seconds.
const LEASE_SECS: u64 = 6;
const FAST_ELECTION: &[&str] =
    &["--lease-duration", "6s", "--renew-deadline", "4s", "--retry-period", "1s"];

/// After expiry the lease library waits up to one second of random jitter before taking a
/// free lease, and the take-over itself costs a few API round trips.
const TAKEOVER_SLACK: Duration = Duration::from_secs(2);

const STARTUP: Duration = Duration::from_secs(60);

fn build_version() -> String {
    let output = run_k0s(&["version"]).expect("k0s version runs");
    String::from_utf8(output.stdout).expect("utf-8").trim().to_string()
}

/// The current holder of the autopilot leader lease, if any.
async fn lease_holder(leases: &Api<Lease>) -> anyhow::Result<Option<String>> {
    let lease = leases.get_opt(keys::LEASE_NAME).await?;
    Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty()))
}

#[tokio::test]
async fn first_controller_installs_crds_and_registers_its_control_node() {
    let Fleet { cluster, client, mut controllers, workers: _workers } =
        FleetBuilder::new("startup-single")
            .controllers(1)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let controller = &mut controllers[0];

    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    let registered = wait_for(STARTUP, "ControlNode controller-0 with a status", || async {
        Ok(control_nodes
            .get_opt("controller-0")
            .await?
            .filter(|n| n.status.as_ref().is_some_and(|s| s.k0s_version.is_some())))
    })
    .await
    .unwrap();

    // The CRDs are installed and Established (the controller waited for that before
    // registering).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [keys::CRD_CONTROL_NODES, keys::CRD_PLANS, keys::CRD_UPDATE_CONFIGS] {
        let crd = crds.get(name).await.unwrap();
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "CRD {name} is Established");
    }

    // Labels, mode annotation, addresses and version.
    let labels = registered.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(keys::LABEL_HOSTNAME).map(String::as_str), Some("controller-0"));
    assert_eq!(labels.get(keys::LABEL_OS).map(String::as_str), Some(autopilot_api::platform::os()));
    assert_eq!(
        labels.get(keys::LABEL_ARCH).map(String::as_str),
        Some(autopilot_api::platform::arch())
    );
    let annotations = registered.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(keys::ANNOTATION_MODE).map(String::as_str), Some("controller"));
    let status = registered.status.clone().unwrap();
    let addresses: BTreeMap<String, String> =
        status.addresses.iter().map(|a| (a.type_.clone(), a.address.clone())).collect();
    let api_ip = cluster.api_address(0).rsplit_once(':').unwrap().0.to_string();
    assert_eq!(addresses.get("InternalIP"), Some(&api_ip));
    assert_eq!(addresses.get("Hostname").map(String::as_str), Some("controller-0"));
    assert_eq!(status.k0s_version.as_deref(), Some(build_version().as_str()));
    assert_eq!(registered.internal_ip(), Some(api_ip.as_str()));

    // A restart leaves the ControlNode as it was.
    controller.terminate().unwrap();
    let exit = controller.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert!(exit.success(), "controller exits cleanly on SIGTERM: {exit:?}");
    let mark = controller.log_mark();
    controller.restart().await.unwrap();
    controller.wait_for_log_after(mark, "became the autopilot leader", STARTUP).await.unwrap();
    let after = control_nodes.get("controller-0").await.unwrap();
    assert_eq!(after.metadata.labels, registered.metadata.labels);
    assert_eq!(after.metadata.annotations, registered.metadata.annotations);
    assert_eq!(after.status, registered.status);

    // The cluster's CRD is of a newer schema generation (as after a rollback): a restart
    // keeps it as it is instead of applying its own, older one.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let newer = serde_json::json!({"metadata": {"annotations": {
        keys::ANNOTATION_CRD_GENERATION: "999",
        "example.com/left-by": "a newer release",
    }}});
    crds.patch(keys::CRD_PLANS, &PatchParams::default(), &Patch::Merge(&newer)).await.unwrap();
    controller.terminate().unwrap();
    controller.wait_exit(Duration::from_secs(20)).await.unwrap();
    let mark = controller.log_mark();
    controller.restart().await.unwrap();
    controller
        .wait_for_log_after(mark, "the cluster's CRD is newer; keeping it", STARTUP)
        .await
        .unwrap();
    let kept = crds.get(keys::CRD_PLANS).await.unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(kept.get(keys::ANNOTATION_CRD_GENERATION).map(String::as_str), Some("999"));
    let other =
        crds.get(keys::CRD_CONTROL_NODES).await.unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(
        other.get(keys::ANNOTATION_CRD_GENERATION).map(String::as_str),
        Some(autopilot_api::v1beta2::CRD_SCHEMA_GENERATION.to_string().as_str()),
        "the others are applied as usual"
    );
}

#[tokio::test]
async fn three_controllers_elect_one_leader_and_fail_over_when_it_is_killed() {
    let Fleet { cluster: _cluster, client, controllers, workers: _workers } =
        FleetBuilder::new("startup-ha")
            .controllers(3)
            .agents(Agents::Real)
            .controller_args(FAST_ELECTION)
            .node_args("controller-2", &["--enable-worker"])
            .start()
            .await
            .unwrap();
    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    wait_for(STARTUP, "three registered ControlNodes", || async {
        let list = control_nodes.list(&Default::default()).await?;
        Ok((list.items.len() == 3).then_some(()))
    })
    .await
    .unwrap();
    let worker_mode = control_nodes.get("controller-2").await.unwrap();
    assert_eq!(
        worker_mode.metadata.annotations.unwrap_or_default().get(keys::ANNOTATION_MODE),
        Some(&"controller+worker".to_string())
    );

    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let holder =
        wait_for(STARTUP, "a leader lease holder", || lease_holder(&leases)).await.unwrap();
    let (leader_name, _) = holder.split_once('_').expect("identity is <node-name>_<suffix>");
    let leader = leader_name.strip_prefix("controller-").unwrap().parse::<usize>().unwrap();

    // Exactly one process believes it leads: the one named by the lease.
    wait_for(Duration::from_secs(10), "the holder to log its leadership", || async {
        Ok(controllers[leader].log().contains("became the autopilot leader").then_some(()))
    })
    .await
    .unwrap();
    for (i, c) in controllers.iter().enumerate() {
        let leads = c.log().matches("became the autopilot leader").count();
        assert_eq!(leads, usize::from(i == leader), "controller-{i} leadership log:\n{}", c.log());
    }

    // SIGKILL the leader: another controller holds the lease within the lease duration
    // (plus the library's jitter).
    controllers[leader].kill().unwrap();
    let killed_at = Instant::now();
    let new_holder = wait_for(
        Duration::from_secs(LEASE_SECS) + TAKEOVER_SLACK,
        "another controller to take the lease",
        || async { Ok(lease_holder(&leases).await?.filter(|h| *h != holder)) },
    )
    .await
    .unwrap();
    let took = killed_at.elapsed();
    assert!(!new_holder.starts_with(&format!("controller-{leader}_")), "{new_holder}");
    eprintln!("failover after SIGKILL took {took:?} (lease duration {LEASE_SECS}s)");
    let (new_name, _) = new_holder.split_once('_').unwrap();
    let new_leader = new_name.strip_prefix("controller-").unwrap().parse::<usize>().unwrap();
    controllers[new_leader]
        .wait_for_log("became the autopilot leader", Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test]
async fn sigterm_releases_the_leader_lease() {
    let Fleet { cluster: _cluster, client, mut controllers, workers: _workers } =
        FleetBuilder::new("startup-release")
            .controllers(1)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let controller = &mut controllers[0];
    let leases: Api<Lease> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let holder =
        wait_for(STARTUP, "a leader lease holder", || lease_holder(&leases)).await.unwrap();
    assert!(holder.starts_with("controller-0_"), "{holder}");

    controller.terminate().unwrap();
    let exit = controller.wait_exit(Duration::from_secs(20)).await.unwrap();
    assert!(exit.success(), "clean exit on SIGTERM: {exit:?}");
    // With the default 15s lease duration, an empty holder right after exit proves the
    // lease was released rather than left to expire.
    assert_eq!(lease_holder(&leases).await.unwrap(), None, "lease released on shutdown");
    assert!(controller.log().contains("leader lease released"), "{}", controller.log());

    // A restarted controller (new identity) takes the free lease at once.
    controller.restart().await.unwrap();
    let again = wait_for(Duration::from_secs(30), "the restarted controller to lead", || {
        lease_holder(&leases)
    })
    .await
    .unwrap();
    assert!(again.starts_with("controller-0_") && again != holder, "new identity: {again}");
}

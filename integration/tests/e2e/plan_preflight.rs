//! Preflight checks on the real control plane with real node agents (DESIGN §13, seed 004):
//! the leader signals every target a reference to its checks, each agent reads the checks
//! from the Plan, runs them (built-in probes and node-local allow-listed executables) and
//! reports raw records; the leader judges them.
//!
//! One cluster (a controller and two workers, all with their real agents) runs three plans
//! in turn, each a `preflight` command guarding a `k0supdate` to v2:
//! 1. checks that fail (a port in use → 98, a refused dial → 111, an `exec` entry that
//!    overruns → 62) end the plan `PreflightFailed`: the update command signals no node, no
//!    binary is touched, and every failing node is named with its status code;
//! 2. passing checks let the update run to `Completed`;
//! 3. a warning with `onWarn: Block` holds the plan, signalling no update, until the Plan
//!    carries the accept-warnings annotation with the plan's id; then the update runs;
//! 4. `k0s autopilot check` runs checks ad hoc and exits 2, 1 or 0.
//!
//! A second cluster, on real nodes, runs `scheduler` checks: the leader creates one Pod per
//! check and node from a ConfigMap template, the kubelet runs its container and reports its
//! exit code and termination message (or its stderr tail), and the leader judges the ended
//! Pods: exit code 3, a Pod past its deadline (62) and a missing template (22) end the
//! plan `PreflightFailed` with no binary touched; passing Pods let the update run; no check
//! Pod is left behind.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::v1beta2::{
    CheckStatus, Plan, PlanCommand, PlanCommandPreflight, PlanStateType, PreflightCheckStatus,
    TargetState,
};
use integration::{K0sProcess, wait_for};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::support::*;

/// A `preflight` plan command from its JSON (the shape an operator writes).
pub(crate) fn preflight(value: serde_json::Value) -> PlanCommand {
    let preflight: PlanCommandPreflight =
        serde_json::from_value(value).expect("a valid preflight command");
    PlanCommand { k0supdate: None, airgapupdate: None, preflight: Some(preflight) }
}

/// Static worker targets as JSON.
pub(crate) fn workers(names: &[&str]) -> serde_json::Value {
    json!({ "workers": serde_json::to_value(static_nodes(names, 1)).expect("targets") })
}

/// The verdicts of check `id` of command 0, panicking with the status when it has none.
pub(crate) fn check<'a>(plan: &'a Plan, id: &str) -> &'a PreflightCheckStatus {
    command(plan, 0)
        .preflight
        .as_ref()
        .and_then(|p| p.checks.iter().find(|c| c.id == id))
        .unwrap_or_else(|| panic!("no verdict for check {id}:\n{}", status_yaml(plan)))
}

/// `(node, status, status code)` of every node that ran check `id`.
pub(crate) fn verdicts(plan: &Plan, id: &str) -> Vec<(String, CheckStatus, i64)> {
    check(plan, id).nodes.iter().map(|n| (n.name.clone(), n.status, n.status_code)).collect()
}

/// Writes the node-local `exec` allow-list of `worker`.
fn allow_list(worker: &K0sProcess, yaml: &str) {
    std::fs::write(worker.data_dir().join("preflight-exec.yaml"), yaml).expect("allow-list");
}

/// A loopback port nothing listens on (bound once, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// Asserts the last signal on `name` is a preflight signal (no update signal replaced it).
async fn assert_only_checked(client: &kube::Client, name: &str, case: &str) {
    let signal = node_signal(client, name).await.expect("reading the signal").expect("a signal");
    assert!(
        signal.command.preflight.is_some() && signal.command.update().is_none(),
        "{case}: {name} got no update signal, only the checks: {signal:?}"
    );
}

#[tokio::test]
async fn preflight_checks_gate_the_update_with_real_agents() {
    let (v2_bytes, sha) = v2_build();
    let server = integration::http::FileServer::start(v2_bytes).await.unwrap();
    let base = server.base_url().to_owned();
    let Fleet { cluster, client, controllers: _controllers, workers: workers_running } =
        FleetBuilder::new("plan-preflight")
            .controllers(1)
            .workers(&["worker-0", "worker-1"])
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let (w0, w1) = (&workers_running[0], &workers_running[1]);
    allow_list(
        w1,
        "entries:\n  - name: slow\n    path: /bin/sleep\n    args: ['30']\n    timeoutSeconds: 2\n",
    );
    allow_list(w0, "entries:\n  - name: ok\n    path: /bin/sh\n    args: ['-c', 'echo fine']\n");
    let plans: Api<Plan> = Api::all(client.clone());

    let scenario = Scenario { cluster: &cluster, client: &client, base: &base, sha: &sha, w0, w1 };
    let before = [Before::of(w0), Before::of(w1)];

    // 1. Failing checks: the update command never signals a node.
    scenario.failing(&before).await;
    // 2. Passing checks: the update runs.
    scenario.passing(&before).await;
    // 3. A warning with onWarn: Block holds the update until the warnings are accepted.
    scenario.blocking_warning(&plans).await;
    // 4. `k0s autopilot check`: the same checks ad hoc, no update; the exit status is the
    //    worst result (0/1/2) and the table names each node's status code.
    scenario.check_command(&plans).await;
}

/// What the steps of [`preflight_checks_gate_the_update_with_real_agents`] share.
struct Scenario<'a> {
    /// The cluster (`k0s autopilot check` runs against it).
    cluster: &'a integration::Cluster,
    /// An admin client.
    client: &'a kube::Client,
    /// The v2 payload's server and sha256.
    base: &'a str,
    sha: &'a str,
    /// worker-0 (its exec allow-list: `ok`).
    w0: &'a K0sProcess,
    /// worker-1 (its exec allow-list: `slow`).
    w1: &'a K0sProcess,
}

impl Scenario<'_> {
    /// Step 1: failing checks; the update command never signals a node.
    async fn failing(&self, before: &[Before; 2]) {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let held_port = held.local_addr().expect("address").port();
        let refused_port = closed_port();
        let failing = failing_checks(held_port, refused_port);
        let update = update_to(
            V2,
            self.base,
            self.sha,
            None,
            Some(static_nodes(&["worker-0", "worker-1"], 2)),
        );
        create_plan(
            self.client,
            &plan("autopilot", "preflight-fails", vec![failing, k0s_command(update)]),
        )
        .await
        .expect("creating the plan");
        let failed = wait_plan_state(self.client, "autopilot", PlanStateType::PreflightFailed)
            .await
            .expect("the plan fails its preflight");
        check_failed_verdicts(&failed);
        // The update command never ran: no update signal, nothing cordoned, binaries untouched.
        for (name, (worker, before)) in
            ["worker-0", "worker-1"].iter().zip([self.w0, self.w1].iter().zip(before))
        {
            assert_only_checked(self.client, name, "failing checks").await;
            before.assert_untouched(worker, "failing checks");
        }
        // The failure is in the Events, naming the failing checks.
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let noted = wait_for(Duration::from_secs(30), "a PreflightFailed Event", || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().filter_map(|e| e.message).find(|m| {
                m.contains("PreflightFailed") && m.contains("check slow-exec on worker-1")
            }))
        })
        .await
        .expect("a PreflightFailed Event");
        assert!(noted.contains("preflight checks failed"), "{noted}");
        drop(held);
        delete_plan(self.client).await;
    }

    /// Step 2: passing checks; the update runs.
    async fn passing(&self, before: &[Before; 2]) {
        let listening = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let listening_port = listening.local_addr().expect("address").port();
        let passing = preflight(json!({
            "checks": [
                {
                    "id": "api-reachable",
                    "targets": {"all": true},
                    "command": {"id": "tcpDial",
                                "data": {"host": "127.0.0.1", "port": listening_port}},
                    "results": [
                        {"status": "success", "condition": {"statusCode": 0, "error": false},
                         "message": "{{ .Result }}"}
                    ]
                },
                {
                    "id": "site-check",
                    "targets": workers(&["worker-0"]),
                    "command": {"id": "exec", "data": {"name": "ok"}},
                    "results": [
                        {"status": "success", "condition": {"boolExpr": "result == 'fine'"},
                         "message": {"id": "site.ok", "defaultMessage": "{{ .Args.what }}: {{ .Result }}",
                                     "args": {"what": "site check"}}}
                    ]
                }
            ]
        }));
        let update = update_to(V2, self.base, self.sha, None, Some(static_nodes(&["worker-0"], 1)));
        create_plan(
            self.client,
            &plan("autopilot", "preflight-passes", vec![passing, k0s_command(update)]),
        )
        .await
        .expect("creating the plan");
        let done = wait_plan_state(self.client, "autopilot", PlanStateType::Completed)
            .await
            .expect("the plan completes");
        let yaml = status_yaml(&done);
        eprintln!("the passing plan's status:\n{yaml}");
        assert_eq!(
            command(&done, 0).preflight.as_ref().and_then(|p| p.status),
            Some(CheckStatus::Success),
            "{yaml}"
        );
        assert_eq!(verdicts(&done, "api-reachable").len(), 3, "every node dialled: {yaml}");
        assert_eq!(check(&done, "site-check").nodes[0].message, "site check: fine");
        assert_eq!(target(&done, 1, "worker-0").state, TargetState::SignalCompleted, "{yaml}");
        assert_eq!(version_on_disk(self.w0), V2, "the guarded update ran");
        before[1].assert_untouched(self.w1, "not a target of the update");
        drop(listening);
        delete_plan(self.client).await;
    }

    /// Step 3: a warning with onWarn: Block holds the update until the warnings are
    /// accepted.
    async fn blocking_warning(&self, plans: &Api<Plan>) {
        let blocking = blocking_checks();
        let update = update_to(V2, self.base, self.sha, None, Some(static_nodes(&["worker-1"], 1)));
        create_plan(
            self.client,
            &plan("autopilot", "preflight-blocks", vec![blocking, k0s_command(update)]),
        )
        .await
        .expect("creating the plan");
        let held_plan = wait_plan(
            self.client,
            "autopilot",
            PLAN_TIMEOUT,
            "the warning to hold the plan",
            |p| {
                p.status.as_ref().is_some_and(|s| !s.commands.is_empty())
                    && command(p, 0)
                        .reason
                        .as_deref()
                        .is_some_and(|r| r.contains(keys::ANNOTATION_ACCEPT_WARNINGS))
            },
        )
        .await
        .expect("the warning holds the plan");
        assert_eq!(verdicts(&held_plan, "marker"), [("worker-1".into(), CheckStatus::Warn, 1)]);
        assert!(
            command(&held_plan, 0)
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("worker-1 has no marker")),
            "{}",
            status_yaml(&held_plan)
        );
        // Held: over a few seconds of the leader's passes, the update signals nobody.
        update_held(self.client).await;
        assert_only_checked(self.client, "worker-1", "held by a warning").await;
        plans
            .patch(
                "autopilot",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    keys::ANNOTATION_ACCEPT_WARNINGS: "preflight-blocks"
                }}})),
            )
            .await
            .expect("accepting the warnings");
        let done = wait_plan_state(self.client, "autopilot", PlanStateType::Completed)
            .await
            .expect("the plan completes");
        assert_eq!(target(&done, 1, "worker-1").state, TargetState::SignalCompleted);
        assert_eq!(
            check(&done, "marker").status,
            Some(CheckStatus::Warn),
            "the warning stays in status"
        );
        assert_eq!(version_on_disk(self.w1), V2, "accepted: the update ran");
    }

    /// Step 4: `k0s autopilot check`: the same checks ad hoc, no update; the exit status is
    /// the worst result (0/1/2) and the table names each node's status code.
    async fn check_command(&self, plans: &Api<Plan>) {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let held_port = held.local_addr().expect("address").port();
        let erroring = format!(
            "checks:\n\
             - id: port-free\n  targets: {{workers: {{discovery: {{static: {{nodes: [worker-0]}}}}}}}}\n\
             \x20 command: {{id: portAvailable, data: {{port: {held_port}, address: 127.0.0.1}}}}\n\
             \x20 results:\n\
             \x20   - {{status: error, condition: {{status_code: 98}}, message: 'in use on {{{{ .Node }}}}'}}\n\
             \x20   - {{status: success, message: free}}\n\
             - id: version\n  targets: {{global: true}}\n  command: {{id: k0sVersion}}\n\
             \x20 results: [{{status: success, message: '{{{{ .Result }}}}'}}]\n"
        );
        let (code, stdout) = check_cli(self.cluster, "erroring.yaml", &erroring).await;
        assert_eq!(code, Some(2), "an error exits 2:\n{stdout}");
        assert!(
            stdout
                .starts_with("replacing the ended Plan autopilot (id preflight-blocks, Completed)"),
            "{stdout}"
        );
        assert!(stdout.contains("CHECK port-free: error\n"), "{stdout}");
        assert!(
            stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()[..]
                == ["worker-0", "error", "98", "in", "use", "on", "worker-0"]),
            "{stdout}"
        );
        assert!(stdout.contains("CHECK version: success\n"), "{stdout}");
        assert!(stdout.contains(&format!("worker-1      success     0  {V2}")), "{stdout}");
        drop(held);

        let warning = "checks:\n\
            - id: marker\n  targets: {global: true}\n\
            \x20 command: {id: fileExists, data: {path: /nonexistent/k0s-preflight-marker}}\n\
            \x20 results:\n\
            \x20   - {status: success, condition: {status_code: 0}, message: present}\n\
            \x20   - {status: warn, message: 'no marker on {{ .Node }}'}\n";
        let (code, stdout) = check_cli(self.cluster, "warning.yaml", warning).await;
        assert_eq!(code, Some(1), "a warning exits 1:\n{stdout}");
        assert!(stdout.contains("CHECK marker: warn\n"), "{stdout}");
        assert!(stdout.contains("no marker on controller-0"), "{stdout}");

        let passing = "checks:\n\
            - id: version\n  targets: {global: true}\n  command: {id: k0sVersion}\n\
            \x20 results: [{status: success, condition: {bool_expr: \"result.startsWith('v')\"}, message: ok}]\n";
        let (code, stdout) = check_cli(self.cluster, "passing.yaml", passing).await;
        assert_eq!(code, Some(0), "{stdout}");
        assert!(stdout.ends_with("result: success: every check passed\n"), "{stdout}");
        let checked = plans.get("autopilot").await.expect("reading the Plan");
        assert_eq!(checked.spec.commands.len(), 1, "checks only: no update command");
        assert_eq!(verdicts(&checked, "version").len(), 3, "{}", status_yaml(&checked));
    }
}

/// Step 3's check: a marker file missing on worker-1 is a warning, and warnings block.
fn blocking_checks() -> PlanCommand {
    preflight(json!({
        "onWarn": "Block",
        "checks": [{
            "id": "marker",
            "targets": workers(&["worker-1"]),
            "command": {"id": "fileExists", "data": {"path": "/nonexistent/k0s-preflight-marker"}},
            "results": [
                {"status": "success", "condition": {"statusCode": 0}, "message": "present"},
                {"status": "warn", "condition": {"statusCode": 1}, "message": "{{ .Node }} has no marker"}
            ]
        }]
    }))
}

/// Over a few seconds of the leader's passes, the plan stays held and its update command
/// signals nobody.
async fn update_held(client: &kube::Client) {
    watch_plan_for(client, "autopilot", Duration::from_secs(3), |p| {
        if p.status.as_ref().is_some_and(|s| s.state.is_terminal()) {
            return Err("the plan ended while held".to_owned());
        }
        let update = p.status.as_ref().and_then(|s| s.commands.get(1));
        match update.into_iter().flat_map(targets).find(|t| t.state != TargetState::SignalPending) {
            Some(t) => Err(format!("{} was signalled for the update while held", t.name)),
            None => Ok(()),
        }
    })
    .await
    .expect("held: nobody signalled");
}

/// Step 1's checks: a port in use on worker-0 (98), a refused dial (111) and a slow `exec`
/// entry (62) on worker-1, and `k0sVersion` everywhere.
fn failing_checks(held_port: u16, refused_port: u16) -> PlanCommand {
    preflight(json!({
        "checks": [
            {
                "id": "port-free",
                "targets": workers(&["worker-0"]),
                "command": {"id": "portAvailable",
                            "data": {"port": held_port, "address": "127.0.0.1"}},
                "results": [
                    {"status": "error", "condition": {"statusCode": 98},
                     "message": "port in use on {{ .Node }}: {{ .Error }}"},
                    {"status": "success", "condition": {"statusCode": 0}, "message": "free"}
                ]
            },
            {
                "id": "dial",
                "targets": workers(&["worker-1"]),
                "command": {"id": "tcpDial", "data": {"host": "127.0.0.1", "port": refused_port}},
                "results": [
                    {"status": "success", "condition": {"statusCode": 0}, "message": "reached"},
                    {"status": "error", "condition": {"statusCode": 111},
                     "message": "refused ({{ .StatusCode }})"}
                ]
            },
            {
                "id": "slow-exec",
                "targets": workers(&["worker-1"]),
                "command": {"id": "exec", "timeout": 20, "data": {"name": "slow"}},
                "results": [
                    {"status": "success", "condition": {"statusCode": 0}, "message": "done"},
                    {"status": "error", "condition": {"statusCode": 62}, "message": "too slow"}
                ]
            },
            {
                "id": "version",
                "targets": {"all": true},
                "command": {"id": "k0sVersion"},
                "results": [
                    {"status": "success", "condition": {"boolExpr": "result.startsWith('v')"},
                     "message": "{{ .Node }} runs {{ .Result }}"}
                ]
            }
        ]
    }))
}

/// Step 1's verdicts: each failing check's nodes, status codes and messages, the
/// description naming them, and the update command that never ran.
fn check_failed_verdicts(failed: &Plan) {
    let yaml = status_yaml(failed);
    eprintln!("the failing plan's status:\n{yaml}");
    assert_eq!(command(failed, 0).state, PlanStateType::PreflightFailed, "{yaml}");
    assert_eq!(
        check(failed, "port-free").status,
        Some(CheckStatus::Error),
        "worst node decides: {yaml}"
    );
    assert_eq!(verdicts(failed, "port-free"), [("worker-0".into(), CheckStatus::Error, 98)]);
    assert_eq!(verdicts(failed, "dial"), [("worker-1".into(), CheckStatus::Error, 111)]);
    assert_eq!(verdicts(failed, "slow-exec"), [("worker-1".into(), CheckStatus::Error, 62)]);
    assert_eq!(
        verdicts(failed, "version"),
        [
            ("controller-0".into(), CheckStatus::Success, 0),
            ("worker-0".into(), CheckStatus::Success, 0),
            ("worker-1".into(), CheckStatus::Success, 0),
        ],
        "the probe runs on the ControlNode's agent too: {yaml}"
    );
    let port_message = &check(failed, "port-free").nodes[0].message;
    assert!(
        port_message.starts_with("port in use on worker-0: ") && port_message.contains("bind"),
        "placeholders filled from the node's record: {port_message}"
    );
    assert_eq!(check(failed, "dial").nodes[0].message, "refused (111)");
    let description = command(failed, 0).description.clone().unwrap_or_default();
    for named in
        ["check port-free on worker-0", "check dial on worker-1", "check slow-exec on worker-1"]
    {
        assert!(description.contains(named), "{named} in the description: {description}");
    }
    // The update command never ran: no update signal, nothing cordoned, binaries untouched.
    assert!(
        command(failed, 1).state != PlanStateType::Completed
            && targets(command(failed, 1)).iter().all(|t| t.state == TargetState::SignalPending),
        "the update signalled nobody: {yaml}"
    );
}

/// Runs `k0s autopilot check -f <file>` (the file written with `checks`) as the admin;
/// returns its exit status and stdout.
async fn check_cli(
    cluster: &integration::Cluster,
    file: &str,
    checks: &str,
) -> (Option<i32>, String) {
    let path = cluster.dir().join(file);
    std::fs::write(&path, checks).expect("writing the checks");
    let kubeconfig = cluster.admin_kubeconfig(0);
    let output = tokio::task::spawn_blocking(move || {
        let path = path.to_string_lossy().into_owned();
        let kubeconfig = kubeconfig.to_string_lossy().into_owned();
        integration::run_k0s(&["autopilot", "check", "-f", &path, "--kubeconfig", &kubeconfig])
            .expect("k0s runs")
    })
    .await
    .expect("the k0s run");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!(
        "k0s autopilot check -f {file}:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), stdout)
}

/// A `scheduler` check of template `pod` on `targets` (narrowed by `selector`), with a
/// timeout: exit 0 is success, anything else an error naming the code and the output.
pub(crate) fn scheduler_check(
    id: &str,
    pod: &str,
    targets: serde_json::Value,
    selector: serde_json::Value,
    timeout: u32,
) -> serde_json::Value {
    json!({
        "id": id,
        "targets": targets,
        "command": {"id": "scheduler", "timeout": timeout,
                    "data": {"kubernetes": {"podName": pod, "nodeSelector": selector}}},
        "results": [
            {"status": "success", "condition": {"statusCode": 0, "error": false},
             "message": "{{ .Node }}: {{ .Result }}"},
            {"status": "error", "message": "{{ .Node }}: {{ .StatusCode }} {{ .Result }}"}
        ]
    })
}

/// The check Pods left in `k0s-autopilot`.
pub(crate) async fn check_pods(client: &kube::Client) -> Vec<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), keys::NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels("autopilot.k0sproject.io/preflight-run"))
        .await
        .expect("listing check Pods");
    list.items.into_iter().filter_map(|p| p.metadata.name).collect()
}

/// Scheduler checks on real nodes ([`integration::real_node`]): each check Pod is a real
/// container the kubelet runs, and its exit status and output (termination message, or the
/// stderr tail on failure) decide.
#[tokio::test]
async fn scheduler_checks_run_a_pod_on_each_node_on_real_nodes() {
    let (v2_bytes, sha) = v2_build();
    let server = integration::http::FileServer::start(v2_bytes).await.unwrap();
    let base = server.base_url().to_owned();
    let names = ["worker-0", "worker-1"];
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: workers_running } =
        FleetBuilder::new("plan-preflight-pods")
            .workers(&names)
            .real_workers()
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let (w0, w1) = (&workers_running[0], &workers_running[1]);
    let v1 = binary_version(w0.binary_path());
    for name in names {
        wait_node_version(&client, name, &v1).await.unwrap();
    }
    create_templates(&client).await;
    let hostname = |node: &str| json!({keys::LABEL_HOSTNAME: node});

    // 1. Failing Pods: exit code 3 (its stderr the message), a Pod past its deadline (62),
    //    a template that does not exist (22); the update signals nobody.
    let before = [Before::of(w0), Before::of(w1)];
    let failing = preflight(json!({"checks": [
        scheduler_check("license", "license-checker", json!({"all": true}), json!({}), 15),
        scheduler_check("expiry", "expired", json!({"all": true}), hostname("worker-1"), 15),
        scheduler_check("hang", "hangs", workers(&["worker-0"]), json!({}), 8),
        scheduler_check("missing", "no-such-template", workers(&["worker-1"]), json!({}), 15),
    ]}));
    let update = update_to(V2, &base, &sha, None, Some(static_nodes(&["worker-0", "worker-1"], 2)));
    create_plan(&client, &plan("autopilot", "pods-fail", vec![failing, k0s_command(update)]))
        .await
        .unwrap();
    let failed =
        wait_plan_state(&client, "autopilot", PlanStateType::PreflightFailed).await.unwrap();
    check_failed_pods(&failed);
    for (name, (worker, before)) in
        ["worker-0", "worker-1"].iter().zip([w0, w1].iter().zip(&before))
    {
        assert_only_no_update(&client, name).await;
        before.assert_untouched(worker, "failing scheduler checks");
    }
    wait_for(Duration::from_secs(30), "every check Pod to be deleted", || async {
        Ok(check_pods(&client).await.is_empty().then_some(()))
    })
    .await
    .unwrap();
    delete_plan(&client).await;

    // 2. Passing Pods let the update run; their Pods are gone at the end.
    let passing = preflight(json!({"checks": [
        scheduler_check("license", "license-checker", workers(&["worker-0", "worker-1"]), json!({}), 15),
    ]}));
    let update = update_to(V2, &base, &sha, None, Some(static_nodes(&["worker-0"], 1)));
    create_plan(&client, &plan("autopilot", "pods-pass", vec![passing, k0s_command(update)]))
        .await
        .unwrap();
    let done = wait_plan_state(&client, "autopilot", PlanStateType::Completed).await.unwrap();
    let yaml = status_yaml(&done);
    assert_eq!(verdicts(&done, "license").len(), 2, "{yaml}");
    assert_eq!(target(&done, 1, "worker-0").state, TargetState::SignalCompleted, "{yaml}");
    assert_eq!(version_on_disk(w0), V2, "the guarded update ran");
    assert!(check_pods(&client).await.is_empty(), "no check Pod outlives its check");
}

/// The scheduler checks' Pod templates: one that passes, one that exits 3, one that hangs.
async fn create_templates(client: &kube::Client) {
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), keys::NAMESPACE);
    for template in [
        pod_template("license-checker", "echo licensed until 2027 > /dev/termination-log"),
        pod_template("expired", "echo 'license expired' >&2; exit 3"),
        pod_template("hangs", "sleep 300"),
    ] {
        config_maps.create(&Default::default(), &template).await.expect("a Pod template");
    }
}

/// The failing scheduler checks' verdicts: exit code 3 with its stderr, a Pod past its
/// deadline (62), a template that does not exist (22).
fn check_failed_pods(failed: &Plan) {
    let yaml = status_yaml(failed);
    eprintln!("the failing scheduler plan's status:\n{yaml}");
    assert_eq!(
        verdicts(failed, "license"),
        [
            ("worker-0".into(), CheckStatus::Success, 0),
            ("worker-1".into(), CheckStatus::Success, 0),
        ],
        "all: every Node (the controller runs no kubelet): {yaml}"
    );
    assert_eq!(check(failed, "license").nodes[0].message, "worker-0: licensed until 2027");
    assert_eq!(verdicts(failed, "expiry"), [("worker-1".into(), CheckStatus::Error, 3)]);
    assert_eq!(check(failed, "expiry").nodes[0].message, "worker-1: 3 license expired");
    assert_eq!(verdicts(failed, "hang"), [("worker-0".into(), CheckStatus::Error, 62)]);
    assert_eq!(verdicts(failed, "missing"), [("worker-1".into(), CheckStatus::Error, 22)]);
    assert_eq!(
        check(failed, "missing").nodes[0].message,
        "worker-1: 22 ConfigMap k0s-autopilot/no-such-template does not exist"
    );
}

/// Asserts `name` got no update signal (scheduler checks signal no agent at all).
pub(crate) async fn assert_only_no_update(client: &kube::Client, name: &str) {
    let signal = node_signal(client, name).await.expect("reading the signal");
    assert!(
        signal.as_ref().is_none_or(|s| s.command.update().is_none()),
        "{name} got no update signal: {signal:?}"
    );
}

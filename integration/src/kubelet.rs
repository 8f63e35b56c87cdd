//! Stand-ins for the kubelet duties the tests need: confirming pod deletions
//! ([`FakeKubelet`]) and running the Pods of preflight `scheduler` checks ([`PodRunner`]).
//!
//! No kubelet runs in the test topology, so a pod bound to a test node that is evicted (or
//! deleted with a grace period) would stay `Terminating` forever. [`FakeKubelet`] watches the
//! pods of the given nodes and, when one gets a `deletionTimestamp`, deletes it with grace
//! period 0 — what a kubelet does once the containers have stopped.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::task::JoinHandle;

/// Confirms the deletion of terminating pods on a set of nodes; stops when dropped.
#[derive(Debug)]
pub struct FakeKubelet {
    task: JoinHandle<()>,
}

impl FakeKubelet {
    /// Start confirming deletions of pods bound to any of `nodes`.
    pub fn start(client: kube::Client, nodes: &[&str]) -> Self {
        let nodes: BTreeSet<String> = nodes.iter().map(|n| (*n).to_string()).collect();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::all(client.clone());
            let mut events = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(pod) = event else { continue };
                if bound_to(&pod, &nodes) && pod.metadata.deletion_timestamp.is_some() {
                    confirm_deletion(&client, &pod, "fake kubelet").await;
                }
            }
        });
        Self { task }
    }
}

/// Whether `pod` is bound to one of `nodes`.
fn bound_to(pod: &Pod, nodes: &BTreeSet<String>) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| nodes.contains(n))
}

/// Delete a terminating `pod` with grace period 0, as a kubelet does once its containers
/// stopped; `who` names the stand-in in the log line of a failure.
async fn confirm_deletion(client: &kube::Client, pod: &Pod, who: &str) {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let params = DeleteParams::default().grace_period(0);
    if let Err(err) = api.delete(&pod.name_any(), &params).await {
        eprintln!("{who}: confirming deletion of {namespace}/{}: {err}", pod.name_any());
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A stand-in for the kubelet's part in running a Pod, for the Pods of preflight
/// `scheduler` checks: it runs the first container's `command` + `args` as a local process
/// (the image is not pulled; the harness has no container runtime) and reports the Pod's
/// phase, exit code and output the way a kubelet does.
///
/// What it reproduces of a kubelet, for Pods bound to its nodes:
/// - `Running` with the container running once the process starts;
/// - on exit, `Succeeded` (exit code 0) or `Failed`, with
///   `containerStatuses[0].state.terminated {exitCode, reason, message}`; the message is the
///   container's termination-message file (at most 4,096 bytes), or, when that is empty, the
///   process failed and the policy is `FallbackToLogsOnError`, the tail of its output (at
///   most 80 lines and 2,048 bytes). The file is a local one: every occurrence of the
///   container's `terminationMessagePath` (default `/dev/termination-log`) in its command and
///   arguments is replaced by that file's path, as a kubelet mounts it there;
/// - past `activeDeadlineSeconds`, the process is killed and the Pod is `Failed` with reason
///   `DeadlineExceeded`;
/// - a Pod being deleted has its process killed and its deletion confirmed (grace period 0).
///
/// It also creates the ServiceAccount `default` of `namespace` (kube-controller-manager's
/// job in a real cluster; the API server admits no Pod without it).
#[derive(Debug)]
pub struct PodRunner {
    task: JoinHandle<()>,
}

/// How much of a container's output a kubelet keeps as its termination message.
const MESSAGE_FILE_BYTES: usize = 4096;
const LOG_TAIL_LINES: usize = 80;
const LOG_TAIL_BYTES: usize = 2048;

impl PodRunner {
    /// Start running the Pods of `namespace` bound to any of `nodes`; `dir` holds the
    /// termination-message files.
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        nodes: &[&str],
        dir: &std::path::Path,
    ) -> anyhow::Result<Self> {
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        use kube::api::PostParams;
        let created_ns = Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?,
            )
            .await;
        ignore_exists(created_ns.map(drop))?;
        let created_sa = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}}))?,
            )
            .await;
        ignore_exists(created_sa.map(drop))?;
        std::fs::create_dir_all(dir)?;

        let nodes: BTreeSet<String> = nodes.iter().map(|n| (*n).to_string()).collect();
        let namespace = namespace.to_owned();
        let dir = dir.to_owned();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let mut running: std::collections::HashMap<String, JoinHandle<()>> =
                std::collections::HashMap::new();
            let mut events = watcher(pods.clone(), watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(pod) = event else { continue };
                if !bound_to(&pod, &nodes) {
                    continue;
                }
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if pod.metadata.deletion_timestamp.is_some() {
                    if let Some(run) = running.remove(&uid) {
                        run.abort(); // kills the process (kill_on_drop)
                    }
                    confirm_deletion(&client, &pod, "pod runner").await;
                    continue;
                }
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                if running.contains_key(&uid) || matches!(phase, Some("Succeeded" | "Failed")) {
                    continue;
                }
                let run = tokio::spawn(run_pod(pods.clone(), pod, dir.clone()));
                running.insert(uid, run);
            }
        });
        Ok(Self { task })
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn ignore_exists(result: Result<(), kube::Error>) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        other => Ok(other?),
    }
}

/// Run one Pod to its end and report it.
async fn run_pod(pods: Api<Pod>, pod: Pod, dir: std::path::PathBuf) {
    let name = pod.name_any();
    if let Err(err) = run_pod_inner(&pods, &pod, &dir).await {
        eprintln!("pod runner: running Pod {name}: {err:#}");
    }
}

async fn run_pod_inner(pods: &Api<Pod>, pod: &Pod, dir: &std::path::Path) -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    use serde_json::json;
    let name = pod.name_any();
    let spec = pod.spec.clone().unwrap_or_default();
    let container = spec.containers.first().cloned().unwrap_or_default();
    let message_file = dir.join(format!("{name}.termination-log"));
    std::fs::write(&message_file, b"")?;
    let message_path =
        container.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
    let local = message_file.to_string_lossy().into_owned();
    let argv: Vec<String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|arg| arg.replace(&message_path, &local))
        .collect();
    let started = jiff::Timestamp::now().to_string();
    let patch_status = |status: serde_json::Value| {
        let name = name.clone();
        async move {
            pods.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map(drop)
        }
    };
    let container_status = |state: serde_json::Value| {
        json!([{"name": container.name, "image": container.image.clone().unwrap_or_default(),
                "imageID": "", "ready": false, "restartCount": 0, "state": state}])
    };
    let Some((program, args)) = argv.split_first() else {
        patch_status(json!({"phase": "Failed", "reason": "NoCommand",
            "message": "the harness runs a container's command; this one has none"}))
        .await?;
        return Ok(());
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for var in container.env.iter().flatten() {
        command.env(&var.name, var.value.clone().unwrap_or_default());
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            patch_status(json!({"phase": "Failed", "containerStatuses": container_status(json!({
                "terminated": {"exitCode": 128, "reason": "StartError",
                               "message": format!("starting {program}: {err}")}}))}))
            .await?;
            return Ok(());
        }
    };
    patch_status(json!({"phase": "Running", "startTime": started,
        "containerStatuses": container_status(json!({"running": {"startedAt": started}}))}))
    .await?;
    let deadline = spec
        .active_deadline_seconds
        .map_or(Duration::MAX, |s| Duration::from_secs(s.unsigned_abs()));
    let Ok(output) = tokio::time::timeout(deadline, child.wait_with_output()).await else {
        // The timeout dropped the child: killed.
        patch_status(json!({"phase": "Failed", "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline"}))
        .await?;
        return Ok(());
    };
    let output = output?;
    let exit_code = output.status.code().unwrap_or(137);
    let mut message = std::fs::read(&message_file).unwrap_or_default();
    message.truncate(MESSAGE_FILE_BYTES);
    let mut message = String::from_utf8_lossy(&message).into_owned();
    let fallback = container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    if message.is_empty() && exit_code != 0 && fallback {
        let logs = [output.stdout, output.stderr].concat();
        let logs = String::from_utf8_lossy(&logs).into_owned();
        let lines: Vec<&str> = logs.lines().collect();
        let mut tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        if tail.len() > LOG_TAIL_BYTES {
            let mut cut = tail.len() - LOG_TAIL_BYTES;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail = tail[cut..].to_owned();
        }
        message = tail;
    }
    let (phase, reason) =
        if exit_code == 0 { ("Succeeded", "Completed") } else { ("Failed", "Error") };
    let finished = jiff::Timestamp::now().to_string();
    patch_status(json!({"phase": phase, "containerStatuses": container_status(json!({
        "terminated": {"exitCode": exit_code, "reason": reason, "message": message,
                       "startedAt": started, "finishedAt": finished}}))}))
    .await?;
    Ok(())
}

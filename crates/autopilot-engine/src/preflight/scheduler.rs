//! `scheduler` checks (seed 004): the pure half. A Pod template shipped in a ConfigMap
//! becomes one Pod pinned to each target node; a Pod that ended becomes the node's raw
//! record. Creating, watching and deleting the Pods is the leader's shell; nothing here
//! touches the API.
//!
//! **The template**: a ConfigMap named after the check's `data.kubernetes.podName` in the
//! namespace [`keys::NAMESPACE`], whose key [`TEMPLATE_KEY`] holds a Pod manifest (YAML or
//! JSON). Only the manifest's labels, annotations and `spec` are used:
//!
//! ```yaml
//! apiVersion: v1
//! kind: ConfigMap
//! metadata: {name: license-checker, namespace: k0s-autopilot}
//! data:
//!   pod.yaml: |
//!     apiVersion: v1
//!     kind: Pod
//!     spec:
//!       containers:
//!         - name: check
//!           image: registry.example/license-checker:1.0
//!           command: ["/check", "--quick"]
//! ```
//!
//! **The Pod** ([`pod_for`]): named from the run, command, check and node (stable, so a
//! second leader finds the first one's Pod instead of starting another), labelled with them,
//! bound to the node (`spec.nodeName`: no scheduler involved), `restartPolicy: Never`,
//! `activeDeadlineSeconds` = the check's timeout (the kubelet stops it there), tolerating
//! every taint (a check must also run on a cordoned node), and each container with
//! `terminationMessagePolicy: FallbackToLogsOnError`: the answer is what the container
//! writes to `/dev/termination-log`, or the tail of its output when it failed, and reaches
//! the Pod's status without reading logs. The engine (`crate::plan`) adds the Plan as owner.
//!
//! **The record** ([`record_of`]): the first container's exit code is the status code and its
//! termination message's lines are the messages; a Pod stopped at its deadline is 62; a Pod
//! that failed without running its container is 1. Seed 004's 22 (an invalid reference) is
//! [`template`]'s error.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::preflight::{RawRecord, status_code};
use autopilot_api::v1beta2::{FrozenTemplate, PlanSpec, PreflightCommandId};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Toleration};
use sha2::Digest as _;

/// The ConfigMap key holding the Pod manifest.
pub const TEMPLATE_KEY: &str = "pod.yaml";

/// Label: the plan run a check Pod belongs to (a hash of the run id: label values are short).
pub const LABEL_RUN: &str = "autopilot.k0sproject.io/preflight-run";
/// Label: the check id.
pub const LABEL_CHECK: &str = "autopilot.k0sproject.io/preflight-check";
/// Label: the node the Pod runs on.
pub const LABEL_NODE: &str = "autopilot.k0sproject.io/preflight-node";

/// Whether `spec` has a `scheduler` check (its Pods and templates must then be observed).
pub fn in_spec(spec: &PlanSpec) -> bool {
    spec.commands.iter().filter_map(|command| command.preflight.as_ref()).any(|preflight| {
        preflight.checks.iter().any(|check| check.command.id == PreflightCommandId::Scheduler)
    })
}

/// The Pod template of `pod_name`, from its ConfigMap (`None`: there is none). `Err` says
/// why the reference is unusable (seed 004's status code 22).
pub fn template(config_map: Option<&ConfigMap>, pod_name: &str) -> Result<Pod, String> {
    let where_ = format!("ConfigMap {}/{pod_name}", keys::NAMESPACE);
    let config_map = config_map.ok_or_else(|| format!("{where_} does not exist"))?;
    let text = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(TEMPLATE_KEY))
        .ok_or_else(|| format!("{where_} has no key {TEMPLATE_KEY}"))?;
    let pod: Pod = crate::yaml::from_str(text)
        .map_err(|error| format!("{where_} key {TEMPLATE_KEY} is not a Pod: {error}"))?;
    let spec = pod.spec.as_ref().ok_or_else(|| format!("{where_}: the Pod has no spec"))?;
    if spec.containers.is_empty() {
        return Err(format!("{where_}: the Pod has no container"));
    }
    if let Some(field) = escalation(spec) {
        return Err(format!(
            "{where_}: the Pod asks for {field}, which Pod Security baseline forbids (a check \
             Pod may not escalate its privileges on the node)"
        ));
    }
    Ok(pod)
}

/// The largest Pod template kept with a run (as JSON): a check's Pod needs a few hundred
/// bytes; the Plan status must stay small.
pub const MAX_TEMPLATE_BYTES: usize = 16 * 1024;

/// The template of check `check` (ConfigMap `pod_name`) read and frozen at NewPlan
/// (DESIGN §14): the Pod it holds, checked as [`template`] does, with the digest of the text
/// read; or why it cannot be used. Check Pods are made from this copy for the whole run.
pub fn freeze(check: &str, config_map: Option<&ConfigMap>, pod_name: &str) -> FrozenTemplate {
    let text = config_map.and_then(|c| c.data.as_ref()).and_then(|d| d.get(TEMPLATE_KEY));
    let sha256 = text.map(|t| hex::encode(sha2::Sha256::digest(t.as_bytes()))).unwrap_or_default();
    let (pod, problem) = match template(config_map, pod_name) {
        Ok(pod) => {
            let kept = Pod {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    labels: pod.metadata.labels,
                    annotations: pod.metadata.annotations,
                    ..Default::default()
                },
                spec: pod.spec,
                status: None,
            };
            match serde_json::to_string(&kept) {
                Ok(json) if json.len() <= MAX_TEMPLATE_BYTES => (Some(json), None),
                Ok(json) => (
                    None,
                    Some(format!(
                        "ConfigMap {}/{pod_name}: the Pod is {} bytes, over the {MAX_TEMPLATE_BYTES} a check Pod may take",
                        keys::NAMESPACE,
                        json.len()
                    )),
                ),
                Err(error) => {
                    (None, Some(format!("ConfigMap {}/{pod_name}: {error}", keys::NAMESPACE)))
                }
            }
        }
        Err(problem) => (None, Some(problem)),
    };
    FrozenTemplate {
        check: check.to_owned(),
        config_map: pod_name.to_owned(),
        pod,
        sha256,
        problem,
    }
}

/// The Pod of a frozen template; `Err` says why there is none (status code 22).
pub fn thaw(frozen: &FrozenTemplate) -> Result<Pod, String> {
    match (&frozen.pod, &frozen.problem) {
        (Some(json), _) => serde_json::from_str(json).map_err(|error| {
            format!("the frozen template of check {:?} cannot be read: {error}", frozen.check)
        }),
        (None, Some(problem)) => Err(problem.clone()),
        (None, None) => Err(format!("check {:?} has no frozen template", frozen.check)),
    }
}

/// The capabilities Pod Security `baseline` lets a container add.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The first field of `spec` that Pod Security `baseline` forbids (DESIGN §14), named as in
/// the manifest: host namespaces, `hostPath` volumes, host ports, privileged containers,
/// capabilities beyond the baseline set, privilege escalation, unconfined seccomp, a
/// non-default `procMount` and Windows host processes. `None` when there is none.
pub fn escalation(spec: &k8s_openapi::api::core::v1::PodSpec) -> Option<String> {
    let flags = [
        ("spec.hostNetwork", spec.host_network),
        ("spec.hostPID", spec.host_pid),
        ("spec.hostIPC", spec.host_ipc),
    ];
    if let Some((field, _)) = flags.iter().find(|(_, set)| *set == Some(true)) {
        return Some((*field).to_owned());
    }
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        if volume.host_path.is_some() {
            return Some(format!("spec.volumes[{i}].hostPath"));
        }
    }
    if let Some(context) = &spec.security_context {
        let unconfined = context.seccomp_profile.as_ref().is_some_and(|p| p.type_ == "Unconfined");
        if unconfined {
            return Some("spec.securityContext.seccompProfile.type: Unconfined".to_owned());
        }
        if context.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
            return Some("spec.securityContext.windowsOptions.hostProcess".to_owned());
        }
    }
    let containers = [
        ("containers", spec.containers.iter().map(container_view).collect::<Vec<_>>()),
        ("initContainers", spec.init_containers.iter().flatten().map(container_view).collect()),
        (
            "ephemeralContainers",
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (c.security_context.as_ref(), c.ports.as_deref().unwrap_or_default()))
                .collect(),
        ),
    ];
    for (list, views) in containers {
        for (i, (context, ports)) in views.into_iter().enumerate() {
            let at = format!("spec.{list}[{i}]");
            if let Some(problem) = context.and_then(container_escalation) {
                return Some(format!("{at}.securityContext.{problem}"));
            }
            if let Some(j) = ports.iter().position(|port| port.host_port.is_some_and(|p| p != 0)) {
                return Some(format!("{at}.ports[{j}].hostPort"));
            }
        }
    }
    None
}

type ContainerView<'a> = (
    Option<&'a k8s_openapi::api::core::v1::SecurityContext>,
    &'a [k8s_openapi::api::core::v1::ContainerPort],
);

fn container_view(container: &k8s_openapi::api::core::v1::Container) -> ContainerView<'_> {
    (container.security_context.as_ref(), container.ports.as_deref().unwrap_or_default())
}

/// What a container's security context asks that baseline forbids, relative to it.
fn container_escalation(context: &k8s_openapi::api::core::v1::SecurityContext) -> Option<String> {
    if context.privileged == Some(true) {
        return Some("privileged".to_owned());
    }
    if context.allow_privilege_escalation == Some(true) {
        return Some("allowPrivilegeEscalation".to_owned());
    }
    let added = context.capabilities.as_ref().and_then(|c| c.add.as_ref());
    if let Some(cap) = added
        .into_iter()
        .flatten()
        .find(|cap| !BASELINE_CAPABILITIES.contains(&cap.trim_start_matches("CAP_")))
    {
        return Some(format!("capabilities.add: {cap}"));
    }
    if context.seccomp_profile.as_ref().is_some_and(|p| p.type_ == "Unconfined") {
        return Some("seccompProfile.type: Unconfined".to_owned());
    }
    if context.proc_mount.as_deref().is_some_and(|mount| mount != "Default") {
        return Some("procMount".to_owned());
    }
    if context.windows_options.as_ref().and_then(|w| w.host_process) == Some(true) {
        return Some("windowsOptions.hostProcess".to_owned());
    }
    None
}

/// Which check Pod: one per run, command, check and node.
#[derive(Clone, Copy, Debug)]
pub struct PodKey<'a> {
    /// The plan run (`status.runId`).
    pub run_id: &'a str,
    /// The command's index.
    pub command: u32,
    /// The check's id.
    pub check: &'a str,
    /// The node's name.
    pub node: &'a str,
}

impl PodKey<'_> {
    /// The Pod's name: `preflight-` and 16 hex digits of a hash of the key (node names and
    /// check ids may be long; a Pod name may not).
    pub fn pod_name(&self) -> String {
        format!(
            "preflight-{}",
            self.digest(&[self.run_id, &self.command.to_string(), self.check, self.node])
        )
    }

    /// The value of [`LABEL_RUN`] for this key's run.
    pub fn run_label(&self) -> String {
        self.digest(&[self.run_id])
    }

    fn digest(&self, parts: &[&str]) -> String {
        let mut hash = sha2::Sha256::new();
        for part in parts {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        hex::encode(&hash.finalize()[..8])
    }
}

/// The Pod that runs `template` for `key`, stopped by the kubelet after `timeout`.
pub fn pod_for(template: &Pod, key: PodKey<'_>, timeout: Duration) -> Pod {
    let mut pod = Pod::default();
    let mut labels: BTreeMap<String, String> = template.metadata.labels.clone().unwrap_or_default();
    labels.insert(LABEL_RUN.to_owned(), key.run_label());
    // Label values are at most 63 characters of a restricted set: the check id and node
    // name go in annotations, hashed ones in labels.
    labels.insert(LABEL_CHECK.to_owned(), key.digest(&[key.check]));
    labels.insert(LABEL_NODE.to_owned(), key.digest(&[key.node]));
    let mut annotations = template.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(LABEL_CHECK.to_owned(), key.check.to_owned());
    annotations.insert(LABEL_NODE.to_owned(), key.node.to_owned());
    pod.metadata.name = Some(key.pod_name());
    pod.metadata.namespace = Some(keys::NAMESPACE.to_owned());
    pod.metadata.labels = Some(labels);
    pod.metadata.annotations = Some(annotations);

    let mut spec = template.spec.clone().unwrap_or_default();
    spec.node_name = Some(key.node.to_owned());
    spec.node_selector = None;
    spec.affinity = None;
    spec.restart_policy = Some("Never".to_owned());
    spec.active_deadline_seconds =
        Some(i64::try_from(timeout.as_secs().max(1)).unwrap_or(i64::MAX));
    spec.tolerations =
        Some(vec![Toleration { operator: Some("Exists".to_owned()), ..Toleration::default() }]);
    for container in &mut spec.containers {
        container.termination_message_policy = Some("FallbackToLogsOnError".to_owned());
    }
    pod.spec = Some(spec);
    pod
}

/// The record of a check Pod, once it ended (`None` while it is pending or running).
pub fn record_of(pod: &Pod) -> Option<RawRecord> {
    let status = pod.status.as_ref()?;
    let phase = status.phase.as_deref().unwrap_or("Pending");
    if phase != "Succeeded" && phase != "Failed" {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or("the check Pod");
    if status.reason.as_deref() == Some("DeadlineExceeded") {
        return Some(RawRecord::failure(
            status_code::TIMEOUT,
            format!("Pod {name} ran past its deadline"),
        ));
    }
    let terminated = status
        .container_statuses
        .as_ref()
        .and_then(|statuses| statuses.first())
        .and_then(|s| s.state.as_ref())
        .and_then(|state| state.terminated.as_ref());
    let Some(terminated) = terminated else {
        let why = status
            .message
            .clone()
            .or_else(|| status.reason.clone())
            .unwrap_or_else(|| "no container ran".to_owned());
        return Some(RawRecord::failure(
            status_code::GENERAL_ERROR,
            format!("Pod {name} {phase}: {why}"),
        ));
    };
    let output = terminated.message.clone().unwrap_or_default();
    let messages = autopilot_api::preflight::output_lines(&output);
    Some(
        RawRecord {
            status_code: i64::from(terminated.exit_code),
            error: None,
            messages,
            stdout: output,
            stderr: String::new(),
            duration_ms: 0,
        }
        .bounded(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config_map(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "lic", "namespace": keys::NAMESPACE},
                                      "data": data}))
        .expect("a ConfigMap")
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  labels: {app: lic}\nspec:\n  \
                       nodeSelector: {disk: ssd}\n  restartPolicy: Always\n  containers:\n  \
                       - name: check\n    image: lic:1\n    command: [/check]\n";

    const KEY: PodKey<'static> =
        PodKey { run_id: "uid-1/3", command: 0, check: "license", node: "worker-0" };

    #[test]
    fn an_unusable_reference_says_why() {
        let missing = template(None, "lic").unwrap_err();
        assert_eq!(missing, "ConfigMap k0s-autopilot/lic does not exist");
        let no_key = template(Some(&config_map(json!({"other": "x"}))), "lic").unwrap_err();
        assert_eq!(no_key, "ConfigMap k0s-autopilot/lic has no key pod.yaml");
        let not_pod = template(Some(&config_map(json!({"pod.yaml": "spec: 3"}))), "lic");
        assert!(not_pod.unwrap_err().contains("is not a Pod"));
        let empty =
            template(Some(&config_map(json!({"pod.yaml": "spec: {containers: []}"}))), "lic");
        assert_eq!(empty.unwrap_err(), "ConfigMap k0s-autopilot/lic: the Pod has no container");
        assert!(template(Some(&config_map(json!({"pod.yaml": POD}))), "lic").is_ok());
    }

    #[test]
    fn the_pod_is_pinned_to_its_node_never_restarts_and_stops_at_the_timeout() {
        let template = template(Some(&config_map(json!({"pod.yaml": POD}))), "lic").expect("ok");
        let pod = pod_for(&template, KEY, Duration::from_secs(15));
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("worker-0"));
        assert_eq!(spec.node_selector, None, "bound by name, not scheduled");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.active_deadline_seconds, Some(15));
        assert_eq!(
            spec.tolerations.as_ref().map(|t| t[0].operator.as_deref()),
            Some(Some("Exists")),
            "runs on a cordoned or tainted node too"
        );
        assert_eq!(
            spec.containers[0].termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
        assert_eq!(pod.metadata.namespace.as_deref(), Some(keys::NAMESPACE));
        let labels = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get("app").map(String::as_str),
            Some("lic"),
            "the template's labels stay"
        );
        assert_eq!(labels[LABEL_RUN], KEY.run_label());
        let annotations = pod.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(annotations[LABEL_CHECK], "license");
        assert_eq!(annotations[LABEL_NODE], "worker-0");
    }

    #[test]
    fn pod_names_are_stable_short_and_distinct_per_key() {
        let name = KEY.pod_name();
        assert_eq!(name, KEY.pod_name(), "a second leader computes the same name");
        assert_eq!(name.len(), "preflight-".len() + 16);
        let other_node = PodKey { node: "worker-1", ..KEY };
        let other_run = PodKey { run_id: "uid-1/4", ..KEY };
        let other_command = PodKey { command: 1, ..KEY };
        let names = [other_node, other_run, other_command].map(|k| k.pod_name());
        assert!(names.iter().all(|n| *n != name), "{names:?}");
        let long = PodKey { node: &"n".repeat(300), check: &"c".repeat(300), ..KEY };
        assert!(long.pod_name().len() <= 63);
    }

    fn ended(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "preflight-x"}, "status": status}))
            .expect("a Pod")
    }

    #[test]
    fn a_pod_that_ended_is_a_record_and_a_running_one_is_not_yet() {
        assert_eq!(record_of(&ended(json!({"phase": "Running"}))), None);
        assert_eq!(record_of(&ended(json!({"phase": "Pending"}))), None);
        assert_eq!(record_of(&Pod::default()), None);

        let terminated = |code: i32, message: &str, phase: &str| {
            ended(json!({"phase": phase, "containerStatuses": [{
                "name": "check", "image": "lic:1", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "message": message}}}]}))
        };
        let passed = record_of(&terminated(0, "valid\nuntil 2027\n", "Succeeded")).expect("ended");
        assert_eq!(passed.status_code, 0);
        assert_eq!(passed.messages, ["valid", "until 2027"]);
        assert_eq!(passed.error, None);

        let failed = record_of(&terminated(3, "expired", "Failed")).expect("ended");
        assert_eq!(failed.status_code, 3, "the exit code is the status code");
        assert_eq!(failed.messages, ["expired"]);
        assert_eq!(failed.error, None, "an exit code is an answer");

        let late = record_of(&ended(json!({"phase": "Failed", "reason": "DeadlineExceeded"})))
            .expect("ended");
        assert_eq!(late.status_code, status_code::TIMEOUT);

        let never_ran = record_of(&ended(json!({"phase": "Failed", "reason": "OutOfcpu",
                                                "message": "Node didn't have enough resource"})))
        .expect("ended");
        assert_eq!(never_ran.status_code, status_code::GENERAL_ERROR);
        assert_eq!(
            never_ran.error.as_deref(),
            Some("Pod preflight-x Failed: Node didn't have enough resource")
        );
    }

    /// The template of [`POD`] with `spec` merged into its Pod spec.
    fn escalating(spec: serde_json::Value) -> Result<Pod, String> {
        let mut pod: serde_json::Value =
            serde_json::to_value(crate::yaml::from_str::<Pod>(POD).expect("the Pod"))
                .expect("json");
        for (key, value) in spec.as_object().expect("an object") {
            pod["spec"][key] = value.clone();
        }
        let text = serde_json::to_string(&pod).expect("json");
        template(Some(&config_map(json!({ TEMPLATE_KEY: text }))), "lic")
    }

    #[test]
    fn a_template_that_escalates_is_refused_naming_the_field() {
        let container = |security: serde_json::Value| json!({"containers": [{"name": "check", "image": "lic:1", "securityContext": security}]});
        let cases = [
            (json!({"hostNetwork": true}), "spec.hostNetwork"),
            (json!({"hostPID": true}), "spec.hostPID"),
            (json!({"hostIPC": true}), "spec.hostIPC"),
            (
                json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
                "spec.volumes[0].hostPath",
            ),
            (
                container(json!({"privileged": true})),
                "spec.containers[0].securityContext.privileged",
            ),
            (
                container(json!({"allowPrivilegeEscalation": true})),
                "spec.containers[0].securityContext.allowPrivilegeEscalation",
            ),
            (
                container(json!({"capabilities": {"add": ["SYS_ADMIN"]}})),
                "spec.containers[0].securityContext.capabilities.add: SYS_ADMIN",
            ),
            (
                json!({"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
                "spec.containers[0].ports[0].hostPort",
            ),
            (
                json!({"initContainers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}]}),
                "spec.initContainers[0].securityContext.privileged",
            ),
            (
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
                "spec.securityContext.seccompProfile.type: Unconfined",
            ),
        ];
        for (spec, field) in cases {
            let refused = escalating(spec.clone()).expect_err("an escalating template");
            assert!(
                refused.contains(&format!("asks for {field}, which Pod Security baseline forbids")),
                "{spec}: {refused}"
            );
        }
        // What baseline allows passes: a capability of its set, a dropped one, a port.
        let allowed = json!({"containers": [{"name": "c", "image": "i",
            "ports": [{"containerPort": 80}],
            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                "allowPrivilegeEscalation": false, "runAsNonRoot": true}}]});
        escalating(allowed).expect("a baseline Pod is accepted");
    }
}

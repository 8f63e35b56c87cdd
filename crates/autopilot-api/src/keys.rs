//! Every name, key and fixed string that autopilot puts on the wire, in one place.
//!
//! The values are k0s' own (REF §2) unless a doc says "ours". Changing one breaks
//! compatibility with k0s nodes and with clusters that already carry the old value, so
//! treat them as frozen.

// === API ===

/// API group of every autopilot custom resource.
pub const GROUP: &str = "autopilot.k0sproject.io";

/// The single served and stored API version.
pub const VERSION: &str = "v1beta2";

/// `apiVersion` of every autopilot object (`<group>/<version>`).
pub const API_VERSION: &str = "autopilot.k0sproject.io/v1beta2";

/// Kind of the per-controller signal object.
pub const KIND_CONTROL_NODE: &str = "ControlNode";

/// Kind of the update plan.
pub const KIND_PLAN: &str = "Plan";

/// Kind of the automatic-update configuration.
pub const KIND_UPDATE_CONFIG: &str = "UpdateConfig";

/// Name of the `ControlNode` CRD object.
pub const CRD_CONTROL_NODES: &str = "controlnodes.autopilot.k0sproject.io";

/// Name of the `Plan` CRD object.
pub const CRD_PLANS: &str = "plans.autopilot.k0sproject.io";

/// Name of the `UpdateConfig` CRD object.
pub const CRD_UPDATE_CONFIGS: &str = "updateconfigs.autopilot.k0sproject.io";

// === Names of objects ===

/// The only Plan name that is ever executed. Plans with other names are left alone (we
/// add a condition saying why).
pub const PLAN_NAME: &str = "autopilot";

/// Annotation on each autopilot CRD: its schema generation
/// ([`crate::v1beta2::CRD_SCHEMA_GENERATION`]). A binary never applies a CRD older than the
/// cluster's.
pub const ANNOTATION_CRD_GENERATION: &str = "autopilot.k0sproject.io/schema-generation";

/// Namespace that holds the leader-election Lease.
pub const NAMESPACE: &str = "k0s-autopilot";

/// Name of the leader-election Lease in [`NAMESPACE`].
pub const LEASE_NAME: &str = "k0s-autopilot-controller";

/// Namespace of the kubelet's per-node Leases, which carry [`LABEL_CENTRAL_CORDONING`].
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Field manager for every server-side apply autopilot makes (ours: k0s uses a few).
pub const FIELD_MANAGER: &str = "k0s-autopilot";

/// Finalizer the controller puts on every `UpdateConfig`.
pub const UPDATECONFIG_FINALIZER: &str = "updateconfig.autopilot.k0sproject.io";

/// Namespace of the Events about cluster-scoped objects (Plans, UpdateConfigs), which have
/// no namespace of their own.
pub const EVENT_NAMESPACE: &str = "default";

/// `reportingController` of the updater's Events (the Plan engine reports as
/// [`FIELD_MANAGER`]).
pub const UPDATER_REPORTER: &str = "k0s-autopilot-updater";

// === Signal annotations ===

/// Annotation carrying the signal protocol version; its value must be [`SIGNAL_VERSION`].
pub const ANNOTATION_SIGNAL_VERSION: &str = "k0sproject.io/autopilot-signal-version";

/// Annotation carrying the signal data JSON (see [`crate::signal`]).
pub const ANNOTATION_SIGNAL_DATA: &str = "k0sproject.io/autopilot-signal-data";

/// The only signal protocol version that is understood and written.
pub const SIGNAL_VERSION: &str = "v2";

// === ControlNode and Node metadata ===

/// ControlNode annotation telling whether the controller also runs a kubelet; one of
/// [`MODE_CONTROLLER`] or [`MODE_CONTROLLER_WORKER`].
pub const ANNOTATION_MODE: &str = "autopilot.k0sproject.io/mode";

/// [`ANNOTATION_MODE`] value of a pure controller (no kubelet, never cordoned).
pub const MODE_CONTROLLER: &str = "controller";

/// [`ANNOTATION_MODE`] value of a controller started with `--enable-worker` (has a kubelet,
/// cordoned and drained around its update).
pub const MODE_CONTROLLER_WORKER: &str = "controller+worker";

/// ControlNode annotation with the controller's API server address (`IP:PORT`), so the
/// leader probes `/readyz` on the right port even when controllers use different ports.
pub const ANNOTATION_API_ADDRESS: &str = "autopilot.k0sproject.io/api-address";

/// Node annotation where a worker publishes the k0s version it runs (ours: controllers
/// publish it in ControlNode `status.k0sVersion`).
pub const ANNOTATION_K0S_VERSION: &str = "autopilot.k0sproject.io/k0s-version";

/// Node/ControlNode annotation the new binary writes on its own object during its
/// post-update watch (a token naming the watch), and reads back with a quorum read: the
/// write of its own that proves it after the update (ours).
pub const ANNOTATION_POST_UPDATE_PROOF: &str = "autopilot.k0sproject.io/post-update-proof";

/// Node/ControlNode annotation where a node publishes the ids of the keys it requires on
/// `k0supdate` payloads (comma-separated, `--payload-keys`), so NewPlan and `preview` refuse
/// a plan without a signature for it up front (ours). The node enforces the rule itself;
/// the annotation only lets a plan fail before any node is touched.
pub const ANNOTATION_PAYLOAD_KEYS: &str = "autopilot.k0sproject.io/payload-keys";

/// Node annotation where a node started with `--require-signed-bundles` publishes the ids of
/// the keys it requires on airgap bundles (comma-separated; ours).
pub const ANNOTATION_BUNDLE_KEYS: &str = "autopilot.k0sproject.io/bundle-keys";

/// The key ids of a [`ANNOTATION_PAYLOAD_KEYS`] or [`ANNOTATION_BUNDLE_KEYS`] value: the
/// comma-separated, non-empty, trimmed entries, at most [`MAX_PUBLISHED_KEYS`].
pub fn key_ids(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .take(MAX_PUBLISHED_KEYS)
        .map(str::to_owned)
        .collect()
}

/// The most key ids read from one annotation.
pub const MAX_PUBLISHED_KEYS: usize = 32;

/// Taint (`NoSchedule`) on a Node that a k0s process registered itself with
/// `--register-node` and without `--register-node-schedulable`: no kubelet runs its Pods
/// (ours).
pub const TAINT_NO_KUBELET: &str = "autopilot.k0sproject.io/no-kubelet";

/// Node annotation recording that autopilot cordoned the node, so autopilot only
/// uncordons nodes it cordoned itself (ours).
pub const ANNOTATION_CORDONED: &str = "autopilot.k0sproject.io/cordoned";

/// Label advertising central cordoning: on the leader Lease its value is the leader's
/// identity, on `kube-node-lease/<node>` it is empty.
pub const LABEL_CENTRAL_CORDONING: &str = "autopilot.k0sproject.io/central-cordoning";

/// Plan annotation: while `"true"`, the plan signals no new node (nodes in flight finish).
/// `k0s autopilot pause` sets it, `k0s autopilot resume` removes it.
pub const ANNOTATION_PAUSED: &str = "autopilot.k0sproject.io/paused";

/// Plan annotation: when `"true"`, the current run signals no new node, waits for the nodes
/// in flight and ends `Aborted`. `k0s autopilot abort` sets it; a new run (a changed spec)
/// starts only once it is removed.
pub const ANNOTATION_ABORT: &str = "autopilot.k0sproject.io/abort";

/// Plan annotation: its value is a plan id (`spec.id`) whose preflight warnings an operator
/// accepted. A `preflight` command with `onWarn: Block` that ended in `warn` goes on only
/// while this names the running plan's id, so an acceptance never carries over to a later
/// plan by accident.
pub const ANNOTATION_ACCEPT_WARNINGS: &str = "autopilot.k0sproject.io/accept-warnings";

/// Plan annotation: its value is a plan id (`spec.id`) whose run an operator asked to roll
/// back (DESIGN §15): every node the run changed is signalled to put back what it ran
/// before, and the plan ends `RolledBack`. `k0s autopilot rollback` sets it; naming the id
/// keeps an old annotation from rolling back a later plan. Steerers may set it only while the
/// run is going on; a finished run is rolled back by a Plan author
/// (`manifests/rbac/operators.yaml`, docs/security.md).
pub const ANNOTATION_ROLLBACK: &str = "autopilot.k0sproject.io/rollback";

/// Plan annotation: its value is a plan id (`spec.id`) whose version-skew refusals an
/// operator overrides. NewPlan refuses a plan that makes a controller skip a minor version,
/// leaves a worker newer than a controller or more than one minor behind them, or leaves the
/// controllers more than one minor apart, unless this names the plan's id (so an override
/// never carries over to a later plan). Steerers may not set it (`manifests/rbac/operators.yaml`).
pub const ANNOTATION_ALLOW_SKEW: &str = "autopilot.k0sproject.io/allow-skew";

/// Node and ControlNode label: the name of a window in the Plan's `spec.windows` that this
/// node is updated inside (instead of `spec.window`). Read when a run starts and kept with
/// the run, so a node relabelling itself mid-run changes nothing.
pub const LABEL_WINDOW: &str = "autopilot.k0sproject.io/window";

/// Node/ControlNode annotation written by the leader: the gate checks (DESIGN §15) it asks
/// the node's agent to run, as JSON ([`crate::gate_check::GateCheckRequest`]). A reference
/// only: the agent reads the checks from the Plan's frozen command.
pub const ANNOTATION_GATE_CHECK: &str = "autopilot.k0sproject.io/gate-check";

/// Node/ControlNode annotation written by the node's agent: what it observed running the
/// gate checks of [`ANNOTATION_GATE_CHECK`], as JSON
/// ([`crate::gate_check::GateCheckReport`]); the leader judges the records.
pub const ANNOTATION_GATE_REPORT: &str = "autopilot.k0sproject.io/gate-report";

/// Node/ControlNode annotation written by the leader: the pre-staging of a `prestage: true`
/// update command it asks the node's agent for, as JSON
/// ([`crate::prestage::PrestageRequest`]). A reference only: the agent reads the payload from
/// the Plan's frozen command, and stages only what the Plan authorizes.
pub const ANNOTATION_PRESTAGE: &str = "autopilot.k0sproject.io/prestage";

/// Node/ControlNode annotation written by the node's agent: how the pre-staging asked for in
/// [`ANNOTATION_PRESTAGE`] went, as JSON ([`crate::prestage::PrestageReport`]).
pub const ANNOTATION_PRESTAGE_REPORT: &str = "autopilot.k0sproject.io/prestage-report";

/// Well-known host name label, also set on every ControlNode.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// Well-known operating system label (Go names: `linux`, `windows`, ...).
pub const LABEL_OS: &str = "kubernetes.io/os";

/// Well-known CPU architecture label (Go names: `amd64`, `arm64`, `arm`, ...).
pub const LABEL_ARCH: &str = "kubernetes.io/arch";

/// ControlNode `status.addresses[].type` of the controller's API address.
pub const ADDRESS_INTERNAL_IP: &str = "InternalIP";

/// ControlNode `status.addresses[].type` of the kubelet node name.
pub const ADDRESS_HOSTNAME: &str = "Hostname";

/// Environment variable that overrides the host name used as node name.
pub const ENV_HOSTNAME: &str = "AUTOPILOT_HOSTNAME";

// === Update server ===

/// Default `UpdateConfig` channel.
pub const DEFAULT_CHANNEL: &str = "stable";

/// Default `UpdateConfig` update server.
pub const DEFAULT_UPDATE_SERVER: &str = "https://updates.k0sproject.io";

/// Namespace of the optional update-server bearer-token Secret.
pub const UPDATE_SERVER_TOKEN_NAMESPACE: &str = "kube-system";

/// Name of the optional update-server bearer-token Secret.
pub const UPDATE_SERVER_TOKEN_SECRET: &str = "update-server-token";

/// Data key of the token inside [`UPDATE_SERVER_TOKEN_SECRET`].
pub const UPDATE_SERVER_TOKEN_KEY: &str = "token";

/// Namespace whose UID identifies the cluster to the update server (`clusterID`,
/// `k0s_clusterid`), as in k0s.
pub const CLUSTER_ID_NAMESPACE: &str = "kube-system";

/// Name prefix of the k0s controllers' Leases in [`NODE_LEASE_NAMESPACE`]; the updater counts
/// them as the control plane's size for the update server.
pub const CONTROLLER_LEASE_PREFIX: &str = "k0s-ctrl-";

/// Plan status condition types and reasons (ours; k0s writes no conditions).
///
/// [`READY`], [`RECONCILING`] and [`STALLED`] follow kstatus' conventions.
pub mod conditions {
    /// Condition type set on a Plan that autopilot does not execute; the message says why
    /// (for example: its name is not `autopilot`).
    pub const IGNORED: &str = "Ignored";

    /// Condition type set when the spec of a running Plan changed; the change is not
    /// applied until the current run ends.
    pub const SPEC_CHANGE_IGNORED: &str = "SpecChangeIgnored";

    /// Reason of [`IGNORED`] when the Plan is not named [`super::PLAN_NAME`].
    pub const REASON_NOT_AUTOPILOT_PLAN: &str = "NotAutopilotPlan";

    /// Reason of [`SPEC_CHANGE_IGNORED`] while a run is in progress.
    pub const REASON_PLAN_RUNNING: &str = "PlanRunning";

    /// Condition type set while the Plan carries [`super::ANNOTATION_PAUSED`]: no new node
    /// is signalled; the message counts the nodes still in flight.
    pub const PAUSED: &str = "Paused";

    /// Reason of [`PAUSED`]: an operator paused the plan.
    pub const REASON_PAUSED_BY_OPERATOR: &str = "PausedByOperator";

    /// Condition type set when the Plan status went over its size budget and per-node texts
    /// were shortened or dropped to fit; the message says how big it was.
    pub const STATUS_SHRUNK: &str = "StatusShrunk";

    /// Reason of [`STATUS_SHRUNK`].
    pub const REASON_OVER_SIZE_BUDGET: &str = "OverSizeBudget";

    /// kstatus' condition type: True only when the run of the current spec `Completed`.
    pub const READY: &str = "Ready";

    /// kstatus' condition type: True while the run goes on (the plan state is `""`,
    /// `SchedulableWait` or `Schedulable`).
    pub const RECONCILING: &str = "Reconciling";

    /// kstatus' condition type: True when the run ended any other way than `Completed` (the
    /// state is the reason, the description the message), when the Plan is not executed, and
    /// while a running plan is held by a controller not ready past the readiness grace.
    pub const STALLED: &str = "Stalled";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_is_group_slash_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }

    #[test]
    fn crd_names_are_plural_dot_group() {
        assert_eq!(CRD_CONTROL_NODES, format!("controlnodes.{GROUP}"));
        assert_eq!(CRD_PLANS, format!("plans.{GROUP}"));
        assert_eq!(CRD_UPDATE_CONFIGS, format!("updateconfigs.{GROUP}"));
    }
}

//! What a pass asks the shell to look up (it names them in [`super::decision::Needs`]), and
//! what the shell found: a gate's lookups ([`GateQuery`], answered with a [`GateAnswer`]) and
//! the objects of removed APIs ([`RemovedApiUse`]).

/// A lookup a gate needs, with the node's name already in place.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateQuery {
    /// List objects of a kind (`kubectl get`): at most
    /// [`crate::preflight::MAX_GATE_OBJECTS`] are judged.
    List {
        /// `v1`, `apps/v1`.
        api_version: String,
        /// `Pod`, `DaemonSet`.
        kind: String,
        /// Unset: every namespace (or a cluster-scoped kind).
        namespace: Option<String>,
        /// A label selector.
        label_selector: Option<String>,
        /// A field selector.
        field_selector: Option<String>,
    },
    /// An instant PromQL query against the Prometheus at `url`.
    Prometheus {
        /// The base URL (`http://127.0.0.1:9090`).
        url: String,
        /// The query.
        query: String,
    },
}

/// What the shell found for a [`GateQuery`].
#[derive(Clone, Debug, PartialEq)]
pub enum GateAnswer {
    /// The listed objects, or the query's samples (`{metric: {…}, value: number}`), as JSON.
    Items(Vec<serde_json::Value>),
    /// The lookup failed; the text says why. The gate waits (and fails at its timeout).
    Unavailable(String),
    /// Not looked up; the gate counts as passed (`k0s autopilot preview`, which does not
    /// query the cluster's health).
    Assumed,
}

/// One removed API that the shell found objects of, for the versions the machine asked
/// about (see [`crate::plan::removed_api_check_versions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedApiUse {
    /// Resource plural (`flowschemas`).
    pub resource: String,
    /// API group (`flowcontrol.apiserver.k8s.io`).
    pub group: String,
    /// The removed version (`v1beta2`).
    pub version: String,
    /// The release that removed it (`v1.29.0`), as in [`RemovedApi::removed_in`].
    pub removed_in: String,
    /// How many objects of the resource were listed in the cluster.
    pub count: u64,
    /// Whether the use blocks the update: the API has no still-served version, or some
    /// object cannot be read through it (REF §9.1 step 4). The shell decides.
    pub blocking: bool,
}

impl RemovedApiUse {
    /// The failure message k0s writes into the command's `description` (REF §9.1 step 5):
    /// `<resource>.<group> <version> has been removed in Kubernetes <removedIn>, but there
    /// are <N> such resources in the cluster`.
    pub fn message(&self) -> String {
        let Self { resource, group, version, removed_in, count, blocking: _ } = self;
        format!(
            "{resource}.{group} {version} has been removed in Kubernetes {removed_in}, but there \
             are {count} such resources in the cluster"
        )
    }
}

/// An identity whose right to read the Plan `autopilot` a new run asks the API server about
/// (a `SubjectAccessReview` of `get` on `plans.autopilot.k0sproject.io` named `autopilot`,
/// `crate::plan::rbac`): one representative of each kind of node identity the run signals.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanReader {
    /// The user name (`system:node:<name>`).
    pub user: String,
    /// The groups the identity is in (`system:nodes`, `system:authenticated`).
    pub groups: Vec<String>,
}

/// What the API server answered about a [`PlanReader`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanAccess {
    /// The identity may read the Plan.
    Allowed,
    /// It may not; the authorizer's reason (often empty: RBAC found no rule).
    Denied(String),
    /// The review could not be made (the asker may not create SubjectAccessReviews, the
    /// API server did not answer in time, an error); the text says why. A run goes on.
    Unknown(String),
}

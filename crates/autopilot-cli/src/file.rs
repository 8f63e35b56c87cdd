//! Reading the files of `k0s autopilot preview -f` (a Plan) and `k0s autopilot check -f` (the
//! body of a `preflight` command): the one place where seed 004's snake_case spellings are
//! read, and where a field nobody knows is refused rather than dropped.
//!
//! The API types ([`autopilot_api::v1beta2`]) read camelCase only, and ignore fields they do
//! not know (so a controller keeps reading Plans that a newer CRD allows). That is right for
//! what comes from the API server, whose schema already refused or pruned anything else, but
//! not for a file an operator wrote: there a typo such as `workerz`, or seed 004's
//! `status_code`, would vanish, and an emptied `condition` would match every node. So a file
//! is read in three steps, all pure:
//!
//! 1. Seed 004's spellings are renamed to ours where they belong ([`SEED_SPELLINGS`]), each
//!    noted for the operator (a Plan applied with `kubectl` must use ours: the API server
//!    refuses or drops the others). Both spellings of one field are refused.
//! 2. Inside a result's `message` object, which the API types read leniently (its schema
//!    keeps it as written), only `id`, `defaultMessage` and `args` are fields.
//! 3. The document is read into the API types, and every field they would ignore is named
//!    with its path ([`serde_ignored`]).
//!
//! A check's `data` is a free-form object here; its fields are checked when the checks are
//! compiled (an unknown field there is refused, naming it), as NewPlan does.

use autopilot_api::v1beta2::{Plan, PlanCommandPreflight, PreflightCommandId};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Seed 004's spellings this reading accepts: where they appear (below a `preflight`
/// command), the seed's name, and ours.
pub const SEED_SPELLINGS: [(&str, &str, &str); 7] = [
    ("checks[].targets", "global", "all"),
    ("checks[].results[].condition", "status_code", "statusCode"),
    ("checks[].results[].condition", "bool_expr", "boolExpr"),
    ("checks[].results[].message", "default_message", "defaultMessage"),
    ("checks[].command.data.kubernetes (scheduler)", "pod_name", "podName"),
    ("checks[].command.data.kubernetes (scheduler)", "node_selector", "nodeSelector"),
    ("checks[].command.data (diskSpaceAvailable)", "min_bytes", "minBytes"),
];

/// Why a field the API types do not know is refused.
pub const UNKNOWN_FIELD: &str = "unknown field (a typo, or a field of a newer version); the API \
                                 server would refuse it or drop it";

/// The fields of a result's message object.
const MESSAGE_FIELDS: [&str; 3] = ["id", "defaultMessage", "args"];

/// A file read into `T`.
#[derive(Clone, Debug, PartialEq)]
pub struct Read<T> {
    /// What the file holds, in our spelling.
    pub value: T,
    /// One line per seed 004 spelling that was renamed (`<path>: seed 004's spelling, read
    /// as <ours>`), for the operator.
    pub notes: Vec<String>,
}

/// Read a Plan (YAML or JSON). Its `status`, if any (a Plan from `kubectl get -o yaml`), is
/// not read: a preview starts from NewPlan.
pub fn plan(text: &str) -> Result<Read<Plan>, String> {
    let mut document = yaml(text)?;
    let mut found = Found::default();
    if let Some(document) = document.as_object_mut() {
        document.remove("status");
        // The type of the object: the API types do not read it, so it is checked here.
        for (field, expected) in [
            ("apiVersion", <Plan as kube::Resource>::api_version(&()).into_owned()),
            ("kind", <Plan as kube::Resource>::kind(&()).into_owned()),
        ] {
            match document.remove(field) {
                Some(Value::String(given)) if given == expected => {}
                Some(given) => found.problems.push(format!("{field}: is {given}, not {expected}")),
                None => {}
            }
        }
    }
    let commands = document.pointer_mut("/spec/commands").and_then(Value::as_array_mut);
    for (index, command) in commands.into_iter().flatten().enumerate() {
        if let Some(preflight) = command.get_mut("preflight") {
            normalise_preflight(
                preflight,
                &format!("spec.commands[{index}].preflight."),
                &mut found,
            );
        }
    }
    typed(document, "not a Plan", found)
}

/// Read the body of a `preflight` command (`checks`, `onWarn`, `deadline`) from `document`,
/// whose paths are named from its root (`checks[0].targets`).
pub fn preflight_body(mut document: Value) -> Result<Read<PlanCommandPreflight>, String> {
    let mut found = Found::default();
    normalise_preflight(&mut document, "", &mut found);
    typed(document, "not a set of checks", found)
}

/// Parse YAML (or JSON, which is YAML) into a document.
pub fn yaml(text: &str) -> Result<Value, String> {
    autopilot_engine::yaml::from_str(text).map_err(|error| format!("not YAML or JSON: {error}"))
}

/// What reading found besides the value.
#[derive(Default)]
struct Found {
    notes: Vec<String>,
    problems: Vec<String>,
}

/// Read `document` into `T`, naming every field `T` would ignore; `what` says what the
/// document is not when it does not fit at all.
fn typed<T: DeserializeOwned>(
    document: Value,
    what: &str,
    found: Found,
) -> Result<Read<T>, String> {
    let Found { notes, mut problems } = found;
    let mut ignored = Vec::new();
    let value = serde_ignored::deserialize(document, |path| {
        ignored.push(format!("{}: {UNKNOWN_FIELD}", path_text(&path)));
    })
    .map_err(|error: serde_json::Error| format!("{what}: {error}"))?;
    problems.extend(ignored);
    if problems.is_empty() { Ok(Read { value, notes }) } else { Err(problems.join("; ")) }
}

/// A path as the engine names fields: `spec.commands[0].k0supdate.targets.workerz`.
fn path_text(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", path_text(parent)),
        Path::Map { parent, key } => {
            let parent = path_text(parent);
            if parent.is_empty() { key.clone() } else { format!("{parent}.{key}") }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => path_text(parent),
    }
}

/// Rename seed 004's spellings in the `preflight` command `body` found at `prefix` (empty,
/// or ending in `.`), and check its message objects' fields.
fn normalise_preflight(body: &mut Value, prefix: &str, found: &mut Found) {
    let Some(checks) = body.get_mut("checks").and_then(Value::as_array_mut) else { return };
    for (index, check) in checks.iter_mut().enumerate() {
        let at = format!("{prefix}checks[{index}]");
        if let Some(targets) = check.get_mut("targets") {
            rename(targets, &format!("{at}.targets"), "global", "all", found);
        }
        let id = check.pointer("/command/id").cloned();
        match id.and_then(|id| serde_json::from_value::<PreflightCommandId>(id).ok()) {
            Some(PreflightCommandId::Scheduler) => {
                if let Some(pod) = check.pointer_mut("/command/data/kubernetes") {
                    let at = format!("{at}.command.data.kubernetes");
                    rename(pod, &at, "pod_name", "podName", found);
                    rename(pod, &at, "node_selector", "nodeSelector", found);
                }
            }
            Some(PreflightCommandId::DiskSpaceAvailable) => {
                if let Some(data) = check.pointer_mut("/command/data") {
                    rename(data, &format!("{at}.command.data"), "min_bytes", "minBytes", found);
                }
            }
            // No seed spelling in their data; an unknown id is refused when read.
            Some(
                PreflightCommandId::TcpDial
                | PreflightCommandId::PortAvailable
                | PreflightCommandId::HttpGet
                | PreflightCommandId::FileExists
                | PreflightCommandId::K0sVersion
                | PreflightCommandId::Exec,
            )
            | None => {}
        }
        let results = check.get_mut("results").and_then(Value::as_array_mut);
        for (index, result) in results.into_iter().flatten().enumerate() {
            let at = format!("{at}.results[{index}]");
            if let Some(condition) = result.get_mut("condition") {
                let at = format!("{at}.condition");
                rename(condition, &at, "status_code", "statusCode", found);
                rename(condition, &at, "bool_expr", "boolExpr", found);
            }
            if let Some(message) = result.get_mut("message") {
                let at = format!("{at}.message");
                rename(message, &at, "default_message", "defaultMessage", found);
                let unknown = message.as_object().into_iter().flat_map(|m| m.keys());
                for key in unknown.filter(|key| !MESSAGE_FIELDS.contains(&key.as_str())) {
                    found.problems.push(format!("{at}.{key}: {UNKNOWN_FIELD}"));
                }
            }
        }
    }
}

/// Rename the field `seed` of the object `object` (at `at`) to `ours`.
fn rename(object: &mut Value, at: &str, seed: &str, ours: &str, found: &mut Found) {
    let Some(object) = object.as_object_mut() else { return };
    let Some(value) = object.remove(seed) else { return };
    if object.contains_key(ours) {
        found.problems.push(format!(
            "{at}.{seed}: set together with {ours}, the same field in our spelling; keep {ours}"
        ));
        return;
    }
    object.insert(ours.to_owned(), value);
    found.notes.push(format!("{at}.{seed}: seed 004's spelling, read as {ours}"));
}

#[cfg(test)]
mod tests;

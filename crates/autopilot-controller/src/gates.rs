//! The leader's lookups for health gates (DESIGN §15): what a `kubernetes` gate lists and
//! what a `prometheus` gate queries, each bounded in time and size. A failed lookup is an
//! answer ([`GateAnswer::Unavailable`], the gate waits and fails at its timeout), never an
//! error of the pass.
//!
//! The controller lists only what gates name, with its own credentials: a kind its role
//! cannot list is answered with the API server's refusal, naming the kind, so the operator
//! sees what to grant (`docs/updating-a-cluster.md`, "Gates").

use std::time::Duration;

use autopilot_engine::plan::{GateAnswer, GateQuery};
use autopilot_engine::preflight::MAX_GATE_OBJECTS;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;

/// How long one lookup may take.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of objects (as JSON, without `managedFields`) a `kubernetes` gate reads.
pub const MAX_LIST_BYTES: usize = 4 << 20;

/// Answer one gate lookup.
pub async fn answer(
    client: &kube::Client,
    http: &autopilot_shell::https::HttpsClient,
    query: &GateQuery,
) -> GateAnswer {
    let lookup = async {
        match query {
            GateQuery::List { api_version, kind, namespace, label_selector, field_selector } => {
                list(
                    client,
                    api_version,
                    kind,
                    namespace.as_deref(),
                    label_selector.as_deref(),
                    field_selector.as_deref(),
                )
                .await
            }
            GateQuery::Prometheus { url, query } => {
                match crate::prometheus::instant_query(http, url, query, LOOKUP_TIMEOUT).await {
                    Ok(vector) => match vector.to_cel_json() {
                        serde_json::Value::Array(samples) => Ok(samples),
                        other => Ok(vec![other]),
                    },
                    Err(err) => Err(error_chain(&err)),
                }
            }
        }
    };
    match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
        Ok(Ok(items)) => GateAnswer::Items(items),
        Ok(Err(why)) => GateAnswer::Unavailable(why),
        Err(_elapsed) => GateAnswer::Unavailable(format!(
            "no answer within {}",
            autopilot_api::duration::format(LOOKUP_TIMEOUT)
        )),
    }
}

/// List the objects of a kind, at most [`MAX_GATE_OBJECTS`] and [`MAX_LIST_BYTES`].
async fn list(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
    field_selector: Option<&str>,
) -> Result<Vec<serde_json::Value>, String> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|err| format!("{api_version} {kind} is not served: {err}"))?;
    let api: Api<DynamicObject> = match (namespace, capabilities.scope) {
        (Some(namespace), kube::discovery::Scope::Namespaced) => {
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        (Some(_) | None, kube::discovery::Scope::Namespaced | kube::discovery::Scope::Cluster) => {
            Api::all_with(client.clone(), &resource)
        }
    };
    let mut params =
        ListParams::default().limit(u32::try_from(MAX_GATE_OBJECTS + 1).unwrap_or(u32::MAX));
    if let Some(selector) = label_selector {
        params = params.labels(selector);
    }
    if let Some(selector) = field_selector {
        params = params.fields(selector);
    }
    let listed = api.list(&params).await.map_err(|err| match err {
        kube::Error::Api(status) if status.code == 403 => format!(
            "the controller may not list {}: {} (grant it list on this kind, see \
             docs/updating-a-cluster.md \"Gates\")",
            resource.plural, status.message
        ),
        other => format!("listing {}: {other}", resource.plural),
    })?;
    if listed.items.len() > MAX_GATE_OBJECTS || listed.metadata.continue_.is_some() {
        return Err(format!(
            "more than {MAX_GATE_OBJECTS} {} match; a gate reads at most {MAX_GATE_OBJECTS} \
             (narrow the namespace or the selectors)",
            resource.plural
        ));
    }
    let mut bytes = 0;
    let mut items = Vec::with_capacity(listed.items.len());
    for mut object in listed.items {
        object.metadata.managed_fields = None;
        let mut value = serde_json::to_value(&object).map_err(|err| err.to_string())?;
        if let Some(map) = value.as_object_mut() {
            map.insert("apiVersion".to_owned(), api_version.into());
            map.insert("kind".to_owned(), kind.into());
        }
        bytes += value.to_string().len();
        if bytes > MAX_LIST_BYTES {
            return Err(format!(
                "the matching {} are over {} MiB as JSON; a gate reads at most that (narrow \
                 the selectors)",
                resource.plural,
                MAX_LIST_BYTES >> 20
            ));
        }
        items.push(value);
    }
    Ok(items)
}

/// An error with its sources, `: `-joined.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

//! Asking the API server which removed APIs are still in use (REF §9.1), for the Plan
//! engine's pre-check and for `k0s autopilot preview`: the I/O half of
//! `autopilot_engine::plan::removed_apis`, which holds the table and the decision.

use autopilot_engine::plan::{RemovedApiUse, removed_apis};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

/// Errors of the removed-API pre-check.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server could not be asked (discovery, list or get failed).
    #[error("removed-API check: {what}")]
    Api {
        /// What was being asked.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// Find uses of APIs removed in any of `versions` (REF §9.1): for each relevant table entry
/// that the server still serves, count the objects; when there are some, they block the
/// update unless each is readable through the still-served version.
pub async fn observe_removed_apis(
    client: &kube::Client,
    versions: &[String],
) -> Result<Vec<RemovedApiUse>, Error> {
    let mut relevant: Vec<&'static removed_apis::RemovedApi> = Vec::new();
    for version in versions {
        for api in removed_apis::removed_by(version) {
            if !relevant.iter().any(|known| std::ptr::eq(*known, api)) {
                relevant.push(api);
            }
        }
    }
    let mut uses = Vec::new();
    for api in relevant {
        if let Some(found) = use_of(client, api).await? {
            uses.push(found);
        }
    }
    Ok(uses)
}

/// The use of one removed API: `None` when the server does not serve it or holds no object
/// of it.
async fn use_of(
    client: &kube::Client,
    api: &removed_apis::RemovedApi,
) -> Result<Option<RemovedApiUse>, Error> {
    let group_version = if api.group.is_empty() {
        api.version.to_string()
    } else {
        format!("{}/{}", api.group, api.version)
    };
    // Check 1: is the removed version served at all?
    let served = match client.list_api_group_resources(&group_version).await {
        Ok(list) => list.resources.iter().any(|r| r.name == api.resource),
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(source) => {
            return Err(Error::Api { what: format!("discovering {group_version}"), source });
        }
    };
    if !served {
        return Ok(None);
    }
    // Check 2: are there objects of it?
    let resource = ApiResource {
        group: api.group.to_string(),
        version: api.version.to_string(),
        api_version: group_version.clone(),
        kind: api.kind.to_string(),
        plural: api.resource.to_string(),
    };
    let listed: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let objects = listed.list_metadata(&ListParams::default()).await.map_err(|source| {
        Error::Api { what: format!("listing {}.{}", api.resource, api.group), source }
    })?;
    let count = objects.items.len() as u64;
    if count == 0 {
        return Ok(None);
    }
    // Check 3: can every object still be read through the still-served version?
    let blocking = match api.served_in {
        None => true,
        Some(served_version) => {
            let names = objects.items.iter().map(|object| {
                (
                    object.metadata.namespace.clone(),
                    object.metadata.name.clone().unwrap_or_default(),
                )
            });
            any_lost(client, &resource, api.group, served_version, names).await?
        }
    };
    Ok(Some(RemovedApiUse {
        resource: api.resource.to_string(),
        group: api.group.to_string(),
        version: api.version.to_string(),
        removed_in: api.removed_in.to_string(),
        count,
        blocking,
    }))
}

/// Whether any of the objects named by `names` (namespace, name) cannot be read through
/// `served_version` of `group`.
async fn any_lost(
    client: &kube::Client,
    resource: &ApiResource,
    group: &str,
    served_version: &str,
    names: impl Iterator<Item = (Option<String>, String)>,
) -> Result<bool, Error> {
    let served_resource = ApiResource {
        version: served_version.to_string(),
        api_version: format!("{group}/{served_version}"),
        ..resource.clone()
    };
    let mut lost = false;
    for (ns, name) in names {
        let api_served: Api<DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &served_resource),
            None => Api::all_with(client.clone(), &served_resource),
        };
        match api_served.get_opt(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => lost = true,
            Err(source) => {
                return Err(Error::Api {
                    what: format!("reading {name} through {served_version}"),
                    source,
                });
            }
        }
    }
    Ok(lost)
}

//! The controllers' least-privilege identity: the manifests of `manifests/rbac/`, applied
//! with the admin client when a cluster is built, and the group they bind.

use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::{
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    core::v1::Namespace,
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};

use crate::wait::wait_for;

/// The group `manifests/rbac/` binds; every harness controller identity is in it (and in no
/// other group: not `system:masters`).
pub const CONTROLLER_GROUP: &str = "k0s-autopilot-controllers";

/// The files of `manifests/rbac/`, by name: what the harness applies, in this order.
pub const MANIFESTS: &[(&str, &str)] = &[
    ("controller.yaml", include_str!("../../manifests/rbac/controller.yaml")),
    ("controller-worker.yaml", include_str!("../../manifests/rbac/controller-worker.yaml")),
    ("worker.yaml", include_str!("../../manifests/rbac/worker.yaml")),
];

/// Field manager of the harness's server-side applies.
const FIELD_MANAGER: &str = "k0s-integration";

/// The user name of controller `i`'s identity (group [`CONTROLLER_GROUP`]).
pub fn controller_user(i: usize) -> String {
    format!("k0s-autopilot-controller:controller-{i}")
}

/// Applies every document of [`MANIFESTS`] (server-side apply) with `client`, which must be
/// allowed to (the admin).
pub async fn apply(client: &kube::Client) -> anyhow::Result<()> {
    apply_all_but(client, &[]).await
}

/// [`apply`], leaving out the files named in `without` (each must be one of [`MANIFESTS`]).
pub async fn apply_all_but(client: &kube::Client, without: &[String]) -> anyhow::Result<()> {
    for file in without {
        if !MANIFESTS.iter().any(|(name, _)| name == file) {
            bail!("manifests/rbac/{file} is not one of the files the harness applies");
        }
    }
    for (file, text) in MANIFESTS.iter().filter(|(file, _)| !without.iter().any(|w| w == file)) {
        apply_file(client, file, text).await?;
    }
    Ok(())
}

/// Applies every document of `text`, the file `manifests/rbac/<file>` (server-side apply)
/// with `client`, which must be allowed to (the admin). The kinds are those of
/// [`MANIFESTS`]: Namespaces, (Cluster)Roles and their bindings.
pub async fn apply_file(client: &kube::Client, file: &str, text: &str) -> anyhow::Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)
        .with_context(|| format!("parsing manifests/rbac/{file}"))?;
    for value in documents {
        if value.is_null() {
            continue;
        }
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let name = value["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let namespace = value["metadata"]["namespace"].as_str().map(str::to_owned);
        let patch = Patch::Apply(&value);
        let applied = match (kind.as_str(), namespace.as_deref()) {
            ("Namespace", None) => {
                Api::<Namespace>::all(client.clone()).patch(&name, &params, &patch).await.map(drop)
            }
            ("ClusterRole", None) => Api::<ClusterRole>::all(client.clone())
                .patch(&name, &params, &patch)
                .await
                .map(drop),
            ("ClusterRoleBinding", None) => Api::<ClusterRoleBinding>::all(client.clone())
                .patch(&name, &params, &patch)
                .await
                .map(drop),
            ("Role", Some(ns)) => Api::<Role>::namespaced(client.clone(), ns)
                .patch(&name, &params, &patch)
                .await
                .map(drop),
            ("RoleBinding", Some(ns)) => Api::<RoleBinding>::namespaced(client.clone(), ns)
                .patch(&name, &params, &patch)
                .await
                .map(drop),
            _ => bail!("manifests/rbac/{file}: unexpected {kind} {name} (namespace {namespace:?})"),
        };
        applied.with_context(|| format!("applying {kind} {name} from manifests/rbac/{file}"))?;
    }
    Ok(())
}

/// Waits until the apiserver behind `client` (the admin) authorizes controller `i` by the
/// rules just applied: each apiserver's RBAC authorizer reads them from its own cache, which
/// lags the write a little. The probes are the last rule of each manifest file.
pub async fn wait_authorized(
    client: &kube::Client,
    i: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let probes = [
        ("list", "coordination.k8s.io", "leases", "kube-node-lease"),
        ("create", "coordination.k8s.io", "leases", "kube-node-lease"),
        ("get", "", "secrets", "kube-system"),
    ];
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let user = controller_user(i);
    wait_for(timeout, &format!("RBAC for {user} to take effect"), || {
        let reviews = reviews.clone();
        let user = user.clone();
        async move {
            for (verb, group, resource, namespace) in probes {
                let review = SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: Some(user.clone()),
                        groups: Some(vec![CONTROLLER_GROUP.to_owned()]),
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(verb.to_owned()),
                            group: Some(group.to_owned()),
                            resource: Some(resource.to_owned()),
                            namespace: Some(namespace.to_owned()),
                            name: (resource == "secrets").then(|| "update-server-token".to_owned()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let answer = reviews.create(&PostParams::default(), &review).await?;
                if !answer.status.is_some_and(|s| s.allowed) {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        }
    })
    .await
}

//! Installing the autopilot CRDs at controller startup.
//!
//! Every controller applies the CRDs embedded in its binary
//! ([`autopilot_api::v1beta2::CRDS_JSONL`], generated from the types; server-side apply, field manager
//! `k0s-autopilot`, forced) and waits until the API server reports them `Established`, so a
//! newer controller upgrades the schema and nobody uses a kind before it is served.
//!
//! Never downwards (DESIGN §14): each CRD carries its schema generation
//! ([`autopilot_api::keys::ANNOTATION_CRD_GENERATION`]); a binary whose CRD is older than the
//! cluster's leaves the cluster's in place (each generation stays readable by the one
//! before, which a test pins), so a rolled-back binary keeps the newer, compatible CRDs. A
//! binary on trial applies them as a dry run only ([`Mode::DryRun`]).

use std::time::Duration;

use anyhow::Context as _;
use autopilot_shell::retry;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use tracing::{info, warn};

/// How long to wait for one CRD to become `Established` after it was applied.
///
/// The API server establishes a CRD within a second or two; a minute leaves room for a
/// loaded control plane without hiding a real problem.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// How [`install`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Apply for real.
    Apply,
    /// Ask the API server to validate the apply without persisting it (`dryRun=All`): what
    /// a binary on trial proves.
    DryRun,
}

/// The schema generation a CRD object carries, if it says.
fn generation_of(crd: &CustomResourceDefinition) -> Option<u32> {
    crd.metadata
        .annotations
        .as_ref()?
        .get(autopilot_api::keys::ANNOTATION_CRD_GENERATION)?
        .parse()
        .ok()
}

/// The CRDs this binary carries, as the JSON objects it applies, each with its name and
/// schema generation.
fn embedded() -> anyhow::Result<Vec<(String, Option<u32>, serde_json::Value)>> {
    autopilot_api::v1beta2::CRDS_JSONL
        .lines()
        .map(|line| {
            let crd: serde_json::Value =
                serde_json::from_str(line).context("an embedded CRD is not JSON")?;
            let metadata = &crd["metadata"];
            let name = metadata["name"].as_str().context("an embedded CRD has no name")?;
            let generation = metadata["annotations"]
                [autopilot_api::keys::ANNOTATION_CRD_GENERATION]
                .as_str()
                .and_then(|g| g.parse().ok());
            Ok((name.to_owned(), generation, crd))
        })
        .collect()
}

/// Apply every autopilot CRD and wait until each is `Established`.
///
/// While the API server cannot answer (connection failures, 5xx, 429) this keeps retrying
/// with capped backoff: for ever with a zero `startup_timeout`, else until it has passed, and
/// then the error names the API server that could not be reached. A misconfiguration (TLS
/// trust, 401/403) fails at once.
pub async fn install(
    client: &kube::Client,
    server_url: &str,
    startup_timeout: Duration,
    mode: Mode,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut params = PatchParams::apply(autopilot_api::keys::FIELD_MANAGER).force();
    params.dry_run = mode == Mode::DryRun;
    let deadline = retry::deadline_after(startup_timeout);
    for (name, ours, crd) in embedded()? {
        let what = format!("reading CRD {name}");
        let current = retry::until(deadline, retry::startup_delays(), &what, || api.get_opt(&name))
            .await
            .map_err(|gave_up| gave_up.into_startup_error(server_url, startup_timeout, &what))?;
        let theirs = current.as_ref().and_then(generation_of);
        if let (Some(ours), Some(theirs)) = (ours, theirs)
            && theirs > ours
        {
            info!(crd = %name, cluster = theirs, binary = ours, "the cluster's CRD is newer; keeping it");
            continue;
        }
        let what = format!("applying CRD {name}");
        let patch = Patch::Apply(&crd);
        retry::until(deadline, retry::startup_delays(), &what, || {
            api.patch(&name, &params, &patch)
        })
        .await
        .map_err(|gave_up| gave_up.into_startup_error(server_url, startup_timeout, &what))?;
        if mode == Mode::DryRun {
            info!(crd = %name, "CRD would apply (dry run)");
            continue;
        }
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
            Ok(Ok(_)) => info!(crd = %name, "CRD established"),
            Ok(Err(err)) => {
                return Err(err).with_context(|| format!("waiting for CRD {name}"));
            }
            Err(_) => {
                warn!(crd = %name, "CRD not established in time");
                anyhow::bail!(
                    "CRD {name} was not established within {}s",
                    ESTABLISH_TIMEOUT.as_secs()
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::embedded;

    #[test]
    fn the_embedded_crds_are_the_types_crds_with_their_generation() {
        let embedded = embedded().expect("the embedded CRDs read");
        let generated = autopilot_api::crds();
        assert_eq!(embedded.len(), generated.len());
        for ((name, generation, crd), expected) in embedded.iter().zip(&generated) {
            assert_eq!(Some(name), expected.metadata.name.as_ref());
            assert_eq!(*generation, Some(autopilot_api::v1beta2::CRD_SCHEMA_GENERATION));
            assert_eq!(*crd, serde_json::to_value(expected).expect("JSON"), "{name}");
        }
    }
}

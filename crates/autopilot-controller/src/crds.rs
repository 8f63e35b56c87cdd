//! Installing the autopilot CRDs at controller startup.
//!
//! Every controller applies the CRDs embedded in its binary (server-side apply, field manager
//! `k0s-autopilot`, forced) and waits until the API server reports them `Established`, so a
//! newer controller upgrades the schema and nobody uses a kind before it is served.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use tracing::{debug, info, warn};

/// How long to wait for one CRD to become `Established` after it was applied.
///
/// The API server establishes a CRD within a second or two; a minute leaves room for a
/// loaded control plane without hiding a real problem.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// First delay between attempts while the API server is unreachable; doubles up to
/// [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Longest delay between attempts while the API server is unreachable.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Apply every autopilot CRD and wait until each is `Established`.
///
/// Connection failures are retried until `startup_timeout` has passed; then the error names
/// the API server that could not be reached.
pub async fn install(
    client: &kube::Client,
    server_url: &str,
    startup_timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(autopilot_api::keys::FIELD_MANAGER).force();
    let deadline = tokio::time::Instant::now() + startup_timeout;
    for crd in autopilot_api::crds() {
        let name = crd.metadata.name.clone().context("generated CRD has no name")?;
        let mut delay = FIRST_RETRY_DELAY;
        loop {
            match api.patch(&name, &params, &Patch::Apply(&crd)).await {
                Ok(_) => break,
                Err(err) if is_unreachable(&err) && tokio::time::Instant::now() < deadline => {
                    debug!(error = %err, crd = %name, "API server not reachable yet, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
                Err(err) if is_unreachable(&err) => {
                    return Err(err).with_context(|| {
                        format!(
                            "cannot reach the API server at {server_url} within {}s",
                            startup_timeout.as_secs()
                        )
                    });
                }
                Err(err) => {
                    return Err(err).with_context(|| format!("applying CRD {name}"));
                }
            }
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

/// Whether an API error means "could not talk to the server at all" (worth retrying during
/// startup), as opposed to an answer from the server.
pub fn is_unreachable(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(_) => false,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

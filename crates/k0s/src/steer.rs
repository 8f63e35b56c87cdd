//! `k0s autopilot pause|resume|abort`: steer a running plan through its annotations.
//!
//! The verbs only write annotations on the Plan ([`keys::ANNOTATION_PAUSED`],
//! [`keys::ANNOTATION_ABORT`]); the leader's plan engine acts on them, so `kubectl annotate`
//! does the same and a steer survives a change of leader. The decision is pure
//! (`autopilot_engine::steer::decide`: what to write and what to say, from what the Plan
//! shows); [`run`] reads the Plan, writes and prints.

use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::{Plan, TargetState};
use autopilot_engine::steer::{Seen, Verb, decide};
use kube::ResourceExt as _;
use kube::api::{Api, Patch, PatchParams};

/// How long one verb may take to read and annotate the Plan before it gives up (an API
/// server that accepts connections but never answers must not hang the command).
const API_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags every steering verb takes.
#[derive(clap::Args)]
pub struct Args {
    /// Credentials that may read and annotate Plans.
    #[command(flatten)]
    kubeconfig: crate::client::Kubeconfig,

    /// The Plan to steer.
    #[arg(long, default_value = keys::PLAN_NAME, value_name = "NAME")]
    plan: String,
}

/// Run `verb` on the Plan named by `args`: read it, write its annotation if needed, print
/// what was done and what happens next.
pub async fn run(verb: Verb, args: Args) -> anyhow::Result<()> {
    let Args { kubeconfig, plan: name } = args;
    let (client, _config, server_url) = crate::client::connect(&kubeconfig.resolve()?).await?;
    let plans: Api<Plan> = Api::all(client);
    let plan = tokio::time::timeout(API_TIMEOUT, plans.get_opt(&name))
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {server_url} in {API_TIMEOUT:?}"))
        .and_then(|read| read.map_err(anyhow::Error::from))
        .with_context(|| format!("reading plan {name:?} from {server_url}"))?;
    let Some(plan) = plan else {
        anyhow::bail!("plan {name:?} not found");
    };
    let annotations = plan.annotations();
    let status = plan.status.clone().unwrap_or_default();
    let seen = Seen {
        name: &name,
        paused: annotations.get(keys::ANNOTATION_PAUSED).map(String::as_str),
        abort: annotations.get(keys::ANNOTATION_ABORT).map(String::as_str),
        state: status.state,
        in_flight: status.targets().filter(|t| t.state == TargetState::SignalSent).count(),
        plan_id: status.plan_id.as_deref(),
        rollback: annotations.get(keys::ANNOTATION_ROLLBACK).map(String::as_str),
    };
    let outcome = decide(verb, &seen).map_err(anyhow::Error::msg)?;
    if let Some(patch) = &outcome.patch {
        tokio::time::timeout(
            API_TIMEOUT,
            plans.patch(&name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {server_url} in {API_TIMEOUT:?}"))
        .and_then(|written| written.map_err(anyhow::Error::from))
        .with_context(|| format!("annotating plan {name:?} at {server_url}"))?;
    }
    println!("{}", outcome.message);
    Ok(())
}

//! `k0s autopilot check -f checks.yaml`: the checks of a `preflight` command run ad hoc on
//! the live cluster, with no update (seed 004's "test procedures").
//!
//! The checks run exactly as they do in front of an update, through the Plan engine and the
//! node agents: the command writes the Plan `autopilot` with a single `preflight` command
//! (creating it, or replacing the spec of an ended one: the engine starts a new run for a
//! changed spec), follows it until the run ends, and prints a table per check and node. Its
//! exit status is the worst result: 0 success, 1 warn, 2 error (also when the checks could
//! not run at all). The ended Plan keeps the results, so `k0s autopilot status` and
//! `kubectl get plan autopilot -o yaml` show them afterwards too.
//!
//! [`parse`], [`start`], [`outcome`] and [`render`] are pure; [`run`] is the shell.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::keys;
use autopilot_api::v1beta2::{
    CheckStatus, OnWarn, Plan, PlanCommand, PlanCommandPreflight, PlanSpec, PlanStateType,
};
use futures::StreamExt as _;

use crate::file::Read;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

/// What the file holds: the body of a `preflight` command (`checks`, optional `deadline`),
/// read as [`crate::file::preflight_body`] reads it (seed 004's spellings normalised, and
/// noted; unknown fields refused, naming them) and compiled as NewPlan compiles it (a problem
/// is refused here, naming the field). `onWarn` is ignored: ad hoc checks never hold
/// anything.
pub fn parse(text: &str) -> Result<Read<PlanCommandPreflight>, String> {
    let value = crate::file::yaml(text)?;
    // A whole Plan, or a Plan command, is a likely mistake: say what to pass instead.
    if value.get("spec").is_some() || value.get("preflight").is_some() {
        return Err("pass the preflight command's body (a document with `checks:`), not a Plan \
                    or a command"
            .to_owned());
    }
    let Read { value: mut preflight, notes } = crate::file::preflight_body(value)?;
    preflight.on_warn = OnWarn::Proceed;
    // What NewPlan would refuse is refused here, before anything is written.
    if let Err(problems) = autopilot_engine::preflight::compile_command("", &preflight) {
        let problems: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.path.trim_start_matches('.'), p.message))
            .collect();
        return Err(problems.join("; "));
    }
    Ok(Read { value: preflight, notes })
}

/// What to do with the Plan `autopilot` as it is now.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// No Plan: create this one.
    Create(Plan),
    /// An ended Plan: replace it.
    Replace {
        /// The replacement (the same object and resourceVersion, the new spec).
        plan: Plan,
        /// What the replaced Plan was, for the operator.
        ended: String,
    },
    /// Checks cannot run now; why.
    Refuse(String),
}

/// The Plan that runs `preflight` with the spec id `id`, given the current Plan.
pub fn start(
    existing: Option<&Plan>,
    preflight: PlanCommandPreflight,
    id: &str,
    now: &str,
) -> Start {
    let spec = PlanSpec {
        download_window: Default::default(),
        window: Default::default(),
        windows: Default::default(),
        id: id.to_owned(),
        timestamp: now.to_owned(),
        commands: vec![PlanCommand {
            k0supdate: None,
            airgapupdate: None,
            preflight: Some(preflight),
        }],
    };
    let Some(existing) = existing else {
        return Start::Create(Plan::new(keys::PLAN_NAME, spec));
    };
    let annotations = existing.metadata.annotations.clone().unwrap_or_default();
    for (key, verb) in [(keys::ANNOTATION_ABORT, "resume"), (keys::ANNOTATION_PAUSED, "resume")] {
        if annotations.contains_key(key) {
            return Start::Refuse(format!(
                "Plan {} carries the {key} annotation, which holds a new run back; remove it \
                 (k0s autopilot {verb}) first",
                keys::PLAN_NAME
            ));
        }
    }
    let state = existing.status.as_ref().map(|s| s.state).unwrap_or_default();
    let id_was = existing.spec.id.as_str();
    if !state.is_terminal() {
        return Start::Refuse(format!(
            "Plan {} (id {id_was}) is {state}: checks run only when no plan is running (they \
             would share the nodes' signals); wait for it to end or abort it",
            keys::PLAN_NAME
        ));
    }
    let mut plan = existing.clone();
    plan.spec = spec;
    Start::Replace {
        plan,
        ended: format!("the ended Plan {} (id {id_was}, {state})", keys::PLAN_NAME),
    }
}

/// Where the run of `generation` stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not ended yet (or the engine has not picked this spec up yet).
    Running,
    /// Ended: the exit status and a one-line summary.
    Ended {
        /// 0 success, 1 warn, 2 error.
        code: u8,
        /// What the result is.
        summary: String,
    },
}

/// The outcome of the run of `generation` of `plan`.
pub fn outcome(plan: &Plan, generation: i64) -> Outcome {
    let Some(status) = plan.status.as_ref() else { return Outcome::Running };
    if status.run_generation() != Some(generation) || !status.state.is_terminal() {
        return Outcome::Running;
    }
    let command = status.commands.first();
    let description = command.and_then(|c| c.description.clone());
    let worst = command.and_then(|c| c.preflight.as_ref()).and_then(|p| p.status);
    match (status.state, worst) {
        (PlanStateType::Completed, Some(CheckStatus::Success)) => {
            Outcome::Ended { code: 0, summary: "every check passed".to_owned() }
        }
        (PlanStateType::Completed, Some(CheckStatus::Warn)) => Outcome::Ended {
            code: 1,
            summary: description.unwrap_or_else(|| "warnings".to_owned()),
        },
        (PlanStateType::PreflightFailed, _) => Outcome::Ended {
            code: 2,
            summary: description.unwrap_or_else(|| "preflight checks failed".to_owned()),
        },
        (state, _) => Outcome::Ended {
            code: 2,
            summary: format!(
                "the checks did not run to a verdict: the plan ended {state}: {}",
                description.unwrap_or_else(|| "no description".to_owned())
            ),
        },
    }
}

/// A table per check (its status and what it is about, then each node's status, status code
/// and message, escaped: a node wrote it).
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    let checks = plan
        .status
        .as_ref()
        .and_then(|s| s.commands.first())
        .and_then(|c| c.preflight.as_ref())
        .map(|p| p.checks.as_slice())
        .unwrap_or_default();
    let about = |id: &str| {
        let preflight = plan.spec.commands.first().and_then(|c| c.preflight.as_ref());
        let check = preflight.and_then(|p| p.checks.iter().find(|c| c.id == id));
        check.and_then(|c| c.message.as_deref()).map(|m| format!(" ({m})")).unwrap_or_default()
    };
    for check in checks {
        let status = check.status.map_or("-", CheckStatus::as_str);
        let _ = writeln!(out, "CHECK {}: {status}{}", check.id, about(&check.id));
        let width = check.nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).max(4);
        let _ = writeln!(out, "  {:<width$}  {:<7}  {:>4}  MESSAGE", "NODE", "STATUS", "CODE");
        for node in &check.nodes {
            let _ = writeln!(
                out,
                "  {:<width$}  {:<7}  {:>4}  {}",
                node.name,
                node.status.as_str(),
                node.status_code,
                autopilot_api::text::printable(&node.message)
            );
        }
        out.push('\n');
    }
    out
}

// === Shell ===

/// Run `checks` on the cluster behind `client`: write the Plan, follow it for at most
/// `timeout`, print the tables to `out`; returns the exit status (0/1/2).
pub async fn run(
    client: kube::Client,
    checks: PlanCommandPreflight,
    timeout: Duration,
    mut out: impl std::io::Write,
) -> anyhow::Result<u8> {
    let plans: Api<Plan> = Api::all(client);
    let existing = plans.get_opt(keys::PLAN_NAME).await.context("reading Plan autopilot")?;
    let now = jiff::Timestamp::now();
    // Unique per run (two checks in one second still get their own id).
    let id = format!("check-{}-{:03}", now.strftime("%Y%m%d-%H%M%S"), now.subsec_millisecond());
    let written = match start(existing.as_ref(), checks, &id, &now.to_string()) {
        Start::Refuse(why) => anyhow::bail!("{why}"),
        Start::Create(plan) => {
            plans.create(&PostParams::default(), &plan).await.context("creating Plan autopilot")?
        }
        Start::Replace { plan, ended } => {
            writeln!(out, "replacing {ended}")?;
            plans
                .replace(keys::PLAN_NAME, &PostParams::default(), &plan)
                .await
                .context("replacing the spec of Plan autopilot")?
        }
    };
    let generation = written.metadata.generation.unwrap_or(1);
    writeln!(out, "running the checks as Plan {} id {id}", keys::PLAN_NAME)?;
    let follow = async {
        let mut stream = std::pin::pin!(watcher::watch_object(plans.clone(), keys::PLAN_NAME));
        while let Some(event) = stream.next().await {
            match event {
                Ok(Some(plan)) => {
                    if let Outcome::Ended { code, summary } = outcome(&plan, generation) {
                        return Ok((plan, code, summary));
                    }
                }
                Ok(None) => {
                    anyhow::bail!("Plan {} was deleted while the checks ran", keys::PLAN_NAME)
                }
                // The watcher retries by itself; an outage only delays the answer.
                Err(_) => {}
            }
        }
        anyhow::bail!("the watch of Plan {} ended", keys::PLAN_NAME)
    };
    let (plan, code, summary) = tokio::time::timeout(timeout, follow).await.map_err(|_| {
        anyhow::anyhow!(
            "no verdict within {}: see k0s autopilot status",
            autopilot_api::duration::format(timeout)
        )
    })??;
    write!(out, "\n{}", render(&plan))?;
    let word = match code {
        0 => "success",
        1 => "warn",
        _ => "error",
    };
    writeln!(out, "result: {word}: {summary}")?;
    Ok(code)
}

#[cfg(test)]
mod tests;

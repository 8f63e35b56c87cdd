//! `k0s autopilot`: [`run`] dispatches the verbs. `status`, `preview` and `check`: flags and
//! wiring (the steering verbs are in [`crate::steer`]). The views, the preview and the checks
//! themselves live in `autopilot-cli`.

use anyhow::Context as _;
use std::path::PathBuf;

use autopilot_api::keys;

use crate::client::Kubeconfig;

/// How `k0s autopilot status` prints.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// The status screen.
    Text,
    /// The status document as JSON (with `--watch`, one document per change).
    Json,
}

/// How `k0s autopilot preview` prints.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PreviewFormat {
    /// The report: targets, order and batches, problems.
    Text,
    /// The report as one JSON document.
    Json,
}

/// Flags of `k0s autopilot status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    kubeconfig: Kubeconfig,

    /// The Plan to show.
    #[arg(long, default_value = keys::PLAN_NAME, value_name = "NAME")]
    plan: String,

    /// Keep the screen current: redraw on every change of the Plan, Nodes, ControlNodes and
    /// the Plan's Events (watches; only each controller's API server version is asked again,
    /// every 5 s) until interrupted.
    #[arg(long, short = 'w')]
    watch: bool,

    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// Run `k0s autopilot status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let StatusArgs { kubeconfig, plan, watch, output } = args;
    let (client, config, _server_url) = crate::client::connect(&kubeconfig.resolve()?).await?;
    let output = match output {
        Format::Text => autopilot_cli::status::Output::Text,
        Format::Json => autopilot_cli::status::Output::Json,
    };
    // The KUBERNETES column: each controller's API server asked for its version.
    let prober = autopilot_shell::probe::Prober::for_config(config);
    autopilot_cli::status::run(client, Some(prober), &plan, watch, output, std::io::stdout()).await
}

/// Flags of `k0s autopilot preview`.
#[derive(clap::Args)]
pub struct PreviewArgs {
    #[command(flatten)]
    kubeconfig: Kubeconfig,

    /// The Plan to preview (YAML or JSON, as for `kubectl apply -f`; `-` reads stdin).
    #[arg(long, short = 'f', value_name = "FILE", required_unless_present = "rollback")]
    file: Option<PathBuf>,

    /// Preview the rollback of the live Plan's run instead (what `k0s autopilot rollback`
    /// would do now): the nodes put back, in the engine's order and batches.
    #[arg(long, conflicts_with = "file")]
    rollback: bool,

    /// With `--rollback`: the live Plan whose run to preview rolling back.
    #[arg(long, default_value = keys::PLAN_NAME, value_name = "NAME", requires = "rollback")]
    plan: String,

    /// The controllers' `--exclude-from-plans` (the cluster does not show it).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "controller,worker")]
    exclude_from_plans: Vec<autopilot_controller::NodeKind>,

    /// The controllers run with `--allow-unverified-payloads`.
    #[arg(long)]
    allow_unverified_payloads: bool,

    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = PreviewFormat::Text)]
    output: PreviewFormat,
}

/// `k0s autopilot preview` found problems: the report is printed; the process exits 1.
#[derive(Debug)]
pub struct WouldNotRun;

impl std::fmt::Display for WouldNotRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the plan would not run")
    }
}

impl std::error::Error for WouldNotRun {}

/// Run `k0s autopilot preview`: print the report; [`WouldNotRun`] when it lists problems.
pub async fn preview(args: PreviewArgs) -> anyhow::Result<()> {
    let PreviewArgs {
        kubeconfig,
        file,
        rollback,
        plan: live,
        exclude_from_plans,
        allow_unverified_payloads,
        output,
    } = args;
    let policy = autopilot_controller::Args {
        exclude_from_plans: exclude_from_plans.clone(),
        allow_unverified_payloads,
        ..autopilot_controller::Args::defaults()
    }
    .policy();
    let file = match (file, rollback) {
        (Some(file), false) => file,
        (None, true) | (Some(_), true) => {
            return preview_rollback(&kubeconfig, &live, &policy, output).await;
        }
        (None, false) => anyhow::bail!("give the plan to preview with -f, or --rollback"),
    };
    let text = read_input(&file, "the plan")?;
    let autopilot_cli::file::Read { value: plan, notes } = autopilot_cli::file::plan(&text)
        .map_err(|problem| anyhow::anyhow!("{}: {problem}", file.display()))?;
    note(&file, &notes);
    let name = plan.metadata.name.clone().unwrap_or_else(|| keys::PLAN_NAME.to_owned());
    let (client, config, _server_url) = crate::client::connect(&kubeconfig.resolve()?).await?;
    let allow_skew =
        kube::ResourceExt::annotations(&plan).get(keys::ANNOTATION_ALLOW_SKEW).map(String::as_str);
    let mut report =
        autopilot_cli::preview::run(client, config, &plan.spec, allow_skew, &policy).await?;
    if name != keys::PLAN_NAME {
        report.problems.insert(
            0,
            format!("only the Plan named {} runs; {name:?} would be ignored", keys::PLAN_NAME),
        );
        report.would_run = false;
    }
    match output {
        PreviewFormat::Text => {
            print!("{}", autopilot_cli::preview::render(&name, &plan.spec, &report));
        }
        PreviewFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if report.would_run { Ok(()) } else { Err(WouldNotRun.into()) }
}

/// `k0s autopilot preview --rollback`: read the live Plan `name`, print the preview of its
/// rollback; [`WouldNotRun`] when it lists problems.
async fn preview_rollback(
    kubeconfig: &Kubeconfig,
    name: &str,
    policy: &autopilot_engine::plan::Policy,
    output: PreviewFormat,
) -> anyhow::Result<()> {
    let (client, config, server_url) = crate::client::connect(&kubeconfig.resolve()?).await?;
    let plans: kube::Api<autopilot_api::v1beta2::Plan> = kube::Api::all(client.clone());
    let plan = tokio::time::timeout(std::time::Duration::from_secs(30), plans.get_opt(name))
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {server_url} in 30s"))?
        .with_context(|| format!("reading plan {name:?} from {server_url}"))?
        .with_context(|| format!("plan {name:?} not found"))?;
    let report = autopilot_cli::preview::run_rollback(client, config, &plan, policy).await?;
    match output {
        PreviewFormat::Text => {
            print!("{}", autopilot_cli::preview::render(name, &plan.spec, &report));
        }
        PreviewFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if report.would_run { Ok(()) } else { Err(WouldNotRun.into()) }
}

/// Flags of `k0s autopilot check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    kubeconfig: Kubeconfig,

    /// The checks: the body of a Plan's `preflight` command (a document with `checks:`, and
    /// optionally `deadline:`), YAML or JSON; `-` reads stdin.
    #[arg(long, short = 'f', value_name = "FILE")]
    file: PathBuf,

    /// How long to wait for every node's verdict.
    #[arg(long, default_value = "5m", value_parser = autopilot_api::duration::parse, value_name = "DURATION")]
    timeout: std::time::Duration,
}

/// `k0s autopilot check` ended with this exit status (0 success, 1 warn, 2 error); what to
/// say was printed.
#[derive(Debug)]
pub struct CheckExit(pub u8);

impl std::fmt::Display for CheckExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the checks ended with exit status {}", self.0)
    }
}

impl std::error::Error for CheckExit {}

/// Run `k0s autopilot check`: run the checks through the Plan `autopilot`, print a table per
/// check and node; [`CheckExit`] 1 on warnings, 2 on errors or when the checks cannot run.
pub async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let CheckArgs { kubeconfig, file, timeout } = args;
    let ran = async {
        let text = read_input(&file, "the checks")?;
        let autopilot_cli::file::Read { value: checks, notes } = autopilot_cli::check::parse(&text)
            .map_err(|problem| anyhow::anyhow!("{}: {problem}", file.display()))?;
        note(&file, &notes);
        let (client, _config, _server_url) = crate::client::connect(&kubeconfig.resolve()?).await?;
        autopilot_cli::check::run(client, checks, timeout, std::io::stdout()).await
    };
    match ran.await {
        Ok(0) => Ok(()),
        Ok(code) => Err(CheckExit(code).into()),
        Err(err) => {
            eprintln!("error: {}", crate::one_line(&err));
            Err(CheckExit(2).into())
        }
    }
}

/// Tell the operator, on stderr, which seed 004 spellings of `file` were read as ours (a
/// Plan applied with `kubectl` must use ours).
fn note(file: &std::path::Path, notes: &[String]) {
    for note in notes {
        eprintln!("note: {}: {note}", file.display());
    }
}

/// The text of `file` (`-`: standard input), which holds `what`.
fn read_input(file: &std::path::Path, what: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .with_context(|| format!("reading {what} from stdin"))
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
    }
}

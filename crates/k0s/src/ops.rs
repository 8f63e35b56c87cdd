//! `k0s autopilot status` and `k0s autopilot preview`: flags and wiring. The views and the
//! preview themselves live in `autopilot-cli`.

use std::path::PathBuf;

use autopilot_api::keys;

/// How `k0s autopilot status` prints.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// The status screen.
    Text,
    /// The status document as JSON (with `--watch`, one document per change).
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
    /// the Plan's Events (watches, no polling) until interrupted.
    #[arg(long, short = 'w')]
    watch: bool,

    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// The kubeconfig flag shared by the `k0s autopilot` verbs.
#[derive(clap::Args)]
pub struct Kubeconfig {
    /// Kubeconfig to reach the API server. Default: `$KUBECONFIG` (its first entry), else
    /// `~/.kube/config`, as kubectl.
    #[arg(long = "kubeconfig", value_name = "PATH")]
    path: Option<PathBuf>,
}

impl Kubeconfig {
    /// The file to read: the flag, else the first entry of `$KUBECONFIG`, else
    /// `$HOME/.kube/config`.
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        if let Some(path) = &self.path {
            return Ok(path.clone());
        }
        if let Some(list) = std::env::var_os("KUBECONFIG") {
            if let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty()) {
                return Ok(first);
            }
        }
        let home = std::env::var_os("HOME").ok_or_else(|| {
            anyhow::anyhow!("no kubeconfig: pass --kubeconfig, set KUBECONFIG or HOME")
        })?;
        Ok(PathBuf::from(home).join(".kube").join("config"))
    }
}

/// Run `k0s autopilot status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let StatusArgs { kubeconfig, plan, watch, output } = args;
    let (client, _config, _server_url) = crate::connect(&kubeconfig.resolve()?).await?;
    let output = match output {
        Format::Text => autopilot_cli::status::Output::Text,
        Format::Json => autopilot_cli::status::Output::Json,
    };
    autopilot_cli::status::run(client, &plan, watch, output, std::io::stdout()).await
}

//! The `k0s` multicall binary: argument parsing, logging and dispatch only.
//!
//! What each subcommand runs lives in the `k0s` library: the node processes in
//! [`k0s::role`], `k0s status` in [`k0s::status`], the `k0s autopilot` verbs in [`k0s::ops`].

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use k0s::cli::{Cli, Command, LogFormat};
use k0s::{ops, role};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            return match err.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = err.print();
                    ExitCode::SUCCESS
                }
                // clap's whole message: its first line says what is wrong, the lines after it
                // name the flags (a missing required flag is only named there) and the
                // accepted values.
                _ => {
                    let _ = err.print();
                    ExitCode::from(2)
                }
            };
        }
    };
    let default_filter = match cli.command {
        Command::Autopilot { .. } | Command::Completion { .. } | Command::Components { .. } => {
            "off"
        }
        Command::Version
        | Command::Controller { .. }
        | Command::Worker { .. }
        | Command::Status { .. }
        | Command::PostUpdateGuard { .. } => "info",
    };
    let filter = cli.log_level.as_deref().unwrap_or(default_filter);
    if let Err(err) = init_logging(filter, cli.log_format) {
        eprintln!("error: {err:#}");
        return ExitCode::from(2);
    }
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // The report says why; nothing more to print.
        Err(err) if err.is::<ops::WouldNotRun>() => ExitCode::FAILURE,
        Err(err) if err.is::<ops::CheckExit>() => {
            ExitCode::from(err.downcast_ref::<ops::CheckExit>().map_or(2, |exit| exit.0))
        }
        Err(err) => {
            eprintln!("error: {}", k0s::one_line(&err));
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    // Started as the trial of a new binary: boot up to healthy, prove it, and exit.
    if let Some(token) = autopilot_signal::trial::token() {
        return role::trial::boot(command, &token);
    }
    match command {
        Command::Version => {
            println!("{}", k0s::VERSION);
            Ok(())
        }
        Command::Controller { node, args, updater, agent, components, worker_components } => {
            role::controller::run(node, args, updater, agent, (components, worker_components))
        }
        Command::Worker { node, args, run_components, components } => {
            role::worker::run(node, args, run_components.then_some(components))
        }
        Command::Components { output } => k0s::components::print(output),
        Command::Status { data_dir, output } => k0s::status::run(&data_dir, output),
        Command::PostUpdateGuard { data_dir, binary } => {
            role::post_update::guard(&data_dir, binary.as_deref())
        }
        Command::Autopilot { command } => k0s::cli::run(command),
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "k0s", &mut std::io::stdout());
            Ok(())
        }
    }
}

fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("invalid --log-level {filter:?}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        // Each line carries the fields of the span it was logged in (`span`: the plan, command,
        // node and phase a reconcile or agent step is about) and of the spans around it.
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).init(),
    }
    Ok(())
}

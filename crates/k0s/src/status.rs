//! `k0s status`: ask the k0s process running on this machine, through the status socket in
//! its data directory (`autopilot_signal::status`), and print what it says.

use std::path::Path;

use anyhow::Context as _;

use crate::cli::StatusFormat;

/// Run `k0s status`.
pub fn run(data_dir: &Path, output: StatusFormat) -> anyhow::Result<()> {
    let report = crate::runtime()?
        .block_on(autopilot_signal::status::query(data_dir))
        .context("reading the status")?;
    match output {
        StatusFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        StatusFormat::Text => print!("{}", render(&report)),
    }
    Ok(())
}

/// `k0s status` for humans.
fn render(report: &autopilot_signal::status::Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "Version: {}", report.version);
    let _ = writeln!(out, "Process ID: {}", report.pid);
    let _ = writeln!(out, "Role: {}", report.role);
    let _ = writeln!(out, "Node: {}", report.node_name);
    let _ = writeln!(out, "Binary: {}", report.binary.display());
    let _ = writeln!(out, "Started: {}", report.started);
    if let Some(leader) = report.leader {
        let _ = writeln!(out, "Leader: {}", if leader { "yes" } else { "no" });
    }
    let _ =
        writeln!(out, "Update agent: {}", if report.update_agent { "enabled" } else { "disabled" });
    if report.signals.is_empty() {
        let _ = writeln!(out, "Update: none");
    }
    for signal in &report.signals {
        let phase = signal.phase.as_deref().unwrap_or("(not started)");
        let _ = write!(
            out,
            "Update: {} to {} (plan {}, command {}) on {}: {phase}",
            signal.command, signal.version, signal.plan_id, signal.command_id, signal.object
        );
        if let Some(since) = &signal.since {
            let _ = write!(out, " since {since}");
        }
        if let Some(reason) = &signal.reason {
            let _ = write!(out, ": {reason}");
        }
        out.push('\n');
    }
    out
}

//! `cargo xtask demo` (placeholder, filled in by its owner).

/// Arguments of this subcommand.
#[derive(clap::Args)]
pub struct Args {}

/// Run the subcommand.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

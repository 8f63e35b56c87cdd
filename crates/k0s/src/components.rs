//! `k0s components`: the Kubernetes components this binary carries (`k0s_components::carried`).

use std::fmt::Write as _;

use crate::cli::StatusFormat;

/// Print the carried set: one line per component (name, version, sha256, size), or JSON.
pub fn print(output: StatusFormat) -> anyhow::Result<()> {
    let (set, _) = k0s_components::carried::of_this_process()?;
    let components = set.map(|set| set.components).unwrap_or_default();
    match output {
        StatusFormat::Json => {
            let list: Vec<serde_json::Value> = components
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "name": c.name, "version": c.version, "sha256": c.sha256, "size": c.size,
                    })
                })
                .collect();
            let doc = serde_json::json!({ "version": crate::VERSION, "components": list });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        StatusFormat::Text => print!("{}", render(&components)),
    }
    Ok(())
}

/// The text form: a table, or a line saying the binary carries nothing.
fn render(components: &[k0s_components::carried::Component]) -> String {
    if components.is_empty() {
        return format!(
            "k0s {} carries no components: it runs those in <data-dir>/bin/ or on PATH\n",
            crate::VERSION
        );
    }
    let name_width = components.iter().map(|c| c.name.len()).max().unwrap_or(0).max(4);
    let version_width = components.iter().map(|c| c.version.len()).max().unwrap_or(0).max(7);
    let mut out =
        format!("{:name_width$}  {:version_width$}  {:64}  SIZE\n", "NAME", "VERSION", "SHA256");
    for c in components {
        let _ = writeln!(
            out,
            "{:name_width$}  {:version_width$}  {}  {}",
            c.name, c.version, c.sha256, c.size
        );
    }
    out
}

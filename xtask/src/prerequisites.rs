//! What `cargo xtask test` needs on the machine besides Rust, checked before anything is
//! built: a missing tool stops the run in its first seconds, naming each one and the command
//! that installs it, instead of failing deep in the suite. (`.ci/run` installs them; the
//! real-node packages are checked apart and only leave their scenarios out.)

use std::path::{Path, PathBuf};

/// One thing the tests need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// What it is, as the message names it.
    pub name: &'static str,
    /// What needs it.
    pub why: &'static str,
    /// How it is found.
    pub found_as: FoundAs,
    /// The Debian package that installs it (`None`: not from a package).
    pub package: Option<&'static str>,
}

/// How a requirement is found on the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundAs {
    /// An executable of this name on `PATH`.
    Command(&'static str),
    /// One of these files.
    File(&'static [&'static str]),
}

/// Everything `cargo xtask test` needs (README, "Prerequisites").
pub const REQUIRED: [Requirement; 8] = [
    Requirement {
        name: "go",
        why: "builds the test control plane, Prometheus, cosign and the real nodes' binaries",
        found_as: FoundAs::Command("go"),
        package: None,
    },
    Requirement {
        name: "tmux",
        why: "the status view's end-to-end test reads its screen",
        found_as: FoundAs::Command("tmux"),
        package: Some("tmux"),
    },
    Requirement {
        name: "openssl",
        why: "the signed-payload tests make keys",
        found_as: FoundAs::Command("openssl"),
        package: Some("openssl"),
    },
    Requirement {
        name: "minisign",
        why: "the signed-payload tests sign with it",
        found_as: FoundAs::Command("minisign"),
        package: Some("minisign"),
    },
    Requirement {
        name: "tinyproxy",
        why: "the proxy test downloads through it",
        found_as: FoundAs::Command("tinyproxy"),
        package: Some("tinyproxy"),
    },
    Requirement {
        name: "npm",
        why: "installs the Node.js and Renovate the Renovate configuration is tested with",
        found_as: FoundAs::Command("npm"),
        package: Some("npm"),
    },
    Requirement {
        name: "git",
        why: "Renovate and the Gitea it runs against clone and push with it",
        found_as: FoundAs::Command("git"),
        package: Some("git"),
    },
    Requirement {
        name: "libfaketime",
        why: "a controller runs with its clock hours ahead",
        found_as: FoundAs::File(&[
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        ]),
        package: Some("faketime"),
    },
];

/// The requirements `present` says are missing, in order.
pub fn missing(present: impl Fn(&Requirement) -> bool) -> Vec<Requirement> {
    REQUIRED.into_iter().filter(|r| !present(r)).collect()
}

/// The message for `missing` (none: `None`), with the command that installs the packages
/// (`sudo` unless `root`).
pub fn message(missing: &[Requirement], root: bool) -> Option<String> {
    if missing.is_empty() {
        return None;
    }
    let mut text = String::from("cargo xtask test needs what this machine lacks:\n");
    for r in missing {
        let from = r
            .package
            .map(|p| format!("package {p}"))
            .unwrap_or_else(|| "Go 1.24 or newer from your distribution or go.dev".to_owned());
        text.push_str(&format!("  - {} ({}): {from}\n", r.name, r.why));
    }
    let packages: Vec<&str> = missing.iter().filter_map(|r| r.package).collect();
    if !packages.is_empty() {
        let sudo = if root { "" } else { "sudo " };
        text.push_str(&format!(
            "install with: {sudo}apt-get update && {sudo}apt-get install -y {}\n",
            packages.join(" ")
        ));
    }
    text.push_str("(bash .ci/run installs them itself)");
    Some(text)
}

/// Stops with [`message`] when something [`REQUIRED`] is missing on this machine.
pub fn check() -> anyhow::Result<()> {
    let found = missing(is_present);
    let root = is_root();
    match message(&found, root) {
        None => Ok(()),
        Some(text) => Err(anyhow::anyhow!(text)),
    }
}

fn is_present(requirement: &Requirement) -> bool {
    match requirement.found_as {
        FoundAs::Command(name) => on_path(name).is_some(),
        FoundAs::File(paths) => paths.iter().any(|p| Path::new(p).is_file()),
    }
}

/// The executable `name` on `PATH`, if there is one.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| {
        std::fs::metadata(candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_missing_is_no_message() {
        assert_eq!(message(&missing(|_| true), false), None);
    }

    #[test]
    fn each_missing_tool_is_named_with_why_and_the_command_that_installs_it() {
        let lacking = missing(|r| !matches!(r.name, "minisign" | "libfaketime"));
        let text = message(&lacking, false).expect("a message");
        assert_eq!(
            text,
            "cargo xtask test needs what this machine lacks:\n\
             \x20 - minisign (the signed-payload tests sign with it): package minisign\n\
             \x20 - libfaketime (a controller runs with its clock hours ahead): package faketime\n\
             install with: sudo apt-get update && sudo apt-get install -y minisign faketime\n\
             (bash .ci/run installs them itself)"
        );
        let as_root = message(&lacking, true).expect("a message");
        assert!(
            as_root
                .contains("install with: apt-get update && apt-get install -y minisign faketime")
        );
    }

    #[test]
    fn go_is_named_without_a_package() {
        let lacking = missing(|r| r.name != "go");
        let text = message(&lacking, true).expect("a message");
        assert!(text.contains("  - go (builds the test control plane"), "{text}");
        assert!(!text.contains("install with"), "{text}");
    }

    #[test]
    fn every_package_ci_installs_covers_the_requirements() {
        // `.ci/run` installs every package named here before it runs the tests.
        let ci = std::fs::read_to_string(crate::workspace_root().join(".ci/run")).expect(".ci/run");
        let line = ci.lines().find(|l| l.starts_with("packages=")).expect("the packages line");
        for package in REQUIRED.iter().filter_map(|r| r.package) {
            assert!(line.split(['"', ' ']).any(|p| p == package), "{package} not in: {line}");
        }
    }
}

//! The engine's first purity guard: what `autopilot-engine` is built from. The crate decides
//! and never performs I/O (its `src/lib.rs`), so nothing in its normal dependency closure
//! may be a client, a runtime, an HTTP stack, an OS interface or a random source. The second
//! guard is the crate's own `clippy.toml`, which refuses the standard library's file system,
//! network, process, thread, environment and clock calls.
//!
//! The closure is read from `cargo tree` (normal dependencies only, features resolved as for
//! a build: the engine's tests may use what they like), so a forbidden crate that arrives
//! through another dependency is caught too.

use std::collections::BTreeSet;
use std::process::Command;

/// The package whose closure is checked.
const ENGINE: &str = "autopilot-engine";

/// Crates the engine must not depend on, directly or not, and what they stand for.
const FORBIDDEN: &[(&str, &str)] = &[
    ("kube", "the kube client and runtime"),
    ("kube-client", "the kube client"),
    ("kube-runtime", "the kube runtime (watches, controllers)"),
    ("kube-lease-manager", "leader election"),
    ("tokio", "the async runtime"),
    ("tokio-util", "the async runtime"),
    ("mio", "OS event loops"),
    ("socket2", "sockets"),
    ("hyper", "an HTTP stack"),
    ("hyper-util", "an HTTP stack"),
    ("hyper-rustls", "an HTTP stack"),
    ("reqwest", "an HTTP client"),
    ("tower", "service stacks for clients and servers"),
    ("rustls", "TLS connections"),
    ("nix", "the OS interface"),
    ("rand", "randomness"),
    ("getrandom", "randomness"),
    ("tempfile", "the file system"),
    ("prometheus-client", "metrics (a shell concern)"),
    ("tracing-subscriber", "log output"),
];

#[test]
fn the_engine_depends_on_no_client_runtime_http_os_or_random_crate() {
    let closure = engine_closure();
    assert!(closure.contains("autopilot-api"), "the closure was not read: {closure:?}");
    let found: Vec<String> = FORBIDDEN
        .iter()
        .filter(|(name, _)| closure.contains(*name))
        .map(|(name, why)| format!("{name} ({why})"))
        .collect();
    assert!(
        found.is_empty(),
        "{ENGINE} must stay free of I/O, but its dependencies include:\n{}\n\
         (`cargo tree -p {ENGINE} -e normal -i <crate>` shows the path)",
        found.join("\n")
    );
}

/// The names of every package in the engine's normal-dependency closure, as cargo resolves
/// it for a build of the engine on this host (dev-dependencies and their features left out).
fn engine_closure() -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "--offline", "--package", ENGINE, "--edges", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != ENGINE)
        .map(str::to_string)
        .collect()
}

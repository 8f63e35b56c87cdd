//! Fix the k0s version at build time from `K0S_VERSION` (tests build a second copy with
//! another version to upgrade to; `cargo xtask dist --version` builds a payload with it).

/// The version a build reports when `K0S_VERSION` is not set.
const DEFAULT_VERSION: &str = "v1.35.0+k0s.0";

fn main() {
    println!("cargo:rerun-if-env-changed=K0S_VERSION");
    let version = std::env::var("K0S_VERSION")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_VERSION.to_string());
    println!("cargo:rustc-env=K0S_BUILD_VERSION={}", version.trim());
    link_hot_functions_first();
}

/// In release builds, lay out the functions an idle worker and controller run
/// (`hot-functions.txt`, written by `cargo xtask hot-functions`) together at the start of the
/// text. The kernel maps a binary's pages into a process by whole windows around each page it
/// runs; packed, the code an idle node agent runs keeps a few hundred pages resident instead
/// of most of the text. Names the link does not find (the list is older than the code) are
/// skipped: a stale list costs memory, never correctness.
///
/// Only where rustc links with LLD by default (x86_64 Linux): `--symbol-ordering-file` is an
/// LLD (and gold) option that GNU ld does not have.
fn link_hot_functions_first() {
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-functions.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let lld_target = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    if release && lld_target && list.is_file() {
        println!("cargo:rustc-link-arg-bin=k0s=-Wl,--symbol-ordering-file={}", list.display());
        println!("cargo:rustc-link-arg-bin=k0s=-Wl,--no-warn-symbol-ordering");
    }
}

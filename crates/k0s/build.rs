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
}

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
/// Most names are stable from build to build (their hash comes from the crate and the type),
/// and go to LLD's `--symbol-ordering-file`. A local function that several crates each have a
/// copy of is told apart by a numbered suffix (`name.123`) that the next change to the code
/// may renumber: those go, by their name without the number, into a small linker script
/// that puts every copy in a `.text.hot` section just before `.text` (all of them: they are a
/// few hundred small functions).
///
/// Only where rustc links with LLD by default (x86_64 Linux): GNU ld has no
/// `--symbol-ordering-file`. `K0S_NO_HOT_FUNCTIONS=1` leaves the layout to the linker (for a
/// build with another linker, or to measure what the order saves).
fn link_hot_functions_first() {
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-functions.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=K0S_NO_HOT_FUNCTIONS");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let lld_target = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    let opted_out = std::env::var("K0S_NO_HOT_FUNCTIONS").is_ok_and(|v| !v.is_empty() && v != "0");
    let Ok(names) = std::fs::read_to_string(&list) else { return };
    if !release || !lld_target || opted_out {
        return;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut stable = String::new();
    let mut renumbered = Vec::new();
    for name in names.lines().map(str::trim).filter(|name| !name.is_empty()) {
        match numbered(name) {
            Some(base) if !renumbered.contains(&base) => renumbered.push(base),
            Some(_) => {}
            None => {
                stable.push_str(name);
                stable.push('\n');
            }
        }
    }
    let order = out.join("hot-functions.order");
    std::fs::write(&order, stable).expect("writing the symbol order");
    let mut script = String::from("SECTIONS {\n  .text.hot : {\n");
    for base in renumbered {
        script.push_str(&format!("    *(.text.{base} .text.{base}.*)\n"));
    }
    script.push_str("  }\n} INSERT BEFORE .text;\n");
    let script_path = out.join("hot-functions.ld");
    std::fs::write(&script_path, script).expect("writing the linker script");
    println!("cargo:rustc-link-arg-bin=k0s=-Wl,--symbol-ordering-file={}", order.display());
    println!("cargo:rustc-link-arg-bin=k0s=-Wl,--no-warn-symbol-ordering");
    println!("cargo:rustc-link-arg-bin=k0s=-Wl,-T,{}", script_path.display());
}

/// `name` without its copy number when it has one (`box_new_uninit.12` → `box_new_uninit`).
/// Mangled names never end in `.` and digits otherwise; a GCC clone (`f.constprop.0`) is
/// numbered the same way.
fn numbered(name: &str) -> Option<&str> {
    let (base, number) = name.rsplit_once('.')?;
    (!base.is_empty() && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
        .then_some(base)
}

//! `cargo xtask hot-functions`: write `crates/k0s/hot-functions.txt`, the functions an idle
//! worker and idle controllers run, which the release link puts first in the text
//! (`crates/k0s/build.rs` says how, and how names that change from build to build are kept).
//!
//! An idle `k0s` process runs about 1.5 MiB of its 13 MiB of code, but the kernel maps a file's
//! pages into a process by whole windows and folios (64 KiB and up) around each page it runs,
//! so code spread over the text keeps most of it resident. Laid out together, the code that
//! runs takes a few hundred pages.
//!
//! How: the release build relinked without stripping (`-C strip=none` on the final crate
//! only, so every symbol keeps the name the stripped release link sees), run as the
//! `bench footprint` deployment with the worker and both controllers under valgrind's
//! callgrind, and, where this machine can run real nodes, the worker that runs containerd and
//! the kubelet (`k0s worker --run-components`, a copy carrying the worker's components: its
//! staging, supervision, log following and health checks); each stopped with SIGTERM after
//! the settle time. Every function of the `k0s` object in their profiles, the worker's first,
//! then the one running its components, then the controllers'. Run it after a dependency
//! update or a large change; a stale list costs only memory (names the link does not find are
//! skipped), never correctness.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;

/// Arguments of `cargo xtask hot-functions`.
#[derive(clap::Args)]
pub struct Args {
    /// How long the deployment idles under callgrind before it is stopped.
    #[arg(long, default_value = "60s", value_parser = autopilot_api::duration::parse)]
    settle: Duration,
}

/// Where the list lives (read by `crates/k0s/build.rs`).
pub const LIST: &str = "crates/k0s/hot-functions.txt";

pub fn run(args: Args) -> anyhow::Result<()> {
    let valgrind = Command::new("valgrind").arg("--version").output();
    anyhow::ensure!(
        valgrind.is_ok_and(|out| out.status.success()),
        "valgrind is needed to profile the idle processes (apt-get install valgrind)"
    );
    integration::control_plane::ensure_built()?;
    let root = crate::workspace_root();
    let work = tempfile::Builder::new().prefix("k0s-hot-functions-").tempdir()?;
    let k0s = work.path().join("k0s");
    build_unstripped(&root, &k0s)?;
    let carrying = work.path().join("k0s-carrying");
    integration::components::pack(&k0s, integration::components::Set::Worker, &carrying)?;

    // Each process the cluster starts from a wrapper runs `k0s` under callgrind.
    let out = work.path().join("callgrind");
    let wrapper = work.path().join("k0s-under-callgrind");
    write_wrapper(&wrapper, "worker|controller", &format!("{}.$1", out.display()), &k0s)?;
    let components_wrapper = work.path().join("k0s-carrying-under-callgrind");
    write_wrapper(
        &components_wrapper,
        "worker",
        &format!("{}.components", out.display()),
        &carrying,
    )?;

    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async {
        let idle = crate::bench::start_idle(&wrapper, args.settle).await?;
        // SIGTERM: a graceful stop, after which callgrind writes its profile.
        let grace = Duration::from_secs(120);
        let components =
            crate::bench::start_run_components_worker(&idle.cluster, &components_wrapper).await?;
        if let Some((nodes, worker)) = components {
            println!("    its Node is Ready; idling for {} s", args.settle.as_secs());
            tokio::time::sleep(args.settle).await;
            worker.stop(grace).await?;
            drop(nodes);
        }
        idle.worker.stop(grace).await?;
        for controller in &idle.controllers {
            controller.stop(grace).await?;
        }
        anyhow::Ok(())
    })?;

    let list = functions_of_profiles(work.path(), &k0s, &carrying)?;
    let path = root.join(LIST);
    std::fs::write(&path, list.join("\n") + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("==> {} functions written to {LIST}", list.len());
    Ok(())
}

/// Writes the script at `path` that runs `binary` with its arguments, under callgrind when
/// its subcommand is one of `subcommands` (a `case` pattern), the profile going to
/// `<out>.<pid>`.
fn write_wrapper(path: &Path, subcommands: &str, out: &str, binary: &Path) -> anyhow::Result<()> {
    let binary = binary.display();
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  {subcommands}) exec valgrind --tool=callgrind \
             --demangle=no --callgrind-out-file={out}.%p {binary} \"$@\" ;;\nesac\nexec \
             {binary} \"$@\"\n"
        ),
    )?;
    make_executable(path)
}

/// Every function of `k0s` (of `carrying` in the profile of the worker running its
/// components) in the callgrind profiles in `dir`, once: the worker's first, then the one
/// running its components, then the controllers'.
fn functions_of_profiles(dir: &Path, k0s: &Path, carrying: &Path) -> anyhow::Result<Vec<String>> {
    let mut profiles: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("callgrind."))
        })
        .collect();
    let is_worker = |path: &PathBuf| path.to_string_lossy().contains("callgrind.worker.");
    let runs_components = |path: &PathBuf| path.to_string_lossy().contains("callgrind.components.");
    // The worker's functions first: the worker is the process on every node; then what a
    // worker that runs its components adds, as it is the worker of a node k0s runs.
    profiles.sort_by_key(|path| (!is_worker(path), !runs_components(path), path.clone()));
    anyhow::ensure!(
        profiles.iter().any(is_worker),
        "no callgrind profile of the worker in {}",
        dir.display()
    );
    let mut seen = BTreeSet::new();
    let mut list = Vec::new();
    for profile in &profiles {
        let text = std::fs::read_to_string(profile)
            .with_context(|| format!("reading {}", profile.display()))?;
        let object = if runs_components(profile) { carrying } else { k0s };
        let functions = functions_of(&text, &object.to_string_lossy());
        println!("    {}: {} functions of k0s", profile.display(), functions.len());
        for name in functions {
            if seen.insert(name.clone()) {
                list.push(name);
            }
        }
    }
    anyhow::ensure!(!list.is_empty(), "the profiles name no function of {}", k0s.display());
    Ok(list)
}

/// The release `k0s` with its symbols kept, copied to `to`. Only the final crate is built
/// again, with the release profile's `-C metadata`, so the mangled names are the release
/// link's.
fn build_unstripped(root: &Path, to: &Path) -> anyhow::Result<()> {
    println!("==> building the release k0s with its symbols");
    let status = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["rustc", "--release", "--locked", "-p", "k0s", "--bin", "k0s", "--"])
        .args(["-C", "strip=none"])
        .status()
        .context("running cargo rustc")?;
    anyhow::ensure!(status.success(), "building the unstripped k0s failed: {status}");
    let built = crate::test::target_dir().join("release/k0s");
    std::fs::copy(&built, to).with_context(|| format!("copying {}", built.display()))?;
    Ok(())
}

fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

/// The functions of `object` that ran, in the order a callgrind profile first lists them.
///
/// The format compresses names: `fn=(7) name` defines id 7, later `fn=(7)` refers to it, and
/// `cfn=` (a callee) defines ids the same way; `ob=`/`cob=` do the same for objects, and an
/// `ob=` line sets the object of the `fn=` lines after it. Callgrind tells apart functions of
/// the same name by a `'N` suffix, which is not part of the symbol.
fn functions_of(profile: &str, object: &str) -> Vec<String> {
    let mut names = std::collections::HashMap::new();
    let mut objects = std::collections::HashMap::new();
    let mut current_object = String::new();
    let mut listed = BTreeSet::new();
    let mut ran = Vec::new();
    for line in profile.lines() {
        let Some((key, rest)) = line.split_once('=') else { continue };
        let Some(rest) = rest.strip_prefix('(') else { continue };
        let Some((id, name)) = rest.split_once(')') else { continue };
        let name = name.trim();
        match key {
            "ob" | "cob" => {
                if !name.is_empty() {
                    objects.insert(id.to_owned(), name.to_owned());
                }
                if key == "ob" {
                    current_object = objects.get(id).cloned().unwrap_or_default();
                }
            }
            "fn" | "cfn" => {
                if !name.is_empty() {
                    names.insert(id.to_owned(), name.to_owned());
                }
                if key == "fn"
                    && current_object == object
                    && let Some(name) = names.get(id)
                {
                    let symbol = match name.rsplit_once('\'') {
                        Some((symbol, n)) if n.bytes().all(|b| b.is_ascii_digit()) => symbol,
                        _ => name.as_str(),
                    };
                    if listed.insert(symbol.to_owned()) {
                        ran.push(symbol.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    ran
}

#[cfg(test)]
mod tests {
    use super::functions_of;

    #[test]
    fn the_functions_of_the_object_are_listed_once_in_first_order() {
        let profile = "\
ob=(1) /lib/libc.so.6
fn=(1) memcpy
1 5
ob=(2) /tmp/k0s
fn=(2) _ZN3k0s4main17h0000000000000001E
1 3
cfn=(3) _ZN3k0s6worker17h0000000000000002E
calls=1 0
1 9
cob=(1)
cfn=(1)
calls=1 0
1 2
fn=(3)
1 4
fn=(4) _ZN3k0s5dup17h0000000000000003E'2
1 1
fn=(5) _ZN3k0s5dup17h0000000000000003E
1 1
ob=(1)
fn=(6) strlen
1 1
ob=(2)
fn=(2)
1 1
";
        assert_eq!(
            functions_of(profile, "/tmp/k0s"),
            [
                "_ZN3k0s4main17h0000000000000001E",
                "_ZN3k0s6worker17h0000000000000002E",
                "_ZN3k0s5dup17h0000000000000003E",
            ]
        );
        assert_eq!(functions_of(profile, "/lib/libc.so.6"), ["memcpy", "strlen"]);
    }
}

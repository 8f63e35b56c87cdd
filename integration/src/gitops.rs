//! What GitOps engines read from a Plan, computed by their own code: the real kstatus, Argo
//! CD's way of running a resource health Lua script, and the real kubectl, built once and
//! cached like cosign.
//!
//! # The binaries
//!
//! [`ensure_built`] (run by `cargo xtask control-plane`, so by `.ci/run` and `cargo xtask
//! test` too; `--only gitops` for this part alone) builds two Go programs whose source is
//! kept in `integration/tools/`, each in a throw-away wrapper module outside the repository
//! pinned to the versions below (one module each, as each pins other Kubernetes libraries):
//!
//! - `gitops-health` ([`HEALTH_MAIN`]): `kstatus` runs `sigs.k8s.io/cli-utils`
//!   [`CLI_UTILS_VERSION`]'s `pkg/kstatus/status.Compute` (what Flux's health checks and
//!   cli-utils read) over one object; `argo-health <script>` runs an Argo CD resource health
//!   script with gopher-lua [`GOPHER_LUA_VERSION`] as Argo CD's `util/lua` does for a script
//!   from `argocd-cm` (the base, table and package libraries and a safe `os`, the object as
//!   the global `obj`, the returned table's `status` and `message`).
//! - `flux-health` ([`FLUX_MAIN`]): a Flux Kustomization's `healthCheckExprs` entry
//!   evaluated over one object by `github.com/fluxcd/pkg/runtime` [`FLUX_RUNTIME_VERSION`]'s
//!   `cel.StatusEvaluator`, the code Flux's kustomize-controller evaluates them with.
//! - `kubectl` ([`KUBECTL_MAIN`]): `k8s.io/kubectl` at the control plane's
//!   [`STAGING_VERSION`], with the `main` of `k8s.io/kubernetes/cmd/kubectl`, reporting
//!   [`KUBERNETES_VERSION`].
//!
//! They are checked (`go version -m` shows the pinned modules, `kstatus` judges a ConfigMap
//! `Current`, `kubectl version --client` reports the release) and moved into
//! `<cache>/<versions>/bin/` with a stamp that also holds a digest of the Go sources, so an
//! edited source is rebuilt. Tests only call [`binaries`] (through [`kstatus`],
//! [`argo_health`], [`flux_health`], [`kubectl`]), which never builds and fails with the hint to run `cargo
//! xtask control-plane`.

use std::{
    fmt, fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use anyhow::{Context as _, ensure};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::cache::{self, CachedSet, Override};
use crate::control_plane::{KUBERNETES_VERSION, STAGING_VERSION, kubernetes_ldflags};
use crate::go::{self, run};

/// The pinned `sigs.k8s.io/cli-utils`, whose kstatus the `kstatus` subcommand runs.
pub const CLI_UTILS_VERSION: &str = "v0.37.2";

/// The pinned `github.com/yuin/gopher-lua`, the Lua Argo CD runs health scripts with.
pub const GOPHER_LUA_VERSION: &str = "v1.1.2";

/// The pinned `github.com/fluxcd/pkg/runtime`, whose `cel.StatusEvaluator` judges
/// `healthCheckExprs`.
pub const FLUX_RUNTIME_VERSION: &str = "v0.117.0";

/// Environment variable that overrides the cache directory: the binaries live in its
/// `<versions>/bin/`.
pub const CACHE_DIR_ENV: &str = "K0S_GITOPS_CACHE";

/// The Go source of `gitops-health` (`integration/tools/gitops-health/main.go`).
pub const HEALTH_MAIN: &str = include_str!("../tools/gitops-health/main.go");

/// The Go source of `flux-health` (`integration/tools/flux-health/main.go`).
pub const FLUX_MAIN: &str = include_str!("../tools/flux-health/main.go");

/// The Go source of `kubectl` (`integration/tools/kubectl/main.go`).
pub const KUBECTL_MAIN: &str = include_str!("../tools/kubectl/main.go");

/// Which of the programs a [`Tool`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Health,
    Flux,
    Kubectl,
}

/// One Go program the harness builds.
#[derive(Clone, Copy, Debug)]
struct Tool {
    kind: Kind,
    /// The binary's name in `bin/`, and the wrapper module's last path element.
    name: &'static str,
    /// Its `main.go`.
    main: &'static str,
    /// The modules (with their versions) its `go.mod` requires; `go version -m` must show them.
    requires: &'static [(&'static str, &'static str)],
    /// The `go` line of its `go.mod`: what the modules it requires ask for.
    go_version: &'static str,
    /// Whether it reports [`KUBERNETES_VERSION`] (set with `-ldflags -X`, as the release
    /// build of kubectl does).
    reports_kubernetes_version: bool,
}

const HEALTH: Tool = Tool {
    kind: Kind::Health,
    name: "gitops-health",
    main: HEALTH_MAIN,
    requires: &[
        ("sigs.k8s.io/cli-utils", CLI_UTILS_VERSION),
        ("github.com/yuin/gopher-lua", GOPHER_LUA_VERSION),
    ],
    go_version: "1.25.0",
    reports_kubernetes_version: false,
};

const FLUX: Tool = Tool {
    kind: Kind::Flux,
    name: "flux-health",
    main: FLUX_MAIN,
    requires: &[("github.com/fluxcd/pkg/runtime", FLUX_RUNTIME_VERSION)],
    go_version: "1.26.0",
    reports_kubernetes_version: false,
};

const KUBECTL: Tool = Tool {
    kind: Kind::Kubectl,
    name: "kubectl",
    main: KUBECTL_MAIN,
    requires: &[
        ("k8s.io/kubectl", STAGING_VERSION),
        ("k8s.io/component-base", STAGING_VERSION),
        ("k8s.io/client-go", STAGING_VERSION),
    ],
    go_version: "1.25.0",
    reports_kubernetes_version: true,
};

const TOOLS: [Tool; 3] = [HEALTH, FLUX, KUBECTL];

/// Paths of the cached binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    /// `gitops-health` (`kstatus`, `argo-health <script>`).
    pub health: PathBuf,
    /// `flux-health`.
    pub flux: PathBuf,
    /// `kubectl`.
    pub kubectl: PathBuf,
}

impl Binaries {
    fn in_dir(dir: &Path) -> Self {
        let bin = dir.join("bin");
        Self {
            health: bin.join(HEALTH.name),
            flux: bin.join(FLUX.name),
            kubectl: bin.join(KUBECTL.name),
        }
    }

    fn of(&self, tool: Tool) -> &Path {
        match tool.kind {
            Kind::Health => &self.health,
            Kind::Flux => &self.flux,
            Kind::Kubectl => &self.kubectl,
        }
    }
}

/// The versions the cache directory is named after.
fn versions() -> String {
    format!(
        "cli-utils-{CLI_UTILS_VERSION}-gopher-lua-{GOPHER_LUA_VERSION}-flux-runtime-\
         {FLUX_RUNTIME_VERSION}-kubectl-{STAGING_VERSION}"
    )
}

/// What the stamp file says: the pinned modules and a digest of each Go source.
fn stamp_contents() -> String {
    TOOLS
        .iter()
        .map(|tool| {
            let modules: Vec<String> = tool
                .requires
                .iter()
                .map(|(module, version)| format!("{module}={version}"))
                .collect();
            let digest = hex::encode(Sha256::digest(tool.main.as_bytes()));
            format!("{} {} main.go sha256={digest}\n", tool.name, modules.join(" "))
        })
        .collect()
}

/// The cache directory: `$K0S_GITOPS_CACHE/<versions>/` if set, otherwise
/// `~/.cache/k0s-autopilot/gitops/<versions>/` (`$XDG_CACHE_HOME` is honoured), `<versions>`
/// naming cli-utils, gopher-lua, Flux's runtime and kubectl. The binaries live in its `bin/`.
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    cache::dir(CACHE_DIR_ENV, Override::Parent, "gitops", &versions())
}

/// The cached set of the tools, and their paths.
fn cached_set() -> anyhow::Result<(CachedSet, Binaries)> {
    let dir = cache_dir()?;
    let binaries = Binaries::in_dir(&dir);
    let set = CachedSet {
        name: "GitOps tools".to_owned(),
        pinned: format!(
            "kstatus of cli-utils {CLI_UTILS_VERSION}, gopher-lua {GOPHER_LUA_VERSION}, Flux's \
             runtime {FLUX_RUNTIME_VERSION}, kubectl {STAGING_VERSION}"
        ),
        part: "gitops",
        dir,
        stamp: stamp_contents(),
        entries: TOOLS.iter().map(|tool| binaries.of(*tool).to_path_buf()).collect(),
    };
    Ok((set, binaries))
}

/// The cached binaries, without building anything.
///
/// Fails with a message telling the reader to run `cargo xtask control-plane` when they are
/// missing or were built from other versions or sources.
pub fn binaries() -> anyhow::Result<Binaries> {
    let (set, binaries) = cached_set()?;
    set.cached()?;
    Ok(binaries)
}

/// Builds the binaries into [`cache_dir`] unless they are already there, and returns them.
///
/// Needs `go` on `PATH` and access to the Go module proxy. Each binary is built under a
/// temporary name, checked and renamed into place, and the stamp is written last, so an
/// interrupted run leaves nothing half-written behind.
pub fn ensure_built() -> anyhow::Result<Binaries> {
    let (set, binaries) = cached_set()?;
    set.ensure(|missing| {
        go::check_installed()?;
        for tool in TOOLS {
            let dest = binaries.of(tool);
            if missing.iter().any(|m| m == dest) {
                build(tool, dest)?;
            }
        }
        Ok(())
    })?;
    Ok(binaries)
}

/// The `go.mod` of `tool`'s wrapper module.
fn go_mod(tool: Tool) -> String {
    let requires: String =
        tool.requires.iter().map(|(module, version)| format!("\t{module} {version}\n")).collect();
    format!(
        "module k0sautopilot/testing/{}\n\ngo {}\n\nrequire (\n{requires})\n",
        tool.name, tool.go_version
    )
}

/// The `-ldflags` of `tool`: stripped, and for kubectl the version it reports.
fn ldflags(tool: Tool) -> anyhow::Result<String> {
    if tool.reports_kubernetes_version {
        kubernetes_ldflags(crate::control_plane::CURRENT)
    } else {
        Ok("-s -w".to_owned())
    }
}

/// Builds `tool` into `dest` (through a temporary name), checked.
fn build(tool: Tool, dest: &Path) -> anyhow::Result<()> {
    let work = go::work_dir(&format!("gitops-{}", tool.name))?;
    let work = work.path();
    println!("==> building {} in {}", tool.name, work.display());
    fs::write(work.join("go.mod"), go_mod(tool))?;
    fs::write(work.join("main.go"), tool.main)?;
    run(go::command(work).args(["mod", "tidy"]), &format!("go mod tidy ({})", tool.name))?;
    let ldflags = ldflags(tool)?;
    go::build(work, ".", &["-trimpath", "-ldflags", &ldflags], dest, |binary| {
        check_build_info(tool, &go::build_info(work, binary)?)?;
        check_runs(tool, binary)?;
        Ok(tool.name.to_owned())
    })
}

/// Checks that `go version -m` shows every module `tool` pins, at its version.
fn check_build_info(tool: Tool, info: &str) -> anyhow::Result<()> {
    for (module, version) in tool.requires {
        ensure!(
            go::shows_module(info, module, version),
            "go version -m of {} does not show {module} {version}:\n{info}",
            tool.name
        );
    }
    Ok(())
}

/// Runs the freshly built `binary` once: `kstatus` must judge a ConfigMap `Current`,
/// `flux-health` too with `current: true`, and `kubectl version --client` must report
/// [`KUBERNETES_VERSION`].
fn check_runs(tool: Tool, binary: &Path) -> anyhow::Result<()> {
    let config_map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "check"}
    });
    let verdict: Verdict<Kstatus> = match tool.kind {
        Kind::Kubectl => return check_kubectl(binary),
        Kind::Health => run_health(binary, &["kstatus"], &config_map)?,
        Kind::Flux => run_health(binary, &["-current", "true"], &config_map)?,
    };
    ensure!(
        verdict.status == Kstatus::Current,
        "the built {} judges a ConfigMap {verdict}, expected Current",
        tool.name
    );
    Ok(())
}

/// `kubectl version --client` must report [`KUBERNETES_VERSION`].
fn check_kubectl(binary: &Path) -> anyhow::Result<()> {
    {
        let output = Command::new(binary)
            .args(["version", "--client", "-o", "json"])
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} version", binary.display()))?;
        ensure!(output.status.success(), "kubectl version failed: {}", output.status);
        let version: serde_json::Value = serde_json::from_slice(&output.stdout)
            .context("parsing the output of kubectl version -o json")?;
        let reported = version.pointer("/clientVersion/gitVersion").and_then(|v| v.as_str());
        ensure!(
            reported == Some(KUBERNETES_VERSION),
            "the built kubectl reports {reported:?}, expected {KUBERNETES_VERSION}"
        );
    }
    Ok(())
}

// === the verdicts ===

/// What kstatus (`status.Compute`) says of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Kstatus {
    /// Being reconciled, or the latest generation not observed yet.
    InProgress,
    /// Reconciliation failed (`Stalled` is True).
    Failed,
    /// Reconciled: the desired state is reached.
    Current,
    /// Being deleted.
    Terminating,
    /// Not found (only from pollers; never from one object).
    NotFound,
    /// Cannot tell.
    Unknown,
}

/// What an Argo CD health script says of an object (gitops-engine's health codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Health {
    /// Fully healthy.
    Healthy,
    /// Not healthy yet, may become healthy.
    Progressing,
    /// Failed, or cannot reach health.
    Degraded,
    /// Paused or suspended.
    Suspended,
    /// Absent from the cluster.
    Missing,
    /// Cannot tell (also: the script returned a status Argo CD does not know).
    Unknown,
}

/// A status with its message, as the tools print it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Verdict<S> {
    /// The status.
    pub status: S,
    /// Why, in the words of kstatus or of the script.
    pub message: String,
}

impl<S: fmt::Debug> fmt::Display for Verdict<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({:?})", self.status, self.message)
    }
}

/// kstatus's verdict on `object` (a whole object as the API server returns it: `apiVersion`,
/// `kind`, `metadata`, `status`), with the cached `gitops-health kstatus`.
pub fn kstatus(object: &serde_json::Value) -> anyhow::Result<Verdict<Kstatus>> {
    run_health(&binaries()?.health, &["kstatus"], object)
}

/// What the Argo CD health script at `script` says of `object`, run as Argo CD runs it, with
/// the cached `gitops-health argo-health`.
pub fn argo_health(script: &Path, object: &serde_json::Value) -> anyhow::Result<Verdict<Health>> {
    let script =
        script.to_str().with_context(|| format!("{} is no UTF-8 path", script.display()))?;
    run_health(&binaries()?.health, &["argo-health", script], object)
}

/// One entry of a Flux Kustomization's `healthCheckExprs` (its CEL expressions).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FluxExprs {
    /// True when the object is reconciled.
    pub current: String,
    /// True while it is being reconciled (evaluated first).
    #[serde(default)]
    pub in_progress: Option<String>,
    /// True when it failed (evaluated second).
    #[serde(default)]
    pub failed: Option<String>,
}

/// What Flux's kustomize-controller makes of `object` with the health check expressions
/// `exprs`, with the cached `flux-health` (Flux first reads a `status.observedGeneration`
/// other than `metadata.generation` as `InProgress`, then evaluates `inProgress`, `failed`,
/// `current`, and `InProgress` when none holds). An expression that cannot be evaluated on
/// the object (a field it names is missing) is an `Err`: Flux keeps waiting then.
pub fn flux_health(
    exprs: &FluxExprs,
    object: &serde_json::Value,
) -> anyhow::Result<Verdict<Kstatus>> {
    let FluxExprs { current, in_progress, failed } = exprs;
    let mut args = vec!["-current", current.as_str()];
    if let Some(in_progress) = in_progress {
        args.extend(["-in-progress", in_progress.as_str()]);
    }
    if let Some(failed) = failed {
        args.extend(["-failed", failed.as_str()]);
    }
    run_health(&binaries()?.flux, &args, object)
}

/// The `healthCheckExprs` entry for Plans of the Flux Kustomization this repository ships,
/// `manifests/gitops/flux-kustomization.yaml`.
pub fn plan_flux_exprs() -> anyhow::Result<FluxExprs> {
    let path = plan_health_script().with_file_name("flux-kustomization.yaml");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let kustomization: serde_json::Value =
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let entry = kustomization
        .pointer("/spec/healthCheckExprs")
        .and_then(|exprs| exprs.as_array())
        .and_then(|exprs| exprs.iter().find(|e| e["kind"] == "Plan"))
        .with_context(|| format!("{}: no spec.healthCheckExprs entry for Plan", path.display()))?;
    serde_json::from_value(entry.clone())
        .with_context(|| format!("{}: the healthCheckExprs entry for Plan", path.display()))
}

/// The Plan health check this repository ships, `manifests/gitops/plan-health.lua`.
pub fn plan_health_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/gitops/plan-health.lua")
}

/// The cached real `kubectl` run against `kubeconfig` (`--kubeconfig <path>`, nothing on
/// stdin): add the arguments and run it.
pub fn kubectl(kubeconfig: &Path) -> anyhow::Result<Command> {
    let mut command = Command::new(binaries()?.kubectl);
    command.arg("--kubeconfig").arg(kubeconfig).stdin(Stdio::null());
    Ok(command)
}

/// Runs `binary args…` with `object` as JSON on stdin and reads the verdict it prints.
fn run_health<S: for<'de> Deserialize<'de>>(
    binary: &Path,
    args: &[&str],
    object: &serde_json::Value,
) -> anyhow::Result<Verdict<S>> {
    let what = format!("{} {}", binary.display(), args.join(" "));
    let name = describe(object);
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let input = serde_json::to_vec(object)?;
    child
        .stdin
        .take()
        .context("the child has no stdin")?
        .write_all(&input)
        .with_context(|| format!("writing {name} to {what}"))?;
    let Output { status, stdout, stderr } =
        child.wait_with_output().with_context(|| format!("waiting for {what}"))?;
    ensure!(
        status.success(),
        "{what} failed on {name} ({status}): {}",
        String::from_utf8_lossy(&stderr).trim()
    );
    serde_json::from_slice(&stdout).with_context(|| {
        format!("{what} on {name} printed no verdict: {}", String::from_utf8_lossy(&stdout))
    })
}

/// `Plan/autopilot` for error messages.
fn describe(object: &serde_json::Value) -> String {
    let field = |pointer: &str| object.pointer(pointer).and_then(|v| v.as_str()).unwrap_or("?");
    format!("{}/{}", field("/kind"), field("/metadata/name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_named_after_every_pinned_version() {
        let dir = cache_dir().expect("a cache directory");
        let name = dir.file_name().expect("a name").to_string_lossy().into_owned();
        assert_eq!(
            name,
            "cli-utils-v0.37.2-gopher-lua-v1.1.2-flux-runtime-v0.117.0-kubectl-v0.35.4"
        );
    }

    #[test]
    fn the_stamp_names_each_module_and_the_digest_of_each_source() {
        let stamp = stamp_contents();
        let lines: Vec<&str> = stamp.lines().collect();
        assert_eq!(lines.len(), 3, "{stamp}");
        assert!(lines[0].starts_with(
            "gitops-health sigs.k8s.io/cli-utils=v0.37.2 github.com/yuin/gopher-lua=v1.1.2 \
             main.go sha256="
        ));
        assert!(
            lines[1].starts_with("flux-health github.com/fluxcd/pkg/runtime=v0.117.0 "),
            "{stamp}"
        );
        assert!(lines[2].starts_with("kubectl k8s.io/kubectl=v0.35.4 "), "{stamp}");
        let digest = hex::encode(Sha256::digest(KUBECTL_MAIN.as_bytes()));
        assert!(lines[2].ends_with(&format!("sha256={digest}")), "{stamp}");
    }

    #[test]
    fn kubectl_reports_the_control_planes_release() {
        let v = "k8s.io/component-base/version";
        assert_eq!(
            ldflags(KUBECTL).expect("ldflags"),
            format!(
                "-s -w -X {v}.gitVersion=v1.35.4 -X {v}.gitMajor=1 -X {v}.gitMinor=35 \
                 -X {v}.gitTreeState=clean"
            )
        );
        assert_eq!(ldflags(HEALTH).expect("ldflags"), "-s -w");
    }

    #[test]
    fn each_wrapper_module_requires_exactly_its_pinned_modules() {
        assert_eq!(
            go_mod(HEALTH),
            "module k0sautopilot/testing/gitops-health\n\ngo 1.25.0\n\nrequire (\n\
             \tsigs.k8s.io/cli-utils v0.37.2\n\tgithub.com/yuin/gopher-lua v1.1.2\n)\n"
        );
        assert!(go_mod(KUBECTL).contains("\tk8s.io/kubectl v0.35.4\n"));
        assert!(go_mod(FLUX).contains("\ngo 1.26.0\n"), "fluxcd/pkg/runtime asks for Go 1.26");
    }

    #[test]
    fn the_build_info_must_show_every_pinned_module() {
        let good = "/tmp/x: go1.26.8\n\tpath\tk0sautopilot/testing/gitops-health\n\
                    \tdep\tgithub.com/yuin/gopher-lua\tv1.1.2\th1:abc=\n\
                    \tdep\tsigs.k8s.io/cli-utils\tv0.37.2\th1:def=\n";
        check_build_info(HEALTH, good).expect("both pinned modules are shown");
        let error = check_build_info(HEALTH, &good.replace("v0.37.2", "v0.37.1"))
            .expect_err("another cli-utils is refused");
        assert!(error.to_string().contains("sigs.k8s.io/cli-utils v0.37.2"), "{error}");
        assert!(check_build_info(KUBECTL, good).is_err(), "kubectl is another module");
    }

    #[test]
    fn the_kubectl_main_is_upstreams() {
        // k8s.io/kubernetes/cmd/kubectl: the verbosity first, then the default command run
        // by component-base's cli.
        for line in [
            "logs.GlogSetter(cmd.GetLogVerbosity(os.Args))",
            "command := cmd.NewDefaultKubectlCommand()",
            "if err := cli.RunNoErrOutput(command); err != nil {",
            "util.CheckErr(err)",
            "_ \"k8s.io/client-go/plugin/pkg/client/auth\"",
        ] {
            assert!(KUBECTL_MAIN.contains(line), "{line}");
        }
    }

    #[test]
    fn verdicts_read_what_the_tools_print_and_name_their_status() {
        let verdict: Verdict<Kstatus> =
            serde_json::from_str(r#"{"status":"Failed","message":"bad sha256"}"#).expect("parses");
        assert_eq!(verdict.status, Kstatus::Failed);
        assert_eq!(verdict.to_string(), "Failed (\"bad sha256\")");
        let health: Verdict<Health> =
            serde_json::from_str(r#"{"status":"Suspended","message":""}"#).expect("parses");
        assert_eq!(health.status, Health::Suspended);
        assert!(
            serde_json::from_str::<Verdict<Health>>(r#"{"status":"Fine","message":""}"#).is_err()
        );
    }

    #[test]
    fn an_object_is_named_by_kind_and_name_in_errors() {
        let plan = serde_json::json!({"kind": "Plan", "metadata": {"name": "autopilot"}});
        assert_eq!(describe(&plan), "Plan/autopilot");
        assert_eq!(describe(&serde_json::json!({})), "?/?");
    }

    #[test]
    fn the_shipped_plan_health_script_is_found() {
        assert!(plan_health_script().is_file(), "{}", plan_health_script().display());
    }
}

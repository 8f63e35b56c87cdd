//! The Renovate configuration this repository ships (`manifests/gitops/renovate.json5`), run
//! by the real Renovate against a real forge (Gitea): one pull request moves a Plan written
//! by `cargo xtask dist` to the version the update server's `index.yaml` offers, with the
//! version, every URL (and signature URL) and every sha256 of the k0s binaries and airgap
//! bundles changed together, and nothing else.
//!
//! Needs the cached Node.js, Renovate and Gitea (`cargo xtask control-plane --only renovate`;
//! `cargo xtask test` installs them first), `git` and `openssl`.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, ensure};
use autopilot_api::v1beta2::{
    Plan, PlanCommand, PlanCommandAirgapUpdate, PlanCommandTarget, PlanCommandTargetDiscovery,
    PlanCommandTargetDiscoverySelector, PlanResourceUrl,
};
use integration::{
    dist::{self, Options},
    http::FileServer,
    renovate::{Forge, Pull, RenovateRun},
};

/// The version the Plan in git has.
const V1: &str = "v1.35.1+k0s.0";
/// The version the update server offers.
const V2: &str = "v1.35.2+k0s.0";
/// Where the shipped configuration expects the update server, replaced by the test's.
const PLACEHOLDER_SERVER: &str = "https://updates.example.com";
/// The repository in the forge.
const REPO: &str = "cluster";
/// Where the Plan lives in it.
const PLAN_PATH: &str = "clusters/prod/plan.yaml";

/// One release as an operator publishes it: what `cargo xtask dist` wrote for each platform,
/// the airgap bundle beside it, and the Plan for all of them.
struct Release {
    /// Each platform's binary entry (url, sha256, signature URL).
    k0s: BTreeMap<String, PlanResourceUrl>,
    /// The airgap bundle's entry of the first platform.
    airgap: (String, PlanResourceUrl),
    /// The update server's `index.yaml` dist wrote for all of them.
    index: String,
    /// The Plan as YAML: dist's file (its comments too), with the platforms merged and an
    /// `airgapupdate` first.
    plan_yaml: String,
}

/// Two platforms other than this machine's (so `dist --binary` packages a file without
/// running it), as Rust triples with their platform keys.
fn platforms() -> Vec<(&'static str, &'static str)> {
    let current = autopilot_api::platform::current();
    [
        ("aarch64-unknown-linux-gnu", "linux-arm64"),
        ("armv7-unknown-linux-gnueabihf", "linux-arm"),
        ("x86_64-unknown-linux-gnu", "linux-amd64"),
    ]
    .into_iter()
    .filter(|(_, platform)| *platform != current)
    .take(2)
    .collect()
}

/// A P-256 release key (PKCS#8 PEM) made with openssl.
fn release_key(dir: &Path) -> anyhow::Result<PathBuf> {
    let key = dir.join("release.pem");
    let status = Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&key)
        .status()
        .context("running openssl genpkey")?;
    ensure!(status.success(), "openssl genpkey failed: {status}");
    Ok(key)
}

/// Packages `version` for [`platforms`] with `cargo xtask dist`'s code (the first platform
/// signed with `key`), adds an airgap bundle, and writes the Plan for all of them.
fn release(work: &Path, version: &str, key: &Path, server: &str) -> anyhow::Result<Release> {
    let out = work.join(version);
    let url_base = format!("{server}/k0s/{version}");
    let mut k0s = BTreeMap::new();
    let mut plan: Option<Plan> = None;
    let mut header = String::new();
    let mut index_text = String::new();
    // An airgap bundle for the first platform, beside its binary: dist lists it in the index.
    let first = platforms()[0].1;
    let arch = first.split_once('-').map_or(first, |(_, arch)| arch);
    let bundle_name = format!("k0s-airgap-bundle-{version}-{arch}");
    let bundle = format!("images of {version} for {first}\n");
    fs::create_dir_all(&out)?;
    fs::write(out.join(&bundle_name), &bundle)?;
    for (index, (triple, platform)) in platforms().into_iter().enumerate() {
        let binary = work.join(format!("built-{version}-{platform}"));
        fs::write(&binary, format!("k0s {version} built for {triple}\n"))?;
        let written = dist::dist(&Options {
            version: version.to_owned(),
            binary: Some(binary),
            profile: "dev".to_owned(),
            target: Some(triple.to_owned()),
            out: Some(out.clone()),
            key: (index == 0).then(|| key.to_owned()),
            url_base: Some(url_base.clone()),
            components: None,
        })?;
        ensure!(written.platform == platform, "dist packaged {}", written.platform);
        let text = fs::read_to_string(&written.plan)?;
        header =
            text.lines().take_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
        let update = written.plan_object.spec.commands[0].k0supdate.clone().context("k0supdate")?;
        k0s.extend(update.platforms);
        plan = Some(written.plan_object);
        index_text = fs::read_to_string(&written.index)?;
    }
    let mut plan = plan.context("no platform")?;
    let airgap = PlanResourceUrl {
        url: format!("{url_base}/{bundle_name}"),
        sha256: Some(sha256_hex(bundle.as_bytes())),
        ..Default::default()
    };
    let command = plan.spec.commands[0].k0supdate.as_mut().context("k0supdate")?;
    command.platforms = k0s.clone();
    plan.spec.commands.insert(
        0,
        PlanCommand {
            airgapupdate: Some(PlanCommandAirgapUpdate {
                version: version.to_owned(),
                platforms: BTreeMap::from([(first.to_owned(), airgap.clone())]),
                workers: PlanCommandTarget {
                    discovery: PlanCommandTargetDiscovery {
                        r#static: None,
                        selector: Some(PlanCommandTargetDiscoverySelector::default()),
                    },
                    limits: Default::default(),
                },
                rollout: Default::default(),
            }),
            k0supdate: None,
            preflight: None,
        },
    );
    plan.spec.timestamp = "2026-11-28T12:00:00Z".to_owned();
    // dist's file: its comment lines, then the Plan as dist writes it.
    let plan_yaml = format!("{header}{}", dist::plan_yaml(&plan)?);
    Ok(Release { k0s, airgap: (first.to_owned(), airgap), plan_yaml, index: index_text })
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `release`'s Plan as a person may have edited it: the bundle's URL folded onto the next
/// line (`url: >-`), the second platform's sha256 quoted and put before its URL, and the
/// version of the `k0supdate` quoted. Each is still one YAML value the configuration must find.
fn as_edited_by_hand(release: &Release) -> anyhow::Result<String> {
    let mut text = release.plan_yaml.clone();
    let mut edit = |from: String, to: String| -> anyhow::Result<()> {
        ensure!(text.matches(&from).count() == 1, "{from:?} once in\n{text}");
        text = text.replace(&from, &to);
        Ok(())
    };
    let bundle = &release.airgap.1.url;
    edit(format!("  url: {bundle}\n"), format!("  url: >-\n            {bundle}\n"))?;
    let (platform, entry) = release.k0s.iter().nth(1).context("a second platform")?;
    let sha256 = entry.sha256.as_deref().context("a sha256")?;
    edit(
        format!("  {platform}:\n          url: {}\n          sha256: {sha256}\n", entry.url),
        format!("  {platform}:\n          sha256: \"{sha256}\"\n          url: {}\n", entry.url),
    )?;
    let version = release_version(release)?;
    edit(
        format!("  - k0supdate:\n      version: {version}\n"),
        format!("  - k0supdate:\n      version: \"{version}\"\n"),
    )?;
    Ok(text)
}

/// The version of `release` (its `k0supdate`'s).
fn release_version(release: &Release) -> anyhow::Result<String> {
    let plan: Plan = serde_saphyr::from_str(&release.plan_yaml)?;
    plan.spec
        .commands
        .iter()
        .find_map(|c| c.k0supdate.as_ref().map(|u| u.version.clone()))
        .context("k0supdate")
}

/// The `index.yaml` dist wrote for `release`, served as it is, or without the platform
/// `leave_out`.
fn served_index(release: &Release, leave_out: Option<&str>) -> anyhow::Result<String> {
    let Some(leave_out) = leave_out else { return Ok(release.index.clone()) };
    let mut index: dist::Index = serde_saphyr::from_str(&release.index)?;
    index.download_urls.retain(|entry| format!("{}-{}", entry.os, entry.arch) != leave_out);
    Ok(serde_saphyr::to_string(&index)?)
}

/// The shipped configuration, pointed at `server`.
fn renovate_config(server: &str) -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/gitops/renovate.json5");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(text.contains(PLACEHOLDER_SERVER), "{} names no {PLACEHOLDER_SERVER}", path.display());
    Ok(text.replace(PLACEHOLDER_SERVER, server))
}

/// Both releases (the Plan in git at [`V1`], the server offering [`V2`]), the forge with the
/// repository, and the pull requests of one Renovate run with the shipped configuration;
/// `index` writes the server's index from the new release.
struct Scenario {
    old: Release,
    new: Release,
    forge: Forge,
    _work: tempfile::TempDir,
    _server: FileServer,
}

impl Scenario {
    async fn run(
        index: impl Fn(&Release) -> anyhow::Result<String>,
    ) -> anyhow::Result<(Self, RenovateRun)> {
        let work = tempfile::tempdir()?;
        let key = release_key(work.path())?;
        // Where the binaries would be published; Renovate reads only the index.
        let downloads = "https://downloads.example.org";
        let mut old = release(work.path(), V1, &key, downloads)?;
        old.plan_yaml = as_edited_by_hand(&old)?;
        let new = release(work.path(), V2, &key, downloads)?;
        let server = FileServer::start(index(&new)?.into_bytes()).await?;
        let forge = Forge::start().await?;
        let config = renovate_config(server.base_url())?;
        forge
            .create_repo(REPO, &[("renovate.json5", &config), (PLAN_PATH, &old.plan_yaml)])
            .await?;
        let run = forge.run_renovate(REPO, &[("RENOVATE_INTERNAL_HOST_ACCESS", "allow")]).await?;
        Ok((Self { old, new, forge, _work: work, _server: server }, run))
    }

    /// The one pull request Renovate opened, on `renovate/k0s`.
    async fn the_pull_request(&self, run: &RenovateRun) -> anyhow::Result<Pull> {
        let pulls = self.forge.pulls(REPO).await?;
        ensure!(
            pulls.len() == 1,
            "one pull request expected, Renovate opened {pulls:#?}\n{}",
            run.log
        );
        let pull = pulls.into_iter().next().context("a pull request")?;
        ensure!(pull.state == "open" && pull.head.branch == "renovate/k0s", "{pull:#?}");
        ensure!(pull.title.contains(V2), "the title names {V2}: {:?}", pull.title);
        Ok(pull)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renovate_moves_a_plans_version_urls_and_digests_together() -> anyhow::Result<()> {
    let (scenario, run) = Scenario::run(|new| served_index(new, None)).await?;
    let pull = scenario.the_pull_request(&run).await?;
    let Scenario { old, new, forge, .. } = &scenario;
    // Nothing for a reviewer to wave through: the body lists the two updates and no warning.
    ensure!(!pull.body.contains("Warning"), "warnings in the pull request:\n{}", pull.body);
    let mut branches = forge.branches(REPO).await?;
    branches.sort();
    ensure!(branches == ["main", "renovate/k0s"], "branches: {branches:?}");

    let bumped =
        forge.file(REPO, "renovate/k0s", PLAN_PATH).await?.context("no Plan on the branch")?;
    // Exactly the old text with the version and the digests changed: comments, targets and
    // the timestamp untouched, no line added or lost.
    let mut expected = old.plan_yaml.replace(V1, V2);
    for (platform, entry) in &old.k0s {
        let (Some(from), Some(to)) = (&entry.sha256, &new.k0s[platform].sha256) else {
            anyhow::bail!("{platform} has no sha256");
        };
        expected = expected.replace(from.as_str(), to);
    }
    let (Some(from), Some(to)) = (&old.airgap.1.sha256, &new.airgap.1.sha256) else {
        anyhow::bail!("the bundle has no sha256");
    };
    expected = expected.replace(from.as_str(), to);
    ensure!(bumped == expected, "Renovate wrote\n{bumped}\nexpected\n{expected}");
    // Which is the Plan of the new release: every URL, signature URL and digest is V2's.
    let bumped: Plan = serde_saphyr::from_str(&bumped)?;
    let wanted: Plan = serde_saphyr::from_str(&new.plan_yaml)?;
    ensure!(bumped.spec.commands == wanted.spec.commands, "{bumped:#?}");
    ensure!(bumped.spec.id == format!("k0s-{V2}"), "id {}", bumped.spec.id);
    let signed = bumped.spec.commands[1].k0supdate.as_ref().context("k0supdate")?;
    ensure!(
        signed
            .platforms
            .values()
            .any(|p| p.signature_url.as_deref().is_some_and(|u| u.contains(V2))),
        "a signature URL of {V2}: {signed:#?}"
    );
    // main is untouched until someone merges.
    let main = forge.file(REPO, "main", PLAN_PATH).await?;
    ensure!(main.as_deref() == Some(old.plan_yaml.as_str()), "main changed: {main:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_missing_from_the_index_keeps_its_entry_and_the_pull_request_warns()
-> anyhow::Result<()> {
    let left_out = platforms()[1].1;
    let (scenario, run) = Scenario::run(|new| served_index(new, Some(left_out))).await?;
    let pull = scenario.the_pull_request(&run).await?;
    // The reviewer is warned, and Renovate's log names the platform …
    ensure!(
        pull.body.contains("Some dependencies could not be looked up"),
        "the pull request does not warn:\n{}",
        pull.body
    );
    let failures =
        run.log.lines().find(|l| l.contains("Package lookup failures")).unwrap_or_default();
    ensure!(
        failures.contains(&format!("package {left_out}#")),
        "Renovate's lookup failures do not name {left_out}: {failures:?}"
    );
    // … whose entry keeps its old URL and sha256: its nodes download the old binary, whose
    // self-test reports the old version, and fail the update. Nothing the index did not
    // vouch for runs.
    let bumped = scenario.forge.file(REPO, "renovate/k0s", PLAN_PATH).await?.context("no Plan")?;
    let bumped: Plan = serde_saphyr::from_str(&bumped)?;
    let k0s = bumped.spec.commands[1].k0supdate.as_ref().context("k0supdate")?;
    ensure!(k0s.version == V2, "the version moves: {k0s:#?}");
    ensure!(k0s.platforms[left_out] == scenario.old.k0s[left_out], "{left_out}: {k0s:#?}");
    let other = platforms()[0].1;
    ensure!(k0s.platforms[other] == scenario.new.k0s[other], "{other} is updated: {k0s:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_the_pull_request_is_merged_renovate_has_nothing_more_to_do() -> anyhow::Result<()> {
    let (scenario, run) = Scenario::run(|new| served_index(new, None)).await?;
    let pull = scenario.the_pull_request(&run).await?;
    let bumped = scenario.forge.file(REPO, "renovate/k0s", PLAN_PATH).await?.context("no Plan")?;
    scenario.forge.merge(REPO, pull.number).await?;
    let main = scenario.forge.file(REPO, "main", PLAN_PATH).await?;
    ensure!(main.as_deref() == Some(bumped.as_str()), "main after the merge: {main:?}");

    // The next run reads the merged Plan at the version the index offers: no new pull
    // request, no new branch, nothing written.
    let again =
        scenario.forge.run_renovate(REPO, &[("RENOVATE_INTERNAL_HOST_ACCESS", "allow")]).await?;
    // (Renovate says once that it uses JavaScript's regular expressions: its optional native
    // RE2 module is not installed.)
    let warnings: Vec<String> = again
        .messages_at_least(40)
        .into_iter()
        .filter(|m| !m.starts_with("RE2 not usable"))
        .collect();
    ensure!(warnings.is_empty(), "the second run warns: {warnings:?}");
    ensure!(
        again.log.contains("\"depName\":\"k0s\"") && again.log.contains(V2),
        "the second run did not read the merged Plan's dependencies"
    );
    let pulls = scenario.forge.pulls(REPO).await?;
    ensure!(
        pulls.len() == 1 && pulls[0].merged && pulls[0].number == pull.number,
        "after the merge Renovate opened {pulls:#?}\n{}",
        again.log
    );
    let main_after = scenario.forge.file(REPO, "main", PLAN_PATH).await?;
    ensure!(main_after == main, "main changed again: {main_after:?}");
    ensure!(
        !scenario.forge.branches(REPO).await?.iter().any(|b| b != "main" && b != "renovate/k0s"),
        "no other branch"
    );
    Ok(())
}

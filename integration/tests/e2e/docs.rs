//! The docs' examples, run: every fenced `yaml` block of `docs/*.md` and `README.md` is
//! checked where it would be used, and the credential recipe of `docs/install.md` is run
//! against the test cluster's CA and its result starts a controller and a worker.
//!
//! - A Kubernetes object (`apiVersion` and `kind`) is applied with server-side apply,
//!   `dryRun=All` and strict field validation, against the real API server with the CRDs
//!   installed: a field the schema does not know, a missing required field or a bad value
//!   fails the test, as `kubectl apply` would refuse it.
//! - A Plan fragment (a piece of a Plan's spec, with `...` for what it leaves out) is merged
//!   into a complete Plan at the place its first key names and applied the same way.
//! - The other files the docs show are read by the code that reads them on a node or in the
//!   CLI (`check -f`'s file, the exec allow-list, the update server's index), or, for
//!   Prometheus' configuration, parsed as YAML.
//!
//! A new block of a shape this test does not know fails it: give it a place below.

use std::path::{Path, PathBuf};
use std::process::Command;

use autopilot_api::v1beta2::ControlNode;
use integration::wait_for;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::Value;

use crate::support::*;

/// A fenced block of the docs: where it is and its text.
struct Block {
    place: String,
    text: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fenced blocks of language `lang` in `docs/*.md` and `README.md`.
fn blocks(lang: &str) -> Vec<Block> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.push(repo().join("README.md"));
    let fence = format!("```{lang}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a doc");
        let name = file.file_name().expect("a name").to_string_lossy().into_owned();
        let mut lines = text.lines().enumerate();
        while let Some((number, line)) = lines.next() {
            if line.trim() != fence {
                continue;
            }
            let body: Vec<&str> =
                lines.by_ref().map(|(_, l)| l).take_while(|l| l.trim() != "```").collect();
            found.push(Block { place: format!("{name}:{}", number + 1), text: body.join("\n") });
        }
    }
    found
}

/// The block with elisions made concrete: `...` lines dropped, elided digests (`0f1e…`,
/// `9a1b...`) made 64 hex digits.
fn concrete(text: &str) -> String {
    text.lines()
        .filter(|line| line.trim() != "..." && line.trim() != "…")
        .map(fill_digest)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `line` with an elided hex digest (hex digits then `…` or `...`) padded to 64 digits.
fn fill_digest(line: &str) -> String {
    for marker in ["…", "..."] {
        let Some(at) = line.find(marker) else { continue };
        let head = &line[..at];
        let start = head.rfind(|c: char| !c.is_ascii_hexdigit()).map_or(0, |i| i + 1);
        let hex = &head[start..];
        if hex.len() >= 2 {
            return format!("{}{hex:0<64}{}", &head[..start], &line[at + marker.len()..]);
        }
    }
    line.to_owned()
}

/// A complete Plan that fragments are merged into.
fn base_plan() -> Value {
    serde_json::json!({
        "apiVersion": "autopilot.k0sproject.io/v1beta2",
        "kind": "Plan",
        "metadata": {"name": "autopilot"},
        "spec": {"id": "docs", "timestamp": "now", "commands": [base_command("k0supdate")]},
    })
}

/// A complete command of `kind`.
fn base_command(kind: &str) -> Value {
    let platforms = serde_json::json!({"linux-amd64": {
        "url": "https://files.example.com/k0s", "sha256": "0".repeat(64)}});
    let workers = serde_json::json!({"discovery": {"static": {"nodes": ["worker-0"]}}});
    match kind {
        "k0supdate" => serde_json::json!({"k0supdate": {
            "version": "v1.35.1+k0s.0", "platforms": platforms,
            "targets": {"workers": workers}}}),
        "airgapupdate" => serde_json::json!({"airgapupdate": {
            "version": "v1.35.1+k0s.0", "platforms": platforms, "workers": workers}}),
        _ => serde_json::json!({}),
    }
}

/// `patch` merged into `base`: objects key by key, lists item by item.
fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (Value::Array(base), Value::Array(patch)) => {
            for (i, value) in patch.into_iter().enumerate() {
                match base.get_mut(i) {
                    Some(slot) => merge(slot, value),
                    None => base.push(value),
                }
            }
        }
        (slot, value) => *slot = value,
    }
}

/// Commands of a fragment, each merged into a complete command of its own kind.
fn commands(items: Vec<Value>) -> Value {
    let merged = items.into_iter().map(|item| {
        let kind = item.as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_default();
        let mut command = base_command(&kind);
        merge(&mut command, item);
        command
    });
    Value::Array(merged.collect())
}

/// What a Plan fragment becomes: a complete Plan, or `None` if it is no Plan fragment.
fn plan_from_fragment(fragment: &Value) -> Option<Value> {
    let mut plan = base_plan();
    match fragment {
        Value::Object(map) if map.contains_key("platforms") => {
            merge(&mut plan["spec"]["commands"][0]["k0supdate"], fragment.clone());
        }
        Value::Object(map) if map.contains_key("workers") => {
            merge(&mut plan["spec"]["commands"][0]["k0supdate"]["targets"], fragment.clone());
        }
        Value::Object(map) if map.contains_key("commands") => {
            let items = map["commands"].as_array().cloned().unwrap_or_default();
            plan["spec"]["commands"] = commands(items);
        }
        Value::Array(items) if items.iter().all(|i| i.get("id").is_some()) => {
            plan["spec"]["commands"] = serde_json::json!([{"preflight": {"checks": items}}]);
        }
        Value::Array(items) => plan["spec"]["commands"] = commands(items.clone()),
        _ => return None,
    }
    Some(plan)
}

/// Server-side apply of `object` with `dryRun=All` and strict field validation.
async fn dry_run_apply(client: &kube::Client, object: &Value) -> anyhow::Result<()> {
    let (group, version) = match object["apiVersion"].as_str().unwrap_or_default().split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), object["apiVersion"].as_str().unwrap_or_default().to_owned()),
    };
    let kind = object["kind"].as_str().unwrap_or_default();
    let gvk = GroupVersionKind::gvk(&group, &version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => {
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default");
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let params = PatchParams::apply("docs-examples").dry_run().validation_strict();
    api.patch(name, &params, &Patch::Apply(object)).await?;
    Ok(())
}

/// What the block was checked as, or why it is wrong.
async fn check(client: &kube::Client, block: &Block) -> Result<String, String> {
    let text = concrete(&block.text);
    let first = text.lines().next().unwrap_or_default().trim();
    match first {
        "# index.yaml" => {
            autopilot_engine::updater::channel::ChannelAnswer::from_index_yaml(&text)
                .map_err(|e| e.to_string())?;
            return Ok("the update server's index, read as the updater reads it".to_owned());
        }
        "# checks.yaml" => {
            let value = autopilot_cli::file::yaml(&text)?;
            autopilot_cli::file::preflight_body(value)?;
            return Ok("a `check -f` file, read as the CLI reads it".to_owned());
        }
        "# prometheus.yml" => {
            let value: Value = serde_saphyr::from_str(&text).map_err(|e| e.to_string())?;
            if value["scrape_configs"][0]["static_configs"][0]["targets"].is_array() {
                return Ok("a Prometheus configuration, parsed".to_owned());
            }
            return Err("no scrape_configs[0].static_configs[0].targets".to_owned());
        }
        _ => {}
    }
    if text.trim_start().starts_with("entries:") {
        autopilot_signal::preflight::exec::AllowList::parse(&text)?;
        return Ok("an exec allow-list, read as a node reads it".to_owned());
    }
    let mut checked = Vec::new();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| e.to_string())?;
    for value in documents {
        if value.get("apiVersion").is_some() && value.get("kind").is_some() {
            dry_run_apply(client, &value).await.map_err(|e| format!("{e:#}"))?;
            checked.push(format!(
                "{} applied (dry run, strict)",
                value["kind"].as_str().unwrap_or("")
            ));
        } else {
            let plan = plan_from_fragment(&value)
                .ok_or_else(|| "a block of a shape this test does not know".to_owned())?;
            dry_run_apply(client, &plan).await.map_err(|e| format!("{e:#}\n{plan:#}"))?;
            checked.push("a Plan fragment, completed and applied (dry run, strict)".to_owned());
        }
    }
    Ok(checked.join("; "))
}

#[tokio::test]
async fn every_yaml_example_in_the_docs_applies_where_it_is_used() {
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("docs-examples")
            .controllers(1)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    for crd in [
        "plans.autopilot.k0sproject.io",
        "controlnodes.autopilot.k0sproject.io",
        "updateconfigs.autopilot.k0sproject.io",
    ] {
        install_crd(&client, crd).await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "k0s-autopilot"}})).unwrap();
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => panic!("creating the namespace: {err}"),
    }

    let blocks = blocks("yaml");
    let mut failures = Vec::new();
    for block in &blocks {
        match check(&client, block).await {
            Ok(what) => eprintln!("{}: {what}", block.place),
            Err(why) => failures.push(format!("{}: {why}", block.place)),
        }
    }
    assert!(failures.is_empty(), "doc examples that do not apply:\n{}", failures.join("\n"));
    assert!(blocks.len() >= 13, "as many yaml blocks as when this test was written");

    // The check can fail: a misspelt field, a fragment of no known shape.
    let typo = Block { place: "typo".into(), text: "workers:\n  limitz: {}\n".into() };
    let refused = check(&client, &typo).await.expect_err("a misspelt field is refused");
    assert!(refused.contains("limitz"), "{refused}");
    let odd = Block { place: "odd".into(), text: "someday: soon\n".into() };
    assert!(check(&client, &odd).await.is_err(), "an unknown shape is refused");
}

/// The `sh` block of docs/install.md that makes credentials, with its `NAME`, `SUBJECT` and
/// `SERVER` lines set for this node; everything else runs as written.
fn credential_recipe(name: &str, controller: bool, server: &str) -> String {
    let block = blocks("sh")
        .into_iter()
        .find(|b| b.place.starts_with("install.md") && b.text.starts_with("# credentials:"))
        .expect("the credential recipe in docs/install.md");
    block
        .text
        .lines()
        .map(|line| {
            if line.starts_with("NAME=") {
                format!("NAME={name}")
            } else if line.starts_with("SERVER=") {
                format!("SERVER={server}")
            } else if line.starts_with("SUBJECT=") && controller {
                let (_, controller_subject) =
                    line.split_once("# a controller: ").expect("the controller's subject");
                format!("SUBJECT={controller_subject}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the recipe for `name` in `dir` (which holds `ca.crt` and `ca.key`); returns the
/// kubeconfig it made.
pub(crate) fn make_credentials(dir: &Path, name: &str, controller: bool, server: &str) -> PathBuf {
    let script = credential_recipe(name, controller, server);
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "the recipe failed for {name}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(format!("{name}.kubeconfig"))
}

#[tokio::test]
async fn the_credential_recipe_makes_identities_that_run_a_controller_and_a_worker() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("docs-credentials")
            .controllers(1)
            .unstarted_controllers()
            .start()
            .await
            .unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(cluster.ca_cert_path(), work.path().join("ca.crt")).unwrap();
    std::fs::copy(cluster.ca_key_path(), work.path().join("ca.key")).unwrap();
    let server = cluster.api_url(0);

    let controller_kubeconfig = make_credentials(work.path(), "controller-0", true, &server);
    let worker_kubeconfig = make_credentials(work.path(), "worker-0", false, &server);

    let node = |name: &str, args: Vec<std::ffi::OsString>| cluster.k0s_node(name, args);
    let _controller = node(
        "controller-0",
        vec![
            "controller".into(),
            "--enable-autopilot".into(),
            "--kubeconfig".into(),
            controller_kubeconfig.into(),
            "--data-dir".into(),
            cluster.node_data_dir("controller-0").into(),
            "--node-name".into(),
            "controller-0".into(),
            "--api-address".into(),
            cluster.api_address(0).into(),
        ],
    )
    .spawn()
    .await
    .unwrap();
    let _worker = node(
        "worker-0",
        vec![
            "worker".into(),
            "--kubeconfig".into(),
            worker_kubeconfig.into(),
            "--data-dir".into(),
            cluster.node_data_dir("worker-0").into(),
            "--node-name".into(),
            "worker-0".into(),
            "--register-node".into(),
        ],
    )
    .spawn()
    .await
    .unwrap();

    let control_nodes: Api<ControlNode> = Api::all(client.clone());
    wait_for(STARTUP, "controller-0 to register its ControlNode", || async {
        let registered = control_nodes.get_opt("controller-0").await?;
        Ok(registered.filter(|c| c.status.as_ref().is_some_and(|s| s.k0s_version.is_some())))
    })
    .await
    .unwrap();
    wait_for(STARTUP, "a leader", || leader(&client)).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(STARTUP, "worker-0 to register its Node", || async {
        Ok(nodes.get_opt("worker-0").await?.filter(is_ready))
    })
    .await
    .unwrap();
}

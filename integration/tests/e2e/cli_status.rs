//! `k0s autopilot status` as an operator uses it, against a real control plane and a real
//! leader: `--watch` runs in a terminal (tmux, 160×50) while a plan updates one controller
//! and three workers (two at a time); the test reads the screen as a person would. Mid-update
//! it shows the plan running, two workers downloading and an ETA; at the end the plan
//! `Completed` with every node's final phase, without a keypress (the screen follows watch
//! events). Then `-o json` prints the same status as one JSON document.
//!
//! The responder plays the nodes: the workers stay in `Downloading` until the test has read
//! the mid-update screen.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use autopilot_api::v1beta2::PlanStateType;
use integration::responder::{Behaviour, Config, Release, Responder};
use integration::{k0s_binary, run_k0s, wait_for};

use crate::support::*;

const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];

/// How long the screen gets to show what the test waits for.
const SCREEN_TIMEOUT: Duration = Duration::from_secs(90);

/// A tmux server of this test only (its own socket in the cluster directory), killed on drop.
struct Terminal {
    socket: PathBuf,
}

impl Terminal {
    /// Starts `command` in a detached 160×50 session.
    fn start(dir: &Path, command: &[String]) -> anyhow::Result<Self> {
        let terminal = Self { socket: dir.join("tmux.sock") };
        let status = terminal
            .tmux()
            .args(["new-session", "-d", "-s", "status", "-x", "160", "-y", "50"])
            .args(command)
            .status()
            .context("running tmux (install it: apt-get install -y tmux)")?;
        anyhow::ensure!(status.success(), "tmux new-session failed ({status})");
        // Keep the pane if the command exits, so its last screen can still be read.
        let status = terminal
            .tmux()
            .args(["set-option", "-t", "status", "remain-on-exit", "on"])
            .status()?;
        anyhow::ensure!(status.success(), "tmux set-option failed ({status})");
        Ok(terminal)
    }

    fn tmux(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    /// What the pane shows now.
    fn screen(&self) -> anyhow::Result<String> {
        let output = self.tmux().args(["capture-pane", "-p", "-t", "status"]).output()?;
        anyhow::ensure!(output.status.success(), "tmux capture-pane failed ({})", output.status);
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Waits until the screen satisfies `check`, and returns it; on timeout the error shows
    /// the last screen.
    async fn wait_screen(
        &self,
        what: &str,
        check: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let result = wait_for(SCREEN_TIMEOUT, what, || async {
            let screen = self.screen()?;
            Ok(check(&screen).then_some(screen))
        })
        .await;
        result.with_context(|| format!("the last screen:\n{}", self.screen().unwrap_or_default()))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}

/// The table row of `node` on `screen`.
fn row<'a>(screen: &'a str, node: &str) -> Option<&'a str> {
    screen.lines().find(|line| line.split_whitespace().next() == Some(node))
}

/// Whether the row of `node` shows `state` and `phase` in its STATE and PHASE columns.
fn shows(screen: &str, node: &str, state: &str, phase: &str) -> bool {
    row(screen, node).is_some_and(|row| {
        let columns: Vec<&str> = row.split_whitespace().collect();
        columns.get(3) == Some(&state) && columns.get(4) == Some(&phase)
    })
}

#[tokio::test]
async fn status_watch_follows_an_update_on_screen_and_json_prints_the_same_status() {
    let Fleet { cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("cli-status").controllers(1).workers(&WORKERS).start().await.unwrap();
    let release = Release::new();
    let config = Config::new()
        .node("controller-0", Behaviour::Complete)
        .default_behaviour(Behaviour::CompleteAfter(release.clone()));
    let responder = Responder::start(client.clone(), config).await.unwrap();

    // The operator starts watching before there is a plan.
    let kubeconfig = cluster.admin_kubeconfig(0);
    let k0s = k0s_binary().unwrap();
    let command = [
        k0s.to_string_lossy().into_owned(),
        "autopilot".into(),
        "status".into(),
        "--watch".into(),
        "--kubeconfig".into(),
        kubeconfig.to_string_lossy().into_owned(),
    ];
    let terminal = Terminal::start(cluster.dir(), &command).unwrap();
    terminal
        .wait_screen("the screen to say there is no plan", |s| {
            s.contains("Plan autopilot: not found")
        })
        .await
        .unwrap();

    let update =
        k0s_update(Some(static_nodes(&["controller-0"], 1)), Some(static_nodes(&WORKERS, 2)));
    create_plan(&client, &plan("autopilot", "status", vec![k0s_command(update)])).await.unwrap();

    // Mid-update: the controller is done, two workers download, one waits; an ETA from the
    // controller's update.
    let mid = terminal
        .wait_screen("two workers downloading on screen", |s| {
            shows(s, "worker-0", "SignalSent", "Downloading")
                && shows(s, "worker-1", "SignalSent", "Downloading")
                && shows(s, "worker-2", "SignalPending", "-")
                && shows(s, "controller-0", "SignalCompleted", "Completed")
        })
        .await
        .unwrap();
    check_mid_update_screen(&mid);

    // The nodes go on; the screen follows without a keypress.
    release.release();
    let done = terminal
        .wait_screen("the plan Completed on screen with every node's final phase", |s| {
            s.contains("Plan autopilot: Completed")
                && ["controller-0", "worker-0", "worker-1", "worker-2"]
                    .iter()
                    .all(|node| shows(s, node, "SignalCompleted", "Completed"))
        })
        .await
        .unwrap();
    check_final_screen(&done);
    drop(terminal);
    drop(responder);

    // The same status as JSON, once.
    let json = status_json(&kubeconfig).await;
    check_status_json(&json);
}

/// The mid-update screen: the plan, its command, its progress with an ETA, its Events.
fn check_mid_update_screen(mid: &str) {
    eprintln!("the screen mid-update:\n{mid}");
    assert!(mid.contains("Plan autopilot: SchedulableWait   id status"), "{mid}");
    let heading = format!("Command 1/1: k0supdate to {FORCED_VERSION}: SchedulableWait");
    assert!(mid.contains(&heading), "{mid}");
    assert!(mid.contains("Progress: 1/4 node updates (25%), 2 in flight   ETA "), "{mid}");
    assert!(mid.contains("(mean ") && mid.contains("per node over 1 update(s))"), "{mid}");
    assert!(mid.contains("NodesSignalled"), "the plan's Events are shown:\n{mid}");
}

/// The final screen: every node updated, nothing blocking, no ETA.
fn check_final_screen(done: &str) {
    eprintln!("the screen at the end:\n{done}");
    assert!(done.contains("Progress: 4/4 node updates (100%)"), "{done}");
    assert!(done.contains("Blocking: nothing"), "{done}");
    assert!(!done.contains("ETA"), "no ETA once the plan ended:\n{done}");
    assert!(done.contains("NodesCompleted"), "{done}");
}

/// `k0s autopilot status -o json` once, parsed.
pub(crate) async fn status_json(kubeconfig: &Path) -> serde_json::Value {
    let args = [
        "autopilot".to_owned(),
        "status".into(),
        "-o".into(),
        "json".into(),
        "--kubeconfig".into(),
        kubeconfig.to_string_lossy().into_owned(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_k0s(&args).expect("k0s runs")
    })
    .await
    .expect("the k0s task");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "k0s failed ({}); stderr:\n{stderr}", output.status);
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

/// The JSON status of the completed plan: its identity, progress, nodes and Events.
fn check_status_json(json: &serde_json::Value) {
    assert_eq!(json["plan"], "autopilot");
    assert_eq!(json["found"], true);
    assert_eq!(json["state"], PlanStateType::Completed.as_str());
    assert_eq!(json["ended"], true);
    assert_eq!(json["planId"], "status");
    assert_eq!(json["command"], 0);
    assert_eq!(
        json["progress"],
        serde_json::json!({ "completed": 4, "failed": 0, "inFlight": 0, "planned": 4 })
    );
    assert_eq!(json["blocking"], serde_json::json!([]));
    let nodes = json["nodes"].as_array().expect("nodes");
    let summary: Vec<(&str, &str, &str, &str)> = nodes
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default(),
                n["role"].as_str().unwrap_or_default(),
                n["state"].as_str().unwrap_or_default(),
                n["phase"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("controller-0", "controller", "SignalCompleted", "Completed"),
            ("worker-0", "worker", "SignalCompleted", "Completed"),
            ("worker-1", "worker", "SignalCompleted", "Completed"),
            ("worker-2", "worker", "SignalCompleted", "Completed"),
        ]
    );
    let reasons: Vec<&str> = json["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"NodesCompleted"), "{reasons:?}");
}

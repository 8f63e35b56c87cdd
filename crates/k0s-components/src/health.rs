//! Whether the components `k0s` runs are healthy (DESIGN §16): a worker when containerd and
//! its kubelet run, the kubelet reports the carried version and the Node is Ready; a
//! controller when its components run and its own API server answers `/readyz` at the
//! carried version. [`judge`] decides from what the shell saw (pure); the reason of an
//! unhealthy verdict names the component and, for one that is not running, its last lines.

use std::path::Path;
use std::time::Duration;

use autopilot_api::text::truncate;
use autopilot_shell::health::Health;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Lines of a component's output an unhealthy verdict quotes.
const QUOTED_LINES: usize = 5;

/// The longest reason (it goes into logs, the trial's rollback reason and Events).
pub const MAX_REASON: usize = 1024;

/// One supervised component, as seen now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentSeen {
    /// Its name.
    pub name: &'static str,
    /// Whether it runs.
    pub running: bool,
    /// How its last run ended, if it did.
    pub last_exit: Option<String>,
    /// Its last lines of output, oldest first.
    pub last_lines: Vec<String>,
}

/// What a node's own check found (the Node, or the controller's own API server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The components it runs.
    pub components: Vec<ComponentSeen>,
    /// Whether the check passed (`Err`: why not, e.g. "the Node is not Ready").
    pub ready: Result<(), String>,
    /// What runs the version that matters (`kubelet`, `kube-apiserver`).
    pub versioned: &'static str,
    /// The version it reports, if it could be read.
    pub version: Option<String>,
    /// The version the binary carries for it (`None`: not carried, any version goes).
    pub carried: Option<String>,
}

/// Healthy, or why not (at most [`MAX_REASON`] bytes).
pub fn judge(seen: &Seen) -> Result<(), String> {
    for component in &seen.components {
        if !component.running {
            let exit = component.last_exit.as_deref().unwrap_or("not started");
            let start = component.last_lines.len().saturating_sub(QUOTED_LINES);
            let lines: Vec<String> =
                component.last_lines[start..].iter().map(|l| truncate(l, 200)).collect();
            let reason = if lines.is_empty() {
                format!("{} is not running ({exit})", component.name)
            } else {
                format!(
                    "{} is not running ({exit}); its last lines: {}",
                    component.name,
                    lines.join(" | ")
                )
            };
            return Err(truncate(&reason, MAX_REASON));
        }
    }
    seen.ready.clone().map_err(|why| truncate(&why, MAX_REASON))?;
    if let Some(carried) = &seen.carried {
        match &seen.version {
            Some(version) if version == carried => {}
            Some(version) => {
                return Err(truncate(
                    &format!("the {} reports {version}, not the carried {carried}", seen.versioned),
                    MAX_REASON,
                ));
            }
            None => return Err(format!("the {} reports no version yet", seen.versioned)),
        }
    }
    Ok(())
}

/// How often the health of running components is judged.
pub(crate) const HEALTH_EVERY: Duration = Duration::from_secs(2);

/// Running components whose health is judged (a worker's, a controller's): the shell around
/// [`judge`].
pub(crate) trait Judged: Sync {
    /// What they are, in log lines ("containerd and the kubelet").
    fn what(&self) -> &'static str;
    /// What the check sees now.
    fn seen(&self) -> impl std::future::Future<Output = Seen> + Send;
    /// Where the verdict goes (the post-update watch reads it).
    fn health(&self) -> &Health;
}

/// Waits (as long as it takes: a trial's deadline is the parent's) until `judged` is
/// healthy, saying why not in the log and in the trial's reason file in `data_dir`.
pub(crate) async fn until_healthy(judged: &impl Judged, data_dir: &Path) {
    let what = judged.what();
    let mut said = None::<String>;
    loop {
        match judge(&judged.seen().await) {
            Ok(()) => {
                autopilot_shell::health::write_trial_reason(data_dir, None);
                info!("{what} are healthy");
                judged.health().set(true);
                return;
            }
            Err(why) => {
                if said.as_ref() != Some(&why) {
                    info!(reason = %why, "waiting for {what} to be healthy");
                    autopilot_shell::health::write_trial_reason(data_dir, Some(&why));
                    said = Some(why);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Judges `judged` every [`HEALTH_EVERY`] into its [`Health`] (logging each change) until
/// `stop`; then it is not healthy any more.
pub(crate) async fn judge_until(judged: &impl Judged, stop: &CancellationToken) {
    let what = judged.what();
    let mut said = None::<Result<(), String>>;
    loop {
        let verdict = judge(&judged.seen().await);
        judged.health().set(verdict.is_ok());
        if said.as_ref() != Some(&verdict) {
            match &verdict {
                Ok(()) => info!("{what} are healthy"),
                Err(why) => warn!(reason = %why, "{what} are not healthy"),
            }
            said = Some(verdict);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(HEALTH_EVERY) => {}
        }
    }
    judged.health().set(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(name: &'static str) -> ComponentSeen {
        ComponentSeen { name, running: true, last_exit: None, last_lines: Vec::new() }
    }

    fn seen() -> Seen {
        Seen {
            components: vec![running("containerd"), running("kubelet")],
            ready: Ok(()),
            versioned: "kubelet",
            version: Some("v1.35.4".into()),
            carried: Some("v1.35.4".into()),
        }
    }

    #[test]
    fn running_components_a_ready_node_and_the_carried_version_are_healthy() {
        assert_eq!(judge(&seen()), Ok(()));
        let not_carried = Seen { carried: None, version: Some("v1.30.0".into()), ..seen() };
        assert_eq!(judge(&not_carried), Ok(()));
    }

    #[test]
    fn a_component_that_does_not_run_is_named_with_its_exit_and_last_lines() {
        let mut s = seen();
        s.components[1] = ComponentSeen {
            name: "kubelet",
            running: false,
            last_exit: Some("exit status: 1".into()),
            last_lines: (1..=8).map(|i| format!("line {i}")).collect(),
        };
        let why = judge(&s).unwrap_err();
        assert_eq!(
            why,
            "kubelet is not running (exit status: 1); its last lines: line 4 | line 5 | line 6 \
             | line 7 | line 8"
        );
    }

    #[test]
    fn another_version_or_a_node_not_ready_is_unhealthy() {
        let old = Seen { version: Some("v1.34.4".into()), ..seen() };
        assert_eq!(
            judge(&old).unwrap_err(),
            "the kubelet reports v1.34.4, not the carried v1.35.4"
        );
        let unknown = Seen { version: None, ..seen() };
        assert!(judge(&unknown).unwrap_err().contains("no version yet"));
        let not_ready = Seen { ready: Err("the Node worker-0 is not Ready".into()), ..seen() };
        assert_eq!(judge(&not_ready).unwrap_err(), "the Node worker-0 is not Ready");
    }

    #[test]
    fn a_reason_is_bounded() {
        let mut s = seen();
        s.ready = Err("x".repeat(10_000));
        assert!(judge(&s).unwrap_err().len() <= MAX_REASON + 4);
    }
}

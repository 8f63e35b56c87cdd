//! One lifecycle for every component of a node process (the controller, the updater, the
//! update agent, node registration and heartbeat, the status socket, the metrics endpoint).
//!
//! A component is declared with what it needs, then [`Component::start`]ed against the
//! process's [`Env`] (up to healthy: a start that needs the API server retries it within
//! the start-up timeout), which gives a [`Running`] component; [`Running::run`] runs it until
//! its stop token is cancelled, or until it ends on its own with an [`Exit`].
//!
//! [`Supervisor`] runs a declared list: it starts the components in order, runs them side
//! by side, and stops them in reverse order within one grace period, once the process is
//! asked to stop or any component has ended. The trial boot of a new binary starts the same
//! list ([`Supervisor::start`] with [`Purpose::Trial`]: only the components that prove a
//! start), proves itself and stops them, so a binary passes its trial only if the real
//! start works.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::retry;

/// What every component of a node process shares: the connection and this node's identity.
#[derive(Clone)]
pub struct Env {
    /// Client with this node's own credentials.
    pub client: kube::Client,
    /// The configuration `client` was made from (TLS and credentials reused for probes).
    pub config: kube::Config,
    /// The API server URL the client talks to (for error messages).
    pub server_url: String,
    /// This node's `Node` / `ControlNode` name.
    pub node_name: String,
    /// This node's data directory (created by the supervisor before anything starts).
    pub data_dir: PathBuf,
    /// The k0s version this binary was built as (e.g. `v1.35.0+k0s.0`).
    pub version: &'static str,
    /// The path of the running binary (resolved at start, before any update replaces it).
    pub binary: PathBuf,
    /// Why the components start (set by [`Supervisor::start`]): a trial boot's starts only
    /// read (DESIGN §14): nothing the live binary could not undo is written before the swap.
    pub purpose: Purpose,
}

/// How a component's run ended.
#[derive(Debug)]
pub enum Exit {
    /// It stopped: asked to, or it has nothing more to do.
    Stopped,
    /// A new binary is in place: the process stops and restarts into it.
    Restart,
    /// It failed; the process stops with this error.
    Failed(anyhow::Error),
}

/// Why components are started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The process runs them until it stops.
    Run,
    /// The trial boot of a new binary: only the components whose start proves the binary
    /// ([`Component::in_trial`]) start, and none runs.
    Trial,
}

/// A component, declared with what it needs and not started yet.
pub trait Component: Send {
    /// Its name in logs.
    fn name(&self) -> &'static str;

    /// Whether the trial boot of a new binary starts it (its start is part of proving that
    /// the binary works: registering with the API server); components that only serve or
    /// act (sockets, agents) do not.
    fn in_trial(&self) -> bool;

    /// Start it, up to healthy.
    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>>;
}

/// A started component.
pub trait Running: Send {
    /// Run it until `stop` is cancelled (then it returns [`Exit::Stopped`] promptly) or it
    /// ends on its own. A component whose failure should not stop the process (a socket that
    /// cannot be served) logs it and waits for `stop`.
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit>;

    /// Stop it without running it (the trial boot, once proven): a component that started
    /// processes of its own stops them here; by default there is nothing to stop.
    fn stop_unrun(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// A running component that only waits to be stopped (what a component that is turned off
/// runs).
pub struct Idle;

impl Running for Idle {
    fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
        Box::pin(async move {
            stop.cancelled().await;
            Exit::Stopped
        })
    }
}

/// A component that only proves the API server answers (within `startup_timeout` while it
/// does not; zero: for ever), for a node with nothing else to start against it. Runs idle.
pub struct ApiServer {
    /// How long to retry an unreachable API server.
    pub startup_timeout: Duration,
}

impl Component for ApiServer {
    fn name(&self) -> &'static str {
        "API server"
    }

    fn in_trial(&self) -> bool {
        true
    }

    fn start(self: Box<Self>, env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
        Box::pin(async move {
            let what = "reaching the API server";
            retry::until(
                retry::deadline_after(self.startup_timeout),
                retry::startup_delays(),
                what,
                || env.client.apiserver_version(),
            )
            .await
            .map_err(|gave_up| {
                gave_up.into_startup_error(&env.server_url, self.startup_timeout, what)
            })?;
            Ok(Box::new(Idle) as Box<dyn Running>)
        })
    }
}

/// How a supervised process ended.
#[derive(Debug)]
pub enum Ended {
    /// Stopped by a termination signal, or every component stopped.
    Stopped,
    /// A component put a new binary in place: restart into it.
    Restart,
    /// A component failed to start or to run.
    Failed(anyhow::Error),
}

/// Runs a declared list of components: starts them in order, stops them in reverse.
pub struct Supervisor {
    declared: Vec<Box<dyn Component>>,
    grace: Duration,
}

/// Components started by [`Supervisor::start`], in declared order.
pub struct Started {
    running: Vec<(&'static str, Box<dyn Running>)>,
    grace: Duration,
}

impl Supervisor {
    /// A supervisor that gives its components `grace` in all to stop.
    pub fn new(grace: Duration) -> Self {
        Self { declared: Vec::new(), grace }
    }

    /// Declare the next component (started after, stopped before, the ones declared earlier).
    #[must_use]
    pub fn with(mut self, component: impl Component + 'static) -> Self {
        self.declared.push(Box::new(component));
        self
    }

    /// The names of the declared components, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.declared.iter().map(|component| component.name()).collect()
    }

    /// Start the components (for `purpose`) in declared order, each up to healthy. A start
    /// that fails ends it (`<name> cannot start: <why>`): the components started so far are
    /// dropped (none has run). Returns
    /// `Ok(None)` when `terminated` is cancelled first.
    pub async fn start(
        self,
        env: &Env,
        purpose: Purpose,
        terminated: &CancellationToken,
    ) -> anyhow::Result<Option<Started>> {
        std::fs::create_dir_all(&env.data_dir).map_err(|err| {
            anyhow::Error::new(err).context(format!("creating data dir {}", env.data_dir.display()))
        })?;
        let env = &Env { purpose, ..env.clone() };
        let mut running = Vec::new();
        for component in self.declared {
            if purpose == Purpose::Trial && !component.in_trial() {
                continue;
            }
            let name = component.name();
            tokio::select! {
                started = component.start(env) => {
                    running.push((name, started.with_context(|| format!("{name} cannot start"))?));
                }
                () = terminated.cancelled() => {
                    info!(component = name, "stopping during startup");
                    return Ok(None);
                }
            }
        }
        Ok(Some(Started { running, grace: self.grace }))
    }

    /// Start every component and run them until `terminated` is cancelled or one of them
    /// ends; then stop the others in reverse order within the grace period.
    pub async fn run(self, env: &Env, terminated: CancellationToken) -> Ended {
        match self.start(env, Purpose::Run, &terminated).await {
            Ok(Some(started)) => started.run(terminated).await,
            Ok(None) => Ended::Stopped,
            Err(err) => Ended::Failed(err),
        }
    }
}

impl Started {
    /// Stops the started components without running them, in reverse declared order (the
    /// trial boot of a new binary, once it proved itself).
    pub async fn stop_unrun(self) {
        for (_, component) in self.running.into_iter().rev() {
            component.stop_unrun().await;
        }
    }

    /// Run the started components until `terminated` is cancelled or one of them ends, then
    /// stop the rest in reverse declared order. The grace period counts from the first stop;
    /// a component still running at its end is left behind (and logged).
    pub async fn run(self, terminated: CancellationToken) -> Ended {
        let Self { running, grace } = self;
        let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (index, (name, component)) in running.into_iter().enumerate() {
            let stop = CancellationToken::new();
            let ended_tx = ended_tx.clone();
            let run = component.run(stop.clone());
            let task = tokio::spawn(async move {
                let exit = run.await;
                let _ = ended_tx.send(index);
                exit
            });
            tasks.push((name, stop, task));
        }
        drop(ended_tx);
        tokio::select! {
            () = terminated.cancelled() => {}
            Some(index) = ended_rx.recv() => {
                info!(component = tasks[index].0, "a component ended; stopping the others");
            }
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut ended = Ended::Stopped;
        for (name, stop, mut task) in tasks.into_iter().rev() {
            stop.cancel();
            let exit = match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(exit)) => exit,
                Ok(Err(err)) => Exit::Failed(anyhow::anyhow!("{name} panicked: {err}")),
                Err(_) => {
                    warn!(component = name, ?grace, "did not stop in time, leaving it");
                    task.abort();
                    continue;
                }
            };
            ended = merge(ended, name, exit);
        }
        ended
    }
}

/// The process's end so far (`ended`) with the exit of component `name`: a failure wins
/// over a restart, a restart over a stop.
fn merge(ended: Ended, name: &str, exit: Exit) -> Ended {
    match (ended, exit) {
        (Ended::Failed(first), Exit::Failed(err)) => {
            warn!(component = name, error = %format!("{err:#}"), "also failed");
            Ended::Failed(first)
        }
        (Ended::Failed(first), Exit::Stopped | Exit::Restart) => Ended::Failed(first),
        (Ended::Stopped | Ended::Restart, Exit::Failed(err)) => {
            Ended::Failed(err.context(format!("{name} failed")))
        }
        (Ended::Restart, Exit::Stopped | Exit::Restart) | (Ended::Stopped, Exit::Restart) => {
            Ended::Restart
        }
        (Ended::Stopped, Exit::Stopped) => Ended::Stopped,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    type Log = Arc<Mutex<Vec<String>>>;

    /// A component that records its start and stop, and ends on its own with `ends` if set.
    struct Probe {
        name: &'static str,
        in_trial: bool,
        fails_to_start: bool,
        ends: Option<fn() -> Exit>,
        slow_stop: bool,
        log: Log,
    }

    fn probe(name: &'static str, log: &Log) -> Probe {
        Probe {
            name,
            in_trial: false,
            fails_to_start: false,
            ends: None,
            slow_stop: false,
            log: log.clone(),
        }
    }

    impl Component for Probe {
        fn name(&self) -> &'static str {
            self.name
        }
        fn in_trial(&self) -> bool {
            self.in_trial
        }
        fn start(self: Box<Self>, _env: &Env) -> BoxFuture<'_, anyhow::Result<Box<dyn Running>>> {
            Box::pin(async move {
                self.log.lock().unwrap().push(format!("start {}", self.name));
                if self.fails_to_start {
                    anyhow::bail!("refused");
                }
                Ok(self as Box<dyn Running>)
            })
        }
    }

    impl Running for Probe {
        fn run(self: Box<Self>, stop: CancellationToken) -> BoxFuture<'static, Exit> {
            Box::pin(async move {
                let exit = match self.ends {
                    Some(ends) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        ends()
                    }
                    None => {
                        stop.cancelled().await;
                        if self.slow_stop {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        Exit::Stopped
                    }
                };
                self.log.lock().unwrap().push(format!("stop {}", self.name));
                exit
            })
        }
    }

    fn env() -> Env {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().expect("a URL"));
        Env {
            client: kube::Client::try_from(config.clone()).expect("a client"),
            config,
            server_url: "https://127.0.0.1:6443".to_owned(),
            node_name: "n1".to_owned(),
            data_dir: std::env::temp_dir().join("autopilot-shell-lifecycle-test"),
            version: "v1.35.0+k0s.0",
            binary: PathBuf::from("/usr/local/bin/k0s"),
            purpose: Purpose::Run,
        }
    }

    fn entries(log: &Log) -> Vec<String> {
        log.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn components_start_in_order_and_stop_in_reverse_on_termination() {
        let log = Log::default();
        let supervisor = Supervisor::new(Duration::from_secs(10))
            .with(probe("status", &log))
            .with(probe("controller", &log))
            .with(probe("agent", &log));
        assert_eq!(supervisor.names(), ["status", "controller", "agent"]);
        let terminated = CancellationToken::new();
        let run = tokio::spawn({
            let terminated = terminated.clone();
            async move { supervisor.run(&env(), terminated).await }
        });
        while entries(&log).len() < 3 {
            tokio::task::yield_now().await;
        }
        terminated.cancel();
        let ended = run.await.expect("the supervisor runs");
        assert!(matches!(ended, Ended::Stopped), "{ended:?}");
        assert_eq!(
            entries(&log),
            [
                "start status",
                "start controller",
                "start agent",
                "stop agent",
                "stop controller",
                "stop status"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_component_asking_for_a_restart_stops_the_others_and_the_process_restarts() {
        let log = Log::default();
        let supervisor = Supervisor::new(Duration::from_secs(10))
            .with(probe("status", &log))
            .with(Probe { ends: Some(|| Exit::Restart), ..probe("agent", &log) })
            .with(probe("metrics", &log));
        let ended = supervisor.run(&env(), CancellationToken::new()).await;
        assert!(matches!(ended, Ended::Restart), "{ended:?}");
        assert_eq!(
            entries(&log)[3..],
            ["stop agent", "stop metrics", "stop status"],
            "{:?}",
            entries(&log)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_wins_and_a_failed_start_runs_nothing() {
        let log = Log::default();
        let supervisor = Supervisor::new(Duration::from_secs(10))
            .with(Probe {
                ends: Some(|| Exit::Failed(anyhow::anyhow!("lost"))),
                ..probe("controller", &log)
            })
            .with(Probe { ends: Some(|| Exit::Restart), ..probe("agent", &log) });
        let ended = supervisor.run(&env(), CancellationToken::new()).await;
        let Ended::Failed(err) = ended else { panic!("{ended:?}") };
        assert_eq!(format!("{err:#}"), "controller failed: lost");

        let log = Log::default();
        let supervisor = Supervisor::new(Duration::from_secs(10))
            .with(probe("status", &log))
            .with(Probe { fails_to_start: true, ..probe("controller", &log) })
            .with(probe("agent", &log));
        let ended = supervisor.run(&env(), CancellationToken::new()).await;
        let Ended::Failed(err) = ended else { panic!("{ended:?}") };
        assert_eq!(format!("{err:#}"), "controller cannot start: refused");
        assert_eq!(entries(&log), ["start status", "start controller"]);
    }

    #[tokio::test(start_paused = true)]
    async fn one_grace_period_bounds_the_whole_stop() {
        let log = Log::default();
        let supervisor = Supervisor::new(Duration::from_secs(10))
            .with(Probe { slow_stop: true, ..probe("status", &log) })
            .with(Probe { slow_stop: true, ..probe("agent", &log) });
        let terminated = CancellationToken::new();
        terminated.cancel();
        let started = supervisor
            .start(&env(), Purpose::Run, &CancellationToken::new())
            .await
            .expect("starts")
            .expect("not terminated");
        let began = tokio::time::Instant::now();
        let ended = started.run(terminated).await;
        assert!(matches!(ended, Ended::Stopped), "{ended:?}");
        assert_eq!(began.elapsed(), Duration::from_secs(10), "both waited within one grace");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trial_starts_only_the_components_that_prove_a_start() {
        let log = Log::default();
        let supervisor = Supervisor::new(Duration::from_secs(10))
            .with(probe("status", &log))
            .with(Probe { in_trial: true, ..probe("node", &log) })
            .with(Probe { in_trial: true, ..probe("controller", &log) })
            .with(probe("agent", &log));
        let started = supervisor
            .start(&env(), Purpose::Trial, &CancellationToken::new())
            .await
            .expect("starts")
            .expect("not terminated");
        assert_eq!(started.running.len(), 2);
        assert_eq!(entries(&log), ["start node", "start controller"]);
    }
}

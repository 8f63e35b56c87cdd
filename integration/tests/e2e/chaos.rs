//! Fault campaigns with real node agents: 3 controllers and 6 workers update back and forth
//! between v1 and v2 (one plan per round, `concurrent: 2` on the workers), and in each round
//! one process is SIGKILLed at a chosen point of the update and started again, like a
//! supervisor would. What must hold, from the signal recorder (every phase each node went
//! through, in etcd order) and the cluster afterwards:
//!
//! - every plan completes, within [`ROUND_BOUND`];
//! - no node is signalled twice within a round (one `created` per node and plan);
//! - never more than one controller, and never more than `concurrent` workers, in flight;
//! - nothing is left cordoned by autopilot, and every node's binary on disk runs and reports
//!   the round's version.
//!
//! `leader_kills` kills the leading controller (right after the plan is created, while a
//! controller updates, mid-drain, while a worker downloads, at uncordon), with the default
//! election timings: another controller must hold the lease within [`TAKEOVER_BOUND`] of
//! the kill, and each round prints that time and when the next signal was written;
//! `agent_kills` kills the node whose agent is in a chosen phase (downloading, applying the
//! update, between the swap and the restart, during the trial boot of the new binary,
//! uncordoning), controllers and workers in turn, with its whole process group (a trial
//! child included), as a supervisor stopping the unit would;
//! `control_plane_restarts` restarts every API server in turn (one round) and etcd (the
//! next) while nodes download, and prints the delay each outage added to its round.
//!
//! The default test run does [`SMOKE_KILLS`] kills each; `cargo xtask chaos leader --kills
//! 20` (and `chaos agent`) run the full campaigns through `K0S_CHAOS_KILLS`, printing the
//! kills survived and the worst delay a kill added to a round. `K0S_CHAOS_SEED` replays a
//! campaign's random jitter.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{Plan, PlanStateType};
use integration::signals::{ObjectKind, Seen, SignalRecorder};
use integration::{Cluster, K0sProcess, wait_for};
use rand::{RngExt as _, SeedableRng as _};

use crate::support::*;

const CONTROLLERS: [&str; 3] = ["controller-0", "controller-1", "controller-2"];
const WORKERS: [&str; 6] = ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5"];
const WORKER_CONCURRENCY: u32 = 2;

/// Kills per campaign in the default test run.
const SMOKE_KILLS: usize = 2;

/// How long one round (a plan over 9 nodes, with one kill) may take.
const ROUND_BOUND: Duration = Duration::from_secs(240);

/// Where in a round a process is killed.
#[derive(Clone, Copy, Debug)]
enum Point {
    /// Right after the plan is created (the leader is in NewPlan).
    PlanCreated,
    /// A node of `kind` reported `phase` (the first one to, in this round).
    Phase(ObjectKind, SignalPhase),
    /// A node of `kind` is booting its new binary on trial (its process has a child with
    /// the trial environment variable set).
    TrialBoot(ObjectKind),
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::PlanCreated => write!(f, "plan created"),
            Point::Phase(ObjectKind::ControlNode, phase) => write!(f, "a controller in {phase}"),
            Point::Phase(ObjectKind::Node, phase) => write!(f, "a worker in {phase}"),
            Point::TrialBoot(ObjectKind::ControlNode) => write!(f, "a controller's trial boot"),
            Point::TrialBoot(ObjectKind::Node) => write!(f, "a worker's trial boot"),
        }
    }
}

/// Whom a campaign kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victim {
    /// The leading controller.
    Leader,
    /// The node that reached the kill point.
    Agent,
    /// No process of ours: the control plane restarts under the plan (odd rounds: every API
    /// server in turn; even rounds: etcd).
    ControlPlane,
}

const LEADER_POINTS: [Point; 5] = [
    Point::PlanCreated,
    Point::Phase(ObjectKind::ControlNode, SignalPhase::Downloading),
    Point::Phase(ObjectKind::Node, SignalPhase::Cordoning),
    Point::Phase(ObjectKind::Node, SignalPhase::Downloading),
    Point::Phase(ObjectKind::Node, SignalPhase::Uncordoning),
];

const AGENT_POINTS: [Point; 8] = [
    Point::Phase(ObjectKind::Node, SignalPhase::Downloading),
    Point::TrialBoot(ObjectKind::ControlNode),
    Point::Phase(ObjectKind::ControlNode, SignalPhase::ApplyingUpdate),
    Point::TrialBoot(ObjectKind::Node),
    Point::Phase(ObjectKind::Node, SignalPhase::Restarting),
    Point::Phase(ObjectKind::ControlNode, SignalPhase::Downloading),
    Point::Phase(ObjectKind::Node, SignalPhase::ApplyingUpdate),
    Point::Phase(ObjectKind::Node, SignalPhase::Uncordoning),
];

#[tokio::test]
async fn leader_kills() {
    campaign("chaos-leader", Victim::Leader, &LEADER_POINTS).await;
}

#[tokio::test]
async fn agent_kills() {
    campaign("chaos-agent", Victim::Agent, &AGENT_POINTS).await;
}

/// Every API server restarted in turn, then etcd, each in the middle of a round.
#[tokio::test]
async fn control_plane_restarts() {
    campaign("chaos-control-plane", Victim::ControlPlane, &CONTROL_PLANE_POINTS).await;
}

const CONTROL_PLANE_POINTS: [Point; 2] = [
    Point::Phase(ObjectKind::Node, SignalPhase::Downloading),
    Point::Phase(ObjectKind::ControlNode, SignalPhase::Downloading),
];

/// The kills to make: `K0S_CHAOS_KILLS`, else [`SMOKE_KILLS`].
fn kills(victim: Victim) -> usize {
    let default = match victim {
        Victim::Leader | Victim::Agent => SMOKE_KILLS,
        // The API servers once, etcd once.
        Victim::ControlPlane => 2,
    };
    std::env::var("K0S_CHAOS_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The processes of the cluster, by node name.
struct Fleet {
    processes: BTreeMap<String, K0sProcess>,
}

impl Fleet {
    fn get_mut(&mut self, name: &str) -> &mut K0sProcess {
        self.processes.get_mut(name).unwrap_or_else(|| panic!("no process {name}"))
    }
}

async fn campaign(name: &str, victim: Victim, points: &[Point]) {
    let kills = kills(victim);
    let seed: u64 = std::env::var("K0S_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{name}: {kills} fault(s), seed {seed} (K0S_CHAOS_SEED replays the jitter)");
    let rng = rand::rngs::StdRng::seed_from_u64(seed);

    let (v1, v2) = payload_servers().await;
    let (cluster, client, fleet) = start_fleet(name, victim).await;
    let recorder = SignalRecorder::start(&client).await.expect("the signal recorder");
    let mut campaign = Campaign {
        recorder,
        fleet,
        client,
        cluster,
        name,
        victim,
        points,
        rng,
        stats: Stats::default(),
    };
    for round in 0..=kills {
        let payload = if round % 2 == 0 { &v2 } else { &v1 };
        campaign.round(round, payload).await;
    }
    campaign.report(kills);
}

/// A payload the rounds update to: its file server, its sha256 and its version.
type Payload = (integration::http::FileServer, String, &'static str);

/// The file servers of v1 (the k0s build) and v2.
async fn payload_servers() -> (Payload, Payload) {
    let v1_bytes = std::fs::read(integration::k0s_binary().expect("the k0s build")).expect("v1");
    let v1 = (
        integration::http::FileServer::start(v1_bytes.clone()).await.expect("the v1 file server"),
        sha256_hex(&v1_bytes),
        PLAIN_VERSION,
    );
    let (v2_bytes, v2_sha) = v2_build();
    let v2 = (
        integration::http::FileServer::start(v2_bytes).await.expect("the v2 file server"),
        v2_sha,
        V2,
    );
    (v1, v2)
}

/// The campaign's cluster with 3 controllers and 6 workers, each running its agent, and an
/// admin client.
async fn start_fleet(name: &str, victim: Victim) -> (Cluster, kube::Client, Fleet) {
    // The leader campaign runs the default election timings (DESIGN §7), so the take-over
    // times it reports are the ones an operator gets; the others fail over fast.
    let election: &[&str] = if victim == Victim::Leader { &[] } else { FAST_ELECTION };
    // `support::Fleet`, the started fleet; this module's `Fleet` holds its processes by name.
    let crate::support::Fleet { cluster, client, controllers, workers } = FleetBuilder::new(name)
        .controllers(3)
        .workers(&WORKERS)
        .agents(Agents::Real)
        .controller_args(election)
        .start()
        .await
        .expect("the fleet");
    let fleet = Fleet {
        processes: controllers
            .into_iter()
            .chain(workers)
            .map(|p| (p.node_name().to_owned(), p))
            .collect(),
    };
    (cluster, client, fleet)
}

/// What the rounds of a campaign measured.
#[derive(Default)]
struct Stats {
    /// Round 0 has no kill: the baseline a kill's delay is measured against.
    baseline: Duration,
    /// The most a fault added to a round over the baseline.
    worst_delay: Duration,
    /// The lease holders killed so far (a new holder is one not among them).
    killed_leaders: BTreeSet<String>,
    /// Leader campaign: the slowest take-over (kill → another holder of the lease) and the
    /// slowest kill → next signal written.
    worst_takeover: Duration,
    worst_next_signal: Duration,
}

/// What a round's fault did.
struct Fault {
    /// What was killed or restarted, and when.
    kill_note: String,
    /// When the leader was killed (wall clock, as signals are dated).
    leader_killed: Option<jiff::Timestamp>,
    /// When the control plane was whole again (control-plane campaign).
    back: Option<Instant>,
}

/// A running campaign: its cluster, processes and recorder, and what its rounds measured.
/// (Fields drop in order: the recorder and the processes before the cluster.)
struct Campaign<'a> {
    /// Every signal phase of every round, in etcd order.
    recorder: SignalRecorder,
    /// The k0s processes, by node.
    fleet: Fleet,
    /// An admin client.
    client: kube::Client,
    /// The control plane.
    cluster: Cluster,
    /// The campaign (and its cluster).
    name: &'a str,
    /// Whom it kills.
    victim: Victim,
    /// Where in a round, in turn.
    points: &'a [Point],
    /// The jitter after a kill point (`K0S_CHAOS_SEED` replays it).
    rng: rand::rngs::StdRng,
    /// What the rounds measured so far.
    stats: Stats,
}

impl Campaign<'_> {
    /// One round: a plan to `payload`'s version, a fault (after round 0), and the checks.
    async fn round(&mut self, round: usize, payload: &Payload) {
        let (server, sha, version) = (&payload.0, &payload.1, payload.2);
        let update = update_to(
            version,
            server.base_url(),
            sha,
            Some(static_nodes(&CONTROLLERS, 1)),
            Some(static_nodes(&WORKERS, WORKER_CONCURRENCY)),
        );
        let plan_id = format!("{}-{round}", self.name);
        if round > 0 {
            delete_plan(&self.client).await;
        }
        let started = Instant::now();
        create_plan(&self.client, &plan("autopilot", &plan_id, vec![k0s_command(update)]))
            .await
            .expect("creating the round's plan");

        let mut fault = Fault {
            kill_note: String::from("no kill (baseline)"),
            leader_killed: None,
            back: None,
        };
        if round > 0 {
            self.fault(round, &plan_id, started, &mut fault).await;
        }
        self.finish_round(round, &plan_id, version, started, fault).await;
    }

    /// The round's fault at its point: the control plane restarted, or the victim killed and
    /// started again.
    async fn fault(&mut self, round: usize, plan_id: &str, started: Instant, fault: &mut Fault) {
        let point = self.points[(round - 1) % self.points.len()];
        let reached = reach(&self.recorder, &self.fleet, plan_id, point).await;
        // A random moment shortly after the point (a trial boot is short: at once).
        if !matches!(point, Point::TrialBoot(_)) {
            tokio::time::sleep(Duration::from_millis(self.rng.random_range(0..200))).await;
        }
        if self.victim == Victim::ControlPlane {
            self.restart_control_plane(round, point, started, fault).await;
        }
        let killed = match self.victim {
            Victim::ControlPlane => None,
            Victim::Leader => {
                let identity = current_leader(&self.client, &self.stats.killed_leaders).await;
                self.stats.killed_leaders.insert(identity.clone());
                identity.split_once('_').map(|(node, _)| node.to_owned())
            }
            Victim::Agent => match reached.clone() {
                Some(node) => Some(node),
                None => {
                    // The round ended before the point: kill a node anyway, after it.
                    Some(WORKERS[round % WORKERS.len()].to_owned())
                }
            },
        };
        if let Some(killed) = killed {
            self.kill(round, &killed, fault).await;
            let missed = !matches!(point, Point::PlanCreated) && reached.is_none();
            fault.kill_note = format!(
                "killed {killed} at {point}{} ({} ms into the round)",
                if missed { " (the round ended before it)" } else { "" },
                started.elapsed().as_millis()
            );
        }
    }

    /// Restarts every API server in turn (odd rounds) or etcd (even rounds).
    async fn restart_control_plane(
        &self,
        round: usize,
        point: Point,
        started: Instant,
        fault: &mut Fault,
    ) {
        let what = if round % 2 == 1 { "every API server in turn" } else { "etcd" };
        let outage = Instant::now();
        if round % 2 == 1 {
            // Crashed and started again (a graceful stop only adds the API server's
            // own shutdown delay to the round).
            for i in 0..CONTROLLERS.len() {
                self.cluster.kill_apiserver(i).await.expect("killing an API server");
                self.cluster.start_apiserver(i).await.expect("starting an API server");
            }
        } else {
            self.cluster.restart_etcd().await.expect("restarting etcd");
        }
        fault.back = Some(Instant::now());
        fault.kill_note = format!(
            "restarted {what} at {point} ({} ms into the round, restarts took {} ms)",
            outage.duration_since(started).as_millis(),
            outage.elapsed().as_millis()
        );
    }

    /// Kills `killed`'s process and starts it again; for the leader, waits for (and bounds)
    /// the take-over.
    async fn kill(&mut self, round: usize, killed: &str, fault: &mut Fault) {
        let name = self.name;
        let process = self.fleet.get_mut(killed);
        let killed_at = Instant::now();
        process.kill().expect("killing the victim");
        process.wait_exit(Duration::from_secs(10)).await.expect("the victim exits");
        process.restart().await.expect("restarting the victim");
        if self.victim == Victim::Leader {
            fault.leader_killed = Some(jiff::Timestamp::now() - killed_at.elapsed());
            let next = current_leader(&self.client, &self.stats.killed_leaders).await;
            let takeover = killed_at.elapsed();
            eprintln!(
                "{name} round {round}: {next} took the lease {:.1} s after the kill",
                takeover.as_secs_f64()
            );
            assert!(
                takeover <= TAKEOVER_BOUND,
                "round {round}: the lease moved {takeover:?} after the leader was killed \
                 (promised within {TAKEOVER_BOUND:?})"
            );
            self.stats.worst_takeover = self.stats.worst_takeover.max(takeover);
        }
    }

    /// Waits for the round's plan to complete and every node to run `version`, checks the
    /// round, and prints its figures.
    async fn finish_round(
        &mut self,
        round: usize,
        plan_id: &str,
        version: &str,
        started: Instant,
        fault: Fault,
    ) {
        let (name, client) = (self.name, &self.client);
        let Fault { kill_note, leader_killed, back } = fault;
        let done = wait_plan(client, "autopilot", ROUND_BOUND, "the round to complete", |p| {
            state(p) == PlanStateType::Completed
        })
        .await
        .unwrap_or_else(|err| panic!("round {round} ({kill_note}): {err:#}"));
        let took = started.elapsed();
        let stats = &mut self.stats;
        if round == 0 {
            stats.baseline = took;
        } else {
            stats.worst_delay = stats.worst_delay.max(took.saturating_sub(stats.baseline));
        }
        check_round(&self.recorder, plan_id, &done, round, &kill_note);
        if let Some(killed) = leader_killed {
            match next_signal_after(&self.recorder, plan_id, killed) {
                Some(after) => {
                    eprintln!(
                        "{name} round {round}: the next signal was written {:.1} s after the kill",
                        after.as_secs_f64()
                    );
                    stats.worst_next_signal = stats.worst_next_signal.max(after);
                }
                None => eprintln!(
                    "{name} round {round}: no signal after the kill (every node had been signalled)"
                ),
            }
        }
        for (node, process) in &self.fleet.processes {
            wait_for(Duration::from_secs(60), &format!("{node} to run {version}"), || async {
                Ok((process.is_running() && version_on_disk(process) == version).then_some(()))
            })
            .await
            .unwrap_or_else(|err| panic!("round {round} ({kill_note}): {err:#}"));
        }
        let mut added = if round == 0 {
            String::new()
        } else {
            format!(
                " (+{:.1} s over the baseline)",
                took.saturating_sub(stats.baseline).as_secs_f64()
            )
        };
        if let Some(back) = back {
            added.push_str(&format!(
                "; completed {:.1} s after the control plane was back",
                back.elapsed().as_secs_f64()
            ));
        }
        eprintln!(
            "{name} round {round} to {version}: Completed in {:.1} s{added}; {kill_note}",
            took.as_secs_f64()
        );
    }

    /// Prints what the campaign survived and its worst figures.
    fn report(&self, kills: usize) {
        let (name, stats) = (self.name, &self.stats);
        eprintln!(
            "{name}: {kills} fault(s) survived; baseline round {:.1} s; worst delay a fault added {:.1} s",
            stats.baseline.as_secs_f64(),
            stats.worst_delay.as_secs_f64()
        );
        if self.victim == Victim::Leader {
            eprintln!(
                "{name}: slowest take-over {:.1} s after a kill; slowest next signal {:.1} s after a kill",
                stats.worst_takeover.as_secs_f64(),
                stats.worst_next_signal.as_secs_f64()
            );
        }
    }
}

/// How soon after the leader is SIGKILLed another controller holds the lease, at the default
/// election timings (DESIGN §7: replaced within about 20 s).
const TAKEOVER_BOUND: Duration = Duration::from_secs(20);

/// How long after `killed` the first signal of the round written after it was created (the
/// signal's `created`, stamped by the leader that wrote it).
fn next_signal_after(
    recorder: &SignalRecorder,
    plan_id: &str,
    killed: jiff::Timestamp,
) -> Option<Duration> {
    recorder
        .history()
        .iter()
        .filter(|seen| seen.plan_id == plan_id)
        .filter_map(|seen| seen.created.parse::<jiff::Timestamp>().ok())
        .filter(|created| *created > killed)
        .min()
        .and_then(|first| Duration::try_from(first.duration_since(killed)).ok())
}

/// Waits until a node of this round reaches `point`; returns that node (`None` when the
/// round ended first, or for [`Point::PlanCreated`]).
async fn reach(
    recorder: &SignalRecorder,
    fleet: &Fleet,
    plan_id: &str,
    point: Point,
) -> Option<String> {
    let (kind, phase) = match point {
        Point::PlanCreated => return None,
        Point::Phase(kind, phase) => (kind, phase),
        // The trial runs while the node reports Restarting.
        Point::TrialBoot(kind) => (kind, SignalPhase::Restarting),
    };
    let deadline = Instant::now() + ROUND_BOUND;
    while Instant::now() < deadline {
        let history = recorder.history();
        let round: Vec<&Seen> = history.iter().filter(|s| s.plan_id == plan_id).collect();
        let mut at_phase = round.iter().filter(|s| s.object.kind == kind && s.phase == Some(phase));
        match point {
            Point::TrialBoot(_) => {
                let on_trial = at_phase.find(|seen| {
                    let process = fleet.processes.get(&seen.object.name);
                    process.is_some_and(|p| trial_child_of(p.pid()).is_some())
                });
                if let Some(seen) = on_trial {
                    return Some(seen.object.name.clone());
                }
            }
            Point::PlanCreated | Point::Phase(..) => {
                if let Some(seen) = at_phase.next() {
                    return Some(seen.object.name.clone());
                }
            }
        }
        let nodes: BTreeSet<&str> = round.iter().map(|s| s.object.name.as_str()).collect();
        let completed = round.iter().filter(|s| s.phase == Some(SignalPhase::Completed)).count();
        if nodes.len() == CONTROLLERS.len() + WORKERS.len() && completed == nodes.len() {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// The pid of a child of `parent` running with the trial environment variable set (the new
/// binary on trial), from `/proc`.
fn trial_child_of(parent: u32) -> Option<u32> {
    let marker = format!("{}=", autopilot_signal::trial::TRIAL_ENV);
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
        if ppid != parent {
            return None;
        }
        let environ = std::fs::read(entry.path().join("environ")).ok()?;
        environ.split(|&b| b == 0).any(|var| var.starts_with(marker.as_bytes())).then_some(pid)
    })
}

/// The identity holding the leader Lease, once it is none of the `killed` ones.
async fn current_leader(client: &kube::Client, killed: &BTreeSet<String>) -> String {
    wait_for(Duration::from_secs(60), "a leader that was not killed", || async {
        Ok(leader_identity(client).await?.filter(|holder| !killed.contains(holder)))
    })
    .await
    .expect("a leader")
}

/// The invariants of one round, from the recorder's history.
fn check_round(recorder: &SignalRecorder, plan_id: &str, done: &Plan, round: usize, note: &str) {
    let history: Vec<Seen> =
        recorder.history().into_iter().filter(|s| s.plan_id == plan_id).collect();
    let context = || {
        format!(
            "round {round} ({note}):\n{}\nplan status:\n{}",
            history
                .iter()
                .map(|s| format!(
                    "{} {:?} created {} @{}",
                    s.object, s.phase, s.created, s.revision
                ))
                .collect::<Vec<_>>()
                .join("\n"),
            status_yaml(done)
        )
    };
    // Signalled once: one `created` per node.
    let mut created: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for seen in &history {
        created.entry(seen.object.name.clone()).or_default().insert(seen.created.as_str());
    }
    let twice: Vec<&String> = created.iter().filter(|(_, c)| c.len() > 1).map(|(n, _)| n).collect();
    assert!(twice.is_empty(), "signalled twice: {twice:?}\n{}", context());
    assert_eq!(created.len(), 9, "every node signalled\n{}", context());
    // In flight: from the first sight of its signal to Completed.
    let mut in_flight: BTreeMap<ObjectKind, BTreeSet<String>> = BTreeMap::new();
    for seen in &history {
        let flying = in_flight.entry(seen.object.kind).or_default();
        if seen.phase == Some(SignalPhase::Completed) {
            flying.remove(&seen.object.name);
        } else {
            flying.insert(seen.object.name.clone());
        }
        let controllers = in_flight.get(&ObjectKind::ControlNode).map_or(0, BTreeSet::len);
        let workers = in_flight.get(&ObjectKind::Node).map_or(0, BTreeSet::len);
        assert!(controllers <= 1, "{controllers} controllers in flight\n{}", context());
        assert!(
            workers <= WORKER_CONCURRENCY as usize,
            "{workers} workers in flight (limit {WORKER_CONCURRENCY})\n{}",
            context()
        );
        assert!(
            controllers == 0 || workers == 0,
            "a worker in flight while a controller updates\n{}",
            context()
        );
    }
}

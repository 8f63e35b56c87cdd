//! Drives a signal through the node agent's phase machine on a real [`LinuxHost`], as the
//! agent does, with the leader's part done at once and a passed trial at the restart.
//! Shared by the integration tests that run whole signals on a temp dir.

use std::path::Path;

use autopilot_api::signal::{SignalData, SignalPhase, SignalStatus};
use autopilot_engine::agent::{HostAction, OnFailure, Step, next};
use autopilot_engine::trial::Verdict;
use autopilot_signal::host::{Host as _, LinuxHost, SignalKey, SignatureSource, perform};
use autopilot_signal::trial::{Outcome, conclude};

/// Where a driven signal ended.
pub struct Driven {
    /// The signal, with the last status written.
    pub data: SignalData,
    /// Every phase written, in order.
    pub history: Vec<SignalPhase>,
    /// The version the last process runs.
    pub running: String,
    /// How many processes ran it (one more per restart).
    pub processes: u32,
    /// The host as the last process sees it.
    pub host: LinuxHost,
}

/// Runs `data` on `host` until the phase machine is done (at most 20 phases written).
pub async fn run_to_end(host: &LinuxHost, mut data: SignalData) -> Driven {
    let mut host = host.clone();
    let mut running = version_of(host.live_path());
    let mut history = Vec::new();
    let mut processes = 1;
    while history.len() < 20 {
        let key = SignalKey::of(&data);
        let update = data.command.update().expect("valid");
        let observed = host.observe(&key, update).await.expect("observe");
        // The leader recorded the drain (no kubelet here: it only advances the phase).
        let facts = observed.facts(update, &running, false, true);
        let write = match next(data.phase(), &facts) {
            Step::Report { phase, reason } => Some((phase, reason)),
            Step::Run { action, on_success, on_failure } => {
                match perform(&host, &action, &key, &SignatureSource::default()).await {
                    Ok(()) if action == HostAction::Restart => {
                        // What the restart does after the new binary passed its trial boot:
                        // swap it in, record the pass, re-exec as a new instance.
                        let outcome =
                            conclude(&host, &key, Verdict::Pass, &running, None).expect("conclude");
                        assert_eq!(outcome, Outcome::Passed);
                        processes += 1;
                        host = host.clone().with_instance(format!("process-{processes}"));
                        running = version_of(host.live_path());
                        None
                    }
                    Ok(()) if data.phase() == Some(on_success) => None,
                    Ok(()) => Some((on_success, None)),
                    Err(e) => match on_failure {
                        OnFailure::Report(phase) => Some((phase, Some(e.reason()))),
                        OnFailure::Retry => panic!("{}", e.reason()),
                    },
                }
            }
            Step::Wait(_) => match data.phase() {
                Some(SignalPhase::Cordoning) => Some((SignalPhase::ApplyingUpdate, None)),
                Some(SignalPhase::Uncordoning) => Some((SignalPhase::Completed, None)),
                other => panic!("waiting in {other:?}"),
            },
            Step::Done => break,
        };
        if let Some((phase, reason)) = write {
            let mut status = SignalStatus::new(phase, jiff::Timestamp::UNIX_EPOCH);
            status.reason = reason;
            data.status = Some(status);
            history.push(phase);
        }
    }
    Driven { data, history, running, processes, host }
}

/// The version a fake binary (a script whose second line is `echo <version>`) reports.
pub fn version_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("live binary");
    text.lines().nth(1).and_then(|l| l.strip_prefix("echo ")).unwrap_or("corrupt").to_string()
}
